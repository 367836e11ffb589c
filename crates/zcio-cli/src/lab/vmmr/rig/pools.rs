//! The pools the cases reassemble with, and the messages they reassemble: filled with a
//! known pattern and checked word for word.

use super::*;

/// A pool that always hands out the same run: the *no search* case (and page-table warm-up).
#[derive(Debug, Clone)]
pub(super) struct KnownRun {
    pub(super) first: usize,
    pub(super) capacity: usize,
    pub(super) live: Option<usize>,
}

impl PagePool for KnownRun {
    fn alloc(&mut self, n: usize) -> Result<usize, PoolError> {
        if n == 0 {
            return Err(PoolError::ZeroLength);
        }
        let largest = self.capacity - self.first;
        if n > largest {
            return Err(PoolError::TooLarge {
                requested: n,
                largest,
            });
        }
        if self.live.is_some() {
            return Err(PoolError::Exhausted {
                requested: n,
                free: 0,
                capacity: self.capacity,
                largest: 0,
            });
        }
        self.live = Some(n);
        Ok(self.first)
    }

    fn free(&mut self, first: usize, n: usize) -> Result<(), PoolError> {
        if first != self.first || self.live != Some(n) {
            return Err(PoolError::NotARun {
                first,
                n,
                pool: self.name(),
            });
        }
        self.live = None;
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn free_granules(&self) -> usize {
        self.capacity - self.live.unwrap_or(0)
    }

    fn largest_alloc(&self) -> usize {
        self.capacity - self.first
    }

    fn name(&self) -> &'static str {
        "known-run"
    }
}

/// The pool a case installs in the rig's reassembler (swapped in and out, so one remap space
/// serves every case).
#[derive(Debug, Clone)]
pub(super) enum BenchPool {
    Known(KnownRun),
    Bitmap(BitmapPool),
    Classes(Box<SizeClassPool>),
    Buddy(Box<BuddyPool>),
}

macro_rules! delegate {
    ($self:ident, $p:ident => $e:expr) => {
        match $self {
            BenchPool::Known($p) => $e,
            BenchPool::Bitmap($p) => $e,
            BenchPool::Classes($p) => $e,
            BenchPool::Buddy($p) => $e,
        }
    };
}

impl PagePool for BenchPool {
    fn alloc(&mut self, n: usize) -> Result<usize, PoolError> {
        delegate!(self, p => p.alloc(n))
    }
    fn free(&mut self, first: usize, n: usize) -> Result<(), PoolError> {
        delegate!(self, p => p.free(first, n))
    }
    fn capacity(&self) -> usize {
        delegate!(self, p => p.capacity())
    }
    fn free_granules(&self) -> usize {
        delegate!(self, p => p.free_granules())
    }
    fn largest_alloc(&self) -> usize {
        delegate!(self, p => p.largest_alloc())
    }
    fn name(&self) -> &'static str {
        delegate!(self, p => p.name())
    }
}

/// A size-class pool of `capacity` granules all in the one class whose blocks hold `n`
/// granules (the paper's bitmap "optimized for" one message size, §4.3), with every block
/// taken; and the first granule of each block.
pub(super) fn one_class_pool(
    capacity: usize,
    n: usize,
) -> Result<(SizeClassPool, Vec<usize>), BenchError> {
    let c = SIZE_CLASSES
        .iter()
        .position(|s| *s >= n)
        .ok_or_else(|| BenchError::Plan(format!("no size class holds {n} granules")))?;
    let block = SIZE_CLASSES[c];
    let mut blocks = [0; 5];
    blocks[c] = capacity / block;
    let mut pool = SizeClassPool::new(SizeClassSplit {
        blocks,
        overflow: 0,
    })?;
    let firsts = (0..blocks[c])
        .map(|_| pool.alloc(n))
        .collect::<Result<Vec<_>, _>>()?;
    Ok((pool, firsts))
}

/// A buddy pool of `capacity` granules with every block of `n` (rounded up to a power of two)
/// taken; and the first granule of each block, in order.
pub(super) fn full_buddy(capacity: usize, n: usize) -> Result<(BuddyPool, Vec<usize>), BenchError> {
    let mut pool = BuddyPool::new(capacity)?;
    let mut firsts = Vec::new();
    while let Ok(f) = pool.alloc(n) {
        firsts.push(f);
    }
    firsts.sort_unstable();
    Ok((pool, firsts))
}

