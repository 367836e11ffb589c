//! `zcio bench splice`: paper 003's peer-to-peer I/O against a read/write loop, on this
//! machine, for file→socket, file→file and socket→file: throughput, the latency of one 64 KiB
//! increment, and **CPU availability**: the progress of a CPU-bound task sharing the
//! transfer's core while the transfer runs at a fixed pace (as a video stream would), against
//! its progress alone. The transfer and the task are pinned to CPU 0; a socket's other end runs
//! on CPU 1. The task runs at the lowest priority (nice 19), as a background job does: the
//! transfer runs whenever its next increment is due, and the task gets the CPU it leaves. (At
//! equal priority the scheduler would share the core evenly while both run, and the run would
//! measure the scheduler's fairness more than the transfer's cost.)
//!
//! # Checking what is timed
//!
//! What every sink receives, in every pair and variant, is checked against what was sent
//! ([`Stream`]: the source file over and over, or the first MiB a socket source's writer
//! repeats; the data carries a stamp of its offset every [`STAMP_EVERY`] bytes, [`data`]),
//! and so is its length; a difference fails the run with a [`ContentError`] naming the pair,
//! the variant, the run and the byte. No check runs in the time a run measures:
//!
//! - A file sink: every byte. Throughput runs read it back after the clock has stopped.
//!   Paced runs check it before each time they empty it (every 256 MiB) with the task held
//!   and the clock and the pace stopped, and the rest once the clock has stopped.
//! - A socket sink: every stamp (8 bytes of every 4 KiB). Its reader reads into one buffer,
//!   as a reader that throws the data away does, and keeps the stamps it reads (in memory
//!   written before the clock starts); a throughput run compares them after the clock has
//!   stopped, a paced run as they come (on CPU 1, which the paced run does not measure). A
//!   lost, repeated, reordered, shifted or truncated range shows; a byte changed inside a
//!   4 KiB block does not: the reader is what a throughput run waits on, and keeping every
//!   byte for later slowed sendfile into the socket by two thirds where it was tried (2 cores,
//!   64 MiB), comparing every byte as it came by a quarter.
//!
//! [`Fault`] spoils one byte of one contender's sink on purpose, to see the check notice.

use crate::report::fit;
use crate::transfer::Res;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::sync::Arc;
use std::time::Instant;

use super::ends::*;
use super::paced::{Runs, at_pace, background, task_alone};
pub use super::stream::*;

/// Arguments of `zcio bench splice`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SpliceArgs {
    /// Bytes per throughput run, MiB (default 64).
    #[arg(long)]
    pub mib: Option<u64>,
    /// Rounds: both variants once per round, alternating (default 5).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Seconds of each paced run for CPU availability (default 1).
    #[arg(long)]
    pub seconds: Option<f64>,
    /// The paces of the availability runs, as fractions of the slower variant's throughput
    /// (default 0.25,0.5,0.8): a paced source as slow or as fast as the device it stands for.
    #[arg(long = "pace", alias = "paces", value_delimiter = ',')]
    pub pace: Option<Vec<f64>>,
    /// KiB each step of a paced run moves: the unit in which the paced source delivers, as a
    /// device delivers blocks or frames (default 64). Each step costs the transfer a wakeup,
    /// whichever the variant.
    #[arg(long)]
    pub paced_kib: Option<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Testing: spoil one byte of what PAIR:VARIANT delivers in its throughput runs
    /// (PAIR:VARIANT:paced: in its paced runs), and the run must fail, naming it.
    #[arg(long, hide = true)]
    pub fault: Option<Fault>,
}

impl SpliceArgs {
    /// The paces asked for, slowest first (default 25, 50 and 80 % of the slower variant's
    /// throughput), each between 5 % and 100 %.
    pub fn paces(&self) -> Vec<f64> {
        let mut paces: Vec<f64> = self
            .pace
            .clone()
            .unwrap_or_else(|| vec![0.25, 0.5, 0.8])
            .into_iter()
            .filter(|f| f.is_finite())
            .map(|f| f.clamp(0.05, 1.0))
            .collect();
        paces.sort_by(f64::total_cmp);
        paces.dedup();
        if paces.is_empty() {
            paces.push(0.5);
        }
        paces
    }

