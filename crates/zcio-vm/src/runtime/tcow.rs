//! TCOW fault resolution: a write to a page under output moves the original out to a stash
//! slot (or a bounce slot, or copies it where it cannot move) and installs a private copy; 2 MiB
//! transparent huge pages are handled whole where they can be.
//!
//! TCOW's moves do not go through [`VmRuntime::move_run`]: they run on the handler thread, which
//! must not wait out `EAGAIN` (only its own next read of events ends it), so a fault that meets
//! `EAGAIN` is deferred and handled again after that read; and they are counted by the TCOW
//! counters, not in `move_calls` or `pages_moved`.

use super::{ActiveOutput, BOUNCE_SLOT, HSPARES_KEPT, Stashed, State, VmRuntime};
use crate::mapping::Mapping;
use crate::page::{HUGE_PAGE_SIZE, RawRange, page_size};
use crate::uffd::Userfaultfd;
use std::sync::atomic::{AtomicU64, Ordering};

impl VmRuntime {
    pub(super) fn free_slot_locked(&self, st: &mut State, slot: usize) {
        if let Some(stash) = &self.stash {
            let r = RawRange {
                addr: stash.addr() + slot * page_size(),
                len: page_size(),
            };
            // SAFETY-free: MADV_DONTNEED on our own stash page drops the moved original, which
            // no pending output references any more.
            let _ = stash.advise_range(r, libc::MADV_DONTNEED, "madvise(stash)");
        }
        st.free_slots.push(slot);
    }

    /// A huge stash slot whose original no output needs any more: kept populated as a spare for
    /// the next PMD TCOW (no zeroing, no first touch), or released beyond [`HSPARES_KEPT`].
    pub(super) fn free_hslot_locked(&self, st: &mut State, slot: usize) {
        if st.hspare.len() < HSPARES_KEPT {
            st.hspare.push(slot);
            return;
        }
        if let Some(h) = &self.hstash {
            let r = RawRange {
                addr: h.addr() + slot * HUGE_PAGE_SIZE,
                len: HUGE_PAGE_SIZE,
            };
            let _ = h.advise_range(r, libc::MADV_DONTNEED, "madvise(huge stash)");
        }
        st.hfree.push(slot);
    }

    /// Whether TCOW at 2 MiB is available (a huge stash, `UFFDIO_MOVE`, THP and `PAGEMAP_SCAN`).
    pub fn huge_tcow(&self) -> bool {
        self.hstash.is_some() && self.caps.swap
    }

