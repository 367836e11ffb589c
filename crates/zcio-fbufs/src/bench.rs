//! The fbuf experiments of paper 001 (Table 1, Figure 3): an originator process hands messages
//! to a receiver process, each touching every page once (the paper's "writes one word in each
//! VM page", "touches one word in each page") or every byte, with fbufs in their four variants
//! and, for comparison, a fresh memfd passed and mapped per message (page remapping) and copies
//! through a pipe and a Unix socket.
//!
//! The originator runs here; the receiver is another process running [`sink`] (the `zcio`
//! command's hidden `fbuf-sink`). Messages stream: the originator does not wait for each one,
//! so the time per message over a run is the incremental cost the paper reports, and its slope
//! against the page count is the per-page cost.

use crate::link::{LinkError, OriginatorEnd, ReceiverEnd};
use crate::path::{Originator, PathMemory, Variant};
use crate::region::RegionRead;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

/// A way of passing the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    /// Fbufs of a variant.
    Fbufs(Variant),
    /// Cached/volatile fbufs through a server process that forwards each reference to the
    /// receiver without touching the data (the paper's three-domain path, Figure 4).
    Forwarded,
    /// A fresh memfd per message, passed with `SCM_RIGHTS` and mapped by the receiver.
    Remap,
    /// Copies through a Unix stream socket.
    UnixSocket,
    /// Copies through a pipe.
    Pipe,
}

impl Contender {
    /// Every contender, in the order of the paper's Table 1 (then the copy peers).
    pub const ALL: [Contender; 8] = [
        Contender::Fbufs(Variant {
            cached: true,
            volatile: true,
        }),
        Contender::Fbufs(Variant {
            cached: false,
            volatile: true,
        }),
        Contender::Fbufs(Variant {
            cached: true,
            volatile: false,
        }),
        Contender::Fbufs(Variant {
            cached: false,
            volatile: false,
        }),
        Contender::Forwarded,
        Contender::Remap,
        Contender::UnixSocket,
        Contender::Pipe,
    ];

    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Contender::Fbufs(Variant {
                cached: true,
                volatile: true,
            }) => "fbufs-cached-volatile",
            Contender::Fbufs(Variant {
                cached: false,
                volatile: true,
            }) => "fbufs-volatile",
            Contender::Fbufs(Variant {
                cached: true,
                volatile: false,
            }) => "fbufs-cached",
            Contender::Fbufs(_) => "fbufs",
            Contender::Forwarded => "fbufs-cached-volatile-via-server",
            Contender::Remap => "page-remap-memfd",
            Contender::UnixSocket => "copy-unix-socket",
            Contender::Pipe => "copy-pipe",
        }
    }

    /// The contender of a name.
    pub fn parse(s: &str) -> Option<Contender> {
        Contender::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// What each side touches in a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touch {
    /// One word per page (the paper's experiment).
    Word,
    /// Every byte.
    All,
}

impl Touch {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Touch::Word => "word-per-page",
            Touch::All => "every-byte",
        }
    }
    /// The touch of a name.
    pub fn parse(s: &str) -> Option<Touch> {
        [Touch::Word, Touch::All]
            .into_iter()
            .find(|t| t.name() == s)
    }
}

const PS: usize = 4096;

/// One run: `count` messages of `bytes`.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// Wall time per message (ns), over the whole stream.
    pub ns_per_message: f64,
}

fn path_quota(bytes: usize) -> (usize, usize) {
    // Room for a few messages in flight: at least 8 MiB, at least 8 messages.
    let chunk = 1 << 20;
    let want = (bytes * 8).max(8 << 20);
    (chunk, want.div_ceil(chunk))
}

