//! The receiving side of a run ([`sink`]): the receiver, or the forwarding server before it.

use super::process::{Said, accept, connection, finish};
use super::{BenchError, Contender, Record, Touch, check_run, map_remapped, messages};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::Child;
use zcio_fbufs::link::{Forwarder, LinkError, ReceiverEnd};
use zcio_fbufs::region::RegionRead;

/// What a receiving process of [`sink`] does.
pub enum Role<'a> {
    /// Take the messages, touch them, and check them once the clock has stopped.
    Receiver,
    /// For [`Contender::Forwarded`]: the forwarding server. It listens for the receiver,
    /// starts it with the function (given the socket path to connect to, it must start a
    /// process running [`sink`] for the same contender as a [`Role::Receiver`], its standard
    /// error piped), and forwards every reference to it without touching the data.
    Server(&'a dyn Fn(&Path) -> std::io::Result<Child>),
}

/// The receiving process: connect to `sock_path`, take `count` timed messages of `bytes`
/// passed the `c` way (and the fbuf runs' warm-up), touch each, say when done, then check
/// every message ([`Record::check`]): a message that did not arrive as it was sent is a
/// [`BenchError::Mismatch`] naming the contender, the message and the page.
pub fn sink(
    sock_path: &Path,
    c: Contender,
    role: Role<'_>,
    bytes: usize,
    count: usize,
    touch: Touch,
) -> Result<(), BenchError> {
    check_run(bytes, count)?;
    // Allocated before the stream, so that keeping costs no page fault in it (a server keeps
    // nothing).
    let kept = match role {
        Role::Receiver => messages(c, bytes, count),
        Role::Server(_) => 0,
    };
    let mut rec = Record::new(c.name(), touch, bytes, kept);
    let sock = UnixStream::connect(sock_path)?;
    match (c, role) {
        (Contender::Forwarded, Role::Server(spawn_next)) => {
            let up = ReceiverEnd::connect(sock)?;
            let down_path =
                std::env::temp_dir().join(format!("zcio-fbuf-fwd-{}.sock", std::process::id()));
            let _ = std::fs::remove_file(&down_path);
            let listener = UnixListener::bind(&down_path)?;
            let mut child = spawn_next(&down_path)?;
            let said = Said::collect(&mut child);
            let who = "the receiver behind the forwarding server";
            let accepted = accept(&listener, &mut child);
            let _ = std::fs::remove_file(&down_path);
            let (down, said) = connection(accepted, &mut child, who, said)?;
            let mut f = Forwarder::new(up, down)?;
            f.run()?;
            drop(f);
            finish(child, said, who)
        }
        (_, Role::Server(_)) => Err(BenchError::Argument(format!(
            "{}: only {} has a forwarding server",
            c.name(),
            Contender::Forwarded.name()
        ))),
        (Contender::Fbufs(_) | Contender::Forwarded | Contender::Device { .. }, Role::Receiver) => {
            // Warm-up and timed messages alike, until the originator closes the link.
            let mut rx = ReceiverEnd::connect(sock.try_clone()?)?;
            while let Some(r) = rx.recv()? {
                let words = rx
                    .receiver
                    .words(r.addr, r.len.next_multiple_of(8))
                    .ok_or_else(|| LinkError::Protocol(format!("{r:?} is not readable here")))?;
                rec.words(words);
                rx.free(r)?;
            }
            rx.flush()?;
            // The originator has every fbuf back, its clock stopped: check.
            rec.check()?;
            Ok(())
        }
        (Contender::Remap, Role::Receiver) => {
            while rec.received() < rec.expected() {
                let mut len = [0u8; 8];
                let (n, mut fds) = zcio_vm::wire::recv_with_fds(sock.as_fd(), &mut len)?;
                if n == 0 && fds.is_empty() {
                    break; // the originator sent no more
                }
                if n != 8 || fds.len() != 1 {
                    return Err(LinkError::Protocol("remap: bad message".into()).into());
                }
                let fd = fds.pop().expect("one");
                let len = u64::from_le_bytes(len) as usize;
                let w = map_remapped(fd.as_fd(), len, zcio_vm::protect::Access::ReadOnly)?;
                rec.words(w.words(0, len / 8 * 8));
            }
            done_then_check(&sock, &rec)
        }
        (Contender::UnixSocket | Contender::Pipe, Role::Receiver) => {
            let mut from: Box<dyn Read> = if c == Contender::Pipe {
                let mut b = [0u8; 1];
                let (_, mut fds) = zcio_vm::wire::recv_with_fds(sock.as_fd(), &mut b)?;
                let rx = fds
                    .pop()
                    .ok_or_else(|| LinkError::Protocol("pipe not passed".into()))?;
                Box::new(std::fs::File::from(rx))
            } else {
                Box::new(sock.try_clone()?)
            };
            let mut buf = vec![0u8; bytes];
            while rec.received() < rec.expected() {
                match from.read_exact(&mut buf) {
                    Ok(()) => rec.bytes(&buf),
                    // The originator sent no more.
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(e.into()),
                }
            }
            done_then_check(&sock, &rec)
        }
    }
}

/// Say "done" if every message came (the originator's clock stops there), then check them.
fn done_then_check(mut sock: &UnixStream, rec: &Record) -> Result<(), BenchError> {
    if rec.received() == rec.expected() {
        sock.write_all(b"d")?;
    }
    rec.check()?;
    Ok(())
}
