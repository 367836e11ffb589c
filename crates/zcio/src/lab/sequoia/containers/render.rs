//! The report's sections for paper 003's container shipping: the frame experiment, beside the
//! paper's 400 % and six animations against one.

use crate::report::doc::Block;
use crate::report::plot::{Chart, Scale, Series, Style};
use crate::report::results::Results;
use crate::report::text::{figure, h, p, table_of};

/// The frame experiment's findings, at the head of its section.
pub fn frames_findings(r: &Results) -> Vec<String> {
    let Some(f) = r.section::<super::Containers>() else {
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

/// The frame experiment's sections.
pub fn frames_blocks(r: &Results) -> Vec<Block> {
    let Some(f) = r.section::<super::Containers>() else {
        return Vec::new();
    };
    let mut series = Vec::new();
    for (k, v) in crate::lab::sequoia::containers::measure::VARIANTS
        .iter()
        .enumerate()
    {
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
        table_of(
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
            &f.rows,
                |r| {
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
                },
        ),
        p(
            "On the paper's DECstation a frame copy took milliseconds; here it takes tens of microseconds, while a sealed container pays for a new memory file every frame: its creation, the first touch of its 75 pages, sealing, mapping at the relays and the display, and the unmapping and freeing of the one before. Sealing is what makes the receiver's view final against a sender that keeps a descriptor; a sealed file cannot be written again, so it cannot be reused. Volatile containers give that up (any process that held one can still write it, so their bytes are reached word by word) and in exchange are reused as fbufs are cached: what is left per frame is the sender's drawing, a descriptor passed per hop, and two protection changes per process that maps it.",
        ),
    ]
}
