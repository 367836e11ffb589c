//! `zcio bench splice`: paper 003's peer-to-peer I/O against a read/write loop, on this
//! machine, for file→socket, file→file and socket→file: throughput, the latency of one 64 KiB
//! increment, and **CPU availability**: the progress of a CPU-bound task sharing the
//! transfer's core while the transfer runs at a fixed pace (as a video stream would), against
//! its progress alone. The transfer and the task are pinned to CPU 0; a socket's other end runs
//! on CPU 1.
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::ends::*;
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
    /// The pace, as a fraction of the slower variant's throughput (default 0.5).
    #[arg(long)]
    pub pace: Option<f64>,
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
    /// The pace of the availability runs (Gbit/s): the same for both variants of a pair.
    pub pace_gbps: f64,
    /// Bytes moved in the availability runs over the time they took (Gbit/s): the pace, if
    /// the variant kept it.
    pub paced_gbps: f64,
    /// The CPU-bound task's progress during the paced transfer over its progress alone, median
    /// over rounds (1: the transfer took no CPU from it).
    pub cpu_availability: f64,
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
}

/// Everything `zcio bench splice` measured.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SpliceSection {
    /// Rounds.
    pub rounds: usize,
    /// Seconds per paced run.
    pub seconds: f64,
    /// The pace as a fraction of the slower variant's throughput.
    pub pace_fraction: f64,
    /// Bytes each step of a paced run moves (absent: 64 KiB, from before it could be chosen).
    #[serde(default)]
    pub paced_step: Option<usize>,
    /// Whether the transfer and the task could be pinned to one CPU (else the scheduler put
    /// them where it liked, and availability says less).
    pub pinned: bool,
    /// The file system the files lived on (`ext4`, `tmpfs`, `xfs`, `btrfs`, ...: whether
    /// copy_file_range can share blocks or copies in the kernel depends on it).
    pub files_fs: String,
    /// Per pair and variant.
    pub rows: Vec<Row>,
    /// Per pair.
    pub verdicts: Vec<Verdict>,
}

/// A paced run's way to stop the task while it checks a file sink, so that the check takes
/// neither the task's progress nor the run's time.
#[derive(Debug, Default)]
pub(super) struct Hold {
    /// The run asks the task to stop.
    asked: AtomicBool,
    /// The task has stopped (its count stored).
    held: AtomicBool,
}

/// Spin until `stop`, counting iterations: the CPU-bound task. It waits, its count up to
/// date, while `hold` asks it to.
pub(super) fn task(
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
    cpu: usize,
    hold: Arc<Hold>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        pin(cpu);
        let mut x = 0x9E37_79B9u64;
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            if hold.asked.load(Ordering::Acquire) {
                count.store(n, Ordering::Relaxed);
                hold.held.store(true, Ordering::Release);
                while hold.asked.load(Ordering::Acquire) && !stop.load(Ordering::Relaxed) {
                    std::thread::park_timeout(Duration::from_millis(1));
                }
                hold.held.store(false, Ordering::Release);
                continue;
            }
            for _ in 0..1000 {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
            }
            n += 1;
            if n % 64 == 0 {
                count.store(n, Ordering::Relaxed);
            }
        }
        count.store(n, Ordering::Relaxed);
        std::hint::black_box(x);
    })
}

/// The task's iterations per second alone on CPU 0.
pub(super) fn task_alone(seconds: f64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let h = task(stop.clone(), count.clone(), 0, Arc::default());
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    h.join().expect("task");
    count.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64()
}

/// One contender on one pair, in one run: what it moves and where.
pub(super) struct Job<'a> {
    pair: &'static str,
    variant: &'static str,
    /// The source file (a file source reads it; every run starts at its start).
    src: &'a File,
    /// What the sink must receive.
    stream: &'a Stream,
    /// Where a file sink goes.
    dir: &'a std::path::Path,
    /// Spoil one byte of the sink ([`Fault`]).
    fault: bool,
}

