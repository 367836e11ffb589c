//! The paper's three conclusions answered for the 2 MiB series, beside the 4 KiB one: the
//! copy/emulated-copy crossover, the clustering of the non-copy semantics, and emulated copy
//! against emulated share with where its extra time goes.

use super::*;

/// The paper's three conclusions answered at 2 MiB from the data, each beside the same
/// answer on 4 KiB pages at the same lengths.
pub fn conclusions(g: &GenieResults) -> Vec<Conclusion> {
    let lengths = distinct_lengths(&g.huge);
    if lengths.is_empty() {
        return Vec::new();
    }
    let common = common_lengths(g);
    let huge = answers(&g.huge, &lengths);
    let base = answers(&g.latency, &common);
    let largest = *lengths.last().expect("not empty");
    let at_4k = |what: String| at_4k(&common, what);
    let fmt_spread = |s: &Option<(f64, Semantics, Semantics)>| {
        s.map_or("-".into(), |(r, lo, hi)| {
            format!("{r:.2}× ({lo} fastest, {hi} slowest)")
        })
    };
    vec![
        Conclusion {
            id: "copy-inferior-2m".into(),
            question: "At 2 MiB: is copy sharply inferior to emulated copy, and from which length?"
                .into(),
            holds: huge
                .copy_over_ec
                .map(|r| huge.crossover.is_some() && r > 1.2),
            answer: format!(
                "With huge-page buffers, emulated copy is faster than copy from {} on; at {} copy takes {} the latency of emulated copy (the paper: 1.6× at 60 KB). {}",
                huge.crossover.map_or("no measured length".into(), size),
                size(largest),
                huge.copy_over_ec.map_or("-".into(), |r| format!("{r:.2}×")),
                at_4k(format!(
                    "faster from {}, copy at {} the latency of emulated copy at the largest",
                    base.crossover.map_or("no common length".into(), size),
                    base.copy_over_ec.map_or("-".into(), |r| format!("{r:.2}×"))
                ))
            ),
        },
        Conclusion {
            id: "non-copy-cluster-2m".into(),
            question: "At 2 MiB: do the non-copy semantics cluster?".into(),
            holds: huge.spread.map(|(r, _, _)| r < 1.3),
            answer: format!(
                "At {} with huge-page buffers the seven non-copy semantics spread {} (the paper: within 1.05× at 60 KB). {}",
                size(largest),
                fmt_spread(&huge.spread),
                at_4k(format!(
                    "they spread {} at the largest",
                    fmt_spread(&base.spread)
                ))
            ),
        },
        near_share(g, &lengths, &huge, &base, &common),
    ]
}

/// `what`, said of the 4 KiB series at the lengths it shares with the 2 MiB one (`common`).
fn at_4k(common: &[usize], what: String) -> String {
    match (common.first(), common.last()) {
        (Some(lo), Some(hi)) => format!(
            "On 4 KiB pages at the same lengths ({} to {}): {what}.",
            size(*lo),
            size(*hi)
        ),
        _ => "The 4 KiB series has no length in common with the 2 MiB one in this run.".into(),
    }
}

