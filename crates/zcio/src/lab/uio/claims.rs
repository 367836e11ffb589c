//! Paper 004's claims, measured: N concurrent scans by user-level I/O against the kernel's
//! buffered reads (Figures 5, 7), and where the kernel variant's CPU goes (Figure 6).

use crate::lab::claim::{Claim, Shown, Verdict};
use crate::lab::uio::render::{max_n, row, target_row};
use crate::report::results::Results;

/// Paper 004's claims (none without its section).
pub fn claims(r: &Results) -> Vec<Claim> {
    let Some(u) = r.section::<super::Uio>() else {
        return Vec::new();
    };
    let n = max_n(u);
    let mut out = Vec::new();
    for cache in ["warm", "cold"] {
        if row(u, "kernel", cache, n).is_none() {
            continue;
        }
        // Warm is judged on the engine's pool on the layer (warm in the pool against warm in
        // the page cache); cold on the layer reading from the device.
        let layer = if cache == "warm" {
            target_row(u, n)
        } else {
            row(u, "uio", cache, n)
        };
        let x = layer.map(|l| l.over_kernel);
        let how = match layer.map(|l| l.variant.as_str()) {
            Some("uio_pool") => ", the engine's pool on the layer",
            _ => "",
        };
        out.push(Claim {
            paper: "004",
            claim: format!(
                "User-level I/O scans faster than kernel reads, tables {} the page cache",
                if cache == "warm" { "in" } else { "out of" }
            ),
            paper_value: "1.4×".into(),
            measured: x.map_or("not measured".into(), |x| {
                format!("{x:.2}× at {n} queries{how}")
            }),
            verdict: Verdict::of(x.filter(|x| x.is_finite()).map(|x| x >= 1.3)),
            why: match (x, &u.layer_unavailable) {
                (_, Some(w)) => w.clone(),
                (Some(x), None) if x >= 1.3 && how.is_empty() => {
                    "no copy, no system call per page".into()
                }
                (Some(x), None) if x >= 1.3 => {
                    "pages read in place from the pool: no copy, no request".into()
                }
                (Some(_), None) => "below 1.3×: zcio's target".into(),
                (None, None) => "the layer's variant did not run".into(),
            },
            shown: Shown::Figure(if cache == "warm" {
                "uio-scaling-warm"
            } else {
                "uio-scaling-cold"
            }),
        });
    }
    if let Some(b) = u
        .breakdown
        .iter()
        .find(|b| b.cache == "warm" && b.queries == n)
    {
        let (copy, calls) = (b.copy_s / b.cpu_s, b.syscalls_s / b.cpu_s);
        let holds = (copy.is_finite() && calls.is_finite()).then_some(copy > calls && calls < 0.1);
        out.push(Claim {
            paper: "004",
            claim: "Copying dominates the kernel's I/O CPU; system calls stay small".into(),
            paper_value: "copy the largest part, calls under 10 %".into(),
            measured: match holds {
                Some(_) => format!("copy {:.0} %, calls {:.0} %", 100.0 * copy, 100.0 * calls),
                None => "not measured".into(),
            },
            verdict: Verdict::of(holds),
            why: if holds.is_none() {
                "no CPU time measured".into()
            } else if holds == Some(true) {
                "the copies outweigh the calls".into()
            } else if copy <= calls {
                "the calls outweigh the copies".into()
            } else {
                "the calls above 10 %".into()
            },
            shown: Shown::Heading("Paper 004 — user-level I/O"),
        });
    }
    out
}
