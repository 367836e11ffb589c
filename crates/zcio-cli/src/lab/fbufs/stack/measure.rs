//! `zcio bench fbufs-stack`: paper 001's Figures 4-6 on this machine. Every contender passes
//! a stream of datagrams down the stack and up again to the receiving application; contenders
//! alternate round by round, and the bench gives per contender, touch and datagram size the
//! median time per datagram, its spread, and the throughput in Mbit/s (the paper's unit);
//! then the aggregate operations alone. Every run's receiving application checks every
//! datagram it took once the clock has stopped ([`super::proto::Record`]).

use super::local::{OpRow, aggregate_ops};
use super::proto::{IP_HDR, PAGE, Touch, UDP_HDR};
use super::{Contender, Stream};
use crate::lab::fbufs::bench::Fault;
use crate::report::fit;
use crate::transfer::Res;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Arguments of `zcio bench fbufs-stack`.
#[derive(clap::Args, Debug, Clone)]
pub struct StackArgs {
    /// Datagram sizes in bytes, comma-separated (any size from 1 byte).
    #[arg(long, value_delimiter = ',', default_values_t = [1024usize, 4096, 16384, 65536, 262144, 1048576])]
    pub sizes: Vec<usize>,
    /// IP's MTU: the largest fragment, its header included (bytes; at least 64).
    #[arg(long, default_value_t = PAGE)]
    pub mtu: usize,
    /// What the applications write and touch, comma-separated: word-per-page (the paper's),
    /// every-byte, every-byte-exact (every byte compared as it is read).
    #[arg(long, value_delimiter = ',', default_values_t = ["word-per-page".to_string(), "every-byte".to_string()])]
    pub touch: Vec<String>,
    /// Contenders, comma-separated (all by default): single-domain, fbufs-cached-volatile,
    /// fbufs-uncached, copy-unix-socket.
    #[arg(long, value_delimiter = ',')]
    pub contenders: Vec<String>,
    /// Bytes each run moves at most (the datagram count is this over the size, 16 to 2000).
    #[arg(long, default_value_t = 32 << 20)]
    pub volume: usize,
    /// Rounds: each runs every contender once, in rotating order.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Each aggregate operation's repetitions per round (0: none timed).
    #[arg(long, default_value_t = 5000)]
    pub op_iters: usize,
    /// Testing: the sending application spoils timed datagram K (`corrupt:K`) or leaves it
    /// out (`skip:K`), and the receiving side must fail the run, naming it.
    #[arg(long, hide = true)]
    pub fault: Option<Fault>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One contender at one size and touch.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Row {
    /// Contender.
    pub variant: String,
    /// Touch.
    pub touch: String,
    /// Datagram size (bytes of data, without headers).
    pub bytes: usize,
    /// Fragments per datagram.
    pub fragments: usize,
    /// Timed datagrams per run.
    pub count: usize,
    /// Median over rounds of the time per datagram (ns).
    pub ns_per_datagram: f64,
    /// Lowest and highest round (ns).
    pub spread_ns: [f64; 2],
    /// Data bits per second at the median (Mbit/s).
    pub mbps: f64,
}

/// The section of `results.json`, and what `zcio bench fbufs-stack --json` prints.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StackSection {
    /// Datagram sizes (bytes).
    pub sizes: Vec<usize>,
    /// IP's MTU (bytes).
    pub mtu: usize,
    /// IP header bytes per fragment.
    pub ip_header: usize,
    /// UDP header bytes per datagram.
    pub udp_header: usize,
    /// Rounds per point.
    pub rounds: usize,
    /// Bytes per run at most.
    pub volume: usize,
    /// Per contender, touch and size.
    pub rows: Vec<Row>,
    /// The aggregate operations alone, on a 64 KiB datagram (or the largest size below it).
    pub ops: Vec<OpRow>,
}

fn parse<T>(
    names: &[String],
    what: &str,
    all: &[&str],
    f: impl Fn(&str) -> Option<T>,
) -> Res<Vec<T>> {
    names
        .iter()
        .map(|n| {
            f(n).ok_or_else(|| {
                format!(
                    "invalid argument `--{what} {n}`: no such {what} (known: {})",
                    all.join(", ")
                )
                .into()
            })
        })
        .collect()
}

/// Run the bench and print it.
pub fn run(a: StackArgs) -> Res<()> {
    let bar = crate::bench_bar(0);
    let s = measure(&a, &bar)?;
    bar.finish_and_clear();
    print(&a, &s)
}

/// Timed datagrams per run of `bytes`.
pub fn count(volume: usize, bytes: usize) -> usize {
    (volume / bytes.max(1)).clamp(16, 2000)
}