/// Run `count` messages of `bytes` from here to a receiver started by `spawn_sink` (which gets
/// the socket path to connect to and must start a process running [`sink`]).
pub fn run(
    c: Contender,
    bytes: usize,
    count: usize,
    touch: Touch,
    spawn_sink: &dyn Fn(&Path) -> std::io::Result<std::process::Child>,
) -> Result<Run, LinkError> {
    let dir = std::env::temp_dir().join(format!(
        "zcio-fbuf-bench-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() ^ bytes as u128
    ));
    std::fs::create_dir_all(&dir)?;
    let sock_path = dir.join("s");
    let listener = UnixListener::bind(&sock_path)?;
    let mut child = spawn_sink(&sock_path)?;
    let (mut sock, _) = listener.accept()?;
    let _ = std::fs::remove_dir_all(&dir);
    let t0;
    match c {
        Contender::Fbufs(_) | Contender::Forwarded => {
            let v = match c {
                Contender::Fbufs(v) => v,
                _ => Variant {
                    cached: true,
                    volatile: true,
                },
            };
            let (chunk, quota) = path_quota(bytes);
            let p = PathMemory::create(chunk, quota, v)?;
            let mut end = OriginatorEnd::new(Originator::new(p.fd(), p.info())?);
            end.add_receiver(sock.try_clone()?, p.receiver_fd()?.as_fd())?;
            // A warm-up pass fills the path once (untimed): the timed messages then run in the
            // steady state the paper measured, reusing cached fbufs whose pages exist.
            let warm = (p.info().len() / bytes.div_ceil(PS) / PS).max(1);
            let mut start = None;
            for i in 0..warm + count {
                if i == warm {
                    while end.originator.outstanding() > 0 && end.receivers_alive() > 0 {
                        end.poll(true)?;
                    }
                    start = Some(Instant::now());
                }
                let f = end.alloc_waiting(bytes)?;
                // The message is made in place, in the fbuf (the paper's originator writes its
                // data where it will be sent from).
                let words = end.originator.fbuf_words(&f);
                match touch {
                    Touch::Word => {
                        for k in (0..words.len()).step_by(PS / 8) {
                            words[k].store(i as u64 ^ (f.addr() + 8 * k as u64), Relaxed);
                        }
                    }
                    Touch::All => {
                        let v = u64::from_ne_bytes([i as u8; 8]);
                        words.iter().for_each(|w| w.store(v, Relaxed));
                    }
                }
                end.send(f, &[0])?;
            }
            // Every fbuf back means the receiver has touched them all (the link carries the
            // notices, so no separate "done").
            while end.originator.outstanding() > 0 && end.receivers_alive() > 0 {
                end.poll(true)?;
            }
            t0 = start.expect("count > 0");
            sock.shutdown(std::net::Shutdown::Both)?;
            if end.originator.outstanding() > 0 {
                return Err(LinkError::PeerGone {
                    during: "the benchmark (fbufs not freed)",
                });
            }
            let ns = t0.elapsed().as_nanos() as f64 / count as f64;
            let status = child.wait()?;
            if !status.success() {
                return Err(LinkError::Protocol(format!(
                    "receiver process failed: {status}"
                )));
            }
            return Ok(Run { ns_per_message: ns });
        }
        Contender::Remap => {
            t0 = Instant::now();
            for i in 0..count {
                let fd = zcio_vm::mapping::memfd("zcio-remap", bytes)?;
                let w = zcio_vm::shared::SharedWords::map(
                    fd.as_fd(),
                    0,
                    bytes,
                    zcio_vm::arena::random_address(bytes),
                    zcio_vm::protect::Access::ReadWrite,
                )?;
                match touch {
                    Touch::Word => (0..bytes).step_by(PS).for_each(|o| w.store(o, i as u64)),
                    Touch::All => (0..bytes / 8).for_each(|k| w.store(k * 8, i as u64)),
                }
                drop(w);
                zcio_vm::wire::send_with_fds(
                    sock.as_fd(),
                    &(bytes as u64).to_le_bytes(),
                    &[fd.as_fd()],
                )?;
            }
        }
        Contender::UnixSocket | Contender::Pipe => {
            let pipe = if c == Contender::Pipe {
                let pipe = zcio_vm::wire::Pipe::new(bytes.clamp(PS, 1 << 20))?;
                zcio_vm::wire::send_with_fds(sock.as_fd(), b"p", &[pipe.rx.as_fd()])?;
                Some(pipe.tx)
            } else {
                None
            };
            // The sender's buffer, written and copied out once per message.
            let mut page = vec![0u8; bytes];
            t0 = Instant::now();
            for i in 0..count {
                match touch {
                    Touch::Word => (0..bytes).step_by(PS).for_each(|o| page[o] = i as u8),
                    Touch::All => page.fill(i as u8),
                }
                match &pipe {
                    Some(tx) => zcio_vm::wire::write_all(tx.as_fd(), &page)?,
                    None => sock.write_all(&page)?,
                }
            }
        }
    }
    // The receiver says when it has touched the last message.
    let mut done = [0u8; 1];
    if let Err(e) = sock.read_exact(&mut done) {
        let status = child.wait()?;
        return Err(LinkError::Protocol(format!(
            "the receiver process ended before the last message ({status}): {e}"
        )));
    }
    let ns = t0.elapsed().as_nanos() as f64 / count as f64;
    let status = child.wait()?;
    if !status.success() {
        return Err(LinkError::Protocol(format!(
            "receiver process failed: {status}"
        )));
    }
    Ok(Run { ns_per_message: ns })
}

