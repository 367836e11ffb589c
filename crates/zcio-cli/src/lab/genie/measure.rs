//! Genie's experiments (paper 000, §7-8) on this machine: end-to-end latency against length for
//! the eight semantics and three input buffering schemes over the memory network between two
//! processes (Figures 3, 6, 7), short lengths with the calibrated thresholds (Figure 5), CPU time
//! per transfer (Figure 4), the file and socket modules, the independent copy bandwidths of the
//! scaling model (Table 10), and the system-throughput check (§8.2).

use crate::report::fit::{self, Line};
use crate::report::preset::Preset;
use crate::transfer::{Res, TransferArgs, run_peer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Instant;
use zcio_genie::stream::ModuleKind;
use zcio_genie::{InputBuffering, Semantics};

/// The thresholds a run used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Thresholds {
    /// The VM paths from one page up (`--force-zero-copy`), as in the paper's Figures 3, 6, 7.
    ZeroCopy,
    /// The thresholds of this machine's calibration profile.
    Calibrated,
}

/// One primitive operation as recorded in one run (see `zcio_genie::breakdown`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct OpStat {
    /// Operation name (`copyin`, `swap`, …).
    pub op: String,
    /// `prepare` (sender, in the output call), `dispose` (sender, at completion) or `input`
    /// (receiver, in the input call).
    pub phase: String,
    /// Share of the messages in which it happened (0..1).
    pub share_of_messages: f64,
    /// Calls per message in which it happened.
    pub calls_per_message: f64,
    /// Median time per message in which it happened (ns).
    pub median_ns: f64,
}

/// One run: a second process, `count` messages, every byte checked.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Run {
    /// Round (runs of a point alternate with the other contenders' round by round).
    pub round: usize,
    /// Median end-to-end latency over the messages (ns, wall time).
    pub latency_ns: f64,
    /// 10th and 90th percentile latency (ns).
    pub latency_p10_ns: f64,
    /// See `latency_p10_ns`.
    pub latency_p90_ns: f64,
    /// CPU time of both processes per message (ns).
    pub cpu_ns: f64,
    /// The application's own CPU time per message (making and checking data, `t_APP`).
    pub app_cpu_ns: f64,
    /// Messages per second over the run (wall time).
    pub messages_per_s: f64,
    /// Every message's latency (ns), the first (warm-up) included.
    pub latencies_ns: Vec<u64>,
    /// Primitive operations (when instrumented).
    pub ops: Vec<OpStat>,
}

/// One contender at one length: its runs and their summary.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Point {
    /// Semantics.
    #[schemars(with = "String")]
    pub semantics: Semantics,
    /// Input buffering.
    #[schemars(with = "String")]
    pub input: InputBuffering,
    /// Module (`memnet`, `file`, `unix`, `tcp`).
    pub module: String,
    /// Thresholds.
    pub thresholds: Thresholds,
    /// Message length (bytes).
    pub bytes: usize,
    /// Median over runs of the per-run median latency (ns).
    pub latency_ns: f64,
    /// Lowest and highest per-run median latency (ns).
    pub latency_spread_ns: [f64; 2],
    /// Median over runs of CPU time per message, both processes (ns).
    pub cpu_ns: f64,
    /// Lowest and highest per-run CPU time (ns).
    pub cpu_spread_ns: [f64; 2],
    /// Bytes copied by the CPU per message.
    pub cpu_copied_bytes: u64,
    /// Bytes copied by the kernel per message, where known.
    pub kernel_copied_bytes: Option<u64>,
    /// Bytes delivered by moving pages per message.
    pub swapped_bytes: u64,
    /// The path the library took, output and input, with its reasons.
    pub path: String,
    /// The page granule of the VM work (`4k`, `2m`, `mixed`), where page work was done.
    #[serde(default)]
    pub granule: Option<String>,
    /// Every message of every run arrived byte-exact.
    pub verified: bool,
    /// The messages of all runs split into a fast and a slow mode ([`Modes`]).
    #[serde(default)]
    pub modes: Option<Modes>,
    /// The runs.
    pub runs: Vec<Run>,
}

