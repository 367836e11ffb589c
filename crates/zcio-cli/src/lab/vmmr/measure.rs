//! `zcio bench vmmr`: paper 002's Figures 4, 5 and 7–10 on this machine. A message held in
//! scattered (or adjacent) granules of 4 KiB or 2 MiB is made contiguous by moving its pages
//! (`zcio_vmmr::reassemble`, with the paper's bitmap searched minimally or at its worst, a
//! size-class bitmap and a buddy pool) or by copying it (the paper's best-case memcopy); the
//! random tests time the search on randomly fragmented maps. The measuring is
//! [`rig`](crate::lab::vmmr::rig); here are the arguments, the rows with medians and spreads, what is
//! derived from them (crossover sizes, speed-ups, per-granule costs, the random tests'
//! minimum, maximum and means at 40 % and 10 % allocation), the table and the JSON. The
//! messages of real producers (a file read with `O_DIRECT`, sockets) are
//! [`producers`](crate::lab::vmmr::producers).

use crate::lab::vmmr::rig::{
    self as bench, Caches, Case, Plan, Point, RandomSeries, eviction_bytes,
};
use crate::report::fit;
use crate::transfer::Res;
use std::collections::BTreeMap;
use zcio_vm::remap::{Calibration, Granule};
use zcio_vmmr::pool::Regime;
use zcio_vmmr::reassemble::CycleCalibration;

pub use super::section::*;

/// Arguments of `zcio bench vmmr`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct VmmrArgs {
    /// The paper's sweeps: about eighty 4 KiB sizes, 2 MiB messages to 64 MiB, 3 × 1 000
    /// random maps at about twenty sizes (minutes).
    #[arg(long)]
    pub full: bool,
    /// A few points of everything (a second or two).
    #[arg(long, hide = true, conflicts_with = "full")]
    pub smoke: bool,
    /// Message sizes with 4 KiB granules, in pages, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub sizes_4k: Vec<usize>,
    /// Message sizes with 2 MiB granules, in granules, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub sizes_2m: Vec<usize>,
    /// Message sizes of the random tests, in pages, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub random_sizes: Vec<usize>,
    /// The random tests' regimes as FREESxMAPS, comma-separated (the paper's:
    /// 500x1000,50x1000,25x1000).
    #[arg(long, value_delimiter = ',')]
    pub regimes: Vec<String>,
    /// Timed reassemblies per case and size (the paper: 32).
    #[arg(long)]
    pub iterations: Option<usize>,
    /// Timed reassemblies per case and size with cold caches (0: none).
    #[arg(long)]
    pub cold_iterations: Option<usize>,
    /// Timed reassemblies per random map at most.
    #[arg(long)]
    pub random_iterations: Option<usize>,
    /// What to run, comma-separated: 4k, 2m, cold, random, producers (all by default; the
    /// producers at the 4 KiB and 2 MiB sizes, even where those parts are off).
    #[arg(long, value_delimiter = ',')]
    pub parts: Vec<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Timed messages per real producer (a file read with O_DIRECT, sockets), policy and size
    /// (0: none).
    #[arg(long)]
    pub producer_iterations: Option<usize>,
    /// Testing: spoil every message of this case after it is reassembled (memcpy, no_search,
    /// minimal_search, ..., or a producer: file, socket), so that the run must fail.
    #[arg(long, hide = true)]
    pub spoil: Option<String>,
}

/// The parts of the bench.
const PARTS: [&str; 5] = ["4k", "2m", "cold", "random", "producers"];

fn parse_regime(s: &str) -> Res<Regime> {
    let bad = || format!("invalid argument `--regimes {s}`: expected FREESxMAPS, e.g. 500x1000");
    let (f, m) = s.split_once('x').ok_or_else(bad)?;
    Ok(Regime {
        frees_per_map: f.trim().parse().map_err(|_| bad())?,
        maps: m.trim().parse().map_err(|_| bad())?,
    })
}

