//! Page swapping: application pages exchanged with staging pages through an empty scratch
//! range, and plain moves of a range into an empty one.

use super::moves::{Budget, MoveStep, Run, Step};
use super::{MAX_TRANSIENT, VmRuntime};
use crate::error::{Result, VmError};
use crate::page::{RawRange, complement_into, page_size};
use std::sync::atomic::Ordering;

impl VmRuntime {
    /// Move the pages of `src` into the empty, registered range `dst` (equal page-aligned
    /// lengths), as `step` of an operation. Pages that cannot be moved, for whatever reason the
    /// kernel gives, are copied; returns the bytes copied that way.
    ///
    /// # Safety
    ///
    /// `dst` must be memory the caller owns for writing (a zcio mapping or an application buffer
    /// borrowed mutably for this call) and must currently be empty (its pages moved away);
    /// `src` must be memory the caller owns, which is left empty.
    pub unsafe fn move_range(&self, step: MoveStep, dst: RawRange, src: RawRange) -> Result<usize> {
        self.check_live()?;
        if dst.len != src.len {
            return Err(VmError::LengthMismatch {
                what: "move",
                left: dst.len,
                right: src.len,
            });
        }
        dst.check_pages("move destination")?;
        src.check_pages("move source")?;
        let Some(u) = self.uffd.as_ref().filter(|_| self.caps.swap) else {
            // SAFETY: the caller owns both ranges (contract above); copying preserves the bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(src.addr as *const u8, dst.addr as *mut u8, src.len)
            };
            return Ok(src.len);
        };
        let mut copied = 0;
        let run = Run::allowing_holes(step, dst.addr, src.addr, src.len, false);
        // A page the kernel will not move (pinned or shared since a fork, the address space
        // that kept changing, or mappings it finds incompatible) is copied, the source left
        // as it is (the caller treats the source as free memory): both ranges are the
        // caller's, so a copy is always a correct move, and a refusal midway leaves no page
        // behind.
        let on_refused = |off: usize, _errno: i32| {
            // SAFETY: one page of the caller's ranges, content-preserving copy.
            unsafe { self.fill_page(u, dst.addr + off, src.addr + off) };
            self.counters
                .move_fallback_copies
                .fetch_add(1, Ordering::Relaxed);
            copied += page_size();
            Step::<std::convert::Infallible>::Skip
        };
        // SAFETY: the caller's contract covers exactly these ranges.
        let Ok(()) = unsafe { self.move_run(u, run, &mut Budget::new(), on_refused) };
        Ok(copied)
    }

    /// Swap the pages of an application range with those of a staging range, through an empty
    /// scratch range (all three page-aligned and of equal length). Afterwards `app` shows what
    /// `staging` showed, `scratch` holds the application's old pages, and `staging` is empty.
    /// Pages under a pending output are not swapped but copied (the output must keep them).
    ///
    /// Returns the bytes copied instead of moved.
    ///
    /// # Safety
    ///
    /// `app` must be the full pages of an application buffer borrowed mutably by the caller for
    /// this call and registered with [`VmRuntime::register_app`]; `staging` and `scratch` must be
    /// runtime-registered mappings the caller owns, `scratch` empty.
    pub unsafe fn swap(
        &self,
        app: RawRange,
        staging: RawRange,
        scratch: RawRange,
    ) -> Result<usize> {
        self.check_live()?;
        if app.len != staging.len || app.len != scratch.len {
            return Err(VmError::LengthMismatch {
                what: "swap",
                left: app.len,
                right: staging.len,
            });
        }
        if app.is_empty() {
            return Ok(0);
        }
        app.check_pages("swapped application range")?;
        if !self.caps.swap {
            // SAFETY: caller owns app for writing and staging for reading.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    staging.addr as *const u8,
                    app.addr as *mut u8,
                    app.len,
                )
            };
            return Ok(app.len);
        }
        // Which runs of the application range are free of pending outputs? Computed into
        // vectors allocated before taking the lock (allocation under it could fault).
        let mut cap = 8;
        let (runs, busy) = loop {
            let mut runs = Vec::with_capacity(cap);
            let mut busy = Vec::with_capacity(cap);
            let mut st = self.lock();
            if st.outputs.len() + 2 > cap {
                cap = 2 * (st.outputs.len() + 2);
                continue;
            }
            let outs = st.outputs.iter().map(|o| o.range);
            complement_into(app, outs, &mut runs);
            complement_into(app, runs.iter().copied(), &mut busy);
            if st.transient.len() + runs.len() > MAX_TRANSIENT {
                return Err(VmError::TooLarge {
                    what: "concurrent swaps",
                    value: st.transient.len() + runs.len(),
                    limit: MAX_TRANSIENT,
                });
            }
            st.transient.extend(runs.iter().copied());
            break (runs, busy);
        };
        let mut copied = 0;
        let result = (|| -> Result<()> {
            for r in &runs {
                let off = r.addr - app.addr;
                let scr = RawRange {
                    addr: scratch.addr + off,
                    len: r.len,
                };
                let stg = RawRange {
                    addr: staging.addr + off,
                    len: r.len,
                };
                // SAFETY: the caller's contract covers app, staging and scratch.
                copied += unsafe { self.swap_run(*r, stg, scr)? };
            }
            Ok(())
        })();
        {
            let mut st = self.lock();
            st.transient.retain(|t| !runs.contains(t));
        }
        result?;
        for b in busy {
            let off = b.addr - app.addr;
            // SAFETY: the caller owns app for writing; the write may take TCOW faults, which the
            // handler resolves (this thread holds no lock).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    (staging.addr + off) as *const u8,
                    b.addr as *mut u8,
                    b.len,
                )
            };
            copied += b.len;
        }
        Ok(copied)
    }

    /// One run of [`VmRuntime::swap`]: app pages out to scratch, staging pages in. A page that
    /// cannot be moved out (pinned, or shared with a forked child) stays where it is and gets the
    /// staging bytes by copy; writing it breaks the sharing, so a child never sees the input.
    /// Where the kernel refuses a page for another reason (the mappings are not compatible for
    /// a move: `EINVAL`), it and every page after it stay and get the staging bytes by copy:
    /// the run still delivers every byte, and no page is left moved out.
    ///
    /// # Safety
    /// As for [`VmRuntime::swap`].
    unsafe fn swap_run(
        &self,
        app: RawRange,
        staging: RawRange,
        scratch: RawRange,
    ) -> Result<usize> {
        let u = self.uffd.as_ref().expect("swap_run only with UFFDIO_MOVE");
        let ps = page_size();
        let mut copied = 0;
        // One EAGAIN budget for both phases.
        let mut budget = Budget::new();
        // Phase 1: application pages out. `stay_from` marks pages that could not be moved;
        // `refused_at`, where the kernel refused the rest.
        let mut stay_from = Vec::new();
        let mut refused_at = app.len;
        let out = Run::allowing_holes(MoveStep::SwapOut, scratch.addr, app.addr, app.len, true);
        let on_refused = |off: usize, errno: i32| match errno {
            // Pinned, shared with a forked child, or the address space kept changing:
            // the page stays and gets the staging bytes by copy in phase 2.
            libc::EBUSY | libc::EAGAIN => {
                stay_from.push(off);
                Step::Skip
            }
            _ => {
                refused_at = off;
                self.counters.refused_moves.fetch_add(1, Ordering::Relaxed);
                Step::Stop(())
            }
        };
        // SAFETY: the caller owns app for writing and scratch (empty) for writing.
        let _ = unsafe { self.move_run(u, out, &mut budget, on_refused) };
        // Phase 2: staging pages in, run by run between the pages that stayed; from
        // `refused_at` on, every page stayed.
        let mut start = 0;
        let stayed = stay_from
            .iter()
            .copied()
            .chain((refused_at..app.len).step_by(ps));
        for end in stayed.chain(std::iter::once(app.len)) {
            let (dst, src) = (app.addr + start, staging.addr + start);
            let run = Run::allowing_holes(MoveStep::SwapIn, dst, src, end - start, false);
            let on_refused = |off: usize, _errno: i32| {
                // The app page got populated meanwhile (a concurrent touch) or the staging
                // page is pinned: copy this page.
                // UFFDIO_COPY fills an empty page atomically and wakes anyone waiting on
                // it (a plain write would fault into the handler, which leaves transient
                // pages alone); a page populated meanwhile takes a plain copy.
                // SAFETY: one page of the caller's ranges.
                unsafe { self.fill_page(u, run.dst + off, run.src + off) };
                self.counters
                    .move_fallback_copies
                    .fetch_add(1, Ordering::Relaxed);
                copied += ps;
                Step::<std::convert::Infallible>::Skip
            };
            // SAFETY: the app pages of [start, end) are empty after phase 1; staging is the caller's.
            let Ok(()) = unsafe { self.move_run(u, run, &mut budget, on_refused) };
            if end < app.len {
                // SAFETY: the page that stayed is the caller's; copying into it breaks COW
                // sharing (and fills it with UFFDIO_COPY where it is a hole).
                unsafe { self.fill_page(u, app.addr + end, staging.addr + end) };
                self.counters
                    .move_fallback_copies
                    .fetch_add(1, Ordering::Relaxed);
                copied += ps;
            }
            start = end + ps;
        }
        Ok(copied)
    }
}
