//! Genie at 2 MiB (paper 000, Figures 3 and 4, Table 6, and its three conclusions) with the
//! application buffers at both ends in transparent huge pages: every semantics' page work per
//! PMD, beside the same semantics on 4 KiB pages. Measurement, data and prose of this
//! experiment live here.
//!
//! The paper's premise is that page-table work is cheap next to copying. At 4 KiB it no longer
//! is on present hardware; at 2 MiB one page-table entry maps 512 pages, and the premise holds
//! again. This experiment shows what that does to the paper's conclusions, granule by granule.

use crate::lab::genie::chart::{against_length, curves, distinct_lengths};
use crate::lab::genie::measure::{GenieResults, Modes, Plan, Point, Progress, Thresholds, sweep};
use crate::lab::genie::model::{self, Conclusion};
use crate::report::doc::Block;
use crate::report::plot::{Scale, Series, Style};
use crate::report::text::{figure, h, p, size, table, us};
use crate::transfer::{Res, TransferArgs};
use zcio_genie::stream::ModuleKind;
use zcio_genie::{InputBuffering, Semantics};

mod conclude;
#[cfg(test)]
mod tests;

pub use conclude::conclusions;

/// The contenders: every semantics with early demultiplexing and the VM paths from the first
/// granule up, and emulated copy with the calibrated thresholds (which must choose 2 MiB too).
fn contenders() -> Vec<(Semantics, InputBuffering, Thresholds)> {
    let mut cs: Vec<_> = Semantics::ALL
        .iter()
        .map(|s| (*s, InputBuffering::EarlyDemux, Thresholds::ZeroCopy))
        .collect();
    cs.push((
        Semantics::EmulatedCopy,
        InputBuffering::EarlyDemux,
        Thresholds::Calibrated,
    ));
    cs
}

/// The pooled schemes of Figures 6 and 7.
const POOLED: [InputBuffering; 2] = [
    InputBuffering::PooledAligned,
    InputBuffering::PooledUnaligned,
];

/// Lengths of the CPU-time series and the pooled schemes: the 2 MiB series' up to 16 MiB.
fn short_lengths(plan: &Plan) -> Vec<usize> {
    plan.huge_lengths
        .iter()
        .copied()
        .filter(|b| *b <= 16 << 20)
        .collect()
}

/// Progress units of [`measure`].
pub fn units(plan: &Plan) -> u64 {
    let short = short_lengths(plan).len();
    let n = Semantics::ALL.len();
    (plan.huge_rounds * (plan.huge_lengths.len() * (n + 2) + short * n * (1 + POOLED.len()))) as u64
}

/// Figures 3 (instrumented: Table 6 at 2 MiB) and 4 with huge-page buffers at both ends,
/// into `g.huge` and `g.huge_cpu`; where huge pages cannot be had, the reason into
/// `g.huge_unavailable` (every transfer would take the 4 KiB paths).
pub fn measure(plan: &Plan, g: &mut GenieResults, p: &dyn Progress) -> Res<()> {
    if let Some(why) = zcio_vm::huge::unavailable_reason() {
        g.huge_unavailable = Some(why);
        for _ in 0..units(plan) {
            p.inc();
        }
        return Ok(());
    }
    // A sweep of the memory network with huge-page buffers at both ends, at the plan's rounds
    // and counts; `tweak` sets the rest.
    let huge_sweep = |cs: &[(Semantics, InputBuffering, Thresholds)],
                      lengths: &[usize],
                      tweak: &dyn Fn(&mut TransferArgs),
                      what| {
        let tweak = |a: &mut TransferArgs| {
            a.huge = true;
            tweak(a);
        };
        let (rounds, count) = (plan.huge_rounds, plan.huge_count);
        sweep(
            cs,
            ModuleKind::Memnet,
            lengths,
            rounds,
            count,
            &tweak,
            p,
            what,
        )
    };
    let instrumented = |a: &mut TransferArgs| a.breakdown = true;
    let latency = huge_sweep(
        &contenders(),
        &plan.huge_lengths,
        &instrumented,
        "2 MiB latency",
    )?;
    // The control of emulated copy's wire time: emulated share reading into two buffers in
    // turn, each input into the pages of the message before last (as emulated copy's staging).
    let two_buffers = huge_sweep(
        &[(
            Semantics::EmulatedShare,
            InputBuffering::EarlyDemux,
            Thresholds::ZeroCopy,
        )],
        &plan.huge_lengths,
        &|a| {
            a.breakdown = true;
            a.receiver_buffers = 2;
        },
        "2 MiB two buffers",
    )?;
    // Figures 6 and 7: pooled input, the application's buffer on a 2 MiB boundary or not.
    let pooled: Vec<_> = POOLED
        .iter()
        .flat_map(|i| {
            Semantics::ALL
                .iter()
                .map(move |s| (*s, *i, Thresholds::ZeroCopy))
        })
        .collect();
    let mut latency = latency;
    latency.extend(huge_sweep(
        &pooled,
        &short_lengths(plan),
        &instrumented,
        "2 MiB pooled",
    )?);
    let cs: Vec<_> = Semantics::ALL
        .iter()
        .map(|s| (*s, InputBuffering::EarlyDemux, Thresholds::ZeroCopy))
        .collect();
    let cpu_lengths = short_lengths(plan);
    let cpu = huge_sweep(&cs, &cpu_lengths, &|a| a.no_spin = true, "2 MiB cpu")?;
    g.huge = latency;
    g.huge_cpu = cpu;
    g.huge_two_buffers = two_buffers;
    Ok(())
}

