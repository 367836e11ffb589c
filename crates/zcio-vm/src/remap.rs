//! The VM part of VMMR (paper 002): a store of granule-sized buffers that a producer fills (the
//! pooled receive buffers a message arrives in, scattered), and a reserved virtual range that
//! messages are reassembled in by moving those granules' pages, never copying them.
//!
//! - [`PageStore`]: one private mapping cut into granules of 4 KiB or 2 MiB ([`Granule`]). A
//!   producer takes a [`Slot`], fills it through [`PageStore::bytes_mut`], and hands it on.
//! - [`RemapSpace`]: the reserved range (the paper's 256 MB segment of virtual pages). Which of
//!   its granules are free is the business of a page pool above this layer;
//!   [`RemapSpace::move_in`] moves the pages of a list of slots, in order, into a run of its
//!   granules, and [`RemapSpace::move_out`] moves them back to the store's slots when the
//!   message is freed, so that pages circulate and no page is allocated or zeroed per message.
//!
//! Moves are `UFFDIO_MOVE` calls, one per run of slots that lie next to each other in the store
//! (a whole run moves in one call); with 2 MiB granules both sides are 2 MiB aligned, so a
//! transparent huge page moves as one page-table entry. A page that cannot be moved (pinned) is
//! copied, and where the kernel has no `UFFDIO_MOVE` every granule is copied: each call says
//! how many bytes went which way ([`Moved`]).

use crate::error::{Result, VmError};
use crate::mapping::{MapOptions, Mapping};
use crate::page::{HUGE_PAGE_SIZE, RawRange, page_size};
use crate::runtime::VmRuntime;
use std::sync::atomic::{AtomicU64, Ordering};

/// The unit pages are reassembled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Granule {
    /// A base page (4 KiB).
    Page,
    /// A 2 MiB transparent huge page.
    Huge,
}

impl Granule {
    /// Its size in bytes.
    pub fn bytes(self) -> usize {
        match self {
            Granule::Page => page_size(),
            Granule::Huge => HUGE_PAGE_SIZE,
        }
    }

