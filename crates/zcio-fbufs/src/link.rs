//! Fbufs between processes (paper 001, §3.3): references go out and deallocation notices come
//! back through shared rings beside a Unix socket, and a process that dies gives back every
//! reference it held.
//!
//! - The originator offers the path to a receiver once: its geometry, a read-only descriptor
//!   of its memory, and the link's rings ([`offer_path`], `SCM_RIGHTS`; [`crate::ring`]).
//! - A send puts a three-word reference on the sends ring: no system call, and the data never
//!   moves. A receiver asleep on the socket is woken with one frame; when the ring is full the
//!   reference goes over the socket as a 24-byte frame instead, and so do the ones after it
//!   until the receiver has taken those from the socket (it reads the ring first), so that
//!   references arrive in the order sent.
//! - No end ever waits for the other to read: a frame the socket does not take now waits in a
//!   backlog for that peer, in order, and goes out when the end next touches that peer (a send,
//!   a poll, an allocation; a receive, a free) or, while the end sleeps, when the peer's socket
//!   takes more. One stuck receiver thus holds up no send and no other receiver of the path.
//!   The backlog is bounded: the references waiting for a receiver are at most those it holds
//!   (each fbuf is at least a page, and is sent to a receiver once until it comes back), and
//!   past an explicit limit ([`DEFAULT_BACKLOG_FRAMES`]) the peer counts as failed: an
//!   originator drops that receiver and releases its references as if it had died, a receiver
//!   gives up on its originator. A backlog goes with its end when that is dropped
//!   ([`OriginatorEnd::backlog_bytes`] tells what still waits). Nor does an end wait for the
//!   rest of a frame cut short: it keeps the part until the rest comes. Only
//!   [`ReceiverEnd::secure`] waits for the originator, for its answer.
//! - A receiver frees fbufs locally; each notice goes on the frees ring at once, so the
//!   originator never starves for free fbufs and gets no message for notices at all. Where the
//!   ring is full, the notices wait: they ride along with any request the receiver sends
//!   (piggybacked), and go out on their own when 64 have accumulated, a quarter of the path is
//!   held back, or before the receiver blocks for the next fbuf. Each side reads every frame
//!   queued on the socket with one system call.
//! - Before sleeping, an end looks at its ring for a while (yielding the CPU), since a wake-up
//!   costs more than a few looks when the other end is about to answer.
//! - A receiver that exits or is killed releases every reference it held (the paper: "its
//!   termination will cause the destruction of a communication endpoint, which will in turn
//!   cause the deallocation of all associated fbufs"). The originator sees the end through a
//!   pidfd of the receiving process (taken from the socket's peer credentials), so a socket
//!   that outlives its process in a child does not keep the fbufs, and through the socket's
//!   close where no pidfd can be had. An originator that exits leaves its memory to the
//!   receivers that map it: the kernel keeps the pages while any mapping holds them.
//! - A forwarding process (the server of a three-process path) is a receiver that offers the
//!   same path onward, with rings of its own, and frees an fbuf upstream when its own receiver
//!   frees it. It announces the process it forwards to (a frame with its pid; a forwarder
//!   further down announces its own, passed on), and the originator watches those processes:
//!   a forwarder that dies without a goodbye leaves what it held quarantined, not reused,
//!   until every process downstream of it has ended, since those may still be reading it
//!   ([`OriginatorEnd::quarantined`]). A downstream process in another pid namespace cannot
//!   be watched, and is not waited for.
//! - An end that closes its link in order says goodbye first (a frame of its own): dropping an
//!   [`OriginatorEnd`] or a [`ReceiverEnd`] does, and so does a [`Forwarder`] whose run ended
//!   well. A socket that closes without it lost its process (killed, crashed) or an end that
//!   failed, and the other side says so instead of taking it for the end of the stream: a
//!   receiver's next [`ReceiverEnd::recv`] fails with [`LinkError::PeerGone`], a forwarding
//!   server's run fails, and an originator's send to no receiver left fails.

use crate::aggregate::{Msg, NODE_BYTES};
use crate::path::{Fbuf, FbufError, FbufRef, Originator, PathInfo, Receiver, Variant};
use crate::region::RegionRead;
use crate::ring::{Dir, Rings};
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

const SEND: u64 = 1;
const FREED: u64 = 2;
const SECURE: u64 = 3;
const SECURED: u64 = 4;
/// An aggregate message: the frame carries its root node and length.
const MSG: u64 = 5;
/// A wake-up for an end asleep on the socket (something is on its ring).
const WAKE: u64 = 6;
/// Goodbye: the sender of this frame closes its end of the link in order (it is done, not
/// killed), and sends nothing more.
const BYE: u64 = 8;
/// The sender of this frame forwards what it receives to the process whose pid the frame
/// carries (in its address word): if the sender dies, the fbufs it held may still be read
/// there, and must not be reused before that process has ended.
const DOWNSTREAM: u64 = 9;
/// Most downstream processes an originator watches for one receiver (a path of forwarders
/// announces each of them; more is a receiver flooding the originator).
const MAX_DOWNSTREAM: usize = 64;
/// What a receiver whose sender went without a goodbye gets (after "peer closed the
/// connection").
const SENDER_GONE: &str = "without a goodbye (killed, crashed or failed) while receiving";
pub(crate) const FRAME: usize = 24;

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
    /// The peer stopped reading its socket: more frames wait for it than the limit allows.
    #[error(
        "fbuf link: {peer} stopped reading its socket: {frames} frames wait for it, more than the limit of {limit}"
    )]
    Stalled {
        /// Which peer ("the originator", "the downstream receiver").
        peer: &'static str,
        /// Frames waiting for it.
        frames: usize,
        /// The most allowed.
        limit: usize,
    },
}

/// Most frames that may wait for a peer whose socket is full before the peer counts as failed
/// (1.5 MiB of frames). References alone never reach it on a path of up to 256 MiB (65536
/// pages): a peer has each fbuf at most once at a time. Only a receiver that also floods
/// requests, or an originator that sends what it has not had back, gets that far.
pub const DEFAULT_BACKLOG_FRAMES: usize = 1 << 16;

pub(crate) fn frame(kind: u64, r: FbufRef) -> [u8; FRAME] {
    let mut b = [0u8; FRAME];
    b[..8].copy_from_slice(&kind.to_le_bytes());
    b[8..16].copy_from_slice(&r.addr.to_le_bytes());
    b[16..].copy_from_slice(&r.len.to_le_bytes());
    b
}

pub(crate) fn parse(b: &[u8; FRAME]) -> (u64, FbufRef) {
    let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
    (
        w(0),
        FbufRef {
            addr: w(1),
            len: w(2),
        },
    )
}

/// What reading a link gave.
pub(crate) enum Next {
    /// A whole frame.
    Frame(u64, FbufRef),
    /// Nothing queued (only when not waiting).
    Empty,
    /// The peer closed its end (or reset it).
    Closed,
}

/// Frames read from a socket in bulk: one system call takes every frame queued (a batch of
/// deallocation notices, a run of sends), which the caller then takes one by one.
pub(crate) struct Frames {
    buf: Box<[u8; FRAME * 256]>,
    lo: usize,
    hi: usize,
}

impl Frames {
    pub(crate) fn new() -> Frames {
        Frames {
            buf: Box::new([0; FRAME * 256]),
            lo: 0,
            hi: 0,
        }
    }

    /// Whether a whole frame is buffered.
    fn ready(&self) -> bool {
        self.hi - self.lo >= FRAME
    }

    /// The next frame: from the buffer, else from one read of `sock`, waiting for one if `wait`.
    pub(crate) fn next(&mut self, sock: &UnixStream, wait: bool) -> Result<Next, LinkError> {
        use rustix::net::RecvFlags;
        while !self.ready() {
            if self.lo > 0 {
                self.buf.copy_within(self.lo..self.hi, 0);
                self.hi -= self.lo;
                self.lo = 0;
            }
            // A frame cut short stays buffered until its rest comes, and is not waited for: the
            // rest may wait in the writer's backlog, or never come from a hostile peer.
            let flags = if wait {
                RecvFlags::empty()
            } else {
                RecvFlags::DONTWAIT
            };
            match rustix::net::recv(sock, &mut self.buf[self.hi..], flags) {
                Ok((_, 0)) if self.hi == 0 => return Ok(Next::Closed),
                Ok((_, 0)) => return Err(LinkError::Protocol("frame cut short".into())),
                Ok((_, n)) => self.hi += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => return Ok(Next::Empty),
                Err(rustix::io::Errno::CONNRESET) => return Ok(Next::Closed),
                Err(e) => return Err(std::io::Error::from(e).into()),
            }
        }
        let f: &[u8; FRAME] = self.buf[self.lo..self.lo + FRAME]
            .try_into()
            .expect("a frame");
        let (k, r) = parse(f);
        self.lo += FRAME;
        Ok(Next::Frame(k, r))
    }
}

