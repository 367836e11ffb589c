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

use std::collections::BTreeMap;
use std::fmt;

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
        /// for a bitmap, the largest free block for size classes and buddy.
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
// The free-page bitmap (§2.3)
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

/// The generator state behind a [`SearchStart`].
#[derive(Debug, Clone)]
enum StartGen {
    Fixed(usize),
    SplitMix(SplitMix64),
    Fibonacci(Fibonacci),
}

impl StartGen {
    fn new(start: SearchStart) -> Self {
        match start {
            SearchStart::Fixed => Self::Fixed(0),
            SearchStart::Word(w) => Self::Fixed(w),
            SearchStart::Random { seed } => Self::SplitMix(SplitMix64::new(seed)),
            SearchStart::Fibonacci => Self::Fibonacci(Fibonacci::new()),
        }
    }

    fn next_word(&mut self, words: usize) -> usize {
        if words == 0 {
            return 0;
        }
        match self {
            Self::Fixed(w) => *w % words,
            Self::SplitMix(g) => g.below(words),
            Self::Fibonacci(g) => g.below(words),
        }
    }
}

/// The work one bitmap search did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SearchStats {
    /// The word the search started at.
    pub start_word: usize,
    /// Bitmap words read (a word read again after the wrap counts again).
    pub words_visited: usize,
    /// Whether the search reached the end and went on from word 0.
    pub wrapped: bool,
}

/// The outcome of [`BitmapPool::find`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Search {
    /// The first granule of the run found, if any.
    pub first: Option<usize>,
    /// What the search cost.
    pub stats: SearchStats,
}

/// The paper's free-page bitmap (§2.3): one bit per granule, word-at-a-time first fit.
///
/// `alloc(n)` searches from the start word chosen by its [`SearchStart`] for the first run of
/// `n` zero bits (free granules) within a word or across words, wrapping to word 0 once; the
/// run found is the first in the order `start*64, start*64 + 1, …, capacity - 1, 0, 1, …,
/// start*64 - 1` of possible first granules. Any run of allocated granules may be freed (the
/// bitmap does not remember allocations).
///
/// The search skips full words (`== u64::MAX`), adds whole free words (`== 0`) to the current
/// run, takes the free bits at the start and end of a mixed word with `leading_zeros` /
/// `trailing_zeros`, and finds runs of up to 63 bits inside a word with O(log n) shift-and
/// steps, so its cost is one pass over the words it reads.
///
/// ```
/// use zcio_vmmr::pool::{BitmapPool, PagePool, SearchStart};
/// let mut pool = BitmapPool::with_start(256, SearchStart::Word(2));
/// assert_eq!(pool.alloc(4)?, 128); // starts at word 2
/// pool.set_allocated(128, 128)?; // words 2 and 3 full: wraps to word 0
/// assert_eq!(pool.alloc(4)?, 0);
/// assert!(pool.last_search().wrapped);
/// # Ok::<(), zcio_vmmr::pool::PoolError>(())
/// ```
#[derive(Clone)]
pub struct BitmapPool {
    /// 1 = allocated; bits of the last word past `capacity` are 1.
    words: Vec<u64>,
    capacity: usize,
    free: usize,
    start: SearchStart,
    start_gen: StartGen,
    last: SearchStats,
}

impl fmt::Debug for BitmapPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BitmapPool")
            .field("capacity", &self.capacity)
            .field("free", &self.free)
            .field("start", &self.start)
            .field("last_search", &self.last)
            .finish_non_exhaustive()
    }
}

/// Bits of one word covering granules `[lo, hi)` of that word (`0 <= lo < hi <= 64`).
fn span_mask(lo: usize, hi: usize) -> u64 {
    debug_assert!(lo < hi && hi <= 64);
    (u64::MAX >> lo) & (u64::MAX << (64 - hi))
}

/// Offset (0 = most significant bit) of the first run of `n` one bits in `y`, `1 <= n <= 64`.
fn ones_run_in_word(y: u64, n: usize) -> Option<usize> {
    debug_assert!((1..=64).contains(&n));
    // Invariant: bit p of z is set iff bits p, p-1, …, p-have+1 of y are all set.
    let mut z = y;
    let mut have = 1;
    while have < n && z != 0 {
        let s = have.min(n - have);
        z &= z << s;
        have += s;
    }
    (z != 0).then(|| z.leading_zeros() as usize)
}

/// Length of the longest run of one bits in `y`.
fn longest_ones(mut y: u64) -> usize {
    let mut len = 0;
    while y != 0 {
        y &= y << 1;
        len += 1;
    }
    len
}

impl BitmapPool {
    /// An empty (all free) pool of `capacity` granules searched from word 0.
    pub fn new(capacity: usize) -> Self {
        Self::with_start(capacity, SearchStart::Fixed)
    }