/// The plan and the parts the arguments ask for.
pub fn plan_of(a: &VmmrArgs) -> Res<(Plan, Vec<String>)> {
    let mut plan = if a.smoke {
        Plan::smoke()
    } else if a.full {
        Plan::full()
    } else {
        Plan::quick()
    };
    if !a.sizes_4k.is_empty() {
        plan.sizes_4k = a.sizes_4k.clone();
    }
    if !a.sizes_2m.is_empty() {
        plan.sizes_2m = a.sizes_2m.clone();
    }
    if !a.random_sizes.is_empty() {
        plan.random_sizes = a.random_sizes.clone();
    }
    if !a.regimes.is_empty() {
        plan.regimes = a
            .regimes
            .iter()
            .map(|s| parse_regime(s))
            .collect::<Res<_>>()?;
    }
    if let Some(i) = a.iterations {
        plan.iterations = i;
    }
    if let Some(i) = a.cold_iterations {
        plan.cold_iterations = i;
    }
    if let Some(i) = a.random_iterations {
        plan.random_iterations = i;
    }
    if let Some(i) = a.producer_iterations {
        plan.producer_iterations = i;
    }
    if let Some(p) = a
        .spoil
        .as_ref()
        .filter(|p| crate::lab::vmmr::producers::PRODUCERS.contains(&p.as_str()))
    {
        plan.spoil_producer = Some(p.clone());
    } else if let Some(c) = &a.spoil {
        plan.spoil = Some(
            Case::ALL
                .into_iter()
                .find(|x| x.name() == c)
                .ok_or_else(|| format!("invalid argument `--spoil {c}`: no such case"))?,
        );
    }
    let parts: Vec<String> = if a.parts.is_empty() {
        PARTS.iter().map(|s| s.to_string()).collect()
    } else {
        a.parts.clone()
    };
    if let Some(p) = parts.iter().find(|p| !PARTS.contains(&p.as_str())) {
        return Err(format!(
            "invalid argument `--parts {p}`: no such part (known: {})",
            PARTS.join(", ")
        )
        .into());
    }
    let on = |p: &str| parts.iter().any(|x| x == p);
    // The producers' sizes: the plan's own unless sizes are given, else the sweeps'; kept when
    // the sweeps' parts are off.
    let [p4, p2] = plan
        .producer_sizes
        .take()
        .unwrap_or([plan.sizes_4k.clone(), plan.sizes_2m.clone()]);
    plan.producer_sizes = Some([
        if a.sizes_4k.is_empty() {
            p4
        } else {
            plan.sizes_4k.clone()
        },
        if a.sizes_2m.is_empty() {
            p2
        } else {
            plan.sizes_2m.clone()
        },
    ]);
    if !on("4k") {
        plan.sizes_4k.clear();
    }
    if !on("2m") {
        plan.sizes_2m.clear();
    }
    if !on("cold") {
        plan.cold_iterations = 0;
    }
    if !on("random") {
        plan.random_sizes.clear();
    }
    if !on("producers") {
        plan.producer_iterations = 0;
    }
    plan.check()
        .map_err(|e| format!("invalid argument: {e} (see --sizes-4k, --sizes-2m, --random-sizes, --regimes, --iterations)"))?;
    Ok((plan, parts))
}

/// Run the benchmark and print it.
pub fn run(a: VmmrArgs) -> Res<()> {
    let (plan, _) = plan_of(&a)?;
    let bar = crate::bench_bar(0);
    let section = measure(&plan, &bar)?;
    bar.finish_and_clear();
    if a.json {
        return crate::print_bench_json("vmmr", &section);
    }
    print(&section);
    Ok(())
}

fn stats(ns: &[f64]) -> (f64, [f64; 2]) {
    (
        fit::median(ns).unwrap_or(f64::NAN),
        [
            ns.iter().copied().fold(f64::INFINITY, f64::min),
            ns.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        ],
    )
}

