//! `zcio bench c`: a channel's throughput from C (zcio's C interface, `libzcio_c`) against the
//! Rust API's doing the same job; and its part of the report's Genie section (`genie-c`).
//!
//! # The job
//!
//! Two processes meet by a name; the sender sends messages of one size under emulated copy,
//! each from a buffer of its own (what `zcio_alloc` and [`zcio_genie::AppBuffer::for_message`]
//! make: page-aligned, 2 MiB pages from 2 MiB), the receiver receives each into a buffer of its
//! own, times the stream and checks every byte of every message outside its clock. The C side
//! is `crates/zcio-c/c/bench.c` (its comment has the protocol: batches of a ring of buffers,
//! 256 MiB at most, a one-byte go-ahead between batches), built into this executable with
//! `common.h` and the header `zcio.h`, written into a temporary directory and compiled there
//! with `cc -O2` against the `libzcio_c.so` this build made (beside the executable, or in its
//! `deps/`). The Rust side is this executable's hidden `zcio bench c --peer receiver|sender`
//! ([`peer`]), the same protocol through the Rust channel, with the waits the C interface sets
//! (interruptible, the call's timeout) set before each call as the C interface sets them.
//!
//! Each run is a fresh pair of processes, the receiver started first; the receiver pinned to
//! the second CPU this process may use, the sender to the first, for both sides alike (each
//! process inherits the CPU of the thread that starts it). Rounds interleave the two sides,
//! which goes first alternating from size to size and round to round. Where `cc` cannot be run
//! or the library is not beside the executable, the section says so and has no rows.

pub mod peer;
pub mod report;

use crate::lab::genie::channel::{Pinned, cpus, unique_name};
use crate::lab::genie::measure::Progress;
use crate::report::fit::{median, spread};
use crate::report::preset::Preset;
use crate::transfer::Res;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The C program, as built into this executable.
pub const BENCH_C: &str = include_str!("../../../../../zcio-c/c/bench.c");
/// What the C examples share (bench.c includes it).
pub const COMMON_H: &str = include_str!("../../../../../zcio-c/c/common.h");
/// The C interface's header, as checked in (its test fails where cbindgen makes another).
pub const HEADER: &str = include_str!("../../../../../zcio-c/include/zcio.h");

/// The two sides: the C program, and this executable through the Rust API.
pub const CONTENDERS: [&str; 2] = ["c", "rust"];

/// The sizes `zcio bench c` measures by default (and the report's quick preset).
pub const DEFAULT_SIZES: [usize; 3] = [64 << 10, 1 << 20, 64 << 20];

/// The target holds from this size up.
pub const TARGET_FROM: usize = 64 << 10;

/// The target: C's throughput within this many percent of the Rust API's (C at least
/// `100 - TARGET_PCT` % of it).
pub const TARGET_PCT: f64 = 5.0;

/// Bytes a run moves by default.
pub const DEFAULT_VOLUME: usize = 256 << 20;

/// Messages a run sends at least.
pub const MIN_MESSAGES: usize = 16;

/// How long a pair of processes may take before it is killed and its run failed.
const PATIENCE: Duration = Duration::from_secs(120);

/// Arguments of `zcio bench c`.
#[derive(clap::Args, Debug, Clone)]
pub struct CArgs {
    /// Message sizes in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_SIZES)]
    pub bytes: Vec<usize>,
    /// Rounds (each a fresh pair of processes per side, the sides interleaved).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Bytes a run moves (at least 16 messages).
    #[arg(long, default_value_t = DEFAULT_VOLUME)]
    pub volume: usize,
    /// Print JSON (`{"rows": [...], ...}`) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Run one side (`receiver` or `sender`) of the Rust side's run ([`peer`]): `--bytes` its
    /// message size, `--volume` its bytes in all.
    #[arg(long, hide = true)]
    pub peer: Option<String>,
    /// The name the receiver listens on (with `--peer`).
    #[arg(long, hide = true)]
    pub peer_name: Option<String>,
}

