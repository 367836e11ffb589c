//! Paper 000's claims, measured: emulated copy close to the other non-copy semantics and ahead
//! of copy at long messages, the non-copy semantics clustered, copy's CPU cost, and the
//! breakdown model's accuracy; and the latency claims again with 2 MiB pages.

use crate::lab::claim::{Claim, Shown, Verdict, over, times, times_near};
use crate::lab::genie::measure::{GenieResults, Point, Thresholds};
use crate::report::results::Results;
use crate::report::text::size;
use zcio_genie::{InputBuffering, Semantics};

/// Where the conclusions are tested.
const CONCLUSIONS: Shown = Shown::Heading("The paper's conclusions, tested here");

/// An early-demultiplexing point of `s` at `bytes` among `points`.
fn point(points: &[Point], s: Semantics, bytes: usize) -> Option<&Point> {
    points
        .iter()
        .find(|p| p.semantics == s && p.input == InputBuffering::EarlyDemux && p.bytes == bytes)
}

/// The zero-copy latency (ns) of `s` at `bytes`, early demultiplexing (Figure 3's VM paths).
fn lat(g: &GenieResults, s: Semantics, bytes: usize) -> Option<f64> {
    g.latency
        .iter()
        .filter(|p| p.thresholds == Thresholds::ZeroCopy)
        .find(|p| p.semantics == s && p.input == InputBuffering::EarlyDemux && p.bytes == bytes)
        .map(|p| p.latency_ns)
}

/// The longest message measured on the VM paths.
fn longest(g: &GenieResults) -> Option<usize> {
    g.latency
        .iter()
        .filter(|p| p.thresholds == Thresholds::ZeroCopy)
        .map(|p| p.bytes)
        .max()
}

/// Paper 000's claims (none without its section).
pub fn claims(r: &Results) -> Vec<Claim> {
    let Some(g) = r.genie() else {
        return Vec::new();
    };
    let res = &g.results;
    let mut out = Vec::new();
    if let Some(b) = longest(res) {
        out.extend(latency_claims(res, b));
    }
    out.extend(cpu_claim(res));
    out.extend(huge_claims(res));
    if !g.model.estimates.is_empty() {
        let abs: Vec<f64> = g
            .model
            .estimates
            .iter()
            .map(|e| e.error_median.abs())
            .collect();
        let err = crate::report::fit::median(&abs).unwrap_or(f64::NAN);
        out.push(Claim {
            paper: "000",
            claim: "The breakdown model (Table 9) estimates latency closely".into(),
            paper_value: "within a few %".into(),
            measured: format!("within {:.0} % (median)", err * 100.0),
            verdict: Verdict::of(err.is_finite().then_some(err <= 0.05)),
            why: if err <= 0.05 {
                "the primitives add up to the whole".into()
            } else {
                "the primitives, timed one by one, do not add up to the whole".into()
            },
            shown: Shown::Heading("Table 9: estimated against actual latency"),
        });
    }
    out
}

/// The latency claims at the longest message `b`.
fn latency_claims(g: &GenieResults, b: usize) -> Vec<Claim> {
    let at = format!("at {}", size(b));
    let ec_es = over(
        lat(g, Semantics::EmulatedCopy, b).unwrap_or(f64::NAN),
        lat(g, Semantics::EmulatedShare, b).unwrap_or(f64::NAN),
    );
    let copy_ec = over(
        lat(g, Semantics::Copy, b).unwrap_or(f64::NAN),
        lat(g, Semantics::EmulatedCopy, b).unwrap_or(f64::NAN),
    );
    let others: Vec<f64> = Semantics::ALL
        .iter()
        .filter(|s| **s != Semantics::Copy)
        .filter_map(|s| lat(g, *s, b))
        .collect();
    let lo = others.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = others.iter().copied().fold(0.0, f64::max);
    let spread = (!others.is_empty()).then(|| hi / lo);
    let copy_slowest = lat(g, Semantics::Copy, b).map(|c| c > hi);
    vec![
        Claim {
            paper: "000",
            claim: "Emulated copy performs close to emulated share".into(),
            paper_value: "1.04× at 60 KB".into(),
            measured: format!("{} {at}", times(ec_es)),
            verdict: Verdict::of(ec_es.map(|r| r < 1.25)),
            why: match ec_es {
                Some(r) if r < 1.25 => "at most 25 % slower than emulated share".into(),
                Some(_) => "more than 25 % slower than emulated share".into(),
                None => "not both measured".into(),
            },
            shown: CONCLUSIONS,
        },
        Claim {
            paper: "000",
            claim: "Copy is sharply slower than emulated copy at long messages".into(),
            paper_value: "1.6× at 60 KB".into(),
            measured: format!("{} {at}", times(copy_ec)),
            verdict: Verdict::of(copy_ec.map(|r| r > 1.2)),
            why: match copy_ec {
                Some(r) if r > 1.2 => "copying costs more than the VM work that avoids it".into(),
                Some(_) => "copying costs about as much as the VM work".into(),
                None => "not both measured".into(),
            },
            shown: CONCLUSIONS,
        },
        Claim {
            paper: "000",
            claim: "The seven non-copy semantics cluster, copy apart".into(),
            paper_value: "within 1.05× at 60 KB".into(),
            measured: format!("within {} {at}", times(spread)),
            verdict: Verdict::of(spread.map(|s| s < 1.5 && copy_slowest != Some(false))),
            why: match (spread, copy_slowest) {
                (Some(s), Some(false)) if s < 1.5 => {
                    "clustered, but copy is not the slowest".into()
                }
                (Some(s), _) if s < 1.5 => "their latencies lie within 1.5×".into(),
                (Some(_), _) => "more than 1.5× apart".into(),
                (None, _) => "not measured".into(),
            },
            shown: CONCLUSIONS,
        },
    ]
}

