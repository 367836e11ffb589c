//! Paper 002's claims, measured: reassembly by remapping against memcpy, for short and long
//! messages, with 2 MiB granules, and on fragmented (random) maps.

use crate::lab::claim::{Claim, Shown, Verdict};
use crate::lab::vmmr::measure::VmmrSection;
use crate::lab::vmmr::render::{PAPER_SPEEDUP_WARM, at, pg, rows};
use crate::report::results::Results;

/// A speed-up (memcpy over VMMR) as the table writes it.
fn speedup(s: f64) -> String {
    if s >= 10.0 {
        format!("{s:.0}× faster")
    } else if s >= 1.0 {
        format!("{s:.1}× faster")
    } else {
        format!("{:.1}× slower", 1.0 / s)
    }
}

/// Why remapping did or did not beat memcpy.
fn why(s: f64) -> String {
    if s >= 1.0 {
        "moving the pages beats copying them".into()
    } else {
        "a move system call per page costs more than a copy".into()
    }
}

/// Paper 002's claims (none without its section).
pub fn claims(r: &Results) -> Vec<Claim> {
    let Some(v) = r.section::<super::Vmmr>() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let sc = rows(v, "4k", "scattered", "warm");
    let fig4 = Shown::Figure("vmmr-fig4-scattered");
    if let (Some(first), Some(last)) = (sc.first(), sc.last()) {
        for (x, paper, when) in [
            (last, PAPER_SPEEDUP_WARM.1, "long messages"),
            (first, PAPER_SPEEDUP_WARM.0, "short messages"),
        ] {
            out.push(Claim {
                paper: "002",
                claim: format!("Remapping scattered pages beats memcpy for {when}"),
                paper_value: format!(
                    "{paper:.0}× faster at {}",
                    pg(if when == "long messages" { 6144 } else { 1 })
                ),
                measured: format!("{} at {}", speedup(x.speedup), pg(x.pages)),
                verdict: Verdict::of(x.speedup.is_finite().then_some(x.speedup >= 1.0)),
                why: why(x.speedup),
                shown: fig4.clone(),
            });
        }
    }
    out.extend(huge(v));
    out.extend(random(v, &sc));
    out
}

/// Remapping 2 MiB granules: not in the paper, whose claim it extends.
fn huge(v: &VmmrSection) -> Option<Claim> {
    let hs = rows(v, "2m", "scattered", "warm");
    let x = at(&hs, crate::lab::vmmr::measure::paper_size("2m")).or(hs.last().copied())?;
    Some(Claim {
        paper: "002",
        claim: "Remapping beats memcpy with 2 MiB huge pages".into(),
        paper_value: "not measured (4 KiB pages)".into(),
        measured: format!(
            "{} at {}",
            speedup(x.speedup),
            crate::report::text::size(x.bytes)
        ),
        verdict: Verdict::of(x.speedup.is_finite().then_some(x.speedup >= 1.0)),
        why: if x.speedup >= 50.0 {
            "at least 50×: zcio's target".into()
        } else {
            format!("{}; below 50×: zcio's target", why(x.speedup))
        },
        shown: Shown::Figure("vmmr-2m"),
    })
}

/// Figure 8: the bitmap 40 % allocated, VMMR against memcpy at every size measured.
fn random(v: &VmmrSection, sc: &[&crate::lab::vmmr::measure::Row]) -> Option<Claim> {
    let judged: Vec<bool> = v
        .random
        .iter()
        .filter(|r| r.pool == "bitmap")
        .filter_map(|r| Some(r.mean_at_40_ns? < at(sc, r.pages)?.memcpy_ns))
        .collect();
    if judged.is_empty() {
        return None;
    }
    let wins = judged.iter().filter(|w| **w).count();
    // The search's share of a reassembly, on the map where it weighs most.
    let share = v
        .random
        .iter()
        .filter(|r| r.pool == "bitmap")
        .flat_map(|r| r.maps.iter())
        .map(|m| m.pool_ns / m.median_ns)
        .filter(|x| x.is_finite())
        .fold(0.0, f64::max);
    Some(Claim {
        paper: "002",
        claim: "On random maps (40 % allocated) remapping still beats memcpy".into(),
        paper_value: "at every size".into(),
        measured: format!("at {wins} of {} sizes", judged.len()),
        verdict: Verdict::of(Some(wins == judged.len())),
        why: if wins == judged.len() {
            "the bitmap search stays cheap".into()
        } else if share < 0.5 {
            "the moves, not the search, cost more than a copy".into()
        } else {
            "on fragmented maps the search weighs as much as the moves".into()
        },
        shown: Shown::Figure("vmmr-fig8"),
    })
}
