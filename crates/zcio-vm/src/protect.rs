//! Batched protection changes: Genie's *read only*, *invalidate* and *reinstate* (paper 000, §6.1).
//!
//! One `mprotect` per contiguous run: the per-call cost (~5 µs here) dwarfs the per-page cost, so
//! callers hand over whole ranges, never pages one by one.

use crate::error::{Result, VmError};
use crate::page::RawRange;

/// The access an application keeps to a range of its pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Access {
    /// Read and write (reinstated).
    ReadWrite,
    /// Read only: writes fault (Genie's *read only*).
    ReadOnly,
    /// No access: any touch faults (Genie's *invalidate*, region hiding).
    None,
}

impl Access {
    pub(crate) fn prot(self) -> libc::c_int {
        match self {
            Access::ReadWrite => libc::PROT_READ | libc::PROT_WRITE,
            Access::ReadOnly => libc::PROT_READ,
            Access::None => libc::PROT_NONE,
        }
    }
}

/// Change the access to a page-aligned range with one `mprotect`.
///
/// # Safety
///
/// The range must be memory this caller owns (a zcio region, or an application buffer handed to
/// zcio for the duration of an I/O) and no Rust reference into it may be used in a way the new
/// access forbids while it is in force: with [`Access::None`] or [`Access::ReadOnly`] a touch of the
/// range faults, which is the intended effect of region hiding and of the SIGSEGV fallback of TCOW.
pub unsafe fn set_access(r: RawRange, access: Access) -> Result<()> {
    r.check_pages("protected range")?;
    // SAFETY: the caller upholds the contract above; mprotect itself validates the range.
    let rc = unsafe { libc::mprotect(r.addr as *mut libc::c_void, r.len, access.prot()) };
    crate::protect::layout_changed();
    if rc != 0 {
        return Err(VmError::last_os("mprotect"));
    }
    Ok(())
}

/// Wire (lock in memory) a page-aligned range: the *wire region* of the non-emulated semantics.
pub fn wire(r: RawRange) -> Result<()> {
    // SAFETY: mlock does not change memory contents; the kernel validates the range.
    let rc = unsafe { libc::mlock(r.addr as *const libc::c_void, r.len) };
    if rc != 0 {
        return Err(VmError::last_os("mlock"));
    }
    Ok(())
}

/// Unwire a range wired with [`wire`].
pub fn unwire(r: RawRange) -> Result<()> {
    // SAFETY: munlock does not change memory contents; the kernel validates the range.
    let rc = unsafe { libc::munlock(r.addr as *const libc::c_void, r.len) };
    if rc != 0 {
        return Err(VmError::last_os("munlock"));
    }
    Ok(())
}

/// Whether this kernel has `MADV_POPULATE_WRITE` (probed once on a page of our own).
fn populate_write_supported() -> bool {
    static SUPPORTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        let Ok(mut m) = crate::mapping::Mapping::anonymous(
            crate::page::page_size(),
            crate::mapping::MapOptions::default(),
        ) else {
            return false;
        };
        let r = m.range();
        let _ = m.as_mut_slice();
        // SAFETY: our own fresh, writable page; populating it changes no contents.
        unsafe { libc::madvise(r.addr as *mut libc::c_void, r.len, 23) == 0 }
    })
}

/// How [`check_writable`] checks an input buffer on this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum WritableCheck {
    /// The mappings under the buffer are looked up (`PROCMAP_QUERY` on `/proc/self/maps`,
    /// Linux 6.11), and their pages' presence read from the page tables (`PAGEMAP_SCAN`): a
    /// few calls whatever the buffer's length. Private anonymous memory whose pages are all
    /// there is judged by its mapping's permission alone; any other (pages not there yet, a
    /// file, shared memory, whose pages a write may not be able to have) is populated as
    /// [`WritableCheck::PopulateWrite`] does.
    ProcmapQuery,
    /// Every page is faulted in writable (`MADV_POPULATE_WRITE`, Linux 5.14): the cost grows
    /// with the buffer's pages.
    PopulateWrite,
    /// Neither is available: the check is skipped (the kernel's own `EFAULT` on system-call
    /// input still applies).
    Unchecked,
}

