//! The Python bench's part of the report's Genie section: what is measured, the table, a
//! figure, and sentences made from this run's numbers only.

use super::{PythonSection, Row, TARGET_SIZE};
use crate::lab::genie::chart::against_length;
use crate::lab::genie::measure::GenieResults;
use crate::report::doc::Block;
use crate::report::plot::{Scale, Series, Style};
use crate::report::text::{figure, h, p, size, table};
use std::fmt::Write as _;

/// Milliseconds, three significant digits at least.
fn ms(ns: f64) -> String {
    let x = ns / 1e6;
    if x >= 10.0 {
        format!("{x:.1}")
    } else if x >= 0.1 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

fn opt_ms(x: Option<f64>) -> String {
    x.map_or("-".into(), ms)
}

fn spread_ms(x: Option<[f64; 2]>) -> String {
    x.map_or("-".into(), |[a, b]| format!("{}–{}", ms(a), ms(b)))
}

fn mib(kib: Option<f64>) -> String {
    kib.map_or("-".into(), |k| format!("{:.0}", k / 1024.0))
}

/// `yes`, `no: why`, or `not run: why`.
fn status(r: &Row) -> String {
    match (&r.error, r.verified) {
        (Some(e), _) if r.rounds == 0 => format!("not run: {e}"),
        (Some(e), _) => format!("failed: {e}"),
        (None, true) => "yes".into(),
        (None, false) => "no".into(),
    }
}

fn saw(r: &Row) -> &'static str {
    match (r.rounds, r.saw_later_change) {
        (0, _) => "-",
        (_, true) => "YES",
        (_, false) => "no",
    }
}

/// The bench's table as text, for `zcio bench python`.
pub fn text_table(s: &PythonSection) -> String {
    let mut o = String::new();
    if let Some(why) = &s.unavailable {
        let _ = writeln!(o, "Not measured: {why}.");
        return o;
    }
    let _ = writeln!(
        o,
        "A numpy array from Python process A to Python process B, which ends with a writable array of its own; A changes its array right after the send. Each run does it twice, with two arrays: the second is measured, the first (first ms) runs the code paths once. Latency: A's send start to B holding its array (CLOCK_MONOTONIC at both). Send: A blocked in its send. CPU: both processes. RSS: peak, whole process. Medians over {} round(s), a fresh pair of processes each, spread lowest–highest. {}",
        s.plan.rounds,
        s.python.as_deref().unwrap_or("")
    );
    let _ = writeln!(
        o,
        "{:>8} {:<14} {:>11} {:>19} {:>10} {:>10} {:>9} {:>8} {:>8} {:>10}  verified",
        "size",
        "contender",
        "latency ms",
        "(spread)",
        "first ms",
        "send ms",
        "CPU ms",
        "RSS A MiB",
        "RSS B",
        "saw change"
    );
    for r in &s.rows {
        let _ = writeln!(
            o,
            "{:>8} {:<14} {:>11} {:>19} {:>10} {:>10} {:>9} {:>9} {:>8} {:>10}  {}",
            size(r.bytes),
            r.contender,
            opt_ms(r.latency_ns),
            spread_ms(r.latency_spread_ns),
            opt_ms(r.first_latency_ns),
            opt_ms(r.send_ns),
            opt_ms(r.cpu_ns),
            mib(r.rss_a_kib),
            mib(r.rss_b_kib),
            saw(r),
            status(r)
        );
    }
    for t in target_sentences(s) {
        let _ = writeln!(o, "{t}");
    }
    o
}

/// The finding that heads Genie's section, if the Python bench ran.
pub fn finding(g: &GenieResults) -> Option<String> {
    let s = g.python.as_ref()?;
    if let Some(why) = &s.unavailable {
        return Some(format!(
            "Python (zcio bench python): not measured here: {why}."
        ));
    }
    Some(format!(
        "Python (zcio bench python): {}",
        target_sentences(s).join(" ")
    ))
}

