//! Kill tests of a container pipeline (paper 003): a sender, a relay and a display in three
//! processes, containers moving from one to the next over Unix sockets, one process killed with
//! SIGKILL at a random point, over many rounds.
//!
//! The test process plays one of the three (a different one from round to round) and this test
//! binary, run again with `$ZCIO_KILL_PEER` set (the `peer` test below, which does nothing in
//! an ordinary run), plays the other two; one of those two is killed. The containers are sealed
//! or volatile (then the display gives each back to the sender, which fills it again), and the
//! relay maps them and checks their number or forwards them unmapped; the display checks every
//! frame whole. Some rounds kill while the processes start and connect, the others after the
//! test process's party has passed its first frame on.
//!
//! Each round checks that both survivors fail with an error (the path ended, or a write to a
//! path that is gone) within [`DETECT`] of the kill, never hang (a watchdog fails the round
//! after [`HANG`]), and that the test process's descriptors, memory files, threads and mappings,
//! and the machine's `/dev/shm` objects named after zcio, are back to what they were before the
//! rounds: what was in flight towards the killed process, or held by it, is gone with it.
//!
//! `$ZCIO_KILL_SEED` (hexadecimal, as a run prints it) replays a run.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use zcio_sequoia::container::{ContainerError, Domain};
use zcio_testkit::kill::{
    PEER_ENV, Rng, Timing, Tolerance, cast, ended_within, is_party, killer_at, run_rounds, watchdog,
};

/// Rounds counted (after one that warms the thread caches up).
const ROUNDS: usize = 30;
/// Longest a survivor may take to fail after a party was killed.
const DETECT: Duration = Duration::from_secs(3);
/// Longest a round may take before it counts as hung.
const HANG: Duration = Duration::from_secs(15);
/// Volatile containers going round between the sender and the display.
const IN_FLIGHT: u64 = 4;
/// Exit status of a party whose loop ended with an error (what a survivor should do).
const FAILED: i32 = 4;
/// Mappings a round may leave beyond the baseline: glibc keeps the stacks of exited threads
/// for reuse and gives a new thread its own malloc arena, so the watchdog and killer threads of
/// a round may leave a stack or an arena mapped (each a mapping and its guard). A leak per
/// round would pass this bound within a few of the thirty rounds.
const VMA_SLACK: usize = 6;

const ROLES: [&str; 3] = ["sender", "relay", "display"];
const VARIANTS: [&str; 4] = ["sealed", "sealed-unmapped", "volatile", "volatile-unmapped"];

/// Word `k` of frame `n` (word 0 is the frame's number).
fn word(n: u64, k: usize) -> u64 {
    if k == 0 {
        n
    } else {
        n.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (k as u64).wrapping_mul(0x0100_0000_01b3)
    }
}

fn draw(n: u64, bytes: &mut [u8]) {
    for (k, c) in bytes.chunks_exact_mut(8).enumerate() {
        c.copy_from_slice(&word(n, k).to_le_bytes());
    }
}

fn draw_words(n: u64, words: &[AtomicU64], len: usize) {
    for (k, w) in words[..len / 8].iter().enumerate() {
        w.store(word(n, k), Ordering::Relaxed);
    }
}

/// Check frame `n`: its number only, or every word.
fn check(n: u64, bytes: &[u8], whole: bool) -> Result<(), String> {
    let words = if whole { bytes.len() / 8 } else { 1 };
    for (k, c) in bytes.chunks_exact(8).take(words).enumerate() {
        let got = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        if got != word(n, k) {
            return Err(format!("frame {n} damaged at word {k}: {got:#x}"));
        }
    }
    Ok(())
}

fn check_words(n: u64, words: &[AtomicU64], len: usize, whole: bool) -> Result<(), String> {
    let count = if whole { len / 8 } else { 1 };
    for (k, w) in words[..count].iter().enumerate() {
        let got = w.load(Ordering::Relaxed);
        if got != word(n, k) {
            return Err(format!("frame {n} damaged at word {k}: {got:#x}"));
        }
    }
    Ok(())
}

