//! The UDP module's credit window and loss detection (`zcio_genie::datagram`): behind a
//! receiver that is late, loopback loses nothing; where a network loses datagrams (a relay here
//! that drops some), the receiver names the message lost, counts it, and goes on with the next.

use std::net::UdpSocket;
use std::os::fd::OwnedFd;
use std::time::Duration;
use zcio_genie::stream::{self, ModuleKind, StreamEnd};
use zcio_genie::{GenieError, InputBuffering, Semantics};

fn message(len: usize, i: usize) -> Vec<u8> {
    (0..len)
        .map(|k| (k as u8).wrapping_mul(7).wrapping_add(i as u8))
        .collect()
}

/// Messages of random lengths to 2 MiB from a sender thread under emulated copy; the receiver
/// sleeps `late` before one receive in eight. Every message arrives whole.
fn late_receiver(late: Duration, count: usize) {
    let (mut tx, mut rx) = stream::pair(ModuleKind::Udp).unwrap();
    let w = rx.udp_window().unwrap().clone();
    assert!(w.datagrams >= 1, "{w:?}");
    if let Some(why) = &w.limited {
        eprintln!("the UDP window is limited here: {why}");
    }
    let seed = fastrand::u64(..);
    let mut rng = fastrand::Rng::with_seed(seed);
    let lens: Vec<usize> = (0..count).map(|_| rng.usize(1..=2 << 20)).collect();
    let sent = lens.clone();
    let sender = std::thread::spawn(move || {
        for (i, &len) in sent.iter().enumerate() {
            tx.send(Semantics::EmulatedCopy, &message(len, i)).unwrap();
        }
    });
    for (i, &len) in lens.iter().enumerate() {
        if i % 8 == 7 {
            std::thread::sleep(late);
        }
        let mut got = vec![0u8; len];
        rx.recv(
            Semantics::EmulatedCopy,
            &mut got,
            InputBuffering::EarlyDemux,
        )
        .unwrap_or_else(|e| panic!("seed {seed}: message {i} of {len} bytes: {e}"));
        assert!(got == message(len, i), "seed {seed}: message {i} differs");
    }
    sender.join().unwrap();
    assert_eq!(rx.lost_messages(), 0);
}

#[test]
fn no_message_is_lost_behind_a_receiver_5_ms_late() {
    late_receiver(Duration::from_millis(5), 60);
}

#[test]
fn no_message_is_lost_behind_a_receiver_50_ms_late() {
    late_receiver(Duration::from_millis(50), 40);
}

/// A relay between two UDP ends that drops the data datagrams (those longer than a credit)
/// whose number (from 0) `drop` says yes to, and forwards everything else both ways.
fn lossy_pair(drop: impl Fn(usize) -> bool + Send + 'static) -> (StreamEnd, StreamEnd) {
    let bind = || UdpSocket::bind("127.0.0.1:0").unwrap();
    let (a, ra, rb, b) = (bind(), bind(), bind(), bind());
    a.connect(ra.local_addr().unwrap()).unwrap();
    ra.connect(a.local_addr().unwrap()).unwrap();
    b.connect(rb.local_addr().unwrap()).unwrap();
    rb.connect(b.local_addr().unwrap()).unwrap();
    for s in [&ra, &rb] {
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        // Room for what the test has in flight, or the relay itself would lose it.
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size_force(s, 4 << 20)
            .or_else(|_| rustix::net::sockopt::set_socket_recv_buffer_size(s, 4 << 20));
    }
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 << 10];
        let mut data = 0;
        // Ends when both ends are gone (a send is refused) or nothing moves for 10 s.
        let mut idle = 0;
        while idle < 500 {
            idle += 1;
            if let Ok(n) = ra.recv(&mut buf) {
                idle = 0;
                let keep = n <= 32 || {
                    data += 1;
                    !drop(data - 1)
                };
                if keep && rb.send(&buf[..n]).is_err() {
                    return;
                }
            }
            if let Ok(n) = rb.recv(&mut buf) {
                idle = 0;
                if ra.send(&buf[..n]).is_err() {
                    return;
                }
            }
        }
    });
    let end = |s: UdpSocket| StreamEnd::from_fd(ModuleKind::Udp, OwnedFd::from(s)).unwrap();
    (end(a), end(b))
}

