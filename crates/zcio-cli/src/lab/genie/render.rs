//! Paper 000's part of the report: its findings, then its figures and tables, each with the
//! paper's key numbers beside this machine's.

use crate::lab::genie::chart::{against_length, curves, distinct_lengths};
use crate::lab::genie::measure::{GenieResults, LatencyFit, Point, Thresholds};
use crate::lab::genie::model::fmt_line;
use crate::report::doc::Block;
use crate::report::machine::Machine;
use crate::report::plot::Scale;
use crate::report::results::{GenieSection, Results};
use crate::report::text::{figure, h, p, size, table, table_of, us};
use zcio_genie::{InputBuffering, Semantics};

/// The paper's Table 9 actual fits (µs, B in bytes): early demultiplexing, application-aligned
/// pooled, unaligned pooled.
pub(super) const PAPER_TABLE9: [(Semantics, [(f64, f64); 3]); 8] = [
    (
        Semantics::Copy,
        [(0.0998, 125.0), (0.101, 139.0), (0.101, 144.0)],
    ),
    (
        Semantics::EmulatedCopy,
        [(0.0622, 150.0), (0.0622, 175.0), (0.0848, 195.0)],
    ),
    (
        Semantics::Share,
        [(0.0621, 162.0), (0.0638, 197.0), (0.0846, 219.0)],
    ),
    (
        Semantics::EmulatedShare,
        [(0.0600, 137.0), (0.0619, 167.0), (0.0824, 178.0)],
    ),
    (
        Semantics::Move,
        [(0.0626, 202.0), (0.0631, 234.0), (0.0631, 234.0)],
    ),
    (
        Semantics::EmulatedMove,
        [(0.0609, 150.0), (0.0623, 183.0), (0.0623, 183.0)],
    ),
    (
        Semantics::WeakMove,
        [(0.0615, 170.0), (0.0633, 206.0), (0.0633, 206.0)],
    ),
    (
        Semantics::EmulatedWeakMove,
        [(0.0602, 143.0), (0.0619, 184.0), (0.0619, 184.0)],
    ),
];

/// The paper's Figure 4 at 60 KB (µs of CPU per exchange).
pub(super) const PAPER_FIG4: [(Semantics, f64); 8] = [
    (Semantics::Copy, 3224.0),
    (Semantics::Move, 986.0),
    (Semantics::Share, 952.0),
    (Semantics::WeakMove, 931.0),
    (Semantics::EmulatedCopy, 825.0),
    (Semantics::EmulatedMove, 753.0),
    (Semantics::EmulatedWeakMove, 688.0),
    (Semantics::EmulatedShare, 644.0),
];

/// The paper's Table 6 (Micron P166, µs, B in bytes) by zcio operation name.
pub(super) const PAPER_TABLE6: [(&str, &str); 13] = [
    ("copyin", "0.0180·B − 3"),
    ("copyout", "0.0220·B + 15"),
    ("reference", "0.000363·B + 5"),
    ("unreference", "0.000100·B + 2"),
    ("read-only", "0.000367·B + 2"),
    ("wire", "0.00141·B + 18"),
    ("unwire", "0.000237·B + 10"),
    ("swap", "0.00163·B + 15"),
    ("overlay-allocate", "7"),
    ("region-create", "24"),
    ("region-check", "5 (check) + 0.000474·B + 6 (map)"),
    ("invalidate", "0.000373·B + 2"),
    ("region-cache", "3 (mark out)"),
];

pub(super) const SCHEMES: [InputBuffering; 3] = [
    InputBuffering::EarlyDemux,
    InputBuffering::PooledAligned,
    InputBuffering::PooledUnaligned,
];

pub(super) fn scheme_name(i: InputBuffering) -> &'static str {
    match i {
        InputBuffering::EarlyDemux => "early demultiplexing",
        InputBuffering::PooledAligned => "application-aligned pooled",
        InputBuffering::PooledUnaligned => "unaligned pooled",
        InputBuffering::Outboard => "outboard",
    }
}

pub(super) fn check(b: Option<bool>) -> &'static str {
    match b {
        Some(true) => "agrees",
        Some(false) => "differs",
        None => "not measured",
    }
}