    /// Its name in tables and JSON ("4k", "2m").
    pub fn name(self) -> &'static str {
        match self {
            Granule::Page => "4k",
            Granule::Huge => "2m",
        }
    }

    fn options(self) -> MapOptions {
        MapOptions {
            huge: self == Granule::Huge,
            no_huge: self == Granule::Page,
            ..Default::default()
        }
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One granule of a [`PageStore`], owned by whoever holds it (not `Clone`: a slot is handed
/// on, never shared).
#[derive(Debug, PartialEq, Eq)]
pub struct Slot {
    store: u64,
    index: usize,
}

impl Slot {
    /// The store it belongs to.
    pub(crate) fn store(&self) -> u64 {
        self.store
    }

    /// Its index in the store.
    pub fn index(&self) -> usize {
        self.index
    }
}

/// Granule-sized buffers in one private mapping, registered so that their pages can be moved.
#[derive(Debug)]
pub struct PageStore {
    map: Mapping,
    granule: Granule,
    id: u64,
    free: Vec<usize>,
}

impl PageStore {
    /// A store of `granules` granules, all free; memory is taken as they are first written.
    pub fn new(granules: usize, granule: Granule) -> Result<PageStore> {
        let len = checked_len(granules, granule, "page store")?;
        let map = VmRuntime::get().registered_mapping(len, granule.options())?;
        Ok(PageStore {
            map,
            granule,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            // Handed out lowest index first.
            free: (0..granules).rev().collect(),
        })
    }

    /// The granule.
    pub fn granule(&self) -> Granule {
        self.granule
    }

    /// Granules in all.
    pub fn capacity(&self) -> usize {
        self.map.len() / self.granule.bytes()
    }

    /// Granules free (not held as slots).
    pub fn free(&self) -> usize {
        self.free.len()
    }

    /// A free slot (its bytes are whatever it last held), or `None` when all are held.
    pub fn take(&mut self) -> Option<Slot> {
        self.free.pop().map(|index| Slot {
            store: self.id,
            index,
        })
    }

    /// The slot at `index` if it is free (to lay a message out in a chosen order).
    pub fn take_index(&mut self, index: usize) -> Option<Slot> {
        let at = self.free.iter().position(|i| *i == index)?;
        self.free.swap_remove(at);
        Some(Slot {
            store: self.id,
            index,
        })
    }

    /// Give back a slot.
    pub fn put(&mut self, s: Slot) -> Result<()> {
        self.check(&s)?;
        self.free.push(s.index);
        Ok(())
    }

    /// Give back slots, in order, up to the first that is not this store's.
    pub fn put_all(&mut self, slots: impl IntoIterator<Item = Slot>) -> Result<()> {
        slots.into_iter().try_for_each(|s| self.put(s))
    }

    fn check(&self, s: &Slot) -> Result<()> {
        if s.store != self.id || s.index >= self.capacity() {
            return Err(VmError::Misuse {
                what: "a slot of another page store",
            });
        }
        Ok(())
    }

    /// The store's identity (slots carry it).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Where a slot's granule lies, checked to be this store's.
    pub(crate) fn slot_range(&self, s: &Slot) -> Result<RawRange> {
        self.check(s)?;
        Ok(self.range(s.index))
    }

    fn range(&self, index: usize) -> RawRange {
        let g = self.granule.bytes();
        RawRange {
            addr: self.map.addr() + index * g,
            len: g,
        }
    }

    /// A slot's bytes, to fill it.
    pub fn bytes_mut(&mut self, s: &Slot) -> Result<&mut [u8]> {
        self.check(s)?;
        let g = self.granule.bytes();
        Ok(&mut self.map.as_mut_slice()[s.index * g..(s.index + 1) * g])
    }

    /// A slot's bytes.
    pub fn bytes(&self, s: &Slot) -> Result<&[u8]> {
        self.check(s)?;
        let g = self.granule.bytes();
        Ok(&self.map.as_slice()[s.index * g..(s.index + 1) * g])
    }
}

/// What a move did: bytes moved as pages, bytes copied, and `UFFDIO_MOVE` calls made.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// Bytes whose pages were moved.
    pub moved: usize,
    /// Bytes copied instead (pinned pages, or no `UFFDIO_MOVE` here).
    pub copied: usize,
    /// Move calls (one per run of adjacent slots).
    pub calls: usize,
}

/// The reserved virtual range messages are reassembled in.
#[derive(Debug)]
pub struct RemapSpace {
    map: Mapping,
    granule: Granule,
}

impl RemapSpace {
    /// A range of `granules` granules, empty.
    pub fn new(granules: usize, granule: Granule) -> Result<RemapSpace> {
        let len = checked_len(granules, granule, "remap space")?;
        Ok(RemapSpace {
            map: VmRuntime::get().registered_mapping(len, granule.options())?,
            granule,
        })
    }

    /// The granule.
    pub fn granule(&self) -> Granule {
        self.granule
    }

    /// Granules in all.
    pub fn capacity(&self) -> usize {
        self.map.len() / self.granule.bytes()
    }

    fn run(&self, first: usize, n: usize) -> Result<RawRange> {
        if first.checked_add(n).is_none_or(|e| e > self.capacity()) {
            return Err(VmError::OutOfBounds {
                what: "granules of the remap space",
                start: first,
                end: first.saturating_add(n),
                bound_start: 0,
                bound_end: self.capacity(),
            });
        }
        let g = self.granule.bytes();
        Ok(RawRange {
            addr: self.map.addr() + first * g,
            len: n * g,
        })
    }

    /// Move the pages of `slots`, in order, into granules `[first, first + slots.len())`, which
    /// must be empty (never moved into, or moved out of since). The slots are left empty; keep
    /// them to move the pages back with [`RemapSpace::move_out`].
    pub fn move_in(
        &mut self,
        store: &mut PageStore,
        first: usize,
        slots: &[Slot],
    ) -> Result<Moved> {
        self.transfer(store, first, slots, true)
    }

    /// Move the pages of granules `[first, first + slots.len())` back into `slots` (which
    /// [`RemapSpace::move_in`] left empty), leaving the granules empty.
    pub fn move_out(
        &mut self,
        store: &mut PageStore,
        first: usize,
        slots: &[Slot],
    ) -> Result<Moved> {
        self.transfer(store, first, slots, false)
    }

    fn transfer(
        &mut self,
        store: &mut PageStore,
        first: usize,
        slots: &[Slot],
        inward: bool,
    ) -> Result<Moved> {
        if store.granule != self.granule {
            return Err(VmError::Misuse {
                what: "a page store of another granule",
            });
        }
        let whole = self.run(first, slots.len())?;
        for s in slots {
            store.check(s)?;
        }
        let g = self.granule.bytes();
        let rt = VmRuntime::get();
        let mut done = Moved::default();
        let mut k = 0;
        while k < slots.len() {
            // A run of slots that lie next to each other in the store moves in one call.
            let mut end = k + 1;
            while end < slots.len() && slots[end].index == slots[end - 1].index + 1 {
                end += 1;
            }
            let src = RawRange {
                addr: store.range(slots[k].index).addr,
                len: (end - k) * g,
            };
            let dst = RawRange {
                addr: whole.addr + k * g,
                len: src.len,
            };
            let (from, to) = if inward { (src, dst) } else { (dst, src) };
            // SAFETY: both ranges lie in mappings this process owns (the store's and this
            // space's), borrowed mutably for this call, so no reference into them is alive; the
            // caller hands the destination over empty (the contract of move_in/move_out), and
            // the source is left empty, which is what these calls promise.
            let copied = unsafe { rt.move_range(crate::runtime::MoveStep::Remap, to, from)? };
            if copied > 0 {
                // The pages the kernel would not move were copied and are still at the source:
                // drop them, so that the source is left empty as promised (a later move into
                // it would otherwise fail with EEXIST).
                if inward {
                    store.map.discard(from)?;
                } else {
                    self.map.discard(from)?;
                }
            }
            done.calls += 1;
            done.copied += copied;
            done.moved += src.len - copied;
            k = end;
        }
        Ok(done)
    }

    /// The bytes of granules `[first, first + n)`.
    pub fn bytes(&self, first: usize, n: usize) -> Result<&[u8]> {
        let r = self.run(first, n)?;
        let off = r.addr - self.map.addr();
        Ok(&self.map.as_slice()[off..off + r.len])
    }

    /// The bytes of granules `[first, first + n)`, to write.
    pub fn bytes_mut(&mut self, first: usize, n: usize) -> Result<&mut [u8]> {
        let r = self.run(first, n)?;
        let off = r.addr - self.map.addr();
        Ok(&mut self.map.as_mut_slice()[off..off + r.len])
    }
}

/// What moving and copying granules cost on this machine, for one granule size: the
/// measurements a reassembler chooses between remapping and copying by (paper 002's
/// conclusion: remapping pays only from some size on). Part of the calibration profile.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Calibration {
    /// Granule size (bytes).
    pub granule: usize,
    /// A move call, beyond its pages (ns).
    pub move_call_ns: f64,
    /// Each granule moved within a call (ns).
    pub move_granule_ns: f64,
    /// Copying granules out of a page store into a contiguous range: `(bytes, ns per byte)`
    /// by length, so that copies beyond the caches are paid at memory speed.
    pub copy_by_size: Vec<(usize, f64)>,
}

