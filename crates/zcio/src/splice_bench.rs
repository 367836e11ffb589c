//! `zcio bench splice`: paper 003's peer-to-peer I/O against a read/write loop, on this
//! machine, for file→socket, file→file and socket→file: throughput, the latency of one 64 KiB
//! increment, and **CPU availability**: the progress of a CPU-bound task sharing the
//! transfer's core while the transfer runs at a fixed pace (as a video stream would), against
//! its progress alone. The transfer and the task are pinned to CPU 0; a socket's other end runs
//! on CPU 1. Every run's data is checked at its end (its length, and its bytes against the
//! source where the sink is a file).

use crate::report::fit;
use crate::transfer::Res;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use zcio_sequoia::ppio::{Increment, Splice};

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
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The increment both variants move per step: a `start_flow` of this many bytes, or a read
/// and a write of a buffer this large.
const STEP: usize = 64 << 10;

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

const PAIRS: [&str; 3] = ["file_to_socket", "file_to_file", "socket_to_file"];
const VARIANTS: [&str; 2] = ["splice", "read_write"];

/// The name of the file system holding `path`, from its magic number.
pub fn fs_name(path: &std::path::Path) -> String {
    let Ok(st) = rustix::fs::statfs(path) else {
        return "unknown".into();
    };
    match st.f_type as u64 {
        0xEF53 => "ext4".into(),
        0x0102_1994 => "tmpfs".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x794C_7630 => "overlayfs".into(),
        0x2FC1_2FC1 => "zfs".into(),
        0x6573_5546 => "fuse".into(),
        0x6969 => "nfs".into(),
        0xF2F5_2010 => "f2fs".into(),
        other => format!("unknown (magic {other:#x})"),
    }
}

/// Pin the calling thread to `cpu` (where there are at least two CPUs); whether it took.
fn pin(cpu: usize) -> bool {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if n < 2 {
        return false;
    }
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).is_ok()
}

/// The calling thread's CPU time so far (ns): user and system, the kernel's work for its
/// system calls included.
fn thread_cpu_ns() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 * 1e9 + t.tv_nsec as f64
}

/// Let the calling thread run anywhere again.
fn unpin() {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut set = rustix::thread::CpuSet::new();
    for c in 0..n.min(rustix::thread::CpuSet::MAX_CPU) {
        set.set(c);
    }
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(9) as u8)
        .collect()
}

/// The source and sink of one run, and the thread at a socket's other end.
struct Ends {
    source: Endpoint,
    sink: Endpoint,
    peer: Option<std::thread::JoinHandle<u64>>,
    stop: Arc<AtomicBool>,
}

enum Endpoint {
    File(File),
    Socket(UnixStream),
}

impl Endpoint {
    fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Endpoint::File(f) => f.as_fd(),
            Endpoint::Socket(s) => s.as_fd(),
        }
    }
}

/// Set up `pair` for a run of `bytes` (`None`: endless, until `stop`). A socket source's
/// writer and a socket sink's reader run on CPU 1.
fn ends(pair: &str, src_file: &File, dir: &std::path::Path, bytes: Option<u64>) -> Res<Ends> {
    let stop = Arc::new(AtomicBool::new(false));
    let file_source = || -> Res<Endpoint> {
        let mut f = src_file.try_clone()?;
        f.seek(SeekFrom::Start(0))?;
        Ok(Endpoint::File(f))
    };
    let file_sink = || -> Res<Endpoint> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.join("sink"))?;
        Ok(Endpoint::File(f))
    };
    Ok(match pair {
        "file_to_socket" => {
            let (tx, mut rx) = UnixStream::pair()?;
            let peer = std::thread::spawn(move || {
                pin(1);
                let mut buf = vec![0u8; 1 << 20];
                let mut n = 0u64;
                while let Ok(k) = rx.read(&mut buf) {
                    if k == 0 {
                        break;
                    }
                    n += k as u64;
                }
                n
            });
            Ends {
                source: file_source()?,
                sink: Endpoint::Socket(tx),
                peer: Some(peer),
                stop,
            }
        }
        "file_to_file" => Ends {
            source: file_source()?,
            sink: file_sink()?,
            peer: None,
            stop,
        },
        _ => {
            let (mut tx, rx) = UnixStream::pair()?;
            let chunk = pattern(1 << 20);
            let halt = stop.clone();
            let peer = std::thread::spawn(move || {
                pin(1);
                let mut n = 0u64;
                while !halt.load(Ordering::Relaxed) && bytes.is_none_or(|b| n < b) {
                    let k = bytes.map_or(chunk.len() as u64, |b| (b - n).min(chunk.len() as u64));
                    if tx.write_all(&chunk[..k as usize]).is_err() {
                        break;
                    }
                    n += k;
                }
                n
            });
            Ends {
                source: Endpoint::Socket(rx),
                sink: file_sink()?,
                peer: Some(peer),
                stop,
            }
        }
    })
}

/// One step of `variant`: at most `STEP` bytes from `e.source` to `e.sink`; 0 at the end.
struct Mover<'a> {
    splice: Option<Splice<'a>>,
    buf: Vec<u8>,
}

