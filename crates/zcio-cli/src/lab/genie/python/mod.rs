//! `zcio bench python`: a numpy array moved from one Python process to another, by zcio's
//! Python module against the standard library's ways and iceoryx2's; and its part of the
//! report's Genie section.
//!
//! # The job
//!
//! Process A holds a numpy array; it hands it over and changes it right after (one byte in
//! every 4 KiB page, and the last); process B must end with a writable array of its own
//! holding the bytes of the moment of the send, never A's change. Each run does it twice,
//! with two arrays: the second transfer is measured, the first runs the code paths once (its
//! times are kept beside). The contenders: `zcio` (`ch.send(a)`, B
//! `numpy.frombuffer(ch.recv())`), `zcio-alloc` (the same, A's array in `zcio.alloc` memory,
//! a memory file whose send ships it sealed and makes A's pages copy-on-write), `zcio-numpy`
//! (the same, A's array made by numpy inside `zcio.numpy_memory()`), `zcio-volatile` (as
//! `zcio`, both ends trusting each other with volatile loans: the memory file is given back
//! and reused), `rust`, `rust-alloc` and `rust-volatile` (the same calls from two Rust
//! processes, [`peer`]: what Python's overhead is read against), `multiprocessing.Pipe`,
//! `multiprocessing.Queue`, `shared_memory` (A copies in, B copies out into an array of its own) and `iceoryx2` (A
//! copies into a loaned sample, B copies out), where its Python package is installed.
//!
//! The work is the script `crates/zcio-python/bench/bench_python.py` (its docstring has the
//! protocol and the measures), built into this executable and written into a temporary
//! directory beside the extension module this build made (`libzcio_python.so`, copied as
//! `zcio.abi3.so`), then run with `python3`: every run a fresh pair of processes, medians
//! over rounds. Where `python3`, numpy or the module is missing, the section says so and has
//! no rows.

pub mod peer;
pub mod report;

use crate::lab::genie::measure::Progress;
use crate::report::preset::Preset;
use crate::transfer::Res;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The script, as built into this executable.
pub const SCRIPT: &str = include_str!("../../../../../zcio-python/bench/bench_python.py");

/// Every contender, in the script's names (`rust` and `rust-alloc` are this executable's
/// [`peer`]s: the same job through the Rust channel, what Python's overhead is read against).
pub const CONTENDERS: [&str; 11] = [
    "zcio",
    "zcio-alloc",
    "zcio-numpy",
    "zcio-volatile",
    "rust",
    "rust-alloc",
    "rust-volatile",
    "pipe",
    "queue",
    "shared_memory",
    "iceoryx2",
];

/// The sizes `zcio bench python` measures by default (and the report's quick preset).
pub const DEFAULT_SIZES: [usize; 2] = [8 << 20, 128 << 20];

/// The size the report's targets are read at.
pub const TARGET_SIZE: usize = 128 << 20;

/// Arguments of `zcio bench python`.
#[derive(clap::Args, Debug, Clone)]
pub struct PythonArgs {
    /// Array sizes in bytes (multiples of 8), comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_SIZES)]
    pub bytes: Vec<usize>,
    /// Contenders: zcio, zcio-alloc, zcio-numpy, zcio-volatile, rust, rust-alloc,
    /// rust-volatile, pipe, queue, shared_memory, iceoryx2 (one not importable here gets a row
    /// saying so).
    #[arg(long, value_delimiter = ',', default_values_t = CONTENDERS.map(String::from))]
    pub contenders: Vec<String>,
    /// Rounds (each a fresh pair of processes per contender, in an order that rotates).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Print JSON (`{"rows": [...], ...}`) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Run one side (`a` or `b`) of a Rust contender's run, as the script does ([`peer`]).
    #[arg(long, hide = true)]
    pub peer: Option<String>,
    /// The name B listens on (with `--peer b`).
    #[arg(long, hide = true)]
    pub peer_name: Option<String>,
}

/// What a bench (or the report) measures.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "PythonPlan")]
pub struct Plan {
    /// Array sizes (bytes).
    pub sizes: Vec<usize>,
    /// The contenders, by the script's names.
    pub contenders: Vec<String>,
    /// Rounds.
    pub rounds: usize,
}

