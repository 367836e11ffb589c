//! `zcio bench fbufs`: paper 001's Table 1 and Figure 3 on this machine. Every contender passes
//! a stream of messages from this process to a receiver process, both touching each message
//! (one word per page, or every byte); contenders alternate round by round, and the report
//! gives the median time per message, its spread, the throughput, and the per-page cost fitted
//! over the message sizes (the paper's incremental per-page cost), with the asymptotic
//! throughput it implies. iceoryx2, a present-day zero-copy IPC middleware, runs beside them
//! as a peer the paper could not have measured ([`crate::lab::fbufs::iceoryx`]).
//!
//! Every contender's receiver checks every page of every message once the clock has stopped
//! ([`super::bench`], "Checking what is timed"; iceoryx2's the same way): a message that did
//! not arrive as it was sent fails the run with the receiver's account, naming the contender,
//! the message and the page.

use crate::lab::fbufs::bench::{Contender, Fault, Role, Touch};
use crate::lab::fbufs::iceoryx;
use crate::report::fit;
use crate::transfer::{Res, zcio_command};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Arguments of `zcio bench fbufs`.
#[derive(clap::Args, Debug, Clone)]
pub struct FbufsArgs {
    /// Message sizes in bytes, comma-separated (4 KiB to 64 MiB by default).
    #[arg(long, value_delimiter = ',', default_values_t = [4096usize, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864])]
    pub sizes: Vec<usize>,
    /// Contenders, comma-separated (all by default): fbufs-cached-volatile, fbufs-volatile,
    /// fbufs-cached, fbufs, fbufs-cached-volatile-via-server (three processes),
    /// page-remap-memfd, copy-unix-socket, copy-pipe, fbufs-from-socket and
    /// socket-copied-into-fbufs (a device's messages received straight into fbufs, or copied
    /// into them), iceoryx2 (its publish-subscribe, a modern peer not in the paper).
    #[arg(long, value_delimiter = ',')]
    pub contenders: Vec<String>,
    /// Touch patterns, comma-separated: word-per-page (the paper's), every-byte.
    #[arg(long, value_delimiter = ',', default_values_t = ["word-per-page".to_string(), "every-byte".to_string()])]
    pub touch: Vec<String>,
    /// Rounds (each runs every contender once, in rotating order).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Bytes each run moves at most (the message count is this over the size, 8 to 2000).
    #[arg(long, default_value_t = 256 << 20)]
    pub volume: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Testing: every contender's sender spoils timed message K (`corrupt:K`) or leaves it
    /// out (`skip:K`), and its receiver must fail the run, naming the message.
    #[arg(long, alias = "iceoryx2-fault", hide = true)]
    pub fault: Option<Fault>,
}

/// A contender of the bench: one of the fbuf crate's, or iceoryx2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entrant {
    /// Fbufs, page remapping or a copying path ([`super::bench`]).
    Fbufs(Contender),
    /// iceoryx2's publish-subscribe between the same two processes ([`crate::lab::fbufs::iceoryx`]).
    Iceoryx2,
}

impl Entrant {
    /// Every contender: the fbuf crate's in the order of the paper's Table 1, then iceoryx2.
    pub fn all() -> Vec<Entrant> {
        Contender::ALL
            .into_iter()
            .map(Entrant::Fbufs)
            .chain([Entrant::Iceoryx2])
            .collect()
    }

    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Entrant::Fbufs(c) => c.name(),
            Entrant::Iceoryx2 => iceoryx::NAME,
        }
    }

    /// The contender of a name.
    pub fn parse(s: &str) -> Option<Entrant> {
        Entrant::all().into_iter().find(|c| c.name() == s)
    }
}

/// One contender at one size and touch.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Row {
    /// Contender.
    pub variant: String,
    /// Touch pattern.
    pub touch: String,
    /// Message size (bytes).
    pub bytes: usize,
    /// Messages per run.
    pub count: usize,
    /// Median over rounds of the time per message (ns).
    pub ns_per_message: f64,
    /// Lowest and highest round (ns).
    pub spread_ns: [f64; 2],
    /// bytes / time per message (GB/s).
    pub throughput_gbps: f64,
    /// The contender's per-page cost at this touch, fitted over all sizes (ns per 4 KiB page).
    pub per_page_ns: Option<f64>,
}

