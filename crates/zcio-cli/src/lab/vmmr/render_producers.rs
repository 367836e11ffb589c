//! Paper 002's report, continued: the adaptive policy calibrated on the whole remap cycle, and
//! messages filled by real producers (a file read with `O_DIRECT`, sockets) then reassembled by
//! each policy. Every statement is computed from the measurements.

use super::render::{color, pg, ratio, rows};
use crate::lab::vmmr::measure::{CalibrationRecord, ProducerRow, Row, VmmrSection};
use crate::report::doc::Block;
use crate::report::plot::{Chart, Scale, Series, Style};
use crate::report::text::{figure, h, p, table, us};

fn unit(granule: &str) -> &'static str {
    if granule == "2m" { "2 MiB" } else { "4 KiB" }
}

/// What a policy predicting from `c` chooses for row `r`: by the move-in alone, by the whole
/// cycle (if measured).
fn choices(c: &CalibrationRecord, r: &Row) -> (f64, Option<f64>, f64) {
    let calls = r.move_calls.max(1);
    (
        c.move_in_ns(r.granules, calls),
        c.cycle_ns(r.granules, calls),
        c.copy_ns(r.granules),
    )
}

fn path(remap: f64, copy: f64) -> &'static str {
    if remap >= copy { "copy" } else { "remap" }
}

/// The sweep's warm rows of a granule with what each measure predicts: (row, move-in, cycle,
/// copy).
fn predicted<'a>(v: &'a VmmrSection, c: &CalibrationRecord) -> Vec<(&'a Row, f64, f64, f64)> {
    ["scattered", "adjacent"]
        .into_iter()
        .flat_map(|l| rows(v, &c.granule, l, "warm"))
        .filter_map(|r| {
            let (m, cy, cp) = choices(c, r);
            Some((r, m, cy?, cp))
        })
        .collect()
}

/// The adaptive policy's two measures of a remap per granule, and what it chose.
pub(super) fn cycle(v: &VmmrSection) -> Vec<Block> {
    let cals: Vec<&CalibrationRecord> = v
        .plan
        .calibration
        .iter()
        .filter(|c| c.cycle_call_ns.is_some())
        .collect();
    if cals.is_empty() {
        return Vec::new();
    }
    let mut b = vec![h(3, "Adaptive: the whole remap cycle against a copy")];
    b.push(p("A remapped message's pages move into the remap space and, when the application frees it, back out into their slots, so that the producer can fill them again; a copied message leaves its slots holding their pages. The adaptive policy here chooses on the whole cycle (the pool's search, the move in, the move back out and the free), measured now with a reassembler that always remaps (one granule, and a run of adjacent granules, each reassembled and freed; the lowest of three medians), against the copy costs of the calibration. Predicted per message: a run of adjacent granules costs a call, each granule its share; the sweep's adaptive case (timed on the reassembly alone) chose by the whole cycle.".to_string()));
    let body = cals
        .iter()
        .map(|c| {
            let g = c.granule_bytes();
            let copy_at = |n: usize| us(c.copy_ns(n));
            vec![
                unit(&c.granule).to_string(),
                format!("{:.0}", c.move_call_ns),
                format!("{:.0}", c.move_granule_ns),
                format!("{:.0}", c.cycle_call_ns.unwrap_or(f64::NAN)),
                format!("{:.0}", c.cycle_granule_ns.unwrap_or(f64::NAN)),
                copy_at(1),
                c.copy_by_size.last().map_or("-".into(), |(n, x)| {
                    format!("{} at {}", us(x * g as f64), n / g)
                }),
            ]
        })
        .collect();
    b.push(table(
        "What remapping and copying cost per granule: moving in alone, and the whole cycle",
        &[
            "granule",
            "move in, per call ns",
            "move in, per granule ns",
            "whole cycle, per call ns",
            "whole cycle, per granule ns",
            "copy of 1 granule µs",
            "copy per granule µs at the largest size measured (granules)",
        ],
        body,
    ));
    for c in cals {
        let pr = predicted(v, c);
        if pr.is_empty() {
            continue;
        }
        let body = pr
            .iter()
            .map(|(r, m, cy, cp)| {
                vec![
                    r.pages.to_string(),
                    r.layout.clone(),
                    us(*m),
                    us(*cy),
                    us(*cp),
                    path(*m, *cp).into(),
                    path(*cy, *cp).into(),
                    r.adaptive_chose(),
                ]
            })
            .collect();
        b.push(table(
            &format!(
                "{} granules, warm caches: predicted µs per message and the path each measure picks",
                unit(&c.granule)
            ),
            &[
                "pages",
                "layout",
                "move in µs",
                "whole cycle µs",
                "copy µs",
                "by the move in",
                "by the whole cycle",
                "adaptive chose (measured)",
            ],
            body,
        ));
    }
    b.push(p(cycle_findings(v).join(" ")));
    b
}