    /// Steps `measure` reports progress for: each pair at each pace.
    pub fn steps(&self) -> u64 {
        (PAIRS.len() * self.paces().len()) as u64
    }
}

/// One variant on one pair.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Row {
    /// `file_to_socket`, `file_to_file` or `socket_to_file`.
    pub pair: String,
    /// `splice` or `read_write`.
    pub variant: String,
    /// What carried the splice (`copy_file_range`, `sendfile`, `splice`), or `read/write`.
    pub mechanism: String,
    /// Bytes per throughput run.
    pub bytes: u64,
    /// Throughput, median over rounds (Gbit/s).
    pub gbps: f64,
    /// Lowest and highest round (Gbit/s).
    pub gbps_spread: [f64; 2],
    /// One 64 KiB increment, median over every increment of every round (µs).
    pub latency_us: f64,
    /// The transfer thread's CPU time (user and system) per MiB moved in the throughput runs,
    /// median over rounds (µs). Work the kernel does elsewhere (the socket's other end,
    /// interrupts) is not in it.
    pub cpu_us_per_mib: f64,
    /// The pace of the availability runs at the pair's chosen pace ([`Verdict::pace_fraction`], Gbit/s):
    /// the same for both variants of a pair.
    pub pace_gbps: f64,
    /// Bytes moved in those runs over the time they took (Gbit/s): the pace, if the variant
    /// kept it.
    pub paced_gbps: f64,
    /// The CPU-bound task's progress during those runs over its progress alone, median over
    /// rounds (1: the transfer took no CPU from it).
    pub cpu_availability: f64,
    /// The same at every pace measured, slowest first (absent: from before more than one was).
    #[serde(default)]
    pub paced: Vec<Paced>,
}

/// A variant's availability runs at one pace.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Paced {
    /// The pace as a fraction of the slower variant's throughput.
    pub fraction: f64,
    /// The pace (Gbit/s).
    pub pace_gbps: f64,
    /// Bytes moved over the time the runs took (Gbit/s), median over rounds.
    pub paced_gbps: f64,
    /// The task's progress over its progress alone, median over rounds.
    pub cpu_availability: f64,
    /// Lowest and highest round.
    pub cpu_availability_spread: [f64; 2],
}

impl Paced {
    /// Whether the variant kept the pace (moved at least 97 % of it).
    pub fn kept(&self) -> bool {
        self.paced_gbps >= 0.97 * self.pace_gbps
    }
}

/// Splice against the read/write loop on one pair.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Verdict {
    /// The pair.
    pub pair: String,
    /// Splice's throughput over the loop's (zcio's target: at least 1).
    pub throughput_ratio: f64,
    /// The task's progress with splice over its progress with the loop (zcio's target: at
    /// least 1.3: 30 % more CPU left).
    pub availability_ratio: f64,
    /// The loop's increment latency over splice's.
    pub latency_ratio: f64,
    /// The loop's CPU time per byte over splice's: how many times less CPU the splice spends
    /// moving the same data.
    pub cpu_ratio: f64,
    /// The pace `availability_ratio` is at, as a fraction of the slower variant's throughput:
    /// of the paces measured, the fastest that both variants kept on this pair (a device as
    /// fast as both can serve), else the slowest (absent: from before more than one was).
    #[serde(default)]
    pub pace_fraction: Option<f64>,
    /// The task's progress with splice over its progress with the loop at every pace measured,
    /// as (pace fraction, ratio), slowest first (absent: from before more than one was).
    #[serde(default)]
    pub availability_by_pace: Vec<[f64; 2]>,
}

