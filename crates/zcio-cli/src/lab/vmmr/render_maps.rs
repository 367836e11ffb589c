//! Paper 002's report, continued: the adaptive choice, the random maps (Figures 8-10), the
//! optimized pools, and this machine against the paper.

use super::render::*;
use crate::lab::vmmr::measure::{
    AdaptiveVerdict, RandomMapRow, RandomRow, Row, VmmrSection, paper_size,
};
use crate::report::doc::Block;
use crate::report::plot::{Chart, Scale, Series, Style};
use crate::report::text::{figure, h, p, size, table, us};

/// The adaptive reassembler (zcio's addition; not in the paper, whose
/// conclusion it acts on: remap only where it pays).
pub(super) fn adaptive(v: &VmmrSection) -> Vec<Block> {
    if v.derived.adaptive.is_empty() {
        return Vec::new();
    }
    let mut b = vec![h(3, "Adaptive: remap or copy, per message")];
    b.push(p(format!(
        "The reassembler with the adaptive policy predicts, per message, the cost of moving its granules (one call per run of adjacent granules) and of copying them, from costs measured on this machine and kept in the calibration profile, and takes the cheaper: {}. Copies go into a range of the reassembler's own whose pages stay, so that a copied message is a buffer the application owns until it frees it, like a remapped one. The copying reassembler (every message copied, with the same bookkeeping) is measured beside it: against memcpy it shows what owning the buffer costs, against the adaptive case what deciding and its mistakes cost.",
        calibration(v).join("; ")
    )));
    let mut text = Vec::new();
    let mut series = Vec::new();
    for a in &v.derived.adaptive {
        let rs = rows(v, &a.granule, &a.layout, &a.caches);
        let unit = if a.granule == "2m" { "2 MiB" } else { "4 KiB" };
        let style = if a.layout == "adjacent" {
            Style::Dashed
        } else {
            Style::Line
        };
        for case in ["copy", "minimal_search", "adaptive"] {
            let pts: Vec<(f64, f64)> = rs
                .iter()
                .filter_map(|r| Some((r.pages as f64, r.case_ns(case)? / r.memcpy_ns)))
                .collect();
            if !pts.is_empty() {
                series.push(Series {
                    name: format!("{}, {unit} {}", label(case), a.layout),
                    points: pts,
                    style,
                    band: None,
                    color: Some(color(case)),
                });
            }
        }
        text.push(adaptive_summary(a, &rs));
    }
    b.push(figure(
        "vmmr-adaptive",
        "The adaptive reassembler, the copying reassembler and minimal-search VMMR, each as a multiple of memcpy's time (below 1: faster than memcpy), against message size; 4 KiB and 2 MiB granules, scattered (solid) and adjacent (dashed).".into(),
        Chart {
            title: "Adaptive reassembly against memcpy".into(),
            x_label: "message size (4 KiB pages)".into(),
            y_label: "time / memcpy's time".into(),
            x_scale: Scale::Log,
            y_scale: Scale::Log,
            series,
        },
    ));
    text.push("zcio's target is that the adaptive path never be more than 5 % slower than memcpy at any size. Where it copies, it pays memcpy plus an owned buffer's bookkeeping, which is a fixed few tens of nanoseconds: above 5 % of a memcpy of a few 4 KiB pages, below it from a few dozen. Where the prediction is close (near the crossover), a wrong choice costs the difference between two nearly equal times.".into());
    b.push(p(text.join(" ")));
    for a in &v.derived.adaptive {
        b.push(adaptive_table(v, a));
    }
    b
}

