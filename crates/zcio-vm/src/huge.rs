//! Transparent huge pages: which 2 MiB granules of a range are PMD-mapped right now.
//!
//! Genie's premise, that page-table work is cheap next to copying, fails at 4 KiB on present
//! hardware (protecting, referencing and swapping one 4 KiB page costs more than copying it)
//! and holds again at 2 MiB, where one page-table entry (a PMD) maps 512 pages: write-protecting,
//! moving or referencing it costs a few microseconds against some 50 µs to copy its bytes. The
//! layers above choose their granule per PMD from what this module reports.
//!
//! The check asks the kernel through `PAGEMAP_SCAN` (Linux 6.7) for the pages of the range in the
//! `PAGE_IS_HUGE` category: one system call per range, whatever its length. Where the call is
//! missing, [`scan`] says so ([`HugeScan::Unknown`]) and the callers take the 4 KiB paths.

use crate::page::{HUGE_PAGE_SIZE, RawRange};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::OnceLock;

const PAGEMAP_SCAN: u64 = (3 << 30)
    | ((std::mem::size_of::<linux_raw_sys::general::pm_scan_arg>() as u64) << 16)
    | ((b'f' as u64) << 8)
    | 16;

/// The granule a range of memory is handled at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Granule {
    /// Base pages (4 KiB): not one whole PMD of the range is PMD-mapped.
    #[serde(rename = "4k")]
    Base,
    /// Huge pages (2 MiB): every whole PMD of the range is PMD-mapped.
    #[serde(rename = "2m")]
    Huge,
    /// Some whole PMDs of the range are PMD-mapped and some are not.
    #[serde(rename = "mixed")]
    Mixed,
}

impl Granule {
    /// The name used in JSON and paths: `4k`, `2m` or `mixed`.
    pub fn name(self) -> &'static str {
        match self {
            Granule::Base => "4k",
            Granule::Huge => "2m",
            Granule::Mixed => "mixed",
        }
    }
}

crate::display_by_name!(Granule);

/// Most PMD runs one scan reports; a range with more alternations is reported in part
/// ([`HugeScan::Known::truncated`]), the rest counted as not huge.
pub const MAX_RUNS: usize = 64;

/// What a scan found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HugeScan {
    /// The PMD-aligned runs of the range that are PMD-mapped (each a multiple of 2 MiB, inside
    /// the range's whole PMDs), in address order.
    Known {
        /// The runs.
        runs: Vec<RawRange>,
        /// Whole PMDs of the range.
        pmds: usize,
        /// Whether more runs than [`MAX_RUNS`] were found (the rest are left out).
        truncated: bool,
    },
    /// The kernel cannot tell (no `PAGEMAP_SCAN`): the reason.
    Unknown(String),
}

impl HugeScan {
    /// PMD-mapped bytes found.
    pub fn huge_bytes(&self) -> usize {
        match self {
            HugeScan::Known { runs, .. } => runs.iter().map(|r| r.len).sum(),
            HugeScan::Unknown(_) => 0,
        }
    }

    /// The granule of the whole PMDs scanned: [`Granule::Base`] when none is huge (or the scan
    /// could not tell), [`Granule::Huge`] when all are.
    pub fn granule(&self) -> Granule {
        match self {
            HugeScan::Known { pmds, .. } if *pmds > 0 => {
                let huge = self.huge_bytes() / HUGE_PAGE_SIZE;
                if huge == 0 {
                    Granule::Base
                } else if huge == *pmds {
                    Granule::Huge
                } else {
                    Granule::Mixed
                }
            }
            _ => Granule::Base,
        }
    }
}

/// The whole PMDs (2 MiB-aligned granules) inside `r`; empty if it holds none.
pub fn whole_pmds(r: RawRange) -> RawRange {
    r.aligned_within(HUGE_PAGE_SIZE)
}

/// This process's `/proc/self/pagemap`.
static PAGEMAP: crate::procself::SelfFile = crate::procself::SelfFile::new("/proc/self/pagemap");

/// Open this process's descriptor of `/proc/self/pagemap` now, if it is not open yet.
pub(crate) fn open_pagemap() -> std::io::Result<()> {
    PAGEMAP.get().map(drop)
}

fn pagemap() -> Result<BorrowedFd<'static>, String> {
    PAGEMAP
        .get()
        .map_err(|e| format!("/proc/self/pagemap cannot be opened: {e}"))
}

