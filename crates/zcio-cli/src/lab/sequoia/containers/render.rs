//! The report's sections for paper 003's container shipping: the frame experiment, beside the
//! paper's 400 % and six animations against one.

use crate::lab::sequoia::containers::frame::Frame;
use crate::lab::sequoia::containers::measure::{FramesSection, Row};
use crate::report::doc::Block;
use crate::report::plot::{Chart, Scale, Series, Style};
use crate::report::results::Results;
use crate::report::text::{figure, h, p, table_of};

/// The frame experiment's findings, at the head of its section.
pub fn frames_findings(r: &Results) -> Vec<String> {
    let Some(f) = r.section::<super::Containers>() else {
        return Vec::new();
    };
    let Some((first, main)) = f.rows.first().map(|x| (x.relays, x.frame)) else {
        return Vec::new();
    };
    let get = |v: &str| own_row(f, v, main, first);
    let (Some(rw), Some(c), Some(u), Some(vm), Some(vu)) = (
        get("read_write"),
        get("containers"),
        get("containers_unmapped"),
        get("volatile"),
        get("volatile_unmapped"),
    ) else {
        return Vec::new();
    };
    let longest = f.rows.iter().map(|x| x.relays).max().unwrap_or(first);
    let far: Vec<String> = f
        .rows
        .iter()
        .filter(|x| x.relays == longest && x.frame == main && x.variant != "read_write")
        .map(|x| format!("{} {:.2}×", x.label(), x.over_read_write))
        .collect();
    let pooled = match (get("containers_pooled"), get("containers_pooled_copy")) {
        (Some(p), Some(w)) => format!(
            " Made ahead by a thread of the sender (a pool allocating each file's pages in bulk, its CPU counted), they run at {:.0} drawn in place and {:.0} written from the sender's buffer: {:.2}× and {:.2}×, at {:.0} and {:.0} µs of CPU a frame{}.",
            p.fps,
            w.fps,
            p.over_read_write,
            w.over_read_write,
            p.cpu_us_per_frame,
            w.cpu_us_per_frame,
            get("containers_pooled_copy_unmapped").map_or(String::new(), |x| format!(
                " ({:.0}, {:.2}×, at {:.0} µs, written in with the relay not mapping them)",
                x.fps, x.over_read_write, x.cpu_us_per_frame
            ))
        ),
        _ => String::new(),
    };
    let huge = get("containers_huge").map_or(String::new(), |x| {
        format!(
            " In 2 MiB pages (files the pool asks the kernel to hold in huge pages; {}), drawn in place: {:.0}, {:.2}×, at {:.0} µs of CPU a frame.",
            granted(x),
            x.fps,
            x.over_read_write,
            x.cpu_us_per_frame
        )
    });
    let best = |prefix: &str, set: bool| {
        f.rows
            .iter()
            .filter(|x| x.relays == first && x.frame == main && x.variant.starts_with(prefix))
            .filter(|x| x.over_read_write.is_finite() && x.shmem_override == set)
            .max_by(|a, b| a.over_read_write.total_cmp(&b.over_read_write))
    };
    let verdict = |row: Option<&Row>, target: f64| match row {
        Some(x) if x.over_read_write >= target => {
            format!("met ({}, {:.2}×)", x.label(), x.over_read_write)
        }
        Some(x) => format!("not met (at best {}, {:.2}×)", x.label(), x.over_read_write),
        None => "not measured".into(),
    };
    let sealed = match best("containers", true) {
        Some(x) => format!(
            "{} under the machine's own shared memory policy ({}), {} under the one zcio set",
            verdict(best("containers", false), 1.0),
            f.shmem_policy.as_deref().unwrap_or("unknown"),
            verdict(Some(x), 1.0),
        ),
        None => verdict(best("containers", false), 1.0),
    };
    let mut found = vec![format!(
        "Container shipping (paper 003, Figure 4): {} frames from a sender through {first} {} to a display run at {:.0} frames/s by read/write ({:.0} µs of CPU a frame). Sealed containers, a fresh memory file a frame, run at {:.0} ({:.0} with the relay not mapping them): {:.2}×, at {:.0} µs of CPU a frame.{pooled}{huge} Volatile containers, going back to the sender to be filled again as a compositor releases its clients' buffers, run at {:.0} with the relay mapping them and {:.0} without: {:.2}× and {:.2}×, at {:.0} and {:.0} µs a frame. The paper: almost 400 % more, six 30 fps animations against one. zcio's targets, over read/write's frames/s: sealed containers at least 1×, {}; volatile at least 4×, {}. Through {longest} relays: {}.",
        main.name(),
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
        sealed,
        verdict(best("volatile", false), 4.0),
        far.join(", ")
    )];
    found.extend(under_policy(f, main, first, true));
    for frame in frames_of(f).into_iter().skip(1) {
        found.extend(larger_frame(f, frame, first));
        found.extend(under_policy(f, frame, first, false));
    }
    found
}

