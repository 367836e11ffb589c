//! The report's section for paper 002 (VMMR): Figures 4 and 5 (reassembly time against message
//! size, memcpy and the bitmap's searches, warm and cold caches), their 2 MiB analogue, Figures
//! 6–8 (random maps), Figures 9 and 10 (size classes and a buddy pool), and this machine
//! against the paper's claims. Every statement is computed from the measurements; the paper's
//! numbers stand beside them.

use crate::lab::vmmr::measure::{RandomMapRow, RandomRow, Row, VmmrSection, paper_size};
use crate::report::doc::Block;
use crate::report::plot::{Chart, Scale, Series, Style};
use crate::report::results::Results;
use crate::report::text::{figure, h, p, size, table, us};

/// The paper's Figure 4 (PowerPC 601, total caching), µs: memcopy and minimal-search VMMR at
/// 1 page and at 6 144 pages, and the worst case at 1 page. The paper prints the one-page
/// times as "28 ms vs. 143 ms"; at its memcopy bandwidth (176.9 Mbit/s) a page takes 185 µs,
/// so they are µs.
const PAPER_MEMCPY_1: f64 = 143.0;
const PAPER_VMMR_1: f64 = 28.0;
const PAPER_WORST_1: f64 = 289.0;
const PAPER_MEMCPY_6144: f64 = 1.09e6;
const PAPER_VMMR_6144: f64 = 13.1e3;
/// The paper's speed-ups at 1 and 6 144 pages, total caching (Figure 4) and no caching
/// (Figure 5).
const PAPER_SPEEDUP_WARM: (f64, f64) = (5.0, 83.0);
const PAPER_SPEEDUP_COLD: (f64, f64) = (33.0, 64.0);
/// The paper's minimal-search bandwidth at 6 144 pages and its memcopy's (Gbit/s).
const PAPER_GBITS: (f64, f64) = (14.7, 0.1769);

/// Colours by case, the same in every chart.
fn color(case: &str) -> usize {
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

fn label(case: &str) -> &'static str {
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
fn rows<'a>(v: &'a VmmrSection, g: &str, l: &str, c: &str) -> Vec<&'a Row> {
    let mut r: Vec<&Row> = v.rows.iter().filter(|r| r.is(g, l, c)).collect();
    r.sort_by_key(|r| r.granules);
    r
}

/// A case's medians (µs) against `x`, with the fastest and slowest iteration as bars.
fn curve(
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

fn pages(r: &Row) -> f64 {
    r.pages as f64
}

fn mib(r: &Row) -> f64 {
    r.bytes as f64 / (1 << 20) as f64
}

/// "1 page", "16 pages".
fn pg(n: usize) -> String {
    if n == 1 {
        "1 page".into()
    } else {
        format!("{n} pages")
    }
}

/// A case's median per 4 KiB page (ns).
fn per_page(r: &Row, case: &str) -> Option<f64> {
    Some(r.case_ns(case)? / r.pages as f64)
}

fn at<'a>(rs: &[&'a Row], granules: usize) -> Option<&'a Row> {
    rs.iter().find(|r| r.granules == granules).copied()
}

