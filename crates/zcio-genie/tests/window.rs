//! The output window of the memory network: an output that fits the room left returns without
//! waiting for the receiver, however busy it is, and the receiver still gets the bytes of the
//! moment of the call; two ends sending large messages to each other at once both finish; an
//! endpoint that may not wait says so (`WouldBlock`), or gives the wait up after its time, with
//! nothing announced, and the next message goes through whole.

mod common;

use common::{bounded, fill_message as fill, message_byte as byte};
use std::sync::mpsc;
use std::time::Duration;
use zcio_genie::memnet::{LinkOptions, MemnetEndpoint, Waits, WindowFull, pair_with};
use zcio_genie::profile::Profile;
use zcio_genie::{AppBuffer, ErrorKind, GenieError, InputBuffering, Semantics};

const MIB: usize = 1 << 20;

fn forced_pair(window: usize) -> (MemnetEndpoint, MemnetEndpoint) {
    let (mut a, mut b) = pair_with(LinkOptions { window }).unwrap();
    a.set_profile(Profile::zero_copy());
    b.set_profile(Profile::zero_copy());
    (a, b)
}

/// The index of the first byte that is not message `i`'s, if any.
fn first_wrong(buf: &[u8], i: usize) -> Option<usize> {
    buf.iter().enumerate().position(|(k, &b)| b != byte(i, k))
}

fn buffer(len: usize, huge: bool) -> AppBuffer {
    match huge {
        true => AppBuffer::huge(len).unwrap(),
        false => AppBuffer::new(len).unwrap(),
    }
}

#[test]
fn an_output_within_the_window_returns_before_the_receiver_reads_and_keeps_its_bytes() {
    bounded(
        "outputs within the window",
        Duration::from_secs(120),
        || {
            for (huge, sem) in [
                (false, Semantics::EmulatedCopy),
                (true, Semantics::EmulatedCopy),
                (false, Semantics::Copy),
            ] {
                let (mut tx, mut rx) = forced_pair(64 * MIB);
                assert!(tx.window() >= 64 * MIB, "window {}", tx.window());
                let len = 64 * MIB;
                let mut buf = buffer(len, huge);
                fill(&mut buf, 1);
                let (sent_tx, sent_rx) = mpsc::channel::<()>();
                std::thread::scope(|s| {
                    let h = s.spawn(move || {
                        // The receiver reads nothing until the sender's call has returned: a send
                        // that waited for it would hang here (and the time limit fail the test).
                        sent_rx.recv().unwrap();
                        let (got, _) = rx.recv_alloc(sem, InputBuffering::EarlyDemux).unwrap();
                        assert_eq!(got.len(), len);
                        first_wrong(&got, 1)
                    });
                    let (t, acc) = tx.send(sem, &buf).unwrap();
                    // Overwritten at once: the receiver must still get message 1.
                    fill(&mut buf, 2);
                    sent_tx.send(()).unwrap();
                    tx.wait(t).unwrap();
                    let wrong = h.join().unwrap();
                    assert_eq!(
                        wrong, None,
                        "{sem}, huge {huge}: the receiver's byte differs ({})",
                        acc.path
                    );
                });
            }
        },
    );
}

#[test]
fn two_ends_sending_64_mib_to_each_other_at_once_both_finish() {
    bounded("two ends sending at once", Duration::from_secs(120), || {
        let (a, b) = forced_pair(64 * MIB);
        let len = 64 * MIB;
        let run = |mut end: MemnetEndpoint, me: usize| {
            move || {
                let mut out = buffer(len, me == 0);
                fill(&mut out, me);
                let (t, _) = end.send(Semantics::EmulatedCopy, &out).unwrap();
                out.fill(0xEE);
                let (got, _) = end
                    .recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux)
                    .unwrap();
                end.wait(t).unwrap();
                (got.len(), first_wrong(&got, 1 - me))
            }
        };
        let (ha, hb) = (std::thread::spawn(run(a, 0)), std::thread::spawn(run(b, 1)));
        assert_eq!(ha.join().unwrap(), (len, None), "side 0 received");
        assert_eq!(hb.join().unwrap(), (len, None), "side 1 received");
    });
}

