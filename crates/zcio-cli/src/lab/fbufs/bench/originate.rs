//! The originator's side of a run ([`run`]).

use super::check::{spoiled_word, write_bytes, write_words};
use super::process::{Said, accept, connection, finish, settle};
use super::{
    BenchError, CACHED_VOLATILE, Contender, Fault, PAGE, Run, Touch, check_run, map_remapped,
    originate_on, path_quota, warm_up,
};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::Child;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;
use zcio_fbufs::device::SocketSource;
use zcio_fbufs::link::{LinkError, OriginatorEnd};
use zcio_fbufs::path::Variant;

/// Run `count` messages of `bytes` (a positive multiple of [`PAGE`]) from here to a receiver
/// started by `spawn_sink` (which gets the socket path to connect to and must start a process
/// running [`sink`](super::sink) as a [`Role::Receiver`](super::Role::Receiver), or for
/// [`Contender::Forwarded`] as its [`Role::Server`](super::Role::Server); its standard error
/// piped, so that a failure can be quoted), spoiling a message if `fault` says so.
///
/// The time per message is taken from the first timed message to the receiver's "done" (to
/// the last fbuf given back, for fbufs); the receiver checks every message after that, and a
/// message that did not arrive as sent fails the run with [`BenchError::Receiver`], quoting
/// the receiver's [`Mismatch`](super::Mismatch).
pub fn run(
    c: Contender,
    bytes: usize,
    count: usize,
    touch: Touch,
    fault: Option<Fault>,
    spawn_sink: &dyn Fn(&Path) -> std::io::Result<Child>,
) -> Result<Run, BenchError> {
    check_run(bytes, count)?;
    let dir = std::env::temp_dir().join(format!(
        "zcio-fbuf-bench-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() ^ bytes as u128
    ));
    std::fs::create_dir_all(&dir)?;
    let sock_path = dir.join("s");
    let listener = UnixListener::bind(&sock_path)?;
    let mut child = spawn_sink(&sock_path)?;
    let said = Said::collect(&mut child);
    let who = match c {
        Contender::Forwarded => "the forwarding server process",
        _ => "the receiver process",
    };
    let accepted = accept(&listener, &mut child);
    let _ = std::fs::remove_dir_all(&dir);
    let (mut sock, said) = connection(accepted, &mut child, who, said)?;
    let stream = Stream {
        bytes,
        count,
        touch,
        fault,
    };
    match originate(c, stream, &mut sock) {
        Ok(ns) => {
            finish(child, said, who)?;
            Ok(Run { ns_per_message: ns })
        }
        Err(e) => Err(settle(child, said, who, &sock, e)),
    }
}

/// What a run streams: `count` messages of `bytes`, written the `touch` way, `fault` spoiling
/// or leaving out one.
#[derive(Clone, Copy)]
struct Stream {
    bytes: usize,
    count: usize,
    touch: Touch,
    fault: Option<Fault>,
}

impl Stream {
    /// Whether timed message `k` is left out.
    fn skips(self, k: usize) -> bool {
        self.fault == Some(Fault::Skip(k as u64))
    }

    /// Whether timed message `k` is spoiled.
    fn spoils(self, k: usize) -> bool {
        self.fault == Some(Fault::Corrupt(k as u64))
    }
}

/// The originator's side of a run: the time per message (ns).
fn originate(c: Contender, s: Stream, sock: &mut UnixStream) -> Result<f64, BenchError> {
    let t0 = match c {
        Contender::Fbufs(v) => return originate_fbufs(v, s, sock),
        Contender::Forwarded => return originate_fbufs(CACHED_VOLATILE, s, sock),
        Contender::Device { copied } => return originate_device(copied, s, sock),
        Contender::Remap => originate_remap(s, sock)?,
        Contender::UnixSocket => originate_copies(false, s, sock)?,
        Contender::Pipe => originate_copies(true, s, sock)?,
    };
    sock.shutdown(std::net::Shutdown::Write)?;
    // The receiver says when it has touched the last message (and checks them after).
    let mut done = [0u8; 1];
    if sock.read_exact(&mut done).is_err() || done != *b"d" {
        return Err(LinkError::PeerGone {
            during: "before the receiver had every message",
        }
        .into());
    }
    Ok(t0.elapsed().as_nanos() as f64 / s.count as f64)
}

