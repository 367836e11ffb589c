//! System-aligned input staging with page swapping (paper 000, §5.2: *system input alignment* and
//! *page swapping*; §5.3: *reverse copyout*).
//!
//! Input for an application buffer is read into a staging window that starts at the same offset
//! within a page as the buffer. Once the input has completed, the full pages of the window are
//! swapped into the buffer (`UFFDIO_MOVE`, two moves per page through an empty scratch run) and
//! only the partial pages at either end are copied. Since the buffer is not touched until the
//! input has completed, a failed or truncated input leaves it as it was: this is what lets
//! emulated copy keep copy semantics' input integrity.
//!
//! Once the input is in the staging, a delivery always delivers it: a page the kernel will not
//! move (pinned, shared since a fork, or in mappings it finds incompatible) gets the bytes by
//! copy, and a swap that cannot start at all becomes a copy of the staging. Nothing is left
//! moved out of the buffer, and the staging stays usable for the next input.

use crate::error::{Result, VmError};
use crate::mapping::{MapOptions, Mapping};
use crate::page::{HUGE_PAGE_SIZE, RawRange, page_size};
use crate::runtime::{MoveStep, VmRuntime};

/// What a delivery did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// Bytes delivered by swapping pages.
    pub swapped: usize,
    /// Bytes the CPU copied: data delivered by copying (partial pages, pinned pages, or the
    /// whole buffer when the swap did not pay or was not possible), and under reverse copyout
    /// the application's own bytes that complete a swapped page (so `swapped + copied` can
    /// exceed the length).
    pub copied: usize,
}

/// A staging buffer and its scratch twin, both registered with the runtime.
#[derive(Debug)]
pub struct Staging {
    stg: Mapping,
    scr: Mapping,
    window: Option<(usize, usize)>,
    /// The alignment the window keeps with the application buffer: a page, or 2 MiB for
    /// staging in huge pages ([`Staging::new_huge`]).
    granule: usize,
    /// The run of scratch known to be empty: the staging run whose pages the last huge
    /// delivery moved out (it became the scratch), so that the next delivery of the same
    /// window needs no `MADV_DONTNEED` first.
    scr_empty: Option<RawRange>,
}

impl Staging {
    /// The runs of staging and of scratch `len` bytes long at offset `off` of each.
    fn runs_at(&self, off: usize, len: usize) -> (RawRange, RawRange) {
        let at = |m: &Mapping| RawRange {
            addr: m.addr() + off,
            len,
        };
        (at(&self.stg), at(&self.scr))
    }

    /// Staging for inputs of up to `max_len` bytes at any page offset.
    pub fn new(max_len: usize) -> Result<Staging> {
        Self::make(max_len, page_size(), MapOptions::NO_HUGE)
    }

    /// Staging in transparent huge pages for inputs of up to `max_len` bytes: the window keeps
    /// the application buffer's offset modulo 2 MiB (input alignment at the huge-page level), so
    /// that whole PMDs swap with one `UFFDIO_MOVE` each ([`Staging::deliver_huge`]). The pages
    /// circulate: the application's old huge pages become the next staging, so that the steady
    /// state faults and zeroes nothing.
    pub fn new_huge(max_len: usize) -> Result<Staging> {
        Self::make(max_len, HUGE_PAGE_SIZE, MapOptions::HUGE)
    }

    /// Staging and scratch of `max_len` bytes plus a granule of slack at either end.
    fn make(max_len: usize, granule: usize, opts: MapOptions) -> Result<Staging> {
        if max_len == 0 {
            return Err(VmError::Empty {
                what: "staging length",
            });
        }
        let len = max_len.checked_add(2 * granule).ok_or(VmError::TooLarge {
            what: "staging length",
            value: max_len,
            limit: crate::mapping::MAX_MAPPING,
        })?;
        let rt = VmRuntime::get();
        Ok(Staging {
            stg: rt.registered_mapping(len, opts)?,
            scr: rt.registered_mapping(len, opts)?,
            window: None,
            granule,
            scr_empty: None,
        })
    }