/// The Genie findings that head its section: the integrity of every run, and how well the
/// breakdown model estimates the measurements (none without Genie). The conclusions tested
/// have their own section.
pub fn findings(r: &Results) -> Vec<String> {
    let Some(g) = r.genie() else {
        return Vec::new();
    };
    let res = &g.results;
    let mut items: Vec<String> = Vec::new();
    let all: Vec<&Point> = res
        .latency
        .iter()
        .chain(&res.short)
        .chain(&res.cpu)
        .chain(&res.modules)
        .collect();
    let bad: Vec<String> = all
        .iter()
        .filter(|x| !x.verified)
        .map(|x| format!("{} {} {} {}", x.module, x.semantics, x.input, size(x.bytes)))
        .collect();
    items.push(if bad.is_empty() {
        format!(
            "Integrity: all {} runs delivered every byte exactly as it was at the sender's call.",
            all.iter().map(|x| x.runs.len()).sum::<usize>()
        )
    } else {
        format!("Integrity: data differed in {} (weak-integrity semantics may legitimately differ when the sender overwrites; these runs did not overwrite).", bad.join(", "))
    });
    if !g.model.estimates.is_empty() {
        let errs: Vec<f64> = g.model.estimates.iter().map(|e| e.error_median).collect();
        let abs: Vec<f64> = errs.iter().map(|e| e.abs()).collect();
        let worst = abs.iter().copied().fold(0.0, f64::max);
        let under = errs.iter().filter(|e| **e < 0.0).count();
        items.push(format!(
            "Breakdown model (Table 9): base + the fitted primitive costs on each path estimates the measured latencies within {:.0} % (median over lengths; median over the {} semantics × input schemes), {:.0} % at worst, and within {:.0} % with the base taken per length; {} of {} estimates fall short{}. The paper's estimates were within a few percent.",
            crate::report::fit::median(&abs).unwrap_or(0.0) * 100.0,
            errs.len(),
            worst * 100.0,
            crate::report::fit::median(
                &g.model
                    .estimates
                    .iter()
                    .map(|e| e.error_median_per_length_base.abs())
                    .collect::<Vec<_>>()
            )
            .unwrap_or(0.0)
                * 100.0,
            under,
            errs.len(),
            if under * 4 >= errs.len() * 3 {
                ": here the primitives, timed one by one, do not add up to the whole; the rest lies between them (cache and TLB traffic), which the paper's slow network hid"
            } else {
                ""
            }
        ));
    }
    items.extend(crate::lab::genie::regions::finding(res));
    items.extend(crate::lab::genie::channel::report::finding(res));
    items.extend(crate::lab::genie::python::report::finding(res));
    items.extend(crate::lab::genie::c::report::finding(res));
    items
}

/// Paper 000's sections: the machine, every figure and table of the paper, the fitted models.
pub fn blocks(r: &Results) -> Vec<Block> {
    let Some(g) = r.genie() else {
        return Vec::new();
    };
    let res = &g.results;
    let mut b = vec![h(2, "Machine"), machine_table(&r.machine)];

    b.push(h(2, "Paper 000 — Genie: data-passing semantics"));
    b.push(p("The paper ran datagrams between two Pentium PCs over 155 Mb/s ATM. Here the two processes are on one machine and the network is zcio's memory network: a pipe whose pages the sender references with vmsplice and the receiver reads (the kernel copies once), with descriptors and completions in a shared ring. The wire is therefore a memory copy, far faster than the paper's network relative to its CPU, so the VM operations that distinguish the semantics weigh much more here. Figures 3, 6 and 7 use the VM paths from one page up (zero-copy thresholds) as the paper did; the dashed curve in Figure 3 is emulated copy with this machine's calibrated thresholds, which copy where copying is cheaper."));

    let lat_zero: Vec<&Point> = res
        .latency
        .iter()
        .filter(|x| x.thresholds == Thresholds::ZeroCopy)
        .collect();
    for (i, scheme) in SCHEMES.iter().enumerate() {
        b.extend(latency_figure(res, &lat_zero, i, *scheme));
    }
    if !res.cpu.is_empty() {
        b.extend(processing_time_figure(res));
    }
    b.extend(crate::lab::genie::huge::blocks(res));
    b.extend(crate::lab::genie::regions::blocks(res));
    b.extend(crate::lab::genie::channel::report::blocks(res));
    b.extend(crate::lab::genie::python::report::blocks(res));
    b.extend(crate::lab::genie::c::report::blocks(res));
    if !res.short.is_empty() {
        b.extend(short_messages_figure(g));
    }
    if !lat_zero.is_empty() {
        b.extend(copies_and_paths(&lat_zero));
    }
    if !res.modules.is_empty() {
        b.extend(other_modules(res));
    }
    b
}

