//! A data path's fbufs (paper 001, §3.2.1-3.2.4, §3.3): one memfd per path, mapped at the same
//! address in every process of the path, writable only by the originator and read-only in the
//! receivers, carved into fbufs by the originator's allocator.
//!
//! - **Restricted dynamic read sharing** (§3.2.1): the path's range is one address range in
//!   every process. Receivers map it from a descriptor opened read-only, and once the
//!   originator has mapped it the path's memory is sealed (`F_SEAL_FUTURE_WRITE`, no shrinking,
//!   growing or further seals): a receiver that reopens its descriptor read-write through
//!   `/proc` still cannot map it writable, write it, punch holes in it or `mprotect` its
//!   mapping writable. The kernel refuses them write access whatever they do.
//! - **Chunks and quota** (§3.3): the path's space is handed out in fixed-size chunks, at most
//!   `quota_chunks` of them; a path that never frees gets [`FbufError::Quota`] and no other path
//!   is affected (each has its own memfd). Memory is pageable and populated lazily: a chunk
//!   costs nothing until its pages are touched.
//! - **Caching** (§3.2.2): a freed fbuf goes on its size's LIFO free list with its pages and
//!   mappings kept, and is reused as it is, without clearing. Uncached paths clear an fbuf on
//!   free (it reads as zeros after) and receivers map and unmap each fbuf per transfer. The
//!   seal forbids punching holes, so a sealed uncached path keeps the pages it has touched
//!   (at most its quota) until it ends; where the kernel cannot seal, the pages go back.
//! - **Volatile fbufs** (§3.2.4): the originator keeps write access after a send. On a
//!   non-volatile path the send makes the fbuf read-only in the originator (a write faults)
//!   until every receiver has freed it; a receiver may ask to *secure* a volatile fbuf the same
//!   way.

use crate::region::{RegionRead, RegionWrite, Span};
use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicU64;
use zcio_vm::bufring::SharedBuf;
use zcio_vm::page_size;
use zcio_vm::protect::Access;
use zcio_vm::shared::SharedWords;

/// How a path's fbufs are transferred.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    /// Freed fbufs are kept, mapped, for reuse on the path (else pages are given back and
    /// receivers map each fbuf per transfer).
    pub cached: bool,
    /// The originator keeps write access after a send (else it loses it until all free).
    pub volatile: bool,
}

impl Variant {
    /// Cached and volatile: freed fbufs stay mapped for reuse, sends leave them writable.
    pub const CACHED_VOLATILE: Variant = Variant::of(true, true);
    /// Cached, not volatile: freed fbufs stay mapped for reuse, a send takes write access away
    /// until the fbuf is freed.
    pub const CACHED: Variant = Variant::of(true, false);
    /// Volatile, not cached: pages given back on free, sends leave fbufs writable.
    pub const VOLATILE: Variant = Variant::of(false, true);
    /// Neither cached nor volatile: pages given back on free, a send takes write access away.
    pub const UNCACHED: Variant = Variant::of(false, false);

    const fn of(cached: bool, volatile: bool) -> Variant {
        Variant { cached, volatile }
    }

    /// The variant as the link and owner protocols carry it: bit 0 cached, bit 1 volatile.
    pub fn bits(self) -> u64 {
        u64::from(self.cached) | u64::from(self.volatile) << 1
    }

    /// The variant that [`bits`](Self::bits) gave (other bits ignored).
    pub fn from_bits(bits: u64) -> Variant {
        Variant::of(bits & 1 != 0, bits & 2 != 0)
    }
}

/// A path's geometry, as every process of the path must know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathInfo {
    /// Start address of the path's range (the same in every process).
    pub addr: usize,
    /// Bytes of one chunk (a multiple of the page size).
    pub chunk_bytes: usize,
    /// Chunks the path may use at most.
    pub quota_chunks: usize,
    /// Transfer variant.
    pub variant: Variant,
}