/// Per granule: the cycle against the move-in, and where the two measures part.
fn cycle_findings(v: &VmmrSection) -> Vec<String> {
    v.plan
        .calibration
        .iter()
        .filter_map(|c| {
            let cy = c.cycle_granule_ns?;
            let pr = predicted(v, c);
            let differ: Vec<String> = pr
                .iter()
                .filter(|(_, m, cy, cp)| path(*m, *cp) != path(*cy, *cp))
                .map(|(r, ..)| format!("{} {}", pg(r.pages), r.layout))
                .collect();
            Some(format!(
                "{} granules: the whole cycle costs {:.0} ns a granule and {:.0} ns a run against {:.0} and {:.0} ns moving in alone ({} the move-in per granule); {}.",
                unit(&c.granule),
                cy,
                c.cycle_call_ns.unwrap_or(f64::NAN),
                c.move_granule_ns,
                c.move_call_ns,
                ratio(cy, c.move_granule_ns),
                if differ.is_empty() {
                    format!("at all {} sizes of the sweep both measures pick the same path", pr.len())
                } else {
                    format!(
                        "the move-in alone would remap where the whole cycle copies at {} of {} sizes ({})",
                        differ.len(),
                        pr.len(),
                        differ.join(", ")
                    )
                }
            ))
        })
        .collect()
}

/// The producers' rows of one producer and granule with numbers, by size then policy.
fn measured<'a>(v: &'a VmmrSection, producer: &str, granule: &str) -> Vec<&'a ProducerRow> {
    let mut r: Vec<&ProducerRow> = v
        .producers
        .iter()
        .filter(|r| r.producer == producer && r.granule == granule && r.refused.is_none())
        .collect();
    r.sort_by_key(|r| r.granules);
    r
}

fn producer_name(p: &str) -> &'static str {
    if p == "file" {
        "a file read with O_DIRECT"
    } else {
        "sockets"
    }
}

/// Messages from real producers: tables, a figure per producer and granule, findings.
pub(super) fn producers(v: &VmmrSection) -> Vec<Block> {
    if v.producers.is_empty() {
        return Vec::new();
    }
    let mut b = vec![h(3, "Messages from real producers: a file and sockets")];
    let iterations = v.producers.iter().map(|r| r.iterations).max().unwrap_or(0);
    let how = |p: &str| {
        v.producers
            .iter()
            .find(|r| r.producer == p)
            .map_or(String::new(), |r| r.how.clone())
    };
    b.push(p(format!(
        "In the sweeps above the store is filled by the CPU. Here the pages are filled as a device would fill them: by a file written once beforehand and read granule by granule into the store's slots, handed out in a shuffled order ({}), and by two connections whose writer threads send one message each at a time, received through an io_uring provided-buffer ring whose buffers are the store's slots, a granule from each connection in turn, so that the two messages interleave ({}). Each message is then reassembled by remapping, by copying and by the adaptive policy. Timed per message: the reassembly alone, and the whole read (or receive) and reassembly (a receive brings a message on each connection; its time is shared between the two). {} timed messages per size and policy after an untimed one; medians, the bars the fastest and slowest. Every message is checked at the receiver, untimed, against what was written: each 4 KiB page's stamp and the sum of its words.",
        how("file"),
        how("socket"),
        iterations
    )));
    for producer in ["file", "socket"] {
        if let Some(r) = v
            .producers
            .iter()
            .find(|r| r.producer == producer && r.refused.is_some())
        {
            b.push(p(format!(
                "{} could not be measured here: {}. Its rows carry that reason and no number.",
                producer_name(producer),
                r.refused.as_deref().unwrap_or_default()
            )));
        }
    }
    for producer in ["file", "socket"] {
        for granule in ["4k", "2m"] {
            let rs = measured(v, producer, granule);
            if rs.is_empty() {
                continue;
            }
            b.push(producer_figure(producer, granule, &rs));
            b.push(producer_table(producer, granule, &rs));
        }
    }
    b.push(p(producer_findings(v).join(" ")));
    b
}

/// A share as a percentage, with a decimal below 10 %.
fn percent(x: f64) -> String {
    if x < 0.1 {
        format!("{:.1}", x * 100.0)
    } else {
        format!("{:.0}", x * 100.0)
    }
}

fn policy_color(policy: &str) -> usize {
    match policy {
        "remap" => color("minimal_search"),
        "copy" => color("copy"),
        _ => color("adaptive"),
    }
}