    /// An empty pool whose searches start as `start` says.
    pub fn with_start(capacity: usize, start: SearchStart) -> Self {
        let nwords = capacity.div_ceil(64);
        let mut words = vec![0u64; nwords];
        let tail = capacity % 64;
        if tail != 0 {
            words[nwords - 1] = !span_mask(0, tail);
        }
        Self {
            words,
            capacity,
            free: capacity,
            start,
            start_gen: StartGen::new(start),
            last: SearchStats::default(),
        }
    }

    /// How searches start.
    pub fn search_start(&self) -> SearchStart {
        self.start
    }

    /// Change how searches start (a random start restarts its generator from its seed).
    pub fn set_search_start(&mut self, start: SearchStart) {
        self.start = start;
        self.start_gen = StartGen::new(start);
    }

    /// Words in the bitmap (`capacity / 64` rounded up).
    pub fn word_count(&self) -> usize {
        self.words.len()
    }

    /// The bitmap words, 1 = allocated, granule `i` at bit `63 - i % 64` of word `i / 64`;
    /// bits past the capacity read as allocated.
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// Whether `granule` is free (`false` outside the pool).
    pub fn is_free(&self, granule: usize) -> bool {
        granule < self.capacity && self.words[granule / 64] & (1u64 << (63 - granule % 64)) == 0
    }

    /// The paper's allocation level `l` (§2.5): allocated granules / capacity (0 for an empty
    /// range).
    pub fn allocation_level(&self) -> f64 {
        if self.capacity == 0 {
            return 0.0;
        }
        (self.capacity - self.free) as f64 / self.capacity as f64
    }

    /// Bit transitions: positions `i` in `1..capacity` where granule `i` and granule `i - 1`
    /// differ (free/allocated). The x-axis of the paper's Fig. 7; at most `capacity - 1`
    /// (alternating bits), about `capacity / 2` for a random map at 50 %.
    pub fn transitions(&self) -> usize {
        let n = self.words.len();
        let mut count = 0usize;
        for (i, &x) in self.words.iter().enumerate() {
            let valid = if i + 1 == n && self.capacity % 64 != 0 {
                self.capacity % 64
            } else {
                64
            };
            // Bit b-1 of x ^ (x >> 1) compares bit b with bit b-1: granules j and j+1.
            if valid > 1 {
                let pairs = span_mask(1, valid);
                count += ((x ^ (x >> 1)) & pairs).count_ones() as usize;
            }
            if i + 1 < n {
                let last = x & 1;
                let next_first = self.words[i + 1] >> 63;
                count += (last ^ next_first) as usize;
            }
        }
        count
    }

    /// The longest run of free granules (O(words)).
    pub fn largest_free_run(&self) -> usize {
        let mut best = 0usize;
        let mut run = 0usize;
        for &x in &self.words {
            if x == 0 {
                run += 64;
                continue;
            }
            run += x.leading_zeros() as usize;
            best = best.max(run).max(longest_ones(!x));
            run = x.trailing_zeros() as usize;
        }
        best.max(run)
    }

    /// What the last [`alloc`](PagePool::alloc) search cost.
    pub fn last_search(&self) -> SearchStats {
        self.last
    }

    /// Apply `f(word, mask)` to each word covering `[first, first + n)` (range already
    /// checked, `n > 0`).
    fn for_each_span(&mut self, first: usize, n: usize, mut f: impl FnMut(&mut u64, u64)) {
        let end = first + n;
        let mut g = first;
        while g < end {
            let w = g / 64;
            let base = w * 64;
            let hi = (end - base).min(64);
            f(&mut self.words[w], span_mask(g - base, hi));
            g = base + hi;
        }
    }

    /// Allocated granules in `[first, first + n)` (range already checked).
    fn allocated_in(&self, first: usize, n: usize) -> usize {
        let end = first + n;
        let mut g = first;
        let mut count = 0;
        while g < end {
            let w = g / 64;
            let base = w * 64;
            let hi = (end - base).min(64);
            count += (self.words[w] & span_mask(g - base, hi)).count_ones() as usize;
            g = base + hi;
        }
        count
    }

    /// The first free granule in `[first, first + n)`, if any (range already checked).
    fn first_free_in(&self, first: usize, n: usize) -> Option<usize> {
        let end = first + n;
        let mut g = first;
        while g < end {
            let w = g / 64;
            let base = w * 64;
            let hi = (end - base).min(64);
            let free = !self.words[w] & span_mask(g - base, hi);
            if free != 0 {
                return Some(base + free.leading_zeros() as usize);
            }
            g = base + hi;
        }
        None
    }

