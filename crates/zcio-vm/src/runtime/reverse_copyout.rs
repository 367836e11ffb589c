//! Reverse copyout (paper 000, §5.2): a partially filled input page completed with the
//! application's bytes and swapped in.

use super::moves::{Budget, MoveStep, Run, Step, retry_eagain};
use super::{EAGAIN_RETRIES, VmRuntime};
use crate::error::{Result, VmError};
use crate::page::{RawRange, page_size};
use std::sync::atomic::Ordering;

impl VmRuntime {
    /// Reverse copyout of one partially filled page (paper 000, §5.2, Figure 2): complete the
    /// staging page with the application's bytes outside `data` (offsets within the page), then
    /// swap it into the application's page. The application page is write-protected and marked
    /// in transition meanwhile, so a write by another thread to the bytes outside `data` waits
    /// and lands in the new page instead of being lost. Returns the bytes the CPU copied to do it
    /// (the application's bytes that complete the page, and the whole page where the staging
    /// page could not be moved in and was copied instead), or `None`, having changed nothing,
    /// where the page cannot be swapped (under a pending output, pinned or shared with a forked
    /// child, no `UFFDIO_MOVE`): the caller then copies `data` out.
    ///
    /// # Safety
    ///
    /// `app_page` is a page of this process whose bytes at `data` belong to an application buffer
    /// borrowed mutably by the caller; `staging_page` and `scratch_page` are pages of
    /// runtime-registered mappings the caller owns, `scratch_page` empty.
    pub unsafe fn reverse_copyout(
        &self,
        app_page: usize,
        data: std::ops::Range<usize>,
        staging_page: usize,
        scratch_page: usize,
    ) -> Result<Option<usize>> {
        self.check_live()?;
        let ps = page_size();
        let Some(u) = self.uffd.as_ref().filter(|_| self.caps.swap) else {
            return Ok(None);
        };
        let pr = RawRange::page(app_page);
        pr.check_pages("reverse copyout page")?;
        if data.start > data.end || data.end > ps {
            return Err(VmError::OutOfBounds {
                what: "reverse copyout data",
                start: data.start,
                end: data.end,
                bound_start: 0,
                bound_end: ps,
            });
        }
        // 0. Fault the application page in if it is not there (never touched, or given back
        // since the input's access check): step 2 reads it while it is in transition, when the
        // handler leaves a missing page to the swap in progress, which is this thread.
        // SAFETY: the application page is readable per the contract; a volatile read of one
        // byte changes nothing.
        let _ = unsafe { std::ptr::read_volatile(app_page as *const u8) };
        // 1. Protect the page and mark it in transition.
        self.settle();
        {
            let mut busy = 0;
            let mut st = self.lock();
            loop {
                if st.outputs.iter().any(|o| o.range.intersect(&pr).is_some())
                    || st.transient.len() == st.transient.capacity()
                {
                    return Ok(None);
                }
                self.ensure_registered_locked(&mut st, pr)?;
                match u.writeprotect(pr, true, false) {
                    Ok(()) => break,
                    Err(e) if e.errno() == Some(libc::EAGAIN) && busy < EAGAIN_RETRIES => {
                        busy += 1;
                        st = self.relock(st);
                    }
                    Err(_) => return Ok(None),
                }
            }
            st.transient.push(pr);
        }
        // 2. Complete the staging page with the application's bytes around the data.
        // SAFETY: the page is write-protected, so the bytes read are stable; both pages are
        // readable (app) and writable (staging) per the contract, and the ranges lie in them.
        unsafe {
            std::ptr::copy_nonoverlapping(
                app_page as *const u8,
                staging_page as *mut u8,
                data.start,
            );
            std::ptr::copy_nonoverlapping(
                (app_page + data.end) as *const u8,
                (staging_page + data.end) as *mut u8,
                ps - data.end,
            );
        }
        // 3. Swap: the application page out to scratch (a page pinned or shared with a child
        // stays), the staging page in.
        // One page each, a fresh EAGAIN budget each; a refused page ends the move.
        let move_page = |step: MoveStep, dst: usize, src: usize, dontwake: bool| {
            let run = Run {
                step,
                dst,
                src,
                len: ps,
                allow_src_holes: false,
                dontwake,
            };
            // SAFETY: the caller's contract covers the three pages; `dst` is empty
            // (scratch, or the app page once moved out).
            unsafe { self.move_run(u, run, &mut Budget::new(), |_, _| Step::Stop(())) }
        };
        let out = move_page(MoveStep::ReverseOut, scratch_page, app_page, true).is_ok();
        // The completion copy of step 2.
        let mut copied = ps - (data.end - data.start);
        if out && move_page(MoveStep::ReverseIn, app_page, staging_page, false).is_err() {
            copied += ps;
            // SAFETY: as above; fills the empty page with a copy and wakes waiters.
            unsafe { self.fill_page(u, app_page, staging_page) };
            self.counters
                .move_fallback_copies
                .fetch_add(1, Ordering::Relaxed);
        }
        // 4. Out of transition; lift the protection (of the old page if it stayed), waking
        // writers that waited, and wake readers that met the page empty.
        self.lock().transient.retain(|t| *t != pr);
        let _ = u.wake(pr);
        let _ = retry_eagain(VmError::errno, || u.writeprotect(pr, false, false));
        Ok(out.then_some(copied))
    }
}