/// "At 2 MiB: does emulated copy approach emulated share?", from the 2 MiB series' answers
/// `huge` at `lengths`, the 4 KiB series' `base` at the `common` lengths, and where emulated
/// copy's extra time goes.
fn near_share(
    g: &GenieResults,
    lengths: &[usize],
    huge: &Answers,
    base: &Answers,
    common: &[usize],
) -> Conclusion {
    let list = |v: &[(usize, f64)]| {
        v.iter()
            .map(|(b, r)| format!("{r:.2}× at {}", size(*b)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (fast, ratios) = huge.deciding_ec_over_es();
    let worst = ratios.iter().copied().fold(f64::NAN, f64::max);
    let fast_list = huge
        .ec_over_es_fast
        .iter()
        .map(|(b, r, ec, es)| {
            format!(
                "{r:.2}× at {} ({:.0} % and {:.0} % of the messages slow)",
                size(*b),
                100.0 * ec,
                100.0 * es
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    Conclusion {
        id: "emulated-copy-near-share-2m".into(),
        question: "At 2 MiB: does emulated copy approach emulated share?".into(),
        holds: (!ratios.is_empty()).then_some(worst < 1.1),
        answer: format!(
            "Emulated copy over emulated share with huge-page buffers, medians of all messages: {} (the paper: 1.04×).{} {} {}",
            list(&huge.ec_over_es),
            extra_time_parts(g, lengths),
            if fast {
                format!(
                    "Over the fast modes (messages within {}× the 10th percentile; the rest waited for the host's scheduler), which decide: {fast_list}.",
                    Modes::SLOW_FACTOR
                )
            } else {
                format!(
                    "Too few messages in a fast mode at some length to set the host's scheduling apart (fewer than {}); the medians of all messages decide.",
                    Modes::MIN_FAST
                )
            },
            at_4k(common, list(&base.ec_over_es))
        ),
    }
}

/// Where emulated copy's extra time over emulated share goes at each length, from the
/// primitives timed in the same runs (empty where none were timed).
fn extra_time_parts(g: &GenieResults, lengths: &[usize]) -> String {
    let split: Vec<(usize, (f64, f64, f64))> = lengths
        .iter()
        .filter_map(|&b| Some((b, ec_over_es_parts(&g.huge, b)?)))
        .collect();
    if split.is_empty() {
        return String::new();
    }
    let each = split
        .iter()
        .map(|(b, (gap, page, wire))| {
            format!(
                "at {} {} µs, of which the page work is {} µs and the queueing on the wire {} µs",
                size(*b),
                us(*gap),
                us(*page),
                us(*wire)
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    // Lengths where the wire, not the page work, makes most of the difference.
    let wire_led: Vec<usize> = split
        .iter()
        .filter(|(_, (_, page, wire))| *wire > 0.0 && wire > page)
        .map(|(b, _)| *b)
        .collect();
    let why = wire_led_why(g, &wire_led);
    format!(
        " Where emulated copy's extra time goes, from the primitives timed in the same runs: {each}.{why}"
    )
}

/// Why the wire takes longer under emulated copy at the lengths `wire_led`, from the control
/// (emulated share into two buffers in turn): under emulated copy the receiver's copy out of
/// the pipe fills the staging pages, last used two messages earlier; under emulated share, the
/// pages of the last message, just read by the application. The control gives emulated share
/// emulated copy's page-reuse distance without any of its page work.
fn wire_led_why(g: &GenieResults, wire_led: &[usize]) -> String {
    if wire_led.is_empty() {
        return String::new();
    }
    let names = wire_led
        .iter()
        .map(|b| size(*b))
        .collect::<Vec<_>>()
        .join(", ");
    // (length, the control's extra latency over one buffer, the wire's part of the gap)
    let control: Vec<(usize, f64, f64)> = wire_led
        .iter()
        .filter_map(|&b| {
            let two = lat(&g.huge_two_buffers, Semantics::EmulatedShare, b)?;
            let one = lat(&g.huge, Semantics::EmulatedShare, b)?;
            let (_, _, wire) = ec_over_es_parts(&g.huge, b)?;
            Some((b, two - one, wire))
        })
        .collect();
    if control.is_empty() {
        return format!(
            " Where the wire makes most of it ({names}), the receiver's copy out of the pipe is what takes longer, and the page references wait for it; the control that would say why (emulated share into two buffers in turn) did not run."
        );
    }
    let each = control
        .iter()
        .map(|(b, extra, wire)| {
            format!(
                "at {} {} µs more than into one buffer (the wire's part of the gap: {} µs)",
                size(*b),
                us(*extra),
                us(*wire)
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    // The control explains the wire's part where it costs at least half of it.
    let explained: Vec<String> = control
        .iter()
        .filter(|(_, extra, wire)| *extra >= 0.5 * wire)
        .map(|(b, _, _)| size(*b))
        .collect();
    let verdict = if explained.is_empty() {
        "Reading into memory used two messages earlier costs less than the wire's part here, so the page-reuse distance does not explain it.".to_string()
    } else {
        format!(
            "At {}, reading into memory used two messages earlier costs emulated share at least half of emulated copy's extra wire time without any page work: that part of the gap is the second set of pages emulated copy keeps, its staging, which lets a buffer stay untouched until the whole message has arrived.",
            explained.join(", ")
        )
    };
    format!(
        " Where the wire makes most of it ({names}), the receiver's copy out of the pipe is what takes longer, and the page references wait for it: under emulated copy it fills the staging pages, last used two messages earlier; under emulated share, the pages of the last message, just read by the application. The control, emulated share reading into two buffers in turn: {each}. {verdict}"
    )
}
