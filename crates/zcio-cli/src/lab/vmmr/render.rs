//! The report's section for paper 002 (VMMR): Figures 4 and 5 (reassembly time against message
//! size, memcpy and the bitmap's searches, warm and cold caches), their 2 MiB analogue, Figures
//! 6–8 (random maps), Figures 9 and 10 (size classes and a buddy pool), and this machine
//! against the paper's claims. Every statement is computed from the measurements; the paper's
//! numbers stand beside them.

use crate::lab::vmmr::measure::{RandomRow, Row, VmmrSection, paper_size};
use crate::report::doc::Block;
use crate::report::plot::{Chart, Scale, Series, Style};
use crate::report::results::Results;
use crate::report::text::{figure, h, p, size, table, us};

/// The paper's Figure 4 (PowerPC 601, total caching), µs: memcopy and minimal-search VMMR at
/// 1 page and at 6 144 pages, and the worst case at 1 page. The paper prints the one-page
/// times as "28 ms vs. 143 ms"; at its memcopy bandwidth (176.9 Mbit/s) a page takes 185 µs,
/// so they are µs.
pub(super) const PAPER_MEMCPY_1: f64 = 143.0;
pub(super) const PAPER_VMMR_1: f64 = 28.0;
pub(super) const PAPER_WORST_1: f64 = 289.0;
pub(super) const PAPER_MEMCPY_6144: f64 = 1.09e6;
pub(super) const PAPER_VMMR_6144: f64 = 13.1e3;
/// The paper's speed-ups at 1 and 6 144 pages, total caching (Figure 4) and no caching
/// (Figure 5).
pub(super) const PAPER_SPEEDUP_WARM: (f64, f64) = (5.0, 83.0);
pub(super) const PAPER_SPEEDUP_COLD: (f64, f64) = (33.0, 64.0);
/// The paper's minimal-search bandwidth at 6 144 pages and its memcopy's (Gbit/s).
pub(super) const PAPER_GBITS: (f64, f64) = (14.7, 0.1769);

/// Colours by case, the same in every chart.
pub(super) fn color(case: &str) -> usize {
    match case {
        "memcpy" => 3,
        "no_search" => 0,
        "minimal_search" => 2,
        "worst_case_search" => 1,
        "size_class_worst_case" => 4,
        "buddy" => 5,
        "copy" => 6,
        "adaptive" => 8,
        _ => 7,
    }
}

pub(super) fn label(case: &str) -> &'static str {
    match case {
        "memcpy" => "memcpy",
        "no_search" => "VMMR, no search",
        "minimal_search" => "VMMR, minimal search",
        "worst_case_search" => "VMMR, worst-case search",
        "size_class_worst_case" => "size class, worst case",
        "buddy" => "buddy pool",
        "copy" => "copying reassembler",
        "adaptive" => "adaptive reassembler",
        _ => "other",
    }
}

/// The rows of one series, by size.
pub(super) fn rows<'a>(v: &'a VmmrSection, g: &str, l: &str, c: &str) -> Vec<&'a Row> {
    let mut r: Vec<&Row> = v.rows.iter().filter(|r| r.is(g, l, c)).collect();
    r.sort_by_key(|r| r.granules);
    r
}

/// The rows of both layouts at granule `g` and caches `c` ([`rows`]), scattered then adjacent;
/// `None` where neither was measured.
fn measured_layouts<'a>(
    v: &'a VmmrSection,
    g: &str,
    c: &str,
) -> Option<(Vec<&'a Row>, Vec<&'a Row>)> {
    let (sc, ad) = (rows(v, g, "scattered", c), rows(v, g, "adjacent", c));
    (!sc.is_empty() || !ad.is_empty()).then_some((sc, ad))
}