    /// Mark `[first, first + n)` allocated, whatever it was (`n == 0` does nothing). For
    /// building benchmark maps; not an allocation the pool will ever hand out.
    pub fn set_allocated(&mut self, first: usize, n: usize) -> Result<(), PoolError> {
        check_range(first, n, self.capacity)?;
        if n == 0 {
            return Ok(());
        }
        let before = self.allocated_in(first, n);
        self.for_each_span(first, n, |w, m| *w |= m);
        self.free -= n - before;
        Ok(())
    }

    /// Mark `[first, first + n)` free, whatever it was (`n == 0` does nothing).
    pub fn set_free(&mut self, first: usize, n: usize) -> Result<(), PoolError> {
        check_range(first, n, self.capacity)?;
        if n == 0 {
            return Ok(());
        }
        let before = self.allocated_in(first, n);
        self.for_each_span(first, n, |w, m| *w &= !m);
        self.free += before;
        Ok(())
    }

    /// Mark `frees` granules drawn by `rng` free, already free or not (the paper's random
    /// deallocation, §4.2).
    pub fn scatter_frees(&mut self, frees: usize, rng: &mut impl Rng) {
        if self.capacity == 0 {
            return;
        }
        for _ in 0..frees {
            let g = rng.below(self.capacity);
            let bit = 1u64 << (63 - g % 64);
            let w = &mut self.words[g / 64];
            if *w & bit != 0 {
                *w &= !bit;
                self.free += 1;
            }
        }
    }

    /// Search for a run of `n` free granules from the most significant bit of `start_word`
    /// (modulo the word count), wrapping once; read only. `n == 0` or `n > capacity` finds
    /// nothing without reading a word.
    pub fn find(&self, n: usize, start_word: usize) -> Search {
        let nwords = self.words.len();
        let start_word = if nwords == 0 { 0 } else { start_word % nwords };
        let mut stats = SearchStats {
            start_word,
            ..SearchStats::default()
        };
        if n == 0 || n > self.capacity {
            return Search { first: None, stats };
        }
        let mut first = self.scan(n, start_word, usize::MAX, &mut stats.words_visited);
        if first.is_none() && start_word > 0 {
            stats.wrapped = true;
            first = self.scan(n, 0, start_word * 64, &mut stats.words_visited);
        }
        Search { first, stats }
    }

    /// First fit from word `from`: the smallest first granule `s >= from * 64`, `s < limit`,
    /// with `[s, s + n)` free. Words at or past `limit` are read only to extend a run that
    /// started before it.
    fn scan(&self, n: usize, from: usize, limit: usize, visited: &mut usize) -> Option<usize> {
        let mut run_start = 0usize;
        let mut run_len = 0usize;
        for (i, &x) in self.words.iter().enumerate().skip(from) {
            let base = i * 64;
            if base >= limit {
                // No new run may start here; only a carried one may finish.
                if run_len == 0 {
                    return None;
                }
                *visited += 1;
                let lz = x.leading_zeros() as usize;
                run_len += lz;
                if run_len >= n {
                    return Some(run_start);
                }
                if lz < 64 {
                    return None;
                }
                continue;
            }
            *visited += 1;
            if x == u64::MAX {
                run_len = 0;
                continue;
            }
            if x == 0 {
                if run_len == 0 {
                    run_start = base;
                }
                run_len += 64;
                if run_len >= n {
                    return Some(run_start);
                }
                continue;
            }
            let lz = x.leading_zeros() as usize;
            if run_len + lz >= n {
                return Some(if run_len == 0 { base } else { run_start });
            }
            // A run inside the word; too few free bits cannot hold one.
            if n < 64 && (x.count_zeros() as usize) >= n {
                if let Some(off) = ones_run_in_word(!x, n) {
                    return Some(base + off);
                }
            }
            let tz = x.trailing_zeros() as usize;
            run_len = tz;
            run_start = base + 64 - tz;
        }
        None
    }
}

impl PagePool for BitmapPool {
    fn alloc(&mut self, n: usize) -> Result<usize, PoolError> {
        if n == 0 {
            return Err(PoolError::ZeroLength);
        }
        if n > self.capacity {
            return Err(PoolError::TooLarge {
                requested: n,
                largest: self.capacity,
            });
        }
        let start = self.start_gen.next_word(self.words.len());
        let search = self.find(n, start);
        self.last = search.stats;
        match search.first {
            Some(first) => {
                self.for_each_span(first, n, |w, m| *w |= m);
                self.free -= n;
                Ok(first)
            }
            None => Err(PoolError::Exhausted {
                requested: n,
                free: self.free,
                capacity: self.capacity,
                largest: self.largest_free_run(),
            }),
        }
    }