impl Calibration {
    /// Measure on this machine: single-granule moves and a run of adjacent granules moved in
    /// one call, and copies of 1 to 4 096 pages or 1 to 16 huge pages, the
    /// sizes doubling (the cost per byte jumps where a cache level ends).
    pub fn measure(granule: Granule) -> Result<Calibration> {
        let g = granule.bytes();
        let (run, copies): (usize, &[usize]) = match granule {
            Granule::Huge => (4, &[1, 2, 4, 8, 16]),
            Granule::Page => (
                64,
                &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096],
            ),
        };
        let most = copies.iter().copied().max().unwrap_or(1).max(run);
        let mut store = PageStore::new(most, granule)?;
        let mut space = RemapSpace::new(most, granule)?;
        let slots: Vec<Slot> = (0..most).filter_map(|i| store.take_index(i)).collect();
        for s in &slots {
            store.bytes_mut(s)?.fill(1);
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let mut dst = Mapping::anonymous(most * g, MapOptions::POPULATED_2M)?;
        // Each timed operation comes after the granules it works on were moved in and back
        // out (untimed), as a reassembler's next message would find them, and each size is
        // measured in rounds of its own so that a larger copy does not leave a smaller one
        // cold. Three passes, each giving a median; the lowest is kept, since a disturbance
        // lasting a whole pass (this may be a virtual machine) only ever adds time.
        let rounds = 15;
        let cycle = |space: &mut RemapSpace, store: &mut PageStore, n: usize| -> Result<()> {
            space.move_in(store, 0, &slots[..n])?;
            space.move_out(store, 0, &slots[..n])?;
            Ok(())
        };
        let (mut one, mut many) = (f64::INFINITY, f64::INFINITY);
        for _ in 0..3 {
            for (n, best) in [(1, &mut one), (run, &mut many)] {
                let mut times = Vec::with_capacity(rounds);
                for _ in 0..rounds {
                    cycle(&mut space, &mut store, n)?;
                    let t = std::time::Instant::now();
                    space.move_in(&mut store, 0, &slots[..n])?;
                    times.push(t.elapsed().as_nanos() as f64);
                    space.move_out(&mut store, 0, &slots[..n])?;
                }
                *best = best.min(median(times));
            }
        }
        // Copies likewise.
        let mut copy = vec![f64::INFINITY; copies.len()];
        for _ in 0..3 {
            for (i, &n) in copies.iter().enumerate() {
                let mut times = Vec::with_capacity(rounds);
                for _ in 0..rounds {
                    cycle(&mut space, &mut store, n)?;
                    let d = &mut dst.as_mut_slice()[..n * g];
                    let t = std::time::Instant::now();
                    for (k, s) in slots[..n].iter().enumerate() {
                        d[k * g..(k + 1) * g].copy_from_slice(store.bytes(s)?);
                    }
                    times.push(t.elapsed().as_nanos() as f64);
                }
                copy[i] = copy[i].min(median(times));
            }
        }
        let per_granule = ((many - one) / (run - 1) as f64).max(0.0);
        let mut copy_by_size: Vec<(usize, f64)> = copies
            .iter()
            .zip(copy)
            .map(|(&n, ns)| (n * g, ns / (n * g) as f64))
            .collect();
        despike(&mut copy_by_size);
        Ok(Calibration {
            granule: g,
            move_call_ns: (one - per_granule).max(0.0),
            move_granule_ns: per_granule,
            copy_by_size,
        })
    }