/// What the numbers were measured on.
fn machine_table(m: &Machine) -> Block {
    table(
        "What these numbers were measured on",
        &["what", "this machine"],
        vec![
            vec![
                "CPU".into(),
                format!("{} ({} logical CPUs)", m.cpu_model, m.logical_cpus),
            ],
            vec![
                "memory".into(),
                format!("{:.1} GiB", m.memory_bytes as f64 / (1u64 << 30) as f64),
            ],
            vec!["caches".into(), m.caches.join(", ")],
            vec!["kernel".into(), m.kernel.clone()],
            vec!["transparent huge pages".into(), m.thp.clone()],
            vec!["page size".into(), format!("{} B", m.page_size)],
            vec![
                "VM mechanisms".into(),
                m.features
                    .get("vm")
                    .map_or(String::new(), |v| v.to_string()),
            ],
            vec!["compiler".into(), m.rustc.clone()],
            vec!["zcio".into(), m.zcio.clone()],
        ],
    )
}

/// Figure 3, 6 or 7 (the `i`th input scheme): latency against length, and the paper's Table 9
/// fit beside this machine's.
fn latency_figure(
    res: &GenieResults,
    lat_zero: &[&Point],
    i: usize,
    scheme: InputBuffering,
) -> Vec<Block> {
    let fig = ["3", "6", "7"][i];
    let pts: Vec<&Point> = res
        .latency
        .iter()
        .filter(|x| x.input == scheme && (x.thresholds == Thresholds::ZeroCopy || i == 0))
        .collect();
    if pts.is_empty() {
        return Vec::new();
    }
    let mut b = vec![h(
        3,
        format!("Figure {fig}: end-to-end latency, {}", scheme_name(scheme)),
    )];
    b.push(figure(
        &format!("fig{fig}-latency-{}", scheme.name()),
        format!("End-to-end latency against length with {} input (median of runs; bars: lowest and highest run).", scheme_name(scheme)),
        against_length(format!("Figure {fig}: latency, {}", scheme_name(scheme)), "latency (µs)", Scale::Log, curves(&pts, false, true)),
    ));
    let largest = pts.iter().map(|x| x.bytes).max().unwrap_or(0);
    let near60 = pts
        .iter()
        .map(|x| x.bytes)
        .min_by_key(|x| x.abs_diff(61440))
        .unwrap_or(0);
    let lengths = [near60, largest];
    let lengths = &lengths[..if near60 == largest { 1 } else { 2 }];
    let rows = PAPER_TABLE9
        .iter()
        .map(|(s, lines)| {
            let fit = res.fits.iter().find(|f| {
                f.figure == fig && f.semantics == *s && f.thresholds == Thresholds::ZeroCopy
            });
            let paper = (lines[i], PAPER_TABLE9[3].1[i]);
            table9_row(lat_zero, scheme, *s, paper, fit, lengths)
        })
        .collect();
    let mut header = vec![
        "semantics".to_string(),
        "paper: latency".into(),
        "paper: / e. share at 60 KB".into(),
        "here: fitted latency".into(),
    ];
    for l in lengths {
        header.push(format!("here: µs at {}", size(*l)));
        header.push("here: / e. share".into());
    }
    let hdr: Vec<&str> = header.iter().map(|s| s.as_str()).collect();
    b.push(table(
        &format!("Figure {fig}: the paper's fitted latency beside this machine's (ratios to emulated share)"),
        &hdr,
        rows,
    ));
    b
}