/// How a party's loop ended: the error of the path, or damage it found (a test failure).
enum End {
    Path(ContainerError),
    Damaged(String),
}

impl From<ContainerError> for End {
    fn from(e: ContainerError) -> End {
        End::Path(e)
    }
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Path(e) => write!(f, "{e}"),
            End::Damaged(d) => write!(f, "DAMAGED: {d}"),
        }
    }
}

/// A party's sockets: from upstream, to downstream, and the volatile containers' way back
/// (the display's end, or the sender's).
struct Ends {
    up: Option<OwnedFd>,
    down: Option<OwnedFd>,
    back: Option<OwnedFd>,
}

impl Ends {
    fn up(&self) -> BorrowedFd<'_> {
        self.up.as_ref().expect("a way up").as_fd()
    }

    fn down(&self) -> BorrowedFd<'_> {
        self.down.as_ref().expect("a way down").as_fd()
    }

    fn back(&self) -> BorrowedFd<'_> {
        self.back.as_ref().expect("a way back").as_fd()
    }
}

/// What a party's play returns: only ever how the path failed.
type Played = Result<std::convert::Infallible, End>;

/// The domain of a party that receives: one that accepts volatile containers for a volatile
/// path.
fn receiving(volatile: bool) -> Domain {
    if volatile {
        Domain::accepting_volatile()
    } else {
        Domain::new()
    }
}

