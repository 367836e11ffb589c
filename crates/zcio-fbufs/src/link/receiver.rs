//! The receiver's end of a link ([`ReceiverEnd`]).

use super::*;

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
    /// The link to the sender; this end posts on the frees ring.
    pub(super) ch: Channel,
    /// Deliveries read from the socket and not yet taken.
    pub(super) early: VecDeque<Received>,
    /// Deliveries taken from the socket, in all (published on the sends ring).
    pub(super) taken: u64,
    pub(super) closed: bool,
    /// The sender said goodbye: its end closed in order, and the socket's close that follows
    /// is the end of the stream, not its death.
    pub(super) bye: bool,
    /// Whether dropping this end says goodbye to the sender (not after a forwarding run
    /// failed: the path broke, and upstream learns it so).
    pub(super) farewell: bool,
    /// This end gave up on the originator (it stopped reading): nothing more is delivered.
    pub(super) given_up: bool,
    pub(super) info: PathInfo,
    /// Notices the frees ring had no room for, waiting for a socket message.
    pub(super) notices: Vec<FbufRef>,
    pub(super) notice_bytes: u64,
    /// Aggregate messages held, by root (a root may be sent more than once).
    pub(super) msgs_held: HashMap<u64, usize>,
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
    /// Chunk frames taken, with their descriptors, for a forwarder to pass on downstream in
    /// the order they came (`None`: this end does not forward).
    pub(super) relay: Option<VecDeque<(u64, FbufRef, Option<OwnedFd>)>>,
    /// The feeds of the mirrors this end's path was offered onward to
    /// ([`ReceiverEnd::mirror`]): every chunk frame taken is written to them at once.
    pub(super) mirrors: Vec<UnixStream>,
    /// Most frames that may wait for the originator's socket before this end gives up on it
    /// ([`DEFAULT_BACKLOG_FRAMES`]).
    pub backlog_frames: usize,
}

impl ReceiverEnd {
    /// Join the path offered on `sock`.
    pub fn connect(sock: UnixStream) -> Result<ReceiverEnd, LinkError> {
        let (info, rings) = accept_path(&sock)?;
        let rings = rings
            .ok_or_else(|| LinkError::Protocol("the path was offered without its rings".into()))?;
        let rings = Rings::open(rings).map_err(LinkError::Protocol)?;
        let mut ch = Channel::new(sock, rings, Dir::Frees);
        // Chunk frames carry descriptors.
        ch.frames = Frames::with_fds();
        Ok(ReceiverEnd {
            receiver: Receiver::new(info)?,
            ch,
            early: VecDeque::new(),
            taken: 0,
            closed: false,
            bye: false,
            farewell: true,
            given_up: false,
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
            relay: None,
            mirrors: Vec::new(),
        })
    }

    /// The path's geometry.
    pub fn info(&self) -> PathInfo {
        self.info
    }