    /// The window read into (offset, length), consumed.
    fn take_window(&mut self) -> Result<(usize, usize)> {
        self.window.take().ok_or(VmError::Empty {
            what: "staging window (nothing read)",
        })
    }

    /// The window, consumed, for delivery into an application buffer of `app_len` bytes.
    fn take_window_for(&mut self, app_len: usize) -> Result<(usize, usize)> {
        let (off, len) = self.take_window()?;
        if app_len != len {
            return Err(VmError::LengthMismatch {
                what: "deliver",
                left: app_len,
                right: len,
            });
        }
        Ok((off, len))
    }

    /// Whether this staging is in huge pages ([`Staging::new_huge`]).
    pub fn is_huge(&self) -> bool {
        self.granule == HUGE_PAGE_SIZE
    }

    /// Largest input this staging takes.
    pub fn capacity(&self) -> usize {
        self.stg.len() - 2 * self.granule
    }

    /// The window of `len` bytes, at the offset of `app_addr` modulo 2 MiB, of a huge staging.
    pub fn window_huge(&mut self, app_addr: usize, len: usize) -> Result<&mut [u8]> {
        if !self.is_huge() {
            return Err(VmError::Misaligned {
                what: "staging for a 2 MiB window (made by Staging::new)",
                value: self.stg.addr(),
                alignment: HUGE_PAGE_SIZE,
            });
        }
        self.window(app_addr, len)
    }

    /// Genie's move input at 2 MiB: the window's whole 2 MiB granules are moved into the empty
    /// region `dst` (the region gets the system pages the data arrived in, never zeroed ones),
    /// the bytes after the last whole granule copied. The window must start on a granule
    /// (`window_huge` at a 2 MiB-aligned address) and `dst` be a 2 MiB-aligned mapping registered
    /// with the runtime ([`VmRuntime::registered_mapping`]) of at least the window's length;
    /// its pages there are discarded first. Consumes the window; [`Staging::take_back`] returns
    /// the pages when the region is done with.
    pub fn deliver_pages(&mut self, dst: &mut Mapping) -> Result<Delivery> {
        let (off, len) = self.take_window()?;
        let h = HUGE_PAGE_SIZE;
        if !self.is_huge() || off != 0 || dst.addr() % h != 0 {
            return Err(VmError::Misaligned {
                what: "region for a move of whole 2 MiB granules",
                value: dst.addr() + off,
                alignment: h,
            });
        }
        if dst.len() < len {
            return Err(VmError::LengthMismatch {
                what: "region for a move",
                left: dst.len(),
                right: len,
            });
        }
        let whole = len / h * h;
        let d = dst.range().sub(0, whole)?;
        let s = self.stg.range().sub(0, whole)?;
        // Emptied first; where that or the move cannot even start, the granules are copied:
        // the input is in the staging and goes nowhere else.
        let moved = match whole {
            0 => Ok(0),
            // SAFETY: `d` is the caller's mapping, borrowed mutably and emptied first; `s` is
            // our staging, whose pages (the input just read) are left to the region.
            _ => dst
                .discard(d)
                .and_then(|()| unsafe { VmRuntime::get().move_range(MoveStep::RegionIn, d, s) }),
        };
        let copied = moved.unwrap_or_else(|_| {
            dst.as_mut_slice()[..whole].copy_from_slice(&self.stg.as_slice()[..whole]);
            whole
        });
        dst.as_mut_slice()[whole..len].copy_from_slice(&self.stg.as_slice()[whole..len]);
        Ok(Delivery {
            swapped: whole - copied,
            copied: len - whole + copied,
        })
    }

