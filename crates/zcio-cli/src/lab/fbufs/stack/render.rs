//! The report's section for paper 001's protocol-stack experiment: throughput against datagram
//! size per contender (the analogue of Figures 4-6), the ratios, the aggregate operations
//! alone, and where the time goes.

use super::claims::{HEADING, at, size_at};
use super::measure::{Row, StackSection};
use super::{Contender, FbufsStack};
use crate::report::doc::Block;
use crate::report::plot::{Chart, Scale, Series, Style};
use crate::report::results::Results;
use crate::report::text::{figure, h, p, size, table, table_of, us};

/// The findings that head the section: fbufs against copies and the single domain at 64 KiB,
/// and where fbufs' time goes.
pub fn findings(r: &Results) -> Vec<String> {
    let Some(s) = r.section::<FbufsStack>() else {
        return Vec::new();
    };
    let rows = &s.rows;
    let mut out = Vec::new();
    let Some(b) = size_at(rows, 65536, 0) else {
        return out;
    };
    let (f, c, one) = (
        at(rows, Contender::Fbufs, b),
        at(rows, Contender::Copies, b),
        at(rows, Contender::Single, b),
    );
    if f.is_finite() && c.is_finite() {
        let x = c / f;
        out.push(format!(
            "UDP/IP through domains (paper 001, Figures 4-6), {} datagrams in {}-byte fragments, one word touched per page: {} µs a datagram with cached/volatile fbufs ({:.0} Mbit/s) against {} µs with copies ({:.0} Mbit/s), {x:.1}× the throughput ({}).",
            size(b),
            s.mtu,
            us(f),
            b as f64 * 8e3 / f,
            us(c),
            b as f64 * 8e3 / c,
            if x >= 10.0 {
                "zcio's target of 10× met".to_string()
            } else {
                "short of zcio's target of 10×".to_string()
            }
        ));
    }
    if f.is_finite() && one.is_finite() {
        let mut t = where_time_goes(s, b, f, one, c);
        t.push_str(&one_crossing(r, b, f - one));
        let cpus = r.machine.logical_cpus;
        if cpus < 3 {
            t.push_str(&format!(
                " The stack's three processes share {cpus} logical CPU{} here, fewer than they are: at any time one of them waits to be scheduled, and each datagram crosses to a process that may be asleep, so the crossings pay wake-ups and context switches that two processes on their own CPUs do not.",
                if cpus == 1 { "" } else { "s" }
            ));
        }
        out.push(t);
    }
    out
}

/// Where fbufs' time per datagram goes at `b`: the stack's own work (the single domain's time,
/// and of it the aggregate operations alone) and the crossings (the rest); and the copies'.
fn where_time_goes(s: &StackSection, b: usize, f: f64, one: f64, c: f64) -> String {
    let frags = super::proto::Fragments::new(b, s.mtu).count();
    let op = |name: &str| {
        s.ops
            .iter()
            .find(|o| o.op == name && o.bytes == b)
            .map(|o| o.ns_per_op)
    };
    let ops = match (op("fragment-datagram"), op("walk-reassemble")) {
        (Some(x), Some(y)) => format!(
            " (timed alone, building the aggregate takes {} µs and walking and reassembling it {} µs)",
            us(x),
            us(y)
        ),
        _ => String::new(),
    };
    let cross = f - one;
    let mut t = if cross > 0.0 {
        format!(
            "Where the time goes at {}: of fbufs' {} µs a datagram, {} µs is the stack's own work, as the single domain does it{ops}, and {} µs ({:.0}%) the two domain crossings (the references through the rings, the wake-ups and the frees coming back).",
            size(b),
            us(f),
            us(one),
            us(cross),
            100.0 * cross / f
        )
    } else {
        format!(
            "Where the time goes at {}: fbufs take {} µs a datagram through three domains, and the single domain {} µs for the same work in one{ops}: the two domain crossings cost nothing measurable beside it, as the three domains work on different datagrams at once where the single domain does every layer's work in turn.",
            size(b),
            us(f),
            us(one)
        )
    };
    if c.is_finite() {
        t.push_str(&format!(
            " Copies spend {} µs, {:.2} ns a byte of data, for six copies of it (into and out of two sockets, into each fragment, into the reassembly buffer) and {} system calls (a write and two reads for the datagram, a write and two reads for each of its {frags} fragments).",
            us(c),
            c / b as f64,
            3 + 3 * frags
        ));
    }
    t
}