/// The costs the adaptive policy predicts from, per granule, and where they came from.
fn calibration(v: &VmmrSection) -> Vec<String> {
    v
        .plan
        .calibration
        .iter()
        .map(|c| {
            let g = if c.granule == "2m" { 2 << 20 } else { 4096 };
            let pick = |n: usize| {
                c.copy_by_size
                    .iter()
                    .find(|(b, _)| *b == n * g)
                    .map(|(_, x)| format!("{:.0} ns at {}", x * g as f64, n))
            };
            let copies: Vec<String> = [1, 16, 256, 4096].into_iter().filter_map(pick).collect();
            format!(
                "{} granules: a move call {:.0} ns plus {:.0} ns a granule{}; copying a granule {} granules (from the {})",
                if c.granule == "2m" { "2 MiB" } else { "4 KiB" },
                c.move_call_ns,
                c.move_granule_ns,
                match (c.cycle_call_ns, c.cycle_granule_ns) {
                    (Some(a), Some(b)) => format!(
                        " to move in, and {a:.0} ns a run plus {b:.0} ns a granule over the whole cycle (in, and back out when freed), which it chose on"
                    ),
                    _ => String::new(),
                },
                copies.join(", "),
                if c.source == "profile" {
                    "calibration profile"
                } else {
                    "measurement taken now"
                }
            )
        })
        .collect()
}

/// What the adaptive reassembler chose for one granule and layout, and how close to memcpy (and
/// to the copying reassembler) it came.
fn adaptive_summary(a: &AdaptiveVerdict, rs: &[&Row]) -> String {
    let unit = if a.granule == "2m" { "2 MiB" } else { "4 KiB" };
    let mut t = format!(
        "{unit} granules {}: the adaptive reassembler moved pages at {} of {} sizes{}; at worst it took {} memcpy's time ({}), ",
        a.layout,
        a.remapped,
        a.sizes,
        a.remap_from_pages
            .map_or(String::new(), |p| format!(" (from {})", pg(p))),
        ratio(a.worst_ratio, 1.0),
        pg(a.worst_at_pages),
    );
    t.push_str(&if a.within_5_percent {
        "never more than 5 % above it".to_string()
    } else {
        format!(
            "more than 5 % above it at {} pages{}",
            list(&a.over_5_percent),
            a.within_5_percent_from_pages
                .map_or(String::new(), |p| format!(
                    " (within 5 % from {} on)",
                    pg(p)
                ))
        )
    });
    if let (Some(x), Some(at)) = (a.worst_ratio_to_copy, a.worst_to_copy_at_pages) {
        t.push_str(&format!(
            "; against the copying reassembler at worst {} ({}){}.",
            ratio(x, 1.0),
            pg(at),
            if a.over_5_percent_of_copy.is_empty() {
                ", never more than 5 % above it".to_string()
            } else {
                format!(
                    ", more than 5 % above it at {} pages",
                    list(&a.over_5_percent_of_copy)
                )
            }
        ));
    } else {
        t.push('.');
    }
    // What owning the buffer costs: the copying reassembler over memcpy at the smallest
    // size.
    if let Some(r) = rs.first().filter(|_| a.granule == "4k") {
        if let Some(c) = r.case_ns("copy").filter(|c| *c > r.memcpy_ns) {
            t.push_str(&format!(
                " At {} the copying reassembler takes {} µs against memcpy's {} µs: {:.0} ns for finding and marking a run and keeping the message's slots.",
                pg(r.pages),
                us(c),
                us(r.memcpy_ns),
                c - r.memcpy_ns
            ));
        }
    }
    t
}

/// Median times per reassembly for one granule, layout and cache state, with the adaptive
/// reassembler's choice.
fn adaptive_table(v: &VmmrSection, a: &AdaptiveVerdict) -> Block {
    let rs = rows(v, &a.granule, &a.layout, &a.caches);
    let body = rs
        .iter()
        .map(|r| {
            let mut row = vec![r.pages.to_string()];
            for c in ["memcpy", "copy", "minimal_search", "adaptive"] {
                row.push(r.case_ns(c).map_or("-".into(), us));
            }
            row.push(r.adaptive_chose());
            row.push(
                r.case_ns("adaptive")
                    .map_or("-".into(), |x| ratio(x, r.memcpy_ns)),
            );
            row.push(match (r.case_ns("adaptive"), r.case_ns("copy")) {
                (Some(x), Some(c)) => ratio(x, c),
                _ => "-".into(),
            });
            row
        })
        .collect();
    table(
        &format!(
            "{} granules {}, {} caches: median µs per reassembly",
            if a.granule == "2m" { "2 MiB" } else { "4 KiB" },
            a.layout,
            a.caches
        ),
        &[
            "pages",
            "memcpy µs",
            "copying reassembler µs",
            "VMMR, minimal search µs",
            "adaptive µs",
            "adaptive chose",
            "adaptive / memcpy",
            "adaptive / copying",
        ],
        body,
    )
}