/// The section's blocks, if the Python bench ran.
pub fn blocks(g: &GenieResults) -> Vec<Block> {
    let Some(s) = g.python.as_ref() else {
        return Vec::new();
    };
    let mut b = vec![h(
        3,
        "From Python: a numpy array between two processes, zcio against multiprocessing, shared_memory and iceoryx2",
    )];
    if let Some(why) = &s.unavailable {
        b.push(p(format!(
            "Not measured in this run: {why}. No rows are recorded."
        )));
        return b;
    }
    b.push(p(format!(
        "Process A, in Python ({}), holds a numpy array of the size listed (a pattern that depends on each byte's offset), hands it to process B and changes it right after its send (one byte in every 4 KiB page, and the last); B must end with a writable array of its own holding the bytes of the moment of the send. Each run does this twice, with two arrays A made before the clock: the second transfer is the one measured, the first runs each process's code paths once (an interpreter's first call of anything costs tens of microseconds more than its next, which would be read as Python's overhead), and its end-to-end time is in the column first. zcio: B listens on a unique name with a window of the array (256 MiB at most), A connects and calls ch.send(a) (emulated copy; from 1 MiB the bytes are copied once into a sealed memory file that B maps privately), B holds numpy.frombuffer(ch.recv()). zcio-alloc: the same, A's array made in zcio.alloc memory (a memory file in 2 MiB pages, filled before the clock), whose send seals the file and hands it to B without copying a byte, A's mapping becoming a private one of the same file: A's change then has the kernel copy each 4 KiB page it writes (A's CPU time counts those copies). zcio-numpy: the same as zcio-alloc, A's array made by numpy itself inside a with zcio.numpy_memory() block, which has numpy allocate its large arrays in zcio's memory files. zcio-volatile: as zcio, both ends having said they trust each other with volatile loans (ch.set_volatile_loans(True)): the memory file A's bytes are copied into is lent to B, given back when B drops its array, and reused by A's next send (Fbufs' volatile buffers, cached per channel) instead of fresh pages; B's array is its own while B holds it, but a peer process that broke the trust could change it. rust, rust-alloc and rust-volatile: the same job done by two Rust processes (zcio's own executable) with the Rust channel's calls that zcio's Python module makes for zcio, zcio-alloc and zcio-volatile (a loan taken, the bytes copied in and sent, A's array in private memory asked for in 2 MiB pages as numpy asks for a large array's; a loan filled before the clock, sent and kept; volatile loans), B receiving with recv_loan: what Python's overhead is read against. pipe and queue: multiprocessing.Pipe's send and recv, multiprocessing.Queue's put and get, of the array (pickled). shared_memory: a multiprocessing.shared_memory block of the array's size, made and touched by A and opened by B before the clock (a block that is reused; B's handle kept out of the resource tracker so that it never unlinks A's block); A copies its array in and says so over a Pipe, B copies it out into an array of its own. iceoryx2 (its Python package, where installed): publish-subscribe of a slice of bytes sized for the array, service and ports made before the clock; A loans a sample, copies its array in and sends it; B, polling its subscriber every 50 µs, copies the sample out into an array of its own. Every run is a fresh pair of processes (A started by the bench, B by A with multiprocessing's spawn, or by the Rust A), pinned to two different CPUs as zcio bench channel pins its processes (unpinned, the scheduler may wake B on A's CPU and queue it behind A's change), with BLAS held to one thread (OPENBLAS_NUM_THREADS=1: the job does no linear algebra, and OpenBLAS's threads spin on the same two CPUs while they wait), contenders in an order that rotates from round to round. Latency: from A's send start to B holding its array, both on CLOCK_MONOTONIC (B reports its time back). Send: A's time blocked in its send (shared_memory: the copy in and the notice; iceoryx2: loan, copy, send). CPU: A's CPU time from the send start to the end of its change plus B's from its wait start to holding its array. RSS: each process's peak resident set over its life (ru_maxrss; the interpreter and numpy are some 35 MiB of it). Once A says it has changed its array, B checks its own at every 4096th byte and at the first and last (the bytes A changes): verified means each held the original or A's change of it; saw A's change means one held the change. Medians over {} round{}, spread lowest–highest round.",
        s.python.as_deref().unwrap_or("python3"),
        s.plan.rounds,
        if s.plan.rounds == 1 { "" } else { "s" }
    )));
    let rows = s
        .rows
        .iter()
        .map(|r| {
            vec![
                size(r.bytes),
                r.contender.clone(),
                format!(
                    "{} ({})",
                    opt_ms(r.latency_ns),
                    spread_ms(r.latency_spread_ns)
                ),
                format!(
                    "{} ({})",
                    opt_ms(r.first_latency_ns),
                    spread_ms(r.first_latency_spread_ns)
                ),
                opt_ms(r.send_ns),
                opt_ms(r.cpu_ns),
                mib(r.rss_a_kib),
                mib(r.rss_b_kib),
                saw(r).to_string(),
                status(r),
            ]
        })
        .collect();
    b.push(table(
        "A numpy array from Python process A to Python process B: end-to-end time (of the second transfer of each run, and of the first), A's time in its send, CPU time of both, peak RSS of both, whether B saw A's later change",
        &[
            "size",
            "contender",
            "latency ms (spread)",
            "first ms (spread)",
            "send ms",
            "CPU ms",
            "RSS A MiB",
            "RSS B MiB",
            "B saw A's change",
            "verified",
        ],
        rows,
    ));
    b.push(figure(
        "python-latency",
        "End-to-end time of a numpy array from Python process A to B (A's send start to B holding its array) against its size, per contender, both axes logarithmic; the bars are the lowest–highest round.".into(),
        against_length(
            "From Python: a numpy array between two processes".into(),
            "end-to-end time (ms)",
            Scale::Log,
            series(s),
        ),
    ));
    for t in target_sentences(s) {
        b.push(p(t));
    }
    b
}

