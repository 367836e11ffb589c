//! Fbufs between processes (paper 001, §3.3): references go out over a Unix socket, deallocation
//! notices come back batched, and a process that dies gives back every reference it held.
//!
//! - The originator offers the path to a receiver once: its geometry and a read-only
//!   descriptor of its memory ([`offer_path`], `SCM_RIGHTS`).
//! - Each send is one 24-byte frame carrying the reference. The data never moves.
//! - A receiver frees fbufs locally; the notices go back as frames, batched: they wait while
//!   more fbufs are already queued for the receiver (it is behind) and go out before it blocks
//!   for the next one, so the originator never starves for free fbufs and rarely gets a
//!   message for the notices alone.
//! - A receiver that exits or is killed closes its socket; the originator then releases every
//!   reference that receiver held (the paper: "its termination will cause the destruction of a
//!   communication endpoint, which will in turn cause the deallocation of all associated
//!   fbufs"). An originator that exits leaves its memory to the receivers that map it: the
//!   kernel keeps the pages while any mapping holds them.
//! - A forwarding process (the server of a three-process path) is a receiver that offers the
//!   same path onward and frees an fbuf upstream when its own receiver frees it.

use crate::path::{Fbuf, FbufError, FbufRef, Originator, PathInfo, Receiver, Variant};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

const SEND: u64 = 1;
const FREED: u64 = 2;
const SECURE: u64 = 3;
const SECURED: u64 = 4;
const FRAME: usize = 24;