/// The adaptive case's costs: the plan's own if it has them, else the calibration profile's,
/// else (a granule the profile lacks) measured now; and the whole remap cycle's, measured now.
fn calibrate(plan: &mut Plan) -> Vec<CalibrationRecord> {
    let mut source = vec!["plan"; plan.calibration.len()];
    if plan.calibration.is_empty() {
        let profile = zcio_genie::profile::Profile::current();
        for granule in [Granule::Page, Granule::Huge] {
            match profile.remap_for(granule) {
                Some(c) => {
                    plan.calibration.push(c.clone());
                    source.push("profile");
                }
                None => {
                    // Where it cannot be measured either, the adaptive case does not run.
                    if let Ok(c) = Calibration::measure(granule) {
                        plan.calibration.push(c);
                        source.push("measured");
                    }
                }
            }
        }
    }
    // The whole cycle, measured now beside each move-in calibration (a few milliseconds).
    if plan.cycle.is_empty() {
        plan.cycle = plan
            .calibration
            .iter()
            .filter_map(|c| {
                let granule = [Granule::Page, Granule::Huge]
                    .into_iter()
                    .find(|g| g.bytes() == c.granule)?;
                CycleCalibration::measure(c.clone(), granule).ok()
            })
            .collect();
    }
    let cycles = plan.cycle.clone();
    plan.calibration
        .iter()
        .zip(source)
        .map(|(c, source)| CalibrationRecord {
            cycle_call_ns: cycles
                .iter()
                .find(|x| x.move_in.granule == c.granule)
                .map(|x| x.cycle_call_ns),
            cycle_granule_ns: cycles
                .iter()
                .find(|x| x.move_in.granule == c.granule)
                .map(|x| x.cycle_granule_ns),
            granule: if c.granule == Granule::Huge.bytes() {
                "2m".into()
            } else {
                "4k".into()
            },
            move_call_ns: c.move_call_ns,
            move_granule_ns: c.move_granule_ns,
            copy_by_size: c.copy_by_size.clone(),
            source: source.into(),
        })
        .collect()
}

/// Run `plan` with `bar` for progress (its length is grown here): the section.
pub fn measure(plan: &Plan, bar: &indicatif::ProgressBar) -> Res<VmmrSection> {
    plan.check()?;
    let mut plan = plan.clone();
    let calibration = calibrate(&mut plan);
    let plan = &plan;
    bar.inc_length(plan.units());
    let mut progress = crate::progress(bar);
    let mut points: Vec<Point> = Vec::new();
    for granule in [Granule::Page, Granule::Huge] {
        for &layout in &plan.layouts {
            points.extend(bench::sweep(
                plan,
                granule,
                layout,
                Caches::Warm,
                &mut progress,
            )?);
        }
    }
    for &layout in &plan.layouts {
        points.extend(bench::sweep(
            plan,
            Granule::Page,
            layout,
            Caches::Cold,
            &mut progress,
        )?);
    }
    let mut series: Vec<RandomSeries> = Vec::new();
    if !plan.random_sizes.is_empty() {
        for &pool in &plan.random_pools {
            series.extend(bench::random(plan, pool, &mut progress)?);
        }
    }
    let producers = super::producers::measure(plan, &mut progress)?;
    let rows: Vec<Row> = points.iter().map(row).collect();
    let random = series.iter().map(random_row).collect();
    let derived = derive(&rows);
    Ok(VmmrSection {
        plan: PlanRecord {
            sizes_4k: plan.sizes_4k.clone(),
            sizes_2m: plan.sizes_2m.clone(),
            layouts: plan.layouts.iter().map(|l| l.name().into()).collect(),
            iterations: plan.iterations,
            cold_iterations: plan.cold_iterations,
            eviction_bytes: if plan.cold_iterations > 0 {
                eviction_bytes()
            } else {
                0
            },
            capacity_4k: plan.capacity_4k,
            capacity_2m: plan.capacity_2m,
            random_sizes: plan.random_sizes.clone(),
            regimes: plan
                .regimes
                .iter()
                .map(|r| RegimeRecord {
                    frees_per_map: r.frees_per_map,
                    maps: r.maps,
                })
                .collect(),
            random_pools: plan.random_pools.iter().map(|p| p.name().into()).collect(),
            random_iterations: plan.random_iterations,
            random_page_budget: plan.random_page_budget,
            seed: plan.seed,
            move_available: zcio_vm::VmRuntime::get().capabilities().swap,
            timer_overhead_ns: bench::timer_overhead_ns(),
            calibration,
        },
        rows,
        random,
        derived,
        producers,
    })
}