/// Latency of `s` (zero-copy thresholds, early demultiplexing) at `bytes` among `pts`.
fn lat(pts: &[Point], s: Semantics, bytes: usize) -> Option<f64> {
    lat_in(pts, s, InputBuffering::EarlyDemux, bytes)
}

/// The point of `s` with input buffering `i` (zero-copy thresholds) at `bytes` among `pts`.
fn point_at(pts: &[Point], s: Semantics, i: InputBuffering, bytes: usize) -> Option<&Point> {
    pts.iter().find(|p| {
        p.semantics == s && p.input == i && p.thresholds == Thresholds::ZeroCopy && p.bytes == bytes
    })
}

/// Latency of `s` with input buffering `i` (zero-copy thresholds) at `bytes` among `pts`.
fn lat_in(pts: &[Point], s: Semantics, i: InputBuffering, bytes: usize) -> Option<f64> {
    point_at(pts, s, i, bytes).map(|p| p.latency_ns)
}

/// Median over `p`'s runs of the per-message time of the primitives `which` selects (ns).
fn ops_ns(p: &Point, which: impl Fn(&str) -> bool) -> Option<f64> {
    let per_run: Vec<f64> = p
        .runs
        .iter()
        .filter(|r| !r.ops.is_empty())
        .map(|r| {
            r.ops
                .iter()
                .filter(|o| which(&o.op))
                .map(|o| o.median_ns * o.share_of_messages)
                .sum()
        })
        .collect();
    crate::report::fit::median(&per_run)
}

/// Where emulated copy's extra latency over emulated share goes at `bytes`, from the
/// primitives timed in the same runs: (the gap, the page work's share of it, the wire's).
/// The page work is every timed primitive but the queueing of page references and the input
/// access check, which both semantics make; the wire's part is the difference in the queueing
/// (`reference`), which waits for the receiver's copy out of the pipe.
fn ec_over_es_parts(pts: &[Point], bytes: usize) -> Option<(f64, f64, f64)> {
    let ec = point_at(
        pts,
        Semantics::EmulatedCopy,
        InputBuffering::EarlyDemux,
        bytes,
    )?;
    let es = point_at(
        pts,
        Semantics::EmulatedShare,
        InputBuffering::EarlyDemux,
        bytes,
    )?;
    let page = |o: &str| o != "reference" && o != "access-check";
    let wire = |o: &str| o == "reference";
    Some((
        ec.latency_ns - es.latency_ns,
        ops_ns(ec, page)? - ops_ns(es, page)?,
        ops_ns(ec, wire)? - ops_ns(es, wire)?,
    ))
}

