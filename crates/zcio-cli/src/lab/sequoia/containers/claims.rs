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
    // The machine's own shared memory policy; runs under one zcio set are named on their own.
    let over_set = |prefix: &str, set: bool| {
        f.rows
            .iter()
            .filter(|x| x.relays == first && x.frame == main && x.variant.starts_with(prefix))
            .filter(|x| x.shmem_override == set)
            .map(|x| x.over_read_write)
            .filter(|x| x.is_finite())
            .reduce(f64::max)
    };
    let over = |prefix: &str| over_set(prefix, false);
    let (Some(volatile), Some(sealed)) = (over("volatile"), over("containers")) else {
        return Vec::new();
    };
    let set = over_set("containers", true)
        .zip(f.rows.iter().find(|x| x.shmem_override))
        .map_or(String::new(), |(x, r)| {
            format!(
                " ({x:.2}× under shmem {})",
                r.shmem_policy.as_deref().unwrap_or("another policy")
            )
        });
    vec![Claim {
        paper: "003",
        claim: "Container shipping carries several times read/write's frames".into(),
        paper_value: "almost 5× (400 % more)".into(),
        measured: format!(
            "{volatile:.2}× volatile, {sealed:.2}× sealed{set}, {first} relay{}, {} frames",
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