fn row(p: &Point) -> Row {
    let g = p.granule.bytes();
    let mut vmmr_ns = BTreeMap::new();
    let mut vmmr_spread_ns = BTreeMap::new();
    let (mut memcpy_ns, mut memcpy_spread_ns) = (f64::NAN, [f64::NAN; 2]);
    let mut iterations = 0;
    for s in &p.cases {
        let (m, sp) = stats(&s.ns);
        iterations = iterations.max(s.ns.len());
        if s.case == Case::Memcpy {
            (memcpy_ns, memcpy_spread_ns) = (m, sp);
        } else {
            vmmr_ns.insert(s.case.name().to_string(), m);
            vmmr_spread_ns.insert(s.case.name().to_string(), sp);
        }
    }
    let pool_ns = p
        .pool
        .iter()
        .map(|s| (s.case.name().to_string(), stats(&s.ns).0))
        .collect();
    let minimal = vmmr_ns
        .get(Case::MinimalSearch.name())
        .copied()
        .unwrap_or(f64::NAN);
    Row {
        granule: p.granule.name().into(),
        layout: p.layout.name().into(),
        caches: p.caches.name().into(),
        granules: p.granules,
        pages: p.granules * g / 4096,
        bytes: p.granules * g,
        iterations,
        memcpy_ns,
        memcpy_spread_ns,
        speedup: memcpy_ns / minimal,
        vmmr_ns,
        vmmr_spread_ns,
        pool_ns,
        move_calls: p.moved.calls,
        copied_bytes: p.copied,
        huge_pages: p.huge_pages,
        rebuilds: p.rebuilds,
        rebuild_reason: p.rebuild_reason.clone(),
        adaptive_path: p.adaptive.map(|x| x.name().to_string()),
        adaptive_remapped: p.adaptive_paths.0,
    }
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn random_row(s: &RandomSeries) -> RandomRow {
    let maps: Vec<RandomMapRow> = s
        .maps
        .iter()
        .map(|m| {
            let (median_ns, [lo, hi]) = stats(&m.ns);
            RandomMapRow {
                regime: m.regime,
                map: m.map,
                allocation_level: m.allocation_level,
                transitions: m.transitions,
                iterations: m.ns.len(),
                mean_ns: mean(&m.ns).unwrap_or(f64::NAN),
                median_ns,
                min_ns: lo,
                max_ns: hi,
                pool_ns: stats(&m.pool_ns).0,
                copied_bytes: m.copied,
                rebuilds: m.rebuilds,
                rebuild_reason: m.rebuild_reason.clone(),
            }
        })
        .collect();
    let at = |level: f64| {
        let v: Vec<f64> = maps
            .iter()
            .filter(|m| (m.allocation_level - level).abs() <= 0.01)
            .map(|m| m.median_ns)
            .collect();
        (mean(&v), v.len())
    };
    let (mean_at_40_ns, maps_at_40) = at(0.40);
    let (mean_at_10_ns, maps_at_10) = at(0.10);
    RandomRow {
        pool: s.pool.name().into(),
        pages: s.granules,
        block: s.block,
        min_ns: maps.iter().map(|m| m.min_ns).fold(f64::INFINITY, f64::min),
        max_ns: maps.iter().map(|m| m.max_ns).fold(0.0, f64::max),
        max_map_median_ns: maps.iter().map(|m| m.median_ns).fold(0.0, f64::max),
        mean_at_40_ns,
        maps_at_40,
        mean_at_10_ns,
        maps_at_10,
        maps,
    }
}

/// The series of `rows` (granule, layout, caches), in the order they first appear.
pub fn series_of(rows: &[Row]) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = Vec::new();
    for r in rows {
        let k = (r.granule.clone(), r.layout.clone(), r.caches.clone());
        if !out.contains(&k) {
            out.push(k);
        }
    }
    out
}