/// What one crossing cost at `b` in the Table 1 experiment of the same run (cached/volatile
/// fbufs between two processes, no protocol work), beside `cross`, this experiment's two
/// crossings; nothing if it did not run at that size.
fn one_crossing(r: &Results, b: usize, cross: f64) -> String {
    let Some(x) = r.section::<crate::lab::fbufs::Fbufs>().and_then(|t| {
        t.rows.iter().find(|x| {
            x.variant == Contender::Fbufs.name() && x.touch == "word-per-page" && x.bytes == b
        })
    }) else {
        return String::new();
    };
    format!(
        " In the Table 1 experiment of this run, one crossing with the same fbufs (two processes, no protocol work) took {} µs a {} message: two would take about {} µs, against {} here.",
        us(x.ns_per_message),
        size(b),
        us(2.0 * x.ns_per_message),
        if cross > 0.0 {
            format!("the {} µs measured", us(cross))
        } else {
            "nothing measurable".to_string()
        }
    )
}

fn names(rows: &[Row], touch: &str) -> Vec<String> {
    let mut n: Vec<String> = Vec::new();
    for r in rows.iter().filter(|r| r.touch == touch) {
        if !n.contains(&r.variant) {
            n.push(r.variant.clone());
        }
    }
    n
}

fn sizes(rows: &[Row]) -> Vec<usize> {
    let mut v: Vec<usize> = rows.iter().map(|r| r.bytes).collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The section.
pub fn blocks(r: &Results) -> Vec<Block> {
    let Some(s) = r.section::<FbufsStack>() else {
        return Vec::new();
    };
    let mut b = vec![
        h(2, HEADING),
        p(format!(
            "The paper's third and fourth experiments (§4, Figures 4-6) on this machine. A sending application (this process) hands datagrams to a protocol domain, a process of its own, where UDP prepends its {}-byte header and IP fragments the result into PDUs of at most {} bytes, each with its {}-byte header; a receiving domain, a third process, reassembles each datagram and gives it to the receiving application, which touches it (one word per page, the paper's dummy protocol, or every byte) and keeps what it read. With cached/volatile fbufs the data stays where the application wrote it: the headers and the aggregate's nodes are written in the protocol domain's own fbufs, the fragments are slices of the datagram, and the receiving domain walks the aggregate in place; the application keeps at most {} of datagrams in flight ({} at least), a sliding window, so that the fbufs it reuses are those freed last, still warm in every domain's caches. With uncached fbufs (Figure 6), the application's data path is uncached and non-volatile: each datagram's fbuf is mapped into the protocol and the receiving domain when passed and unmapped when freed, and is read-only in the application meanwhile. With copies, each crossing goes through a Unix stream socket, the protocol domain builds each fragment in a contiguous buffer, and the receiving domain copies each fragment's data into its reassembly buffer. The single domain runs the same stack, aggregates and all, in one process: the paper's baseline for what the crossings cost. Every run's datagrams are checked by the receiving application once its clock has stopped, fragment by fragment; a datagram that did not arrive as sent fails the run. Medians over {} round{}, contenders alternating.",
            s.udp_header,
            s.mtu,
            s.ip_header,
            size(super::domains::WINDOW_BYTES),
            super::domains::WINDOW_MIN,
            s.rounds,
            if s.rounds == 1 { "" } else { "s" }
        )),
    ];
    for touch in ["word-per-page", "every-byte", "every-byte-exact"] {
        b.extend(touch_blocks(&s.rows, touch));
    }
    b.extend(op_blocks(s));
    b
}

/// One touch's figure and table: throughput against size per contender, and fbufs' ratios.
fn touch_blocks(rows: &[Row], touch: &str) -> Vec<Block> {
    let names = names(rows, touch);
    if names.is_empty() {
        return Vec::new();
    }
    let sizes = sizes(rows);
    let row = |n: &str, b: usize| {
        rows.iter()
            .find(|x| x.variant == n && x.touch == touch && x.bytes == b)
    };
    let mut header = vec!["contender".to_string()];
    header.extend(sizes.iter().map(|s| size(*s)));
    let mut body: Vec<Vec<String>> = names
        .iter()
        .map(|n| {
            let mut r = vec![n.clone()];
            r.extend(
                sizes
                    .iter()
                    .map(|b| row(n, *b).map_or("-".into(), |x| format!("{:.0}", x.mbps))),
            );
            r
        })
        .collect();
    let fb = Contender::Fbufs.name();
    for other in [Contender::Copies, Contender::Uncached, Contender::Single] {
        let mut r = vec![format!("{fb} / {}", other.name())];
        r.extend(
            sizes
                .iter()
                .map(|b| match (row(fb, *b), row(other.name(), *b)) {
                    (Some(f), Some(o)) => format!("{:.2}", f.mbps / o.mbps),
                    _ => "-".into(),
                }),
        );
        body.push(r);
    }
    let hdr: Vec<&str> = header.iter().map(String::as_str).collect();
    vec![
        h(3, format!("Throughput by datagram size ({touch})")),
        chart(rows, &names, touch),
        table(
            "Throughput (Mbit/s of data, median of rounds) and fbufs' ratios",
            &hdr,
            body,
        ),
    ]
}

fn chart(rows: &[Row], names: &[String], touch: &str) -> Block {
    let series = names
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let mut pts: Vec<&Row> = rows
                .iter()
                .filter(|x| &x.variant == n && x.touch == touch)
                .collect();
            pts.sort_by_key(|x| x.bytes);
            let bits = |x: &Row, ns: f64| x.bytes as f64 * 8e3 / ns;
            Series {
                name: n.clone(),
                points: pts.iter().map(|x| (x.bytes as f64, x.mbps)).collect(),
                style: Style::Line,
                band: Some(
                    pts.iter()
                        .map(|x| {
                            (
                                x.bytes as f64,
                                bits(x, x.spread_ns[1]),
                                bits(x, x.spread_ns[0]),
                            )
                        })
                        .collect(),
                ),
                color: Some(i),
            }
        })
        .collect();
    figure(
        &format!("fbufs-stack-fig4-{touch}"),
        format!(
            "UDP/IP throughput against datagram size, {touch} (median of rounds; bands: slowest and fastest round)."
        ),
        Chart {
            title: format!("Fbufs, Figures 4-6: UDP/IP through domains ({touch})"),
            x_label: "datagram size (bytes)".into(),
            y_label: "throughput (Mbit/s)".into(),
            x_scale: Scale::Log,
            y_scale: Scale::Log,
            series,
        },
    )
}

