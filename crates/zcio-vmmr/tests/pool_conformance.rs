//! Conformance: one generic suite run against every [`PagePool`], through the trait only.
//!
//! Each check is a generic function taking a constructor `make(capacity) -> P` (a pool of about
//! `capacity` granules; the pool's own [`capacity`](PagePool::capacity) is what counts) and
//! what the pool takes back besides whole allocations ([`Frees`]). The `conformance!` macro at
//! the end instantiates every check as a `#[test]` in one module per pool configuration, as
//! iceoryx2's conformance tests instantiate one generic suite per implementation.
//!
//! The contract, from the trait's documentation:
//!
//! - `alloc(n)` returns the first granule of `[first, first + n)` inside `0..capacity` that no
//!   other live allocation overlaps; the pool may set aside more than `n` granules for it
//!   (seen through [`free_granules`](PagePool::free_granules)), and giving it back returns
//!   exactly what was set aside.
//! - `alloc(0)` is [`PoolError::ZeroLength`], `n > largest_alloc()` is [`PoolError::TooLarge`],
//!   and no free run now is [`PoolError::Exhausted`], whose `largest` is the largest request
//!   that would succeed now; an empty pool serves every `n <= largest_alloc()`.
//! - `free` of a run outside the pool is [`PoolError::Foreign`], of zero granules
//!   [`PoolError::ZeroLength`], of a run holding a free granule [`PoolError::DoubleFree`] naming
//!   such a granule, and, for pools that take back only whole allocations, of anything else
//!   [`PoolError::NotARun`]. A refused free changes nothing.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use zcio_vmmr::pool::{
    BitmapPool, BuddyPool, PagePool, PoolError, SearchStart, SizeClassPool, SizeClassSplit,
};

/// What a pool takes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frees {
    /// Exactly the `(first, n)` of one `alloc(n)` ([`SizeClassPool`], [`BuddyPool`]).
    Exact,
    /// Any run of allocated granules, whole allocations or parts of them ([`BitmapPool`]).
    AnyAllocated,
}

/// Capacities the fixed checks build pools of: tiny, around a bitmap word, not powers of two.
const CAPACITIES: [usize; 10] = [1, 2, 5, 64, 65, 300, 1000, 1024, 4096, 6000];

/// Request sizes the fixed checks cycle through.
const SIZES: [usize; 9] = [1, 3, 8, 17, 64, 5, 300, 2, 1000];

/// Cases of the random sequences, per pool configuration.
const CASES: u32 = 48;

/// The caller's view of the pool: which granules it holds, and what each allocation set aside.
#[derive(Debug)]
struct Model {
    capacity: usize,
    largest_alloc: usize,
    /// Per granule: held by a live allocation's `[first, first + n)`.
    owned: Vec<bool>,
    /// Live allocations: `(first, n, granules set aside)`.
    live: Vec<(usize, usize, usize)>,
    /// Runs given back, most recent last, for stale frees.
    freed: Vec<(usize, usize)>,
}

impl Model {
    fn new(pool: &impl PagePool) -> Self {
        Self {
            capacity: pool.capacity(),
            largest_alloc: pool.largest_alloc(),
            owned: vec![false; pool.capacity()],
            live: Vec::new(),
            freed: Vec::new(),
        }
    }

    fn set_aside(&self) -> usize {
        self.live.iter().map(|&(_, _, d)| d).sum()
    }

    /// The first granule of `[first, first + n)` the caller does not hold, if any.
    fn first_unowned(&self, first: usize, n: usize) -> Option<usize> {
        (first..first + n).find(|&g| !self.owned[g])
    }

    fn is_live(&self, first: usize, n: usize) -> bool {
        self.live.iter().any(|&(f, m, _)| (f, m) == (first, n))
    }

