//! `zcio bench memnet`: the semantics side by side over the memory network, in one run.
//!
//! For each message length, each round runs every contender (a `zcio transfer` to a second
//! process, `--count` messages) in an order that rotates from round to round, so that drift in
//! the machine's state hits all of them alike. Per contender and length it reports the median
//! over rounds of the per-round median latency and CPU time, their spread (lowest and highest
//! round), the bytes copied and the path taken, and the ratios zcio's Genie targets are stated in:
//! emulated copy against copy (throughput, CPU time) and against emulated share (latency).

use crate::error::Context;
use crate::transfer::{Res, TransferArgs, check_bytes, run_peer};
use serde::Serialize;
use zcio_genie::{InputBuffering, Semantics};

/// Arguments of `zcio bench memnet`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// Message lengths in bytes, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [1usize, 100, 1000, 4096, 65536, 1048576])]
    pub bytes: Vec<usize>,
    /// Contenders, comma-separated.
    #[arg(long, value_delimiter = ',', default_values_t = [Semantics::Copy, Semantics::EmulatedCopy, Semantics::EmulatedShare])]
    pub semantics: Vec<Semantics>,
    /// Rounds (each runs every contender once).
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Messages per contender and round.
    #[arg(long, default_value_t = 200)]
    pub count: usize,
    /// Input buffering of the receiver.
    #[arg(long, default_value = "early-demux")]
    pub input: InputBuffering,
    /// Take the VM paths at every length (thresholds of one page) instead of the calibrated ones.
    #[arg(long)]
    pub force_zero_copy: bool,
    /// Application buffers at both ends in transparent huge pages (the 2 MiB paths).
    #[arg(long)]
    pub huge: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One contender at one length.
#[derive(Debug, Serialize)]
pub struct Row {
    /// Message length.
    pub bytes: usize,
    /// Semantics.
    pub semantics: Semantics,
    /// Median over rounds of the per-round median latency (ns).
    pub latency_ns: f64,
    /// Lowest and highest per-round median latency (ns).
    pub latency_spread_ns: (u64, u64),
    /// Median over rounds of CPU time per message, both processes (ns), measured in runs of
    /// their own whose waits sleep instead of spinning, so that it counts work only (paper 000,
    /// Figure 4's I/O processing time); each run's first message, which makes the pools and
    /// staging the others reuse, is left out.
    pub cpu_ns: f64,
    /// Lowest and highest per-round CPU time (ns).
    pub cpu_spread_ns: (u64, u64),
    /// Throughput of one message at a time: bytes / latency (GB/s).
    pub throughput_gbps: f64,
    /// Bytes copied by the CPU per message (user space).
    pub cpu_copied_bytes: u64,
    /// Bytes copied by the kernel per message, where known.
    pub kernel_copied_bytes: Option<u64>,
    /// The path the library took.
    pub path: String,
    /// The page granule of the VM work (`4k`, `2m`, `mixed`), where page work was done.
    pub granule: Option<String>,
    /// Every round's data was verified byte for byte.
    pub verified: bool,
}

/// The ratios at one length.
#[derive(Debug, Serialize)]
pub struct Ratios {
    /// Message length.
    pub bytes: usize,
    /// Throughput of emulated copy / throughput of copy.
    pub emulated_copy_vs_copy_throughput: Option<f64>,
    /// CPU time of emulated copy / CPU time of copy.
    pub emulated_copy_vs_copy_cpu: Option<f64>,
    /// Latency of emulated copy / latency of copy.
    pub emulated_copy_vs_copy_latency: Option<f64>,
    /// Latency of emulated copy / latency of emulated share.
    pub emulated_copy_vs_emulated_share_latency: Option<f64>,
    /// Slowest over fastest latency of the non-copy semantics measured (the paper's
    /// clustering: 1 when they cluster perfectly), with at least two of them.
    pub non_copy_spread: Option<f64>,
    /// A single-thread memcpy of the message between two buffers of this run's kind, GB/s
    /// (median of 9, measured in this process between the rounds).
    pub memcpy_gbps: f64,
    /// Emulated share's throughput / memcpy's: what the wire (the one copy) achieves.
    pub emulated_share_vs_memcpy_bandwidth: Option<f64>,
}

