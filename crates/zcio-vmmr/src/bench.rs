//! The measurements of paper 002 (§2.2–§2.5, §4): how long reassembling a message takes, by
//! moving its pages ([`Reassembler`]) or by copying them (the paper's best-case memcopy), for
//! messages of 1 to 6 144 pages (4 KiB granules) or of whole 2 MiB huge pages.
//!
//! What is timed is the reassembly alone, as in the paper: for a copy, copying the message's
//! granules from their slots into a contiguous, pre-faulted destination; for VMMR, the pool's
//! search for a free run plus the moves (`UFFDIO_MOVE`, the paper's PTE allocation). Every
//! message is checked word for word after each timed reassembly, outside the timed part, and a
//! wrong word fails the run ([`BenchError::Corrupt`]); freeing a message (its pages moved back
//! to their slots) is not timed either.
//!
//! - [`sweep`]: Figures 4 and 5 (and their 2 MiB analogue). Per message size, every [`Case`]
//!   [`Plan::iterations`] times in four runs back to back, the cases taking turns: memcpy, no
//!   search (the run is known: moves only, the paper's lower bound), minimal search (an empty
//!   bitmap searched from word 0), worst-case search ([`worst_case`], §4.1), the optimized worst
//!   case of §4.3 (a size-class bitmap of pre-concatenated blocks, all taken but the last), a
//!   buddy pool, a reassembler that always copies, and the adaptive one; every timed
//!   reassembly comes after the same untimed one (the pages moved in and out). The message
//!   lies in the store either
//!   [`Layout::Scattered`] (no two of its granules adjacent: one move call per granule, the
//!   paper's DMA'd pages) or [`Layout::Adjacent`] (consecutive: one call for the whole
//!   message). [`Caches::Cold`] reads a buffer twice the size of the last-level cache before
//!   each timed reassembly (the nearest user space gets to the paper's *no caching* runs of
//!   Figure 5).
//! - [`random`]: Figures 6–9. Random maps of the paper's three deallocation regimes
//!   ([`Regime`]), each map timed with the search starting at a random word plus the moves,
//!   done for real, and the pool's search timed alone; also for size-class and buddy pools
//!   fragmented the same way.
//!
//! Where the kernel will not move a page at some moment (locked, in migration), the VM layer
//! copies it and leaves its source in place, so the remap space can no longer be reused there:
//! the bench then rebuilds the remap space and the message and measures that size or map again
//! (at most [`MAX_REBUILDS`] times), and says so ([`Point::rebuilds`]).
//!
//! Adding a case (for instance a reassembler that chooses between moving and copying per
//! message): a variant of [`Case`] with its name, its pool (or reassembler) in `Rig`, and its
//! arm in `time_case`; rows and reports take cases by name.

use crate::pool::{
    BitmapPool, BuddyPool, PagePool, PoolError, Regime, Rng, SIZE_CLASSES, SearchStart,
    SizeClassPool, SizeClassSplit, SplitMix64, worst_case,
};
use crate::reassemble::{Calibration, Path, Policy, Reassembler, VmmrError};
use std::cell::Cell;
use std::hint::black_box;
use std::rc::Rc;
use std::time::Instant;
use zcio_vm::remap::{Granule, Moved, PageStore, Slot};
use zcio_vm::{MapOptions, Mapping, VmError};

/// What went wrong in a measurement.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The reassembler refused.
    #[error(transparent)]
    Vmmr(#[from] VmmrError),
    /// The VM layer refused.
    #[error(transparent)]
    Vm(#[from] VmError),
    /// A pool refused while a map was built.
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// A reassembled message differs from what was sent.
    #[error(
        "{case}: a message of {granules} granules of {granule} came out wrong at byte {offset}: {found:#018x} where {expected:#018x} was sent"
    )]
    Corrupt {
        /// The case that produced it.
        case: &'static str,
        /// Granule name.
        granule: &'static str,
        /// Granules in the message.
        granules: usize,
        /// Byte offset of the first wrong word.
        offset: usize,
        /// The word sent.
        expected: u64,
        /// The word found.
        found: u64,
    },
    /// A plan that cannot be run.
    #[error("invalid plan: {0}")]
    Plan(String),
    /// The kernel would not move some pages of a message (pinned, locked or shared at that
    /// moment) and the VM layer copied them, leaving their source pages in place: the remap
    /// space and the store are no longer empty where they should be.
    #[error("the kernel would not move {copied} bytes of a message; they were copied instead")]
    Fallback {
        /// Bytes copied.
        copied: usize,
    },
    /// One of the above, and where it happened.
    #[error("{at}: {error}")]
    At {
        /// The series, size and case.
        at: String,
        /// What went wrong.
        error: Box<BenchError>,
    },
}

impl BenchError {
    /// Whether the VM layer failed or fell back to copying: the rig and the message are then
    /// rebuilt and the measurement taken again.
    fn is_vm_fault(&self) -> bool {
        match self {
            BenchError::Fallback { .. } | BenchError::Vm(_) => true,
            BenchError::Vmmr(VmmrError::Vm(_)) => true,
            BenchError::At { error, .. } => error.is_vm_fault(),
            _ => false,
        }
    }

    fn at(self, at: impl FnOnce() -> String) -> BenchError {
        BenchError::At {
            at: at(),
            error: Box::new(self),
        }
    }
}

/// Where a message's granules lie in the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layout {
    /// Shuffled, no two adjacent: every granule moves in a call of its own (the paper's
    /// discontiguous DMA'd pages).
    Scattered,
    /// Consecutive: the whole message moves in one call (consecutive receive buffers).
    Adjacent,
}

impl Layout {
    /// Both layouts.
    pub const ALL: [Layout; 2] = [Layout::Scattered, Layout::Adjacent];

    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Scattered => "scattered",
            Layout::Adjacent => "adjacent",
        }
    }
}

/// Cache state before each timed reassembly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Caches {
    /// As the previous iteration left them (the paper's *total caching*).
    Warm,
    /// A buffer twice the last-level cache read first (the paper's *no caching*, Figure 5, as
    /// near as user space gets: data caches and TLB emptied of the message, the pool and the
    /// page tables; code stays cached).
    Cold,
}

impl Caches {
    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Caches::Warm => "warm",
            Caches::Cold => "cold",
        }
    }
}

/// One way of reassembling a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Case {
    /// Copy the granules into a contiguous, pre-faulted destination (the paper's memcopy).
    Memcpy,
    /// Moves into a run known in advance: no search (the paper's lower bound).
    NoSearch,
    /// An empty bitmap searched from word 0, plus the moves.
    MinimalSearch,
    /// The paper's worst-case bitmap ([`worst_case`]), plus the moves.
    WorstCaseSearch,
    /// §4.3's optimized bitmap at its worst: one bit per block of the size class holding the
    /// message, every block taken but the last, plus the moves (messages of up to 256
    /// granules).
    SizeClassWorstCase,
    /// An empty buddy pool (the block split down from the top and merged back on free), plus
    /// the moves.
    Buddy,
    /// The reassembler copying every message ([`Policy::Copy`]) into a range of its own whose
    /// pages stay: memcpy with an owned buffer's bookkeeping (a run found, and given back on
    /// free). What the adaptive case does when it copies.
    Copy,
    /// The adaptive reassembler ([`Policy::Adaptive`] with the plan's calibration): per
    /// message, moves (an empty bitmap searched) or a copy into its own warm range, whichever
    /// the calibration predicts faster. Warm caches, where the plan has a calibration.
    Adaptive,
}