impl PathInfo {
    /// Length of the path's range.
    pub fn len(&self) -> usize {
        self.chunk_bytes * self.quota_chunks
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether `[addr, addr + len)` lies in the path's range.
    pub fn contains(&self, addr: u64, len: u64) -> bool {
        let base = self.addr as u64;
        addr >= base
            && addr
                .checked_add(len)
                .is_some_and(|e| e <= base + self.len() as u64)
    }
}

/// What went wrong with an fbuf operation.
#[derive(Debug, thiserror::Error)]
pub enum FbufError {
    /// The path's chunk quota is used up.
    #[error(
        "fbuf path quota reached: {asked} more bytes would need chunk {needed} of at most {quota} ({chunk_bytes} bytes each); free fbufs on this path"
    )]
    Quota {
        /// Bytes asked for.
        asked: usize,
        /// Chunks that would be needed in all.
        needed: usize,
        /// The quota.
        quota: usize,
        /// Chunk size.
        chunk_bytes: usize,
    },
    /// The allocator needs more chunks than its owner has granted it (ask the owner).
    #[error(
        "fbuf allocator needs {needed} chunks and was granted {granted}: ask the owner for more"
    )]
    NeedChunks {
        /// Chunks needed in all.
        needed: usize,
        /// Chunks granted so far.
        granted: usize,
    },
    /// The owner refused a request.
    #[error("fbuf owner refused: {0}")]
    Refused(String),
    /// A zero-length fbuf.
    #[error("an fbuf holds at least one byte")]
    Empty,
    /// A reference that is not an fbuf of this path as this process knows it.
    #[error("{what}: [{addr:#x}, +{len}) is not {expected}")]
    BadRef {
        /// The operation.
        what: &'static str,
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
        /// What it should have been.
        expected: &'static str,
    },
    /// A write outside the fbuf.
    #[error("write of {len} bytes at offset {offset} exceeds the fbuf's {size} bytes")]
    OutOfRange {
        /// Offset.
        offset: u64,
        /// Length.
        len: u64,
        /// Fbuf size.
        size: u64,
    },
    /// Geometry that cannot work.
    #[error("invalid path: {0}")]
    InvalidPath(String),
    /// The VM layer refused (mapping, protection).
    #[error(transparent)]
    Vm(#[from] zcio_vm::VmError),
}

/// An fbuf this process may write (the originator's, not yet sent or freed back to it).
#[derive(Debug, PartialEq, Eq)]
pub struct Fbuf {
    addr: u64,
    len: u64,
    cap: u64,
}

impl Fbuf {
    /// Start address.
    pub fn addr(&self) -> u64 {
        self.addr
    }
    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }
    /// Whether it is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A reference to a sent fbuf: what crosses between processes (address and length).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FbufRef {
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
}

/// The path's memory, created by its owner (the paper's kernel role).
#[derive(Debug)]
pub struct PathMemory {
    fd: OwnedFd,
    info: PathInfo,
}

impl PathMemory {
    /// A new path of `quota_chunks` chunks of `chunk_bytes` (rounded up to pages), at a fresh
    /// address inside the reserved region ([`zcio_vm::reserve`]), where every process of the
    /// path maps it; its memory is sparse until touched. Where this process cannot reserve
    /// the region, the error says what holds it.
    pub fn create(
        chunk_bytes: usize,
        quota_chunks: usize,
        variant: Variant,
    ) -> Result<PathMemory, FbufError> {
        let ps = page_size();
        let chunk_bytes = chunk_bytes.max(1).div_ceil(ps) * ps;
        let len = chunk_bytes
            .checked_mul(quota_chunks)
            .filter(|l| *l > 0 && *l <= zcio_vm::mapping::MAX_MAPPING)
            .ok_or_else(|| {
                FbufError::InvalidPath(format!(
                    "{quota_chunks} chunks of {chunk_bytes} bytes: must be between one page and {} bytes in all",
                    zcio_vm::mapping::MAX_MAPPING
                ))
            })?;
        let fd = zcio_vm::mapping::memfd("zcio-fbuf-path", len)?;
        Ok(PathMemory {
            fd,
            info: PathInfo {
                addr: zcio_vm::reserve::region()?.random_address(len),
                chunk_bytes,
                quota_chunks,
                variant,
            },
        })
    }