    /// Any run of allocated granules may be given back, whole allocations or parts of them.
    fn free(&mut self, first: usize, n: usize) -> Result<(), PoolError> {
        if n == 0 {
            return Err(PoolError::ZeroLength);
        }
        check_range(first, n, self.capacity)?;
        if let Some(granule) = self.first_free_in(first, n) {
            return Err(PoolError::DoubleFree { granule });
        }
        self.for_each_span(first, n, |w, m| *w &= !m);
        self.free += n;
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn free_granules(&self) -> usize {
        self.free
    }

    fn largest_alloc(&self) -> usize {
        self.capacity
    }

    fn name(&self) -> &'static str {
        "bitmap"
    }
}

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
    reserve_check(capacity, n)?;
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

fn reserve_check(capacity: usize, n: usize) -> Result<(), PoolError> {
    if n == 0 {
        return Err(PoolError::ZeroLength);
    }
    if n > capacity {
        return Err(PoolError::TooLarge {
            requested: n,
            largest: capacity,
        });
    }
    Ok(())
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
    reserve_check(capacity, n)?;
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

// ---------------------------------------------------------------------------------------------
// Size classes (§4.3, §5)
// ---------------------------------------------------------------------------------------------

/// Block sizes of the size classes, in granules (§5: *tiny*, *small*, *medium*, *large*,
/// *huge*).
pub const SIZE_CLASSES: [usize; 5] = [1, 4, 16, 64, 256];

/// The paper's names of the size classes, in the order of [`SIZE_CLASSES`].
pub const SIZE_CLASS_NAMES: [&str; 5] = ["tiny", "small", "medium", "large", "huge"];

/// How a [`SizeClassPool`] divides its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeClassSplit {
    /// Blocks of each class, in the order of [`SIZE_CLASSES`].
    pub blocks: [usize; 5],
    /// Granules of the overflow region (a [`BitmapPool`] for requests above 256 granules and
    /// for requests no class can serve).
    pub overflow: usize,
}

impl SizeClassSplit {
    /// The default split of `capacity` granules: six equal shares, one per class (rounded down
    /// to whole blocks) and one for the overflow region, which also takes what rounding leaves.
    pub fn even(capacity: usize) -> Self {
        let share = capacity / 6;
        let blocks = SIZE_CLASSES.map(|size| share / size);
        let in_classes: usize = blocks.iter().zip(SIZE_CLASSES).map(|(b, s)| b * s).sum();
        Self {
            blocks,
            overflow: capacity - in_classes,
        }
    }

    /// Granules in all, or `None` if the sum overflows.
    pub fn capacity(&self) -> Option<usize> {
        self.blocks
            .iter()
            .zip(SIZE_CLASSES)
            .try_fold(self.overflow, |acc, (&b, s)| {
                acc.checked_add(b.checked_mul(s)?)
            })
    }
}

/// Where one size class lies and how full it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassStats {
    /// The paper's name of the class.
    pub name: &'static str,
    /// Granules per block.
    pub block: usize,
    /// First granule of the class's region.
    pub start: usize,
    /// Blocks in the class.
    pub blocks: usize,
    /// Blocks free.
    pub free_blocks: usize,
}

/// One allocation of a [`SizeClassPool`]: where it is and what it set aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// First granule.
    pub first: usize,
    /// Granules set aside (the class's block size, or the exact request in the overflow
    /// region); the request was for at most this many.
    pub granules: usize,
    /// The size class (index into [`SIZE_CLASSES`]), `None` for the overflow region.
    pub class: Option<usize>,
}

#[derive(Clone)]
struct Class {
    block: usize,
    start: usize,
    /// One bit per block.
    map: BitmapPool,
    /// `n - 1` of the request each allocated block serves.
    asked: Vec<u8>,
}

#[derive(Clone)]
struct Overflow {
    start: usize,
    map: BitmapPool,
    /// Live allocations: local first granule → n.
    live: BTreeMap<usize, usize>,
}