/// [`originate`] for fbufs of variant `v` (through the forwarding server too): the time per
/// message (ns), from the first timed message to the last fbuf given back.
fn originate_fbufs(v: Variant, s: Stream, sock: &mut UnixStream) -> Result<f64, BenchError> {
    let Stream {
        bytes,
        count,
        touch,
        ..
    } = s;
    let mut end = originate_on(sock, path_quota(bytes), v)?;
    // A warm-up pass fills the path once (untimed): the timed messages then run in the
    // steady state the paper measured, reusing cached fbufs whose pages exist.
    let warm = warm_up(bytes);
    let mut start = None;
    for i in 0..warm + count {
        if i == warm {
            drain(&mut end)?;
            start = Some(Instant::now());
        }
        let timed = i.checked_sub(warm);
        if timed.is_some_and(|k| s.skips(k)) {
            continue;
        }
        let f = end.alloc_waiting(bytes)?;
        // The message is made in place, in the fbuf (the paper's originator writes its
        // data where it will be sent from).
        let words = end.originator.fbuf_words(&f);
        write_words(words, touch, i as u64);
        if timed.is_some_and(|k| s.spoils(k)) {
            words[spoiled_word(words.len(), touch)].fetch_xor(1, Relaxed);
        }
        end.send(f, &[0])?;
    }
    // Every fbuf back means the receiver has touched them all (the link carries the
    // notices, so no separate "done"); the receiver checks them once the link closes.
    drain(&mut end)?;
    let ns = start.expect("count > 0").elapsed().as_nanos() as f64 / count as f64;
    close(end, sock)?;
    Ok(ns)
}

/// Wait until every fbuf sent has come back (or no receiver is left).
fn drain(end: &mut OriginatorEnd) -> Result<(), BenchError> {
    while end.originator.outstanding() > 0 && end.receivers_alive() > 0 {
        end.poll(true)?;
    }
    Ok(())
}

/// Close the link in order (the receiver takes the goodbye for the end of the stream); an fbuf
/// still out is an error.
fn close(mut end: OriginatorEnd, sock: &UnixStream) -> Result<(), BenchError> {
    let outstanding = end.originator.outstanding();
    end.close()?;
    sock.shutdown(std::net::Shutdown::Both)?;
    if outstanding > 0 {
        return Err(LinkError::PeerGone {
            during: "the benchmark (fbufs not freed)",
        }
        .into());
    }
    Ok(())
}

/// [`originate`] for fbufs originated by a device: the messages come from a socket, written
/// by a device thread ([`device`]); each is received straight into a cached/volatile fbuf
/// through a provided-buffer ring ([`SocketSource`]), or (`copied`) read into a private buffer
/// and copied into an fbuf, and sent on. The time per message (ns), from the first timed
/// message to the last fbuf given back.
fn originate_device(copied: bool, s: Stream, sock: &mut UnixStream) -> Result<f64, BenchError> {
    let bytes = s.bytes;
    let mut end = originate_on(sock, path_quota(bytes), CACHED_VOLATILE)?;
    let warm = warm_up(bytes);
    // Two fbufs in the ring: one the kernel fills, one ready for the next message.
    let mut src = match copied {
        true => None,
        false => Some(SocketSource::new(&mut end.originator, 2, bytes)?),
    };
    let mut buf = vec![0u8; if copied { bytes } else { 0 }];
    let (wire, dev) = UnixStream::pair()?;
    let device = std::thread::spawn(move || device(dev, s, warm));
    let mut start = None;
    let result = (|| -> Result<(), BenchError> {
        for i in 0..warm + s.count {
            if i == warm {
                drain(&mut end)?;
                start = Some(Instant::now());
            }
            if i.checked_sub(warm).is_some_and(|k| s.skips(k)) {
                continue; // the device leaves it out
            }
            let f = match &mut src {
                Some(src) => {
                    let f = src.recv(&mut end.originator, wire.as_fd(), bytes)?.ok_or(
                        LinkError::PeerGone {
                            during: "the device's stream (it closed early)",
                        },
                    )?;
                    // A fresh fbuf in its place, waiting for one to come back if none is free.
                    let next = end.alloc_waiting(bytes)?;
                    src.provide(&mut end.originator, next)?;
                    f
                }
                None => {
                    recv_all(&wire, &mut buf)?;
                    let f = end.alloc_waiting(bytes)?;
                    end.originator.write(&f, 0, &buf)?;
                    f
                }
            };
            end.send(f, &[0])?;
        }
        drain(&mut end)?;
        Ok(())
    })();
    // The device ends once its stream is out, or at once when the socket closes under it.
    drop(wire);
    let wrote = device.join();
    result?;
    match wrote {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e.into()),
        Err(_) => return Err(std::io::Error::other("the device thread panicked").into()),
    }
    let ns = start.expect("count > 0").elapsed().as_nanos() as f64 / s.count as f64;
    if let Some(src) = src {
        src.close(&mut end.originator)?;
    }
    close(end, sock)?;
    Ok(ns)
}

