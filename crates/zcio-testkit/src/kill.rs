//! What the kill tests have in common. A kill test runs many rounds, each killing a party of a
//! zcio mechanism at a random point: the rounds are drawn from a generator ([`rng`]) seeded per
//! run ([`seed`], which `$ZCIO_KILL_SEED` replays), a round that hangs fails through a
//! [`watchdog`], a party in a process of its own is killed by a [`killer`] thread and the
//! others must end [`ended_within`] a bound, and after each round the test process's resources
//! are held against a [`Baseline`] taken before the rounds, within the [`Tolerance`] the test
//! states (and justifies) itself: [`rounds`] runs them.

use std::io::Read;
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zcio_vm::resources::Resources;
pub use zcio_vm::resources::Tolerance;

pub use fastrand::Rng;

/// Environment variable that makes a kill test's binary a party of the mechanism under test; its
/// value says what to play, in the test's own words.
pub const PEER_ENV: &str = "ZCIO_KILL_PEER";

/// Environment variable replaying a run's seed (hexadecimal, as a run prints it).
pub const SEED_ENV: &str = "ZCIO_KILL_SEED";

/// The run's seed: `$ZCIO_KILL_SEED` (hexadecimal, `0x` or not), else a fresh one from the
/// clock and the process id. Printed, with how to replay it.
///
/// # Panics
///
/// If `$ZCIO_KILL_SEED` is set and not hexadecimal.
pub fn seed() -> u64 {
    let seed = match std::env::var(SEED_ENV) {
        Ok(s) => u64::from_str_radix(s.trim_start_matches("0x"), 16)
            .unwrap_or_else(|_| panic!("${SEED_ENV} is not hexadecimal: {s}")),
        Err(_) => {
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("after 1970")
                .as_nanos() as u64;
            t ^ u64::from(std::process::id()) << 32
        }
    };
    println!("seed {seed:#x} (replay with {SEED_ENV}={seed:x})");
    seed
}

/// A generator seeded with `seed`: the same seed draws the same rounds.
pub fn rng(seed: u64) -> Rng {
    Rng::with_seed(seed)
}

/// Run `f` on a thread of its own (named `survivor`) and return what it returns; a panic of
/// `f` is passed on.
///
/// # Panics
///
/// If `f` has not returned after `limit`: `what` hung. (Its thread is left behind.)
pub fn watchdog<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::Builder::new()
        .name("survivor".into())
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send(r);
        })
        .expect("spawn the survivor");
    match rx.recv_timeout(limit) {
        Ok(Ok(v)) => {
            h.join().expect("the survivor ended");
            v
        }
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("{what}: not returned after {limit:?}: hung"),
    }
}

/// What a [`killer`] saw: when it killed its process, and how that process ended.
#[derive(Debug)]
pub struct Killed {
    /// Just before the signal went.
    pub at: Instant,
    /// How the process ended.
    pub status: ExitStatus,
    /// What it wrote on its standard error (if that was piped).
    pub stderr: String,
}

impl Killed {
    /// Check that the process ended by the kill (`SIGKILL`), not before.
    ///
    /// # Panics
    ///
    /// If it ended otherwise: `what`, the `party` (its name), how it ended and what it said.
    pub fn assert_by_the_kill(&self, what: &str, party: &str) {
        assert_eq!(
            self.status.signal(),
            Some(9),
            "{what}: the {party} ended before it was killed ({}): {}",
            self.status,
            self.stderr
        );
    }
}

/// A thread that kills `child` with `SIGKILL` `delay` after the word on `go` (or after the
/// sender of `go` is dropped), then reaps it and reads its standard error. `killed` is set just
/// before the signal goes.
pub fn killer(
    mut child: Child,
    go: mpsc::Receiver<()>,
    delay: Duration,
    killed: Arc<AtomicBool>,
) -> JoinHandle<Killed> {
    std::thread::Builder::new()
        .name("killer".into())
        .spawn(move || {
            let _ = go.recv();
            std::thread::sleep(delay);
            let at = Instant::now();
            killed.store(true, Ordering::SeqCst);
            let _ = child.kill(); // SIGKILL
            let status = child.wait().expect("reap the killed process");
            Killed {
                at,
                status,
                stderr: stderr_of(&mut child),
            }
        })
        .expect("spawn the killer")
}