/// The modes of `s`'s messages (zero-copy thresholds, early demultiplexing) at `bytes`.
fn modes(pts: &[Point], s: Semantics, bytes: usize) -> Option<Modes> {
    point_at(pts, s, InputBuffering::EarlyDemux, bytes).and_then(|p| p.modes)
}

/// The 4 KiB points (Figure 3's zero-copy early-demultiplexed runs) at the lengths the 2 MiB
/// series also has.
fn common_lengths(g: &GenieResults) -> Vec<usize> {
    let mut v: Vec<usize> = g
        .huge
        .iter()
        .map(|p| p.bytes)
        .filter(|b| lat(&g.latency, Semantics::EmulatedCopy, *b).is_some())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// One granule's answers to the paper's three questions at the lengths in `lengths`.
struct Answers {
    /// Smallest length from which emulated copy is faster than copy at every longer length.
    crossover: Option<usize>,
    /// Copy's latency over emulated copy's at the largest length.
    copy_over_ec: Option<f64>,
    /// Slowest over fastest non-copy semantics at the largest length, with their names.
    spread: Option<(f64, Semantics, Semantics)>,
    /// Emulated copy over emulated share, per length: the medians of all messages.
    ec_over_es: Vec<(usize, f64)>,
    /// The same over the fast modes' medians, with the slow shares of emulated copy and
    /// emulated share, where both fast modes hold enough messages.
    ec_over_es_fast: Vec<(usize, f64, f64, f64)>,
}

impl Answers {
    /// Whether the fast modes decide (every length has one), and the emulated copy over
    /// emulated share ratios that decide: the fast modes' where they do (the host's wake-ups
    /// and competing processes land on either semantics at random), else all messages'.
    fn deciding_ec_over_es(&self) -> (bool, Vec<f64>) {
        let fast = self.ec_over_es_fast.len() == self.ec_over_es.len();
        let ratios = if fast {
            self.ec_over_es_fast.iter().map(|x| x.1).collect()
        } else {
            self.ec_over_es.iter().map(|x| x.1).collect()
        };
        (fast, ratios)
    }
}

fn answers(pts: &[Point], lengths: &[usize]) -> Answers {
    let mut crossover = None;
    for &b in lengths.iter().rev() {
        match lat(pts, Semantics::Copy, b).zip(lat(pts, Semantics::EmulatedCopy, b)) {
            Some((c, e)) if c > e => crossover = Some(b),
            _ => break,
        }
    }
    let largest = lengths.last().copied();
    let copy_over_ec = largest
        .and_then(|b| Some(lat(pts, Semantics::Copy, b)? / lat(pts, Semantics::EmulatedCopy, b)?));
    let spread = largest.and_then(|b| {
        let v: Vec<(Semantics, f64)> = Semantics::ALL
            .iter()
            .filter(|s| **s != Semantics::Copy)
            .filter_map(|s| Some((*s, lat(pts, *s, b)?)))
            .collect();
        let lo = v.iter().min_by(|a, c| a.1.total_cmp(&c.1))?;
        let hi = v.iter().max_by(|a, c| a.1.total_cmp(&c.1))?;
        (v.len() >= 2).then_some((hi.1 / lo.1, lo.0, hi.0))
    });
    let ec_over_es = lengths
        .iter()
        .filter_map(|&b| {
            Some((
                b,
                lat(pts, Semantics::EmulatedCopy, b)? / lat(pts, Semantics::EmulatedShare, b)?,
            ))
        })
        .collect();
    let ec_over_es_fast = lengths
        .iter()
        .filter_map(|&b| {
            let ec = modes(pts, Semantics::EmulatedCopy, b)?;
            let es = modes(pts, Semantics::EmulatedShare, b)?;
            Some((b, ec.fast()? / es.fast()?, ec.slow_share, es.slow_share))
        })
        .collect();
    Answers {
        crossover,
        copy_over_ec,
        spread,
        ec_over_es,
        ec_over_es_fast,
    }
}

/// The 2 MiB series in three numbers, for the claims table: at the largest length, copy's
/// latency over emulated copy's and the non-copy semantics' spread; and emulated copy over
/// emulated share at its worst length (decided as the conclusions decide it).
pub(super) struct HugeSummary {
    /// The largest length measured.
    pub largest: usize,
    /// Copy over emulated copy there.
    pub copy_over_ec: Option<f64>,
    /// Slowest over fastest non-copy semantics there.
    pub spread: Option<f64>,
    /// Emulated copy over emulated share, the worst length.
    pub ec_over_es_worst: Option<f64>,
    /// Whether, at that length, the control (emulated share into two buffers in turn) loses at
    /// least half of emulated copy's extra latency: the staging's second set of pages.
    pub staging_explains: Option<bool>,
}

/// The 2 MiB series' summary (`None` when it did not run).
pub(super) fn summary(g: &GenieResults) -> Option<HugeSummary> {
    let lengths = distinct_lengths(&g.huge);
    let largest = *lengths.last()?;
    let a = answers(&g.huge, &lengths);
    let (fast, _) = a.deciding_ec_over_es();
    let per_length: Vec<(usize, f64)> = if fast {
        a.ec_over_es_fast.iter().map(|x| (x.0, x.1)).collect()
    } else {
        a.ec_over_es.clone()
    };
    let worst = per_length
        .into_iter()
        .reduce(|x, y| if y.1 > x.1 { y } else { x });
    let staging_explains = worst.and_then(|(b, _)| {
        let two = lat(&g.huge_two_buffers, Semantics::EmulatedShare, b)?;
        let es = lat(&g.huge, Semantics::EmulatedShare, b)?;
        let ec = lat(&g.huge, Semantics::EmulatedCopy, b)?;
        Some(ec > es && two - es >= 0.5 * (ec - es))
    });
    Some(HugeSummary {
        largest,
        copy_over_ec: a.copy_over_ec,
        spread: a.spread.map(|x| x.0),
        ec_over_es_worst: worst.map(|x| x.1),
        staging_explains,
    })
}

/// A table of one row per semantics and two columns per length: `heads(x)` names the columns
/// at length `x`, `cells(s, x)` fills them.
fn per_length_table(
    caption: &str,
    lengths: &[usize],
    heads: impl Fn(usize) -> [String; 2],
    cells: impl Fn(Semantics, usize) -> [String; 2],
) -> Block {
    let rows = Semantics::ALL
        .iter()
        .map(|s| {
            let mut row = vec![s.to_string()];
            for &x in lengths {
                row.extend(cells(*s, x));
            }
            row
        })
        .collect();
    let heads: Vec<String> = lengths.iter().flat_map(|x| heads(*x)).collect();
    let mut header = vec!["semantics"];
    header.extend(heads.iter().map(String::as_str));
    table(caption, &header, rows)
}

/// Median latency per semantics with input buffering `i` at each of `lengths` with huge-page
/// buffers, and the 4 KiB pages' latency over it where the 4 KiB series has the point.
fn latency_table(g: &GenieResults, i: InputBuffering, lengths: &[usize], caption: &str) -> Block {
    per_length_table(
        caption,
        lengths,
        |x| [format!("µs at {}", size(x)), "4 KiB / 2 MiB".into()],
        |s, x| {
            let hv = lat_in(&g.huge, s, i, x);
            [
                hv.map_or("-".into(), us),
                hv.zip(lat_in(&g.latency, s, i, x))
                    .map_or("-".into(), |(hv, bv)| format!("{:.2}", bv / hv)),
            ]
        },
    )
}

/// The fast mode's median latency and the share of slow messages per semantics and length
/// (early demultiplexing, zero-copy thresholds).
fn modes_table(pts: &[Point], lengths: &[usize]) -> Block {
    per_length_table(
        &format!(
            "The same messages split by the host's scheduling: the median of the fast mode (messages within {}× the 10th percentile of their point) and the share of slow messages, which waited for an idle CPU to wake or for another process; \"-\" where fewer than {} messages are fast",
            Modes::SLOW_FACTOR,
            Modes::MIN_FAST
        ),
        lengths,
        |x| [format!("fast µs at {}", size(x)), "slow".into()],
        |s, x| {
            let m = modes(pts, s, x);
            [
                m.and_then(|m| m.fast()).map_or("-".into(), us),
                m.map_or("-".into(), |m| {
                    format!("{:.0} % of {}", 100.0 * m.slow_share, m.messages)
                }),
            ]
        },
    )
}

/// The section: the figure of both granules, the table of medians, the CPU time, Table 6 at
/// 2 MiB, and what the runs' paths said.
pub fn blocks(g: &GenieResults) -> Vec<Block> {
    let mut b = Vec::new();
    if let Some(why) = &g.huge_unavailable {
        b.push(h(3, "Figures 3 and 4 at 2 MiB: huge-page buffers"));
        b.push(p(format!(
            "Not measured on this machine: {why}. Every transfer here takes the 4 KiB paths (Figure 3)."
        )));
        return b;
    }
    if g.huge.is_empty() {
        return b;
    }
    b.push(h(3, "Figures 3 and 4 at 2 MiB: huge-page buffers"));
    figure3(&mut b, g);
    pooled_figures(&mut b, g);
    if !g.huge_cpu.is_empty() {
        figure4(&mut b, g);
    }
    table6(&mut b, g);
    b
}

/// Figure 3 at 2 MiB: the granule the VM work used, latency on huge pages beside 4 KiB pages,
/// and the paths each semantics took.
fn figure3(b: &mut Vec<Block>, g: &GenieResults) {
    let granules: Vec<String> = {
        let mut v: Vec<String> = g.huge.iter().filter_map(|p| p.granule.clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    let ec = g
        .huge
        .iter()
        .find(|p| p.semantics == Semantics::EmulatedCopy && p.thresholds == Thresholds::Calibrated);
    b.push(p(format!(
        "The same experiment as Figure 3 with the application buffers at both ends in transparent huge pages (2 MiB-aligned, faulted in before the run): every semantics does its page work per PMD (TCOW, page swapping, referencing and region hiding on 2 MiB granules), and the move family's regions are huge pages that circulate through the region cache. Granule of the VM work as the runs reported it: {}. With the calibrated thresholds, emulated copy took: {}. Solid: huge pages; dashed: the same semantics on 4 KiB pages (Figure 3's runs) where both series have the length.",
        if granules.is_empty() { "none reported".into() } else { granules.join(", ") },
        ec.map_or("not measured".into(), |p| p.path.clone()),
    )));
    let huge_pts: Vec<&Point> = g
        .huge
        .iter()
        .filter(|p| p.thresholds == Thresholds::ZeroCopy && p.input == InputBuffering::EarlyDemux)
        .collect();
    let mut series = curves(&huge_pts, false, false);
    let common = common_lengths(g);
    for s in [
        Semantics::Copy,
        Semantics::EmulatedCopy,
        Semantics::EmulatedShare,
    ] {
        let pts: Vec<(f64, f64)> = common
            .iter()
            .filter_map(|&x| Some((x as f64, lat(&g.latency, s, x)? / 1e3)))
            .collect();
        if !pts.is_empty() {
            series.push(Series {
                color: Some(Semantics::ALL.iter().position(|x| *x == s).unwrap_or(0)),
                name: format!("{s} (4 KiB pages)"),
                points: pts,
                style: Style::Dashed,
                band: None,
            });
        }
    }
    b.push(figure(
        "fig3-huge",
        "End-to-end latency against length with huge-page buffers (solid) and on 4 KiB pages (dashed), early demultiplexing, VM paths from the first granule.".into(),
        against_length("Figure 3 at 2 MiB: latency, huge-page buffers".to_string(), "latency (µs)", Scale::Log, series),
    ));
    let lengths = distinct_lengths(huge_pts.iter().copied());
    b.push(latency_table(
        g,
        InputBuffering::EarlyDemux,
        &lengths,
        "Median latency with huge-page buffers, and the 4 KiB pages' latency over it where Figure 3 has the length",
    ));
    b.push(modes_table(&g.huge, &lengths));
}

/// Figures 6 and 7 at 2 MiB: pooled input, aligned and not, with huge-page buffers.
fn pooled_figures(b: &mut Vec<Block>, g: &GenieResults) {
    for (fig, i, what) in [
        (
            "6",
            InputBuffering::PooledAligned,
            "application-aligned pooled input (the application's buffer on a 2 MiB boundary, as the pool's huge pages are)",
        ),
        (
            "7",
            InputBuffering::PooledUnaligned,
            "unaligned pooled input (the application's buffer 512 bytes past a 2 MiB boundary: no huge page of the pool lines up with it)",
        ),
    ] {
        let pts: Vec<&Point> = g.huge.iter().filter(|p| p.input == i).collect();
        if pts.is_empty() {
            continue;
        }
        b.push(figure(
            &format!("fig{fig}-huge"),
            format!("End-to-end latency against length with huge-page buffers and {what}."),
            against_length(
                format!("Figure {fig} at 2 MiB: latency, huge-page buffers, pooled input"),
                "latency (µs)",
                Scale::Log,
                curves(&pts, false, false),
            ),
        ));
        let ls = distinct_lengths(pts.iter().copied());
        b.push(latency_table(
            g,
            i,
            &ls,
            &format!(
                "Figure {fig} at 2 MiB: median latency with huge-page buffers, and the 4 KiB pages' latency over it"
            ),
        ));
    }
}

/// Figure 4 at 2 MiB: CPU time per transfer with huge-page buffers.
fn figure4(b: &mut Vec<Block>, g: &GenieResults) {
    let pts: Vec<&Point> = g.huge_cpu.iter().collect();
    b.push(figure(
        "fig4-huge",
        "I/O processing time (CPU µs per transfer, both processes, waits that sleep) against length with huge-page buffers.".into(),
        against_length("Figure 4 at 2 MiB: I/O processing time, huge-page buffers".to_string(), "CPU time per transfer (µs)", Scale::Log, curves(&pts, true, false)),
    ));
    let largest = pts.iter().map(|x| x.bytes).max().unwrap_or(0);
    let cpu_at = |s: Semantics| {
        pts.iter()
            .find(|x| x.semantics == s && x.bytes == largest)
            .map(|x| x.cpu_ns)
    };
    let rows = Semantics::ALL
        .iter()
        .map(|s| {
            vec![
                s.to_string(),
                cpu_at(*s).map_or("-".into(), us),
                cpu_at(*s)
                    .zip(cpu_at(Semantics::Copy))
                    .map_or("-".into(), |(a, c)| format!("{:.2}", a / c)),
            ]
        })
        .collect();
    b.push(table(
        &format!(
            "CPU time per transfer at {} with huge-page buffers",
            size(largest)
        ),
        &["semantics", "CPU µs", "/ copy"],
        rows,
    ));
}

/// Table 6 at 2 MiB: the same fits over the huge-page runs.
fn table6(b: &mut Vec<Block>, g: &GenieResults) {
    let prims = model::primitives(&GenieResults {
        latency: g.huge.clone(),
        ..Default::default()
    });
    if !prims.is_empty() {
        b.push(h(3, "Table 6 at 2 MiB: the primitives on huge pages"));
        b.push(p("Each primitive timed in place in every message of the huge-page runs above and fitted by least squares against the length B, as Table 6 is on 4 KiB pages. The slope per 2 MiB is the cost of one PMD's worth of the operation; on 4 KiB pages the same bytes cost 512 page-table entries."));
        let per4k = model::primitives(g);
        let rows = prims
            .iter()
            .map(|pr| {
                let mb2 = (2u64 << 20) as f64;
                vec![
                    pr.op.clone(),
                    pr.phase.clone(),
                    format!("{} ns", model::fmt_line(&pr.line)),
                    us(pr.line.slope_ns_per_byte * mb2),
                    per4k
                        .iter()
                        .find(|q| q.op == pr.op && q.phase == pr.phase)
                        .map_or("-".into(), |q| us(q.line.slope_ns_per_byte * mb2)),
                ]
            })
            .collect();
        b.push(table(
            "Primitive operation costs on huge pages: a·B + b (ns), and the slope per 2 MiB at each granule",
            &[
                "operation",
                "phase",
                "2 MiB pages",
                "µs per 2 MiB (2 MiB pages)",
                "µs per 2 MiB (4 KiB pages)",
            ],
            rows,
        ));
    }
}
