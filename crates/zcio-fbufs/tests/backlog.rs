//! Links whose other end stops reading its socket. An originator's sends never wait for a
//! receiver: what a full ring and a full socket do not take waits in that receiver's backlog,
//! goes out as the receiver reads again (the originator sending nothing more), and past a limit
//! the receiver is dropped and its references released; the other receivers of the path go on
//! meanwhile. The same holds the other way, for a receiver's notices to an originator that
//! stops reading; and a frame cut short on a socket never holds up the end that reads it.

mod peer;

use peer::peer;
use std::io::{BufRead, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, ChildStdout, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use zcio_fbufs::link::{LinkError, OriginatorEnd, Received, ReceiverEnd, accept_path, offer_path};
use zcio_fbufs::path::{FbufRef, PathMemory, Variant};
use zcio_fbufs::pattern;
use zcio_fbufs::ring::{Dir, Rings};

/// Fbufs sent in a stream: far more than a ring of `SLOTS` and a socket hold.
const N: u64 = 2000;
const SLOTS: usize = 16;
/// The most any single call may take (a send is a few system calls at most).
const CALL: Duration = Duration::from_secs(2);
/// The most any phase of a scenario may take before the test fails as blocked.
const PHASE: Duration = Duration::from_secs(30);

/// Message `i`'s length: one page at most, so that `N` of them fit in the path together.
fn len_of(i: u64) -> usize {
    100 + (i as usize * 37) % 3900
}

/// Run `scenario` on its own thread, which reports each phase it completes. A phase that does
/// not end within [`PHASE`] of the one before fails the test: a blocked call stays blocked on
/// that thread, and the test does not hang.
fn watchdog(
    phases: &[&'static str],
    scenario: impl FnOnce(mpsc::Sender<&'static str>) + Send + 'static,
) {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || scenario(tx));
    for want in phases {
        match rx.recv_timeout(PHASE) {
            Ok(got) => assert_eq!(got, *want, "phases out of order"),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                panic!("blocked: \"{want}\" did not happen within {PHASE:?}")
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => match h.join() {
                Err(e) => std::panic::resume_unwind(e),
                Ok(()) => panic!("the scenario ended before \"{want}\""),
            },
        }
    }
    if let Err(e) = h.join() {
        std::panic::resume_unwind(e);
    }
}

/// An originator on a path with room for every fbuf of the stream at once (one page each),
/// listening on a fresh socket, with rings of [`SLOTS`] slots.
fn originator() -> (tempfile::TempDir, UnixListener, OriginatorEnd) {
    let dir = tempfile::tempdir().unwrap();
    let l = UnixListener::bind(dir.path().join("up")).unwrap();
    let p = PathMemory::create(256 * 1024, 40, Variant::CACHED).unwrap();
    assert!(p.info().len() / zcio_vm::page_size() >= N as usize);
    let mut end = OriginatorEnd::new(p.originator().unwrap());
    end.ring_slots = SLOTS;
    (dir, l, end)
}

/// Start a peer in mode `receiver-loop` with `args` after its socket, as a receiver of `end`;
/// with `small`, the originator's side of its socket holds only a few frames.
fn receiver(
    dir: &tempfile::TempDir,
    l: &UnixListener,
    end: &mut OriginatorEnd,
    args: &[&str],
    small: bool,
) -> Child {
    let child = peer()
        .arg("receiver-loop")
        .arg(dir.path().join("up"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (s, _) = l.accept().unwrap();
    if small {
        rustix::net::sockopt::set_socket_send_buffer_size(&s, 4096).unwrap();
    }
    end.add_receiver(s).unwrap();
    child
}

/// Put `r` on the sends ring at `tx`, as an originator that goes around the link does, and
/// take it at `rx`.
fn send_raw(rings: &Rings, tx: &mut u64, rx: &mut ReceiverEnd, r: FbufRef) {
    assert!(rings.push(Dir::Sends, tx, [SEND, r.addr, r.len]).unwrap());
    assert_eq!(rx.try_recv().unwrap(), Received::Fbuf(r));
}

/// The first line `out` prints.
fn line(out: &mut std::io::BufReader<ChildStdout>) -> String {
    let mut s = String::new();
    out.read_line(&mut s).unwrap();
    s
}

/// Everything a child prints, read on another thread.
fn output_of(child: &mut Child) -> mpsc::Receiver<String> {
    let mut out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        let _ = tx.send(s);
    });
    rx
}

/// Send the stream to `to`, each fbuf holding the pattern of its number; the slowest send.
fn send_stream(end: &mut OriginatorEnd, to: &[usize]) -> Duration {
    let mut slowest = Duration::ZERO;
    for i in 0..N {
        let len = len_of(i);
        let f = end.alloc_waiting(len).unwrap();
        end.originator.write(&f, 0, &pattern(i, len)).unwrap();
        let t = Instant::now();
        end.send(f, to).unwrap();
        slowest = slowest.max(t.elapsed());
        end.poll(false).unwrap();
    }
    slowest
}

/// Serve the receivers (take in their notices) until `out` has something to say.
fn serve_until(end: &mut OriginatorEnd, out: &mpsc::Receiver<String>) -> String {
    loop {
        if let Ok(s) = out.try_recv() {
            return s;
        }
        end.poll(false).unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Once the stalled receiver reads again: serve it until every fbuf is back, and check that it
/// got all `n` and ended well.
fn caught_up(end: &mut OriginatorEnd, stalled: &mut Child, out: &mut impl Read, n: u64) {
    while end.originator.outstanding() > 0 {
        end.poll(true).unwrap();
    }
    let mut said = String::new();
    out.read_to_string(&mut said).unwrap();
    assert!(said.starts_with(&format!("ok {n} ")), "{said}");
    assert!(stalled.wait().unwrap().success());
}

#[test]
fn a_stalled_receiver_holds_up_no_send_and_gets_everything_when_it_reads_again() {
    watchdog(
        &[
            "joined",
            "every send returned",
            "the other receiver got every fbuf",
            "the stalled receiver caught up",
        ],
        |phase| {
            let (dir, l, mut end) = originator();
            let n = N.to_string();
            let mut stalled = receiver(&dir, &l, &mut end, &[&n, "stall"], true);
            let mut stalled_out = std::io::BufReader::new(stalled.stdout.take().unwrap());
            assert_eq!(line(&mut stalled_out).trim(), "joined");
            let mut good = receiver(&dir, &l, &mut end, &[&n], false);
            let good_out = output_of(&mut good);
            phase.send("joined").unwrap();

            // Receiver 0 reads nothing: its ring fills, then its socket, then its backlog.
            let slowest = send_stream(&mut end, &[0, 1]);
            assert!(slowest < CALL, "a send took {slowest:?}");
            assert_eq!(end.receivers_alive(), 2, "{:?}", end.misbehaved);
            let waiting = end.backlog_bytes(0) / 24;
            assert!(
                waiting > N as usize / 2,
                "only {waiting} frames in the backlog"
            );
            phase.send("every send returned").unwrap();

            // Receiver 1 got every fbuf meanwhile, each byte as sent, in order.
            let said = serve_until(&mut end, &good_out);
            assert!(said.starts_with(&format!("ok {N} ")), "{said}");
            assert!(good.wait().unwrap().success());
            assert_eq!(end.originator.outstanding(), N as usize);
            phase.send("the other receiver got every fbuf").unwrap();

            // Receiver 0 reads again; the originator sends nothing more, only waits.
            let mut stdin = stalled.stdin.take().unwrap();
            stdin.write_all(b"go\n").unwrap();
            caught_up(&mut end, &mut stalled, &mut stalled_out, N);
            assert_eq!(end.released_for_dead, 0);
            assert!(end.misbehaved.is_empty(), "{:?}", end.misbehaved);
            phase.send("the stalled receiver caught up").unwrap();
        },
    );
}

#[test]
fn a_stalled_receiver_catches_up_while_the_originator_only_sleeps() {
    watchdog(
        &["every send returned", "the stalled receiver caught up"],
        |phase| {
            let (dir, l, mut end) = originator();
            let n = N.to_string();
            let mut stalled = receiver(&dir, &l, &mut end, &[&n, "stall", "hold"], true);
            let mut out = std::io::BufReader::new(stalled.stdout.take().unwrap());
            assert_eq!(line(&mut out).trim(), "joined");
            let slowest = send_stream(&mut end, &[0]);
            assert!(slowest < CALL, "a send took {slowest:?}");
            assert!(end.backlog_bytes(0) / 24 > N as usize / 2);
            phase.send("every send returned").unwrap();
            // The receiver reads again, and keeps everything: no notice comes back to wake the
            // originator, which sleeps in one blocking poll. Only its socket taking more does;
            // once it has had the whole stream, it is killed, and that ends the poll.
            let (go, went) = mpsc::channel::<()>();
            let mut stdin = stalled.stdin.take().unwrap();
            let watcher = std::thread::spawn(move || {
                went.recv().unwrap();
                stdin.write_all(b"go\n").unwrap();
                let said = line(&mut out);
                if said.starts_with(&format!("ok {N} ")) {
                    phase.send("the stalled receiver caught up").unwrap();
                }
                stalled.kill().unwrap();
                stalled.wait().unwrap();
                said
            });
            go.send(()).unwrap();
            while end.receivers_alive() > 0 {
                end.poll(true).unwrap();
            }
            let said = watcher.join().unwrap();
            assert!(said.starts_with(&format!("ok {N} ")), "{said}");
            assert_eq!(end.released_for_dead, N as usize);
            assert_eq!(end.originator.outstanding(), 0);
        },
    );
}

#[test]
fn a_receiver_stalled_past_the_limit_is_dropped_and_its_references_released() {
    watchdog(&["every send returned", "all back"], |phase| {
        let (dir, l, mut end) = originator();
        end.backlog_frames = 200;
        let n = N.to_string();
        let mut stalled = receiver(&dir, &l, &mut end, &[&n, "stall"], true);
        let mut stalled_out = std::io::BufReader::new(stalled.stdout.take().unwrap());
        assert_eq!(line(&mut stalled_out).trim(), "joined");
        // Receiver 1 has the default limit: it may fall behind by a few hundred frames.
        end.backlog_frames = zcio_fbufs::link::DEFAULT_BACKLOG_FRAMES;
        let mut good = receiver(&dir, &l, &mut end, &[&n], false);
        let good_out = output_of(&mut good);
        let slowest = send_stream(&mut end, &[0, 1]);
        assert!(slowest < CALL, "a send took {slowest:?}");
        // Receiver 0 was dropped, with the reason, once 200 frames waited for it...
        assert_eq!(end.receivers_alive(), 1);
        assert_eq!(end.misbehaved.len(), 1, "{:?}", end.misbehaved);
        let why = &end.misbehaved[0];
        assert!(
            why.starts_with("receiver 0: stopped reading its socket: 201 frames wait for it")
                && why.ends_with("more than the limit of 200"),
            "{why}"
        );
        assert_eq!(end.backlog_bytes(0), 0);
        // ... and what it held released: every reference sent to it, socket and backlog. (The
        // ring took none: the path's first chunk was announced on the socket before the first
        // reference, and a receiver that has not taken the announcement gets every reference
        // after it on the socket too.)
        let held = end.released_for_dead;
        assert!(held > 200 && held < N as usize, "{held} released");
        phase.send("every send returned").unwrap();
        // Receiver 1 got the whole stream; then every fbuf is back on a free list.
        let said = serve_until(&mut end, &good_out);
        assert!(said.starts_with(&format!("ok {N} ")), "{said}");
        assert!(good.wait().unwrap().success());
        let t = Instant::now();
        while end.originator.outstanding() > 0 {
            assert!(t.elapsed() < PHASE, "fbufs never came back");
            end.poll(true).unwrap();
        }
        assert_eq!(end.released_for_dead, held);
        // The released fbufs were used again: the stream needed fewer than one per message.
        assert!(end.originator.cached() < N as usize);
        stalled.kill().unwrap();
        stalled.wait().unwrap();
        phase.send("all back").unwrap();
    });
}

#[test]
fn a_forwarder_keeps_taking_from_upstream_while_its_receiver_stalls() {
    // The server's rings downstream have the default slots: the stream must outgrow them.
    const M: u64 = zcio_fbufs::ring::DEFAULT_SLOTS as u64 + 2000;
    watchdog(
        &[
            "joined",
            "the forwarder took everything",
            "the stalled receiver caught up",
        ],
        |phase| {
            let dir = tempfile::tempdir().unwrap();
            let (up, down) = (dir.path().join("up"), dir.path().join("down"));
            let l = UnixListener::bind(&up).unwrap();
            let p = PathMemory::create(256 * 1024, 100, Variant::CACHED).unwrap();
            assert!(p.info().len() / zcio_vm::page_size() >= M as usize);
            let mut end = OriginatorEnd::new(p.originator().unwrap());
            end.ring_slots = SLOTS;
            let mut server = peer()
                .arg("forward")
                .args([&up, &down])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let (s, _) = l.accept().unwrap();
            rustix::net::sockopt::set_socket_send_buffer_size(&s, 4096).unwrap();
            end.add_receiver(s).unwrap();
            let mut server_out = std::io::BufReader::new(server.stdout.take().unwrap());
            assert_eq!(line(&mut server_out).trim(), "listening");
            let mut stalled = peer()
                .arg("receiver-loop")
                .arg(&down)
                .args([&M.to_string(), "stall"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let mut stalled_out = std::io::BufReader::new(stalled.stdout.take().unwrap());
            assert_eq!(line(&mut stalled_out).trim(), "joined");
            phase.send("joined").unwrap();

            for i in 0..M {
                let len = len_of(i);
                let f = end.alloc_waiting(len).unwrap();
                end.originator.write(&f, 0, &pattern(i, len)).unwrap();
                let t = Instant::now();
                end.send(f, &[0]).unwrap();
                assert!(t.elapsed() < CALL, "a send took {:?}", t.elapsed());
                end.poll(false).unwrap();
            }
            // The server takes every reference in although its receiver reads nothing: what
            // waits for it upstream drains.
            while end.backlog_bytes(0) > 0 {
                end.poll(false).unwrap();
                std::thread::sleep(Duration::from_millis(1));
            }
            assert_eq!(end.receivers_alive(), 1);
            phase.send("the forwarder took everything").unwrap();

            stalled.stdin.take().unwrap().write_all(b"go\n").unwrap();
            caught_up(&mut end, &mut stalled, &mut stalled_out, M);
            drop(end);
            let mut rest = String::new();
            server_out.read_to_string(&mut rest).unwrap();
            assert_eq!(rest.trim(), format!("forwarded {M}"));
            assert!(server.wait().unwrap().success());
            phase.send("the stalled receiver caught up").unwrap();
        },
    );
}

/// A receiver end for a hostile or stalled originator played by the test: the path offered
/// on a socket pair with rings of `slots`; the test keeps the other end of the socket and the
/// rings. With `small`, the receiver's side of the socket holds only a few frames.
fn raw_originator(slots: usize, small: bool) -> (PathMemory, Rings, UnixStream, ReceiverEnd) {
    let p = PathMemory::create(64 * 1024, 4, Variant::CACHED).unwrap();
    let rings = Rings::create(slots).unwrap();
    let (ours, theirs) = UnixStream::pair().unwrap();
    if small {
        rustix::net::sockopt::set_socket_send_buffer_size(&theirs, 4096).unwrap();
    }
    offer_path(&ours, p.info(), Some(rings.fd())).unwrap();
    // Its first chunk announced, as an originator does before any reference into it.
    let chunk = zcio_vm::mapping::memfd("raw-chunk", 64 * 1024).unwrap();
    zcio_vm::mapping::seal_future_writes(chunk.as_fd()).unwrap();
    let announce = frame(CHUNK, p.info().chunk_ref(0));
    zcio_vm::wire::send_with_fds(ours.as_fd(), &announce, &[chunk.as_fd()]).unwrap();
    rings.post_mail(Dir::Sends);
    let mut rx = ReceiverEnd::connect(theirs).unwrap();
    rx.spin = Duration::ZERO;
    // Taken before anything else comes (counted as taken from the socket).
    assert_eq!(rx.try_recv().unwrap(), Received::NotYet);
    assert_eq!(rings.mail_taken(Dir::Sends), 1);
    (p, rings, ours, rx)
}

fn frame(kind: u64, r: FbufRef) -> [u8; 24] {
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&kind.to_le_bytes());
    b[8..16].copy_from_slice(&r.addr.to_le_bytes());
    b[16..].copy_from_slice(&r.len.to_le_bytes());
    b
}

const SEND: u64 = 1;
const FREED: u64 = 2;
const SECURED: u64 = 4;
const CHUNK: u64 = 10;

/// Every whole frame waiting on `sock`, without waiting.
fn frames_on(sock: &UnixStream) -> Vec<(u64, u64)> {
    let mut bytes = Vec::new();
    let mut b = [0u8; 4096];
    while let Ok((_, n)) = rustix::net::recv(sock, &mut b, rustix::net::RecvFlags::DONTWAIT) {
        if n == 0 {
            break;
        }
        bytes.extend_from_slice(&b[..n]);
    }
    assert_eq!(bytes.len() % 24, 0, "a frame cut short");
    bytes
        .chunks(24)
        .map(|f| {
            let w = |i: usize| u64::from_le_bytes(f[i * 8..i * 8 + 8].try_into().unwrap());
            (w(0), w(1))
        })
        .collect()
}

#[test]
fn a_reference_on_the_ring_never_overtakes_one_on_the_socket() {
    let p = PathMemory::create(64 * 1024, 4, Variant::CACHED).unwrap();
    let mut end = OriginatorEnd::new(p.originator().unwrap());
    end.ring_slots = 1;
    // The path's first chunk made before the receiver comes: the offer announces it.
    let f = end.originator.alloc(100).unwrap();
    end.originator.free(f).unwrap();
    let (ours, sock) = UnixStream::pair().unwrap();
    end.add_receiver(ours).unwrap();
    let (_, rings) = accept_path(&sock).unwrap();
    let rings = Rings::open(rings.unwrap()).unwrap();
    // The announcement comes on the socket; the receiver takes it.
    assert_eq!(frames_on(&sock), [(CHUNK, p.info().addr as u64)]);
    rings.set_mail_taken(Dir::Sends, 1);
    let send = |end: &mut OriginatorEnd| {
        let f = end.originator.alloc(100).unwrap();
        end.send(f, &[0]).unwrap().addr
    };
    let (a, b) = (send(&mut end), send(&mut end));
    // `a` went on the ring, `b` on the socket (the ring was full). The receiver takes `a`:
    // the ring has room again, but `c` must follow `b`, which the receiver has not taken.
    let mut rx = 0;
    assert_eq!(
        rings.pop(Dir::Sends, &mut rx).unwrap(),
        Some([SEND, a, 100])
    );
    let c = send(&mut end);
    assert_eq!(
        rings.pop(Dir::Sends, &mut rx).unwrap(),
        None,
        "c overtook b"
    );
    assert_eq!(frames_on(&sock), [(SEND, b), (SEND, c)]);
    // Once the receiver says it took both, the ring is used again.
    rings.set_mail_taken(Dir::Sends, 3);
    let d = send(&mut end);
    assert_eq!(
        rings.pop(Dir::Sends, &mut rx).unwrap(),
        Some([SEND, d, 100])
    );
}

#[test]
fn a_receiver_takes_the_ring_before_what_it_read_early_from_the_socket() {
    let (p, rings, ours, mut rx) = raw_originator(2, false);
    let base = p.info().addr as u64;
    let r = |k: u64| FbufRef {
        addr: base + k * 4096,
        len: 10,
    };
    // Two references on the ring (now full), a third on the socket behind them.
    let mut tx = 0;
    for k in 0..2 {
        assert!(
            rings
                .push(Dir::Sends, &mut tx, [SEND, r(k).addr, 10])
                .unwrap()
        );
    }
    (&ours).write_all(&frame(SEND, r(2))).unwrap();
    rings.post_mail(Dir::Sends);
    assert_eq!(rx.try_recv().unwrap(), Received::Fbuf(r(0)));
    // Securing the first reads the socket for the answer, and the third with it.
    (&ours).write_all(&frame(SECURED, r(0))).unwrap();
    rx.secure(r(0)).unwrap();
    // Still in the order sent: the ring's second before the socket's third.
    assert_eq!(rx.try_recv().unwrap(), Received::Fbuf(r(1)));
    assert_eq!(rx.try_recv().unwrap(), Received::Fbuf(r(2)));
    assert_eq!(rings.mail_taken(Dir::Sends), 2);
    assert_eq!(rx.try_recv().unwrap(), Received::NotYet);
}

#[test]
fn notices_never_wait_for_an_originator_that_stopped_reading() {
    watchdog(&["freed", "all notices arrived"], |phase| {
        let (p, rings, ours, mut rx) = raw_originator(4, true);
        let base = p.info().addr as u64;
        // The originator sends the same few pages again and again (it could not, honestly,
        // without taking the notices in; a hostile one can) and reads nothing.
        let (mut tx, mut slowest, mut freed) = (0, Duration::ZERO, 0u64);
        for i in 0..N {
            let r = FbufRef {
                addr: base + (i % 4) * 4096,
                len: 10,
            };
            send_raw(&rings, &mut tx, &mut rx, r);
            let t = Instant::now();
            rx.free(r).unwrap();
            slowest = slowest.max(t.elapsed());
            freed += 1;
        }
        assert!(slowest < CALL, "a free took {slowest:?}");
        phase.send("freed").unwrap();
        // The originator reads again: the ring's notices and the socket's make every one,
        // once the receiver is touched again.
        let mut got = 0u64;
        let mut head = 0;
        let t = Instant::now();
        while got < freed {
            assert!(t.elapsed() < PHASE, "{got} of {freed} notices");
            while let Some([k, ..]) = rings.pop(Dir::Frees, &mut head).unwrap() {
                assert_eq!(k, FREED);
                got += 1;
            }
            for (k, _) in frames_on(&ours) {
                if k == FREED {
                    got += 1;
                }
            }
            rx.flush().unwrap();
        }
        assert_eq!(got, freed);
        phase.send("all notices arrived").unwrap();
    });
}

#[test]
fn a_receiver_gives_up_on_an_originator_stalled_past_the_limit() {
    watchdog(&["gave up"], |phase| {
        let (p, rings, ours, mut rx) = raw_originator(4, true);
        rx.backlog_frames = 100;
        let base = p.info().addr as u64;
        let mut tx = 0;
        let e = loop {
            let r = FbufRef {
                addr: base,
                len: 10,
            };
            send_raw(&rings, &mut tx, &mut rx, r);
            if let Err(e) = rx.free(r) {
                break e;
            }
            assert!(tx < 100_000, "never gave up");
        };
        assert!(
            matches!(e, LinkError::Stalled { peer: "the originator", limit: 100, frames } if frames > 100),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains("the originator stopped reading its socket"),
            "{e}"
        );
        // The link is over for this end, and the originator sees it end.
        assert_eq!(rx.try_recv().unwrap(), Received::Closed);
        let mut b = [0u8; 1 << 16];
        let t = Instant::now();
        loop {
            assert!(t.elapsed() < CALL, "the link never ended");
            match rustix::net::recv(&ours, &mut b, rustix::net::RecvFlags::empty()) {
                Ok((_, 0)) | Err(_) => break,
                Ok(_) => {}
            }
        }
        phase.send("gave up").unwrap();
    });
}

#[test]
fn a_frame_cut_short_holds_up_no_originator() {
    watchdog(&["polled"], |phase| {
        let p = PathMemory::create(64 * 1024, 4, Variant::CACHED).unwrap();
        let mut end = OriginatorEnd::new(p.originator().unwrap());
        let (ours, sock) = UnixStream::pair().unwrap();
        end.add_receiver(ours).unwrap();
        let (_, rings) = accept_path(&sock).unwrap();
        let rings = Rings::open(rings.unwrap()).unwrap();
        // A hostile receiver posts one byte of a frame and nothing more.
        (&sock).write_all(&[FREED as u8]).unwrap();
        rings.post_mail(Dir::Frees);
        let t = Instant::now();
        end.poll(false).unwrap();
        assert!(t.elapsed() < CALL);
        assert_eq!(end.receivers_alive(), 1);
        phase.send("polled").unwrap();
    });
}