    /// `alloc(n)` on `pool`, checked against the contract and recorded.
    fn alloc(&mut self, pool: &mut impl PagePool, n: usize) -> Result<(), TestCaseError> {
        let name = pool.name();
        let before = pool.free_granules();
        match pool.alloc(n) {
            Ok(first) => {
                prop_assert!(
                    n > 0 && n <= self.largest_alloc,
                    "{name}: alloc({n}) served"
                );
                prop_assert!(
                    first.checked_add(n).is_some_and(|end| end <= self.capacity),
                    "{name}: [{first}, +{n}) past the capacity {}",
                    self.capacity
                );
                prop_assert!(
                    (first..first + n).all(|g| !self.owned[g]),
                    "{name}: [{first}, +{n}) overlaps a live allocation"
                );
                let after = pool.free_granules();
                prop_assert!(after <= before, "{name}: alloc grew the free count");
                let d = before - after;
                prop_assert!(d >= n, "{name}: alloc({n}) set aside only {d} granules");
                self.owned[first..first + n].fill(true);
                self.live.push((first, n, d));
            }
            Err(PoolError::ZeroLength) => prop_assert_eq!(n, 0, "{}", name),
            Err(PoolError::TooLarge { requested, largest }) => {
                prop_assert_eq!(requested, n, "{}", name);
                prop_assert_eq!(largest, self.largest_alloc, "{}", name);
                prop_assert!(n > largest, "{name}: TooLarge for {n} <= {largest}");
            }
            Err(PoolError::Exhausted {
                requested,
                free,
                capacity,
                largest,
            }) => {
                prop_assert!(
                    n > 0 && n <= self.largest_alloc,
                    "{name}: Exhausted for {n}"
                );
                prop_assert!(!self.live.is_empty(), "{name}: an empty pool refused {n}");
                prop_assert_eq!(
                    (requested, free, capacity),
                    (n, before, self.capacity),
                    "{}",
                    name
                );
                prop_assert!(largest < n, "{name}: largest {largest} >= requested {n}");
                prop_assert!(largest <= free, "{name}: largest {largest} > free {free}");
                prop_assert_eq!(largest == 0, free == 0, "{}: largest {}", name, largest);
                prop_assert_eq!(pool.free_granules(), before, "{}: refused alloc", name);
                // `largest` is a request that succeeds now.
                if largest > 0 {
                    let probe = pool.alloc(largest);
                    prop_assert!(probe.is_ok(), "{name}: alloc(largest {largest}): {probe:?}");
                    pool.free(probe.unwrap_or(0), largest)
                        .map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?;
                    prop_assert_eq!(pool.free_granules(), before, "{}: probe", name);
                }
                // And nothing larger does.
                if largest + 1 < n {
                    let probe = pool.alloc(largest + 1);
                    prop_assert!(
                        matches!(probe, Err(PoolError::Exhausted { .. })),
                        "{name}: alloc(largest {largest} + 1): {probe:?}"
                    );
                }
            }
            Err(e) => prop_assert!(false, "{name}: alloc({n}): unexpected {e}"),
        }
        self.check(pool)
    }

    /// Give back live allocation `i` whole.
    fn free(&mut self, pool: &mut impl PagePool, i: usize) -> Result<(), TestCaseError> {
        let (first, n, d) = self.live.swap_remove(i);
        let before = pool.free_granules();
        let r = pool.free(first, n);
        prop_assert_eq!(r, Ok(()), "{}: free({}, {})", pool.name(), first, n);
        prop_assert_eq!(
            pool.free_granules(),
            before + d,
            "{}: free gave back other than it set aside",
            pool.name()
        );
        self.owned[first..first + n].fill(false);
        self.freed.push((first, n));
        self.check(pool)
    }

