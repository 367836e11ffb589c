//! The peer's modes, each given its arguments as `fbuf-peer MODE ARGS...` (`a[0]` the name,
//! `a[1]` the mode):
//!
//! - `fbuf-peer receive FD_PATH ADDR CHUNK QUOTA CACHED VOLATILE REF_ADDR REF_LEN`: join the
//!   path, take the chunk the fbuf lies in (opening the originator's read-only descriptor of
//!   its memfd through `/proc/PID/fd/N`), receive the fbuf and print its bytes as hex on one
//!   line.
//! - `fbuf-peer receive-then-write ...` (same arguments): then try to write what was received:
//!   first by asking for a writable mapping (refused: printed), then by storing through the
//!   read-only mapping (faults: the process dies by SIGSEGV).
//! - `fbuf-peer receive-then-reopen-rw ...` (same arguments): then reopen its read-only
//!   descriptor of the chunk read-write through `/proc/self/fd` and try every way to write
//!   through it: a
//!   writable mapping, `write`, shrinking, punching a hole, and `mprotect` of a read-only
//!   mapping; prints `ATTEMPT refused: ERROR` or `ATTEMPT GRANTED` for each.
//! - `fbuf-peer originator-writes-after-send VOLATILE`: make a path, send an fbuf, then write it.
//! - `fbuf-peer receiver-loop SOCKET COUNT [stall] [hold]`: connect (SOCKET `name:NAME`: join
//!   the path offered under NAME), receive COUNT fbufs, check
//!   each byte against the pattern of its sequence number, free them (or, with `hold`, keep them
//!   and wait to be killed); print `ok COUNT notices N in M messages`. With `stall`, a receiver
//!   that stops reading first: it takes the path, prints `joined`, and reads nothing more from
//!   the link until a line (or the end) comes on its standard input.
//! - `fbuf-peer forward UP_SOCKET DOWN_SOCKET`: the server of a three-process path.
//! - `fbuf-peer originator-then-exit SOCKET COUNT`: connect, offer a path, send COUNT fbufs,
//!   and exit without waiting for them to be freed.
//! - `fbuf-peer receiver-loop SOCKET N leave-socket-to-child`: takes N fbufs, holds them, hands
//!   its socket to a child (`sleep 60`, whose pid it prints) and exits.
//! - `fbuf-peer receive-msgs SOCKET N [hold|secure-hold]`: takes N aggregate messages, walks
//!   and checks each (securing it first, with `secure-hold`), and frees it (or holds them all
//!   and sleeps).
//! - `fbuf-peer owner-originator OWNER SOCKET N`: creates a path through the owner, sends N
//!   fbufs to the receiver at SOCKET with chunks the owner grants, and waits to be killed.
//! - `fbuf-peer free-two-secure-third SOCKET`: takes three fbufs, frees two, secures the third
//!   ("freed 2" in between) and prints how many notices rode along with the request.
//! - `fbuf-peer receiver-frees-foreign SOCKET`: a malicious receiver: takes the path, reads
//!   two send frames, and sends a deallocation notice for an fbuf it was never given.
//! - `fbuf-peer mirror SOCKET`: take a path mirrored on the socket; for each line `ADDR LEN`
//!   on standard input, receive that fbuf and print its bytes as text (then free it), or
//!   `refused: WHY`.
//! - `fbuf-peer hold-every SOCKET K`: receive until the originator closes the link, checking
//!   every byte of fbuf N against the pattern of N; hold every K-th (none with K = 0), free the
//!   others at once; at the close read the held ones again and print `ok N held H intact I`.

use std::io::{BufRead, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use zcio_fbufs::aggregate::{Limits, walk};
use zcio_fbufs::link::{Forwarder, OriginatorEnd, PathMirror, Received, ReceiverEnd};
use zcio_fbufs::owner::OwnerClient;
use zcio_fbufs::path::{FbufRef, Originator, PathInfo, PathMemory, Receiver, Variant};
use zcio_fbufs::region::{RegionRead, RegionWrite};
use zcio_vm::protect::Access;
use zcio_vm::shared::SharedWords;

fn arg<T: std::str::FromStr>(a: &[String], i: usize) -> T {
    a.get(i)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("argument {i} missing or malformed: {a:?}"))
}

/// Standard output flushed, for the test reading it line by line.
fn flush() {
    std::io::stdout().flush().ok();
}

/// A line (or the end) on standard input.
fn wait_for_line() {
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).ok();
}

