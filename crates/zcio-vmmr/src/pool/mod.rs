//! Virtual page pools: which granules of a reserved virtual range are free, and where a run of
//! `n` contiguous free granules lies (paper 002, §2.3, §4.1–§4.3, §5).
//!
//! A pool counts *granules*, numbered `0..capacity`; a granule is one page of whatever size the
//! caller maps (4 KiB or 2 MiB), the pool never needs to know which. VMMR asks a pool for a run
//! of `n` free granules, moves an `n`-page message into it, and gives the run back when the
//! message is freed. Three organizations sit behind the one trait [`PagePool`]:
//!
//! | pool | paper | alloc | free takes back |
//! |---|---|---|---|
//! | [`BitmapPool`] | §2.3 free-page bitmap, word-at-a-time first fit | exact `n`, O(words) | any run of allocated granules |
//! | [`SizeClassPool`] | §4.3/§5 bitmaps of pre-concatenated blocks of 1, 4, 16, 64, 256 | one block, `n` rounded up | exactly what `alloc` returned, with the same `n` |
//! | [`BuddyPool`] | §4.3's recommendation (buddy system) | `n` rounded up to a power of two, O(log capacity) | exactly what `alloc` returned, with the same `n` |
//!
//! The paper's benchmark maps are built here too: [`worst_case`] (alternating bits with one
//! free run at the end, §4.1), [`fragmented`] and [`FragmentedSeries`] (all allocated but a
//! reserved run at the end, then random granules freed, §4.2), with the paper's
//! [`Fibonacci`] generator (§2.5) or the better [`SplitMix64`].
//!
//! # Bit order of the bitmap
//!
//! As in the paper, one bit per granule, 1 = allocated, in `u64` words; granule `i` is bit
//! `63 - i % 64` of word `i / 64`, so a search walks each word from its most significant bit to
//! its least significant bit and then on to the most significant bit of the next word:
//!
//! ```text
//!  granule:   0  1  2  3 ... 63 | 64 65 ... 127 | ...
//!  word 0:   b63 b62 b61 ... b0 | word 1: b63 ... b0
//! ```
//!
//! A run of free granules is a run of zero bits within a word or across words (Fig. 2). Bits of
//! the last word beyond `capacity` are kept at 1, so no run ever reaches past the end.
//!
//! # Example
//!
//! ```
//! use zcio_vmmr::pool::{BitmapPool, BuddyPool, PagePool};
//!
//! let mut pool = BitmapPool::new(1024);
//! let a = pool.alloc(17)?;
//! let b = pool.alloc(3)?;
//! assert_eq!((a, b), (0, 17));
//! pool.free(a, 17)?;
//! assert_eq!(pool.free_granules(), 1021);
//!
//! let mut buddy = BuddyPool::new(1000)?; // 512 + 256 + 128 + 64 + 32 + 8
//! assert_eq!(buddy.largest_alloc(), 512);
//! let c = buddy.alloc(5)?; // takes a block of 8
//! assert_eq!(buddy.wasted_granules(), 3);
//! buddy.free(c, 5)?;
//! # Ok::<(), zcio_vmmr::pool::PoolError>(())
//! ```

/// The [`PagePool`] methods of a pool that keeps its capacity and its free granules in fields
/// `capacity` and `free`, and whose name is `$name`.
macro_rules! counted_pool {
    ($name:literal) => {
        fn capacity(&self) -> usize {
            self.capacity
        }

        fn free_granules(&self) -> usize {
            self.free
        }

        fn name(&self) -> &'static str {
            $name
        }
    };
}

mod bitmap;
mod buddy;
mod size_class;

use bitmap::span_mask;
pub use bitmap::{BitmapPool, Search, SearchStats};
pub use buddy::BuddyPool;
pub use size_class::{Block, ClassStats, SizeClassPool, SizeClassSplit};

