//! What each page pool does beyond the trait's contract (the bitmap's first fit, the size
//! classes' choice of class, the buddy's alignment and coalescing) against a model (a
//! `Vec<bool>` of free granules), their error messages, and the paper's benchmark maps. The
//! contract every pool shares is checked in `pool_conformance.rs`.

use proptest::prelude::*;
use zcio_vmmr::pool::{
    BitmapPool, BuddyPool, Fibonacci, PagePool, PoolError, SIZE_CLASSES, SearchStart,
    SizeClassPool, SizeClassSplit, SplitMix64, fragmented, worst_case,
};

/// Which granules are free, as the pool should see them.
struct Model {
    free: Vec<bool>,
}

impl Model {
    fn new(capacity: usize) -> Self {
        Self {
            free: vec![true; capacity],
        }
    }

    fn from_pool(pool: &BitmapPool) -> Self {
        Self {
            free: (0..pool.capacity()).map(|g| pool.is_free(g)).collect(),
        }
    }

    /// Mark a run allocated; it must be inside the pool and free (no overlap).
    fn take(&mut self, first: usize, len: usize) {
        assert!(
            first + len <= self.free.len(),
            "[{first}, +{len}) past {}",
            self.free.len()
        );
        for g in first..first + len {
            assert!(
                self.free[g],
                "granule {g} handed out twice ([{first}, +{len}))"
            );
            self.free[g] = false;
        }
    }

    fn give(&mut self, first: usize, len: usize) {
        for g in first..first + len {
            assert!(!self.free[g]);
            self.free[g] = true;
        }
    }

    fn free_count(&self) -> usize {
        self.free.iter().filter(|&&f| f).count()
    }

    fn run_at(&self, s: usize, n: usize) -> bool {
        s + n <= self.free.len() && self.free[s..s + n].iter().all(|&f| f)
    }

    /// The first `s` in the order start*64, …, capacity-1, 0, …, start*64-1 with `[s, s+n)`
    /// free.
    fn first_fit(&self, n: usize, start_word: usize) -> Option<usize> {
        let cap = self.free.len();
        let from = (start_word * 64).min(cap);
        (from..cap).chain(0..from).find(|&s| self.run_at(s, n))
    }

    fn longest_run(&self) -> usize {
        let (mut best, mut run) = (0, 0);
        for &f in &self.free {
            run = if f { run + 1 } else { 0 };
            best = best.max(run);
        }
        best
    }

    fn transitions(&self) -> usize {
        self.free.windows(2).filter(|w| w[0] != w[1]).count()
    }

    /// Whether some block `[a, a + 2^k)`, `a` a multiple of `2^k`, is free.
    fn aligned_free(&self, k: u32) -> bool {
        let size = 1usize << k;
        (0..self.free.len())
            .step_by(size)
            .any(|a| self.run_at(a, size))
    }
}

#[derive(Debug, Clone)]
enum Op {
    Alloc(usize),
    /// Free the live allocation picked by this number.
    Free(usize),
}

fn ops(max_n: usize) -> impl Strategy<Value = Vec<Op>> {
    let size = prop_oneof![4 => 1..=8usize, 3 => 1..=80usize, 1 => 1..=max_n.max(1)];
    let op = prop_oneof![3 => size.prop_map(Op::Alloc), 2 => any::<usize>().prop_map(Op::Free)];
    prop::collection::vec(op, 1..160)
}

fn start() -> impl Strategy<Value = SearchStart> {
    prop_oneof![
        Just(SearchStart::Fixed),
        any::<usize>().prop_map(SearchStart::Word),
        any::<u64>().prop_map(|seed| SearchStart::Random { seed }),
        Just(SearchStart::Fibonacci),
    ]
}

/// A bitmap from alternating free/allocated runs of random lengths (long runs included).
fn bitmap() -> impl Strategy<Value = BitmapPool> {
    (
        1..1200usize,
        prop::collection::vec(1..150usize, 1..40),
        any::<bool>(),
    )
        .prop_map(|(capacity, runs, mut free)| {
            let mut pool = BitmapPool::new(capacity);
            let mut at = 0;
            for len in runs.into_iter().cycle() {
                if at >= capacity {
                    break;
                }
                let len = len.min(capacity - at);
                if !free {
                    pool.set_allocated(at, len).unwrap();
                }
                at += len;
                free = !free;
            }
            pool
        })
}

