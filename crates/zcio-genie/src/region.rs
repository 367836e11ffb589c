//! System-allocated buffers: regions and the region cache (paper 000, §4.2 and §6.2.1).
//!
//! Move-family semantics pass *regions*: page-aligned buffers that zcio allocates. An output
//! consumes the region; an input returns one. The cache keeps regions whose pages went out so that
//! the next input reuses them (region caching), hidden with `PROT_NONE` under emulated move
//! (region hiding). Before reusing a cached region, the *region check* asks the VM runtime
//! whether the application unmapped any of it meanwhile; if so, the input gets a new region.

use crate::breakdown::{Op, time};
use crate::error::{GenieError, Result};
use crate::semantics::Semantics;
use serde::{Deserialize, Serialize};
use zcio_vm::mapping::Hidden;
use zcio_vm::runtime::WatchId;
use zcio_vm::{MapOptions, Mapping, RawRange, VmRuntime, page_size};

/// Where a region is in its life (paper 000, Table 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RegionState {
    /// The application owns it (allocated, or filled by an input).
    MovedIn,
    /// An output of it is pending.
    MovingOut,
    /// Its pages went out; it is hidden in the cache (emulated move) or gone (move).
    MovedOut,
    /// It went out under weak move; it stays mapped in the cache, and the application promised
    /// not to touch it.
    WeaklyMovedOut,
    /// An input into it is in progress.
    MovingIn,
}

/// A system-allocated, page-aligned buffer holding `len` bytes of data.
#[derive(Debug)]
pub struct Region {
    map: Mapping,
    len: usize,
    state: RegionState,
}

impl Region {
    /// A new region for `len` bytes (rounded up to whole pages, zero-filled). A region of 2 MiB
    /// or more is made of transparent huge pages where the machine has them (rounded up to
    /// whole 2 MiB granules), so that hiding, showing and referencing it work per PMD.
    pub fn alloc(len: usize) -> Result<Region> {
        if len == 0 {
            return Err(GenieError::arg("len", "a region holds at least one byte"));
        }
        let (cap, huge) = capacity_for(len);
        // Registered with the runtime's userfaultfd so that, once cached, its unmapping by the
        // application is seen (the region check).
        let map = VmRuntime::get().registered_mapping(
            cap,
            MapOptions {
                huge,
                ..Default::default()
            },
        )?;
        Ok(Region {
            map,
            len,
            state: RegionState::MovedIn,
        })
    }

    /// A region holding a copy of `data` (a convenience for applications moving to the
    /// system-allocated API; the copy is the application's, not the transfer's).
    pub fn from_slice(data: &[u8]) -> Result<Region> {
        let mut r = Region::alloc(data.len())?;
        r.as_mut_slice().copy_from_slice(data);
        Ok(r)
    }

    pub(crate) fn from_mapping(map: Mapping, len: usize) -> Region {
        Region {
            map,
            len,
            state: RegionState::MovedIn,
        }
    }

    /// Bytes of data.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: regions hold at least one byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of whole pages.
    pub fn capacity(&self) -> usize {
        self.map.len()
    }

    /// Its state.
    pub fn state(&self) -> RegionState {
        self.state
    }

    /// The data.
    pub fn as_slice(&self) -> &[u8] {
        &self.map.as_slice()[..self.len]
    }

    /// The data, writable.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.map.as_mut_slice()[..self.len]
    }

    /// Everything up to the end of the last page (data plus the tail), for checking that the
    /// tail holds no stale bytes.
    pub fn page_span(&self) -> &[u8] {
        self.map.as_slice()
    }

    /// Address range of its pages.
    pub fn range(&self) -> RawRange {
        self.map.range()
    }

    pub(crate) fn mapping_mut(&mut self) -> &mut Mapping {
        &mut self.map
    }

    pub(crate) fn into_mapping(self) -> Mapping {
        self.map
    }
}

/// The bytes a region for `len` bytes spans, and whether it is made of huge pages: whole
/// 2 MiB granules from 2 MiB up where huge pages can be had here, whole pages otherwise.
pub(crate) fn capacity_for(len: usize) -> (usize, bool) {
    let h = zcio_vm::page::HUGE_PAGE_SIZE;
    let huge = len >= h && VmRuntime::get().huge_tcow();
    if huge {
        (len.div_ceil(h) * h, true)
    } else {
        (len.div_ceil(page_size()) * page_size(), false)
    }
}

enum Cached {
    /// Emulated move: hidden.
    Hidden(Hidden),
    /// Weak move family: still mapped.
    Mapped(Mapping),
}

struct Entry {
    region: Cached,
    /// Watch for its unmapping (the region check).
    watch: WatchId,
    /// Output still pending on it (the ticket id); reusable only after completion.
    pending: Option<u64>,
    /// Wired for the output (weak move).
    wired: bool,
}

/// Regions whose pages went out, kept for reuse by inputs (region caching).
pub struct RegionCache {
    entries: Vec<Entry>,
    limit: usize,
    /// Regions the region check found unmapped by the application.
    pub removed_by_application: u64,
}

zcio_vm::debug_summary!(RegionCache, |s| entries: s.entries.len());

impl Default for RegionCache {
    fn default() -> Self {
        RegionCache {
            entries: Vec::new(),
            limit: 64,
            removed_by_application: 0,
        }
    }
}

impl RegionCache {
    /// Keep a region whose output under `sem` is pending as `ticket`: hidden for emulated move,
    /// mapped (and wired under weak move) for the weak move family. Move semantics is not cached:
    /// the region is deallocated (its pages live on in the pending I/O).
    pub fn keep(&mut self, region: Region, sem: Semantics, ticket: u64) -> Result<RegionState> {
        Ok(self
            .cache(region.into_mapping(), sem, Some(ticket))?
            .unwrap_or(RegionState::MovedOut))
    }

