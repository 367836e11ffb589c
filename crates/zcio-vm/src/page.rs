//! Pages and page-aligned ranges.
//!
//! Every VM primitive of Genie (paper 000, §6) works on whole pages: referencing, read-only,
//! invalidate, swap. A [`RawRange`] is an address range in this process, not a Rust reference:
//! the VM layer passes it to the kernel, which checks it, and never dereferences it itself.

use crate::error::{Result, VmError};

/// Size of a base page on this machine, read once from the auxiliary vector.
pub fn page_size() -> usize {
    static SIZE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SIZE.get_or_init(rustix::param::page_size)
}

/// Size of a PMD-mapped transparent huge page on x86_64.
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// Round `x` down to a multiple of `a` (a power of two).
#[inline]
pub const fn align_down(x: usize, a: usize) -> usize {
    x & !(a - 1)
}

/// Round `x` up to a multiple of `a` (a power of two); `None` on overflow.
#[inline]
pub const fn align_up(x: usize, a: usize) -> Option<usize> {
    match x.checked_add(a - 1) {
        Some(v) => Some(v & !(a - 1)),
        None => None,
    }
}

/// Offset of `addr` inside its page.
#[inline]
pub fn page_offset(addr: usize) -> usize {
    addr & (page_size() - 1)
}

/// A range of addresses `[addr, addr + len)` in this process.
///
/// It carries no lifetime and grants no access: it is what the kernel is told, and what the
/// page-referencing tables key on.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RawRange {
    /// First address.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
}

impl std::fmt::Debug for RawRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{:#x}, {:#x})", self.addr, self.addr + self.len)
    }
}

impl RawRange {
    /// A new range; fails if it would wrap around the address space.
    pub fn new(addr: usize, len: usize) -> Result<Self> {
        if addr.checked_add(len).is_none() {
            return Err(VmError::TooLarge {
                what: "range end",
                value: len,
                limit: usize::MAX - addr,
            });
        }
        Ok(RawRange { addr, len })
    }

    /// The base page at `addr`.
    pub fn page(addr: usize) -> Self {
        RawRange {
            addr,
            len: page_size(),
        }
    }

    /// The range a byte slice occupies.
    pub fn of(buf: &[u8]) -> Self {
        RawRange {
            addr: buf.as_ptr() as usize,
            len: buf.len(),
        }
    }

    /// One past the last address.
    #[inline]
    pub fn end(&self) -> usize {
        self.addr + self.len
    }

    /// Whether the range is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether both ends are page-aligned.
    pub fn is_page_aligned(&self) -> bool {
        page_offset(self.addr) == 0 && page_offset(self.len) == 0
    }

    /// Fail with [`VmError::Misaligned`] unless both ends are page-aligned and the range is not empty.
    pub fn check_pages(&self, what: &'static str) -> Result<()> {
        let p = page_size();
        if self.len == 0 {
            return Err(VmError::Empty { what });
        }
        if page_offset(self.addr) != 0 {
            return Err(VmError::Misaligned {
                what,
                value: self.addr,
                alignment: p,
            });
        }
        if page_offset(self.len) != 0 {
            return Err(VmError::Misaligned {
                what,
                value: self.len,
                alignment: p,
            });
        }
        Ok(())
    }

    /// The smallest page-aligned range covering this one (every page it touches).
    pub fn span_pages(&self) -> RawRange {
        if self.len == 0 {
            return RawRange {
                addr: align_down(self.addr, page_size()),
                len: 0,
            };
        }
        let start = align_down(self.addr, page_size());
        let end = align_up(self.end(), page_size()).unwrap_or(usize::MAX & !(page_size() - 1));
        RawRange {
            addr: start,
            len: end - start,
        }
    }

    /// Bytes of this range on the partial pages before and after [`RawRange::full_pages`] (the
    /// pages it shares with other memory). A range inside one page is all head.
    pub fn partial_lens(&self) -> (usize, usize) {
        let full = self.full_pages();
        let ps = page_size();
        if self.len == 0 {
            (0, 0)
        } else if full.is_empty() && self.addr / ps == (self.end() - 1) / ps {
            (self.len, 0)
        } else {
            (full.addr - self.addr, self.end() - full.end())
        }
    }

    /// The largest page-aligned range inside this one (the pages it covers completely).
    pub fn full_pages(&self) -> RawRange {
        self.aligned_within(page_size())
    }

    /// The largest range inside this one whose start and end are multiples of `align` (a power
    /// of two): the granules of that size it covers completely; empty if none.
    pub fn aligned_within(&self, align: usize) -> RawRange {
        let start = align_up(self.addr, align).unwrap_or(usize::MAX);
        let end = align_down(self.end(), align);
        if end <= start {
            RawRange {
                addr: start.min(end),
                len: 0,
            }
        } else {
            RawRange {
                addr: start,
                len: end - start,
            }
        }
    }

    /// Number of pages (for a page-aligned range).
    pub fn pages(&self) -> usize {
        self.len / page_size()
    }

    /// Whether `other` lies entirely inside `self`.
    pub fn contains(&self, other: &RawRange) -> bool {
        other.addr >= self.addr && other.end() <= self.end()
    }