    /// What a frame from the sender delivers (`None`: nothing for the application); `socket`:
    /// it came on the socket, not the ring.
    fn take(&mut self, kind: u64, r: FbufRef, socket: bool) -> Result<Option<Received>, LinkError> {
        match kind {
            CHUNK | RETIRE if socket => {
                // Taken as it comes (it is counted as a delivery taken from the socket), so that
                // the references sent after it may use the ring again.
                self.taken += 1;
                self.ch.rings.set_mail_taken(Dir::Sends, self.taken);
                self.chunk_frame(kind, r)?;
                Ok(None)
            }
            CHUNK | RETIRE => Err(LinkError::Protocol(format!(
                "chunk frame (kind {kind}) on the ring: chunks are announced on the socket, with their descriptors"
            ))),
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

    /// A chunk frame from the sender, on the socket: the chunk announced (mapped with the
    /// descriptor that came with the frame) or retired (refused while this end holds a
    /// message whose root lies in it); then written to the mirrors and kept for a forwarder
    /// to pass on.
    fn chunk_frame(&mut self, kind: u64, r: FbufRef) -> Result<(), LinkError> {
        let passing = self.relay.is_some() || !self.mirrors.is_empty();
        let mut kept = None;
        if kind == CHUNK {
            let fd = self.ch.frames.take_fd().ok_or_else(|| {
                LinkError::Protocol(format!(
                    "chunk [{:#x}, +{}) announced without its descriptor",
                    r.addr, r.len
                ))
            })?;
            if passing {
                kept = Some(fd.try_clone()?);
            }
            self.receiver.add_chunk(r, fd)?;
        } else {
            let end = r.addr.saturating_add(r.len);
            if self.msgs_held.keys().any(|m| (r.addr..end).contains(m)) {
                return Err(LinkError::Fbuf(FbufError::BadRef {
                    what: "retire a chunk",
                    addr: r.addr,
                    len: r.len,
                    expected: "a chunk holding no message this receiver holds",
                }));
            }
            self.receiver.retire_chunk(r)?;
        }
        if !self.mirrors.is_empty() {
            self.write_mirrors(kind, r, kept.as_ref().map(AsFd::as_fd));
        }
        if let Some(q) = &mut self.relay {
            q.push_back((kind, r, kept));
        }
        Ok(())
    }

    /// Read every frame the socket holds now (or wait for one, with `wait`), keeping the
    /// deliveries for later.
    pub(super) fn absorb(&mut self, wait: bool) -> Result<(), LinkError> {
        let mut wait = wait;
        loop {
            match self.ch.frames.next(&self.ch.sock, wait)? {
                Next::Empty => return Ok(()),
                Next::Closed => {
                    self.closed = true;
                    return Ok(());
                }
                Next::Frame(k, r) => {
                    if let Some(d) = self.take(k, r, true)? {
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
            match self.ch.rings.pop(Dir::Sends, &mut self.ch.rx) {
                Ok(Some([k, addr, len])) => match self.take(k, FbufRef { addr, len }, false)? {
                    Some(d) => return Ok(d),
                    None => continue,
                },
                Ok(None) => {}
                Err(e) => return Err(LinkError::Protocol(e.to_string())),
            }
            if let Some(d) = self.early.pop_front() {
                self.taken += 1;
                self.ch.rings.set_mail_taken(Dir::Sends, self.taken);
                return Ok(d);
            }
            let mail = self.ch.rings.mail(Dir::Sends);
            if mail != self.ch.mail_seen {
                self.ch.mail_seen = mail;
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
            self.ch.rings.announce_sleep(Dir::Sends);
            if self.ch.rings.pending(Dir::Sends, self.ch.rx)
                || self.ch.rings.mail(Dir::Sends) != mail
            {
                self.ch.rings.awake(Dir::Sends);
                continue;
            }
            let r = self.sleep();
            self.ch.rings.awake(Dir::Sends);
            r?;
        }
    }

    /// Sleep on the socket until the originator sends something or closes the link, or, while
    /// frames wait for its socket, until it takes more (they go out then).
    fn sleep(&mut self) -> Result<(), LinkError> {
        if self.ch.out.is_empty() {
            return self.absorb(true);
        }
        wait_in_or_out(&self.ch.sock)?;
        let _ = self.flush_out();
        self.absorb(false)
    }

    /// Send what waits for the originator as far as its socket takes it now. A socket that
    /// failed is an originator gone: what waited is dropped.
    pub(super) fn flush_out(&mut self) -> Result<(), LinkError> {
        if self.ch.flush().is_err() {
            self.ch.out.clear();
            return Err(LinkError::PeerGone {
                during: "writing to the originator",
            });
        }
        Ok(())
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
    pub(super) fn pending(&self) -> bool {
        !self.early.is_empty() || self.ch.pending()
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
            .ch
            .push([FREED, r.addr, r.len])
            .map_err(|e| LinkError::Protocol(e.to_string()))?;
        if pushed {
            self.notices_sent += 1;
            if self.ch.rings.must_wake(Dir::Frees) {
                let _ = self.flush_out();
                wake(&self.ch.sock, &mut self.ch.out);
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
        // The originator may sleep on the socket: the message itself wakes it.
        if self.ch.write(&bytes).is_err() {
            self.ch.out.clear();
            return Err(LinkError::PeerGone {
                during: "writing to the originator",
            });
        }
        self.notices_sent += self.notices.len();
        self.notices.clear();
        self.notice_bytes = 0;
        let frames = self.ch.out.frames();
        if frames > self.backlog_frames {
            // As if the originator were gone: the link ends here, and the originator, seeing
            // it end, takes back what this end held.
            self.given_up = true;
            self.closed = true;
            self.ch.out.clear();
            let _ = self.ch.sock.shutdown(std::net::Shutdown::Both);
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
    pub(super) fn announce_downstream(&mut self, pid: u64) -> Result<(), LinkError> {
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
            let wait = self.ch.out.is_empty();
            if !wait {
                wait_in_or_out(&self.ch.sock)?;
                self.flush_out()?;
            }
            match self.ch.frames.next(&self.ch.sock, wait)? {
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
                Next::Frame(k @ (SEND | MSG | WAKE | CHUNK | RETIRE), x) => {
                    if let Some(d) = self.take(k, x, true)? {
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
            let _ = self.ch.write(&bye);
        }
    }
}