/// Fill `buf` from `sock`, each call waiting in the kernel for all that is missing
/// (`MSG_WAITALL`), as the provided-buffer receive does: the contenders then differ by the
/// copy, not by how often the receiver wakes.
fn recv_all(sock: &UnixStream, buf: &mut [u8]) -> Result<(), BenchError> {
    let mut got = 0;
    while got < buf.len() {
        match rustix::net::recv(sock, &mut buf[got..], rustix::net::RecvFlags::WAITALL) {
            Ok((0, _)) => {
                return Err(LinkError::PeerGone {
                    during: "the device's stream (it closed early)",
                }
                .into());
            }
            Ok((n, _)) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(std::io::Error::from(e).into()),
        }
    }
    Ok(())
}

/// The device of [`originate_device`]: writes the stream's messages, made as the other
/// contenders' originators make theirs ([`write_bytes`]), to its socket, the way a network
/// adapter hands packets to its driver, spoiling or leaving out the one [`Fault`] names.
fn device(mut to: UnixStream, s: Stream, warm: usize) -> std::io::Result<()> {
    let mut buf = vec![0u8; s.bytes];
    for i in 0..warm + s.count {
        let timed = i.checked_sub(warm);
        if timed.is_some_and(|k| s.skips(k)) {
            continue;
        }
        write_bytes(&mut buf, s.touch, i as u64);
        if timed.is_some_and(|k| s.spoils(k)) {
            let w = spoiled_word(s.bytes / 8, s.touch) * 8;
            buf[w] ^= 1;
        }
        to.write_all(&buf)?;
    }
    Ok(())
}

/// [`originate`] for page remapping: a fresh memfd per message, written, passed and dropped.
/// When the clock started.
fn originate_remap(s: Stream, sock: &UnixStream) -> Result<Instant, BenchError> {
    let (bytes, touch) = (s.bytes, s.touch);
    let t0 = Instant::now();
    for i in (0..s.count).filter(|i| !s.skips(*i)) {
        let fd = zcio_vm::mapping::memfd("zcio-remap", bytes)?;
        let w = map_remapped(fd.as_fd(), bytes, zcio_vm::protect::Access::ReadWrite)?;
        let words = w.words(0, bytes);
        write_words(words, touch, i as u64);
        if s.spoils(i) {
            words[spoiled_word(words.len(), touch)].fetch_xor(1, Relaxed);
        }
        drop(w);
        zcio_vm::wire::send_with_fds(sock.as_fd(), &(bytes as u64).to_le_bytes(), &[fd.as_fd()])?;
    }
    Ok(t0)
}

/// [`originate`] for the copies, through a pipe passed first (`pipe`) or the socket itself:
/// one buffer written and copied out per message. When the clock started.
fn originate_copies(pipe: bool, s: Stream, sock: &mut UnixStream) -> Result<Instant, BenchError> {
    let (bytes, touch) = (s.bytes, s.touch);
    let pipe = if pipe {
        let pipe = zcio_vm::wire::Pipe::new(bytes.clamp(PAGE, 1 << 20))?;
        zcio_vm::wire::send_with_fds(sock.as_fd(), b"p", &[pipe.rx.as_fd()])?;
        Some(pipe.tx)
    } else {
        None
    };
    // The sender's buffer, written and copied out once per message.
    let mut page = vec![0u8; bytes];
    let t0 = Instant::now();
    for i in (0..s.count).filter(|i| !s.skips(*i)) {
        write_bytes(&mut page, touch, i as u64);
        if s.spoils(i) {
            let k = spoiled_word(bytes / 8, touch);
            page[8 * k] ^= 1;
        }
        match &pipe {
            Some(tx) => zcio_vm::wire::write_all(tx.as_fd(), &page)?,
            None => sock.write_all(&page)?,
        }
    }
    // A receiver short of messages sees the end instead of waiting for more.
    drop(pipe);
    Ok(t0)
}