/// One latency curve (ms) per contender over the sizes it ran at.
fn series(s: &PythonSection) -> Vec<Series> {
    s.plan
        .contenders
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let mut pts: Vec<&Row> = s
                .rows
                .iter()
                .filter(|r| &r.contender == c && r.latency_ns.is_some())
                .collect();
            if pts.is_empty() {
                return None;
            }
            pts.sort_by_key(|r| r.bytes);
            Some(Series {
                name: c.clone(),
                points: pts
                    .iter()
                    .map(|r| (r.bytes as f64, r.latency_ns.unwrap_or(0.0) / 1e6))
                    .collect(),
                style: if c.starts_with("zcio") || c.starts_with("rust") {
                    Style::Line
                } else {
                    Style::Dashed
                },
                band: Some(
                    pts.iter()
                        .filter_map(|r| {
                            let [lo, hi] = r.latency_spread_ns?;
                            Some((r.bytes as f64, lo / 1e6, hi / 1e6))
                        })
                        .collect(),
                ),
                color: Some(i),
            })
        })
        .collect()
}

/// Python's overhead on top of the Rust channel from 8 MiB up: each Python contender's
/// end-to-end time against the Rust processes' making the same calls, at every size both ran.
fn overhead_sentence(s: &PythonSection) -> String {
    const TARGET: f64 = 10.0;
    let mut parts = Vec::new();
    let (mut met, mut all) = (0, 0);
    // Where the target was missed: the microseconds Python added on the paths that copy
    // nothing (a fixed cost per message), and, on the paths that copy, where Python's median
    // lies against the Rust processes' rounds.
    let (mut fixed_missed, mut copy_missed) = (Vec::new(), Vec::new());
    for (py, rs) in [
        ("zcio", "rust"),
        ("zcio-alloc", "rust-alloc"),
        ("zcio-numpy", "rust-alloc"),
        ("zcio-volatile", "rust-volatile"),
    ] {
        let mut at = Vec::new();
        let mut sizes: Vec<usize> = s
            .rows
            .iter()
            .map(|r| r.bytes)
            .filter(|b| *b >= 8 << 20)
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        for b in sizes {
            let (Some(p), Some(r)) = (
                of(s, py, b, |r| r.latency_ns),
                of(s, rs, b, |r| r.latency_ns),
            ) else {
                continue;
            };
            let pct = (p / r - 1.0) * 100.0;
            all += 1;
            if pct <= TARGET {
                met += 1;
            } else if py == "zcio" || py == "zcio-volatile" {
                let spread = s.row(rs, b).and_then(|r| r.latency_spread_ns).map_or(
                    String::new(),
                    |[lo, hi]| {
                        let within = if (lo..=hi).contains(&p) {
                            "within"
                        } else {
                            "outside"
                        };
                        format!(", {within} {rs}'s rounds ({}–{} ms)", ms(lo), ms(hi))
                    },
                );
                copy_missed.push(format!("{py} at {}{spread}", size(b)));
            } else {
                fixed_missed.push(((p - r) / 1e3, r / 1e3));
            }
            at.push(format!(
                "{pct:+.0} % at {} ({} ms against {} ms, {:+.0} µs)",
                size(b),
                ms(p),
                ms(r),
                (p - r) / 1e3
            ));
        }
        if !at.is_empty() {
            parts.push(format!("{py} over {rs}: {}", at.join(", ")));
        }
    }
    if all == 0 {
        return "Python's overhead on top of the Rust channel: not measured in this run (the rust contenders did not run beside zcio's from 8 MiB up).".into();
    }
    let mut why = Vec::new();
    if !fixed_missed.is_empty() {
        let lo = fixed_missed
            .iter()
            .map(|x| x.0)
            .fold(f64::INFINITY, f64::min);
        let hi = fixed_missed
            .iter()
            .map(|x| x.0)
            .fold(f64::NEG_INFINITY, f64::max);
        let rust = fixed_missed
            .iter()
            .map(|x| x.1)
            .fold(f64::INFINITY, f64::min);
        why.push(format!(
            "where the bytes are not copied, Python adds {lo:.0} to {hi:.0} µs per message (the interpreter's calls at both ends, run cold by processes just woken, and the array made on the received buffer) to transfers the Rust processes make in {rust:.0} µs and more"
        ));
    }
    if !copy_missed.is_empty() {
        why.push(format!(
            "where the bytes are copied once, the copy's own time varies from round to round with the memory it gets (fresh pages for zcio{}, a file given back for zcio-volatile), and Python's median is to be read against the Rust processes' rounds: {}",
            if page_reporting_sentence(s).is_some() {
                ", the sentence on fresh pages below"
            } else {
                ""
            },
            copy_missed.join("; ")
        ));
    }
    format!(
        "Python's overhead on top of the Rust channel (end-to-end time, the same calls made from Rust processes): {}; target ≤ {TARGET} %: met at {met} of {all}{}.",
        parts.join("; "),
        if met < all {
            format!(" (MISSED at the others: {})", why.join("; "))
        } else {
            String::new()
        }
    )
}