/// Why a page pool refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PoolError {
    /// No run of the requested length is free (though one could exist in an emptier pool).
    #[error(
        "page pool exhausted: no run of {requested} free granules ({free} free of {capacity}, largest free run {largest})"
    )]
    Exhausted {
        /// Granules asked for.
        requested: usize,
        /// Free granules in the pool.
        free: usize,
        /// The pool's capacity in granules.
        capacity: usize,
        /// The largest request that would succeed right now (0 if none): the longest free run
        /// for a bitmap, the largest free block for buddy, and for size classes the largest
        /// free block or the overflow region's longest free run, whichever is longer.
        largest: usize,
    },
    /// A run of zero granules was asked for or given back.
    #[error("zero-length run: a run holds at least one granule")]
    ZeroLength,
    /// More granules were asked for than this pool can ever hand out in one run.
    #[error(
        "request of {requested} granules exceeds the largest run this pool can hand out ({largest} granules)"
    )]
    TooLarge {
        /// Granules asked for.
        requested: usize,
        /// The largest run this pool hands out when empty.
        largest: usize,
    },
    /// A run handed back (or marked) does not lie inside the pool.
    #[error("granules [{first}, +{n}) lie outside the pool of {capacity}")]
    Foreign {
        /// First granule of the run.
        first: usize,
        /// Length of the run.
        n: usize,
        /// The pool's capacity in granules.
        capacity: usize,
    },
    /// A run handed back holds a granule that is already free.
    #[error("double free: granule {granule} is already free")]
    DoubleFree {
        /// The first granule of the run that is already free.
        granule: usize,
    },
    /// A run handed back is not one allocation: size-class and buddy pools take back exactly
    /// the `(first, n)` that `alloc(n)` returned, nothing more, less, or shifted.
    #[error(
        "granules [{first}, +{n}) are not an allocation of this pool ({pool} takes back exactly the (first, n) of one alloc(n))"
    )]
    NotARun {
        /// First granule given back.
        first: usize,
        /// Length given back.
        n: usize,
        /// The pool's name.
        pool: &'static str,
    },
    /// A pool of this many granules cannot be built.
    #[error("a {pool} pool of {capacity} granules is too large: at most {limit}")]
    CapacityTooLarge {
        /// The pool's name.
        pool: &'static str,
        /// Granules asked for (saturated at `usize::MAX` when the sum overflowed).
        capacity: usize,
        /// The most this pool supports.
        limit: usize,
    },
    /// The pool's bookkeeping would take more memory than the system has available.
    #[error(
        "a {pool} pool of {capacity} granules needs {bytes} bytes of bookkeeping, more than the {available} bytes of memory available"
    )]
    OutOfMemory {
        /// The pool's name.
        pool: &'static str,
        /// Granules asked for.
        capacity: usize,
        /// Bytes its bookkeeping needs.
        bytes: usize,
        /// Bytes of memory available (`MemAvailable`).
        available: usize,
    },
}

/// Memory available for new allocations now (`MemAvailable` of `/proc/meminfo`, bytes);
/// unbounded where it cannot be read.
fn available_memory() -> usize {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemAvailable:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<usize>().ok())
        })
        .map_or(usize::MAX, |kib| kib.saturating_mul(1024))
}

/// Refuse a pool whose bookkeeping, `bytes`, exceeds `available`: the allocation would not
/// fail cleanly but be overcommitted, then killed when filled.
fn check_budget(
    pool: &'static str,
    capacity: usize,
    bytes: usize,
    available: usize,
) -> Result<(), PoolError> {
    if bytes > available {
        return Err(PoolError::OutOfMemory {
            pool,
            capacity,
            bytes,
            available,
        });
    }
    Ok(())
}

/// [`check_budget`] against the memory available now.
fn within_memory(pool: &'static str, capacity: usize, bytes: usize) -> Result<(), PoolError> {
    check_budget(pool, capacity, bytes, available_memory())
}

/// A pool of `capacity` granules handing out runs of contiguous free granules.
///
/// Granules are numbered `0..capacity`. A successful `alloc(n)` returns the first granule of a
/// run `[first, first + n)` that no other live allocation overlaps; the pool may set aside more
/// than `n` granules for it (size classes and buddy round up), but only `[first, first + n)`
/// is the caller's.
pub trait PagePool {
    /// A run of `n` contiguous free granules, marked allocated: its first granule.
    ///
    /// Errors: [`PoolError::ZeroLength`] for `n == 0`, [`PoolError::TooLarge`] when `n` exceeds
    /// [`largest_alloc`](Self::largest_alloc), [`PoolError::Exhausted`] when no such run is free
    /// now.
    fn alloc(&mut self, n: usize) -> Result<usize, PoolError>;