/// A case's medians (µs) against `x`, with the fastest and slowest iteration as bars.
pub(super) fn curve(
    rs: &[&Row],
    case: &str,
    name: String,
    x: &dyn Fn(&Row) -> f64,
    style: Style,
) -> Option<Series> {
    let pts: Vec<&&Row> = rs.iter().filter(|r| r.case_ns(case).is_some()).collect();
    if pts.is_empty() {
        return None;
    }
    Some(Series {
        name,
        points: pts
            .iter()
            .map(|r| (x(r), r.case_ns(case).unwrap_or(f64::NAN) / 1e3))
            .collect(),
        style,
        band: Some(
            pts.iter()
                .filter_map(|r| {
                    let [lo, hi] = r.case_spread(case)?;
                    Some((x(r), lo / 1e3, hi / 1e3))
                })
                .collect(),
        ),
        color: Some(color(case)),
    })
}

pub(super) fn pages(r: &Row) -> f64 {
    r.pages as f64
}

pub(super) fn mib(r: &Row) -> f64 {
    r.bytes as f64 / (1 << 20) as f64
}

/// "1 page", "16 pages".
pub(super) fn pg(n: usize) -> String {
    if n == 1 {
        "1 page".into()
    } else {
        format!("{n} pages")
    }
}

/// A case's median per 4 KiB page (ns).
pub(super) fn per_page(r: &Row, case: &str) -> Option<f64> {
    Some(r.case_ns(case)? / r.pages as f64)
}

pub(super) fn at<'a>(rs: &[&'a Row], granules: usize) -> Option<&'a Row> {
    rs.iter().find(|r| r.granules == granules).copied()
}

pub(super) fn ratio(a: f64, b: f64) -> String {
    let x = a / b;
    if x >= 10.0 {
        format!("{x:.0}×")
    } else if x >= 0.1 {
        format!("{x:.2}×")
    } else {
        format!("{x:.3}×")
    }
}

/// "faster" or "slower" by a speed-up (memcpy / VMMR).
pub(super) fn verdict(speedup: f64) -> String {
    if speedup >= 1.0 {
        format!("{} faster than memcpy", ratio(speedup, 1.0))
    } else {
        format!("{} slower than memcpy", ratio(1.0, speedup))
    }
}

pub(super) fn cost(v: &VmmrSection, g: &str, l: &str, case: &str) -> Option<(f64, f64)> {
    v.derived
        .costs
        .iter()
        .find(|c| c.granule == g && c.layout == l && c.caches == "warm" && c.case == case)
        .map(|c| (c.per_granule_ns, c.per_message_ns))
}

pub(super) fn crossover_text(v: &VmmrSection, g: &str, l: &str, c: &str) -> Option<String> {
    let x = v
        .derived
        .crossovers
        .iter()
        .find(|x| x.granule == g && x.layout == l && x.caches == c)?;
    let unit = if g == "2m" { "2 MiB granules" } else { "pages" };
    Some(match x.granules {
        Some(n) if x.everywhere => {
            format!("faster than memcpy at every size measured (from {n} {unit})")
        }
        Some(n) => format!("faster than memcpy from {n} {unit} on"),
        None => "slower than memcpy up to the largest size measured".into(),
    })
}

/// The sizes (granules) at which the worst-case search is slower than memcpy, as ranges.
pub(super) fn slower_sizes(rs: &[&Row], case: &str) -> String {
    let slow: Vec<usize> = rs
        .iter()
        .filter(|r| r.case_ns(case).is_some_and(|x| x > r.memcpy_ns))
        .map(|r| r.pages)
        .collect();
    if slow.is_empty() {
        return "no size".into();
    }
    if slow.len() == rs.len() {
        return "every size".into();
    }
    let all: Vec<usize> = rs.iter().map(|r| r.pages).collect();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < all.len() {
        if !slow.contains(&all[i]) {
            i += 1;
            continue;
        }
        let start = all[i];
        while i + 1 < all.len() && slow.contains(&all[i + 1]) {
            i += 1;
        }
        parts.push(if all[i] == start {
            format!("{start}")
        } else {
            format!("{start}–{}", all[i])
        });
        i += 1;
    }
    format!("{} pages", parts.join(", "))
}

