//! Anonymous and shared mappings owned by zcio, unmapped on drop.

use crate::error::{Result, VmError};
use crate::page::{HUGE_PAGE_SIZE, RawRange, align_up, page_size};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::ptr::NonNull;

/// How a [`Mapping`] is backed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// Private anonymous memory (movable with `UFFDIO_MOVE`).
    PrivateAnonymous,
    /// A shared mapping of a file descriptor (a memfd), at a given file offset.
    Shared,
}

/// Options for a new anonymous mapping.
#[derive(Debug, Clone, Copy, Default)]
pub struct MapOptions {
    /// Fault every page in now (`MAP_POPULATE`), so later first touches cost nothing.
    pub populate: bool,
    /// Align the start to 2 MiB and ask for transparent huge pages (`MADV_HUGEPAGE`; refused
    /// instead where `$ZCIO_VM_DISABLE` holds `huge`).
    pub huge: bool,
    /// Refuse transparent huge pages (`MADV_NOHUGEPAGE`), so 4 KiB moves never split a huge page.
    pub no_huge: bool,
}

impl MapOptions {
    /// Every page faulted in now, the kernel choosing the page size.
    pub const POPULATED: MapOptions = MapOptions::of(true, false, false);
    /// Aligned to 2 MiB, on transparent huge pages where the kernel gives them, faulted in as
    /// touched.
    pub const HUGE: MapOptions = MapOptions::of(false, true, false);
    /// In 4 KiB pages only, faulted in as touched.
    pub const NO_HUGE: MapOptions = MapOptions::of(false, false, true);
    /// Every page faulted in now, in 4 KiB pages only: what measurements of 4 KiB page
    /// operations map.
    pub const POPULATED_4K: MapOptions = MapOptions::of(true, false, true);
    /// Every page faulted in now, on transparent huge pages where the kernel gives them: what
    /// operations on 2 MiB pages map.
    pub const POPULATED_2M: MapOptions = MapOptions::of(true, true, false);

    /// The options of the constants above, in the order of the fields.
    const fn of(populate: bool, huge: bool, no_huge: bool) -> MapOptions {
        MapOptions {
            populate,
            huge,
            no_huge,
        }
    }
}

/// A mapping this process owns; unmapped when dropped.
///
/// Its bytes may be changed by the kernel (input into it, pages moved into it) only through
/// methods that take `&mut self`, so `as_slice` is sound.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
    /// The mmap'ed span to release (may be larger than `len` because of alignment slack being kept).
    map_start: usize,
    map_len: usize,
    /// Inside the reserved region ([`crate::reserve`]): unmapping puts the placeholder back.
    reserved: bool,
}

// SAFETY: a Mapping is an owned region of memory like a Box<[u8]>; moving it between threads is fine.
unsafe impl Send for Mapping {}
// SAFETY: shared access only reads through `&self` (`as_slice`) and the kernel-side changes need `&mut self`.
unsafe impl Sync for Mapping {}

crate::debug_summary!(Mapping, |s| range: s.range(), backing: s.backing);

/// Largest single mapping zcio creates: 64 GiB. Anything larger is a caller error, not a request.
pub const MAX_MAPPING: usize = 64 << 30;

/// `len` bytes rounded up to whole pages, for the mapping or memory file `what` names: refused
/// when empty, or when the rounding overflows.
pub(crate) fn page_rounded(len: usize, what: &'static str) -> Result<usize> {
    if len == 0 {
        return Err(VmError::Empty { what });
    }
    align_up(len, page_size()).ok_or(VmError::TooLarge {
        what,
        value: len,
        limit: MAX_MAPPING,
    })
}