/// Run the bench with `bar` for progress (its length grows here by the runs it makes).
pub fn measure(a: &StackArgs, bar: &indicatif::ProgressBar) -> Res<StackSection> {
    let contenders = if a.contenders.is_empty() {
        Contender::ALL.to_vec()
    } else {
        let all: Vec<_> = Contender::ALL.iter().map(|c| c.name()).collect();
        parse(&a.contenders, "contenders", &all, Contender::parse)?
    };
    let all: Vec<_> = Touch::ALL.iter().map(|t| t.name()).collect();
    let touches = parse(&a.touch, "touch", &all, Touch::parse)?;
    if a.rounds == 0 || a.sizes.is_empty() || a.sizes.contains(&0) || a.mtu < 64 {
        return Err(
            "invalid argument: --rounds, every --sizes must be positive, and --mtu at least 64"
                .into(),
        );
    }
    let runs = a.sizes.len() * contenders.len() * touches.len() * a.rounds;
    bar.inc_length(runs as u64 + 1);
    let mut rows = Vec::new();
    for &touch in &touches {
        for &bytes in &a.sizes {
            let mut s = Stream::new(bytes, count(a.volume, bytes), a.mtu, touch);
            s.fault = a.fault;
            let mut samples = vec![Vec::new(); contenders.len()];
            for round in 0..a.rounds {
                for k in 0..contenders.len() {
                    let i = (k + round) % contenders.len();
                    let c = contenders[i];
                    bar.set_message(format!(
                        "fbufs-stack {} {} {bytes} B",
                        c.name(),
                        touch.name()
                    ));
                    let ns = c.run(&s).map_err(|e| {
                        format!("{} ({}) at {bytes} bytes: {e}", c.name(), touch.name())
                    })?;
                    samples[i].push(ns);
                    bar.inc(1);
                }
            }
            for (c, v) in contenders.iter().zip(samples) {
                let m = fit::median(&v).unwrap_or(f64::NAN);
                rows.push(Row {
                    variant: c.name().into(),
                    touch: touch.name().into(),
                    bytes,
                    fragments: super::proto::Fragments::new(bytes, a.mtu).count(),
                    count: s.count,
                    ns_per_datagram: m,
                    spread_ns: fit::spread(&v),
                    mbps: bytes as f64 * 8.0 / m * 1e3,
                });
            }
        }
    }
    bar.set_message("fbufs-stack aggregate operations");
    let op_bytes = a
        .sizes
        .iter()
        .copied()
        .filter(|b| *b <= 65536)
        .max()
        .unwrap_or(65536);
    let ops = if a.op_iters > 0 {
        aggregate_ops(op_bytes, a.mtu, a.rounds, a.op_iters)?
    } else {
        Vec::new()
    };
    bar.inc(1);
    Ok(StackSection {
        sizes: a.sizes.clone(),
        mtu: a.mtu,
        ip_header: IP_HDR,
        udp_header: UDP_HDR,
        rounds: a.rounds,
        volume: a.volume,
        rows,
        ops,
    })
}

fn print(a: &StackArgs, s: &StackSection) -> Res<()> {
    if a.json {
        println!("{}", serde_json::to_string_pretty(s)?);
        return Ok(());
    }
    println!(
        "{:<22} {:<17} {:>9} {:>6} {:>14} {:>10} {:>9}",
        "contender", "touch", "bytes", "frags", "µs/datagram", "Mbit/s", "×copies"
    );
    for r in &s.rows {
        let copies = s.rows.iter().find(|x| {
            x.variant == Contender::Copies.name() && x.touch == r.touch && x.bytes == r.bytes
        });
        println!(
            "{:<22} {:<17} {:>9} {:>6} {:>14.2} {:>10.0} {:>9}",
            r.variant,
            r.touch,
            r.bytes,
            r.fragments,
            r.ns_per_datagram / 1e3,
            r.mbps,
            copies.map_or("-".into(), |c| format!("{:.2}", r.mbps / c.mbps)),
        );
    }
    println!();
    println!(
        "{:<20} {:>9} {:>6} {:>12}",
        "aggregate operation", "bytes", "frags", "ns/op"
    );
    for o in &s.ops {
        println!(
            "{:<20} {:>9} {:>6} {:>12.1}",
            o.op, o.bytes, o.fragments, o.ns_per_op
        );
    }
    let datagrams: usize = s.rows.iter().map(|r| r.count * s.rounds).sum();
    println!();
    println!(
        "checked by the receiving applications once each run's clock had stopped: {} runs, {datagrams} timed datagrams (and the warm-ups), every fragment: no mismatch",
        s.rows.len() * s.rounds
    );
    Ok(())
}

/// Arguments of the hidden `zcio fbuf-stack-domain`.
#[derive(clap::Args)]
pub struct DomainArgs {
    /// `protocol` (UDP and IP) or `receiver` (reassembly and the receiving application).
    #[arg(long)]
    pub role: String,
    /// Unix socket path to connect to (the domain before this one).
    #[arg(long)]
    pub connect: std::path::PathBuf,
    /// Contender name.
    #[arg(long)]
    pub contender: String,
    /// Touch name.
    #[arg(long)]
    pub touch: String,
    /// Datagram length.
    #[arg(long)]
    pub bytes: usize,
    /// Timed datagrams.
    #[arg(long)]
    pub count: usize,
    /// Untimed datagrams before them.
    #[arg(long)]
    pub warm: usize,
    /// IP's MTU.
    #[arg(long)]
    pub mtu: usize,
}

/// `zcio fbuf-stack-domain`: the protocol or the receiving domain of a run.
pub fn domain(a: &DomainArgs) -> Res<()> {
    let role = super::domains::Role::parse(&a.role).ok_or("unknown role")?;
    let c = Contender::parse(&a.contender).ok_or("unknown contender")?;
    let touch = Touch::parse(&a.touch).ok_or("unknown touch")?;
    let mut s = Stream::new(a.bytes, a.count, a.mtu, touch);
    s.warm = a.warm;
    super::domains::domain(role, c, &s, &a.connect)
}
