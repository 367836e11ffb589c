//! A receiver's side of a path ([`Receiver`]).

use super::{FbufError, FbufRef, PathInfo};
use crate::region::{RegionRead, Span};
use std::collections::HashMap;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicU64;
use zcio_vm::page_size;
use zcio_vm::protect::Access;
use zcio_vm::stitched::{Part, SealedFile, Stitched};

/// A receiver's side of a path: the path's range claimed at its address, the chunks the
/// originator announced (a read-only descriptor of each), mapped read-only as they come
/// (cached paths), or each fbuf mapped while it is held (uncached).
#[derive(Debug)]
pub struct Receiver {
    info: PathInfo,
    map: Stitched,
    /// The chunks announced and not retired, by index.
    chunks: HashMap<usize, SealedFile>,
    /// Fbufs held: address → length.
    held: HashMap<u64, u64>,
}

impl Receiver {
    /// Join the path `info`: its range claimed here, no chunk known yet
    /// ([`Receiver::add_chunk`] takes each as the originator announces it).
    pub fn new(info: PathInfo) -> Result<Receiver, FbufError> {
        Ok(Receiver {
            info,
            map: Stitched::new(info.addr, info.len(), info.variant.cached)?,
            chunks: HashMap::new(),
            held: HashMap::new(),
        })
    }

    /// The path's geometry.
    pub fn info(&self) -> PathInfo {
        self.info
    }

    /// The chunk `r` names (its address and length, as a chunk frame carries them): refused
    /// by name unless it is one chunk of this path, at a chunk's boundary.
    fn chunk_named(&self, what: &'static str, r: FbufRef) -> Result<usize, FbufError> {
        let cb = self.info.chunk_bytes as u64;
        let base = self.info.addr as u64;
        if r.len != cb || !self.info.contains(r.addr, r.len) || (r.addr - base) % cb != 0 {
            return Err(bad_ref(
                what,
                r,
                "one chunk of this path, at a chunk's boundary",
            ));
        }
        Ok(((r.addr - base) / cb) as usize)
    }

    /// The chunk at `r` (one chunk of the path) is announced with `fd`, a read-only descriptor
    /// of its memory: mapped read-only now (cached paths) or kept for the fbufs received in it
    /// (uncached). Refused by name where `r` is not a chunk of this path, the chunk is known
    /// already (overlapping chunks), or the memory is shorter than a chunk or not sealed
    /// against shrinking (a read past its end would fault).
    pub fn add_chunk(&mut self, r: FbufRef, fd: OwnedFd) -> Result<(), FbufError> {
        let what = "announce a chunk";
        let k = self.chunk_named(what, r)?;
        let bad = |expected| bad_ref(what, r, expected);
        if self.chunks.contains_key(&k) {
            return Err(bad("a chunk not known here already (overlapping chunks)"));
        }
        let file = match SealedFile::new(fd) {
            Ok(f) if f.len() >= r.len => f,
            _ => {
                return Err(bad(
                    "a memory file of a chunk's length at least, sealed against shrinking",
                ));
            }
        };
        if self.info.variant.cached {
            let part = Part {
                file: &file,
                offset: 0,
                len: r.len as usize,
            };
            self.map
                .map(k * self.info.chunk_bytes, &[part], Access::ReadOnly)?;
        }
        self.chunks.insert(k, file);
        Ok(())
    }

    /// The chunk at `r` is retired: unmapped and its descriptor closed (once no process maps
    /// or holds it, the kernel frees its pages). Refused by name where it is not a chunk
    /// known here, or where an fbuf this receiver holds lies in it: the receiver keeps its
    /// mapping of what it holds until it frees it.
    pub fn retire_chunk(&mut self, r: FbufRef) -> Result<(), FbufError> {
        let what = "retire a chunk";
        let k = self.chunk_named(what, r)?;
        let bad = |expected| bad_ref(what, r, expected);
        if !self.chunks.contains_key(&k) {
            return Err(bad("a chunk announced here and not retired"));
        }
        if self.holds_in(r.addr, r.len) {
            return Err(bad("a chunk holding no fbuf this receiver holds"));
        }
        if self.info.variant.cached {
            self.map.unmap(k * self.info.chunk_bytes)?;
        }
        self.chunks.remove(&k);
        Ok(())
    }

