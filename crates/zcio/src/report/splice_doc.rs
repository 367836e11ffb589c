//! The report's sections for paper 003's container shipping (the frame experiment, beside the
//! paper's 400 % and six animations against one) and peer-to-peer I/O (splice against a
//! read/write loop, per pair of descriptors, beside the paper's claims: CPU availability 30 %
//! better or more, throughput and latency two to three times better).

use crate::report::doc::Block;
use crate::report::plot::{Chart, Scale, Series, Style};
use crate::report::results::Results;
use crate::report::text::{figure, h, p, table};

/// The frame experiment's findings for the report's summary.
pub fn frames_findings(r: &Results) -> Vec<String> {
    let Some(f) = &r.frames else {
        return Vec::new();
    };
    let Some(first) = f.rows.first().map(|x| x.relays) else {
        return Vec::new();
    };
    let get = |v: &str| f.rows.iter().find(|x| x.variant == v && x.relays == first);
    let (Some(rw), Some(c), Some(u), Some(vm), Some(vu)) = (
        get("read_write"),
        get("containers"),
        get("containers_unmapped"),
        get("volatile"),
        get("volatile_unmapped"),
    ) else {
        return Vec::new();
    };
    let best = vm.over_read_write.max(vu.over_read_write);
    let longest = f.rows.iter().map(|x| x.relays).max().unwrap_or(first);
    let far: Vec<String> = f
        .rows
        .iter()
        .filter(|x| x.relays == longest && x.variant.starts_with("volatile"))
        .map(|x| format!("{} {:.2}×", x.variant.replace('_', " "), x.over_read_write))
        .collect();
    vec![format!(
        "Container shipping (paper 003, Figure 4): 640×480 frames from a sender through {first} {} to a display run at {:.0} frames/s by read/write ({:.0} µs of CPU a frame). Sealed containers, a fresh memory file a frame, run at {:.0} ({:.0} with the relay not mapping them): {:.2}×, at {:.0} µs of CPU a frame. Volatile containers, going back to the sender to be filled again as a compositor releases its clients' buffers, run at {:.0} with the relay mapping them and {:.0} without: {:.2}× and {:.2}×, at {:.0} and {:.0} µs a frame. The paper: almost 400 % more, six 30 fps animations against one; zcio's target is at least 4×: {} (sealed: not met). Through {longest} relays, over read/write's frames/s: {}.",
        if first == 1 {
            "relay process"
        } else {
            "relay processes"
        },
        rw.fps,
        rw.cpu_us_per_frame,
        c.fps,
        u.fps,
        c.over_read_write,
        c.cpu_us_per_frame,
        vm.fps,
        vu.fps,
        vm.over_read_write,
        vu.over_read_write,
        vm.cpu_us_per_frame,
        vu.cpu_us_per_frame,
        if best >= 4.0 {
            "met by volatile containers"
        } else {
            "not met"
        },
        far.join(" and ")
    )]
}

