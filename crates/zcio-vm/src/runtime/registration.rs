//! Registration of ranges with the userfaultfd: application ranges for missing and
//! write-protect faults (kept in a small LRU set), zcio's own mappings for write-protect faults.

use super::{MAX_REGISTRATIONS, Registration, State, VmRuntime};
use crate::error::{Result, VmError};
use crate::mapping::{MapOptions, Mapping};
use crate::page::RawRange;
use crate::uffd::{RegisterMode, Userfaultfd};
use std::sync::atomic::Ordering;

impl VmRuntime {
    /// Make sure the full pages of `r` are registered for missing and write-protect faults.
    /// Called with the state lock held, after [`VmRuntime::settle`] (a registration of a
    /// buffer since unmapped must not be taken for one of the buffer now at its address);
    /// issues only ioctls, touches no user memory.
    pub(super) fn ensure_registered_locked(&self, st: &mut State, r: RawRange) -> Result<()> {
        let u = self.uffd.as_ref().expect("only with userfaultfd");
        st.clock += 1;
        let now = st.clock;
        // Already covered by one registration? (Registrations merge in the kernel; we keep them as
        // registered so that lookups stay exact.)
        if let Some(reg) = st.registered.iter_mut().find(|g| g.range.contains(&r)) {
            reg.last_use = now;
            return Ok(());
        }
        if st.registered.len() == MAX_REGISTRATIONS {
            self.evict_registration_locked(st)?;
        }
        u.register(
            r,
            RegisterMode {
                missing: true,
                wp: true,
            },
        )?;
        self.counters.registrations.fetch_add(1, Ordering::Relaxed);
        // Drop registrations that this one subsumes.
        st.registered.retain(|g| !r.contains(&g.range));
        st.registered.push(Registration {
            range: r,
            last_use: now,
        });
        Ok(())
    }

    fn evict_registration_locked(&self, st: &mut State) -> Result<()> {
        let u = self.uffd.as_ref().expect("only with userfaultfd");
        // The least recently used registration with no pending output or transition over it.
        let mut best: Option<usize> = None;
        for (i, g) in st.registered.iter().enumerate() {
            let busy = st
                .outputs
                .iter()
                .any(|o| o.range.intersect(&g.range).is_some())
                || st.transient.iter().any(|t| t.intersect(&g.range).is_some());
            if !busy && best.is_none_or(|b| st.registered[b].last_use > g.last_use) {
                best = Some(i);
            }
        }
        let Some(i) = best else {
            return Err(VmError::TooLarge {
                what: "registered ranges with pending I/O",
                value: st.registered.len() + 1,
                limit: MAX_REGISTRATIONS,
            });
        };
        self.unregister_locked(u, st, i);
        Ok(())
    }

    /// Unregister registration `i` and forget it. Called with the state lock held.
    pub(super) fn unregister_locked(&self, u: &Userfaultfd, st: &mut State, i: usize) {
        let g = st.registered.swap_remove(i);
        // The range may have been unmapped meanwhile; that is fine.
        let _ = u.unregister(g.range);
        // The kernel keeps one registration per page: the pages this one shared with others
        // went with it. Register them again, or forget the others where that fails.
        let mut k = 0;
        while k < st.registered.len() {
            let lost = st.registered[k].range.intersect(&g.range);
            let mode = RegisterMode {
                missing: true,
                wp: true,
            };
            if lost.is_some_and(|l| u.register(l, mode).is_err()) {
                st.registered.swap_remove(k);
            } else {
                k += 1;
            }
        }
    }

    /// Register the full pages of an application range so that pages can be moved into it and
    /// protected in it. Returns the registered (full-page) range, possibly empty.
    pub fn register_app(&self, r: RawRange) -> Result<RawRange> {
        self.check_live()?;
        let full = r.full_pages();
        if full.is_empty() || self.uffd.is_none() {
            return Ok(full);
        }
        // A buffer freed and allocated again at the same address is a new mapping, which the
        // kernel has not registered: the old one's record must be gone before the lookup.
        self.settle();
        let mut st = self.lock();
        self.ensure_registered_locked(&mut st, full)?;
        Ok(full)
    }

    /// A new private mapping registered for write-protect (not missing) faults: staging, scratch
    /// and region memory that pages are moved into.
    pub fn registered_mapping(&self, len: usize, opts: MapOptions) -> Result<Mapping> {
        self.check_live()?;
        let m = Mapping::anonymous(len, opts)?;
        match &self.uffd {
            Some(u) => register_wp(u, m),
            None => Ok(m),
        }
    }
}

/// Register `m` with `u` for write-protect faults only (not missing ones): memory of zcio's own
/// that pages are moved into and out of.
pub(super) fn register_wp(u: &Userfaultfd, m: Mapping) -> Result<Mapping> {
    u.register(
        m.range(),
        RegisterMode {
            missing: false,
            wp: true,
        },
    )?;
    Ok(m)
}