/// The messages of one point split by how the host scheduled them. Where a CPU that went idle
/// is slow to wake (a virtual machine that does not poll before halting) or another process
/// competes for the CPUs, a share of the messages waits for the scheduler and takes several
/// times the latency of the rest, whatever the semantics. A median of few messages then lands
/// in either mode. The fast mode is the data passing itself; the slow share says how much the
/// host intervened.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct Modes {
    /// Messages counted: every run's, its first (warm-up) message left out.
    pub messages: usize,
    /// Messages of the fast mode: at most [`Modes::SLOW_FACTOR`] times the 10th percentile.
    pub fast_messages: usize,
    /// Median latency of the fast mode (ns).
    pub fast_median_ns: f64,
    /// Share of the messages in the slow mode (0 to 1).
    pub slow_share: f64,
}

impl Modes {
    /// A message slower than this many times the 10th percentile of its point is in the slow
    /// mode: the wake-up of an idle CPU adds about a millisecond, several times a 2 MiB
    /// transfer, while the spread of undisturbed messages stays well within 2×.
    pub const SLOW_FACTOR: f64 = 2.0;

    /// Fewest fast messages from which the fast mode's median is taken as a measurement.
    pub const MIN_FAST: usize = 10;

    /// The modes of the runs' messages (`None` without messages).
    pub fn of(runs: &[Run]) -> Option<Modes> {
        let lat: Vec<f64> = runs
            .iter()
            .flat_map(|r| r.latencies_ns.iter().skip(1).map(|x| *x as f64))
            .collect();
        let p10 = fit::quantile(&lat, 0.1)?;
        let fast: Vec<f64> = lat
            .iter()
            .copied()
            .filter(|x| *x <= Self::SLOW_FACTOR * p10)
            .collect();
        Some(Modes {
            messages: lat.len(),
            fast_messages: fast.len(),
            fast_median_ns: fit::median(&fast)?,
            slow_share: 1.0 - fast.len() as f64 / lat.len() as f64,
        })
    }

    /// The fast mode's median where it holds enough messages.
    pub fn fast(&self) -> Option<f64> {
        (self.fast_messages >= Self::MIN_FAST).then_some(self.fast_median_ns)
    }
}

/// A fitted latency line of one contender.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct LatencyFit {
    /// Figure (`3`, `6`, `7`, `4` for CPU time).
    pub figure: String,
    /// Semantics.
    #[schemars(with = "String")]
    pub semantics: Semantics,
    /// Input buffering.
    #[schemars(with = "String")]
    pub input: InputBuffering,
    /// Thresholds.
    pub thresholds: Thresholds,
    /// Latency (or CPU time) against length.
    pub line: Line,
}

/// Copy bandwidths measured independently of Genie (the scaling model's Table 10 inputs).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Bandwidths {
    /// `memcpy` bandwidth by working-set size: (bytes, GB/s, median of repetitions).
    pub copy: Vec<(usize, f64)>,
    /// The wire: `vmsplice` into a pipe and `read` out of it, 1 MiB at a time (GB/s): the
    /// memory network's "transmission rate" (one kernel copy).
    pub wire_gbps: f64,
    /// Working set (bytes) taken as cache-resident (fits the L2 cache).
    pub cache_bytes: usize,
    /// Working set (bytes) taken as memory-resident (well beyond the last cache).
    pub memory_bytes: usize,
}

impl Bandwidths {
    /// Copy bandwidth (GB/s) at the working set closest to `bytes`.
    pub fn copy_at(&self, bytes: usize) -> f64 {
        self.copy
            .iter()
            .min_by_key(|(b, _)| b.abs_diff(bytes))
            .map_or(0.0, |x| x.1)
    }
}