#[test]
fn an_endpoint_that_may_not_wait_says_so_with_nothing_announced() {
    let (mut tx, mut rx) = forced_pair(8 * MIB);
    tx.set_window_full(WindowFull::WouldBlock);
    let w = tx.window();
    // Longer than the whole window: never fits, refused as such.
    let long = AppBuffer::new(w + 4096).unwrap();
    let e = tx.send(Semantics::EmulatedCopy, &long).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("window"), "{e}");
    // The window filled by one message: the next has no room, and says so.
    let mut first = AppBuffer::new(w).unwrap();
    fill(&mut first, 1);
    let (t1, _) = tx.send(Semantics::EmulatedCopy, &first).unwrap();
    let mut second = AppBuffer::new(3 * 4096 + 100).unwrap();
    fill(&mut second, 2);
    match tx.send(Semantics::EmulatedCopy, &second) {
        Err(GenieError::WouldBlock { len, window, .. }) => {
            assert_eq!((len, window), (second.len(), w));
        }
        other => panic!("want WouldBlock, got {other:?}"),
    }
    assert_eq!(tx.pending(), 1, "nothing more was announced");
    // Once the receiver has read the first, the second goes through, and arrives whole.
    let (got, _) = rx
        .recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux)
        .unwrap();
    assert_eq!(first_wrong(&got, 1), None);
    tx.wait(t1).unwrap();
    let (t2, _) = tx.send(Semantics::EmulatedCopy, &second).unwrap();
    let (got, _) = rx
        .recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux)
        .unwrap();
    assert_eq!(got.len(), second.len());
    assert_eq!(first_wrong(&got, 2), None);
    tx.wait(t2).unwrap();
}

#[test]
fn a_wait_for_room_gives_up_after_its_time_and_the_next_message_goes_through_whole() {
    let (mut tx, mut rx) = forced_pair(4 * MIB);
    tx.set_waits(Waits {
        timeout: Some(Duration::from_millis(30)),
        interruptible: false,
    });
    let w = tx.window();
    let mut first = AppBuffer::new(w).unwrap();
    fill(&mut first, 1);
    let (t1, _) = tx.send(Semantics::Copy, &first).unwrap();
    let mut second = AppBuffer::new(2 * MIB + 5).unwrap();
    fill(&mut second, 2);
    let e = tx.send(Semantics::EmulatedCopy, &second).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
    assert_eq!(tx.pending(), 1, "nothing more was announced");
    let (got, _) = rx
        .recv_alloc(Semantics::Copy, InputBuffering::EarlyDemux)
        .unwrap();
    assert_eq!((got.len(), first_wrong(&got, 1)), (w, None));
    tx.wait(t1).unwrap();
    let (t2, _) = tx.send(Semantics::EmulatedCopy, &second).unwrap();
    let (got, _) = rx
        .recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux)
        .unwrap();
    assert_eq!((got.len(), first_wrong(&got, 2)), (second.len(), None));
    tx.wait(t2).unwrap();
}

#[test]
fn small_messages_fill_the_ring_and_each_arrives_whole() {
    // More messages than the ring has pipes, of every length class, at page offsets: each
    // takes a ring position of its own, and the ring goes round several times.
    let (mut tx, mut rx) = forced_pair(4 * MIB);
    let backing = AppBuffer::new(3 * MIB).unwrap();
    let lens = [1, 100, 4096, 4097, 70_000, MIB + 3, 2 * MIB - 1];
    std::thread::scope(|s| {
        let h = s.spawn(move || {
            for i in 0..60 {
                let len = lens[i % lens.len()];
                let mut got = vec![0u8; len];
                let (n, _) = rx
                    .recv(
                        Semantics::EmulatedCopy,
                        &mut got,
                        InputBuffering::EarlyDemux,
                    )
                    .unwrap();
                assert_eq!(n, len);
                assert_eq!(first_wrong(&got, i), None, "message {i} of {len} bytes");
            }
        });
        let mut backing = backing;
        let mut tickets = Vec::new();
        for i in 0..60 {
            let len = lens[i % lens.len()];
            let off = (i * 37) % 4096;
            let m = &mut backing[off..off + len];
            fill(m, i);
            let (t, _) = tx.send(Semantics::EmulatedCopy, m).unwrap();
            tickets.push(t);
            tx.reap().unwrap();
            // The next message reuses the buffer: TCOW keeps this one's bytes.
        }
        h.join().unwrap();
        for t in tickets {
            tx.wait(t).unwrap();
        }
    });
}

#[test]
fn two_ends_sending_each_other_messages_longer_than_the_window_both_finish() {
    bounded("long messages both ways", Duration::from_secs(120), || {
        let (a, b) = forced_pair(4 * MIB);
        let len = 40 * MIB + 12345;
        let run = |mut end: MemnetEndpoint, me: usize| {
            move || {
                assert!(end.window() < len);
                let mut out = buffer(len + 100, me == 0);
                let m = &mut out[100..];
                fill(m, me);
                let (t, _) = end.send(Semantics::EmulatedCopy, m).unwrap();
                m.fill(0xEE);
                // Each end took the other's message in while its own output waited.
                let (got, acc) = end
                    .recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux)
                    .unwrap();
                end.wait(t).unwrap();
                (got.len(), first_wrong(&got, 1 - me), acc.path.to_string())
            }
        };
        let (ha, hb) = (std::thread::spawn(run(a, 0)), std::thread::spawn(run(b, 1)));
        for (side, h) in [ha, hb].into_iter().enumerate() {
            let (n, wrong, path) = h.join().unwrap();
            assert_eq!((n, wrong), (len, None), "side {side} received ({path})");
            assert!(path.contains("taken in whole"), "side {side}: {path}");
        }
    });
}