/// The findings that head the section.
pub fn findings(r: &Results) -> Vec<String> {
    let Some(v) = r.section::<super::Vmmr>() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let sc = rows(v, "4k", "scattered", "warm");
    let ad = rows(v, "4k", "adjacent", "warm");
    if let (Some(first), Some(last)) = (sc.first(), sc.last()) {
        let mut s = format!(
            "VMMR (paper 002), 4 KiB pages scattered (one move call per page): reassembling {} ({}) by moving them takes {} µs against {} µs for memcpy, {} (the paper: {:.0}× faster at 6 144 pages); at {} {} (the paper: {:.0}× faster).",
            pg(last.pages),
            size(last.bytes),
            us(last
                .vmmr_ns
                .get("minimal_search")
                .copied()
                .unwrap_or(f64::NAN)),
            us(last.memcpy_ns),
            verdict(last.speedup),
            PAPER_SPEEDUP_WARM.1,
            pg(first.pages),
            verdict(first.speedup),
            PAPER_SPEEDUP_WARM.0,
        );
        if let (Some(mv), Some(cp)) = (per_page(last, "minimal_search"), per_page(last, "memcpy")) {
            if mv > cp {
                s.push_str(&format!(
                    " At that size a scattered page costs {mv:.0} ns to move (a UFFDIO_MOVE system call each: page-table locks, the page's reverse map, a TLB flush) against {cp:.0} ns to copy; the paper's kernel wrote page-table entries directly ({:.1} µs a page) next to a memcopy of {:.0} µs a page.",
                    PAPER_VMMR_6144 / 6144.0,
                    PAPER_MEMCPY_6144 / 6144.0
                ));
            }
        }
        out.push(s);
    }
    if let Some(last) = ad.last() {
        out.push(format!(
            "VMMR, 4 KiB pages adjacent in the store (one move call per message): {}; at {} {}.",
            crossover_text(v, "4k", "adjacent", "warm").unwrap_or_default(),
            pg(last.pages),
            verdict(last.speedup)
        ));
    }
    let hs = rows(v, "2m", "scattered", "warm");
    let ha = rows(v, "2m", "adjacent", "warm");
    if let Some(x) = at(&hs, paper_size("2m")).or(hs.last().copied()) {
        let mut s = format!(
            "VMMR with 2 MiB huge pages: {} reassembled in {} µs against {} µs for memcpy, {} with the huge pages scattered",
            size(x.bytes),
            us(x.vmmr_ns.get("minimal_search").copied().unwrap_or(f64::NAN)),
            us(x.memcpy_ns),
            verdict(x.speedup)
        );
        if let Some(y) = at(&ha, x.granules) {
            s.push_str(&format!(", {} adjacent", ratio(y.speedup, 1.0)));
        }
        s.push_str(&format!(
            " (zcio's target: at least 50×: {}).",
            if x.speedup >= 50.0 { "met" } else { "not met" }
        ));
        out.push(s);
    }
    for a in v.derived.adaptive.iter().filter(|a| a.granule == "4k") {
        out.push(format!(
            "Adaptive reassembly, 4 KiB pages {}: it moved pages at {} of {} sizes and copied the rest; at worst {} memcpy's time ({}){}.",
            a.layout,
            a.remapped,
            a.sizes,
            ratio(a.worst_ratio, 1.0),
            pg(a.worst_at_pages),
            match (a.within_5_percent, a.within_5_percent_from_pages) {
                (true, _) => ": within 5 % of memcpy at every size (zcio's target: met)".to_string(),
                (false, Some(p)) => format!(
                    ": within 5 % of memcpy from {} on, not below (zcio's target is every size: not met where a memcpy is too short to hide the owned buffer's bookkeeping)",
                    pg(p)
                ),
                (false, None) => ": more than 5 % slower than memcpy at the largest size (zcio's target: not met)".to_string(),
            }
        ));
    }
    let bitmap: Vec<&RandomRow> = v.random.iter().filter(|r| r.pool == "bitmap").collect();
    let judged: Vec<(usize, bool)> = bitmap
        .iter()
        .filter_map(|r| {
            let m = at(&sc, r.pages)?;
            Some((r.pages, r.mean_at_40_ns? < m.memcpy_ns))
        })
        .collect();
    if !judged.is_empty() {
        let wins = judged.iter().filter(|x| x.1).count();
        // The search's share of the reassembly over every map: the pool's alloc alone against
        // the whole.
        let share = bitmap
            .iter()
            .flat_map(|r| r.maps.iter())
            .map(|m| m.pool_ns / m.median_ns)
            .filter(|x| x.is_finite())
            .fold(0.0, f64::max);
        out.push(format!(
            "Random maps (paper 002, Figure 8): with the bitmap 40 % allocated, VMMR of scattered pages beats memcpy at {wins} of the {} sizes measured (the paper: at every size). The bitmap search is at most {:.0} % of a reassembly on any map{}.",
            judged.len(),
            share * 100.0,
            if share < 0.5 {
                ": here the moves, not the search, decide"
            } else {
                ": on the most fragmented maps the search weighs as much as the moves"
            }
        ));
    }
    out.extend(super::render_producers::findings(v));
    out
}