/// The row of `variant` with frames of `frame` through `relays` relays, under the machine's
/// own shared memory policy.
fn own_row<'a>(
    f: &'a FramesSection,
    variant: &str,
    frame: Frame,
    relays: usize,
) -> Option<&'a Row> {
    f.rows.iter().find(|x| {
        x.variant == variant && x.frame == frame && x.relays == relays && !x.shmem_override
    })
}

/// What the sealed variants in 4 KiB pages did with frames of `frame` under the shared memory
/// policy zcio set for their runs, beside the machine's own; or, if `why_not`, why they were
/// not measured under it.
fn under_policy(f: &FramesSection, frame: Frame, relays: usize, why_not: bool) -> Option<String> {
    let machine = f.shmem_policy.as_deref().unwrap_or("unknown");
    if let Some(why) = f.shmem_policy_refused.as_ref().filter(|_| why_not) {
        return Some(format!(
            "The sealed containers in 4 KiB pages were measured under the machine's own shared memory policy ({machine}) only: {why}."
        ));
    }
    let set: Vec<&Row> = f
        .rows
        .iter()
        .filter(|x| x.frame == frame && x.relays == relays && x.shmem_override)
        .collect();
    let policy = set.first()?.shmem_policy.as_deref().unwrap_or("another");
    let own = |v: &str| own_row(f, v, frame, relays);
    let folios = |x: &Row| {
        x.large_folios_per_frame
            .map_or("not counted".to_string(), |n| format!("{n:.1}"))
    };
    let each: Vec<String> = set
        .iter()
        .filter_map(|x| {
            let o = own(&x.variant)?;
            // Where the files are made on the frame's path, the sender makes them.
            let (maker, made, made_own) = if x.cpu_parts_us.pool > 0.0 {
                ("pool's thread", x.cpu_parts_us.pool, o.cpu_parts_us.pool)
            } else {
                ("sender", x.cpu_parts_us.sender, o.cpu_parts_us.sender)
            };
            Some(format!(
                "{} {:.0} frames/s, {:.2}× read/write ({:.2}× under {machine}), {:.0} µs of CPU a frame ({:.0}), the {maker} {made:.0} µs ({made_own:.0}), the display {:.0} ({:.0})",
                x.variant.replace('_', " "),
                x.fps,
                x.over_read_write,
                o.over_read_write,
                x.cpu_us_per_frame,
                o.cpu_us_per_frame,
                x.cpu_parts_us.display,
                o.cpu_parts_us.display,
            ))
        })
        .collect();
    let (first, o) = (set[0], own(&set[0].variant)?);
    Some(format!(
        "Under the shared memory policy {policy} (which zcio set for these runs alone, putting {machine} back after each), a memory file allocated or written in one call is held in large folios: the kernel counted {} a frame during the {} runs against {} under {machine}. Through {relays} relay{}, {} frames: {}.",
        folios(first),
        first.variant.replace('_', " "),
        folios(o),
        if relays == 1 { "" } else { "s" },
        frame.name(),
        each.join("; ")
    ))
}

/// The frame sizes measured, in the order of the rows (the first is the findings' own).
fn frames_of(f: &FramesSection) -> Vec<Frame> {
    let mut v: Vec<Frame> = Vec::new();
    for r in &f.rows {
        if !v.contains(&r.frame) {
            v.push(r.frame);
        }
    }
    v
}

/// How many of a variant's files the kernel gave 2 MiB pages, and why not the rest.
fn granted(x: &Row) -> String {
    match (x.huge_share, &x.huge_refused) {
        (Some(s), _) if s >= 1.0 => "the kernel gave every file them".into(),
        (Some(s), Some(why)) => format!(
            "the kernel gave {:.0} % of the files them, the rest 4 KiB pages ({why})",
            100.0 * s
        ),
        (Some(s), None) => format!("the kernel gave {:.0} % of the files them", 100.0 * s),
        (None, _) => "not measured".into(),
    }
}