/// Bitmaps of pre-concatenated blocks (§4.3, §5): one bitmap per size class of 1, 4, 16, 64
/// and 256 granules, each bit a whole block, so a request needs a one-bit search.
///
/// `alloc(n)` takes one block from the smallest class whose block holds `n` (rounding `n` up:
/// a request of 17 takes a block of 64 and wastes 47 granules, counted by
/// [`wasted_granules`](Self::wasted_granules)); when that class has no free block it falls
/// back to the next larger class, and after the largest to the overflow region. Requests above
/// 256 granules go straight to the overflow region, a [`BitmapPool`] searched first fit for
/// exactly `n` granules (no rounding); with no overflow region they get
/// [`PoolError::TooLarge`] naming the largest class.
///
/// `free(first, n)` takes back exactly one allocation, with the `n` it was asked for:
/// anything else is [`PoolError::NotARun`] (or [`PoolError::DoubleFree`] when `first` lies in
/// a free block).
///
/// Layout: the classes' regions from the largest block to the smallest, so that every block
/// is aligned to its own size, then the overflow region:
///
/// ```text
/// [ huge ×256 | large ×64 | medium ×16 | small ×4 | tiny ×1 | overflow ]
/// 0                                                                capacity
/// ```
///
/// ```
/// use zcio_vmmr::pool::{PagePool, SizeClassPool, SizeClassSplit};
/// let mut pool = SizeClassPool::new(SizeClassSplit { blocks: [8, 8, 8, 8, 8], overflow: 1024 })?;
/// let b = pool.alloc_block(17)?;
/// assert_eq!((b.granules, b.class), (64, Some(3)));
/// assert_eq!(pool.wasted_granules(), 47);
/// let big = pool.alloc(300)?; // overflow region, exact
/// pool.free(b.first, 17)?;
/// pool.free(big, 300)?;
/// # Ok::<(), zcio_vmmr::pool::PoolError>(())
/// ```
#[derive(Clone)]
pub struct SizeClassPool {
    classes: [Class; 5],
    overflow: Overflow,
    capacity: usize,
    wasted: usize,
}

impl fmt::Debug for SizeClassPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SizeClassPool")
            .field("capacity", &self.capacity)
            .field("classes", &self.class_stats())
            .field("overflow", &self.overflow.map)
            .field("wasted", &self.wasted)
            .finish()
    }
}

impl SizeClassPool {
    /// A pool divided as `split` says.
    ///
    /// Errors: [`PoolError::CapacityTooLarge`] when the granules add up past `usize::MAX`.
    pub fn new(split: SizeClassSplit) -> Result<Self, PoolError> {
        let capacity = split.capacity().ok_or(PoolError::CapacityTooLarge {
            pool: "size-classes",
            capacity: usize::MAX,
            limit: usize::MAX,
        })?;
        Ok(Self::build(split, capacity))
    }

    /// A pool of `capacity` granules with the default split, [`SizeClassSplit::even`].
    pub fn with_capacity(capacity: usize) -> Self {
        // An even split adds up to its capacity.
        Self::build(SizeClassSplit::even(capacity), capacity)
    }

    /// The pool for `split`, whose granules add up to `capacity`.
    fn build(split: SizeClassSplit, capacity: usize) -> Self {
        let mut start = 0usize;
        let mut class = |c: usize| {
            let block = SIZE_CLASSES[c];
            let blocks = split.blocks[c];
            let class = Class {
                block,
                start,
                map: BitmapPool::new(blocks),
                asked: vec![0; blocks],
            };
            start += blocks * block;
            class
        };
        // Largest blocks first, so every block is aligned to its size.
        let [c4, c3, c2, c1, c0] = [4, 3, 2, 1, 0].map(&mut class);
        let overflow = Overflow {
            start,
            map: BitmapPool::new(split.overflow),
            live: BTreeMap::new(),
        };
        Self {
            classes: [c0, c1, c2, c3, c4],
            overflow,
            capacity,
            wasted: 0,
        }
    }

    /// The split the pool was built with.
    pub fn split(&self) -> SizeClassSplit {
        SizeClassSplit {
            blocks: self.classes.each_ref().map(|c| c.map.capacity()),
            overflow: self.overflow.map.capacity(),
        }
    }

    /// Where each class lies and how many of its blocks are free, smallest class first.
    pub fn class_stats(&self) -> [ClassStats; 5] {
        let mut i = 0;
        self.classes.each_ref().map(|c| {
            let s = ClassStats {
                name: SIZE_CLASS_NAMES[i],
                block: c.block,
                start: c.start,
                blocks: c.map.capacity(),
                free_blocks: c.map.free_granules(),
            };
            i += 1;
            s
        })
    }

    /// First granule of the overflow region.
    pub fn overflow_start(&self) -> usize {
        self.overflow.start
    }

    /// Granules of the overflow region.
    pub fn overflow_capacity(&self) -> usize {
        self.overflow.map.capacity()
    }

    /// Granules set aside by live allocations beyond what they asked for (rounding up to a
    /// block, or falling back to a larger class).
    pub fn wasted_granules(&self) -> usize {
        self.wasted
    }

