//! Kill tests of a three-process fbuf path (paper 001, §3.3): an originator, a forwarding
//! server and a receiver, each in its own process, fbufs streaming through, one process killed
//! with SIGKILL at a random point, over many rounds.
//!
//! The test process plays one of the three (a different one from round to round) and this test
//! binary, run again with `$ZCIO_KILL_PEER` set (the `peer` test below, which does nothing in
//! an ordinary run), plays the other two; one of those two is killed. Paths are cached, volatile
//! or not, or uncached; the receiver checks every fbuf against the pattern of its sequence
//! number and frees it, so fbufs are reused through the notices. Some rounds kill while the
//! processes start and connect, the others once data flows.
//!
//! Each round checks that both survivors fail with an error within [`DETECT`] of the kill: a
//! link whose other end was killed is not one that was closed ([`LinkError::PeerGone`]), never
//! hang (a watchdog fails the round after [`HANG`]), and that the test process's descriptors,
//! memory files, threads and mappings, and the machine's `/dev/shm` objects named after zcio,
//! are back to what they were before the rounds.
//!
//! When the forwarder is killed, the fbufs it held, which the receiver may still be reading,
//! must not be reused before the receiver has ended: a receiver that finds one changed
//! ([`End::Recycled`]) fails the round.
//!
//! `$ZCIO_KILL_SEED` (hexadecimal, as a run prints it) replays a run.

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use zcio_fbufs::link::{Forwarder, LinkError, OriginatorEnd, ReceiverEnd};
use zcio_fbufs::path::{PathMemory, Variant};
use zcio_fbufs::region::RegionRead;
use zcio_fbufs::{pattern, pattern_len};
use zcio_testkit::kill::{
    PEER_ENV, Rng, Timing, Tolerance, accept_within, cast, ended_within, is_party, killer_at,
    run_rounds, watchdog,
};

/// Rounds counted (after one that warms the thread caches up).
const ROUNDS: usize = 30;
/// Longest a survivor may take to fail after a party was killed.
const DETECT: Duration = Duration::from_secs(3);
/// Longest a party waits for its neighbour to connect (one killed first never does).
const CONNECT: Duration = Duration::from_secs(1);
/// Longest a round may take before it counts as hung.
const HANG: Duration = Duration::from_secs(15);
/// Exit status of a party whose link failed (what a survivor should do).
const FAILED: i32 = 4;
/// Exit status of a receiver that found an fbuf changed before its link failed
/// ([`End::Recycled`]).
const RECYCLED: i32 = 6;
/// Exit status of a party whose path never came up ([`End::Setup`]).
const NEVER: i32 = 7;
/// Mappings a round may leave beyond the baseline: glibc keeps the stacks of exited threads
/// for reuse and gives a new thread its own malloc arena, so the watchdog and killer threads of
/// a round may leave a stack or an arena mapped (each a mapping and its guard). A leak per
/// round would pass this bound within a few of the thirty rounds.
const VMA_SLACK: usize = 6;

const ROLES: [&str; 3] = ["originator", "forwarder", "receiver"];
const VARIANTS: [Variant; 3] = [Variant::CACHED_VOLATILE, Variant::CACHED, Variant::UNCACHED];

/// How a party's part ended: its link failed, or something else went wrong (a test failure).
enum End {
    Link(LinkError),
    /// The receiver found fbuf `fbuf` changed, and then its link failed with `then`: the
    /// fbuf was read after its forwarder died (see [`receiver`]).
    Recycled {
        fbuf: u64,
        then: LinkError,
    },
    /// The path never came up: a neighbour never connected, or was gone when the path was
    /// offered or taken (it was killed first).
    Setup(String),
    Other(String),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Link(e) => write!(f, "{e}"),
            End::Recycled { fbuf, then } => write!(
                f,
                "fbuf {fbuf} changed while held (recycled by the originator), then: {then}"
            ),
            End::Setup(e) | End::Other(e) => write!(f, "{e}"),
        }
    }
}

impl From<LinkError> for End {
    fn from(e: LinkError) -> End {
        End::Link(e)
    }
}

/// An error while the path is offered or taken: the neighbour was gone (killed first), which
/// the link must say as [`LinkError::PeerGone`] like any other death (a socket error such as
/// "Broken pipe" is not an answer the application can act on).
fn setup(e: LinkError) -> End {
    End::Link(e)
}

/// Accept a neighbour's connection within [`CONNECT`], or give up early if `gone` says it was
/// killed.
fn accept(l: &UnixListener, gone: &dyn Fn() -> bool) -> Result<UnixStream, End> {
    accept_within(l, CONNECT, gone)
        .map_err(|e| End::Other(format!("accept: {e}")))?
        .ok_or_else(|| End::Setup("the neighbour downstream never connected".into()))
}