/// Play `role` until the path fails; `passed` is called with each frame's number once this
/// party has passed it on (or shown it).
fn play(role: &str, variant: &str, len: usize, ends: &Ends, passed: &mut dyn FnMut(u64)) -> End {
    let volatile = variant.starts_with("volatile");
    let r = match role {
        "sender" => send(volatile, len, ends, passed),
        "relay" => relay(volatile, !variant.ends_with("unmapped"), ends, passed),
        _ => display(volatile, len, ends, passed),
    };
    match r {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

fn send(volatile: bool, len: usize, ends: &Ends, passed: &mut dyn FnMut(u64)) -> Played {
    let down = ends.down();
    let mut d = Domain::new();
    for n in 0u64.. {
        let id = if !volatile {
            let id = d.alloc(len)?;
            draw(n, d.map(id)?);
            id
        } else {
            let id = if n < IN_FLIGHT {
                d.alloc_volatile(len)?
            } else {
                // Filled again once the display gives it back.
                d.read(ends.back(), 0, false)?
            };
            draw_words(n, d.map_words(id)?, len);
            id
        };
        d.write(down, id)?;
        passed(n);
    }
    unreachable!("the loop ends with an error")
}

fn relay(volatile: bool, map: bool, ends: &Ends, passed: &mut dyn FnMut(u64)) -> Played {
    let (up, down) = (ends.up(), ends.down());
    let mut d = receiving(volatile);
    for n in 0u64.. {
        let id = d.read(up, 0, map)?;
        if map && volatile {
            let len = d.len(id)?;
            check_words(n, d.map_words(id)?, len, false).map_err(End::Damaged)?;
        } else if map {
            check(n, d.map_read(id)?, false).map_err(End::Damaged)?;
        }
        d.write(down, id)?;
        passed(n);
    }
    unreachable!("the loop ends with an error")
}

fn display(volatile: bool, len: usize, ends: &Ends, passed: &mut dyn FnMut(u64)) -> Played {
    let up = ends.up();
    let mut d = receiving(volatile);
    for n in 0u64.. {
        let id = d.read(up, 0, true)?;
        if d.len(id)? != len {
            return Err(End::Damaged(format!("frame {n}: {} bytes", d.len(id)?)));
        }
        if volatile {
            check_words(n, d.map_words(id)?, len, true).map_err(End::Damaged)?;
            d.write(ends.back(), id)?;
        } else {
            check(n, d.map_read(id)?, true).map_err(End::Damaged)?;
            d.free(id)?;
        }
        passed(n);
    }
    unreachable!("the loop ends with an error")
}

/// Take a party's sockets from the socket at `path` (sent with `SCM_RIGHTS`: up, down, back,
/// those the role has).
fn take_ends(role: &str, volatile: bool, sock: &UnixStream) -> Ends {
    let mut b = [0u8; 1];
    let (_, fds) = zcio_vm::wire::recv_with_fds(sock.as_fd(), &mut b).expect("the ends");
    let mut it = fds.into_iter();
    let mut next = || Some(it.next().expect("as many ends as the role has"));
    match role {
        "sender" => Ends {
            up: None,
            down: next(),
            back: if volatile { next() } else { None },
        },
        "relay" => Ends {
            up: next(),
            down: next(),
            back: None,
        },
        _ => Ends {
            up: next(),
            down: None,
            back: if volatile { next() } else { None },
        },
    }
}

/// A party in a process of its own: take its sockets, play until the path fails, say why on
/// stderr and exit with [`FAILED`] (or be killed, which is what the test does to one of them).
///
/// What it plays is in [`PEER_ENV`]: `ROLE VARIANT LEN SOCKET`.
#[test]
fn peer() {
    let Ok(spec) = std::env::var(PEER_ENV) else {
        return; // an ordinary run: this is only the parties' entry
    };
    let f: Vec<&str> = spec.split(' ').collect();
    let (role, variant) = (f[0], f[1]);
    let len: usize = f[2].parse().expect("length");
    let sock = UnixStream::connect(f[3]).expect("connect to the test");
    let ends = take_ends(role, variant.starts_with("volatile"), &sock);
    let e = play(role, variant, len, &ends, &mut |_| {});
    eprintln!("{role}: {e}");
    std::process::exit(if matches!(e, End::Damaged(_)) {
        5
    } else {
        FAILED
    });
}

/// A party in a process of its own, started, with the socket it takes its ends from.
struct Party {
    role: &'static str,
    child: Child,
    listener: UnixListener,
}

fn start(role: &'static str, variant: &str, len: usize, dir: &std::path::Path) -> Party {
    let path = dir.join(role);
    let listener = UnixListener::bind(&path).expect("listen");
    listener.set_nonblocking(true).expect("non-blocking");
    let child = Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "peer", "--nocapture", "--test-threads=1"])
        .env(
            PEER_ENV,
            format!("{role} {variant} {len} {}", path.display()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a party");
    Party {
        role,
        child,
        listener,
    }
}

/// Hand `fds` to a party once it connects; give up if it is killed first (`killed`, for the
/// party to be killed), or has not connected within [`DETECT`].
fn hand_over(p: &UnixListener, fds: &[OwnedFd], killed: Option<&AtomicBool>) -> Result<(), String> {
    let t0 = Instant::now();
    let sock = loop {
        match p.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if killed.is_some_and(|k| k.load(Ordering::SeqCst)) {
                    return Err("the party was killed before it connected".into());
                }
                if t0.elapsed() > DETECT {
                    return Err(format!("a party did not connect within {DETECT:?}"));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(format!("accept: {e}")),
        }
    };
    sock.set_nonblocking(false).expect("blocking");
    let fds: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    zcio_vm::wire::send_with_fds(sock.as_fd(), b"e", &fds).map_err(|e| e.to_string())
}

fn pair() -> (OwnedFd, OwnedFd) {
    let (a, b) = UnixStream::pair().expect("a socket pair");
    (a.into(), b.into())
}

/// How the test process's party ended.
struct Outcome {
    error: String,
    path_error: bool,
    at: Instant,
    frames: u64,
}

/// One round; returns whether frames went through before the kill.
fn round(rng: &mut Rng, n: usize) -> bool {
    let variant = VARIANTS[rng.usize(..VARIANTS.len())];
    let volatile = variant.starts_with("volatile");
    let len = (1 + rng.usize(..24)) * 4096 - 8 * rng.usize(..3);
    let (mine, victim, other) = cast(rng, &ROLES);
    let timing = Timing::draw(rng);
    let delay = timing.delay;
    let what = format!(
        "round {n}: {variant}, {len} bytes, here the {mine}, the {victim} killed {delay:?} after {}",
        timing.after("our first frame")
    );
    let dir = tempfile::tempdir().expect("a directory for the sockets");
    // The sockets: sender → relay → display, and display → sender for volatile containers.
    let (s_down, r_up) = pair();
    let (r_down, d_up) = pair();
    let (d_back, s_back) = pair();
    let ends_of = |role: &str| -> Vec<OwnedFd> {
        match role {
            "sender" if volatile => vec![s_down.try_clone().unwrap(), s_back.try_clone().unwrap()],
            "sender" => vec![s_down.try_clone().unwrap()],
            "relay" => vec![r_up.try_clone().unwrap(), r_down.try_clone().unwrap()],
            _ if volatile => vec![d_up.try_clone().unwrap(), d_back.try_clone().unwrap()],
            _ => vec![d_up.try_clone().unwrap()],
        }
    };
    let my_fds = ends_of(mine);
    let victim_fds = ends_of(victim);
    let other_fds = ends_of(other);
    // From here on each end is held by its party alone.
    drop((s_down, r_up, r_down, d_up, d_back, s_back));
    let v = start(victim, variant, len, dir.path());
    let o = start(other, variant, len, dir.path());
    let killed = Arc::new(AtomicBool::new(false));
    let (k, go) = killer_at(v.child, timing, killed.clone());
    let (vl, ol) = (v.listener, o.listener);
    let outcome = {
        let what = what.clone();
        let killed = killed.clone();
        watchdog(&what, HANG, move || {
            let mut go = go;
            // Hand the other parties their ends; then ours are the only ones left here.
            let handed = hand_over(&vl, &victim_fds, Some(&killed))
                .map_err(|e| format!("the {victim}: {e}"));
            drop(victim_fds);
            hand_over(&ol, &other_fds, None).expect("the surviving party connects");
            drop(other_fds);
            let mut it = my_fds.into_iter();
            let ends = match mine {
                "sender" => Ends {
                    up: None,
                    down: it.next(),
                    back: it.next(),
                },
                "relay" => Ends {
                    up: it.next(),
                    down: it.next(),
                    back: None,
                },
                _ => Ends {
                    up: it.next(),
                    down: None,
                    back: it.next(),
                },
            };
            let mut frames = 0;
            let e = play(mine, variant, len, &ends, &mut |f| {
                frames = f + 1;
                go.take();
            });
            let at = Instant::now();
            drop(ends);
            if let Err(h) = handed {
                println!("  (setup: {h})");
            }
            Outcome {
                // A killed neighbour is never a clean end of the path.
                path_error: matches!(e, End::Path(ref p) if !matches!(p, ContainerError::End)),
                error: e.to_string(),
                at,
                frames,
            }
        })
    };
    let killed = k.join().expect("the killer");
    killed.assert_by_the_kill(&what, victim);
    let killed_at = killed.at;
    // The other survivor ends too, with an error, in time.
    let mut oc = o.child;
    let (other_status, other_err) = ended_within(
        &mut oc,
        killed_at,
        DETECT,
        &format!("{what}: the {} (a survivor)", o.role),
    );
    assert_eq!(
        other_status.code(),
        Some(FAILED),
        "{what}: the {} (a survivor) did not end with an error of the path ({other_status}): {other_err}",
        o.role
    );
    assert!(
        outcome.at >= killed_at,
        "{what}: the {mine} failed before the {victim} was killed: {}",
        outcome.error
    );
    let took = outcome.at - killed_at;
    assert!(
        took <= DETECT,
        "{what}: the {mine} took {took:?} to notice (more than {DETECT:?}): {}",
        outcome.error
    );
    assert!(
        outcome.path_error,
        "{what}: the {mine} failed: {}",
        outcome.error
    );
    println!(
        "{what}: the {mine} failed after {took:?}, {} frames ({}); the {}: {}",
        outcome.frames,
        outcome.error,
        o.role,
        other_err.trim()
    );
    outcome.frames > 0
}

#[test]
fn a_killed_party_makes_the_others_fail_at_once_and_leak_nothing() {
    if is_party() {
        return;
    }
    run_rounds(
        ROUNDS,
        &Tolerance::nothing_grows(VMA_SLACK),
        "frames",
        round,
    );
}