// ---------------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------------

/// The words of a message: word `w` holds `salt ^ w` (the paper's word counts, salted per
/// message so that a stale one never passes).
pub(super) fn fill(b: &mut [u8], salt: u64, first_word: u64) {
    for (w, c) in b.chunks_exact_mut(8).enumerate() {
        c.copy_from_slice(&(salt ^ (first_word + w as u64)).to_le_bytes());
    }
}

/// The first word of `b` that is not what [`fill`] wrote: (byte offset, expected, found).
pub(super) fn check(b: &[u8], salt: u64) -> Result<(), (usize, u64, u64)> {
    for (w, c) in b.chunks_exact(8).enumerate() {
        let found = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        let expected = salt ^ w as u64;
        if found != expected {
            return Err((w * 8, expected, found));
        }
    }
    Ok(())
}

/// Bytes of transparent huge pages of this process (`AnonHugePages`), if the kernel says.
pub(super) fn anon_huge_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let line = s.lines().find(|l| l.starts_with("AnonHugePages:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// One message: its granules in a store, laid out as asked, and a destination for copies.
pub(super) struct Msg {
    /// Testing: spoil every copy (see [`Plan::spoil`]).
    pub(super) spoil: bool,
    pub(super) granule: Granule,
    pub(super) store: PageStore,
    pub(super) slots: Vec<Slot>,
    pub(super) salt: u64,
    pub(super) dest: Mapping,
    pub(super) huge_pages: Option<bool>,
}

impl Msg {
    pub(super) fn new(
        granule: Granule,
        n: usize,
        layout: Layout,
        rng: &mut SplitMix64,
    ) -> Result<Msg, BenchError> {
        let g = granule.bytes();
        let mut store = PageStore::new(2 * n, granule)?;
        let mut index: Vec<usize> = match layout {
            Layout::Adjacent => (0..n).collect(),
            Layout::Scattered => (0..n).map(|k| 2 * k).collect(),
        };
        if layout == Layout::Scattered {
            // Fisher–Yates; even indices are never adjacent whatever the order.
            for i in (1..n).rev() {
                index.swap(i, rng.below(i + 1));
            }
        }
        let slots: Vec<Slot> = index
            .iter()
            .map(|i| store.take_index(*i).expect("a fresh store has every slot"))
            .collect();
        let salt = rng.next_u64();
        let huge_before = anon_huge_bytes();
        for (k, s) in slots.iter().enumerate() {
            fill(store.bytes_mut(s)?, salt, (k * g / 8) as u64);
        }
        let huge_pages = match (granule, huge_before, anon_huge_bytes()) {
            (Granule::Huge, Some(a), Some(b)) => Some(b.saturating_sub(a) >= (n * g) as u64),
            _ => None,
        };
        // The best case for copies: contiguous, faulted in, in huge pages where the kernel
        // gives them (at least one whole huge page, so that small messages get one too).
        let dest = Mapping::anonymous((n * g).max(2 << 20), MapOptions::POPULATED_2M)?;
        Ok(Msg {
            spoil: false,
            granule,
            store,
            slots,
            salt,
            dest,
            huge_pages,
        })
    }

    pub(super) fn granules(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn corrupt(
        &self,
        case: Case,
        (offset, expected, found): (usize, u64, u64),
    ) -> BenchError {
        BenchError::Corrupt {
            case: case.name(),
            granule: self.granule.name(),
            granules: self.granules(),
            offset,
            expected,
            found,
        }
    }

    /// Copy the message into the destination: the time (ns). Checked, then spoiled (the first
    /// word of each granule), so that the next copy is checked anew.
    pub(super) fn memcpy(&mut self) -> Result<f64, BenchError> {
        let g = self.granule.bytes();
        let n = self.granules();
        let d = &mut self.dest.as_mut_slice()[..n * g];
        let t = Instant::now();
        for (k, s) in self.slots.iter().enumerate() {
            d[k * g..(k + 1) * g].copy_from_slice(self.store.bytes(s)?);
        }
        let ns = t.elapsed().as_nanos() as f64;
        if self.spoil {
            d[n * g / 2] ^= 1;
        }
        let verdict = check(d, self.salt);
        for k in 0..n {
            d[k * g] ^= 0xFF;
        }
        verdict.map_err(|e| self.corrupt(Case::Memcpy, e))?;
        Ok(ns)
    }
}