    /// Like [`alloc`](PagePool::alloc), saying which block it took.
    pub fn alloc_block(&mut self, n: usize) -> Result<Block, PoolError> {
        if n == 0 {
            return Err(PoolError::ZeroLength);
        }
        let largest = self.largest_alloc();
        if n > largest {
            return Err(PoolError::TooLarge {
                requested: n,
                largest,
            });
        }
        if n <= SIZE_CLASSES[4] {
            let smallest = SIZE_CLASSES.iter().position(|&s| s >= n).unwrap_or(4);
            for c in smallest..SIZE_CLASSES.len() {
                let class = &mut self.classes[c];
                if let Ok(b) = class.map.alloc(1) {
                    class.asked[b] = (n - 1) as u8;
                    self.wasted += class.block - n;
                    return Ok(Block {
                        first: class.start + b * class.block,
                        granules: class.block,
                        class: Some(c),
                    });
                }
            }
        }
        if n <= self.overflow.map.capacity() {
            if let Ok(local) = self.overflow.map.alloc(n) {
                self.overflow.live.insert(local, n);
                return Ok(Block {
                    first: self.overflow.start + local,
                    granules: n,
                    class: None,
                });
            }
        }
        let class_largest = self
            .classes
            .iter()
            .filter(|c| c.map.free_granules() > 0)
            .map(|c| c.block)
            .max()
            .unwrap_or(0);
        Err(PoolError::Exhausted {
            requested: n,
            free: self.free_granules(),
            capacity: self.capacity,
            largest: class_largest.max(self.overflow.map.largest_free_run()),
        })
    }
}

impl PagePool for SizeClassPool {
    fn alloc(&mut self, n: usize) -> Result<usize, PoolError> {
        self.alloc_block(n).map(|b| b.first)
    }

    /// Takes back exactly one allocation: `first` as returned, `n` as asked.
    fn free(&mut self, first: usize, n: usize) -> Result<(), PoolError> {
        if n == 0 {
            return Err(PoolError::ZeroLength);
        }
        check_range(first, n, self.capacity)?;
        let not_a_run = PoolError::NotARun {
            first,
            n,
            pool: self.name(),
        };
        if first >= self.overflow.start {
            let local = first - self.overflow.start;
            return match self.overflow.live.get(&local) {
                Some(&asked) if asked == n => {
                    self.overflow.live.remove(&local);
                    self.overflow.map.free(local, n)
                }
                Some(_) => Err(not_a_run),
                None if self.overflow.map.is_free(local) => {
                    Err(PoolError::DoubleFree { granule: first })
                }
                None => Err(not_a_run),
            };
        }
        let Some(class) = self
            .classes
            .iter_mut()
            .find(|c| (c.start..c.start + c.map.capacity() * c.block).contains(&first))
        else {
            return Err(not_a_run);
        };
        let offset = first - class.start;
        let b = offset / class.block;
        if class.map.is_free(b) {
            return Err(PoolError::DoubleFree { granule: first });
        }
        if offset % class.block != 0 || usize::from(class.asked[b]) + 1 != n {
            return Err(not_a_run);
        }
        class.map.free(b, 1)?;
        self.wasted -= class.block - n;
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn free_granules(&self) -> usize {
        self.classes
            .iter()
            .map(|c| c.map.free_granules() * c.block)
            .sum::<usize>()
            + self.overflow.map.free_granules()
    }

    /// The largest block of a class that has blocks, or the overflow region's size if larger.
    fn largest_alloc(&self) -> usize {
        self.classes
            .iter()
            .filter(|c| c.map.capacity() > 0)
            .map(|c| c.block)
            .max()
            .unwrap_or(0)
            .max(self.overflow.map.capacity())
    }

    fn name(&self) -> &'static str {
        "size-classes"
    }
}

// ---------------------------------------------------------------------------------------------
// Buddy system (§4.1, §4.3)
// ---------------------------------------------------------------------------------------------

/// End of a free list.
const NIL: u32 = u32::MAX;
/// `state` of a granule that heads no block.
const NOT_HEAD: u8 = 0;
/// `state` flag: heads a free block (order in the low bits).
const FREE_HEAD: u8 = 0x40;
/// `state` flag: heads an allocated block (order in the low bits).
const ALLOC_HEAD: u8 = 0x80;
/// Mask of the order in `state`.
const ORDER_MASK: u8 = 0x3F;
/// Orders 0..=31 (capacity below 2^32).
const ORDERS: usize = 32;