/// What a bench (or the report) measures.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "CPlan")]
pub struct Plan {
    /// Message sizes (bytes).
    pub sizes: Vec<usize>,
    /// Rounds.
    pub rounds: usize,
    /// Bytes a run moves (at least [`MIN_MESSAGES`] messages).
    pub volume: usize,
}

impl Plan {
    /// The report's plan at `preset`: 64 KiB, 1 MiB and 64 MiB, three rounds of 256 MiB (more
    /// sizes, five rounds of 1 GiB in the full preset; 64 KiB, one round of 16 MiB in the
    /// smoke preset).
    pub fn of(preset: Preset) -> Plan {
        match preset {
            Preset::Smoke => Plan {
                sizes: vec![64 << 10],
                rounds: 1,
                volume: 16 << 20,
            },
            Preset::Quick => Plan {
                sizes: DEFAULT_SIZES.to_vec(),
                rounds: 3,
                volume: DEFAULT_VOLUME,
            },
            Preset::Full => Plan {
                sizes: vec![64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20],
                rounds: 5,
                volume: 1 << 30,
            },
        }
    }

    /// The plan of `zcio bench c`'s arguments, or why there is none.
    pub fn of_args(a: &CArgs) -> Res<Plan> {
        if a.rounds == 0 {
            return Err("invalid argument `--rounds`: 0: at least one round".into());
        }
        if a.bytes.is_empty() {
            return Err("invalid argument `--bytes`: none: at least one size".into());
        }
        if let Some(b) = a.bytes.iter().find(|b| **b == 0 || **b > 1 << 30) {
            return Err(format!(
                "invalid argument `--bytes {b}`: from 1 byte to 1 GiB (1073741824)"
            )
            .into());
        }
        if a.volume == 0 || a.volume > 16 << 30 {
            return Err(format!(
                "invalid argument `--volume {}`: from 1 byte to 16 GiB",
                a.volume
            )
            .into());
        }
        let mut sizes = a.bytes.clone();
        sizes.dedup();
        Ok(Plan {
            sizes,
            rounds: a.rounds,
            volume: a.volume,
        })
    }

    /// Messages a run of `size` sends: the volume's worth, [`MIN_MESSAGES`] at least.
    pub fn messages(&self, size: usize) -> usize {
        self.volume.div_ceil(size).max(MIN_MESSAGES)
    }

    /// Progress units: one per run.
    pub fn units(&self) -> u64 {
        (self.sizes.len() * CONTENDERS.len() * self.rounds) as u64
    }
}

/// One side at one size, medians over rounds.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "CRow")]
pub struct Row {
    /// `c` (bench.c through `libzcio_c`) or `rust` (the same through the Rust API).
    pub contender: String,
    /// Message size.
    pub bytes: usize,
    /// Messages per run.
    pub messages: usize,
    /// Median throughput (MiB/s, the receiver's: its batches' messages after their first over
    /// the batches' clocked times).
    pub mib_s: Option<f64>,
    /// Lowest and highest round.
    pub mib_s_spread: Option<[f64; 2]>,
    /// Each round's throughput, in the order run.
    pub samples_mib_s: Vec<f64>,
    /// Every round ran, and its receiver received and checked every byte of every message.
    pub verified: bool,
    /// Rounds that ran.
    pub rounds: usize,
    /// Why a round failed, if one did.
    pub error: Option<String>,
}

/// C's median throughput over Rust's at one size.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CRatio {
    /// Message size.
    pub bytes: usize,
    /// C's median over Rust's.
    pub c_over_rust: f64,
    /// Whether C is within the target ([`TARGET_PCT`] % below Rust's or better), from
    /// [`TARGET_FROM`] up (`None` below).
    pub target_met: Option<bool>,
    /// Whether the two sides' spreads (lowest–highest round) overlap.
    pub spreads_overlap: bool,
}

/// What `zcio bench c` measured: its JSON, and the report's `genie.results.c`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CSection {
    /// What was run.
    pub plan: Plan,
    /// One row per side and size.
    pub rows: Vec<Row>,
    /// C over Rust, per size both sides ran verified.
    pub ratios: Vec<CRatio>,
    /// Why nothing could run (no C compiler, no library), if so.
    pub unavailable: Option<String>,
    /// The C compiler, as `cc --version` named itself.
    pub cc: Option<String>,
    /// The CPUs the receiver and the sender were pinned to (none: not pinned).
    pub cpus: Option<[usize; 2]>,
}