impl Plan {
    /// The report's plan at `preset`: 8 and 128 MiB, three rounds (1 GiB too in the full
    /// preset; one round at 8 MiB in the smoke preset).
    pub fn of(preset: Preset) -> Plan {
        let contenders = CONTENDERS.map(String::from).to_vec();
        match preset {
            Preset::Smoke => Plan {
                sizes: vec![8 << 20],
                contenders,
                rounds: 1,
            },
            Preset::Quick => Plan {
                sizes: DEFAULT_SIZES.to_vec(),
                contenders,
                rounds: 3,
            },
            Preset::Full => Plan {
                sizes: vec![8 << 20, 128 << 20, 1 << 30],
                contenders,
                rounds: 3,
            },
        }
    }

    /// The plan of `zcio bench python`'s arguments, or why there is none.
    pub fn of_args(a: &PythonArgs) -> Res<Plan> {
        if a.rounds == 0 {
            return Err("invalid argument `--rounds`: 0: at least one round".into());
        }
        if a.bytes.is_empty() {
            return Err("invalid argument `--bytes`: none: at least one size".into());
        }
        if let Some(b) = a.bytes.iter().find(|b| **b == 0 || **b % 8 != 0) {
            return Err(
                format!("invalid argument `--bytes {b}`: a positive multiple of 8 bytes").into(),
            );
        }
        if let Some(c) = a
            .contenders
            .iter()
            .find(|c| !CONTENDERS.contains(&c.as_str()))
        {
            return Err(format!(
                "invalid argument `--contenders {c}`: one of {}",
                CONTENDERS.join(", ")
            )
            .into());
        }
        if a.contenders.is_empty() {
            return Err("invalid argument `--contenders`: none: at least one".into());
        }
        let mut contenders = a.contenders.clone();
        contenders.dedup();
        Ok(Plan {
            sizes: a.bytes.clone(),
            contenders,
            rounds: a.rounds,
        })
    }

    /// Progress units: one per run.
    pub fn units(&self) -> u64 {
        (self.sizes.len() * self.contenders.len() * self.rounds) as u64
    }
}

/// One contender at one size, medians over rounds.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(rename = "PythonRow")]
pub struct Row {
    /// One of [`CONTENDERS`].
    pub contender: String,
    /// Array size.
    pub bytes: usize,
    /// Median time from A's send start to B holding its array (ns, CLOCK_MONOTONIC at both),
    /// of each run's second transfer.
    pub latency_ns: Option<f64>,
    /// Lowest and highest round.
    pub latency_spread_ns: Option<[f64; 2]>,
    /// Median time A was blocked in its send (ns), of each run's second transfer.
    pub send_ns: Option<f64>,
    /// Median end-to-end time of each run's first transfer (ns): the processes' code paths
    /// run for the first time.
    #[serde(default)]
    pub first_latency_ns: Option<f64>,
    /// Lowest and highest round of the first transfer.
    #[serde(default)]
    pub first_latency_spread_ns: Option<[f64; 2]>,
    /// Median time A was blocked in its first send (ns).
    #[serde(default)]
    pub first_send_ns: Option<f64>,
    /// Median CPU time of both processes (ns): A's from the send start to the end of its
    /// change, B's from its wait start to holding its array.
    pub cpu_ns: Option<f64>,
    /// Median peak RSS of A (KiB, whole life, numpy's import included).
    pub rss_a_kib: Option<f64>,
    /// Median peak RSS of B (KiB).
    pub rss_b_kib: Option<f64>,
    /// Every round ran, and B's array had the length, was writable and held, at every 4096th
    /// byte and the first and last, the original bytes or A's change of them.
    pub verified: bool,
    /// B's array held A's later change in some round (it must not).
    pub saw_later_change: bool,
    /// Rounds that ran.
    pub rounds: usize,
    /// Why the contender did not run (`unavailable: ...`) or failed, if so.
    pub error: Option<String>,
}

impl Row {
    /// Whether the contender could not run here (its package not importable): no failure.
    pub fn unavailable(&self) -> bool {
        self.error
            .as_deref()
            .is_some_and(|e| e.starts_with("unavailable"))
    }
}