/// Which whole PMDs of `r` are PMD-mapped transparent huge pages now (one `PAGEMAP_SCAN`).
///
/// The answer can be stale the moment it is given (khugepaged collapses, compaction or a
/// partial `mprotect` splits): callers use it to choose a path, and every path stays correct
/// when the pages have changed granule since (a PMD move of a split page moves its 4 KiB
/// pages, a 4 KiB protection of a huge page splits its PMD).
pub fn scan(r: RawRange) -> HugeScan {
    let pmds = whole_pmds(r);
    if pmds.is_empty() {
        return HugeScan::Known {
            runs: Vec::new(),
            pmds: 0,
            truncated: false,
        };
    }
    match scan_raw(pmds) {
        Ok((runs, walk_end)) => HugeScan::Known {
            runs: runs
                .into_iter()
                .map(whole_pmds)
                .filter(|r| !r.is_empty())
                .fold(Vec::new(), |mut v: Vec<RawRange>, r| {
                    match v.last_mut() {
                        Some(last) if last.end() == r.addr => last.len += r.len,
                        _ => v.push(r),
                    }
                    v
                }),
            pmds: pmds.len / HUGE_PAGE_SIZE,
            truncated: walk_end < pmds.end(),
        },
        Err(e) => HugeScan::Unknown(e),
    }
}

/// One `PAGEMAP_SCAN`, on `fd`, of `r` (page-aligned) for the pages whose categories, those in
/// `inverted` flipped, include every one in `mask`: at most `regions.len()` runs of them are
/// written to `regions` (with the categories of `mask`), the walk stopping after `max_pages`
/// such pages (0: no limit). The runs written and the address the walk ended at. A descriptor
/// closed behind zcio's back is forgotten, to be reopened at the next scan.
fn pagemap_scan(
    fd: BorrowedFd<'_>,
    r: RawRange,
    regions: &mut [linux_raw_sys::general::page_region],
    max_pages: u64,
    inverted: u64,
    mask: u64,
) -> std::io::Result<(usize, usize)> {
    let mut arg = linux_raw_sys::general::pm_scan_arg {
        size: std::mem::size_of::<linux_raw_sys::general::pm_scan_arg>() as u64,
        flags: 0,
        start: r.addr as u64,
        end: r.end() as u64,
        walk_end: 0,
        vec: regions.as_mut_ptr() as u64,
        vec_len: regions.len() as u64,
        max_pages,
        category_inverted: inverted,
        category_mask: mask,
        category_anyof_mask: 0,
        return_mask: mask,
    };
    // SAFETY: PAGEMAP_SCAN reads `arg` and writes at most `vec_len` page_region records into
    // `regions`, which outlives the call; it only reads this process's page tables.
    let n = unsafe { libc::ioctl(fd.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EBADF) {
            PAGEMAP.forget();
        }
        return Err(e);
    }
    Ok(((n as usize).min(regions.len()), arg.walk_end as usize))
}

/// No page region yet, for `PAGEMAP_SCAN` to write.
const NO_REGION: linux_raw_sys::general::page_region = linux_raw_sys::general::page_region {
    start: 0,
    end: 0,
    categories: 0,
};

/// The ranges of `r` (page-aligned) that `PAGEMAP_SCAN` reports as huge pages, as the pages
/// they map inside `r`, and where the walk ended.
fn scan_raw(r: RawRange) -> Result<(Vec<RawRange>, usize), String> {
    let fd = pagemap()?;
    let mut regions = [NO_REGION; MAX_RUNS];
    let huge = linux_raw_sys::general::PAGE_IS_HUGE as u64;
    let (n, walk_end) = pagemap_scan(fd, r, &mut regions, 0, 0, huge).map_err(|e| {
        format!("PAGEMAP_SCAN is unavailable ({e}): huge pages cannot be told from base pages")
    })?;
    let runs = regions[..n]
        .iter()
        .map(|reg| RawRange {
            addr: reg.start as usize,
            len: (reg.end - reg.start) as usize,
        })
        .collect();
    Ok((runs, walk_end))
}

/// Whether every page of `r` (page-aligned, mapped) is present or swapped out now, so that no
/// access to it can raise a missing-page fault (one `PAGEMAP_SCAN` that stops at the first page
/// that is neither). `None` where the kernel cannot tell.
pub fn all_present(r: RawRange) -> Option<bool> {
    if r.is_empty() {
        return Some(true);
    }
    let fd = pagemap().ok()?;
    let here =
        (linux_raw_sys::general::PAGE_IS_PRESENT | linux_raw_sys::general::PAGE_IS_SWAPPED) as u64;
    // Pages with neither category: both inverted, both required.
    let (n, _) = pagemap_scan(fd, r, &mut [NO_REGION], 1, here, here).ok()?;
    Some(n == 0)
}

