//! Moving pages: the one loop that moves a run of pages with `UFFDIO_MOVE`
//! ([`VmRuntime::move_run`]), the retry policy for `EAGAIN` ([`Budget`]), and filling a page by
//! copy where a page cannot be moved.

use super::{EAGAIN_RETRIES, VmRuntime};
use crate::error::VmError;
use crate::page::page_size;
use crate::uffd::{MoveError, Userfaultfd};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The `EAGAIN` retries an operation has left: [`EAGAIN_RETRIES`] in all, shared by every call
/// the operation makes (one budget for both phases of a swap, a fresh one per single move).
pub(super) struct Budget(u32);

impl Budget {
    /// A full budget.
    pub(super) fn new() -> Budget {
        Budget(0)
    }

    /// Whether one more retry is allowed after an `EAGAIN`; counts it.
    fn spend(&mut self) -> bool {
        if self.0 < EAGAIN_RETRIES {
            self.0 += 1;
            true
        } else {
            false
        }
    }
}

/// Which step of an input a run of moves is: where [`VmRuntime::inject_move_failure`] makes
/// the kernel's refusal happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum MoveStep {
    /// A swap's first phase: the application's pages out to scratch.
    SwapOut,
    /// A swap's second phase: the staging pages into the application's buffer.
    SwapIn,
    /// Reverse copyout: the application's page out to scratch.
    ReverseOut,
    /// Reverse copyout: the completed staging page into the application's buffer.
    ReverseIn,
    /// A move input at 2 MiB: the staging's pages into the new region.
    RegionIn,
    /// A move region's pages back into the huge staging.
    TakeBack,
    /// Pages moved into place by remapping (VMMR's reassembly).
    Remap,
}

impl MoveStep {
    /// Every step.
    pub const ALL: [MoveStep; 7] = [
        MoveStep::SwapOut,
        MoveStep::SwapIn,
        MoveStep::ReverseOut,
        MoveStep::ReverseIn,
        MoveStep::RegionIn,
        MoveStep::TakeBack,
        MoveStep::Remap,
    ];
}

/// Fault injection for tests, one slot a step: 0 when unarmed, else 1 + the pages the next run
/// at that step moves before the kernel "refuses" the next one with `EINVAL`.
static INJECT_MOVE: [AtomicUsize; MoveStep::ALL.len()] =
    [const { AtomicUsize::new(0) }; MoveStep::ALL.len()];

/// Take the injection armed for `step`, if any: the pages to move before the refusal. (A load
/// first: every run of moves asks, and an unarmed slot is not written.)
fn injected(step: MoveStep) -> Option<usize> {
    let slot = &INJECT_MOVE[step as usize];
    if slot.load(Ordering::Relaxed) == 0 {
        return None;
    }
    slot.swap(0, Ordering::Relaxed).checked_sub(1)
}

impl VmRuntime {
    /// Fault injection for tests: the next run of moves at `step` moves `after_pages` pages (or
    /// all it has, if fewer), then meets `EINVAL` on the next one, as when the kernel finds the
    /// two mappings incompatible (`validate_move_areas`); `None` disarms the step. Process-wide
    /// and one-shot; arming a step again replaces what was armed. Returns whether an earlier
    /// injection at the step was still unused.
    #[doc(hidden)]
    pub fn inject_move_failure(&self, step: MoveStep, after_pages: Option<usize>) -> bool {
        let armed = after_pages.map_or(0, |n| n.saturating_add(1));
        INJECT_MOVE[step as usize].swap(armed, Ordering::Relaxed) != 0
    }
}

/// A run of pages to move with [`VmRuntime::move_run`]: `len` bytes from `src` to `dst`, with
/// the `UFFDIO_MOVE` modes, and the step of an input it is.
#[derive(Clone, Copy)]
pub(super) struct Run {
    pub(super) step: MoveStep,
    pub(super) dst: usize,
    pub(super) src: usize,
    pub(super) len: usize,
    /// `UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES`.
    pub(super) allow_src_holes: bool,
    /// `UFFDIO_MOVE_MODE_DONTWAKE`.
    pub(super) dontwake: bool,
}

impl Run {
    /// `len` bytes from `src` to `dst`, where a page missing from the source is no error
    /// (`UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES`), waking the threads that faulted on `dst` unless
    /// `dontwake`.
    pub(super) fn allowing_holes(
        step: MoveStep,
        dst: usize,
        src: usize,
        len: usize,
        dontwake: bool,
    ) -> Run {
        Run {
            step,
            dst,
            src,
            len,
            allow_src_holes: true,
            dontwake,
        }
    }
}

/// What [`VmRuntime::move_run`] does about a page the kernel would not move, as its caller says.
pub(super) enum Step<E> {
    /// The caller dealt with the page (copied it, or left it where it is): go on after it.
    Skip,
    /// End the run with this.
    Stop(E),
}