    /// Predicted time to move `granules` granules in `calls` calls (ns).
    pub fn remap_ns(&self, granules: usize, calls: usize) -> f64 {
        calls as f64 * self.move_call_ns + granules as f64 * self.move_granule_ns
    }

    /// Predicted time to copy `bytes` (ns).
    pub fn copy_ns(&self, bytes: usize) -> f64 {
        copy_ns_by_size(&self.copy_by_size, bytes)
    }
}

/// A per-byte cost above both its neighbours' is a disturbance of the moment, not a cache
/// level (those raise the cost for every larger size too): it is taken down to the larger
/// neighbour.
fn despike(table: &mut [(usize, f64)]) {
    for i in 1..table.len().saturating_sub(1) {
        let next = table[i - 1].1.max(table[i + 1].1);
        if table[i].1 > next {
            table[i].1 = next;
        }
    }
}

/// Predicted cost of copying `bytes` from a table of `(bytes, ns per byte)` measurements: the
/// per-byte cost interpolated linearly in the logarithm of the length, held at the ends.
pub fn copy_ns_by_size(table: &[(usize, f64)], bytes: usize) -> f64 {
    let per_byte = match table {
        [] => 0.0,
        [(n, c), ..] if bytes <= *n => *c,
        [.., (n, c)] if bytes >= *n => *c,
        _ => {
            let i = table
                .windows(2)
                .position(|w| bytes >= w[0].0 && bytes <= w[1].0)
                .expect("bytes lies between the ends");
            let ((n0, c0), (n1, c1)) = (table[i], table[i + 1]);
            let x =
                ((bytes as f64).ln() - (n0 as f64).ln()) / ((n1 as f64).ln() - (n0 as f64).ln());
            c0 + x * (c1 - c0)
        }
    };
    per_byte * bytes as f64
}