    /// Cache `map` under `sem` (hidden for emulated move, mapped for the weak moves, wired under
    /// weak move while output `pending` is); `None` where it is deallocated instead (a full
    /// cache, move semantics, no unmap watch).
    fn cache(
        &mut self,
        map: Mapping,
        sem: Semantics,
        pending: Option<u64>,
    ) -> Result<Option<RegionState>> {
        if self.entries.len() >= self.limit {
            // Deallocated: unmapped now, a pending I/O holds its pages.
            time(Op::RegionDeallocate, || drop(map));
            return Ok(None);
        }
        let range = map.range();
        let (region, state, wired) = match sem {
            Semantics::EmulatedMove => match time(Op::Invalidate, || map.hide()) {
                Ok(h) => (Cached::Hidden(h), RegionState::MovedOut, false),
                Err((_m, e)) => return Err(e.into()),
            },
            Semantics::WeakMove | Semantics::EmulatedWeakMove => {
                let wired = sem == Semantics::WeakMove
                    && pending.is_some()
                    && time(Op::Wire, || zcio_vm::protect::wire(map.range())).is_ok();
                (Cached::Mapped(map), RegionState::WeaklyMovedOut, wired)
            }
            _ => return Ok(None),
        };
        // A cached region is reused only if the region check can tell that the application did
        // not remove it; without an unmap watch (no userfaultfd) a new mapping at the same
        // address would pass for it, so the region is not cached but deallocated here (a
        // pending I/O holds its pages).
        let Some(watch) = time(Op::RegionCache, || VmRuntime::get().watch(range)) else {
            return Ok(None);
        };
        self.entries.push(Entry {
            region,
            watch,
            pending,
            wired,
        });
        Ok(Some(state))
    }

    /// The output `ticket` completed: its cached region becomes reusable (and is unwired).
    pub fn completed(&mut self, ticket: u64) {
        for e in &mut self.entries {
            if e.pending == Some(ticket) {
                e.pending = None;
                if e.wired {
                    if let Cached::Mapped(m) = &e.region {
                        let _ = time(Op::Unwire, || zcio_vm::protect::unwire(m.range()));
                    }
                    e.wired = false;
                }
            }
        }
    }

    /// A region for an input of `len` bytes under `sem`: a cached one of the right kind when one
    /// passes the region check, else a new one. The pages after `len` read as zeros.
    pub fn take(&mut self, len: usize, sem: Semantics) -> Result<Region> {
        if len == 0 {
            return Err(GenieError::arg("len", "a region holds at least one byte"));
        }
        let want = capacity_for(len).0;
        let rt = VmRuntime::get();
        let mut i = 0;
        while i < self.entries.len() {
            let e = &self.entries[i];
            let kind_ok = matches!(
                (&e.region, sem),
                (Cached::Hidden(_), Semantics::EmulatedMove)
                    | (
                        Cached::Mapped(_),
                        Semantics::WeakMove | Semantics::EmulatedWeakMove
                    )
            );
            let r = match &e.region {
                Cached::Hidden(h) => h.range(),
                Cached::Mapped(m) => m.range(),
            };
            if rt.watch_gone(e.watch) {
                // Region check failed: the application removed (part of) it. Never touch it again.
                let e = self.entries.swap_remove(i);
                rt.unwatch(e.watch);
                self.removed_by_application += 1;
                match e.region {
                    Cached::Hidden(h) => h.forget(),
                    Cached::Mapped(m) => {
                        m.leak();
                    }
                }
                continue;
            }
            if kind_ok && e.pending.is_none() && r.len == want {
                let t = crate::breakdown::start();
                let e = self.entries.swap_remove(i);
                rt.unwatch(e.watch);
                let mut map = match e.region {
                    Cached::Hidden(h) => h.reinstate().map_err(|(_, e)| e)?,
                    Cached::Mapped(m) => m,
                };
                // Move never exposes stale bytes: zero the tail of the last page.
                let tail_start = len;
                map.as_mut_slice()[tail_start..].fill(0);
                let mut region = Region::from_mapping(map, len);
                region.state = RegionState::MovingIn;
                crate::breakdown::stop(Op::RegionCheck, t);
                return Ok(region);
            }
            i += 1;
        }
        let mut region = time(Op::RegionCreate, || Region::alloc(len))?;
        region.state = RegionState::MovingIn;
        Ok(region)
    }

    /// Keep a region the application is done with for a later input or allocation (Genie's
    /// region deallocation into the cache): hidden under emulated move, mapped under the weak
    /// moves; move semantics and a full cache deallocate it. Returns whether it was cached.
    pub fn recycle(&mut self, region: Region, sem: Semantics) -> bool {
        self.cache(region.into_mapping(), sem, None)
            .is_ok_and(|s| s.is_some())
    }

    /// Regions cached now.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl Drop for RegionCache {
    fn drop(&mut self) {
        let rt = VmRuntime::get();
        for e in self.entries.drain(..) {
            rt.unwatch(e.watch);
        }
    }
}

/// Fault a region's pages in (zeroed where new) before input reads into it: the page allocation
/// a fresh region costs, counted as its own operation rather than hidden in the read.
pub(crate) fn fill(region: &mut Region) -> Result<()> {
    let len = region.len();
    time(Op::RegionFill, || {
        zcio_vm::protect::populate_writable(&mut region.map.as_mut_slice()[..len])
    })?;
    Ok(())
}

pub(crate) fn mark(region: &mut Region, state: RegionState) {
    region.state = state;
}
