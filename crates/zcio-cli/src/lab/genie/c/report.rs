//! The C bench's part of the report's Genie section: what is measured, the table, a figure,
//! and sentences made from this run's numbers only.

use super::{CSection, Row, TARGET_FROM, TARGET_PCT};
use crate::lab::genie::chart::against_length;
use crate::lab::genie::measure::GenieResults;
use crate::report::doc::Block;
use crate::report::plot::{Scale, Series, Style};
use crate::report::text::{figure, h, p, size, table};
use std::fmt::Write as _;

fn mibs(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{x:.0}"))
}

fn spread(x: Option<[f64; 2]>) -> String {
    x.map_or("-".into(), |[a, b]| format!("{a:.0}–{b:.0}"))
}

/// `yes`, or why not.
fn status(r: &Row) -> String {
    match (&r.error, r.verified) {
        (Some(e), _) => format!("failed: {e}"),
        (None, true) => "yes".into(),
        (None, false) => format!("no: {} round(s) ran", r.rounds),
    }
}

/// How the run was set up, in a sentence.
fn setup(s: &CSection) -> String {
    format!(
        "Medians over {} round{}, a fresh pair of processes each, spread lowest–highest round; {}; compiler: {}.",
        s.plan.rounds,
        if s.plan.rounds == 1 { "" } else { "s" },
        match s.cpus {
            Some([r, w]) => format!("receiver on CPU {r}, sender on CPU {w}"),
            None => "processes not pinned (fewer than two CPUs allowed)".into(),
        },
        s.cc.as_deref().unwrap_or("?")
    )
}

/// The bench's table as text, for `zcio bench c`.
pub fn text_table(s: &CSection) -> String {
    let mut o = String::new();
    if let Some(why) = &s.unavailable {
        let _ = writeln!(o, "Not measured: {why}.");
        return o;
    }
    let _ = writeln!(
        o,
        "A channel's throughput from C (bench.c through libzcio_c) and from Rust (the same through the Rust API), two processes, emulated copy, every byte checked outside the clock. {}",
        setup(s)
    );
    let _ = writeln!(
        o,
        "{:>8} {:<5} {:>9} {:>13} {:>9}  verified",
        "size", "side", "MiB/s", "(spread)", "messages"
    );
    for r in &s.rows {
        let _ = writeln!(
            o,
            "{:>8} {:<5} {:>9} {:>13} {:>9}  {}",
            size(r.bytes),
            r.contender,
            mibs(r.mib_s),
            spread(r.mib_s_spread),
            r.messages,
            status(r)
        );
    }
    for t in target_sentences(s) {
        let _ = writeln!(o, "{t}");
    }
    o
}

/// The finding that heads Genie's section, if the C bench ran.
pub fn finding(g: &GenieResults) -> Option<String> {
    let s = g.c.as_ref()?;
    if let Some(why) = &s.unavailable {
        return Some(format!("C (zcio bench c): not measured here: {why}."));
    }
    Some(format!(
        "C (zcio bench c): {}",
        target_sentences(s).join(" ")
    ))
}