/// When a round's kill comes, drawn by [`Timing::draw`].
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// The kill comes `delay` after the round's start (one round in six), not `delay` after
    /// data first went through.
    pub early: bool,
    /// Up to 8 ms for an early kill, up to 20 ms for the others.
    pub delay: Duration,
}

impl Timing {
    /// A round's kill timing, drawn from `rng`.
    pub fn draw(rng: &mut Rng) -> Timing {
        let early = rng.u64(..6) == 0;
        let delay = Duration::from_micros(rng.u64(..if early { 8_000 } else { 20_000 }));
        Timing { early, delay }
    }

    /// What the delay runs from, said as a round describes its kill.
    pub fn after<'a>(&self, data: &'a str) -> &'a str {
        if self.early { "its start" } else { data }
    }
}

/// A [`killer`] of `child` at `timing`, and the word the party that watches data go through
/// holds: `None` for an early kill (the delay runs from now), else the sender to send on or
/// drop once data went through.
pub fn killer_at(
    child: Child,
    timing: Timing,
    killed: Arc<AtomicBool>,
) -> (JoinHandle<Killed>, Option<mpsc::Sender<()>>) {
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let k = killer(child, go_rx, timing.delay, killed);
    let go = if timing.early {
        drop(go_tx);
        None
    } else {
        Some(go_tx)
    };
    (k, go)
}

/// The parts of a path of three parties in a round, drawn from `rng`: the one this process
/// plays, the one killed, and the other.
pub fn cast(
    rng: &mut Rng,
    roles: &[&'static str; 3],
) -> (&'static str, &'static str, &'static str) {
    let mine = roles[rng.usize(..3)];
    let others: Vec<&'static str> = roles.iter().copied().filter(|r| *r != mine).collect();
    let victim = others[rng.usize(..2)];
    let other = others
        .iter()
        .copied()
        .find(|r| *r != victim)
        .expect("two others");
    (mine, victim, other)
}

/// Wait for `child` (a survivor of a kill at `since`) to end by itself within `limit` of the
/// kill; how it ended, and what it wrote on its standard error (if that was piped).
///
/// # Panics
///
/// If it still runs then (it is killed first): `who` hung.
pub fn ended_within(
    child: &mut Child,
    since: Instant,
    limit: Duration,
    who: &str,
) -> (ExitStatus, String) {
    let status = loop {
        if let Some(s) = child.try_wait().expect("the survivor's status") {
            break s;
        }
        if since.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{who} still runs {limit:?} after the kill: hung");
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    (status, stderr_of(child))
}

fn stderr_of(child: &mut Child) -> String {
    let mut out = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut out);
    }
    out
}

/// Run the rounds of a kill test: round 0, which warms the caches and pools up and is not
/// counted, then the [`Baseline`], then rounds `1..=count`, after each of which the resources
/// must be back to the baseline within `tolerance`. `round` draws from a generator seeded with
/// `seed` and says whether data went through before the kill; the count of rounds where it did
/// is returned.
///
/// # Panics
///
/// As `round` does, or if a round strays from the baseline (naming the round and `seed`).
pub fn rounds(
    seed: u64,
    count: usize,
    tolerance: &Tolerance,
    mut round: impl FnMut(&mut Rng, usize) -> bool,
) -> usize {
    let mut rng = rng(seed);
    let t0 = Instant::now();
    round(&mut rng, 0);
    let before = Baseline::take();
    let mut flowed = 0;
    for n in 1..=count {
        flowed += usize::from(round(&mut rng, n));
        before.check(&format!("round {n} (seed {seed:#x})"), tolerance);
    }
    println!("{count} rounds in {:?}", t0.elapsed());
    flowed
}

/// Run a kill test's [`rounds`] with the run's [`seed`], and check that `what` went through in
/// at least half of them.
///
/// # Panics
///
/// As [`rounds`] does, or if `what` went through in fewer than half the rounds.
pub fn run_rounds(
    count: usize,
    tolerance: &Tolerance,
    what: &str,
    round: impl FnMut(&mut Rng, usize) -> bool,
) {
    let seed = seed();
    let flowed = rounds(seed, count, tolerance, round);
    assert!(
        flowed >= count / 2,
        "{what} went through in {flowed} rounds of {count} only (seed {seed:#x})"
    );
}