/// Where this machine hands free memory back to its hypervisor: what that costs a copy into
/// fresh 2 MiB pages, read from zcio's rows (both transfers) against the Rust processes'
/// making the same calls.
fn page_reporting_sentence(s: &PythonSection) -> Option<String> {
    let pr = s.page_reporting?;
    let n = TARGET_SIZE;
    let both = |c: &str| -> Option<String> {
        let r = s.row(c, n).filter(|r| r.verified)?;
        let ([lo, hi], [flo, fhi]) = (r.latency_spread_ns?, r.first_latency_spread_ns?);
        Some(format!(
            "{c} {} ms ({}–{}) at its second transfer and {} ms ({}–{}) at its first",
            ms(r.latency_ns?),
            ms(lo),
            ms(hi),
            ms(r.first_latency_ns?),
            ms(flo),
            ms(fhi)
        ))
    };
    let zcio = both("zcio")?;
    let rust = both("rust").map_or(String::new(), |r| {
        format!("; the same calls from Rust processes, {r}")
    });
    Some(format!(
        "This machine hands free blocks of {} KiB back to its hypervisor (free page reporting, {} ms after they are freed), which faults them in again at their first touch: a copy into fresh 2 MiB pages, as zcio's send of a numpy array in the process's own memory makes, pays that whenever the blocks it gets were handed back. At {}, medians (rounds lowest–highest): {zcio}{rust}.",
        4u64 << pr.order,
        pr.min_free_ms,
        size(n),
    ))
}

/// A verified row's value of `f`.
fn of(s: &PythonSection, c: &str, bytes: usize, f: fn(&Row) -> Option<f64>) -> Option<f64> {
    s.row(c, bytes).filter(|r| r.verified).and_then(f)
}