/// Everything `zcio bench splice` measured.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SpliceSection {
    /// Rounds.
    pub rounds: usize,
    /// Seconds per paced run.
    pub seconds: f64,
    /// The fastest pace measured, as a fraction of the slower variant's throughput (each
    /// pair's rows and verdict give the fastest that both its variants kept:
    /// [`Verdict::pace_fraction`]).
    pub pace_fraction: f64,
    /// Every pace measured, slowest first (absent: from before more than one was).
    #[serde(default)]
    pub paces: Vec<f64>,
    /// Bytes each step of a paced run moves (absent: 64 KiB, from before it could be chosen).
    #[serde(default)]
    pub paced_step: Option<usize>,
    /// Whether the transfer and the task could be pinned to one CPU (else the scheduler put
    /// them where it liked, and availability says less).
    pub pinned: bool,
    /// Whether the task ran at the lowest priority (nice 19), so that the transfer ran
    /// whenever it had work (absent: from before it did, at equal priority).
    #[serde(default)]
    pub task_background: bool,
    /// The file system the files lived on (`ext4`, `tmpfs`, `xfs`, `btrfs`, ...: whether
    /// copy_file_range can share blocks or copies in the kernel depends on it).
    pub files_fs: String,
    /// Per pair and variant.
    pub rows: Vec<Row>,
    /// Per pair.
    pub verdicts: Vec<Verdict>,
}

/// One contender on one pair, in one run: what it moves and where.
pub(super) struct Job<'a> {
    pub(super) pair: &'static str,
    pub(super) variant: &'static str,
    /// The source file (a file source reads it; every run starts at its start).
    pub(super) src: &'a File,
    /// What the sink must receive.
    pub(super) stream: &'a Stream,
    /// Where a file sink goes.
    pub(super) dir: &'a std::path::Path,
    /// Spoil one byte of the sink ([`Fault`]).
    pub(super) fault: bool,
}

impl Job<'_> {
    /// The pair's two ends for a run in `mode`: the source, the sink and the peer thread.
    pub(super) fn ends(&self, mode: Mode) -> Res<Ends> {
        ends(self.pair, self.src, self.dir, mode, self.stream)
    }
}

/// One throughput run of `bytes`: (Gbit/s, per-step latencies in µs, mechanism, the transfer
/// thread's CPU time per MiB in µs). Once the clock has stopped, what the sink received is
/// checked against the stream (module docs), and its length.
pub(super) fn throughput(j: &Job<'_>, bytes: u64) -> Res<(f64, Vec<f64>, String, f64)> {
    let Job {
        pair,
        variant,
        stream,
        fault,
        ..
    } = *j;
    let e = j.ends(Mode::Throughput(bytes))?;
    let mut m = Mover::new(variant, &e, STEP)?;
    let mechanism = m.mechanism();
    let mut lat = Vec::new();
    let mut moved = 0u64;
    let mut spoiled = !fault;
    let cpu0 = thread_cpu_ns();
    let t = Instant::now();
    while moved < bytes {
        let s = Instant::now();
        let n = m.step(&e)?;
        lat.push(s.elapsed().as_nanos() as f64 / 1e3);
        if n == 0 {
            break;
        }
        moved += n;
        if !spoiled && moved >= bytes / 2 {
            spoil(&e, stream, moved, moved)?;
            spoiled = true;
        }
    }
    let ns = t.elapsed().as_nanos() as f64;
    let cpu_us_per_mib = (thread_cpu_ns() - cpu0) / 1e3 / (bytes as f64 / (1u64 << 20) as f64);
    // The clock has stopped: check what the sink received.
    drop(m);
    let Ends {
        source, sink, peer, ..
    } = e;
    drop(source);
    let socket_sink = matches!(sink, Endpoint::Socket(_));
    let mut received = 0;
    match sink {
        Endpoint::File(mut f) => {
            // Every byte.
            let mut got = Vec::with_capacity(bytes as usize);
            f.seek(SeekFrom::Start(0))?;
            f.read_to_end(&mut got)?;
            check(pair, variant, "throughput", stream, &got, 0)?;
            received = got.len() as u64;
        }
        Endpoint::Socket(s) => drop(s),
    }
    if let Some(p) = peer {
        let p = p.join().map_err(|_| "the peer thread panicked")?;
        if socket_sink {
            // The stamps its reader kept.
            received = p.moved;
            for (at, _, len) in stamp_spans(received.min(bytes) as usize, 0) {
                let p8 = 8 * (at / STAMP_EVERY as u64) as usize;
                let kept = &p.stamps[p8..p8 + len];
                check(pair, variant, "throughput", stream, kept, at)?;
            }
        } else if p.moved != bytes {
            return Err(format!(
                "{pair} by {variant}: the peer wrote {} bytes of {bytes}",
                p.moved
            )
            .into());
        }
    }
    if received != bytes {
        return Err(ContentError {
            pair,
            variant,
            run: "throughput",
            wrong: Wrong::Length {
                received,
                expected: bytes,
            },
        }
        .into());
    }
    if moved != bytes {
        return Err(format!("{pair} by {variant}: moved {moved} bytes of {bytes}").into());
    }
    Ok((8.0 * bytes as f64 / ns, lat, mechanism, cpu_us_per_mib))
}

