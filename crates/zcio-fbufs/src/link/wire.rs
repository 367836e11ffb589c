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
/// deallocation notices, a run of sends), which the caller then takes one by one. The
/// descriptors that came with them (a chunk frame carries one, `SCM_RIGHTS`) wait in order
/// for the frames that name them, where the reader takes descriptors at all; elsewhere they
/// are closed as they come.
pub(crate) struct Frames {
    buf: Box<[u8; FRAME * 256]>,
    lo: usize,
    hi: usize,
    /// Descriptors received and not yet taken, in the order sent; `None`: not taken at all.
    fds: Option<VecDeque<OwnedFd>>,
}

/// Most descriptors that may wait for their frames (a peer sending more is breaking the
/// protocol).
const MAX_WAITING_FDS: usize = 64;

impl Frames {
    /// A reader that closes every descriptor that comes.
    pub(crate) fn new() -> Frames {
        Frames {
            buf: Box::new([0; FRAME * 256]),
            lo: 0,
            hi: 0,
            fds: None,
        }
    }

    /// A reader that keeps the descriptors that come for the frames that name them
    /// ([`Frames::take_fd`]).
    pub(crate) fn with_fds() -> Frames {
        Frames {
            fds: Some(VecDeque::new()),
            ..Frames::new()
        }
    }

    /// Whether a whole frame is buffered.
    fn ready(&self) -> bool {
        self.hi - self.lo >= FRAME
    }

    /// The next descriptor that came, in the order sent.
    pub(crate) fn take_fd(&mut self) -> Option<OwnedFd> {
        self.fds.as_mut()?.pop_front()
    }

    /// The next frame: from the buffer, else from one read of `sock`, waiting for one if `wait`.
    pub(crate) fn next(&mut self, sock: &UnixStream, wait: bool) -> Result<Next, LinkError> {
        while !self.ready() {
            if self.lo > 0 {
                self.buf.copy_within(self.lo..self.hi, 0);
                self.hi -= self.lo;
                self.lo = 0;
            }
            // A frame cut short stays buffered until its rest comes, and is not waited for: the
            // rest may wait in the writer's backlog, or never come from a hostile peer.
            match self.read(sock, wait) {
                Ok(0) if self.hi == 0 => return Ok(Next::Closed),
                Ok(0) => return Err(LinkError::Protocol("frame cut short".into())),
                Ok(n) => self.hi += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::AGAIN) => return Ok(Next::Empty),
                Err(rustix::io::Errno::CONNRESET) => return Ok(Next::Closed),
                Err(rustix::io::Errno::PROTO) => {
                    return Err(LinkError::Protocol(format!(
                        "descriptors beyond what the frames name (more than {MAX_WAITING_FDS} waiting, or more at once than a frame carries)"
                    )));
                }
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

    /// One read of `sock` into the buffer, the descriptors that came with it kept (or closed).
    fn read(&mut self, sock: &UnixStream, wait: bool) -> Result<usize, rustix::io::Errno> {
        use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
        use std::mem::MaybeUninit;
        let mut flags = RecvFlags::CMSG_CLOEXEC;
        if !wait {
            flags |= RecvFlags::DONTWAIT;
        }
        if self.fds.is_none() {
            // No room for descriptors: the kernel closes any that came.
            return rustix::net::recv(sock, &mut self.buf[self.hi..], flags).map(|(_, n)| n);
        }
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(8))];
        let mut anc = RecvAncillaryBuffer::new(&mut space);
        let got = rustix::net::recvmsg(
            sock,
            &mut [std::io::IoSliceMut::new(&mut self.buf[self.hi..])],
            &mut anc,
            flags,
        )?;
        for m in anc.drain() {
            if let (RecvAncillaryMessage::ScmRights(fds), Some(q)) = (m, self.fds.as_mut()) {
                q.extend(fds);
            }
        }
        let truncated = got.flags.contains(rustix::net::ReturnFlags::CTRUNC);
        if self
            .fds
            .as_ref()
            .is_some_and(|q| q.len() > MAX_WAITING_FDS || truncated)
        {
            // More descriptors than any frame names (or more at once than a frame carries):
            // the pairing of frames and descriptors is lost. Taken as the peer's end.
            self.fds = Some(VecDeque::new());
            return Err(rustix::io::Errno::PROTO);
        }
        Ok(got.bytes)
    }
}

/// Offer a path to a receiver: its geometry, and the descriptor of the link's rings (none
/// when the path is offered outside a link; a mirror's feed, [`super::PathMirror`]). Its
/// chunks are announced after it, each with its descriptor.
pub fn offer_path(
    sock: &UnixStream,
    info: PathInfo,
    rings: Option<BorrowedFd<'_>>,
) -> Result<(), LinkError> {
    let (bytes, fds) = path_offer(info, rings);
    zcio_vm::wire::send_with_fds(sock.as_fd(), &bytes, &fds)
        .map_err(|e| gone_if_closed(e, "offering the path"))?;
    Ok(())
}

