//! The availability runs of `zcio bench splice`: the transfer at a fixed pace beside a
//! CPU-bound background task on its core, and the task's progress against its progress alone.

use super::ends::*;
use super::measure::{Job, Paced};
use super::stream::*;
use crate::report::fit;
use crate::transfer::Res;
use std::io::{Seek, SeekFrom};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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
        background();
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

/// Make the calling thread a background job: the lowest priority (nice 19), so that a
/// transfer sharing its CPU runs whenever it has work and the task gets what the transfer
/// leaves. At equal priority the scheduler would share the CPU evenly, and a transfer paced
/// above half the CPU's worth of work could not keep its pace.
pub(super) fn background() -> bool {
    let me = rustix::thread::gettid();
    rustix::process::setpriority_process(Some(me), 19).is_ok()
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

/// How the availability runs at one pace go.
pub(super) struct Runs {
    pub(super) rounds: usize,
    pub(super) step: usize,
    pub(super) seconds: f64,
    pub(super) alone: f64,
}

/// Both variants' availability runs at `pace` Gbit/s (`fraction` of the slower's throughput),
/// alternating over the rounds.
pub(super) fn at_pace(
    jobs: &[Job<'_>; 2],
    fraction: f64,
    pace: f64,
    runs: &Runs,
) -> Res<[Paced; 2]> {
    let mut avail: Vec<Vec<f64>> = vec![Vec::new(); 2];
    let mut kept: Vec<Vec<f64>> = vec![Vec::new(); 2];
    for r in 0..runs.rounds {
        for k in 0..2 {
            let v = (k + r) % 2;
            let (g, x) = paced(&jobs[v], pace, runs.step, runs.seconds, runs.alone)?;
            kept[v].push(g);
            avail[v].push(x);
        }
    }
    Ok(std::array::from_fn(|v| Paced {
        fraction,
        pace_gbps: pace,
        paced_gbps: fit::median(&kept[v]).unwrap_or(f64::NAN),
        cpu_availability: fit::median(&avail[v]).unwrap_or(f64::NAN),
        cpu_availability_spread: fit::spread(&avail[v]),
    }))
}
