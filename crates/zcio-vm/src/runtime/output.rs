//! Page referencing for output (TCOW): Genie's *reference* and *unreference application
//! pages*, with write protection while an output that asked for it is pending.

use super::{ActiveOutput, EAGAIN_RETRIES, MAX_OUTPUTS, State, VmRuntime};
use crate::error::{Result, VmError};
use crate::page::{RawRange, complement_into};

impl VmRuntime {
    /// Reference the pages of an output buffer for the duration of an output (Genie's *reference
    /// application pages*). With `protect`, also remove write access to its full pages (*read
    /// only*): the output then keeps the data of this moment whatever the application writes.
    ///
    /// Only full pages are protected; the caller copies the partial head and tail pages.
    ///
    /// A caller that queues the pages itself may reference them unprotected, queue them, and
    /// then [`OutputRef::protect`] them before returning to the application: the queueing then
    /// does not wait for the page-table work.
    pub fn reference_output(&'static self, buf: RawRange, protect: bool) -> Result<OutputRef> {
        let mut r = self.reference_unprotected(buf)?;
        if protect {
            r.protect()?;
        }
        Ok(r)
    }

    fn reference_unprotected(&'static self, buf: RawRange) -> Result<OutputRef> {
        self.check_live()?;
        let full = buf.full_pages();
        // An unmap that returned before this call (perhaps of an old mapping at this very
        // address) must be on the books before this output starts, or it would be taken for an
        // unmap during this output.
        self.settle();
        let mut st = self.lock();
        if st.outputs.len() == MAX_OUTPUTS {
            return Err(VmError::TooLarge {
                what: "pending outputs",
                value: MAX_OUTPUTS + 1,
                limit: MAX_OUTPUTS,
            });
        }
        let id = st.next_id;
        st.next_id += 1;
        let since = st.unmap_gen;
        st.outputs.push(ActiveOutput {
            id,
            range: full,
            protected: false,
            since,
        });
        Ok(OutputRef {
            rt: self,
            id,
            range: full,
            protected: false,
            released: false,
        })
    }