/// At most `max` points, evenly taken.
pub(super) fn thin<T: Copy>(v: &[T], max: usize) -> Vec<T> {
    if v.len() <= max {
        return v.to_vec();
    }
    let step = v.len() as f64 / max as f64;
    (0..max).map(|i| v[(i as f64 * step) as usize]).collect()
}

pub(super) fn points(
    maps: &[RandomMapRow],
    x: &dyn Fn(&RandomMapRow) -> f64,
    y: &dyn Fn(&RandomMapRow) -> f64,
) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = maps.iter().map(|m| (x(m), y(m))).collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    thin(&pts, 600)
}

pub(super) fn scatter(name: String, pts: Vec<(f64, f64)>, color: usize) -> Series {
    Series {
        name,
        points: pts,
        style: Style::Points,
        band: None,
        color: Some(color),
    }
}

/// Figures 6, 7 and 8: the random maps of the bitmap pool.
pub(super) fn random_figures(v: &VmmrSection) -> Vec<Block> {
    let bitmap: Vec<&RandomRow> = v.random.iter().filter(|r| r.pool == "bitmap").collect();
    if bitmap.is_empty() {
        return Vec::new();
    }
    let mut b = vec![h(3, "Figures 6, 7 and 8: random maps")];
    b.push(figure6(v, &bitmap));
    let picks = figure7_sizes(&bitmap);
    b.extend(picks.iter().map(|r| figure7(r)));
    let sc = rows(v, "4k", "scattered", "warm");
    let mut text = vec![format!(
        "Each map's time is the median of its iterations (the paper averaged 32; a median keeps one interrupted iteration out); transitions count neighbouring bits that differ (about half the bits at 50 % allocation, as the paper notes). The paper's Figure 7: flat for one page; from 2 to 4 pages slower between 50 and 95 % allocation; from 6 pages on faster again above 85 %, as free runs coalesce; from 256 pages the halves fall in line."
    )];
    for r in &picks {
        let pool: Vec<f64> = r.maps.iter().map(|m| m.pool_ns).collect();
        let (lo, hi) = (
            pool.iter().copied().fold(f64::INFINITY, f64::min),
            pool.iter().copied().fold(0.0, f64::max),
        );
        let busiest = r.maps.iter().max_by(|a, b| a.pool_ns.total_cmp(&b.pool_ns));
        let med: Vec<f64> = r.maps.iter().map(|m| m.median_ns).collect();
        text.push(format!(
            "At {} the search alone takes {} to {} µs over the maps (slowest at {:.0} % allocation, {} transitions), the whole reassembly {} to {} µs.",
            pg(r.pages),
            us(lo),
            us(hi),
            busiest.map_or(0.0, |m| m.allocation_level * 100.0),
            busiest.map_or(0, |m| m.transitions),
            us(med.iter().copied().fold(f64::INFINITY, f64::min)),
            us(med.iter().copied().fold(0.0, f64::max)),
        ));
    }
    b.push(p(text.join(" ")));
    b.push(figure8(&sc, &bitmap));
    b.push(figure8_table(&sc, &bitmap));
    b.push(figure8_text(&sc, &bitmap));
    b
}