/// Median time of a memcpy of `bytes` between two buffers (huge pages or not), in ns.
fn memcpy_ns(bytes: usize, huge: bool) -> Res<f64> {
    let opts = zcio_vm::MapOptions {
        huge,
        populate: true,
        ..Default::default()
    };
    let mut src = zcio_vm::Mapping::anonymous(bytes, opts)?;
    let mut dst = zcio_vm::Mapping::anonymous(bytes, opts)?;
    src.as_mut_slice().fill(5);
    dst.as_mut_slice().fill(1);
    let mut t: Vec<u64> = (0..9)
        .map(|_| {
            let t0 = std::time::Instant::now();
            dst.as_mut_slice()
                .copy_from_slice(std::hint::black_box(src.as_slice()));
            t0.elapsed().as_nanos() as u64
        })
        .collect();
    Ok(median(&mut t))
}

fn median(v: &mut [u64]) -> f64 {
    v.sort_unstable();
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2] as f64
    } else {
        (v[n / 2 - 1] + v[n / 2]) as f64 / 2.0
    }
}

impl BenchArgs {
    /// Refuse what no round could run, before any process starts: every length is one a
    /// transfer carries (`--bytes`, each with this bench's settings), and there is something
    /// to run.
    pub fn validate(&self) -> Res<()> {
        if self.rounds == 0 {
            return Err("invalid argument `--rounds`: 0: at least one round".into());
        }
        if self.count == 0 {
            return Err("invalid argument `--count`: 0: at least one message".into());
        }
        if self.semantics.is_empty() {
            return Err("invalid argument `--semantics`: none: at least one contender".into());
        }
        for &bytes in &self.bytes {
            check_bytes("--bytes", bytes)?;
            for &sem in &self.semantics {
                self.transfer(sem, bytes, 0).validate()?;
            }
        }
        Ok(())
    }

    /// The transfer of one contender at one length in round `round`.
    fn transfer(&self, sem: Semantics, bytes: usize, round: usize) -> TransferArgs {
        TransferArgs {
            input: self.input,
            seed: 1 + round as u64,
            force_zero_copy: self.force_zero_copy,
            huge: self.huge,
            ..TransferArgs::memnet(sem, bytes, self.count)
        }
    }

    /// The CPU-time run beside it: waits sleep (`--no-spin`), a quarter of the messages (at
    /// least two, so that one follows the first).
    fn cpu_transfer(&self, sem: Semantics, bytes: usize, round: usize) -> TransferArgs {
        TransferArgs {
            no_spin: true,
            count: (self.count / 4).max(2),
            ..self.transfer(sem, bytes, round)
        }
    }
}

/// Run the benchmark and print it.
pub fn run(b: BenchArgs) -> Res<()> {
    b.validate()?;
    let total = (b.bytes.len() * b.rounds * b.semantics.len()) as u64;
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg:>32} [{bar:40}] {pos}/{len} {eta}")
            .expect("template"),
    );
    let mut rows = Vec::new();
    let mut ratios = Vec::new();
    for &bytes in &b.bytes {
        let (mut r, q) = measure_length(&b, bytes, &bar)?;
        rows.append(&mut r);
        ratios.push(q);
    }
    bar.finish_and_clear();
    let out = serde_json::json!({
        "bench": "memnet",
        "rounds": b.rounds,
        "count": b.count,
        "input": b.input,
        "force_zero_copy": b.force_zero_copy,
        "huge": b.huge,
        "vm": zcio_vm::VmRuntime::get().capabilities(),
        "rows": rows,
        "ratios": ratios,
    });
    if b.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "{:>8} {:<20} {:>12} {:>22} {:>10} {:>9} {:>10}  path",
        "bytes", "semantics", "latency µs", "spread µs", "CPU µs", "GB/s", "copied B"
    );
    for r in &rows {
        println!(
            "{:>8} {:<20} {:>12.1} {:>10.1} – {:>9.1} {:>10.1} {:>9.3} {:>10}  {}",
            r.bytes,
            r.semantics.name(),
            r.latency_ns / 1e3,
            r.latency_spread_ns.0 as f64 / 1e3,
            r.latency_spread_ns.1 as f64 / 1e3,
            r.cpu_ns / 1e3,
            r.throughput_gbps,
            r.cpu_copied_bytes,
            r.path
        );
    }
    println!();
    for q in &ratios {
        let f = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.2}"));
        println!(
            "{:>8} B: emulated copy / copy: throughput {}x, CPU {}x, latency {}x; emulated copy / emulated share latency {}x",
            q.bytes,
            f(q.emulated_copy_vs_copy_throughput),
            f(q.emulated_copy_vs_copy_cpu),
            f(q.emulated_copy_vs_copy_latency),
            f(q.emulated_copy_vs_emulated_share_latency)
        );
    }
    Ok(())
}