    /// Write-protect the full pages of output `id` (see [`OutputRef::protect`]). The output is
    /// marked protected under the same lock hold as the `UFFDIO_WRITEPROTECT`, so that a write
    /// fault that follows finds it and resolves by TCOW.
    fn protect_output(&self, id: u64, full: RawRange) -> Result<()> {
        if full.is_empty() {
            return Ok(());
        }
        let mut st = self.lock();
        if !st.outputs.iter().any(|o| o.id == id) {
            return Err(VmError::Misuse {
                what: "protecting an output already released",
            });
        }
        match &self.uffd {
            Some(u) => {
                let (mut stale, mut busy) = (false, 0);
                loop {
                    self.ensure_registered_locked(&mut st, full)?;
                    match u.writeprotect(full, true, false) {
                        Ok(()) => break,
                        // Our record was stale: the old mapping was unmapped and its unmap
                        // event is not yet processed. Register the new mapping and retry.
                        Err(e) if e.errno() == Some(libc::ENOENT) && !stale => {
                            stale = true;
                            st.registered.retain(|g| g.range.intersect(&full).is_none());
                        }
                        // The address space is changing: an event awaits the handler
                        // thread, which may need the state lock to get to it.
                        Err(e) if e.errno() == Some(libc::EAGAIN) && busy < EAGAIN_RETRIES => {
                            busy += 1;
                            st = self.relock(st);
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
            None => crate::fallback::protect(id, full)?,
        }
        // The lock may have been given up above, but only `release_output` removes outputs
        // and the caller's `OutputRef` holds this one.
        if let Some(o) = st.outputs.iter_mut().find(|o| o.id == id) {
            o.protected = true;
        }
        Ok(())
    }

    fn release_output(&self, id: u64) {
        if !self.is_live() {
            return; // inherited through fork: the output is the parent's
        }
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(i) = st.outputs.iter().position(|o| o.id == id) else {
            return;
        };
        let out = st.outputs.swap_remove(i);
        // Pages this output had stashed: drop its reference to each slot.
        let mut k = 0;
        while k < st.stashed.len() {
            if st.stashed[k].output == id {
                let s = st.stashed.swap_remove(k);
                if s.huge {
                    st.hslot_refs[s.slot] -= 1;
                    if st.hslot_refs[s.slot] == 0 {
                        self.free_hslot_locked(st, s.slot);
                    }
                    continue;
                }
                st.slot_refs[s.slot] -= 1;
                if st.slot_refs[s.slot] == 0 {
                    self.free_slot_locked(st, s.slot);
                }
            } else {
                k += 1;
            }
        }
        drop(guard);
        if out.protected {
            self.unprotect_unless_needed(id, out.range, out.since);
        }
        let mut guard = self.lock();
        let st = &mut *guard;
        // Forget gone ranges no pending output overlaps any more.
        let State { gone, outputs, .. } = st;
        gone.retain(|(g, r)| {
            outputs
                .iter()
                .any(|o| o.since < *g && o.range.intersect(r).is_some())
        });
    }

    /// Lift the write protection of `range` (the pages of an output that is no longer listed)
    /// from the pages no listed protected output covers and that were not unmapped after
    /// generation `since` (those may hold other memory now, whose protection, if any, belongs to
    /// outputs that started after the unmap). Waking is what releases writers that slept on
    /// write. `EAGAIN` (an event awaits the handler thread, which may need the state lock) is
    /// retried with the lock given up, recomputing what to lift.
    fn unprotect_unless_needed(&self, id: u64, range: RawRange, since: u64) {
        let mut busy = 0;
        'again: loop {
            let mut guard = self.lock();
            let st = &mut *guard;
            let holes = st
                .outputs
                .iter()
                .filter(|o| o.protected)
                .map(|o| o.range)
                .chain(st.gone.iter().filter(|(g, _)| *g > since).map(|(_, r)| *r));
            let complete = complement_into(range, holes, &mut st.scratch);
            debug_assert!(complete, "scratch has room for every output plus one");
            match &self.uffd {
                Some(u) => {
                    for i in 0..st.scratch.len() {
                        let r = st.scratch[i];
                        if let Err(e) = u.writeprotect(r, false, false) {
                            if e.errno() == Some(libc::EAGAIN) && busy < EAGAIN_RETRIES {
                                busy += 1;
                                drop(guard);
                                std::thread::yield_now();
                                continue 'again;
                            }
                        }
                    }
                }
                None => crate::fallback::unprotect(id, &st.scratch),
            }
            return;
        }
    }

    /// Whether any pending output references a page of `r`.
    pub fn output_pending_over(&self, r: RawRange) -> bool {
        let st = self.lock();
        st.outputs.iter().any(|o| o.range.intersect(&r).is_some())
    }
}

/// A pending output's reference to its pages. Releasing it (explicitly or by dropping) is
/// Genie's *unreference application pages*: protection is lifted from pages no other pending
/// output protects, and TCOW stash slots held for it are freed.
#[derive(Debug)]
pub struct OutputRef {
    rt: &'static VmRuntime,
    id: u64,
    range: RawRange,
    protected: bool,
    released: bool,
}

impl OutputRef {
    /// The full pages referenced.
    pub fn range(&self) -> RawRange {
        self.range
    }

    /// Whether the pages are write-protected (TCOW) while this reference lives.
    pub fn is_protected(&self) -> bool {
        self.protected
    }

    /// Remove write access to the referenced full pages (*read only*), once: from now on a
    /// write resolves by TCOW and the output keeps the bytes of this moment. On an error the
    /// pages stay writable and the reference stays (drop or release it).
    pub fn protect(&mut self) -> Result<()> {
        if !self.protected {
            self.rt.protect_output(self.id, self.range)?;
            self.protected = true;
        }
        Ok(())
    }

    /// Release now (dispose time).
    pub fn release(mut self) {
        self.released = true;
        self.rt.release_output(self.id);
    }
}

impl Drop for OutputRef {
    fn drop(&mut self) {
        if !self.released {
            self.rt.release_output(self.id);
        }
    }
}