    /// Give back a run of held granules starting `skip` granules into live allocation `i`:
    /// a part of it, or reaching on into the allocations right after it
    /// ([`Frees::AnyAllocated`] pools only, whose allocations set aside exactly `n`).
    fn free_part(
        &mut self,
        pool: &mut impl PagePool,
        i: usize,
        skip: usize,
        len: usize,
    ) -> Result<(), TestCaseError> {
        let name = pool.name();
        let (first, n, _) = self.live[i];
        let start = first + skip % n;
        let held = (start..self.capacity)
            .take_while(|&g| self.owned[g])
            .count();
        let len = 1 + len % held;
        let end = start + len;
        let before = pool.free_granules();
        let r = pool.free(start, len);
        prop_assert_eq!(r, Ok(()), "{}: free held [{}, +{})", name, start, len);
        prop_assert_eq!(pool.free_granules(), before + len, "{}", name);
        self.owned[start..end].fill(false);
        self.freed.push((start, len));
        // Cut [start, end) out of the allocations it touches.
        let mut live = Vec::with_capacity(self.live.len() + 1);
        for &(f, m, d) in &self.live {
            if f + m <= start || f >= end {
                live.push((f, m, d));
                continue;
            }
            prop_assert_eq!(d, m, "{}: a pool taking back parts set aside more", name);
            if f < start {
                live.push((f, start - f, start - f));
            }
            if f + m > end {
                live.push((end, f + m - end, f + m - end));
            }
        }
        self.live = live;
        self.check(pool)
    }

    /// A free the pool must refuse: checked against the contract, and nothing may change.
    fn refused_free(
        &self,
        pool: &mut impl PagePool,
        frees: Frees,
        first: usize,
        n: usize,
    ) -> Result<(), TestCaseError> {
        let name = pool.name();
        let before = pool.free_granules();
        let outside = first.checked_add(n).is_none_or(|end| end > self.capacity);
        let r = pool.free(first, n);
        match r.clone() {
            Err(PoolError::ZeroLength) => prop_assert_eq!(n, 0, "{}", name),
            Err(PoolError::Foreign {
                first: f,
                n: m,
                capacity,
            }) => {
                prop_assert!(outside, "{name}: Foreign for [{first}, +{n}) inside");
                prop_assert_eq!((f, m, capacity), (first, n, self.capacity), "{}", name);
            }
            Err(PoolError::DoubleFree { granule }) => {
                prop_assert!(n > 0 && !outside, "{name}: DoubleFree for [{first}, +{n})");
                // The first granule of the run that is free: none before it is held.
                prop_assert_eq!(
                    Some(granule),
                    self.first_unowned(first, n),
                    "{}: DoubleFree names granule {}, not the first free one of [{}, +{})",
                    name,
                    granule,
                    first,
                    n
                );
            }
            Err(PoolError::NotARun {
                first: f,
                n: m,
                pool: p,
            }) => {
                prop_assert_eq!(frees, Frees::Exact, "{}: NotARun", name);
                prop_assert!(n > 0 && !outside, "{name}: NotARun for [{first}, +{n})");
                prop_assert!(!self.is_live(first, n), "{name}: a live allocation refused");
                prop_assert_eq!((f, m, p), (first, n, name), "{}", name);
            }
            other => prop_assert!(false, "{name}: free({first}, {n}) gave {other:?}"),
        }
        if n == 0 {
            prop_assert_eq!(r, Err(PoolError::ZeroLength), "{}", name);
        } else if outside {
            prop_assert!(matches!(r, Err(PoolError::Foreign { .. })), "{name}: {r:?}");
        } else if frees == Frees::AnyAllocated {
            let granule = self.first_unowned(first, n);
            prop_assert!(granule.is_some(), "{name}: held run refused");
            prop_assert_eq!(
                r,
                Err(PoolError::DoubleFree {
                    granule: granule.unwrap_or(0)
                })
            );
        }
        prop_assert_eq!(
            pool.free_granules(),
            before,
            "{}: a refused free changed it",
            name
        );
        Ok(())
    }