const CASES: u32 = 96;

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, ..ProptestConfig::default() })]

    /// Alloc/free sequences: no overlap, first fit from the start word, failure only when the
    /// model has no run, everything reusable.
    #[test]
    fn bitmap_against_model(capacity in 1..700usize, start in start(), ops in ops(700)) {
        let mut pool = BitmapPool::with_start(capacity, start);
        let mut model = Model::new(capacity);
        let mut live: Vec<(usize, usize)> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc(n) => match pool.alloc(n) {
                    Ok(first) => {
                        let s = pool.last_search();
                        prop_assert_eq!(Some(first), model.first_fit(n, s.start_word));
                        model.take(first, n);
                        live.push((first, n));
                    }
                    Err(PoolError::TooLarge { requested, largest }) => {
                        prop_assert!(requested > capacity);
                        prop_assert_eq!(largest, capacity);
                    }
                    Err(PoolError::Exhausted { requested, free, largest, .. }) => {
                        prop_assert_eq!(requested, n);
                        prop_assert_eq!(model.first_fit(n, 0), None);
                        prop_assert_eq!(free, model.free_count());
                        prop_assert_eq!(largest, model.longest_run());
                    }
                    Err(e) => prop_assert!(false, "unexpected {e}"),
                },
                Op::Free(pick) if !live.is_empty() => {
                    let (first, n) = live.swap_remove(pick % live.len());
                    pool.free(first, n).unwrap();
                    model.give(first, n);
                }
                Op::Free(_) => {}
            }
            prop_assert_eq!(pool.free_granules(), model.free_count());
        }
        for (first, n) in live {
            pool.free(first, n).unwrap();
        }
        prop_assert_eq!(pool.free_granules(), capacity);
        prop_assert_eq!(pool.alloc(capacity), Ok(0));
    }

    /// The search on arbitrary maps (runs longer than a word, partial last words) finds the
    /// model's first fit from every start word, and the map statistics agree with the model.
    #[test]
    fn bitmap_search_is_first_fit(
        pool in bitmap(),
        ns in prop::collection::vec(prop_oneof![1..=8usize, 1..200usize], 1..6),
    ) {
        let model = Model::from_pool(&pool);
        prop_assert_eq!(pool.free_granules(), model.free_count());
        prop_assert_eq!(pool.transitions(), model.transitions());
        prop_assert_eq!(pool.largest_free_run(), model.longest_run());
        let level = 1.0 - model.free_count() as f64 / pool.capacity() as f64;
        prop_assert!((pool.allocation_level() - level).abs() < 1e-12);
        for n in ns {
            for w in 0..pool.word_count() {
                let search = pool.find(n, w);
                prop_assert_eq!(search.first, model.first_fit(n, w), "n={} w={}", n, w);
                prop_assert_eq!(search.stats.start_word, w);
                prop_assert!(search.stats.words_visited <= 2 * pool.word_count());
            }
        }
    }

    /// Blocks never overlap; each comes from the smallest class that had a free block (then
    /// the overflow region, first fit); exhaustion only when the model agrees.
    #[test]
    fn size_classes_against_model(
        blocks in prop::array::uniform5(0..6usize),
        overflow in prop_oneof![Just(0usize), 1..600usize],
        ops in ops(600),
    ) {
        let split = SizeClassSplit { blocks, overflow };
        let mut pool = SizeClassPool::new(split).unwrap();
        let capacity = pool.capacity();
        prop_assert_eq!(pool.split(), split);
        let stats = pool.class_stats();
        let ostart = pool.overflow_start();
        prop_assert_eq!(ostart + overflow, capacity);
        let mut model = Model::new(capacity);
        let class_has_free = |model: &Model, c: usize| {
            let s = stats[c];
            (0..s.blocks).any(|b| model.run_at(s.start + b * s.block, s.block))
        };
        let overflow_fit = |model: &Model, n: usize| {
            (ostart..capacity).find(|&s| model.run_at(s, n))
        };
        let mut live: Vec<(usize, usize, usize)> = Vec::new();
        let mut wasted = 0;
        for op in ops {
            match op {
                Op::Alloc(n) => {
                    let smallest = SIZE_CLASSES.iter().position(|&s| s >= n);
                    match pool.alloc_block(n) {
                        Ok(b) => {
                            prop_assert!(b.granules >= n);
                            match b.class {
                                Some(c) => {
                                    let s = stats[c];
                                    prop_assert_eq!(b.granules, s.block);
                                    prop_assert_eq!((b.first - s.start) % s.block, 0);
                                    prop_assert!(smallest.is_some_and(|m| m <= c));
                                    for skipped in smallest.unwrap()..c {
                                        prop_assert!(!class_has_free(&model, skipped));
                                    }
                                }
                                None => {
                                    if let Some(m) = smallest {
                                        for c in m..5 {
                                            prop_assert!(!class_has_free(&model, c));
                                        }
                                    }
                                    prop_assert_eq!(Some(b.first), overflow_fit(&model, n));
                                }
                            }
                            model.take(b.first, b.granules);
                            wasted += b.granules - n;
                            live.push((b.first, n, b.granules));
                        }
                        Err(PoolError::TooLarge { largest, .. }) => {
                            prop_assert_eq!(largest, pool.largest_alloc());
                            prop_assert!(n > largest);
                        }
                        Err(PoolError::Exhausted { free, .. }) => {
                            prop_assert_eq!(free, model.free_count());
                            if let Some(m) = smallest {
                                for c in m..5 {
                                    prop_assert!(!class_has_free(&model, c));
                                }
                            }
                            prop_assert_eq!(overflow_fit(&model, n), None);
                        }
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                }
                Op::Free(pick) if !live.is_empty() => {
                    let (first, n, granules) = live.swap_remove(pick % live.len());
                    pool.free(first, n).unwrap();
                    model.give(first, granules);
                    wasted -= granules - n;
                }
                Op::Free(_) => {}
            }
            prop_assert_eq!(pool.free_granules(), model.free_count());
            prop_assert_eq!(pool.wasted_granules(), wasted);
        }
        for (first, n, _) in live {
            pool.free(first, n).unwrap();
        }
        prop_assert_eq!(pool.free_granules(), capacity);
        prop_assert_eq!(pool.wasted_granules(), 0);
        let largest = pool.largest_alloc();
        if largest > 0 {
            prop_assert!(pool.alloc(largest).is_ok());
        }
    }

    /// Blocks are aligned powers of two that never overlap; exhaustion exactly when no aligned
    /// block of the order is free in the model (so coalescing is complete); after freeing all,
    /// the free blocks are the capacity's decomposition again.
    #[test]
    fn buddy_against_model(capacity in 1..700usize, ops in ops(700)) {
        let mut pool = BuddyPool::new(capacity).unwrap();
        let initial = pool.free_blocks();
        let mut model = Model::new(capacity);
        let mut live: Vec<(usize, usize)> = Vec::new();
        let mut wasted = 0;
        for op in ops {
            match op {
                Op::Alloc(n) => {
                    let size = n.next_power_of_two();
                    match pool.alloc(n) {
                        Ok(first) => {
                            prop_assert_eq!(first % size, 0);
                            model.take(first, size);
                            wasted += size - n;
                            live.push((first, n));
                        }
                        Err(PoolError::TooLarge { largest, .. }) => {
                            prop_assert_eq!(largest, 1 << capacity.ilog2());
                            prop_assert!(n > largest);
                        }
                        Err(PoolError::Exhausted { free, largest, .. }) => {
                            prop_assert_eq!(free, model.free_count());
                            prop_assert!(largest < size);
                            prop_assert!(!model.aligned_free(size.ilog2()));
                        }
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                }
                Op::Free(pick) if !live.is_empty() => {
                    let (first, n) = live.swap_remove(pick % live.len());
                    pool.free(first, n).unwrap();
                    model.give(first, n.next_power_of_two());
                    wasted -= n.next_power_of_two() - n;
                }
                Op::Free(_) => {}
            }
            prop_assert_eq!(pool.free_granules(), model.free_count());
            prop_assert_eq!(pool.wasted_granules(), wasted);
        }
        for (first, n) in live {
            pool.free(first, n).unwrap();
        }
        prop_assert_eq!(pool.free_granules(), capacity);
        prop_assert_eq!(pool.free_blocks(), initial);
        let largest = pool.largest_alloc();
        prop_assert_eq!(pool.alloc(largest), Ok(0));
    }
}

#[test]
fn error_messages_name_the_problem() {
    let mut pool = BitmapPool::new(1024);
    pool.set_allocated(0, 1024).unwrap();
    pool.set_free(100, 3).unwrap();
    pool.set_free(500, 2).unwrap();
    assert_eq!(
        pool.alloc(17).unwrap_err().to_string(),
        "page pool exhausted: no run of 17 free granules (5 free of 1024, largest free run 3)"
    );
    assert_eq!(
        pool.free(100, 2).unwrap_err().to_string(),
        "double free: granule 100 is already free"
    );
    assert_eq!(
        pool.free(2000, 4).unwrap_err().to_string(),
        "granules [2000, +4) lie outside the pool of 1024"
    );
    assert_eq!(
        pool.alloc(0).unwrap_err().to_string(),
        "zero-length run: a run holds at least one granule"
    );
    assert_eq!(
        pool.alloc(1025).unwrap_err().to_string(),
        "request of 1025 granules exceeds the largest run this pool can hand out (1024 granules)"
    );
    let mut buddy = BuddyPool::new(64).unwrap();
    let a = buddy.alloc(4).unwrap();
    assert_eq!(
        buddy.free(a, 3).unwrap_err().to_string(),
        "granules [0, +3) are not an allocation of this pool (buddy takes back exactly the (first, n) of one alloc(n))"
    );
}

#[test]
fn bitmap_frees_any_allocated_run() {
    let mut pool = BitmapPool::new(200);
    assert_eq!(pool.alloc(150), Ok(0));
    // Parts of an allocation, across a word boundary.
    pool.free(60, 10).unwrap();
    pool.free(0, 1).unwrap();
    assert_eq!(pool.free_granules(), 61);
    assert_eq!(
        pool.free(55, 10),
        Err(PoolError::DoubleFree { granule: 60 })
    );
    assert_eq!(pool.free_granules(), 61);
    assert_eq!(pool.alloc(10), Ok(60));
    assert_eq!(pool.alloc(1), Ok(0));
}

#[test]
fn bitmap_wraps_to_word_zero() {
    let mut pool = BitmapPool::with_start(640, SearchStart::Word(5));
    pool.set_allocated(320, 320).unwrap();
    assert_eq!(pool.alloc(100), Ok(0));
    let s = pool.last_search();
    assert!(s.wrapped);
    assert_eq!(s.start_word, 5);
    // A run that starts before the start word and crosses it is found after the wrap.
    let mut pool = BitmapPool::with_start(640, SearchStart::Word(5));
    pool.set_allocated(0, 640).unwrap();
    pool.set_free(300, 30).unwrap();
    assert_eq!(pool.alloc(30), Ok(300));
    assert!(pool.last_search().wrapped);
    // Runs never wrap from the end to granule 0.
    let mut pool = BitmapPool::with_start(128, SearchStart::Word(1));
    pool.set_allocated(4, 120).unwrap();
    assert!(matches!(
        pool.alloc(8),
        Err(PoolError::Exhausted { largest: 4, .. })
    ));
}

#[test]
fn size_classes_round_up_and_fall_back() {
    let split = SizeClassSplit {
        blocks: [2, 1, 1, 1, 1],
        overflow: 0,
    };
    let mut pool = SizeClassPool::new(split).unwrap();
    assert_eq!(pool.capacity(), 2 + 4 + 16 + 64 + 256);
    // Layout: huge at 0, large at 256, medium at 320, small at 336, tiny at 340.
    let starts: Vec<usize> = pool.class_stats().iter().map(|c| c.start).collect();
    assert_eq!(starts, [340, 336, 320, 256, 0]);
    let b = pool.alloc_block(3).unwrap();
    assert_eq!((b.first, b.granules, b.class), (336, 4, Some(1)));
    // Small is empty: the next request of 3 falls back to medium.
    let c = pool.alloc_block(3).unwrap();
    assert_eq!((c.first, c.granules, c.class), (320, 16, Some(2)));
    assert_eq!(pool.wasted_granules(), 1 + 13);
    // Not what was allocated.
    assert!(matches!(pool.free(336, 4), Err(PoolError::NotARun { .. })));
    assert!(matches!(pool.free(321, 2), Err(PoolError::NotARun { .. })));
    assert_eq!(
        pool.free(340, 1),
        Err(PoolError::DoubleFree { granule: 340 })
    );
    pool.free(336, 3).unwrap();
    pool.free(320, 3).unwrap();
    assert_eq!(pool.wasted_granules(), 0);
    // Above the largest class, with no overflow region.
    assert_eq!(
        pool.alloc(257),
        Err(PoolError::TooLarge {
            requested: 257,
            largest: 256
        })
    );
    assert_eq!(pool.alloc(256), Ok(0));
    assert!(matches!(
        pool.alloc(100),
        Err(PoolError::Exhausted { largest: 64, .. })
    ));
}

#[test]
fn size_classes_overflow_region_is_exact() {
    let mut pool = SizeClassPool::new(SizeClassSplit {
        blocks: [0, 0, 0, 0, 1],
        overflow: 1000,
    })
    .unwrap();
    assert_eq!(pool.largest_alloc(), 1000);
    let a = pool.alloc_block(300).unwrap();
    assert_eq!((a.first, a.granules, a.class), (256, 300, None));
    // A small request fills the huge block first, then goes to the overflow region exactly.
    assert_eq!(pool.alloc_block(5).unwrap().class, Some(4));
    let b = pool.alloc_block(5).unwrap();
    assert_eq!((b.first, b.granules, b.class), (556, 5, None));
    assert!(matches!(
        pool.free(256, 299),
        Err(PoolError::NotARun { .. })
    ));
    assert!(matches!(pool.free(257, 5), Err(PoolError::NotARun { .. })));
    assert_eq!(
        pool.free(600, 5),
        Err(PoolError::DoubleFree { granule: 600 })
    );
    pool.free(256, 300).unwrap();
    pool.free(556, 5).unwrap();
    assert_eq!(pool.free_granules(), 1000);
}

#[test]
fn size_classes_default_split() {
    let pool = SizeClassPool::with_capacity(65536);
    assert_eq!(pool.capacity(), 65536);
    let split = pool.split();
    assert_eq!(split, SizeClassSplit::even(65536));
    assert_eq!(split.capacity(), Some(65536));
    for (c, stats) in pool.class_stats().iter().enumerate() {
        assert_eq!(stats.block, SIZE_CLASSES[c]);
        assert_eq!(stats.start % stats.block, 0, "{} aligned", stats.name);
        assert!(stats.blocks * stats.block <= 65536 / 6);
        assert!(stats.blocks * stats.block > 65536 / 6 - stats.block);
    }
    assert!(pool.overflow_capacity() >= 65536 / 6);
    assert_eq!(
        SizeClassPool::new(SizeClassSplit {
            blocks: [0, 0, 0, 0, usize::MAX],
            overflow: 0
        })
        .map(|_| ()),
        Err(PoolError::CapacityTooLarge {
            pool: "size-classes",
            capacity: usize::MAX,
            limit: usize::MAX
        })
    );
}

#[test]
fn a_pool_too_large_for_this_machine_is_refused_before_any_allocation() {
    // An overflow region of 2^61 granules: its bitmap alone (2^58 bytes) exceeds any memory.
    let overflow = 1usize << 61;
    match SizeClassPool::new(SizeClassSplit {
        blocks: [0; 5],
        overflow,
    }) {
        Err(PoolError::OutOfMemory {
            pool: "size-classes",
            capacity,
            bytes,
            available,
        }) => {
            assert_eq!(capacity, overflow);
            assert_eq!(bytes, overflow / 8);
            assert!(available < bytes);
        }
        other => panic!("expected OutOfMemory, got {:?}", other.map(|_| ())),
    }
}

#[test]
fn buddy_non_power_of_two() {
    let mut pool = BuddyPool::new(1000).unwrap();
    assert_eq!(pool.largest_alloc(), 512);
    let mut got: Vec<usize> = [512, 256, 128, 64, 32, 8]
        .iter()
        .map(|&n| pool.alloc(n).unwrap())
        .collect();
    got.sort_unstable();
    assert_eq!(got, [0, 512, 768, 896, 960, 992]);
    assert_eq!(pool.free_granules(), 0);
    assert!(matches!(
        pool.alloc(1),
        Err(PoolError::Exhausted {
            free: 0,
            largest: 0,
            ..
        })
    ));
    for (first, n) in [(960, 32), (992, 8), (0, 512)] {
        pool.free(first, n).unwrap();
    }
    // 960 (32) and 992 (8) are no buddies: no merge past the decomposition.
    assert_eq!(pool.largest_free_block(), 512);
    assert_eq!(pool.free_blocks()[5], 1);
    assert_eq!(pool.free_blocks()[3], 1);
}

#[test]
fn buddy_coalesces_and_rejects_strangers() {
    let mut pool = BuddyPool::new(64).unwrap();
    let a = pool.alloc(3).unwrap(); // 4 granules
    let b = pool.alloc(4).unwrap();
    let c = pool.alloc(1).unwrap();
    assert_eq!(pool.wasted_granules(), 1);
    // Inside an allocated block, or with another n: not an allocation.
    assert!(matches!(
        pool.free(a + 1, 1),
        Err(PoolError::NotARun { .. })
    ));
    assert!(matches!(pool.free(a, 4), Err(PoolError::NotARun { .. })));
    // Never allocated, inside a free block.
    assert_eq!(pool.free(40, 2), Err(PoolError::DoubleFree { granule: 40 }));
    pool.free(b, 4).unwrap();
    pool.free(c, 1).unwrap();
    pool.free(a, 3).unwrap();
    assert_eq!(pool.free_blocks(), vec![0, 0, 0, 0, 0, 0, 1]);
    assert_eq!(pool.alloc(64), Ok(0));
    assert_eq!(
        BuddyPool::new(usize::MAX).map(|_| ()),
        Err(PoolError::CapacityTooLarge {
            pool: "buddy",
            capacity: usize::MAX,
            limit: BuddyPool::MAX_CAPACITY
        })
    );
}

#[test]
fn worst_case_maps() {
    for cap in [65536usize, 1000, 129] {
        let one = worst_case(cap, 1).unwrap();
        assert_eq!(one.free_granules(), 1);
        assert!(one.is_free(cap - 1));
        assert_eq!(one.transitions(), 1);
        assert_eq!(one.find(1, 0).first, Some(cap - 1));
        assert_eq!(one.find(1, 0).stats.words_visited, cap.div_ceil(64));
        for n in [2usize, 3, 16, 64, 65, 300]
            .into_iter()
            .filter(|&n| n + 1 < cap)
        {
            let map = worst_case(cap, n).unwrap();
            let model = Model::from_pool(&map);
            assert!(model.run_at(cap - n, n));
            assert!(!model.free[cap - n - 1]);
            assert_eq!(model.longest_run(), n);
            // Alternating up to the run: granule 0 allocated, every other one free.
            let alt_end = cap - n - 1;
            assert!((0..alt_end).all(|g| model.free[g] == (g % 2 == 1)));
            assert_eq!(map.transitions(), model.transitions());
            assert!(map.transitions() >= cap - n - 2);
            let level = map.allocation_level();
            let expected = (alt_end.div_ceil(2) + 1) as f64 / cap as f64;
            assert!((level - expected).abs() < 1e-12, "{level} vs {expected}");
            // The run at the end is the only fit, from any start.
            for w in [0, map.word_count() / 2, map.word_count() - 1] {
                assert_eq!(map.find(n, w).first, Some(cap - n));
            }
        }
    }
    assert_eq!(worst_case(64, 0).map(|_| ()), Err(PoolError::ZeroLength));
    assert!(matches!(
        worst_case(64, 65),
        Err(PoolError::TooLarge { .. })
    ));
    assert_eq!(worst_case(5, 5).unwrap().free_granules(), 5);
}

#[test]
fn fragmented_maps() {
    let mut rng = SplitMix64::new(42);
    for (n, frees) in [(16usize, 0usize), (16, 25), (1, 500), (256, 5000)] {
        let map = fragmented(65536, n, frees, &mut rng).unwrap();
        let model = Model::from_pool(&map);
        assert!(model.run_at(65536 - n, n), "reserved run");
        let allocated = 65536 - model.free_count();
        assert!(allocated >= 65536 - n - frees && allocated <= 65536 - n);
        assert!((map.allocation_level() - allocated as f64 / 65536.0).abs() < 1e-12);
        assert_eq!(map.transitions(), model.transitions());
        // The search always finds a run: the reserved one at the latest.
        for w in [0, 1000, 1023] {
            let found = map.find(n, w).first.unwrap();
            assert_eq!(Some(found), model.first_fit(n, w));
        }
    }
    let mut fib = Fibonacci::new();
    let map = fragmented(65536, 16, 500, &mut fib).unwrap();
    assert!(map.allocation_level() > 0.99);
}