/// The receiving process: connect to `sock_path`, take `count` messages of `bytes` passed the
/// `c` way, touch each, and say when done.
///
/// For [`Contender::Forwarded`] this process is the server: it listens for the receiver,
/// starts it with `spawn_next` (which gets the socket path and must start a process running
/// `sink` as a plain cached/volatile fbuf receiver), and forwards every reference to it.
pub fn sink(
    sock_path: &Path,
    c: Contender,
    bytes: usize,
    count: usize,
    touch: Touch,
    spawn_next: &dyn Fn(&Path) -> std::io::Result<std::process::Child>,
) -> Result<u64, LinkError> {
    let sock = UnixStream::connect(sock_path)?;
    let mut sum = 0u64;
    let mut buf = vec![0u8; bytes];
    match c {
        Contender::Forwarded => {
            let up = ReceiverEnd::connect(sock)?;
            let down_path =
                std::env::temp_dir().join(format!("zcio-fbuf-fwd-{}.sock", std::process::id()));
            let _ = std::fs::remove_file(&down_path);
            let listener = UnixListener::bind(&down_path)?;
            let mut child = spawn_next(&down_path)?;
            let (down, _) = listener.accept()?;
            let _ = std::fs::remove_file(&down_path);
            let mut f = crate::link::Forwarder::new(up, down)?;
            f.run()?;
            drop(f);
            let status = child.wait()?;
            if !status.success() {
                return Err(LinkError::Protocol(format!(
                    "the receiver behind the server failed: {status}"
                )));
            }
            return Ok(0);
        }
        Contender::Fbufs(_) => {
            // Warm-up and timed messages alike, until the originator closes the link.
            let _ = count;
            let mut rx = ReceiverEnd::connect(sock.try_clone()?)?;
            while let Some(r) = rx.recv()? {
                let words = rx
                    .receiver
                    .words(r.addr, r.len.next_multiple_of(8))
                    .ok_or_else(|| LinkError::Protocol(format!("{r:?} is not readable here")))?;
                let step = if touch == Touch::Word { PS / 8 } else { 1 };
                for w in words.iter().step_by(step) {
                    sum = sum.wrapping_add(w.load(Relaxed));
                }
                rx.free(r)?;
            }
            rx.flush()?;
            return Ok(sum);
        }
        Contender::Remap => {
            for _ in 0..count {
                let mut len = [0u8; 8];
                let (n, mut fds) = zcio_vm::wire::recv_with_fds(sock.as_fd(), &mut len)?;
                if n != 8 || fds.len() != 1 {
                    return Err(LinkError::Protocol("remap: bad message".into()));
                }
                let fd = fds.pop().expect("one");
                let len = u64::from_le_bytes(len) as usize;
                let w = zcio_vm::shared::SharedWords::map(
                    fd.as_fd(),
                    0,
                    len,
                    zcio_vm::arena::random_address(len),
                    zcio_vm::protect::Access::ReadOnly,
                )?;
                let step = if touch == Touch::Word { PS / 8 } else { 1 };
                for k in (0..len / 8).step_by(step) {
                    sum = sum.wrapping_add(w.load(k * 8));
                }
            }
        }
        Contender::UnixSocket | Contender::Pipe => {
            let pipe = if c == Contender::Pipe {
                let mut b = [0u8; 1];
                let (_, mut fds) = zcio_vm::wire::recv_with_fds(sock.as_fd(), &mut b)?;
                Some(
                    fds.pop()
                        .ok_or_else(|| LinkError::Protocol("pipe not passed".into()))?,
                )
            } else {
                None
            };
            let mut s = sock.try_clone()?;
            for _ in 0..count {
                match &pipe {
                    Some(rx) => zcio_vm::wire::read_exact(rx.as_fd(), &mut buf)?,
                    None => s.read_exact(&mut buf)?,
                }
                let step = if touch == Touch::Word { PS } else { 1 };
                for off in (0..bytes).step_by(step) {
                    sum = sum.wrapping_add(buf[off] as u64);
                }
            }
        }
    }
    (&sock).write_all(b"d")?;
    Ok(sum)
}