/// One semantics' row of the Table 9 comparison: the paper's line and its ratio to emulated
/// share at 60 KB (`paper`: its line and emulated share's), this machine's fit, and the
/// measured latencies (and ratios) at `lengths`.
fn table9_row(
    lat_zero: &[&Point],
    scheme: InputBuffering,
    s: Semantics,
    (paper, paper_es): ((f64, f64), (f64, f64)),
    fit: Option<&LatencyFit>,
    lengths: &[usize],
) -> Vec<String> {
    let latency_at = |s: Semantics, bytes: usize| {
        lat_zero
            .iter()
            .find(|x| x.semantics == s && x.input == scheme && x.bytes == bytes)
            .map(|x| x.latency_ns)
    };
    let p60 = paper.0 * 61440.0 + paper.1;
    let pes60 = paper_es.0 * 61440.0 + paper_es.1;
    let mut row = vec![
        s.to_string(),
        format!("{:.4}·B + {:.0} µs", paper.0, paper.1),
        format!("{:.2}", p60 / pes60),
        fit.map_or("-".into(), |f| {
            format!(
                "{} ns (R² {})",
                fmt_line(&f.line),
                f.line.r2.map_or("-".into(), |r| format!("{r:.3}"))
            )
        }),
    ];
    for l in lengths {
        row.push(latency_at(s, *l).map_or("-".into(), us));
        row.push(
            latency_at(s, *l)
                .zip(latency_at(Semantics::EmulatedShare, *l))
                .map_or("-".into(), |(a, e)| format!("{:.2}", a / e)),
        );
    }
    row
}

/// Figure 4: CPU time per transfer, and the paper's times at 60 KB beside this machine's.
fn processing_time_figure(res: &GenieResults) -> Vec<Block> {
    let pts: Vec<&Point> = res.cpu.iter().collect();
    let mut b = vec![h(3, "Figure 4: I/O processing time")];
    b.push(p("CPU time of both processes per transfer, with waits that sleep at once (no spinning), so that idle time costs nothing: the analogue of the paper's latency minus idle time. That includes the sender's wait for room on the wire: it sleeps until the receiver has read enough, instead of spinning in the kernel on the pipe the receiver is copying from. The processes' CPU clocks include the kernel's work for them (the wire's copy, page-table updates, the userfaultfd handler thread). Each run's first message, which makes the pools, staging and bounce buffers the others reuse, is left out."));
    b.push(figure(
        "fig4-cpu",
        "I/O processing time (CPU µs per transfer, both processes) against length, early demultiplexing.".into(),
        against_length("Figure 4: I/O processing time".to_string(), "CPU time per transfer (µs)", Scale::Log, curves(&pts, true, false)),
    ));
    let near60 = pts
        .iter()
        .map(|x| x.bytes)
        .min_by_key(|x| x.abs_diff(61440))
        .unwrap_or(0);
    let largest = pts.iter().map(|x| x.bytes).max().unwrap_or(0);
    let cpu_at = |s: Semantics, b: usize| {
        pts.iter()
            .find(|x| x.semantics == s && x.bytes == b)
            .map(|x| x.cpu_ns)
    };
    let rows = PAPER_FIG4
        .iter()
        .map(|(s, paper)| {
            let mut row = vec![
                s.to_string(),
                format!("{paper:.0}"),
                format!("{:.2}", paper / 3224.0),
            ];
            for b in [near60, largest] {
                let here = cpu_at(*s, b);
                row.push(here.map_or("-".into(), us));
                row.push(
                    here.zip(cpu_at(Semantics::Copy, b))
                        .map_or("-".into(), |(h, c)| format!("{:.2}", h / c)),
                );
            }
            row
        })
        .collect();
    let h1 = format!("here µs at {}", size(near60));
    let h2 = format!("here µs at {}", size(largest));
    b.push(table(
        &format!(
            "CPU time per transfer: the paper at 60 KB, this machine at {} and at {}",
            size(near60),
            size(largest)
        ),
        &[
            "semantics",
            "paper µs",
            "paper / copy",
            &h1,
            "/ copy",
            &h2,
            "/ copy",
        ],
        rows,
    ));
    b
}