pub(super) fn method(v: &VmmrSection) -> String {
    let pl = &v.plan;
    let regimes: Vec<String> = pl
        .regimes
        .iter()
        .map(|r| format!("{} maps freeing {} granules each", r.maps, r.frees_per_map))
        .collect();
    format!(
        "One process, as in the paper's single-address-space benchmark. A message's granules (4 KiB pages, or 2 MiB transparent huge pages) lie in a page store, scattered (shuffled, no two adjacent: every granule moves in a UFFDIO_MOVE call of its own, like the paper's DMA'd discontiguous pages) or adjacent (consecutive receive buffers: one call moves the whole message); the store's pages are filled with word counts. Timed is the reassembly alone, as in the paper: memcpy copies the granules into a contiguous destination faulted in beforehand (in huge pages where the kernel gives them: the best case for copying); VMMR asks a page pool for a free run of a {} × 4 KiB remap space (the paper's 256 MB segment; {} × 2 MiB, virtual space only, for huge pages) and moves the pages there: with no search (the run known: the paper's lower bound), a minimal search (an empty bitmap searched from word 0), the paper's worst-case bitmap (alternating bits, the free run at the end), the optimized bitmap of §4.3 at its worst (one bit per block of the size class holding the message, every block taken but the last; messages of up to 256 pages) and an empty buddy pool. Each case runs {} times per size, in four runs back to back, the cases taking turns (as an application doing one thing would run: interleaved one by one, the other cases' footprints would evict a copy's destination from a few hundred pages on; four runs, so that a slow spell of the machine falls on several cases), each timed reassembly after the same untimed one (the pages moved in and back out, so that their translations are not cached, as for pages just delivered); the figures give the median, the bars the fastest and slowest iteration. Every message is checked word for word after each timed reassembly, untimed, and freed (its pages moved back to their slots) untimed. Cold caches (Figure 5's analogue; the paper turned caching off, user space cannot): a buffer of {} read before each timed reassembly, {} iterations. Random maps (Figures 6–9): the paper's deallocation regimes ({}), each map timed {} times at most (fewer for large messages: {} pages per map at most), the bitmap searched from a random word as in §4.2, the moves done for real; the pool's part (its alloc alone) is timed beside. Reading the clock costs {:.0} ns, part of every timing. The paper ran on a PowerPC 601 under a kernel of its own (NAP) that wrote page-table entries directly, with L1 and TLBs flushed each iteration; here Linux moves pages with a system call{}.",
        pl.capacity_4k,
        pl.capacity_2m,
        pl.iterations,
        size(pl.eviction_bytes),
        pl.cold_iterations,
        regimes.join(", "),
        pl.random_iterations,
        pl.random_page_budget,
        pl.timer_overhead_ns,
        if pl.move_available {
            ""
        } else {
            " — but not on this kernel: without UFFDIO_MOVE every \"move\" here is a copy"
        }
    )
}

