//! The channel bench's part of the report's Genie section: the table, a figure, the ratios,
//! and sentences made from this run's numbers only.

use super::render::{
    against, gbps, msgs_per_s, opt_us, path_note, range, ratio, ratios_of, spread_gbps, spread_us,
    status, target_sentences,
};
use super::{ChannelSection, Contender, Granule, Row};
use crate::lab::genie::chart::against_length;
use crate::lab::genie::measure::GenieResults;
use crate::report::doc::Block;
use crate::report::plot::{Scale, Series, Style};
use crate::report::text::{figure, h, p, size, table};

/// The finding that heads Genie's section, if the channel bench ran.
pub fn finding(g: &GenieResults) -> Option<String> {
    let s = g.channel.as_ref()?;
    let bad = s.failures();
    let integrity = if bad.is_empty() {
        format!(
            "all {} messages checked byte for byte",
            s.rows.iter().map(|r| r.checked_messages).sum::<u64>()
        )
    } else {
        format!("{} rows not verified: {}", bad.len(), bad.join("; "))
    };
    let vs = |of: &str| {
        against(s, of, 0.0).map_or("not measured".to_string(), |((lo, hi), _, _)| {
            format!("{lo:.2}–{hi:.2}×")
        })
    };
    let loan = |who: Contender, of: &str| {
        let xs = ratios_of(s, &who.name(), of, (2 << 20)..=usize::MAX, |r| {
            r.throughput_gbps
        });
        range(xs.into_iter()).map_or("not measured".into(), |(lo, hi)| {
            format!("{lo:.2}–{hi:.2}×")
        })
    };
    Some(format!(
        "Channels between two processes (zcio bench channel): from 2 MiB up, zcio's emulated copy streams {} iceoryx2's throughput and {} a Unix socket's, its sealed loans (zcio-loan, no byte copied) {} and {}, its volatile loans between ends that trust each other (zcio-loan-volatile, no byte copied, files reused) {} and {}; {integrity}.",
        vs("iceoryx2"),
        vs("unix"),
        loan(Contender::Loan, "iceoryx2"),
        loan(Contender::Loan, "unix"),
        loan(Contender::VolatileLoan, "iceoryx2"),
        loan(Contender::VolatileLoan, "unix"),
    ))
}