fn checked_len(granules: usize, granule: Granule, what: &'static str) -> Result<usize> {
    if granules == 0 {
        return Err(VmError::Empty { what });
    }
    granules
        .checked_mul(granule.bytes())
        .filter(|l| *l <= crate::mapping::MAX_MAPPING)
        .ok_or(VmError::TooLarge {
            what,
            value: granules.saturating_mul(granule.bytes()),
            limit: crate::mapping::MAX_MAPPING,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spike_in_the_copy_costs_is_taken_down_and_cache_levels_stay() {
        let mut t = vec![
            (1, 0.02),
            (2, 0.01),
            (4, 0.04),
            (8, 0.02),
            (16, 0.03),
            (32, 0.05),
        ];
        despike(&mut t);
        let costs: Vec<f64> = t.iter().map(|x| x.1).collect();
        assert_eq!(costs, [0.02, 0.01, 0.02, 0.02, 0.03, 0.05]);
        assert_eq!(copy_ns_by_size(&t, 1), 0.02);
        assert_eq!(copy_ns_by_size(&t, 64), 0.05 * 64.0);
    }

    #[test]
    fn scattered_slots_come_out_contiguous_and_go_back() {
        let mut store = PageStore::new(16, Granule::Page).unwrap();
        let mut space = RemapSpace::new(8, Granule::Page).unwrap();
        // A message in slots 9, 2, 3, 14: two of them adjacent.
        let slots: Vec<Slot> = [9, 2, 3, 14]
            .iter()
            .map(|i| store.take_index(*i).unwrap())
            .collect();
        for (k, s) in slots.iter().enumerate() {
            store.bytes_mut(s).unwrap().fill(k as u8 + 1);
        }
        let m = space.move_in(&mut store, 3, &slots).unwrap();
        assert_eq!(m.moved + m.copied, 4 * page_size());
        assert_eq!(m.calls, 3);
        if VmRuntime::get().capabilities().swap {
            assert_eq!(m.copied, 0, "{m:?}");
        }
        let b = space.bytes(3, 4).unwrap();
        for k in 0..4 {
            assert!(
                b[k * page_size()..(k + 1) * page_size()]
                    .iter()
                    .all(|x| *x == k as u8 + 1)
            );
        }
        space.move_out(&mut store, 3, &slots).unwrap();
        for (k, s) in slots.iter().enumerate() {
            assert!(store.bytes(s).unwrap().iter().all(|x| *x == k as u8 + 1));
        }
        store.put_all(slots).unwrap();
        assert_eq!(store.free(), 16);
    }

    #[test]
    fn huge_granules_move_whole() {
        let mut store = PageStore::new(4, Granule::Huge).unwrap();
        let mut space = RemapSpace::new(4, Granule::Huge).unwrap();
        let slots: Vec<Slot> = [3, 1]
            .iter()
            .map(|i| store.take_index(*i).unwrap())
            .collect();
        for (k, s) in slots.iter().enumerate() {
            let b = store.bytes_mut(s).unwrap();
            for (i, x) in b.iter_mut().enumerate() {
                *x = (i as u8).wrapping_add(k as u8);
            }
        }
        let m = space.move_in(&mut store, 0, &slots).unwrap();
        assert_eq!(m.moved + m.copied, 2 * HUGE_PAGE_SIZE);
        let b = space.bytes(0, 2).unwrap();
        for (i, x) in b.iter().enumerate() {
            let k = i / HUGE_PAGE_SIZE;
            assert_eq!(
                *x,
                ((i % HUGE_PAGE_SIZE) as u8).wrapping_add(k as u8),
                "byte {i}"
            );
        }
        space.move_out(&mut store, 0, &slots).unwrap();
        assert_eq!(store.bytes(&slots[1]).unwrap()[5], 6);
    }

    #[test]
    fn misuse_is_an_error() {
        let mut a = PageStore::new(2, Granule::Page).unwrap();
        let mut b = PageStore::new(2, Granule::Page).unwrap();
        let s = a.take().unwrap();
        assert!(b.bytes_mut(&s).is_err());
        assert!(b.put(s).is_err());
        let mut space = RemapSpace::new(2, Granule::Page).unwrap();
        let t = a.take().unwrap();
        assert!(space.move_in(&mut a, 2, &[t]).is_err());
        assert!(RemapSpace::new(0, Granule::Page).is_err());
    }
}