impl<'a> Mover<'a> {
    fn new(variant: &str, e: &'a Ends) -> Res<Mover<'a>> {
        Ok(Mover {
            splice: if variant == "splice" {
                Some(Splice::new(e.source.fd(), e.sink.fd())?)
            } else {
                None
            },
            buf: vec![0u8; STEP],
        })
    }

    fn mechanism(&self) -> String {
        self.splice
            .as_ref()
            .map_or("read/write".into(), |s| s.mechanism().name().into())
    }

    fn step(&mut self, e: &Ends) -> Res<u64> {
        if let Some(s) = &mut self.splice {
            return Ok(s.start_flow(Increment::Bytes(STEP as u64))?.bytes);
        }
        let n = loop {
            match rustix::io::read(e.source.fd(), &mut self.buf) {
                Ok(n) => break n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(err) => return Err(format!("read: {err}").into()),
            }
        };
        let mut done = 0;
        while done < n {
            match rustix::io::write(e.sink.fd(), &self.buf[done..n]) {
                Ok(k) => done += k,
                Err(rustix::io::Errno::INTR) => continue,
                Err(err) => return Err(format!("write: {err}").into()),
            }
        }
        Ok(n as u64)
    }
}

/// Spin until `stop`, counting iterations: the CPU-bound task.
fn task(stop: Arc<AtomicBool>, count: Arc<AtomicU64>, cpu: usize) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        pin(cpu);
        let mut x = 0x9E37_79B9u64;
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
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
fn task_alone(seconds: f64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let h = task(stop.clone(), count.clone(), 0);
    std::thread::sleep(Duration::from_secs_f64(seconds));
    stop.store(true, Ordering::Relaxed);
    h.join().expect("task");
    count.load(Ordering::Relaxed) as f64 / t.elapsed().as_secs_f64()
}

/// One throughput run: (Gbit/s, per-step latencies in µs, mechanism, the transfer thread's CPU
/// time per MiB in µs).
fn throughput(
    pair: &str,
    variant: &str,
    src: &File,
    data: &[u8],
    dir: &std::path::Path,
) -> Res<(f64, Vec<f64>, String, f64)> {
    let bytes = data.len() as u64;
    let e = ends(pair, src, dir, Some(bytes))?;
    let mut m = Mover::new(variant, &e)?;
    let mechanism = m.mechanism();
    let mut lat = Vec::new();
    let mut moved = 0u64;
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
    }
    let ns = t.elapsed().as_nanos() as f64;
    let cpu_us_per_mib = (thread_cpu_ns() - cpu0) / 1e3 / (bytes as f64 / (1u64 << 20) as f64);
    drop(m);
    let Ends {
        source, sink, peer, ..
    } = e;
    drop(source);
    if let Endpoint::File(mut f) = sink {
        let mut got = Vec::with_capacity(data.len());
        f.seek(SeekFrom::Start(0))?;
        f.read_to_end(&mut got)?;
        if pair == "file_to_file" && got != data {
            return Err(
                format!("{pair} by {variant}: the sink's bytes differ from the source").into(),
            );
        }
        if got.len() as u64 != bytes {
            return Err(format!(
                "{pair} by {variant}: {} bytes arrived of {bytes}",
                got.len()
            )
            .into());
        }
    } else {
        drop(sink);
    }
    if let Some(p) = peer {
        let n = p.join().map_err(|_| "the peer thread panicked")?;
        if n != bytes {
            return Err(format!("{pair} by {variant}: the peer moved {n} bytes of {bytes}").into());
        }
    }
    if moved != bytes {
        return Err(format!("{pair} by {variant}: moved {moved} bytes of {bytes}").into());
    }
    Ok((8.0 * bytes as f64 / ns, lat, mechanism, cpu_us_per_mib))
}

/// One paced run: (bytes moved per second in Gbit/s, the task's progress over `alone`).
fn paced(
    pair: &str,
    variant: &str,
    src: &File,
    dir: &std::path::Path,
    pace_gbps: f64,
    seconds: f64,
    alone: f64,
) -> Res<(f64, f64)> {
    let e = ends(pair, src, dir, None)?;
    let mut m = Mover::new(variant, &e)?;
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let h = task(stop.clone(), count.clone(), 0);
    let interval = Duration::from_secs_f64(8.0 * STEP as f64 / (pace_gbps * 1e9));
    let t = Instant::now();
    let mut due = t;
    let mut moved = 0u64;
    let mut since_rewind = 0u64;
    while t.elapsed().as_secs_f64() < seconds {
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
        if since_rewind >= 256 << 20 {
            if let Endpoint::File(f) = &e.sink {
                f.set_len(0)?;
                let mut f = f;
                f.seek(SeekFrom::Start(0))?;
            }
            since_rewind = 0;
        }
        due += interval;
        let now = Instant::now();
        if due > now {
            std::thread::sleep(due - now);
        }
    }
    let secs = t.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    h.join().map_err(|_| "the task panicked")?;
    let iterations = count.load(Ordering::Relaxed) as f64;
    e.stop.store(true, Ordering::Relaxed);
    drop(m);
    let Ends {
        source, sink, peer, ..
    } = e;
    drop(sink);
    drop(source);
    if let Some(p) = peer {
        p.join().map_err(|_| "the peer thread panicked")?;
    }
    Ok((8.0 * moved as f64 / (secs * 1e9), iterations / secs / alone))
}

/// Run every pair and variant; `progress` is told each step.
pub fn measure(a: &SpliceArgs, progress: &mut dyn FnMut(String)) -> Res<SpliceSection> {
    let bytes = a.mib.unwrap_or(64).max(1) << 20;
    let rounds = a.rounds.unwrap_or(5).max(1);
    let seconds = a.seconds.unwrap_or(1.0).clamp(0.05, 60.0);
    let pace_fraction = a.pace.unwrap_or(0.5).clamp(0.05, 1.0);
    let dir = tempfile::tempdir()?;
    let data = pattern(bytes as usize);
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
                    let (g, l, m, c) = throughput(pair, VARIANTS[v], &src, &data, dir.path())?;
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
                    let (g, x) = paced(pair, VARIANTS[v], &src, dir.path(), pace, seconds, alone)?;
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
    Ok(())
}
