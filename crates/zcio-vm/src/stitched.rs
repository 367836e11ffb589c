//! Shared mappings of several memory files stitched into one range of addresses, each *unit*
//! mapped and unmapped on its own: a data path's chunks (paper 001, §3.3), each a memfd of its
//! own at its place in the path's range, one of them given back (unmapped here, its file closed
//! by its owner, so that the kernel frees its pages) while the others stay.
//!
//! A [`Stitched`] holds its whole range from the start: inside the reserved region
//! ([`crate::reserve`]) it claims the range there, the region's placeholder staying over what
//! no unit maps; elsewhere it maps a placeholder of its own (inaccessible and unbacked, never
//! over an existing mapping). A unit replaces the placeholder (`MAP_FIXED` over this object's
//! own range only, never over another unit or anything else) with parts of one or more files
//! side by side; unmapping a unit puts the placeholder back in one step, so that the range is
//! never free for another mapping of the process to land in.
//!
//! As for [`crate::shared::SharedWords`], nothing here hands out `&[u8]`: the words of a range
//! are handed out as atomics ([`Stitched::words`]), and only where mapped units hold all of
//! it. Units side by side form one *run* (unless the object was made not to join them), and a
//! range must lie in one run. The words borrow the object and unmapping takes it mutably, so
//! no word handed out outlives its unit; a unit with buffers lent to the kernel
//! ([`Stitched::ring_buf`]) is not unmapped until they are given back.

use crate::bufring::{BufferOwner, SharedBuf};
use crate::error::{Result, VmError};
use crate::mapping::MAX_MAPPING;
use crate::page::{RawRange, page_size};
use crate::protect::Access;
use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicU64;

/// A memory file sealed against shrinking (`F_SEAL_SHRINK`), with its length: no mapping of
/// it within that length can ever reach past its end, where a read would fault (`SIGBUS`).
/// Checked once, when it is made, so that mapping parts of it costs no system call more.
#[derive(Debug)]
pub struct SealedFile {
    fd: OwnedFd,
    len: u64,
}

impl SealedFile {
    /// `fd`, refused (and closed) unless it is a file sealed against shrinking
    /// ([`crate::mapping::seal_size`] and [`crate::mapping::seal_future_writes`] seal memory
    /// files so).
    pub fn new(fd: OwnedFd) -> Result<SealedFile> {
        if !crate::mapping::is_sealed_against_shrinking(fd.as_fd()) {
            return Err(VmError::Misuse {
                what: "a file not sealed against shrinking (a mapping of it could reach past its end)",
            });
        }
        let len = rustix::fs::fstat(&fd)
            .map_err(|e| VmError::sys("fstat(sealed file)", e.into()))?
            .st_size as u64;
        Ok(SealedFile { fd, len })
    }

    /// Its length, which never goes down.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// One file's part of a unit: `len` bytes of `file` from `offset` (both whole pages).
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    /// The file.
    pub file: &'a SealedFile,
    /// Where the part starts in the file.
    pub offset: u64,
    /// Its length.
    pub len: usize,
}

#[derive(Debug)]
struct Unit {
    len: usize,
    access: Access,
    /// Buffers of the unit lent to the kernel and not given back.
    lent: usize,
}

/// A range of addresses whose units are shared mappings of memory files, mapped and unmapped
/// one by one (see the module's docs).
pub struct Stitched {
    base: usize,
    len: usize,
    /// Claimed in the reserved region (else covered by a placeholder of its own).
    reserved: bool,
    /// Units side by side form one run.
    join: bool,
    /// Mapped units by offset.
    units: BTreeMap<usize, Unit>,
    /// Runs of mapped units (offset, length), in order.
    runs: Vec<(usize, usize)>,
    /// Ranges whose placeholder could not be put back (the kernel lacked memory for it):
    /// unmapped, and never mapped nor covered again by this object.
    holes: Vec<(usize, usize)>,
    /// Identity, as buffers lent to a provided-buffer ring carry it.
    id: u64,
}

crate::debug_summary!(Stitched, |s| base: format_args!("{:#x}", s.base), len: s.len, units: s.units.len());

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 62);