/// Run the mode of `a` (`a[1]`).
pub fn run(a: &[String]) {
    match a.get(1).map(String::as_str) {
        Some(mode @ ("receive" | "receive-then-write" | "receive-then-reopen-rw")) => {
            receive(mode, a)
        }
        Some("originator-writes-after-send") => originator_writes_after_send(a),
        Some("receiver-loop") => receiver_loop(a),
        Some("receive-msgs") => receive_msgs(a),
        Some("owner-originator") => owner_originator(a),
        Some("forward") => forward(a),
        Some("originator-then-exit") => originator_then_exit(a),
        Some("free-two-secure-third") => free_two_secure_third(a),
        Some("receiver-frees-foreign") => receiver_frees_foreign(a),
        Some("hold-every") => hold_every(a),
        Some("mirror") => mirror(a),
        _ => {
            eprintln!("fbuf-peer: no such mode: {a:?}");
            std::process::exit(2);
        }
    }
}

/// The memfd of a chunk of the path at `a[2]`, opened read-only.
fn open_read_only(a: &[String]) -> OwnedFd {
    rustix::fs::open(
        a[2].as_str(),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .expect("open the chunk's memfd read-only")
}

/// `receive`, `receive-then-write` and `receive-then-reopen-rw`.
fn receive(mode: &str, a: &[String]) {
    let fd = open_read_only(a);
    let info = PathInfo {
        addr: arg(a, 3),
        chunk_bytes: arg(a, 4),
        quota_chunks: arg(a, 5),
        variant: Variant {
            cached: arg(a, 6),
            volatile: arg(a, 7),
        },
    };
    let r = FbufRef {
        addr: arg(a, 8),
        len: arg(a, 9),
    };
    let mut rx = Receiver::new(info).expect("join the path");
    let keep = fd.try_clone().expect("dup the chunk's descriptor");
    let k = (r.addr as usize - info.addr) / info.chunk_bytes;
    rx.add_chunk(info.chunk_ref(k), fd).expect("take the chunk");
    rx.receive(r).expect("receive");
    let mut buf = vec![0u8; r.len as usize];
    assert!(rx.read_bytes(r.addr, &mut buf), "received fbuf unreadable");
    println!(
        "{}",
        buf.iter().map(|b| format!("{b:02x}")).collect::<String>()
    );
    if mode == "receive-then-reopen-rw" {
        reopen_rw_and_write(keep.as_fd(), info);
    }
    if mode == "receive-then-write" {
        write_what_was_received(a, info, r);
    }
}

/// Try to write what was received: ask for a writable mapping (refused: printed), then store
/// through a read-only mapping (faults: the process dies by SIGSEGV).
fn write_what_was_received(a: &[String], info: PathInfo, r: FbufRef) {
    let fd = open_read_only(a);
    let elsewhere = zcio_vm::arena::random_address(info.chunk_bytes);
    match map_chunk(fd.as_fd(), info, elsewhere, Access::ReadWrite) {
        Ok(_) => println!("writable mapping GRANTED"),
        Err(e) => println!("writable mapping refused: {e}"),
    }
    let ro = map_chunk(fd.as_fd(), info, elsewhere, Access::ReadOnly).expect("read-only mapping");
    println!("storing");
    flush();
    ro.store(
        (r.addr - info.addr as u64) as usize % info.chunk_bytes,
        0xbad,
    );
    println!("store went through");
}

/// A chunk of the path of `info` mapped from `fd` at `at` (not its own address), with
/// `access`.
fn map_chunk(
    fd: BorrowedFd<'_>,
    info: PathInfo,
    at: usize,
    access: Access,
) -> Result<SharedWords, zcio_vm::VmError> {
    SharedWords::map(fd, 0, info.chunk_bytes, at, access)
}

/// `originator-writes-after-send VOLATILE`.
fn originator_writes_after_send(a: &[String]) {
    let volatile: bool = arg(a, 2);
    let p = PathMemory::create(
        1 << 16,
        4,
        Variant {
            cached: true,
            volatile,
        },
    )
    .expect("path");
    let mut o = p.originator().expect("originator");
    let f = o.alloc(100).expect("alloc");
    o.write(&f, 0, b"before").expect("write");
    let r = o.send(f, 1).expect("send");
    println!("sent");
    flush();
    let ok = o.write_bytes(r.addr, b"after!");
    println!("write after send returned {ok}");
}

/// `receiver-loop SOCKET COUNT [stall] [hold] [recheck-on-line] [leave-socket-to-child]`.
fn receiver_loop(a: &[String]) {
    let count: usize = arg(a, 3);
    let has = |o: &str| a.iter().skip(4).any(|x| x == o);
    let leave = has("leave-socket-to-child");
    // Hold every fbuf, then, at a line on stdin, read them all again and say whether
    // they are as received (their originator must not reuse them meanwhile).
    let recheck = has("recheck-on-line");
    let hold = leave || recheck || has("hold");
    let stall = has("stall");
    let (mut rx, keep) = match a[2].strip_prefix("name:") {
        // Joined by the path's name.
        Some(name) => {
            let rx = ReceiverEnd::join(name, std::time::Duration::from_secs(10));
            let rx = rx.expect("join the path by name");
            let keep = UnixStream::pair().expect("a socket pair").0;
            (rx, keep)
        }
        None => {
            let sock = UnixStream::connect(&a[2]).expect("connect");
            let keep = sock.try_clone().expect("dup the socket");
            (ReceiverEnd::connect(sock).expect("join the path"), keep)
        }
    };
    if stall {
        println!("joined");
        flush();
        wait_for_line();
    }
    let mut got = 0;
    let mut held = Vec::new();
    while got < count {
        let Some(r) = rx.recv().expect("receive") else {
            break;
        };
        let mut buf = vec![0u8; r.len as usize];
        assert!(rx.receiver.read_bytes(r.addr, &mut buf), "unreadable fbuf");
        let want = zcio_fbufs::pattern(got as u64, r.len as usize);
        assert!(buf == want, "fbuf {got} differs from its pattern");
        if !hold {
            rx.free(r).expect("free");
        }
        held.push((got as u64, r));
        got += 1;
    }
    rx.flush().expect("flush");
    println!(
        "ok {got} notices {} in {} messages",
        rx.notices_sent, rx.notice_messages
    );
    if recheck {
        recheck_on_line(&rx, &held);
    }
    if leave {
        leave_socket_to_child(keep);
    }
    drop(keep);
    flush();
    if hold {
        std::thread::sleep(std::time::Duration::from_secs(600));
    }
}

/// At a line on stdin, read every fbuf `held` again, say how many changed, and exit.
fn recheck_on_line(rx: &ReceiverEnd, held: &[(u64, FbufRef)]) -> ! {
    flush();
    wait_for_line();
    let changed = held
        .iter()
        .filter(|(n, r)| {
            let mut buf = vec![0u8; r.len as usize];
            !rx.receiver.read_bytes(r.addr, &mut buf)
                || buf != zcio_fbufs::pattern(*n, r.len as usize)
        })
        .count();
    println!("changed {changed} of {}", held.len());
    flush();
    std::process::exit(0);
}

/// Hand this end of the socket (`keep`) to a child that outlives this process, and exit.
fn leave_socket_to_child(keep: UnixStream) -> ! {
    // A child inherits our end of the socket and outlives us: the socket stays
    // open, so only our process's end can tell the originator we are gone.
    rustix::io::fcntl_setfd(&keep, rustix::io::FdFlags::empty()).expect("inheritable");
    let child = std::process::Command::new("sleep")
        .arg("60")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn sleep");
    println!("child {}", child.id());
    flush();
    // Exit without waiting for it: it is meant to outlive us (the test kills it).
    // Nothing is dropped either (no goodbye on the link): only the end of this
    // process, seen through its pidfd, can tell the originator.
    std::mem::forget(child);
    std::process::exit(0);
}

/// `receive-msgs SOCKET N [hold|secure-hold]`.
fn receive_msgs(a: &[String]) {
    // Aggregate messages: walked in place, checked against what the originator built
    // ("msg N:" then the pattern of N), freed with one notice each.
    let count: u64 = arg(a, 3);
    let secure = a.get(4).map(String::as_str) == Some("secure-hold");
    let hold = secure || a.get(4).map(String::as_str) == Some("hold");
    let mut rx =
        ReceiverEnd::connect(UnixStream::connect(&a[2]).expect("connect")).expect("join the path");
    let mut got = 0;
    while got < count {
        let m = match rx.recv_any().expect("receive") {
            Received::Msg(m) => m,
            Received::Closed => break,
            other => panic!("expected an aggregate message, got {other:?}"),
        };
        if secure {
            rx.secure_msg(m).expect("secure the message");
        }
        let w = walk(&rx.receiver, m.root, m.len, Limits::default());
        assert!(w.anomalies.is_clean(), "message {got}: {:?}", w.anomalies);
        let mut want = format!("msg {got}:").into_bytes();
        want.extend(zcio_fbufs::pattern(got, zcio_fbufs::pattern_len(got)));
        assert!(w.to_vec(&rx.receiver) == want, "message {got} differs");
        if !hold {
            rx.free_msg(m).expect("free");
        }
        got += 1;
    }
    rx.flush().expect("flush");
    println!("ok {got} messages");
    flush();
    if hold {
        std::thread::sleep(std::time::Duration::from_secs(600));
    }
}

/// Send fbufs `0..count` of the tests' stream (each the pattern of its number).
fn send_patterns(
    end: &mut OriginatorEnd,
    count: u64,
    mut alloc: impl FnMut(&mut OriginatorEnd, usize) -> zcio_fbufs::path::Fbuf,
) {
    for i in 0..count {
        let len = zcio_fbufs::pattern_len(i);
        let f = alloc(end, len);
        end.originator
            .write(&f, 0, &zcio_fbufs::pattern(i, len))
            .expect("write");
        end.send(f, &[0]).expect("send");
    }
}

/// `owner-originator OWNER SOCKET N`.
fn owner_originator(a: &[String]) {
    // A path created through the owner at a[2], offered to the receiver at a[3]: N fbufs
    // sent, then this process waits (mid-stream) to be killed.
    let count: u64 = arg(a, 4);
    let mut owner = OwnerClient::connect(a[2].as_ref()).expect("connect to the owner");
    let info = owner
        .create_path(4, Variant::CACHED)
        .expect("create a path");
    let o = Originator::granted_by_owner(info).expect("claim the path");
    let mut end = OriginatorEnd::new(o);
    let sock = UnixStream::connect(&a[3]).expect("connect to the receiver");
    end.add_receiver(sock).expect("offer the path");
    send_patterns(&mut end, count, |end, len| {
        owner.alloc_waiting(end, len).expect("alloc")
    });
    println!("sent {count} granted {}", end.originator.granted());
    flush();
    std::thread::sleep(std::time::Duration::from_secs(600));
}

/// `forward UP_SOCKET DOWN_SOCKET`.
fn forward(a: &[String]) {
    let up = ReceiverEnd::connect(UnixStream::connect(&a[2]).expect("connect upstream"))
        .expect("join the path");
    let listener = UnixListener::bind(&a[3]).expect("listen downstream");
    println!("listening");
    flush();
    let (down, _) = listener.accept().expect("accept downstream");
    let mut f = Forwarder::new(up, down).expect("offer the path downstream");
    let n = f.run().expect("forward");
    println!("forwarded {n}");
}

/// `originator-then-exit SOCKET COUNT`.
fn originator_then_exit(a: &[String]) {
    let count: u64 = arg(a, 3);
    let sock = UnixStream::connect(&a[2]).expect("connect");
    let p = PathMemory::create(1 << 20, 4, Variant::CACHED).expect("path");
    let mut end = OriginatorEnd::new(p.originator().expect("map"));
    end.add_receiver(sock).expect("offer");
    send_patterns(&mut end, count, |end, len| {
        end.alloc_waiting(len).expect("alloc")
    });
    println!("sent {count}");
}

/// `mirror SOCKET`.
fn mirror(a: &[String]) {
    let sock = UnixStream::connect(&a[2]).expect("connect");
    let mut m = PathMirror::accept(&sock).expect("take the mirrored path");
    for line in std::io::stdin().lock().lines() {
        let line = line.expect("a line");
        let mut w = line
            .split_whitespace()
            .map(|w| w.parse().expect("a number"));
        let r = FbufRef {
            addr: w.next().expect("an address"),
            len: w.next().expect("a length"),
        };
        match m.receive(r) {
            Ok(()) => {
                let mut buf = vec![0u8; r.len as usize];
                assert!(
                    m.receiver().read_bytes(r.addr, &mut buf),
                    "{r:?} unreadable"
                );
                println!("{}", String::from_utf8_lossy(&buf));
                m.free(r).expect("free");
            }
            Err(e) => println!("refused: {e}"),
        }
        flush();
    }
}

/// `hold-every SOCKET K`.
fn hold_every(a: &[String]) {
    let every: u64 = arg(a, 3);
    let mut rx =
        ReceiverEnd::connect(UnixStream::connect(&a[2]).expect("connect")).expect("join the path");
    let mut held = Vec::new();
    let mut got = 0u64;
    let same = |rx: &ReceiverEnd, n: u64, r: FbufRef| {
        let mut buf = vec![0u8; r.len as usize];
        rx.receiver.read_bytes(r.addr, &mut buf) && buf == zcio_fbufs::pattern(n, r.len as usize)
    };
    while let Some(r) = rx.recv().expect("receive") {
        assert!(
            same(&rx, got, r),
            "fbuf {got} ({r:?}) differs from its pattern"
        );
        if every > 0 && got % every == 0 {
            held.push((got, r));
        } else {
            rx.free(r).expect("free");
        }
        got += 1;
    }
    let intact = held.iter().filter(|(n, r)| same(&rx, *n, *r)).count();
    println!("ok {got} held {} intact {intact}", held.len());
    flush();
}

/// `free-two-secure-third SOCKET`.
fn free_two_secure_third(a: &[String]) {
    let mut rx =
        ReceiverEnd::connect(UnixStream::connect(&a[2]).expect("connect")).expect("join the path");
    let got: Vec<_> = (0..3)
        .map(|_| rx.recv().expect("receive").expect("an fbuf"))
        .collect();
    rx.free(got[0]).expect("free");
    rx.free(got[1]).expect("free");
    println!("freed 2");
    flush();
    rx.secure(got[2]).expect("secure");
    println!(
        "piggybacked {} alone {}",
        rx.notices_piggybacked, rx.notice_messages
    );
}

/// `receiver-frees-foreign SOCKET`.
fn receiver_frees_foreign(a: &[String]) {
    let sock = UnixStream::connect(&a[2]).expect("connect");
    let mut raw = sock.try_clone().expect("dup the socket");
    let mut rx = ReceiverEnd::connect(sock).expect("join the path");
    let info = rx.info();
    // Take both fbufs first, so that what we hold is settled before we lie.
    let given: Vec<u64> = (0..2)
        .map(|_| rx.recv().expect("receive").expect("an fbuf").addr)
        .collect();
    // FREED (kind 2) for a page next to the first that we were not sent: not ours.
    let addr = (1..)
        .map(|k| given[0] + 4096 * k)
        .find(|a| !given.contains(a))
        .expect("a page we were not given");
    let mut bogus = Vec::new();
    for w in [2u64, addr, 10] {
        bogus.extend_from_slice(&w.to_le_bytes());
    }
    raw.write_all(&bogus).expect("write");
    println!("sent a foreign notice in a path at {:#x}", info.addr);
    std::thread::sleep(std::time::Duration::from_secs(2));
}

/// A receiver turned attacker: its read-only descriptor of a chunk reopened read-write through
/// `/proc/self/fd`, then every way of writing through it tried, each outcome printed.
fn reopen_rw_and_write(ro: std::os::fd::BorrowedFd<'_>, info: PathInfo) {
    use std::os::fd::AsRawFd;
    let outcome = |what: &str, r: Result<(), String>| match r {
        Ok(()) => println!("{what} GRANTED"),
        Err(e) => println!("{what} refused: {e}"),
    };
    let rw = match rustix::fs::open(
        format!("/proc/self/fd/{}", ro.as_raw_fd()).as_str(),
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) {
        Ok(fd) => {
            println!("reopen read-write GRANTED");
            fd
        }
        Err(e) => {
            println!("reopen read-write refused: {e}");
            return;
        }
    };
    let elsewhere = zcio_vm::arena::random_address(info.chunk_bytes);
    outcome(
        "writable mapping",
        map_chunk(rw.as_fd(), info, elsewhere, Access::ReadWrite)
            .map(drop)
            .map_err(|e| e.to_string()),
    );
    outcome(
        "write",
        rustix::io::pwrite(&rw, &[0xba; 64], 0)
            .map(drop)
            .map_err(|e| e.to_string()),
    );
    outcome(
        "shrink",
        rustix::fs::ftruncate(&rw, 0).map_err(|e| e.to_string()),
    );
    outcome(
        "punch hole",
        rustix::fs::fallocate(
            &rw,
            rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
            0,
            info.chunk_bytes as u64,
        )
        .map_err(|e| e.to_string()),
    );
    let ro_map = map_chunk(rw.as_fd(), info, elsewhere, Access::ReadOnly)
        .expect("a read-only mapping through the reopened descriptor");
    outcome(
        "mprotect writable",
        ro_map
            .set_access(0, info.chunk_bytes, Access::ReadWrite)
            .map_err(|e| e.to_string()),
    );
}
