//! The report's section for paper 001 (fbufs): the Table 1 analogue and Figure 3, with the
//! paper's numbers beside this machine's, iceoryx2, a present-day zero-copy IPC the paper
//! could not have measured, beside both, and fbufs a device originates.

use crate::report::doc::Block;
use crate::report::plot::{Chart, Scale, Series, Style};
use crate::report::results::Results;
use crate::report::text::{figure, h, p, size, table, us};

/// The paper's Table 1 (DecStation 5000/200, Mach 3.0): incremental per-page cost (µs) and
/// asymptotic throughput (Mb/s), by the contender zcio sets beside each.
const PAPER_TABLE1: [(&str, &str, f64, f64); 6] = [
    (
        "fbufs-cached-volatile",
        "fbufs, cached/volatile",
        3.0,
        10_922.0,
    ),
    ("fbufs-volatile", "fbufs, volatile", 21.0, 1_560.0),
    ("fbufs-cached", "fbufs, cached", 29.0, 1_130.0),
    ("fbufs", "fbufs", 37.0, 886.0),
    (
        "page-remap-memfd",
        "Mach COW (page remapping)",
        144.0,
        228.0,
    ),
    ("copy-unix-socket", "copy", 316.0, 104.0),
];

/// Contenders measured beside the paper's that it has no counterpart for.
const PEERS: [(&str, &str); 3] = [
    (
        crate::lab::fbufs::iceoryx::NAME,
        "none: a modern peer, not in the paper",
    ),
    (FROM_DEVICE, "none: fbufs a device originates (§2-3)"),
    (COPIED_IN, "none: a device's data copied into fbufs"),
];

/// The device-originated contenders: a socket received straight into fbufs, and into a
/// private buffer then copied into them.
const FROM_DEVICE: &str = "fbufs-from-socket";
const COPIED_IN: &str = "socket-copied-into-fbufs";

fn word(
    r: &Results,
) -> Option<(
    &Vec<crate::lab::fbufs::measure::Row>,
    &Vec<crate::lab::fbufs::measure::Fit>,
)> {
    r.section::<super::Fbufs>().map(|f| (&f.rows, &f.fits))
}

fn per_page(fits: &[crate::lab::fbufs::measure::Fit], variant: &str, touch: &str) -> Option<f64> {
    fits.iter()
        .find(|f| f.variant == variant && f.touch == touch)
        .map(|f| f.per_page_ns)
}

/// The findings that head the section.
pub fn findings(r: &Results) -> Vec<String> {
    let Some((rows, fits)) = word(r) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let t = "word-per-page";
    if let (Some(cv), Some(copy)) = (
        per_page(fits, "fbufs-cached-volatile", t),
        per_page(fits, "copy-unix-socket", t),
    ) {
        out.push(format!(
            "Fbufs (paper 001): cached/volatile fbufs cost {cv:.0} ns a page against {copy:.0} ns for a copy through a Unix socket, 1/{:.0} of it (the paper: 3 against 316 µs, 1/105; zcio's target: at most 1/20).",
            copy / cv.max(1e-9)
        ));
    }
    let at = |v: &str, b: usize| {
        rows.iter()
            .find(|x| x.variant == v && x.touch == t && x.bytes == b)
            .map(|x| x.ns_per_message)
    };
    if let (Some(f), Some(s)) = (
        at("fbufs-cached-volatile", 1 << 20),
        at("copy-unix-socket", 1 << 20),
    ) {
        out.push(format!(
            "Fbufs at 1 MiB: {} µs a message against {} µs through a Unix socket, {:.1}× its throughput (zcio's target: 10×).",
            us(f),
            us(s),
            s / f
        ));
    }
    let device = device_pairs(rows);
    let word_device = || device.iter().filter(|(d, _)| d.touch == t);
    if let Some((d, c)) = word_device()
        .find(|(d, _)| d.bytes == 1 << 20)
        .or_else(|| word_device().max_by_key(|(d, _)| d.bytes))
    {
        let (dn, cn) = (d.ns_per_message, c.ns_per_message);
        out.push(format!(
            "Fbufs a device originates, one word touched per page: at {}, a message from a socket received straight into fbufs takes {} µs, and {} µs read into a buffer and copied into them: {:.2}× {}{}.",
            size(d.bytes),
            us(dn),
            us(cn),
            cn / dn.max(1e-9),
            if cn > dn { "faster straight" } else { "slower straight: the saved copy does not show here" },
            if ranges_overlap(d, c) { ", though the rounds' ranges overlap" } else { "" }
        ));
    }
    if let Some((small, big)) = compared_sizes(rows) {
        let at = |v: &str, b: usize| {
            rows.iter()
                .find(|x| x.variant == v && x.touch == t && x.bytes == b)
        };
        let (fb, ix) = ("fbufs-cached-volatile", crate::lab::fbufs::iceoryx::NAME);
        if let (Some(fs), Some(is), Some(fl), Some(il)) =
            (at(fb, small), at(ix, small), at(fb, big), at(ix, big))
        {
            out.push(format!(
                "Fbufs against iceoryx2 (a modern peer, not in the paper), one word touched per page: at {} a message costs {} µs with cached/volatile fbufs and {} µs with iceoryx2 ({}); at {} they move {:.2} and {:.2} GB/s ({}).",
                size(small),
                us(fs.ns_per_message),
                us(is.ns_per_message),
                faster(fs, is),
                size(big),
                fl.throughput_gbps,
                il.throughput_gbps,
                faster(fl, il),
            ));
        }
    }
    out
}

