//! The 2 MiB series' conclusions, checked against made-up points.

use super::*;
use crate::lab::genie::measure::{OpStat, Run, point_of};

/// A point of three runs of `n` messages that take `fast` µs, or 1.2 ms for every
/// `slow_every`-th.
fn point(s: Semantics, fast: u64, slow_every: usize, n: usize) -> Point {
    let runs = (0..3)
        .map(|round| {
            let latencies_ns: Vec<u64> = (0..n)
                .map(|i| {
                    if i % slow_every == 0 {
                        1_200_000
                    } else {
                        fast * 1000 + (i as u64 % 7) * 1000
                    }
                })
                .collect();
            let mut sorted = latencies_ns.clone();
            sorted.sort_unstable();
            Run {
                round,
                latency_ns: sorted[n / 2] as f64,
                latency_p10_ns: sorted[n / 10] as f64,
                latency_p90_ns: sorted[n * 9 / 10] as f64,
                cpu_ns: 0.0,
                app_cpu_ns: 0.0,
                messages_per_s: 0.0,
                latencies_ns,
                ops: Vec::new(),
            }
        })
        .collect();
    point_of(
        (s, InputBuffering::EarlyDemux, Thresholds::ZeroCopy),
        ModuleKind::Memnet,
        2 << 20,
        &serde_json::Value::Null,
        runs,
        true,
    )
}

/// The answer to "does emulated copy approach emulated share?" from these two points.
fn near_share(ec: Point, es: Point) -> Conclusion {
    near_share_with(ec, es, Vec::new())
}

/// The same, with the control (emulated share into two buffers in turn) `two`.
fn near_share_with(ec: Point, es: Point, two: Vec<Point>) -> Conclusion {
    let g = GenieResults {
        huge: vec![ec, es],
        huge_two_buffers: two,
        ..Default::default()
    };
    conclusions(&g)
        .into_iter()
        .find(|c| c.id == "emulated-copy-near-share-2m")
        .expect("answered")
}

#[test]
fn the_fast_modes_decide_when_the_host_delays_half_the_messages() {
    // Emulated copy: 210-216 µs, but 1.2 ms every other message, so its median of all
    // messages is a wake-up; emulated share: 200-206 µs, one message in ten slow.
    let ec = point(Semantics::EmulatedCopy, 210, 2, 101);
    let es = point(Semantics::EmulatedShare, 200, 10, 101);
    let m = ec.modes.expect("messages");
    // The first message of each run (a slow one here) is left out.
    assert_eq!(m.messages, 3 * 100);
    assert_eq!(m.fast_messages, 3 * 50, "{m:?}");
    assert_eq!(m.slow_share, 0.5);
    assert!((210_000.0..=216_000.0).contains(&m.fast_median_ns), "{m:?}");
    assert!(ec.latency_ns > 1_000_000.0);
    let near = near_share(ec, es);
    assert_eq!(near.holds, Some(true), "{}", near.answer);
    assert!(
        near.answer.contains("Over the fast modes"),
        "{}",
        near.answer
    );
    assert!(
        near.answer.contains("50 % and 10 % of the messages slow"),
        "{}",
        near.answer
    );
}

#[test]
fn without_a_fast_mode_the_medians_of_all_messages_decide() {
    // Runs of four messages, the first left out: nine messages, too few for a fast mode.
    let ec = point(Semantics::EmulatedCopy, 210, 2, 4);
    let es = point(Semantics::EmulatedShare, 200, 2, 4);
    assert_eq!(ec.modes.and_then(|m| m.fast()), None);
    let near = near_share(ec, es);
    assert!(
        near.answer.contains("the medians of all messages decide"),
        "{}",
        near.answer
    );
}

/// `p` with these primitives (op, per-message ns) in every run, each in every message.
fn with_ops(mut p: Point, ops: &[(&str, f64)]) -> Point {
    for r in &mut p.runs {
        r.ops = ops
            .iter()
            .map(|(op, ns)| OpStat {
                op: op.to_string(),
                phase: "any".into(),
                share_of_messages: 1.0,
                calls_per_message: 1.0,
                median_ns: *ns,
            })
            .collect();
    }
    p
}

#[test]
fn the_answer_splits_emulated_copys_extra_time_into_page_work_and_the_wire() {
    let ec = with_ops(
        point(Semantics::EmulatedCopy, 300, 1000, 101),
        &[
            ("reference", 150_000.0),
            ("read-only", 3_000.0),
            ("swap", 6_500.0),
            ("unreference", 3_100.0),
            ("access-check", 2_000.0),
        ],
    );
    let es = with_ops(
        point(Semantics::EmulatedShare, 200, 1000, 101),
        &[
            ("reference", 70_000.0),
            ("unreference", 200.0),
            ("access-check", 2_100.0),
        ],
    );
    let (gap, page, wire) = ec_over_es_parts(&[ec.clone(), es.clone()], 2 << 20).unwrap();
    assert!((gap - (ec.latency_ns - es.latency_ns)).abs() < 1e-6);
    assert!((page - 12_400.0).abs() < 1e-6, "{page}");
    assert!((wire - 80_000.0).abs() < 1e-6, "{wire}");
    let near = near_share(ec.clone(), es.clone());
    assert!(
        near.answer
            .contains("of which the page work is 12.4 µs and the queueing on the wire 80.0 µs"),
        "{}",
        near.answer
    );
    assert!(
        near.answer
            .contains("Where the wire makes most of it (2 MiB)"),
        "{}",
        near.answer
    );
    assert!(near.answer.contains("did not run"), "{}", near.answer);
    // The control: emulated share into two buffers in turn, 60 µs slower than into one,
    // explains the wire's 80 µs; 20 µs slower would not.
    for (two_fast, explains) in [(260, true), (220, false)] {
        let two = point(Semantics::EmulatedShare, two_fast, 1000, 101);
        let extra = two.latency_ns - es.latency_ns;
        let near = near_share_with(ec.clone(), es.clone(), vec![two]);
        assert!(
            near.answer.contains(&format!(
                "at 2 MiB {} µs more than into one buffer (the wire's part of the gap: 80.0 µs)",
                us(extra)
            )),
            "{}",
            near.answer
        );
        assert_eq!(
            near.answer
                .contains("that part of the gap is the second set of pages"),
            explains,
            "{}",
            near.answer
        );
        assert_eq!(
            near.answer.contains("does not explain it"),
            !explains,
            "{}",
            near.answer
        );
    }
}

#[test]
fn without_huge_pages_the_section_says_why_and_draws_no_conclusion() {
    let g = GenieResults {
        huge_unavailable: Some("transparent huge pages are off".into()),
        ..Default::default()
    };
    let text = format!("{:?}", blocks(&g));
    assert!(text.contains("Not measured on this machine: transparent huge pages are off"));
    assert!(conclusions(&g).is_empty());
}