/// The section's blocks, if the channel bench ran.
pub fn blocks(g: &GenieResults) -> Vec<Block> {
    let Some(s) = g.channel.as_ref() else {
        return Vec::new();
    };
    let mut b = vec![h(
        3,
        "Channels between two processes: zcio against iceoryx2 and a Unix socket",
    )];
    b.push(p(format!(
        "zcio's channel API (Channel::send and Channel::recv over the memory network, early demultiplexing, this machine's calibrated thresholds, a window of the message at least, as listed) between two processes; zcio's loans on the same channel (zcio-loan: the sender takes a fresh memory file of the message's length, in 2 MiB pages with 2m buffers from 2 MiB up and else in 4 KiB pages, writes the message into it and gives it up with Channel::send_loan, sealed, its descriptor passed; the receiver maps it privately with Channel::recv_loan and reads a byte of every 4 KiB page inside its receive, since the mapping is lazy; no byte is copied; taking a loan is added to its message's latency, round trip and stream time, since a sealed loan is never reused where the others' buffers are made once, and is also given apart); zcio's volatile loans on the same channel, both ends trusting each other (zcio-loan-volatile: Channel::set_volatile_loans at both ends; the sender's loans are memory files reused from message to message, each lent to the receiver, mapped shared in place by it and given back when it drops the message, both ends keeping their mappings, so once a file has made a trip a loan costs no page-table work and no fresh page; the warm-up streams a run's whole ring, as iceoryx2's pool warm-up does, so that the files a stream needs are made and lent once; at most {} files per end are lent, beyond them a loan is sealed; taking a loan is counted as for zcio-loan); against iceoryx2 publish-subscribe (loan a sample, copy the sender's buffer into it, send and notify; the receiver copies the sample into its own buffer, as iceoryx2's subscribers get read-only samples) and a Unix stream socket with its default buffers (one writev of a length and the buffer, one readv of both): each message, of any length, starts in the sender's own buffer and ends in a buffer the receiver owns and may write, both in 4 KiB pages (4k) or in transparent huge pages (2m); below 4 KiB the messages are slots of one such buffer, and more of them are streamed (up to 2000 × 4 KiB / size, 16384 at most). The two processes are pinned to a CPU each{}. Each run streams a warm-up first (iceoryx2 also writes and reads every sample of its pool once), and the receiver checks every byte of every message, always outside the times taken. Latency: messages one at a time, from the send's start at the sender to the message in the receiver's buffer, both read on CLOCK_MONOTONIC (one host, one clock: no return leg). Ping-pong: at a go-ahead the sender sends a message and waits for a 1-byte reply over the same transport the other way (zcio: the same channel; the socket: the same socket; iceoryx2: a second publish-subscribe and event service, used alike), timed from the send's start to the reply in the sender's buffer; half the median round trip. Send: the time inside the send of those messages (zcio's send call; iceoryx2's loan, copy and send, without the notification that follows; the socket's writes). Throughput: the sender writes a run's messages into buffers of its own first, then sends them back to back into the receiver's buffers; their bytes over the time from the first send's start to the last receipt. CPU: both processes' CPU time over that stream, per message (no data written or checked in it). Medians over {} round{} (contenders in rotating order), spread lowest–highest round.",
        zcio_genie::memnet::loan::LENT_FILES,
        s.cpus
            .map_or(" (not here: the bench could run on one CPU only)".into(), |[r, t]| format!(
                " (receiver on CPU {r}, sender on CPU {t})"
            )),
        s.plan.rounds,
        if s.plan.rounds == 1 { "" } else { "s" }
    )));
    let rows = s
        .rows
        .iter()
        .map(|r| {
            vec![
                r.granule.name().to_string(),
                size(r.bytes),
                r.contender.clone(),
                format!(
                    "{} ({})",
                    opt_us(r.latency_ns),
                    spread_us(r.latency_spread_ns)
                ),
                format!(
                    "{} ({})",
                    opt_us(r.pingpong_ns),
                    spread_us(r.pingpong_spread_ns)
                ),
                format!(
                    "{} ({})",
                    gbps(r.throughput_gbps),
                    spread_gbps(r.throughput_spread_gbps)
                ),
                msgs_per_s(r),
                opt_us(r.send_ns),
                opt_us(r.cpu_ns),
                r.messages.to_string(),
                status(r),
                match (&r.path, r.window_bytes) {
                    (Some(_), Some(w)) => format!("window {}; {}", size(w), path_note(r)),
                    (Some(_), None) => path_note(r),
                    _ => String::new(),
                },
            ]
        })
        .collect();
    b.push(table(
        "Each contender per size and granule: one-way latency, ping-pong latency (half a round trip), streamed throughput, time inside the send, CPU time per message (both processes)",
        &[
            "granule",
            "size",
            "contender",
            "latency µs (spread)",
            "ping-pong µs (spread)",
            "GB/s (spread)",
            "messages/s",
            "send µs",
            "CPU µs",
            "messages",
            "verified",
            "zcio window and path",
        ],
        rows,
    ));
    let mut curves = series(s, |r| r.throughput_gbps, |r| r.throughput_spread_gbps);
    curves.extend(crossover_marks(s, &curves));
    b.push(figure(
        "channel-throughput",
        "Streamed throughput against message size (both axes logarithmic), per contender: solid with huge-page buffers (2m), dashed with 4 KiB pages (4k); the band is the lowest–highest round. The vertical lines mark, per granule, the longest message emulated copy sent through the link's shared ring in this run (copied in and out); longer ones went on the wire (page references into pipes).".into(),
        against_length(
            "Channels between two processes: throughput".into(),
            "throughput (GB/s)",
            Scale::Log,
            curves,
        ),
    ));
    let reach: Vec<String> = s
        .plan
        .granules
        .iter()
        .map(|&g| match ring_reach(s, g) {
            Some((last, next)) => format!(
                "{}: through the shared ring up to {}{}",
                g.name(),
                size(last),
                next.map_or(String::new(), |n| format!(", on the wire from {}", size(n)))
            ),
            None => format!("{}: on the wire at every size measured", g.name()),
        })
        .collect();
    b.push(p(format!(
        "Where zcio's emulated copy changed paths in this run (its calibrated crossover, the sizes its rows' paths name): {}.",
        reach.join("; ")
    )));
    b.push(figure(
        "channel-pingpong",
        "Ping-pong latency (half the median round trip of a message and a 1-byte reply) against message size (both axes logarithmic), per contender: solid with huge-page buffers (2m), dashed with 4 KiB pages (4k); the band is the lowest–highest round.".into(),
        against_length(
            "Channels between two processes: ping-pong latency".into(),
            "latency (µs)",
            Scale::Log,
            series(
                s,
                |r| r.pingpong_ns.map(|x| x / 1e3),
                |r| r.pingpong_spread_ns.map(|[a, b]| [a / 1e3, b / 1e3]),
            ),
        ),
    ));
    if !s.ratios.is_empty() {
        let rows = s
            .ratios
            .iter()
            .map(|q| {
                vec![
                    q.granule.name().to_string(),
                    size(q.bytes),
                    ratio(q.emulated_copy_vs_iceoryx2),
                    ratio(q.emulated_copy_vs_unix),
                    ratio(q.emulated_copy_vs_copy),
                ]
            })
            .collect();
        b.push(table(
            "zcio-emulated-copy's throughput over the others', from 2 MiB up",
            &["granule", "size", "/ iceoryx2", "/ unix", "/ zcio-copy"],
            rows,
        ));
    }
    for t in target_sentences(s) {
        b.push(p(t));
    }
    b
}

