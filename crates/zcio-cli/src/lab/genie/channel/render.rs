//! What `zcio bench channel` prints: the table, the ratios, and sentences on the project's
//! targets made from the run's numbers only (the report's Genie section says the same).

use super::{ChannelSection, Contender, Granule, Row};
use crate::report::text::{size, us};
use std::fmt::Write as _;
use zcio_genie::{DataPath, Semantics};

/// The project's hopes for emulated copy over a channel, from 2 MiB up: throughput at least
/// iceoryx2's, and at least this many times a Unix socket's.
pub const TARGET_VS_UNIX: f64 = 3.0;

/// The project's hope for the send time of 64 MiB under emulated copy, per granule (ns).
pub fn target_send_64m_ns(g: Granule) -> f64 {
    match g {
        Granule::Base => 20e6,
        Granule::Huge => 1e6,
    }
}

fn ec() -> String {
    Contender::Zcio(Semantics::EmulatedCopy).name()
}

pub(super) fn opt_us(x: Option<f64>) -> String {
    x.map_or("-".into(), us)
}

pub(super) fn spread_us(x: Option<[f64; 2]>) -> String {
    x.map_or("-".into(), |[a, b]| format!("{}–{}", us(a), us(b)))
}

/// A throughput in GB/s: two decimals, three significant digits below 0.1 (small messages).
fn gb(x: f64) -> String {
    if x.abs() >= 0.1 || x == 0.0 {
        format!("{x:.2}")
    } else {
        let digits = (2 - x.abs().log10().floor() as i32).clamp(3, 9) as usize;
        format!("{x:.digits$}")
    }
}

pub(super) fn gbps(x: Option<f64>) -> String {
    x.map_or("-".into(), gb)
}

pub(super) fn spread_gbps(x: Option<[f64; 2]>) -> String {
    x.map_or("-".into(), |[a, b]| format!("{}–{}", gb(a), gb(b)))
}

/// Messages per second of a row's throughput: `0.58 M`, `8.7 k`, `14.5`.
pub(super) fn msgs_per_s(r: &Row) -> String {
    r.throughput_gbps.map_or("-".into(), |x| {
        let m = x * 1e9 / r.bytes as f64;
        if m >= 1e6 {
            format!("{:.2} M", m / 1e6)
        } else if m >= 1e3 {
            format!("{:.1} k", m / 1e3)
        } else {
            format!("{m:.1}")
        }
    })
}

pub(super) fn ratio(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{x:.2}×"))
}

pub(super) fn status(r: &Row) -> String {
    match (&r.error, r.verified) {
        (Some(e), _) if r.rounds == 0 => format!("not run: {e}"),
        (Some(e), _) => format!("failed: {e}"),
        (None, true) => "yes".into(),
        (None, false) => match r.first_mismatch {
            Some((m, at)) => format!("NO: message {m} differs at byte {at}"),
            None => "no".into(),
        },
    }
}

/// A zcio row's path, and for zcio-loan what taking a loan took (counted in its times).
pub(super) fn path_note(r: &Row) -> String {
    let mut p = r.path.clone().unwrap_or_default();
    if let Some(m) = r.make_ns {
        p.push_str(&format!(
            "; each loan taken in {} µs, counted in its times",
            us(m)
        ));
    }
    p
}

/// The lowest and highest of `xs`.
pub(super) fn range(xs: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    xs.fold(None, |acc, x| match acc {
        None => Some((x, x)),
        Some((lo, hi)) => Some((f64::min(lo, x), f64::max(hi, x))),
    })
}

/// Emulated copy's throughput ratios from 2 MiB up, against `of` (`iceoryx2`, `unix`): the
/// range, how many points meet `target`, and how many points there are.
pub(super) fn against(
    s: &ChannelSection,
    of: &str,
    target: f64,
) -> Option<((f64, f64), usize, usize)> {
    let xs: Vec<f64> = s
        .ratios
        .iter()
        .filter_map(|q| match of {
            "iceoryx2" => q.emulated_copy_vs_iceoryx2,
            _ => q.emulated_copy_vs_unix,
        })
        .collect();
    let r = range(xs.iter().copied())?;
    Some((r, xs.iter().filter(|x| **x >= target).count(), xs.len()))
}