impl CSection {
    /// The row of `contender` at `bytes`.
    pub fn row(&self, contender: &str, bytes: usize) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.contender == contender && r.bytes == bytes)
    }

    /// The rows that failed.
    pub fn failures(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter(|r| !r.verified)
            .map(|r| {
                format!(
                    "{} at {} B: {}",
                    r.contender,
                    r.bytes,
                    r.error.as_deref().unwrap_or("not verified")
                )
            })
            .collect()
    }
}

/// The C compiler's command: `$CC`, else `cc`.
fn cc() -> String {
    std::env::var("CC")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "cc".into())
}

/// The compiler's first line of `--version`, or why it cannot be run.
fn cc_here() -> Result<String, String> {
    let o = Command::new(cc())
        .arg("--version")
        .output()
        .map_err(|e| format!("the C compiler `{}` cannot be run here ({e})", cc()))?;
    if !o.status.success() {
        return Err(format!(
            "the C compiler `{}` fails here ({}): {}",
            cc(),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&o.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .to_string())
}

/// The directory holding the `libzcio_c.so` this build made ([`super::built_beside_exe`]).
pub fn built_library_dir() -> Option<PathBuf> {
    super::built_beside_exe("libzcio_c.so")?
        .parent()
        .map(Path::to_path_buf)
}

/// Write bench.c, common.h and zcio.h into `dir` and compile bench.c there against the
/// library in `libdir`; the program's path.
fn compile(dir: &Path, libdir: &Path) -> Res<PathBuf> {
    std::fs::write(dir.join("bench.c"), BENCH_C)?;
    std::fs::write(dir.join("common.h"), COMMON_H)?;
    std::fs::write(dir.join("zcio.h"), HEADER)?;
    let exe = dir.join("bench");
    let mut cmd = Command::new(cc());
    cmd.args([
        "-std=c11",
        "-D_POSIX_C_SOURCE=200809L",
        "-Wall",
        "-O2",
        "-I",
    ])
    .arg(dir)
    .arg(dir.join("bench.c"))
    .arg("-o")
    .arg(&exe)
    .arg(format!("-L{}", libdir.display()))
    .arg(format!("-Wl,-rpath,{}", libdir.display()))
    .args(["-lzcio_c", "-lpthread"]);
    let o = cmd.output()?;
    if !o.status.success() {
        return Err(format!(
            "compiling bench.c failed ({}): {cmd:?}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )
        .into());
    }
    Ok(exe)
}

/// Wait for `child` (named `what`) at most [`PATIENCE`]; killed past it.
fn finish(mut child: Child, what: &str) -> Result<Output, String> {
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if start.elapsed() > PATIENCE => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what} did not end within {PATIENCE:?}; killed"));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(format!("waiting for {what}: {e}")),
        }
    }
    child
        .wait_with_output()
        .map_err(|e| format!("{what}'s output: {e}"))
}

/// The last lines `o` wrote on its standard error.
fn tail(o: &Output) -> String {
    let s = String::from_utf8_lossy(&o.stderr);
    let lines: Vec<&str> = s.trim().lines().collect();
    lines[lines.len().saturating_sub(4)..].join(" | ")
}

/// How a side's processes are started.
struct Sides {
    /// bench.c, compiled.
    c: PathBuf,
    /// This executable.
    rust: PathBuf,
    /// The receiver's and the sender's CPUs.
    cpus: Option<[usize; 2]>,
}