/// What frames of another size say, through `relays` relays: read/write, the best sealed
/// container in 4 KiB pages, sealed ones in 2 MiB pages, and volatile ones.
fn larger_frame(f: &FramesSection, frame: Frame, relays: usize) -> Option<String> {
    let rows: Vec<&Row> = f
        .rows
        .iter()
        .filter(|x| x.frame == frame && x.relays == relays && !x.shmem_override)
        .collect();
    let get = |v: &str| rows.iter().copied().find(|x| x.variant == v);
    let best = |keep: &dyn Fn(&str) -> bool| {
        rows.iter()
            .copied()
            .filter(|x| keep(&x.variant) && x.over_read_write.is_finite())
            .max_by(|a, b| a.over_read_write.total_cmp(&b.over_read_write))
    };
    let rw = get("read_write")?;
    let base = best(&|v| v.starts_with("containers") && !v.starts_with("containers_huge"))?;
    let huge = best(&|v| v.starts_with("containers_huge"))?;
    let volatile = best(&|v| v.starts_with("volatile"))?;
    let mib = frame.bytes() as f64 / (1 << 20) as f64;
    let integrity = if huge.fps >= 0.9 * volatile.fps {
        "come within 10 % of volatile ones' frames/s here: keeping the receiver's view final costs almost nothing".to_string()
    } else {
        format!(
            "reach {:.0} % of volatile ones' frames/s here: what keeping the receiver's view final costs",
            100.0 * huge.fps / volatile.fps
        )
    };
    Some(format!(
        "Frames of {} ({mib:.1} MiB, {} a run, {relays} relay{}): read/write runs at {:.0} frames/s ({:.0} µs of CPU a frame); sealed containers in 4 KiB pages at best {:.0} ({}, {:.2}×, {:.0} µs); sealed in 2 MiB pages {:.0} ({}, {:.2}×, {:.0} µs; {}); volatile {:.0} ({:.2}×). Sealed containers in 2 MiB pages {integrity}.",
        frame.name(),
        rw.frames,
        if relays == 1 { "" } else { "s" },
        rw.fps,
        rw.cpu_us_per_frame,
        base.fps,
        base.variant.replace('_', " "),
        base.over_read_write,
        base.cpu_us_per_frame,
        huge.fps,
        huge.variant.replace('_', " "),
        huge.over_read_write,
        huge.cpu_us_per_frame,
        granted(huge),
        volatile.fps,
        volatile.over_read_write,
    ))
}