/// The section's blocks, if the C bench ran.
pub fn blocks(g: &GenieResults) -> Vec<Block> {
    let Some(s) = g.c.as_ref() else {
        return Vec::new();
    };
    let mut b = vec![h(
        3,
        "From C: a channel's throughput through libzcio_c against the Rust API",
    )];
    if let Some(why) = &s.unavailable {
        b.push(p(format!(
            "Not measured in this run: {why}. No rows are recorded."
        )));
        return b;
    }
    b.push(p(format!(
        "Two processes meet by a name; the sender sends messages of the size listed under emulated copy, each from a page-aligned buffer of its own (zcio_alloc in C, AppBuffer::for_message in Rust: 2 MiB pages from 2 MiB), the receiver receives each into a buffer of its own. c: crates/zcio-c/c/bench.c, compiled in this run with cc -O2 against zcio.h and the libzcio_c.so this build made, calling zcio_channel_send and zcio_channel_recv. rust: the zcio executable itself (zcio bench c --peer), the same protocol through Channel::send and Channel::recv, with the waits the C interface sets before each of its calls set before each call (interruptible by a signal, the call's timeout: 30 s for a receive, none for a send), so that the two differ by the C interface alone (its handle checks, lock, panic guard and status). Both sides hold a ring of buffers (256 MiB at most): the sender writes a batch of messages into its ring (each message's bytes differ from word to word and from message to message) and sends it; the receiver receives the batch into its ring, its clock running from the end of the batch's first message to the end of its last, then checks every byte of the batch against what was sent, outside the clock, and sends a one-byte go-ahead for the next. Throughput: the batches' messages after their first over their clocked time. A run whose check fails is a failure. Each run is a fresh pair of processes; rounds interleave C and Rust, which goes first alternating; both pinned alike. {} Target: C's throughput within {TARGET_PCT} % of Rust's from {} up, read as C at least {:.2}× Rust's (C faster meets it).",
        setup(s),
        size(TARGET_FROM),
        1.0 - TARGET_PCT / 100.0
    )));
    let rows = s
        .rows
        .iter()
        .map(|r| {
            vec![
                size(r.bytes),
                r.contender.clone(),
                format!("{} ({})", mibs(r.mib_s), spread(r.mib_s_spread)),
                r.messages.to_string(),
                s.ratios
                    .iter()
                    .find(|q| q.bytes == r.bytes && r.contender == "c")
                    .map_or("-".into(), |q| format!("{:.3}", q.c_over_rust)),
                status(r),
            ]
        })
        .collect();
    b.push(table(
        "A channel's throughput from C and from Rust, two processes, emulated copy, every byte checked",
        &[
            "size",
            "side",
            "MiB/s (spread)",
            "messages a run",
            "C / Rust",
            "verified",
        ],
        rows,
    ));
    b.push(figure(
        "c-throughput",
        "A channel's throughput from C (bench.c through libzcio_c) and from Rust (the same through the Rust API) against the message size, both axes logarithmic; the bars are the lowest–highest round.".into(),
        against_length(
            "From C: a channel's throughput against the Rust API's".into(),
            "throughput (MiB/s)",
            Scale::Log,
            series(s),
        ),
    ));
    for t in target_sentences(s) {
        b.push(p(t));
    }
    b
}

/// One throughput curve per side.
fn series(s: &CSection) -> Vec<Series> {
    super::CONTENDERS
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let mut pts: Vec<&Row> = s
                .rows
                .iter()
                .filter(|r| r.contender == *c && r.mib_s.is_some())
                .collect();
            if pts.is_empty() {
                return None;
            }
            pts.sort_by_key(|r| r.bytes);
            Some(Series {
                name: c.to_string(),
                points: pts
                    .iter()
                    .map(|r| (r.bytes as f64, r.mib_s.unwrap_or(0.0)))
                    .collect(),
                style: if i == 0 { Style::Line } else { Style::Dashed },
                band: Some(
                    pts.iter()
                        .filter_map(|r| {
                            let [lo, hi] = r.mib_s_spread?;
                            Some((r.bytes as f64, lo, hi))
                        })
                        .collect(),
                ),
                color: Some(i),
            })
        })
        .collect()
}

