//! Kill tests of the memory network (paper 000, §7): a sender and a receiver in two processes,
//! one of them killed with SIGKILL at a random point, over many rounds.
//!
//! The test process is the survivor: the sender in some rounds (the receiver is killed), the
//! receiver in others (the sender is killed), under the four application-buffer semantics and
//! two of the region semantics, and every input buffering. The other party is this test binary run again with
//! `$ZCIO_KILL_PEER` set (the `peer` test below, which does nothing in an ordinary run). Some
//! rounds kill the peer while it starts and joins the link; the others after the first message
//! has gone through and been checked, while messages flow (the sender keeps several outputs
//! pending and, under emulated copy, overwrites each buffer during its output).
//!
//! Each round checks that the survivor fails with [`GenieError::PeerGone`] (or, killed before
//! the link was up, with an error of the setup) within [`DETECT`] of the kill, never hangs (a
//! watchdog fails the round after [`HANG`]), that every message it received was intact, and
//! that its descriptors, memory files, threads and mappings, and the machine's `/dev/shm`
//! objects named after zcio, are back to what they were before the rounds.
//!
//! One point random kills are unlikely to hit is tried on purpose: a sender killed after it
//! published a message and before it took in the completions of those before it, its
//! completion ring full (the receiver must not wait for room for ever).
//!
//! `$ZCIO_KILL_SEED` (hexadecimal, as a run prints it) replays a run.

use std::collections::VecDeque;
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};
use zcio_genie::memnet::{LinkParts, MemnetEndpoint, Ticket};
use zcio_genie::profile::{PROFILE_ENV, Profile};
use zcio_genie::{GenieError, InputBuffering, Semantics};
use zcio_testkit::kill::{
    PEER_ENV, Rng, Timing, Tolerance, accept_within, is_party, killer_at, run_rounds, watchdog,
};
use zcio_vm::{MapOptions, Mapping, page_size};

/// Rounds counted (after one that warms the runtime, the pools and the thread caches up).
const ROUNDS: usize = 40;
/// Longest a survivor may take to fail after its peer was killed.
const DETECT: Duration = Duration::from_secs(3);
/// Longest a round may take before it counts as hung.
const HANG: Duration = Duration::from_secs(15);
/// Outputs the sender keeps pending.
const WINDOW: usize = 3;
/// Mappings a round may leave beyond the baseline: glibc keeps the stacks of exited threads
/// for reuse and gives a new thread its own malloc arena, so the watchdog and killer threads of
/// a round may leave a stack or an arena mapped (each a mapping and its guard). A leak per
/// round would pass this bound within a few of the forty rounds.
const VMA_SLACK: usize = 6;
/// Nothing may grow but the mappings, by [`VMA_SLACK`]; nor may the mappings fall more than
/// [`VMA_SLACK`] below the baseline.
const TOLERANCE: Tolerance = Tolerance {
    vma_shrink: Some(VMA_SLACK),
    ..Tolerance::nothing_grows(VMA_SLACK)
};

/// The tests count this process's descriptors and mappings: they take turns.
static ALONE: std::sync::Mutex<()> = std::sync::Mutex::new(());

const SEMANTICS: [Semantics; 6] = [
    Semantics::Copy,
    Semantics::EmulatedCopy,
    Semantics::Share,
    Semantics::EmulatedShare,
    Semantics::Move,
    Semantics::WeakMove,
];

/// Byte `j` of message `i`.
fn byte(i: u64, j: usize) -> u8 {
    (i.wrapping_mul(131) as usize ^ j.wrapping_mul(7) ^ j >> 12) as u8
}

fn fill(buf: &mut [u8], i: u64) {
    for (j, b) in buf.iter_mut().enumerate() {
        *b = byte(i, j);
    }
}

/// Where message `i` differs from its pattern, if it does.
fn mismatch(buf: &[u8], i: u64) -> Option<usize> {
    buf.iter().enumerate().position(|(j, b)| *b != byte(i, j))
}