/// Emulated copy's send time at 64 MiB per granule, where measured.
fn send_64m(s: &ChannelSection) -> Vec<(Granule, f64)> {
    s.plan
        .granules
        .iter()
        .filter_map(|&g| {
            let r = s.row(&ec(), 64 << 20, g)?;
            Some((g, r.send_ns?))
        })
        .collect()
}

/// The sentences on the project's targets, from this run's numbers.
pub(super) fn target_sentences(s: &ChannelSection) -> Vec<String> {
    let mut out = Vec::new();
    let sizes: Vec<String> = s
        .ratios
        .iter()
        .map(|q| q.bytes)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .map(size)
        .collect();
    if s.ratios.is_empty() {
        out.push("No size of 2 MiB or more was measured with zcio-emulated-copy verified, so the throughput targets are not tested in this run.".into());
    } else {
        let say = |of: &str, target: f64, what: &str| match against(s, of, target) {
            Some(((lo, hi), met, n)) => format!(
                "against {what}: {lo:.2}–{hi:.2}× (target ≥ {target:.0}×: met at {met} of {n} sizes × granules)"
            ),
            None => format!("against {what}: not measured"),
        };
        out.push(format!(
            "Emulated copy's throughput over the channel from 2 MiB up (this run: {}): {}; {}.",
            sizes.join(", "),
            say("iceoryx2", 1.0, "iceoryx2"),
            say("unix", TARGET_VS_UNIX, "the Unix socket"),
        ));
    }
    let sends = send_64m(s);
    if !sends.is_empty() {
        let parts: Vec<String> = sends
            .iter()
            .map(|(g, ns)| {
                let t = target_send_64m_ns(*g);
                format!(
                    "{} µs with {g} buffers (target ≤ {} ms: {})",
                    us(*ns),
                    t / 1e6,
                    if *ns <= t { "met" } else { "not met" }
                )
            })
            .collect();
        out.push(format!(
            "Median time inside Channel::send of 64 MiB under emulated copy: {}.",
            parts.join("; ")
        ));
    }
    out.extend(throughput_sentences(s));
    out.extend(loan_sentences(s));
    out.extend(short_message_sentences(s));
    out
}

/// The zcio contender of zcio's buffer semantics (`zcio-<semantics>`, not loans) with the
/// highest throughput at `bytes` and `g`, among the verified rows.
fn best_zcio(s: &ChannelSection, bytes: usize, g: Granule) -> Option<&Row> {
    s.rows
        .iter()
        .filter(|r| r.bytes == bytes && r.granule == g && r.verified)
        .filter(|r| matches!(Contender::parse(&r.contender), Ok(Contender::Zcio(_))))
        .filter_map(|r| Some((r, r.throughput_gbps?)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(r, _)| r)
}

/// `y` of each of `rows` over `of`'s (ratios of the medians) at the row's size and granule,
/// where `of` is measured and verified.
fn over<'a>(
    s: &ChannelSection,
    rows: impl IntoIterator<Item = &'a Row>,
    of: &str,
    y: fn(&Row) -> Option<f64>,
) -> Vec<f64> {
    rows.into_iter()
        .filter_map(|r| {
            let o = s.row(of, r.bytes, r.granule).filter(|o| o.verified)?;
            Some(y(r)? / y(o)?)
        })
        .collect()
}

/// `rows`' throughput over `of`'s ([`over`]).
fn throughput_over(s: &ChannelSection, rows: &[&Row], of: &str) -> Vec<f64> {
    over(s, rows.iter().copied(), of, |r| r.throughput_gbps)
}

/// `xs`' range and how many of them meet `target` (at least it).
fn over_target(xs: &[f64], target: f64, what: &str) -> String {
    match range(xs.iter().copied()) {
        Some((lo, hi)) => format!(
            "{} {what} (target ≥ {target}×: met at {} of {})",
            if format!("{lo:.2}") == format!("{hi:.2}") {
                format!("{lo:.2}×")
            } else {
                format!("{lo:.2}–{hi:.2}×")
            },
            xs.iter().filter(|x| **x >= target).count(),
            xs.len()
        ),
        None => format!("{what}: not measured"),
    }
}

