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
                "{}: {:.2}× the loop's throughput, {:.2}× less CPU per byte, {:.2}× the CPU it leaves a background task sharing its core at {:.0} % pace",
                v.pair.replace('_', " "),
                v.throughput_ratio,
                v.cpu_ratio,
                v.availability_ratio,
                100.0 * v.pace_fraction.unwrap_or(s.pace_fraction)
            )
        })
        .collect();
    if parts.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "Peer-to-peer I/O (paper 003): splice against a read/write loop — {}. zcio's targets are at least the loop's throughput ({}) and 30 % more CPU left to a concurrent task ({}); the paper reported 2-3× throughput and 30 % more CPU.",
        parts.join("; "),
        where_met(&s.verdicts, |v| v.throughput_ratio >= 1.0),
        where_met(&s.verdicts, |v| v.availability_ratio >= 1.3),
    )]
}

/// On which pairs a target is met: "met on every pair", "met on none", or "met on A and B,
/// not on C".
fn where_met(
    verdicts: &[super::measure::Verdict],
    met: fn(&super::measure::Verdict) -> bool,
) -> String {
    let name = |v: &&super::measure::Verdict| v.pair.replace('_', " ");
    let yes: Vec<String> = verdicts
        .iter()
        .filter(|v| met(v))
        .map(|v| name(&v))
        .collect();
    let no: Vec<String> = verdicts
        .iter()
        .filter(|v| !met(v))
        .map(|v| name(&v))
        .collect();
    match (yes.is_empty(), no.is_empty()) {
        (_, true) => "met on every pair".into(),
        (true, false) => "met on none".into(),
        (false, false) => format!("met on {}, not on {}", yes.join(" and "), no.join(" and ")),
    }
}