fn ratio(a: f64, b: f64) -> String {
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
fn verdict(speedup: f64) -> String {
    if speedup >= 1.0 {
        format!("{} faster than memcpy", ratio(speedup, 1.0))
    } else {
        format!("{} slower than memcpy", ratio(1.0, speedup))
    }
}

fn cost(v: &VmmrSection, g: &str, l: &str, case: &str) -> Option<(f64, f64)> {
    v.derived
        .costs
        .iter()
        .find(|c| c.granule == g && c.layout == l && c.caches == "warm" && c.case == case)
        .map(|c| (c.per_granule_ns, c.per_message_ns))
}

fn crossover_text(v: &VmmrSection, g: &str, l: &str, c: &str) -> Option<String> {
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
fn slower_sizes(rs: &[&Row], case: &str) -> String {
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

/// The findings for the report's summary.
pub fn findings(r: &Results) -> Vec<String> {
    let Some(v) = &r.vmmr else {
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
    out
}

/// The section.
pub fn blocks(r: &Results) -> Vec<Block> {
    let Some(v) = &r.vmmr else {
        return Vec::new();
    };
    let mut b = vec![
        h(
            2,
            "Paper 002 — VMMR: reassembling a message by remapping its pages",
        ),
        p(method(v)),
    ];
    if let Some(t) = rebuilds_text(v) {
        b.push(p(t));
    }
    b.extend(figure4(v));
    b.extend(figure5(v));
    b.extend(huge(v));
    b.extend(random_figures(v));
    b.extend(optimized(v));
    b.extend(adaptive(v));
    b.extend(against_paper(v));
    b
}

fn method(v: &VmmrSection) -> String {
    let pl = &v.plan;
    let regimes: Vec<String> = pl
        .regimes
        .iter()
        .map(|r| format!("{} maps freeing {} granules each", r.maps, r.frees_per_map))
        .collect();
    format!(
        "One process, as in the paper's single-address-space benchmark. A message's granules (4 KiB pages, or 2 MiB transparent huge pages) lie in a page store, scattered (shuffled, no two adjacent: every granule moves in a UFFDIO_MOVE call of its own, like the paper's DMA'd discontiguous pages) or adjacent (consecutive receive buffers: one call moves the whole message); the store's pages are filled with word counts. Timed is the reassembly alone, as in the paper: memcpy copies the granules into a contiguous destination faulted in beforehand (in huge pages where the kernel gives them: the best case for copying); VMMR asks a page pool for a free run of a {} × 4 KiB remap space (the paper's 256 MB segment; {} × 2 MiB, virtual space only, for huge pages) and moves the pages there: with no search (the run known: the paper's lower bound), a minimal search (an empty bitmap searched from word 0), the paper's worst-case bitmap (alternating bits, the free run at the end), the optimized bitmap of §4.3 at its worst (one bit per block of the size class holding the message, every block taken but the last; messages of up to 256 pages) and an empty buddy pool. Each case runs {} times per size, in four runs back to back, the cases taking turns (as an application doing one thing would run: interleaved one by one, the other cases' footprints would evict a copy's destination from a few hundred pages on; four runs, so that a slow spell of this virtual machine falls on several cases), each timed reassembly after the same untimed one (the pages moved in and back out, so that their translations are not cached, as for pages just delivered); the figures give the median, the bars the fastest and slowest iteration. Every message is checked word for word after each timed reassembly, untimed, and freed (its pages moved back to their slots) untimed. Cold caches (Figure 5's analogue; the paper turned caching off, user space cannot): a buffer of {} read before each timed reassembly, {} iterations. Random maps (Figures 6–9): the paper's deallocation regimes ({}), each map timed {} times at most (fewer for large messages: {} pages per map at most), the bitmap searched from a random word as in §4.2, the moves done for real; the pool's part (its alloc alone) is timed beside. Reading the clock costs {:.0} ns, part of every timing. The paper ran on a PowerPC 601 under a kernel of its own (NAP) that wrote page-table entries directly, with L1 and TLBs flushed each iteration; here Linux moves pages with a system call{}.",
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
fn rebuilds_text(v: &VmmrSection) -> Option<String> {
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

fn time_chart(title: String, x_label: &str, series: Vec<Series>) -> Chart {
    Chart {
        title,
        x_label: x_label.into(),
        y_label: "reassembly time (µs)".into(),
        x_scale: Scale::Log,
        y_scale: Scale::Log,
        series,
    }
}

const FIG4_CASES: [&str; 4] = ["memcpy", "no_search", "minimal_search", "worst_case_search"];

fn case_table(rs: &[&Row], caption: &str, cases: &[&str]) -> Block {
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

fn figure4(v: &VmmrSection) -> Vec<Block> {
    let mut b = Vec::new();
    let sc = rows(v, "4k", "scattered", "warm");
    let ad = rows(v, "4k", "adjacent", "warm");
    if sc.is_empty() && ad.is_empty() {
        return b;
    }
    b.push(h(
        3,
        "Figure 4: reassembly time against message size, 4 KiB pages",
    ));
    for (layout, rs) in [("scattered", &sc), ("adjacent", &ad)] {
        if rs.is_empty() {
            continue;
        }
        let series = FIG4_CASES
            .iter()
            .filter_map(|c| curve(rs, c, label(c).into(), &pages, Style::Line))
            .collect();
        b.push(figure(
            &format!("vmmr-fig4-{layout}"),
            format!(
                "Reassembly time against message size, 4 KiB pages {layout} in the store ({}), warm caches: memcpy and VMMR with the paper's three searches (median; bars: fastest and slowest iteration).",
                if layout == "scattered" { "one move call per page" } else { "one move call per message" }
            ),
            time_chart(
                format!("VMMR, Figure 4: 4 KiB pages, {layout}"),
                "message size (4 KiB pages)",
                series,
            ),
        ));
    }
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
    for (layout, rs) in [("scattered", &sc), ("adjacent", &ad)] {
        if !rs.is_empty() {
            b.push(case_table(
                rs,
                &format!("Figure 4, 4 KiB pages {layout}, warm caches: median µs per reassembly"),
                &FIG4_CASES,
            ));
        }
    }
    b
}

/// Per-page costs at the smallest and largest sizes, and the move calls' fitted costs.
fn per_page_text(v: &VmmrSection) -> Option<String> {
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

fn figure5(v: &VmmrSection) -> Vec<Block> {
    let sc = rows(v, "4k", "scattered", "cold");
    let ad = rows(v, "4k", "adjacent", "cold");
    if sc.is_empty() && ad.is_empty() {
        return Vec::new();
    }
    let mut b = vec![h(3, "Figure 5: cold caches")];
    for (layout, rs) in [("scattered", &sc), ("adjacent", &ad)] {
        if rs.is_empty() {
            continue;
        }
        let series = FIG4_CASES
            .iter()
            .filter_map(|c| curve(rs, c, label(c).into(), &pages, Style::Line))
            .collect();
        b.push(figure(
            &format!("vmmr-fig5-{layout}"),
            format!("Reassembly time against message size with cold caches (a buffer twice the last-level cache read before each), 4 KiB pages {layout}."),
            time_chart(
                format!("VMMR, Figure 5: cold caches, {layout}"),
                "message size (4 KiB pages)",
                series,
            ),
        ));
    }
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
    for (layout, rs) in [("scattered", &sc), ("adjacent", &ad)] {
        if !rs.is_empty() {
            b.push(case_table(
                rs,
                &format!("Figure 5, 4 KiB pages {layout}, cold caches: median µs per reassembly"),
                &FIG4_CASES,
            ));
        }
    }
    b
}

fn huge(v: &VmmrSection) -> Vec<Block> {
    let sc = rows(v, "2m", "scattered", "warm");
    let ad = rows(v, "2m", "adjacent", "warm");
    if sc.is_empty() && ad.is_empty() {
        return Vec::new();
    }
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
fn list(v: &[usize]) -> String {
    v.iter()
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The adaptive reassembler (zcio's addition; not in the paper, whose
/// conclusion it acts on: remap only where it pays).
fn adaptive(v: &VmmrSection) -> Vec<Block> {
    if v.derived.adaptive.is_empty() {
        return Vec::new();
    }
    let mut b = vec![h(3, "Adaptive: remap or copy, per message")];
    let cal: Vec<String> = v
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
                "{} granules: a move call {:.0} ns plus {:.0} ns a granule; copying a granule {} granules (from the {})",
                if c.granule == "2m" { "2 MiB" } else { "4 KiB" },
                c.move_call_ns,
                c.move_granule_ns,
                copies.join(", "),
                if c.source == "profile" {
                    "calibration profile"
                } else {
                    "measurement taken now"
                }
            )
        })
        .collect();
    b.push(p(format!(
        "The reassembler with the adaptive policy predicts, per message, the cost of moving its granules (one call per run of adjacent granules) and of copying them, from costs measured on this machine and kept in the calibration profile, and takes the cheaper: {}. Copies go into a range of the reassembler's own whose pages stay, so that a copied message is a buffer the application owns until it frees it, like a remapped one. The copying reassembler (every message copied, with the same bookkeeping) is measured beside it: against memcpy it shows what owning the buffer costs, against the adaptive case what deciding and its mistakes cost.",
        cal.join("; ")
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
        text.push(t);
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
        b.push(table(
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
        ));
    }
    b
}

/// At most `max` points, evenly taken.
fn thin<T: Copy>(v: &[T], max: usize) -> Vec<T> {
    if v.len() <= max {
        return v.to_vec();
    }
    let step = v.len() as f64 / max as f64;
    (0..max).map(|i| v[(i as f64 * step) as usize]).collect()
}

fn points(
    maps: &[RandomMapRow],
    x: &dyn Fn(&RandomMapRow) -> f64,
    y: &dyn Fn(&RandomMapRow) -> f64,
) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = maps.iter().map(|m| (x(m), y(m))).collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    thin(&pts, 600)
}

fn scatter(name: String, pts: Vec<(f64, f64)>, color: usize) -> Series {
    Series {
        name,
        points: pts,
        style: Style::Points,
        band: None,
        color: Some(color),
    }
}

fn random_figures(v: &VmmrSection) -> Vec<Block> {
    let bitmap: Vec<&RandomRow> = v.random.iter().filter(|r| r.pool == "bitmap").collect();
    if bitmap.is_empty() {
        return Vec::new();
    }
    let mut b = vec![h(3, "Figures 6, 7 and 8: random maps")];
    // Figure 6: allocated granules per map, at 16 pages as in the paper (else the first size).
    let six = bitmap
        .iter()
        .find(|r| r.pages == 16)
        .copied()
        .unwrap_or(bitmap[0]);
    let cap = v.plan.capacity_4k as f64;
    b.push(figure(
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
    ));
    // Figure 7: per map, time against transitions, for a few sizes.
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
    for r in &picks {
        b.push(figure(
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
        ));
    }
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

    // Figure 8.
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
    b.push(figure(
        "vmmr-fig8",
        "Figure 8: the random maps' minimum, maximum (the slowest map's median) and means at 40 % and 10 % (± 1 %) allocation, beside memcpy and the minimal and worst-case searches (4 KiB pages, scattered, warm caches).".into(),
        time_chart("VMMR, Figure 8: random maps against memcpy".into(), "message size (4 KiB pages)", series),
    ));
    let body: Vec<Vec<String>> = bitmap
        .iter()
        .map(|r| {
            let m = at(&sc, r.pages);
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
    b.push(table(
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
    ));
    let mut text = vec!["The paper (Figure 8): with the bitmap 40 % allocated or less VMMR beat memcpy at every size; the random maps' maximum stayed well below the worst case, but memcpy kept the edge over it from 2 to 32 pages.".to_string()];
    let cmp = |f: &dyn Fn(&RandomRow) -> Option<f64>| -> (usize, usize) {
        let mut n = 0;
        let mut wins = 0;
        for r in &bitmap {
            if let (Some(x), Some(m)) = (f(r), at(&sc, r.pages)) {
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
            at(&sc, r.pages)
                .and_then(|m| m.vmmr_ns.get("worst_case_search"))
                .is_some_and(|w| r.max_map_median_ns < *w)
        })
        .count();
    text.push(format!(
        "Here: at 40 % allocation VMMR beats memcpy at {w40} of {n40} sizes, the slowest map at {wmax} of {nmax}; the slowest map is below the worst-case search at {below_worst} of {} sizes. The maximum over every single iteration (in the table) is the paper's absolute maximum, and on this machine it is set by interruptions, not by the map.",
        bitmap.len()
    ));
    b.push(p(text.join(" ")));
    b
}

fn optimized(v: &VmmrSection) -> Vec<Block> {
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
    // Flatness over the maps.
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
    if !body.is_empty() {
        b.push(table(
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
        ));
    }
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
    b.push(p(text.join(" ")));
    b
}

fn against_paper(v: &VmmrSection) -> Vec<Block> {
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
    if !sc.is_empty() {
        let slow = |r: &&Row| {
            r.vmmr_ns
                .get("worst_case_search")
                .is_some_and(|w| *w > r.memcpy_ns)
        };
        let small: Vec<&&Row> = sc.iter().filter(|r| r.pages <= 64).collect();
        let up_to_64 = !small.is_empty() && small.iter().all(|r| slow(r));
        let beyond = sc.iter().filter(|r| r.pages > 64).any(slow);
        body.push(vec![
            "worst case slower than memcpy".into(),
            "1 to about 64 pages".into(),
            slower_sizes(&sc, "worst_case_search"),
            match (up_to_64, beyond) {
                (true, false) => "agrees".into(),
                (true, true) => "agrees to 64 pages; slower beyond too".into(),
                _ => "differs".into(),
            },
        ]);
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
    let mut why = Vec::new();
    if let Some(r) = big {
        if r.speedup < 1.0 {
            why.push(format!(
                "Why 4 KiB VMMR loses here: the paper's PTE allocation was a few stores into a hashed page table by a kernel that owned the machine, against a 601 copying about 22 MB/s, so each page moved saved most of a page copy. On Linux a page moves through the UFFDIO_MOVE system call, one call per scattered page, while this CPU copies a page in {:.0} ns even out of the caches. Remapping pays only where one call moves many pages: adjacent pages ({}), or 2 MiB pages, each moved as one page-table entry.",
                per_page(r, "memcpy").unwrap_or(f64::NAN),
                crossover_text(v, "4k", "adjacent", "warm").unwrap_or_else(|| "not measured".into()),
            ));
        }
    }
    if !why.is_empty() {
        b.push(p(why.join(" ")));
    }
    b
}
