//! The report's sections for paper 003's peer-to-peer I/O: splice against a read/write loop, per
//! pair of descriptors, beside the paper's claims: CPU availability 30 % better or more,
//! throughput and latency two to three times better.

use crate::report::doc::Block;
use crate::report::results::Results;
use crate::report::text::{h, p, table_of};

/// The peer-to-peer I/O findings, at the head of its section.
pub fn splice_findings(r: &Results) -> Vec<String> {
    let Some(s) = r.section::<super::Splice>() else {
        return Vec::new();
    };
    let parts: Vec<String> = s
        .verdicts
        .iter()
        .map(|v| {
            format!(
                "{}: {:.2}× the loop's throughput, {:.2}× less CPU per byte, {:.2}× the CPU it leaves a task sharing its core",
                v.pair.replace('_', " "),
                v.throughput_ratio,
                v.cpu_ratio,
                v.availability_ratio
            )
        })
        .collect();
    if parts.is_empty() {
        return Vec::new();
    }
    let thr = s.verdicts.iter().all(|v| v.throughput_ratio >= 1.0);
    let cpu = s.verdicts.iter().all(|v| v.availability_ratio >= 1.3);
    vec![format!(
        "Peer-to-peer I/O (paper 003): splice against a read/write loop — {}. zcio's target is at least the loop's throughput ({}) and 30 % more CPU left to a concurrent task ({}); the paper reported 2-3× throughput and 30 % more CPU.",
        parts.join("; "),
        if thr {
            "met on every pair"
        } else {
            "not met on every pair"
        },
        if cpu { "met" } else { "not met" }
    )]
}

/// The peer-to-peer I/O sections.
pub fn splice_blocks(r: &Results) -> Vec<Block> {
    let Some(s) = r.section::<super::Splice>() else {
        return Vec::new();
    };
    let mut b = vec![
        h(2, "Paper 003 — peer-to-peer I/O: splice against read/write"),
        p(format!(
            "Each pair of descriptors moves the same data by a splice (zcio-sequoia's `Splice::start_flow`, on whichever of copy_file_range, sendfile or splice the pair allows) and by a read/write loop through a 64 KiB buffer, both in 64 KiB increments, alternating over {} rounds. What every sink receives, in every pair and variant, is checked against what was sent, outside the time measured: a file sink byte for byte (after a throughput run; before each time a paced run empties it, with the task held and the clock stopped), a socket sink by the stamps of their offset the data carries every 4 KiB (its reader keeps them as it reads; reading every byte would slow the reader the run waits on); a difference fails the run. Throughput is the median over rounds; latency is the median time of one increment; CPU per MiB is the transfer thread's own CPU time (user and system) in the throughput runs, so the kernel's work for its calls is in it and the socket's other end is not. CPU availability: the transfer runs at a fixed pace ({:.0} % of the slower variant's throughput, for {} s, in steps of {} KiB: the paced source delivers that much at a time, as a device delivers blocks, and the transfer sleeps between them) while a CPU-bound task shares its core{}; the task's progress over its progress alone is the CPU the transfer left it. Files live in a temporary directory, here on {} (copy_file_range shares blocks only on file systems that can, such as btrfs or xfs with reflinks; elsewhere it copies in the kernel, as read/write copies through the application); sockets are Unix stream sockets whose other end runs on the second CPU.",
            s.rounds,
            100.0 * s.pace_fraction,
            s.seconds,
            s.paced_step.unwrap_or(64 << 10) >> 10,
            if s.pinned {
                " (both pinned to CPU 0)"
            } else {
                " (not pinned: one CPU)"
            },
            s.files_fs
        )),
    ];
    b.push(table_of(
        "Splice against a read/write loop",
        &[
            "pair",
            "variant",
            "mechanism",
            "Gbit/s",
            "lowest–highest",
            "64 KiB increment µs",
            "CPU µs per MiB",
            "pace Gbit/s",
            "kept Gbit/s",
            "CPU left to the task",
        ],
        &s.rows,
        |r| {
            vec![
                r.pair.replace('_', " "),
                r.variant.replace('_', "/"),
                r.mechanism.clone(),
                format!("{:.2}", r.gbps),
                format!("{:.2}–{:.2}", r.gbps_spread[0], r.gbps_spread[1]),
                format!("{:.1}", r.latency_us),
                format!("{:.0}", r.cpu_us_per_mib),
                format!("{:.2}", r.pace_gbps),
                format!("{:.2}", r.paced_gbps),
                format!("{:.0} %", 100.0 * r.cpu_availability),
            ]
        },
    ));
    b.push(table_of(
        "Splice over the loop, per pair (the paper: throughput and latency 2-3×, CPU availability +30 % or more)",
        &[
            "pair",
            "throughput",
            "latency (loop / splice)",
            "CPU per byte (loop / splice)",
            "CPU left",
        ],
        &s.verdicts,
            |v| {
                vec![
                    v.pair.replace('_', " "),
                    format!("{:.2}×", v.throughput_ratio),
                    format!("{:.2}×", v.latency_ratio),
                    format!("{:.2}×", v.cpu_ratio),
                    format!("{:.2}×", v.availability_ratio),
                ]
            },
    ));
    b.push(p("A task that shares the transfer's core gets the core whenever the transfer waits for its next increment, and half of it while both run; so the CPU a transfer leaves grows only slowly with its efficiency, and a splice that needs half the loop's CPU per byte leaves the task a few percent more, not a multiple: the CPU per byte says more plainly what each mechanism costs. Where the sink or source is a file on tmpfs, every mechanism copies through the page cache, and splice and the loop do nearly the same work."));
    b
}