/// One point of the system-throughput check (§8.2).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ThroughputPoint {
    /// Semantics.
    #[schemars(with = "String")]
    pub semantics: Semantics,
    /// Length of a work unit (bytes).
    pub bytes: usize,
    /// Application work asked for per unit (ns of CPU).
    pub t_app_ns: u64,
    /// Application CPU measured per unit (the work plus making and checking the data).
    pub t_app_measured_ns: f64,
    /// Concurrent sender/receiver pairs.
    pub pairs: usize,
    /// Measured system throughput (GB/s): all pairs' bytes over their run times.
    pub measured_gbps: f64,
    /// CPU utilization during the run (CPU time of all processes / (wall × CPUs)).
    pub cpu_utilization: f64,
}

/// Everything the Genie experiments measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct GenieResults {
    /// Figures 3, 6, 7: page-multiple lengths, every semantics and input scheme, zero-copy
    /// thresholds (plus emulated copy with the calibrated thresholds), instrumented.
    pub latency: Vec<Point>,
    /// Figure 5: short lengths, early demultiplexing, calibrated thresholds.
    pub short: Vec<Point>,
    /// Figure 4: CPU time per transfer, early demultiplexing, waits that sleep at once.
    pub cpu: Vec<Point>,
    /// The file (`O_DIRECT`) and kernel-socket modules: the path chosen and why.
    pub modules: Vec<Point>,
    /// Fitted lines of latency (Figures 3, 6, 7) and CPU time (Figure 4) against length.
    #[serde(default)]
    pub fits: Vec<LatencyFit>,
    /// Independent copy bandwidths.
    pub bandwidths: Option<Bandwidths>,
    /// §8.2 measured system throughput.
    pub throughput: Vec<ThroughputPoint>,
    /// Figure 3 at 2 MiB: huge-page buffers at both ends, every semantics (instrumented).
    #[serde(default)]
    pub huge: Vec<Point>,
    /// Figure 4 at 2 MiB: CPU time per transfer with huge-page buffers.
    #[serde(default)]
    pub huge_cpu: Vec<Point>,
    /// The 2 MiB series' control: emulated share into two receiving buffers in turn, so that
    /// each input lands in memory last used two messages earlier, as emulated copy's staging.
    #[serde(default)]
    pub huge_two_buffers: Vec<Point>,
    /// Why the 2 MiB series could not be measured here (huge pages unavailable), if so.
    #[serde(default)]
    pub huge_unavailable: Option<String>,
    /// The move family with and without region caching.
    #[serde(default)]
    pub regions: Option<crate::lab::genie::regions::Regions>,
    /// zcio's channel between two processes against iceoryx2 and a Unix socket
    /// (`zcio bench channel`).
    #[serde(default)]
    pub channel: Option<crate::lab::genie::channel::ChannelSection>,
    /// A numpy array between two Python processes, zcio's module against the others
    /// (`zcio bench python`).
    #[serde(default)]
    pub python: Option<crate::lab::genie::python::PythonSection>,
    /// A channel's throughput from C against the Rust API's (`zcio bench c`).
    #[serde(default)]
    pub c: Option<crate::lab::genie::c::CSection>,
}

/// The sizes and repetitions of each experiment, by preset.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Plan {
    /// Lengths of Figures 3, 4, 6, 7 (bytes).
    pub lengths: Vec<usize>,
    /// Lengths of Figure 5 (bytes).
    pub short_lengths: Vec<usize>,
    /// Rounds per point.
    pub rounds: usize,
    /// Messages per run.
    pub count: usize,
    /// Messages per run at short lengths.
    pub short_count: usize,
    /// Module comparison length (bytes).
    pub module_bytes: usize,
    /// §8.2: unit length, `t_APP` values (ns), pairs, units per pair.
    pub throughput_bytes: usize,
    /// See `throughput_bytes`.
    pub t_app_ns: Vec<u64>,
    /// See `throughput_bytes`.
    pub pairs: usize,
    /// See `throughput_bytes`.
    pub units: usize,
    /// Lengths of Figures 3 and 4 at 2 MiB (huge-page buffers), bytes; the CPU-time series
    /// stops at 16 MiB.
    #[serde(default)]
    pub huge_lengths: Vec<usize>,
    /// Rounds per point of the 2 MiB series.
    #[serde(default)]
    pub huge_rounds: usize,
    /// Messages per run of the 2 MiB series (at least 10, at most 256 MiB a run).
    #[serde(default)]
    pub huge_count: usize,
}

