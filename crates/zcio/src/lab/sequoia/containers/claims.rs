//! Paper 003's container-shipping claim, measured: frames through relay processes by
//! containers against read/write (Figure 4).

use crate::lab::claim::{Claim, Shown, Verdict};
use crate::report::results::Results;

/// Paper 003's container-shipping claim (none without its section).
pub fn claims(r: &Results) -> Vec<Claim> {
    let Some(f) = r.section::<super::Containers>() else {
        return Vec::new();
    };
    let Some((first, main)) = f.rows.first().map(|x| (x.relays, x.frame)) else {
        return Vec::new();
    };
    let over = |prefix: &str| {
        f.rows
            .iter()
            .filter(|x| x.relays == first && x.frame == main && x.variant.starts_with(prefix))
            .map(|x| x.over_read_write)
            .filter(|x| x.is_finite())
            .reduce(f64::max)
    };
    let (Some(volatile), Some(sealed)) = (over("volatile"), over("containers")) else {
        return Vec::new();
    };
    vec![Claim {
        paper: "003",
        claim: "Container shipping carries several times read/write's frames".into(),
        paper_value: "almost 5× (400 % more)".into(),
        measured: format!(
            "{volatile:.2}× volatile, {sealed:.2}× sealed, {first} relay{}, {} frames",
            if first == 1 { "" } else { "s" },
            main.name()
        ),
        verdict: Verdict::of(Some(volatile.max(sealed) >= 4.0)),
        why: if volatile.max(sealed) >= 4.0 {
            "no copy per hop, no new mapping per frame".into()
        } else {
            "below 4×: zcio's target".into()
        },
        shown: Shown::Figure("frames"),
    }]
}