    /// Whether an fbuf held here overlaps `[addr, addr + len)`.
    pub fn holds_in(&self, addr: u64, len: u64) -> bool {
        self.held.iter().any(|(a, l)| {
            *a < addr.saturating_add(len) && addr < a + l.next_multiple_of(page_size() as u64)
        })
    }

    /// The chunks known here (announced and not retired): their addresses and read-only
    /// descriptors, to announce them onward.
    pub fn chunks(&self) -> impl Iterator<Item = (FbufRef, BorrowedFd<'_>)> + '_ {
        let cb = self.info.chunk_bytes;
        self.chunks.iter().map(move |(k, file)| {
            let r = FbufRef {
                addr: (self.info.addr + k * cb) as u64,
                len: cb as u64,
            };
            (r, file.fd())
        })
    }

    /// Take a reference received from the originator: checked to lie in the path, in chunks
    /// announced here ([`FbufError::NoChunk`] names the first that is not), and mapped now if
    /// the path is uncached.
    pub fn receive(&mut self, r: FbufRef) -> Result<(), FbufError> {
        let ps = page_size() as u64;
        if r.len == 0 || r.addr % ps != 0 || !self.info.contains(r.addr, r.len) {
            return Err(FbufError::BadRef {
                what: "receive",
                addr: r.addr,
                len: r.len,
                expected: "a page-aligned fbuf in this path's range",
            });
        }
        if self.held.contains_key(&r.addr) {
            return Err(FbufError::BadRef {
                what: "receive",
                addr: r.addr,
                len: r.len,
                expected: "an fbuf this receiver does not hold already",
            });
        }
        let off = (r.addr - self.info.addr as u64) as usize;
        let cap = r.len.div_ceil(ps) as usize * ps as usize;
        let cb = self.info.chunk_bytes;
        let chunks = off / cb..(off + cap).div_ceil(cb);
        if let Some(k) = chunks.clone().find(|k| !self.chunks.contains_key(k)) {
            return Err(FbufError::NoChunk {
                addr: r.addr,
                len: r.len,
                chunk: k,
            });
        }
        if !self.info.variant.cached {
            let parts: Vec<Part<'_>> = chunks
                .map(|k| {
                    let (lo, hi) = (off.max(k * cb), (off + cap).min((k + 1) * cb));
                    Part {
                        file: &self.chunks[&k],
                        offset: (lo - k * cb) as u64,
                        len: hi - lo,
                    }
                })
                .collect();
            self.map.map(off, &parts, Access::ReadOnly)?;
        }
        self.held.insert(r.addr, r.len);
        Ok(())
    }

    /// Free a received fbuf; returns the deallocation notice to send to the originator.
    pub fn free(&mut self, r: FbufRef) -> Result<FbufRef, FbufError> {
        if self.held.remove(&r.addr).is_none() {
            return Err(FbufError::BadRef {
                what: "free",
                addr: r.addr,
                len: r.len,
                expected: "an fbuf this receiver holds",
            });
        }
        if !self.info.variant.cached {
            self.map.unmap((r.addr - self.info.addr as u64) as usize)?;
        }
        Ok(r)
    }

    /// Fbufs held.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The offset in the path of `addr`, where it lies at or past the path's start.
    #[inline]
    fn offset(&self, addr: u64) -> Option<usize> {
        usize::try_from(addr.checked_sub(self.info.addr as u64)?).ok()
    }
}

impl RegionRead for Receiver {
    #[inline]
    fn words(&self, addr: u64, len: u64) -> Option<&[AtomicU64]> {
        self.map
            .words(self.offset(addr)?, usize::try_from(len).ok()?)
    }
    fn readable(&self, addr: u64, len: u64) -> bool {
        self.offset(addr)
            .zip(usize::try_from(len).ok())
            .is_some_and(|(o, l)| self.map.is_mapped(o, l))
    }
    fn span(&self, addr: u64) -> Option<Span<'_>> {
        let (o, w) = self.map.span(self.offset(addr)?)?;
        Some(Span::new((self.info.addr + o) as u64, w))
    }
}

/// A chunk frame's reference `r` refused by name: what was being done, and what `r` should
/// have been.
fn bad_ref(what: &'static str, r: FbufRef, expected: &'static str) -> FbufError {
    FbufError::BadRef {
        what,
        addr: r.addr,
        len: r.len,
        expected,
    }
}