/// Figure 4: copy's CPU time against emulated copy's, at the longest message measured.
fn cpu_claim(g: &GenieResults) -> Option<Claim> {
    let b = g
        .cpu
        .iter()
        .filter(|p| p.semantics == Semantics::Copy && p.input == InputBuffering::EarlyDemux)
        .map(|p| p.bytes)
        .max()?;
    let r = over(
        point(&g.cpu, Semantics::Copy, b)?.cpu_ns,
        point(&g.cpu, Semantics::EmulatedCopy, b)?.cpu_ns,
    );
    Some(Claim {
        paper: "000",
        claim: "Copy costs more CPU per transfer than emulated copy (Figure 4)".into(),
        paper_value: "3.9× at 60 KB (3224 against 825 µs)".into(),
        measured: format!("{} at {}", times(r), size(b)),
        verdict: Verdict::of(r.map(|r| r > 1.0)),
        why: match r {
            Some(r) if r > 1.0 => "copying is the larger CPU cost".into(),
            Some(_) => "emulated copy's VM operations take more CPU than the copies".into(),
            None => "not measured".into(),
        },
        shown: Shown::Heading("Figure 4: I/O processing time"),
    })
}

/// Where the 2 MiB series is shown.
const HUGE: Shown = Shown::Heading("Figures 3 and 4 at 2 MiB: huge-page buffers");

/// The paper's latency claims again with 2 MiB pages, zcio's answer to page-table work that
/// costs more than copying 4 KiB (none without the series).
fn huge_claims(g: &GenieResults) -> Vec<Claim> {
    let Some(h) = crate::lab::genie::huge::summary(g) else {
        return Vec::new();
    };
    let at = format!("at {}", size(h.largest));
    vec![
        Claim {
            paper: "000",
            claim: "With 2 MiB pages: emulated copy performs close to emulated share".into(),
            paper_value: "1.04× at 60 KB".into(),
            measured: format!("{} at worst", times_near(h.ec_over_es_worst, 1.1)),
            verdict: Verdict::of(h.ec_over_es_worst.map(|r| r <= 1.1)),
            why: match h.ec_over_es_worst {
                Some(r) if r <= 1.1 => "within 1.1× at every length: zcio's target".into(),
                Some(_) if h.staging_explains == Some(true) => "more than 1.1× at some length: zcio's target missed; emulated share into two buffers in turn loses half of it or more, so that much is the staging's second set of pages".into(),
                Some(_) => "more than 1.1× at some length: zcio's target missed".into(),
                None => "not both measured".into(),
            },
            shown: HUGE,
        },
        Claim {
            paper: "000",
            claim: "With 2 MiB pages: copy is sharply slower than emulated copy".into(),
            paper_value: "1.6× at 60 KB".into(),
            measured: format!("{} {at}", times_near(h.copy_over_ec, 1.2)),
            verdict: Verdict::of(h.copy_over_ec.map(|r| r > 1.2)),
            why: match h.copy_over_ec {
                Some(r) if r > 1.2 => "moving whole huge pages costs less than copying".into(),
                Some(_) => "copying costs about as much as the VM work".into(),
                None => "not both measured".into(),
            },
            shown: HUGE,
        },
        Claim {
            paper: "000",
            claim: "With 2 MiB pages: the non-copy semantics cluster".into(),
            paper_value: "within 1.05× at 60 KB".into(),
            measured: format!("within {} {at}", times_near(h.spread, 1.3)),
            verdict: Verdict::of(h.spread.map(|s| s < 1.3)),
            why: match h.spread {
                Some(s) if s < 1.3 => "their latencies lie within 1.3×".into(),
                Some(_) => "more than 1.3× apart".into(),
                None => "not measured".into(),
            },
            shown: HUGE,
        },
    ]
}