impl Mapping {
    /// A new private anonymous mapping of `len` bytes (rounded up to whole pages).
    pub fn anonymous(len: usize, opts: MapOptions) -> Result<Mapping> {
        if len == 0 {
            return Err(VmError::Empty {
                what: "mapping length",
            });
        }
        if len > MAX_MAPPING {
            return Err(VmError::TooLarge {
                what: "mapping length",
                value: len,
                limit: MAX_MAPPING,
            });
        }
        let len = align_up(len, page_size()).expect("bounded above");
        let align = if opts.huge {
            HUGE_PAGE_SIZE
        } else {
            page_size()
        };
        let map_len = len + align - page_size();
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        if opts.populate && !opts.huge {
            flags |= libc::MAP_POPULATE;
        }
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        crate::protect::layout_changed();
        if p == libc::MAP_FAILED {
            return Err(VmError::last_os("mmap(anonymous)"));
        }
        let map_start = p as usize;
        let start = align_up(map_start, align).expect("mapped address is in range");
        // SAFETY: the mapping was just created and nothing references it.
        unsafe { trim_room(map_start, map_len, start, len) };
        let m = Mapping {
            ptr: NonNull::new(start as *mut u8).expect("mmap never returns null"),
            len,
            backing: Backing::PrivateAnonymous,
            map_start: start,
            map_len: len,
            reserved: false,
        };
        if opts.huge && crate::huge::disabled_by_config() {
            // As where THP is off: aligned, but in 4 KiB pages.
            m.advise(libc::MADV_NOHUGEPAGE, "madvise(MADV_NOHUGEPAGE)")?;
            if opts.populate {
                m.advise(libc::MADV_POPULATE_WRITE, "madvise(MADV_POPULATE_WRITE)")?;
            }
        } else if opts.huge {
            m.advise(libc::MADV_HUGEPAGE, "madvise(MADV_HUGEPAGE)")?;
            if opts.populate {
                m.advise(libc::MADV_POPULATE_WRITE, "madvise(MADV_POPULATE_WRITE)")?;
            }
        } else if opts.no_huge {
            m.advise(libc::MADV_NOHUGEPAGE, "madvise(MADV_NOHUGEPAGE)")?;
        }
        Ok(m)
    }

    /// Map `len` bytes of `fd` at `offset`, shared, at exactly `addr` (failing rather than
    /// replacing anything already there), or anywhere if `addr` is `None`.
    pub fn shared_fd(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        addr: Option<usize>,
    ) -> Result<Mapping> {
        Self::shared_fd_access(fd, offset, len, addr, crate::protect::Access::ReadWrite)
    }