fn is_region(sem: Semantics) -> bool {
    sem.allocation() == zcio_genie::semantics::Allocation::System
}

/// Send messages 0, 1, 2, … until the link fails, keeping [`WINDOW`] outputs pending (from
/// `bufs`, one each, under the application-buffer semantics); `delivered` is called after each
/// completion. Returns the error.
fn send_loop(
    ep: &mut MemnetEndpoint,
    sem: Semantics,
    bufs: &mut [Mapping],
    delivered: &mut dyn FnMut(u64),
) -> GenieError {
    let len = bufs[0].len();
    let mut out: VecDeque<Ticket> = VecDeque::new();
    let mut i = 0u64;
    loop {
        if out.len() == WINDOW {
            let t = out.pop_front().expect("a full window");
            if let Err(e) = ep.wait(t) {
                return e;
            }
            delivered(i - WINDOW as u64);
        }
        let sent = if is_region(sem) {
            ep.alloc_region(len, sem).and_then(|mut r| {
                fill(r.as_mut_slice(), i);
                ep.send_region(sem, r)
            })
        } else {
            let b = bufs[i as usize % WINDOW].as_mut_slice();
            fill(b, i);
            let sent = ep.send(sem, b);
            if sem == Semantics::EmulatedCopy {
                // Overwritten during the output: the receiver still gets the bytes of the call.
                b.fill(0xEE);
            }
            sent
        };
        match sent {
            Ok((t, _)) => out.push_back(t),
            Err(e) => return e,
        }
        i += 1;
    }
}

/// Receive messages 0, 1, 2, … until the link fails, checking each; `checked` is called after
/// each. Returns the error (a message that arrived damaged panics).
fn recv_loop(
    ep: &mut MemnetEndpoint,
    sem: Semantics,
    buffering: InputBuffering,
    len: usize,
    checked: &mut dyn FnMut(u64),
) -> GenieError {
    let mut buf = Mapping::anonymous(len, MapOptions::default()).expect("a buffer");
    for i in 0u64.. {
        if is_region(sem) {
            match ep.recv_region(sem, buffering) {
                Ok((r, _)) => {
                    assert_eq!(r.len(), len, "message {i}: length");
                    if let Some(at) = mismatch(r.as_slice(), i) {
                        panic!("{sem}: message {i} damaged at byte {at}");
                    }
                    ep.recycle(r, sem);
                }
                Err(e) => return e,
            }
        } else {
            match ep.recv(sem, buf.as_mut_slice(), buffering) {
                Ok((n, _)) => {
                    assert_eq!(n, len, "message {i}: length");
                    if let Some(at) = mismatch(buf.as_slice(), i) {
                        panic!("{sem}: message {i} damaged at byte {at}");
                    }
                }
                Err(e) => return e,
            }
        }
        checked(i);
    }
    unreachable!("the loop ends only with an error")
}

/// The peer process: join the link offered on the socket and play the role until it fails
/// (or until it is killed, which is what the test does).
///
/// What it plays is in [`PEER_ENV`]: `ROLE SEMANTICS BUFFERING LEN SOCKET`.
#[test]
fn peer() {
    let Ok(spec) = std::env::var(PEER_ENV) else {
        return; // an ordinary run: this is only the peer processes' entry
    };
    let f: Vec<&str> = spec.split(' ').collect();
    let sem: Semantics = f[1].parse().expect("semantics");
    let buffering: InputBuffering = f[2].parse().expect("input buffering");
    let len: usize = f[3].parse().expect("length");
    let sock = UnixStream::connect(f[4]).expect("connect to the survivor");
    let parts = LinkParts::recv_from(&sock).expect("the link's parts");
    let mut ep = MemnetEndpoint::join(parts, None).expect("join the link");
    ep.set_profile(Profile::zero_copy());
    let e = match f[0] {
        "sender" => send_loop(&mut ep, sem, &mut buffers(len), &mut |_| {}),
        _ => recv_loop(&mut ep, sem, buffering, len, &mut |_| {}),
    };
    // The survivor went first: not what the test does, but not this process's fault.
    eprintln!("peer: {e}");
    std::process::exit(4);
}