impl Case {
    /// Every case, in the order of the tables.
    pub const ALL: [Case; 8] = [
        Case::Memcpy,
        Case::NoSearch,
        Case::MinimalSearch,
        Case::WorstCaseSearch,
        Case::SizeClassWorstCase,
        Case::Buddy,
        Case::Copy,
        Case::Adaptive,
    ];

    /// The cases of the paper's Figures 4 and 5.
    pub const PAPER: [Case; 4] = [
        Case::Memcpy,
        Case::NoSearch,
        Case::MinimalSearch,
        Case::WorstCaseSearch,
    ];

    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Case::Memcpy => "memcpy",
            Case::NoSearch => "no_search",
            Case::MinimalSearch => "minimal_search",
            Case::WorstCaseSearch => "worst_case_search",
            Case::SizeClassWorstCase => "size_class_worst_case",
            Case::Buddy => "buddy",
            Case::Copy => "copy",
            Case::Adaptive => "adaptive",
        }
    }

    /// Whether it applies to a message of `granules` granules.
    pub fn applies(self, granules: usize) -> bool {
        self != Case::SizeClassWorstCase || granules <= SIZE_CLASSES[SIZE_CLASSES.len() - 1]
    }
}

/// A page pool organization for [`random`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RandomPool {
    /// The paper's bitmap, the search starting at a random word (§4.2).
    Bitmap,
    /// One size-class bitmap whose bits are blocks of the class holding the message (§4.3,
    /// Figure 9), searched from word 0.
    SizeClasses,
    /// A buddy pool whose blocks are the message rounded up to a power of two.
    Buddy,
}

impl RandomPool {
    /// All three.
    pub const ALL: [RandomPool; 3] = [
        RandomPool::Bitmap,
        RandomPool::SizeClasses,
        RandomPool::Buddy,
    ];

    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            RandomPool::Bitmap => "bitmap",
            RandomPool::SizeClasses => "size-classes",
            RandomPool::Buddy => "buddy",
        }
    }

    /// Granules per bit (or block) of the pool for messages of `granules`, `None` when the
    /// pool cannot hold such a message (size classes: above 256 granules), or would have fewer
    /// than 64 blocks.
    pub fn block(self, granules: usize, capacity: usize) -> Option<usize> {
        let b = match self {
            RandomPool::Bitmap => granules,
            RandomPool::SizeClasses => *SIZE_CLASSES.iter().find(|s| **s >= granules)?,
            RandomPool::Buddy => granules.checked_next_power_of_two()?,
        };
        // The bitmap: room for the reserved run and one more; size classes and buddy: at least
        // 64 blocks, or their random maps have next to nothing to fragment.
        let least = if self == RandomPool::Bitmap { 2 } else { 64 };
        (b.checked_mul(least)? <= capacity).then_some(b)
    }
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Message sizes with 4 KiB granules (pages).
    pub sizes_4k: Vec<usize>,
    /// Message sizes with 2 MiB granules (granules).
    pub sizes_2m: Vec<usize>,
    /// Layouts of the sweeps.
    pub layouts: Vec<Layout>,
    /// Timed reassemblies per case and size with warm caches (the paper: 32).
    pub iterations: usize,
    /// Timed reassemblies per case and size with cold caches (4 KiB, scattered and adjacent,
    /// the paper's four cases); 0 for none.
    pub cold_iterations: usize,
    /// Pool capacity with 4 KiB granules (the paper: 65 536, a 256 MB segment).
    pub capacity_4k: usize,
    /// Pool capacity with 2 MiB granules (virtual space only).
    pub capacity_2m: usize,
    /// Message sizes of the random tests (pages).
    pub random_sizes: Vec<usize>,
    /// The random tests' regimes: each a series of maps from an all-allocated one, with
    /// `frees_per_map` more random granules freed per map.
    pub regimes: Vec<Regime>,
    /// Pools of the random tests.
    pub random_pools: Vec<RandomPool>,
    /// Timed reassemblies per random map at most (the paper: 32).
    pub random_iterations: usize,
    /// Pages reassembled per random map at most: larger messages get fewer iterations (at
    /// least one).
    pub random_page_budget: usize,
    /// Seed of the layouts, the random maps and the random search starts.
    pub seed: u64,
    /// Testing: flip a bit of every message this case reassembles, after the timing and
    /// before the check, so that the run must fail with [`BenchError::Corrupt`].
    pub spoil: Option<Case>,
    /// Testing: the first this many moving reassemblies fail as though the kernel had copied
    /// pages it would not move ([`BenchError::Fallback`]), so that the rig is rebuilt.
    pub inject_faults: usize,
    /// What moving and copying cost here, per granule size (from the calibration profile):
    /// the adaptive case runs for the granules that have one.
    pub calibration: Vec<Calibration>,
}

/// The 4 KiB sizes of `--full`: every size to 16 pages, then about 11 % apart to 6 144, with
/// `extra` added (about eighty sizes, as in the paper).
fn full_sizes_4k(extra: &[usize]) -> Vec<usize> {
    let mut v: Vec<usize> = (1..=16).collect();
    let mut x = 16.0f64;
    while x < 6144.0 {
        x *= 1.115;
        v.push((x.round() as usize).min(6144));
    }
    v.extend_from_slice(extra);
    v.push(6144);
    v.sort_unstable();
    v.dedup();
    v
}

/// The paper's random-test sizes (§2.5: about twenty from 1 to 6 144 pages).
const PAPER_RANDOM_SIZES: [usize; 21] = [
    1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 2048, 4096, 6144,
];

impl Plan {
    /// The default: every figure at fewer sizes and maps (well under a minute).
    pub fn quick() -> Plan {
        Plan {
            sizes_4k: vec![
                1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 6144,
            ],
            sizes_2m: vec![1, 2, 3, 4, 6, 8, 12],
            layouts: Layout::ALL.to_vec(),
            iterations: 32,
            cold_iterations: 6,
            capacity_4k: 65_536,
            capacity_2m: 2048,
            random_sizes: vec![1, 4, 16, 64, 256, 1024],
            // Every 2nd map of the first regime up to its 400th (below 5 % allocated the
            // rest look alike), every 10th of the others: about the same allocation levels.
            regimes: vec![
                Regime {
                    frees_per_map: 1000,
                    maps: 200,
                },
                Regime {
                    frees_per_map: 500,
                    maps: 100,
                },
                Regime {
                    frees_per_map: 250,
                    maps: 100,
                },
            ],
            random_pools: RandomPool::ALL.to_vec(),
            random_iterations: 4,
            random_page_budget: 1024,
            seed: 0x5EED_0002,
            spoil: None,
            inject_faults: 0,
            calibration: Vec::new(),
        }
    }