/// The sizes (granules) the paper's figures end at: 6 144 pages, 24 MiB.
pub fn paper_size(granule: &str) -> usize {
    if granule == "2m" { 12 } else { 6144 }
}

/// Crossovers, speed-ups and cost lines of `rows`.
pub fn derive(rows: &[Row]) -> Derived {
    let mut d = Derived::default();
    for (g, l, c) in series_of(rows) {
        let mut rs: Vec<&Row> = rows.iter().filter(|r| r.is(&g, &l, &c)).collect();
        rs.sort_by_key(|r| r.granules);
        let faster: Vec<bool> = rs
            .iter()
            .map(|r| {
                r.vmmr_ns
                    .get("minimal_search")
                    .is_some_and(|v| *v < r.memcpy_ns)
            })
            .collect();
        let from = (0..rs.len()).rev().take_while(|i| faster[*i]).last();
        d.adaptive.extend(adaptive_verdict(&g, &l, &c, &rs));
        d.crossovers.push(Crossover {
            granule: g.clone(),
            layout: l.clone(),
            caches: c.clone(),
            granules: from.map(|i| rs[i].granules),
            pages: from.map(|i| rs[i].pages),
            everywhere: from == Some(0),
        });
        d.speedups.extend(speedups(&g, &l, &c, &rs));
        d.costs.extend(cost_fits(&g, &l, &c, &rs));
    }
    d
}

/// How close the adaptive reassembler came to memcpy (and to the copying reassembler) over one
/// series, sorted by size.
fn adaptive_verdict(g: &str, l: &str, c: &str, rs: &[&Row]) -> Option<AdaptiveVerdict> {
    let adaptive: Vec<(&Row, f64)> = rs
        .iter()
        .filter_map(|r| Some((*r, r.vmmr_ns.get("adaptive")? / r.memcpy_ns)))
        .collect();
    let &(worst, ratio) = adaptive.iter().max_by(|a, b| a.1.total_cmp(&b.1))?;
    let remapped: Vec<&Row> = adaptive
        .iter()
        .map(|(r, _)| *r)
        .filter(|r| r.adaptive_path.as_deref() == Some("remap"))
        .collect();
    let over: Vec<usize> = adaptive
        .iter()
        .filter(|(_, x)| *x > 1.05)
        .map(|(r, _)| r.pages)
        .collect();
    let to_copy: Vec<(&Row, f64)> = adaptive
        .iter()
        .filter_map(|(r, _)| Some((*r, r.vmmr_ns.get("adaptive")? / r.vmmr_ns.get("copy")?)))
        .collect();
    let worst_to_copy = to_copy.iter().max_by(|a, b| a.1.total_cmp(&b.1));
    let from = (0..adaptive.len())
        .rev()
        .take_while(|i| adaptive[*i].1 <= 1.05)
        .last()
        .map(|i| adaptive[i].0.pages);
    Some(AdaptiveVerdict {
        worst_ratio_to_copy: worst_to_copy.map(|x| x.1),
        worst_to_copy_at_pages: worst_to_copy.map(|x| x.0.pages),
        over_5_percent_of_copy: to_copy
            .iter()
            .filter(|(_, x)| *x > 1.05)
            .map(|(r, _)| r.pages)
            .collect(),
        within_5_percent_from_pages: from,
        granule: g.to_string(),
        layout: l.to_string(),
        caches: c.to_string(),
        sizes: adaptive.len(),
        remapped: remapped.len(),
        remap_from_pages: remapped.first().map(|r| r.pages),
        worst_ratio: ratio,
        worst_at_pages: worst.pages,
        within_5_percent: over.is_empty(),
        over_5_percent: over,
    })
}