/// Connect to a neighbour's socket once it listens (within [`CONNECT`]).
fn connect(p: &Path, gone: &dyn Fn() -> bool) -> Result<UnixStream, End> {
    let t0 = Instant::now();
    loop {
        match UnixStream::connect(p) {
            Ok(s) => return Ok(s),
            Err(_) if !gone() && t0.elapsed() < CONNECT => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => {
                return Err(End::Setup(format!(
                    "the neighbour upstream never listened: {e}"
                )));
            }
        }
    }
}

/// The originator: a path of 4 chunks of 256 KiB offered on `dir/up`, fbufs 0, 1, 2, … of the
/// tests' pattern sent until the link fails; `progress` after each.
fn originator(
    dir: &Path,
    v: Variant,
    gone: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(u64),
) -> Result<std::convert::Infallible, End> {
    let l = UnixListener::bind(dir.join("up")).expect("listen upstream");
    let p = PathMemory::create(256 * 1024, 4, v).map_err(LinkError::from)?;
    let mut end = OriginatorEnd::new(p.originator().map_err(LinkError::from)?);
    let sock = accept(&l, gone)?;
    end.add_receiver(sock).map_err(setup)?;
    for i in 0u64.. {
        let len = pattern_len(i);
        let f = end.alloc_waiting(len)?;
        end.originator
            .write(&f, 0, &pattern(i, len))
            .map_err(LinkError::from)?;
        end.send(f, &[0])?;
        end.poll(false)?;
        progress(i);
    }
    unreachable!("the loop ends with an error")
}

/// The forwarding server: joins the path on `dir/up`, offers it on `dir/down`, forwards until
/// the path ends; `started` once it forwards.
fn forwarder(
    dir: &Path,
    gone: &dyn Fn() -> bool,
    started: &mut dyn FnMut(u64),
) -> Result<usize, End> {
    let l = UnixListener::bind(dir.join("down")).expect("listen downstream");
    let up = ReceiverEnd::connect(connect(&dir.join("up"), gone)?).map_err(setup)?;
    let down = accept(&l, gone)?;
    let mut f = Forwarder::new(up, down).map_err(setup)?;
    started(0);
    Ok(f.run()?)
}

/// The receiver: joins the path on `dir/down`, checks and frees every fbuf, until the path
/// ends (`Ok`: it was closed) or fails; `progress` after each fbuf.
///
/// A forwarder that dies takes with it the record of what its receiver holds; the originator,
/// told of this receiver when the path came up, keeps those fbufs from reuse until it has
/// ended. A changed fbuf followed by a failed link is [`End::Recycled`]: a failed round.
fn receiver(
    dir: &Path,
    gone: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(u64),
) -> Result<u64, End> {
    let mut rx = ReceiverEnd::connect(connect(&dir.join("down"), gone)?).map_err(setup)?;
    let mut got = 0u64;
    while let Some(r) = rx.recv()? {
        let mut buf = vec![0u8; r.len as usize];
        if !rx.receiver.read_bytes(r.addr, &mut buf) {
            return Err(End::Other(format!("fbuf {got} unreadable")));
        }
        if buf != pattern(got, r.len as usize) {
            // Read after the forwarder died, the link fails at once.
            loop {
                match rx.recv() {
                    Ok(Some(r)) => rx.free(r)?,
                    Ok(None) => {
                        return Err(End::Other(format!(
                            "fbuf {got} damaged, and the path then closed in order"
                        )));
                    }
                    Err(then) => return Err(End::Recycled { fbuf: got, then }),
                }
            }
        }
        rx.free(r)?;
        progress(got);
        got += 1;
    }
    Ok(got)
}

/// Play `role` until its path fails (or ends: then the string says how).
fn play(
    role: &str,
    dir: &Path,
    v: Variant,
    gone: &dyn Fn() -> bool,
    progress: &mut dyn FnMut(u64),
) -> Result<String, End> {
    match role {
        "originator" => match originator(dir, v, gone, progress)? {},
        "forwarder" => forwarder(dir, gone, progress).map(|n| format!("forwarded {n} and ended")),
        _ => receiver(dir, gone, progress).map(|n| format!("received {n} and saw the path closed")),
    }
}

/// A party in a process of its own: play until the path fails, say why on stderr and exit
/// with [`FAILED`] (or be killed, which is what the test does to one of them). It leaves with
/// `exit`, as a process that fails may: nothing of it closes its links in order.
///
/// What it plays is in [`PEER_ENV`]: `ROLE DIR VARIANT`.
#[test]
fn peer() {
    let Ok(spec) = std::env::var(PEER_ENV) else {
        return; // an ordinary run: this is only the parties' entry
    };
    let f: Vec<&str> = spec.split(' ').collect();
    let (role, dir) = (f[0], Path::new(f[1]));
    let v = VARIANTS[f[2].parse::<usize>().expect("variant")];
    let r = play(role, dir, v, &|| false, &mut |_| {});
    match r {
        Ok(how) => {
            eprintln!("{role}: {how}");
            std::process::exit(0);
        }
        Err(End::Link(e)) => {
            eprintln!("{role}: {e}");
            std::process::exit(FAILED);
        }
        Err(e @ End::Recycled { .. }) => {
            eprintln!("{role}: {e}");
            std::process::exit(RECYCLED);
        }
        Err(End::Setup(e)) => {
            eprintln!("{role}: {e}");
            std::process::exit(NEVER);
        }
        Err(End::Other(e)) => {
            eprintln!("{role}: {e}");
            std::process::exit(5);
        }
    }
}

