//! What both kinds of end hold of a link ([`Channel`]).

use super::*;
use crate::ring::RingError;

/// A link as each of its ends holds it: the socket and the rings shared with the other end,
/// this end's positions on the rings, and the frames the socket has not taken yet. An end posts
/// on one ring, `mine` (the sends ring on the sending side, the frees ring on the receiver's),
/// and takes from the other.
pub(super) struct Channel {
    pub(super) sock: UnixStream,
    pub(super) frames: Frames,
    pub(super) rings: Rings,
    /// The ring this end posts on.
    mine: Dir,
    /// Producer position on `mine`, consumer position on the other ring.
    pub(super) tx: u64,
    pub(super) rx: u64,
    /// Socket messages of the other end already read.
    pub(super) mail_seen: u64,
    /// Frames the socket has not taken yet (the backlog).
    pub(super) out: Outbox,
}

impl Channel {
    /// A fresh link on `sock` and `rings`, this end posting on `mine`.
    pub(super) fn new(sock: UnixStream, rings: Rings, mine: Dir) -> Channel {
        Channel {
            sock,
            frames: Frames::new(),
            rings,
            mine,
            tx: 0,
            rx: 0,
            mail_seen: 0,
            out: Outbox::default(),
        }
    }

    /// The ring the other end posts on.
    fn theirs(&self) -> Dir {
        match self.mine {
            Dir::Sends => Dir::Frees,
            Dir::Frees => Dir::Sends,
        }
    }

    /// One frame on this end's ring; `false` when the ring is full.
    pub(super) fn push(&mut self, frame: [u64; 3]) -> Result<bool, RingError> {
        self.rings.push(self.mine, &mut self.tx, frame)
    }

    /// `bytes` on the socket behind the backlog, never waiting: what the socket does not take
    /// joins the backlog. What went out is announced on this end's ring, for another end that
    /// looks there. The bytes the socket took.
    pub(super) fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let n = self.out.write(&self.sock, bytes)?;
        self.announce(n);
        Ok(n)
    }

    /// `bytes` with the descriptor `fd` riding with their first byte, on the socket behind
    /// the backlog, never waiting, announced as [`Channel::write`] does.
    pub(super) fn write_fd(&mut self, bytes: &[u8], fd: OwnedFd) -> std::io::Result<usize> {
        let n = self.out.write_fd(&self.sock, bytes, fd)?;
        self.announce(n);
        Ok(n)
    }

    /// The backlog on the socket as far as the socket takes it now, announced as
    /// [`Channel::write`] does. The bytes the socket took.
    pub(super) fn flush(&mut self) -> std::io::Result<usize> {
        let n = self.out.flush(&self.sock)?;
        self.announce(n);
        Ok(n)
    }

    fn announce(&self, sent: usize) {
        if sent > 0 {
            self.rings.post_mail(self.mine);
        }
    }

    /// Whether the other end posted something this end has not taken yet, on its ring or on
    /// the socket (no system call).
    pub(super) fn pending(&self) -> bool {
        self.rings.pending(self.theirs(), self.rx)
            || self.rings.mail(self.theirs()) != self.mail_seen
    }
}