/// One length: every round runs every contender in a rotating order; then a row per contender
/// (medians over rounds and their spread) and the length's ratios.
fn measure_length(
    b: &BenchArgs,
    bytes: usize,
    bar: &indicatif::ProgressBar,
) -> Res<(Vec<Row>, Ratios)> {
    let n = b.semantics.len();
    // Per contender: per-round latency and CPU medians, plus the last round's result.
    let mut lat: Vec<Vec<u64>> = vec![Vec::new(); n];
    let mut cpu: Vec<Vec<u64>> = vec![Vec::new(); n];
    let mut last: Vec<Option<serde_json::Value>> = vec![None; n];
    let mut verified = vec![true; n];
    for round in 0..b.rounds {
        for k in 0..n {
            let i = (k + round) % n;
            let sem = b.semantics[i];
            bar.set_message(format!("{sem} {bytes} B"));
            let v = run_peer(&b.transfer(sem, bytes, round))
                .with_context(|| format!("{sem}, {bytes} bytes, round {}", round + 1))?;
            let c = run_peer(&b.cpu_transfer(sem, bytes, round))
                .with_context(|| format!("{sem}, {bytes} bytes, round {}, CPU", round + 1))?;
            lat[i].push(v["latency_ns"].as_u64().unwrap_or(0));
            cpu[i].push(c["cpu_ns"].as_u64().unwrap_or(0));
            verified[i] &= v["verified"].as_bool() == Some(true);
            verified[i] &= c["verified"].as_bool() == Some(true);
            last[i] = Some(v);
            bar.inc(1);
        }
    }
    let mut rows = Vec::new();
    let mut by_sem = std::collections::HashMap::new();
    for (i, &sem) in b.semantics.iter().enumerate() {
        let v = last[i].take().expect("every contender ran");
        let l = median(&mut lat[i]);
        let c = median(&mut cpu[i]);
        rows.push(Row {
            bytes,
            semantics: sem,
            latency_ns: l,
            latency_spread_ns: (lat[i][0], *lat[i].last().expect("rounds > 0")),
            cpu_ns: c,
            cpu_spread_ns: (cpu[i][0], *cpu[i].last().expect("rounds > 0")),
            throughput_gbps: bytes as f64 / l,
            cpu_copied_bytes: v["cpu_copied_bytes"].as_u64().unwrap_or(0),
            kernel_copied_bytes: v["kernel_copied_bytes"].as_u64(),
            path: v["path"].as_str().unwrap_or("").to_string(),
            granule: v["granule"].as_str().map(str::to_string),
            verified: verified[i],
        });
        by_sem.insert(sem, (l, c));
    }
    let get = |s| by_sem.get(&s).copied();
    let (ec, cp, es) = (
        get(Semantics::EmulatedCopy),
        get(Semantics::Copy),
        get(Semantics::EmulatedShare),
    );
    let non_copy: Vec<f64> = by_sem
        .iter()
        .filter(|(s, _)| **s != Semantics::Copy)
        .map(|(_, v)| v.0)
        .collect();
    let non_copy_spread = (non_copy.len() >= 2).then(|| {
        non_copy.iter().copied().fold(0.0, f64::max)
            / non_copy.iter().copied().fold(f64::INFINITY, f64::min)
    });
    let mc = memcpy_ns(bytes, b.huge).context("the memcpy beside the rounds")?;
    let ratios = Ratios {
        non_copy_spread,
        memcpy_gbps: bytes as f64 / mc,
        emulated_share_vs_memcpy_bandwidth: es.map(|s| mc / s.0),
        bytes,
        emulated_copy_vs_copy_throughput: ec.zip(cp).map(|(e, c)| c.0 / e.0),
        emulated_copy_vs_copy_cpu: ec.zip(cp).map(|(e, c)| e.1 / c.1),
        emulated_copy_vs_copy_latency: ec.zip(cp).map(|(e, c)| e.0 / c.0),
        emulated_copy_vs_emulated_share_latency: ec.zip(es).map(|(e, s)| e.0 / s.0),
    };
    Ok((rows, ratios))
}