impl std::fmt::Display for WritableCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            WritableCheck::ProcmapQuery => "procmap-query",
            WritableCheck::PopulateWrite => "populate-write",
            WritableCheck::Unchecked => "unchecked",
        })
    }
}

/// The check [`check_writable`] makes here (probed once). `ZCIO_VM_DISABLE=procmap` turns
/// the mapping lookup off, to exercise the populating check on kernels that have both.
pub fn writable_check() -> WritableCheck {
    static CHECK: std::sync::OnceLock<WritableCheck> = std::sync::OnceLock::new();
    *CHECK.get_or_init(|| {
        let off = crate::config::disabled().procmap_query;
        if !off && maps::query(maps::probe_addr()).is_ok() {
            WritableCheck::ProcmapQuery
        } else if populate_write_supported() {
            WritableCheck::PopulateWrite
        } else {
            WritableCheck::Unchecked
        }
    })
}

/// Changes zcio made to this process's mappings or their access (every `mmap`, `munmap`,
/// `mremap` and `mprotect` it calls): a buffer found writable stays so until the next.
static LAYOUT_EPOCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Count a change zcio makes to this process's mappings ([`WritableCache`]).
pub(crate) fn layout_changed() {
    LAYOUT_EPOCH.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// The mapping (or, where the kernel cannot say which, the buffer) [`check_writable`] last
/// found `buf` writable in, so that buffers in one mapping, reused call after call, are looked
/// up once (the lookup is a system call or two, more than a short message's whole receive).
/// zcio forgets it whenever it changes a mapping or its access itself; a program that unmaps
/// that memory and maps something less accessible at the same address between two calls,
/// with its own system calls, is not seen (a C caller that may do so checks at each call:
/// [`check_writable`]).
#[derive(Debug, Default)]
pub struct WritableCache(Option<(usize, usize, u64)>);

impl WritableCache {
    /// [`check_writable`], unless `buf` lies in what was found writable last and zcio changed
    /// no mapping since.
    pub fn check(&mut self, buf: &mut [u8]) -> Result<()> {
        // Read before the lookup: a change during it makes the next call look again.
        let epoch = LAYOUT_EPOCH.load(std::sync::atomic::Ordering::SeqCst);
        let (start, end) = (buf.as_ptr() as usize, buf.as_ptr() as usize + buf.len());
        if let Some((lo, hi, e)) = self.0
            && e == epoch
            && lo <= start
            && end <= hi
        {
            return Ok(());
        }
        self.0 = None;
        let (lo, hi) = writable_in(buf)?.unwrap_or((start, end));
        self.0 = Some((lo, hi, epoch));
        Ok(())
    }
}

/// Check that every page of `buf` can be written, without writing it: Genie verifies access
/// rights when it references the pages of an input (§3.1), so that an input into memory the
/// application may not write fails with an error instead of a fault.
///
/// Where the kernel answers `PROCMAP_QUERY` ([`WritableCheck::ProcmapQuery`]), the mappings
/// under the buffer are looked up: every byte must lie in a writable mapping. Where its pages
/// are all there already (one `PAGEMAP_SCAN`, which walks the page tables without faulting
/// anything in), that is the whole check. Mappings whose pages a write may fail to get even
/// though the mapping is writable (a file mapped beyond its end, shared memory), and pages not
/// there yet, are populated, as the input paths expect every page of the buffer present.
/// Otherwise every page is populated writable with `madvise(MADV_POPULATE_WRITE)`
/// ([`populate_writable`]).
pub fn check_writable(buf: &mut [u8]) -> Result<()> {
    writable_in(buf).map(|_| ())
}

/// [`check_writable`], and the one mapping that holds all of `buf`, where one does and the
/// kernel said which (its start and end).
fn writable_in(buf: &mut [u8]) -> Result<Option<(usize, usize)>> {
    if buf.is_empty() {
        return Ok(None);
    }
    if writable_check() != WritableCheck::ProcmapQuery {
        return populate_writable(buf).map(|_| None);
    }
    let ps = crate::page::page_size();
    let start = buf.as_ptr() as usize & !(ps - 1);
    let end = (buf.as_ptr() as usize + buf.len()).div_ceil(ps) * ps;
    let refused = || VmError::NotWritable {
        addr: buf.as_ptr() as usize,
        len: buf.len(),
    };
    let mut at = start;
    let mut whole = None;
    while at < end {
        let vma = match maps::query(at) {
            Ok(v) => v,
            // Nothing mapped at `at`.
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Err(refused()),
            // The lookup failed (its descriptor closed by the program, say): populate the
            // rest, which answers the same question page by page.
            Err(_) => {
                maps::forget();
                return populate_range(at, end - at)
                    .map(|_| None)
                    .map_err(|e| match e {
                        VmError::NotWritable { .. } => refused(),
                        e => e,
                    });
            }
        };
        if !vma.writable {
            return Err(refused());
        }
        if at == start && vma.start <= start && end <= vma.end {
            whole = Some((vma.start, vma.end));
        }
        let piece_end = vma.end.min(end);
        // A page that is not there yet is faulted in, as a write would: the input paths read
        // and write the application's pages while its range is registered with userfaultfd,
        // where a missing page would be a fault for the runtime's handler to serve.
        let piece = RawRange {
            addr: at,
            len: piece_end - at,
        };
        if !vma.private_anonymous || crate::huge::all_present(piece) != Some(true) {
            populate_range(at, piece_end - at).map_err(|e| match e {
                VmError::NotWritable { .. } => refused(),
                e => e,
            })?;
        }
        at = piece_end;
    }
    Ok(whole)
}

/// Fault every page of `buf` in writable (`madvise(MADV_POPULATE_WRITE)`, Linux 5.14), which
/// fails (`EINVAL` on a mapping without write permission, `EFAULT` or `ENOMEM` where a write
/// would raise a signal or nothing is mapped): the access check of kernels without
/// `PROCMAP_QUERY`, and the page allocation of a fresh region. On older kernels nothing is done
/// (the kernel's own `EFAULT` on system-call input still applies).
pub fn populate_writable(buf: &mut [u8]) -> Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    let ps = crate::page::page_size();
    let start = buf.as_ptr() as usize & !(ps - 1);
    let end = (buf.as_ptr() as usize + buf.len()).div_ceil(ps) * ps;
    populate_range(start, end - start).map_err(|e| match e {
        VmError::NotWritable { .. } => VmError::NotWritable {
            addr: buf.as_ptr() as usize,
            len: buf.len(),
        },
        e => e,
    })
}

