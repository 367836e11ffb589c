//! `zcio soak`: first the drill ([`crate::drill`]) on every module, the semantics in turn in
//! this process with fresh receive buffers (the datagram module with a receiver that sleeps
//! before some of its receives); then transfers of random semantics, modules, lengths, offsets,
//! input schemes and overwrites, each to a receiving process of its own (or a file), every byte
//! checked, for as long as asked; then a tally, and the resources this process held before and
//! after.
//!
//! A case fails when its transfer returns an error, or when the receiver's data differs from
//! the sender's as of the call under a semantics whose integrity is strong, or under any
//! semantics when nothing overwrote the buffer. The run fails when a case failed or when this
//! process holds more descriptors, memory files, shared-memory objects or threads at the end
//! than after its first cases (mappings may grow by the caches' bound).

use crate::error::Context;
use crate::transfer::{Res, TransferArgs, check_bytes, run_file_json, run_peer};
use clap::Args;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use zcio_genie::stream::ModuleKind;
use zcio_genie::{InputBuffering, Integrity, Semantics};
use zcio_vm::resources::Resources;

/// Arguments of `zcio soak`.
#[derive(Args, Debug, Clone)]
pub struct SoakArgs {
    /// How long to run (minutes; fractions allowed).
    #[arg(long, default_value_t = 10.0)]
    pub minutes: f64,
    /// Seed of the random cases (default: from the clock; printed, so that a run can be
    /// replayed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Longest message (bytes).
    #[arg(long, default_value_t = 8 << 20)]
    pub max_bytes: usize,
    /// Directory for the file module's files (default: the current directory).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
    /// Only these semantics (comma-separated; default: all eight).
    #[arg(long, value_delimiter = ',')]
    pub semantics: Vec<Semantics>,
    /// Only these modules (comma-separated; default: memnet, unix, tcp, pipe, file).
    #[arg(long, value_delimiter = ',')]
    pub modules: Vec<ModuleKind>,
    /// Messages of the drill for each module, semantics and input buffering (0: no drill).
    #[arg(long, default_value_t = 8)]
    pub drill_messages: usize,
    /// Print the tally as one JSON object.
    #[arg(long)]
    pub json: bool,
}

/// How late the drill's datagram receiver is, before one receive in eight.
const DRILL_UDP_LATE: Duration = Duration::from_millis(5);

/// The modules the drill takes: every module that fills application buffers.
const DRILL_MODULES: [ModuleKind; 6] = [
    ModuleKind::File,
    ModuleKind::Memnet,
    ModuleKind::Pipe,
    ModuleKind::Unix,
    ModuleKind::Tcp,
    ModuleKind::Udp,
];

/// What the drill found on one module.
#[derive(Debug, Serialize)]
pub struct DrillRow {
    /// The module.
    pub module: ModuleKind,
    /// Whether its receiver slept before some receives, and how long (ms).
    pub late_ms: Option<u64>,
    /// Messages checked, bytes checked, bytes delivered by moving pages.
    pub messages: usize,
    /// See `messages`.
    pub bytes: u64,
    /// See `messages`.
    pub swapped_bytes: u64,
    /// Moves the kernel refused (mappings it found incompatible), the pages copied instead.
    pub refused_moves: u64,
    /// Its failures (each also in the soak's `failures`).
    pub failures: usize,
}

/// Cases run before the baseline of resources is taken: the VM runtime, its handler thread,
/// its staging and the region caches come into being with the first transfers of each kind.
const WARM_CASES: usize = 12;

/// Mappings the run may gain after the warm cases: the runtime's caches (regions, staging,
/// registrations) grow to bounds of their own as new lengths come along, and each growth can
/// split or add a mapping.
const VMA_SLACK: usize = 64;

/// The modules a case may take (UDP loopback can drop datagrams under load: not a test of
/// zcio, so it is left to the matrix tests).
const MODULES: [ModuleKind; 5] = [
    ModuleKind::Memnet,
    ModuleKind::Unix,
    ModuleKind::Tcp,
    ModuleKind::Pipe,
    ModuleKind::File,
];

