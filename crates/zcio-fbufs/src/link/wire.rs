//! The link's wire: frames, the path offer, the backlog a peer's socket has not taken yet,
//! and waiting on the ends' sockets and processes.

use super::*;

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
        info.variant.bits(),
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
        variant: Variant::from_bits(w(3)),
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
pub(super) fn wait_in_or_out(sock: &UnixStream) -> Result<(), LinkError> {
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
pub(super) struct Outbox {
    bytes: Vec<u8>,
    /// How much of `bytes` went out already.
    sent: usize,
}

impl Outbox {
    /// Bytes waiting.
    pub(super) fn len(&self) -> usize {
        self.bytes.len() - self.sent
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Frames waiting (one partly sent counts whole).
    pub(super) fn frames(&self) -> usize {
        self.len().div_ceil(FRAME)
    }

    /// Write `b` behind what waits, as far as the socket takes it now; the bytes that went out.
    pub(super) fn write(&mut self, sock: &UnixStream, b: &[u8]) -> std::io::Result<usize> {
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
    pub(super) fn flush(&mut self, sock: &UnixStream) -> std::io::Result<usize> {
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
    pub(super) fn clear(&mut self) {
        *self = Outbox::default();
    }
}

/// Wake the other end, asleep on the socket: a WAKE frame, unless frames already wait for its
/// socket (it is full: the other end has unread frames and is awake to them anyway) or the
/// socket is full now. A frame cut short waits in `out` for the rest to go out.
pub(super) fn wake(sock: &UnixStream, out: &mut Outbox) {
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
pub(super) fn readable(revents: rustix::event::PollFlags) -> bool {
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