/// The speed-ups at the smallest size, the paper's size and the largest of one series.
fn speedups(g: &str, l: &str, c: &str, rs: &[&Row]) -> Vec<Speedup> {
    let mut out = Vec::new();
    let mut at: Vec<usize> = Vec::new();
    for n in [
        rs.first().map(|r| r.granules),
        rs.iter()
            .find(|r| r.granules == paper_size(g))
            .map(|r| r.granules),
        rs.last().map(|r| r.granules),
    ]
    .into_iter()
    .flatten()
    {
        if !at.contains(&n) {
            at.push(n);
        }
    }
    for n in at {
        let Some(r) = rs.iter().find(|r| r.granules == n) else {
            continue;
        };
        let Some(v) = r.vmmr_ns.get("minimal_search").copied() else {
            continue;
        };
        let bits = r.bytes as f64 * 8.0;
        out.push(Speedup {
            granule: g.to_string(),
            layout: l.to_string(),
            caches: c.to_string(),
            granules: r.granules,
            pages: r.pages,
            memcpy_ns: r.memcpy_ns,
            vmmr_ns: v,
            speedup: r.memcpy_ns / v,
            vmmr_gbits: bits / v,
            memcpy_gbits: bits / r.memcpy_ns,
        });
    }
    out
}

/// Each case's cost fitted per granule and per message over one series.
fn cost_fits(g: &str, l: &str, c: &str, rs: &[&Row]) -> Vec<CostFit> {
    let mut out = Vec::new();
    let mut cases: Vec<String> = vec!["memcpy".into()];
    for r in rs {
        for k in r.vmmr_ns.keys() {
            if !cases.contains(k) {
                cases.push(k.clone());
            }
        }
    }
    for case in cases {
        let pts: Vec<(f64, f64)> = rs
            .iter()
            .filter_map(|r| Some((r.granules as f64, r.case_ns(&case)?)))
            .filter(|(_, y)| y.is_finite() && *y > 0.0)
            .collect();
        if pts.len() < 2 {
            continue;
        }
        if let Ok(line) = fit::relative_least_squares(&pts) {
            out.push(CostFit {
                granule: g.to_string(),
                layout: l.to_string(),
                caches: c.to_string(),
                case,
                per_granule_ns: line.slope_ns_per_byte,
                per_message_ns: line.intercept_ns,
                r2: line.r2,
            });
        }
    }
    out
}

fn us(ns: f64) -> String {
    crate::report::text::us(ns)
}

/// The terminal summary of a run: the series, the random maps and what was derived from them.
fn print(s: &VmmrSection) {
    print_series(s);
    if !s.random.is_empty() {
        print_random_maps(s);
    }
    super::producers::print(&s.producers);
    print_derived(s);
}

/// One table per granule, layout and cache state: µs per reassembly of every case.
fn print_series(s: &VmmrSection) {
    let cases = [
        "no_search",
        "minimal_search",
        "worst_case_search",
        "size_class_worst_case",
        "buddy",
        "copy",
        "adaptive",
    ];
    for (g, l, c) in series_of(&s.rows) {
        println!("granule {g}, {l}, {c} caches: µs per reassembly (median)");
        print!("{:>8} {:>10} {:>10}", "pages", "memcpy", "calls");
        for k in cases {
            print!(" {:>13}", k.replace("_search", "").replace("_case", ""));
        }
        println!(" {:>6} {:>8}", "chose", "speedup");
        for r in s.rows.iter().filter(|r| r.is(&g, &l, &c)) {
            print!(
                "{:>8} {:>10} {:>10}",
                r.pages,
                us(r.memcpy_ns),
                r.move_calls
            );
            for k in cases {
                print!(
                    " {:>13}",
                    r.vmmr_ns.get(k).map_or("-".to_string(), |v| us(*v))
                );
            }
            println!(" {:>6} {:>7.2}×", r.adaptive_chose(), r.speedup);
        }
        println!();
    }
}