/// Offer a path to a receiver: its geometry, a read-only descriptor of its memory, and the
/// descriptor of the link's rings (none when the path is offered outside a link).
pub fn offer_path(
    sock: &UnixStream,
    info: PathInfo,
    ro_fd: BorrowedFd<'_>,
    rings: Option<BorrowedFd<'_>>,
) -> Result<(), LinkError> {
    let (bytes, fds) = path_offer(info, ro_fd, rings);
    zcio_vm::wire::send_with_fds(sock.as_fd(), &bytes, &fds)
        .map_err(|e| gone_if_closed(e, "offering the path"))?;
    Ok(())
}

/// [`offer_path`] without waiting for the peer to read: an error where its socket cannot take
/// the offer now (the owner's answer to a client that does not read its answers).
pub(crate) fn offer_path_now(
    sock: &UnixStream,
    info: PathInfo,
    ro_fd: BorrowedFd<'_>,
) -> Result<(), LinkError> {
    let (bytes, fds) = path_offer(info, ro_fd, None);
    zcio_vm::wire::send_with_fds_now(sock.as_fd(), &bytes, &fds)
        .map_err(|e| gone_if_closed(e, "offering the path"))?;
    Ok(())
}

/// A socket error that means the peer is gone (it closed its end, or died: `EPIPE`,
/// `ECONNRESET`) as [`LinkError::PeerGone`]; any other as it is.
fn gone_if_closed(e: zcio_vm::VmError, during: &'static str) -> LinkError {
    match e.errno() {
        Some(e)
            if e == rustix::io::Errno::PIPE.raw_os_error()
                || e == rustix::io::Errno::CONNRESET.raw_os_error() =>
        {
            LinkError::PeerGone { during }
        }
        _ => LinkError::Vm(e),
    }
}

/// The message offering a path: its geometry in four words, and its descriptors.
fn path_offer<'a>(
    info: PathInfo,
    ro_fd: BorrowedFd<'a>,
    rings: Option<BorrowedFd<'a>>,
) -> (Vec<u8>, Vec<BorrowedFd<'a>>) {
    let words = [
        info.addr as u64,
        info.chunk_bytes as u64,
        info.quota_chunks as u64,
        info.variant.cached as u64 | (info.variant.volatile as u64) << 1,
    ];
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let fds: Vec<BorrowedFd<'_>> = std::iter::once(ro_fd).chain(rings).collect();
    (bytes, fds)
}

