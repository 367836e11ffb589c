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

use std::cell::Cell;
use std::hint::black_box;
use std::rc::Rc;
use std::time::Instant;
use zcio_vm::remap::{Granule, Moved, PageStore, Slot};
use zcio_vm::{MapOptions, Mapping, VmError};
use zcio_vmmr::pool::{
    BitmapPool, BuddyPool, PagePool, PoolError, Regime, Rng, SIZE_CLASSES, SearchStart,
    SizeClassPool, SizeClassSplit, SplitMix64, worst_case,
};
use zcio_vmmr::reassemble::{Calibration, CycleCalibration, Path, Policy, Reassembler, VmmrError};

mod pools;
#[cfg(test)]
mod tests;
mod timing;

pub use timing::{eviction_bytes, random, sweep, timer_overhead_ns};

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
    /// What a remapped message's whole cycle costs here (moved in and back out), per granule
    /// size: where a granule has it, the adaptive case chooses on it ([`Policy::AdaptiveCycle`]).
    pub cycle: Vec<CycleCalibration>,
    /// The real producers' series ([`crate::lab::vmmr::producers`]): timed messages per
    /// producer, policy and size (0: not run).
    pub producer_iterations: usize,
    /// The producers' message sizes (4 KiB, then 2 MiB granules) where they differ from the
    /// sweeps' (the sweeps not run).
    pub producer_sizes: Option<[Vec<usize>; 2]>,
    /// Testing: spoil every message this producer (`file` or `socket`) brings, after its
    /// reassembly and before the check, so that the run must fail.
    pub spoil_producer: Option<String>,
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
            cycle: Vec::new(),
            // Every other size: a 4 KiB page read with O_DIRECT waits for the device, tens of
            // microseconds each on a virtual disk.
            producer_iterations: 3,
            producer_sizes: Some([vec![1, 4, 16, 64, 256, 1024, 4096], vec![1, 2, 4, 8, 12]]),
            spoil_producer: None,
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
            regimes: zcio_vmmr::pool::PAPER_REGIMES.to_vec(),
            random_iterations: 32,
            random_page_budget: 1024,
            producer_iterations: 16,
            producer_sizes: None,
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
            producer_iterations: 2,
            producer_sizes: None,
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
        if let Some(s) = self
            .producer_sizes
            .iter()
            .flatten()
            .flatten()
            .find(|s| **s == 0)
        {
            return bad(format!("producer size {s}: sizes must be positive"));
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
            + crate::lab::vmmr::producers::units(self)
    }

    /// The adaptive policy for a granule: on the whole cycle where the plan has its costs, on
    /// the move-in where it has only those, none without a calibration.
    pub fn policy(&self, granule: Granule) -> Option<Policy> {
        let g = granule.bytes();
        if let Some(c) = self.cycle.iter().find(|c| c.move_in.granule == g) {
            return Some(Policy::AdaptiveCycle(Box::new(c.clone())));
        }
        let c = self.calibration.iter().find(|c| c.granule == g)?;
        Some(Policy::Adaptive(Box::new(c.clone())))
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