/// Which of cached/volatile fbufs (`f`) and iceoryx2 (`i`), measured at the same size, was
/// faster and by how much, and whether the rounds' ranges overlap.
fn faster(f: &crate::lab::fbufs::measure::Row, i: &crate::lab::fbufs::measure::Row) -> String {
    let overlap = ranges_overlap(f, i);
    let mut s = if f.ns_per_message <= i.ns_per_message {
        format!(
            "cached/volatile fbufs {:.1}× faster",
            i.ns_per_message / f.ns_per_message.max(1e-12)
        )
    } else {
        format!(
            "iceoryx2 {:.1}× faster: fbufs lose here",
            f.ns_per_message / i.ns_per_message.max(1e-12)
        )
    };
    if overlap {
        s.push_str(", though the rounds' ranges overlap");
    }
    s
}

/// The smallest size measured, and 1 MiB if measured, else the largest size.
fn compared_sizes(rows: &[crate::lab::fbufs::measure::Row]) -> Option<(usize, usize)> {
    let small = rows.iter().map(|x| x.bytes).min()?;
    let big = if rows.iter().any(|x| x.bytes == 1 << 20) {
        1 << 20
    } else {
        rows.iter().map(|x| x.bytes).max()?
    };
    Some((small, big))
}

/// The section.
pub fn blocks(r: &Results) -> Vec<Block> {
    let Some((rows, fits)) = word(r) else {
        return Vec::new();
    };
    let mut b = vec![
        h(
            2,
            "Paper 001 — Fbufs: cross-domain transfer through shared buffers",
        ),
        p(
            "Two processes: an originator writes one word in each page of a message (or every byte) and passes it to a receiver process, which touches one word in each page (or every byte) and frees it. Messages stream: the time per message over a run is the incremental cost the paper reports, and its slope against the page count (fitted over the sizes, least squares on relative error) is the per-page cost. Each run fills the path once before it is timed, so the fbuf runs measure the steady state the paper measured (cached fbufs reused). Fbufs are the four variants of §3.2; page remapping is a fresh memfd per message, passed and mapped by the receiver (the page-remapping baseline of §3.1, Mach COW's role in Table 1); the copies go through a Unix socket and a pipe. Beside them runs iceoryx2 (eclipse-iceoryx/iceoryx2), a present-day zero-copy IPC middleware the paper could not have measured: its publish-subscribe between the same two processes, payloads in shared memory loaned by the publisher, with as many messages in flight as the fbuf path holds, no message dropped (the publisher waits when the subscriber's queue is full), and the subscriber asleep on an iceoryx2 event listener while its queue is empty; it too is warmed up (every sample written and read once) before it is timed. Every contender's messages are checked at the receiver once the clock has stopped: the originator stamps the first word of every page with the message's and the page's number (and, touching every byte, fills the rest), the receiver keeps what its touch read (the stamp of each page, or each page's stamp and the sum of its other words) and compares it with what was written after the run, so that a lost, repeated, reordered or corrupted message fails the run instead of being timed.",
        ),
    ];
    for touch in ["word-per-page", "every-byte"] {
        b.extend(touch_blocks(rows, fits, touch));
    }
    b.extend(peer_blocks(rows, fits));
    b.extend(server_blocks(rows, fits));
    b.extend(device_blocks(rows));
    b
}

/// Whether the rounds' ranges of two rows overlap.
fn ranges_overlap(
    a: &crate::lab::fbufs::measure::Row,
    b: &crate::lab::fbufs::measure::Row,
) -> bool {
    a.spread_ns[0].max(b.spread_ns[0]) <= a.spread_ns[1].min(b.spread_ns[1])
}