    /// Give back the run `[first, first + n)`.
    ///
    /// Errors: [`PoolError::Foreign`] when the run is not inside the pool,
    /// [`PoolError::ZeroLength`] for `n == 0`, [`PoolError::DoubleFree`] when a granule of it
    /// is already free, [`PoolError::NotARun`] for pools that only take back exactly one
    /// allocation ([`SizeClassPool`], [`BuddyPool`]) when it is not one. A refused free changes
    /// nothing.
    fn free(&mut self, first: usize, n: usize) -> Result<(), PoolError>;

    /// Granules in the pool.
    fn capacity(&self) -> usize;

    /// Granules not set aside for any allocation.
    fn free_granules(&self) -> usize;

    /// The largest `n` that `alloc` can satisfy, when the pool is empty.
    fn largest_alloc(&self) -> usize;

    /// The pool's name for reports (`"bitmap"`, `"size-classes"`, `"buddy"`).
    fn name(&self) -> &'static str;
}

/// `[first, first + n)` inside `0..capacity`, or [`PoolError::Foreign`].
fn check_range(first: usize, n: usize, capacity: usize) -> Result<(), PoolError> {
    match first.checked_add(n) {
        Some(end) if end <= capacity => Ok(()),
        _ => Err(PoolError::Foreign { first, n, capacity }),
    }
}

/// A request for `n` granules that a pool whose largest run is `largest` could serve when
/// empty: else [`PoolError::ZeroLength`] or [`PoolError::TooLarge`], as [`PagePool::alloc`]
/// refuses.
fn check_request(n: usize, largest: usize) -> Result<(), PoolError> {
    if n == 0 {
        return Err(PoolError::ZeroLength);
    }
    if n > largest {
        return Err(PoolError::TooLarge {
            requested: n,
            largest,
        });
    }
    Ok(())
}

/// A run `[first, first + n)` that may be given back to a pool of `capacity` granules: else
/// [`PoolError::ZeroLength`] or [`PoolError::Foreign`], as [`PagePool::free`] refuses.
fn check_give_back(first: usize, n: usize, capacity: usize) -> Result<(), PoolError> {
    if n == 0 {
        return Err(PoolError::ZeroLength);
    }
    check_range(first, n, capacity)
}

/// The refusal of `pool` to a request of `requested` granules that no free run serves now,
/// `largest` being the largest request that would succeed.
fn exhausted(pool: &impl PagePool, requested: usize, largest: usize) -> PoolError {
    PoolError::Exhausted {
        requested,
        free: pool.free_granules(),
        capacity: pool.capacity(),
        largest,
    }
}

// ---------------------------------------------------------------------------------------------
// Random numbers (§2.5)
// ---------------------------------------------------------------------------------------------

/// A source of pseudo-random numbers for search starts and fragmented maps.
pub trait Rng {
    /// The next 32-bit value.
    fn next_u32(&mut self) -> u32;

    /// A value in `0..n` (0 when `n == 0`).
    fn below(&mut self, n: usize) -> usize;
}

/// The paper's generator (§2.5, after Knuth): `X[n+1] = (X[n] + X[n-1]) mod 0x7FFF_FFFF`,
/// `X[0] = 17`, `X[-1] = 37`.
///
/// Kept for faithful replays of the paper's maps; it is a weak generator (consecutive values
/// are strongly correlated, and the first few are small because the sequence starts by
/// growing like the Fibonacci numbers). Prefer [`SplitMix64`] for anything else.
///
/// ```
/// use zcio_vmmr::pool::{Fibonacci, Rng};
/// let mut f = Fibonacci::new();
/// assert_eq!([f.next_u32(), f.next_u32(), f.next_u32()], [54, 71, 125]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fibonacci {
    /// `X[n]`.
    x: u32,
    /// `X[n-1]`.
    prev: u32,
}

impl Fibonacci {
    /// The modulus, `0x7FFF_FFFF`.
    pub const MODULUS: u32 = 0x7FFF_FFFF;

    /// The paper's seeds: `X[0] = 17`, `X[-1] = 37`.
    pub fn new() -> Self {
        Self::with_seeds(17, 37)
    }

