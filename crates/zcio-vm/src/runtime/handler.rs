//! The fault-handler thread: it reads the userfaultfd's events and resolves them (missing pages,
//! TCOW write faults, unmaps); and the region checks that unmap events feed.

use super::tcow::{Deferred, Held};
use super::{MAX_REGISTRATIONS, MAX_WATCHES, Registration, VmRuntime, Watch};
use crate::page::{RawRange, page_size};
use crate::uffd::{Event, Userfaultfd};
use std::sync::atomic::Ordering;

impl VmRuntime {
    /// Watch `r`, a mapping made by [`VmRuntime::registered_mapping`], for unmapping by anyone
    /// (the region check of paper 000, §6.2.1: a cached region the application removed must not
    /// be reused). Returns `None` when it cannot be watched (no userfaultfd, or too many
    /// watches): a probe of the address range could not tell a new mapping placed at the same
    /// address from the old one, so such a range must not be reused.
    pub fn watch(&self, r: RawRange) -> Option<WatchId> {
        self.uffd.as_ref().filter(|_| self.is_live())?;
        // The unmap of an earlier mapping at this very address, handled after this watch,
        // would be taken for the unmapping of this range.
        self.settle();
        let mut st = self.lock();
        if st.watches.len() == MAX_WATCHES {
            return None;
        }
        let id = self.next_watch.fetch_add(1, Ordering::Relaxed);
        st.watches.push(Watch {
            id,
            range: r,
            gone: false,
        });
        Some(WatchId(id))
    }

    /// Whether (part of) a watched range was unmapped since [`VmRuntime::watch`].
    pub fn watch_gone(&self, w: WatchId) -> bool {
        self.settle();
        let st = self.lock();
        st.watches
            .iter()
            .find(|x| x.id == w.0)
            .is_none_or(|x| x.gone)
    }

    /// Stop watching.
    pub fn unwatch(&self, w: WatchId) {
        self.lock().watches.retain(|x| x.id != w.0);
    }

    /// Wait until the handler has handled the events it has read. `munmap` returns once its
    /// unmap event is read, not handled: until then the books still hold what was at the
    /// address (a registration, a watch), and a new mapping placed there since would be taken
    /// for the old one. Every lookup by address that follows an application's unmap calls this
    /// first. Not with the state lock held (the handler takes it while holding the batch).
    pub(super) fn settle(&self) {
        drop(self.batch.lock().unwrap_or_else(|p| p.into_inner()));
    }

    pub(super) fn handler_loop(&'static self, fd: i32) {
        let mut events: Vec<Event> = Vec::with_capacity(64);
        // Write-protect faults whose resolution said EAGAIN: retried after the next read.
        let mut deferred: Vec<Deferred> = Vec::with_capacity(256);
        loop {
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let timeout = if deferred.is_empty() { -1 } else { 1 };
            // SAFETY: one valid pollfd.
            let rc = unsafe { libc::poll(&mut pfd, 1, timeout) };
            if rc < 0 {
                continue;
            }
            events.clear();
            let u = self
                .uffd
                .as_ref()
                .expect("handler runs only with userfaultfd");
            let _batch = self.batch.lock().unwrap_or_else(|p| p.into_inner());
            if u.read_events(&mut events).is_err() {
                continue;
            }
            let pause = HANDLER_PAUSE_MS.load(Ordering::Relaxed);
            if pause > 0 && !events.is_empty() {
                std::thread::sleep(std::time::Duration::from_millis(pause));
            }
            let retry = deferred.len();
            for i in 0..retry {
                let (page, held) = deferred[i];
                if let Some(d) = self.handle_wp(u, page, held) {
                    deferred.push(d);
                }
            }
            deferred.drain(..retry);
            for &ev in &events {
                if let Some(d) = self.handle(u, ev) {
                    deferred.push(d);
                }
            }
        }
    }

    /// Handle one event; returns a page whose write-protect fault must be handled again later.
    fn handle(&self, u: &Userfaultfd, ev: Event) -> Option<Deferred> {
        let ps = page_size();
        match ev {
            Event::PageFault { addr, wp: true, .. } => {
                let page = addr & !(ps - 1);
                return self.handle_wp(u, page, Held::Nothing);
            }
            Event::PageFault {
                addr,
                write,
                wp: false,
            } => {
                let page = RawRange {
                    addr: addr & !(ps - 1),
                    len: ps,
                };
                let transient = self.lock().transient.iter().any(|t| t.contains(&page));
                if transient {
                    return None; // the swap in progress fills the page and wakes the waiter
                }
                if self.release_stale(u, page) {
                    return None;
                }
                self.counters.missing_faults.fetch_add(1, Ordering::Relaxed);
                let r = if write {
                    // SAFETY: page is a registered, missing page; the zero page is ours and readable.
                    unsafe { u.copy(page.addr, self.zero.addr(), ps, false) }.map(|_| ())
                } else {
                    u.zeropage(page)
                };
                if r.is_err() {
                    let _ = u.wake(page); // populated meanwhile: just wake the waiter
                }
            }
            Event::Unmap { start, end } => self.forget(RawRange {
                addr: start,
                len: end - start,
            }),
            Event::Remap { from, len, .. } => self.forget(RawRange { addr: from, len }),
            Event::Remove { .. } | Event::Other(_) => {}
        }
        None
    }