/// The loan contenders (`zcio-loan`, `zcio-loan-volatile`) this run's plan has.
fn loan_contenders(s: &ChannelSection) -> Vec<Contender> {
    [Contender::Loan, Contender::VolatileLoan]
        .into_iter()
        .filter(|c| s.plan.contenders.contains(&c.name()))
        .collect()
}

/// Per granule, from 2 MiB up, the throughput of the best of zcio's buffer semantics (which
/// one, per size) and of each loan contender over iceoryx2's and the Unix socket's, ratios
/// of this run's medians, against the project's targets.
pub(super) fn throughput_sentences(s: &ChannelSection) -> Vec<String> {
    let loans = loan_contenders(s);
    let large: Vec<usize> = s
        .plan
        .sizes
        .iter()
        .copied()
        .filter(|b| *b >= 2 << 20)
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut out = Vec::new();
    for &g in &s.plan.granules {
        let best: Vec<&Row> = large.iter().filter_map(|&b| best_zcio(s, b, g)).collect();
        let loan_rows: Vec<(String, Vec<&Row>)> = loans
            .iter()
            .map(|c| {
                let name = c.name();
                let rows = large
                    .iter()
                    .filter_map(|&b| s.row(&name, b, g).filter(|r| r.verified))
                    .collect();
                (name, rows)
            })
            .collect();
        if best.is_empty() && loan_rows.iter().all(|(_, r)| r.is_empty()) {
            continue;
        }
        let mut which: Vec<(String, Vec<String>)> = Vec::new();
        for r in &best {
            match which.iter_mut().find(|(c, _)| *c == r.contender) {
                Some((_, at)) => at.push(size(r.bytes)),
                None => which.push((r.contender.clone(), vec![size(r.bytes)])),
            }
        }
        let said = |rows: &[&Row]| {
            if rows.is_empty() {
                return "not measured".to_string();
            }
            format!(
                "{}, and {}",
                over_target(&throughput_over(s, rows, "iceoryx2"), 1.0, "iceoryx2's"),
                over_target(
                    &throughput_over(s, rows, "unix"),
                    TARGET_VS_UNIX,
                    "the Unix socket's"
                ),
            )
        };
        let loans_said: String = loan_rows
            .iter()
            .map(|(name, rows)| format!("; {name} {}", said(rows)))
            .collect();
        out.push(format!(
            "Streamed throughput from 2 MiB up with {g} buffers (this run: {}), ratios of the medians: the best of zcio's buffer semantics ({}) {}{loans_said}.",
            large.iter().map(|b| size(*b)).collect::<Vec<_>>().join(", "),
            if which.is_empty() {
                "none verified".to_string()
            } else {
                which
                    .iter()
                    .map(|(c, at)| format!("{c} at {}", at.join(", ")))
                    .collect::<Vec<_>>()
                    .join("; ")
            },
            said(&best),
        ));
    }
    out
}

/// What each loan contender's rows say was copied, from their paths: none (the pages were
/// mapped), or which rows had messages that came not mapped; and what taking a loan cost,
/// counted in its times, at the largest size of each granule.
pub(super) fn loan_sentences(s: &ChannelSection) -> Vec<String> {
    loan_contenders(s)
        .into_iter()
        .flat_map(|c| loan_sentences_of(s, c))
        .collect()
}

