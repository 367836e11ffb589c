//! Fbufs originated by a device (paper 001, §2-3: the originator of a data path is often a
//! device driver, whose input lands in fbufs and travels up the path without a copy): a socket
//! received straight into fbufs of a path.
//!
//! The originator allocates fbufs and hands them to an io_uring *provided-buffer ring*
//! ([`zcio_vm::bufring`]); each receive takes whichever fbuf the kernel picks next and fills
//! it. When [`SocketSource::recv`] returns, the data is already in the fbuf, at its address in
//! every process of the path: the originator sends it on without touching it, and no byte is
//! copied in user space. [`SocketSource::refill`] hands the ring a fresh fbuf for each one
//! sent, so that the kernel never runs out.
//!
//! What differs from the paper: the kernel's socket layer still copies from its own buffers
//! into the fbuf (Linux has no DMA into a user-chosen buffer for a socket receive); the paper's
//! driver placed the data into fbufs from the adapter. What is saved is the user-level copy
//! from a receive buffer into an fbuf.

use crate::path::{Fbuf, FbufError, Originator};
use std::collections::HashMap;
use std::os::fd::BorrowedFd;
use zcio_vm::bufring::{ProvidedRing, Received};
use zcio_vm::stitched::Stitched;

/// A socket received into fbufs of one originator's path. The fbufs its ring holds are live:
/// their chunks are never retired while the ring holds them. They go back with
/// [`SocketSource::close`]; dropped without it, they stay out of the free lists, and their
/// chunks mapped (their memory goes with the path).
#[derive(Debug)]
pub struct SocketSource {
    ring: ProvidedRing<Stitched>,
    /// The fbufs the ring holds, by address.
    held: HashMap<u64, Fbuf>,
    size: usize,
}

impl SocketSource {
    /// A ring holding `buffers` fbufs of `size` bytes each, allocated from `o`. Where the
    /// kernel has no provided-buffer rings, the error says so; nothing stays allocated.
    pub fn new(o: &mut Originator, buffers: usize, size: usize) -> Result<SocketSource, FbufError> {
        if size == 0 {
            return Err(FbufError::Empty);
        }
        let ring = ProvidedRing::new(o.map_mut(), buffers)?;
        let mut s = SocketSource {
            ring,
            held: HashMap::new(),
            size,
        };
        for _ in 0..buffers.min(s.ring.capacity()) {
            if let Err(e) = s.refill(o) {
                s.close(o)?;
                return Err(e);
            }
        }
        Ok(s)
    }

    /// Fbufs the ring holds, ready for the kernel.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Bytes of each fbuf.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Hand the ring a fresh fbuf of its size from `o` (one for each fbuf received and sent
    /// on keeps the ring full).
    pub fn refill(&mut self, o: &mut Originator) -> Result<(), FbufError> {
        let fbuf = o.alloc(self.size)?;
        self.provide(o, fbuf)
    }

    /// Hand the ring `fbuf`, allocated from `o` and not sent (where the caller allocates, to
    /// wait for a free one: [`crate::link::OriginatorEnd::alloc_waiting`]). An fbuf smaller
    /// than [`SocketSource::size`] is refused; on any refusal it goes back to `o`.
    pub fn provide(&mut self, o: &mut Originator, fbuf: Fbuf) -> Result<(), FbufError> {
        if (fbuf.len() as usize) < self.size {
            let (addr, len) = (fbuf.addr(), fbuf.len());
            o.free(fbuf)?;
            return Err(FbufError::BadRef {
                what: "provide to a socket source",
                addr,
                len,
                expected: "an fbuf of at least the source's size",
            });
        }
        let buf = match o.ring_buf(&fbuf) {
            Ok(b) => b,
            Err(e) => {
                o.free(fbuf)?;
                return Err(e);
            }
        };
        if let Err((e, buf)) = self.ring.provide(o.map_mut(), buf) {
            o.ring_buf_back(buf)?;
            o.free(fbuf)?;
            return Err(e.into());
        }
        self.held.insert(fbuf.addr(), fbuf);
        Ok(())
    }

    /// Receive up to `len` bytes (at most [`SocketSource::size`]) from the socket `fd` into
    /// the next fbuf, waiting for all of them unless the peer closes first: the fbuf, holding
    /// the bytes received (the originator's now, to send on), or `None` once the peer has
    /// closed.
    pub fn recv(
        &mut self,
        o: &mut Originator,
        fd: BorrowedFd<'_>,
        len: usize,
    ) -> Result<Option<Fbuf>, FbufError> {
        let base = o.info().addr as u64;
        match self.ring.recv(o.map_mut(), fd, len)? {
            Received::End => Ok(None),
            Received::Data { slot, bytes } => {
                let addr = base + slot.offset() as u64;
                // The kernel is done with it: its chunks may be retired once the fbuf is free.
                o.ring_buf_back(slot)?;
                let fbuf = self.held.remove(&addr).ok_or(FbufError::BadRef {
                    what: "socket receive",
                    addr,
                    len: bytes as u64,
                    expected: "an fbuf this source handed to its ring",
                })?;
                Ok(Some(fbuf.with_len(bytes as u64)))
            }
        }
    }

    /// Stop: every fbuf the ring holds goes back to `o`'s free lists.
    pub fn close(mut self, o: &mut Originator) -> Result<(), FbufError> {
        for buf in self.ring.take_back() {
            o.ring_buf_back(buf)?;
        }
        for (_, f) in self.held.drain() {
            o.free(f)?;
        }
        Ok(())
    }
}
