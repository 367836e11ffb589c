//! The timing: a rig of pools per granule, the cases in turn, the evictor for cold caches,
//! the sweeps of Figures 4 and 5 and the random maps of Figures 6-9.

use super::pools::*;
use super::*;

pub(super) struct Rig {
    pub(super) granule: Granule,
    pub(super) r: Reassembler<BenchPool>,
    /// The copy case's reassembler.
    pub(super) copier: Reassembler<BenchPool>,
    /// The adaptive case's reassembler (an empty bitmap), where the plan has a calibration
    /// (choosing on the whole cycle where the plan has its costs: [`Plan::policy`]).
    pub(super) adaptive: Option<Reassembler<BenchPool>>,
    /// Testing: the case whose messages are spoiled (see [`Plan::spoil`]).
    pub(super) spoil: Option<Case>,
    /// Whether the kernel moves pages (without `UFFDIO_MOVE` every move is a copy, by design).
    pub(super) moves: bool,
    /// Testing: faults still to inject (see [`Plan::inject_faults`]), shared by the rigs of a
    /// series.
    pub(super) faults: Rc<Cell<usize>>,
}

impl Rig {
    /// A reassembler over `capacity` granules, its page tables made (one granule moved into
    /// every 512th granule and back), so that no case pays for them; and an adaptive one where
    /// the plan has a calibration for the granule.
    pub(super) fn new(
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
        let adaptive = match plan.policy(granule) {
            Some(policy) => Some(Reassembler::with_policy(
                BenchPool::Bitmap(BitmapPool::new(capacity)),
                granule,
                policy,
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

    /// [`Rig::new`] for one of the plan's series: its messages spoiled as the plan says, and
    /// `faults` the series' faults still to inject.
    pub(super) fn for_series(
        plan: &Plan,
        granule: Granule,
        capacity: usize,
        rng: &mut SplitMix64,
        faults: &Rc<Cell<usize>>,
    ) -> Result<Rig, BenchError> {
        let mut rig = Rig::new(plan, granule, capacity, rng)?;
        rig.spoil = plan.spoil;
        rig.faults = faults.clone();
        Ok(rig)
    }

    /// Reassemble `msg` with `pool` swapped in: the time (ns) and what moved. The message is
    /// checked and freed (its pages back in their slots, the pool as it was) before returning.
    pub(super) fn with_pool(
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
    pub(super) fn reassemble(
        &mut self,
        msg: &mut Msg,
        case: Case,
    ) -> Result<(f64, Moved, Path), BenchError> {
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
pub(super) struct CasePools {
    pub(super) known: BenchPool,
    pub(super) minimal: BenchPool,
    pub(super) worst: BenchPool,
    pub(super) classes: Option<BenchPool>,
    pub(super) buddy: BenchPool,
}

impl CasePools {
    pub(super) fn new(capacity: usize, n: usize) -> Result<CasePools, BenchError> {
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

    pub(super) fn get(&mut self, case: Case) -> Option<&mut BenchPool> {
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
pub(super) fn time_case(
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
pub(super) struct Evictor {
    pub(super) buf: Vec<u64>,
}

impl Evictor {
    pub(super) fn new() -> Evictor {
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
    pub(super) fn bytes(&self) -> usize {
        self.buf.len() * 8
    }

    pub(super) fn evict(&self) {
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
pub(super) fn time_alloc(pool: &mut BenchPool, n: usize) -> Result<f64, BenchError> {
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
    let series = Series {
        plan,
        granule,
        layout,
        caches,
        cases,
        iterations,
        evictor: (caches == Caches::Cold).then(Evictor::new),
        capacity: plan.capacity(granule),
    };
    let capacity = series.capacity;
    let mut rng = SplitMix64::new(plan.seed ^ granule.bytes() as u64 ^ layout as u64);
    let faults = Rc::new(Cell::new(plan.inject_faults));
    let mut rig = Rig::for_series(plan, granule, capacity, &mut rng, &faults)?;
    let mut out = Vec::new();
    for &n in sizes {
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
            match series.measure(&mut rig, &mut rng, n) {
                Ok(p) => break p,
                Err(e) if e.is_vm_fault() && rebuilds < MAX_REBUILDS => {
                    reason.get_or_insert_with(|| e.to_string());
                    rebuilds += 1;
                    rig = Rig::for_series(plan, granule, capacity, &mut rng, &faults)
                        .map_err(|e| e.at(at))?;
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

/// One series of a sweep: its granule, layout and cache state, the cases it times and how often.
struct Series<'a> {
    plan: &'a Plan,
    granule: Granule,
    layout: Layout,
    caches: Caches,
    cases: &'a [Case],
    iterations: usize,
    /// Evicts the caches before every timed reassembly (cold caches only).
    evictor: Option<Evictor>,
    /// Granules in each pool.
    capacity: usize,
}

impl Series<'_> {
    /// Every case at `n` granules: one untimed round, then the timed rounds, then (warm caches)
    /// each moving case's pool alone.
    fn measure(&self, rig: &mut Rig, rng: &mut SplitMix64, n: usize) -> Result<Point, BenchError> {
        let iterations = self.iterations;
        let mut msg = Msg::new(self.granule, n, self.layout, rng)?;
        msg.spoil = self.plan.spoil == Some(Case::Memcpy);
        let mut pools = CasePools::new(self.capacity, n)?;
        let cases: Vec<Case> = self
            .cases
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
                    match &self.evictor {
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
        let pool = if self.caches == Caches::Warm {
            time_pools(&mut pools, &cases, n, iterations)?
        } else {
            Vec::new()
        };
        Ok(Point {
            granule: self.granule,
            layout: self.layout,
            caches: self.caches,
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
    }
}

/// Each moving case's pool alone: `iterations` allocations of `n` granules.
fn time_pools(
    pools: &mut CasePools,
    cases: &[Case],
    n: usize,
    iterations: usize,
) -> Result<Vec<Samples>, BenchError> {
    let mut pool = Vec::new();
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
    Ok(pool)
}

/// Rounds of back-to-back runs a sweep divides each case's iterations into.
pub(super) const ROUNDS: usize = 4;

/// A map of blocks (true = allocated): its transitions between neighbours.
pub(super) fn block_transitions(allocated: &[bool]) -> usize {
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
    let mut rig = Rig::for_series(plan, granule, cap, &mut rng, &faults)?;
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
                            rig = Rig::for_series(plan, granule, cap, &mut rng, &faults)
                                .map_err(|e| e.at(at))?;
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
pub(super) enum MapSeries {
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
    pub(super) fn new(
        pool: RandomPool,
        capacity: usize,
        n: usize,
        block: usize,
        frees_per_map: usize,
    ) -> Result<MapSeries, BenchError> {
        let (bench_pool, firsts) = match pool {
            RandomPool::Bitmap => {
                return Ok(MapSeries::Bitmap {
                    map: zcio_vmmr::pool::fragmented(capacity, n, 0, &mut SplitMix64::new(0))?,
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
    pub(super) fn next(&mut self, rng: &mut SplitMix64) -> Result<(), BenchError> {
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
    pub(super) fn current(&self, rng: &mut SplitMix64) -> (BenchPool, f64, usize) {
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
