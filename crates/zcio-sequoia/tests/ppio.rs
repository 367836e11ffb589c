//! Peer-to-peer I/O: byte-exact data for sizes around page and pipe-buffer boundaries on every
//! pair (file→file, file→socket, socket→file, socket→socket), flows that stop at their
//! increment, the mechanism the pair gets, a sink that goes away mid-flow (clear error, every
//! byte accounted for), and descriptors that cannot be spliced.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use zcio_sequoia::ppio::{Increment, Mechanism, Splice, SpliceError};

/// Sizes around a page (4 KiB) and the pipe buffer (64 KiB), and larger than 1 MiB.
const SIZES: [usize; 10] = [
    0,
    1,
    4095,
    4096,
    4097,
    65535,
    65536,
    65537,
    1 << 20,
    (1 << 20) + 4099,
];

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8 ^ salt)
        .collect()
}

fn file_with(data: &[u8]) -> std::fs::File {
    let mut f = tempfile::tempfile().unwrap();
    f.write_all(data).unwrap();
    f.seek(SeekFrom::Start(0)).unwrap();
    f
}

fn contents(f: &mut std::fs::File) -> Vec<u8> {
    let mut v = Vec::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_end(&mut v).unwrap();
    v
}

/// Flow everything through `s` with `increment`, checking that no flow passes it.
fn flow_all(s: &mut Splice<'_>, increment: Increment) -> u64 {
    let cap = match increment {
        Increment::Default => s.default_increment(),
        Increment::Bytes(n) => n,
    };
    let mut total = 0;
    loop {
        let f = s.start_flow(increment).unwrap();
        assert!(
            f.bytes <= cap,
            "{} bytes in a flow of at most {cap}",
            f.bytes
        );
        total += f.bytes;
        if f.end {
            return total;
        }
        assert_eq!(
            f.bytes, cap,
            "a flow short of its increment must be the end"
        );
    }
}

#[test]
fn file_to_file_is_byte_exact_at_every_boundary() {
    for (k, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, k as u8);
        let src = file_with(&data);
        let mut dst = tempfile::tempfile().unwrap();
        let mut s = Splice::new(src.as_fd(), dst.as_fd()).unwrap();
        assert_eq!(s.mechanism(), Mechanism::CopyFileRange, "{}", s.why());
        let inc = if k % 2 == 0 {
            Increment::Default
        } else {
            Increment::Bytes(4096 + 7)
        };
        assert_eq!(flow_all(&mut s, inc), len as u64);
        assert_eq!(s.moved(), len as u64);
        drop(s);
        assert!(contents(&mut dst) == data, "{len} bytes");
    }
}

#[test]
fn file_to_socket_and_socket_to_file_are_byte_exact_at_every_boundary() {
    for (k, &len) in SIZES.iter().enumerate() {
        let data = pattern(len, 100 + k as u8);
        // File to socket: sendfile; a reader on the other end.
        let src = file_with(&data);
        let (tx, mut rx) = UnixStream::pair().unwrap();
        let reader = std::thread::spawn(move || {
            let mut v = Vec::new();
            rx.read_to_end(&mut v).unwrap();
            v
        });
        {
            let mut s = Splice::new(src.as_fd(), tx.as_fd()).unwrap();
            assert_eq!(s.mechanism(), Mechanism::Sendfile);
            assert_eq!(flow_all(&mut s, Increment::Bytes(65536)), len as u64);
        }
        drop(tx);
        assert!(
            reader.join().unwrap() == data,
            "file to socket, {len} bytes"
        );
        // Socket to file: splice through the splice's pipe; a writer on the other end.
        let (mut wx, rx) = UnixStream::pair().unwrap();
        let sent = data.clone();
        let writer = std::thread::spawn(move || {
            wx.write_all(&sent).unwrap();
        });
        let mut dst = tempfile::tempfile().unwrap();
        {
            let mut s = Splice::new(rx.as_fd(), dst.as_fd()).unwrap();
            assert_eq!(s.mechanism(), Mechanism::Splice);
            assert_eq!(flow_all(&mut s, Increment::Default), len as u64);
            assert_eq!(s.stranded(), 0);
        }
        writer.join().unwrap();
        assert!(contents(&mut dst) == data, "socket to file, {len} bytes");
    }
}