/// A binary buddy allocator (the organization §4.1 and §4.3 recommend over the bitmap).
///
/// Blocks are `2^k` granules aligned to `2^k`. A capacity that is not a power of two is managed
/// as its maximal power-of-two blocks, largest first (1000 = 512 + 256 + 128 + 64 + 32 + 8, at
/// granules 0, 512, 768, 896, 960, 992); a block is never merged past them, so the largest
/// allocation is the largest of them ([`largest_alloc`](PagePool::largest_alloc)).
///
/// `alloc(n)` rounds `n` up to a power of two (a request of 17 takes 32 granules and wastes
/// 15, counted by [`wasted_granules`](Self::wasted_granules)), takes a free block of the
/// smallest order that has one and splits it down; `free` merges the block with its buddy as
/// long as the buddy is free. Both are O(log capacity): a free list per order (doubly linked
/// through per-granule arrays), a bit mask of the non-empty orders.
///
/// `free(first, n)` takes back exactly one allocation, with the `n` it was asked for:
/// anything else is [`PoolError::NotARun`] (or [`PoolError::DoubleFree`] when `first` lies in
/// a free block).
///
/// Memory: 9 bytes per granule (an order byte and two 32-bit links), so capacity is limited
/// to `u32::MAX - 1` granules.
#[derive(Clone)]
pub struct BuddyPool {
    capacity: usize,
    /// Per granule: `NOT_HEAD`, or `FREE_HEAD | order`, or `ALLOC_HEAD | order`.
    state: Vec<u8>,
    /// Free heads: next in the free list. Allocated heads: the `n` asked for.
    next: Vec<u32>,
    /// Free heads: previous in the free list.
    prev: Vec<u32>,
    /// Head of each order's free list.
    lists: [u32; ORDERS],
    /// Bit k set iff order k's free list is non-empty.
    nonempty: u32,
    /// Order of the largest top-level block.
    top_order: Option<u8>,
    free: usize,
    wasted: usize,
}

impl fmt::Debug for BuddyPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BuddyPool")
            .field("capacity", &self.capacity)
            .field("free", &self.free)
            .field("wasted", &self.wasted)
            .field("free_blocks", &self.free_blocks())
            .finish_non_exhaustive()
    }
}

/// The order of the smallest power of two `>= n` (`n >= 1`).
fn order_for(n: usize) -> usize {
    n.next_power_of_two().trailing_zeros() as usize
}

impl BuddyPool {
    /// The largest capacity a buddy pool supports.
    pub const MAX_CAPACITY: usize = (u32::MAX - 1) as usize;

    /// An empty pool of `capacity` granules.
    ///
    /// Errors: [`PoolError::CapacityTooLarge`] above [`Self::MAX_CAPACITY`].
    pub fn new(capacity: usize) -> Result<Self, PoolError> {
        if capacity > Self::MAX_CAPACITY {
            return Err(PoolError::CapacityTooLarge {
                pool: "buddy",
                capacity,
                limit: Self::MAX_CAPACITY,
            });
        }
        let mut pool = Self {
            capacity,
            state: vec![NOT_HEAD; capacity],
            next: vec![NIL; capacity],
            prev: vec![NIL; capacity],
            lists: [NIL; ORDERS],
            nonempty: 0,
            top_order: None,
            free: capacity,
            wasted: 0,
        };
        let mut at = 0usize;
        for k in (0..ORDERS).rev() {
            if capacity & (1 << k) != 0 {
                pool.top_order.get_or_insert(k as u8);
                pool.push(at, k);
                at += 1 << k;
            }
        }
        Ok(pool)
    }

    /// Granules set aside by live allocations beyond what they asked for (rounding up to a
    /// power of two).
    pub fn wasted_granules(&self) -> usize {
        self.wasted
    }

    /// Free blocks of each order (index k counts blocks of `2^k` granules); walks the lists.
    pub fn free_blocks(&self) -> Vec<usize> {
        let top = self.top_order.map_or(0, |k| k as usize + 1);
        (0..top)
            .map(|k| {
                let mut count = 0;
                let mut at = self.lists[k];
                while at != NIL {
                    count += 1;
                    at = self.next[at as usize];
                }
                count
            })
            .collect()
    }

    /// The largest free block, in granules (0 if none).
    pub fn largest_free_block(&self) -> usize {
        if self.nonempty == 0 {
            0
        } else {
            1 << (31 - self.nonempty.leading_zeros())
        }
    }

    fn push(&mut self, at: usize, k: usize) {
        let head = self.lists[k];
        self.state[at] = FREE_HEAD | k as u8;
        self.next[at] = head;
        self.prev[at] = NIL;
        if head != NIL {
            self.prev[head as usize] = at as u32;
        }
        self.lists[k] = at as u32;
        self.nonempty |= 1 << k;
    }

    fn unlink(&mut self, at: usize, k: usize) {
        let (p, n) = (self.prev[at], self.next[at]);
        if p == NIL {
            self.lists[k] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        }
        if self.lists[k] == NIL {
            self.nonempty &= !(1 << k);
        }
        self.state[at] = NOT_HEAD;
    }

    /// The head and state of the block holding `granule` (`granule < capacity`).
    fn block_of(&self, granule: usize) -> (usize, u8) {
        for k in 0..ORDERS {
            let head = granule & !((1usize << k) - 1);
            let s = self.state[head];
            if s != NOT_HEAD && usize::from(s & ORDER_MASK) == k {
                return (head, s);
            }
        }
        unreachable!("blocks cover the pool")
    }
}