    /// Resolve a write-protect fault on `page` by TCOW; `held` says how far an earlier attempt
    /// got. Returns what must be tried again after the handler has read more events or waited
    /// a little (the address space was changing: `EAGAIN`; the page cannot be moved yet).
    pub(super) fn handle_wp(&self, u: &Userfaultfd, page: usize, held: Held) -> Option<Deferred> {
        let ps = page_size();
        let pr = RawRange::page(page);
        let mut guard = self.lock();
        let st = &mut *guard;
        match held {
            Held::Slot(slot) => return self.finish_tcow(u, st, page, Some(slot)),
            Held::Bounce => return self.finish_tcow(u, st, page, None),
            Held::Huge { orig, spare } => {
                let base = page & !(HUGE_PAGE_SIZE - 1);
                return match self.finish_tcow_pmd(u, st, base, orig, spare) {
                    PmdTcow::Deferred(h) => Some((page, h)),
                    _ => None,
                };
            }
            Held::Nothing | Held::Waiting => {}
        }
        if st.transient.iter().any(|t| t.contains(&pr)) {
            // The page is being replaced (reverse copyout): the write waits for the new page.
            return Some((page, held));
        }
        let needing = st
            .outputs
            .iter()
            .filter(|o| needs_page(o, &st.stashed, page))
            .count();
        if needing == 0 {
            // No pending output needs this page as it is: lift the protection (wakes the writer).
            self.counters.wp_lifted.fetch_add(1, Ordering::Relaxed);
            drop(guard);
            if let Err(e) = u.writeprotect(pr, false, false) {
                if e.errno() == Some(libc::EAGAIN) {
                    return Some((page, held));
                }
            }
            return None;
        }
        if held == Held::Nothing {
            self.counters.tcow_faults.fetch_add(1, Ordering::Relaxed);
        }
        let room = st.stashed.len() + st.outputs.len() <= st.stashed.capacity();
        if room {
            match self.tcow_pmd(u, st, page) {
                PmdTcow::Done => return None,
                PmdTcow::Again => return Some((page, held)),
                PmdTcow::Deferred(h) => return Some((page, h)),
                PmdTcow::NotHere => {}
            }
        }
        let Some(stash) = self.stash.as_ref() else {
            // Sleep on write: the output's completion lifts the protection and wakes the writer.
            self.counters.sleep_on_write.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        if !self.caps.swap {
            // No UFFDIO_MOVE: TCOW by copy.
            return self.tcow_by_discard(u, st, page, held);
        }
        // A stash slot keeps the original mapped until the output completes; without one (all
        // taken, or no room to record it), the bounce slot takes it for the copy only: the
        // outputs' own page references keep the original alive.
        let room = st.stashed.len() + needing <= st.stashed.capacity();
        let slot = if room { st.free_slots.pop() } else { None };
        if slot.is_none() && st.bounce.is_some() {
            return Some((page, held)); // the bounce slot is in use: after it
        }
        let slot_addr = stash.addr() + slot.unwrap_or(BOUNCE_SLOT) * ps;
        // SAFETY: TCOW step 1: move the original page out of the application's address space
        // into our empty, registered stash (or bounce) slot. Pending outputs reference the
        // physical page, so they keep the original. The faulting thread is blocked; other threads
        // touching the page in the window take a missing-page fault, which step 2 resolves and
        // wakes.
        if let Err(e) = unsafe { u.move_pages(slot_addr, page, ps, false, true) } {
            if let Some(slot) = slot {
                st.free_slots.push(slot);
            }
            if e.errno == libc::EAGAIN {
                return Some((page, held));
            }
            // Pinned, shared since a fork, or a page of a huge page the wire still references:
            // copy it instead of moving it.
            return self.tcow_by_discard(u, st, page, held);
        }
        if slot.is_none() {
            st.bounce = Some(Bounce::Moved);
        }
        self.finish_tcow(u, st, page, slot)
    }

    /// TCOW at 2 MiB for a write fault on `page`: where its PMD is PMD-mapped and every
    /// protected output over it covers it whole, move the huge page out to a huge stash slot
    /// (the outputs' references keep the original), copy it into a spare huge page and move that
    /// in, writable, at the PMD (which wakes the writer). One fault, one 2 MiB copy and two PMD
    /// moves, where the 4 KiB path would fail (the kernel cannot split a referenced huge page).
    fn tcow_pmd(&self, u: &Userfaultfd, st: &mut State, page: usize) -> PmdTcow {
        let Some(h) = self.hstash.as_ref().filter(|_| self.caps.swap) else {
            return PmdTcow::NotHere;
        };
        let base = page & !(HUGE_PAGE_SIZE - 1);
        let pmd = RawRange {
            addr: base,
            len: HUGE_PAGE_SIZE,
        };
        // Every protected output touching the PMD covers it whole and has stashed none of it.
        let fits = st.outputs.iter().filter(|o| o.protected).all(|o| {
            o.range.intersect(&pmd).is_none()
                || (o.range.contains(&pmd)
                    && !st
                        .stashed
                        .iter()
                        .any(|s| s.output == o.id && pmd.contains_addr(s.page)))
        });
        // (Room in `transient` too, for the PMD to wait there if step 3 must be deferred.)
        if !fits
            || st.transient.iter().any(|t| t.intersect(&pmd).is_some())
            || st.transient.len() == st.transient.capacity()
        {
            return PmdTcow::NotHere;
        }
        if !crate::huge::is_pmd_mapped(base) {
            return PmdTcow::NotHere;
        }
        // A spare (populated) slot for the copy, an empty one for the original.
        let Some((orig, spare)) = Self::take_hslots_locked(h, st) else {
            return PmdTcow::NotHere;
        };
        let slot_addr = |s: usize| h.addr() + s * HUGE_PAGE_SIZE;
        let give_back = |st: &mut State| {
            st.hfree.push(orig);
            st.hspare.push(spare);
        };
        // SAFETY: step 1, the original PMD out of the application's address space into our
        // empty huge stash slot. The faulting thread is blocked; another thread touching the PMD
        // meanwhile takes a missing fault that the handler serves after this call (by then the
        // copy is in place, so it is only woken).
        if let Err(e) = unsafe { u.move_pages(slot_addr(orig), base, HUGE_PAGE_SIZE, false, true) }
        {
            if e.moved > 0 {
                // Split under us and moved in part: put back what moved.
                // SAFETY: the pages just moved return to their (now empty) places.
                let _ = unsafe { u.move_pages(base, slot_addr(orig), e.moved, true, true) };
            }
            give_back(st);
            return if e.errno == libc::EAGAIN {
                PmdTcow::Again
            } else {
                PmdTcow::NotHere
            };
        }
        // Step 2: the copy, in the spare huge page.
        // SAFETY: both slots are ours and populated (the original moved in, the spare faulted
        // in); nobody else writes them; 2 MiB each, not overlapping.
        unsafe {
            std::ptr::copy_nonoverlapping(
                slot_addr(orig) as *const u8,
                slot_addr(spare) as *mut u8,
                HUGE_PAGE_SIZE,
            )
        };
        self.finish_tcow_pmd(u, st, base, orig, spare)
    }

    /// PMD TCOW step 3 and its bookkeeping: the copy in slot `spare` moved in at the empty PMD
    /// `base` (writable; this wakes the writer), the original in slot `orig` kept for the
    /// outputs that need it. One attempt: on the handler thread an `EAGAIN` cannot end before
    /// the handler reads its events, so the PMD waits in transition (a missing fault on it
    /// waits too, rather than getting zero pages) and step 3 is tried again after that read.
    /// Where the kernel refuses the move otherwise, the PMD is filled by copy, 4 KiB at a time.
    fn finish_tcow_pmd(
        &self,
        u: &Userfaultfd,
        st: &mut State,
        base: usize,
        orig: usize,
        spare: usize,
    ) -> PmdTcow {
        let h = self
            .hstash
            .as_ref()
            .expect("PMD TCOW only with a huge stash");
        let slot_addr = |s: usize| h.addr() + s * HUGE_PAGE_SIZE;
        let pmd = RawRange {
            addr: base,
            len: HUGE_PAGE_SIZE,
        };
        let defer = |st: &mut State| {
            if !st.transient.contains(&pmd) {
                st.transient.push(pmd);
            }
            PmdTcow::Deferred(Held::Huge { orig, spare })
        };
        let injected = INJECT_PMD_AGAIN
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok();
        if injected {
            return defer(st);
        }
        let tally = CopyTally::new(
            &self.counters.tcow_huge_copies,
            &self.counters.tcow_copied_bytes,
            HUGE_PAGE_SIZE,
        );
        // SAFETY: the PMD is empty since step 1 (or, on a retry after a part was filled, the
        // move fails without touching anything); the spare slot is ours.
        match unsafe { u.move_pages(base, slot_addr(spare), HUGE_PAGE_SIZE, false, false) } {
            Ok(_) => st.hfree.push(spare),
            Err(e) if e.errno == libc::EAGAIN && e.moved == 0 => return defer(st),
            Err(_) => {
                // Refused, or moved in part: fill what is still empty with a copy of the
                // original, 4 KiB at a time (the application loses the huge page here, not its
                // bytes), then wake the writer.
                let ps = page_size();
                for off in (0..HUGE_PAGE_SIZE).step_by(ps) {
                    // SAFETY: one page of the PMD, empty or (EEXIST) already filled; the
                    // original slot is ours.
                    match unsafe { u.copy(base + off, slot_addr(orig) + off, ps, true) } {
                        Ok(_) => {}
                        Err(f) if f.errno() == Some(libc::EEXIST) => {}
                        Err(f) if f.errno() == Some(libc::EAGAIN) => return defer(st),
                        Err(_) => {
                            // The range is gone (unmapped): nobody waits for it any more.
                            st.transient.retain(|t| *t != pmd);
                            self.free_hslot_locked(st, orig);
                            st.hspare.push(spare);
                            return PmdTcow::NotHere;
                        }
                    }
                }
                let _ = u.wake(pmd);
                st.hspare.push(spare);
            }
        }
        st.transient.retain(|t| *t != pmd);
        tally.keep();
        let mut refs = 0;
        for i in 0..st.outputs.len() {
            let o = st.outputs[i];
            if o.protected && o.range.contains(&pmd) {
                st.stashed.push(Stashed {
                    output: o.id,
                    page: base,
                    slot: orig,
                    huge: true,
                });
                refs += 1;
            }
        }
        st.hslot_refs[orig] = refs;
        if refs == 0 {
            self.free_hslot_locked(st, orig);
        }
        PmdTcow::Done
    }

    /// Two huge stash slots for PMD TCOW: an empty one for the original, and a spare (populated)
    /// one for the copy, populated here if no spare is kept. `None`, having taken nothing, when
    /// there are not two.
    fn take_hslots_locked(h: &Mapping, st: &mut State) -> Option<(usize, usize)> {
        let orig = st.hfree.pop()?;
        let slot_addr = |s: usize| h.addr() + s * HUGE_PAGE_SIZE;
        let spare = match st.hspare.pop() {
            Some(s) => s,
            None => match st.hfree.pop() {
                Some(s) => {
                    let r = RawRange {
                        addr: slot_addr(s),
                        len: HUGE_PAGE_SIZE,
                    };
                    if h.advise_range(r, libc::MADV_POPULATE_WRITE, "madvise(huge spare)")
                        .is_err()
                    {
                        st.hfree.push(s);
                        st.hfree.push(orig);
                        return None;
                    }
                    s
                }
                None => {
                    st.hfree.push(orig);
                    return None;
                }
            },
        };
        Some((orig, spare))
    }

    /// TCOW step 1 where the original cannot be moved out (`EBUSY`: pinned, shared with a
    /// child since a fork, a 4 KiB page of a huge page the wire references): its bytes are copied
    /// to the bounce slot and the application's mapping of the page dropped. What references the
    /// physical page (the outputs, a child, a pin) keeps the original; step 2 installs the copy.
    /// The writer waits only if the bounce slot is busy, never for an output's completion. A page
    /// pinned for long (a buffer registered for I/O) keeps the original there: I/O through that
    /// pin no longer sees this process's later writes to the page.
    fn tcow_by_discard(
        &self,
        u: &Userfaultfd,
        st: &mut State,
        page: usize,
        held: Held,
    ) -> Option<Deferred> {
        let ps = page_size();
        let pr = RawRange::page(page);
        let stash = self.stash.as_ref().expect("TCOW copies only with a stash");
        if st.bounce.is_some() || st.transient.len() == st.transient.capacity() {
            if held == Held::Nothing {
                self.counters.sleep_on_write.fetch_add(1, Ordering::Relaxed);
            }
            return Some((page, Held::Waiting));
        }
        let bounce = stash.addr() + BOUNCE_SLOT * ps;
        // SAFETY: the application page is present and write-protected, so its bytes are stable
        // and reading them cannot fault; the bounce slot is ours and empty (a plain write
        // populates it: the stash is registered for write-protect faults only).
        unsafe { std::ptr::copy_nonoverlapping(page as *const u8, bounce as *mut u8, ps) };
        // In transition: another thread touching the page before the copy is in waits for it.
        st.transient.push(pr);
        // SAFETY: drops this process's mapping of one page of a registered application range;
        // its bytes are in the bounce slot and go back in step 2, and a missing fault meanwhile
        // waits (the page is in transition). The physical page lives on for whoever references it.
        let rc = unsafe { libc::madvise(page as *mut libc::c_void, ps, libc::MADV_DONTNEED) };
        if rc != 0 {
            st.transient.retain(|t| *t != pr);
            let _ = stash.advise_range(
                RawRange::page(bounce),
                libc::MADV_DONTNEED,
                "madvise(bounce)",
            );
            if held == Held::Nothing {
                self.counters.sleep_on_write.fetch_add(1, Ordering::Relaxed);
            }
            return Some((page, Held::Waiting));
        }
        self.counters
            .tcow_copied_bytes
            .fetch_add(ps as u64, Ordering::Relaxed);
        st.bounce = Some(Bounce::Discarded);
        self.finish_tcow(u, st, page, None)
    }

    /// TCOW step 2 and its bookkeeping, for a page whose original is in stash slot `slot`, or
    /// in the bounce slot (`None`), which is emptied once the copy is in.
    fn finish_tcow(
        &self,
        u: &Userfaultfd,
        st: &mut State,
        page: usize,
        slot: Option<usize>,
    ) -> Option<Deferred> {
        let ps = page_size();
        let pr = RawRange::page(page);
        let stash = self.stash.as_ref().expect("TCOW moves only with a stash");
        let slot_addr = stash.addr() + slot.unwrap_or(BOUNCE_SLOT) * ps;
        let mut tally = CopyTally::new(
            &self.counters.tcow_copies,
            &self.counters.tcow_copied_bytes,
            ps,
        );
        if slot.is_none() {
            tally.also(match st.bounce {
                Some(Bounce::Discarded) => &self.counters.tcow_discards,
                _ => &self.counters.tcow_bounced,
            });
        }
        // SAFETY: TCOW step 2: install a private, writable copy of the original at the faulting
        // address (empty since step 1); this wakes the writer.
        if let Err(e) = unsafe { u.copy(page, slot_addr, ps, false) } {
            if e.errno() == Some(libc::EAGAIN) {
                // The page stays empty until the retry: mark it in transition so that a missing
                // fault on it waits for the retry instead of getting a zero page.
                if !st.transient.contains(&pr) {
                    st.transient.push(pr);
                }
                return Some((page, slot.map_or(Held::Bounce, Held::Slot)));
            }
            if !self.caps.swap {
                // Nothing to move back with: the page stays in transition and the copy is tried
                // again (its bytes are in the bounce slot).
                if !st.transient.contains(&pr) {
                    st.transient.push(pr);
                }
                return Some((page, Held::Bounce));
            }
            // SAFETY: undo step 1, moving our stash page back to the still-empty application page.
            let _ = unsafe { u.move_pages(page, slot_addr, ps, false, true) };
            st.transient.retain(|t| *t != pr);
            match slot {
                Some(slot) => st.free_slots.push(slot),
                None => st.bounce = None,
            }
            self.counters.sleep_on_write.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        st.transient.retain(|t| *t != pr);
        tally.keep();
        let Some(slot) = slot else {
            // The outputs' references keep the original; our mapping of it goes.
            let r = RawRange::page(slot_addr);
            let _ = stash.advise_range(r, libc::MADV_DONTNEED, "madvise(bounce)");
            st.bounce = None;
            return None;
        };
        let mut refs = 0;
        for i in 0..st.outputs.len() {
            let o = st.outputs[i];
            if needs_page(&o, &st.stashed, page) {
                st.stashed.push(Stashed {
                    output: o.id,
                    page,
                    slot,
                    huge: false,
                });
                refs += 1;
            }
        }
        if refs == 0 {
            // Every output that needed the original completed while the copy was deferred.
            self.free_slot_locked(st, slot);
        } else {
            st.slot_refs[slot] = refs;
        }
        None
    }
}

/// Fault injection for tests: this many PMD TCOW step 3 attempts behave as if the kernel said
/// `EAGAIN` ([`VmRuntime::inject_pmd_tcow_again`]).
static INJECT_PMD_AGAIN: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl VmRuntime {
    /// Fault injection for tests: the next `n` attempts at PMD TCOW step 3 (the copy moved in)
    /// are deferred as if the address space were changing, so that the deferred path runs.
    /// Returns how many injections from an earlier call were still unused.
    #[doc(hidden)]
    pub fn inject_pmd_tcow_again(&self, n: u32) -> u32 {
        INJECT_PMD_AGAIN.swap(n, Ordering::Relaxed)
    }
}

/// What an attempt at TCOW on a whole PMD came to.
enum PmdTcow {
    /// The huge page is in the huge stash, a copy of it at the faulting PMD; the writer woken.
    Done,
    /// The address space was changing (`EAGAIN`): try the fault again later.
    Again,
    /// Steps 1 and 2 done, step 3 to be tried again later from where this says.
    Deferred(Held),
    /// Not a case for 2 MiB (not PMD-mapped, not wholly under the outputs, no huge slot, the
    /// kernel refused the move): the 4 KiB path handles the fault.
    NotHere,
}

/// A write-protect fault to handle again: the page, and the stash slot holding its original if
/// TCOW step 1 is done.
pub(super) type Deferred = (usize, Held);

/// How far a write-protect fault that must be handled again got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Held {
    /// Nothing done: the address space was changing (`EAGAIN`); start over.
    Nothing,
    /// TCOW step 1 done: the original is in this stash slot.
    Slot(usize),
    /// TCOW step 1 done through the bounce slot (no stash slot was free).
    Bounce,
    /// The original could not be moved and the bounce slot was busy; the write waits (counted
    /// once) and TCOW is tried again about every millisecond.
    Waiting,
    /// PMD TCOW steps 1 and 2 done: the original huge page is in huge stash slot `orig`, its
    /// copy in slot `spare`, and the PMD is empty (in transition) until step 3 moves the copy
    /// in, after the handler has read the event that made the kernel say `EAGAIN`.
    Huge {
        /// The slot holding the original.
        orig: usize,
        /// The slot holding the copy.
        spare: usize,
    },
}

/// What the bounce slot holds between TCOW steps 1 and 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Bounce {
    /// The original, moved there (every stash slot was taken).
    Moved,
    /// A copy of the original, whose page could not be moved ([`VmRuntime::tcow_by_discard`]).
    Discarded,
}