/// The peer-to-peer I/O sections.
pub fn splice_blocks(r: &Results) -> Vec<Block> {
    let Some(s) = r.section::<super::Splice>() else {
        return Vec::new();
    };
    let mut b = vec![
        h(2, "Paper 003 — peer-to-peer I/O: splice against read/write"),
        p(format!(
            "Each pair of descriptors moves the same data by a splice (zcio-sequoia's `Splice::start_flow`, on whichever of copy_file_range, sendfile or splice the pair allows) and by a read/write loop through a 64 KiB buffer, both in 64 KiB increments, alternating over {} rounds. What every sink receives, in every pair and variant, is checked against what was sent, outside the time measured: a file sink byte for byte (after a throughput run; before each time a paced run empties it, with the task held and the clock stopped), a socket sink by the stamps of their offset the data carries every 4 KiB (its reader keeps them as it reads; reading every byte would slow the reader the run waits on); a difference fails the run. Throughput is the median over rounds; latency is the median time of one increment; CPU per MiB is the transfer thread's own CPU time (user and system) in the throughput runs, so the kernel's work for its calls is in it and the socket's other end is not. CPU availability: the transfer runs at a fixed pace ({} of the slower variant's throughput, for {} s each, in steps of {} KiB: the paced source delivers that much at a time, as a device delivers blocks, and the transfer sleeps between them) while a CPU-bound task shares its core{}; the task's progress over its progress alone is the CPU the transfer left it. Files live in a temporary directory, here on {} (copy_file_range shares blocks only on file systems that can, such as btrfs or xfs with reflinks; elsewhere it copies in the kernel, as read/write copies through the application); sockets are Unix stream sockets whose other end runs on the second CPU.{}",
            s.rounds,
            pace_list(s),
            s.seconds,
            s.paced_step.unwrap_or(64 << 10) >> 10,
            match (s.pinned, s.task_background) {
                (true, true) =>
                    " (both pinned to CPU 0, the task at the lowest priority, nice 19, as a background job: the transfer runs whenever its next increment is due)",
                (true, false) =>
                    " (both pinned to CPU 0, at equal priority: the scheduler shares the core evenly while both run)",
                (false, true) => " (not pinned: one CPU; the task at the lowest priority, nice 19)",
                (false, false) => " (not pinned: one CPU; at equal priority)",
            },
            s.files_fs,
            if s.paces.len() > 1 {
                " The first two tables give each pair at the fastest of these paces that both its variants kept; the third gives every pace."
            } else {
                ""
            }
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
    if s.paces.len() > 1 {
        b.push(table_of(
            "CPU left to the background task at each pace (median over rounds, lowest–highest)",
            &[
                "pair",
                "pace",
                "Gbit/s",
                "loop kept",
                "splice kept",
                "left by the loop",
                "left by splice",
                "splice / loop",
            ],
            &pace_rows(s),
            |(pair, l, sp)| {
                let left = |x: &super::measure::Paced| {
                    format!(
                        "{:.0} % ({:.0}–{:.0})",
                        100.0 * x.cpu_availability,
                        100.0 * x.cpu_availability_spread[0],
                        100.0 * x.cpu_availability_spread[1]
                    )
                };
                vec![
                    pair.replace('_', " "),
                    format!("{:.0} %", 100.0 * l.fraction),
                    format!("{:.2}", l.pace_gbps),
                    format!("{:.2}", l.paced_gbps),
                    format!("{:.2}", sp.paced_gbps),
                    left(l),
                    left(sp),
                    format!("{:.2}×", sp.cpu_availability / l.cpu_availability),
                ]
            },
        ));
    }
    b.push(p(availability_prose(s)));
    b
}

/// What the paced runs say of where the transfer's CPU went, from this run's numbers: the
/// share of the core the task lost, against the share the transfer's CPU per byte accounts
/// for at the pace it kept.
fn availability_prose(s: &super::measure::SpliceSection) -> String {
    let parts: Vec<String> = s
        .rows
        .iter()
        .filter(|r| r.cpu_availability.is_finite() && r.cpu_us_per_mib.is_finite())
        .map(|r| {
            let mib_per_s = r.paced_gbps * 1e9 / 8.0 / (1u64 << 20) as f64;
            let by_bytes = r.cpu_us_per_mib * mib_per_s / 1e6;
            let lost = 1.0 - r.cpu_availability;
            format!(
                "{} by {} at {:.2} Gbit/s: the task lost {:.0} % of the core, the transfer's CPU per byte at that rate accounts for {:.0} %",
                r.pair.replace('_', " "),
                r.variant.replace('_', "/"),
                r.paced_gbps,
                100.0 * lost,
                100.0 * by_bytes
            )
        })
        .collect();
    let mut t = String::from(
        "The CPU a transfer leaves is what its work at the pace costs the core: its CPU per byte, and what each increment costs beyond it (the wake-up for it, the sleep after it, kernel work counted on neither thread). ",
    );
    if !s.task_background {
        t.push_str("In this run the task ran at the transfer's priority, so while both ran the scheduler shared the core evenly and the transfer's CPU per byte showed only partly in the task's progress. ");
    }
    if !parts.is_empty() {
        t.push_str(&format!("Measured: {}.", parts.join("; ")));
    }
    if s.files_fs == "tmpfs" {
        t.push_str(" The files live on tmpfs, where every mechanism copies through the page cache, so between two files splice and the loop do nearly the same work.");
    }
    t
}

/// The paces measured, and which one the rows and verdicts give.
fn pace_list(s: &super::measure::SpliceSection) -> String {
    if s.paces.len() <= 1 {
        return format!("{:.0} %", 100.0 * s.pace_fraction);
    }
    let mut each: Vec<String> = s
        .paces
        .iter()
        .map(|f| format!("{:.0} %", 100.0 * f))
        .collect();
    let last = each.pop().unwrap_or_default();
    format!("{} or {last}", each.join(", "))
}

/// Per pair and pace: the loop's and splice's availability runs.
fn pace_rows(
    s: &super::measure::SpliceSection,
) -> Vec<(String, super::measure::Paced, super::measure::Paced)> {
    let mut out = Vec::new();
    for sp in s.rows.iter().filter(|r| r.variant == "splice") {
        let Some(l) = s
            .rows
            .iter()
            .find(|r| r.pair == sp.pair && r.variant == "read_write")
        else {
            continue;
        };
        for a in &sp.paced {
            if let Some(b) = l.paced.iter().find(|b| b.fraction == a.fraction) {
                out.push((sp.pair.clone(), b.clone(), a.clone()));
            }
        }
    }
    out
}