fn loan_sentences_of(s: &ChannelSection, c: Contender) -> Vec<String> {
    let loan = c.name();
    let volatile = c == Contender::VolatileLoan;
    let rows: Vec<&Row> = s
        .rows
        .iter()
        .filter(|r| r.contender == loan && r.verified && r.path.is_some())
        .collect();
    if rows.is_empty() {
        return Vec::new();
    }
    let (out_path, in_path) = if volatile {
        (
            DataPath::Lent {
                out: true,
                mapped: false,
            },
            DataPath::Lent {
                out: false,
                mapped: true,
            },
        )
    } else {
        (
            DataPath::Shipped {
                out: true,
                mapped: false,
            },
            DataPath::Shipped {
                out: false,
                mapped: true,
            },
        )
    };
    let (out_phrase, in_phrase) = (out_path.to_string(), in_path.to_string());
    let mapped = |r: &Row| {
        r.path
            .as_deref()
            .is_some_and(|p| p == format!("output: {out_phrase}; input: {in_phrase}"))
    };
    let not: Vec<String> = rows
        .iter()
        .filter(|r| !mapped(r))
        .map(|r| {
            format!(
                "{} {} ({})",
                size(r.bytes),
                r.granule.name(),
                r.path.as_deref().unwrap_or("?")
            )
        })
        .collect();
    let (how, rate) = if volatile {
        (
            "lent as a volatile memory file",
            "passing files both ends already hold mapped (once a file has made a trip) plus the receiver's read of a byte of each page",
        )
    } else {
        (
            "shipped as a sealed memory file",
            "making, sealing, passing and mapping files plus the receiver's first touch of each page",
        )
    };
    let mut out = vec![if !not.is_empty() {
        format!(
            "{loan}'s paths in this run: every message {how} ({out_phrase}) and mapped by the receiver ({in_phrase}) at {} of {} sizes × granules; not so at {}.",
            rows.len() - not.len(),
            rows.len(),
            not.join("; ")
        )
    } else {
        format!(
            "No byte of {loan}'s messages was copied in this run: at all {} sizes × granules its path was “output: {out_phrase}; input: {in_phrase}” for every message, so its throughput is the rate of {rate}.",
            rows.len()
        )
    }];
    let makes: Vec<String> = s
        .plan
        .granules
        .iter()
        .filter_map(|&g| {
            let r = rows
                .iter()
                .filter(|r| r.granule == g && r.make_ns.is_some())
                .max_by_key(|r| r.bytes)?;
            Some(format!(
                "{} µs for {} with {g} buffers ({} pages)",
                us(r.make_ns?),
                size(r.bytes),
                r.vm_granule.as_deref().unwrap_or("?")
            ))
        })
        .collect();
    if !makes.is_empty() {
        out.push(if volatile {
            format!(
                "Taking a volatile loan (a file given back by the receiver; a new one only while fewer than {} are lent), counted in its message's times like a sealed one's, took (median) {}.",
                zcio_genie::memnet::loan::LENT_FILES,
                makes.join("; ")
            )
        } else {
            format!(
                "Taking a loan (a fresh memory file's pages allocated and mapped), counted in its message's latency, round trip and stream time because a sealed loan is never reused where the other contenders' buffers are made once, took (median) {}.",
                makes.join("; ")
            )
        });
    }
    out
}

/// `who`'s `y` over `of`'s at every size of `sizes` and granule both measured (verified).
pub(super) fn ratios_of(
    s: &ChannelSection,
    who: &str,
    of: &str,
    sizes: std::ops::RangeInclusive<usize>,
    y: fn(&Row) -> Option<f64>,
) -> Vec<f64> {
    let rows = s
        .rows
        .iter()
        .filter(|r| r.contender == who && sizes.contains(&r.bytes) && r.verified);
    over(s, rows, of, y)
}

