//! A path offered onward outside a link ([`ReceiverEnd::mirror`], [`PathMirror`]): the
//! process there reads the path's fbufs by references it learns elsewhere (a message of
//! another path names them, as the protocol domain of a stack names the application's fbuf in
//! its own headers), so the path's chunks follow on a socket of their own.

use super::*;

impl ReceiverEnd {
    /// Offer this end's path onward outside a link, on `sock`: its geometry, with the read end
    /// of a feed (a socket pair made here) on which the chunks this end knows are announced at
    /// once, and every chunk frame it takes from now on is written before it goes on. A
    /// reference this end passes on after taking a chunk frame thus reaches the other process
    /// after the frame is on its feed. A feed that cannot take a frame at once (its reader does
    /// not read it) is dropped: the other process then refuses references into chunks it was
    /// not told of.
    pub fn mirror(&mut self, sock: &UnixStream) -> Result<(), LinkError> {
        let (feed, theirs) = UnixStream::pair()?;
        offer_path(sock, self.info, Some(theirs.as_fd()))?;
        drop(theirs);
        for (r, fd) in self.receiver.chunks() {
            zcio_vm::wire::send_with_fds(feed.as_fd(), &frame(CHUNK, r), &[fd])?;
        }
        self.mirrors.push(feed);
        Ok(())
    }

    /// Write chunk frame `kind` of `r` (with `fd` for an announcement) to every mirror's feed
    /// now; a feed that does not take it whole is dropped.
    pub(super) fn write_mirrors(&mut self, kind: u64, r: FbufRef, fd: Option<BorrowedFd<'_>>) {
        let f = frame(kind, r);
        let fds: Vec<BorrowedFd<'_>> = fd.into_iter().collect();
        self.mirrors.retain(|m| {
            let ok = zcio_vm::wire::send_with_fds_now(m.as_fd(), &f, &fds).is_ok();
            if !ok {
                let _ = m.shutdown(std::net::Shutdown::Both);
            }
            ok
        });
    }
}

/// A path offered outside a link ([`ReceiverEnd::mirror`]): a [`Receiver`] of it, kept up to
/// date with the chunk frames on its feed. Those are read when a reference names a chunk not
/// known here ([`PathMirror::receive`]), or at [`PathMirror::update`]: a process that frees
/// what it receives and never meets an unknown chunk should update now and then, so that
/// chunks retired upstream are unmapped here too, and the feed does not fill.
pub struct PathMirror {
    receiver: Receiver,
    feed: UnixStream,
    frames: Frames,
}

impl PathMirror {
    /// Accept a path mirrored on `sock`: its geometry and feed, and the chunks announced
    /// there so far.
    pub fn accept(sock: &UnixStream) -> Result<PathMirror, LinkError> {
        let (info, feed) = accept_path(sock)?;
        let feed = feed.ok_or_else(|| {
            LinkError::Protocol("a mirrored path offered without its feed".into())
        })?;
        let mut m = PathMirror {
            receiver: Receiver::new(info)?,
            feed: UnixStream::from(feed),
            frames: Frames::with_fds(),
        };
        m.update()?;
        Ok(m)
    }

    /// The path as mapped here.
    pub fn receiver(&self) -> &Receiver {
        &self.receiver
    }

    /// The path's geometry.
    pub fn info(&self) -> PathInfo {
        self.receiver.info()
    }

    /// Take every chunk frame queued on the feed now: chunks announced are mapped, chunks
    /// retired unmapped (refused while an fbuf held here lies in one). How many came. A feed
    /// closed (the other end dropped it) brings nothing more.
    pub fn update(&mut self) -> Result<usize, LinkError> {
        let mut n = 0;
        loop {
            match self.frames.next(&self.feed, false)? {
                Next::Empty | Next::Closed => return Ok(n),
                Next::Frame(CHUNK, r) => {
                    let fd = self.frames.take_fd().ok_or_else(|| {
                        LinkError::Protocol(format!(
                            "chunk [{:#x}, +{}) mirrored without its descriptor",
                            r.addr, r.len
                        ))
                    })?;
                    self.receiver.add_chunk(r, fd)?;
                }
                Next::Frame(RETIRE, r) => self.receiver.retire_chunk(r)?,
                Next::Frame(k, _) => {
                    return Err(LinkError::Protocol(format!(
                        "a mirror's feed sent frame kind {k}"
                    )));
                }
            }
            n += 1;
        }
    }

    /// Take a reference to the path learnt elsewhere ([`Receiver::receive`]); one into a chunk
    /// not known here is retried once the feed's frames are taken (its announcement is on the
    /// feed already, if it was ever made), and refused by name if it still is.
    pub fn receive(&mut self, r: FbufRef) -> Result<(), LinkError> {
        match self.receiver.receive(r) {
            Err(FbufError::NoChunk { .. }) => {
                self.update()?;
                Ok(self.receiver.receive(r)?)
            }
            other => Ok(other?),
        }
    }

    /// Free a reference taken with [`PathMirror::receive`].
    pub fn free(&mut self, r: FbufRef) -> Result<(), LinkError> {
        self.receiver.free(r)?;
        Ok(())
    }
}

impl RegionRead for PathMirror {
    #[inline]
    fn words(&self, addr: u64, len: u64) -> Option<&[std::sync::atomic::AtomicU64]> {
        self.receiver.words(addr, len)
    }
    fn readable(&self, addr: u64, len: u64) -> bool {
        self.receiver.readable(addr, len)
    }
    fn span(&self, addr: u64) -> Option<crate::region::Span<'_>> {
        self.receiver.span(addr)
    }
}