#[test]
fn a_message_longer_than_the_window_arrives_whole_into_every_kind_of_buffer() {
    bounded("long messages", Duration::from_secs(120), || {
        let (mut tx, mut rx) = forced_pair(2 * MIB);
        let len = 9 * MIB + 777;
        let mut out = buffer(len + 5000, false);
        let receiver = std::thread::spawn(move || {
            // Into the application's buffer (too small first: the message stays).
            let mut small = vec![0u8; len - 1];
            let e = rx
                .recv(
                    Semantics::EmulatedCopy,
                    &mut small,
                    InputBuffering::EarlyDemux,
                )
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::TooSmall { needed: len }, "{e}");
            let mut got = vec![0u8; len];
            let (n, acc) = rx
                .recv(
                    Semantics::EmulatedCopy,
                    &mut got,
                    InputBuffering::EarlyDemux,
                )
                .unwrap();
            assert_eq!((n, first_wrong(&got, 0)), (len, None), "{}", acc.path);
            // Its segments read through the semantics' own input path as they came: into the
            // staging, then swapped in, the partial pages copied; never assembled and copied.
            let ps = zcio_vm::page_size() as u64;
            assert!(
                acc.cpu_copied_bytes < 2 * ps && acc.swapped_bytes > len as u64 - 2 * ps,
                "placed once, not copied out: {acc:?}"
            );
            // A buffer of its own.
            assert_eq!(rx.peek_len().unwrap(), len);
            let (got, acc) = rx
                .recv_alloc(Semantics::Copy, InputBuffering::EarlyDemux)
                .unwrap();
            assert_eq!(first_wrong(&got, 1), None, "{}", acc.path);
            assert_eq!(acc.cpu_copied_bytes, 0, "handed over");
            // A region.
            let (r, _) = rx
                .recv_region(Semantics::EmulatedMove, InputBuffering::EarlyDemux)
                .unwrap();
            assert_eq!(first_wrong(&r.as_slice()[..len], 2), None);
        });
        for i in 0..3 {
            let m = &mut out[4097..4097 + len];
            fill(m, i);
            let (t, _) = tx.send(Semantics::EmulatedCopy, m).unwrap();
            m.fill(0xEE);
            tx.wait(t).unwrap();
        }
        receiver.join().unwrap();
    });
}

#[test]
fn two_ends_that_wait_for_their_outputs_before_receiving_both_finish() {
    bounded("waits before receives", Duration::from_secs(60), || {
        let (a, b) = forced_pair(8 * MIB);
        let run = |mut end: MemnetEndpoint, me: usize| {
            move || {
                let mut out = buffer(3 * MIB, false);
                fill(&mut out, me);
                let (t, _) = end.send(Semantics::Copy, &out).unwrap();
                // Waits for the peer to read, which itself waits first: each takes the
                // other's message in while it waits.
                end.wait(t).unwrap();
                let (got, _) = end
                    .recv_alloc(Semantics::Copy, InputBuffering::EarlyDemux)
                    .unwrap();
                first_wrong(&got, 1 - me)
            }
        };
        let (ha, hb) = (std::thread::spawn(run(a, 0)), std::thread::spawn(run(b, 1)));
        assert_eq!(ha.join().unwrap(), None);
        assert_eq!(hb.join().unwrap(), None);
    });
}

#[test]
fn a_receiver_gone_mid_message_fails_the_senders_call_in_bounded_time_and_the_next_is_refused() {
    bounded("a receiver gone", Duration::from_secs(60), || {
        let (mut tx, rx) = forced_pair(4 * MIB);
        let out = buffer(40 * MIB, false);
        let gone = std::thread::spawn(move || {
            // The receiver reads nothing and goes while the sender's segments wait for room.
            std::thread::sleep(Duration::from_millis(50));
            drop(rx);
        });
        let e = tx.send(Semantics::EmulatedCopy, &out).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PeerGone, "{e}");
        gone.join().unwrap();
        // Part of the message went out: the output refuses from then on (or finds the peer
        // gone), never sends a message that could be taken for a whole one.
        let e = tx.send(Semantics::Copy, &out[..4096]).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::Refused | ErrorKind::PeerGone),
            "{e}"
        );
    });
}