/// What the rebuilds were, if any: points and maps measured again because the VM layer copied
/// pages the kernel would not move.
pub(super) fn rebuilds_text(v: &VmmrSection) -> Option<String> {
    // Saturating: the counts may come from a results file (`zcio report --from`), any size.
    let rows = v
        .rows
        .iter()
        .fold(0usize, |n, r| n.saturating_add(r.rebuilds));
    let maps = v
        .random
        .iter()
        .flat_map(|r| &r.maps)
        .fold(0usize, |n, m| n.saturating_add(m.rebuilds));
    if rows == 0 && maps == 0 {
        return None;
    }
    let first = v
        .rows
        .iter()
        .filter_map(|r| r.rebuild_reason.as_deref())
        .chain(
            v.random
                .iter()
                .flat_map(|r| &r.maps)
                .filter_map(|m| m.rebuild_reason.as_deref()),
        )
        .next()
        .unwrap_or("-");
    let why = if first.contains("would not move") {
        "the kernel would not move a page at that moment, the VM layer copied it and left its source in place, so the space could not be reused there"
    } else if first.contains("File exists") {
        "a move found its destination already populated (EEXIST), which is what an earlier move leaves behind when the kernel would not move one of its pages and the VM layer copied it instead, leaving the source in place (the reassembler's free does not report such copies)"
    } else {
        "the VM layer failed"
    };
    Some(format!(
        "The remap space and the message were rebuilt and the measurement taken again {rows} times in the sweeps and {maps} times in the random maps: {why}. The first: {first}."
    ))
}

pub(super) fn time_chart(title: String, x_label: &str, series: Vec<Series>) -> Chart {
    Chart {
        title,
        x_label: x_label.into(),
        y_label: "reassembly time (µs)".into(),
        x_scale: Scale::Log,
        y_scale: Scale::Log,
        series,
    }
}

pub(super) const FIG4_CASES: [&str; 4] =
    ["memcpy", "no_search", "minimal_search", "worst_case_search"];

pub(super) fn case_table(rs: &[&Row], caption: &str, cases: &[&str]) -> Block {
    let mut header = vec!["pages".to_string()];
    header.extend(cases.iter().map(|c| format!("{} µs", label(c))));
    header.push("speed-up (memcpy / minimal)".into());
    header.push("move calls".into());
    let body = rs
        .iter()
        .map(|r| {
            let mut row = vec![r.pages.to_string()];
            for c in cases {
                row.push(r.case_ns(c).map_or("-".into(), us));
            }
            row.push(ratio(r.speedup, 1.0));
            row.push(r.move_calls.to_string());
            row
        })
        .collect();
    let hdr: Vec<&str> = header.iter().map(|s| s.as_str()).collect();
    table(caption, &hdr, body)
}

/// [`layout_figure`] `vmmr-{fig}-{layout}` for each layout that has rows, pages scattered
/// (`sc`) and adjacent (`ad`), with the caption and title the layout is given.
fn layout_figures(
    sc: &[&Row],
    ad: &[&Row],
    fig: &str,
    caption: impl Fn(&str) -> String,
    title: impl Fn(&str) -> String,
) -> Vec<Block> {
    [("scattered", sc), ("adjacent", ad)]
        .into_iter()
        .filter(|(_, rs)| !rs.is_empty())
        .map(|(layout, rs)| {
            let stem = format!("vmmr-{fig}-{layout}");
            layout_figure(rs, &stem, caption(layout), title(layout))
        })
        .collect()
}

/// Figure 4 or 5 for one 4 KiB layout: memcpy and VMMR with the paper's three searches.
fn layout_figure(rs: &[&Row], stem: &str, caption: String, title: String) -> Block {
    let series = FIG4_CASES
        .iter()
        .filter_map(|c| curve(rs, c, label(c).into(), &pages, Style::Line))
        .collect();
    figure(
        stem,
        caption,
        time_chart(title, "message size (4 KiB pages)", series),
    )
}