    /// As [`Mapping::shared_fd`], with the given access. A mapping of a descriptor opened
    /// read-only (see [`reopen_read_only`]) can only be mapped, and ever made, readable: the
    /// kernel refuses write access to it.
    pub fn shared_fd_access(
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        addr: Option<usize>,
        access: crate::protect::Access,
    ) -> Result<Mapping> {
        let len = page_rounded(len, "mapping length")?;
        if addr == Some(0) {
            // A privileged process may be given the null page (below `mmap_min_addr`), and
            // no mapping here may start at a null pointer: an address a peer chose is refused.
            return Err(VmError::ArenaPlacement {
                addr: 0,
                len,
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "address 0 is the null page",
                ),
            });
        }
        let mut flags = libc::MAP_SHARED;
        // Inside the reserved region, the range is claimed from this process's reservation
        // and the mapping replaces the placeholder there; elsewhere nothing is replaced.
        let reserved = match addr {
            Some(a) if crate::reserve::contains(a, len) => {
                crate::reserve::region()?.claim(a, len)?;
                flags |= libc::MAP_FIXED;
                true
            }
            Some(_) => {
                flags |= libc::MAP_FIXED_NOREPLACE;
                false
            }
            None => false,
        };
        let want = addr.unwrap_or(0);
        // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping; MAP_FIXED replaces
        // only this process's placeholder over a range of the reserved region just claimed
        // (no other mapping of the region holds it); without an address the kernel picks a
        // free one.
        let p = unsafe {
            libc::mmap(
                want as *mut libc::c_void,
                len,
                access.prot(),
                flags,
                fd.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        crate::protect::layout_changed();
        if p == libc::MAP_FAILED {
            let source = std::io::Error::last_os_error();
            if reserved {
                // The placeholder is still there: only the claim goes.
                crate::reserve::region()?.release(want, len, false);
            }
            return Err(match addr {
                Some(a) => VmError::ArenaPlacement {
                    addr: a,
                    len,
                    source,
                },
                None => VmError::sys("mmap(shared)", source),
            });
        }
        if let Some(a) = addr
            && p as usize != a
        {
            // Old kernels ignore MAP_FIXED_NOREPLACE and treat the address as a hint.
            // SAFETY: p is the mapping we just created.
            unsafe { libc::munmap(p, len) };
            crate::protect::layout_changed();
            return Err(VmError::ArenaPlacement {
                addr: a,
                len,
                source: std::io::Error::from_raw_os_error(libc::EEXIST),
            });
        }
        Ok(Mapping {
            ptr: NonNull::new(p as *mut u8).expect("mmap never returns null"),
            len,
            backing: Backing::Shared,
            map_start: p as usize,
            map_len: len,
            reserved,
        })
    }

    /// Map the first `len` bytes of `fd`, shared, with the given access, at an address of the
    /// kernel's choosing aligned to 2 MiB: a file held in 2 MiB pages is then mapped a
    /// page-table entry (PMD) per 2 MiB, and touching it faults once per 2 MiB, not once per
    /// 4 KiB.
    pub fn shared_fd_huge_aligned(
        fd: BorrowedFd<'_>,
        len: usize,
        access: crate::protect::Access,
    ) -> Result<Mapping> {
        Mapping::fd_huge_aligned(fd, len, access, libc::MAP_SHARED)
    }

    /// [`Mapping::shared_fd_huge_aligned`], but private: what this process writes becomes
    /// its own copy of the page, and the file never changes (a sealed file's view,
    /// [`crate::sealed::SealedFile::view`]). Its bytes are handed out by the owner of the file's
    /// guarantee, not by [`Mapping::as_slice`].
    pub(crate) fn private_fd_huge_aligned(
        fd: BorrowedFd<'_>,
        len: usize,
        access: crate::protect::Access,
    ) -> Result<Mapping> {
        Mapping::fd_huge_aligned(fd, len, access, libc::MAP_PRIVATE)
    }

    fn fd_huge_aligned(
        fd: BorrowedFd<'_>,
        len: usize,
        access: crate::protect::Access,
        kind: libc::c_int,
    ) -> Result<Mapping> {
        let len = page_rounded(len, "mapping length")?;
        let room = len
            .checked_add(HUGE_PAGE_SIZE - page_size())
            .ok_or(VmError::TooLarge {
                what: "mapping length",
                value: len,
                limit: MAX_MAPPING,
            })?;
        // SAFETY: a fresh inaccessible anonymous mapping at an address of the kernel's choosing
        // touches no existing memory; it only holds the room for the aligned mapping below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                room,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        crate::protect::layout_changed();
        if p == libc::MAP_FAILED {
            return Err(VmError::last_os("mmap(room for an aligned mapping)"));
        }
        let room_start = p as usize;
        let start = align_up(room_start, HUGE_PAGE_SIZE).expect("mapped address is in range");
        // SAFETY: [start, start + len) lies inside the room just mapped, which nothing else
        // references: MAP_FIXED replaces only that placeholder.
        let q = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                len,
                access.prot(),
                kind | libc::MAP_FIXED,
                fd.as_raw_fd(),
                0,
            )
        };
        crate::protect::layout_changed();
        if q == libc::MAP_FAILED {
            let source = std::io::Error::last_os_error();
            // SAFETY: the room is this function's placeholder, referenced by nothing.
            unsafe { libc::munmap(p, room) };
            crate::protect::layout_changed();
            let op = if kind == libc::MAP_SHARED {
                "mmap(shared, aligned to 2 MiB)"
            } else {
                "mmap(private, aligned to 2 MiB)"
            };
            return Err(VmError::sys(op, source));
        }
        // SAFETY: the room's head and tail are this function's placeholder, referenced by
        // nothing; the file is mapped over its middle.
        unsafe { trim_room(room_start, room, start, len) };
        Ok(Mapping {
            ptr: NonNull::new(start as *mut u8).expect("aligned inside a mapping, never null"),
            len,
            backing: Backing::Shared,
            map_start: start,
            map_len: len,
            reserved: false,
        })
    }

    /// The 64-bit words of `[offset, offset + len)`, or `None` unless both are 8-aligned and
    /// the range lies inside the mapping.
    ///
    /// # Safety
    ///
    /// While the words are in use, the mapping's bytes must be reached only atomically (no
    /// [`Mapping::as_slice`] of them in any thread): other processes may write them at any time.
    pub(crate) unsafe fn atomic_words(
        &self,
        offset: usize,
        len: usize,
    ) -> Option<&[std::sync::atomic::AtomicU64]> {
        let ok = offset % 8 == 0
            && len % 8 == 0
            && offset.checked_add(len).is_some_and(|e| e <= self.len());
        // SAFETY: in bounds and aligned (checked), borrowed from `self`, so the mapping outlives
        // the slice; AtomicU64 has no invalid bit patterns and is made for concurrent
        // modification, and the caller reaches these bytes no other way.
        ok.then(|| unsafe {
            std::slice::from_raw_parts((self.addr() + offset) as *const _, len / 8)
        })
    }

    /// The 64-bit words of `[offset, offset + len)`, as [`Mapping::atomic_words`] gives them.
    ///
    /// # Panics
    ///
    /// Unless both are 8-aligned and the range lies inside the mapping, with `what` (the
    /// mapping's name) in the message: the offsets come from this process's own layout, never
    /// from shared memory, so a bad one is a bug here.
    ///
    /// # Safety
    ///
    /// As [`Mapping::atomic_words`].
    pub(crate) unsafe fn atomic_words_in(
        &self,
        what: &str,
        offset: usize,
        len: usize,
    ) -> &[std::sync::atomic::AtomicU64] {
        // SAFETY: the caller keeps the promise `atomic_words` asks for.
        unsafe { self.atomic_words(offset, len) }
            .unwrap_or_else(|| panic!("{what} [{offset}, +{len}) out of bounds"))
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Length in bytes (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: mappings are at least one page.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address range.
    pub fn range(&self) -> RawRange {
        RawRange {
            addr: self.addr(),
            len: self.len,
        }
    }

    /// How it is backed.
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// Raw pointer to the first byte.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The bytes, for reading. Not offered for shared mappings, whose bytes other processes may
    /// change at any time: use [`crate::arena`] accessors there.
    pub fn as_slice(&self) -> &[u8] {
        assert_eq!(
            self.backing,
            Backing::PrivateAnonymous,
            "shared mappings are read through copy accessors, never as slices"
        );
        // SAFETY: the mapping is private, readable, len bytes long, and alive as long as &self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, for writing.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        assert_eq!(
            self.backing,
            Backing::PrivateAnonymous,
            "shared mappings are written through copy accessors, never as slices"
        );
        // SAFETY: private mapping, writable, exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// `madvise` over the whole mapping.
    pub fn advise(&self, advice: libc::c_int, op: &'static str) -> Result<()> {
        self.advise_range(self.range(), advice, op)
    }

    /// `madvise` over a page-aligned sub-range.
    pub fn advise_range(&self, r: RawRange, advice: libc::c_int, op: &'static str) -> Result<()> {
        self.check_inside(&r)?;
        if r.len == 0 {
            return Ok(());
        }
        // SAFETY: r lies inside this mapping (checked); the advice values used by zcio never free memory others reference.
        let rc = unsafe { libc::madvise(r.addr as *mut libc::c_void, r.len, advice) };
        if rc != 0 {
            return Err(VmError::last_os(op));
        }
        Ok(())
    }

    /// Drop the pages of a page-aligned sub-range (`MADV_DONTNEED`): the next touch sees zeros.
    pub fn discard(&mut self, r: RawRange) -> Result<()> {
        self.advise_range(r, libc::MADV_DONTNEED, "madvise(MADV_DONTNEED)")
    }

    /// Fail unless `r` lies inside this mapping.
    pub fn check_inside(&self, r: &RawRange) -> Result<()> {
        if !self.range().contains(r) {
            return Err(VmError::OutOfBounds {
                what: "range",
                start: r.addr,
                end: r.end(),
                bound_start: self.addr(),
                bound_end: self.addr() + self.len,
            });
        }
        Ok(())
    }

    /// Map `fd`, the file this shared mapping shows from its offset 0, over the same range
    /// again, privately and writable: the same bytes at the same addresses (pointers into the
    /// range stay good), and from now on each page written becomes this process's own copy,
    /// made by the kernel at the write's fault, while the file stays as it is. On failure the
    /// shared mapping is put back where it was, and the error says what the kernel refused.
    pub(crate) fn remap_private(&mut self, fd: BorrowedFd<'_>) -> Result<()> {
        if self.reserved
            || self.backing != Backing::Shared
            || self.ptr.as_ptr() as usize != self.map_start
        {
            return Err(VmError::Misuse {
                what: "remapping privately a mapping that is not a whole shared mapping of its own",
            });
        }
        let map = |flags: libc::c_int| {
            // SAFETY: [map_start, map_start + map_len) is this mapping's own range, a shared
            // mapping of `fd` from offset 0 (its owner's promise): MAP_FIXED replaces exactly
            // it with a mapping of the same file showing the same bytes, so every pointer
            // into it still reaches the same contents.
            let p = unsafe {
                libc::mmap(
                    self.map_start as *mut libc::c_void,
                    self.map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    flags | libc::MAP_FIXED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            crate::protect::layout_changed();
            p
        };
        if map(libc::MAP_PRIVATE) == libc::MAP_FAILED {
            let source = std::io::Error::last_os_error();
            // A shared mapping charges no commit: putting it back asks for nothing the kernel
            // just refused.
            if map(libc::MAP_SHARED) == libc::MAP_FAILED {
                return Err(VmError::sys(
                    "mmap(private, over a shared mapping); putting the shared one back failed too",
                    source,
                ));
            }
            return Err(VmError::sys("mmap(private, over a shared mapping)", source));
        }
        Ok(())
    }

    /// Hide the mapping (Genie's *invalidate*, region hiding): every page becomes inaccessible
    /// with one `mprotect`, and the contents stay. The [`Hidden`] value offers no access at all.
    pub fn hide(self) -> std::result::Result<Hidden, (Mapping, VmError)> {
        // SAFETY: we own the mapping and consume it: no reference into it survives this call.
        match unsafe { crate::protect::set_access(self.range(), crate::protect::Access::None) } {
            Ok(()) => Ok(Hidden(self)),
            Err(e) => Err((self, e)),
        }
    }

    /// Give up ownership without unmapping; the caller takes over the range.
    pub fn leak(self) -> RawRange {
        let r = self.range();
        std::mem::forget(self);
        r
    }
}

/// A mapping hidden by [`Mapping::hide`]: still owned (unmapped on drop), not accessible.
#[derive(Debug)]
pub struct Hidden(Mapping);

impl Hidden {
    /// Its range.
    pub fn range(&self) -> RawRange {
        self.0.range()
    }

    /// Reinstate read-write access (Genie's *reinstate*).
    pub fn reinstate(self) -> std::result::Result<Mapping, (Hidden, VmError)> {
        // SAFETY: we own the mapping; no reference into it exists while hidden.
        match unsafe {
            crate::protect::set_access(self.0.range(), crate::protect::Access::ReadWrite)
        } {
            Ok(()) => Ok(self.0),
            Err(e) => Err((self, e)),
        }
    }

    /// Forget the mapping without unmapping it: for a hidden region the application unmapped
    /// itself (the range may belong to someone else now).
    pub fn forget(self) {
        std::mem::forget(self.0);
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if self.reserved
            && let Ok(r) = crate::reserve::region()
        {
            // The placeholder goes back over the range in one step: it stays reserved.
            r.release(self.map_start, self.map_len, true);
            return;
        }
        // SAFETY: we own [map_start, map_start+map_len); nothing borrows it once we are dropped.
        unsafe {
            libc::munmap(self.map_start as *mut libc::c_void, self.map_len);
            crate::protect::layout_changed();
        }
    }
}

/// Unmap the room `[room_start, room_start + room_len)` around `[start, start + len)`, which
/// lies inside it: the alignment slack of a mapping made larger so that it could be aligned.
///
/// # Safety
///
/// The room's head and tail must be the caller's own mapping, referenced by nothing.
unsafe fn trim_room(room_start: usize, room_len: usize, start: usize, len: usize) {
    let (head, tail) = (start - room_start, room_start + room_len - (start + len));
    // SAFETY: the caller owns the head and tail, and nothing references them.
    unsafe {
        if head > 0 {
            libc::munmap(room_start as *mut libc::c_void, head);
            crate::protect::layout_changed();
        }
        if tail > 0 {
            libc::munmap((start + len) as *mut libc::c_void, tail);
            crate::protect::layout_changed();
        }
    }
}

/// A memfd of `len` bytes, the backing object of a shared arena.
pub fn memfd(name: &str, len: usize) -> Result<std::os::fd::OwnedFd> {
    use rustix::fs::{MemfdFlags, ftruncate, memfd_create};
    let fd = memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .map_err(|e| VmError::sys("memfd_create", e.into()))?;
    ftruncate(&fd, len as u64).map_err(|e| VmError::sys("ftruncate(memfd)", e.into()))?;
    let _ = fd.as_fd();
    Ok(fd)
}

/// A new descriptor for the same file, opened read-only: whoever holds only this one can map the
/// file readable but never writable, nor write it (the receivers' side of an fbuf path).
pub fn reopen_read_only(fd: BorrowedFd<'_>) -> Result<std::os::fd::OwnedFd> {
    let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::fs::open(
        path.as_str(),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| VmError::sys("reopen read-only (/proc/self/fd)", e.into()))
}

/// Seal a memory file against every write from now on: `F_SEAL_FUTURE_WRITE` (no new writable
/// shared mapping, no `write`, no hole punched), `F_SEAL_SHRINK`, `F_SEAL_GROW`, and
/// `F_SEAL_SEAL` so that the set cannot change. Mappings made writable before the seal stay
/// writable: the process that made them is the file's only writer. Whoever else holds the
/// file, even through a descriptor reopened read-write from `/proc/<pid>/fd`, can then only
/// map it readable, and cannot make such a mapping writable with `mprotect`.
///
/// Returns `false` where the kernel has no `F_SEAL_FUTURE_WRITE` (before Linux 5.1): the
/// file's size is sealed then (`F_SEAL_SHRINK`, `F_SEAL_GROW`, `F_SEAL_SEAL`), so that no
/// mapping of it ever reaches past its end, and read-only descriptors are the only protection
/// against writers.
pub fn seal_future_writes(fd: BorrowedFd<'_>) -> Result<bool> {
    use rustix::fs::SealFlags;
    let size = SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL;
    match rustix::fs::fcntl_add_seals(fd, SealFlags::FUTURE_WRITE | size) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::INVAL) => {
            rustix::fs::fcntl_add_seals(fd, size)
                .map_err(|e| VmError::sys("fcntl(F_ADD_SEALS, F_SEAL_SHRINK)", e.into()))?;
            Ok(false)
        }
        Err(e) => Err(VmError::sys(
            "fcntl(F_ADD_SEALS, F_SEAL_FUTURE_WRITE)",
            e.into(),
        )),
    }
}

/// Seal a memory file's size (`F_SEAL_SHRINK`, `F_SEAL_GROW`): whoever holds it can no longer
/// shrink it under a mapping (where a read would fault) nor grow it, and it can still be mapped
/// writable and sealed further ([`seal_future_writes`]).
pub fn seal_size(fd: BorrowedFd<'_>) -> Result<()> {
    use rustix::fs::SealFlags;
    rustix::fs::fcntl_add_seals(fd, SealFlags::SHRINK | SealFlags::GROW)
        .map_err(|e| VmError::sys("fcntl(F_ADD_SEALS, F_SEAL_SHRINK)", e.into()))
}

/// Whether a memory file is sealed against writes from now on ([`seal_future_writes`]).
pub fn is_sealed_for_writes(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fcntl_get_seals(fd).is_ok_and(|s| s.contains(rustix::fs::SealFlags::FUTURE_WRITE))
}

/// Whether a memory file's size is sealed against shrinking ([`seal_future_writes`] seals it):
/// a mapping of it then never reaches past its end, where a read would fault (`SIGBUS`).
pub fn is_sealed_against_shrinking(fd: BorrowedFd<'_>) -> bool {
    rustix::fs::fcntl_get_seals(fd).is_ok_and(|s| s.contains(rustix::fs::SealFlags::SHRINK))
}

/// Number of mappings (VMAs) of this process, read from `/proc/self/maps`.
pub fn vma_count() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anonymous_mapping_is_aligned_and_zeroed() {
        let mut m = Mapping::anonymous(10_000, MapOptions::default()).unwrap();
        assert_eq!(m.len() % page_size(), 0);
        assert!(m.as_slice().iter().all(|&b| b == 0));
        m.as_mut_slice()[5] = 7;
        assert_eq!(m.as_slice()[5], 7);
    }

    #[test]
    fn huge_mapping_is_2mib_aligned() {
        let m = Mapping::anonymous(4 << 20, MapOptions::HUGE).unwrap();
        assert_eq!(m.addr() % HUGE_PAGE_SIZE, 0);
    }

    #[test]
    fn zero_and_huge_lengths_are_refused() {
        assert!(matches!(
            Mapping::anonymous(0, MapOptions::default()),
            Err(VmError::Empty { .. })
        ));
        assert!(matches!(
            Mapping::anonymous(usize::MAX / 2, MapOptions::default()),
            Err(VmError::TooLarge { .. })
        ));
    }
}