/// Run every pair and variant; `progress` is told each step.
pub fn measure(a: &SpliceArgs, progress: &mut dyn FnMut(String)) -> Res<SpliceSection> {
    let bytes = a.mib.unwrap_or(64).max(1) << 20;
    let rounds = a.rounds.unwrap_or(5).max(1);
    let seconds = a.seconds.unwrap_or(1.0).clamp(0.05, 60.0);
    let paces = a.paces();
    let paced_step = a.paced_kib.unwrap_or(64).clamp(4, 16 << 10) << 10;
    let dir = tempfile::tempdir()?;
    let data: Arc<[u8]> = data(bytes as usize).into();
    let src = {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("source"))?;
        f.write_all(&data)?;
        f.sync_all()?;
        f
    };
    let streams: Vec<Stream> = PAIRS.iter().map(|p| stream_of(p, &data)).collect();
    let job = |pair: &'static str, variant: &'static str, paced: bool| Job {
        pair,
        variant,
        src: &src,
        stream: &streams[PAIRS.iter().position(|p| *p == pair).expect("a pair")],
        dir: dir.path(),
        fault: a
            .fault
            .as_ref()
            .is_some_and(|f| f.hits(pair, variant, paced)),
    };
    let cpus = allowed_cpus();
    let pinned = pin(0);
    // Whether a thread can lower its priority here (the task's thread does the same).
    let task_background = std::thread::spawn(background).join().unwrap_or(false);
    let result = (|| -> Res<SpliceSection> {
        let alone = task_alone(seconds.min(0.5));
        let mut rows = Vec::new();
        let mut verdicts = Vec::new();
        for pair in PAIRS {
            let mut gbps: Vec<Vec<f64>> = vec![Vec::new(); 2];
            let mut lat: Vec<Vec<f64>> = vec![Vec::new(); 2];
            let mut mech = vec![String::new(); 2];
            let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); 2];
            for r in 0..rounds {
                for k in 0..2 {
                    let v = (k + r) % 2;
                    let (g, l, m, c) = throughput(&job(pair, VARIANTS[v], false), bytes)?;
                    gbps[v].push(g);
                    cpu[v].push(c);
                    lat[v].extend(l);
                    mech[v] = m;
                }
            }
            let med: Vec<f64> = gbps
                .iter()
                .map(|v| fit::median(v).unwrap_or(f64::NAN))
                .collect();
            let mut paced_points: Vec<Vec<Paced>> = vec![Vec::new(); 2];
            for &fraction in &paces {
                let pace = fraction * med[0].min(med[1]);
                let jobs = [job(pair, VARIANTS[0], true), job(pair, VARIANTS[1], true)];
                let runs = Runs {
                    rounds: rounds.min(3),
                    step: paced_step,
                    seconds,
                    alone,
                };
                for (v, point) in at_pace(&jobs, fraction, pace, &runs)?
                    .into_iter()
                    .enumerate()
                {
                    paced_points[v].push(point);
                }
                progress(format!("splice {pair} at {:.0} % pace", 100.0 * fraction));
            }
            let (pair_rows, verdict) = pair_rows(
                pair,
                bytes,
                Samples {
                    gbps,
                    lat,
                    cpu,
                    mech,
                },
                paced_points,
            );
            verdicts.push(verdict);
            rows.extend(pair_rows);
        }
        settle(&mut rows, &mut verdicts);
        Ok(SpliceSection {
            rounds,
            seconds,
            pace_fraction: paces[paces.len() - 1],
            paces,
            paced_step: Some(paced_step),
            pinned,
            task_background,
            files_fs: fs_name(dir.path()),
            rows,
            verdicts,
        })
    })();
    restore_cpus(cpus);
    result
}