/// What went wrong on a link.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The fbuf layer refused.
    #[error(transparent)]
    Fbuf(#[from] FbufError),
    /// The socket failed.
    #[error("fbuf link: {0}")]
    Io(#[from] std::io::Error),
    /// The VM layer refused (descriptor passing).
    #[error(transparent)]
    Vm(#[from] zcio_vm::VmError),
    /// The peer sent something that is not this protocol.
    #[error("fbuf link: peer broke the protocol: {0}")]
    Protocol(String),
    /// The peer is gone.
    #[error("fbuf link: peer closed the connection {during}")]
    PeerGone {
        /// What we were doing.
        during: &'static str,
    },
}

fn frame(kind: u64, r: FbufRef) -> [u8; FRAME] {
    let mut b = [0u8; FRAME];
    b[..8].copy_from_slice(&kind.to_le_bytes());
    b[8..16].copy_from_slice(&r.addr.to_le_bytes());
    b[16..].copy_from_slice(&r.len.to_le_bytes());
    b
}

fn parse(b: &[u8; FRAME]) -> (u64, FbufRef) {
    let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    (
        w(0),
        FbufRef {
            addr: w(1),
            len: w(2),
        },
    )
}

/// Read one frame; `None` at end of stream.
fn read_frame(s: &mut UnixStream) -> Result<Option<(u64, FbufRef)>, LinkError> {
    let mut b = [0u8; FRAME];
    let mut got = 0;
    while got < FRAME {
        match s.read(&mut b[got..]) {
            Ok(0) if got == 0 => return Ok(None),
            Ok(0) => return Err(LinkError::Protocol("frame cut short".into())),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Some(parse(&b)))
}

/// Offer a path to a receiver: its geometry and a read-only descriptor of its memory.
pub fn offer_path(
    sock: &UnixStream,
    info: PathInfo,
    ro_fd: BorrowedFd<'_>,
) -> Result<(), LinkError> {
    let words = [
        info.addr as u64,
        info.chunk_bytes as u64,
        info.quota_chunks as u64,
        info.variant.cached as u64 | (info.variant.volatile as u64) << 1,
    ];
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    zcio_vm::wire::send_with_fds(sock.as_fd(), &bytes, &[ro_fd])?;
    Ok(())
}

/// Accept a path offered with [`offer_path`].
pub fn accept_path(sock: &UnixStream) -> Result<(PathInfo, OwnedFd), LinkError> {
    let mut b = [0u8; 32];
    let (n, mut fds) = zcio_vm::wire::recv_with_fds(sock.as_fd(), &mut b)?;
    if n == 0 {
        return Err(LinkError::PeerGone {
            during: "waiting for the path",
        });
    }
    if n != 32 || fds.len() != 1 {
        return Err(LinkError::Protocol(format!(
            "path offer of {n} bytes and {} descriptors (want 32 and 1)",
            fds.len()
        )));
    }
    let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    let info = PathInfo {
        addr: w(0) as usize,
        chunk_bytes: w(1) as usize,
        quota_chunks: w(2) as usize,
        variant: Variant {
            cached: w(3) & 1 != 0,
            volatile: w(3) & 2 != 0,
        },
    };
    if info.chunk_bytes == 0
        || info.chunk_bytes % zcio_vm::page_size() != 0
        || info.len() > zcio_vm::mapping::MAX_MAPPING
        || info.addr % zcio_vm::page_size() != 0
    {
        return Err(LinkError::Protocol(format!(
            "implausible path offered: {info:?}"
        )));
    }
    Ok((info, fds.pop().expect("one descriptor")))
}

/// References a peer holds, with how many times each was sent to it.
#[derive(Default)]
struct Held(HashMap<u64, (FbufRef, usize)>);

impl Held {
    fn add(&mut self, r: FbufRef) {
        self.0.entry(r.addr).or_insert((r, 0)).1 += 1;
    }

    /// Take one reference back; `false` if the peer did not hold it (a protocol violation).
    fn take(&mut self, r: FbufRef) -> bool {
        let Some(e) = self.0.get_mut(&r.addr) else {
            return false;
        };
        if e.0 != r {
            return false;
        }
        e.1 -= 1;
        if e.1 == 0 {
            self.0.remove(&r.addr);
        }
        true
    }

    fn holds(&self, r: FbufRef) -> bool {
        self.0.get(&r.addr).is_some_and(|e| e.0 == r)
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every reference held, as often as it is held.
    fn drain(&mut self) -> Vec<FbufRef> {
        self.0
            .drain()
            .flat_map(|(_, (r, n))| std::iter::repeat_n(r, n))
            .collect()
    }
}

struct Peer {
    sock: UnixStream,
    held: Held,
    alive: bool,
}

/// The originator's end: its path and the receivers it sends to.
pub struct OriginatorEnd {
    /// The path's allocator and memory.
    pub originator: Originator,
    peers: Vec<Peer>,
    /// References released for receivers that went away.
    pub released_for_dead: usize,
    /// Receivers dropped for breaking the protocol, and why (their references are released).
    pub misbehaved: Vec<String>,
}

impl OriginatorEnd {
    /// An end for `originator`'s path, with no receiver yet.
    pub fn new(originator: Originator) -> OriginatorEnd {
        OriginatorEnd {
            originator,
            peers: Vec::new(),
            released_for_dead: 0,
            misbehaved: Vec::new(),
        }
    }

    /// Offer the path to a receiver connected on `sock` (with `ro_fd`, a read-only descriptor
    /// of the path's memory); returns its index.
    pub fn add_receiver(
        &mut self,
        sock: UnixStream,
        ro_fd: BorrowedFd<'_>,
    ) -> Result<usize, LinkError> {
        offer_path(&sock, self.originator.info(), ro_fd)?;
        self.peers.push(Peer {
            sock,
            held: Held::default(),
            alive: true,
        });
        Ok(self.peers.len() - 1)
    }

    /// Receivers still connected.
    pub fn receivers_alive(&self) -> usize {
        self.peers.iter().filter(|p| p.alive).count()
    }

    /// Send `fbuf` to the receivers `to`.
    pub fn send(&mut self, fbuf: Fbuf, to: &[usize]) -> Result<FbufRef, LinkError> {
        let live: Vec<usize> = to
            .iter()
            .copied()
            .filter(|i| self.peers.get(*i).is_some_and(|p| p.alive))
            .collect();
        let r = self.originator.send(fbuf, live.len())?;
        for i in live {
            let p = &mut self.peers[i];
            match p.sock.write_all(&frame(SEND, r)) {
                Ok(()) => p.held.add(r),
                Err(_) => {
                    // Gone meanwhile: it will never free this one.
                    self.originator.freed(r)?;
                    self.drop_peer(i)?;
                }
            }
        }
        Ok(r)
    }

    fn drop_peer(&mut self, i: usize) -> Result<(), LinkError> {
        let p = &mut self.peers[i];
        if !p.alive {
            return Ok(());
        }
        p.alive = false;
        let _ = p.sock.shutdown(std::net::Shutdown::Both);
        for r in p.held.drain() {
            self.originator.freed(r)?;
            self.released_for_dead += 1;
        }
        Ok(())
    }

    /// Process what the receivers sent (deallocation notices, requests to secure), and notice
    /// receivers that are gone. With `block`, wait until at least one thing happened.
    pub fn poll(&mut self, block: bool) -> Result<usize, LinkError> {
        use rustix::event::{PollFd, PollFlags};
        let mut done = 0;
        loop {
            let live: Vec<usize> = (0..self.peers.len())
                .filter(|i| self.peers[*i].alive)
                .collect();
            if live.is_empty() {
                return Ok(done);
            }
            let ready: Vec<(usize, PollFlags)> = {
                let mut fds: Vec<PollFd<'_>> = live
                    .iter()
                    .map(|i| PollFd::new(&self.peers[*i].sock, PollFlags::IN))
                    .collect();
                let timeout = rustix::time::Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                let wait = if block && done == 0 {
                    None
                } else {
                    Some(&timeout)
                };
                match rustix::event::poll(&mut fds, wait) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(std::io::Error::from(e).into()),
                }
                live.iter()
                    .zip(fds.iter())
                    .map(|(i, f)| (*i, f.revents()))
                    .filter(|(_, r)| !r.is_empty())
                    .collect()
            };
            if ready.is_empty() {
                return Ok(done);
            }
            for (i, _) in ready {
                // A receiver that breaks the protocol is cut off and its references released:
                // it cannot free what it does not hold, nor stop the others.
                let bad = match read_frame(&mut self.peers[i].sock) {
                    Ok(Some((FREED, r))) if self.peers[i].held.take(r) => {
                        self.originator.freed(r)?;
                        None
                    }
                    Ok(Some((FREED, r))) => Some(format!(
                        "freed [{:#x}, +{}), which it does not hold",
                        r.addr, r.len
                    )),
                    Ok(Some((SECURE, r))) if self.peers[i].held.holds(r) => {
                        self.originator.secure(r)?;
                        let _ = self.peers[i].sock.write_all(&frame(SECURED, r));
                        None
                    }
                    Ok(Some((SECURE, r))) => Some(format!(
                        "asked to secure [{:#x}, +{}), which it does not hold",
                        r.addr, r.len
                    )),
                    Ok(Some((k, _))) => Some(format!("sent frame kind {k}")),
                    Ok(None) | Err(LinkError::Io(_)) => {
                        self.drop_peer(i)?;
                        None
                    }
                    Err(e) => Some(e.to_string()),
                };
                if let Some(why) = bad {
                    self.misbehaved.push(format!("receiver {i}: {why}"));
                    self.drop_peer(i)?;
                }
                done += 1;
            }
        }
    }

    /// An fbuf of `len` bytes, waiting for deallocation notices while the path's quota is used
    /// up (fails if it stays so with no receiver left to free anything).
    pub fn alloc_waiting(&mut self, len: usize) -> Result<Fbuf, LinkError> {
        loop {
            match self.originator.alloc(len) {
                Ok(f) => return Ok(f),
                Err(FbufError::Quota { .. })
                    if self.originator.outstanding() > 0 && self.receivers_alive() > 0 =>
                {
                    self.poll(true)?;
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// A receiver's end: the path mapped read-only, the link to the originator (or to the
/// forwarding process before it), and the deallocation notices not yet sent.
pub struct ReceiverEnd {
    /// The mapped path.
    pub receiver: Receiver,
    sock: UnixStream,
    info: PathInfo,
    notices: Vec<FbufRef>,
    /// Most notices held back before they are sent anyway.
    pub batch: usize,
    /// Messages that carried notices, and notices sent (to see the batching at work).
    pub notice_messages: usize,
    /// See `notice_messages`.
    pub notices_sent: usize,
}

impl ReceiverEnd {
    /// Join the path offered on `sock`.
    pub fn connect(sock: UnixStream) -> Result<ReceiverEnd, LinkError> {
        let (info, fd) = accept_path(&sock)?;
        Ok(ReceiverEnd {
            receiver: Receiver::new(fd, info)?,
            sock,
            info,
            notices: Vec::new(),
            batch: 64,
            notice_messages: 0,
            notices_sent: 0,
        })
    }

    /// The path's geometry.
    pub fn info(&self) -> PathInfo {
        self.info
    }

    /// A read-only descriptor of the path's memory, to offer the path onward.
    pub fn path_fd(&self) -> BorrowedFd<'_> {
        self.receiver.fd()
    }

    fn queued(&self) -> bool {
        zcio_vm::wire::queued(self.sock.as_fd()).is_ok_and(|q| q >= FRAME)
    }

    /// The next fbuf sent to us (`None` when the sender has closed the link). Pending
    /// notices go out first if nothing is queued (we would otherwise block holding them).
    pub fn recv(&mut self) -> Result<Option<FbufRef>, LinkError> {
        if !self.notices.is_empty() && !self.queued() {
            self.flush()?;
        }
        loop {
            match read_frame(&mut self.sock)? {
                None => return Ok(None),
                Some((SEND, r)) => {
                    self.receiver.receive(r)?;
                    return Ok(Some(r));
                }
                Some((SECURED, _)) => continue,
                Some((k, _)) => {
                    return Err(LinkError::Protocol(format!(
                        "originator sent frame kind {k}"
                    )));
                }
            }
        }
    }

    /// Free a received fbuf; its notice goes back with the next batch.
    pub fn free(&mut self, r: FbufRef) -> Result<(), LinkError> {
        self.receiver.free(r)?;
        self.notices.push(r);
        if self.notices.len() >= self.batch {
            self.flush()?;
        }
        Ok(())
    }

    /// Send the pending deallocation notices now, in one message.
    pub fn flush(&mut self) -> Result<(), LinkError> {
        if self.notices.is_empty() {
            return Ok(());
        }
        let bytes: Vec<u8> = self.notices.iter().flat_map(|r| frame(FREED, *r)).collect();
        self.sock
            .write_all(&bytes)
            .map_err(|_| LinkError::PeerGone {
                during: "sending deallocation notices",
            })?;
        self.notice_messages += 1;
        self.notices_sent += self.notices.len();
        self.notices.clear();
        Ok(())
    }

    /// Ask the originator to secure `r` (remove its write access until all have freed it), and
    /// wait until it has. Only meaningful on a volatile path.
    pub fn secure(&mut self, r: FbufRef) -> Result<(), LinkError> {
        self.sock.write_all(&frame(SECURE, r))?;
        match read_frame(&mut self.sock)? {
            None => Err(LinkError::PeerGone {
                during: "securing an fbuf",
            }),
            Some((SECURED, s)) if s == r => Ok(()),
            Some((SEND, _)) => Err(LinkError::Protocol(
                "securing while further fbufs are in flight is not supported yet".into(),
            )),
            Some((k, _)) => Err(LinkError::Protocol(format!(
                "originator answered a secure request with frame kind {k}"
            ))),
        }
    }
}

/// The server of a three-process path: receives fbufs from upstream and forwards the same
/// references downstream without touching their data; frees each upstream once the downstream
/// receiver has freed it.
pub struct Forwarder {
    /// The upstream end.
    pub up: ReceiverEnd,
    down: UnixStream,
    held: Held,
    /// Fbufs forwarded.
    pub forwarded: usize,
}

impl Forwarder {
    /// Offer upstream's path to the downstream receiver on `down`.
    pub fn new(up: ReceiverEnd, down: UnixStream) -> Result<Forwarder, LinkError> {
        offer_path(&down, up.info(), up.path_fd())?;
        Ok(Forwarder {
            up,
            down,
            held: Held::default(),
            forwarded: 0,
        })
    }

    /// Forward until upstream closes and downstream has freed everything (or is gone).
    pub fn run(&mut self) -> Result<usize, LinkError> {
        use rustix::event::{PollFd, PollFlags};
        let mut up_open = true;
        loop {
            if !up_open && self.held.is_empty() {
                break;
            }
            // About to wait: notices held back go out now (the originator may be waiting for
            // them to free space).
            if !up_open || !self.up.queued() {
                self.up.flush()?;
            }
            let (up_ready, down_ready) = {
                let mut fds = vec![PollFd::new(&self.down, PollFlags::IN)];
                if up_open {
                    fds.push(PollFd::new(&self.up.sock, PollFlags::IN));
                }
                match rustix::event::poll(&mut fds, None) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(std::io::Error::from(e).into()),
                }
                (
                    fds.get(1).is_some_and(|f| !f.revents().is_empty()),
                    !fds[0].revents().is_empty(),
                )
            };
            if down_ready {
                match read_frame(&mut self.down) {
                    Ok(Some((FREED, r))) if self.held.take(r) => self.up.free(r)?,
                    // Done, died, or broke the protocol: what downstream held is freed for it,
                    // and the path ends here; upstream learns it when this end closes.
                    _ => {
                        for r in self.held.drain() {
                            self.up.free(r)?;
                        }
                        break;
                    }
                }
            }
            if up_ready {
                match self.up.recv()? {
                    Some(r) => {
                        self.down
                            .write_all(&frame(SEND, r))
                            .map_err(|_| LinkError::PeerGone {
                                during: "forwarding downstream",
                            })?;
                        self.held.add(r);
                        self.forwarded += 1;
                    }
                    None => up_open = false,
                }
            }
        }
        self.up.flush()?;
        Ok(self.forwarded)
    }
}