/// Figure 5: short messages with the calibrated thresholds, and their latency table.
fn short_messages_figure(g: &GenieSection) -> Vec<Block> {
    let pts: Vec<&Point> = g.results.short.iter().collect();
    // The thresholds the run used (recorded with it), else this process's.
    let t = g
        .profile
        .as_ref()
        .and_then(|p| serde_json::from_value(p.profile["thresholds"].clone()).ok())
        .unwrap_or(zcio_genie::profile::Profile::current().thresholds);
    let mut b = vec![h(3, "Figure 5: short messages")];
    b.push(p(format!(
        "Early demultiplexing with this machine's calibrated thresholds: emulated copy converts outputs shorter than {} to copy, swaps input only from {} full page(s), and completes partial pages by reverse copyout from {} bytes (the paper set 1666, 280 for emulated share, and 2178 bytes by hand). The paper found copy lowest for short datagrams (145 µs, tied with emulated share) and move highest (zeroing the rest of the page).",
        if t.short_output_bytes == usize::MAX { "any length (always copy)".to_string() } else { format!("{} bytes", t.short_output_bytes) },
        if t.swap_min_pages == usize::MAX { "never".to_string() } else { t.swap_min_pages.to_string() },
        if t.reverse_copyout_bytes == usize::MAX { "never".to_string() } else { t.reverse_copyout_bytes.to_string() },
    )));
    b.push(figure(
        "fig5-short",
        "End-to-end latency of short messages, early demultiplexing, calibrated thresholds.".into(),
        against_length(
            "Figure 5: short messages".to_string(),
            "latency (µs)",
            Scale::Linear,
            curves(&pts, false, false),
        ),
    ));
    let lengths = distinct_lengths(pts.iter().copied());
    let rows = Semantics::ALL
        .iter()
        .map(|s| {
            let at = |l: &usize| {
                pts.iter()
                    .find(|x| x.semantics == *s && x.bytes == *l)
                    .map_or("-".into(), |x| us(x.latency_ns))
            };
            std::iter::once(s.to_string())
                .chain(lengths.iter().map(at))
                .collect()
        })
        .collect();
    let header: Vec<String> = std::iter::once("semantics".to_string())
        .chain(lengths.iter().map(|l| format!("{l} B")))
        .collect();
    let hdr: Vec<&str> = header.iter().map(|s| s.as_str()).collect();
    b.push(table("Latency of short messages (µs)", &hdr, rows));
    b
}

/// Bytes copied by the CPU and by the kernel, and swapped, per message of the largest length.
fn copies_and_paths(lat_zero: &[&Point]) -> Vec<Block> {
    let largest = lat_zero.iter().map(|x| x.bytes).max().unwrap_or(0);
    let rows = SCHEMES
        .iter()
        .flat_map(|sc| {
            Semantics::ALL.iter().filter_map(move |s| {
                lat_zero
                    .iter()
                    .find(|x| x.semantics == *s && x.input == *sc && x.bytes == largest)
                    .map(|x| {
                        vec![
                            scheme_name(*sc).to_string(),
                            s.to_string(),
                            x.cpu_copied_bytes.to_string(),
                            x.kernel_copied_bytes.map_or("?".into(), |k| k.to_string()),
                            x.swapped_bytes.to_string(),
                            x.path.clone(),
                        ]
                    })
            })
        })
        .collect();
    vec![
        h(3, "Bytes copied, and the path each semantics took"),
        table(
            &format!(
                "Per message of {}: bytes copied by the CPU in user space, by the kernel (the wire's copy), and moved as pages",
                size(largest)
            ),
            &[
                "input",
                "semantics",
                "CPU-copied B",
                "kernel-copied B",
                "swapped B",
                "path",
            ],
            rows,
        ),
    ]
}

/// The file and kernel-socket modules: latency, copies and the path chosen.
fn other_modules(res: &GenieResults) -> Vec<Block> {
    vec![
        h(3, "Other modules: files and kernel sockets"),
        p(
            "The same semantics on the file module (a file written and read back, O_DIRECT where the buffer and offset allow) and on kernel sockets (Unix and TCP loopback), with the calibrated thresholds. The path column says which mechanism the library took and why: sockets copy in the kernel (MSG_ZEROCOPY does not pay on loopback, where the kernel copies anyway), so the semantics' promise is kept by the copy.",
        ),
        table_of(
            "Module, semantics, latency (µs, median), copies per message, and the path chosen",
            &[
                "module",
                "semantics",
                "length",
                "µs",
                "CPU-copied B",
                "kernel-copied B",
                "verified",
                "path",
            ],
            &res.modules,
            |x| {
                vec![
                    x.module.clone(),
                    x.semantics.to_string(),
                    size(x.bytes),
                    us(x.latency_ns),
                    x.cpu_copied_bytes.to_string(),
                    x.kernel_copied_bytes.map_or("?".into(), |k| k.to_string()),
                    if x.verified {
                        "yes".into()
                    } else {
                        "NO".into()
                    },
                    x.path.clone(),
                ]
            },
        ),
    ]
}