/// One pair's throughput runs, per variant.
struct Samples {
    gbps: Vec<Vec<f64>>,
    lat: Vec<Vec<f64>>,
    cpu: Vec<Vec<f64>>,
    mech: Vec<String>,
}

/// One pair's rows and verdict from its runs (availability still to be settled).
fn pair_rows(
    pair: &'static str,
    bytes: u64,
    x: Samples,
    paced_points: Vec<Vec<Paced>>,
) -> (Vec<Row>, Verdict) {
    let Samples {
        gbps,
        lat,
        cpu,
        mech,
    } = x;
    let med: Vec<f64> = gbps
        .iter()
        .map(|v| fit::median(v).unwrap_or(f64::NAN))
        .collect();
    let mut pair_rows = Vec::new();
    for (v, paced) in paced_points.into_iter().enumerate() {
        pair_rows.push(Row {
            pair: pair.into(),
            variant: VARIANTS[v].into(),
            mechanism: mech[v].clone(),
            bytes,
            gbps: med[v],
            gbps_spread: fit::spread(&gbps[v]),
            latency_us: fit::median(&lat[v]).unwrap_or(f64::NAN),
            cpu_us_per_mib: fit::median(&cpu[v]).unwrap_or(f64::NAN),
            pace_gbps: f64::NAN,
            paced_gbps: f64::NAN,
            cpu_availability: f64::NAN,
            paced,
        });
    }
    let verdict = Verdict {
        pair: pair.into(),
        throughput_ratio: pair_rows[0].gbps / pair_rows[1].gbps,
        availability_ratio: f64::NAN,
        pace_fraction: None,
        latency_ratio: pair_rows[1].latency_us / pair_rows[0].latency_us,
        cpu_ratio: pair_rows[1].cpu_us_per_mib / pair_rows[0].cpu_us_per_mib,
        availability_by_pace: pair_rows[0]
            .paced
            .iter()
            .zip(&pair_rows[1].paced)
            .map(|(s, l)| [s.fraction, s.cpu_availability / l.cpu_availability])
            .collect(),
    };
    (pair_rows, verdict)
}

/// Each pair's availability at the fastest pace both its variants kept, else the slowest.
fn settle(rows: &mut [Row], verdicts: &mut [Verdict]) {
    for v in verdicts.iter_mut() {
        let mine = |r: &&mut Row| r.pair == v.pair;
        let kept_by_both = |f: f64| {
            rows.iter()
                .filter(|r| r.pair == v.pair)
                .all(|r| r.paced.iter().any(|p| p.fraction == f && p.kept()))
        };
        let Some(slowest) = v.availability_by_pace.first().map(|p| p[0]) else {
            continue;
        };
        let fraction = v
            .availability_by_pace
            .iter()
            .rev()
            .map(|p| p[0])
            .find(|&f| kept_by_both(f))
            .unwrap_or(slowest);
        for r in rows.iter_mut().filter(mine) {
            if let Some(p) = r.paced.iter().find(|p| p.fraction == fraction) {
                r.pace_gbps = p.pace_gbps;
                r.paced_gbps = p.paced_gbps;
                r.cpu_availability = p.cpu_availability;
            }
        }
        if let Some(&[_, x]) = v.availability_by_pace.iter().find(|p| p[0] == fraction) {
            v.availability_ratio = x;
            v.pace_fraction = Some(fraction);
        }
    }
}