    /// The path's geometry.
    pub fn info(&self) -> PathInfo {
        self.info
    }

    /// The descriptor for the originator (read-write).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The path's originator, in the process that created it: [`Originator::new`] on the
    /// path's memory and geometry.
    pub fn originator(&self) -> Result<Originator, FbufError> {
        Originator::new(self.fd(), self.info)
    }

    /// A descriptor for a receiver: read-only, so the kernel never lets it write.
    pub fn receiver_fd(&self) -> Result<OwnedFd, FbufError> {
        Ok(zcio_vm::mapping::reopen_read_only(self.fd.as_fd())?)
    }
}

/// The originator's side of a path: its allocator (LIFO free lists per size, chunk quota) and
/// its writable mapping of the path's range.
///
/// # Examples
///
/// An fbuf's life in the originator alone; the receivers' side, in other processes, is
/// [`crate::link`] (see `crates/zcio/examples/fbuf_path.rs`).
///
/// ```
/// use zcio_fbufs::path::{PathMemory, Variant};
/// use zcio_fbufs::region::RegionRead;
///
/// // A path of 2 chunks of 64 KiB; cached: freed fbufs come back uncleared, for reuse.
/// let path = PathMemory::create(64 * 1024, 2, Variant::CACHED_VOLATILE)?;
/// let mut o = path.originator()?;
///
/// let fbuf = o.alloc(5000)?;
/// o.write(&fbuf, 0, b"hello, path")?;
/// let addr = fbuf.addr(); // the same address in every process of the path
/// let sent = o.send(fbuf, 1)?; // a reference for one receiver
/// let mut got = [0u8; 11];
/// assert!(o.read_bytes(sent.addr, &mut got));
/// assert_eq!(&got, b"hello, path");
///
/// o.freed(sent)?; // the receiver's deallocation notice
/// assert_eq!(o.alloc(4097)?.addr(), addr); // LIFO: the fbuf just freed comes back first
/// # Ok::<(), zcio_fbufs::path::FbufError>(())
/// ```
#[derive(Debug)]
pub struct Originator {
    map: SharedWords,
    info: PathInfo,
    /// Next unallocated offset in the path.
    next: usize,
    /// Free fbufs by page count, most recently freed last.
    free: HashMap<usize, Vec<u64>>,
    /// Sent fbufs: receivers yet to free them, capacity, and whether made read-only.
    out: HashMap<u64, Sent>,
    /// Chunks this allocator has been granted (the whole quota unless an owner grants them).
    granted: usize,
    /// The path's memory is sealed against every other writer (`F_SEAL_FUTURE_WRITE`); its
    /// uncached fbufs are then cleared on free instead of giving their pages back.
    sealed: bool,
}

/// What an originator knows of an fbuf it sent: receivers yet to free it, its capacity, and
/// whether it was made read-only.
type Sent = (usize, u64, bool);

/// The entry of `r` among the fbufs `out` holds as sent and not had back from every receiver;
/// else [`FbufError::BadRef`] for `what`, `expected` saying what `r` should have been.
fn sent<'a>(
    out: &'a mut HashMap<u64, Sent>,
    r: FbufRef,
    what: &'static str,
    expected: &'static str,
) -> Result<&'a mut Sent, FbufError> {
    out.get_mut(&r.addr).ok_or(FbufError::BadRef {
        what,
        addr: r.addr,
        len: r.len,
        expected,
    })
}