/// The sentences on the ratio and the target, from this run's rows.
pub fn target_sentences(s: &CSection) -> Vec<String> {
    let mut out = Vec::new();
    let floor = 1.0 - TARGET_PCT / 100.0;
    let parts: Vec<String> = s
        .ratios
        .iter()
        .map(|q| {
            let (c, r) = (
                s.row("c", q.bytes).and_then(|r| r.mib_s).unwrap_or(0.0),
                s.row("rust", q.bytes).and_then(|r| r.mib_s).unwrap_or(0.0),
            );
            format!(
                "{:.3}× at {} ({c:.0} MiB/s against {r:.0} MiB/s, {:+.1} %; the rounds' spreads {})",
                q.c_over_rust,
                size(q.bytes),
                (q.c_over_rust - 1.0) * 100.0,
                if q.spreads_overlap {
                    "overlap"
                } else {
                    "do not overlap"
                }
            )
        })
        .collect();
    if parts.is_empty() {
        out.push(
            "C over Rust: not measured in this run (no size where both sides ran verified).".into(),
        );
    } else {
        out.push(format!(
            "C's throughput over the Rust API's (medians): {}.",
            parts.join("; ")
        ));
    }
    let judged: Vec<_> = s.ratios.iter().filter(|q| q.target_met.is_some()).collect();
    let missing: Vec<String> = s
        .plan
        .sizes
        .iter()
        .filter(|b| **b >= TARGET_FROM && !s.ratios.iter().any(|q| q.bytes == **b))
        .map(|b| size(*b))
        .collect();
    if judged.is_empty() {
        out.push(format!(
            "Target (C within {TARGET_PCT} % of Rust's throughput from {} up): not judged in this run.",
            size(TARGET_FROM)
        ));
    } else {
        let met: Vec<String> = judged
            .iter()
            .filter(|q| q.target_met == Some(true))
            .map(|q| size(q.bytes))
            .collect();
        let missed: Vec<String> = judged
            .iter()
            .filter(|q| q.target_met == Some(false))
            .map(|q| {
                format!(
                    "{} (short by {:.1} %)",
                    size(q.bytes),
                    (floor - q.c_over_rust) * 100.0
                )
            })
            .collect();
        out.push(format!(
            "Target (C at least {floor:.2}× Rust's throughput from {} up): {}{}.",
            size(TARGET_FROM),
            if missed.is_empty() {
                format!("met at every size measured ({})", met.join(", "))
            } else if met.is_empty() {
                format!("MISSED at every size measured: {}", missed.join(", "))
            } else {
                format!("met at {}; MISSED at {}", met.join(", "), missed.join(", "))
            },
            if missing.is_empty() {
                String::new()
            } else {
                format!("; not judged at {} (a side failed)", missing.join(", "))
            }
        ));
    }
    let failed = s.failures();
    if !failed.is_empty() {
        out.push(format!("Failed: {}.", failed.join("; ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::{Plan, ratios};
    use super::*;

    fn row(c: &str, bytes: usize, v: &[f64]) -> Row {
        Row {
            contender: c.into(),
            bytes,
            messages: 10,
            mib_s: crate::report::fit::median(v),
            mib_s_spread: Some(crate::report::fit::spread(v)),
            samples_mib_s: v.to_vec(),
            verified: true,
            rounds: v.len(),
            error: None,
        }
    }

    #[test]
    fn the_sentences_are_computed_from_the_rows_and_say_a_missed_target_plainly() {
        let mut s = CSection {
            plan: Plan::of(crate::report::preset::Preset::Quick),
            rows: vec![
                row("c", 64 << 10, &[900.0, 950.0, 1000.0]),
                row("rust", 64 << 10, &[1000.0, 1000.0, 1000.0]),
                row("c", 1 << 20, &[2000.0, 2000.0, 2000.0]),
                row("rust", 1 << 20, &[2500.0, 2500.0, 2500.0]),
            ],
            ratios: Vec::new(),
            unavailable: None,
            cc: Some("cc (test) 1".into()),
            cpus: Some([1, 0]),
        };
        let mut bad = row("c", 64 << 20, &[]);
        bad.verified = false;
        bad.error = Some("the receiver failed: message 3 is wrong at byte 7".into());
        s.rows.push(bad);
        s.rows.push(row("rust", 64 << 20, &[3000.0]));
        s.ratios = ratios(&s);
        assert_eq!(s.ratios.len(), 2);
        let t = target_sentences(&s);
        assert!(
            t[0].contains("0.950× at 64 KiB (950 MiB/s against 1000 MiB/s, -5.0 %; the rounds' spreads overlap)")
                && t[0].contains("0.800× at 1 MiB"),
            "{}",
            t[0]
        );
        assert!(
            t[1].contains("met at 64 KiB; MISSED at 1 MiB (short by 15.0 %); not judged at 64 MiB"),
            "{}",
            t[1]
        );
        assert!(t[2].contains("message 3 is wrong"), "{}", t[2]);
        assert_eq!(s.failures().len(), 1);
        let text = text_table(&s);
        assert!(text.contains("failed: the receiver failed"), "{text}");
    }
}