#[test]
fn a_sink_that_goes_away_mid_flow_is_a_clear_error_and_every_byte_is_accounted_for() {
    // Socket to socket through the splice's pipe: the sink's reader takes 100 000 bytes and
    // leaves.
    let total = 4 << 20;
    let data = pattern(total, 7);
    let (mut wx, src) = UnixStream::pair().unwrap();
    let (sink, mut peer) = UnixStream::pair().unwrap();
    let writer = std::thread::spawn(move || {
        // The writer stops when the source side is closed below.
        let _ = wx.write_all(&data);
    });
    let reader = std::thread::spawn(move || {
        let mut v = vec![0u8; 100_000];
        peer.read_exact(&mut v).unwrap();
        drop(peer);
        v
    });
    let mut s = Splice::new(src.as_fd(), sink.as_fd()).unwrap();
    let mut moved = 0;
    let err = loop {
        match s.start_flow(Increment::Bytes(1 << 16)) {
            Ok(f) => {
                assert!(!f.end, "the source did not end");
                moved += f.bytes;
            }
            Err(e) => break e,
        }
    };
    let got = reader.join().unwrap();
    assert!(
        got == pattern(total, 7)[..100_000],
        "what the reader got is exact"
    );
    match &err {
        SpliceError::Sink {
            moved: m, stranded, ..
        } => {
            moved += m;
            assert_eq!(*stranded, s.stranded());
        }
        e => panic!("{e}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("the sink refused more data"), "{msg}");
    assert_eq!(
        moved,
        s.moved(),
        "every flow's bytes are in the splice's count"
    );
    assert!(s.moved() >= 100_000);
    // Everything taken from the source is in the sink's count or stranded in the pipe: read
    // the rest of the source and it adds up.
    let taken = s.moved() + s.stranded();
    drop(s);
    drop(sink);
    let mut rest = Vec::new();
    src.set_read_timeout(Some(std::time::Duration::from_millis(300)))
        .unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let mut r = &src;
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => rest.extend_from_slice(&buf[..n]),
            Err(_) => break,
        }
        if taken as usize + rest.len() == total {
            break;
        }
    }
    assert_eq!(taken as usize + rest.len(), total);
    assert!(
        rest == pattern(total, 7)[taken as usize..],
        "the rest is where it was"
    );
    drop(src);
    writer.join().unwrap();
}

#[test]
fn descriptors_that_cannot_flow_are_named() {
    // A source opened for writing only: the kernel refuses to read it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w");
    let wo = std::fs::File::create(&path).unwrap();
    let mut dst = tempfile::tempfile().unwrap();
    let mut s = Splice::new(wo.as_fd(), dst.as_fd()).unwrap();
    let e = s.start_flow(Increment::Default).unwrap_err();
    assert!(matches!(e, SpliceError::Source { .. }), "{e}");
    assert!(e.to_string().contains("reading the source"), "{e}");
    assert!(contents(&mut dst).is_empty());
    // A zero increment.
    let src = file_with(b"abc");
    let mut s = Splice::new(src.as_fd(), dst.as_fd()).unwrap();
    assert!(matches!(
        s.start_flow(Increment::Bytes(0)),
        Err(SpliceError::ZeroIncrement)
    ));
    // A character device is no source.
    let null = std::fs::File::open("/dev/null").unwrap();
    let e = Splice::new(null.as_fd(), dst.as_fd()).unwrap_err();
    assert!(e.to_string().contains("cannot splice"), "{e}");
}