/// The device-originated fbufs beside the same data copied into fbufs (straight, copied), per
/// touch and size measured for both.
fn device_pairs(
    rows: &[crate::lab::fbufs::measure::Row],
) -> Vec<(
    &crate::lab::fbufs::measure::Row,
    &crate::lab::fbufs::measure::Row,
)> {
    let mut out = Vec::new();
    for t in ["word-per-page", "every-byte"] {
        for s in sizes(rows) {
            let row = |v: &str| {
                rows.iter()
                    .find(|x| x.variant == v && x.touch == t && x.bytes == s)
            };
            if let (Some(d), Some(c)) = (row(FROM_DEVICE), row(COPIED_IN)) {
                out.push((d, c));
            }
        }
    }
    out
}

/// Fbufs a device originates: the section's part for them (nothing unless both were measured
/// at some size): the time per message (median and rounds' range) and the ratio.
fn device_blocks(rows: &[crate::lab::fbufs::measure::Row]) -> Vec<Block> {
    let pairs = device_pairs(rows);
    if pairs.is_empty() {
        return Vec::new();
    }
    let cell = |r: &crate::lab::fbufs::measure::Row| {
        format!(
            "{} ({}-{})",
            us(r.ns_per_message),
            us(r.spread_ns[0]),
            us(r.spread_ns[1])
        )
    };
    let body = pairs
        .iter()
        .map(|(d, c)| {
            vec![
                size(d.bytes),
                d.touch.clone(),
                cell(d),
                cell(c),
                format!(
                    "{:.2}{}",
                    c.ns_per_message / d.ns_per_message.max(1e-9),
                    if ranges_overlap(d, c) {
                        " (ranges overlap)"
                    } else {
                        ""
                    }
                ),
            ]
        })
        .collect();
    let won = pairs
        .iter()
        .filter(|(d, c)| c.ns_per_message > d.ns_per_message)
        .count();
    vec![
        h(3, "Fbufs a device originates"),
        p(format!(
            "The paper's originator is often a device driver, whose input lands in fbufs and travels up the path without a copy. Here the device is a socket, written by a thread of the originating process that makes each message as the other originators do: `{FROM_DEVICE}` receives it straight into a cached/volatile fbuf through an io_uring provided-buffer ring whose buffers are the path's fbufs, and sends the fbuf on untouched; `{COPIED_IN}` reads it into a private buffer and copies it into an fbuf, as an originator without device-originated fbufs must. Both then pass the fbuf to the receiver, which checks every message as for the other contenders. The kernel copies from its socket buffers into the fbuf either way (Linux has no DMA into a user-chosen buffer for a socket receive): what device-originated fbufs save is the copy in user space. The device's own writing runs on the same two CPUs as both processes. Received straight into fbufs, a message took less time than copied into them in {won} of {} comparisons.",
            pairs.len()
        )),
        table(
            "Time per message (µs, median and rounds' range) of a device's messages into fbufs",
            &["size", "touch", FROM_DEVICE, COPIED_IN, "copied / straight"],
            body,
        ),
    ]
}

/// One touch pattern's Table 1 (per-page costs beside the paper's), Figure 3 (throughput
/// against size) and throughput table; nothing if no contender was fitted at this touch.
fn touch_blocks(
    rows: &[crate::lab::fbufs::measure::Row],
    fits: &[crate::lab::fbufs::measure::Fit],
    touch: &str,
) -> Vec<Block> {
    let trows = table1_rows(fits, touch);
    if trows.is_empty() {
        return Vec::new();
    }
    let mut b = vec![
        h(
            3,
            if touch == "word-per-page" {
                "Table 1: incremental per-page cost (one word touched per page)".to_string()
            } else {
                "Table 1, every byte touched".to_string()
            },
        ),
        table(
            "Per-page cost and the asymptotic throughput it implies (page / per-page cost), beside the paper's",
            &[
                "contender",
                "ns per page",
                "asymptotic GB/s",
                "R²",
                "paper's contender",
                "paper per page",
                "paper asymptotic",
            ],
            trows,
        ),
    ];
    let mut names: Vec<String> = Vec::new();
    for x in rows.iter().filter(|x| x.touch == touch) {
        if !names.contains(&x.variant) {
            names.push(x.variant.clone());
        }
    }
    b.push(figure3(rows, &names, touch));
    let sizes = sizes(rows);
    let mut header = vec!["contender".to_string()];
    header.extend(sizes.iter().map(|s| size(*s)));
    let body = names
        .iter()
        .map(|n| {
            let mut row = vec![n.clone()];
            for s in &sizes {
                row.push(
                    rows.iter()
                        .find(|x| &x.variant == n && x.touch == touch && x.bytes == *s)
                        .map_or("-".into(), |x| format!("{:.2}", x.throughput_gbps)),
                );
            }
            row
        })
        .collect();
    let hdr: Vec<&str> = header.iter().map(|s| s.as_str()).collect();
    b.push(table("Throughput (GB/s) by message size", &hdr, body));
    b
}