/// Accept a path offered with [`offer_path`]: its geometry, its memory's descriptor, and the
/// link's rings if they came with it.
pub fn accept_path(sock: &UnixStream) -> Result<(PathInfo, OwnedFd, Option<OwnedFd>), LinkError> {
    let mut b = [0u8; 32];
    let (n, mut fds) = zcio_vm::wire::recv_with_fds(sock.as_fd(), &mut b)
        .map_err(|e| gone_if_closed(e, "waiting for the path"))?;
    if n == 0 {
        return Err(LinkError::PeerGone {
            during: "waiting for the path",
        });
    }
    if n != 32 || fds.is_empty() || fds.len() > 2 {
        return Err(LinkError::Protocol(format!(
            "path offer of {n} bytes and {} descriptors (want 32 and 1 or 2)",
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
    // The length is computed checked: the words are the peer's, and `PathInfo::len` trusts
    // its geometry.
    let len = info.chunk_bytes.checked_mul(info.quota_chunks);
    if info.chunk_bytes == 0
        || info.chunk_bytes % zcio_vm::page_size() != 0
        || len.is_none_or(|l| l == 0 || l > zcio_vm::mapping::MAX_MAPPING)
        || info.addr % zcio_vm::page_size() != 0
        || len.is_none_or(|l| info.addr.checked_add(l).is_none())
    {
        return Err(LinkError::Protocol(format!(
            "implausible path offered: {info:?}"
        )));
    }
    let rings = (fds.len() == 2).then(|| fds.pop().expect("two descriptors"));
    let fd = fds.pop().expect("one descriptor");
    // A path longer than its memory would be mapped past the end of the file, where a read
    // faults (SIGBUS) instead of failing.
    let size = rustix::fs::fstat(&fd)
        .map_err(|e| LinkError::Io(e.into()))?
        .st_size as u64;
    if size < info.len() as u64 {
        return Err(LinkError::Protocol(format!(
            "path offered with {} bytes of range ({} chunks of {}) but {size} bytes of memory",
            info.len(),
            info.quota_chunks,
            info.chunk_bytes
        )));
    }
    Ok((info, fd, rings))
}

/// Wait until `sock` has something to read (or closed), or takes more.
fn wait_in_or_out(sock: &UnixStream) -> Result<(), LinkError> {
    use rustix::event::{PollFd, PollFlags};
    let mut fds = [PollFd::new(sock, PollFlags::IN | PollFlags::OUT)];
    match rustix::event::poll(&mut fds, None) {
        Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
        Err(e) => Err(std::io::Error::from(e).into()),
    }
}

/// Write as much of `b` as `sock` takes now, without waiting and without `SIGPIPE`; how much.
pub(crate) fn send_now(sock: &UnixStream, b: &[u8]) -> std::io::Result<usize> {
    use rustix::net::SendFlags;
    let mut n = 0;
    while n < b.len() {
        match rustix::net::send(sock, &b[n..], SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
            Ok(0) | Err(rustix::io::Errno::AGAIN) => break,
            Ok(k) => n += k,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(n)
}

/// The frames for one peer that its socket has not taken yet (the backlog), in the order they
/// were written: whatever is written later goes out behind them. Writing never waits.
#[derive(Default)]
struct Outbox {
    bytes: Vec<u8>,
    /// How much of `bytes` went out already.
    sent: usize,
}

impl Outbox {
    /// Bytes waiting.
    fn len(&self) -> usize {
        self.bytes.len() - self.sent
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Frames waiting (one partly sent counts whole).
    fn frames(&self) -> usize {
        self.len().div_ceil(FRAME)
    }

    /// Write `b` behind what waits, as far as the socket takes it now; the bytes that went out.
    fn write(&mut self, sock: &UnixStream, b: &[u8]) -> std::io::Result<usize> {
        if self.is_empty() {
            let n = send_now(sock, b)?;
            self.bytes.clear();
            self.sent = 0;
            self.bytes.extend_from_slice(&b[n..]);
            return Ok(n);
        }
        self.bytes.extend_from_slice(b);
        self.flush(sock)
    }

    /// Write what waits, as far as the socket takes it now; the bytes that went out.
    fn flush(&mut self, sock: &UnixStream) -> std::io::Result<usize> {
        if self.is_empty() {
            return Ok(0);
        }
        let n = send_now(sock, &self.bytes[self.sent..])?;
        self.sent += n;
        if self.is_empty() {
            self.bytes.clear();
            self.sent = 0;
        } else if self.sent >= self.bytes.len() / 2 {
            self.bytes.drain(..self.sent);
            self.sent = 0;
        }
        Ok(n)
    }

    /// Forget what waits, and the memory it took (the peer is gone or given up on).
    fn clear(&mut self) {
        *self = Outbox::default();
    }
}

/// Wake the other end, asleep on the socket: a WAKE frame, unless frames already wait for its
/// socket (it is full: the other end has unread frames and is awake to them anyway) or the
/// socket is full now. A frame cut short waits in `out` for the rest to go out.
fn wake(sock: &UnixStream, out: &mut Outbox) {
    if !out.is_empty() {
        return;
    }
    let f = frame(WAKE, FbufRef { addr: 0, len: 0 });
    if let Ok(n) = send_now(sock, &f)
        && n > 0
    {
        out.bytes.extend_from_slice(&f[n..]);
    }
}

/// A pidfd of the process at the other end of `sock`: none where the kernel cannot name it
/// (another pid namespace) or lacks pidfds, or where it is this very process. Without one, the
/// socket's close alone tells of that process's end.
pub(crate) fn peer_pidfd(sock: &UnixStream) -> Option<OwnedFd> {
    let c = rustix::net::sockopt::socket_peercred(sock).ok()?;
    if c.pid == rustix::process::getpid() {
        return None;
    }
    rustix::process::pidfd_open(c.pid, rustix::process::PidfdFlags::empty()).ok()
}

/// What [`poll_ends`] saw: which of the extra descriptors are ready, which ends' sockets are
/// readable (or closed), which take more, and which ends' processes are gone (indices into the
/// ends given).
pub(crate) struct Polled {
    pub(crate) extra: Vec<bool>,
    pub(crate) readable: Vec<usize>,
    pub(crate) writable: Vec<usize>,
    pub(crate) ended: Vec<usize>,
}

/// Whether poll's `revents` say the socket has something to read, or has closed or failed.
fn readable(revents: rustix::event::PollFlags) -> bool {
    use rustix::event::PollFlags;
    revents.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL)
}

/// Wait, up to `timeout` (forever with `None`), until one of `extra` (a listener) is ready, one
/// of the ends' sockets is readable, one of their processes has exited (its pidfd turns
/// readable), or one of the sockets marked for it (a backlog waits for it) takes more.
pub(crate) fn poll_ends(
    extra: &[BorrowedFd<'_>],
    ends: &[(&UnixStream, Option<&OwnedFd>, bool)],
    timeout: Option<Duration>,
) -> Result<Polled, LinkError> {
    use rustix::event::{PollFd, PollFlags};
    let mut fds: Vec<PollFd<'_>> = extra
        .iter()
        .map(|f| PollFd::new(f, PollFlags::IN))
        .collect();
    for (sock, pidfd, out) in ends {
        let flags = if *out {
            PollFlags::IN | PollFlags::OUT
        } else {
            PollFlags::IN
        };
        fds.push(PollFd::new(*sock, flags));
        if let Some(p) = pidfd {
            fds.push(PollFd::new(*p, PollFlags::IN));
        }
    }
    let ts = timeout.map(|t| rustix::time::Timespec {
        tv_sec: t.as_secs() as i64,
        tv_nsec: t.subsec_nanos() as i64,
    });
    match rustix::event::poll(&mut fds, ts.as_ref()) {
        Ok(_) | Err(rustix::io::Errno::INTR) => {}
        Err(e) => return Err(std::io::Error::from(e).into()),
    }
    let ready = |k: usize| !fds[k].revents().is_empty();
    let mut out = Polled {
        extra: (0..extra.len()).map(ready).collect(),
        readable: Vec::new(),
        writable: Vec::new(),
        ended: Vec::new(),
    };
    let mut k = extra.len();
    for (i, (_, pidfd, _)) in ends.iter().enumerate() {
        if readable(fds[k].revents()) {
            out.readable.push(i);
        }
        if fds[k].revents().contains(PollFlags::OUT) {
            out.writable.push(i);
        }
        k += 1;
        if pidfd.is_some() {
            if ready(k) {
                out.ended.push(i);
            }
            k += 1;
        }
    }
    Ok(out)
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

/// Why a receiver was cut off, where it was for something it did (not for being gone).
enum Failure {
    /// It stopped reading its socket: `frames` waited for it, more than `limit`.
    Stalled { frames: usize, limit: usize },
    /// It spoiled the sends ring.
    Spoiled(crate::ring::RingError),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Stalled { frames, limit } => write!(
                f,
                "stopped reading its socket: {frames} frames wait for it, more than the limit of {limit}"
            ),
            Failure::Spoiled(e) => write!(f, "spoiled its ring: {e}"),
        }
    }
}

/// The sending side of a link to one receiver (an originator's, or a forwarding server's
/// downstream): sends go on the rings, what comes back is collected from them and from the
/// socket.
struct Peer {
    sock: UnixStream,
    frames: Frames,
    rings: Rings,
    /// Producer position on the sends ring, consumer position on the frees ring.
    tx: u64,
    rx: u64,
    /// Socket messages of the receiver already read.
    mail_seen: u64,
    /// The receiving process, watched so that its exit releases what it held even when its end
    /// of the socket lives on in another process (inherited by a child, passed on).
    pidfd: Option<OwnedFd>,
    held: Held,
    alive: bool,
    /// Frames the socket has not taken yet (the backlog).
    out: Outbox,
    /// References sent on the socket rather than the ring, in all: until the receiver has
    /// taken as many from its socket, the ring is not used.
    mailed: u64,
    /// Most frames that may wait in `out`.
    limit: usize,
    /// Why the receiver failed a send, when it was its doing.
    failed: Option<Failure>,
    /// The receiver said goodbye: its end closed in order.
    bye: bool,
    /// This end cut the receiver off for what it did (see [`OriginatorEnd::misbehaved`]).
    cut_off: bool,
    /// The processes the receiver forwards to (it announced them: [`DOWNSTREAM`]), watched
    /// through pidfds: what it held when it died waits for their end.
    downstream: Vec<OwnedFd>,
}

impl Peer {
    /// Offer the path on `sock` with fresh rings of `slots` slots; at most `limit` frames may
    /// wait for the receiver's socket.
    fn offer(
        sock: UnixStream,
        info: PathInfo,
        ro_fd: BorrowedFd<'_>,
        slots: usize,
        limit: usize,
    ) -> Result<Peer, LinkError> {
        let rings = Rings::create(slots)?;
        offer_path(&sock, info, ro_fd, Some(rings.fd()))?;
        let pidfd = peer_pidfd(&sock);
        Ok(Peer {
            sock,
            frames: Frames::new(),
            rings,
            tx: 0,
            rx: 0,
            mail_seen: 0,
            pidfd,
            held: Held::default(),
            alive: true,
            out: Outbox::default(),
            mailed: 0,
            limit,
            failed: None,
            bye: false,
            cut_off: false,
            downstream: Vec::new(),
        })
    }

    /// Say goodbye to the receiver (behind the backlog, as far as the socket takes it now):
    /// this end closes in order and sends nothing more.
    fn farewell(&mut self) {
        if self.alive {
            let _ = self.mail(&frame(BYE, FbufRef { addr: 0, len: 0 }));
        }
    }

    /// Hand `r` to the receiver, never waiting for it: on the sends ring (waking it if it
    /// sleeps), or on the socket when the ring is full or references sent there before are not
    /// all taken yet (on the ring, this one would overtake them). `false` when the receiver is
    /// gone, spoiled the ring, or stopped reading (see [`Peer::failed`]).
    fn post(&mut self, kind: u64, r: FbufRef) -> bool {
        if !self.flush() {
            return false;
        }
        if self.out.is_empty() && self.rings.mail_taken(Dir::Sends) == self.mailed {
            match self
                .rings
                .push(Dir::Sends, &mut self.tx, [kind, r.addr, r.len])
            {
                Ok(true) => {
                    if self.rings.must_wake(Dir::Sends) {
                        wake(&self.sock, &mut self.out);
                    }
                    return true;
                }
                Ok(false) => {}
                Err(e) => {
                    self.failed = Some(Failure::Spoiled(e));
                    return false;
                }
            }
        }
        self.mailed += 1;
        self.mail(&frame(kind, r))
    }

    /// Frames on the socket behind the backlog, never waiting; what the socket does not take
    /// joins the backlog. What went out is announced on the sends ring for a receiver that
    /// looks there. `false` when the socket failed or the backlog passed the limit.
    fn mail(&mut self, bytes: &[u8]) -> bool {
        match self.out.write(&self.sock, bytes) {
            Ok(0) => {}
            Ok(_) => self.rings.post_mail(Dir::Sends),
            Err(_) => return false,
        }
        let frames = self.out.frames();
        if frames > self.limit {
            self.failed = Some(Failure::Stalled {
                frames,
                limit: self.limit,
            });
            return false;
        }
        true
    }

    /// Send the backlog as far as the socket takes it now; `false` when the socket failed.
    fn flush(&mut self) -> bool {
        match self.out.flush(&self.sock) {
            Ok(0) => true,
            Ok(_) => {
                self.rings.post_mail(Dir::Sends);
                true
            }
            Err(_) => false,
        }
    }

    /// Cut the receiver off: no more sends, the backlog forgotten. What it held is the
    /// caller's to release.
    fn cut(&mut self) {
        self.alive = false;
        let _ = self.sock.shutdown(std::net::Shutdown::Both);
        self.pidfd = None;
        self.out.clear();
    }

    /// Whether something came back that [`Peer::collect`] would take.
    fn pending(&self) -> bool {
        self.rings.pending(Dir::Frees, self.rx) || self.rings.mail(Dir::Frees) != self.mail_seen
    }

    /// What came back: the frees ring, then the socket when the receiver posted there (or
    /// always, with `socket`). A spoiled ring or a closed socket ends the list.
    fn collect(&mut self, socket: bool, out: &mut Vec<Result<Next, LinkError>>) {
        loop {
            match self.rings.pop(Dir::Frees, &mut self.rx) {
                Ok(Some([k, addr, len])) => out.push(Ok(Next::Frame(k, FbufRef { addr, len }))),
                Ok(None) => break,
                Err(e) => {
                    out.push(Err(LinkError::Protocol(e.to_string())));
                    return;
                }
            }
        }
        let mail = self.rings.mail(Dir::Frees);
        if !socket && mail == self.mail_seen {
            return;
        }
        self.mail_seen = mail;
        loop {
            match self.frames.next(&self.sock, false) {
                Ok(Next::Empty) => return,
                Ok(Next::Frame(WAKE, _)) => {}
                n @ (Ok(Next::Closed) | Err(_)) => {
                    out.push(n);
                    return;
                }
                n => out.push(n),
            }
        }
    }
}

/// The originator's end: its path and the receivers it sends to.
pub struct OriginatorEnd {
    /// The path's allocator and memory.
    pub originator: Originator,
    peers: Vec<Peer>,
    /// References released for receivers that went away.
    pub released_for_dead: usize,
    /// Receivers dropped for breaking the protocol or for not reading their socket, and why
    /// (their references are released).
    pub misbehaved: Vec<String>,
    /// How long a blocking [`OriginatorEnd::poll`] keeps looking before it sleeps.
    pub spin: Duration,
    /// Slots of each ring of the links made from now on.
    pub ring_slots: usize,
    /// Most frames that may wait for a receiver whose socket is full before it is dropped as
    /// failed, for the links made from now on ([`DEFAULT_BACKLOG_FRAMES`]).
    pub backlog_frames: usize,
    /// Aggregate messages out, by root node: the fbufs holding their nodes and data, and how
    /// many receivers still hold each.
    msgs: HashMap<u64, SentMsg>,
    /// What forwarding receivers held when they went without a goodbye, kept from reuse until
    /// every process they forwarded to has ended (those may still be reading it).
    quarantine: Vec<Quarantined>,
}

/// Fbufs a dead forwarder held, and the processes downstream of it that may still read them.
struct Quarantined {
    downstream: Vec<OwnedFd>,
    refs: Vec<FbufRef>,
}

/// Whether the process behind `pidfd` has ended (a pidfd turns readable then).
fn ended(pidfd: &OwnedFd) -> bool {
    use rustix::event::{PollFd, PollFlags};
    let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
}

struct SentMsg {
    root: FbufRef,
    parts: Vec<FbufRef>,
    holders: usize,
}

/// How long an end keeps looking for frames before it sleeps, unless told otherwise.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(SPIN_US);
const SPIN_US: u64 = 50;

/// From this length on, an allocation first takes in the notices that came back.
const LARGE: usize = 64 << 10;

impl OriginatorEnd {
    /// An end for `originator`'s path, with no receiver yet.
    pub fn new(originator: Originator) -> OriginatorEnd {
        OriginatorEnd {
            originator,
            peers: Vec::new(),
            released_for_dead: 0,
            misbehaved: Vec::new(),
            spin: DEFAULT_SPIN,
            ring_slots: crate::ring::DEFAULT_SLOTS,
            backlog_frames: DEFAULT_BACKLOG_FRAMES,
            msgs: HashMap::new(),
            quarantine: Vec::new(),
        }
    }

    /// Fbufs held back from reuse because a forwarding receiver died holding them and a
    /// process it forwarded to may still be reading them.
    pub fn quarantined(&self) -> usize {
        self.quarantine.iter().map(|q| q.refs.len()).sum()
    }

    /// Release the quarantined fbufs whose downstream processes have all ended.
    fn release_quarantined(&mut self) -> Result<(), LinkError> {
        let mut k = 0;
        while k < self.quarantine.len() {
            if self.quarantine[k].downstream.iter().all(ended) {
                let q = self.quarantine.swap_remove(k);
                for r in q.refs {
                    self.release(r)?;
                    self.released_for_dead += 1;
                }
            } else {
                k += 1;
            }
        }
        Ok(())
    }

    /// Offer the path to a receiver connected on `sock` (with `ro_fd`, a read-only descriptor
    /// of the path's memory, and the link's rings); returns its index.
    pub fn add_receiver(
        &mut self,
        sock: UnixStream,
        ro_fd: BorrowedFd<'_>,
    ) -> Result<usize, LinkError> {
        let p = Peer::offer(
            sock,
            self.originator.info(),
            ro_fd,
            self.ring_slots,
            self.backlog_frames,
        )?;
        self.peers.push(p);
        Ok(self.peers.len() - 1)
    }

    /// Whether receiver `i`'s process is watched through a pidfd (otherwise its end is seen
    /// only when its socket closes).
    pub fn watches_process(&self, i: usize) -> bool {
        self.peers.get(i).is_some_and(|p| p.pidfd.is_some())
    }

    /// Receivers still connected.
    pub fn receivers_alive(&self) -> usize {
        self.peers.iter().filter(|p| p.alive).count()
    }

    /// Bytes of frames waiting for receiver `i` that its socket has not taken yet (it is not
    /// reading, or not as fast as this end sends).
    pub fn backlog_bytes(&self, i: usize) -> usize {
        self.peers.get(i).map_or(0, |p| p.out.len())
    }

    /// Close every link in order: each receiver still connected gets a goodbye (its
    /// [`ReceiverEnd::recv`] then ends with `None` once it has taken what was sent) and is let
    /// go, what it held released. Dropping the end says goodbye too.
    pub fn close(&mut self) -> Result<(), LinkError> {
        for i in 0..self.peers.len() {
            if self.peers[i].alive {
                self.peers[i].farewell();
                self.drop_peer(i)?;
            }
        }
        Ok(())
    }

    /// Why none of the receivers `to` can be sent to (they are all gone), if so.
    fn all_gone(&self, to: &[usize]) -> Option<LinkError> {
        if to.is_empty()
            || to
                .iter()
                .any(|i| self.peers.get(*i).is_some_and(|p| p.alive))
        {
            return None;
        }
        // Sends to receivers this end cut off itself go nowhere, as before: why they were cut
        // off is in `misbehaved`.
        let named: Vec<&Peer> = to.iter().filter_map(|i| self.peers.get(*i)).collect();
        if !named.is_empty() && named.iter().all(|p| p.cut_off) {
            return None;
        }
        let died = named.iter().any(|p| !p.bye && !p.cut_off);
        Some(LinkError::PeerGone {
            during: if died {
                "without a goodbye (killed, crashed or failed) before this send"
            } else {
                "before this send: no receiver named is connected"
            },
        })
    }

    /// Send `fbuf` to the receivers `to`. If every one of them is gone (and `to` names one),
    /// the fbuf goes back to the free lists and the error says how they went.
    pub fn send(&mut self, fbuf: Fbuf, to: &[usize]) -> Result<FbufRef, LinkError> {
        if let Some(e) = self.all_gone(to) {
            self.originator.free(fbuf)?;
            return Err(e);
        }
        let live: Vec<usize> = to
            .iter()
            .copied()
            .filter(|i| self.peers.get(*i).is_some_and(|p| p.alive))
            .collect();
        let r = self.originator.send(fbuf, live.len())?;
        for i in live {
            if self.peers[i].post(SEND, r) {
                self.peers[i].held.add(r);
            } else {
                // Gone meanwhile, or failed: it will never free this one.
                self.originator.freed(r)?;
                self.fail_peer(i)?;
            }
        }
        Ok(r)
    }

    /// Send the aggregate message `msg` to the receivers `to` as one reference, its root
    /// (integrated buffer management, §3.2.3). `parts` are the fbufs of this path that hold its
    /// nodes and its data, every one of them: they are sent with it (on a non-volatile path they
    /// turn read-only) and come back together when every receiver has freed the message.
    /// Receivers read the message in place, so the path must be cached (mapped whole).
    pub fn send_msg(
        &mut self,
        msg: Msg,
        parts: Vec<Fbuf>,
        to: &[usize],
    ) -> Result<FbufRef, LinkError> {
        let info = self.originator.info();
        let root = FbufRef {
            addr: msg.root,
            len: msg.len,
        };
        // A refused message gives its fbufs back to the free lists: nothing is lost.
        let fail = |end: &mut OriginatorEnd, parts: Vec<Fbuf>, why: &str| {
            for f in parts {
                end.originator.free(f)?;
            }
            Err(LinkError::Fbuf(FbufError::BadRef {
                what: "send an aggregate",
                addr: msg.root,
                len: msg.len,
                expected: match why {
                    "cached" => "a cached path (receivers read aggregates in place)",
                    "root" => "a root node inside one of the parts",
                    _ => "a root not already out in another message",
                },
            }))
        };
        if !info.variant.cached {
            return fail(self, parts, "cached");
        }
        if !parts
            .iter()
            .any(|f| msg.root >= f.addr() && msg.root + NODE_BYTES <= f.addr() + f.len())
        {
            return fail(self, parts, "root");
        }
        if self.msgs.contains_key(&msg.root) {
            return fail(self, parts, "busy");
        }
        if let Some(e) = self.all_gone(to) {
            for f in parts {
                self.originator.free(f)?;
            }
            return Err(e);
        }
        let live: Vec<usize> = to
            .iter()
            .copied()
            .filter(|i| self.peers.get(*i).is_some_and(|p| p.alive))
            .collect();
        let mut refs = Vec::with_capacity(parts.len());
        for f in parts {
            refs.push(self.originator.send(f, live.len())?);
        }
        if live.is_empty() {
            return Ok(root);
        }
        self.msgs.insert(
            msg.root,
            SentMsg {
                root,
                parts: refs,
                holders: live.len(),
            },
        );
        for i in live {
            if self.peers[i].post(MSG, root) {
                self.peers[i].held.add(root);
            } else {
                self.release(root)?;
                self.fail_peer(i)?;
            }
        }
        Ok(root)
    }

    /// One holder gave `r` back: an fbuf, or an aggregate message with all its parts.
    fn release(&mut self, r: FbufRef) -> Result<(), LinkError> {
        match self.msgs.get_mut(&r.addr) {
            Some(m) if m.root == r => {
                for p in &m.parts {
                    self.originator.freed(*p)?;
                }
                m.holders -= 1;
                if m.holders == 0 {
                    self.msgs.remove(&r.addr);
                }
            }
            _ => self.originator.freed(r)?,
        }
        Ok(())
    }

    /// Aggregate messages sent and not yet freed by all their receivers.
    pub fn msgs_outstanding(&self) -> usize {
        self.msgs.len()
    }

    fn drop_peer(&mut self, i: usize) -> Result<(), LinkError> {
        let p = &mut self.peers[i];
        if !p.alive {
            return Ok(());
        }
        p.cut();
        let downstream = std::mem::take(&mut p.downstream);
        if !p.bye && !downstream.is_empty() {
            // A forwarder gone without a goodbye: what it held may be mapped downstream, in
            // processes this end has no link to. Reused now, a receiver there could read
            // another message's bytes in an fbuf it still holds.
            let refs = p.held.drain();
            self.quarantine.push(Quarantined { downstream, refs });
            return self.release_quarantined();
        }
        for r in p.held.drain() {
            self.release(r)?;
            self.released_for_dead += 1;
        }
        Ok(())
    }

    /// Receiver `i` failed a send (or a flush of its backlog): it is dropped like a receiver
    /// that died, and where that was its doing (it stopped reading, spoiled its ring) the
    /// reason is kept in [`OriginatorEnd::misbehaved`].
    fn fail_peer(&mut self, i: usize) -> Result<(), LinkError> {
        if let Some(why) = self.peers[i].failed.take() {
            self.misbehaved.push(format!("receiver {i}: {why}"));
            self.peers[i].cut_off = true;
        }
        self.drop_peer(i)
    }

    /// Send what waits for each receiver as far as its socket takes it now.
    fn flush_all(&mut self) -> Result<(), LinkError> {
        for i in 0..self.peers.len() {
            if self.peers[i].alive && !self.peers[i].flush() {
                self.fail_peer(i)?;
            }
        }
        Ok(())
    }

    /// Take in what receiver `i` sent back (from the socket too, with `socket`); how much.
    fn collect(&mut self, i: usize, socket: bool) -> Result<usize, LinkError> {
        let mut got = Vec::new();
        self.peers[i].collect(socket, &mut got);
        let n = got.len();
        for next in got {
            if !self.peers[i].alive {
                break;
            }
            self.handle(i, next)?;
        }
        Ok(n)
    }

    /// Process what the receivers sent (deallocation notices, requests to secure), and notice
    /// receivers that are gone. With `block`, wait until at least one thing happened. Notices
    /// come from the rings without a system call; the socket is read when a receiver posted
    /// there, or when this end slept on it.
    pub fn poll(&mut self, block: bool) -> Result<usize, LinkError> {
        let mut done = 0;
        let mut spun = None;
        loop {
            if !self.quarantine.is_empty() {
                self.release_quarantined()?;
            }
            self.flush_all()?;
            for i in 0..self.peers.len() {
                if self.peers[i].alive {
                    done += self.collect(i, false)?;
                }
            }
            if done > 0 || !block || self.receivers_alive() == 0 {
                return Ok(done);
            }
            // Look again for a while before sleeping: a wake-up costs more than a few looks
            // when the receiver is about to answer.
            if spun.is_none_or(|t: Instant| t.elapsed() < self.spin) {
                spun.get_or_insert_with(Instant::now);
                while !self.peers.iter().any(|p| p.alive && p.pending())
                    && spun.is_some_and(|t| t.elapsed() < self.spin)
                {
                    std::thread::yield_now();
                }
                continue;
            }
            done += self.wait()?;
        }
    }

    /// Act on what receiver `i` sent. A receiver that breaks the protocol is cut off and its
    /// references released: it cannot free what it does not hold, nor stop the others.
    fn handle(&mut self, i: usize, next: Result<Next, LinkError>) -> Result<(), LinkError> {
        let bad = match next {
            Ok(Next::Frame(FREED, r)) if self.peers[i].held.take(r) => {
                self.release(r)?;
                None
            }
            Ok(Next::Frame(FREED, r)) => Some(format!(
                "freed [{:#x}, +{}), which it does not hold",
                r.addr, r.len
            )),
            Ok(Next::Frame(SECURE, r)) if self.peers[i].held.holds(r) => {
                // An aggregate message is secured whole: every fbuf of its nodes and data.
                match self.msgs.get(&r.addr).filter(|m| m.root == r) {
                    Some(m) => {
                        for part in &m.parts {
                            self.originator.secure(*part)?;
                        }
                    }
                    None => self.originator.secure(r)?,
                }
                if !self.peers[i].mail(&frame(SECURED, r)) {
                    return self.fail_peer(i);
                }
                None
            }
            Ok(Next::Frame(SECURE, r)) => Some(format!(
                "asked to secure [{:#x}, +{}), which it does not hold",
                r.addr, r.len
            )),
            Ok(Next::Frame(WAKE, _)) | Ok(Next::Empty) => None,
            Ok(Next::Frame(DOWNSTREAM, r)) if self.peers[i].downstream.len() < MAX_DOWNSTREAM => {
                // A process that has already ended (or never was) reads nothing: no pidfd.
                // Nor does this process count: it owns the memory.
                let pid = i32::try_from(r.addr)
                    .ok()
                    .and_then(rustix::process::Pid::from_raw)
                    .filter(|pid| *pid != rustix::process::getpid());
                if let Some(fd) = pid.and_then(|pid| {
                    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
                }) {
                    self.peers[i].downstream.push(fd);
                }
                None
            }
            Ok(Next::Frame(DOWNSTREAM, _)) => Some(format!(
                "announced more than {MAX_DOWNSTREAM} processes downstream"
            )),
            Ok(Next::Frame(BYE, _)) => {
                // Closed in order: what it still held is released as for a receiver gone.
                self.peers[i].bye = true;
                self.drop_peer(i)?;
                None
            }
            Ok(Next::Frame(k, _)) => Some(format!("sent frame kind {k}")),
            Ok(Next::Closed) | Err(LinkError::Io(_)) => {
                self.drop_peer(i)?;
                None
            }
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = bad {
            self.misbehaved.push(format!("receiver {i}: {why}"));
            self.peers[i].cut_off = true;
            self.drop_peer(i)?;
        }
        Ok(())
    }

    /// Sleep until a receiver sends something or its process ends, or the socket of one with a
    /// backlog takes more (then it gets it); what was taken in.
    fn wait(&mut self) -> Result<usize, LinkError> {
        let live: Vec<usize> = (0..self.peers.len())
            .filter(|i| self.peers[*i].alive)
            .collect();
        for i in &live {
            self.peers[*i].rings.announce_sleep(Dir::Frees);
        }
        let awake = |end: &mut OriginatorEnd| {
            for i in &live {
                end.peers[*i].rings.awake(Dir::Frees);
            }
        };
        // What came while announcing is taken without sleeping.
        if live.iter().any(|i| self.peers[*i].pending()) {
            awake(self);
            return Ok(0);
        }
        let ends: Vec<_> = live
            .iter()
            .map(|i| {
                let p = &self.peers[*i];
                (&p.sock, p.pidfd.as_ref(), !p.out.is_empty())
            })
            .collect();
        let polled = poll_ends(&[], &ends, None)?;
        let readable: Vec<usize> = polled.readable.iter().map(|k| live[*k]).collect();
        let writable: Vec<usize> = polled.writable.iter().map(|k| live[*k]).collect();
        let ended: Vec<usize> = polled.ended.iter().map(|k| live[*k]).collect();
        awake(self);
        for &i in &writable {
            if self.peers[i].alive && !self.peers[i].flush() {
                self.fail_peer(i)?;
            }
        }
        let mut done = 0;
        for &i in &readable {
            if self.peers[i].alive {
                done += self.collect(i, true)?;
            }
        }
        for &i in &ended {
            // What it sent before it ended still counts (its last notices).
            if self.peers[i].alive {
                self.collect(i, true)?;
            }
            self.drop_peer(i)?;
            done += 1;
        }
        Ok(done)
    }

    /// An fbuf of `len` bytes, waiting for deallocation notices while the path's quota is used
    /// up (fails if it stays so with no receiver left to free anything).
    pub fn alloc_waiting(&mut self, len: usize) -> Result<Fbuf, LinkError> {
        self.flush_all()?;
        // Notices that came back refill the free lists (LIFO): take them in first, so that the
        // fbufs used last, warm in the caches and TLBs of both sides, are used again. For a
        // small fbuf, whose reuse saves little, only when none is free; for a large one always.
        if (len >= LARGE || !self.originator.has_free(len)) && self.originator.outstanding() > 0 {
            self.poll(false)?;
        }
        loop {
            match self.originator.alloc(len) {
                Ok(f) => return Ok(f),
                Err(FbufError::Quota { .. })
                    if self.originator.outstanding() > 0 && self.receivers_alive() > 0 =>
                {
                    self.poll(true)?;
                }
                Err(FbufError::Quota { .. }) if self.quarantined() > 0 => {
                    return Err(LinkError::PeerGone {
                        during: "(a forwarder, without a goodbye): what it held waits, unused, until the processes it forwarded to end",
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// The links close in order (a goodbye to each receiver still connected), unless the end goes
/// in a panic: that is no orderly close, and the receivers say so.
impl Drop for OriginatorEnd {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            for p in &mut self.peers {
                p.farewell();
            }
        }
    }
}

/// What a receiver found when it looked for the next fbuf.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// An fbuf sent to it.
    Fbuf(FbufRef),
    /// An aggregate message sent to it: walk it with [`crate::aggregate::walk`] over
    /// [`ReceiverEnd::receiver`], free it with [`ReceiverEnd::free_msg`].
    Msg(Msg),
    /// Nothing yet.
    NotYet,
    /// The sender closed the link in order (it said goodbye); one that went without is
    /// [`LinkError::PeerGone`].
    Closed,
}

/// A receiver's end: the path mapped read-only, the link to the originator (or to the
/// forwarding process before it), and the deallocation notices not yet sent.
pub struct ReceiverEnd {
    /// The mapped path.
    pub receiver: Receiver,
    sock: UnixStream,
    frames: Frames,
    rings: Rings,
    /// Consumer position on the sends ring, producer position on the frees ring.
    rx: u64,
    tx: u64,
    /// Socket messages of the sender already read.
    mail_seen: u64,
    /// Deliveries read from the socket and not yet taken.
    early: VecDeque<Received>,
    /// Deliveries taken from the socket, in all (published on the sends ring).
    taken: u64,
    closed: bool,
    /// The sender said goodbye: its end closed in order, and the socket's close that follows
    /// is the end of the stream, not its death.
    bye: bool,
    /// Whether dropping this end says goodbye to the sender (not after a forwarding run
    /// failed: the path broke, and upstream learns it so).
    farewell: bool,
    /// This end gave up on the originator (it stopped reading): nothing more is delivered.
    given_up: bool,
    /// Frames the socket has not taken yet (the backlog): notices and requests.
    out: Outbox,
    info: PathInfo,
    /// Notices the frees ring had no room for, waiting for a socket message.
    notices: Vec<FbufRef>,
    notice_bytes: u64,
    /// Aggregate messages held, by root (a root may be sent more than once).
    msgs_held: HashMap<u64, usize>,
    /// Most notices held back (when the ring is full) before they are sent anyway.
    pub batch: usize,
    /// Socket messages that carried notices, and notices sent in all (ring and socket).
    pub notice_messages: usize,
    /// See `notice_messages`.
    pub notices_sent: usize,
    /// Notices that rode along with a request this end sent anyway (piggybacked).
    pub notices_piggybacked: usize,
    /// How long [`ReceiverEnd::recv`] keeps looking for the next fbuf before it sleeps.
    pub spin: Duration,
    /// Most frames that may wait for the originator's socket before this end gives up on it
    /// ([`DEFAULT_BACKLOG_FRAMES`]).
    pub backlog_frames: usize,
}

impl ReceiverEnd {
    /// Join the path offered on `sock`.
    pub fn connect(sock: UnixStream) -> Result<ReceiverEnd, LinkError> {
        let (info, fd, rings) = accept_path(&sock)?;
        let rings = rings
            .ok_or_else(|| LinkError::Protocol("the path was offered without its rings".into()))?;
        let rings = Rings::open(rings).map_err(LinkError::Protocol)?;
        Ok(ReceiverEnd {
            receiver: Receiver::new(fd, info)?,
            sock,
            frames: Frames::new(),
            rings,
            rx: 0,
            tx: 0,
            mail_seen: 0,
            early: VecDeque::new(),
            taken: 0,
            closed: false,
            bye: false,
            farewell: true,
            given_up: false,
            out: Outbox::default(),
            info,
            notices: Vec::new(),
            notice_bytes: 0,
            msgs_held: HashMap::new(),
            batch: 64,
            notice_messages: 0,
            notices_sent: 0,
            notices_piggybacked: 0,
            spin: DEFAULT_SPIN,
            backlog_frames: DEFAULT_BACKLOG_FRAMES,
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

    /// What a frame from the sender delivers (`None`: nothing for the application).
    fn take(&mut self, kind: u64, r: FbufRef) -> Result<Option<Received>, LinkError> {
        match kind {
            SEND => {
                self.receiver.receive(r)?;
                Ok(Some(Received::Fbuf(r)))
            }
            MSG => {
                // The root must lie in the path; everything else the walk checks.
                if !self.receiver.readable(r.addr, NODE_BYTES) || r.addr % 8 != 0 {
                    return Err(LinkError::Protocol(format!(
                        "aggregate root {:#x} outside the path",
                        r.addr
                    )));
                }
                *self.msgs_held.entry(r.addr).or_default() += 1;
                Ok(Some(Received::Msg(Msg {
                    root: r.addr,
                    len: r.len,
                })))
            }
            // A wake-up, or an answer to a secure request that was already given up on.
            WAKE | SECURED => Ok(None),
            // Closed in order: nothing more comes (what it sent before is still taken).
            BYE => {
                self.bye = true;
                self.closed = true;
                Ok(None)
            }
            k => Err(LinkError::Protocol(format!(
                "originator sent frame kind {k}"
            ))),
        }
    }

    /// Read every frame the socket holds now (or wait for one, with `wait`), keeping the
    /// deliveries for later.
    fn absorb(&mut self, wait: bool) -> Result<(), LinkError> {
        let mut wait = wait;
        loop {
            match self.frames.next(&self.sock, wait)? {
                Next::Empty => return Ok(()),
                Next::Closed => {
                    self.closed = true;
                    return Ok(());
                }
                Next::Frame(k, r) => {
                    if let Some(d) = self.take(k, r)? {
                        self.early.push_back(d);
                    }
                }
            }
            wait = false;
        }
    }

    fn next_fbuf(&mut self, wait: bool) -> Result<Received, LinkError> {
        if self.given_up {
            return Ok(Received::Closed);
        }
        // What waits for the originator goes first (a gone originator shows as the end below).
        let _ = self.flush_out();
        loop {
            // The ring before the socket: what is on the ring was sent before anything not yet
            // taken from the socket, since the sender puts nothing on the ring until every
            // reference it sent on the socket has been taken (counted here, below).
            match self.rings.pop(Dir::Sends, &mut self.rx) {
                Ok(Some([k, addr, len])) => match self.take(k, FbufRef { addr, len })? {
                    Some(d) => return Ok(d),
                    None => continue,
                },
                Ok(None) => {}
                Err(e) => return Err(LinkError::Protocol(e.to_string())),
            }
            if let Some(d) = self.early.pop_front() {
                self.taken += 1;
                self.rings.set_mail_taken(Dir::Sends, self.taken);
                return Ok(d);
            }
            let mail = self.rings.mail(Dir::Sends);
            if mail != self.mail_seen {
                self.mail_seen = mail;
                self.absorb(false)?;
                continue;
            }
            if self.closed {
                if !self.bye {
                    return Err(LinkError::PeerGone {
                        during: SENDER_GONE,
                    });
                }
                return Ok(Received::Closed);
            }
            if !wait {
                return Ok(Received::NotYet);
            }
            // About to sleep on the socket: the originator wakes us if it sends meanwhile.
            self.rings.announce_sleep(Dir::Sends);
            if self.rings.pending(Dir::Sends, self.rx) || self.rings.mail(Dir::Sends) != mail {
                self.rings.awake(Dir::Sends);
                continue;
            }
            let r = self.sleep();
            self.rings.awake(Dir::Sends);
            r?;
        }
    }

    /// Sleep on the socket until the originator sends something or closes the link, or, while
    /// frames wait for its socket, until it takes more (they go out then).
    fn sleep(&mut self) -> Result<(), LinkError> {
        if self.out.is_empty() {
            return self.absorb(true);
        }
        wait_in_or_out(&self.sock)?;
        let _ = self.flush_out();
        self.absorb(false)
    }

    /// Send what waits for the originator as far as its socket takes it now. A socket that
    /// failed is an originator gone: what waited is dropped.
    fn flush_out(&mut self) -> Result<(), LinkError> {
        match self.out.flush(&self.sock) {
            Ok(0) => Ok(()),
            Ok(_) => {
                self.rings.post_mail(Dir::Frees);
                Ok(())
            }
            Err(_) => {
                self.out.clear();
                Err(LinkError::PeerGone {
                    during: "writing to the originator",
                })
            }
        }
    }

    /// The next fbuf or message sent to us if one is there, without waiting.
    pub fn try_recv(&mut self) -> Result<Received, LinkError> {
        self.next_fbuf(false)
    }

    /// The next fbuf sent to us (`None` when the sender has closed the link in order;
    /// [`LinkError::PeerGone`] when it went without a goodbye: killed, crashed or failed); an
    /// aggregate message where an fbuf is expected is a protocol error (see
    /// [`ReceiverEnd::recv_any`]).
    pub fn recv(&mut self) -> Result<Option<FbufRef>, LinkError> {
        match self.recv_any()? {
            Received::Fbuf(r) => Ok(Some(r)),
            Received::Msg(m) => Err(LinkError::Protocol(format!(
                "an aggregate message ({} bytes at {:#x}) where an fbuf was expected",
                m.len, m.root
            ))),
            _ => Ok(None),
        }
    }

    /// Whether something from the sender waits to be taken (no system call).
    fn pending(&self) -> bool {
        !self.early.is_empty()
            || self.rings.pending(Dir::Sends, self.rx)
            || self.rings.mail(Dir::Sends) != self.mail_seen
    }

    /// The next fbuf or aggregate message sent to us ([`Received::Closed`] when the sender has
    /// closed the link in order, [`LinkError::PeerGone`] when it went without a goodbye). Sends
    /// come from the ring without a system call; before this end
    /// sleeps, the notices held back go out and it looks again for a while.
    pub fn recv_any(&mut self) -> Result<Received, LinkError> {
        let mut got = self.next_fbuf(false)?;
        if got == Received::NotYet {
            self.flush()?;
            let t = Instant::now();
            while !self.pending() && t.elapsed() < self.spin {
                std::thread::yield_now();
            }
            got = self.next_fbuf(true)?;
        }
        Ok(got)
    }

    /// Free a received aggregate message: every fbuf holding its nodes and data goes back to
    /// the originator with one notice.
    pub fn free_msg(&mut self, m: Msg) -> Result<(), LinkError> {
        match self.msgs_held.get_mut(&m.root) {
            Some(n) => {
                *n -= 1;
                if *n == 0 {
                    self.msgs_held.remove(&m.root);
                }
            }
            None => {
                return Err(LinkError::Fbuf(FbufError::BadRef {
                    what: "free a message",
                    addr: m.root,
                    len: m.len,
                    expected: "a message this receiver holds",
                }));
            }
        }
        self.notice(FbufRef {
            addr: m.root,
            len: m.len,
        })
    }

    /// Free a received fbuf: its notice goes on the frees ring at once (no system call unless
    /// the originator sleeps), or, when the ring is full, with the next socket message.
    pub fn free(&mut self, r: FbufRef) -> Result<(), LinkError> {
        self.receiver.free(r)?;
        self.notice(r)
    }

    fn notice(&mut self, r: FbufRef) -> Result<(), LinkError> {
        if self.notices.is_empty() && self.push_notice(r)? {
            return Ok(());
        }
        self.notices.push(r);
        // Saturating: an aggregate message's length is the originator's word, and may be
        // anything up to `u64::MAX` (its walk takes no more than the data it finds).
        self.notice_bytes = self.notice_bytes.saturating_add(r.len);
        // A quarter of the path held back is too much to keep from the originator, whatever
        // the count.
        if self.notices.len() >= self.batch || self.notice_bytes >= self.info.len() as u64 / 4 {
            self.flush()?;
        }
        Ok(())
    }

    /// One notice on the frees ring; `false` when it is full.
    fn push_notice(&mut self, r: FbufRef) -> Result<bool, LinkError> {
        let pushed = self
            .rings
            .push(Dir::Frees, &mut self.tx, [FREED, r.addr, r.len])
            .map_err(|e| LinkError::Protocol(e.to_string()))?;
        if pushed {
            self.notices_sent += 1;
            if self.rings.must_wake(Dir::Frees) {
                let _ = self.flush_out();
                wake(&self.sock, &mut self.out);
            }
        }
        Ok(pushed)
    }

    /// Send the notices held back now: on the ring as far as it has room, the rest in one
    /// socket message. Nothing here waits for the originator: what its socket does not take
    /// now goes out when this end is next used, or when it takes more while this end waits
    /// for the next fbuf.
    pub fn flush(&mut self) -> Result<(), LinkError> {
        let mut k = 0;
        while k < self.notices.len() && self.push_notice(self.notices[k])? {
            k += 1;
        }
        self.notices.drain(..k);
        if self.notices.is_empty() {
            self.notice_bytes = 0;
            return self.flush_out();
        }
        self.send_frames(&[])?;
        self.notice_messages += 1;
        Ok(())
    }

    /// Write the notices held back followed by `then`, in one socket message behind the
    /// backlog, never waiting: what the socket does not take joins the backlog. Past its limit,
    /// this end gives up on the originator (it stopped reading).
    fn send_frames(&mut self, then: &[u8]) -> Result<(), LinkError> {
        if self.given_up {
            return Err(LinkError::PeerGone {
                during: "writing to the originator",
            });
        }
        let mut bytes: Vec<u8> = self.notices.iter().flat_map(|r| frame(FREED, *r)).collect();
        bytes.extend_from_slice(then);
        match self.out.write(&self.sock, &bytes) {
            // The originator may sleep on the socket: the message itself wakes it.
            Ok(0) => {}
            Ok(_) => self.rings.post_mail(Dir::Frees),
            Err(_) => {
                self.out.clear();
                return Err(LinkError::PeerGone {
                    during: "writing to the originator",
                });
            }
        }
        self.notices_sent += self.notices.len();
        self.notices.clear();
        self.notice_bytes = 0;
        let frames = self.out.frames();
        if frames > self.backlog_frames {
            // As if the originator were gone: the link ends here, and the originator, seeing
            // it end, takes back what this end held.
            self.given_up = true;
            self.closed = true;
            self.out.clear();
            let _ = self.sock.shutdown(std::net::Shutdown::Both);
            return Err(LinkError::Stalled {
                peer: "the originator",
                frames,
                limit: self.backlog_frames,
            });
        }
        Ok(())
    }

    /// Tell the originator that this end forwards what it receives to process `pid` (see
    /// [`Forwarder::new`]).
    fn announce_downstream(&mut self, pid: u64) -> Result<(), LinkError> {
        self.send_frames(&frame(DOWNSTREAM, FbufRef { addr: pid, len: 0 }))
    }

    /// [`ReceiverEnd::secure`] for an aggregate message: every fbuf holding its nodes and data.
    pub fn secure_msg(&mut self, m: Msg) -> Result<(), LinkError> {
        self.secure(FbufRef {
            addr: m.root,
            len: m.len,
        })
    }

    /// Ask the originator to secure `r` (remove its write access until all have freed it), and
    /// wait until it has. Only meaningful on a volatile path. The notices held back ride along
    /// with the request; fbufs sent meanwhile wait for [`ReceiverEnd::recv`].
    pub fn secure(&mut self, r: FbufRef) -> Result<(), LinkError> {
        self.notices_piggybacked += self.notices.len();
        self.send_frames(&frame(SECURE, r))?;
        loop {
            // While the request is not all out, wait for the socket to take more as well.
            let wait = self.out.is_empty();
            if !wait {
                wait_in_or_out(&self.sock)?;
                self.flush_out()?;
            }
            match self.frames.next(&self.sock, wait)? {
                Next::Closed => {
                    self.closed = true;
                    return Err(LinkError::PeerGone {
                        during: "securing an fbuf",
                    });
                }
                Next::Frame(SECURED, s) if s == r => return Ok(()),
                Next::Frame(BYE, _) => {
                    self.bye = true;
                    self.closed = true;
                    return Err(LinkError::PeerGone {
                        during: "with a goodbye while securing an fbuf",
                    });
                }
                Next::Frame(k @ (SEND | MSG | WAKE), x) => {
                    if let Some(d) = self.take(k, x)? {
                        self.early.push_back(d);
                    }
                }
                Next::Empty => {}
                Next::Frame(k, _) => {
                    return Err(LinkError::Protocol(format!(
                        "originator answered a secure request with frame kind {k}"
                    )));
                }
            }
        }
    }
}

/// The link closes in order (a goodbye behind the notices still waiting, as far as the socket
/// takes them now), unless the sender closed it first, a forwarding run failed, or the end goes
/// in a panic.
impl Drop for ReceiverEnd {
    fn drop(&mut self) {
        if self.farewell && !self.closed && !self.given_up && !std::thread::panicking() {
            let bye = frame(BYE, FbufRef { addr: 0, len: 0 });
            if self.out.write(&self.sock, &bye).is_ok_and(|n| n > 0) {
                self.rings.post_mail(Dir::Frees);
            }
        }
    }
}

/// The server of a three-process path: receives fbufs from upstream and forwards the same
/// references downstream without touching their data; frees each upstream once the downstream
/// receiver has freed it.
pub struct Forwarder {
    /// The upstream end.
    pub up: ReceiverEnd,
    down: Peer,
    held_msgs: Held,
    /// Fbufs forwarded.
    pub forwarded: usize,
}

impl Forwarder {
    /// Offer upstream's path to the downstream receiver on `down`.
    ///
    /// The downstream process is announced upstream, so that if this forwarder dies, what it
    /// held (which downstream may still be reading) is not reused before downstream has ended.
    pub fn new(mut up: ReceiverEnd, down: UnixStream) -> Result<Forwarder, LinkError> {
        let down = Peer::offer(
            down,
            up.info(),
            up.path_fd(),
            crate::ring::DEFAULT_SLOTS,
            DEFAULT_BACKLOG_FRAMES,
        )?;
        if let Ok(c) = rustix::net::sockopt::socket_peercred(&down.sock) {
            up.announce_downstream(c.pid.as_raw_nonzero().get() as u64)?;
        }
        Ok(Forwarder {
            up,
            down,
            held_msgs: Held::default(),
            forwarded: 0,
        })
    }

    /// Give back upstream everything downstream held (it is done, dead, or broke the protocol).
    fn release_all(&mut self) -> Result<(), LinkError> {
        for r in self.down.held.drain() {
            self.up.free(r)?;
        }
        for r in self.held_msgs.drain() {
            self.up.free_msg(Msg {
                root: r.addr,
                len: r.len,
            })?;
        }
        Ok(())
    }

    /// Downstream failed a send or a flush (`unsent`, the reference it failed, never reached
    /// it): everything it held goes back upstream, it is cut off, and the error says why.
    fn down_failed(&mut self, unsent: Option<(u64, FbufRef)>) -> Result<usize, LinkError> {
        let e = match self.down.failed.take() {
            Some(Failure::Stalled { frames, limit }) => LinkError::Stalled {
                peer: "the downstream receiver",
                frames,
                limit,
            },
            Some(Failure::Spoiled(e)) => {
                LinkError::Protocol(format!("the downstream receiver spoiled its ring: {e}"))
            }
            None => LinkError::PeerGone {
                during: "forwarding downstream",
            },
        };
        self.down.cut();
        match unsent {
            Some((SEND, r)) => self.up.free(r)?,
            Some((_, r)) => self.up.free_msg(Msg {
                root: r.addr,
                len: r.len,
            })?,
            None => {}
        }
        self.release_all()?;
        self.up.flush()?;
        Err(e)
    }

    /// Forward until upstream closes and downstream has freed everything, or downstream closes
    /// its link; then say goodbye downstream. Neither side waits for the other to read: a
    /// downstream receiver that stops reading holds up nothing upstream until its backlog
    /// passes the limit, and then fails the run. An end that goes without a goodbye (its
    /// process killed or crashed) fails the run too, what downstream held given back upstream;
    /// the ends are then closed without a goodbye, so that the failure travels along the path.
    pub fn run(&mut self) -> Result<usize, LinkError> {
        let r = self.forward();
        match &r {
            Ok(_) => self.down.farewell(),
            Err(_) => self.up.farewell = false,
        }
        r
    }

    fn forward(&mut self) -> Result<usize, LinkError> {
        use rustix::event::{PollFd, PollFlags};
        let mut up_open = true;
        let mut socket = false;
        'run: loop {
            if !up_open && self.down.held.is_empty() && self.held_msgs.is_empty() {
                break;
            }
            if !self.down.flush() {
                return self.down_failed(None);
            }
            let mut progressed = false;
            let mut back = Vec::new();
            self.down.collect(socket, &mut back);
            socket = false;
            for next in back {
                match next {
                    Ok(Next::Frame(FREED, r)) if self.down.held.take(r) => self.up.free(r)?,
                    Ok(Next::Frame(FREED, r)) if self.held_msgs.take(r) => {
                        self.up.free_msg(Msg {
                            root: r.addr,
                            len: r.len,
                        })?
                    }
                    Ok(Next::Frame(WAKE, _)) => {}
                    // A forwarder further down: the originator watches its downstream too.
                    Ok(Next::Frame(DOWNSTREAM, r)) => self.up.announce_downstream(r.addr)?,
                    // Done: what downstream held is freed for it, and the path ends here;
                    // upstream learns it when this end closes.
                    Ok(Next::Frame(BYE, _)) => {
                        self.release_all()?;
                        break 'run;
                    }
                    // Died, or broke the protocol: the same, and the run fails.
                    other => {
                        self.release_all()?;
                        self.down.cut();
                        self.up.flush()?;
                        return Err(match other {
                            Err(e) => e,
                            Ok(Next::Frame(FREED, r)) => LinkError::Protocol(format!(
                                "the downstream receiver freed [{:#x}, +{}), which it does not hold",
                                r.addr, r.len
                            )),
                            Ok(Next::Frame(k, _)) => LinkError::Protocol(format!(
                                "the downstream receiver sent frame kind {k}"
                            )),
                            _ => LinkError::PeerGone {
                                during: "downstream without a goodbye (killed, crashed or failed) while forwarding",
                            },
                        });
                    }
                }
                progressed = true;
            }
            if up_open {
                let (kind, r) = match self.up.try_recv()? {
                    Received::Fbuf(r) => (SEND, r),
                    Received::Msg(m) => (
                        MSG,
                        FbufRef {
                            addr: m.root,
                            len: m.len,
                        },
                    ),
                    Received::Closed => {
                        up_open = false;
                        continue;
                    }
                    Received::NotYet => (0, FbufRef { addr: 0, len: 0 }),
                };
                if kind != 0 {
                    if !self.down.post(kind, r) {
                        return self.down_failed(Some((kind, r)));
                    }
                    if kind == SEND {
                        self.down.held.add(r);
                    } else {
                        self.held_msgs.add(r);
                    }
                    self.forwarded += 1;
                    progressed = true;
                }
            }
            if progressed {
                continue;
            }
            // Nothing to do: the notices held back go out (the originator may be waiting for
            // them), then look again for a while, then sleep on both sockets.
            self.up.flush()?;
            let t = Instant::now();
            while !(self.down.pending() || up_open && self.up.pending())
                && t.elapsed() < self.up.spin
            {
                std::thread::yield_now();
            }
            if self.down.pending() || up_open && self.up.pending() {
                continue;
            }
            self.down.rings.announce_sleep(Dir::Frees);
            if up_open {
                self.up.rings.announce_sleep(Dir::Sends);
            }
            if !(self.down.pending() || up_open && self.up.pending()) {
                // Sleep on both sockets, and, where frames wait for one, until it takes more.
                let with_out = |waiting: bool| {
                    if waiting {
                        PollFlags::IN | PollFlags::OUT
                    } else {
                        PollFlags::IN
                    }
                };
                let mut fds = vec![PollFd::new(
                    &self.down.sock,
                    with_out(!self.down.out.is_empty()),
                )];
                let up_out = !self.up.out.is_empty();
                if up_open || up_out {
                    let flags = if up_open {
                        with_out(up_out)
                    } else {
                        PollFlags::OUT
                    };
                    fds.push(PollFd::new(&self.up.sock, flags));
                }
                match rustix::event::poll(&mut fds, None) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => return Err(std::io::Error::from(e).into()),
                }
                let up_ready = fds.get(1).map(|f| f.revents());
                let down_ready = fds[0].revents();
                drop(fds);
                socket = readable(down_ready);
                if down_ready.contains(PollFlags::OUT) && !self.down.flush() {
                    return self.down_failed(None);
                }
                if let Some(r) = up_ready {
                    // Taking more, or closed (the flush then says so).
                    if !r.is_empty() && !self.up.out.is_empty() {
                        self.up.flush_out()?;
                    }
                    if up_open && readable(r) {
                        self.up.absorb(false)?;
                    }
                }
            }
            self.down.rings.awake(Dir::Frees);
            self.up.rings.awake(Dir::Sends);
        }
        self.up.flush()?;
        Ok(self.forwarded)
    }
}