impl Plan {
    /// The plan of a preset.
    pub fn of(preset: Preset) -> Plan {
        let ps = zcio_vm::page_size();
        let doubling = |from: usize, to: usize| {
            std::iter::successors(Some(from), |x| Some(x * 2))
                .take_while(|x| *x <= to)
                .collect::<Vec<_>>()
        };
        match preset {
            Preset::Smoke => Plan {
                lengths: vec![ps, 4 * ps],
                short_lengths: vec![1, ps / 2, ps],
                rounds: 1,
                count: 4,
                short_count: 4,
                module_bytes: 4 * ps,
                throughput_bytes: 4 * ps,
                t_app_ns: vec![0, 100_000],
                pairs: 2,
                units: 10,
                huge_lengths: vec![2 << 20],
                huge_rounds: 1,
                huge_count: 2,
            },
            Preset::Quick => Plan {
                lengths: doubling(ps, 16 << 20),
                short_lengths: (0..=8).map(|i| (i * ps / 8).max(1)).collect(),
                rounds: 5,
                count: 40,
                short_count: 200,
                module_bytes: 64 * 1024,
                throughput_bytes: 256 * 1024,
                t_app_ns: vec![0, 50_000, 200_000, 800_000],
                pairs: 6,
                units: 60,
                huge_lengths: vec![2 << 20, 16 << 20, 64 << 20],
                huge_rounds: 3,
                huge_count: 100,
            },
            Preset::Full => {
                let mut lengths = doubling(ps, 64 << 20);
                lengths.push(15 * ps); // the paper's largest: 60 KB (AAL5)
                lengths.sort_unstable();
                Plan {
                    lengths,
                    short_lengths: (0..=16).map(|i| (i * ps / 16).max(1)).collect(),
                    rounds: 5,
                    count: 200,
                    short_count: 400,
                    module_bytes: 64 * 1024,
                    throughput_bytes: 256 * 1024,
                    t_app_ns: vec![0, 25_000, 50_000, 100_000, 200_000, 400_000, 800_000],
                    pairs: 6,
                    units: 200,
                    huge_lengths: doubling(2 << 20, 64 << 20),
                    huge_rounds: 5,
                    huge_count: 200,
                }
            }
        }
    }

    /// Runs (progress units) of each experiment: latency, short, cpu, modules, throughput.
    pub fn units(&self) -> [u64; 5] {
        let n_sem = Semantics::ALL.len();
        let lat = self.lengths.len() * self.rounds * (n_sem * 3 + 1);
        let short = self.short_lengths.len() * self.rounds * n_sem;
        let cpu = self.lengths.len() * self.rounds * n_sem;
        let modules = 3 * n_sem * self.rounds;
        let thr = 3 * self.t_app_ns.len();
        [lat, short, cpu, modules, thr].map(|x| x as u64)
    }
}

/// Progress reporting: what is running, and one unit done.
pub trait Progress {
    /// Say what runs now.
    fn what(&self, s: String);
    /// One unit done.
    fn inc(&self);
}

impl Progress for indicatif::ProgressBar {
    fn what(&self, s: String) {
        self.set_message(s);
    }
    fn inc(&self) {
        indicatif::ProgressBar::inc(self, 1);
    }
}

