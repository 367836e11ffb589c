//! Paper 001's claims about its protocol-stack experiments (Figures 4-6), measured: the cost of
//! domain crossings with cached/volatile fbufs against the stack in one domain, and fbufs
//! against copying through the stack.

use super::measure::Row;
use super::{Contender, FbufsStack};
use crate::lab::claim::{Claim, Shown, Verdict, over, times};
use crate::report::results::Results;
use crate::report::text::size;

/// The touch the paper's receiver did: one word per page.
const TOUCH: &str = "word-per-page";
/// Where the report shows these numbers.
pub const HEADING: &str = "Paper 001 — UDP/IP through protection domains";

/// The median time per datagram of `c` at `bytes`, one word touched per page.
pub fn at(rows: &[Row], c: Contender, bytes: usize) -> f64 {
    rows.iter()
        .find(|x| x.variant == c.name() && x.touch == TOUCH && x.bytes == bytes)
        .map_or(f64::NAN, |x| x.ns_per_datagram)
}

/// The size to compare at: `want` if measured, else the largest measured size at least
/// `least`, else none.
pub fn size_at(rows: &[Row], want: usize, least: usize) -> Option<usize> {
    if rows.iter().any(|x| x.bytes == want && x.touch == TOUCH) {
        return Some(want);
    }
    rows.iter()
        .filter(|x| x.touch == TOUCH && x.bytes >= least)
        .map(|x| x.bytes)
        .max()
}

/// Fbufs' throughput over `other`'s at `bytes`: `other`'s time over fbufs'.
fn fbufs_over(rows: &[Row], other: Contender, bytes: Option<usize>) -> Option<f64> {
    let b = bytes?;
    over(at(rows, other, b), at(rows, Contender::Fbufs, b))
}

fn measured(r: Option<f64>, b: Option<usize>, pct: bool) -> String {
    match (r, b) {
        (Some(r), Some(b)) if pct => format!("{:.0}% at {}", 100.0 * r, size(b)),
        (Some(_), Some(b)) => format!("{} at {}", times(r), size(b)),
        _ => "not measured".into(),
    }
}

/// The claims (none without the section).
pub fn claims(r: &Results) -> Vec<Claim> {
    let Some(s) = r.section::<FbufsStack>() else {
        return Vec::new();
    };
    let rows = &s.rows;
    let shown = Shown::Heading(HEADING);
    let b64 = size_at(rows, 65536, 65536);
    let near64 = fbufs_over(rows, Contender::Single, b64);
    let b256 = size_at(rows, 1 << 20, 256 << 10);
    let large = fbufs_over(rows, Contender::Single, b256);
    let copies = fbufs_over(rows, Contender::Copies, b64);
    let small = size_at(rows, 4096, 0).filter(|b| *b <= 4096);
    // The smallest ratio of cached over uncached throughput, and its size.
    let uncached = rows
        .iter()
        .filter(|x| x.touch == TOUCH && x.variant == Contender::Fbufs.name())
        .filter_map(|x| {
            Some((
                over(at(rows, Contender::Uncached, x.bytes), x.ns_per_datagram)?,
                x.bytes,
            ))
        })
        .min_by(|a, b| a.0.total_cmp(&b.0));
    let latency = small.and_then(|b| {
        over(
            at(rows, Contender::Fbufs, b),
            at(rows, Contender::Single, b),
        )
    });
    vec![
        Claim {
            paper: "001",
            claim: "With cached fbufs, a stack across domains keeps over 90% of one domain's throughput for messages of 64 KB and more (Figure 4)".into(),
            paper_value: "more than 90% at 64 KB and up".into(),
            measured: measured(near64, b64, true),
            verdict: Verdict::of(near64.map(|x| x > 0.9)),
            why: match near64 {
                Some(x) if x > 0.9 => "the crossings cost little beside the stack's own work".into(),
                Some(_) => "the crossings' fixed cost still weighs at this size".into(),
                None => "fbufs and the single domain not both measured at 64 KiB or more".into(),
            },
            shown: shown.clone(),
        },
        Claim {
            paper: "001",
            claim: "With cached/volatile fbufs, domain crossings have virtually no effect on throughput for large messages (Figure 5)".into(),
            paper_value: "no visible effect above 256 KB".into(),
            measured: measured(large, b256, true),
            verdict: Verdict::of(large.map(|x| x > 0.9)),
            why: match large {
                Some(x) if x > 0.9 => "within 10% of the single domain".into(),
                Some(_) => "more than 10% below the single domain".into(),
                None => "no size of 256 KiB or more measured".into(),
            },
            shown: shown.clone(),
        },
        Claim {
            paper: "001",
            claim: "For small messages the cross-domain latency dominates: the single domain is faster at 4 KB (Figure 4)".into(),
            paper_value: "the single domain's peak at 4 KB is absent with domains".into(),
            measured: latency.map_or("not measured".into(), |x| format!("crossings {} slower at {}", times(Some(x)), size(small.unwrap_or(0)))),
            verdict: Verdict::of(latency.map(|x| x > 1.0)),
            why: match latency {
                Some(x) if x > 1.0 => "the crossings' fixed cost weighs on a small datagram".into(),
                Some(_) => "the crossings add nothing measurable at this size".into(),
                None => "no size of 4 KiB or less measured".into(),
            },
            shown: shown.clone(),
        },
        Claim {
            paper: "001",
            claim: "Through the stack, fbufs carry datagrams across domains far faster than copying them".into(),
            paper_value: "Table 1: 105× per page (copy 104 Mb/s against 10 922 Mb/s)".into(),
            measured: measured(copies, b64, false),
            verdict: Verdict::of(copies.map(|x| x >= 10.0)),
            why: match copies {
                Some(x) if x >= 10.0 => "at least 10× at 64 KiB: zcio's target".into(),
                Some(_) => "below 10× at 64 KiB: zcio's target (the section says where the time goes)".into(),
                None => "fbufs and copies not both measured at 64 KiB or more".into(),
            },
            shown: Shown::Figure("fbufs-stack-fig4-word-per-page"),
        },
        Claim {
            paper: "001",
            claim: "Cached fbufs more than double uncached fbufs' throughput through the stack, at every message size (Figure 4)".into(),
            paper_value: "more than 2× at every size".into(),
            measured: uncached.map_or("not measured".into(), |(x, b)| format!("{} at least (at {})", times(Some(x)), size(b))),
            verdict: Verdict::of(uncached.map(|(x, _)| x > 2.0)),
            why: match uncached {
                Some((x, _)) if x > 2.0 => "mapping each fbuf per datagram costs more than the rest".into(),
                Some(_) => "below 2× at that size: mapping per datagram weighs less here against the rest".into(),
                None => "cached and uncached fbufs not both measured".into(),
            },
            shown,
        },
    ]
}
