//! Genie's move family with and without region caching (paper 000, §5: region hiding and
//! caching, I/O-deferred deallocation): the four move semantics end to end, once with the
//! regions circulating through the region caches (the sender allocates from its cache, the
//! receiver gives each region back to its cache when done, as the paper's experiments
//! recycled regions) and once without (each output region made anew, each input region
//! unmapped when done). Measurement, data and prose of this experiment live here.
//!
//! Also here: whether the machine could page out a page under input at all (Genie's
//! input-disabled pageout guards against that), read from `/proc/meminfo` in the same run.

use crate::lab::genie::measure::{
    Contender, GenieResults, Plan, Point, Progress, Thresholds, sweep,
};
use crate::report::doc::Block;
use crate::report::text::{h, p, size, table, us};
use crate::transfer::Res;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use zcio_genie::stream::ModuleKind;
use zcio_genie::{InputBuffering, Semantics};

/// The move family.
pub const MOVES: [Semantics; 4] = [
    Semantics::Move,
    Semantics::EmulatedMove,
    Semantics::WeakMove,
    Semantics::EmulatedWeakMove,
];

/// What the region experiment measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct Regions {
    /// The move family with regions recycled through the region caches.
    pub recycled: Vec<Point>,
    /// The same without: each region made anew and unmapped when done.
    pub fresh: Vec<Point>,
    /// Swap configured in this run (`SwapTotal` of `/proc/meminfo`, KiB), where readable.
    pub swap_total_kib: Option<u64>,
}

fn contenders() -> Vec<Contender> {
    MOVES
        .iter()
        .map(|s| (*s, InputBuffering::EarlyDemux, Thresholds::ZeroCopy))
        .collect()
}

/// The lengths: two of the plan's, 64 pages apart, so that region creation and first touch
/// (per page) show against the per-message costs.
pub fn lengths(plan: &Plan) -> Vec<usize> {
    let ps = zcio_vm::page_size();
    let want = [16 * ps, 1024 * ps];
    let mut v: Vec<usize> = want
        .into_iter()
        .filter(|x| plan.lengths.contains(x))
        .collect();
    if v.is_empty() {
        v.extend(plan.lengths.last());
    }
    v
}

/// Rounds of each half.
fn rounds(plan: &Plan) -> usize {
    plan.rounds.clamp(1, 3)
}

/// Progress units of [`measure`].
pub fn units(plan: &Plan) -> u64 {
    (2 * rounds(plan) * lengths(plan).len() * MOVES.len()) as u64
}

/// `SwapTotal` of `/proc/meminfo` in KiB.
fn swap_total_kib() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = m.lines().find(|l| l.starts_with("SwapTotal:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Both halves, into `g.regions`.
pub fn measure(plan: &Plan, g: &mut GenieResults, p: &dyn Progress) -> Res<()> {
    let (ls, r) = (lengths(plan), rounds(plan));
    let recycled = sweep(
        &contenders(),
        ModuleKind::Memnet,
        &ls,
        r,
        plan.count,
        &|_| {},
        p,
        "regions recycled",
    )?;
    let fresh = sweep(
        &contenders(),
        ModuleKind::Memnet,
        &ls,
        r,
        plan.count,
        &|a| a.no_recycle = true,
        p,
        "regions made anew",
    )?;
    g.regions = Some(Regions {
        recycled,
        fresh,
        swap_total_kib: swap_total_kib(),
    });
    Ok(())
}

fn at(pts: &[Point], s: Semantics, bytes: usize) -> Option<&Point> {
    pts.iter().find(|x| x.semantics == s && x.bytes == bytes)
}

/// Fresh over recycled latency, each semantics at each length: the lowest and the highest.
fn gain_range(r: &Regions) -> Option<(f64, f64)> {
    let v: Vec<f64> = r
        .recycled
        .iter()
        .filter_map(|x| Some(at(&r.fresh, x.semantics, x.bytes)?.latency_ns / x.latency_ns))
        .filter(|x| x.is_finite())
        .collect();
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(0.0, f64::max);
    (!v.is_empty()).then_some((lo, hi))
}

/// The finding that heads Genie's section, if the experiment ran.
pub fn finding(g: &GenieResults) -> Option<String> {
    let r = g.regions.as_ref()?;
    let (lo, hi) = gain_range(r)?;
    let bad = r
        .recycled
        .iter()
        .chain(&r.fresh)
        .filter(|x| !x.verified)
        .count();
    Some(format!(
        "Region caching (the move family's regions recycled through the region caches, as the paper's experiments did): with each region made anew and unmapped per message instead, the move family's latency is {lo:.2}–{hi:.2}× its latency recycled{}.",
        if bad == 0 {
            ", every message verified".to_string()
        } else {
            format!("; {bad} runs delivered wrong bytes")
        }
    ))
}

/// The section's blocks, if the experiment ran.
pub fn blocks(g: &GenieResults) -> Vec<Block> {
    let Some(r) = g.regions.as_ref() else {
        return Vec::new();
    };
    let mut b = vec![h(3, "The move family with and without region caching")];
    b.push(p(
        "The four move semantics end to end (memory network, early demultiplexing, VM paths from the first page), once with regions circulating through the region caches (the sender allocates its output region from its cache and gets it back at completion; the receiver gives each input region back to its cache when done) and once with each output region made anew and each input region unmapped when done. Latency: median over runs of each run's median; the path is what the library reported for the run's messages.",
    ));
    let mut rows = Vec::new();
    for x in &r.recycled {
        let Some(f) = at(&r.fresh, x.semantics, x.bytes) else {
            continue;
        };
        rows.push(vec![
            x.semantics.to_string(),
            size(x.bytes),
            format!(
                "{} ({}–{})",
                us(x.latency_ns),
                us(x.latency_spread_ns[0]),
                us(x.latency_spread_ns[1])
            ),
            format!(
                "{} ({}–{})",
                us(f.latency_ns),
                us(f.latency_spread_ns[0]),
                us(f.latency_spread_ns[1])
            ),
            format!("{:.2}×", f.latency_ns / x.latency_ns),
            x.path.clone(),
        ]);
    }
    b.push(table(
        "The move family, regions recycled and made anew",
        &[
            "semantics",
            "length",
            "recycled (µs)",
            "made anew (µs)",
            "anew / recycled",
            "path",
        ],
        rows,
    ));
    b.push(p(pageout_text(r.swap_total_kib)));
    b
}

/// What Genie's input-disabled pageout would guard against here, from this run's swap size.
fn pageout_text(swap_kib: Option<u64>) -> String {
    let genie = "Genie disables pageout of the pages an input is about to fill (input-disabled pageout), so that the pageout daemon does not write out a page the input overwrites.";
    match swap_kib {
        Some(0) => format!(
            "{genie} This run had no swap (SwapTotal 0 kB), so no anonymous page could be paged out: the optimization has nothing to save here, and zcio does not implement it. Its staging and region pages are anonymous memory."
        ),
        Some(k) => format!(
            "{genie} This run had {} of swap: zcio does not disable pageout, so a staging or region page idle under memory pressure may be swapped out; a page move (UFFDIO_MOVE) carries a swapped-out page's entry with it, and the page comes back at first touch: correct, but that input pays a swap-in.",
            size((k as usize) << 10)
        ),
        None => format!(
            "{genie} Whether this machine has swap could not be read (/proc/meminfo); zcio does not implement the optimization."
        ),
    }
}
