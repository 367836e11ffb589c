//! Paper 003's checksum claims, measured: the optimized checksum against RFC 1071's loop, at
//! memory speed and beside its peers, and what it and eliding it gain end to end.

use crate::lab::claim::{Claim, Shown, Verdict, times};
use crate::lab::sequoia::checksum::render::{PAPER_ELIDED, PAPER_OPTIMIZED};
use crate::report::results::Results;
use crate::report::text::size;

/// Paper 003's checksum claims (none without its section).
pub fn claims(r: &Results) -> Vec<Claim> {
    let Some(s) = r.section::<super::Checksum>() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let fig6 = Shown::Figure("checksum-kernels");
    if let Some(v) = &s.verdict {
        let u = v.unrolled_over_reference;
        out.push(Claim {
            paper: "003",
            claim: "Wide, unrolled summing more than doubles the checksum's speed".into(),
            paper_value: "more than 2×".into(),
            measured: times(Some(u)),
            verdict: Verdict::of(u.is_finite().then_some(u > 2.0)),
            why: if u > 2.0 {
                "fewer loads and adds per byte".into()
            } else {
                "less than twice RFC 1071's loop".into()
            },
            shown: fig6.clone(),
        });
        let mem = v.of_read_bandwidth;
        out.push(Claim {
            paper: "003",
            claim: "zcio's target: the checksum at memory speed, twice its peers".into(),
            paper_value: "none (90 % of reads, 2× peers)".into(),
            measured: format!(
                "{:.0} % of reads, {:.2}× {} beyond {}",
                100.0 * mem,
                v.over_peer,
                v.fastest_peer,
                size(v.large_size)
            ),
            verdict: Verdict::of(Some(mem >= 0.9 && v.over_peer >= 2.0)),
            why: format!(
                "memory speed {}, twice the peers {}",
                if mem >= 0.9 { "met" } else { "not met" },
                if v.over_peer >= 2.0 { "met" } else { "not met" }
            ),
            shown: fig6,
        });
    }
    out.extend(datagram(s));
    out
}

/// Figure 7: the optimized and elided checksums end to end, at the largest datagram.
fn datagram(s: &super::measure::ChecksumSection) -> Option<Claim> {
    let big = s.datagram.iter().map(|d| d.size).max()?;
    let get = |variant: &str| {
        s.datagram
            .iter()
            .find(|d| d.size == big && d.variant == variant)
    };
    let (o, e) = (get("optimized")?, get("elided")?);
    let holds = o.over_naive > 1.0 && e.over_naive >= o.over_naive;
    Some(Claim {
        paper: "003",
        claim: "Optimizing, then eliding, the checksum raises throughput end to end".into(),
        paper_value: format!(
            "+{:.0} % and +{:.0} %",
            100.0 * PAPER_OPTIMIZED,
            100.0 * PAPER_ELIDED
        ),
        measured: format!(
            "{:+.0} % and {:+.0} % at {}",
            100.0 * (o.over_naive - 1.0),
            100.0 * (e.over_naive - 1.0),
            size(big)
        ),
        verdict: Verdict::of(Some(holds)),
        why: if holds {
            "each step gains throughput, as in the paper".into()
        } else if o.over_naive <= 1.0 {
            "the optimized checksum gains nothing end to end".into()
        } else {
            "eliding gains less than optimizing".into()
        },
        shown: Shown::Heading("Paper 003 — the Internet checksum"),
    })
}
