//! The server of a three-process path ([`Forwarder`]).

use super::*;

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
    /// Offer upstream's path to the downstream receiver on `down`, with the chunks upstream
    /// announced so far; the chunk frames that come later are passed on as they come.
    ///
    /// The downstream process is announced upstream, so that if this forwarder dies, what it
    /// held (which downstream may still be reading) is not reused before downstream has ended.
    pub fn new(mut up: ReceiverEnd, down: UnixStream) -> Result<Forwarder, LinkError> {
        up.relay = Some(VecDeque::new());
        let mut down = Peer::offer(
            down,
            up.info(),
            crate::ring::DEFAULT_SLOTS,
            DEFAULT_BACKLOG_FRAMES,
        )?;
        for (r, fd) in up.receiver.chunks() {
            if !down.post_chunk(CHUNK, r, Some(fd)) {
                return Err(LinkError::PeerGone {
                    during: "announcing the path's chunks downstream",
                });
            }
        }
        if let Ok(c) = rustix::net::sockopt::socket_peercred(&down.ch.sock) {
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
    fn down_failed<T>(&mut self, unsent: Option<(u64, FbufRef)>) -> Result<T, LinkError> {
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
        let mut up_open = true;
        let mut socket = false;
        loop {
            if !up_open && self.down.held.is_empty() && self.held_msgs.is_empty() {
                break;
            }
            if !self.down.flush() {
                return self.down_failed(None);
            }
            let mut back = Vec::new();
            self.down.collect(socket, &mut back);
            socket = false;
            let Some(mut progressed) = self.take_back(back)? else {
                break;
            };
            // Chunk frames upstream took while this end slept, or with its close.
            progressed |= self.relay_down()?;
            if up_open {
                match self.up.try_recv()? {
                    Received::Closed => {
                        up_open = false;
                        continue;
                    }
                    next => progressed |= self.pass_down(next)?,
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
            self.down.ch.rings.announce_sleep(Dir::Frees);
            if up_open {
                self.up.ch.rings.announce_sleep(Dir::Sends);
            }
            if !(self.down.pending() || up_open && self.up.pending()) {
                socket = self.sleep(up_open)?;
            }
            self.down.ch.rings.awake(Dir::Frees);
            self.up.ch.rings.awake(Dir::Sends);
        }
        self.up.flush()?;
        Ok(self.forwarded)
    }

    /// Take what came back from downstream: notices freed upstream, announcements passed on.
    /// Whether anything came, or `None` when downstream said goodbye (what it held is freed for
    /// it, and the path ends here); an error when it died or broke the protocol.
    fn take_back(&mut self, back: Vec<Result<Next, LinkError>>) -> Result<Option<bool>, LinkError> {
        let mut progressed = false;
        for next in back {
            match next {
                Ok(Next::Frame(FREED, r)) if self.down.held.take(r) => self.up.free(r)?,
                Ok(Next::Frame(FREED, r)) if self.held_msgs.take(r) => self.up.free_msg(Msg {
                    root: r.addr,
                    len: r.len,
                })?,
                Ok(Next::Frame(WAKE, _)) => {}
                // A forwarder further down: the originator watches its downstream too.
                Ok(Next::Frame(DOWNSTREAM, r)) => self.up.announce_downstream(r.addr)?,
                // Done: what downstream held is freed for it, and the path ends here;
                // upstream learns it when this end closes.
                Ok(Next::Frame(BYE, _)) => {
                    self.release_all()?;
                    return Ok(None);
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
        Ok(Some(progressed))
    }

    /// Pass the chunk frames upstream sent on downstream, in the order they came: before any
    /// reference upstream sent after them. Whether any went.
    fn relay_down(&mut self) -> Result<bool, LinkError> {
        let mut any = false;
        while let Some((kind, r, fd)) = self.up.relay.as_mut().and_then(VecDeque::pop_front) {
            if !self.down.post_chunk(kind, r, fd.as_ref().map(AsFd::as_fd)) {
                return self.down_failed(None);
            }
            any = true;
        }
        Ok(any)
    }

    /// Pass what upstream delivered (`next`, not its close) on downstream, after the chunk
    /// frames that came before it: whether anything went.
    fn pass_down(&mut self, next: Received) -> Result<bool, LinkError> {
        let relayed = self.relay_down()?;
        let (kind, r) = match next {
            Received::Fbuf(r) => (SEND, r),
            Received::Msg(m) => (
                MSG,
                FbufRef {
                    addr: m.root,
                    len: m.len,
                },
            ),
            Received::Closed | Received::NotYet => return Ok(relayed),
        };
        if !self.down.post(kind, r) {
            return self.down_failed(Some((kind, r)));
        }
        if kind == SEND {
            self.down.held.add(r);
        } else {
            self.held_msgs.add(r);
        }
        self.forwarded += 1;
        Ok(true)
    }

    /// Sleep on both sockets (upstream's only while it is open or frames wait for it), and,
    /// where frames wait for one, until it takes more; then send what waits and take what
    /// upstream sent. Whether downstream's socket has something to read.
    fn sleep(&mut self, up_open: bool) -> Result<bool, LinkError> {
        use rustix::event::{PollFd, PollFlags};
        let with_out = |waiting: bool| {
            if waiting {
                PollFlags::IN | PollFlags::OUT
            } else {
                PollFlags::IN
            }
        };
        let mut fds = vec![PollFd::new(
            &self.down.ch.sock,
            with_out(!self.down.ch.out.is_empty()),
        )];
        let up_out = !self.up.ch.out.is_empty();
        if up_open || up_out {
            let flags = if up_open {
                with_out(up_out)
            } else {
                PollFlags::OUT
            };
            fds.push(PollFd::new(&self.up.ch.sock, flags));
        }
        match rustix::event::poll(&mut fds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(std::io::Error::from(e).into()),
        }
        let up_ready = fds.get(1).map(|f| f.revents());
        let down_ready = fds[0].revents();
        drop(fds);
        if down_ready.contains(PollFlags::OUT) && !self.down.flush() {
            return self.down_failed(None);
        }
        if let Some(r) = up_ready {
            // Taking more, or closed (the flush then says so).
            if !r.is_empty() && !self.up.ch.out.is_empty() {
                self.up.flush_out()?;
            }
            if up_open && readable(r) {
                self.up.absorb(false)?;
            }
        }
        Ok(readable(down_ready))
    }
}
