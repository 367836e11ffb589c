//! A peer as an end sees it: its socket, its rings, the backlog waiting for it, and the
//! references it holds.

use super::*;

/// References a peer holds, with how many times each was sent to it.
#[derive(Default)]
pub(super) struct Held(HashMap<u64, (FbufRef, usize)>);

impl Held {
    pub(super) fn add(&mut self, r: FbufRef) {
        self.0.entry(r.addr).or_insert((r, 0)).1 += 1;
    }

    /// Take one reference back; `false` if the peer did not hold it (a protocol violation).
    pub(super) fn take(&mut self, r: FbufRef) -> bool {
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

    pub(super) fn holds(&self, r: FbufRef) -> bool {
        self.0.get(&r.addr).is_some_and(|e| e.0 == r)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every reference held, as often as it is held.
    pub(super) fn drain(&mut self) -> Vec<FbufRef> {
        self.0
            .drain()
            .flat_map(|(_, (r, n))| std::iter::repeat_n(r, n))
            .collect()
    }
}

/// Why a receiver was cut off, where it was for something it did (not for being gone).
pub(super) enum Failure {
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
pub(super) struct Peer {
    /// The link to the receiver; this end posts on the sends ring.
    pub(super) ch: Channel,
    /// The receiving process, watched so that its exit releases what it held even when its end
    /// of the socket lives on in another process (inherited by a child, passed on).
    pub(super) pidfd: Option<OwnedFd>,
    pub(super) held: Held,
    pub(super) alive: bool,
    /// References sent on the socket rather than the ring, in all: until the receiver has
    /// taken as many from its socket, the ring is not used.
    pub(super) mailed: u64,
    /// Most frames that may wait in `out`.
    pub(super) limit: usize,
    /// Why the receiver failed a send, when it was its doing.
    pub(super) failed: Option<Failure>,
    /// The receiver said goodbye: its end closed in order.
    pub(super) bye: bool,
    /// This end cut the receiver off for what it did (see [`OriginatorEnd::misbehaved`]).
    pub(super) cut_off: bool,
    /// The processes the receiver forwards to (it announced them: [`DOWNSTREAM`]), watched
    /// through pidfds: what it held when it died waits for their end.
    pub(super) downstream: Vec<OwnedFd>,
    /// The chunks announced to the receiver and not retired, by index, with the generation
    /// each was announced in.
    pub(super) chunks: HashMap<usize, u64>,
    /// The originator's chunk epoch the receiver has been told of (see
    /// [`OriginatorEnd`]'s chunk announcements).
    pub(super) chunk_epoch: u64,
}

impl Peer {
    /// Offer the path on `sock` with fresh rings of `slots` slots; at most `limit` frames may
    /// wait for the receiver's socket.
    pub(super) fn offer(
        sock: UnixStream,
        info: PathInfo,
        slots: usize,
        limit: usize,
    ) -> Result<Peer, LinkError> {
        let rings = Rings::create(slots)?;
        offer_path(&sock, info, Some(rings.fd()))?;
        let pidfd = peer_pidfd(&sock);
        Ok(Peer {
            ch: Channel::new(sock, rings, Dir::Sends),
            pidfd,
            held: Held::default(),
            alive: true,
            mailed: 0,
            limit,
            failed: None,
            bye: false,
            cut_off: false,
            downstream: Vec::new(),
            chunks: HashMap::new(),
            chunk_epoch: 0,
        })
    }

    /// Announce chunk `r` to the receiver with `fd`, a read-only descriptor of its memory
    /// ([`CHUNK`]), or retire it (`RETIRE`, no descriptor): on the socket, in order with the
    /// references (counted as they are, so that none after it overtakes it on the ring).
    /// `false` as for [`Peer::post`].
    pub(super) fn post_chunk(&mut self, kind: u64, r: FbufRef, fd: Option<BorrowedFd<'_>>) -> bool {
        if !self.flush() {
            return false;
        }
        self.mailed += 1;
        let f = frame(kind, r);
        let Some(fd) = fd else {
            return self.mail(&f);
        };
        let fd = match fd.try_clone_to_owned() {
            Ok(fd) => fd,
            Err(_) => return false,
        };
        if self.ch.write_fd(&f, fd).is_err() {
            return false;
        }
        self.within_limit()
    }

    /// Say goodbye to the receiver (behind the backlog, as far as the socket takes it now):
    /// this end closes in order and sends nothing more.
    pub(super) fn farewell(&mut self) {
        if self.alive {
            let _ = self.mail(&frame(BYE, FbufRef { addr: 0, len: 0 }));
        }
    }

    /// Hand `r` to the receiver, never waiting for it: on the sends ring (waking it if it
    /// sleeps), or on the socket when the ring is full or references sent there before are not
    /// all taken yet (on the ring, this one would overtake them). `false` when the receiver is
    /// gone, spoiled the ring, or stopped reading (see [`Peer::failed`]).
    pub(super) fn post(&mut self, kind: u64, r: FbufRef) -> bool {
        if !self.flush() {
            return false;
        }
        if self.ch.out.is_empty() && self.ch.rings.mail_taken(Dir::Sends) == self.mailed {
            match self.ch.push([kind, r.addr, r.len]) {
                Ok(true) => {
                    if self.ch.rings.must_wake(Dir::Sends) {
                        wake(&self.ch.sock, &mut self.ch.out);
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
    pub(super) fn mail(&mut self, bytes: &[u8]) -> bool {
        if self.ch.write(bytes).is_err() {
            return false;
        }
        self.within_limit()
    }

    /// Whether the backlog is within the limit; past it, the receiver has failed.
    fn within_limit(&mut self) -> bool {
        let frames = self.ch.out.frames();
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
    pub(super) fn flush(&mut self) -> bool {
        self.ch.flush().is_ok()
    }

    /// Cut the receiver off: no more sends, the backlog forgotten. What it held is the
    /// caller's to release.
    pub(super) fn cut(&mut self) {
        self.alive = false;
        let _ = self.ch.sock.shutdown(std::net::Shutdown::Both);
        self.pidfd = None;
        self.ch.out.clear();
    }

    /// Whether something came back that [`Peer::collect`] would take.
    pub(super) fn pending(&self) -> bool {
        self.ch.pending()
    }

    /// What came back: the frees ring, then the socket when the receiver posted there (or
    /// always, with `socket`). A spoiled ring or a closed socket ends the list.
    pub(super) fn collect(&mut self, socket: bool, out: &mut Vec<Result<Next, LinkError>>) {
        loop {
            match self.ch.rings.pop(Dir::Frees, &mut self.ch.rx) {
                Ok(Some([k, addr, len])) => out.push(Ok(Next::Frame(k, FbufRef { addr, len }))),
                Ok(None) => break,
                Err(e) => {
                    out.push(Err(LinkError::Protocol(e.to_string())));
                    return;
                }
            }
        }
        let mail = self.ch.rings.mail(Dir::Frees);
        if !socket && mail == self.ch.mail_seen {
            return;
        }
        self.ch.mail_seen = mail;
        loop {
            match self.ch.frames.next(&self.ch.sock, false) {
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