/// Figure 6: allocated granules per map, at 16 pages as in the paper (else the first size).
fn figure6(v: &VmmrSection, bitmap: &[&RandomRow]) -> Block {
    let six = bitmap
        .iter()
        .find(|r| r.pages == 16)
        .copied()
        .unwrap_or(bitmap[0]);
    let cap = v.plan.capacity_4k as f64;
    figure(
        "vmmr-fig6",
        format!(
            "Figure 6: allocated granules of each random map, the three regimes one after the other ({}-page test).",
            six.pages
        ),
        Chart {
            title: "VMMR, Figure 6: page pool configurations".into(),
            x_label: "map".into(),
            y_label: "allocated granules".into(),
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: vec![scatter(
                "allocated".into(),
                thin(
                    &six.maps
                        .iter()
                        .enumerate()
                        .map(|(i, m)| (i as f64, m.allocation_level * cap))
                        .collect::<Vec<_>>(),
                    600,
                ),
                0,
            )],
        },
    )
}

/// The sizes Figure 7 shows: 1, 16 and 256 pages where measured, and the largest.
fn figure7_sizes<'a>(bitmap: &[&'a RandomRow]) -> Vec<&'a RandomRow> {
    let mut picks: Vec<&RandomRow> = Vec::new();
    for want in [1, 16, 256] {
        if let Some(r) = bitmap.iter().find(|r| r.pages == want) {
            picks.push(r);
        }
    }
    if let Some(last) = bitmap.last() {
        if !picks.iter().any(|r| r.pages == last.pages) {
            picks.push(last);
        }
    }
    picks
}

/// Figure 7 at one size: per map, time against transitions.
fn figure7(r: &RandomRow) -> Block {
    figure(
        &format!("vmmr-fig7-{}", r.pages),
        format!(
            "Figure 7, {}: per random map, the reassembly (search from a random word plus the moves; the map's median) and the search alone (the pool's alloc), against the map's free/allocated transitions.",
            pg(r.pages)
        ),
        Chart {
            title: format!("VMMR, Figure 7: random maps, {}", pg(r.pages)),
            x_label: "bit transitions in the map".into(),
            y_label: "time (µs)".into(),
            x_scale: Scale::Linear,
            y_scale: Scale::Log,
            series: vec![
                scatter(
                    "reassembly".into(),
                    points(&r.maps, &|m| m.transitions as f64, &|m| m.median_ns / 1e3),
                    2,
                ),
                scatter(
                    "search alone".into(),
                    points(&r.maps, &|m| m.transitions as f64, &|m| m.pool_ns / 1e3),
                    9,
                ),
            ],
        },
    )
}

/// Figure 8: the random maps' minimum, maximum and means beside memcpy and the searches.
fn figure8(sc: &[&Row], bitmap: &[&RandomRow]) -> Block {
    let mut series: Vec<Series> = Vec::new();
    for c in ["memcpy", "minimal_search", "worst_case_search"] {
        let rs: Vec<&Row> = sc
            .iter()
            .filter(|r| bitmap.iter().any(|x| x.pages == r.pages))
            .copied()
            .collect();
        if let Some(s) = curve(&rs, c, label(c).into(), &pages, Style::Line) {
            series.push(s);
        }
    }
    let line = |name: &str, f: &dyn Fn(&RandomRow) -> Option<f64>, color: usize| Series {
        name: name.into(),
        points: bitmap
            .iter()
            .filter_map(|r| Some((r.pages as f64, f(r)? / 1e3)))
            .collect(),
        style: Style::Dashed,
        band: None,
        color: Some(color),
    };
    series.push(line("random, minimum", &|r| Some(r.min_ns), 9));
    series.push(line(
        "random, maximum (map median)",
        &|r| Some(r.max_map_median_ns),
        7,
    ));
    series.push(line("random, 40 % allocated", &|r| r.mean_at_40_ns, 8));
    series.push(line("random, 10 % allocated", &|r| r.mean_at_10_ns, 6));
    figure(
    "vmmr-fig8",
    "Figure 8: the random maps' minimum, maximum (the slowest map's median) and means at 40 % and 10 % (± 1 %) allocation, beside memcpy and the minimal and worst-case searches (4 KiB pages, scattered, warm caches).".into(),
    time_chart("VMMR, Figure 8: random maps against memcpy".into(), "message size (4 KiB pages)", series),
    )
}

