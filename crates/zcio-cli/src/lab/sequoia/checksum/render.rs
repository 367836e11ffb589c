//! The report's section for paper 003's checksum (Figures 6 and 7): the kernels' throughput
//! against buffer size beside the memory read bandwidth and the crates.io peers, and the
//! end-to-end datagram experiment (naive, optimized, elided) beside the paper's 37 % and 74 %.
//! Every statement is computed from the measurements.

use crate::lab::sequoia::checksum::measure::{ChecksumSection, Row};
use crate::report::doc::Block;
use crate::report::plot::{Chart, Scale, Series, Style};
use crate::report::results::Results;
use crate::report::text::{figure, h, p, size, table, table_of};

/// The paper's UDP throughput gains over the unmodified checksum (Figure 7): the optimized
/// checksum, and no checksum on the LAN.
pub(super) const PAPER_OPTIMIZED: f64 = 0.37;
pub(super) const PAPER_ELIDED: f64 = 0.74;

fn color(contender: &str) -> usize {
    match contender {
        "reference" => 3,
        "unrolled" => 1,
        "avx2" => 2,
        "avx512" => 0,
        "fused_copy" => 4,
        "internet-checksum" => 5,
        "ip4sum" => 6,
        "internet-checksum/native" => 8,
        _ => 7,
    }
}

fn contenders(s: &ChecksumSection) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = Vec::new();
    for r in &s.rows {
        if !v.iter().any(|(c, _)| c == &r.contender) {
            v.push((r.contender.clone(), r.kind.clone()));
        }
    }
    v
}

fn at<'a>(s: &'a ChecksumSection, contender: &str, size: usize) -> Option<&'a Row> {
    s.rows
        .iter()
        .find(|r| r.contender == contender && r.size == size)
}

/// The findings that head the section.
pub fn findings(r: &Results) -> Vec<String> {
    let Some(s) = r.section::<super::Checksum>() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Some(v) = &s.verdict {
        out.push(format!(
            "Internet checksum (paper 003): beyond the last-level cache ({}), the {} kernel sums {:.0} Gbit/s, {:.0} % of this core's memory read bandwidth ({:.0} Gbit/s; zcio's target: 90 %: {}), and {:.2}× the fastest crates.io peer ({}){}; the paper's optimization (wide words, unrolled) is {:.1}× the RFC's loop here (the paper: more than 2×).",
            size(v.large_size),
            v.best_kernel,
            v.best_gbps,
            100.0 * v.of_read_bandwidth,
            v.read_gbps,
            if v.of_read_bandwidth >= 0.9 { "met" } else { "not met" },
            v.over_peer,
            v.fastest_peer,
            match (v.cached_size, v.over_peer_cached) {
                (Some(c), Some(x)) => format!(
                    "; in cache ({}) {:.2}× (zcio's target: 2×: {} in cache, {} where memory is the limit)",
                    size(c),
                    x,
                    if x >= 2.0 { "met" } else { "not met" },
                    if v.over_peer >= 2.0 { "met" } else { "not met" }
                ),
                _ => String::new(),
            },
            v.unrolled_over_reference
        ));
    }
    if let Some(big) = s.datagram.iter().map(|d| d.size).max() {
        let get = |variant: &str| {
            s.datagram
                .iter()
                .find(|d| d.size == big && d.variant == variant)
        };
        if let (Some(o), Some(e)) = (get("optimized"), get("elided")) {
            out.push(format!(
                "Checksummed datagrams of {} end to end (paper 003, Figure 7): the optimized checksum carries {:+.0} % over the RFC's loop and eliding it {:+.0} % (the paper: +{:.0} % and +{:.0} %, UDP over FDDI).",
                size(big),
                100.0 * (o.over_naive - 1.0),
                100.0 * (e.over_naive - 1.0),
                100.0 * PAPER_OPTIMIZED,
                100.0 * PAPER_ELIDED
            ));
        }
    }
    out
}