/// Figure `fig`'s numbers (`caches` warm or cold) for each 4 KiB layout measured.
fn layout_tables(sc: &[&Row], ad: &[&Row], fig: &str, caches: &str) -> Vec<Block> {
    [("scattered", sc), ("adjacent", ad)]
        .into_iter()
        .filter(|(_, rs)| !rs.is_empty())
        .map(|(layout, rs)| {
            case_table(
                rs,
                &format!(
                    "Figure {fig}, 4 KiB pages {layout}, {caches} caches: median µs per reassembly"
                ),
                &FIG4_CASES,
            )
        })
        .collect()
}

pub(super) fn figure4(v: &VmmrSection) -> Vec<Block> {
    let mut b = Vec::new();
    let Some((sc, ad)) = measured_layouts(v, "4k", "warm") else {
        return b;
    };
    b.push(h(
        3,
        "Figure 4: reassembly time against message size, 4 KiB pages",
    ));
    b.extend(layout_figures(
        &sc,
        &ad,
        "fig4",
        |layout| format!(
            "Reassembly time against message size, 4 KiB pages {layout} in the store ({}), warm caches: memcpy and VMMR with the paper's three searches (median; bars: fastest and slowest iteration).",
            if layout == "scattered" { "one move call per page" } else { "one move call per message" }
        ),
        |layout| format!("VMMR, Figure 4: 4 KiB pages, {layout}"),
    ));
    let mut text = Vec::new();
    if let (Some(f), Some(l)) = (sc.first(), sc.last()) {
        let vm = |r: &Row| r.vmmr_ns.get("minimal_search").copied().unwrap_or(f64::NAN);
        text.push(format!(
            "The paper (Figure 4, total caching): {PAPER_VMMR_1:.0} µs against {PAPER_MEMCPY_1:.0} µs at one page ({:.0}×), {:.1} ms against {:.2} s at 6 144 pages ({:.0}×, {:.1} Gbit/s against {:.1} Mbit/s), VMMR faster at every size. Here, pages scattered: {} µs against {} µs at {} ({}), {} µs against {} µs at {} ({}); VMMR is {}.",
            PAPER_MEMCPY_1 / PAPER_VMMR_1,
            PAPER_VMMR_6144 / 1e3,
            PAPER_MEMCPY_6144 / 1e6,
            PAPER_MEMCPY_6144 / PAPER_VMMR_6144,
            PAPER_GBITS.0,
            PAPER_GBITS.1 * 1e3,
            us(vm(f)),
            us(f.memcpy_ns),
            pg(f.pages),
            verdict(f.speedup),
            us(vm(l)),
            us(l.memcpy_ns),
            pg(l.pages),
            verdict(l.speedup),
            crossover_text(v, "4k", "scattered", "warm").unwrap_or_default()
        ));
    }
    if let Some(l) = ad.last() {
        text.push(format!(
            "Pages adjacent in the store: VMMR is {}; at {} {} ({:.1} Gbit/s).",
            crossover_text(v, "4k", "adjacent", "warm").unwrap_or_default(),
            pg(l.pages),
            verdict(l.speedup),
            l.bytes as f64 * 8.0 / l.vmmr_ns.get("minimal_search").copied().unwrap_or(f64::NAN)
        ));
    }
    if let Some(t) = per_page_text(v) {
        text.push(t);
    }
    if let Some(w) = sc.iter().find(|r| r.pages == 1) {
        if let Some(x) = w.vmmr_ns.get("worst_case_search") {
            text.push(format!(
                "The worst-case search (§4.1: the whole bitmap to resolve): the paper found it slower than memcpy from 1 to about 64 pages ({PAPER_WORST_1:.0} against {PAPER_MEMCPY_1:.0} µs at one page). Here it is slower than memcpy at {} (scattered) and {} (adjacent); at one page it costs {} µs, the search alone {} µs of it. Minimal and no search differ by the search of an empty bitmap, {} µs at one page; the paper saw them converge from 32 pages on.",
                slower_sizes(&sc, "worst_case_search"),
                slower_sizes(&ad, "worst_case_search"),
                us(*x),
                w.pool_ns.get("worst_case_search").map_or("-".into(), |x| us(*x)),
                w.pool_ns.get("minimal_search").map_or("-".into(), |x| us(*x)),
            ));
        }
    }
    b.push(p(text.join(" ")));
    b.extend(layout_tables(&sc, &ad, "4", "warm"));
    b
}