impl Originator {
    /// Map the path read-write at its address in this process, then seal the path's memory
    /// against every later writer ([`zcio_vm::mapping::seal_future_writes`]): this mapping is
    /// the only one that can ever write the path, so a receiver that reopens its descriptor
    /// read-write, or `mprotect`s its mapping, is refused by the kernel. A second originator of
    /// the same path is refused too.
    pub fn new(fd: BorrowedFd<'_>, info: PathInfo) -> Result<Originator, FbufError> {
        if zcio_vm::mapping::is_sealed_for_writes(fd) {
            return Err(FbufError::InvalidPath(format!(
                "the path at {:#x} has an originator already: its memory is sealed against any other writer",
                info.addr
            )));
        }
        let map = SharedWords::map(fd, 0, info.len(), info.addr, Access::ReadWrite)?;
        let sealed = zcio_vm::mapping::seal_future_writes(fd)?;
        Ok(Originator {
            sealed,
            map,
            info,
            next: 0,
            free: HashMap::new(),
            out: HashMap::new(),
            granted: info.quota_chunks,
        })
    }

    /// An allocator that may use only the chunks an owner grants it, none yet
    /// ([`crate::owner`]); it asks for more with [`FbufError::NeedChunks`].
    pub fn granted_by_owner(fd: BorrowedFd<'_>, info: PathInfo) -> Result<Originator, FbufError> {
        let mut o = Originator::new(fd, info)?;
        o.granted = 0;
        Ok(o)
    }

    /// Chunks granted so far.
    pub fn granted(&self) -> usize {
        self.granted
    }

    /// The owner granted chunks: `total` in all (never more than the quota).
    pub fn set_granted(&mut self, total: usize) {
        self.granted = total.min(self.info.quota_chunks);
    }

    /// The path's geometry.
    pub fn info(&self) -> PathInfo {
        self.info
    }

    /// Chunks in use so far (never more than the quota).
    pub fn chunks_used(&self) -> usize {
        self.next.div_ceil(self.info.chunk_bytes)
    }

    /// Fbufs on the free lists.
    pub fn cached(&self) -> usize {
        self.free.values().map(Vec::len).sum()
    }

    /// Whether a freed fbuf for `len` bytes waits on a free list (an [`Originator::alloc`] of
    /// that length would reuse it rather than take fresh space).
    pub fn has_free(&self, len: usize) -> bool {
        self.free
            .get(&len.div_ceil(page_size()))
            .is_some_and(|l| !l.is_empty())
    }

    /// A new fbuf of `len` bytes (whole pages underneath): the most recently freed fbuf of that
    /// size if there is one, else fresh space from the path's chunks.
    pub fn alloc(&mut self, len: usize) -> Result<Fbuf, FbufError> {
        if len == 0 {
            return Err(FbufError::Empty);
        }
        let ps = page_size();
        let pages = len.div_ceil(ps);
        if let Some(addr) = self.free.get_mut(&pages).and_then(Vec::pop) {
            return Ok(Fbuf {
                addr,
                len: len as u64,
                cap: (pages * ps) as u64,
            });
        }
        let size = pages * ps;
        let end = self.next.saturating_add(size);
        let needed = end.div_ceil(self.info.chunk_bytes);
        if needed > self.info.quota_chunks {
            return Err(FbufError::Quota {
                asked: len,
                needed,
                quota: self.info.quota_chunks,
                chunk_bytes: self.info.chunk_bytes,
            });
        }
        if needed > self.granted {
            return Err(FbufError::NeedChunks {
                needed,
                granted: self.granted,
            });
        }
        let addr = (self.info.addr + self.next) as u64;
        self.next = end;
        Ok(Fbuf {
            addr,
            len: len as u64,
            cap: size as u64,
        })
    }

    /// Write `data` into `fbuf` at `offset`.
    pub fn write(&self, fbuf: &Fbuf, offset: u64, data: &[u8]) -> Result<(), FbufError> {
        if offset
            .checked_add(data.len() as u64)
            .is_none_or(|e| e > fbuf.len)
        {
            return Err(FbufError::OutOfRange {
                offset,
                len: data.len() as u64,
                size: fbuf.len,
            });
        }
        if !self.write_bytes(fbuf.addr + offset, data) {
            return Err(FbufError::BadRef {
                what: "write",
                addr: fbuf.addr,
                len: fbuf.len,
                expected: "in this path",
            });
        }
        Ok(())
    }

