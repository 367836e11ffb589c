//! The paper's free-page bitmap (§2.3): one bit per granule, word-at-a-time first fit.

use super::{
    Fibonacci, PagePool, PoolError, Rng, SearchStart, SplitMix64, check_give_back, check_range,
    check_request, exhausted,
};

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
    pub(super) words: Vec<u64>,
    capacity: usize,
    pub(super) free: usize,
    start: SearchStart,
    start_gen: StartGen,
    last: SearchStats,
}

zcio_vm::debug_summary!(BitmapPool, |s|
    capacity: s.capacity, free: s.free, start: s.start, last_search: s.last, ..);

/// The words covering `[first, first + n)`: each word's index, the granule its bit 63 stands
/// for, and the mask of the range's bits in it.
fn spans(first: usize, n: usize) -> impl Iterator<Item = (usize, usize, u64)> {
    let end = first + n;
    let mut g = first;
    std::iter::from_fn(move || {
        if g >= end {
            return None;
        }
        let w = g / 64;
        let base = w * 64;
        let hi = (end - base).min(64);
        let mask = span_mask(g - base, hi);
        g = base + hi;
        Some((w, base, mask))
    })
}

/// Bits of one word covering granules `[lo, hi)` of that word (`0 <= lo < hi <= 64`).
pub(super) fn span_mask(lo: usize, hi: usize) -> u64 {
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
        for (w, _, mask) in spans(first, n) {
            f(&mut self.words[w], mask);
        }
    }

    /// Allocated granules in `[first, first + n)` (range already checked).
    pub(super) fn allocated_in(&self, first: usize, n: usize) -> usize {
        spans(first, n)
            .map(|(w, _, mask)| (self.words[w] & mask).count_ones() as usize)
            .sum()
    }

    /// The first free granule in `[first, first + n)`, if any (range already checked).
    fn first_free_in(&self, first: usize, n: usize) -> Option<usize> {
        spans(first, n).find_map(|(w, base, mask)| {
            let free = !self.words[w] & mask;
            (free != 0).then(|| base + free.leading_zeros() as usize)
        })
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
        check_request(n, self.capacity)?;
        let start = self.start_gen.next_word(self.words.len());
        let search = self.find(n, start);
        self.last = search.stats;
        match search.first {
            Some(first) => {
                self.for_each_span(first, n, |w, m| *w |= m);
                self.free -= n;
                Ok(first)
            }
            None => Err(exhausted(self, n, self.largest_free_run())),
        }
    }

    /// Any run of allocated granules may be given back, whole allocations or parts of them.
    fn free(&mut self, first: usize, n: usize) -> Result<(), PoolError> {
        check_give_back(first, n, self.capacity)?;
        if let Some(granule) = self.first_free_in(first, n) {
            return Err(PoolError::DoubleFree { granule });
        }
        self.for_each_span(first, n, |w, m| *w &= !m);
        self.free += n;
        Ok(())
    }

    fn largest_alloc(&self) -> usize {
        self.capacity
    }

    counted_pool!("bitmap");
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
}
