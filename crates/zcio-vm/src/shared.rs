//! Shared memory reached only word by word: a memfd mapped at a fixed address, which other
//! processes may write at any time (the fbuf region's pages).
//!
//! As for the arena, nothing here hands out `&[u8]`: words are loaded and stored atomically, so
//! a concurrent writer elsewhere yields a mixture of old and new words, never undefined
//! behaviour. Access can be narrowed per range ([`SharedWords::set_access`]); a store to a range
//! that is read-only faults, which is the enforcement fbufs ask for (a non-volatile fbuf's
//! originator, a receiver).

use crate::error::{Result, VmError};
use crate::mapping::Mapping;
use crate::page::{RawRange, page_size};
use crate::protect::Access;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};

/// A shared mapping of a memfd at a fixed address, accessed word by word.
#[derive(Debug)]
pub struct SharedWords {
    map: Mapping,
    access: Access,
    /// This mapping's identity in the process (buffers handed to a provided-buffer ring
    /// carry it).
    id: u64,
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

impl SharedWords {
    /// Map `len` bytes of `fd` from `offset` at exactly `addr` with `access` (failing if the
    /// address is taken here, or if the descriptor does not allow the access).
    pub fn map(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        addr: usize,
        access: Access,
    ) -> Result<SharedWords> {
        let map = Mapping::shared_fd_access(fd, offset, len, Some(addr), access)?;
        Ok(SharedWords {
            map,
            access,
            id: next_id(),
        })
    }

    /// Map `len` bytes of `fd` from `offset` with `access` wherever the kernel places them: for
    /// shared memory whose address means nothing to the other processes (offsets do).
    pub fn map_anywhere(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        access: Access,
    ) -> Result<SharedWords> {
        let map = Mapping::shared_fd_access(fd, offset, len, None, access)?;
        Ok(SharedWords {
            map,
            access,
            id: next_id(),
        })
    }

    /// Its identity in this process.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// A buffer of `len` bytes at `offset` for the kernel to fill through a provided-buffer
    /// ring ([`crate::bufring::ProvidedRing`]): refused outside the mapping, or where this
    /// process may not write it.
    pub fn ring_buf(&self, offset: usize, len: usize) -> Result<crate::bufring::SharedBuf> {
        if len == 0 || offset.checked_add(len).is_none_or(|e| e > self.len()) {
            return Err(crate::VmError::Misuse {
                what: "a ring buffer outside the shared mapping",
            });
        }
        if self.access != Access::ReadWrite {
            return Err(crate::VmError::Misuse {
                what: "a ring buffer in a mapping this process may not write",
            });
        }
        Ok(crate::bufring::SharedBuf {
            owner: self.id,
            offset,
            len,
        })
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.map.addr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the mapping is empty (never: mappings hold at least a page).
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The access the whole mapping was made with.
    pub fn access(&self) -> Access {
        self.access
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: nothing here hands out byte slices of the mapping: its words are reached only
        // atomically.
        let w = unsafe { self.map.atomic_words_in("shared word", offset, 8) };
        &w[0]
    }

    /// The words of `[offset, offset + len)` (8-aligned, in bounds: a bad range is a bug of the
    /// caller and panics), for loops over many words without a call per word. Stores through
    /// them fault where the range is read-only, exactly as [`SharedWords::store`] does.
    pub fn words(&self, offset: usize, len: usize) -> &[AtomicU64] {
        // SAFETY: as in `word`, the mapping's words are reached only atomically.
        unsafe { self.map.atomic_words_in("shared words", offset, len) }
    }

    /// Load the word at byte `offset` (8-aligned, in bounds: a bad offset is a bug of the
    /// caller and panics).
    pub fn load(&self, offset: usize) -> u64 {
        self.word(offset).load(Ordering::Acquire)
    }

    /// Store the word at byte `offset`. A store to a range made read-only faults (`SIGSEGV`):
    /// that is how read-only fbufs are enforced.
    pub fn store(&self, offset: usize, value: u64) {
        self.word(offset).store(value, Ordering::Release)
    }

    /// Change the access to the page-aligned range `[offset, offset + len)` of this mapping.
    /// Asking for more than the descriptor allows (write access to a read-only descriptor)
    /// fails with the kernel's refusal.
    pub fn set_access(&self, offset: usize, len: usize, access: Access) -> Result<()> {
        let ps = page_size();
        if offset % ps != 0
            || len % ps != 0
            || offset.checked_add(len).is_none_or(|e| e > self.len())
        {
            return Err(VmError::OutOfBounds {
                what: "shared range to protect",
                start: offset,
                end: offset.saturating_add(len),
                bound_start: 0,
                bound_end: self.len(),
            });
        }
        if len == 0 {
            return Ok(());
        }
        let r = RawRange {
            addr: self.addr() + offset,
            len,
        };
        // SAFETY: the range lies in this mapping, which we own; no Rust reference into it is
        // handed out (all access goes through `load`/`store`), so narrowing the access can only
        // make a later store fault, which is the intended enforcement.
        unsafe { crate::protect::set_access(r, access) }
    }

    /// Clear `[offset, offset + len)` (8-byte aligned) to zeros with word stores: the clearing
    /// of a memory file sealed against hole punching ([`crate::mapping::seal_future_writes`]),
    /// whose pages stay allocated.
    pub fn clear(&self, offset: usize, len: usize) {
        for w in self.words(offset, len) {
            w.store(0, Ordering::Relaxed);
        }
    }

    /// Give the pages of `[offset, offset + len)` back to the kernel (`MADV_REMOVE`: the memfd's
    /// pages are freed, and read as zeros afterwards): the clearing of uncached fbufs.
    pub fn discard(&self, offset: usize, len: usize) -> Result<()> {
        let r = RawRange {
            addr: self.addr() + offset,
            len,
        };
        self.map.check_inside(&r)?;
        self.map
            .advise_range(r, libc::MADV_REMOVE, "madvise(MADV_REMOVE)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::{memfd, reopen_read_only};
    use std::os::fd::AsFd;

    #[test]
    fn words_round_trip_and_a_read_only_descriptor_stays_read_only() {
        let fd = memfd("zcio-shared-test", 1 << 16).unwrap();
        let addr = crate::arena::random_address(1 << 16);
        let w = SharedWords::map(fd.as_fd(), 0, 1 << 16, addr, Access::ReadWrite).unwrap();
        w.store(8, 42);
        assert_eq!(w.load(8), 42);
        // The same file, read-only, elsewhere: sees the word, can never be made writable.
        let ro = reopen_read_only(fd.as_fd()).unwrap();
        let addr2 = crate::arena::random_address(1 << 16);
        let r = SharedWords::map(ro.as_fd(), 0, 1 << 16, addr2, Access::ReadOnly).unwrap();
        assert_eq!(r.load(8), 42);
        assert!(r.set_access(0, page_size(), Access::ReadWrite).is_err());
        assert!(
            SharedWords::map(ro.as_fd(), 0, 1 << 16, addr2 + (1 << 20), Access::ReadWrite).is_err()
        );
        // Protection of part of a writable mapping, and back.
        w.set_access(0, page_size(), Access::ReadOnly).unwrap();
        w.set_access(0, page_size(), Access::ReadWrite).unwrap();
        w.store(0, 7);
        assert!(w.set_access(1, page_size(), Access::ReadOnly).is_err());
        assert!(w.set_access(0, 2 << 16, Access::ReadOnly).is_err());
        // Discarded pages read as zeros, here and through the other mapping.
        w.discard(0, page_size()).unwrap();
        assert_eq!((w.load(0), w.load(8), r.load(8)), (0, 0, 0));
    }
}