/// A contender: semantics, input buffering, thresholds.
/// A contender: semantics, input buffering, thresholds.
pub(crate) type Contender = (Semantics, InputBuffering, Thresholds);

fn run_args(
    c: Contender,
    module: ModuleKind,
    bytes: usize,
    count: usize,
    seed: u64,
) -> TransferArgs {
    TransferArgs {
        module,
        input: c.1,
        seed,
        force_zero_copy: c.2 == Thresholds::ZeroCopy,
        ..TransferArgs::memnet(c.0, bytes, count)
    }
}

fn f(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(0.0)
}

fn run_of(v: &serde_json::Value, round: usize) -> Run {
    let ops = v["ops"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|o| OpStat {
                    op: o["op"].as_str().unwrap_or("").into(),
                    phase: o["phase"].as_str().unwrap_or("").into(),
                    share_of_messages: f(o, "share_of_messages"),
                    calls_per_message: f(o, "calls_per_message"),
                    median_ns: f(o, "median_ns"),
                })
                .collect()
        })
        .unwrap_or_default();
    Run {
        round,
        latency_ns: f(v, "latency_ns"),
        latency_p10_ns: f(v, "latency_p10_ns"),
        latency_p90_ns: f(v, "latency_p90_ns"),
        cpu_ns: f(v, "cpu_ns"),
        app_cpu_ns: f(v, "app_cpu_ns"),
        messages_per_s: f(v, "messages_per_s"),
        latencies_ns: v["latencies_ns"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_u64()).collect())
            .unwrap_or_default(),
        ops,
    }
}

fn spread(v: &[f64]) -> [f64; 2] {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    [lo, hi]
}

pub(crate) fn point_of(
    c: Contender,
    module: ModuleKind,
    bytes: usize,
    last: &serde_json::Value,
    runs: Vec<Run>,
    verified: bool,
) -> Point {
    let lat: Vec<f64> = runs.iter().map(|r| r.latency_ns).collect();
    let cpu: Vec<f64> = runs.iter().map(|r| r.cpu_ns).collect();
    Point {
        semantics: c.0,
        input: c.1,
        module: module.to_string(),
        thresholds: c.2,
        bytes,
        latency_ns: fit::median(&lat).unwrap_or(0.0),
        latency_spread_ns: spread(&lat),
        cpu_ns: fit::median(&cpu).unwrap_or(0.0),
        cpu_spread_ns: spread(&cpu),
        cpu_copied_bytes: last["cpu_copied_bytes"].as_u64().unwrap_or(0),
        kernel_copied_bytes: last["kernel_copied_bytes"].as_u64(),
        swapped_bytes: last["swapped_bytes"].as_u64().unwrap_or(0),
        path: last["path"].as_str().unwrap_or("").into(),
        granule: last["granule"].as_str().map(str::to_string),
        verified,
        modes: Modes::of(&runs),
        runs,
    }
}

/// Run every contender at every length, `rounds` times, rotating the order from round to
/// round so that drift hits all contenders alike.
#[allow(clippy::too_many_arguments)]
pub(crate) fn sweep(
    contenders: &[Contender],
    module: ModuleKind,
    lengths: &[usize],
    rounds: usize,
    count: usize,
    tweak: &dyn Fn(&mut TransferArgs),
    progress: &dyn Progress,
    label: &str,
) -> Res<Vec<Point>> {
    let mut out = Vec::new();
    for &bytes in lengths {
        let mut runs: Vec<Vec<Run>> = vec![Vec::new(); contenders.len()];
        let mut last = vec![serde_json::Value::Null; contenders.len()];
        let mut ok = vec![true; contenders.len()];
        for round in 0..rounds {
            for k in 0..contenders.len() {
                let i = (k + round) % contenders.len();
                let c = contenders[i];
                progress.what(format!("{label}: {} {} {bytes} B", c.0, c.1));
                // Long messages need fewer of them for a stable median: at most 256 MiB a run.
                let n = count.min((256 << 20) / bytes).max(count.min(10));
                let mut a = run_args(c, module, bytes, n, 1 + round as u64);
                tweak(&mut a);
                let v = if module == ModuleKind::File {
                    crate::transfer::run_file_json(&a)?
                } else {
                    run_peer(&a)?
                };
                ok[i] &= v["verified"].as_bool() == Some(true);
                runs[i].push(run_of(&v, round));
                last[i] = v;
                progress.inc();
            }
        }
        for (i, c) in contenders.iter().enumerate() {
            out.push(point_of(
                *c,
                module,
                bytes,
                &last[i],
                std::mem::take(&mut runs[i]),
                ok[i],
            ));
        }
    }
    Ok(out)
}