/// [`offer_path`] without waiting for the peer to read: an error where its socket cannot take
/// the offer now (the owner's answer to a client that does not read its answers).
pub(crate) fn offer_path_now(sock: &UnixStream, info: PathInfo) -> Result<(), LinkError> {
    let (bytes, fds) = path_offer(info, None);
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

/// The message offering a path: its geometry in four words, and its descriptor.
fn path_offer(info: PathInfo, rings: Option<BorrowedFd<'_>>) -> (Vec<u8>, Vec<BorrowedFd<'_>>) {
    let words = [
        info.addr as u64,
        info.chunk_bytes as u64,
        info.quota_chunks as u64,
        info.variant.bits(),
    ];
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    (bytes, rings.into_iter().collect())
}

/// Accept a path offered with [`offer_path`]: its geometry, and the descriptor that came
/// with it (the link's rings, or a mirror's feed), if one did.
pub fn accept_path(sock: &UnixStream) -> Result<(PathInfo, Option<OwnedFd>), LinkError> {
    let mut b = [0u8; 32];
    let (n, mut fds) = zcio_vm::wire::recv_with_fds(sock.as_fd(), &mut b)
        .map_err(|e| gone_if_closed(e, "waiting for the path"))?;
    if n == 0 {
        return Err(LinkError::PeerGone {
            during: "waiting for the path",
        });
    }
    if n != 32 || fds.len() > 1 {
        return Err(LinkError::Protocol(format!(
            "path offer of {n} bytes and {} descriptors (want 32 and at most 1)",
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
    Ok((info, fds.pop()))
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

/// Write `b` to `sock` with the descriptor `fd` (`SCM_RIGHTS`, riding with the first byte),
/// as far as the socket takes it now, without waiting and without `SIGPIPE`; how much (none:
/// the descriptor did not go either).
fn send_fd_now(sock: &UnixStream, b: &[u8], fd: BorrowedFd<'_>) -> std::io::Result<usize> {
    use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    use std::mem::MaybeUninit;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut anc = SendAncillaryBuffer::new(&mut space);
    let fds = [fd];
    anc.push(SendAncillaryMessage::ScmRights(&fds));
    loop {
        match rustix::net::sendmsg(
            sock,
            &[std::io::IoSlice::new(b)],
            &mut anc,
            SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
        ) {
            Ok(n) => return Ok(n),
            Err(rustix::io::Errno::AGAIN) => return Ok(0),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// The frames for one peer that its socket has not taken yet (the backlog), in the order they
/// were written, with the descriptors that ride with some of them: whatever is written later
/// goes out behind them. Writing never waits.
#[derive(Default)]
pub(super) struct Outbox {
    bytes: Vec<u8>,
    /// How much of `bytes` went out already.
    sent: usize,
    /// Descriptors to send with the byte at their position in `bytes`, in order.
    fds: VecDeque<(usize, OwnedFd)>,
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

    /// Write `b` with the descriptor `fd` riding with its first byte, behind what waits, as far
    /// as the socket takes it now; the bytes that went out.
    pub(super) fn write_fd(
        &mut self,
        sock: &UnixStream,
        b: &[u8],
        fd: OwnedFd,
    ) -> std::io::Result<usize> {
        self.fds.push_back((self.bytes.len(), fd));
        self.bytes.extend_from_slice(b);
        self.flush(sock)
    }

    /// Write what waits, as far as the socket takes it now; the bytes that went out.
    pub(super) fn flush(&mut self, sock: &UnixStream) -> std::io::Result<usize> {
        let mut total = 0;
        while !self.is_empty() {
            // Up to the next descriptor's byte (or the end); from a descriptor's byte, with it.
            let next_fd = self.fds.front().map(|(at, _)| *at);
            let (n, upto) = match next_fd {
                Some(at) if at == self.sent => {
                    let upto = self.fds.get(1).map_or(self.bytes.len(), |(a, _)| *a);
                    let (_, fd) = self.fds.front().expect("a descriptor");
                    let n = send_fd_now(sock, &self.bytes[self.sent..upto], fd.as_fd())?;
                    if n > 0 {
                        self.fds.pop_front();
                    }
                    (n, upto)
                }
                at => {
                    let upto = at.unwrap_or(self.bytes.len());
                    (send_now(sock, &self.bytes[self.sent..upto])?, upto)
                }
            };
            self.sent += n;
            total += n;
            if self.sent < upto {
                break;
            }
        }
        if self.is_empty() {
            self.bytes.clear();
            self.sent = 0;
        } else if self.sent >= self.bytes.len() / 2 {
            self.bytes.drain(..self.sent);
            for (at, _) in &mut self.fds {
                *at -= self.sent;
            }
            self.sent = 0;
        }
        Ok(total)
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