    /// The paper's sweeps: about eighty 4 KiB sizes, 2 MiB messages to 64 MiB, the paper's
    /// 3 × 1 000 random maps at about twenty sizes.
    pub fn full() -> Plan {
        Plan {
            sizes_4k: full_sizes_4k(&PAPER_RANDOM_SIZES),
            sizes_2m: (1..=12).chain([16, 24, 32]).collect(),
            cold_iterations: 16,
            random_sizes: PAPER_RANDOM_SIZES.to_vec(),
            regimes: crate::pool::PAPER_REGIMES.to_vec(),
            random_iterations: 32,
            random_page_budget: 1024,
            ..Plan::quick()
        }
    }

    /// A few points of everything (a second or two): checks the pipeline, not the machine.
    pub fn smoke() -> Plan {
        Plan {
            sizes_4k: vec![1, 16],
            sizes_2m: vec![1, 2],
            iterations: 3,
            cold_iterations: 2,
            random_sizes: vec![1, 16],
            regimes: vec![
                Regime {
                    frees_per_map: 8000,
                    maps: 8,
                },
                Regime {
                    frees_per_map: 2000,
                    maps: 3,
                },
                Regime {
                    frees_per_map: 1000,
                    maps: 3,
                },
            ],
            random_iterations: 2,
            random_page_budget: 64,
            ..Plan::quick()
        }
    }

    /// Check the plan; the error names the rule broken.
    pub fn check(&self) -> Result<(), BenchError> {
        let bad = |s: String| Err(BenchError::Plan(s));
        if self.iterations == 0 {
            return bad("iterations must be positive".into());
        }
        for (what, sizes, cap) in [
            ("4 KiB", &self.sizes_4k, self.capacity_4k),
            ("2 MiB", &self.sizes_2m, self.capacity_2m),
            ("random", &self.random_sizes, self.capacity_4k),
        ] {
            if let Some(s) = sizes.iter().find(|s| **s == 0 || **s * 2 > cap) {
                return bad(format!(
                    "{what} size {s}: sizes must be positive and at most half the pool ({cap} granules)"
                ));
            }
        }
        if self.capacity_4k < 64 || self.capacity_2m < 2 {
            return bad("capacities must be at least 64 (4 KiB) and 2 (2 MiB) granules".into());
        }
        if !self.random_sizes.is_empty() && (self.regimes.is_empty() || self.random_iterations == 0)
        {
            return bad("random tests need a regime and at least one iteration per map".into());
        }
        Ok(())
    }

    /// Progress units of the whole plan: one per size and series of [`sweep`], one per map
    /// of [`random`].
    pub fn units(&self) -> u64 {
        let maps: usize = self.regimes.iter().map(|r| r.maps).sum();
        let random: usize = self
            .random_pools
            .iter()
            .map(|p| {
                self.random_sizes
                    .iter()
                    .filter(|n| p.block(**n, self.capacity_4k).is_some())
                    .count()
                    * maps
            })
            .sum();
        let cold = if self.cold_iterations > 0 {
            self.sizes_4k.len() * self.layouts.len()
        } else {
            0
        };
        ((self.sizes_4k.len() + self.sizes_2m.len()) * self.layouts.len() + cold + random) as u64
    }

    /// The pool capacity for a granule.
    pub fn capacity(&self, granule: Granule) -> usize {
        match granule {
            Granule::Page => self.capacity_4k,
            Granule::Huge => self.capacity_2m,
        }
    }
}

/// Timings of one case at one size (ns, in the order taken).
#[derive(Debug, Clone)]
pub struct Samples {
    /// The case.
    pub case: Case,
    /// One per timed reassembly.
    pub ns: Vec<f64>,
}

/// One message size of a [`sweep`].
#[derive(Debug, Clone)]
pub struct Point {
    /// Granule.
    pub granule: Granule,
    /// Layout.
    pub layout: Layout,
    /// Caches.
    pub caches: Caches,
    /// Granules in the message.
    pub granules: usize,
    /// Per case, the timed reassemblies.
    pub cases: Vec<Samples>,
    /// The pool's part alone, per moving case: `alloc` timed without the moves (the search
    /// and the marking; the run freed again untimed), warm caches only.
    pub pool: Vec<Samples>,
    /// What one reassembly with the minimal search did: bytes moved and copied, move calls.
    pub moved: Moved,
    /// The path the adaptive reassembler took most often, if the case ran.
    pub adaptive: Option<Path>,
    /// Timed adaptive reassemblies that moved pages and that copied.
    pub adaptive_paths: (usize, usize),
    /// Bytes copied instead of moved over every reassembly of the point (without
    /// `UFFDIO_MOVE`; with it, a copy makes the point be measured again, see `rebuilds`).
    pub copied: usize,
    /// Times the remap space and the message were rebuilt and the point measured again, after
    /// the VM layer failed or copied pages it could not move (at most [`MAX_REBUILDS`]).
    pub rebuilds: usize,
    /// The first such failure.
    pub rebuild_reason: Option<String>,
    /// With 2 MiB granules: whether the message's granules were transparent huge pages when
    /// written (from the process's `AnonHugePages`); `None` with 4 KiB granules or where the
    /// kernel does not say.
    pub huge_pages: Option<bool>,
}

/// One random map of [`random`].
#[derive(Debug, Clone)]
pub struct RandomMap {
    /// Regime (index into [`Plan::regimes`]).
    pub regime: usize,
    /// Map within the regime (0 is the first).
    pub map: usize,
    /// Allocated granules / capacity.
    pub allocation_level: f64,
    /// Free/allocated transitions between neighbouring bits of the pool's map (blocks for
    /// size classes and buddy).
    pub transitions: usize,
    /// The timed reassemblies (ns).
    pub ns: Vec<f64>,
    /// Bytes copied instead of moved over the map's reassemblies.
    pub copied: usize,
    /// Times the remap space and the message were rebuilt and the map measured again (see
    /// [`Point::rebuilds`]).
    pub rebuilds: usize,
    /// The first such failure.
    pub rebuild_reason: Option<String>,
    /// The pool's part alone: `alloc` timed without the moves (ns), [`RANDOM_POOL_REPS`]
    /// times.
    pub pool_ns: Vec<f64>,
}

/// Rebuilds of the rig allowed per point or map before the failure ends the run.
pub const MAX_REBUILDS: usize = 3;

/// Allocations timed alone per random map.
pub const RANDOM_POOL_REPS: usize = 8;