/// The section.
pub fn blocks(r: &Results) -> Vec<Block> {
    let Some(s) = r.section::<super::Checksum>() else {
        return Vec::new();
    };
    let mut b = vec![
        h(2, "Paper 003 — the Internet checksum at memory speed"),
        p(format!(
            "Every kernel of zcio-checksum ({}), the fused copy-and-checksum, the two fastest Internet-checksum crates on crates.io found (internet-checksum, as its crate is built and built for the instruction sets zcio's kernels use (internet-checksum/native), so that the ratio compares algorithms rather than compiler flags; and ip4sum, whose loop cannot be rebuilt that way) and a plain read of the same bytes (the limit: this core's memory read bandwidth) run side by side on one buffer per size, {} rounds, each contender at least {} ms per round, in rotating order; every contender's result is checked against RFC 1071's loop before it is timed. Throughput is the median over rounds, in Gbit/s of data summed; the bars are the lowest and highest round.",
            s.kernels.join(", "),
            s.rounds,
            s.millis
        )),
    ];
    let cs = contenders(s);
    let series: Vec<Series> = cs
        .iter()
        .map(|(c, kind)| {
            let rows: Vec<&Row> = s.rows.iter().filter(|r| &r.contender == c).collect();
            Series {
                name: c.clone(),
                points: rows.iter().map(|r| (r.size as f64, r.gbps)).collect(),
                style: match kind.as_str() {
                    "peer" | "limit" => Style::Dashed,
                    _ => Style::Line,
                },
                band: Some(
                    rows.iter()
                        .map(|r| (r.size as f64, r.gbps_spread[0], r.gbps_spread[1]))
                        .collect(),
                ),
                color: Some(color(c)),
            }
        })
        .collect();
    b.push(figure(
        "checksum-kernels",
        "Internet checksum throughput against buffer size: zcio's kernels (solid), the crates.io peers and the memory read bandwidth (dashed).".into(),
        Chart {
            title: "Internet checksum kernels".into(),
            x_label: "buffer (bytes)".into(),
            y_label: "Gbit/s".into(),
            x_scale: Scale::Log,
            y_scale: Scale::Log,
            series,
        },
    ));
    if let Some(v) = &s.verdict {
        b.push(p(format!(
            "Beyond the last-level cache ({} of {}), {} reaches {:.0} % of the read bandwidth: summing costs no more than reading, so the checksum is bound by memory (zcio's target: 90 %). The fastest peer, {}, reaches {:.0} % of it there, so no kernel can be twice as fast on such buffers; in cache, where the peers are bound by their instructions, the best kernel is {}. The RFC's loop, one 16-bit word at a time with a fold check in the loop, runs at {:.1} Gbit/s whatever the size; the paper's wide-word, unrolled loop is {:.1}× faster (the paper measured more than 2× on a DECstation).",
            size(v.large_size),
            v.llc_bytes.map_or("unknown".into(), size),
            v.best_kernel,
            100.0 * v.of_read_bandwidth,
            v.fastest_peer,
            100.0 * v.peer_gbps / v.read_gbps,
            v.over_peer_cached
                .map_or("not measured".into(), |x| format!("{x:.2}× the fastest peer")),
            at(s, "reference", v.large_size).map_or(f64::NAN, |r| r.gbps),
            v.unrolled_over_reference
        )));
    }
    let mut sizes: Vec<usize> = s.rows.iter().map(|r| r.size).collect();
    sizes.dedup();
    let mut header = vec!["bytes".to_string()];
    header.extend(cs.iter().map(|(c, _)| format!("{c} Gbit/s")));
    let hdr: Vec<&str> = header.iter().map(|x| x.as_str()).collect();
    let body = sizes
        .iter()
        .map(|&n| {
            let mut row = vec![n.to_string()];
            row.extend(
                cs.iter()
                    .map(|(c, _)| at(s, c, n).map_or("-".into(), |r| format!("{:.1}", r.gbps))),
            );
            row
        })
        .collect();
    b.push(table("Checksum throughput, median Gbit/s", &hdr, body));
    if !s.datagram.is_empty() {
        end_to_end(&mut b, s);
    }
    b
}

/// Figure 7: the datagram path with the naive, optimized and elided checksums.
fn end_to_end(b: &mut Vec<Block>, s: &ChecksumSection) {
    b.push(h(
        3,
        "End to end: naive, optimized and elided checksums (Figure 7)",
    ));
    let elided = s.datagram.iter().find(|d| d.variant == "elided");
    let policy = match elided.and_then(|d| d.path.as_ref().map(|p| (p, d.checksummed))) {
        Some((path, false)) => format!(
            " The elided variant asks the paper's policy (skip the checksum on one host or one CRC-protected link) about the socket's path, which it placed as {path}: no checksum was computed or sent."
        ),
        Some((path, true)) => format!(
            " The elided variant asks the paper's policy about the socket's path, which it placed as {path}: the checksum was kept."
        ),
        None => String::new(),
    };
    b.push(p(format!(
        "A sender puts the checksum of each datagram's payload in an 8-byte header and sends it over a Unix datagram socket; a receiver checks every datagram that carries one as it arrives.{policy} The paper sent UDP between two DECstations over FDDI and gained {:.0} % with the optimized checksum and {:.0} % without one; here both ends share one host, and the kernel's two copies per datagram stay in the path.",
        100.0 * PAPER_OPTIMIZED,
        100.0 * PAPER_ELIDED
    )));
    b.push(table_of(
        "Payload delivered and checked, median Gbit/s (gain over the naive checksum)",
        &[
            "bytes",
            "variant",
            "Gbit/s",
            "lowest–highest",
            "over naive",
            "datagrams",
        ],
        &s.datagram,
        |d| {
            vec![
                d.size.to_string(),
                d.variant.clone(),
                format!("{:.2}", d.gbps),
                format!("{:.2}–{:.2}", d.gbps_spread[0], d.gbps_spread[1]),
                format!("{:+.0} %", 100.0 * (d.over_naive - 1.0)),
                d.datagrams.to_string(),
            ]
        },
    ));
}