impl Sides {
    /// The command of `contender`'s `role` for a run of `size`-byte messages, `total` bytes,
    /// meeting at `name`.
    fn command(
        &self,
        contender: &str,
        role: &str,
        name: &str,
        size: usize,
        total: usize,
    ) -> Command {
        let mut c = if contender == "c" {
            let mut c = Command::new(&self.c);
            c.args([role, name, &size.to_string(), &total.to_string()]);
            c
        } else {
            let mut c = Command::new(&self.rust);
            c.args(["bench", "c", "--peer", role, "--peer-name", name])
                .args(["--bytes", &size.to_string(), "--volume", &total.to_string()]);
            c
        };
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// One run of `contender`: the receiver's throughput (MiB/s), or why the run failed.
    fn run(&self, contender: &str, size: usize, messages: usize) -> Result<f64, String> {
        let name = unique_name("c");
        let total = size * messages;
        let spawn = |role: &str, cpu: Option<usize>| {
            // The child inherits this thread's CPU; this thread is free again after.
            let _pinned = cpu.map(Pinned::to);
            self.command(contender, role, &name, size, total)
                .spawn()
                .map_err(|e| format!("{contender} {role} cannot be started: {e}"))
        };
        let receiver = spawn("receiver", self.cpus.map(|[r, _]| r))?;
        let sender = match spawn("sender", self.cpus.map(|[_, s]| s)) {
            Ok(s) => s,
            Err(e) => {
                let _ = finish_killed(receiver);
                return Err(e);
            }
        };
        let s = finish(sender, "the sender");
        let r = finish(receiver, "the receiver")?;
        let s = s?;
        if !r.status.success() {
            return Err(format!("the receiver failed ({}): {}", r.status, tail(&r)));
        }
        if !s.status.success() {
            return Err(format!("the sender failed ({}): {}", s.status, tail(&s)));
        }
        let out = String::from_utf8_lossy(&r.stdout);
        let w: Vec<&str> = out.split_whitespace().collect();
        let want = [contender.to_string(), size.to_string()];
        match w.as_slice() {
            [c, n, mibs, count]
                if *c == want[0] && *n == want[1] && *count == messages.to_string() =>
            {
                match mibs.parse::<f64>() {
                    Ok(x) if x > 0.0 && x.is_finite() => Ok(x),
                    _ => Err(format!("the receiver printed no throughput: {out:?}")),
                }
            }
            _ => Err(format!(
                "the receiver printed {out:?}, not `{contender} {size} MIB_PER_S {messages}`"
            )),
        }
    }
}

/// Kill `child`, which waits for a peer that will not come.
fn finish_killed(mut child: Child) -> std::io::Result<()> {
    child.kill()?;
    child.wait().map(|_| ())
}

/// Run `plan`, one progress unit per run; the section (with no rows and the reason, where the
/// C compiler or the library is missing).
pub fn measure(plan: &Plan, p: &dyn Progress) -> Res<CSection> {
    let none = |why: String| {
        for _ in 0..plan.units() {
            p.inc();
        }
        Ok(CSection {
            plan: plan.clone(),
            rows: Vec::new(),
            ratios: Vec::new(),
            unavailable: Some(why),
            cc: None,
            cpus: None,
        })
    };
    let cc = match cc_here() {
        Ok(v) => v,
        Err(why) => return none(why),
    };
    let Some(libdir) = built_library_dir() else {
        return none(
            "libzcio_c.so is not beside this executable nor in its deps/ (build zcio-cli, which builds it)".into(),
        );
    };
    let tmp = tempfile::tempdir()?;
    p.what("c: compiling bench.c".into());
    let sides = Sides {
        c: compile(tmp.path(), &libdir)?,
        rust: std::env::current_exe()?,
        cpus: cpus().map(|[a, b]| [b, a]),
    };
    let mut samples: BTreeMap<(usize, &str), Vec<f64>> = BTreeMap::new();
    let mut errors: BTreeMap<(usize, &str), String> = BTreeMap::new();
    for round in 0..plan.rounds {
        for (i, &size) in plan.sizes.iter().enumerate() {
            let order = if (round + i) % 2 == 0 {
                CONTENDERS
            } else {
                [CONTENDERS[1], CONTENDERS[0]]
            };
            for c in order {
                p.what(format!(
                    "c: {c} at {}, round {}/{}",
                    crate::report::text::size(size),
                    round + 1,
                    plan.rounds
                ));
                if let std::collections::btree_map::Entry::Vacant(e) = errors.entry((size, c)) {
                    match sides.run(c, size, plan.messages(size)) {
                        Ok(x) => samples.entry((size, c)).or_default().push(x),
                        Err(why) => {
                            e.insert(why);
                        }
                    }
                }
                p.inc();
            }
        }
    }
    let mut rows = Vec::new();
    for &size in &plan.sizes {
        for c in CONTENDERS {
            let v = samples.remove(&(size, c)).unwrap_or_default();
            let error = errors.remove(&(size, c));
            rows.push(Row {
                contender: c.into(),
                bytes: size,
                messages: plan.messages(size),
                mib_s: median(&v),
                mib_s_spread: (!v.is_empty()).then(|| spread(&v)),
                verified: error.is_none() && v.len() == plan.rounds,
                rounds: v.len(),
                samples_mib_s: v,
                error,
            });
        }
    }
    let mut s = CSection {
        plan: plan.clone(),
        rows,
        ratios: Vec::new(),
        unavailable: None,
        cc: Some(cc),
        cpus: sides.cpus,
    };
    s.ratios = ratios(&s);
    Ok(s)
}

/// C over Rust at every size both sides ran verified.
pub fn ratios(s: &CSection) -> Vec<CRatio> {
    s.plan
        .sizes
        .iter()
        .filter_map(|&b| {
            let c = s.row("c", b).filter(|r| r.verified)?;
            let r = s.row("rust", b).filter(|r| r.verified)?;
            let q = c.mib_s? / r.mib_s?;
            let [cl, ch] = c.mib_s_spread?;
            let [rl, rh] = r.mib_s_spread?;
            Some(CRatio {
                bytes: b,
                c_over_rust: q,
                target_met: (b >= TARGET_FROM).then_some(q >= 1.0 - TARGET_PCT / 100.0),
                spreads_overlap: cl <= rh && rl <= ch,
            })
        })
        .collect()
}

/// `zcio bench c`: measure, print a table (or JSON); fail, having printed, if a row failed.
pub fn run(a: CArgs) -> Res<()> {
    if let Some(role) = &a.peer {
        let (Some(n), Some(name)) = (a.bytes.first(), a.peer_name.as_deref()) else {
            return Err("invalid arguments: --peer needs --peer-name and --bytes".into());
        };
        return peer::run(role, name, *n, a.volume);
    }
    let plan = Plan::of_args(&a)?;
    let bar = crate::bench_bar(plan.units());
    let s = measure(&plan, &bar)?;
    bar.finish_and_clear();
    crate::finish_checked_bench(
        "c",
        &s,
        s.rows.len(),
        "failed",
        &s.failures(),
        a.json,
        || report::text_table(&s),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Result<CArgs, clap::Error> {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: CArgs,
        }
        let mut v = vec!["p"];
        v.extend(extra);
        P::try_parse_from(v).map(|p| p.a)
    }

    #[test]
    fn the_plan_takes_the_defaults_and_refuses_what_cannot_run() {
        let p = Plan::of_args(&args(&[]).unwrap()).unwrap();
        assert_eq!(p.sizes, DEFAULT_SIZES);
        assert_eq!(p.units(), 3 * 2 * 3);
        assert_eq!(p.messages(64 << 10), 4096);
        assert_eq!(p.messages(64 << 20), MIN_MESSAGES);
        for (bad, arg) in [
            (&["--bytes", "0"][..], "--bytes 0"),
            (&["--rounds", "0"], "--rounds"),
            (&["--volume", "0"], "--volume 0"),
        ] {
            let e = Plan::of_args(&args(bad).unwrap()).unwrap_err();
            assert!(e.to_string().contains(arg), "{e}");
        }
    }

    #[test]
    fn the_program_built_in_speaks_the_peers_protocol() {
        assert!(BENCH_C.contains("#define RING_BYTES ((size_t)256 << 20)"));
        assert_eq!(peer::RING_BYTES, 256 << 20);
        assert!(
            BENCH_C.contains("0x9E3779B97F4A7C15ull") && BENCH_C.contains("0xD1B54A32D192ED03ull")
        );
        assert!(BENCH_C.contains("printf(\"c %zu %.1f %llu\\n\""));
        assert!(HEADER.contains("zcio_channel_send"));
    }
}