/// The random maps of every pool, per size.
fn print_random_maps(s: &VmmrSection) {
    println!("random maps: µs per reassembly (4 KiB pages, scattered)");
    println!(
        "{:<13} {:>6} {:>6} {:>10} {:>10} {:>10} {:>12} {:>12}",
        "pool", "pages", "maps", "min", "max", "max median", "mean at 40%", "mean at 10%"
    );
    for r in &s.random {
        let o =
            |v: Option<f64>, n: usize| v.map_or("-".to_string(), |v| format!("{} ({n})", us(v)));
        println!(
            "{:<13} {:>6} {:>6} {:>10} {:>10} {:>10} {:>12} {:>12}",
            r.pool,
            r.pages,
            r.maps.len(),
            us(r.min_ns),
            us(r.max_ns),
            us(r.max_map_median_ns),
            o(r.mean_at_40_ns, r.maps_at_40),
            o(r.mean_at_10_ns, r.maps_at_10)
        );
    }
    println!();
}

/// The crossovers, the adaptive policy's costs and verdicts, and the speed-ups.
fn print_derived(s: &VmmrSection) {
    for c in &s.derived.crossovers {
        println!(
            "crossover {} {} {}: {}",
            c.granule,
            c.layout,
            c.caches,
            match c.pages {
                Some(p) if c.everywhere => format!("VMMR faster at every size (from {p} pages)"),
                Some(p) => format!("VMMR faster from {p} pages on"),
                None => "VMMR slower at the largest size".into(),
            }
        );
    }
    for c in &s.plan.calibration {
        let g = if c.granule == "2m" { 2 << 20 } else { 4096 };
        println!(
            "adaptive {} chose by ({}): move {:.0} ns per call + {:.0} ns per granule{}; copy per granule {}",
            c.granule,
            c.source,
            c.move_call_ns,
            c.move_granule_ns,
            match (c.cycle_call_ns, c.cycle_granule_ns) {
                (Some(a), Some(b)) =>
                    format!(", whole cycle {a:.0} ns per run + {b:.0} ns per granule"),
                _ => String::new(),
            },
            c.copy_by_size
                .iter()
                .map(|(n, x)| format!("{:.0} ns at {}", x * g as f64, n / g))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    for a in &s.derived.adaptive {
        println!(
            "adaptive {} {} {}: moved pages at {} of {} sizes{}; at worst {:.3}× memcpy ({} page{}){}",
            a.granule,
            a.layout,
            a.caches,
            a.remapped,
            a.sizes,
            a.remap_from_pages
                .map_or(String::new(), |p| format!(" (from {p} pages)")),
            a.worst_ratio,
            a.worst_at_pages,
            if a.worst_at_pages == 1 { "" } else { "s" },
            if a.within_5_percent {
                ": within 5 % everywhere".to_string()
            } else {
                format!(": more than 5 % slower at {:?} pages", a.over_5_percent)
            }
        );
        if let (Some(x), Some(p)) = (a.worst_ratio_to_copy, a.worst_to_copy_at_pages) {
            println!(
                "    against the copying reassembler: at worst {x:.3}× ({p} page{}){}",
                if p == 1 { "" } else { "s" },
                if a.over_5_percent_of_copy.is_empty() {
                    ", within 5 % everywhere".to_string()
                } else {
                    format!(
                        ", more than 5 % slower at {:?} pages",
                        a.over_5_percent_of_copy
                    )
                }
            );
        }
    }
    for x in &s.derived.speedups {
        println!(
            "speed-up {} {} {} at {} page{}: memcpy {} µs, VMMR {} µs: {:.2}× ({:.1} Gbit/s)",
            x.granule,
            x.layout,
            x.caches,
            x.pages,
            if x.pages == 1 { "" } else { "s" },
            us(x.memcpy_ns),
            us(x.vmmr_ns),
            x.speedup,
            x.vmmr_gbits
        );
    }
}