    /// A missing page outside any swap: the memory of an application registration was given
    /// back (`MADV_DONTNEED` by an allocator that freed the buffer, most often) or never
    /// touched, and is being used again. With no output pending over it, the registration has
    /// no work left: unregister it (which wakes the faulting thread, whose access then faults
    /// as ordinary memory does), instead of serving this and every later first touch from this
    /// thread. A buffer used for I/O again is registered again then. Returns whether it did.
    ///
    /// (Unregistering when the pages are given back would be earlier, but needs
    /// `UFFD_EVENT_REMOVE`, which makes every `MADV_DONTNEED` on a registered range wait for
    /// this thread, this thread's own included: TCOW drops pages that way.)
    fn release_stale(&self, u: &Userfaultfd, page: RawRange) -> bool {
        let mut guard = self.lock();
        let st = &mut *guard;
        let Some(i) = st.registered.iter().position(|g| g.range.contains(&page)) else {
            return false;
        };
        let g = st.registered[i].range;
        if st.outputs.iter().any(|o| o.range.intersect(&g).is_some())
            || st.transient.iter().any(|t| t.intersect(&g).is_some())
        {
            return false;
        }
        // Counted before unregistering: unregistering wakes the faulting thread, which must
        // find the release already counted.
        self.counters
            .released_registrations
            .fetch_add(1, Ordering::Relaxed);
        self.unregister_locked(u, st, i);
        // The page still registered through another registration: serve it as usual.
        if st.registered.iter().any(|g| g.range.contains(&page)) {
            return false;
        }
        // Unregistering wakes the faulting thread; waking again is harmless and covers an
        // unregistration that failed (the page is then served as an ordinary missing page at
        // its next fault, as the table no longer lists it).
        let _ = u.wake(page);
        true
    }

    fn forget(&self, r: RawRange) {
        self.counters.unmaps.fetch_add(1, Ordering::Relaxed);
        let mut guard = self.lock();
        let st = &mut *guard;
        let mut i = 0;
        while i < st.registered.len() {
            let g = st.registered[i].range;
            if g.intersect(&r).is_some() {
                st.registered.swap_remove(i);
                // What remains registered in the kernel on either side stays known to us.
                let left = RawRange {
                    addr: g.addr,
                    len: r.addr.saturating_sub(g.addr).min(g.len),
                };
                let right_start = r.end().max(g.addr);
                let right = RawRange {
                    addr: right_start,
                    len: g.end().saturating_sub(right_start),
                };
                for rest in [left, right] {
                    if !rest.is_empty() && st.registered.len() < MAX_REGISTRATIONS {
                        st.registered.push(Registration {
                            range: rest,
                            last_use: 0,
                        });
                    }
                }
            } else {
                i += 1;
            }
        }
        let g = st.unmap_gen + 1;
        if st.outputs.iter().any(|o| o.range.intersect(&r).is_some())
            && st.gone.len() < st.gone.capacity()
        {
            st.gone.push((g, r));
        }
        for w in st.watches.iter_mut() {
            if w.range.intersect(&r).is_some() {
                w.gone = true;
            }
        }
        st.unmap_gen = g;
    }
}

/// Fault injection for tests: the handler waits this long (ms) between reading a batch of
/// events and handling it ([`VmRuntime::inject_handler_pause`]).
static HANDLER_PAUSE_MS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl VmRuntime {
    /// Fault injection for tests: from now on the handler thread waits `pause` between reading
    /// a batch of events and handling it (zero: not at all), which widens the moment in which
    /// an unmap has returned but is not yet on the books.
    #[doc(hidden)]
    pub fn inject_handler_pause(&self, pause: std::time::Duration) {
        HANDLER_PAUSE_MS.store(pause.as_millis() as u64, Ordering::Relaxed);
    }
}

/// A range watched for unmapping ([`VmRuntime::watch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchId(u64);