/// The aggregate operations alone.
fn op_blocks(s: &StackSection) -> Vec<Block> {
    if s.ops.is_empty() {
        return Vec::new();
    }
    vec![
        h(3, "The aggregate operations alone"),
        p(
            "Each operation on the aggregate, timed alone in one process: a join of two messages, a split of one, a header prepended (written into an fbuf, a leaf made for it and joined in front); then for a whole datagram the protocol domain's work (the UDP header prepended, the fragments cut and each given its IP header, joined) and the receiving domain's (the walk, the reassembly with every header checked, one word touched per page), and the walk alone.",
        ),
        table_of(
            "Nanoseconds per operation (median of rounds; range: fastest to slowest round)",
            &["operation", "datagram", "fragments", "ns", "range"],
            &s.ops,
            |o| {
                vec![
                    o.op.clone(),
                    size(o.bytes),
                    o.fragments.to_string(),
                    format!("{:.1}", o.ns_per_op),
                    format!("{:.1}-{:.1}", o.spread_ns[0], o.spread_ns[1]),
                ]
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section() -> StackSection {
        StackSection {
            sizes: vec![65536],
            mtu: 4096,
            ip_header: 20,
            udp_header: 8,
            rounds: 1,
            volume: 1 << 20,
            rows: Vec::new(),
            ops: Vec::new(),
        }
    }

    #[test]
    fn the_crossings_share_is_said_only_when_there_is_one() {
        let s = section();
        let t = where_time_goes(&s, 65536, 4000.0, 1500.0, 50_000.0);
        assert!(t.contains("2.5 µs (62%) the two domain crossings"), "{t}");
        assert!(t.contains("Copies spend 50.0 µs"), "{t}");
        // Fbufs faster than the single domain: no negative crossing time.
        let t = where_time_goes(&s, 65536, 1400.0, 1500.0, f64::NAN);
        assert!(
            t.contains("cost nothing measurable") && !t.contains('-'),
            "{t}"
        );
        assert!(!t.contains("Copies spend"), "{t}");
    }
}