/// `MADV_POPULATE_WRITE` on the page-aligned range `[start, start + len)`, which covers memory
/// the caller may write (a buffer it borrows mutably and the partial pages around it).
fn populate_range(start: usize, len: usize) -> Result<()> {
    // SAFETY: MADV_POPULATE_WRITE never changes the contents of memory; it only faults pages in
    // (breaking copy-on-write sharing, as a write would). The caller's range covers a buffer it
    // borrows mutably and the partial pages around it, whose contents stay as they are.
    let rc = unsafe {
        libc::madvise(
            start as *mut libc::c_void,
            len,
            23, /* MADV_POPULATE_WRITE */
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    match e.raw_os_error() {
        // EINVAL is also what a kernel without MADV_POPULATE_WRITE says.
        Some(libc::EINVAL) if !populate_write_supported() => Ok(()),
        Some(libc::EINVAL) | Some(libc::EFAULT) | Some(libc::ENOMEM) => {
            Err(VmError::NotWritable { addr: start, len })
        }
        _ => Err(VmError::sys("madvise(MADV_POPULATE_WRITE)", e)),
    }
}

/// Open this process's descriptor of `/proc/self/maps` (the access check's lookup) now, if it
/// is not open yet.
pub(crate) fn open_maps() -> std::io::Result<()> {
    maps::open()
}

/// The mapping lookup of `/proc/self/maps` by address (`PROCMAP_QUERY`, Linux 6.11): the ABI
/// edge of [`check_writable`].
mod maps {
    use crate::procself::SelfFile;
    use std::os::fd::AsRawFd;

    /// `struct procmap_query` of `<linux/fs.h>`.
    #[repr(C)]
    #[derive(Default)]
    struct ProcmapQuery {
        size: u64,
        query_flags: u64,
        query_addr: u64,
        vma_start: u64,
        vma_end: u64,
        vma_flags: u64,
        vma_page_size: u64,
        vma_offset: u64,
        inode: u64,
        dev_major: u32,
        dev_minor: u32,
        vma_name_size: u32,
        build_id_size: u32,
        vma_name_addr: u64,
        build_id_addr: u64,
    }

    /// `_IOWR('f', 17, struct procmap_query)`.
    const PROCMAP_QUERY: libc::c_ulong = (3 << 30)
        | ((std::mem::size_of::<ProcmapQuery>() as libc::c_ulong) << 16)
        | ((b'f' as libc::c_ulong) << 8)
        | 17;
    const VMA_WRITABLE: u64 = 0x02;
    const VMA_SHARED: u64 = 0x08;

    /// The mapping that holds an address.
    pub(super) struct Vma {
        pub start: usize,
        pub end: usize,
        pub writable: bool,
        /// Private and backed by no file: a write always gets a page (or the process is out
        /// of memory, as with any write).
        pub private_anonymous: bool,
    }

    /// This process's `/proc/self/maps`.
    static MAPS: SelfFile = SelfFile::new("/proc/self/maps");

    /// The lookup stopped answering (its descriptor closed behind zcio's back, say): open
    /// `/proc/self/maps` again at the next query.
    pub(super) fn forget() {
        MAPS.forget();
    }

    /// Open this process's descriptor of `/proc/self/maps` now, if it is not open yet.
    pub(crate) fn open() -> std::io::Result<()> {
        MAPS.get().map(drop)
    }

    /// An address certainly mapped: this function's own code.
    pub(super) fn probe_addr() -> usize {
        probe_addr as *const () as usize
    }

    /// The mapping that holds `addr`; `ENOENT` where none does.
    pub(super) fn query(addr: usize) -> std::io::Result<Vma> {
        let f = MAPS.get()?;
        let mut q = ProcmapQuery {
            size: std::mem::size_of::<ProcmapQuery>() as u64,
            query_addr: addr as u64,
            ..Default::default()
        };
        // SAFETY: PROCMAP_QUERY reads and writes the one `struct procmap_query` it is given,
        // whose size field says how large it is; no name or build id is asked for (sizes 0),
        // so the kernel writes nothing else.
        let rc = unsafe { libc::ioctl(f.as_raw_fd(), PROCMAP_QUERY, &mut q as *mut ProcmapQuery) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Vma {
            start: q.vma_start as usize,
            end: q.vma_end as usize,
            writable: q.vma_flags & VMA_WRITABLE != 0,
            private_anonymous: q.vma_flags & VMA_SHARED == 0
                && q.inode == 0
                && q.dev_major == 0
                && q.dev_minor == 0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{MapOptions, Mapping, page_size};

    #[test]
    fn a_writable_cache_forgets_what_zcio_protects_or_unmaps() {
        let mut cache = WritableCache::default();
        let mut m = Mapping::anonymous(4 * page_size(), MapOptions::default()).unwrap();
        let ps = page_size();
        cache.check(&mut m.as_mut_slice()[..100]).unwrap();
        // Another buffer of the same mapping: found writable too.
        cache.check(&mut m.as_mut_slice()[2 * ps..3 * ps]).unwrap();
        // SAFETY: the mapping is not written while it is read-only.
        unsafe { set_access(m.range(), Access::ReadOnly) }.unwrap();
        let e = cache
            .check(&mut m.as_mut_slice()[2 * ps..3 * ps])
            .unwrap_err();
        assert!(matches!(e, VmError::NotWritable { .. }), "{e}");
        // SAFETY: restores the access the mapping was made with.
        unsafe { set_access(m.range(), Access::ReadWrite) }.unwrap();
        cache.check(&mut m.as_mut_slice()[..100]).unwrap();
        // Unmapped and mapped again read-only at the same address by zcio: looked up again.
        let addr = m.addr();
        drop(m);
        let Ok(mut again) = Mapping::anonymous(4 * ps, MapOptions::default()) else {
            return;
        };
        if again.addr() == addr {
            // SAFETY: not written while read-only.
            unsafe { set_access(again.range(), Access::ReadOnly) }.unwrap();
            assert!(cache.check(&mut again.as_mut_slice()[..100]).is_err());
        }
    }
}