const INPUTS: [InputBuffering; 4] = [
    InputBuffering::EarlyDemux,
    InputBuffering::PooledAligned,
    InputBuffering::PooledUnaligned,
    InputBuffering::Outboard,
];

/// One failed case: what it was and what went wrong.
#[derive(Debug, Serialize)]
pub struct Failure {
    /// The case, as `zcio transfer` arguments.
    pub case: String,
    /// The error or the mismatch.
    pub what: String,
}

/// The tally of a soak.
#[derive(Debug, Default, Serialize)]
pub struct Tally {
    /// Seed of the cases.
    pub seed: u64,
    /// Wall time (s).
    pub seconds: f64,
    /// Cases (transfers) run.
    pub cases: usize,
    /// Messages sent and checked.
    pub messages: usize,
    /// Bytes sent and checked.
    pub bytes: u64,
    /// Bytes the CPU copied (TCOW, copyout, the copying fallbacks).
    pub cpu_copied_bytes: u64,
    /// Bytes delivered by moving pages.
    pub swapped_bytes: u64,
    /// Cases that overwrote the sender's buffer during output.
    pub overwritten_cases: usize,
    /// Cases under weak integrity whose overwrite reached the receiver (allowed).
    pub weak_differences: usize,
    /// Cases per semantics and module (`semantics/module`).
    pub per_kind: BTreeMap<String, usize>,
    /// The drill, a row a module.
    pub drill: Vec<DrillRow>,
    /// Failed cases.
    pub failures: Vec<Failure>,
    /// Resources at the start, after the warm cases, and at the end.
    pub resources_start: Resources,
    /// See `resources_start`.
    pub resources_baseline: Resources,
    /// See `resources_start`.
    pub resources_end: Resources,
    /// What grew from the baseline to the end (empty when flat).
    pub grown: Vec<String>,
}

/// A random case of one of `sems` over one of `modules`.
fn case(
    rng: &mut fastrand::Rng,
    sems: &[Semantics],
    modules: &[ModuleKind],
    max_bytes: usize,
    huge_ok: bool,
) -> TransferArgs {
    let semantics = sems[rng.usize(..sems.len())];
    let module = modules[rng.usize(..modules.len())];
    let ps = zcio_vm::page_size();
    let max = max_bytes.max(1);
    // A third short (within two pages), a third medium, a third long.
    let bytes = match rng.u8(..3) {
        0 => rng.usize(1..=(2 * ps).min(max)),
        1 => rng.usize(1..=(256 << 10).min(max)),
        _ => rng.usize(1..=max),
    };
    let huge = huge_ok && module == ModuleKind::Memnet && rng.u8(..4) == 0;
    let offset = match rng.u8(..3) {
        0 => 0,
        1 => rng.usize(..ps),
        _ => rng.usize(..4) * ps + rng.usize(..8) * 512,
    };
    let mut a = TransferArgs::memnet(semantics, bytes, rng.usize(1..=6));
    a.module = module;
    a.offset = offset;
    a.input = INPUTS[rng.usize(..INPUTS.len())];
    a.overwrite_during_output = rng.u8(..3) == 0;
    a.force_zero_copy = rng.bool();
    a.huge = huge;
    a.seed = rng.u64(..);
    a
}

/// The case as the `zcio transfer` command that replays it.
fn describe(a: &TransferArgs) -> String {
    format!(
        "zcio transfer --semantics {} --module {} --bytes {} --offset {} --input {} --count {} --seed {}{}{}{}",
        a.semantics,
        a.module,
        a.bytes,
        a.offset,
        a.input,
        a.count,
        a.seed,
        if a.overwrite_during_output {
            " --overwrite-during-output"
        } else {
            ""
        },
        if a.force_zero_copy {
            " --force-zero-copy"
        } else {
            ""
        },
        if a.huge { " --huge" } else { "" },
    )
}