fn start(role: &str, dir: &Path, variant: usize) -> std::process::Child {
    Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "peer", "--nocapture", "--test-threads=1"])
        .env(PEER_ENV, format!("{role} {} {variant}", dir.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a party")
}

/// How the test process's party ended.
struct Outcome {
    result: Result<String, String>,
    /// An fbuf changed under the receiver, then its link failed ([`End::Recycled`]).
    recycled: bool,
    /// The path never came up ([`End::Setup`]).
    setup: bool,
    peer_gone: bool,
    at: Instant,
    progress: u64,
}

/// One round; returns whether fbufs went through before the kill.
fn round(rng: &mut Rng, n: usize) -> bool {
    let vi = rng.usize(..VARIANTS.len());
    let (mine, victim, other) = cast(rng, &ROLES);
    let timing = Timing::draw(rng);
    let delay = timing.delay;
    let what = format!(
        "round {n}: {:?}, here the {mine}, the {victim} killed {delay:?} after {}",
        VARIANTS[vi],
        timing.after("data flowed")
    );
    let dir = tempfile::tempdir().expect("a directory for the sockets");
    let v = start(victim, dir.path(), vi);
    let mut o = start(other, dir.path(), vi);
    let killed = Arc::new(AtomicBool::new(false));
    let (k, go) = killer_at(v, timing, killed.clone());
    let outcome = {
        let path = dir.path().to_path_buf();
        let killed = killed.clone();
        watchdog(&what, HANG, move || {
            let mut go = go;
            let mut progress = 0;
            let gone = || killed.load(Ordering::SeqCst);
            let r = play(mine, &path, VARIANTS[vi], &gone, &mut |i| {
                progress = i + 1;
                go.take();
            });
            let at = Instant::now();
            drop(go);
            let recycled = matches!(
                r,
                Err(End::Recycled {
                    then: LinkError::PeerGone { .. },
                    ..
                })
            );
            Outcome {
                recycled,
                setup: matches!(r, Err(End::Setup(_))),
                peer_gone: matches!(r, Err(End::Link(LinkError::PeerGone { .. }))),
                result: r.map_err(|e| e.to_string()),
                at,
                progress,
            }
        })
    };
    let killed = k.join().expect("the killer");
    killed.assert_by_the_kill(&what, victim);
    let killed_at = killed.at;
    // The other survivor ends too, with an error, in time.
    let (other_status, other_err) = ended_within(
        &mut o,
        killed_at,
        DETECT,
        &format!("{what}: the {other} (a survivor)"),
    );
    // A receiver that read a recycled fbuf exits with RECYCLED: a failure like any other.
    assert!(
        other_status.code() == Some(FAILED) || other_status.code() == Some(NEVER),
        "{what}: the {other} (a survivor) did not end with a failed link ({other_status}): {other_err}"
    );
    let took = outcome.at.saturating_duration_since(killed_at);
    let mine_said = match &outcome.result {
        Ok(how) => panic!("{what}: the {mine} (a survivor) {how}, no error"),
        Err(e) => e.clone(),
    };
    assert!(
        outcome.at >= killed_at,
        "{what}: the {mine} failed before the {victim} was killed: {mine_said}"
    );
    assert!(
        took <= DETECT,
        "{what}: the {mine} took {took:?} to notice (more than {DETECT:?}): {mine_said}"
    );
    // Killed before the path was up, a neighbour may simply never have connected, or have
    // gone while the path was offered.
    assert!(
        !outcome.recycled,
        "{what}: the {mine} read an fbuf changed while it held it: {mine_said}"
    );
    assert!(
        outcome.peer_gone || outcome.setup,
        "{what}: the {mine} failed, but not because its peer was gone: {mine_said}"
    );
    println!(
        "{what}: the {mine} failed after {took:?} ({} done): {mine_said}; the {other}: {}",
        outcome.progress,
        other_err.trim()
    );
    outcome.progress > 0
}

#[test]
fn a_killed_party_makes_the_others_fail_at_once_and_leak_nothing() {
    if is_party() {
        return;
    }
    run_rounds(ROUNDS, &Tolerance::nothing_grows(VMA_SLACK), "fbufs", round);
}