    /// Take the whole 2 MiB granules of `src` back into this staging where it is empty (Genie's
    /// region deallocation returning the pages to the system's pool: the next input reads into
    /// them instead of into freshly zeroed pages). Returns the bytes taken back; nothing where
    /// the staging is populated there or the kernel refuses (the pages then go with `src`).
    pub fn take_back(&mut self, src: &mut Mapping) -> usize {
        let h = HUGE_PAGE_SIZE;
        if !self.is_huge() || src.addr() % h != 0 {
            return 0;
        }
        let whole = src.len().min(self.capacity()) / h * h;
        let (Ok(d), Ok(s)) = (self.stg.range().sub(0, whole), src.range().sub(0, whole)) else {
            return 0;
        };
        if whole == 0 || crate::huge::scan(d).huge_bytes() > 0 {
            return 0;
        }
        // SAFETY: `d` is our staging, empty there (no huge page, and after `deliver_pages` no
        // page at all; a populated page makes the move fail, not overwrite); `s` is the
        // caller's mapping, borrowed mutably, left empty.
        match unsafe { VmRuntime::get().move_range(MoveStep::TakeBack, d, s) } {
            Ok(copied) => whole - copied,
            Err(_) => 0,
        }
    }

    /// Deliver the window of a huge staging into `app`: its whole PMDs (2 MiB-aligned granules)
    /// are swapped, when there are at least `min_swap_pmds` of them, and the bytes before and
    /// after them copied (moving 4 KiB pages out of a huge page would split it). Consumes the
    /// window.
    pub fn deliver_huge(&mut self, app: &mut [u8], min_swap_pmds: usize) -> Result<Delivery> {
        let (off, len) = self.take_window_for(app.len())?;
        let h = HUGE_PAGE_SIZE;
        let rt = VmRuntime::get();
        let appr = RawRange::of(app);
        let pmds = crate::huge::whole_pmds(appr);
        let swap_ok = self.is_huge()
            && rt.capabilities().swap
            && pmds.len / h >= min_swap_pmds.max(1)
            && appr.addr % h == off;
        if !(swap_ok && rt.register_app(appr).is_ok()) {
            app.copy_from_slice(&self.stg.as_slice()[off..off + len]);
            return Ok(Delivery {
                swapped: 0,
                copied: len,
            });
        }
        let head = pmds.addr - appr.addr;
        let tail = appr.end() - pmds.end();
        app[..head].copy_from_slice(&self.stg.as_slice()[off..off + head]);
        app[len - tail..].copy_from_slice(&self.stg.as_slice()[off + len - tail..off + len]);
        // Staging and scratch bytes correspond to application bytes at this distance; the
        // whole PMDs lie on 2 MiB boundaries in all three.
        let s_off = off + head;
        let (stg, scr) = self.runs_at(s_off, pmds.len);
        // Scratch must be empty there: it is where the last delivery of this window moved its
        // staging pages out; otherwise empty it.
        let ready = match self.scr_empty.is_some_and(|e| e.contains(&scr)) {
            true => Ok(()),
            false => self.scr.discard(scr),
        };
        self.scr_empty = None;
        // SAFETY: `pmds` is whole pages of `app`, borrowed mutably for this call and registered
        // above; staging and scratch are our registered mappings and the scratch run is empty.
        let swapped = ready.and_then(|()| unsafe { rt.swap(pmds, stg, scr) });
        let Ok(copied) = swapped else {
            // The swap could not start (it moves nothing then): the PMDs' bytes are copied
            // from the staging, which keeps its pages.
            let (a, b) = (head, len - tail);
            app[a..b].copy_from_slice(&self.stg.as_slice()[off + a..off + b]);
            return Ok(Delivery {
                swapped: 0,
                copied: len,
            });
        };
        std::mem::swap(&mut self.stg, &mut self.scr);
        // The staging run just emptied is the next scratch's; pages copied instead of moved
        // (under a pending output) left it populated.
        if copied == 0 {
            self.scr_empty = Some(stg);
        }
        Ok(Delivery {
            swapped: pmds.len - copied,
            copied: head + tail + copied,
        })
    }