/// The peer-to-peer I/O findings for the report's summary.
pub fn splice_findings(r: &Results) -> Vec<String> {
    let Some(s) = &r.splice else {
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

/// The frame experiment's sections.
pub fn frames_blocks(r: &Results) -> Vec<Block> {
    let Some(f) = &r.frames else {
        return Vec::new();
    };
    let mut series = Vec::new();
    for (k, v) in crate::frames_bench::VARIANTS.iter().enumerate() {
        let rows: Vec<_> = f.rows.iter().filter(|x| x.variant == *v).collect();
        series.push(Series {
            name: v.replace('_', " "),
            points: rows.iter().map(|x| (x.relays as f64, x.fps)).collect(),
            style: Style::Line,
            band: Some(
                rows.iter()
                    .map(|x| (x.relays as f64, x.fps_spread[0], x.fps_spread[1]))
                    .collect(),
            ),
            color: Some(k),
        });
    }
    vec![
        h(2, "Paper 003 — container shipping: the frame experiment"),
        p(format!(
            "A sender process makes 640×480 one-byte frames and sends them over Unix sockets through a pipeline of relay processes to a display process owning the frame buffer ({} frames a run, {} rounds, the variants alternating; pipelines of {} relays). By read/write, each hop copies the frame into and out of the kernel and the display copies it into its frame buffer. By sealed containers (zcio-sequoia), each frame is a fresh memory file filled by the sender, sealed, and moved by descriptor; every relay maps it and checks its number, or forwards it unmapped; the display maps it and shows it, freeing the one before. By volatile containers, {} memory files go round: the display gives the frame before back to the sender when it shows a new one, and every process keeps its mapping of each file hidden while another owns it (region hiding and caching), so a frame costs no new memory file, mapping or page fault. Every frame's number is checked at the display and at every relay that maps it, and the last frame whole. CPU is the time every process of the pipeline spent (user and system) over the frames.",
            f.rows.first().map_or(0, |r| r.frames),
            f.rounds,
            f.rows
                .iter()
                .map(|r| r.relays.to_string())
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
                .join(", "),
            f.in_flight
        )),
        figure(
            "frames",
            "Frames per second at the display against the number of relay processes, per variant (bars: lowest and highest round). The paper: containers almost 400 % more than read/write.".into(),
            Chart {
                title: "640×480 frames through a pipeline of processes".into(),
                x_label: "relay processes".into(),
                y_label: "frames per second".into(),
                x_scale: Scale::Linear,
                y_scale: Scale::Log,
                series,
            },
        ),
        table(
            "Frames per second at the display (the paper: containers almost 400 % more than read/write, six 30 fps animations against one)",
            &[
                "relays",
                "variant",
                "frames/s",
                "lowest–highest",
                "30 fps animations",
                "over read/write",
                "CPU µs a frame",
            ],
            f.rows
                .iter()
                .map(|r| {
                    vec![
                        r.relays.to_string(),
                        r.variant.replace('_', " "),
                        format!("{:.0}", r.fps),
                        format!("{:.0}–{:.0}", r.fps_spread[0], r.fps_spread[1]),
                        format!("{:.1}", r.animations),
                        format!("{:.2}×", r.over_read_write),
                        format!(
                            "{:.1} ({:.1}–{:.1})",
                            r.cpu_us_per_frame, r.cpu_spread[0], r.cpu_spread[1]
                        ),
                    ]
                })
                .collect(),
        ),
        p(
            "On the paper's DECstation a frame copy took milliseconds; here it takes tens of microseconds, while a sealed container pays for a new memory file every frame: its creation, the first touch of its 75 pages, sealing, mapping at the relays and the display, and the unmapping and freeing of the one before. Sealing is what makes the receiver's view final against a sender that keeps a descriptor; a sealed file cannot be written again, so it cannot be reused. Volatile containers give that up (any process that held one can still write it, so their bytes are reached word by word) and in exchange are reused as fbufs are cached: what is left per frame is the sender's drawing, a descriptor passed per hop, and two protection changes per process that maps it.",
        ),
    ]
}

/// The peer-to-peer I/O sections.
pub fn splice_blocks(r: &Results) -> Vec<Block> {
    let Some(s) = &r.splice else {
        return Vec::new();
    };
    let mut b = vec![
        h(2, "Paper 003 — peer-to-peer I/O: splice against read/write"),
        p(format!(
            "Each pair of descriptors moves the same data by a splice (zcio-sequoia's `Splice::start_flow`, on whichever of copy_file_range, sendfile or splice the pair allows) and by a read/write loop through a 64 KiB buffer, both in 64 KiB increments, alternating over {} rounds. What every sink receives, in every pair and variant, is checked against what was sent, outside the time measured: a file sink byte for byte (after a throughput run; before each time a paced run empties it, with the task held and the clock stopped), a socket sink by the stamps of their offset the data carries every 4 KiB (its reader keeps them as it reads; reading every byte would slow the reader the run waits on); a difference fails the run. Throughput is the median over rounds; latency is the median time of one increment; CPU per MiB is the transfer thread's own CPU time (user and system) in the throughput runs, so the kernel's work for its calls is in it and the socket's other end is not. CPU availability: the transfer runs at a fixed pace ({:.0} % of the slower variant's throughput, for {} s) while a CPU-bound task shares its core{}; the task's progress over its progress alone is the CPU the transfer left it. Files live in a temporary directory, here on {} (copy_file_range shares blocks only on file systems that can, such as btrfs or xfs with reflinks; elsewhere it copies in the kernel, as read/write copies through the application); sockets are Unix stream sockets whose other end runs on the second CPU.",
            s.rounds,
            100.0 * s.pace_fraction,
            s.seconds,
            if s.pinned {
                " (both pinned to CPU 0)"
            } else {
                " (not pinned: one CPU)"
            },
            s.files_fs
        )),
    ];
    b.push(table(
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
        s.rows
            .iter()
            .map(|r| {
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
            })
            .collect(),
    ));
    b.push(table(
        "Splice over the loop, per pair (the paper: throughput and latency 2-3×, CPU availability +30 % or more)",
        &[
            "pair",
            "throughput",
            "latency (loop / splice)",
            "CPU per byte (loop / splice)",
            "CPU left",
        ],
        s.verdicts
            .iter()
            .map(|v| {
                vec![
                    v.pair.replace('_', " "),
                    format!("{:.2}×", v.throughput_ratio),
                    format!("{:.2}×", v.latency_ratio),
                    format!("{:.2}×", v.cpu_ratio),
                    format!("{:.2}×", v.availability_ratio),
                ]
            })
            .collect(),
    ));
    b.push(p("A task that shares the transfer's core gets the core whenever the transfer waits for its next increment, and half of it while both run; so the CPU a transfer leaves grows only slowly with its efficiency, and a splice that needs half the loop's CPU per byte leaves the task a few percent more, not a multiple: the CPU per byte says more plainly what each mechanism costs. Where the sink or source is a file on tmpfs, every mechanism copies through the page cache, and splice and the loop do nearly the same work."));
    b
}