/// Whether this process is a party of a kill test, started with [`PEER_ENV`] set: there, the
/// test binary's tests other than the party's entry have nothing to do.
pub fn is_party() -> bool {
    std::env::var(PEER_ENV).is_ok()
}

/// Accept a connection on `l` within `limit` (the socket returned blocking), looking every
/// millisecond; `Ok(None)` when the time is up, or earlier when `gone` says the peer that
/// should connect was killed.
pub fn accept_within(
    l: &UnixListener,
    limit: Duration,
    gone: impl Fn() -> bool,
) -> std::io::Result<Option<UnixStream>> {
    l.set_nonblocking(true)?;
    let t0 = Instant::now();
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false)?;
                return Ok(Some(s));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if gone() || t0.elapsed() > limit {
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e),
        }
    }
}

/// What a kill test's process holds before the rounds: its resources, and the machine's
/// `/dev/shm` objects named after zcio.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Baseline {
    /// This process's resources.
    pub resources: Resources,
    /// The names of the `/dev/shm` objects named after zcio, sorted.
    pub zcio_shm: Vec<String>,
}

impl Baseline {
    /// The resources held now, with the descriptors zcio keeps for the process's life open
    /// (their first use after the baseline is not a leak).
    pub fn take() -> Baseline {
        zcio_vm::resources::open_kept_descriptors().expect("this process's /proc/self files");
        Baseline {
            resources: Resources::now(),
            zcio_shm: zcio_shm(),
        }
    }

    /// How what is held now strays from the baseline beyond `tolerance`, as "name before →
    /// after" phrases (empty if it does not).
    pub fn strayed(&self, tolerance: &Tolerance) -> Vec<String> {
        let mut out = Resources::now().strayed_from(&self.resources, tolerance);
        let shm = zcio_shm();
        if shm != self.zcio_shm {
            out.push(format!(
                "/dev/shm objects of zcio's {:?} → {shm:?}",
                self.zcio_shm
            ));
        }
        out
    }

    /// Check that what is held now is back to the baseline, within `tolerance`.
    ///
    /// # Panics
    ///
    /// If it is not, naming `what` (the round, and the seed that replays it).
    pub fn check(&self, what: &str, tolerance: &Tolerance) {
        let strayed = self.strayed(tolerance);
        assert!(
            strayed.is_empty(),
            "{what}: not back to the baseline (leaked): {strayed:?}"
        );
    }
}

/// The objects in `/dev/shm` named after zcio.
pub fn zcio_shm() -> Vec<String> {
    Resources::shm_objects_named("zcio")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_draws_the_same_rounds() {
        let (mut a, mut b) = (rng(7), rng(7));
        let x: Vec<u64> = (0..8).map(|_| a.u64(..100)).collect();
        let y: Vec<u64> = (0..8).map(|_| b.u64(..100)).collect();
        assert_eq!(x, y);
    }

    #[test]
    fn the_watchdog_returns_and_passes_panics_on() {
        assert_eq!(watchdog("quick", Duration::from_secs(5), || 3), 3);
        let p = std::panic::catch_unwind(|| {
            watchdog("panics", Duration::from_secs(5), || -> u8 {
                panic!("inner")
            })
        });
        assert!(p.is_err());
        let p = std::panic::catch_unwind(|| {
            watchdog("hangs", Duration::from_millis(10), || {
                std::thread::sleep(Duration::from_millis(500))
            })
        });
        let msg = p.unwrap_err();
        let msg = msg.downcast_ref::<String>().expect("a message");
        assert!(msg.contains("hangs: not returned"), "{msg}");
    }

    #[test]
    fn a_descriptor_held_strays_from_the_baseline() {
        let base = Baseline::take();
        let f = std::fs::File::open("/proc/self/status").expect("a file");
        let strayed = base.strayed(&Tolerance::nothing_grows(100));
        assert!(
            strayed.iter().any(|s| s.starts_with("descriptors")),
            "{strayed:?}"
        );
        drop(f);
        let exact = Tolerance {
            exact_descriptors: true,
            ..Tolerance::nothing_grows(100)
        };
        assert!(
            !base
                .strayed(&exact)
                .iter()
                .any(|s| s.starts_with("descriptors")),
            "back once it is closed"
        );
    }
}
