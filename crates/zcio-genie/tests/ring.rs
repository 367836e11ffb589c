//! The memory network's shared ring: messages below the copy crossover copied through the
//! link's arena instead of the pipes. Their order among the wire's messages, their bytes when
//! the sender overwrites its buffer at once, the copies counted, the wire taking over when
//! the ring is full, and the doorbell of a receiver that sleeps or is watched from outside.

mod common;

use common::{fill, forced_pair};
use rustix::event::{PollFd, PollFlags, poll};
use std::os::fd::AsFd;
use std::time::Duration;
use zcio_genie::memnet::ring::{RING_BYTES, RING_MAX};
use zcio_genie::path::DataPath;
use zcio_genie::{InputBuffering, Semantics, Waits};
use zcio_vm::{MapOptions, Mapping};

fn in_ring(p: &DataPath) -> bool {
    match p {
        DataPath::SharedRing { .. } => true,
        DataPath::Joined(v) => v.iter().any(in_ring),
        _ => false,
    }
}

/// Long enough for any wake-up here; a receiver that was not woken fails with a timeout
/// instead of hanging the test.
const BOUND: Duration = Duration::from_secs(10);

#[test]
fn short_messages_among_long_ones_keep_their_order_and_the_bytes_of_the_call() {
    // The zero-copy profile: emulated copy copies below one page, and takes TCOW from there.
    let (mut tx, mut rx) = forced_pair();
    rx.set_waits(Waits {
        timeout: Some(BOUND),
        interruptible: false,
    });
    let ps = zcio_vm::page_size();
    let lens = [
        1,
        64,
        100,
        ps - 1,
        3 * ps,
        65,
        1 << 20,
        7,
        ps / 2,
        5 * ps + 17,
    ];
    let mut bufs: Vec<Mapping> = lens
        .iter()
        .map(|&n| Mapping::anonymous(n.max(ps), MapOptions::default()).unwrap())
        .collect();
    let wants: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let mut v = vec![0u8; n];
            fill(&mut v, i as u8 + 1);
            v
        })
        .collect();
    std::thread::scope(|s| {
        let rxh = s.spawn(move || {
            let mut got = vec![0u8; 1 << 21];
            for (i, want) in wants.iter().enumerate() {
                let (n, acc) = rx
                    .recv(
                        Semantics::EmulatedCopy,
                        &mut got,
                        InputBuffering::EarlyDemux,
                    )
                    .unwrap();
                assert_eq!(n, want.len(), "message {i}: length");
                assert!(got[..n] == want[..], "message {i}: bytes");
                if n < ps {
                    assert!(in_ring(&acc.path), "message {i}: {}", acc.path);
                    assert_eq!(acc.cpu_copied_bytes, n as u64, "message {i}: copied out");
                    assert_eq!(acc.kernel_copied_bytes, Some(0), "message {i}");
                } else {
                    assert!(!in_ring(&acc.path), "message {i}: {}", acc.path);
                }
            }
        });
        for (i, &n) in lens.iter().enumerate() {
            let b = &mut bufs[i].as_mut_slice()[..n];
            fill(b, i as u8 + 1);
            let (t, acc) = tx.send(Semantics::EmulatedCopy, b).unwrap();
            // Overwritten at once: the receiver still gets the bytes of the call.
            b.fill(0xEE);
            if n < ps {
                assert!(in_ring(&acc.path), "message {i}: {}", acc.path);
                assert_eq!(acc.cpu_copied_bytes, n as u64, "message {i}: copied in");
                // Its buffer is the application's again: the ticket is complete.
                tx.wait(t).unwrap();
            } else {
                assert!(!in_ring(&acc.path), "message {i}: {}", acc.path);
                assert!(acc.path.is_uffd_tcow() || acc.cpu_copied_bytes < n as u64);
            }
        }
        tx.flush().unwrap();
        rxh.join().unwrap();
    });
}

#[test]
fn a_full_ring_hands_the_next_message_to_the_wire_in_order() {
    let (mut tx, mut rx) = forced_pair();
    // Copy semantics copies every message: the ring takes them while it has room.
    let fits = RING_BYTES / RING_MAX;
    let mut sent = Vec::new();
    for i in 0..fits + 2 {
        let mut m = vec![0u8; RING_MAX];
        fill(&mut m, i as u8);
        let (_, acc) = tx.send(Semantics::Copy, &m).unwrap();
        assert_eq!(in_ring(&acc.path), i < fits, "message {i}: {}", acc.path);
        sent.push(m);
    }
    // A short one after them waits its turn on the wire too (the ring is still full).
    let (_, acc) = tx.send(Semantics::Copy, b"after").unwrap();
    assert!(!in_ring(&acc.path), "{}", acc.path);
    sent.push(b"after".to_vec());
    let mut got = vec![0u8; RING_MAX];
    for (i, want) in sent.iter().enumerate() {
        let (n, acc) = rx
            .recv(Semantics::Copy, &mut got, InputBuffering::EarlyDemux)
            .unwrap();
        assert_eq!(&got[..n], &want[..], "message {i}");
        assert_eq!(in_ring(&acc.path), i < fits, "message {i}: {}", acc.path);
    }
    tx.flush().unwrap();
    // The ring has room again.
    let (_, acc) = tx.send(Semantics::Copy, b"again").unwrap();
    assert!(in_ring(&acc.path), "{}", acc.path);
    let (n, _) = rx
        .recv(Semantics::Copy, &mut got, InputBuffering::EarlyDemux)
        .unwrap();
    assert_eq!(&got[..n], b"again");
}

