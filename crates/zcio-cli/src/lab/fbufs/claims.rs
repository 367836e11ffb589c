//! Paper 001's claims, measured: cached/volatile fbufs against copying and page remapping,
//! per page and in throughput (Table 1, Figure 3).

use crate::lab::claim::{Claim, Shown, Verdict, over, times};
use crate::lab::fbufs::measure::{Fit, Row};
use crate::report::results::Results;

/// The touch the paper's Table 1 measured: one word per page.
const TOUCH: &str = "word-per-page";
/// The paper's fastest variant.
const FBUFS: &str = "fbufs-cached-volatile";

fn per_page(fits: &[Fit], variant: &str) -> f64 {
    fits.iter()
        .find(|f| f.variant == variant && f.touch == TOUCH)
        .map_or(f64::NAN, |f| f.per_page_ns)
}

fn at(rows: &[Row], variant: &str, bytes: usize) -> f64 {
    rows.iter()
        .find(|x| x.variant == variant && x.touch == TOUCH && x.bytes == bytes)
        .map_or(f64::NAN, |x| x.ns_per_message)
}

/// Paper 001's claims (none without its section).
pub fn claims(r: &Results) -> Vec<Claim> {
    let Some(f) = r.section::<super::Fbufs>() else {
        return Vec::new();
    };
    let (rows, fits) = (&f.rows, &f.fits);
    let table1 = Shown::Heading("Paper 001 — Fbufs");
    let fb = per_page(fits, FBUFS);
    let copy = over(per_page(fits, "copy-unix-socket"), fb);
    let remap = over(per_page(fits, "page-remap-memfd"), fb);
    // A fit over too few sizes can give a per-page cost of zero or less: no ratio then.
    let unfit = if fb.is_finite() {
        format!("fbufs' fitted per-page cost is {fb:.0} ns")
    } else {
        "not both measured".into()
    };
    let big = if rows.iter().any(|x| x.bytes == 1 << 20) {
        1 << 20
    } else {
        rows.iter().map(|x| x.bytes).max().unwrap_or(0)
    };
    let thr = over(at(rows, "copy-unix-socket", big), at(rows, FBUFS, big));
    vec![
        Claim {
            paper: "001",
            claim: "Cached/volatile fbufs cost a small fraction of a copy per page".into(),
            paper_value: "1/105 (3 against 316 µs)".into(),
            measured: copy.map_or("not measured".into(), |c| format!("1/{c:.0}")),
            verdict: Verdict::of(copy.map(|c| c >= 20.0)),
            why: match copy {
                Some(c) if c >= 20.0 => "below 1/20 of a copy: zcio's target".into(),
                Some(_) => "above 1/20 of a copy: zcio's target".into(),
                None => unfit.clone(),
            },
            shown: table1.clone(),
        },
        Claim {
            paper: "001",
            claim: "Cached/volatile fbufs cost less per page than page remapping".into(),
            paper_value: "1/48 (3 against 144 µs)".into(),
            measured: remap.map_or("not measured".into(), |c| format!("1/{c:.1}")),
            verdict: Verdict::of(remap.map(|c| c > 1.0)),
            why: match remap {
                Some(c) if c > 1.0 => "no mapping per message".into(),
                Some(_) => "remapping costs no more per page".into(),
                None => unfit,
            },
            shown: table1,
        },
        Claim {
            paper: "001",
            claim: "Fbufs' throughput is far above a copy's (Figure 3)".into(),
            paper_value: "105× (10 922 against 104 Mb/s)".into(),
            measured: format!("{} at {}", times(thr), crate::report::text::size(big)),
            verdict: Verdict::of(thr.map(|t| t >= 10.0)),
            why: match thr {
                Some(t) if t >= 10.0 => "at least 10×: zcio's target".into(),
                Some(_) => "below 10×: zcio's target".into(),
                None => "not both measured".into(),
            },
            shown: Shown::Figure("fbufs-fig3-word-per-page"),
        },
    ]
}