    /// The words of `fbuf` (its length rounded up to a word), to build its contents in place
    /// at memory speed instead of writing them from elsewhere.
    pub fn fbuf_words(&self, fbuf: &Fbuf) -> &[AtomicU64] {
        self.map.words(
            self.offset_of(fbuf.addr),
            fbuf.len.next_multiple_of(8) as usize,
        )
    }

    fn offset_of(&self, addr: u64) -> usize {
        addr as usize - self.info.addr
    }

    /// Send `fbuf` to `receivers` receivers: it becomes an [`FbufRef`]. On a non-volatile path
    /// the originator loses write access to it (a write faults) until all have freed it.
    pub fn send(&mut self, fbuf: Fbuf, receivers: usize) -> Result<FbufRef, FbufError> {
        let r = FbufRef {
            addr: fbuf.addr,
            len: fbuf.len,
        };
        let protect = !self.info.variant.volatile;
        if protect {
            self.map.set_access(
                self.offset_of(fbuf.addr),
                fbuf.cap as usize,
                Access::ReadOnly,
            )?;
        }
        if receivers == 0 {
            self.recycle(fbuf.addr, fbuf.cap, protect)?;
        } else {
            self.out.insert(fbuf.addr, (receivers, fbuf.cap, protect));
        }
        Ok(r)
    }

    /// A receiver asks that a volatile fbuf be secured: the originator loses write access to it
    /// until every receiver has freed it.
    pub fn secure(&mut self, r: FbufRef) -> Result<(), FbufError> {
        let off = self.offset_of(r.addr);
        let e = sent(
            &mut self.out,
            r,
            "secure",
            "an fbuf this originator has sent and not had back",
        )?;
        if !e.2 {
            self.map.set_access(off, e.1 as usize, Access::ReadOnly)?;
            e.2 = true;
        }
        Ok(())
    }

    /// A receiver's deallocation notice for `r`. When the last receiver has freed it, the fbuf
    /// becomes writable again and goes on its free list, as it is (cached) or cleared.
    pub fn freed(&mut self, r: FbufRef) -> Result<(), FbufError> {
        let e = sent(
            &mut self.out,
            r,
            "deallocation notice",
            "an fbuf this originator has sent and not had back (a double free?)",
        )?;
        e.0 -= 1;
        if e.0 == 0 {
            let (_, cap, protected) = self.out.remove(&r.addr).expect("present");
            self.recycle(r.addr, cap, protected)?;
        }
        Ok(())
    }

    /// Fbufs sent and not yet freed by all their receivers.
    pub fn outstanding(&self) -> usize {
        self.out.len()
    }

    fn recycle(&mut self, addr: u64, cap: u64, protected: bool) -> Result<(), FbufError> {
        let off = self.offset_of(addr);
        if protected {
            self.map.set_access(off, cap as usize, Access::ReadWrite)?;
        }
        if !self.info.variant.cached {
            if self.sealed {
                // The seal forbids giving pages back (a punched hole is a write): clear them.
                self.map.clear(off, cap as usize);
            } else {
                self.map.discard(off, cap as usize)?;
            }
        }
        self.free
            .entry(cap as usize / page_size())
            .or_default()
            .push(addr);
        Ok(())
    }

    /// Give back an fbuf that was never sent.
    pub fn free(&mut self, fbuf: Fbuf) -> Result<(), FbufError> {
        self.recycle(fbuf.addr, fbuf.cap, false)
    }

    /// `fbuf` as a buffer for the kernel to fill through a provided-buffer ring.
    pub(crate) fn ring_buf(&self, fbuf: &Fbuf) -> Result<SharedBuf, FbufError> {
        Ok(self
            .map
            .ring_buf(self.offset_of(fbuf.addr), fbuf.len as usize)?)
    }

    /// The path's mapping, for a receive into its buffers.
    pub(crate) fn map_mut(&mut self) -> &mut SharedWords {
        &mut self.map
    }
}