/// The per-page fit of one contender and touch.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Fit {
    /// Contender.
    pub variant: String,
    /// Touch pattern.
    pub touch: String,
    /// Incremental cost per page (ns).
    pub per_page_ns: f64,
    /// Fixed cost per message (ns).
    pub per_message_ns: f64,
    /// R² of the fit.
    pub r2: Option<f64>,
    /// Asymptotic throughput: page / per-page cost (GB/s).
    pub asymptotic_gbps: f64,
}

fn parse_contenders(names: &[String]) -> Res<Vec<Entrant>> {
    if names.is_empty() {
        return Ok(Entrant::all());
    }
    names
        .iter()
        .map(|n| {
            Entrant::parse(n).ok_or_else(|| {
                let all: Vec<_> = Entrant::all().iter().map(|c| c.name()).collect();
                format!(
                    "invalid argument `--contenders {n}`: no such contender (known: {})",
                    all.join(", ")
                )
                .into()
            })
        })
        .collect()
}

/// Run the benchmark and print it.
pub fn run(a: FbufsArgs) -> Res<()> {
    let total = a.sizes.len() as u64 * a.rounds as u64 * 16;
    let bar = crate::bench_bar(total);
    let (rows, fits) = measure(&a, &bar)?;
    bar.finish_and_clear();
    print(&a, &rows, &fits)
}

/// Run the benchmark with `bar` for progress (its length is set here); the rows per contender,
/// touch and size, and the per-page fits.
pub fn measure(a: &FbufsArgs, bar: &indicatif::ProgressBar) -> Res<(Vec<Row>, Vec<Fit>)> {
    let contenders = parse_contenders(&a.contenders)?;
    let touches: Vec<Touch> = a
        .touch
        .iter()
        .map(|t| {
            Touch::parse(t).ok_or_else(|| {
                format!("invalid argument `--touch {t}`: word-per-page or every-byte").into()
            })
        })
        .collect::<Res<_>>()?;
    if a.rounds == 0 || a.sizes.is_empty() || a.sizes.iter().any(|s| *s == 0 || s % 4096 != 0) {
        return Err("invalid argument: --rounds must be positive and every --sizes a positive multiple of 4096".into());
    }
    let total = (a.sizes.len() * contenders.len() * touches.len() * a.rounds) as u64;
    bar.set_length(bar.position() + total);
    let mut rows = Vec::new();
    let mut fits = Vec::new();
    for &touch in &touches {
        let mut per: Vec<Vec<(usize, usize, Vec<f64>)>> = vec![Vec::new(); contenders.len()];
        for &bytes in &a.sizes {
            let count = (a.volume / bytes).clamp(8, 2000);
            let mut samples: Vec<Vec<f64>> = vec![Vec::new(); contenders.len()];
            for round in 0..a.rounds {
                for k in 0..contenders.len() {
                    let i = (k + round) % contenders.len();
                    let c = contenders[i];
                    bar.set_message(format!("{} {} {bytes} B", c.name(), touch.name()));
                    let ns = match c {
                        Entrant::Fbufs(f) => {
                            let spawn = |sock: &std::path::Path| {
                                spawn_sink(sock, c.name(), touch.name(), bytes, count, false)
                            };
                            crate::lab::fbufs::bench::run(f, bytes, count, touch, a.fault, &spawn)
                                .map(|r| r.ns_per_message)
                                .map_err(|e| e.to_string())
                        }
                        Entrant::Iceoryx2 => {
                            iceoryx::run(bytes, count, touch, a.fault).map_err(|e| e.to_string())
                        }
                    }
                    .map_err(|e| {
                        format!("{} ({}) at {bytes} bytes: {e}", c.name(), touch.name())
                    })?;
                    samples[i].push(ns);
                    bar.inc(1);
                }
            }
            for (i, s) in samples.into_iter().enumerate() {
                per[i].push((bytes, count, s));
            }
        }
        for (i, c) in contenders.iter().enumerate() {
            let pts: Vec<(f64, f64)> = per[i]
                .iter()
                .map(|(b, _, s)| ((b / 4096) as f64, fit::median(s).unwrap_or(0.0)))
                .collect();
            // Relative least squares: every size counts alike over four decades.
            let line = fit::relative_least_squares(&pts).ok();
            if let Some(l) = line {
                fits.push(Fit {
                    variant: c.name().into(),
                    touch: touch.name().into(),
                    per_page_ns: l.slope_ns_per_byte,
                    per_message_ns: l.intercept_ns,
                    r2: l.r2,
                    asymptotic_gbps: 4096.0 / l.slope_ns_per_byte,
                });
            }
            for (bytes, count, s) in &per[i] {
                let m = fit::median(s).unwrap_or(0.0);
                rows.push(Row {
                    variant: c.name().into(),
                    touch: touch.name().into(),
                    bytes: *bytes,
                    count: *count,
                    ns_per_message: m,
                    spread_ns: [
                        s.iter().copied().fold(f64::INFINITY, f64::min),
                        s.iter().copied().fold(0.0, f64::max),
                    ],
                    throughput_gbps: *bytes as f64 / m,
                    per_page_ns: line.map(|l| l.slope_ns_per_byte),
                });
            }
        }
    }
    Ok((rows, fits))
}