impl Job<'_> {
    /// The pair's two ends for a run in `mode`: the source, the sink and the peer thread.
    fn ends(&self, mode: Mode) -> Res<Ends> {
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

/// One paced run at `pace_gbps` for `seconds`: (bytes moved per second in Gbit/s, the task's
/// progress over `alone`). What the sink receives is checked against the stream (module docs:
/// a file sink before each time the run empties it, the task held and the clock stopped, and
/// after the run; a socket sink's stamps as they come, on CPU 1), and then the lengths.
pub(super) fn paced(
    j: &Job<'_>,
    pace_gbps: f64,
    step: usize,
    seconds: f64,
    alone: f64,
) -> Res<(f64, f64)> {
    let Job {
        pair,
        variant,
        stream,
        fault,
        ..
    } = *j;
    let e = j.ends(Mode::Paced)?;
    let mut m = Mover::new(variant, &e, step)?;
    let bad = |wrong| ContentError {
        pair,
        variant,
        run: "paced",
        wrong,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let hold = Arc::new(Hold::default());
    let h = task(stop.clone(), count.clone(), 0, hold.clone());
    let interval = Duration::from_secs_f64(8.0 * step as f64 / (pace_gbps * 1e9));
    let t = Instant::now();
    let mut due = t;
    // Time spent checking, the task held: not the run's.
    let mut held = Duration::ZERO;
    let mut moved = 0u64;
    // The file sink holds the stream from `lap` on, `since_rewind` bytes of it.
    let mut lap = 0u64;
    let mut since_rewind = 0u64;
    let mut steps = 0u64;
    let mut spoiled = !fault;
    let r = (|| -> Res<()> {
        while (t.elapsed() - held).as_secs_f64() < seconds {
            let n = m.step(&e)?;
            if n == 0 {
                // A file source ended: start it again (and the file sink with it).
                if let Endpoint::File(f) = &e.source {
                    let mut f = f;
                    f.seek(SeekFrom::Start(0))?;
                }
                continue;
            }
            moved += n;
            since_rewind += n;
            steps += 1;
            if !spoiled && steps >= 4 {
                spoil(&e, stream, moved, since_rewind)?;
                spoiled = true;
            }
            if since_rewind >= 256 << 20 {
                if let Endpoint::File(f) = &e.sink {
                    // Every byte of the file before it is emptied, the task held and the
                    // clock and the pace stopped.
                    hold.asked.store(true, Ordering::Release);
                    while !hold.held.load(Ordering::Acquire) {
                        // The task shares this CPU: let it get there.
                        std::thread::yield_now();
                    }
                    let t0 = Instant::now();
                    let checked = check_file(f, stream, lap, since_rewind);
                    hold.asked.store(false, Ordering::Release);
                    h.thread().unpark();
                    held += t0.elapsed();
                    due += t0.elapsed();
                    checked.map_err(bad)?;
                    f.set_len(0)?;
                    let mut f = f;
                    f.seek(SeekFrom::Start(0))?;
                    lap += since_rewind;
                }
                since_rewind = 0;
            }
            due += interval;
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
        }
        Ok(())
    })();
    let secs = (t.elapsed() - held).as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    h.thread().unpark();
    h.join().map_err(|_| "the task panicked")?;
    let iterations = count.load(Ordering::Relaxed) as f64;
    e.stop.store(true, Ordering::Relaxed);
    drop(m);
    let Ends {
        source, sink, peer, ..
    } = e;
    // The clock has stopped: the rest of the file sink, then the socket sink's verdict.
    if let (Ok(()), Endpoint::File(f)) = (&r, &sink) {
        check_file(f, stream, lap, since_rewind).map_err(bad)?;
    }
    drop(sink);
    drop(source);
    if let Some(p) = peer {
        let p = p.join().map_err(|_| "the peer thread panicked")?;
        if let Some(w) = p.wrong {
            return Err(bad(w).into());
        }
        if r.is_ok() && pair == "file_to_socket" && p.moved != moved {
            return Err(bad(Wrong::Length {
                received: p.moved,
                expected: moved,
            })
            .into());
        }
    }
    r?;
    Ok((8.0 * moved as f64 / (secs * 1e9), iterations / secs / alone))
}

/// Run every pair and variant; `progress` is told each step.
pub fn measure(a: &SpliceArgs, progress: &mut dyn FnMut(String)) -> Res<SpliceSection> {
    let bytes = a.mib.unwrap_or(64).max(1) << 20;
    let rounds = a.rounds.unwrap_or(5).max(1);
    let seconds = a.seconds.unwrap_or(1.0).clamp(0.05, 60.0);
    let pace_fraction = a.pace.unwrap_or(0.5).clamp(0.05, 1.0);
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
    let pinned = pin(0);
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
            let pace = pace_fraction * med[0].min(med[1]);
            let mut avail: Vec<Vec<f64>> = vec![Vec::new(); 2];
            let mut kept: Vec<Vec<f64>> = vec![Vec::new(); 2];
            for r in 0..rounds.min(3) {
                for k in 0..2 {
                    let v = (k + r) % 2;
                    let job = job(pair, VARIANTS[v], true);
                    let (g, x) = paced(&job, pace, paced_step, seconds, alone)?;
                    kept[v].push(g);
                    avail[v].push(x);
                }
            }
            let mut pair_rows = Vec::new();
            for v in 0..2 {
                pair_rows.push(Row {
                    pair: pair.into(),
                    variant: VARIANTS[v].into(),
                    mechanism: mech[v].clone(),
                    bytes,
                    gbps: med[v],
                    gbps_spread: fit::spread(&gbps[v]),
                    latency_us: fit::median(&lat[v]).unwrap_or(f64::NAN),
                    cpu_us_per_mib: fit::median(&cpu[v]).unwrap_or(f64::NAN),
                    pace_gbps: pace,
                    paced_gbps: fit::median(&kept[v]).unwrap_or(f64::NAN),
                    cpu_availability: fit::median(&avail[v]).unwrap_or(f64::NAN),
                });
            }
            verdicts.push(Verdict {
                pair: pair.into(),
                throughput_ratio: pair_rows[0].gbps / pair_rows[1].gbps,
                availability_ratio: pair_rows[0].cpu_availability / pair_rows[1].cpu_availability,
                latency_ratio: pair_rows[1].latency_us / pair_rows[0].latency_us,
                cpu_ratio: pair_rows[1].cpu_us_per_mib / pair_rows[0].cpu_us_per_mib,
            });
            rows.extend(pair_rows);
            progress(format!("splice {pair}"));
        }
        Ok(SpliceSection {
            rounds,
            seconds,
            pace_fraction,
            paced_step: Some(paced_step),
            pinned,
            files_fs: fs_name(dir.path()),
            rows,
            verdicts,
        })
    })();
    unpin();
    result
}

/// Run the benchmark and print it.
pub fn run(a: SpliceArgs) -> Res<()> {
    let Some(s) = crate::run_bench("splice", PAIRS.len() as u64, a.json, |p| measure(&a, p))?
    else {
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
    for v in &s.verdicts {
        println!(
            "{}: splice {:.2}× the loop's throughput (target ≥ 1), {:.2}× its CPU left to the task (target ≥ 1.3), {:.2}× faster per increment, {:.2}× less CPU per byte",
            v.pair, v.throughput_ratio, v.availability_ratio, v.latency_ratio, v.cpu_ratio
        );
    }
    if !s.pinned {
        println!("(one CPU: the transfer and the task were not pinned)");
    }
    // A run whose sink received a wrong byte or length would have failed the bench.
    println!(
        "checked outside the time measured, in {} throughput and {} paced runs: every byte of every file sink, every 4 KiB stamp of every socket sink, every length: no difference",
        s.rows.len() * s.rounds,
        s.rows.len() * s.rounds.min(3)
    );
    Ok(())
}