    /// The window of `len` bytes, at the page offset of `app_addr`, into which to read the input.
    pub fn window(&mut self, app_addr: usize, len: usize) -> Result<&mut [u8]> {
        if len > self.capacity() {
            return Err(VmError::TooLarge {
                what: "input length",
                value: len,
                limit: self.capacity(),
            });
        }
        let off = app_addr % self.granule;
        self.window = Some((off, len));
        Ok(&mut self.stg.as_mut_slice()[off..off + len])
    }

    /// Deliver the window into `app` (same length as the window): swap its full pages when there
    /// are at least `min_swap_pages` of them, copy the rest. Consumes the window.
    pub fn deliver(&mut self, app: &mut [u8], min_swap_pages: usize) -> Result<Delivery> {
        self.deliver_with(app, min_swap_pages, usize::MAX)
    }

    /// As [`Staging::deliver`], with *reverse copyout*: a partially filled page holding at least
    /// `reverse_copyout_bytes` of the data is completed with the application's own bytes and
    /// swapped too, instead of having its data copied out (paper 000, §5.2; the paper puts the
    /// threshold just above half a page, where completing costs less than copying).
    pub fn deliver_with(
        &mut self,
        app: &mut [u8],
        min_swap_pages: usize,
        reverse_copyout_bytes: usize,
    ) -> Result<Delivery> {
        let (off, len) = self.take_window_for(app.len())?;
        let ps = page_size();
        let rt = VmRuntime::get();
        let appr = RawRange::of(app);
        let full = appr.full_pages();
        let (head, tail) = appr.partial_lens();
        // Whole pages to swap, or a partial page to swap by reverse copyout.
        let swap_ok = rt.capabilities().swap
            && (full.pages() >= min_swap_pages.max(1) || head.max(tail) >= reverse_copyout_bytes)
            && app.as_ptr() as usize % ps == off;
        // Scratch must be empty for a swap (emptying it is a no-op in the steady state).
        let span = RawRange {
            addr: self.scr.addr(),
            len: (off + len).div_ceil(ps) * ps,
        };
        let ready = swap_ok
            && rt.register_app(appr).is_ok_and(|r| r == full)
            && self.scr.discard(span).is_ok();
        if !ready {
            app.copy_from_slice(&self.stg.as_slice()[off..off + len]);
            return Ok(Delivery {
                swapped: 0,
                copied: len,
            });
        }
        // Staging and scratch pages correspond to application pages at this distance.
        let base = appr.addr - off;
        // Partial pages first: reverse copyout where enough of the page is data, else copy.
        let mut reversed = 0;
        // Bytes the CPU copied for reverse copyout (the application's bytes completing a page).
        let mut completion = 0;
        for (start, n) in [(0, head), (len - tail, tail)] {
            if n == 0 {
                continue;
            }
            let page = (appr.addr + start) & !(ps - 1);
            let within = appr.addr + start - page;
            // A reverse copyout that fails changes nothing: the data is copied out then.
            let done = if n >= reverse_copyout_bytes {
                // SAFETY: the page holds `n` bytes of `app`, borrowed mutably here, at `within`;
                // staging and scratch pages are ours, the scratch page emptied above.
                unsafe {
                    rt.reverse_copyout(
                        page,
                        within..within + n,
                        self.stg.addr() + (page - base),
                        self.scr.addr() + (page - base),
                    )
                }
                .unwrap_or(None)
            } else {
                None
            };
            match done {
                Some(c) => {
                    reversed += n;
                    completion += c;
                }
                None => app[start..start + n]
                    .copy_from_slice(&self.stg.as_slice()[off + start..off + start + n]),
            }
        }
        let s_off = off + head; // page-aligned offset of the full pages in staging
        let (stg, scr) = self.runs_at(s_off, full.len);
        // SAFETY: `full` is the full pages of `app`, borrowed mutably for this call and registered
        // above; staging and scratch are our registered mappings and the scratch run is empty.
        let Ok(copied) = (unsafe { rt.swap(full, stg, scr) }) else {
            // The swap could not start (it moves nothing then): the full pages' bytes are
            // copied from the staging, which keeps its pages; the partial pages are done.
            let (a, b) = (head, len - tail);
            app[a..b].copy_from_slice(&self.stg.as_slice()[off + a..off + b]);
            return Ok(Delivery {
                swapped: reversed,
                copied: len - reversed + completion,
            });
        };
        // The old application pages are in scratch: they become the next staging (page recycling).
        std::mem::swap(&mut self.stg, &mut self.scr);
        self.scr_empty = None;
        Ok(Delivery {
            swapped: full.len - copied + reversed,
            copied: head + tail - reversed + copied + completion,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliver_swaps_full_pages_and_copies_the_ends() {
        let ps = page_size();
        let mut st = Staging::new(64 * ps).unwrap();
        let mut backing = Mapping::anonymous(40 * ps, MapOptions::default()).unwrap();
        let app = &mut backing.as_mut_slice()[100..100 + 30 * ps];
        app.fill(0x11);
        for round in 0..3u8 {
            let w = st.window(app.as_ptr() as usize, app.len()).unwrap();
            for (i, b) in w.iter_mut().enumerate() {
                *b = (i as u8).wrapping_add(round);
            }
            let want = w.to_vec();
            let d = st.deliver(app, 1).unwrap();
            assert_eq!(app, &want[..]);
            assert_eq!(d.swapped + d.copied, app.len());
            if VmRuntime::get().capabilities().swap {
                assert_eq!(d.swapped, 29 * ps, "round {round}");
            }
        }
    }

    #[test]
    fn reverse_copyout_swaps_a_mostly_full_page_and_keeps_the_bytes_around_it() {
        let ps = page_size();
        let mut st = Staging::new(8 * ps).unwrap();
        let mut backing = Mapping::anonymous(6 * ps, MapOptions::default()).unwrap();
        backing.as_mut_slice().fill(0x5A); // the application's other data around the buffer
        // Head page: ps - 100 bytes of data (reversed, completed by copying the application's
        // 100 bytes before them); tail page: 100 bytes (copied).
        for (start, len, want_swapped, completion) in [
            (100, 3 * ps, 3 * ps - 100, 100),
            (ps + 10, ps - 20, ps - 20, 20), // inside one page
            (2 * ps + 3000, 200, 0, 0),      // too short: copied
        ] {
            let app = &mut backing.as_mut_slice()[start..start + len];
            let w = st.window(app.as_ptr() as usize, len).unwrap();
            for (i, b) in w.iter_mut().enumerate() {
                *b = (i % 251) as u8;
            }
            let want = w.to_vec();
            let d = st.deliver_with(app, 1, ps / 2 + 1).unwrap();
            assert_eq!(app, &want[..], "data at {start}+{len}");
            if VmRuntime::get().capabilities().swap {
                assert_eq!(d.swapped, want_swapped, "at {start}+{len}: {d:?}");
                assert_eq!(
                    d.copied,
                    len - want_swapped + completion,
                    "at {start}+{len}: the completion copy counted ({d:?})"
                );
            } else {
                assert_eq!((d.swapped, d.copied), (0, len));
            }
            let all = backing.as_slice();
            assert!(
                all[..start].iter().all(|&b| b == 0x5A)
                    && all[start + len..].iter().all(|&b| b == 0x5A),
                "the bytes around {start}+{len} were kept"
            );
            backing.as_mut_slice()[start..start + len].fill(0x5A);
        }
    }

    #[test]
    fn deliver_without_a_window_is_an_error() {
        let mut st = Staging::new(4096).unwrap();
        let mut app = [0u8; 10];
        assert!(st.deliver(&mut app, 1).is_err());
    }
}