/// Whether pending output `o` still needs `page` as it is: it protects the page and has not
/// already had it moved to the stash (a page installed by TCOW is a private copy).
fn needs_page(o: &ActiveOutput, stashed: &[Stashed], page: usize) -> bool {
    o.protected
        && o.range.contains(&RawRange::page(page))
        && !stashed.iter().any(|s| s.output == o.id && s.covers(page))
}

/// One TCOW copy, counted before the call that installs it, since that call wakes the writer,
/// which must find its copy counted when it looks; taken back when the copy does not go in.
struct CopyTally<'a> {
    copies: &'a AtomicU64,
    bytes: &'a AtomicU64,
    len: u64,
    /// How the copy was made (through the bounce slot, or discarding), where it says.
    how: Option<&'a AtomicU64>,
    kept: bool,
}

impl<'a> CopyTally<'a> {
    fn new(copies: &'a AtomicU64, bytes: &'a AtomicU64, len: usize) -> Self {
        copies.fetch_add(1, Ordering::Relaxed);
        bytes.fetch_add(len as u64, Ordering::Relaxed);
        CopyTally {
            copies,
            bytes,
            len: len as u64,
            how: None,
            kept: false,
        }
    }

    /// Count the copy under `how` too.
    fn also(&mut self, how: &'a AtomicU64) {
        how.fetch_add(1, Ordering::Relaxed);
        self.how = Some(how);
    }

    /// The copy went in: the count stands.
    fn keep(mut self) {
        self.kept = true;
    }
}

impl Drop for CopyTally<'_> {
    fn drop(&mut self) {
        if !self.kept {
            self.copies.fetch_sub(1, Ordering::Relaxed);
            self.bytes.fetch_sub(self.len, Ordering::Relaxed);
            if let Some(how) = self.how {
                how.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}