/// Figure 8's numbers: the random maps per size beside memcpy and the worst-case search.
fn figure8_table(sc: &[&Row], bitmap: &[&RandomRow]) -> Block {
    let body: Vec<Vec<String>> = bitmap
        .iter()
        .map(|r| {
            let m = at(sc, r.pages);
            let o = |x: Option<f64>, n: usize| x.map_or("-".into(), |x| format!("{} ({n})", us(x)));
            vec![
                r.pages.to_string(),
                r.maps.len().to_string(),
                m.map_or("-".into(), |m| us(m.memcpy_ns)),
                us(r.min_ns),
                us(r.max_ns),
                us(r.max_map_median_ns),
                o(r.mean_at_40_ns, r.maps_at_40),
                o(r.mean_at_10_ns, r.maps_at_10),
                m.and_then(|m| m.vmmr_ns.get("worst_case_search"))
                    .map_or("-".into(), |x| us(*x)),
            ]
        })
        .collect();
    table(
        "Random maps, bitmap (µs per reassembly; maps in the bin in parentheses)",
        &[
            "pages",
            "maps",
            "memcpy",
            "minimum",
            "maximum (any iteration)",
            "maximum (map median)",
            "40 % allocated",
            "10 % allocated",
            "worst-case search",
        ],
        body,
    )
}

/// The paper's Figure 8 claims against this machine's random maps.
fn figure8_text(sc: &[&Row], bitmap: &[&RandomRow]) -> Block {
    let mut text = vec!["The paper (Figure 8): with the bitmap 40 % allocated or less VMMR beat memcpy at every size; the random maps' maximum stayed well below the worst case, but memcpy kept the edge over it from 2 to 32 pages.".to_string()];
    let cmp = |f: &dyn Fn(&RandomRow) -> Option<f64>| -> (usize, usize) {
        let mut n = 0;
        let mut wins = 0;
        for r in bitmap {
            if let (Some(x), Some(m)) = (f(r), at(sc, r.pages)) {
                n += 1;
                if x < m.memcpy_ns {
                    wins += 1;
                }
            }
        }
        (wins, n)
    };
    let (w40, n40) = cmp(&|r| r.mean_at_40_ns);
    let (wmax, nmax) = cmp(&|r| Some(r.max_map_median_ns));
    let below_worst = bitmap
        .iter()
        .filter(|r| {
            at(sc, r.pages)
                .and_then(|m| m.vmmr_ns.get("worst_case_search"))
                .is_some_and(|w| r.max_map_median_ns < *w)
        })
        .count();
    text.push(format!(
        "Here: at 40 % allocation VMMR beats memcpy at {w40} of {n40} sizes, the slowest map at {wmax} of {nmax}; the slowest map is below the worst-case search at {below_worst} of {} sizes. The maximum over every single iteration (in the table) is the paper's absolute maximum; over so many iterations an interruption, rather than the map, can set it.",
        bitmap.len()
    ));
    p(text.join(" "))
}