/// What `zcio bench python` measured: its JSON, and the report's `genie.results.python`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PythonSection {
    /// What was run.
    pub plan: Plan,
    /// One row per contender and size.
    pub rows: Vec<Row>,
    /// Why nothing could run (no `python3`, numpy or extension module), if so.
    pub unavailable: Option<String>,
    /// `python3 --version` and numpy's version, as they said.
    pub python: Option<String>,
    /// Whether this machine hands free memory back to its hypervisor (free page reporting),
    /// as its kernel said when the bench ran: fresh pages are then faulted in by the host at
    /// their first touch.
    #[serde(default)]
    pub page_reporting: Option<PageReporting>,
}

/// Free page reporting, as `/sys/module/page_reporting/parameters` says: free blocks of
/// `2^order` pages are handed back to the hypervisor once free for `min_free_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PageReporting {
    /// The order of the blocks reported (9: 2 MiB).
    pub order: u32,
    /// How long a block stays free before it is reported (ms).
    pub min_free_ms: u64,
}

impl PageReporting {
    /// What this machine's kernel says, if it reports free pages.
    pub fn here() -> Option<PageReporting> {
        let read = |f: &str| {
            std::fs::read_to_string(format!("/sys/module/page_reporting/parameters/{f}"))
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        Some(PageReporting {
            order: read("page_reporting_order")? as u32,
            min_free_ms: read("min_free_ms").unwrap_or(0),
        })
    }
}

impl PythonSection {
    /// The row of `contender` at `bytes`.
    pub fn row(&self, contender: &str, bytes: usize) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.contender == contender && r.bytes == bytes)
    }

    /// The rows that failed (not verified, other than unavailable; or zcio's seeing A's change).
    pub fn failures(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter_map(|r| {
                let why = if !r.verified && !r.unavailable() {
                    r.error.clone().unwrap_or_else(|| "not verified".into())
                } else if (r.contender.starts_with("zcio") || r.contender.starts_with("rust"))
                    && r.saw_later_change
                {
                    "B saw A's later change".into()
                } else {
                    return None;
                };
                Some(format!("{} at {} B: {why}", r.contender, r.bytes))
            })
            .collect()
    }
}

/// The extension module this build made ([`super::built_beside_exe`]).
pub fn built_module() -> Option<PathBuf> {
    super::built_beside_exe("libzcio_python.so")
}

/// `python3 --version` and numpy's version, or why they are not there.
fn python_here() -> Result<String, String> {
    let out = Command::new("python3")
        .args([
            "-c",
            "import sys, numpy; print(sys.version.split()[0], numpy.__version__)",
        ])
        .output()
        .map_err(|e| format!("python3 cannot be run here ({e})"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!(
            "python3 cannot import numpy here ({})",
            err.trim().lines().last().unwrap_or("")
        ));
    }
    let v = String::from_utf8_lossy(&out.stdout);
    let mut w = v.split_whitespace();
    Ok(format!(
        "Python {}, numpy {}",
        w.next().unwrap_or("?"),
        w.next().unwrap_or("?")
    ))
}

/// Run `plan`, one progress unit per run; the section (with no rows and the reason, where
/// Python, numpy or the module is missing).
pub fn measure(plan: &Plan, p: &dyn Progress) -> Res<PythonSection> {
    let none = |why: String| {
        for _ in 0..plan.units() {
            p.inc();
        }
        Ok(PythonSection {
            plan: plan.clone(),
            rows: Vec::new(),
            unavailable: Some(why),
            python: None,
            page_reporting: PageReporting::here(),
        })
    };
    let python = match python_here() {
        Ok(v) => v,
        Err(why) => return none(why),
    };
    let Some(module) = built_module() else {
        return none(
            "the extension module libzcio_python.so is not beside this executable (build zcio-cli, which builds it)".into(),
        );
    };
    let tmp = tempfile::tempdir()?;
    std::fs::copy(&module, tmp.path().join("zcio.abi3.so"))?;
    let script = tmp.path().join("bench_python.py");
    std::fs::write(&script, SCRIPT)?;
    let rows = run_script(&script, tmp.path(), plan, p)?;
    Ok(PythonSection {
        plan: plan.clone(),
        rows,
        unavailable: None,
        python: Some(python),
        page_reporting: PageReporting::here(),
    })
}