impl PagePool for BuddyPool {
    fn alloc(&mut self, n: usize) -> Result<usize, PoolError> {
        if n == 0 {
            return Err(PoolError::ZeroLength);
        }
        let largest = self.largest_alloc();
        if n > largest {
            return Err(PoolError::TooLarge {
                requested: n,
                largest,
            });
        }
        let k = order_for(n);
        let candidates = self.nonempty & !((1u32 << k) - 1);
        if candidates == 0 {
            return Err(PoolError::Exhausted {
                requested: n,
                free: self.free,
                capacity: self.capacity,
                largest: self.largest_free_block(),
            });
        }
        let mut j = candidates.trailing_zeros() as usize;
        let at = self.lists[j] as usize;
        self.unlink(at, j);
        while j > k {
            j -= 1;
            self.push(at + (1 << j), j);
        }
        self.state[at] = ALLOC_HEAD | k as u8;
        self.next[at] = n as u32;
        self.free -= 1 << k;
        self.wasted += (1 << k) - n;
        Ok(at)
    }

    /// Takes back exactly one allocation: `first` as returned, `n` as asked.
    fn free(&mut self, first: usize, n: usize) -> Result<(), PoolError> {
        if n == 0 {
            return Err(PoolError::ZeroLength);
        }
        check_range(first, n, self.capacity)?;
        let s = self.state[first];
        if s & ALLOC_HEAD == 0 || self.next[first] as usize != n {
            let (_, holder) = self.block_of(first);
            return Err(if holder & FREE_HEAD != 0 {
                PoolError::DoubleFree { granule: first }
            } else {
                PoolError::NotARun {
                    first,
                    n,
                    pool: self.name(),
                }
            });
        }
        let mut k = usize::from(s & ORDER_MASK);
        self.free += 1 << k;
        self.wasted -= (1 << k) - n;
        self.state[first] = NOT_HEAD;
        let mut at = first;
        loop {
            let buddy = at ^ (1 << k);
            if buddy >= self.capacity || self.state[buddy] != FREE_HEAD | k as u8 {
                break;
            }
            self.unlink(buddy, k);
            at = at.min(buddy);
            k += 1;
        }
        self.push(at, k);
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn free_granules(&self) -> usize {
        self.free
    }

    /// The largest top-level block (the largest power of two `<= capacity`).
    fn largest_alloc(&self) -> usize {
        self.top_order.map_or(0, |k| 1 << k)
    }

    fn name(&self) -> &'static str {
        "buddy"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Naive run search on bits (true = free), for checking the word tricks.
    fn naive_run(y: u64, n: usize) -> Option<usize> {
        (0..=64 - n).find(|&off| (off..off + n).all(|i| y & (1 << (63 - i)) != 0))
    }

    #[test]
    fn ones_run_matches_naive() {
        let mut rng = SplitMix64::new(1);
        for _ in 0..2000 {
            // Sparse and dense words alike.
            let y = rng.next_u64() | rng.next_u64() | (rng.next_u64() & rng.next_u64());
            for n in 1..=64 {
                assert_eq!(ones_run_in_word(y, n), naive_run(y, n), "y={y:#x} n={n}");
            }
        }
        assert_eq!(ones_run_in_word(u64::MAX, 64), Some(0));
        assert_eq!(ones_run_in_word(0, 1), None);
    }

    #[test]
    fn longest_ones_counts() {
        assert_eq!(longest_ones(0), 0);
        assert_eq!(longest_ones(u64::MAX), 64);
        assert_eq!(longest_ones(0b1110_0110), 3);
    }

    #[test]
    fn span_masks() {
        assert_eq!(span_mask(0, 64), u64::MAX);
        assert_eq!(span_mask(0, 1), 1 << 63);
        assert_eq!(span_mask(63, 64), 1);
        assert_eq!(span_mask(4, 8), 0x0F00_0000_0000_0000);
    }

    #[test]
    fn padding_bits_are_allocated() {
        let pool = BitmapPool::new(70);
        assert_eq!(pool.words(), &[0, !span_mask(0, 6)]);
        assert_eq!(pool.free_granules(), 70);
        assert_eq!(pool.transitions(), 0);
        assert_eq!(pool.largest_free_run(), 70);
    }

    #[test]
    fn order_for_rounds_up() {
        assert_eq!(order_for(1), 0);
        assert_eq!(order_for(2), 1);
        assert_eq!(order_for(3), 2);
        assert_eq!(order_for(17), 5);
    }

    #[test]
    fn buddy_decomposes_capacity() {
        let pool = BuddyPool::new(1000).unwrap();
        let blocks = pool.free_blocks();
        assert_eq!(blocks, vec![0, 0, 0, 1, 0, 1, 1, 1, 1, 1]);
        for (at, k) in [(0, 9), (512, 8), (768, 7), (896, 6), (960, 5), (992, 3)] {
            assert_eq!(pool.state[at], FREE_HEAD | k);
        }
    }
}