/// The frame experiment's sections.
pub fn frames_blocks(r: &Results) -> Vec<Block> {
    let Some(f) = r.section::<super::Containers>() else {
        return Vec::new();
    };
    let frames = frames_of(f);
    let main = frames.first().copied().unwrap_or(Frame::PAPER);
    let mut blocks = vec![
        h(2, "Paper 003 — container shipping: the frame experiment"),
        p(method(f) + &policy_method(f)),
    ];
    for (k, frame) in frames.iter().enumerate() {
        let (stem, caption) = if k == 0 {
            (
                "frames".to_string(),
                "The paper: containers almost 400 % more than read/write.",
            )
        } else {
            (
                format!("frames-{}x{}x{}", frame.width, frame.height, frame.depth),
                "Larger frames than the paper's: what 2 MiB pages change.",
            )
        };
        blocks.push(figure(
            &stem,
            format!(
                "Frames per second at the display against the number of relay processes, per variant, {} frames (bars: lowest and highest round). {caption}",
                frame.name()
            ),
            Chart {
                title: format!("{} frames through a pipeline of processes", frame.name()),
                x_label: "relay processes".into(),
                y_label: "frames per second".into(),
                x_scale: Scale::Linear,
                y_scale: Scale::Log,
                series: series_of(f, *frame),
            },
        ));
    }
    blocks.push(table_of(
        "Frames per second at the display (the paper: containers almost 400 % more than read/write, six 30 fps animations against one)",
        &[
            "frame",
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
                r.frame.name(),
                r.relays.to_string(),
                r.label(),
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
    ));
    blocks.push(p(cost_sentence(f, main)));
    blocks
}

/// A line per variant of `frame`'s rows, and per pooled variant measured under a shared memory
/// policy zcio set: frames per second against relays.
fn series_of(f: &FramesSection, frame: Frame) -> Vec<Series> {
    use crate::lab::sequoia::containers::measure::{POLICY_VARIANTS, VARIANTS};
    let mut series = Vec::new();
    let lines = VARIANTS
        .iter()
        .map(|v| (*v, false))
        .chain(POLICY_VARIANTS.iter().map(|v| (*v, true)));
    for (k, (v, set)) in lines.enumerate() {
        let rows: Vec<_> = f
            .rows
            .iter()
            .filter(|x| x.variant == v && x.frame == frame && x.shmem_override == set)
            .collect();
        let Some(first) = rows.first() else {
            continue;
        };
        series.push(Series {
            name: match (set, &first.shmem_policy) {
                (true, Some(p)) => format!(
                    "{}, {p}",
                    v.trim_start_matches("containers_").replace('_', " ")
                ),
                _ => v.replace('_', " "),
            },
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
    series
}

/// The method paragraph's sentence on the runs under a shared memory policy zcio set, if any.
fn policy_method(f: &FramesSection) -> String {
    let Some(policy) = f
        .rows
        .iter()
        .find(|x| x.shmem_override)
        .and_then(|x| x.shmem_policy.as_deref())
    else {
        return String::new();
    };
    format!(
        " The sealed variants in 4 KiB pages also run with the kernel's shared memory huge page policy (`shmem_enabled`, which decides the pages of every memory file on the machine) set to {policy} for each of their runs, the policy found ({}) put back after each; the large folios the kernel gives shared memory meanwhile are counted from its statistics (`hugepages-<size>kB/stats/shmem_alloc`), which count the whole machine's.",
        f.shmem_policy.as_deref().unwrap_or("the policy found")
    )
}

/// The method paragraph.
fn method(f: &FramesSection) -> String {
    format!(
        "A sender process makes frames ({}: width × height × bytes a pixel) and sends them over Unix sockets through a pipeline of relay processes to a display process owning the frame buffer ({} frames a run of the first size, larger ones as many bytes; {} rounds, the variants alternating; pipelines of {} relays). By read/write, each hop copies the frame into and out of the kernel and the display copies it into its frame buffer. By sealed containers (zcio-sequoia), each frame is a fresh memory file filled by the sender, sealed, and moved by descriptor; every relay maps it and checks its number, or forwards it unmapped; the display reads its number without mapping it and shows it, freeing the one before. Pooled, the sender's files are made ahead by a thread of its own ({} ready, their pages allocated in bulk), and each frame is drawn in place in one, or drawn in the sender's buffer and written into one (a copy at the source, none at any hop); the relays map it, or, written in, also forward it unmapped. In 2 MiB pages, the pool writes a byte into each 2 MiB of a fresh file and asks the kernel to collapse the file into huge pages (`MADV_COLLAPSE`, which fills the rest with zeros), or gives it 4 KiB pages where the kernel refuses; the sender maps the file aligned to them and draws the frame in place, and the relays map it or not. By volatile containers, {} memory files go round: the display gives the frame before back to the sender when it shows a new one, and every process keeps its mapping of each file while another owns it (region caching, without hiding: trusted domains, as fbufs' volatile buffers), so a frame costs no new memory file, mapping, page fault or protection change. Every frame's number is checked at the display and at every relay that maps it, and the last frame whole. CPU is the time every process of the pipeline spent (user and system) over the frames.",
        frames_of(f)
            .iter()
            .map(|x| x.name())
            .collect::<Vec<_>>()
            .join(", "),
        f.rows.first().map_or(0, |r| r.frames),
        f.rounds,
        f.rows
            .iter()
            .map(|r| r.relays.to_string())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
            .join(", "),
        crate::lab::sequoia::containers::measure::POOL_DEPTH,
        f.in_flight
    )
}

/// What a frame of `main` costs, per variant and process, on the shortest pipeline, and why.
fn cost_sentence(f: &FramesSection, main: Frame) -> String {
    let Some(first) = f.rows.first().map(|x| x.relays) else {
        return String::new();
    };
    let row = |v: &str| own_row(f, v, main, first);
    let (Some(rw), Some(c), Some(vm), Some(vu)) = (
        row("read_write"),
        row("containers"),
        row("volatile"),
        row("volatile_unmapped"),
    ) else {
        return String::new();
    };
    let pooled = match (row("containers_pooled"), row("containers_pooled_copy")) {
        (Some(p), Some(w)) => {
            let kernel = w.cpu_parts_us.pool + w.cpu_parts_us.display;
            format!(
                " A pool can only make fresh files ahead. Drawn in place, their pages allocated by the pool's thread ({:.0} µs a frame) still fault in one by one at the sender ({:.0}). Written from the sender's buffer, the sender's part is a copy and the send ({:.0} µs), the pool's allocating the pages ({:.0}) and the display's freeing them ({:.0}): the pages' {:.0} µs alone {} read/write's whole pipeline.",
                p.cpu_parts_us.pool,
                p.cpu_parts_us.sender,
                w.cpu_parts_us.sender,
                w.cpu_parts_us.pool,
                w.cpu_parts_us.display,
                kernel,
                if kernel > rw.cpu_us_per_frame {
                    "exceed"
                } else {
                    "stay within"
                }
            )
        }
        _ => String::new(),
    };
    let huge = row("containers_huge").map_or(String::new(), |x| {
        format!(
            " In 2 MiB pages, the pool's thread spends {:.0} µs a frame making a file: a whole 2 MiB page zeroed for {:.0} KiB of frame, where 4 KiB pages cost the kernel's bookkeeping per page; the sender {:.0} (one fault per 2 MiB), the display {:.0} freeing it.",
            x.cpu_parts_us.pool,
            main.bytes() as f64 / 1024.0,
            x.cpu_parts_us.sender,
            x.cpu_parts_us.display
        )
    });
    format!(
        "On the paper's DECstation a frame copy took milliseconds; here the whole read/write pipeline ({first} relay{}, {} frames) spends {:.0} µs of CPU a frame, while a sealed container spends {:.0}: a new memory file a frame, its {} pages allocated in one call and faulted in one by one at the sender ({:.0} µs), unmapped and sealed, mapped by the relays ({:.0}), and freed by the display ({:.0}). Sealing is what makes the receiver's view final against a sender that keeps a descriptor; a sealed file cannot be written again, so it cannot be reused.{pooled}{huge} Volatile containers give integrity up (any process that held one can still write it, so their bytes are reached word by word) and in exchange are reused as fbufs are cached: what is left per frame is the sender's drawing, at memcpy's speed, and a descriptor passed per hop ({:.0} µs with the relays mapping them, {:.0} without; the sender's part {:.0}).",
        if first == 1 { "" } else { "s" },
        main.name(),
        rw.cpu_us_per_frame,
        c.cpu_us_per_frame,
        main.bytes().div_ceil(4096),
        c.cpu_parts_us.sender,
        c.cpu_parts_us.relays,
        c.cpu_parts_us.display,
        vm.cpu_us_per_frame,
        vu.cpu_us_per_frame,
        vm.cpu_parts_us.sender,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::sequoia::containers::measure::CpuParts;

    fn row(variant: &str, fps: f64, policy: &str, set: bool, folios: f64) -> Row {
        Row {
            frame: Frame::PAPER,
            variant: variant.into(),
            relays: 1,
            frames: 3000,
            fps,
            fps_spread: [fps, fps],
            animations: fps / 30.0,
            over_read_write: fps / 1000.0,
            cpu_us_per_frame: 1e6 / fps,
            cpu_spread: [1e6 / fps; 2],
            cpu_parts_us: CpuParts {
                sender: 10.0,
                pool: if set { 12.0 } else { 80.0 },
                relays: 5.0,
                display: if set { 10.0 } else { 45.0 },
            },
            huge_share: None,
            huge_refused: None,
            shmem_policy: Some(policy.into()),
            shmem_override: set,
            large_folios_per_frame: Some(folios),
        }
    }

    fn section(refused: Option<&str>) -> FramesSection {
        let mut rows = vec![
            row("read_write", 1000.0, "never", false, 0.0),
            row("containers_pooled_copy", 900.0, "never", false, 0.0),
        ];
        if refused.is_none() {
            rows.push(row(
                "containers_pooled_copy",
                4000.0,
                "within_size",
                true,
                3.0,
            ));
        }
        FramesSection {
            rounds: 1,
            in_flight: 8,
            rows,
            shmem_policy: Some("never".into()),
            shmem_policy_refused: refused.map(String::from),
        }
    }

    #[test]
    fn the_runs_under_the_policy_zcio_set_are_told_beside_the_machines_own_or_why_they_are_missing()
    {
        let said = under_policy(&section(None), Frame::PAPER, 1, true).unwrap();
        for want in [
            "policy within_size",
            "putting never back",
            "3.0 a frame",
            "0.0 under never",
            "4.00× read/write (0.90× under never)",
            "the pool's thread 12 µs (80)",
        ] {
            assert!(said.contains(want), "{want:?} in {said}");
        }
        assert_eq!(under_policy(&section(None), Frame::HD, 1, true), None);
        let refused = section(Some("writing it needs root"));
        let said = under_policy(&refused, Frame::PAPER, 1, true).unwrap();
        assert!(
            said.contains("never) only: writing it needs root"),
            "{said}"
        );
        assert_eq!(under_policy(&refused, Frame::PAPER, 1, false), None);
        assert!(policy_method(&refused).is_empty());
        assert!(policy_method(&section(None)).contains("set to within_size"));
    }
}
