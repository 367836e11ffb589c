//! The generators behind the paper's benchmark maps (the Fibonacci sequence its random tests
//! draw from, SplitMix64, the fragmentation regimes) and the bitmap's seeded search starts;
//! and, run by hand, the searches timed on those maps.

use zcio_vmmr::pool::{
    BitmapPool, BuddyPool, Fibonacci, FragmentedSeries, PAPER_REGIMES, PagePool, Rng, SearchStart,
    SizeClassPool, SplitMix64, fragmented, worst_case,
};

#[test]
fn paper_regimes_cover_the_allocation_range() {
    assert_eq!(
        PAPER_REGIMES.map(|r| (r.frees_per_map, r.maps)),
        [(500, 1000), (50, 1000), (25, 1000)]
    );
    // A shortened first regime: each map frees more, down to a low allocation level.
    let mut rng = SplitMix64::new(3);
    let series = FragmentedSeries::new(65536, 16, 500, 300, &mut rng).unwrap();
    assert_eq!(series.len(), 300);
    let mut last = 1.0;
    let mut count = 0;
    for map in series {
        let level = map.allocation_level();
        assert!(level <= last);
        assert!(map.is_free(65535) && map.is_free(65520));
        last = level;
        count += 1;
    }
    assert_eq!(count, 300);
    // 150 000 draws over 65 536 granules leave about e^-2.29 ≈ 10 % allocated.
    assert!(last > 0.05 && last < 0.15, "{last}");
}

#[test]
fn fibonacci_reproduces_the_paper_sequence() {
    let mut f = Fibonacci::new();
    let first: Vec<u32> = (0..10).map(|_| f.next_u32()).collect();
    assert_eq!(first, [54, 71, 125, 196, 321, 517, 838, 1355, 2193, 3548]);
    // Against a u64 reference through many wraps of the modulus.
    let (mut x, mut prev) = (17u64, 37u64);
    let mut f = Fibonacci::new();
    for _ in 0..10_000 {
        let next = (x + prev) % 0x7FFF_FFFF;
        prev = x;
        x = next;
        assert_eq!(u64::from(f.next_u32()), next);
    }
    let mut f = Fibonacci::with_seeds(17, 37);
    assert_eq!(f.below(10), 4);
    assert_eq!(f.below(0), 0);
    assert_eq!(Fibonacci::default(), Fibonacci::new());
}

#[test]
fn splitmix_is_uniform_enough() {
    let mut rng = SplitMix64::new(0);
    let mut buckets = [0usize; 16];
    for _ in 0..16_000 {
        buckets[rng.below(16)] += 1;
    }
    assert!(
        buckets.iter().all(|&b| (800..1200).contains(&b)),
        "{buckets:?}"
    );
    assert_eq!(rng.below(0), 0);
}

#[test]
fn random_starts_are_seeded() {
    let run = |start| {
        let mut pool = BitmapPool::with_start(65536, start);
        (0..20)
            .map(|_| {
                pool.alloc(1).unwrap();
                pool.last_search().start_word
            })
            .collect::<Vec<_>>()
    };
    let a = run(SearchStart::Random { seed: 9 });
    assert_eq!(a, run(SearchStart::Random { seed: 9 }));
    assert_ne!(a, run(SearchStart::Random { seed: 10 }));
    assert!(a.iter().any(|&w| w != a[0]));
    let fib = run(SearchStart::Fibonacci);
    assert_eq!(&fib[..3], &[54, 71, 125]);
    assert_eq!(run(SearchStart::Word(1030))[0], 6);
}

/// Search times on the paper's maps (65 536 granules, 1 024 words). Not a test of speed:
/// run with `cargo test --release -p zcio-vmmr --test maps -- --ignored --nocapture`.
#[test]
#[ignore = "timing report, run by hand in release mode"]
fn search_timings() {
    use std::hint::black_box;
    use std::time::Instant;
    fn time(label: &str, pool: &BitmapPool, n: usize, start: usize) {
        let iters = 2000;
        let t = Instant::now();
        let mut words = 0;
        for _ in 0..iters {
            let s = pool.find(black_box(n), black_box(start));
            words = s.stats.words_visited;
            black_box(s.first);
        }
        let per = t.elapsed().as_nanos() as f64 / f64::from(iters);
        println!("{label:<32} n={n:<5} {per:>10.0} ns  ({words} words)");
    }
    let empty = BitmapPool::new(65536);
    for n in [1, 16, 256, 6144] {
        time("minimal search", &empty, n, 0);
    }
    for n in [1, 2, 16, 64, 256, 6144] {
        time("worst case", &worst_case(65536, n).unwrap(), n, 0);
    }
    let mut rng = SplitMix64::new(1);
    for frees in [5000, 30000, 60000] {
        let map = fragmented(65536, 16, frees, &mut rng).unwrap();
        let label = format!("random {:.0} % allocated", map.allocation_level() * 100.0);
        time(&label, &map, 16, 512);
    }
    let mut buddy = BuddyPool::new(65536).unwrap();
    let t = Instant::now();
    for _ in 0..100_000 {
        let a = buddy.alloc(black_box(16)).unwrap();
        buddy.free(a, 16).unwrap();
    }
    println!(
        "buddy alloc+free 16                {:>10.0} ns",
        t.elapsed().as_nanos() as f64 / 100_000.0
    );
    let mut classes = SizeClassPool::with_capacity(65536);
    let t = Instant::now();
    for _ in 0..100_000 {
        let a = classes.alloc(black_box(16)).unwrap();
        classes.free(a, 16).unwrap();
    }
    println!(
        "size-classes alloc+free 16         {:>10.0} ns",
        t.elapsed().as_nanos() as f64 / 100_000.0
    );
}