/// Bring the machine to its steady state before measuring: on an idle (virtual) machine the
/// first few hundred messages run several times slower than the rest while CPUs wake up.
pub fn warm_up() -> Res<()> {
    run_peer(&TransferArgs::memnet(
        Semantics::EmulatedShare,
        64 * 1024,
        3000,
    ))?;
    Ok(())
}

/// Figures 3, 6, 7 (instrumented for the breakdown model).
pub fn latency(plan: &Plan, p: &dyn Progress) -> Res<Vec<Point>> {
    let mut cs = Vec::new();
    for input in [
        InputBuffering::EarlyDemux,
        InputBuffering::PooledAligned,
        InputBuffering::PooledUnaligned,
    ] {
        for s in Semantics::ALL {
            cs.push((s, input, Thresholds::ZeroCopy));
        }
    }
    cs.push((
        Semantics::EmulatedCopy,
        InputBuffering::EarlyDemux,
        Thresholds::Calibrated,
    ));
    sweep(
        &cs,
        ModuleKind::Memnet,
        &plan.lengths,
        plan.rounds,
        plan.count,
        &|a| a.breakdown = true,
        p,
        "latency",
    )
}

/// Every semantics with early demultiplexing under `t`.
fn early_demux(t: Thresholds) -> Vec<Contender> {
    Semantics::ALL
        .iter()
        .map(|s| (*s, InputBuffering::EarlyDemux, t))
        .collect()
}

/// Figure 5: short lengths with the calibrated thresholds.
pub fn short(plan: &Plan, p: &dyn Progress) -> Res<Vec<Point>> {
    sweep(
        &early_demux(Thresholds::Calibrated),
        ModuleKind::Memnet,
        &plan.short_lengths,
        plan.rounds,
        plan.short_count,
        &|_| {},
        p,
        "short",
    )
}

/// Figure 4: CPU time per transfer; waits sleep at once so that idle time costs no CPU.
pub fn cpu(plan: &Plan, p: &dyn Progress) -> Res<Vec<Point>> {
    sweep(
        &early_demux(Thresholds::ZeroCopy),
        ModuleKind::Memnet,
        &plan.lengths,
        plan.rounds,
        plan.count,
        &|a| a.no_spin = true,
        p,
        "cpu",
    )
}

/// The file module (`O_DIRECT`) and kernel sockets, every semantics with the calibrated
/// thresholds: which path the library chose and why.
pub fn modules(plan: &Plan, dir: &std::path::Path, p: &dyn Progress) -> Res<Vec<Point>> {
    let cs = early_demux(Thresholds::Calibrated);
    let mut out = Vec::new();
    let count = (plan.count / 2).max(2);
    for m in [ModuleKind::File, ModuleKind::Unix, ModuleKind::Tcp] {
        let d = dir.to_path_buf();
        out.extend(sweep(
            &cs,
            m,
            &[plan.module_bytes],
            plan.rounds,
            count,
            &|a| a.dir = Some(d.clone()),
            p,
            "modules",
        )?);
    }
    Ok(out)
}