/// The sentences on short messages' targets, from this run's numbers: streaming from 4 KiB
/// to 1 MiB against the socket (≥ 1.5×) and iceoryx2 (≥ 0.8×), ping-pong at 64 B and 4 KiB
/// within 2× iceoryx2's.
fn short_message_sentences(s: &ChannelSection) -> Vec<String> {
    let say = |xs: &[f64], target: f64, more_is_better: bool| match range(xs.iter().copied()) {
        Some((lo, hi)) => {
            let met = xs
                .iter()
                .filter(|x| {
                    if more_is_better {
                        **x >= target
                    } else {
                        **x <= target
                    }
                })
                .count();
            format!(
                "{lo:.2}–{hi:.2}× (target {} {target}×: met at {met} of {})",
                if more_is_better { "≥" } else { "≤" },
                xs.len()
            )
        }
        None => "not measured".into(),
    };
    let mut out = Vec::new();
    let mid = 4096..=(1 << 20);
    let vs_unix = ratios_of(s, &ec(), "unix", mid.clone(), |r| r.throughput_gbps);
    let vs_iox = ratios_of(s, &ec(), "iceoryx2", mid, |r| r.throughput_gbps);
    if !vs_unix.is_empty() || !vs_iox.is_empty() {
        out.push(format!(
            "Emulated copy's streamed throughput from 4 KiB to 1 MiB, over the Unix socket's: {}; over iceoryx2's: {}.",
            say(&vs_unix, 1.5, true),
            say(&vs_iox, 0.8, true),
        ));
    }
    let short = ratios_of(s, &ec(), "iceoryx2", 64..=4096, |r| r.pingpong_ns);
    if !short.is_empty() {
        out.push(format!(
            "Emulated copy's ping-pong latency at 64 B to 4 KiB over iceoryx2's: {}.",
            say(&short, 2.0, false),
        ));
    }
    out
}

/// `zcio bench channel`'s table, its ratios and the targets, as text.
pub fn text_table(s: &ChannelSection) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Two processes, every byte of every message (and reply) checked at the receiver (the sender) outside the times. Latency: one message at a time, send start (sender) to the message in the receiver's buffer, CLOCK_MONOTONIC read by both. Ping-pong: half the median round trip of the message and a 1-byte reply over the same transport (rtt of them, timed by the sender). Send: time inside the send, one-at-a-time messages. Throughput: msgs messages written first, then streamed from the sender's buffers into the receiver's, first send start to last receipt (GB/s, and messages per second). CPU: both processes over the stream, per message. Medians over {} round(s), spread lowest–highest round.",
        s.plan.rounds
    );
    if let Some([r, t]) = s.cpus {
        let _ = writeln!(o, "Receiver pinned to CPU {r}, sender to CPU {t}.");
    }
    let _ = writeln!(
        o,
        "{:<4} {:>8} {:<20} {:>10} {:>17} {:>12} {:>17} {:>7} {:>15} {:>7} {:>9} {:>9} {:>5} {:>4} {:>7}  verified / path",
        "gran",
        "size",
        "contender",
        "latency µs",
        "(spread)",
        "ping-pong µs",
        "(spread)",
        "GB/s",
        "(spread)",
        "msg/s",
        "send µs",
        "CPU µs",
        "msgs",
        "rtt",
        "window"
    );
    for r in &s.rows {
        let _ = writeln!(
            o,
            "{:<4} {:>8} {:<20} {:>10} {:>17} {:>12} {:>17} {:>7} {:>15} {:>7} {:>9} {:>9} {:>5} {:>4} {:>7}  {}{}",
            r.granule.name(),
            size(r.bytes),
            r.contender,
            opt_us(r.latency_ns),
            spread_us(r.latency_spread_ns),
            opt_us(r.pingpong_ns),
            spread_us(r.pingpong_spread_ns),
            gbps(r.throughput_gbps),
            spread_gbps(r.throughput_spread_gbps),
            msgs_per_s(r),
            opt_us(r.send_ns),
            opt_us(r.cpu_ns),
            r.messages,
            r.round_trips,
            r.window_bytes.map_or("-".into(), size),
            status(r),
            r.path
                .as_ref()
                .map_or(String::new(), |_| format!(" / {}", path_note(r))),
        );
    }
    if !s.ratios.is_empty() {
        let _ = writeln!(o);
        for q in &s.ratios {
            let _ = writeln!(
                o,
                "{} {:>8}: zcio-emulated-copy throughput / iceoryx2 {}, / unix {}, / zcio-copy {}",
                q.granule.name(),
                size(q.bytes),
                ratio(q.emulated_copy_vs_iceoryx2),
                ratio(q.emulated_copy_vs_unix),
                ratio(q.emulated_copy_vs_copy)
            );
        }
    }
    let _ = writeln!(o);
    for t in target_sentences(s) {
        let _ = writeln!(o, "{t}");
    }
    o
}
