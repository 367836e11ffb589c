//! Paper 003's peer-to-peer I/O claims, measured: splice against a read/write loop, in
//! throughput, latency and the CPU it leaves to a concurrent task.

use crate::lab::claim::{Claim, Shown, Verdict};
use crate::lab::sequoia::splice::measure::Verdict as Pair;
use crate::report::results::Results;

/// The lowest and highest of `f` over the pairs.
fn range(pairs: &[Pair], f: fn(&Pair) -> f64) -> (f64, f64) {
    pairs
        .iter()
        .map(f)
        .fold((f64::INFINITY, 0.0), |(lo, hi), x| (lo.min(x), hi.max(x)))
}

/// Paper 003's peer-to-peer I/O claims (none without its section).
pub fn claims(r: &Results) -> Vec<Claim> {
    let Some(s) = r.section::<super::Splice>() else {
        return Vec::new();
    };
    if s.verdicts.is_empty() {
        return Vec::new();
    }
    let shown = Shown::Heading("Paper 003 — peer-to-peer I/O");
    let n = s.verdicts.len();
    let row = |claim: &str, paper: &str, f: fn(&Pair) -> f64, at_least: f64| {
        let (lo, hi) = range(&s.verdicts, f);
        let short = s.verdicts.iter().filter(|v| f(v) < at_least).count();
        Claim {
            paper: "003",
            claim: claim.into(),
            paper_value: paper.into(),
            measured: format!("{lo:.2}×–{hi:.2}× over {n} pairs"),
            verdict: Verdict::of(lo.is_finite().then_some(lo >= at_least)),
            why: if short == 0 {
                format!("at least {at_least}× on every pair")
            } else {
                format!("below {at_least}× on {short} of {n} pairs")
            },
            shown: shown.clone(),
        }
    };
    let mut availability = row(
        "Splice leaves more CPU to a concurrent task",
        "30 % more (1.3×)",
        |v| v.availability_ratio,
        1.3,
    );
    let paces: Vec<String> = s
        .verdicts
        .iter()
        .filter_map(|v| v.pace_fraction)
        .map(|f| format!("{:.0} %", 100.0 * f))
        .collect();
    if !paces.is_empty() {
        availability.measured = format!("{} at {} pace", availability.measured, paces.join(", "));
    }
    vec![
        row(
            "Splice moves data faster than a read/write loop",
            "2–3×",
            |v| v.throughput_ratio,
            2.0,
        ),
        row(
            "Splice's increments take less time than the loop's",
            "2–3×",
            |v| v.latency_ratio,
            2.0,
        ),
        availability,
    ]
}