/// The longest message zcio's emulated copy sent through the shared ring at granule `g` in
/// this run, and the shortest longer one that went on the wire, from the rows' paths.
fn ring_reach(s: &ChannelSection, g: Granule) -> Option<(usize, Option<usize>)> {
    let mut rows: Vec<&Row> = s
        .rows
        .iter()
        .filter(|r| r.contender == "zcio-emulated-copy" && r.granule == g && r.path.is_some())
        .collect();
    rows.sort_by_key(|r| r.bytes);
    let by_ring = |r: &Row| r.path.as_deref().is_some_and(|p| p.contains("shared ring"));
    let last = rows.iter().rev().find(|r| by_ring(r))?.bytes;
    let next = rows
        .iter()
        .find(|r| r.bytes > last && !by_ring(r))
        .map(|r| r.bytes);
    Some((last, next))
}

/// A vertical line per granule at [`ring_reach`], over the height of `curves`.
fn crossover_marks(s: &ChannelSection, curves: &[Series]) -> Vec<Series> {
    let ys = curves.iter().flat_map(|c| c.points.iter().map(|p| p.1));
    let (lo, hi) = ys
        .filter(|y| *y > 0.0)
        .fold((f64::MAX, 0.0f64), |(lo, hi), y| (lo.min(y), hi.max(y)));
    if hi <= 0.0 {
        return Vec::new();
    }
    s.plan
        .granules
        .iter()
        .filter_map(|&g| {
            let (last, _) = ring_reach(s, g)?;
            Some(Series {
                name: format!("shared ring up to {} ({})", size(last), g.name()),
                points: vec![(last as f64, lo), (last as f64, hi)],
                style: Style::Dashed,
                band: None,
                color: Some(10 + usize::from(g == Granule::Huge)),
            })
        })
        .collect()
}