/// Figures 9 and 10: the size-class bitmap and the buddy pool beside the paper's bitmap.
pub(super) fn optimized(v: &VmmrSection) -> Vec<Block> {
    let mut b = Vec::new();
    let pools = ["bitmap", "size-classes", "buddy"];
    let at16: Vec<&RandomRow> = pools
        .iter()
        .filter_map(|p| {
            v.random
                .iter()
                .filter(|r| r.pool == *p)
                .min_by_key(|r| r.pages.abs_diff(16))
        })
        .collect();
    let sc = rows(v, "4k", "scattered", "warm");
    if at16.is_empty() && sc.is_empty() {
        return b;
    }
    b.push(h(3, "Figures 9 and 10: size classes and a buddy pool"));
    if !at16.is_empty() {
        b.extend(figure9(&at16));
    }
    // Figure 10 from the sweep.
    let cases = [
        "memcpy",
        "minimal_search",
        "worst_case_search",
        "size_class_worst_case",
        "buddy",
    ];
    if !sc.is_empty() {
        let series = cases
            .iter()
            .filter_map(|c| curve(&sc, c, label(c).into(), &pages, Style::Line))
            .collect();
        b.push(figure(
            "vmmr-fig10",
            "Figure 10: the optimized bitmap at its worst (one bit per block of the size class holding the message, all taken but the last; up to 256 pages) and an empty buddy pool, beside memcpy and the paper's minimal and worst-case searches (4 KiB pages, scattered, warm caches). Measured, where the paper interpolated.".into(),
            time_chart("VMMR, Figure 10: optimized worst case".into(), "message size (4 KiB pages)", series),
        ));
    }
    b.extend(pool_flatness(v));
    b.push(optimized_text(v, &pools, &sc));
    b
}

/// Figure 9: random maps of about 16-page messages against the allocation level, each pool.
fn figure9(at16: &[&RandomRow]) -> Vec<Block> {
    let mut b = Vec::new();
    let n = at16[0].pages;
    let mut reas = Vec::new();
    let mut alone = Vec::new();
    for (i, r) in at16.iter().enumerate() {
        if r.pages != n {
            continue;
        }
        reas.push(scatter(
            format!("{}, reassembly", r.pool),
            points(&r.maps, &|m| m.allocation_level * 100.0, &|m| {
                m.median_ns / 1e3
            }),
            [2, 4, 5][i],
        ));
        alone.push(scatter(
            format!("{}, pool alone", r.pool),
            points(&r.maps, &|m| m.allocation_level * 100.0, &|m| {
                m.pool_ns / 1e3
            }),
            [2, 4, 5][i],
        ));
    }
    for (stem, what, series) in [
        ("vmmr-fig9", "reassembly (pool plus moves)", reas),
        ("vmmr-fig9-pool", "the pool's alloc alone", alone),
    ] {
        b.push(figure(
            stem,
            format!(
                "Figure 9: random maps of {n}-page messages, {what}, against the allocation level: the paper's bitmap (search from a random word), one size-class bitmap whose bits are {n}-page blocks (the paper's map optimized for 16-page messages), and a buddy pool."
            ),
            Chart {
                title: format!("VMMR, Figure 9: {n} pages, {what}"),
                x_label: "allocation level (%)".into(),
                y_label: "time (µs)".into(),
                x_scale: Scale::Linear,
                y_scale: Scale::Log,
                series,
            },
        ));
    }
    b
}

/// Flatness over the maps: each pool's alloc alone and the whole reassembly.
fn pool_flatness(v: &VmmrSection) -> Option<Block> {
    let body: Vec<Vec<String>> = v
        .random
        .iter()
        .map(|r| {
            let pool: Vec<f64> = r.maps.iter().map(|m| m.pool_ns).collect();
            let med: Vec<f64> = r.maps.iter().map(|m| m.median_ns).collect();
            let q = |x: &[f64], f: f64| crate::report::fit::quantile(x, f).map_or("-".into(), us);
            vec![
                r.pool.clone(),
                r.pages.to_string(),
                r.block.to_string(),
                q(&pool, 0.5),
                q(&pool, 0.99),
                us(pool.iter().copied().fold(0.0, f64::max)),
                q(&med, 0.5),
                us(r.max_map_median_ns),
            ]
        })
        .collect();
    if body.is_empty() {
        return None;
    }
    Some(table(
        "The pools over the random maps: the pool's alloc alone (median, 99th percentile and slowest map) and the reassembly (median and slowest map), µs",
        &[
            "pool",
            "pages",
            "granules per bit/block",
            "alloc, median",
            "alloc, 99th pct",
            "alloc, slowest",
            "reassembly, median",
            "reassembly, slowest map",
        ],
        body,
    ))
}