/// Three messages of three datagrams each, with the datagrams `drop` says yes to lost: what
/// the receiver gets of each. At most two messages are in flight at once, so that the relay's
/// own sockets need no more than a default buffer.
fn through_loss(drop: impl Fn(usize) -> bool + Send + 'static) -> Vec<Result<(), GenieError>> {
    let (mut tx, mut rx) = lossy_pair(drop);
    let len = 2 * 60 * 1024 + 4096;
    let mut recv = |i: usize| {
        let mut got = vec![0u8; len];
        let r = rx.recv(Semantics::Copy, &mut got, InputBuffering::EarlyDemux);
        if r.is_ok() {
            assert!(got == message(len, i), "message {i} differs");
        }
        (r.map(|_| ()), rx.lost_messages())
    };
    tx.send(Semantics::Copy, &message(len, 0)).unwrap();
    let r0 = recv(0);
    tx.send(Semantics::Copy, &message(len, 1)).unwrap();
    tx.send(Semantics::Copy, &message(len, 2)).unwrap();
    let (r1, r2) = (recv(1), recv(2));
    let out = vec![r0.0, r1.0, r2.0];
    assert_eq!(
        r2.1 as usize,
        out.iter().filter(|r| r.is_err()).count(),
        "the lost messages counted"
    );
    out
}

#[test]
fn a_datagram_lost_inside_a_message_names_it_and_the_next_arrives() {
    // Datagram 4: the second of message 1.
    let r = through_loss(|n| n == 4);
    assert!(r[0].is_ok() && r[2].is_ok(), "{r:?}");
    match &r[1] {
        Err(GenieError::MessageLost {
            seq: 1,
            len,
            detail,
        }) => {
            assert_eq!(*len, 2 * 60 * 1024 + 4096);
            assert!(detail.contains("at byte 61440"), "{detail}");
        }
        other => panic!("message 1: {other:?}"),
    }
}

#[test]
fn a_message_lost_whole_names_it_and_the_next_arrives() {
    let r = through_loss(|n| (3..6).contains(&n));
    assert!(r[0].is_ok() && r[2].is_ok(), "{r:?}");
    assert!(
        matches!(&r[1], Err(GenieError::MessageLost { seq: 1, detail, .. }) if detail.contains("no datagram")),
        "{r:?}"
    );
}

#[test]
fn a_udp_end_carries_one_direction() {
    let (mut tx, mut rx) = stream::pair(ModuleKind::Udp).unwrap();
    tx.send(Semantics::Copy, b"one way").unwrap();
    let mut got = [0u8; 7];
    rx.recv(Semantics::Copy, &mut got, InputBuffering::EarlyDemux)
        .unwrap();
    assert_eq!(&got, b"one way");
    let e = rx.send(Semantics::Copy, b"back").unwrap_err();
    assert!(
        matches!(e, GenieError::InvalidArgument { .. }) && e.to_string().contains("one direction"),
        "{e}"
    );
}

#[test]
fn a_buffer_of_the_wrong_length_leaves_the_message_queued() {
    let (mut tx, mut rx) = stream::pair(ModuleKind::Udp).unwrap();
    let m = message(100_000, 9);
    tx.send(Semantics::Copy, &m).unwrap();
    let mut small = vec![0u8; 10];
    let e = rx
        .recv(Semantics::Copy, &mut small, InputBuffering::EarlyDemux)
        .unwrap_err();
    assert!(
        matches!(
            e,
            GenieError::TooSmall {
                needed: 100_000,
                got: 10
            }
        ),
        "{e}"
    );
    let mut large = vec![0u8; 200_000];
    let e = rx
        .recv(Semantics::Copy, &mut large, InputBuffering::EarlyDemux)
        .unwrap_err();
    assert!(
        matches!(
            e,
            GenieError::Truncated {
                expected: 200_000,
                got: 100_000
            }
        ),
        "{e}"
    );
    let mut got = vec![0u8; 100_000];
    rx.recv(
        Semantics::EmulatedCopy,
        &mut got,
        InputBuffering::EarlyDemux,
    )
    .unwrap();
    assert!(got == m);
    assert_eq!(rx.lost_messages(), 0);
}