#[test]
fn a_receiver_asleep_is_woken_by_a_message_in_the_ring() {
    let (mut tx, mut rx) = forced_pair();
    // No spin: the receiver goes to sleep at once.
    rx.set_spin(Duration::ZERO);
    rx.set_waits(Waits {
        timeout: Some(BOUND),
        interruptible: false,
    });
    std::thread::scope(|s| {
        let h = s.spawn(move || {
            let mut got = [0u8; 64];
            let (n, acc) = rx
                .recv(Semantics::Copy, &mut got, InputBuffering::EarlyDemux)
                .unwrap();
            assert_eq!(&got[..n], &[9u8; 64]);
            assert!(in_ring(&acc.path), "{}", acc.path);
            std::time::Instant::now()
        });
        // Long enough for the receiver to be asleep (no spin); what is checked is the order
        // of events, not a duration: it returned with the message only after it was sent.
        std::thread::sleep(Duration::from_millis(100));
        let before_send = std::time::Instant::now();
        let (_, acc) = tx.send(Semantics::Copy, &[9u8; 64]).unwrap();
        assert!(in_ring(&acc.path), "{}", acc.path);
        let returned = h.join().unwrap();
        assert!(
            returned >= before_send,
            "returned before the message was sent"
        );
    });
}

#[test]
fn an_end_watched_from_outside_becomes_readable_for_a_message_in_the_ring() {
    let (mut tx, mut rx) = forced_pair();
    let readable = |rx: &zcio_genie::memnet::MemnetEndpoint, ms: i64| {
        let fd = rx.as_fd();
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        let t = rustix::time::Timespec {
            tv_sec: ms / 1000,
            tv_nsec: (ms % 1000) * 1_000_000,
        };
        poll(&mut fds, Some(&t)).unwrap();
        fds[0].revents().contains(PollFlags::IN)
    };
    assert!(!readable(&rx, 0), "readable before anything was sent");
    let (_, acc) = tx.send(Semantics::Copy, &[5u8; 300]).unwrap();
    assert!(in_ring(&acc.path), "{}", acc.path);
    assert!(
        readable(&rx, 5000),
        "not readable after a message in the ring"
    );
    let mut got = [0u8; 300];
    let (n, _) = rx
        .recv(Semantics::Copy, &mut got, InputBuffering::EarlyDemux)
        .unwrap();
    assert_eq!(&got[..n], &[5u8; 300]);
    // Taken and reaped: the descriptor settles.
    rx.reap().unwrap();
    assert!(!readable(&rx, 0), "still readable with nothing to take");
    // Every message rings a watched end, not only the first.
    tx.send(Semantics::Copy, &[6u8; 10]).unwrap();
    assert!(readable(&rx, 5000), "not readable for the second message");
    // Reaped before it is taken: it stays readable while the message waits.
    rx.reap().unwrap();
    assert!(readable(&rx, 0), "not readable while a message waits");
}

#[test]
fn messages_taken_in_while_an_output_waits_keep_the_rings_bytes() {
    // One end sends the other many short messages and then a message longer than its window;
    // the other end, sending its own long message, takes them in while it waits.
    let (mut a, mut b) = common::forced_pair();
    let long = a.window() + (1 << 20);
    let mut big_a = vec![0u8; long];
    fill(&mut big_a, 1);
    let mut big_b = vec![0u8; long];
    fill(&mut big_b, 2);
    let shorts: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 100 + i as usize]).collect();
    std::thread::scope(|s| {
        let (shorts, big_a, big_b) = (&shorts, &big_a, &big_b);
        let ha = s.spawn(move || {
            for m in shorts {
                a.send(Semantics::Copy, m).unwrap();
            }
            a.send(Semantics::Copy, big_a).unwrap();
            let mut got = vec![0u8; long];
            let (n, _) = a
                .recv(Semantics::Copy, &mut got, InputBuffering::EarlyDemux)
                .unwrap();
            assert!(got[..n] == big_b[..], "a got b's long message");
            a.flush().unwrap();
        });
        b.send(Semantics::Copy, big_b).unwrap();
        let mut got = vec![0u8; long];
        for (i, m) in shorts.iter().enumerate() {
            let (n, _) = b
                .recv(Semantics::Copy, &mut got, InputBuffering::EarlyDemux)
                .unwrap();
            assert_eq!(&got[..n], &m[..], "short message {i}");
        }
        let (n, _) = b
            .recv(Semantics::Copy, &mut got, InputBuffering::EarlyDemux)
            .unwrap();
        assert!(got[..n] == big_a[..], "b got a's long message");
        b.flush().unwrap();
        ha.join().unwrap();
    });
}

#[test]
fn a_message_longer_than_the_rings_takes_the_wire_at_once() {
    let (mut tx, mut rx) = forced_pair();
    // Longer than the ring's messages, within the window: queued whole without a reader.
    let len = tx.window().min(3 * RING_MAX);
    assert!(len > RING_MAX);
    let mut m = Mapping::anonymous(len, MapOptions::default()).unwrap();
    fill(m.as_mut_slice(), 9);
    let want = m.as_slice().to_vec();
    // Emulated copy protects and references it, and returns.
    let (t, sent) = tx.send(Semantics::EmulatedCopy, m.as_slice()).unwrap();
    assert!(!in_ring(&sent.path), "{}", sent.path);
    m.as_mut_slice().fill(0xEE);
    let mut got = vec![0u8; len];
    let (n, _) = rx
        .recv(
            Semantics::EmulatedCopy,
            &mut got,
            InputBuffering::EarlyDemux,
        )
        .unwrap();
    assert_eq!(n, len);
    assert!(got == want, "the receiver's bytes differ");
    tx.wait(t).unwrap();
}