/// Whether any page of `r` (page-aligned) lies in a PMD-mapped huge page now: one
/// `PAGEMAP_SCAN` of `r` alone (a huge page is reported by the pages it maps inside `r`).
/// Where THP is off or the kernel cannot tell, this says `false` (and makes no system call
/// where THP is off).
pub fn touches_huge(r: RawRange) -> bool {
    static OFF: OnceLock<bool> = OnceLock::new();
    if r.is_empty() || *OFF.get_or_init(|| thp_policy().is_none_or(|p| p == "never")) {
        return false;
    }
    scan_raw(r).is_ok_and(|(runs, _)| !runs.is_empty())
}

/// Whether the PMD at `pmd` (2 MiB-aligned) is PMD-mapped now.
pub fn is_pmd_mapped(pmd: usize) -> bool {
    matches!(scan(RawRange { addr: pmd, len: HUGE_PAGE_SIZE }), HugeScan::Known { runs, .. } if !runs.is_empty())
}

/// What the kernel's transparent-huge-page policy is (`/sys/kernel/mm/transparent_hugepage/enabled`):
/// `always`, `madvise` or `never`; `None` where the file is missing (no THP in this kernel).
pub fn thp_policy() -> Option<String> {
    let s = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    bracketed(&s).map(String::from)
}

/// The selected word of a sysfs choice (`always [madvise] never`): the bracketed one.
pub(crate) fn bracketed(text: &str) -> Option<&str> {
    let sel = text.split_whitespace().find(|w| w.starts_with('['))?;
    Some(sel.trim_matches(|c| c == '[' || c == ']'))
}

/// Whether huge pages are turned off in this process ([`crate::config`]): zcio then neither
/// asks for them ([`crate::MapOptions::huge`] refuses them instead) nor takes its 2 MiB
/// paths, as where transparent huge pages are off.
pub fn disabled_by_config() -> bool {
    crate::config::disabled().huge_pages
}

/// Why 2 MiB granules cannot be had here, if they cannot: THP disabled or missing, the kernel
/// unable to report PMD mappings, or turned off ([`crate::config`], for testing the 4 KiB
/// paths on a machine that has huge pages).
pub fn unavailable_reason() -> Option<String> {
    if disabled_by_config() {
        return Some(format!(
            "huge pages disabled by {}",
            crate::config::said_by()
        ));
    }
    match thp_policy().as_deref() {
        None => return Some("transparent huge pages are missing from this kernel".into()),
        Some("never") => {
            return Some(
                "transparent huge pages are off (/sys/kernel/mm/transparent_hugepage/enabled = never)"
                    .into(),
            );
        }
        _ => {}
    }
    match pagemap() {
        Err(e) => Some(e),
        Ok(_) => match scan(RawRange {
            addr: 0,
            len: HUGE_PAGE_SIZE,
        }) {
            HugeScan::Unknown(e) => Some(e),
            HugeScan::Known { .. } => None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::{MapOptions, Mapping};

    #[test]
    fn whole_pmds_inside_a_range() {
        let h = HUGE_PAGE_SIZE;
        let r = RawRange {
            addr: h + 100,
            len: 3 * h,
        };
        assert_eq!(
            whole_pmds(r),
            RawRange {
                addr: 2 * h,
                len: 2 * h
            }
        );
        assert!(
            whole_pmds(RawRange {
                addr: h + 1,
                len: h
            })
            .is_empty()
        );
    }

    #[test]
    fn a_populated_huge_mapping_scans_huge_and_a_base_one_does_not() {
        if let Some(why) = unavailable_reason() {
            crate::skip::skip(crate::skip::Capability::HugePages, &why);
            return;
        }
        let h = HUGE_PAGE_SIZE;
        let m = Mapping::anonymous(4 * h, MapOptions::POPULATED_2M).unwrap();
        let s = scan(m.range());
        // The kernel may fail to find free huge pages; it then says so by the granule.
        assert_ne!(s.granule(), Granule::Base, "{s:?}");
        let b = Mapping::anonymous(4 * h, MapOptions::POPULATED_4K).unwrap();
        assert_eq!(scan(b.range()).granule(), Granule::Base);
        // Splitting one PMD (a 4 KiB protection change in it) makes the range mixed.
        m.advise_range(
            RawRange {
                addr: m.addr() + h,
                len: 4096,
            },
            libc::MADV_DONTNEED,
            "madvise",
        )
        .unwrap();
        let s = scan(m.range());
        assert_eq!(s.granule(), Granule::Mixed, "{s:?}");
        assert_eq!(s.huge_bytes(), 3 * h);
    }
}