/// A contender's colour in the figures, the same in every run whichever ran: zcio's copy,
/// emulated copy, iceoryx2, the Unix socket, zcio's sealed loans, zcio's other semantics,
/// zcio's volatile loans.
fn color(contender: &str) -> usize {
    match Contender::parse(contender) {
        Ok(Contender::Zcio(zcio_genie::Semantics::Copy)) => 0,
        Ok(Contender::Zcio(zcio_genie::Semantics::EmulatedCopy)) => 1,
        Ok(Contender::Iceoryx2) => 2,
        Ok(Contender::Unix) => 3,
        Ok(Contender::Loan) => 4,
        Ok(Contender::VolatileLoan) => 7,
        Ok(Contender::Zcio(zcio_genie::Semantics::Share)) => 5,
        Ok(Contender::Zcio(zcio_genie::Semantics::EmulatedShare)) => 6,
        _ => 8,
    }
}

/// One curve of `y` per contender and granule, over every size measured (shortest first), with
/// the band of `band`.
fn series(
    s: &ChannelSection,
    y: fn(&Row) -> Option<f64>,
    band: fn(&Row) -> Option<[f64; 2]>,
) -> Vec<Series> {
    let mut out = Vec::new();
    for c in &s.plan.contenders {
        for &g in &s.plan.granules {
            let mut pts: Vec<&Row> = s
                .rows
                .iter()
                .filter(|r| &r.contender == c && r.granule == g && y(r).is_some())
                .collect();
            if pts.is_empty() {
                continue;
            }
            pts.sort_by_key(|r| r.bytes);
            out.push(Series {
                name: format!("{c} ({g})"),
                points: pts
                    .iter()
                    .map(|r| (r.bytes as f64, y(r).unwrap_or(0.0)))
                    .collect(),
                style: if g == Granule::Huge {
                    Style::Line
                } else {
                    Style::Dashed
                },
                band: Some(
                    pts.iter()
                        .filter_map(|r| {
                            let [lo, hi] = band(r)?;
                            Some((r.bytes as f64, lo, hi))
                        })
                        .collect(),
                ),
                color: Some(color(c)),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(bytes: usize, granule: Granule, path: &str) -> Row {
        Row {
            contender: "zcio-emulated-copy".into(),
            bytes,
            granule,
            latency_ns: None,
            latency_spread_ns: None,
            pingpong_ns: None,
            pingpong_spread_ns: None,
            throughput_gbps: Some(bytes as f64 / 1e6),
            throughput_spread_gbps: None,
            send_ns: None,
            send_spread_ns: None,
            cpu_ns: None,
            cpu_spread_ns: None,
            verified: true,
            messages: 1,
            round_trips: 0,
            rounds: 1,
            checked_messages: 1,
            first_mismatch: None,
            window_bytes: None,
            path: Some(path.into()),
            vm_granule: None,
            buffer_granule: granule.name().into(),
            error: None,
            make_ns: None,
        }
    }

    /// A run at 2 MiB and 16 MiB with both granules (2 MiB with 4k: zcio-copy best, and a
    /// loan that came not mapped), and at 1 MiB (below the targets' sizes).
    fn a_run() -> ChannelSection {
        let mapped = "output: move: a sealed memory file's pages handed over; input: move: a sealed memory file mapped privately";
        let lent = "output: weak move: a volatile memory file lent, its mapping kept; input: weak move: a volatile memory file mapped in place, its mapping kept";
        let of = |who: &str, bytes: usize, g: Granule, gbps: f64| {
            let mut r = row(bytes, g, "");
            r.contender = who.into();
            r.throughput_gbps = Some(gbps);
            r.path = who.starts_with("zcio").then(|| {
                match who {
                    "zcio-loan" => mapped,
                    "zcio-loan-volatile" => lent,
                    _ => "output: copy",
                }
                .to_string()
            });
            if who.starts_with("zcio-loan") {
                r.make_ns = Some(bytes as f64 / 20.0);
                r.vm_granule = Some(g.name().into());
            }
            r
        };
        let mut rows = Vec::new();
        for g in [Granule::Base, Granule::Huge] {
            for (b, cp, ec, loan, iox, unix) in [
                (1usize << 20, 1.0, 1.0, 100.0, 1.0, 1.0),
                (2 << 20, 9.0, 6.0, 30.0, 6.0, 3.0),
                (16 << 20, 8.0, 12.0, 20.0, 8.0, 5.0),
            ] {
                rows.push(of("zcio-copy", b, g, cp));
                rows.push(of("zcio-emulated-copy", b, g, ec));
                rows.push(of("zcio-loan", b, g, loan));
                rows.push(of("zcio-loan-volatile", b, g, 10.0 * loan));
                rows.push(of("iceoryx2", b, g, iox));
                rows.push(of("unix", b, g, unix));
            }
        }
        ChannelSection {
            plan: super::super::Plan {
                sizes: vec![1 << 20, 2 << 20, 16 << 20],
                granules: vec![Granule::Base, Granule::Huge],
                contenders: [
                    "zcio-copy",
                    "zcio-emulated-copy",
                    "zcio-loan",
                    "zcio-loan-volatile",
                    "iceoryx2",
                    "unix",
                ]
                .map(String::from)
                .to_vec(),
                rounds: 1,
                messages: None,
            },
            rows,
            ratios: Vec::new(),
            cpus: None,
        }
    }

    #[test]
    fn the_throughput_sentences_compare_the_best_zcio_and_loans_per_granule_from_this_runs_rows() {
        let mut s = a_run();
        // Not verified: left out of every ratio.
        for r in &mut s.rows {
            if r.granule == Granule::Huge && r.bytes == 2 << 20 && r.contender == "zcio-copy" {
                r.verified = false;
            }
        }
        let said = super::super::render::throughput_sentences(&s);
        assert_eq!(said.len(), 2, "{said:?}");
        let (k4, m2) = (&said[0], &said[1]);
        assert!(
            k4.contains("with 4k buffers (this run: 2 MiB, 16 MiB)"),
            "{k4}"
        );
        assert!(
            k4.contains("(zcio-copy at 2 MiB; zcio-emulated-copy at 16 MiB)"),
            "{k4}"
        );
        // Best: 9/6 and 12/8 over iceoryx2, 9/3 and 12/5 over the socket.
        assert!(
            k4.contains("1.50× iceoryx2's (target ≥ 1×: met at 2 of 2), and 2.40–3.00× the Unix socket's (target ≥ 3×: met at 1 of 2); zcio-loan"),
            "{k4}"
        );
        // Loans: 30/6 and 20/8, 30/3 and 20/5.
        assert!(
            k4.contains("zcio-loan 2.50–5.00× iceoryx2's (target ≥ 1×: met at 2 of 2), and 4.00–10.00× the Unix socket's (target ≥ 3×: met at 2 of 2); zcio-loan-volatile 25.00–50.00× iceoryx2's (target ≥ 1×: met at 2 of 2), and 40.00–100.00× the Unix socket's (target ≥ 3×: met at 2 of 2)."),
            "{k4}"
        );
        // With 2m, zcio-copy at 2 MiB is not verified: emulated copy is the best there.
        assert!(m2.contains("(zcio-emulated-copy at 2 MiB, 16 MiB)"), "{m2}");
        assert!(m2.contains("1.00–1.50× iceoryx2's"), "{m2}");
        assert!(!k4.contains("issue") && !m2.contains("issue"));
    }

    #[test]
    fn the_loan_sentence_says_from_the_paths_whether_a_byte_was_copied() {
        let mut s = a_run();
        let said = super::super::render::loan_sentences(&s);
        assert_eq!(said.len(), 4, "{said:?}");
        assert!(
            said[2].starts_with(
                "No byte of zcio-loan-volatile's messages was copied in this run: at all 6 sizes × granules"
            ) && said[2].contains("mapped in place"),
            "{}",
            said[2]
        );
        assert!(said[3].starts_with("Taking a volatile loan"), "{}", said[3]);
        assert!(
            said[0].starts_with(
                "No byte of zcio-loan's messages was copied in this run: at all 6 sizes × granules"
            ),
            "{}",
            said[0]
        );
        assert!(said[0].contains("mapped privately"), "{}", said[0]);
        // The largest size's loan per granule: 16 MiB / 20 ns per byte.
        assert!(
            said[1].contains("839 µs for 16 MiB with 4k buffers (4k pages); 839 µs for 16 MiB with 2m buffers (2m pages)"),
            "{}",
            said[1]
        );
        for r in &mut s.rows {
            if r.contender == "zcio-loan" && r.bytes == 2 << 20 && r.granule == Granule::Base {
                r.path = Some(format!(
                    "{}; NOT MAPPED: 3 of 70 messages (copy: out of a sealed memory file)",
                    r.path.take().unwrap()
                ));
            }
        }
        let said = super::super::render::loan_sentences(&s);
        assert!(
            said[0].contains("at 5 of 6 sizes × granules; not so at 2 MiB 4k ("),
            "{}",
            said[0]
        );
        assert!(said[0].contains("NOT MAPPED: 3 of 70"), "{}", said[0]);
        assert!(!said[0].contains("No byte"), "{}", said[0]);
    }

    #[test]
    fn each_contender_keeps_its_colour_whichever_ran() {
        let s = a_run();
        let curves = series(&s, |r| r.throughput_gbps, |r| r.throughput_spread_gbps);
        let of = |name: &str| {
            curves
                .iter()
                .find(|c| c.name == format!("{name} (2m)"))
                .and_then(|c| c.color)
        };
        assert_eq!(of("zcio-copy"), Some(0));
        assert_eq!(of("iceoryx2"), Some(2));
        assert_eq!(of("unix"), Some(3));
        assert_eq!(of("zcio-loan"), Some(4));
        assert_eq!(of("zcio-loan-volatile"), Some(7));
        let colours: std::collections::BTreeSet<_> = curves.iter().map(|c| c.color).collect();
        assert_eq!(colours.len(), 6, "one colour per contender");
    }

    #[test]
    fn the_crossover_is_read_from_the_paths_this_run_took() {
        let ring = "output: copy: into the shared ring; input: copy: out of the shared ring";
        let wire = "output: vmsplice+tcow(uffd-wp, uffd-move) [4k: not in huge pages]";
        let s = ChannelSection {
            plan: super::super::Plan {
                sizes: vec![64, 4096, 1 << 20, 16 << 20],
                granules: vec![Granule::Base, Granule::Huge],
                contenders: vec!["zcio-emulated-copy".into()],
                rounds: 1,
                messages: None,
            },
            rows: vec![
                row(16 << 20, Granule::Base, wire),
                row(64, Granule::Base, ring),
                row(1 << 20, Granule::Base, ring),
                row(4096, Granule::Base, ring),
                row(64, Granule::Huge, wire),
            ],
            ratios: Vec::new(),
            cpus: None,
        };
        assert_eq!(
            ring_reach(&s, Granule::Base),
            Some((1 << 20, Some(16 << 20)))
        );
        assert_eq!(ring_reach(&s, Granule::Huge), None);
        let curves = series(&s, |r| r.throughput_gbps, |r| r.throughput_spread_gbps);
        let marks = crossover_marks(&s, &curves);
        assert_eq!(marks.len(), 1, "one granule took the ring");
        assert_eq!(marks[0].points[0].0, (1 << 20) as f64);
        assert!(marks[0].points[0].1 < marks[0].points[1].1);
    }
}