/// Per-page costs at the smallest and largest sizes, and the move calls' fitted costs.
pub(super) fn per_page_text(v: &VmmrSection) -> Option<String> {
    let sc = rows(v, "4k", "scattered", "warm");
    let ad = rows(v, "4k", "adjacent", "warm");
    let (f, l) = (sc.first()?, sc.last()?);
    let mut s = format!(
        "Per page, memcpy costs {:.0} ns at {} (in the caches) and {:.0} ns at {} (source and destination far larger than the caches); moving a scattered page costs {:.0} ns at {} and {:.0} ns at {}",
        per_page(f, "memcpy")?,
        pg(f.pages),
        per_page(l, "memcpy")?,
        pg(l.pages),
        per_page(f, "no_search")?,
        pg(f.pages),
        per_page(l, "no_search")?,
        pg(l.pages),
    );
    if let Some(a) = ad.last() {
        s.push_str(&format!(
            ", adjacent pages moved in one call {:.0} ns at {}",
            per_page(a, "no_search")?,
            pg(a.pages)
        ));
    }
    if let Some((per, fixed)) = cost(v, "4k", "adjacent", "no_search") {
        s.push_str(&format!(
            " (fitted over the sizes: {per:.0} ns a page and {fixed:.0} ns a call)"
        ));
    }
    s.push_str(&format!(
        ". Where moving a page costs more than copying it, no pool, however fast its search, lets VMMR win. The paper's VMMR spent {:.1} µs a page at 6 144 pages against {:.0} µs to copy one; here every move call enters the kernel, locks the page tables, updates the page's reverse map and flushes the TLB, while a page is copied at memory speed.",
        PAPER_VMMR_6144 / 6144.0,
        PAPER_MEMCPY_6144 / 6144.0
    ));
    Some(s)
}

pub(super) fn figure5(v: &VmmrSection) -> Vec<Block> {
    let Some((sc, ad)) = measured_layouts(v, "4k", "cold") else {
        return Vec::new();
    };
    let mut b = vec![h(3, "Figure 5: cold caches")];
    b.extend(layout_figures(
        &sc,
        &ad,
        "fig5",
        |layout| format!("Reassembly time against message size with cold caches (a buffer twice the last-level cache read before each), 4 KiB pages {layout}."),
        |layout| format!("VMMR, Figure 5: cold caches, {layout}"),
    ));
    let mut text = vec![format!(
        "The paper (no caching): speed-ups of {:.0}× at one page and {:.0}× at 6 144 pages (against {:.0}× and {:.0}× with caching); the worst case lost twelvefold without caches, memcpy about 60 % of that: code caching matters most to VMMR.",
        PAPER_SPEEDUP_COLD.0, PAPER_SPEEDUP_COLD.1, PAPER_SPEEDUP_WARM.0, PAPER_SPEEDUP_WARM.1
    )];
    for (layout, rs) in [("scattered", &sc), ("adjacent", &ad)] {
        let warm = rows(v, "4k", layout, "warm");
        let (Some(f), Some(l)) = (rs.first(), rs.last()) else {
            continue;
        };
        let slow = |r: &Row, case: &str| {
            let w = at(&warm, r.granules)?.case_ns(case)?;
            Some(r.case_ns(case)? / w)
        };
        text.push(format!(
            "Here, pages {layout}: at {} {} (warm: {}), at {} {} (warm: {}); VMMR is {}. Cold caches make one page's minimal-search VMMR {} slower and its memcpy {} slower.",
            pg(f.pages),
            verdict(f.speedup),
            at(&warm, f.granules).map_or("-".into(), |w| ratio(w.speedup, 1.0)),
            pg(l.pages),
            verdict(l.speedup),
            at(&warm, l.granules).map_or("-".into(), |w| ratio(w.speedup, 1.0)),
            crossover_text(v, "4k", layout, "cold").unwrap_or_default(),
            slow(f, "minimal_search").map_or("-".into(), |x| ratio(x, 1.0)),
            slow(f, "memcpy").map_or("-".into(), |x| ratio(x, 1.0)),
        ));
    }
    b.push(p(text.join(" ")));
    b.extend(layout_tables(&sc, &ad, "5", "cold"));
    b
}