/// Run one case into the tally.
fn run_case(a: &TransferArgs, t: &mut Tally) {
    let r = if a.module == ModuleKind::File {
        run_file_json(a)
    } else {
        run_peer(a)
    };
    t.cases += 1;
    *t.per_kind
        .entry(format!("{}/{}", a.semantics, a.module))
        .or_default() += 1;
    if a.overwrite_during_output {
        t.overwritten_cases += 1;
    }
    let v = match r {
        Ok(v) => v,
        Err(e) => {
            t.failures.push(Failure {
                case: describe(a),
                what: e.to_string(),
            });
            return;
        }
    };
    let n = a.count as u64;
    t.messages += a.count;
    t.bytes += a.bytes as u64 * n;
    t.cpu_copied_bytes += v["cpu_copied_bytes"].as_u64().unwrap_or(0) * n;
    t.swapped_bytes += v["swapped_bytes"].as_u64().unwrap_or(0) * n;
    if v["verified"].as_bool() == Some(true) {
        return;
    }
    if a.overwrite_during_output && a.semantics.integrity() == Integrity::Weak {
        t.weak_differences += 1;
        return;
    }
    t.failures.push(Failure {
        case: describe(a),
        what: format!(
            "the receiver's data differs from the sender's as of the call (first mismatch: {})",
            v["first_mismatch"]
        ),
    });
}

/// Run the soak and print its tally; an error when a case failed or resources grew.
pub fn run(args: SoakArgs) -> Res<()> {
    if !(args.minutes > 0.0 && args.minutes.is_finite()) {
        return Err(format!(
            "invalid argument `--minutes`: {}: a positive number of minutes",
            args.minutes
        )
        .into());
    }
    check_bytes("--max-bytes", args.max_bytes)?;
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let mut rng = fastrand::Rng::with_seed(seed);
    let sems = if args.semantics.is_empty() {
        Semantics::ALL.to_vec()
    } else {
        args.semantics.clone()
    };
    let modules = if args.modules.is_empty() {
        MODULES.to_vec()
    } else {
        args.modules.clone()
    };
    let huge_ok = zcio_vm::huge::unavailable_reason().is_none();
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => std::env::current_dir().context("the current directory")?,
    };
    let budget = Duration::from_secs_f64(args.minutes * 60.0);
    eprintln!(
        "zcio soak: {:.1} min, seed {seed}, messages up to {} bytes{}",
        args.minutes,
        args.max_bytes,
        if huge_ok {
            ", huge-page buffers in a quarter of the memory-network cases"
        } else {
            ""
        }
    );
    let bar = indicatif::ProgressBar::new(budget.as_secs().max(1));
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {msg}")
            .expect("template"),
    );
    // The descriptors the VM layer keeps for the process's life are opened at their first
    // use, which a case after the warm ones may be: open them before any count.
    zcio_vm::resources::open_kept_descriptors().context("this process's /proc/self files")?;
    let mut t = Tally {
        seed,
        resources_start: Resources::now(),
        ..Default::default()
    };
    if args.drill_messages > 0 {
        drill(&args, seed, &dir, &mut t);
    }
    let t0 = Instant::now();
    while t0.elapsed() < budget || t.cases < WARM_CASES {
        let mut a = case(&mut rng, &sems, &modules, args.max_bytes, huge_ok);
        a.dir = Some(dir.clone());
        run_case(&a, &mut t);
        if t.cases == WARM_CASES {
            t.resources_baseline = Resources::now();
        }
        bar.set_position(t0.elapsed().as_secs());
        bar.set_message(format!(
            "{} cases, {} messages, {} MiB, {} failed",
            t.cases,
            t.messages,
            t.bytes >> 20,
            t.failures.len()
        ));
    }
    bar.finish_and_clear();
    t.seconds = t0.elapsed().as_secs_f64();
    t.resources_end = Resources::now();
    t.grown = t.resources_end.strayed_from(
        &t.resources_baseline,
        &zcio_vm::resources::Tolerance::nothing_grows(VMA_SLACK),
    );
    let failed = failure(&t);
    if args.json {
        if let Some(reason) = failed {
            return Err(crate::error::Error::new(crate::error::FailedWith {
                result: serde_json::to_value(&t)?,
                reason,
            }));
        }
        println!("{}", serde_json::to_string(&t)?);
    } else {
        print_tally(&t);
    }
    match failed {
        Some(reason) => Err(reason.into()),
        None => Ok(()),
    }
}

