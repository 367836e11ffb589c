//! The originator's side of a path ([`Originator`]): its allocator, its chunks, and its
//! writable mapping of them.

use super::space::{Carve, Space};
use super::{Fbuf, FbufError, FbufRef, PathInfo};
use crate::region::{RegionRead, RegionWrite, Span};
use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicU64;
use zcio_vm::bufring::SharedBuf;
use zcio_vm::page_size;
use zcio_vm::protect::Access;
use zcio_vm::stitched::{Part, SealedFile, Stitched};

/// The originator's side of a path: its allocator (LIFO free lists per size, chunk quota, a
/// budget of cached bytes) and its writable mapping of the path's chunks, each a memory file
/// made when the allocator first needs it and retired when the budget asks for its memory.
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
///
/// // A budget of cached bytes: the idle chunk goes back to the system, its free fbufs with it.
/// assert_eq!((o.chunks_used(), o.cached_bytes()), (1, 64 * 1024 - 8192));
/// o.set_cache_budget(0)?;
/// assert_eq!(o.chunks_used(), 1, "the chunk holds an fbuf still");
/// # Ok::<(), zcio_fbufs::path::FbufError>(())
/// ```
#[derive(Debug)]
pub struct Originator {
    map: Stitched,
    info: PathInfo,
    space: Space,
    /// Sent fbufs: receivers yet to free them, capacity, and whether made read-only.
    out: HashMap<u64, Sent>,
    /// Chunks this allocator has been granted (the whole quota unless an owner grants them).
    granted: usize,
    /// Every chunk made was sealed against every other writer (`F_SEAL_FUTURE_WRITE`): its
    /// pages cannot be punched out, so uncached fbufs are cleared on free.
    sealed: bool,
    /// The chunks made and retired: their descriptors, generations and changes.
    files: ChunkFiles,
    /// Most cached bytes kept (see [`Originator::set_cache_budget`]).
    budget: usize,
}

/// What an originator knows of an fbuf it sent: receivers yet to free it, its capacity, and
/// whether it was made read-only.
type Sent = (usize, u64, bool);

/// The memory files of a path's chunks as its originator keeps them, and the history of their
/// changes that the link's ends follow (every change bumps the epoch).
#[derive(Debug, Default)]
struct ChunkFiles {
    /// By chunk, up to the highest one ever made: its read-only descriptor while it is made,
    /// its generation, and the epoch of its last change.
    files: Vec<ChunkFile>,
    /// Chunks by the epoch of their last change.
    changes: BTreeMap<u64, usize>,
    epoch: u64,
    /// Chunks made and retired so far, in all.
    made: u64,
    retired: u64,
}

#[derive(Debug, Default)]
struct ChunkFile {
    ro: Option<OwnedFd>,
    generation: u64,
    changed: u64,
}