impl Fbuf {
    /// The same fbuf holding its first `len` bytes (at most its capacity).
    pub(crate) fn with_len(self, len: u64) -> Fbuf {
        Fbuf {
            len: len.min(self.cap),
            ..self
        }
    }
}

impl RegionRead for Originator {
    fn words(&self, addr: u64, len: u64) -> Option<&[AtomicU64]> {
        (addr % 8 == 0 && len % 8 == 0 && self.readable(addr, len))
            .then(|| self.map.words(self.offset_of(addr), len as usize))
    }
    fn readable(&self, addr: u64, len: u64) -> bool {
        self.info.contains(addr, len)
    }
    fn span(&self, addr: u64) -> Option<Span<'_>> {
        self.info
            .contains(addr, 1)
            .then(|| Span::new(self.info.addr as u64, self.map.words(0, self.map.len())))
    }
}

/// The originator may store anywhere in its path; where an fbuf it sent is read-only (a
/// non-volatile fbuf until every receiver has freed it) the store faults.
impl RegionWrite for Originator {
    fn words_mut(&self, addr: u64, len: u64) -> Option<&[AtomicU64]> {
        self.words(addr, len)
    }
}

/// A receiver's side of a path: a read-only mapping of the path's range (cached paths), or of
/// each fbuf while it holds it (uncached).
#[derive(Debug)]
pub struct Receiver {
    fd: OwnedFd,
    info: PathInfo,
    whole: Option<SharedWords>,
    held: HashMap<u64, Option<SharedWords>>,
}

impl Receiver {
    /// Join the path with a read-only descriptor ([`PathMemory::receiver_fd`]).
    pub fn new(fd: OwnedFd, info: PathInfo) -> Result<Receiver, FbufError> {
        let whole = if info.variant.cached {
            Some(SharedWords::map(
                fd.as_fd(),
                0,
                info.len(),
                info.addr,
                Access::ReadOnly,
            )?)
        } else {
            None
        };
        Ok(Receiver {
            fd,
            info,
            whole,
            held: HashMap::new(),
        })
    }

    /// Take a reference received from the originator: checked to lie in the path, and mapped
    /// now if the path is uncached.
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
        let map = if self.whole.is_none() {
            let off = r.addr - self.info.addr as u64;
            let cap = r.len.div_ceil(ps) * ps;
            Some(SharedWords::map(
                self.fd.as_fd(),
                off,
                cap as usize,
                r.addr as usize,
                Access::ReadOnly,
            )?)
        } else {
            None
        };
        self.held.insert(r.addr, map);
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
        Ok(r)
    }

    /// The read-only descriptor of the path's memory (to offer the path onward).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Fbufs held.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    fn mapping_for(&self, addr: u64, len: u64) -> Option<(&SharedWords, usize)> {
        if let Some(w) = &self.whole {
            return self
                .info
                .contains(addr, len)
                .then(|| (w, (addr - self.info.addr as u64) as usize));
        }
        self.held.iter().find_map(|(a, m)| {
            let m = m.as_ref()?;
            (addr >= *a && addr.checked_add(len)? <= *a + m.len() as u64)
                .then(|| (m, (addr - a) as usize))
        })
    }
}

impl RegionRead for Receiver {
    fn words(&self, addr: u64, len: u64) -> Option<&[AtomicU64]> {
        if addr % 8 != 0 || len % 8 != 0 {
            return None;
        }
        let (m, off) = self.mapping_for(addr, len)?;
        Some(m.words(off, len as usize))
    }
    fn readable(&self, addr: u64, len: u64) -> bool {
        if self.whole.is_some() {
            return self.info.contains(addr, len);
        }
        self.mapping_for(addr, len).is_some()
    }
    fn span(&self, addr: u64) -> Option<Span<'_>> {
        let (m, off) = self.mapping_for(addr, 1)?;
        Some(Span::new(addr - off as u64, m.words(0, m.len())))
    }
}
