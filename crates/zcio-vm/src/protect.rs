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
    fn prot(self) -> libc::c_int {
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

/// Whether a page-aligned range is currently mapped in this process (every page of it).
///
/// This is Genie's *region check* (§6.2.1): a cached region the application removed is no longer
/// mapped. Uses `madvise(MADV_NORMAL)`, which fails with `ENOMEM` over unmapped addresses.
pub fn is_mapped(r: RawRange) -> bool {
    if r.len == 0 {
        return true;
    }
    // SAFETY: MADV_NORMAL only resets the readahead hint; it never changes contents.
    unsafe { libc::madvise(r.addr as *mut libc::c_void, r.len, libc::MADV_NORMAL) == 0 }
}