/// `PYTHONPATH` with `dir` (the module's) ahead of what the caller's already held (a virtual
/// environment's packages, say).
fn with_pythonpath(dir: &Path) -> std::ffi::OsString {
    let mut dirs = vec![dir.to_path_buf()];
    if let Some(p) = std::env::var_os("PYTHONPATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(dirs).unwrap_or_else(|_| dir.as_os_str().to_owned())
}

/// The script's rows for `plan`, its progress lines counted on `p`.
fn run_script(script: &Path, pythonpath: &Path, plan: &Plan, p: &dyn Progress) -> Res<Vec<Row>> {
    let join = |v: &mut dyn Iterator<Item = String>| v.collect::<Vec<_>>().join(",");
    let mut child = Command::new("python3")
        .arg(script)
        .arg("--sizes")
        .arg(join(&mut plan.sizes.iter().map(|b| b.to_string())))
        .arg("--contenders")
        .arg(join(&mut plan.contenders.iter().cloned()))
        .arg("--rounds")
        .arg(plan.rounds.to_string())
        .env("PYTHONPATH", with_pythonpath(pythonpath))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("ZCIO_BENCH_PEER", std::env::current_exe()?)
        .current_dir(pythonpath)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut stdout = child.stdout.take().ok_or("the script's stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).map(|_| s)
    });
    let mut other = Vec::new();
    for line in BufReader::new(child.stderr.take().ok_or("the script's stderr")?).lines() {
        let line = line?;
        match line.strip_prefix("progress: ") {
            Some(what) => {
                p.what(format!("python: {what}"));
                p.inc();
            }
            None => other.push(line),
        }
    }
    let status = child.wait()?;
    let out = reader
        .join()
        .map_err(|_| "the script's reader panicked")??;
    if !status.success() {
        let tail = other[other.len().saturating_sub(8)..].join("\n");
        return Err(format!("bench_python.py failed ({status}):\n{tail}").into());
    }
    #[derive(Deserialize)]
    struct Out {
        rows: Vec<Row>,
    }
    let o: Out = serde_json::from_str(&out)
        .map_err(|e| format!("bench_python.py printed no rows ({e}): {out}"))?;
    Ok(o.rows)
}

/// `zcio bench python`: measure, print a table (or JSON); fail, having printed, if a row
/// failed.
pub fn run(a: PythonArgs) -> Res<()> {
    if let Some(role) = &a.peer {
        let (Some(c), Some(n)) = (a.contenders.first(), a.bytes.first()) else {
            return Err("invalid arguments: --peer needs --contenders and --bytes".into());
        };
        return peer::run(role, c, *n, a.peer_name.as_deref());
    }
    let plan = Plan::of_args(&a)?;
    let bar = crate::bench_bar(plan.units());
    let s = measure(&plan, &bar)?;
    bar.finish_and_clear();
    crate::finish_checked_bench(
        "python",
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

    fn args(extra: &[&str]) -> Result<PythonArgs, clap::Error> {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: PythonArgs,
        }
        let mut v = vec!["p"];
        v.extend(extra);
        P::try_parse_from(v).map(|p| p.a)
    }

    #[test]
    fn the_plan_takes_the_defaults_and_refuses_what_the_script_cannot_run() {
        let p = Plan::of_args(&args(&[]).unwrap()).unwrap();
        assert_eq!(p.sizes, DEFAULT_SIZES);
        assert_eq!(p.contenders, CONTENDERS);
        assert_eq!(p.units(), 2 * 11 * 3);
        for (bad, arg) in [
            (&["--bytes", "7"][..], "--bytes 7"),
            (&["--rounds", "0"], "--rounds"),
            (&["--contenders", "tcp"], "--contenders tcp"),
        ] {
            let e = Plan::of_args(&args(bad).unwrap()).unwrap_err();
            assert!(e.to_string().contains(arg), "{e}");
        }
        assert!(Plan::of(Preset::Full).sizes.contains(&(1 << 30)));
        assert!(!Plan::of(Preset::Quick).sizes.contains(&(1 << 30)));
    }

    #[test]
    fn the_script_is_built_in_and_knows_every_contender() {
        for c in CONTENDERS {
            assert!(SCRIPT.contains(&format!("\"{c}\"")), "{c}");
        }
    }
}