    /// Other seeds `X[0]`, `X[-1]` (reduced modulo [`Self::MODULUS`]; two zeros give zeros
    /// forever).
    pub fn with_seeds(x0: u32, x_minus1: u32) -> Self {
        Self {
            x: x0 % Self::MODULUS,
            prev: x_minus1 % Self::MODULUS,
        }
    }
}

impl Default for Fibonacci {
    fn default() -> Self {
        Self::new()
    }
}

impl Rng for Fibonacci {
    /// `X[n+1]`, in `0..0x7FFF_FFFF`.
    fn next_u32(&mut self) -> u32 {
        // Both terms are below 2^31, so the sum fits in a u32.
        let next = (self.x + self.prev) % Self::MODULUS;
        self.prev = self.x;
        self.x = next;
        next
    }

    /// `X[n+1] mod n`, as a 32-bit integer-only benchmark would (slightly biased for `n` that
    /// do not divide 2^31 - 1).
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        self.next_u32() as usize % n
    }
}

/// SplitMix64 (Steele, Lea and Flood): a small, fast generator with good statistical quality,
/// for random search starts and fragmented maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// The next 64-bit value.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl Rng for SplitMix64 {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Lemire's multiply-shift: `(x * n) >> 64`, bias below 2^-40 for `n < 2^24`.
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }
}

// ---------------------------------------------------------------------------------------------
// Where a bitmap search starts (§2.3, §4.2)
// ---------------------------------------------------------------------------------------------

/// Where [`BitmapPool::alloc`] starts its search (§2.3, §4.2).
///
/// Whatever the start, a search that reaches the end of the bitmap without success goes on
/// from word 0 up to the start word, so every candidate is tried once; a run never wraps from
/// the last granule to granule 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SearchStart {
    /// The most significant bit of word 0 (the paper's default): plain first fit.
    #[default]
    Fixed,
    /// The most significant bit of this word (taken modulo the number of words).
    Word(usize),
    /// A word drawn by a [`SplitMix64`] seeded with `seed`, anew for each search.
    Random {
        /// The generator's seed.
        seed: u64,
    },
    /// A word drawn by the paper's [`Fibonacci`] generator (`X[n] mod words`), anew for each
    /// search.
    Fibonacci,
}

// ---------------------------------------------------------------------------------------------
// Size classes (§4.3, §5)
// ---------------------------------------------------------------------------------------------

/// Block sizes of the size classes, in granules (§5: *tiny*, *small*, *medium*, *large*,
/// *huge*).
pub const SIZE_CLASSES: [usize; 5] = [1, 4, 16, 64, 256];

/// The paper's names of the size classes, in the order of [`SIZE_CLASSES`].
pub const SIZE_CLASS_NAMES: [&str; 5] = ["tiny", "small", "medium", "large", "huge"];

// ---------------------------------------------------------------------------------------------
// Benchmark maps (§4.1, §4.2)
// ---------------------------------------------------------------------------------------------

/// The paper's *worst case* map (§4.1) for runs of `n`: for `n == 1` every granule allocated
/// but the last; for `n >= 2` alternating allocated/free bits (granule 0 allocated) and one
/// free run of exactly `n` at the end, `[capacity - n, capacity)` (the granule before it is
/// allocated). A search for `n` then has to resolve about `capacity` transitions before it
/// finds that run.
///
/// Errors: [`PoolError::ZeroLength`] for `n == 0`, [`PoolError::TooLarge`] for
/// `n > capacity`.
pub fn worst_case(capacity: usize, n: usize) -> Result<BitmapPool, PoolError> {
    check_request(n, capacity)?;
    let mut pool = BitmapPool::new(capacity);
    if n == 1 {
        pool.set_allocated(0, capacity - 1)?;
        return Ok(pool);
    }
    for (i, w) in pool.words.iter_mut().enumerate() {
        let pad = if (i + 1) * 64 > capacity {
            !span_mask(0, capacity - i * 64)
        } else {
            0
        };
        // Even granules (most significant bit first) allocated.
        *w = 0xAAAA_AAAA_AAAA_AAAA | pad;
    }
    pool.free = capacity - pool.allocated_in(0, capacity);
    pool.set_free(capacity - n, n)?;
    if capacity > n {
        pool.set_allocated(capacity - n - 1, 1)?;
    }
    Ok(pool)
}

