//! The reserved region (paper 001, §3.2.1): one range of virtual addresses, the same in every
//! process, set aside for shared data paths. A process reserves it once (an inaccessible,
//! unbacked mapping: no memory, only address space), and every path is mapped inside it at
//! the address its creator chose there, so that an fbuf's address means the same in every
//! process of the path and nothing else of the process can ever sit there.
//!
//! Inside the region a path's mapping replaces the reservation over its range (`MAP_FIXED`
//! over this process's own placeholder, never over a live mapping: the ranges in use are
//! kept here), and its unmapping puts the placeholder back, so that the range stays reserved.
//!
//! Where the region cannot be had in a process (something else is mapped there), the error
//! names the range and what holds it.

use crate::error::{Result, VmError};
use crate::page::HUGE_PAGE_SIZE;
use std::sync::{Mutex, OnceLock};

/// Where the region starts in every process.
pub const REGION_ADDR: usize = 0x1000_0000_0000;
/// Its length: 64 GiB of address space.
pub const REGION_LEN: usize = 64 << 30;

/// This process's reservation of the region.
#[derive(Debug)]
pub struct ReservedRegion {
    /// Ranges of the region mapped now (start, length).
    in_use: Mutex<Vec<(usize, usize)>>,
}

static REGION: OnceLock<std::result::Result<ReservedRegion, String>> = OnceLock::new();

/// Whether `[addr, addr + len)` lies inside the region.
pub fn contains(addr: usize, len: usize) -> bool {
    addr >= REGION_ADDR
        && addr
            .checked_add(len)
            .is_some_and(|e| e <= REGION_ADDR + REGION_LEN)
}

/// The region, reserved in this process on first use. Where it cannot be (the range is taken
/// by another mapping), every later call returns the same error.
pub fn region() -> Result<&'static ReservedRegion> {
    let r = REGION.get_or_init(|| reserve().map_err(|why| why.to_string()));
    r.as_ref().map_err(|why| VmError::Unsupported {
        feature: "the reserved fbuf region",
        reason: why.clone(),
    })
}

/// The mapping that holds `addr` in this process, from `/proc/self/maps`.
fn holder_of(addr: usize, len: usize) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .find(|l| {
            let Some((range, _)) = l.split_once(' ') else {
                return false;
            };
            let Some((a, b)) = range.split_once('-') else {
                return false;
            };
            let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            else {
                return false;
            };
            a < addr + len && addr < b
        })
        .map(str::to_string)
}

fn reserve() -> std::result::Result<ReservedRegion, String> {
    let p = placeholder(REGION_ADDR, REGION_LEN, false);
    if let Err(e) = p {
        return Err(match holder_of(REGION_ADDR, REGION_LEN) {
            Some(h) => format!(
                "[{REGION_ADDR:#x}, +{} GiB) is taken in this process by `{h}` ({e})",
                REGION_LEN >> 30
            ),
            None => format!(
                "[{REGION_ADDR:#x}, +{} GiB) cannot be reserved: {e}",
                REGION_LEN >> 30
            ),
        });
    }
    Ok(ReservedRegion {
        in_use: Mutex::new(Vec::new()),
    })
}

/// Map the inaccessible, unbacked placeholder over `[addr, addr + len)`: over a range the
/// caller owns and is done with (`replace`), or where nothing is mapped.
pub(crate) fn placeholder(addr: usize, len: usize, replace: bool) -> std::io::Result<()> {
    let fixed = if replace {
        libc::MAP_FIXED
    } else {
        libc::MAP_FIXED_NOREPLACE
    };
    // SAFETY: with MAP_FIXED_NOREPLACE nothing existing is replaced; with MAP_FIXED the range
    // is the caller's own and it is done with what is there (a mapping of this region, from
    // `ReservedRegion::release` in the mapping's drop, or a unit of a `Stitched` range it
    // owns), so nothing anyone still uses is replaced. The placeholder has no access: nothing
    // can be read or written through it.
    let p = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | fixed,
            -1,
            0,
        )
    };
    crate::protect::layout_changed();
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    if p as usize != addr {
        // An old kernel took MAP_FIXED_NOREPLACE as a hint.
        // SAFETY: `p` is the placeholder just made, somewhere else.
        unsafe { libc::munmap(p, len) };
        crate::protect::layout_changed();
        return Err(std::io::Error::from_raw_os_error(libc::EEXIST));
    }
    Ok(())
}

impl ReservedRegion {
    /// A fresh random 2 MiB-aligned address in the region for `len` bytes (the creator of a
    /// path picks it; the other processes map the path there), clear of the ranges this
    /// process maps in the region now (two paths made at once in one process, say, would
    /// otherwise meet now and then).
    pub fn random_address(&self, len: usize) -> usize {
        let pick = || {
            let mut b = [0u8; 8];
            let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
            let span = REGION_LEN.saturating_sub(len).max(1);
            (REGION_ADDR + u64::from_ne_bytes(b) as usize % span) & !(HUGE_PAGE_SIZE - 1)
        };
        let in_use = self.lock().clone();
        let clear = |addr: usize| !in_use.iter().any(|(a, l)| *a < addr + len && addr < a + l);
        let mut addr = pick();
        for _ in 0..64 {
            if clear(addr) {
                break;
            }
            addr = pick();
        }
        addr
    }

    /// Ranges mapped in the region now.
    pub fn in_use(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(usize, usize)>> {
        self.in_use.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claim `[addr, addr + len)` for a mapping: refused where it leaves the region or
    /// overlaps a range mapped now.
    pub(crate) fn claim(&self, addr: usize, len: usize) -> Result<()> {
        let placement = |why: String| VmError::ArenaPlacement {
            addr,
            len,
            source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, why),
        };
        if !contains(addr, len) {
            return Err(placement(format!(
                "outside the reserved region [{REGION_ADDR:#x}, +{} GiB)",
                REGION_LEN >> 30
            )));
        }
        let mut in_use = self.lock();
        if let Some((a, l)) = in_use.iter().find(|(a, l)| *a < addr + len && addr < a + l) {
            return Err(placement(format!(
                "overlaps [{a:#x}, +{l}), mapped in the reserved region already"
            )));
        }
        in_use.push((addr, len));
        Ok(())
    }

    /// Give back a range claimed with [`ReservedRegion::claim`]. With `mapped`, its mapping is
    /// replaced by the placeholder in one step (the caller owns that mapping and is done with
    /// it), so that the range is never free for another mapping of the process to land in.
    pub(crate) fn release(&self, addr: usize, len: usize, mapped: bool) {
        let mut in_use = self.lock();
        if mapped && placeholder(addr, len, true).is_err() {
            // The placeholder could not go in (no memory for the kernel's bookkeeping): unmap
            // the range and keep it claimed, so that zcio never maps over whatever the kernel
            // may put there later.
            // SAFETY: the caller owns the mapping of this range and is done with it.
            unsafe { libc::munmap(addr as *mut libc::c_void, len) };
            crate::protect::layout_changed();
            return;
        }
        in_use.retain(|r| *r != (addr, len));
    }
}