/// Least-squares lines of latency against length per contender of Figures 3, 6, 7, and of CPU
/// time for Figure 4.
pub fn fits(latency: &[Point], cpu: &[Point]) -> Vec<LatencyFit> {
    let mut out = Vec::new();
    let mut keys: Vec<Contender> = Vec::new();
    for pt in latency {
        let k = (pt.semantics, pt.input, pt.thresholds);
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let figure = |i: InputBuffering| match i {
        InputBuffering::PooledAligned => "6",
        InputBuffering::PooledUnaligned => "7",
        _ => "3",
    };
    for k in keys {
        let pts: Vec<(f64, f64)> = latency
            .iter()
            .filter(|p| (p.semantics, p.input, p.thresholds) == k)
            .map(|p| (p.bytes as f64, p.latency_ns))
            .collect();
        if let Ok(line) = fit::relative_least_squares(&pts) {
            out.push(LatencyFit {
                figure: figure(k.1).into(),
                semantics: k.0,
                input: k.1,
                thresholds: k.2,
                line,
            });
        }
    }
    for s in Semantics::ALL {
        let pts: Vec<(f64, f64)> = cpu
            .iter()
            .filter(|p| p.semantics == s)
            .map(|p| (p.bytes as f64, p.cpu_ns))
            .collect();
        if let Ok(line) = fit::relative_least_squares(&pts) {
            out.push(LatencyFit {
                figure: "4".into(),
                semantics: s,
                input: InputBuffering::EarlyDemux,
                thresholds: Thresholds::ZeroCopy,
                line,
            });
        }
    }
    out
}

/// §8.2: `pairs` sender/receiver pairs at once, each receiver doing `t_app` of CPU work per
/// unit; the system throughput is all pairs' bytes over their run times.
pub fn throughput(plan: &Plan, p: &dyn Progress) -> Res<Vec<ThroughputPoint>> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let mut out = Vec::new();
    for &t_app in &plan.t_app_ns {
        for s in [
            Semantics::Copy,
            Semantics::EmulatedCopy,
            Semantics::EmulatedShare,
        ] {
            p.what(format!("throughput: {s}, t_APP {} µs", t_app / 1000));
            let a = TransferArgs {
                no_spin: true,
                app_work_ns: t_app,
                force_zero_copy: true,
                ..TransferArgs::memnet(s, plan.throughput_bytes, plan.units)
            };
            // Each pair is its own two processes (`zcio transfer`), as independent
            // applications would be.
            let cpu0 = crate::transfer::children_and_self_cpu_ns();
            let t0 = Instant::now();
            let children = (0..plan.pairs)
                .map(|_| -> Res<std::process::Child> {
                    Ok(crate::transfer::zcio_command()?
                        .args(a.command_line())
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped())
                        .spawn()?)
                })
                .collect::<Res<Vec<_>>>()?;
            let outputs: Vec<_> = children
                .into_iter()
                .map(|c| c.wait_with_output())
                .collect::<Result<_, _>>()?;
            let wall = t0.elapsed().as_nanos() as f64;
            let cpu = (crate::transfer::children_and_self_cpu_ns() - cpu0) as f64;
            let mut gbps = 0.0;
            let mut app = Vec::new();
            for o in outputs {
                if !o.status.success() {
                    return Err(format!(
                        "throughput pair failed ({}): {}",
                        o.status,
                        String::from_utf8_lossy(&o.stderr).trim()
                    )
                    .into());
                }
                let v: serde_json::Value = serde_json::from_slice(&o.stdout)?;
                gbps += f(&v, "messages_per_s") * plan.throughput_bytes as f64 / 1e9;
                app.push(f(&v, "app_cpu_ns"));
            }
            out.push(ThroughputPoint {
                semantics: s,
                bytes: plan.throughput_bytes,
                t_app_ns: t_app,
                t_app_measured_ns: fit::median(&app).unwrap_or(0.0),
                pairs: plan.pairs,
                measured_gbps: gbps,
                cpu_utilization: cpu / (wall * cpus),
            });
            p.inc();
        }
    }
    Ok(out)
}