/// The paper's Figures 9 and 10 claims against this machine's pools.
fn optimized_text(v: &VmmrSection, pools: &[&str], sc: &[&Row]) -> Block {
    let mut text = vec!["The paper (Figures 9 and 10): with one bit per 16-page block the random test is as flat as the one-page test, shifted by the cost of the page-table entries; even optimized, the worst case lost to memcpy at one page; it recommended organizations such as the buddy system over the linear bitmap search.".to_string()];
    let spread = |pool: &str| -> Option<(usize, f64, f64)> {
        let r = v
            .random
            .iter()
            .filter(|r| r.pool == pool)
            .min_by_key(|r| r.pages.abs_diff(16))?;
        let x: Vec<f64> = r.maps.iter().map(|m| m.pool_ns).collect();
        Some((
            r.pages,
            crate::report::fit::quantile(&x, 0.5)?,
            crate::report::fit::quantile(&x, 0.99)?,
        ))
    };
    let parts: Vec<String> = pools
        .iter()
        .filter_map(|p| {
            let (n, med, p99) = spread(p)?;
            Some(format!("{p} at {} {} to {} µs", pg(n), us(med), us(p99)))
        })
        .collect();
    if !parts.is_empty() {
        text.push(format!(
            "Here the pool's alloc alone, median to 99th percentile over the maps: {}.",
            parts.join("; ")
        ));
    }
    if let Some(one) = sc.iter().find(|r| r.pages == 1) {
        if let Some(x) = one.vmmr_ns.get("size_class_worst_case") {
            text.push(format!(
                "The optimized worst case at one page: {} µs against {} µs for memcpy ({}).",
                us(*x),
                us(one.memcpy_ns),
                verdict(one.memcpy_ns / x)
            ));
        }
    }
    p(text.join(" "))
}