fn print(a: &FbufsArgs, rows: &[Row], fits: &[Fit]) -> Res<()> {
    if a.json {
        let out = serde_json::json!({
            "bench": "fbufs",
            "rounds": a.rounds,
            "rows": rows,
            "fits": fits,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "{:<24} {:<14} {:>12} {:>12} {:>9}",
        "contender", "touch", "ns/page", "ns/message", "GB/s max"
    );
    for f in fits {
        println!(
            "{:<24} {:<14} {:>12.1} {:>12.0} {:>9.2}",
            f.variant, f.touch, f.per_page_ns, f.per_message_ns, f.asymptotic_gbps
        );
    }
    println!();
    println!(
        "{:<24} {:<14} {:>10} {:>14} {:>9}",
        "contender", "touch", "bytes", "µs/message", "GB/s"
    );
    for r in rows {
        println!(
            "{:<24} {:<14} {:>10} {:>14.1} {:>9.2}",
            r.variant,
            r.touch,
            r.bytes,
            r.ns_per_message / 1e3,
            r.throughput_gbps
        );
    }
    // A run whose receiver found a message wrong would have failed the bench.
    let runs = rows.len() * a.rounds;
    let messages: usize = rows.iter().map(|r| r.count * a.rounds).sum();
    let pages: usize = rows
        .iter()
        .map(|r| r.count * r.bytes / 4096 * a.rounds)
        .sum();
    println!();
    println!(
        "checked at the receivers once each run's clock had stopped: {runs} runs, {messages} timed messages (and the warm-ups), {pages} pages, every page's stamp (and, every byte touched, its sum): no mismatch"
    );
    Ok(())
}

/// Start `zcio fbuf-sink`, connecting to `sock` (as the receiver behind the forwarding server
/// with `behind_server`). Its standard error is piped, for the run to quote if it fails.
fn spawn_sink(
    sock: &std::path::Path,
    contender: &str,
    touch: &str,
    bytes: usize,
    count: usize,
    behind_server: bool,
) -> std::io::Result<std::process::Child> {
    let mut c = zcio_command().map_err(|e| std::io::Error::other(e.to_string()))?;
    c.args(["fbuf-sink", "--connect"])
        .arg(sock)
        .args(["--contender", contender, "--touch", touch])
        .args(["--bytes", &bytes.to_string(), "--count", &count.to_string()]);
    if behind_server {
        c.arg("--behind-server");
    }
    c.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
}

/// `zcio fbuf-sink`: the receiving process (for fbufs-cached-volatile-via-server, the
/// forwarding server, or with `behind_server` the receiver behind it). It checks every
/// message once the run's clock has stopped.
pub fn sink(
    connect: &std::path::Path,
    contender: &str,
    bytes: usize,
    count: usize,
    touch: &str,
    behind_server: bool,
) -> Res<()> {
    let c = Contender::parse(contender).ok_or("unknown contender")?;
    let t = Touch::parse(touch).ok_or("unknown touch")?;
    let next = |sock: &std::path::Path| spawn_sink(sock, contender, touch, bytes, count, true);
    let role = if c == Contender::Forwarded && !behind_server {
        Role::Server(&next)
    } else {
        Role::Receiver
    };
    crate::lab::fbufs::bench::sink(connect, c, role, bytes, count, t)?;
    Ok(())
}