/// The rows of Table 1 at `touch`: each fitted contender's per-page cost beside the paper's.
fn table1_rows(fits: &[crate::lab::fbufs::measure::Fit], touch: &str) -> Vec<Vec<String>> {
    fits.iter()
        .filter(|f| f.touch == touch)
        .map(|f| {
            let paper = PAPER_TABLE1.iter().find(|x| x.0 == f.variant);
            let peer = PEERS.iter().find(|x| x.0 == f.variant);
            vec![
                f.variant.clone(),
                format!("{:.1}", f.per_page_ns),
                format!("{:.2}", f.asymptotic_gbps),
                f.r2.map_or("-".into(), |r| format!("{r:.3}")),
                paper
                    .map(|x| x.1)
                    .or(peer.map(|x| x.1))
                    .unwrap_or("-")
                    .to_string(),
                paper.map_or("-".into(), |x| format!("{:.0} µs", x.2)),
                paper.map_or("-".into(), |x| format!("{:.0} Mb/s", x.3)),
            ]
        })
        .collect()
}

/// Figure 3 at `touch`: throughput against message size, a line per contender of `names`.
fn figure3(rows: &[crate::lab::fbufs::measure::Row], names: &[String], touch: &str) -> Block {
    let series = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut pts: Vec<&crate::lab::fbufs::measure::Row> = rows
                .iter()
                .filter(|x| &x.variant == n && x.touch == touch)
                .collect();
            pts.sort_by_key(|x| x.bytes);
            Series {
                name: n.clone(),
                points: pts
                    .iter()
                    .map(|x| (x.bytes as f64, x.throughput_gbps))
                    .collect(),
                style: Style::Line,
                band: Some(
                    pts.iter()
                        .map(|x| {
                            (
                                x.bytes as f64,
                                x.bytes as f64 / x.spread_ns[1],
                                x.bytes as f64 / x.spread_ns[0],
                            )
                        })
                        .collect(),
                ),
                color: Some(i),
            }
        })
        .collect();
    figure(
        &format!("fbufs-fig3-{touch}"),
        format!(
            "Throughput against message size, {} (median of rounds; bars: slowest and fastest round).",
            if touch == "word-per-page" {
                "one word touched per page"
            } else {
                "every byte touched"
            }
        ),
        Chart {
            title: format!("Fbufs, Figure 3: throughput ({touch})"),
            x_label: "message size (bytes)".into(),
            y_label: "throughput (GB/s)".into(),
            x_scale: Scale::Log,
            y_scale: Scale::Log,
            series,
        },
    )
}