/// The sentences on the targets and on A's later change, from this run's rows.
pub fn target_sentences(s: &PythonSection) -> Vec<String> {
    let n = TARGET_SIZE;
    let at = size(n);
    let mut out = Vec::new();
    let lat = |c: &str| of(s, c, n, |r| r.latency_ns);
    let over = |other: &str, what: &str, target: f64| -> String {
        let zcio = ["zcio", "zcio-alloc", "zcio-numpy", "zcio-volatile"]
            .iter()
            .filter_map(|z| Some((*z, lat(z)?)))
            .collect::<Vec<_>>();
        let Some(o) = lat(other) else {
            return format!(
                "zcio against {what} at {at}: not measured in this run (target ≥ {target}×)."
            );
        };
        if zcio.is_empty() {
            return format!(
                "zcio against {what} at {at}: zcio not measured in this run (target ≥ {target}×)."
            );
        }
        let parts: Vec<String> = zcio
            .iter()
            .map(|(z, x)| {
                let q = o / x;
                format!(
                    "{z} {q:.2}× ({} ms against {} ms: target ≥ {target}×, {})",
                    ms(*x),
                    ms(o),
                    if q >= target {
                        "met".to_string()
                    } else {
                        format!("MISSED, short by {:.2}×", target / q)
                    }
                )
            })
            .collect();
        format!(
            "End-to-end time at {at}, {what}'s over zcio's: {}.",
            parts.join("; ")
        )
    };
    out.push(over("pipe", "multiprocessing.Pipe", 10.0));
    out.push(over(
        "shared_memory",
        "shared_memory with a private copy",
        1.5,
    ));
    // The target is for an array in 2 MiB pages (zcio-alloc's and zcio-numpy's); zcio's own
    // figure, a copy of the array's bytes, is told beside it.
    let held: Vec<String> = [
        ("zcio-alloc", "in zcio.alloc's 2 MiB pages"),
        ("zcio-numpy", "made by numpy inside zcio.numpy_memory()"),
    ]
    .iter()
    .filter_map(|(c, how)| {
        let x = of(s, c, n, |r| r.send_ns)?;
        Some(format!(
            "{how} ({c}), {} ms (target ≤ 1 ms: {})",
            ms(x),
            if x <= 1e6 {
                "met".to_string()
            } else {
                format!("MISSED, by {} ms, {:.0}× the target", ms(x - 1e6), x / 1e6)
            }
        ))
    })
    .collect();
    out.push(if held.is_empty() {
        format!(
            "A's time blocked in zcio's send at {at}: zcio-alloc and zcio-numpy not measured in this run."
        )
    } else {
        let copy = of(s, "zcio", n, |r| r.send_ns).map_or(String::new(), |c| {
            format!(
                " (zcio with the array in numpy's own memory, copied once into a memory file: {} ms)",
                ms(c)
            )
        });
        format!(
            "A's time blocked in its send at {at}, its array {}{copy}.",
            held.join("; its array ")
        )
    });
    out.push(overhead_sentence(s));
    if let Some(t) = page_reporting_sentence(s) {
        out.push(t);
    }
    let ran: Vec<&Row> = s.rows.iter().filter(|r| r.rounds > 0).collect();
    let saw: Vec<String> = ran
        .iter()
        .filter(|r| r.saw_later_change)
        .map(|r| format!("{} at {}", r.contender, size(r.bytes)))
        .collect();
    out.push(if ran.is_empty() {
        "No contender ran.".into()
    } else if saw.is_empty() {
        format!(
            "No contender let B see A's later change ({} rows, every round checked).",
            ran.len()
        )
    } else {
        format!(
            "B saw A's later change with {} (the send returned before the bytes were taken: the array must not be changed until it has gone); with no other contender.",
            saw.join(", ")
        )
    });
    let missing: Vec<String> = s
        .rows
        .iter()
        .filter(|r| r.unavailable())
        .map(|r| format!("{} ({})", r.contender, r.error.as_deref().unwrap_or("")))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if !missing.is_empty() {
        out.push(format!("Not run here: {}.", missing.join("; ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::Plan;
    use super::*;

    fn row(c: &str, bytes: usize, lat_ms: f64, send_ms: f64) -> Row {
        Row {
            contender: c.into(),
            bytes,
            latency_ns: Some(lat_ms * 1e6),
            latency_spread_ns: Some([lat_ms * 1e6, lat_ms * 1e6]),
            send_ns: Some(send_ms * 1e6),
            first_latency_ns: Some(2.0 * lat_ms * 1e6),
            first_latency_spread_ns: Some([2.0 * lat_ms * 1e6, 2.0 * lat_ms * 1e6]),
            first_send_ns: Some(send_ms * 1e6),
            cpu_ns: Some(1e6),
            rss_a_kib: Some(1024.0),
            rss_b_kib: Some(1024.0),
            verified: true,
            saw_later_change: false,
            rounds: 3,
            error: None,
        }
    }

    #[test]
    fn the_sentences_are_computed_from_the_rows_and_say_a_missed_target_plainly() {
        let n = TARGET_SIZE;
        let mut q = row("queue", n, 50.0, 0.5);
        q.saw_later_change = true;
        let mut ice = row("iceoryx2", n, 0.0, 0.0);
        ice.error = Some("unavailable: iceoryx2 is not importable here".into());
        ice.verified = false;
        ice.rounds = 0;
        ice.latency_ns = None;
        let s = PythonSection {
            plan: Plan::of(crate::report::preset::Preset::Quick),
            rows: vec![
                row("zcio", n, 20.0, 3.0),
                row("zcio-alloc", n, 0.2, 1.5),
                row("zcio-numpy", n, 0.25, 0.5),
                row("zcio-volatile", n, 10.5, 10.0),
                row("rust", n, 19.0, 3.0),
                row("rust-alloc", n, 0.1, 0.05),
                row("rust-volatile", n, 10.0, 9.5),
                row("pipe", n, 400.0, 300.0),
                row("shared_memory", n, 25.0, 10.0),
                q,
                ice,
            ],
            unavailable: None,
            python: None,
            page_reporting: None,
        };
        let t = target_sentences(&s);
        assert!(
            t[0].contains("zcio 20.00× (20.0 ms against 400.0 ms: target ≥ 10×, met)")
                && t[0].contains("zcio-numpy 1600.00× ")
                && t[0].contains("zcio-volatile 38.10× "),
            "{}",
            t[0]
        );
        assert!(
            t[1].contains("zcio 1.25× ") && t[1].contains("MISSED, short by 1.20×"),
            "{}",
            t[1]
        );
        assert!(
            t[2].contains(
                "2 MiB pages (zcio-alloc), 1.50 ms (target ≤ 1 ms: MISSED, by 0.50 ms, 2× the target)"
            ) && t[2].contains("zcio.numpy_memory() (zcio-numpy), 0.50 ms (target ≤ 1 ms: met)")
                && t[2].contains("copied once into a memory file: 3.00 ms"),
            "{}",
            t[2]
        );
        assert!(
            t[3].contains("zcio over rust: +5 % at 128 MiB (20.0 ms against 19.0 ms, +1000 µs)")
                && t[3].contains("zcio-alloc over rust-alloc: +100 % at 128 MiB")
                && t[3].contains("zcio-numpy over rust-alloc: +150 % at 128 MiB")
                && t[3].contains("zcio-volatile over rust-volatile: +5 % at 128 MiB")
                && t[3].contains("met at 2 of 4 (MISSED at the others: where the bytes are not copied, Python adds 100 to 150 µs per message")
                && t[3].contains("to transfers the Rust processes make in 100 µs and more)"),
            "{}",
            t[3]
        );
        assert!(t[4].contains("queue at 128 MiB"), "{}", t[4]);
        assert!(t[5].starts_with("Not run here: iceoryx2"), "{}", t[5]);
        assert!(s.failures().is_empty(), "{:?}", s.failures());
        // Where the machine reports free pages to its hypervisor, a sentence says so, with
        // zcio's spread and the Rust processes' time; nowhere else.
        assert!(!t.iter().any(|x| x.contains("hypervisor")));
        let mut hands_back = s.clone();
        hands_back.page_reporting = Some(super::super::PageReporting {
            order: 9,
            min_free_ms: 0,
        });
        let t2 = target_sentences(&hands_back);
        let hv = t2
            .iter()
            .find(|x| x.contains("hypervisor"))
            .expect("the sentence");
        assert!(
            hv.contains("blocks of 2048 KiB")
                && hv.contains("zcio 20.0 ms (20.0–20.0) at its second transfer and 40.0 ms (40.0–40.0) at its first; the same calls from Rust processes, rust 19.0 ms (19.0–19.0) at its second"),
            "{hv}"
        );
        // A copy path's miss is read against the Rust processes' rounds.
        let mut slower = s.clone();
        for r in slower.rows.iter_mut() {
            if r.contender == "zcio-volatile" {
                r.latency_ns = Some(12.0e6);
            }
            if r.contender == "rust-volatile" {
                r.latency_spread_ns = Some([9.0e6, 12.5e6]);
            }
        }
        let t3 = target_sentences(&slower);
        assert!(
            t3[3].contains("zcio-volatile over rust-volatile: +20 % at 128 MiB")
                && t3[3].contains(
                    "Python's median is to be read against the Rust processes' rounds: zcio-volatile at 128 MiB, within rust-volatile's rounds (9.00–12.5 ms)"
                ),
            "{}",
            t3[3]
        );
        let text = text_table(&s);
        assert!(text.contains("YES"), "{text}");
    }
}