/// The paper's claims beside this machine's measurements, with why they differ.
pub(super) fn against_paper(v: &VmmrSection) -> Vec<Block> {
    let sc = rows(v, "4k", "scattered", "warm");
    let ad = rows(v, "4k", "adjacent", "warm");
    let cs = rows(v, "4k", "scattered", "cold");
    let hs = rows(v, "2m", "scattered", "warm");
    let mut body: Vec<Vec<String>> = Vec::new();
    let agree = |b: bool| if b { "agrees" } else { "differs" }.to_string();
    let one = sc.iter().find(|r| r.pages == 1);
    let big = at(&sc, paper_size("4k")).or(sc.last().copied());
    if let Some(r) = one {
        body.push(vec![
            "speed-up at 1 page (minimal search)".into(),
            format!("{:.0}×", PAPER_SPEEDUP_WARM.0),
            format!("{} scattered", ratio(r.speedup, 1.0)),
            agree(r.speedup > 1.0),
        ]);
    }
    if let Some(r) = big {
        let a = at(&ad, r.granules);
        body.push(vec![
            format!("speed-up at {}", pg(r.pages)),
            format!("{:.0}×", PAPER_SPEEDUP_WARM.1),
            format!(
                "{} scattered, {} adjacent",
                ratio(r.speedup, 1.0),
                a.map_or("-".into(), |a| ratio(a.speedup, 1.0))
            ),
            agree(r.speedup > 1.0),
        ]);
    }
    if let Some(x) = v
        .derived
        .crossovers
        .iter()
        .find(|x| x.granule == "4k" && x.layout == "scattered" && x.caches == "warm")
    {
        body.push(vec![
            "VMMR faster than memcpy at every size".into(),
            "yes".into(),
            crossover_text(v, "4k", "scattered", "warm").unwrap_or_default(),
            agree(x.everywhere),
        ]);
    }
    if let Some(row) = worst_case_claim(&sc) {
        body.push(row);
    }
    if let (Some(f), Some(l)) = (cs.first(), cs.last()) {
        body.push(vec![
            "speed-ups without caches (1 page, largest)".into(),
            format!("{:.0}×, {:.0}×", PAPER_SPEEDUP_COLD.0, PAPER_SPEEDUP_COLD.1),
            format!(
                "{}, {} (cold, scattered)",
                ratio(f.speedup, 1.0),
                ratio(l.speedup, 1.0)
            ),
            agree(f.speedup > 1.0 && l.speedup > 1.0),
        ]);
    }
    let bitmap: Vec<&RandomRow> = v.random.iter().filter(|r| r.pool == "bitmap").collect();
    let judged: Vec<bool> = bitmap
        .iter()
        .filter_map(|r| Some(r.mean_at_40_ns? < at(&sc, r.pages)?.memcpy_ns))
        .collect();
    if !judged.is_empty() {
        body.push(vec![
            "40 % allocated: VMMR beats memcpy".into(),
            "at every size".into(),
            format!(
                "at {} of {} sizes",
                judged.iter().filter(|x| **x).count(),
                judged.len()
            ),
            agree(judged.iter().all(|x| *x)),
        ]);
    }
    if let Some(x) = at(&hs, paper_size("2m")).or(hs.last().copied()) {
        body.push(vec![
            format!("2 MiB huge pages, speed-up at {}", size(x.bytes)),
            "not in the paper; zcio's target ≥ 50×".into(),
            format!("{} scattered", ratio(x.speedup, 1.0)),
            if x.speedup >= 50.0 { "met" } else { "not met" }.into(),
        ]);
    }
    if body.is_empty() {
        return Vec::new();
    }
    let mut b = vec![h(3, "This machine against the paper")];
    b.push(table(
        "The paper's claims (PowerPC 601, NAP) and this machine's measurements",
        &["claim", "paper", "here", "verdict"],
        body,
    ));
    if let Some(why) = big.and_then(|r| why_4k_loses(v, r)) {
        b.push(why);
    }
    b
}

/// The worst-case search against memcpy: the paper found it slower from 1 to about 64 pages.
fn worst_case_claim(sc: &[&Row]) -> Option<Vec<String>> {
    if sc.is_empty() {
        return None;
    }
    let slow = |r: &&Row| {
        r.vmmr_ns
            .get("worst_case_search")
            .is_some_and(|w| *w > r.memcpy_ns)
    };
    let small: Vec<&&Row> = sc.iter().filter(|r| r.pages <= 64).collect();
    let up_to_64 = !small.is_empty() && small.iter().all(|r| slow(r));
    let beyond = sc.iter().filter(|r| r.pages > 64).any(slow);
    Some(vec![
        "worst case slower than memcpy".into(),
        "1 to about 64 pages".into(),
        slower_sizes(sc, "worst_case_search"),
        match (up_to_64, beyond) {
            (true, false) => "agrees".into(),
            (true, true) => "agrees to 64 pages; slower beyond too".into(),
            _ => "differs".into(),
        },
    ])
}

/// Why remapping 4 KiB pages loses on this machine, where it does at the paper's size.
fn why_4k_loses(v: &VmmrSection, r: &Row) -> Option<Block> {
    if r.speedup >= 1.0 {
        return None;
    }
    Some(p(format!(
        "Why 4 KiB VMMR loses here: the paper's PTE allocation was a few stores into a hashed page table by a kernel that owned the machine, against a 601 copying about 22 MB/s, so each page moved saved most of a page copy. On Linux a page moves through the UFFDIO_MOVE system call, one call per scattered page, while this CPU copies a page in {:.0} ns even out of the caches. Remapping pays only where one call moves many pages: adjacent pages ({}), or 2 MiB pages, each moved as one page-table entry.",
        per_page(r, "memcpy").unwrap_or(f64::NAN),
        crossover_text(v, "4k", "adjacent", "warm").unwrap_or_else(|| "not measured".into()),
    )))
}
