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

/// Check that every page of `buf` can be written, without writing it: Genie verifies access
/// rights when it references the pages of an input (§3.1), so that an input into memory the
/// application may not write fails with an error instead of a fault.
///
/// Uses `madvise(MADV_POPULATE_WRITE)` (Linux 5.14), which faults the pages in writable and
/// fails (`EINVAL` on a mapping without write permission, `EFAULT` or `ENOMEM` where a write
/// would raise a signal or nothing is mapped). On older kernels the check is
/// skipped (the kernel's own `EFAULT` on system-call input still applies).
pub fn check_writable(buf: &mut [u8]) -> Result<()> {
    if buf.is_empty() {
        return Ok(());
    }
    let ps = crate::page::page_size();
    let start = buf.as_ptr() as usize & !(ps - 1);
    let end = (buf.as_ptr() as usize + buf.len()).div_ceil(ps) * ps;
    // SAFETY: MADV_POPULATE_WRITE never changes the contents of memory; it only faults pages in
    // (breaking copy-on-write sharing, as a write would). The range covers `buf`, which we
    // borrow mutably, and the partial pages around it, whose contents stay as they are.
    let rc = unsafe {
        libc::madvise(
            start as *mut libc::c_void,
            end - start,
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
        Some(libc::EINVAL) | Some(libc::EFAULT) | Some(libc::ENOMEM) => Err(VmError::NotWritable {
            addr: buf.as_ptr() as usize,
            len: buf.len(),
        }),
        _ => Err(VmError::sys("madvise(MADV_POPULATE_WRITE)", e)),
    }
}