/// The message sizes measured, in order, once each.
fn sizes(rows: &[crate::lab::fbufs::measure::Row]) -> Vec<usize> {
    let mut sizes: Vec<usize> = rows.iter().map(|x| x.bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// Figure 4: the same fbufs through a server process that forwards them untouched (nothing
/// unless both paths were measured at some size).
fn server_blocks(
    rows: &[crate::lab::fbufs::measure::Row],
    fits: &[crate::lab::fbufs::measure::Fit],
) -> Vec<Block> {
    let t = "word-per-page";
    let at = |v: &str, s: usize| {
        rows.iter()
            .find(|x| x.variant == v && x.touch == t && x.bytes == s)
            .map(|x| x.ns_per_message)
    };
    let body: Vec<Vec<String>> = sizes(rows)
        .iter()
        .filter_map(|s| {
            let one = at("fbufs-cached-volatile", *s)?;
            let two = at("fbufs-cached-volatile-via-server", *s)?;
            Some(vec![
                size(*s),
                us(one),
                us(two),
                format!("{:.2}", two / one),
            ])
        })
        .collect();
    if body.is_empty() {
        return Vec::new();
    }
    let pp = |v: &str| per_page(fits, v, t).map_or("-".to_string(), |x| format!("{x:.1} ns"));
    vec![
        h(3, "Figure 4: through a server process"),
        p(format!(
            "Cached/volatile fbufs from the originator straight to the receiver, and through a third process that forwards each reference without touching the data (the paper's UDP/IP experiment put the protocol stack in such a server domain). Per page: {} directly, {} through the server; the extra hop costs per message, not per page, since the server never touches the data.",
            pp("fbufs-cached-volatile"),
            pp("fbufs-cached-volatile-via-server")
        )),
        table(
            "Time per message (µs), one word touched per page",
            &["size", "two processes", "three processes", "ratio"],
            body,
        ),
    ]
}

/// Cached/volatile fbufs beside iceoryx2 and a Unix socket: the cost of a small message (one
/// hop, originator to receiver) and the throughput at 1 MiB, both touch patterns.
fn peer_blocks(
    rows: &[crate::lab::fbufs::measure::Row],
    fits: &[crate::lab::fbufs::measure::Fit],
) -> Vec<Block> {
    let fb = "fbufs-cached-volatile";
    let ix = crate::lab::fbufs::iceoryx::NAME;
    let sock = "copy-unix-socket";
    let Some((small, big)) = compared_sizes(rows) else {
        return Vec::new();
    };
    let row = |v: &str, t: &str, b: usize| {
        rows.iter()
            .find(|x| x.variant == v && x.touch == t && x.bytes == b)
    };
    if !rows.iter().any(|x| x.variant == ix) || !rows.iter().any(|x| x.variant == fb) {
        return Vec::new();
    }
    let mut b = vec![h(3, "Beside a modern peer: iceoryx2")];
    let mut text = Vec::new();
    for (t, said) in [
        ("word-per-page", "one word touched per page"),
        ("every-byte", "every byte touched"),
    ] {
        let (Some(f), Some(i)) = (row(fb, t, small), row(ix, t, small)) else {
            continue;
        };
        let mut s = format!(
            "With {said}: at {} a message costs {} µs through cached/volatile fbufs and {} µs through iceoryx2 ({}).",
            size(small),
            us(f.ns_per_message),
            us(i.ns_per_message),
            faster(f, i),
        );
        if let (Some(f), Some(i)) = (row(fb, t, big), row(ix, t, big)) {
            s.push_str(&format!(
                " At {} cached/volatile fbufs move {:.2} GB/s",
                size(big),
                f.throughput_gbps
            ));
            if let Some(u) = row(sock, t, big) {
                s.push_str(&format!(
                    ", {:.1}× the {:.2} GB/s of a Unix socket,",
                    f.throughput_gbps / u.throughput_gbps,
                    u.throughput_gbps
                ));
            }
            s.push_str(&format!(
                " and iceoryx2 {:.2} GB/s ({}).",
                i.throughput_gbps,
                faster(f, i),
            ));
        }
        let pp = |v: &str| {
            fits.iter()
                .find(|x| x.variant == v && x.touch == t)
                .map(|x| x.per_page_ns)
        };
        if let (Some(f), Some(i)) = (pp(fb), pp(ix)) {
            s.push_str(&format!(
                " Fitted over all sizes, a page costs {f:.1} ns through fbufs and {i:.1} ns through iceoryx2."
            ));
        }
        text.push(s);
    }
    b.push(p(format!(
        "Both pass a reference to shared memory and leave the data where the originator wrote it, and both queue references in shared memory (fbufs: a ring per link, with a wake-up frame on a Unix socket only for a receiver asleep; iceoryx2: its subscriber queue and an event); what differs is the bookkeeping per message. Both write in place and read in place: the fbuf originator stores the words of the message into the fbuf and the receiver loads them word by word (atomic loads, as the fbuf may change under it), while iceoryx2's publisher writes the loaned sample and its subscriber sums it as a slice. {}",
        text.join(" ")
    )));
    let mut body = Vec::new();
    for v in [fb, ix, sock] {
        let cell = |t: &str, b: usize, f: &dyn Fn(&crate::lab::fbufs::measure::Row) -> String| {
            row(v, t, b).map_or("-".to_string(), f)
        };
        if !rows.iter().any(|x| x.variant == v) {
            continue;
        }
        body.push(vec![
            v.to_string(),
            cell("word-per-page", small, &|x| us(x.ns_per_message)),
            cell("every-byte", small, &|x| us(x.ns_per_message)),
            cell("word-per-page", big, &|x| {
                format!("{:.2}", x.throughput_gbps)
            }),
            cell("every-byte", big, &|x| format!("{:.2}", x.throughput_gbps)),
        ]);
    }
    let h1 = format!("{} µs/message, word per page", size(small));
    let h2 = format!("{} µs/message, every byte", size(small));
    let h3 = format!("{} GB/s, word per page", size(big));
    let h4 = format!("{} GB/s, every byte", size(big));
    b.push(table(
        "Per-message cost of the smallest message (one hop) and throughput at the larger size (median of rounds)",
        &["contender", &h1, &h2, &h3, &h4],
        body,
    ));
    b
}