/// The sender's buffers, one per pending output.
fn buffers(len: usize) -> Vec<Mapping> {
    (0..WINDOW)
        .map(|_| Mapping::anonymous(len, MapOptions::default()).expect("a buffer"))
        .collect()
}

/// Memory this process has locked (`VmLck`, KiB).
fn locked_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .expect("/proc/self/status")
        .lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// How the survivor's side of a round ended.
struct Outcome {
    /// The link was joined (else the error came while setting it up).
    joined: bool,
    error: String,
    peer_gone: bool,
    at: Instant,
    /// Messages completed (sender) or received and checked (receiver).
    messages: u64,
}

/// The survivor's side: offer the link on `l`, then send or receive until the link fails.
/// `go` is dropped after the first message (the killer's cue in late rounds).
fn survive(
    l: UnixListener,
    sends: bool,
    sem: Semantics,
    buffering: InputBuffering,
    len: usize,
    go: Option<mpsc::Sender<()>>,
    alive: impl Fn() -> bool,
) -> Outcome {
    let setup = |e: String| Outcome {
        joined: false,
        error: e,
        peer_gone: false,
        at: Instant::now(),
        messages: 0,
    };
    // The peer killed before it connects: the listener waits in vain, and `alive` says why.
    let sock = match accept_within(&l, Duration::MAX, || !alive()) {
        Ok(Some(s)) => s,
        Ok(None) => return setup("the peer never connected".into()),
        Err(e) => return setup(format!("accept: {e}")),
    };
    let (mine, theirs, arena) = zcio_genie::memnet::link_parts().expect("the link's parts");
    if let Err(e) = theirs.send_over(&sock) {
        return setup(e.to_string());
    }
    let mut ep = MemnetEndpoint::join(mine, Some(arena)).expect("join our end");
    ep.set_profile(Profile::zero_copy());
    // The buffers outlive the endpoint, as an application's would.
    let mut bufs = buffers(len);
    let locked = locked_kib();
    let mut go = go;
    let mut messages = 0;
    let mut progress = |i: u64| {
        messages = i + 1;
        go.take();
    };
    let e = if sends {
        send_loop(&mut ep, sem, &mut bufs, &mut progress)
    } else {
        recv_loop(&mut ep, sem, buffering, len, &mut progress)
    };
    let at = Instant::now();
    drop(ep);
    // The outputs that never completed gave their buffers back: unwired, writable at once (a
    // write-protection left behind would make this wait for a completion that cannot come).
    assert_eq!(
        locked_kib(),
        locked,
        "{sem}: pages of outputs that never completed are still wired"
    );
    for b in &mut bufs {
        b.as_mut_slice().fill(0x5A);
    }
    Outcome {
        joined: true,
        peer_gone: matches!(e, GenieError::PeerGone { .. }),
        error: e.to_string(),
        at,
        messages,
    }
}