fn producer_figure(producer: &str, granule: &str, rs: &[&ProducerRow]) -> Block {
    let mut series = Vec::new();
    for policy in super::producers::POLICIES {
        let pts: Vec<&&ProducerRow> = rs.iter().filter(|r| r.policy == policy).collect();
        for (what, style, get) in [
            (
                "reassembly",
                Style::Line,
                (|r: &ProducerRow| Some((r.reassemble_ns?, r.reassemble_spread_ns?)))
                    as fn(&ProducerRow) -> Option<(f64, [f64; 2])>,
            ),
            ("read and reassembly", Style::Dashed, |r: &ProducerRow| {
                Some((r.cycle_ns?, r.cycle_spread_ns?))
            }),
        ] {
            let got: Vec<(f64, f64, [f64; 2])> = pts
                .iter()
                .filter_map(|r| get(r).map(|(m, s)| (r.pages as f64, m, s)))
                .collect();
            if got.is_empty() {
                continue;
            }
            series.push(Series {
                name: format!("{policy}, {what}"),
                points: got.iter().map(|(x, m, _)| (*x, m / 1e3)).collect(),
                style,
                band: Some(
                    got.iter()
                        .map(|(x, _, [lo, hi])| (*x, lo / 1e3, hi / 1e3))
                        .collect(),
                ),
                color: Some(policy_color(policy)),
            });
        }
    }
    figure(
        &format!("vmmr-producer-{producer}-{granule}"),
        format!(
            "Messages from {}, {} granules: the reassembly alone (solid) and the whole read or receive and reassembly (dashed), by remapping, by copying and by the adaptive policy, against message size; medians, bars from the fastest to the slowest.",
            producer_name(producer),
            unit(granule)
        ),
        Chart {
            title: format!(
                "VMMR from a real producer: {}, {}",
                producer_name(producer),
                unit(granule)
            ),
            x_label: "message size (4 KiB pages)".into(),
            y_label: "time per message (µs)".into(),
            x_scale: Scale::Log,
            y_scale: Scale::Log,
            series,
        },
    )
}

fn producer_table(producer: &str, granule: &str, rs: &[&ProducerRow]) -> Block {
    let mut sizes: Vec<usize> = rs.iter().map(|r| r.granules).collect();
    sizes.dedup();
    let cell = |m: Option<f64>, s: Option<[f64; 2]>| match (m, s) {
        (Some(m), Some([lo, hi])) => format!("{} ({}–{})", us(m), us(lo), us(hi)),
        _ => "-".into(),
    };
    let body = sizes
        .iter()
        .map(|n| {
            let at: Vec<&&ProducerRow> = rs.iter().filter(|r| r.granules == *n).collect();
            let mut row = vec![
                at[0].pages.to_string(),
                at.iter().map(|r| r.runs).max().unwrap_or(0).to_string(),
            ];
            for policy in super::producers::POLICIES {
                let r = at.iter().find(|r| r.policy == policy);
                row.push(r.map_or("-".into(), |r| {
                    cell(r.reassemble_ns, r.reassemble_spread_ns)
                }));
                row.push(r.map_or("-".into(), |r| cell(r.cycle_ns, r.cycle_spread_ns)));
            }
            row.push(
                at.iter()
                    .find(|r| r.policy == "adaptive")
                    .map_or("-".into(), |r| {
                        format!("remap {} of {}", r.remapped, r.iterations)
                    }),
            );
            row
        })
        .collect();
    table(
        &format!(
            "Messages from {}, {} granules: µs per message, median (fastest–slowest)",
            producer_name(producer),
            unit(granule)
        ),
        &[
            "pages",
            "runs of adjacent slots",
            "remap: reassembly",
            "remap: with the read",
            "copy: reassembly",
            "copy: with the read",
            "adaptive: reassembly",
            "adaptive: with the read",
            "adaptive chose",
        ],
        body,
    )
}

/// What the producers' series show, and the whole cycle against the move-in.
pub(super) fn findings(v: &VmmrSection) -> Vec<String> {
    let mut out = producer_findings(v);
    out.extend(cycle_findings(v));
    out
}

/// What the producers' series show, per producer and granule, at the largest size measured.
fn producer_findings(v: &VmmrSection) -> Vec<String> {
    let mut out = Vec::new();
    for producer in ["file", "socket"] {
        for granule in ["4k", "2m"] {
            let rs = measured(v, producer, granule);
            let Some(n) = rs.last().map(|r| r.granules) else {
                continue;
            };
            let get = |policy: &str| rs.iter().find(|r| r.granules == n && r.policy == policy);
            let (Some(re), Some(cp)) = (get("remap"), get("copy")) else {
                continue;
            };
            let (Some(rr), Some(rc), Some(cr), Some(cc)) =
                (re.reassemble_ns, re.cycle_ns, cp.reassemble_ns, cp.cycle_ns)
            else {
                continue;
            };
            let mut s = format!(
                "VMMR from {} ({}), {} granules, {} in {} runs: remapping reassembled it in {} µs against {} µs copying ({} the copy's time); with the read or receive, {} µs against {} µs ({}), the reassembly {} % of the remapped cycle",
                producer_name(producer),
                re.how,
                unit(granule),
                pg(re.pages),
                re.runs,
                us(rr),
                us(cr),
                ratio(rr, cr),
                us(rc),
                us(cc),
                ratio(rc, cc),
                percent(rr / rc)
            );
            if let Some(a) = get("adaptive") {
                s.push_str(&format!(
                    "; the adaptive policy moved pages for {} of {} messages",
                    a.remapped, a.iterations
                ));
            }
            s.push('.');
            out.push(s);
        }
    }
    for (producer, r) in ["file", "socket"].iter().filter_map(|p| {
        v.producers
            .iter()
            .find(|r| r.producer == *p && r.refused.is_some())
            .map(|r| (p, r))
    }) {
        out.push(format!(
            "VMMR from {}: not measured here ({}).",
            producer_name(producer),
            r.refused.as_deref().unwrap_or_default()
        ));
    }
    out
}
