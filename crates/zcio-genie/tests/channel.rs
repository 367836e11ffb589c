//! Memory-network links between processes that find each other by name
//! (`zcio_genie::memnet::channel`): a process started on its own (this test binary run again,
//! not a fork) connects by name and passes 256 MiB under emulated copy, overwriting its buffer
//! right after each send; the listener receives the bytes of the moment of the call. And the
//! ways a setup fails: nobody listening, a name taken, another user. The same program over
//! TCP (`tcp://host:port`): every message whole, a too-small buffer, a peer that breaks the
//! framing.

mod common;

use common::unique;
use std::process::Command;
use std::time::{Duration, Instant};
use zcio_genie::channel::Channel;
use zcio_genie::memnet::Waits;
use zcio_genie::memnet::channel::{Listener, connect};
use zcio_genie::{AppBuffer, ErrorKind, GenieError, InputBuffering, Semantics};

const TEST: &str = "two_processes_find_each_other_by_name_and_pass_256_mib";
const SENDER_ENV: &str = "ZCIO_CHANNEL_TEST_SENDER";
const LEN: usize = 256 << 20;

/// Byte `k` of message `i`.
fn byte(i: usize, k: usize) -> u8 {
    (k as u8)
        .wrapping_mul(29)
        .wrapping_add(i as u8)
        .wrapping_add((k >> 12) as u8)
}

/// The sender, in the child: connect by name, send two messages, overwrite each right after.
fn sender(name: &str) {
    let mut tx = Channel::connect(name, Duration::from_secs(30)).unwrap();
    let mut buf = AppBuffer::huge(LEN).unwrap();
    for i in 0..2 {
        for (k, b) in buf.iter_mut().enumerate() {
            *b = byte(i, k);
        }
        let (t, acc) = tx.send(Semantics::EmulatedCopy, &buf).unwrap();
        buf.fill(0xEE); // the receiver must not see this
        tx.wait(t).unwrap();
        println!("sent {i}: {}", acc.path);
    }
    println!("sender done");
}

#[test]
fn two_processes_find_each_other_by_name_and_pass_256_mib() {
    if let Ok(name) = std::env::var(SENDER_ENV) {
        sender(&name);
        return;
    }
    let name = unique("256");
    let listener = Channel::listen(&name).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(SENDER_ENV, &name)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut rx = listener.accept(Some(Duration::from_secs(60))).unwrap();
    rx.set_waits(Waits {
        timeout: Some(Duration::from_secs(120)),
        interruptible: false,
    });
    for i in 0..2 {
        let (got, acc) = rx
            .recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux)
            .unwrap();
        assert_eq!(got.len(), LEN);
        if let Some(k) = got.iter().enumerate().position(|(k, &b)| b != byte(i, k)) {
            panic!(
                "message {i}: byte {k} is {:#x}, not {:#x} (path {})",
                got[k],
                byte(i, k),
                acc.path
            );
        }
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("sender done"),
        "the sender: {stdout}"
    );
}

#[test]
fn a_name_nobody_listens_on_fails_within_its_timeout() {
    let t0 = Instant::now();
    let e = connect(&unique("nobody"), Duration::from_millis(100)).unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::TimedOut), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let listener = Listener::bind(&unique("quiet")).unwrap();
    let e = listener
        .accept(Some(Duration::from_millis(50)))
        .unwrap_err();
    assert!(matches!(e.kind(), ErrorKind::TimedOut), "{e}");
}

#[test]
fn a_name_is_held_by_one_listener_and_checked() {
    let name = unique("taken");
    let _first = Listener::bind(&name).unwrap();
    let e = Listener::bind(&name).unwrap_err();
    assert!(
        matches!(e, GenieError::InvalidArgument { arg: "name", .. })
            && e.to_string().contains("taken"),
        "{e}"
    );
    for bad in ["", "a\0b"] {
        let e = Listener::bind(bad).unwrap_err();
        assert!(matches!(e.kind(), ErrorKind::InvalidArgument), "{e}");
    }
}

#[test]
fn a_process_of_another_user_is_refused_unless_allowed() {
    if let Some(why) = zcio_genie::probe::setuid_unavailable() {
        zcio_vm::skip::skip(zcio_vm::skip::Capability::SetUid, &why);
        return;
    }
    let name = unique("user");
    let mut listener = Listener::bind(&name).unwrap();
    // A thread of this process becomes another user (setresuid on that thread alone) and
    // connects: the kernel records that user as the peer's.
    let as_nobody = |name: String| {
        std::thread::spawn(move || {
            let u = rustix::process::Uid::from_raw(zcio_genie::probe::OTHER_USER);
            rustix::thread::set_thread_res_uid(u, u, u).unwrap();
            connect(&name, Duration::from_secs(10)).map(|_| ())
        })
    };
    let client = as_nobody(name.clone());
    let e = listener.accept(Some(Duration::from_secs(10))).unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::NotPermitted) && e.to_string().contains("user 65534"),
        "{e}"
    );
    assert!(
        client.join().unwrap().is_err(),
        "the refused client got a link"
    );
    // Allowed, the client passes the check. (Its link cannot be set up in this one address
    // space, where the listener's arena already holds every address it offers; the test of
    // two processes above sets one up.)
    listener.allow_any_user(true);
    let client = as_nobody(name);
    let end = listener.accept(Some(Duration::from_secs(10)));
    let _ = client.join().unwrap();
    assert!(
        !matches!(&end, Err(e) if e.kind() == ErrorKind::NotPermitted),
        "refused although any user may connect: {end:?}"
    );
}