/// Run `op` again while it fails with `EAGAIN` (the address space is changing: an event awaits
/// the handler thread), at most [`EAGAIN_RETRIES`] times. Not for the handler thread, nor with
/// the state lock held: only the handler's next read of its events ends the `EAGAIN`.
pub(super) fn retry_eagain<T, E>(
    errno: impl Fn(&E) -> Option<i32>,
    mut op: impl FnMut() -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    let mut budget = Budget::new();
    loop {
        match op() {
            Err(e) if errno(&e) == Some(libc::EAGAIN) && budget.spend() => {
                std::thread::yield_now();
            }
            r => return r,
        }
    }
}

impl VmRuntime {
    /// Put a copy of the page at `src` at `dst`, whether `dst` is populated or empty. An empty
    /// page is filled with `UFFDIO_COPY` (a plain write to it could fault into the handler, which
    /// leaves pages in transition alone: the writer would wait for itself); `EAGAIN` (the
    /// address space is changing, an event awaits the handler thread) is retried.
    ///
    /// # Safety
    /// `dst` is one page the caller owns for writing, in a range registered with this runtime's
    /// userfaultfd; `src` is one readable page.
    pub(super) unsafe fn fill_page(&self, u: &Userfaultfd, dst: usize, src: usize) {
        let ps = page_size();
        // SAFETY: the caller's contract.
        if retry_eagain(VmError::errno, || unsafe { u.copy(dst, src, ps, false) }).is_ok() {
            return;
        }
        // EEXIST: the page is populated, so a plain write cannot fault.
        // SAFETY: the caller's contract; the page is populated.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, ps) };
    }

    /// Move the pages of `run` with as many `UFFDIO_MOVE` calls as it takes (one a VMA the run
    /// lies over, at least), counting each call in `move_calls` and each page moved in
    /// `pages_moved`. Where the kernel says `EAGAIN` (the address space is changing: an event
    /// awaits the handler thread), yield and call again while `budget` lasts. A page the kernel
    /// refuses otherwise (`EBUSY`: pinned, or shared with a forked child; `EAGAIN` with the
    /// budget spent; any other errno, alone) goes to `on_refused` with its offset in the run and
    /// the errno, and the caller decides: skip it and go on, or stop the run with an error of
    /// its own. Not for the handler thread, nor with the state lock held (see
    /// [`retry_eagain`]).
    ///
    /// # Safety
    /// The caller owns both ranges of `run` for writing, `dst` empty where pages are to land
    /// (the contract of [`Userfaultfd::move_pages`]); the same for what `on_refused` does.
    pub(super) unsafe fn move_run<E>(
        &self,
        u: &Userfaultfd,
        run: Run,
        budget: &mut Budget,
        mut on_refused: impl FnMut(usize, i32) -> Step<E>,
    ) -> std::result::Result<(), E> {
        let ps = page_size();
        let mut off = 0;
        let mut inject = injected(run.step);
        // The most one call asks for: the rest of the run, less where the run crossed from one
        // mapping (VMA) into the next. `UFFDIO_MOVE` moves within one VMA at either end and
        // refuses a range that leaves it with `EINVAL`, having moved nothing; a buffer can lie
        // over several (two mappings side by side, or one split by a registration or advice).
        let mut limit = usize::MAX;
        while off < run.len {
            self.counters.move_calls.fetch_add(1, Ordering::Relaxed);
            let len = match inject {
                Some(k) => (k * ps).min(run.len - off),
                None => (run.len - off).min(limit),
            };
            let mut r = match len {
                0 => Err(MoveError {
                    moved: 0,
                    errno: libc::EINVAL,
                }),
                // SAFETY: the caller's contract covers the run.
                len => unsafe {
                    u.move_pages(
                        run.dst + off,
                        run.src + off,
                        len,
                        run.allow_src_holes,
                        run.dontwake,
                    )
                },
            };
            if inject.take().is_some() && off + len < run.len {
                let moved = r.as_ref().map_or_else(|e| e.moved, |n| *n);
                r = Err(MoveError {
                    moved,
                    errno: libc::EINVAL,
                });
            }
            let moved = match r {
                Ok(n) => n,
                Err(ref e) => e.moved,
            };
            self.counters
                .pages_moved
                .fetch_add((moved / ps) as u64, Ordering::Relaxed);
            off += moved;
            let Err(e) = r else {
                limit = usize::MAX;
                continue;
            };
            if e.errno == libc::EINVAL && moved == 0 && len > ps {
                // Perhaps the range leaves a VMA: ask for half (whole pages) until a call
                // moves something, then for the rest again. A page that is refused alone is
                // refused for another reason.
                limit = (len / 2).div_ceil(ps) * ps;
                continue;
            }
            if e.errno == libc::EAGAIN && budget.spend() {
                std::thread::yield_now();
                continue;
            }
            match on_refused(off, e.errno) {
                Step::Skip => off += ps,
                Step::Stop(x) => return Err(x),
            }
        }
        Ok(())
    }
}