/// One round; returns whether data went through before the kill.
fn round(rng: &mut Rng, n: usize, profile: &std::path::Path) -> bool {
    let sem = SEMANTICS[rng.usize(..SEMANTICS.len())];
    let buffering = InputBuffering::ALL[rng.usize(..InputBuffering::ALL.len())];
    let sends = rng.u64(..2) == 0;
    let timing = Timing::draw(rng);
    let delay = timing.delay;
    let len = (16 + rng.usize(..112)) * page_size();
    let what = format!(
        "round {n}: {sem}, {buffering} input, {len} bytes, {} killed {delay:?} after {}",
        if sends { "receiver" } else { "sender" },
        timing.after("the first message")
    );
    let dir = tempfile::tempdir().expect("a directory for the socket");
    let path = dir.path().join("link");
    let l = UnixListener::bind(&path).expect("listen");
    let spec = format!(
        "{} {sem} {buffering} {len} {}",
        if sends { "receiver" } else { "sender" },
        path.display()
    );
    let child = Command::new(std::env::current_exe().expect("this test binary"))
        .args(["--exact", "peer", "--nocapture", "--test-threads=1"])
        .env(PEER_ENV, spec)
        .env(PROFILE_ENV, profile)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the peer");
    let killed = Arc::new(AtomicBool::new(false));
    let (k, go) = killer_at(child, timing, killed.clone());
    let alive = move || !killed.load(Ordering::SeqCst);
    let out = watchdog(&what, HANG, move || {
        survive(l, sends, sem, buffering, len, go, alive)
    });
    let killed = k.join().expect("the killer");
    killed.assert_by_the_kill(&what, "peer");
    assert!(
        out.at >= killed.at,
        "{what}: the survivor failed before its peer was killed: {}",
        out.error
    );
    let took = out.at - killed.at;
    assert!(
        took <= DETECT,
        "{what}: the survivor took {took:?} to notice (more than {DETECT:?}): {}",
        out.error
    );
    if out.joined {
        assert!(
            out.peer_gone,
            "{what}: the survivor failed, but not with PeerGone: {}",
            out.error
        );
    }
    println!(
        "{what}: {} after {took:?}, {} messages ({})",
        if out.joined {
            "peer gone"
        } else {
            "setup failed"
        },
        out.messages,
        out.error
    );
    out.messages > 0
}

#[test]
fn a_killed_peer_makes_the_survivor_fail_at_once_and_leak_nothing() {
    if is_party() {
        return;
    }
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    // The peers load the profile instead of calibrating one each.
    let dir = tempfile::tempdir().expect("a directory for the profile");
    let profile = dir.path().join("profile.json");
    Profile::current().save(&profile).expect("save the profile");
    // The runtime (its userfaultfd, handler thread and stash) starts once, on first use: before
    // the count, whatever the first round uses.
    zcio_vm::VmRuntime::get();
    run_rounds(ROUNDS, &TOLERANCE, "data", |rng, n| round(rng, n, &profile));
}

/// A sender killed between publishing a message and taking in the completions of those before
/// it, with its completion ring full (a receiver that caught up with 257 one-page messages in
/// one go, the ring holding 256): the receiver, whose completion has no room, must see the
/// sender gone instead of waiting for room for ever. Both ends in this process; the sender's
/// end dropped is its death (every descriptor of it closed).
#[test]
fn a_sender_killed_with_its_completion_ring_full_fails_its_receiver() {
    if is_party() {
        return;
    }
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    let (mut tx, mut rx) = zcio_genie::memnet::pair().expect("a link");
    tx.set_profile(Profile::zero_copy());
    rx.set_profile(Profile::zero_copy());
    let ps = page_size();
    let sent = std::thread::spawn(move || {
        let page = vec![7u8; ps];
        for _ in 0..257 {
            tx.send(Semantics::Copy, &page).expect("send");
        }
        // Killed here: the 257th descriptor is out, the completions not taken in.
        drop(tx);
    });
    // The sender fills the descriptor ring and the wire, and waits for room.
    std::thread::sleep(Duration::from_millis(100));
    let got = watchdog(
        "a receiver with its completion ring full",
        HANG,
        move || {
            let mut buf = vec![0u8; ps];
            let mut n = 0;
            let e = loop {
                match rx.recv(Semantics::Copy, &mut buf, InputBuffering::EarlyDemux) {
                    Ok(_) => n += 1,
                    Err(e) => break e,
                }
            };
            (n, e.to_string(), matches!(e, GenieError::PeerGone { .. }))
        },
    );
    sent.join().expect("the sender");
    assert!(got.2, "after {} messages: {}", got.0, got.1);
    println!("{} messages, then: {}", got.0, got.1);
}
