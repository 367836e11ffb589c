//! The channel bench's part of the report's Genie section: the table, a figure, the ratios,
//! and sentences made from this run's numbers only.

use super::render::{
    against, gbps, msgs_per_s, opt_us, ratio, spread_gbps, spread_us, status, target_sentences,
};
use super::{ChannelSection, Granule, Row};
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
    Some(format!(
        "Channels between two processes (zcio bench channel): from 2 MiB up, zcio's emulated copy streams {} iceoryx2's throughput and {} a Unix socket's; {integrity}.",
        vs("iceoryx2"),
        vs("unix"),
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
        "zcio's channel API (Channel::send and Channel::recv over the memory network, early demultiplexing, this machine's calibrated thresholds, a window of the message at least, as listed) between two processes, against iceoryx2 publish-subscribe (loan a sample, copy the sender's buffer into it, send and notify; the receiver copies the sample into its own buffer) and a Unix stream socket with its default buffers (one writev of a length and the buffer, one readv of both): each message, of any length, starts in the sender's own buffer and ends in a buffer the receiver owns and may write, both in 4 KiB pages (4k) or in transparent huge pages (2m); below 4 KiB the messages are slots of one such buffer, and more of them are streamed (up to 2000 × 4 KiB / size, 16384 at most). The two processes are pinned to a CPU each{}. Each run streams a warm-up first (iceoryx2 also writes and reads every sample of its pool once), and the receiver checks every byte of every message, always outside the times taken. Latency: messages one at a time, from the send's start at the sender to the message in the receiver's buffer, both read on CLOCK_MONOTONIC (one host, one clock: no return leg). Ping-pong: at a go-ahead the sender sends a message and waits for a 1-byte reply over the same transport the other way (zcio: the same channel; the socket: the same socket; iceoryx2: a second publish-subscribe and event service, used alike), timed from the send's start to the reply in the sender's buffer; half the median round trip. Send: the time inside the send of those messages (zcio's send call; iceoryx2's loan, copy and send, without the notification that follows; the socket's writes). Throughput: the sender writes a run's messages into buffers of its own first, then sends them back to back into the receiver's buffers; their bytes over the time from the first send's start to the last receipt. CPU: both processes' CPU time over that stream, per message (no data written or checked in it). Medians over {} round{} (contenders in rotating order), spread lowest–highest round.",
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
                    (Some(p), Some(w)) => format!("window {}; {p}", size(w)),
                    (Some(p), None) => p.clone(),
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
    b.push(figure(
        "channel-throughput",
        "Streamed throughput against message size (both axes logarithmic), per contender: solid with huge-page buffers (2m), dashed with 4 KiB pages (4k); the band is the lowest–highest round.".into(),
        against_length(
            "Channels between two processes: throughput".into(),
            "throughput (GB/s)",
            Scale::Log,
            series(s, |r| r.throughput_gbps, |r| r.throughput_spread_gbps),
        ),
    ));
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

/// One curve of `y` per contender and granule, over every size measured (shortest first), with
/// the band of `band`.
fn series(
    s: &ChannelSection,
    y: fn(&Row) -> Option<f64>,
    band: fn(&Row) -> Option<[f64; 2]>,
) -> Vec<Series> {
    let mut out = Vec::new();
    for (ci, c) in s.plan.contenders.iter().enumerate() {
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
                color: Some(ci),
            });
        }
    }
    out
}