impl ChunkFiles {
    /// Chunk `k` changed: made (with its read-only descriptor) or retired (`None`).
    fn set(&mut self, k: usize, ro: Option<OwnedFd>) {
        if self.files.len() <= k {
            self.files.resize_with(k + 1, ChunkFile::default);
        }
        self.epoch += 1;
        let f = &mut self.files[k];
        self.changes.remove(&f.changed);
        self.changes.insert(self.epoch, k);
        f.changed = self.epoch;
        if ro.is_some() {
            f.generation = self.epoch;
            self.made += 1;
        } else if f.ro.is_some() {
            self.retired += 1;
        }
        f.ro = ro;
    }
}

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
    /// The originator of the path `info`: its range claimed in this process (inside the
    /// reserved region, [`zcio_vm::reserve`]), no chunk made yet. Each chunk is made when the
    /// allocator first needs it: a memory file of its own, mapped read-write here at its place
    /// in the range, then sealed against every later writer
    /// ([`zcio_vm::mapping::seal_future_writes`]): this mapping is the only one that can ever
    /// write it, so a receiver that reopens its descriptor read-write, or `mprotect`s its
    /// mapping, is refused by the kernel.
    pub fn new(info: PathInfo) -> Result<Originator, FbufError> {
        let map = Stitched::new(info.addr, info.len(), true)?;
        Ok(Originator {
            map,
            info,
            space: Space::new(page_size(), info.chunk_bytes, info.quota_chunks),
            out: HashMap::new(),
            granted: info.quota_chunks,
            sealed: true,
            files: ChunkFiles::default(),
            budget: usize::MAX,
        })
    }

    /// An allocator that may use only the chunks an owner grants it, none yet
    /// ([`crate::owner`]); it asks for more with [`FbufError::NeedChunks`].
    pub fn granted_by_owner(info: PathInfo) -> Result<Originator, FbufError> {
        let mut o = Originator::new(info)?;
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

    /// Chunks made and not retired (never more than the quota): those whose memory the path
    /// holds.
    pub fn chunks_used(&self) -> usize {
        self.space.made()
    }

    /// Fbufs on the free lists.
    pub fn cached(&self) -> usize {
        self.space.free_count()
    }

    /// Bytes of the path's chunks that no live fbuf (allocated, sent, or lent to a device)
    /// takes: its free fbufs, and the space of its chunks not carved yet. What the budget
    /// bounds.
    pub fn cached_bytes(&self) -> usize {
        self.space.cached_bytes()
    }

    /// The budget of cached bytes ([`usize::MAX`], none, unless set).
    pub fn cache_budget(&self) -> usize {
        self.budget
    }

    /// Keep at most `bytes` cached: from now on, whenever the path's cached bytes exceed them,
    /// chunks that hold no live fbuf are retired, the one whose fbufs were freed least recently
    /// first (the cold end of the LIFO free lists, §3.3), until they do not or no such chunk is
    /// left; a retired chunk's free fbufs leave the lists, and its memory file is unmapped and
    /// closed here (receivers are told by their link), so that the kernel frees its pages once
    /// no process maps or holds it. A later allocation that needs its space makes a fresh one.
    /// What a chunk holding a live fbuf caches stays until that fbuf is freed.
    pub fn set_cache_budget(&mut self, bytes: usize) -> Result<(), FbufError> {
        self.budget = bytes;
        self.trim_cache(bytes)
    }

    /// Retire idle chunks, coldest first, until at most `bytes` are cached or no idle chunk is
    /// left, whatever the budget (an application under memory pressure asks so once).
    pub fn trim_cache(&mut self, bytes: usize) -> Result<(), FbufError> {
        while self.space.cached_bytes() > bytes {
            let Some(k) = self.space.coldest_idle() else {
                break;
            };
            self.retire(k)?;
        }
        Ok(())
    }

    /// Retire idle chunk `k`: unmapped here (the placeholder back), its descriptor closed.
    fn retire(&mut self, k: usize) -> Result<(), FbufError> {
        self.map.unmap(k * self.info.chunk_bytes)?;
        self.space.retire(k);
        self.files.set(k, None);
        Ok(())
    }

    /// Make chunk `k`: a fresh memory file mapped read-write at its place, sealed, and a
    /// read-only descriptor of it kept for receivers.
    fn make_chunk(&mut self, k: usize) -> Result<(), FbufError> {
        let cb = self.info.chunk_bytes;
        let fd = zcio_vm::mapping::memfd("zcio-fbuf-chunk", cb)?;
        zcio_vm::mapping::seal_size(fd.as_fd())?;
        let file = SealedFile::new(fd)?;
        let part = Part {
            file: &file,
            offset: 0,
            len: cb,
        };
        self.map.map(k * cb, &[part], Access::ReadWrite)?;
        let ro = zcio_vm::mapping::seal_future_writes(file.fd()).and_then(|sealed| {
            self.sealed &= sealed;
            zcio_vm::mapping::reopen_read_only(file.fd())
        });
        match ro {
            Ok(ro) => {
                self.files.set(k, Some(ro));
                Ok(())
            }
            Err(e) => {
                let _ = self.map.unmap(k * cb);
                Err(e.into())
            }
        }
    }

    /// Chunks made so far, and retired so far, in all (a chunk made again after it was retired
    /// counts again).
    pub fn chunks_made_retired(&self) -> (u64, u64) {
        (self.files.made, self.files.retired)
    }

    /// The read-only descriptor of chunk `k`'s memory, while it is made (what receivers map).
    pub fn chunk_fd(&self, k: usize) -> Option<BorrowedFd<'_>> {
        self.files.files.get(k)?.ro.as_ref().map(AsFd::as_fd)
    }

    /// How many times the path's chunks have changed (made or retired) so far.
    pub(crate) fn chunk_epoch(&self) -> u64 {
        self.files.epoch
    }

    /// The chunks changed since `epoch`.
    pub(crate) fn chunks_changed_since(&self, epoch: u64) -> impl Iterator<Item = usize> + '_ {
        self.files.changes.range(epoch + 1..).map(|(_, k)| *k)
    }

    /// Chunk `k` now: its generation (changed each time it is made) and read-only descriptor,
    /// or `None` while it is not made.
    pub(crate) fn chunk_now(&self, k: usize) -> Option<(u64, BorrowedFd<'_>)> {
        let f = self.files.files.get(k)?;
        Some((f.generation, f.ro.as_ref()?.as_fd()))
    }

    /// Whether a freed fbuf for `len` bytes waits on a free list (an [`Originator::alloc`] of
    /// that length would reuse it rather than take fresh space).
    pub fn has_free(&self, len: usize) -> bool {
        self.space.has_free(len.div_ceil(page_size()))
    }

    /// A new fbuf of `len` bytes (whole pages underneath): the most recently freed fbuf of that
    /// size if there is one, else fresh space from the path's chunks, a chunk made where the
    /// space reaches one not made yet.
    pub fn alloc(&mut self, len: usize) -> Result<Fbuf, FbufError> {
        if len == 0 {
            return Err(FbufError::Empty);
        }
        let c = self.space.carve(len, self.granted)?;
        for (i, k) in c.new_chunks.iter().enumerate() {
            if let Err(e) = self.make_chunk(*k) {
                self.unmake(&c, i);
                return Err(e);
            }
        }
        Ok(Fbuf {
            addr: (self.info.addr + c.offset) as u64,
            len: len as u64,
            cap: c.size as u64,
        })
    }

    /// Give back carve `c` whose first `made` new chunks were made, the next one failing.
    fn unmake(&mut self, c: &Carve, made: usize) {
        for k in &c.new_chunks[..made] {
            let _ = self.map.unmap(k * self.info.chunk_bytes);
            self.files.set(*k, None);
        }
        self.space.uncarve(c);
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
    ///
    /// # Panics
    ///
    /// If `fbuf` is not one of this originator's (its chunks are made while it lives).
    pub fn fbuf_words(&self, fbuf: &Fbuf) -> &[AtomicU64] {
        self.map
            .words(
                self.offset_of(fbuf.addr),
                fbuf.len.next_multiple_of(8) as usize,
            )
            .expect("an fbuf of this originator, its chunks made")
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
    /// becomes writable again and goes on its free list, as it is (cached) or cleared; past
    /// the budget, idle chunks are retired.
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
        let (off, cap) = (self.offset_of(addr), cap as usize);
        if protected {
            self.map.set_access(off, cap, Access::ReadWrite)?;
        }
        self.space.recycle(off, cap);
        if self.space.cached_bytes() > self.budget {
            self.trim_cache(self.budget)?;
        }
        if !self.info.variant.cached {
            self.clear(off, cap)?;
        }
        Ok(())
    }

    /// An uncached fbuf freed: its parts in chunks still made are cleared (a chunk retired
    /// took its pages back; a fresh one reads as zeros), or given back to the kernel where the
    /// chunks are not sealed against it.
    fn clear(&mut self, off: usize, cap: usize) -> Result<(), FbufError> {
        let cb = self.info.chunk_bytes;
        for k in self.space.chunks_of(off, cap) {
            if !self.space.is_made(k) {
                continue;
            }
            let (lo, hi) = (off.max(k * cb), (off + cap).min((k + 1) * cb));
            if self.sealed {
                for w in self.map.words(lo, hi - lo).expect("a made chunk") {
                    w.store(0, std::sync::atomic::Ordering::Relaxed);
                }
            } else {
                self.map.discard(lo, hi - lo)?;
            }
        }
        Ok(())
    }

    /// Give back an fbuf that was never sent.
    pub fn free(&mut self, fbuf: Fbuf) -> Result<(), FbufError> {
        self.recycle(fbuf.addr, fbuf.cap, false)
    }

    /// `fbuf` as a buffer for the kernel to fill through a provided-buffer ring: its chunks
    /// stay mapped until it is given back ([`Originator::ring_buf_back`]).
    pub(crate) fn ring_buf(&mut self, fbuf: &Fbuf) -> Result<SharedBuf, FbufError> {
        let off = self.offset_of(fbuf.addr);
        Ok(self.map.ring_buf(off, fbuf.len as usize)?)
    }

    /// A buffer of [`Originator::ring_buf`] back from the kernel.
    pub(crate) fn ring_buf_back(&mut self, buf: SharedBuf) -> Result<(), FbufError> {
        Ok(self.map.give_back(buf)?)
    }

    /// The path's mapping, for a receive into its buffers.
    pub(crate) fn map_mut(&mut self) -> &mut Stitched {
        &mut self.map
    }
}

impl RegionRead for Originator {
    #[inline]
    fn words(&self, addr: u64, len: u64) -> Option<&[AtomicU64]> {
        let off = addr.checked_sub(self.info.addr as u64)?;
        self.map.words(off as usize, usize::try_from(len).ok()?)
    }
    fn readable(&self, addr: u64, len: u64) -> bool {
        let off = addr.checked_sub(self.info.addr as u64);
        off.zip(usize::try_from(len).ok())
            .is_some_and(|(o, l)| self.map.is_mapped(o as usize, l))
    }
    fn span(&self, addr: u64) -> Option<Span<'_>> {
        let off = addr.checked_sub(self.info.addr as u64)?;
        let (o, w) = self.map.span(usize::try_from(off).ok()?)?;
        Some(Span::new((self.info.addr + o) as u64, w))
    }
}

/// The originator may store anywhere in its chunks; where an fbuf it sent is read-only (a
/// non-volatile fbuf until every receiver has freed it) the store faults.
impl RegionWrite for Originator {
    fn words_mut(&self, addr: u64, len: u64) -> Option<&[AtomicU64]> {
        self.words(addr, len)
    }
}