pub(super) fn huge(v: &VmmrSection) -> Vec<Block> {
    let Some((sc, ad)) = measured_layouts(v, "2m", "warm") else {
        return Vec::new();
    };
    let mut b = vec![h(3, "2 MiB huge pages (not in the paper)")];
    let mut series = Vec::new();
    for (layout, rs, style) in [
        ("scattered", &sc, Style::Line),
        ("adjacent", &ad, Style::Dashed),
    ] {
        for c in ["memcpy", "no_search", "minimal_search", "worst_case_search"] {
            if let Some(s) = curve(rs, c, format!("{}, {layout}", label(c)), &mib, style) {
                series.push(s);
            }
        }
    }
    b.push(figure(
        "vmmr-2m",
        "Reassembly time against message size with 2 MiB granules (transparent huge pages moved whole): memcpy and VMMR, granules scattered (solid) and adjacent (dashed).".into(),
        time_chart(
            "VMMR with 2 MiB huge pages".into(),
            "message size (MiB)",
            series,
        ),
    ));
    let mut text = Vec::new();
    for (layout, rs) in [("scattered", &sc), ("adjacent", &ad)] {
        let Some(x) = at(rs, paper_size("2m")).or(rs.last().copied()) else {
            continue;
        };
        let f = rs.first().copied().unwrap_or(x);
        text.push(format!(
            "Granules {layout}: {} in {} µs against {} µs for memcpy, {} ({:.0} Gbit/s against {:.1}); one granule ({}) {}.",
            size(x.bytes),
            us(x.vmmr_ns.get("minimal_search").copied().unwrap_or(f64::NAN)),
            us(x.memcpy_ns),
            verdict(x.speedup),
            x.bytes as f64 * 8.0 / x.vmmr_ns.get("minimal_search").copied().unwrap_or(f64::NAN),
            x.bytes as f64 * 8.0 / x.memcpy_ns,
            size(f.bytes),
            verdict(f.speedup),
        ));
    }
    let huge_ok: Vec<bool> = sc.iter().chain(&ad).filter_map(|r| r.huge_pages).collect();
    text.push(if huge_ok.is_empty() {
        "Whether the granules were huge pages is not known here (no AnonHugePages).".into()
    } else if huge_ok.iter().all(|x| *x) {
        "Every message's granules were transparent huge pages when written (AnonHugePages grew by the message), so each moves as one page-table entry.".into()
    } else {
        format!(
            "Only {} of {} messages got transparent huge pages when written; the others moved 512 pages per granule.",
            huge_ok.iter().filter(|x| **x).count(),
            huge_ok.len()
        )
    });
    text.push(format!(
        "The pool has {} granules ({} of virtual space); a 2 MiB bitmap is 1/512 the size of the 4 KiB one for the same bytes, so even its worst-case search is short. zcio's target is at least 50× over memcpy at 24 MiB.",
        v.plan.capacity_2m,
        size(v.plan.capacity_2m << 21)
    ));
    b.push(p(text.join(" ")));
    for (layout, rs) in [("scattered", &sc), ("adjacent", &ad)] {
        if !rs.is_empty() {
            b.push(case_table(
                rs,
                &format!("2 MiB granules {layout}, warm caches: median µs per reassembly (pages: 4 KiB pages)"),
                &FIG4_CASES,
            ));
        }
    }
    b
}

/// "1, 2, 4".
pub(super) fn list(v: &[usize]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