    /// Whether `addr` lies inside.
    pub fn contains_addr(&self, addr: usize) -> bool {
        addr >= self.addr && addr < self.end()
    }

    /// The overlap of two ranges, if any.
    pub fn intersect(&self, other: &RawRange) -> Option<RawRange> {
        let s = self.addr.max(other.addr);
        let e = self.end().min(other.end());
        (s < e).then(|| RawRange {
            addr: s,
            len: e - s,
        })
    }

    /// Sub-range `[off, off + len)` relative to the start.
    pub fn sub(&self, off: usize, len: usize) -> Result<RawRange> {
        if off.checked_add(len).is_none_or(|e| e > self.len) {
            return Err(VmError::OutOfBounds {
                what: "sub-range",
                start: self.addr.wrapping_add(off),
                end: self.addr.wrapping_add(off).wrapping_add(len),
                bound_start: self.addr,
                bound_end: self.end(),
            });
        }
        Ok(RawRange {
            addr: self.addr + off,
            len,
        })
    }
}

/// Write into `out` the parts of `r` not covered by any of `holes`, in address order, without
/// allocating (provided `out` has room for `holes.count() + 1` ranges); the VM runtime calls it
/// while holding its lock, where allocating could touch a write-protected page.
///
/// Returns `false`, leaving `out` partial, if `out` would have had to grow.
pub fn complement_into<I>(r: RawRange, holes: I, out: &mut Vec<RawRange>) -> bool
where
    I: Iterator<Item = RawRange> + Clone,
{
    out.clear();
    let mut cur = r.addr;
    while cur < r.end() {
        // The hole intersecting [cur, end) that starts first.
        let mut first: Option<RawRange> = None;
        for h in holes.clone() {
            if h.end() > cur
                && h.addr < r.end()
                && h.len > 0
                && first.is_none_or(|f| h.addr < f.addr)
            {
                first = Some(h);
            }
        }
        match first {
            None => {
                if out.len() == out.capacity() {
                    return false;
                }
                out.push(RawRange {
                    addr: cur,
                    len: r.end() - cur,
                });
                break;
            }
            Some(h) if h.addr <= cur => cur = h.end(),
            Some(h) => {
                if out.len() == out.capacity() {
                    return false;
                }
                out.push(RawRange {
                    addr: cur,
                    len: h.addr - cur,
                });
                cur = h.end();
            }
        }
    }
    true
}

/// Subtract a set of ranges from `r`, returning what is left in address order.
///
/// Used to find the pages of a completed output that no other pending output still covers.
pub fn subtract(r: RawRange, holes: &[RawRange]) -> Vec<RawRange> {
    let mut cuts: Vec<RawRange> = holes.iter().filter_map(|h| r.intersect(h)).collect();
    cuts.sort_by_key(|c| c.addr);
    let mut out = Vec::new();
    let mut cur = r.addr;
    for c in cuts {
        if c.addr > cur {
            out.push(RawRange {
                addr: cur,
                len: c.addr - cur,
            });
        }
        cur = cur.max(c.end());
    }
    if cur < r.end() {
        out.push(RawRange {
            addr: cur,
            len: r.end() - cur,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn span_and_full_pages() {
        let p = page_size();
        let r = RawRange {
            addr: p + 10,
            len: 2 * p,
        };
        assert_eq!(
            r.span_pages(),
            RawRange {
                addr: p,
                len: 3 * p
            }
        );
        assert_eq!(
            r.full_pages(),
            RawRange {
                addr: 2 * p,
                len: p
            }
        );
        let small = RawRange {
            addr: p + 1,
            len: 5,
        };
        assert_eq!(small.full_pages().len, 0);
        assert_eq!(small.span_pages(), RawRange { addr: p, len: p });
    }

    #[test]
    fn check_pages_names_the_rule() {
        let p = page_size();
        let e = RawRange {
            addr: p + 1,
            len: p,
        }
        .check_pages("buffer")
        .unwrap_err();
        assert!(matches!(e, VmError::Misaligned { what: "buffer", value, .. } if value == p + 1));
        let e = RawRange { addr: p, len: 0 }
            .check_pages("buffer")
            .unwrap_err();
        assert!(matches!(e, VmError::Empty { what: "buffer" }));
    }

    proptest! {
        #[test]
        fn subtract_covers_exactly_the_rest(
            start in 0usize..1000, len in 0usize..1000,
            holes in proptest::collection::vec((0usize..2000, 0usize..300), 0..6)
        ) {
            let r = RawRange { addr: start, len };
            let hs: Vec<RawRange> = holes.iter().map(|&(a, l)| RawRange { addr: a, len: l }).collect();
            let rest = subtract(r, &hs);
            for x in r.addr..r.end() {
                let in_hole = hs.iter().any(|h| h.contains_addr(x));
                let in_rest = rest.iter().any(|q| q.contains_addr(x));
                prop_assert_eq!(in_hole, !in_rest, "address {}", x);
            }
            for w in rest.windows(2) { prop_assert!(w[0].end() <= w[1].addr); }
            let mut out = Vec::with_capacity(hs.len() + 1);
            prop_assert!(complement_into(r, hs.iter().copied(), &mut out));
            prop_assert_eq!(out, rest);
        }
    }
}