    /// What the pool reports agrees with the model.
    fn check(&self, pool: &impl PagePool) -> Result<(), TestCaseError> {
        let name = pool.name();
        prop_assert_eq!(pool.capacity(), self.capacity, "{}: capacity", name);
        prop_assert_eq!(pool.largest_alloc(), self.largest_alloc, "{}", name);
        prop_assert_eq!(
            pool.free_granules(),
            self.capacity - self.set_aside(),
            "{}: free count",
            name
        );
        Ok(())
    }

    /// Give everything back; the pool is whole again and serves its largest request.
    fn drain(&mut self, pool: &mut impl PagePool) -> Result<(), TestCaseError> {
        while !self.live.is_empty() {
            self.free(pool, self.live.len() / 2)?;
        }
        prop_assert_eq!(pool.free_granules(), self.capacity, "{}", pool.name());
        if self.largest_alloc > 0 {
            self.alloc(pool, self.largest_alloc)?;
            prop_assert_eq!(self.live.len(), 1, "{}: empty pool refused", pool.name());
            self.free(pool, 0)?;
        }
        Ok(())
    }
}

/// Panic with the message of a failed check (for the fixed checks).
fn ok(r: Result<(), TestCaseError>) {
    if let Err(e) = r {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------------------------

/// A pool of no granules hands out nothing and takes back nothing.
fn empty_pool_refuses_everything<P: PagePool>(make: impl Fn(usize) -> P, _frees: Frees) {
    let mut pool = make(0);
    let name = pool.name();
    assert_eq!(pool.capacity(), 0, "{name}");
    assert_eq!(pool.free_granules(), 0, "{name}");
    assert_eq!(pool.largest_alloc(), 0, "{name}");
    assert_eq!(
        pool.alloc(1),
        Err(PoolError::TooLarge {
            requested: 1,
            largest: 0
        }),
        "{name}"
    );
    assert_eq!(pool.alloc(0), Err(PoolError::ZeroLength), "{name}");
    assert_eq!(
        pool.free(0, 1),
        Err(PoolError::Foreign {
            first: 0,
            n: 1,
            capacity: 0
        }),
        "{name}"
    );
}

/// A new pool is all free, and its largest request is no larger than the pool.
fn fresh_pool_is_all_free<P: PagePool>(make: impl Fn(usize) -> P, _frees: Frees) {
    for cap in CAPACITIES {
        let pool = make(cap);
        let name = pool.name();
        assert!(!name.is_empty());
        assert!(pool.capacity() > 0, "{name} of {cap}");
        assert_eq!(pool.free_granules(), pool.capacity(), "{name} of {cap}");
        let largest = pool.largest_alloc();
        assert!(
            largest > 0 && largest <= pool.capacity(),
            "{name}: {largest}"
        );
    }
}

/// Allocations until exhaustion, of mixed sizes then single granules: every run inside the
/// pool, none overlapping, the free count exact; single granules take the pool to zero free.
fn allocates_disjoint_runs<P: PagePool>(make: impl Fn(usize) -> P, _frees: Frees) {
    for cap in CAPACITIES {
        let mut pool = make(cap);
        let mut model = Model::new(&pool);
        for n in SIZES.into_iter().chain([1]) {
            // Until refused: each success sets aside at least one granule.
            loop {
                let live = model.live.len();
                ok(model.alloc(&mut pool, n));
                if model.live.len() == live {
                    break;
                }
            }
        }
        assert_eq!(pool.free_granules(), 0, "{} of {cap}", pool.name());
        assert!(model.live.len() <= pool.capacity());
        ok(model.drain(&mut pool));
    }
}

/// Freeing makes room for the same request again, and a drained pool is whole.
fn free_and_realloc_round_trip<P: PagePool>(make: impl Fn(usize) -> P, _frees: Frees) {
    for cap in CAPACITIES {
        let mut pool = make(cap);
        let mut model = Model::new(&pool);
        for round in 0..3 {
            for n in SIZES {
                ok(model.alloc(&mut pool, n));
            }
            // Free every other one, then ask for each freed size again: it fits.
            let mut i = round % 2;
            while i < model.live.len() {
                let n = model.live[i].1;
                ok(model.free(&mut pool, i));
                let live = model.live.len();
                ok(model.alloc(&mut pool, n));
                assert_eq!(model.live.len(), live + 1, "{}: {n} again", pool.name());
                i += 2;
            }
            ok(model.drain(&mut pool));
            assert_eq!(pool.free_granules(), pool.capacity());
        }
    }
}

/// A full pool refuses with `Exhausted` (no panic), changes nothing, and serves again once
/// something is given back.
fn exhaustion_is_an_error_and_recoverable<P: PagePool>(make: impl Fn(usize) -> P, _frees: Frees) {
    for cap in CAPACITIES {
        let mut pool = make(cap);
        let mut model = Model::new(&pool);
        while pool.free_granules() > 0 {
            ok(model.alloc(&mut pool, 1));
        }
        let name = pool.name();
        let capacity = pool.capacity();
        let largest = pool.largest_alloc();
        for n in [1, 2, 64, largest].into_iter().filter(|&n| n <= largest) {
            assert_eq!(
                pool.alloc(n),
                Err(PoolError::Exhausted {
                    requested: n,
                    free: 0,
                    capacity,
                    largest: 0
                }),
                "{name}"
            );
        }
        let msg = pool.alloc(1).unwrap_err().to_string();
        assert!(
            msg.contains("exhausted") && msg.contains(&capacity.to_string()),
            "{msg}"
        );
        ok(model.check(&pool));
        // One granule back: one granule served, where it was given back.
        let (first, _, _) = model.live[model.live.len() / 2];
        ok(model.free(&mut pool, model.live.len() / 2));
        ok(model.alloc(&mut pool, 1));
        assert_eq!(model.live.last().map(|l| l.0), Some(first), "{name}");
        ok(model.drain(&mut pool));
    }
}

/// Requests of zero granules are `ZeroLength`, above the largest run `TooLarge`, whatever the
/// pool holds.
fn zero_and_too_large_are_refused<P: PagePool>(make: impl Fn(usize) -> P, _frees: Frees) {
    for cap in CAPACITIES {
        let mut pool = make(cap);
        let mut model = Model::new(&pool);
        assert_eq!(pool.alloc(0), Err(PoolError::ZeroLength), "{}", pool.name());
        ok(model.alloc(&mut pool, 0));
        let largest = pool.largest_alloc();
        for n in [largest + 1, largest * 2 + 7, usize::MAX] {
            ok(model.alloc(&mut pool, n));
            assert_eq!(
                pool.alloc(n),
                Err(PoolError::TooLarge {
                    requested: n,
                    largest
                })
            );
        }
        ok(model.alloc(&mut pool, 1));
        ok(model.alloc(&mut pool, largest + 1));
        assert!(model.live.len() == 1 && pool.free_granules() < pool.capacity());
        ok(model.drain(&mut pool));
    }
}

/// Frees of what is not allocated: zero length, outside the pool, double, never allocated,
/// shifted or resized allocations. Each refused with the documented error, nothing changed,
/// and the live allocations still free.
fn bad_frees_are_refused<P: PagePool>(make: impl Fn(usize) -> P, frees: Frees) {
    for cap in CAPACITIES.into_iter().filter(|&c| c >= 64) {
        let mut pool = make(cap);
        let mut model = Model::new(&pool);
        let capacity = pool.capacity();
        for n in [2, 3, 1] {
            ok(model.alloc(&mut pool, n));
        }
        assert_eq!(model.live.len(), 3, "{}", pool.name());
        let (a, (b, bn)) = (model.live[0].0, (model.live[1].0, model.live[1].1));
        ok(model.free(&mut pool, 1)); // b, 3 granules
        let mut bad = vec![
            (0, 0),
            (a, 0),
            (capacity, 0),
            (usize::MAX, 0),
            (capacity, 1),
            (capacity + 976, 4),
            (capacity - 1, 2),
            (0, capacity + 1),
            (usize::MAX, 2),
            (b, bn), // double free
            (b + bn - 1, 1),
        ];
        if frees == Frees::Exact {
            // Parts of an allocation, or more than it: not one allocation.
            bad.extend([(a, 1), (a + 1, 1), (a, 3)]);
        }
        for (first, n) in bad {
            ok(model.refused_free(&mut pool, frees, first, n));
        }
        assert_eq!(pool.free(b, 3), Err(PoolError::DoubleFree { granule: b }));
        // The messages name the run and the problem.
        let foreign = pool.free(capacity + 976, 4).unwrap_err().to_string();
        assert!(
            foreign.contains(&format!("[{}, +4)", capacity + 976)),
            "{foreign}"
        );
        assert!(foreign.contains(&capacity.to_string()), "{foreign}");
        let double = pool.free(b, 3).unwrap_err().to_string();
        assert!(double.contains("double free") && double.contains(&b.to_string()));
        let zero = pool.free(a, 0).unwrap_err().to_string();
        assert!(zero.contains("zero-length"), "{zero}");
        if frees == Frees::Exact {
            let msg = pool.free(a + 1, 1).unwrap_err().to_string();
            assert!(
                msg.contains("not an allocation") && msg.contains(pool.name()),
                "{msg}"
            );
        } else {
            // A part of an allocation is fine.
            ok(model.free_part(&mut pool, 0, 1, 0));
        }
        ok(model.drain(&mut pool));
    }
}

/// One step of a random sequence.
#[derive(Debug, Clone)]
enum Op {
    Alloc(usize),
    /// Give back the live allocation picked by this number.
    Free(usize),
    /// Give back held granules from inside a live allocation on (allocation, skip, length),
    /// where the pool allows it.
    FreePart(usize, usize, usize),
    /// A free the pool must refuse, of the kind and picks given.
    BadFree(u8, usize, usize),
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    let size = prop_oneof![4 => 1..=8usize, 3 => 0..=80usize, 1 => 0..=700usize];
    let op = prop_oneof![
        6 => size.prop_map(Op::Alloc),
        4 => any::<usize>().prop_map(Op::Free),
        1 => (any::<usize>(), any::<usize>(), any::<usize>())
            .prop_map(|(i, s, l)| Op::FreePart(i, s, l)),
        2 => (0..5u8, any::<usize>(), 0..40usize).prop_map(|(k, i, d)| Op::BadFree(k, i, d)),
    ];
    prop::collection::vec(op, 1..300)
}

/// The `(first, n)` of a bad free of kind `kind`, or `None` when the pick would be a valid
/// free for this pool (or there is nothing to pick from).
fn bad_free(
    model: &Model,
    frees: Frees,
    kind: u8,
    pick: usize,
    d: usize,
) -> Option<(usize, usize)> {
    let cap = model.capacity;
    let (first, n) = match kind {
        0 => (pick % (cap + 2), 0),
        1 => [
            (cap + pick % 5, 1 + d),
            (cap.saturating_sub(d), d + 1),
            (usize::MAX - d, 2),
        ][pick % 3],
        2 => *model
            .freed
            .get(model.freed.len().checked_sub(1 + pick % 4)?)?,
        3 => {
            let &(f, n, _) = model.live.get(pick % model.live.len().max(1))?;
            [
                (f + 1, n),
                (f, n + 1 + d),
                (f, n.saturating_sub(1).max(1)),
                (f + n, 1),
            ][d % 4]
        }
        // Anywhere, inside the pool or straddling its end.
        _ => (pick % (cap + cap / 2 + 1), 1 + d),
    };
    let inside = first.checked_add(n).is_some_and(|end| end <= cap);
    let valid = n > 0
        && inside
        && match frees {
            Frees::Exact => model.is_live(first, n),
            Frees::AnyAllocated => model.first_unowned(first, n).is_none(),
        };
    (!valid).then_some((first, n))
}

/// A long random sequence of allocations, frees, partial frees (where allowed) and refused
/// frees, checked step by step against the model.
fn random_ops_match_model<P: PagePool>(make: impl Fn(usize) -> P, frees: Frees) {
    let mut runner = TestRunner::new(Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&(1..700usize, ops()), |(cap, ops)| {
        let mut pool = make(cap);
        let mut model = Model::new(&pool);
        for op in ops {
            match op {
                Op::Alloc(n) => model.alloc(&mut pool, n)?,
                Op::Free(i) if !model.live.is_empty() => {
                    model.free(&mut pool, i % model.live.len())?;
                }
                Op::FreePart(i, skip, len)
                    if frees == Frees::AnyAllocated && !model.live.is_empty() =>
                {
                    model.free_part(&mut pool, i % model.live.len(), skip, len)?;
                }
                Op::BadFree(kind, pick, d) => {
                    if let Some((first, n)) = bad_free(&model, frees, kind, pick, d) {
                        model.refused_free(&mut pool, frees, first, n)?;
                    }
                }
                Op::Free(_) | Op::FreePart(..) => {}
            }
        }
        model.drain(&mut pool)
    });
    if let Err(e) = result {
        panic!("{}: {e}", make(1).name());
    }
}

// ---------------------------------------------------------------------------------------------
// The pools
// ---------------------------------------------------------------------------------------------

/// Every check as a `#[test]` in module `$pool`, for pools built by `$make` that take back
/// `$frees`.
macro_rules! conformance {
    ($($pool:ident: $frees:expr, $make:expr;)*) => {$(
        mod $pool {
            use super::*;
            conformance!(@tests $frees, $make;
                empty_pool_refuses_everything,
                fresh_pool_is_all_free,
                allocates_disjoint_runs,
                free_and_realloc_round_trip,
                exhaustion_is_an_error_and_recoverable,
                zero_and_too_large_are_refused,
                bad_frees_are_refused,
                random_ops_match_model,
            );
        }
    )*};
    (@tests $frees:expr, $make:expr; $($check:ident,)*) => {$(
        #[test]
        fn $check() {
            super::$check($make, $frees);
        }
    )*};
}

/// An even split with the overflow region's share given to single granules: classes only.
fn classes_only(capacity: usize) -> SizeClassPool {
    let mut split = SizeClassSplit::even(capacity);
    split.blocks[0] += split.overflow;
    split.overflow = 0;
    SizeClassPool::new(split).unwrap()
}

/// Huge blocks only, the rest an overflow region: every small request wastes most of a block.
fn huge_blocks(capacity: usize) -> SizeClassPool {
    SizeClassPool::new(SizeClassSplit {
        blocks: [0, 0, 0, 0, capacity / 256],
        overflow: capacity % 256,
    })
    .unwrap()
}

/// No classes at all: an overflow region that takes back only whole allocations.
fn overflow_only(capacity: usize) -> SizeClassPool {
    SizeClassPool::new(SizeClassSplit {
        blocks: [0; 5],
        overflow: capacity,
    })
    .unwrap()
}

conformance! {
    bitmap: Frees::AnyAllocated, BitmapPool::new;
    bitmap_word_start: Frees::AnyAllocated, |c| BitmapPool::with_start(c, SearchStart::Word(3));
    bitmap_random_start:
        Frees::AnyAllocated, |c| BitmapPool::with_start(c, SearchStart::Random { seed: 7 });
    bitmap_fibonacci_start:
        Frees::AnyAllocated, |c| BitmapPool::with_start(c, SearchStart::Fibonacci);
    size_classes: Frees::Exact, SizeClassPool::with_capacity;
    size_classes_without_overflow: Frees::Exact, classes_only;
    size_classes_huge_blocks: Frees::Exact, huge_blocks;
    size_classes_overflow_only: Frees::Exact, overflow_only;
    buddy: Frees::Exact, |c| BuddyPool::new(c).unwrap();
}