/// A *random test* map (§4.2): every granule allocated except a reserved free run
/// `[capacity - n, capacity)` at the end, then `frees` granules drawn by `rng` marked free
/// (a granule drawn twice stays free; the reserved run may be drawn too).
///
/// The paper's maps come in series where each map has `K` more frees than the one before (see
/// [`FragmentedSeries`]); one map of such a series is `fragmented(capacity, n, j * K, rng)` in
/// distribution.
///
/// Errors: [`PoolError::ZeroLength`] for `n == 0`, [`PoolError::TooLarge`] for
/// `n > capacity`.
pub fn fragmented(
    capacity: usize,
    n: usize,
    frees: usize,
    rng: &mut impl Rng,
) -> Result<BitmapPool, PoolError> {
    check_request(n, capacity)?;
    let mut pool = BitmapPool::new(capacity);
    pool.set_allocated(0, capacity - n)?;
    pool.scatter_frees(frees, rng);
    Ok(pool)
}

/// One of the paper's three regimes of random maps (§4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regime {
    /// Random granules freed between one map and the next.
    pub frees_per_map: usize,
    /// Maps in the regime.
    pub maps: usize,
}

/// The paper's regimes (§4.2): 1 000 maps each, the generator called 500, 50 and 25 times per
/// map, each regime starting again from an all-allocated map (but the reserved run). The first
/// covers allocation levels down to nearly 0 %, the other two add dense coverage of highly
/// allocated maps (Fig. 6).
pub const PAPER_REGIMES: [Regime; 3] = [
    Regime {
        frees_per_map: 500,
        maps: 1000,
    },
    Regime {
        frees_per_map: 50,
        maps: 1000,
    },
    Regime {
        frees_per_map: 25,
        maps: 1000,
    },
];

/// The maps of one regime (§4.2, Fig. 6): starting from all allocated but the reserved run
/// `[capacity - n, capacity)`, each map is the previous one with `frees_per_map` more random
/// granules freed; yields `maps` maps (each a copy).
///
/// ```
/// use zcio_vmmr::pool::{FragmentedSeries, SplitMix64};
/// let mut rng = SplitMix64::new(7);
/// let levels: Vec<f64> = FragmentedSeries::new(4096, 16, 50, 10, &mut rng)?
///     .map(|m| m.allocation_level())
///     .collect();
/// assert_eq!(levels.len(), 10);
/// assert!(levels.windows(2).all(|w| w[1] <= w[0]));
/// # Ok::<(), zcio_vmmr::pool::PoolError>(())
/// ```
#[derive(Debug)]
pub struct FragmentedSeries<'r, R: Rng> {
    map: BitmapPool,
    frees_per_map: usize,
    left: usize,
    rng: &'r mut R,
}

impl<'r, R: Rng> FragmentedSeries<'r, R> {
    /// The series of `maps` maps for runs of `n` in a pool of `capacity`.
    ///
    /// Errors: as [`fragmented`].
    pub fn new(
        capacity: usize,
        n: usize,
        frees_per_map: usize,
        maps: usize,
        rng: &'r mut R,
    ) -> Result<Self, PoolError> {
        let map = fragmented(capacity, n, 0, rng)?;
        Ok(Self {
            map,
            frees_per_map,
            left: maps,
            rng,
        })
    }
}

impl<R: Rng> Iterator for FragmentedSeries<'_, R> {
    type Item = BitmapPool;

    fn next(&mut self) -> Option<BitmapPool> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        self.map.scatter_frees(self.frees_per_map, self.rng);
        Some(self.map.clone())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl<R: Rng> ExactSizeIterator for FragmentedSeries<'_, R> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_refuses_more_than_is_available_and_names_the_numbers() {
        assert_eq!(check_budget("buddy", 10, 100, 100), Ok(()));
        let e = check_budget("buddy", 10, 101, 100).unwrap_err();
        assert_eq!(
            e,
            PoolError::OutOfMemory {
                pool: "buddy",
                capacity: 10,
                bytes: 101,
                available: 100
            }
        );
        assert!(e.to_string().contains("101 bytes"), "{e}");
        assert!(available_memory() > 0);
    }
}
