//! A data path's fbufs (paper 001, §3.2.1-3.2.4, §3.3): a range of addresses, the same in
//! every process of the path, whose chunks are memory files of their own, mapped writable only
//! by the originator and read-only in the receivers, carved into fbufs by the originator's
//! allocator.
//!
//! - **Restricted dynamic read sharing** (§3.2.1): the path's range is one address range in
//!   every process, claimed whole there (inside the reserved region, [`zcio_vm::reserve`]);
//!   its chunks are mapped at their places in it ([`zcio_vm::stitched`]). Receivers map a chunk
//!   from a descriptor opened read-only, and once the originator has mapped a chunk its memory
//!   is sealed (`F_SEAL_FUTURE_WRITE`, no shrinking, growing or further seals): a receiver
//!   that reopens its descriptor read-write through `/proc` still cannot map it writable,
//!   write it, punch holes in it or `mprotect` its mapping writable. The kernel refuses them
//!   write access whatever they do.
//! - **Chunks and quota** (§3.3, "the kernel hands out ownership of fixed sized chunks"): the
//!   path's space is handed out in fixed-size chunks, at most `quota_chunks` of them; a path
//!   that never frees gets [`FbufError::Quota`] and no other path is affected. Each chunk is a
//!   memfd of its own, made when the allocator first carves space in it and announced to the
//!   receivers (its read-only descriptor, [`crate::link`]) before any reference into it. Memory
//!   is pageable and populated lazily: a chunk costs nothing until its pages are touched.
//! - **Caching** (§3.2.2): a freed fbuf goes on its size's LIFO free list with its pages and
//!   mappings kept, and is reused as it is, without clearing. Uncached paths clear an fbuf on
//!   free (it reads as zeros after) and receivers map and unmap each fbuf per transfer.
//! - **Pageable fbuf memory** (§3.3: "the amount of physical memory allocated to a particular
//!   data path's fbufs is determined by its recent traffic"): a path has a budget of cached
//!   bytes ([`Originator::set_cache_budget`]; none unless set). Past it, a chunk that holds no
//!   live fbuf (none allocated, sent, or lent to a device) is *retired*, the one whose fbufs
//!   were freed least recently first (the cold end of the LIFO lists): its free fbufs leave
//!   the lists (their contents are discarded, as the paper's kernel discards a reclaimed free
//!   fbuf's), the originator unmaps it and closes its memfd, and every receiver is told to do
//!   the same; once no mapping or descriptor is left, the kernel frees its pages. The seal
//!   forbids punching holes, so a chunk is the unit memory goes back in: the cached bytes of a
//!   chunk that still holds a live fbuf stay until that fbuf is freed. A later allocation
//!   that needs the space makes a fresh memfd for it. An uncached path with a budget of zero
//!   gives every chunk back as soon as nothing in it is live (the paper's uncached fbufs,
//!   whose pages go back on free); the parts of an fbuf in chunks still holding live ones are
//!   cleared instead.
//! - **Volatile fbufs** (§3.2.4): the originator keeps write access after a send. On a
//!   non-volatile path the send makes the fbuf read-only in the originator (a write faults)
//!   until every receiver has freed it; a receiver may ask to *secure* a volatile fbuf the same
//!   way.
//!
//! A receiver reads only chunks it was told of: a reference into a chunk not announced to
//! it, or retired, is refused by name ([`FbufError::NoChunk`]), never a fault. A receiver that
//! does not unmap a retired chunk (a hostile one) keeps alive only pages it could already
//! read; an originator that retires a chunk holding an fbuf a receiver holds is refused by
//! name there, and the receiver keeps its mapping until it frees the fbuf.

mod originator;
mod receiver;
mod space;

pub use originator::Originator;
pub use receiver::Receiver;

use zcio_vm::page_size;

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

    /// The chunk at `k` (its address and length, as chunk frames name it).
    pub fn chunk_ref(&self, k: usize) -> FbufRef {
        FbufRef {
            addr: (self.addr + k * self.chunk_bytes) as u64,
            len: self.chunk_bytes as u64,
        }
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
    /// A reference into a chunk this process has no mapping of: never announced to it (yet),
    /// or retired.
    #[error(
        "[{addr:#x}, +{len}) lies in chunk {chunk} of the path, which this process was not given (not announced to it yet, or retired)"
    )]
    NoChunk {
        /// Address.
        addr: u64,
        /// Length.
        len: u64,
        /// The first chunk it lies in that is not known here.
        chunk: usize,
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

/// A path's place, created by its owner (the paper's kernel role): its range of addresses and
/// geometry. Its memory comes in chunks its originator makes as it needs them.
#[derive(Debug)]
pub struct PathMemory {
    info: PathInfo,
}

impl PathMemory {
    /// A new path of `quota_chunks` chunks of `chunk_bytes` (rounded up to pages), at a fresh
    /// address inside the reserved region ([`zcio_vm::reserve`]), where every process of the
    /// path maps it. Where this process cannot reserve the region, the error says what holds
    /// it.
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
        Ok(PathMemory {
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

    /// The path's originator, in this process: [`Originator::new`] on its geometry.
    pub fn originator(&self) -> Result<Originator, FbufError> {
        Originator::new(self.info)
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