/// The drill on every module, into the tally.
fn drill(args: &SoakArgs, seed: u64, dir: &std::path::Path, t: &mut Tally) {
    let modules = DRILL_MODULES
        .into_iter()
        .filter(|m| args.modules.is_empty() || args.modules.contains(m));
    for (i, module) in modules.enumerate() {
        let late = (module == ModuleKind::Udp).then_some(DRILL_UDP_LATE);
        let d = crate::drill::Drill {
            module,
            messages: args.drill_messages,
            max_bytes: args.max_bytes,
            seed: seed.wrapping_add(i as u64),
            slow: late,
        };
        let r = crate::drill::run(&d, dir, &mut |m| eprint!("\rzcio soak: drill: {m:60}"));
        eprintln!();
        for f in &r.failures {
            t.failures.push(Failure {
                case: format!(
                    "drill of {module} (seed {}): {} {} run {} message {} ({} bytes at page offset {})",
                    d.seed, f.semantics, f.buffering, f.run, f.message, f.len, f.offset
                ),
                what: f.what.clone(),
            });
        }
        t.messages += r.messages;
        t.bytes += r.bytes;
        t.swapped_bytes += r.swapped_bytes;
        t.drill.push(DrillRow {
            module,
            late_ms: late.map(|d| d.as_millis() as u64),
            messages: r.messages,
            bytes: r.bytes,
            swapped_bytes: r.swapped_bytes,
            refused_moves: r.refused_moves,
            failures: r.failures.len(),
        });
    }
}

/// Why the soak fails, if it does: failed cases, resources grown.
fn failure(t: &Tally) -> Option<String> {
    if t.failures.is_empty() && t.grown.is_empty() {
        return None;
    }
    let mut why = Vec::new();
    if let Some(f) = t.failures.first() {
        why.push(format!(
            "{} of {} cases failed (the first: `{}`: {})",
            t.failures.len(),
            t.cases,
            f.case,
            f.what
        ));
    }
    if !t.grown.is_empty() {
        why.push(format!(
            "resources grew after the first {WARM_CASES} cases: {}",
            t.grown.join(", ")
        ));
    }
    Some(format!("soak (seed {}): {}", t.seed, why.join("; ")))
}

fn print_tally(t: &Tally) {
    println!(
        "{} cases in {:.0} s (seed {}): {} messages, {} bytes checked; CPU copies {} bytes, pages moved {} bytes; {} cases overwrote during output ({} weak-integrity differences, allowed); {} failures",
        t.cases,
        t.seconds,
        t.seed,
        t.messages,
        t.bytes,
        t.cpu_copied_bytes,
        t.swapped_bytes,
        t.overwritten_cases,
        t.weak_differences,
        t.failures.len()
    );
    for d in &t.drill {
        println!(
            "drill of {}{}: {} messages, {} bytes checked, {} bytes by moving pages ({} moves refused, copied); {} failures",
            d.module,
            d.late_ms.map_or(String::new(), |ms| format!(
                " (receiver {ms} ms late before 1 receive in 8)"
            )),
            d.messages,
            d.bytes,
            d.swapped_bytes,
            d.refused_moves,
            d.failures
        );
    }
    let r = |x: &Resources| {
        format!(
            "{} descriptors ({} memory files), {} mappings, {} /dev/shm objects, {} threads",
            x.fds, x.memfds, x.vmas, x.shm_objects, x.threads
        )
    };
    println!("resources at the start:          {}", r(&t.resources_start));
    println!(
        "after the first {WARM_CASES} cases:         {}",
        r(&t.resources_baseline)
    );
    println!("at the end:                      {}", r(&t.resources_end));
    for f in &t.failures {
        println!("FAILED `{}`: {}", f.case, f.what);
    }
}