/// The random test of one pool at one message size.
#[derive(Debug, Clone)]
pub struct RandomSeries {
    /// Pool.
    pub pool: RandomPool,
    /// Granules (pages) in the message.
    pub granules: usize,
    /// Granules per bit or block of the pool's map.
    pub block: usize,
    /// The maps, in the order made.
    pub maps: Vec<RandomMap>,
}

// ---------------------------------------------------------------------------------------------
// Pools
// ---------------------------------------------------------------------------------------------

/// A pool that always hands out the same run: the *no search* case (and page-table warm-up).
#[derive(Debug, Clone)]
struct KnownRun {
    first: usize,
    capacity: usize,
    live: Option<usize>,
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
enum BenchPool {
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
fn one_class_pool(capacity: usize, n: usize) -> Result<(SizeClassPool, Vec<usize>), BenchError> {
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
fn full_buddy(capacity: usize, n: usize) -> Result<(BuddyPool, Vec<usize>), BenchError> {
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
fn fill(b: &mut [u8], salt: u64, first_word: u64) {
    for (w, c) in b.chunks_exact_mut(8).enumerate() {
        c.copy_from_slice(&(salt ^ (first_word + w as u64)).to_le_bytes());
    }
}

/// The first word of `b` that is not what [`fill`] wrote: (byte offset, expected, found).
fn check(b: &[u8], salt: u64) -> Result<(), (usize, u64, u64)> {
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
fn anon_huge_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let line = s.lines().find(|l| l.starts_with("AnonHugePages:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// One message: its granules in a store, laid out as asked, and a destination for copies.
struct Msg {
    /// Testing: spoil every copy (see [`Plan::spoil`]).
    spoil: bool,
    granule: Granule,
    store: PageStore,
    slots: Vec<Slot>,
    salt: u64,
    dest: Mapping,
    huge_pages: Option<bool>,
}

impl Msg {
    fn new(
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
        let dest = Mapping::anonymous(
            (n * g).max(2 << 20),
            MapOptions {
                populate: true,
                huge: true,
                no_huge: false,
            },
        )?;
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

    fn granules(&self) -> usize {
        self.slots.len()
    }

    fn corrupt(&self, case: Case, (offset, expected, found): (usize, u64, u64)) -> BenchError {
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
    fn memcpy(&mut self) -> Result<f64, BenchError> {
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

// ---------------------------------------------------------------------------------------------
// The rig: one reassembler whose pool each case swaps in
// ---------------------------------------------------------------------------------------------

struct Rig {
    granule: Granule,
    r: Reassembler<BenchPool>,
    /// The copy case's reassembler.
    copier: Reassembler<BenchPool>,
    /// The adaptive case's reassembler (an empty bitmap), where the plan has a calibration.
    adaptive: Option<Reassembler<BenchPool>>,
    /// Testing: the case whose messages are spoiled (see [`Plan::spoil`]).
    spoil: Option<Case>,
    /// Whether the kernel moves pages (without `UFFDIO_MOVE` every move is a copy, by design).
    moves: bool,
    /// Testing: faults still to inject (see [`Plan::inject_faults`]), shared by the rigs of a
    /// series.
    faults: Rc<Cell<usize>>,
}

impl Rig {
    /// A reassembler over `capacity` granules, its page tables made (one granule moved into
    /// every 512th granule and back), so that no case pays for them; and an adaptive one where
    /// the plan has a calibration for the granule.
    fn new(
        plan: &Plan,
        granule: Granule,
        capacity: usize,
        rng: &mut SplitMix64,
    ) -> Result<Rig, BenchError> {
        let known = |first| {
            BenchPool::Known(KnownRun {
                first,
                capacity,
                live: None,
            })
        };
        let adaptive = match plan
            .calibration
            .iter()
            .find(|c| c.granule == granule.bytes())
        {
            Some(c) => Some(Reassembler::with_policy(
                BenchPool::Bitmap(BitmapPool::new(capacity)),
                granule,
                Policy::Adaptive(Box::new(c.clone())),
            )?),
            None => None,
        };
        let mut rig = Rig {
            granule,
            r: Reassembler::new(known(0), granule)?,
            copier: Reassembler::with_policy(
                BenchPool::Bitmap(BitmapPool::new(capacity)),
                granule,
                Policy::Copy,
            )?,
            adaptive,
            spoil: None,
            moves: zcio_vm::VmRuntime::get().capabilities().swap,
            faults: Rc::new(Cell::new(0)),
        };
        let mut one = Msg::new(granule, 1, Layout::Adjacent, rng)?;
        for first in (0..capacity).step_by(512).chain([capacity - 1]) {
            *rig.r.pool_mut() = known(first);
            rig.reassemble(&mut one, Case::NoSearch)?;
        }
        Ok(rig)
    }

    /// Reassemble `msg` with `pool` swapped in: the time (ns) and what moved. The message is
    /// checked and freed (its pages back in their slots, the pool as it was) before returning.
    fn with_pool(
        &mut self,
        pool: &mut BenchPool,
        msg: &mut Msg,
        case: Case,
    ) -> Result<(f64, Moved, Path), BenchError> {
        std::mem::swap(self.r.pool_mut(), pool);
        let out = self.reassemble(msg, case);
        std::mem::swap(self.r.pool_mut(), pool);
        out
    }

    /// Reassemble `msg` with the installed pool (see [`Rig::with_pool`]), or with the
    /// adaptive reassembler for [`Case::Adaptive`]: the time (ns), what moved, and the path.
    fn reassemble(&mut self, msg: &mut Msg, case: Case) -> Result<(f64, Moved, Path), BenchError> {
        if self.faults.get() > 0 {
            self.faults.set(self.faults.get() - 1);
            return Err(BenchError::Fallback { copied: 0 });
        }
        let spoil = self.spoil == Some(case);
        let r = match case {
            Case::Adaptive => self
                .adaptive
                .as_mut()
                .ok_or_else(|| BenchError::Plan("the adaptive case needs a calibration".into()))?,
            Case::Copy => &mut self.copier,
            _ => &mut self.r,
        };
        let slots = std::mem::take(&mut msg.slots);
        let len = slots.len() * self.granule.bytes();
        let t = Instant::now();
        let done = r.reassemble(&mut msg.store, slots, len);
        let ns = t.elapsed().as_nanos() as f64;
        let m = match done {
            Ok(m) => m,
            Err(refused) => {
                let refused = *refused;
                msg.slots = refused.given_back;
                return Err(refused.error.into());
            }
        };
        if spoil {
            if let Ok(b) = r.bytes_mut(&m) {
                let half = b.len() / 2;
                b[half] ^= 1;
            }
        }
        let verdict = match r.bytes(&m) {
            Ok(b) => check(b, msg.salt).map_err(|e| (case, e)),
            Err(e) => return Err(e.into()),
        };
        let (moved, path) = (m.moved(), m.path());
        if moved.copied > 0 && self.moves && path == Path::Remapped {
            // The timing includes a copy, not only moves: measure this size again.
            return Err(BenchError::Fallback {
                copied: moved.copied,
            });
        }
        match r.free(&mut msg.store, m) {
            Ok(slots) => msg.slots = slots,
            Err(refused) => return Err(refused.error.into()),
        }
        verdict.map_err(|(c, e)| msg.corrupt(c, e))?;
        Ok((ns, moved, path))
    }
}

/// The pools of one message size, one per case that moves pages.
struct CasePools {
    known: BenchPool,
    minimal: BenchPool,
    worst: BenchPool,
    classes: Option<BenchPool>,
    buddy: BenchPool,
}

impl CasePools {
    fn new(capacity: usize, n: usize) -> Result<CasePools, BenchError> {
        let classes = if Case::SizeClassWorstCase.applies(n) {
            let (mut pool, firsts) = one_class_pool(capacity, n)?;
            let last = *firsts.last().expect("at least one block");
            pool.free(last, n)?;
            Some(BenchPool::Classes(Box::new(pool)))
        } else {
            None
        };
        Ok(CasePools {
            known: BenchPool::Known(KnownRun {
                first: 0,
                capacity,
                live: None,
            }),
            minimal: BenchPool::Bitmap(BitmapPool::new(capacity)),
            worst: BenchPool::Bitmap(worst_case(capacity, n)?),
            classes,
            buddy: BenchPool::Buddy(Box::new(BuddyPool::new(capacity)?)),
        })
    }

    fn get(&mut self, case: Case) -> Option<&mut BenchPool> {
        match case {
            Case::Memcpy => None,
            Case::NoSearch => Some(&mut self.known),
            Case::MinimalSearch => Some(&mut self.minimal),
            Case::WorstCaseSearch => Some(&mut self.worst),
            Case::SizeClassWorstCase => self.classes.as_mut(),
            Case::Buddy => Some(&mut self.buddy),
            Case::Copy | Case::Adaptive => None,
        }
    }
}

/// Time one case once (ns) and say what moved (nothing for memcpy) and which path it took.
fn time_case(
    rig: &mut Rig,
    pools: &mut CasePools,
    msg: &mut Msg,
    case: Case,
) -> Result<(f64, Moved, Path), BenchError> {
    let done = match case {
        Case::Memcpy => msg.memcpy().map(|ns| (ns, Moved::default(), Path::Copied)),
        Case::Copy | Case::Adaptive => rig.reassemble(msg, case),
        _ => match pools.get(case) {
            Some(pool) => rig.with_pool(pool, msg, case),
            None => Err(BenchError::Plan(format!(
                "{} has no pool here",
                case.name()
            ))),
        },
    };
    done.map_err(|e| match e {
        e @ BenchError::Corrupt { .. } => e,
        e => e.at(|| case.name().to_string()),
    })
}

/// Evicts the caches by reading a buffer twice the size of the last-level cache.
struct Evictor {
    buf: Vec<u64>,
}

impl Evictor {
    fn new() -> Evictor {
        let llc = (0..8)
            .filter_map(|i| {
                let s = std::fs::read_to_string(format!(
                    "/sys/devices/system/cpu/cpu0/cache/index{i}/size"
                ))
                .ok()?;
                let s = s.trim();
                let (num, mult) = match s.strip_suffix('K') {
                    Some(k) => (k, 1024),
                    None => match s.strip_suffix('M') {
                        Some(m) => (m, 1 << 20),
                        None => (s, 1),
                    },
                };
                Some(num.parse::<usize>().ok()? * mult)
            })
            .max()
            .unwrap_or(32 << 20);
        Evictor {
            buf: vec![1u64; (2 * llc).max(8 << 20) / 8],
        }
    }

    /// Bytes read per eviction.
    fn bytes(&self) -> usize {
        self.buf.len() * 8
    }

    fn evict(&self) {
        // One load per cache line.
        let s: u64 = self
            .buf
            .iter()
            .step_by(8)
            .fold(0, |a, x| a.wrapping_add(*x));
        black_box(s);
    }
}

/// Bytes a cold-cache sweep reads before each timed reassembly.
pub fn eviction_bytes() -> usize {
    Evictor::new().bytes()
}

/// Time one `alloc(n)` of `pool` alone (ns); the run is freed again, untimed.
fn time_alloc(pool: &mut BenchPool, n: usize) -> Result<f64, BenchError> {
    let t = Instant::now();
    let first = pool.alloc(black_box(n));
    let ns = t.elapsed().as_nanos() as f64;
    pool.free(first?, n)?;
    Ok(ns)
}

/// What timing costs: the median of back-to-back `Instant` readings (ns), part of every
/// sample.
pub fn timer_overhead_ns() -> f64 {
    let mut v: Vec<f64> = (0..1001)
        .map(|_| {
            let t = Instant::now();
            black_box(t.elapsed().as_nanos() as f64)
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Figures 4 and 5 (and the 2 MiB analogue): every size of `plan` with `granule`, laid out as
/// `layout`, caches as `caches` says: per size an untimed round of every case, then each case's
/// iterations in four runs back to back, the cases taking turns. Cold caches run the paper's four cases,
/// [`Plan::cold_iterations`] times; warm caches every case, [`Plan::iterations`] times.
/// `progress` is called once per size, with what was measured.
pub fn sweep(
    plan: &Plan,
    granule: Granule,
    layout: Layout,
    caches: Caches,
    progress: &mut dyn FnMut(String),
) -> Result<Vec<Point>, BenchError> {
    plan.check()?;
    let sizes = match granule {
        Granule::Page => &plan.sizes_4k,
        Granule::Huge => &plan.sizes_2m,
    };
    let (cases, iterations): (&[Case], usize) = match caches {
        Caches::Warm => (&Case::ALL, plan.iterations),
        Caches::Cold => (&Case::PAPER, plan.cold_iterations),
    };
    if sizes.is_empty() || iterations == 0 {
        return Ok(Vec::new());
    }
    let evictor = (caches == Caches::Cold).then(Evictor::new);
    let mut rng = SplitMix64::new(plan.seed ^ granule.bytes() as u64 ^ layout as u64);
    let capacity = plan.capacity(granule);
    let faults = Rc::new(Cell::new(plan.inject_faults));
    let mut rig = Rig::new(plan, granule, capacity, &mut rng)?;
    rig.spoil = plan.spoil;
    rig.faults = faults.clone();
    let mut out = Vec::new();
    for &n in sizes {
        let measure = |rig: &mut Rig, rng: &mut SplitMix64| -> Result<Point, BenchError> {
            let mut msg = Msg::new(granule, n, layout, rng)?;
            msg.spoil = plan.spoil == Some(Case::Memcpy);
            let mut pools = CasePools::new(capacity, n)?;
            let cases: Vec<Case> = cases
                .iter()
                .copied()
                .filter(|c| c.applies(n) && (*c != Case::Adaptive || rig.adaptive.is_some()))
                .collect();
            let mut samples: Vec<Samples> = cases
                .iter()
                .map(|&case| Samples {
                    case,
                    ns: Vec::with_capacity(iterations),
                })
                .collect();
            let mut moved = Moved::default();
            let mut copied = 0;
            let mut adaptive_paths = (0, 0);
            // Bytes copied where pages were to move (the adaptive case's chosen copies are
            // not counted).
            let fallback = |(_, m, path): (f64, Moved, Path)| match path {
                Path::Remapped => m.copied,
                Path::Copied => 0,
            };
            // One untimed round (checked all the same): first touches of the destination, the
            // pools' memory and the page tables.
            for &case in &cases {
                copied += fallback(time_case(rig, &mut pools, &mut msg, case)?);
            }
            // Each case's iterations in runs back to back, as an application doing one thing
            // would run (a copy's destination stays as warm as its working set allows;
            // interleaved one by one, the other cases' footprints would evict it from a few
            // hundred pages on, and the copies would pay what the mix costs, not what copying
            // costs). Four rounds of such runs, so that a slow spell of the machine (this may
            // be a virtual machine) falls on several cases rather than all of one. Every timed
            // reassembly comes after the same untimed one, the pages moved in and back out, as
            // pages just delivered would be: their translations not yet cached. The cases take
            // turns going first from one size to the next.
            let rounds = ROUNDS.min(iterations);
            for round in 0..rounds {
                let per = iterations / rounds + usize::from(round < iterations % rounds);
                for k in 0..cases.len() {
                    let at = (k + n) % cases.len();
                    let case = cases[at];
                    for _ in 0..per {
                        match &evictor {
                            Some(e) => e.evict(),
                            None => {
                                copied +=
                                    fallback(time_case(rig, &mut pools, &mut msg, Case::NoSearch)?);
                            }
                        }
                        let done = time_case(rig, &mut pools, &mut msg, case)?;
                        samples[at].ns.push(done.0);
                        copied += fallback(done);
                        match case {
                            Case::MinimalSearch => moved = done.1,
                            Case::Adaptive => match done.2 {
                                Path::Remapped => adaptive_paths.0 += 1,
                                Path::Copied => adaptive_paths.1 += 1,
                            },
                            _ => {}
                        }
                    }
                }
            }
            let mut pool = Vec::new();
            if caches == Caches::Warm {
                for &case in cases
                    .iter()
                    .filter(|c| !matches!(c, Case::Memcpy | Case::Copy | Case::Adaptive))
                {
                    let p = pools.get(case).expect("every moving case has a pool");
                    let ns = (0..iterations)
                        .map(|_| time_alloc(p, n))
                        .collect::<Result<_, _>>()?;
                    pool.push(Samples { case, ns });
                }
            }
            Ok(Point {
                granule,
                layout,
                caches,
                granules: n,
                cases: samples,
                pool,
                moved,
                adaptive: (adaptive_paths != (0, 0)).then_some(
                    if adaptive_paths.0 > adaptive_paths.1 {
                        Path::Remapped
                    } else {
                        Path::Copied
                    },
                ),
                adaptive_paths,
                copied,
                rebuilds: 0,
                rebuild_reason: None,
                huge_pages: msg.huge_pages,
            })
        };
        let at = || {
            format!(
                "{} granules, {}, {} caches, {n} granules",
                granule.name(),
                layout.name(),
                caches.name()
            )
        };
        let mut reason: Option<String> = None;
        let mut rebuilds = 0;
        let mut point = loop {
            match measure(&mut rig, &mut rng) {
                Ok(p) => break p,
                Err(e) if e.is_vm_fault() && rebuilds < MAX_REBUILDS => {
                    reason.get_or_insert_with(|| e.to_string());
                    rebuilds += 1;
                    rig = Rig::new(plan, granule, capacity, &mut rng).map_err(|e| e.at(at))?;
                    rig.spoil = plan.spoil;
                    rig.faults = faults.clone();
                }
                Err(e) => return Err(e.at(at)),
            }
        };
        point.rebuilds = rebuilds;
        point.rebuild_reason = reason;
        progress(format!(
            "vmmr {} {} {} {n} granules",
            granule.name(),
            layout.name(),
            caches.name()
        ));
        out.push(point);
    }
    Ok(out)
}

/// Rounds of back-to-back runs a sweep divides each case's iterations into.
const ROUNDS: usize = 4;

/// A map of blocks (true = allocated): its transitions between neighbours.
fn block_transitions(allocated: &[bool]) -> usize {
    allocated.windows(2).filter(|w| w[0] != w[1]).count()
}

/// Figures 6–9: for each size of [`Plan::random_sizes`] that `pool` can hold, the maps of
/// [`Plan::regimes`] (each regime from an all-allocated map but a reserved free run at the end,
/// random granules freed map by map), each timed: the search from a random start word (bitmap),
/// from word 0 (size classes) or by free lists (buddy), plus the moves, done for real, of a
/// scattered message of 4 KiB pages. `progress` is called once per map.
pub fn random(
    plan: &Plan,
    pool: RandomPool,
    progress: &mut dyn FnMut(String),
) -> Result<Vec<RandomSeries>, BenchError> {
    plan.check()?;
    let granule = Granule::Page;
    let cap = plan.capacity_4k;
    let mut rng = SplitMix64::new(plan.seed ^ 0xF167 ^ pool as u64);
    let faults = Rc::new(Cell::new(plan.inject_faults));
    let mut rig = Rig::new(plan, granule, cap, &mut rng)?;
    rig.spoil = plan.spoil;
    rig.faults = faults.clone();
    let mut out = Vec::new();
    for &n in &plan.random_sizes {
        let Some(block) = pool.block(n, cap) else {
            continue;
        };
        let mut msg = Msg::new(granule, n, Layout::Scattered, &mut rng)?;
        let iterations = (plan.random_page_budget / n).clamp(1, plan.random_iterations);
        let mut maps = Vec::new();
        for (ri, regime) in plan.regimes.iter().enumerate() {
            let mut series = MapSeries::new(pool, cap, n, block, regime.frees_per_map)?;
            for j in 0..regime.maps {
                series.next(&mut rng)?;
                let (mut installed, level, transitions) = series.current(&mut rng);
                let at = || {
                    format!(
                        "random maps, {} pool, {n} pages, regime {ri} map {j}",
                        pool.name()
                    )
                };
                let mut reason: Option<String> = None;
                let mut rebuilds = 0;
                let (ns, copied) = loop {
                    let mut ns = Vec::with_capacity(iterations);
                    let mut copied = 0;
                    let done = (0..iterations).try_for_each(|_| {
                        let (t, m, _) =
                            rig.with_pool(&mut installed, &mut msg, Case::MinimalSearch)?;
                        ns.push(t);
                        copied += m.copied;
                        Ok::<(), BenchError>(())
                    });
                    match done {
                        Ok(()) => break (ns, copied),
                        Err(e) if e.is_vm_fault() && rebuilds < MAX_REBUILDS => {
                            reason.get_or_insert_with(|| e.to_string());
                            rebuilds += 1;
                            rig = Rig::new(plan, granule, cap, &mut rng).map_err(|e| e.at(at))?;
                            rig.spoil = plan.spoil;
                            rig.faults = faults.clone();
                            msg = Msg::new(granule, n, Layout::Scattered, &mut rng)
                                .map_err(|e| e.at(at))?;
                            installed = series.current(&mut rng).0;
                        }
                        Err(e) => return Err(e.at(at)),
                    }
                };
                let pool_ns = (0..RANDOM_POOL_REPS)
                    .map(|_| time_alloc(&mut installed, n))
                    .collect::<Result<_, _>>()?;
                maps.push(RandomMap {
                    regime: ri,
                    map: j,
                    allocation_level: level,
                    transitions,
                    ns,
                    copied,
                    rebuilds,
                    rebuild_reason: reason,
                    pool_ns,
                });
                progress(format!("vmmr random {} {n} pages", pool.name()));
            }
        }
        out.push(RandomSeries {
            pool,
            granules: n,
            block,
            maps,
        });
    }
    Ok(out)
}

/// The maps of one regime, for one pool organization.
enum MapSeries {
    /// The bitmap itself, and the frees per map.
    Bitmap { map: BitmapPool, frees: usize },
    /// Size classes or buddy: the pool with every block taken, the blocks' first granules,
    /// which are allocated, and the frees per map scaled to the blocks (fractions carried).
    Blocks {
        pool: BenchPool,
        firsts: Vec<usize>,
        allocated: Vec<bool>,
        n: usize,
        block: usize,
        capacity: usize,
        per_map: f64,
        owed: f64,
    },
}

impl MapSeries {
    fn new(
        pool: RandomPool,
        capacity: usize,
        n: usize,
        block: usize,
        frees_per_map: usize,
    ) -> Result<MapSeries, BenchError> {
        let (bench_pool, firsts) = match pool {
            RandomPool::Bitmap => {
                return Ok(MapSeries::Bitmap {
                    map: crate::pool::fragmented(capacity, n, 0, &mut SplitMix64::new(0))?,
                    frees: frees_per_map,
                });
            }
            RandomPool::SizeClasses => {
                let (p, f) = one_class_pool(capacity, n)?;
                (BenchPool::Classes(Box::new(p)), f)
            }
            RandomPool::Buddy => {
                let (p, f) = full_buddy(capacity, n)?;
                (BenchPool::Buddy(Box::new(p)), f)
            }
        };
        let mut s = MapSeries::Blocks {
            allocated: vec![true; firsts.len()],
            pool: bench_pool,
            firsts,
            n,
            block,
            capacity,
            // The same expected allocation levels as the bitmap's maps: a granule's chance
            // of being drawn, per block.
            per_map: frees_per_map as f64 / capacity as f64,
            owed: 0.0,
        };
        // The reserved free run at the end: the last block.
        if let MapSeries::Blocks {
            pool,
            firsts,
            allocated,
            n,
            ..
        } = &mut s
        {
            let last = firsts.len() - 1;
            pool.free(firsts[last], *n)?;
            allocated[last] = false;
        }
        Ok(s)
    }

    /// The next map: more random granules (or blocks) freed.
    fn next(&mut self, rng: &mut SplitMix64) -> Result<(), BenchError> {
        match self {
            MapSeries::Bitmap { map, frees } => map.scatter_frees(*frees, rng),
            MapSeries::Blocks {
                pool,
                firsts,
                allocated,
                n,
                per_map,
                owed,
                ..
            } => {
                // Each of the bitmap's draws hits one granule; per block that is a draw with
                // probability 1/capacity per granule, i.e. frees × blocks / capacity draws
                // over the blocks.
                *owed += *per_map * firsts.len() as f64;
                while *owed >= 1.0 {
                    *owed -= 1.0;
                    let b = rng.below(firsts.len());
                    if allocated[b] {
                        pool.free(firsts[b], *n)?;
                        allocated[b] = false;
                    }
                }
            }
        }
        Ok(())
    }

    /// The current map as a pool to install, its allocation level and transitions.
    fn current(&self, rng: &mut SplitMix64) -> (BenchPool, f64, usize) {
        match self {
            MapSeries::Bitmap { map, .. } => {
                let mut m = map.clone();
                m.set_search_start(SearchStart::Random {
                    seed: rng.next_u64(),
                });
                let (level, t) = (m.allocation_level(), m.transitions());
                (BenchPool::Bitmap(m), level, t)
            }
            MapSeries::Blocks {
                pool,
                allocated,
                block,
                capacity,
                ..
            } => {
                let taken = allocated.iter().filter(|a| **a).count() * block;
                (
                    pool.clone(),
                    taken as f64 / *capacity as f64,
                    block_transitions(allocated),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_and_check_agree_and_catch_a_wrong_word() {
        let mut b = vec![0u8; 4096 * 2];
        fill(&mut b[..4096], 7, 0);
        fill(&mut b[4096..], 7, 512);
        assert_eq!(check(&b, 7), Ok(()));
        b[4096 + 16] ^= 1;
        assert_eq!(check(&b, 7).unwrap_err().0, 4096 + 16);
        assert!(check(&b, 8).is_err());
    }

    #[test]
    fn pools_report_blocks_for_the_sizes_they_hold() {
        assert_eq!(RandomPool::Bitmap.block(5, 64), Some(5));
        assert_eq!(RandomPool::SizeClasses.block(5, 65536), Some(16));
        assert_eq!(RandomPool::SizeClasses.block(257, 65536), None);
        assert_eq!(RandomPool::Buddy.block(100, 65536), Some(128));
        assert_eq!(RandomPool::Buddy.block(100, 200), None);
        assert_eq!(RandomPool::Buddy.block(1024, 65536), Some(1024));
        assert_eq!(RandomPool::Buddy.block(2048, 65536), None);
        assert_eq!(RandomPool::Bitmap.block(6144, 65536), Some(6144));
    }

    #[test]
    fn full_sizes_are_about_eighty_and_hold_the_paper_ones() {
        let s = full_sizes_4k(&PAPER_RANDOM_SIZES);
        assert!((70..=90).contains(&s.len()), "{}", s.len());
        assert_eq!((s[0], *s.last().unwrap()), (1, 6144));
        assert!(PAPER_RANDOM_SIZES.iter().all(|x| s.contains(x)));
    }

    #[test]
    fn block_maps_follow_the_bitmap_levels() {
        // The same frees per map bring size-class and bitmap maps to about the same level.
        let mut rng = SplitMix64::new(3);
        let cap = 4096;
        let mut bits = MapSeries::new(RandomPool::Bitmap, cap, 16, 16, 200).unwrap();
        let mut blocks = MapSeries::new(RandomPool::SizeClasses, cap, 16, 16, 200).unwrap();
        for _ in 0..10 {
            bits.next(&mut rng).unwrap();
            blocks.next(&mut rng).unwrap();
        }
        let (_, a, _) = bits.current(&mut rng);
        let (_, b, _) = blocks.current(&mut rng);
        assert!((a - b).abs() < 0.1, "{a} {b}");
        assert!(a < 0.8 && a > 0.4, "{a}");
    }

    /// A machine where a move call costs 2 µs and each granule in it 500 ns, and copying a
    /// byte 0.05 ns: 4 KiB pages copy (205 ns a page), 2 MiB granules move (105 µs to copy).
    fn made_up(granule: Granule) -> Calibration {
        Calibration {
            granule: granule.bytes(),
            move_call_ns: 2000.0,
            move_granule_ns: 500.0,
            copy_by_size: vec![(4096, 0.05), (1 << 30, 0.05)],
        }
    }

    #[test]
    fn a_small_sweep_measures_every_case_and_checks_every_message() {
        let plan = Plan {
            sizes_4k: vec![1, 3],
            sizes_2m: vec![1],
            iterations: 2,
            capacity_4k: 1024,
            capacity_2m: 4,
            calibration: vec![made_up(Granule::Page), made_up(Granule::Huge)],
            ..Plan::smoke()
        };
        let mut calls = 0;
        for layout in Layout::ALL {
            let pts = sweep(&plan, Granule::Page, layout, Caches::Warm, &mut |_| {
                calls += 1
            })
            .unwrap();
            assert_eq!(pts.len(), 2);
            for p in &pts {
                assert_eq!(p.cases.len(), Case::ALL.len());
                for s in &p.cases {
                    assert_eq!(s.ns.len(), 2);
                    assert!(s.ns.iter().all(|x| x.is_finite() && *x > 0.0), "{s:?}");
                }
                // Every case but the copies and the adaptive one has a pool of its own.
                assert_eq!(p.pool.len(), Case::ALL.len() - 3);
                assert!(p.pool.iter().all(|s| s.ns.len() == 2));
                assert_eq!(p.adaptive, Some(Path::Copied), "{} pages", p.granules);
                assert_eq!(p.moved.moved + p.moved.copied, p.granules * 4096);
                if zcio_vm::VmRuntime::get().capabilities().swap {
                    assert_eq!(p.copied, 0);
                }
                let calls = if layout == Layout::Scattered {
                    p.granules
                } else {
                    1
                };
                assert_eq!(p.moved.calls, calls);
            }
        }
        assert_eq!(calls, 4);
        let pts = sweep(
            &plan,
            Granule::Huge,
            Layout::Scattered,
            Caches::Warm,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(pts[0].moved.moved + pts[0].moved.copied, 2 << 20);
        assert_eq!(pts[0].adaptive, Some(Path::Remapped));
        // Without a calibration there is no adaptive case, and the rest still runs.
        let plan = Plan {
            calibration: vec![],
            ..plan
        };
        let pts = sweep(
            &plan,
            Granule::Page,
            Layout::Adjacent,
            Caches::Warm,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(
            (pts[0].cases.len(), pts[0].adaptive),
            (Case::ALL.len() - 1, None)
        );
    }

    #[test]
    fn a_spoiled_message_fails_the_run() {
        for case in [
            Case::Memcpy,
            Case::MinimalSearch,
            Case::Buddy,
            Case::Copy,
            Case::Adaptive,
        ] {
            let plan = Plan {
                sizes_4k: vec![2],
                capacity_4k: 256,
                spoil: Some(case),
                calibration: vec![made_up(Granule::Page)],
                ..Plan::smoke()
            };
            let e = sweep(
                &plan,
                Granule::Page,
                Layout::Scattered,
                Caches::Warm,
                &mut |_| {},
            )
            .unwrap_err();
            let BenchError::At { at, error } = e else {
                panic!("{case:?}: {e}")
            };
            assert!(at.contains("2 granules"), "{at}");
            match *error {
                BenchError::Corrupt {
                    case: c, offset, ..
                } => assert_eq!((c, offset), (case.name(), 4096)),
                e => panic!("{case:?}: {e}"),
            }
        }
    }

    #[test]
    fn a_page_the_kernel_would_not_move_rebuilds_the_rig_a_few_times_then_fails() {
        let plan = Plan {
            sizes_4k: vec![2, 3],
            capacity_4k: 256,
            inject_faults: 2,
            ..Plan::smoke()
        };
        let pts = sweep(
            &plan,
            Granule::Page,
            Layout::Scattered,
            Caches::Warm,
            &mut |_| {},
        )
        .unwrap();
        assert_eq!((pts[0].rebuilds, pts[1].rebuilds), (2, 0));
        assert!(
            pts[0]
                .rebuild_reason
                .as_deref()
                .unwrap()
                .contains("would not move")
        );
        let plan = Plan {
            inject_faults: MAX_REBUILDS + 1,
            ..plan
        };
        let e = sweep(
            &plan,
            Granule::Page,
            Layout::Scattered,
            Caches::Warm,
            &mut |_| {},
        )
        .unwrap_err();
        assert!(e.to_string().contains("would not move"), "{e}");
        let plan = Plan {
            capacity_4k: 1024,
            random_sizes: vec![4],
            regimes: vec![Regime {
                frees_per_map: 100,
                maps: 3,
            }],
            inject_faults: 1,
            ..Plan::smoke()
        };
        let s = random(&plan, RandomPool::Bitmap, &mut |_| {}).unwrap();
        let r: Vec<usize> = s[0].maps.iter().map(|m| m.rebuilds).collect();
        assert_eq!(r, [1, 0, 0]);
    }

    #[test]
    fn random_maps_cover_levels_and_time_every_map() {
        let plan = Plan {
            capacity_4k: 65536,
            random_sizes: vec![4, 300],
            regimes: vec![Regime {
                frees_per_map: 600,
                maps: 6,
            }],
            random_iterations: 2,
            random_page_budget: 8,
            ..Plan::smoke()
        };
        for pool in RandomPool::ALL {
            let s = random(&plan, pool, &mut |_| {}).unwrap();
            let sizes: Vec<usize> = s.iter().map(|x| x.granules).collect();
            match pool {
                RandomPool::SizeClasses => assert_eq!(sizes, [4]),
                _ => assert_eq!(sizes, [4, 300]),
            }
            for series in &s {
                assert_eq!(series.maps.len(), 6);
                let levels: Vec<f64> = series.maps.iter().map(|m| m.allocation_level).collect();
                assert!(levels.windows(2).all(|w| w[1] <= w[0]), "{levels:?}");
                assert!(levels[0] > 0.5, "{levels:?}");
                for m in &series.maps {
                    assert_eq!(m.pool_ns.len(), RANDOM_POOL_REPS);
                    let want = if series.granules == 4 { 2 } else { 1 };
                    assert_eq!(m.ns.len(), want);
                }
            }
        }
    }
}