/// Run the benchmark and print it.
pub fn run(a: SpliceArgs) -> Res<()> {
    let Some(s) = crate::run_bench("splice", a.steps(), a.json, |p| measure(&a, p))? else {
        return Ok(());
    };
    println!(
        "{:<15} {:<11} {:<16} {:>9} {:>11} {:>11} {:>10} {:>10} {:>10}",
        "pair",
        "variant",
        "mechanism",
        "Gbit/s",
        "64 KiB µs",
        "CPU µs/MiB",
        "pace",
        "kept",
        "CPU left"
    );
    for r in &s.rows {
        println!(
            "{:<15} {:<11} {:<16} {:>9.2} {:>11.1} {:>11.1} {:>10.2} {:>10.2} {:>9.0} %",
            r.pair,
            r.variant,
            r.mechanism,
            r.gbps,
            r.latency_us,
            r.cpu_us_per_mib,
            r.pace_gbps,
            r.paced_gbps,
            100.0 * r.cpu_availability
        );
    }
    println!(
        "(pace and CPU left per pair at the fastest pace both its variants kept, of those measured)"
    );
    for v in &s.verdicts {
        let by_pace: Vec<String> = v
            .availability_by_pace
            .iter()
            .map(|[f, x]| format!("{x:.2}× at {:.0} %", 100.0 * f))
            .collect();
        println!(
            "{}: splice {:.2}× the loop's throughput (target ≥ 1), {:.2}× its CPU left to the task at {:.0} % pace (target ≥ 1.3; {}), {:.2}× faster per increment, {:.2}× less CPU per byte",
            v.pair,
            v.throughput_ratio,
            v.availability_ratio,
            100.0 * v.pace_fraction.unwrap_or(s.pace_fraction),
            by_pace.join(", "),
            v.latency_ratio,
            v.cpu_ratio
        );
    }
    if !s.pinned {
        println!("(one CPU: the transfer and the task were not pinned)");
    }
    // A run whose sink received a wrong byte or length would have failed the bench.
    println!(
        "checked outside the time measured, in {} throughput and {} paced runs: every byte of every file sink, every 4 KiB stamp of every socket sink, every length: no difference",
        s.rows.len() * s.rounds,
        s.rows.len() * s.rounds.min(3) * s.paces.len().max(1)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_pinned_for_the_runs_gets_every_cpu_it_had_back_and_so_do_its_new_threads() {
        std::thread::spawn(|| {
            let before = allowed_cpus().expect("the thread's CPUs");
            let had = before.count();
            if !pin(0) {
                assert_eq!(had, 1, "pinning is refused only on one CPU");
                return;
            }
            assert_eq!(allowed_cpus().unwrap().count(), 1);
            restore_cpus(Some(before));
            assert_eq!(allowed_cpus().unwrap().count(), had);
            let started = std::thread::spawn(|| allowed_cpus().unwrap().count());
            assert_eq!(
                started.join().unwrap(),
                had,
                "a thread started after the runs"
            );
        })
        .join()
        .unwrap();
    }

    fn point(fraction: f64, kept: f64, left: f64) -> Paced {
        Paced {
            fraction,
            pace_gbps: 10.0 * fraction,
            paced_gbps: kept * 10.0 * fraction,
            cpu_availability: left,
            cpu_availability_spread: [left, left],
        }
    }

    #[test]
    fn each_pair_is_given_at_the_fastest_pace_both_its_variants_kept() {
        let runs = |pair: &'static str, loop_kept_fastest: f64| {
            let splice = vec![point(0.25, 1.0, 0.8), point(0.8, 1.0, 0.6)];
            let looped = vec![point(0.25, 1.0, 0.7), point(0.8, loop_kept_fastest, 0.2)];
            let samples = Samples {
                gbps: vec![vec![2.0], vec![1.0]],
                lat: vec![vec![1.0], vec![2.0]],
                cpu: vec![vec![1.0], vec![2.0]],
                mech: vec!["sendfile".into(), "read/write".into()],
            };
            pair_rows(pair, 1, samples, vec![splice, looped])
        };
        let (mut rows, a) = runs("file_to_socket", 1.0);
        let (more, b) = runs("socket_to_file", 0.5);
        rows.extend(more);
        let mut verdicts = vec![a, b];
        settle(&mut rows, &mut verdicts);
        // Both kept 80 % on the first pair: 0.6 / 0.2.
        assert_eq!(verdicts[0].pace_fraction, Some(0.8));
        assert!((verdicts[0].availability_ratio - 3.0).abs() < 1e-9);
        assert_eq!(rows[1].cpu_availability, 0.2);
        // The loop fell behind at 80 % on the second: 25 %, 0.8 / 0.7.
        assert_eq!(verdicts[1].pace_fraction, Some(0.25));
        assert!((verdicts[1].availability_ratio - 0.8 / 0.7).abs() < 1e-9);
        assert_eq!(rows[3].cpu_availability, 0.7);
        assert_eq!(rows[3].paced_gbps, 2.5);
        assert_eq!(verdicts[1].availability_by_pace.len(), 2);
    }
}