/// The lengths the TCP test passes: one byte, off a page, a page and a bit, megabytes.
const LENS: [usize; 5] = [1, 100, 4097, (1 << 20) + 3, 8 << 20];

#[test]
fn the_same_program_runs_over_tcp_every_message_whole() {
    let listener = Channel::listen("tcp://127.0.0.1:0").unwrap();
    let name = listener.name().unwrap();
    assert!(name.starts_with("tcp://127.0.0.1:"), "{name}");
    let receiver = std::thread::spawn(move || {
        let mut rx = listener.accept(Some(Duration::from_secs(10))).unwrap();
        assert_eq!(rx.transport(), "tcp");
        for (i, &len) in LENS.iter().enumerate() {
            assert_eq!(rx.peek_len().unwrap(), len);
            if len > 1 {
                // Too small: the message stays, and the error says how long it is.
                let mut small = vec![0u8; len - 1];
                let e = rx
                    .recv(Semantics::Copy, &mut small, InputBuffering::EarlyDemux)
                    .unwrap_err();
                assert_eq!(e.kind(), ErrorKind::TooSmall { needed: len }, "{e}");
            }
            let sem = [Semantics::Copy, Semantics::EmulatedCopy][i % 2];
            let (got, _) = rx.recv_alloc(sem, InputBuffering::EarlyDemux).unwrap();
            assert_eq!(got.len(), len);
            if let Some(k) = got.iter().enumerate().position(|(k, &b)| b != byte(i, k)) {
                panic!("message {i}: byte {k} differs");
            }
        }
    });
    let mut tx = Channel::connect(&name, Duration::from_secs(10)).unwrap();
    let mut buf = AppBuffer::new(8 << 20).unwrap();
    for (i, &len) in LENS.iter().enumerate() {
        let m = &mut buf[..len];
        for (k, b) in m.iter_mut().enumerate() {
            *b = byte(i, k);
        }
        let sem = [Semantics::EmulatedCopy, Semantics::Copy][i % 2];
        let (t, _) = tx.send(sem, m).unwrap();
        m.fill(0xEE);
        tx.wait(t).unwrap();
    }
    receiver.join().unwrap();
}

#[test]
fn a_tcp_channel_nobody_listens_on_fails_within_its_timeout() {
    // A port just given back: nobody listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t0 = Instant::now();
    let e = Channel::connect(
        &format!("tcp://127.0.0.1:{port}"),
        Duration::from_millis(100),
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    let e = Channel::connect("udp://127.0.0.1:1", Duration::from_millis(10)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
}

#[test]
fn a_tcp_peer_that_breaks_the_framing_is_refused_from_then_on() {
    use std::io::Write;
    let listener = Channel::listen("tcp://127.0.0.1:0").unwrap();
    let addr = listener.name().unwrap();
    let mut raw = std::net::TcpStream::connect(addr.trim_start_matches("tcp://")).unwrap();
    let mut rx = listener.accept(Some(Duration::from_secs(10))).unwrap();
    raw.write_all(&[0xAB; 16]).unwrap();
    raw.write_all(&[0u8; 64]).unwrap();
    let e = rx.peek_len().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
    let e = rx
        .recv_alloc(Semantics::Copy, InputBuffering::EarlyDemux)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Refused, "{e}");
}

#[test]
fn both_ends_in_one_program_connect_by_name_and_share_one_arena_mapping() {
    let name = unique("same-process");
    let listener = Channel::listen(&name).unwrap();
    let accepted = std::thread::spawn(move || listener.accept(Some(Duration::from_secs(30))));
    let mut tx = Channel::connect(&name, Duration::from_secs(30)).unwrap();
    let mut rx = accepted.join().unwrap().unwrap();
    for turn in 0..2 {
        let (a, b) = if turn == 0 {
            (&mut tx, &mut rx)
        } else {
            (&mut rx, &mut tx)
        };
        let msg = vec![0x5au8; 3 << 20];
        let (t, _) = a.send(Semantics::EmulatedCopy, &msg).unwrap();
        let (got, _) = b
            .recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux)
            .unwrap();
        a.wait(t).unwrap();
        assert!(got.len() == msg.len() && got.iter().all(|&x| x == 0x5a));
    }
}