impl Stitched {
    /// The range `[addr, addr + len)` (whole pages, not at address 0), nothing mapped in it
    /// yet. With `join`, units side by side read as one run; without, each unit is a run of its
    /// own. Refused where the range overlaps a range of the reserved region claimed already, or,
    /// outside the region, anything mapped.
    pub fn new(addr: usize, len: usize, join: bool) -> Result<Stitched> {
        let ps = page_size();
        if len == 0 || len % ps != 0 {
            return Err(VmError::Misaligned {
                what: "stitched range length",
                value: len,
                alignment: ps,
            });
        }
        if len > MAX_MAPPING {
            return Err(VmError::TooLarge {
                what: "stitched range length",
                value: len,
                limit: MAX_MAPPING,
            });
        }
        let placement = |why: &str| VmError::ArenaPlacement {
            addr,
            len,
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, why.to_string()),
        };
        if addr == 0 || addr % ps != 0 {
            return Err(placement("not a page-aligned address above the null page"));
        }
        if addr.checked_add(len).is_none() {
            return Err(placement("the range wraps around the address space"));
        }
        let reserved = crate::reserve::contains(addr, len);
        if reserved {
            crate::reserve::region()?.claim(addr, len)?;
        } else {
            crate::reserve::placeholder(addr, len, false)
                .map_err(|source| VmError::ArenaPlacement { addr, len, source })?;
        }
        Ok(Stitched {
            base: addr,
            len,
            reserved,
            join,
            units: BTreeMap::new(),
            runs: Vec::new(),
            holes: Vec::new(),
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    /// First address.
    pub fn addr(&self) -> usize {
        self.base
    }

    /// Length of the whole range.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: the range holds a page at least.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The units mapped now (offset, length), in order.
    pub fn units(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.units.iter().map(|(o, u)| (*o, u.len))
    }

    /// Map a unit at `offset`: `parts` side by side, with `access`. Refused (nothing mapped)
    /// where it leaves the range, overlaps a unit, a part is not whole pages or lies past the
    /// end of its file (a read there would fault), or the kernel refuses the access (write
    /// access to a file opened read-only or sealed against writes). No system call but the
    /// mappings: the files' lengths were checked when they were sealed ([`SealedFile`]).
    pub fn map(&mut self, offset: usize, parts: &[Part<'_>], access: Access) -> Result<()> {
        let total = self.check_unit(offset, parts)?;
        let mut at = offset;
        for p in parts {
            if let Err(e) = self.map_part(at, p, access) {
                // What was mapped of the unit goes; the placeholder comes back over it all.
                self.cover(offset, at + p.len - offset);
                return Err(e);
            }
            at += p.len;
        }
        self.units.insert(
            offset,
            Unit {
                len: total,
                access,
                lent: 0,
            },
        );
        self.rebuild_runs();
        Ok(())
    }

    /// The unit's length, if `parts` can be mapped at `offset` (see [`Stitched::map`]).
    fn check_unit(&self, offset: usize, parts: &[Part<'_>]) -> Result<usize> {
        let ps = page_size();
        let mut total = 0usize;
        for p in parts {
            if p.len == 0 || p.len % ps != 0 || p.offset % ps as u64 != 0 {
                return Err(VmError::Misaligned {
                    what: "part of a stitched unit",
                    value: if p.len % ps != 0 {
                        p.len
                    } else {
                        p.offset as usize
                    },
                    alignment: ps,
                });
            }
            let size = p.file.len;
            if p.offset.checked_add(p.len as u64).is_none_or(|e| e > size) {
                return Err(VmError::OutOfBounds {
                    what: "part of a stitched unit in its file",
                    start: p.offset as usize,
                    end: p.offset.saturating_add(p.len as u64) as usize,
                    bound_start: 0,
                    bound_end: size as usize,
                });
            }
            total = total.checked_add(p.len).ok_or(VmError::TooLarge {
                what: "stitched unit",
                value: usize::MAX,
                limit: self.len,
            })?;
        }
        let end = offset.checked_add(total);
        if total == 0 || offset % ps != 0 || end.is_none_or(|e| e > self.len) {
            return Err(VmError::OutOfBounds {
                what: "stitched unit",
                start: self.base.saturating_add(offset),
                end: self
                    .base
                    .saturating_add(end.unwrap_or(usize::MAX - self.base)),
                bound_start: self.base,
                bound_end: self.base + self.len,
            });
        }
        let end = offset + total;
        let overlaps = |a: usize, l: usize| a < end && offset < a + l;
        let before = self.units.range(..end).next_back();
        if before.is_some_and(|(a, u)| overlaps(*a, u.len))
            || self.holes.iter().any(|(a, l)| overlaps(*a, *l))
        {
            return Err(VmError::Misuse {
                what: "a stitched unit over a unit mapped already (or a range lost to a failed unmapping)",
            });
        }
        Ok(total)
    }

    /// Map part `p` at `offset` over this object's placeholder.
    fn map_part(&self, offset: usize, p: &Part<'_>, access: Access) -> Result<()> {
        let addr = self.base + offset;
        // SAFETY: [addr, addr + p.len) lies in this object's range (checked) and under no unit
        // (checked), so MAP_FIXED replaces only this object's own placeholder, which nothing
        // reads or writes; the file is at least as long as the part (checked) and sealed
        // against shrinking, so no read of the mapping ever lies past its end.
        let m = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                p.len,
                access.prot(),
                libc::MAP_SHARED | libc::MAP_FIXED,
                p.file.fd.as_raw_fd(),
                p.offset as libc::off_t,
            )
        };
        crate::protect::layout_changed();
        if m == libc::MAP_FAILED {
            return Err(VmError::ArenaPlacement {
                addr,
                len: p.len,
                source: std::io::Error::last_os_error(),
            });
        }
        debug_assert_eq!(m as usize, addr, "MAP_FIXED maps where asked");
        Ok(())
    }

    /// Put the placeholder back over `[offset, offset + len)` (nothing there is in use); where
    /// the kernel cannot, unmap it and keep it as a hole.
    fn cover(&mut self, offset: usize, len: usize) {
        if crate::reserve::placeholder(self.base + offset, len, true).is_err() {
            // SAFETY: the range lies in this object's range and nothing there is in use (the
            // caller is done with it); a hole is never mapped nor covered again by this object.
            unsafe { libc::munmap((self.base + offset) as *mut libc::c_void, len) };
            crate::protect::layout_changed();
            self.holes.push((offset, len));
        }
    }

    /// Unmap the unit at `offset` (the placeholder back over it). Refused where no unit starts
    /// there, or where buffers of it are lent to the kernel.
    pub fn unmap(&mut self, offset: usize) -> Result<()> {
        match self.units.get(&offset) {
            None => Err(VmError::Misuse {
                what: "unmapping a stitched unit that is not mapped",
            }),
            Some(u) if u.lent > 0 => Err(VmError::Misuse {
                what: "unmapping a stitched unit with buffers lent to the kernel",
            }),
            Some(u) => {
                let len = u.len;
                self.units.remove(&offset);
                self.cover(offset, len);
                self.rebuild_runs();
                Ok(())
            }
        }
    }

    fn rebuild_runs(&mut self) {
        self.runs.clear();
        for (&off, u) in &self.units {
            match self.runs.last_mut() {
                Some(r) if self.join && r.0 + r.1 == off => r.1 += u.len,
                _ => self.runs.push((off, u.len)),
            }
        }
    }

    /// The run that holds all of `[offset, offset + len)`.
    #[inline]
    fn run_of(&self, offset: usize, len: usize) -> Option<(usize, usize)> {
        let i = self.runs.partition_point(|r| r.0 + r.1 <= offset);
        let r = *self.runs.get(i)?;
        (r.0 <= offset && offset.checked_add(len)? <= r.0 + r.1).then_some(r)
    }

    /// Whether `[offset, offset + len)` lies in one run of mapped units.
    pub fn is_mapped(&self, offset: usize, len: usize) -> bool {
        self.run_of(offset, len).is_some()
    }

    /// The 64-bit words of `[offset, offset + len)`, or `None` unless both are 8-aligned and
    /// the range lies in one run of mapped units. Other processes may store to them at any
    /// time; a store through them faults where the range is read-only here.
    #[inline]
    pub fn words(&self, offset: usize, len: usize) -> Option<&[AtomicU64]> {
        if (offset | len) % 8 != 0 {
            return None;
        }
        self.run_of(offset, len)?;
        // SAFETY: the range is 8-aligned and lies in mapped units (checked), which stay mapped
        // while `self` is borrowed (unmapping takes `&mut self`); AtomicU64 has no invalid bit
        // patterns and is made for concurrent modification, and nothing here reaches these
        // bytes any other way.
        Some(unsafe { std::slice::from_raw_parts((self.base + offset) as *const _, len / 8) })
    }

    /// The run of mapped units that holds the byte at `offset`: its offset and its words.
    #[inline]
    pub fn span(&self, offset: usize) -> Option<(usize, &[AtomicU64])> {
        let (o, l) = self.run_of(offset, 1)?;
        Some((o, self.words(o, l)?))
    }

    /// Change the access to the page-aligned range `[offset, offset + len)`, which mapped units
    /// must hold all of. More than a unit's file allows (write access to a file opened
    /// read-only) fails with the kernel's refusal.
    pub fn set_access(&self, offset: usize, len: usize, access: Access) -> Result<()> {
        let ps = page_size();
        if offset % ps != 0 || len % ps != 0 || self.run_of(offset, len).is_none() {
            return Err(VmError::OutOfBounds {
                what: "stitched range to protect (whole pages of mapped units)",
                start: self.base.saturating_add(offset),
                end: self.base.saturating_add(offset).saturating_add(len),
                bound_start: self.base,
                bound_end: self.base + self.len,
            });
        }
        if len == 0 {
            return Ok(());
        }
        let r = RawRange {
            addr: self.base + offset,
            len,
        };
        // SAFETY: the range lies in units this object maps; nothing hands out references into
        // them but atomic words, so narrowing the access can only make a later store fault,
        // which is the enforcement asked for.
        unsafe { crate::protect::set_access(r, access) }
    }

    /// Give the pages of `[offset, offset + len)` back to the kernel (`MADV_REMOVE`: they read
    /// as zeros after, in every mapping of the files). Refused by the kernel where a file is
    /// sealed against writes ([`crate::mapping::seal_future_writes`]).
    pub fn discard(&self, offset: usize, len: usize) -> Result<()> {
        let ps = page_size();
        if offset % ps != 0 || len % ps != 0 || self.run_of(offset, len).is_none() {
            return Err(VmError::OutOfBounds {
                what: "stitched range to discard (whole pages of mapped units)",
                start: self.base.saturating_add(offset),
                end: self.base.saturating_add(offset).saturating_add(len),
                bound_start: self.base,
                bound_end: self.base + self.len,
            });
        }
        // SAFETY: the range lies in mapped units of this object (checked); MADV_REMOVE frees
        // the files' pages, which then read as zeros: no reference of this process points at
        // anything but atomic words that may change at any time anyway.
        let rc = unsafe {
            libc::madvise(
                (self.base + offset) as *mut libc::c_void,
                len,
                libc::MADV_REMOVE,
            )
        };
        if rc != 0 {
            return Err(VmError::last_os("madvise(MADV_REMOVE)"));
        }
        Ok(())
    }

    /// A buffer of `len` bytes at `offset` for the kernel to fill through a provided-buffer
    /// ring ([`crate::bufring::ProvidedRing`]): refused unless mapped units writable here hold
    /// all of it. Its units stay mapped until it is given back ([`Stitched::give_back`]).
    pub fn ring_buf(&mut self, offset: usize, len: usize) -> Result<SharedBuf> {
        if len == 0 || self.run_of(offset, len).is_none() {
            return Err(VmError::Misuse {
                what: "a ring buffer outside the stitched range's mapped units",
            });
        }
        let end = offset + len;
        let units = || {
            self.units
                .range(..end)
                .rev()
                .take_while(|(o, u)| *o + u.len > offset)
        };
        if units().any(|(_, u)| u.access != Access::ReadWrite) {
            return Err(VmError::Misuse {
                what: "a ring buffer in a unit this process may not write",
            });
        }
        let at: Vec<usize> = units().map(|(o, _)| *o).collect();
        for o in at {
            self.units.get_mut(&o).expect("just found").lent += 1;
        }
        Ok(SharedBuf {
            owner: self.id,
            offset,
            len,
        })
    }

    /// A buffer of [`Stitched::ring_buf`] back from the kernel: its units may be unmapped
    /// again. A buffer of another owner is refused.
    pub fn give_back(&mut self, buf: SharedBuf) -> Result<()> {
        if buf.owner != self.id {
            return Err(VmError::Misuse {
                what: "giving back a buffer of another owner than this stitched range",
            });
        }
        let (offset, end) = (buf.offset, buf.offset + buf.len);
        for (_, u) in self
            .units
            .range_mut(..end)
            .rev()
            .take_while(|(o, u)| **o + u.len > offset)
        {
            u.lent = u.lent.saturating_sub(1);
        }
        Ok(())
    }
}

// SAFETY: a `SharedBuf` of a `Stitched` is made only by `Stitched::ring_buf`, which checks that
// it lies in mapped units this process may write and counts it as lent in each; a unit with a
// buffer lent is not unmapped (`Stitched::unmap` refuses) until the buffer is given back. The
// memory is shared: safe code reads and writes it only word by word through atomics, which
// another writer (another process, or the kernel) may race with. The owner's identity is
// unique to the object, so a buffer never passes for one of another.
unsafe impl BufferOwner for Stitched {
    type Buf = SharedBuf;
    const OTHER_OWNER: &'static str = "a receive into another stitched range than the ring's";

    fn owner_id(&self) -> u64 {
        self.id
    }

    fn buffer_range(&self, buf: &SharedBuf) -> Result<RawRange> {
        if buf.owner != self.id {
            return Err(VmError::Misuse {
                what: "a buffer of another stitched range than the ring's",
            });
        }
        Ok(RawRange {
            addr: self.base + buf.offset,
            len: buf.len,
        })
    }
}

impl Drop for Stitched {
    fn drop(&mut self) {
        if self.holes.is_empty() {
            if self.reserved {
                if let Ok(r) = crate::reserve::region() {
                    // The placeholder goes back over the whole range in one step.
                    r.release(self.base, self.len, true);
                }
            } else {
                // SAFETY: the range is this object's own (its placeholder and units), and
                // nothing borrows it once it is dropped.
                unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
                crate::protect::layout_changed();
            }
            return;
        }
        // Holes may hold someone else's mapping by now: cover (or unmap) only the rest, and keep
        // a reserved range claimed, so that nothing of zcio ever maps over the holes.
        self.holes.sort_unstable();
        let mut at = 0;
        let holes = std::mem::take(&mut self.holes);
        for (h, l) in holes.iter().copied().chain([(self.len, 0)]) {
            if h > at {
                let (addr, len) = (self.base + at, h - at);
                if !self.reserved || crate::reserve::placeholder(addr, len, true).is_err() {
                    // SAFETY: a part of this object's range outside the holes: its own.
                    unsafe { libc::munmap(addr as *mut libc::c_void, len) };
                    crate::protect::layout_changed();
                }
            }
            at = at.max(h + l);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::memfd;
    use std::sync::atomic::Ordering;

    /// A memory file of `len` bytes, its size sealed.
    fn sealed(len: usize) -> SealedFile {
        let fd = memfd("stitched-test", len).unwrap();
        crate::mapping::seal_size(fd.as_fd()).unwrap();
        SealedFile::new(fd).unwrap()
    }

    fn place(len: usize, join: bool) -> Stitched {
        for _ in 0..8 {
            let addr = crate::reserve::region().unwrap().random_address(len);
            if let Ok(s) = Stitched::new(addr, len, join) {
                return s;
            }
        }
        panic!("no free range");
    }

    #[test]
    fn units_map_read_and_unmap_one_by_one() {
        let ps = page_size();
        let mut s = place(8 * ps, true);
        let files: Vec<_> = (0..3).map(|_| sealed(2 * ps)).collect();
        let part = |i: usize| Part {
            file: &files[i],
            offset: 0,
            len: 2 * ps,
        };
        assert!(s.words(0, 8).is_none(), "nothing mapped yet");
        s.map(0, &[part(0)], Access::ReadWrite).unwrap();
        s.map(2 * ps, &[part(1)], Access::ReadWrite).unwrap();
        s.map(6 * ps, &[part(2)], Access::ReadWrite).unwrap();
        // Over a unit, past the end, misaligned, past the end of its file: refused.
        assert!(s.map(ps, &[part(2)], Access::ReadWrite).is_err());
        assert!(s.map(7 * ps, &[part(2)], Access::ReadWrite).is_err());
        assert!(s.map(4 * ps + 8, &[part(2)], Access::ReadWrite).is_err());
        let long = Part {
            len: 4 * ps,
            ..part(2)
        };
        assert!(s.map(4 * ps, &[long], Access::ReadWrite).is_err());
        // Units side by side are one run; a range across the gap is refused.
        let w = s.words(2 * ps - 8, 16).unwrap();
        w[0].store(1, Ordering::Relaxed);
        w[1].store(2, Ordering::Relaxed);
        assert!(s.words(4 * ps - 8, 16).is_none());
        assert_eq!(s.span(8).map(|(o, w)| (o, w.len() * 8)), Some((0, 4 * ps)));
        assert_eq!(s.span(6 * ps).map(|(o, _)| o), Some(6 * ps));
        assert!(s.span(5 * ps).is_none());
        // Unmapped, the unit reads no more; mapped again (a fresh file), it reads its own bytes.
        s.unmap(2 * ps).unwrap();
        assert!(s.words(2 * ps, 8).is_none() && s.words(2 * ps - 8, 8).is_some());
        assert!(s.unmap(2 * ps).is_err());
        let fresh = sealed(2 * ps);
        let p = Part {
            file: &fresh,
            offset: 0,
            len: 2 * ps,
        };
        s.map(2 * ps, &[p], Access::ReadOnly).unwrap();
        assert_eq!(s.words(2 * ps, 8).unwrap()[0].load(Ordering::Relaxed), 0);
        assert_eq!(
            s.words(2 * ps - 8, 8).unwrap()[0].load(Ordering::Relaxed),
            1
        );
        // Write access to a read-only unit, or a ring buffer in it, is refused.
        assert!(s.set_access(2 * ps, ps, Access::ReadWrite).is_ok());
        assert!(s.ring_buf(2 * ps, 64).is_err());
        assert_eq!(s.units().count(), 3);
    }

    #[test]
    fn a_unit_of_several_files_and_units_kept_apart() {
        let ps = page_size();
        let mut s = place(4 * ps, false);
        let (a, b) = (memfd("stitched-a", 4 * ps).unwrap(), sealed(4 * ps));
        // Not sealed against shrinking: refused.
        assert!(SealedFile::new(a).is_err());
        let a = sealed(4 * ps);
        let parts = [
            Part {
                file: &a,
                offset: 3 * ps as u64,
                len: ps,
            },
            Part {
                file: &b,
                offset: 0,
                len: ps,
            },
        ];
        s.map(0, &parts, Access::ReadWrite).unwrap();
        s.map(
            2 * ps,
            &[Part {
                file: &b,
                offset: ps as u64,
                len: ps,
            }],
            Access::ReadWrite,
        )
        .unwrap();
        // One unit across two files reads as one run; units side by side do not join.
        let w = s.words(ps - 8, 16).unwrap();
        w[0].store(7, Ordering::Relaxed);
        w[1].store(8, Ordering::Relaxed);
        assert!(s.words(2 * ps - 8, 16).is_none());
        // The stores landed in the files.
        let other =
            crate::shared::SharedWords::map_anywhere(b.fd(), 0, ps, Access::ReadOnly).unwrap();
        assert_eq!(other.load(0), 8);
        // A buffer lent keeps its unit mapped until it is given back.
        let buf = s.ring_buf(2 * ps, 100).unwrap();
        assert!(s.unmap(2 * ps).is_err());
        s.give_back(buf).unwrap();
        s.unmap(2 * ps).unwrap();
        s.unmap(0).unwrap();
        assert_eq!(s.units().count(), 0);
    }

    #[test]
    fn outside_the_region_a_placeholder_of_its_own_and_overlaps_refused() {
        let ps = page_size();
        let addr = crate::arena::random_address(4 * ps);
        let mut s = Stitched::new(addr, 4 * ps, true).unwrap();
        assert!(Stitched::new(addr + ps, ps, true).is_err(), "overlaps");
        let f = sealed(ps);
        let p = Part {
            file: &f,
            offset: 0,
            len: ps,
        };
        s.map(ps, &[p], Access::ReadWrite).unwrap();
        s.words(ps, 8).unwrap()[0].store(3, Ordering::Relaxed);
        drop(s);
        // The range is free again.
        let again = Stitched::new(addr, 4 * ps, true).unwrap();
        assert!(Stitched::new(0, ps, true).is_err());
        drop(again);
    }
}
