//! `zcio bench checksum`: paper 003's checksum optimization on this machine. Every kernel of
//! [`zcio_checksum`] (the RFC's loop, the paper's wide-word unrolled loop, the SIMD kernels this
//! CPU has), the fused copy-and-checksum, the fastest Internet-checksum crates on crates.io
//! (`internet-checksum`, `ip4sum`) and a plain read of the same bytes (the machine's
//! single-core memory read bandwidth: the limit), side by side in one run, per buffer size from
//! a packet to four times the last-level cache.

use crate::report::fit;
use crate::transfer::Res;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};
use zcio_checksum::{Elision, Kernel, PathKind, copy_and_checksum};

/// Arguments of `zcio bench checksum`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ChecksumArgs {
    /// Buffer sizes in bytes, comma-separated (default: 64, 1500, 4 KiB, 64 KiB, 1 MiB, and
    /// four times the last-level cache).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Vec<usize>,
    /// Rounds: every contender once per round, in rotating order (default 7).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Time per contender per round at least (ms; default 20).
    #[arg(long)]
    pub millis: Option<u64>,
    /// Datagram sizes of the end-to-end experiment, bytes, comma-separated (default 1472, 8192,
    /// 65536); `--datagram-sizes 0` skips it.
    #[arg(long, value_delimiter = ',')]
    pub datagram_sizes: Vec<usize>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// One contender at one size.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Row {
    /// Contender: a kernel (`reference`, `unrolled`, `avx2`, `avx512`), `fused_copy` (copy and
    /// checksum in one pass; bytes checksummed per second), a crates.io peer
    /// (`internet-checksum`, `ip4sum`), or `read` (the bytes read and discarded: the limit).
    pub contender: String,
    /// `kernel`, `fused`, `peer` or `limit`.
    pub kind: String,
    /// Buffer size (bytes).
    pub size: usize,
    /// Throughput, median over rounds (Gbit/s).
    pub gbps: f64,
    /// Lowest and highest round (Gbit/s).
    pub gbps_spread: [f64; 2],
    /// The same median in GB/s (10⁹ bytes per second).
    pub gbytes_per_s: f64,
}

/// What the rows say.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Verdict {
    /// The largest size measured (bytes): beyond the last-level cache by default.
    pub large_size: usize,
    /// The last-level cache (bytes), if known.
    pub llc_bytes: Option<usize>,
    /// The fastest kernel at the large size.
    pub best_kernel: String,
    /// Its throughput there (Gbit/s).
    pub best_gbps: f64,
    /// The memory read bandwidth there (Gbit/s).
    pub read_gbps: f64,
    /// Best kernel / read bandwidth (zcio's target: at least 0.9).
    pub of_read_bandwidth: f64,
    /// The fastest crates.io peer at the large size.
    pub fastest_peer: String,
    /// Its throughput (Gbit/s).
    pub peer_gbps: f64,
    /// Best kernel / fastest peer there (zcio's target: at least 2).
    pub over_peer: f64,
    /// The largest size measured that fits a quarter of the last-level cache (bytes), where
    /// the kernels are not held back by memory.
    pub cached_size: Option<usize>,
    /// Best kernel / fastest peer at that size.
    pub over_peer_cached: Option<f64>,
    /// The paper's optimization against the RFC's loop at the large size (the paper: more
    /// than twice as fast).
    pub unrolled_over_reference: f64,
}

/// Everything `zcio bench checksum` measured.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ChecksumSection {
    /// Kernels this CPU runs.
    pub kernels: Vec<String>,
    /// Rounds.
    pub rounds: usize,
    /// Time per contender per round at least (ms).
    pub millis: u64,
    /// Per contender and size.
    pub rows: Vec<Row>,
    /// The large-buffer verdict, if a size beyond the cache was measured.
    pub verdict: Option<Verdict>,
    /// The end-to-end datagram experiment (the paper's Figure 7 analogue), per variant and size.
    pub datagram: Vec<DatagramRow>,
}

/// One variant of the datagram experiment at one size.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DatagramRow {
    /// `naive` (RFC 1071's loop at both ends), `optimized` (the best kernel at both ends) or
    /// `elided` (the paper's elision policy decides, from where the socket's packets travel).
    pub variant: String,
    /// Where the elision policy placed the socket's path (`same host`, `one CRC link`,
    /// `routed`), for the `elided` variant.
    #[serde(default)]
    pub path: Option<String>,
    /// Whether the datagrams carried a software checksum.
    #[serde(default)]
    pub checksummed: bool,
    /// Payload bytes per datagram.
    pub size: usize,
    /// Payload delivered and checked, median over rounds (Gbit/s).
    pub gbps: f64,
    /// Lowest and highest round (Gbit/s).
    pub gbps_spread: [f64; 2],
    /// Datagrams delivered over all rounds.
    pub datagrams: u64,
    /// Median throughput over the naive variant's at this size.
    pub over_naive: f64,
}

/// A way of checksumming a buffer (the second is a destination, for the fused copy).
type Run = Box<dyn Fn(&[u8], &mut [u8]) -> u64>;

/// Name, kind, and the run.
type Contender = (&'static str, &'static str, Run);

fn contenders() -> Vec<Contender> {
    let mut v: Vec<Contender> = Kernel::available_all()
        .into_iter()
        .map(|k| {
            let f: Run = Box::new(move |d, _| k.sum(d) as u64);
            (k.name(), "kernel", f)
        })
        .collect();
    v.push((
        "fused_copy",
        "fused",
        Box::new(|d, o| copy_and_checksum(d, o) as u64),
    ));
    v.push((
        "internet-checksum",
        "peer",
        Box::new(|d, _| u16::from_be_bytes(internet_checksum::checksum(d)) as u64),
    ));
    v.push((
        "internet-checksum/native",
        "peer",
        Box::new(|d, _| u16::from_be_bytes(internet_checksum_native(d)) as u64),
    ));
    v.push((
        "ip4sum",
        "peer",
        Box::new(|d, _| ip4sum::checksum(d) as u64),
    ));
    v.push(("read", "limit", Box::new(|d, _| read_all(d))));
    v
}

/// `internet-checksum` built for the instruction sets zcio's kernels use (its code is all
/// `#[inline]`, so each version of this function compiles it for that version's features),
/// so that the ratio to the peers compares algorithms, not compiler flags. (`ip4sum`'s loop
/// is not inlinable: it runs as its crate was built, for baseline x86-64.)
#[multiversion::multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx2", "x86_64+avx2"))]
fn internet_checksum_native(d: &[u8]) -> [u8; 2] {
    internet_checksum::checksum(d)
}

/// Read every byte (64-bit words into four accumulators, so nothing is skipped): what reading
/// costs. (Eight accumulators over 64-byte blocks vectorize worse here: a tenth of the
/// bandwidth beyond the caches.)
#[multiversion::multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx2", "x86_64+avx2"))]
fn read_all(d: &[u8]) -> u64 {
    let mut acc = [0u64; 4];
    let mut blocks = d.chunks_exact(32);
    for b in &mut blocks {
        for (i, a) in acc.iter_mut().enumerate() {
            *a = a.wrapping_add(u64::from_ne_bytes(
                b[8 * i..8 * i + 8].try_into().expect("8 bytes"),
            ));
        }
    }
    acc.iter()
        .fold(blocks.remainder().len() as u64, |x, a| x ^ a)
}

/// The default sizes: packets, pages, caches, and beyond the last-level cache.
fn default_sizes(llc: Option<usize>) -> Vec<usize> {
    let large = (4 * llc.unwrap_or(32 << 20)).max(64 << 20);
    vec![64, 1500, 4096, 64 << 10, 1 << 20, large]
}

/// Bytes from a seed.
fn data(len: usize) -> Vec<u8> {
    let mut x = 0x5EED_0003u64;
    (0..len)
        .map(|_| crate::transfer::xorshift(&mut x) as u8)
        .collect()
}

/// Run the contenders over the sizes; `progress` is told each size.
pub fn measure(a: &ChecksumArgs, progress: &mut dyn FnMut(String)) -> Res<ChecksumSection> {
    let llc = crate::report::machine::this_cache_bytes(3);
    let sizes = if a.sizes.is_empty() {
        default_sizes(llc)
    } else {
        a.sizes.clone()
    };
    if let Some(s) = sizes.iter().find(|s| **s == 0 || **s > 4 << 30) {
        return Err(format!("invalid argument `--sizes {s}`: from 1 byte to 4 GiB").into());
    }
    let rounds = a.rounds.unwrap_or(7).max(1);
    let millis = a.millis.unwrap_or(20).max(1);
    let cs = contenders();
    let mut rows = Vec::new();
    for &size in &sizes {
        let src = data(size);
        let mut dst = vec![0u8; size];
        // Every contender agrees with the reference before it is timed.
        let want = Kernel::Reference.sum(&src);
        for (name, kind, f) in &cs {
            let got = f(&src, &mut dst) as u16;
            let ok = match *kind {
                "kernel" => got == want,
                "fused" | "peer" => got == !want || (got == 0 && want == 0),
                _ => true,
            };
            if !ok {
                return Err(format!(
                    "{name} computed {got:#06x} over {size} bytes; the RFC 1071 loop says {:#06x}",
                    if *kind == "kernel" { want } else { !want }
                )
                .into());
            }
        }
        let mut samples: Vec<Vec<f64>> = vec![Vec::new(); cs.len()];
        for r in 0..rounds {
            for k in 0..cs.len() {
                let i = (k + r) % cs.len();
                let f = &cs[i].2;
                let budget = Duration::from_millis(millis);
                let t = Instant::now();
                let mut calls = 0u64;
                while calls == 0 || t.elapsed() < budget {
                    black_box(f(black_box(&src), &mut dst));
                    calls += 1;
                }
                let ns = t.elapsed().as_nanos() as f64;
                samples[i].push(8.0 * (calls as f64 * size as f64) / ns);
            }
        }
        for (i, (name, kind, _)) in cs.iter().enumerate() {
            let v = &samples[i];
            let gbps = fit::median(v).unwrap_or(f64::NAN);
            rows.push(Row {
                contender: name.to_string(),
                kind: kind.to_string(),
                size,
                gbps,
                gbps_spread: fit::spread(v),
                gbytes_per_s: gbps / 8.0,
            });
        }
        progress(format!("checksum {size} bytes"));
    }
    let verdict = verdict(&rows, llc);
    let sizes = if a.datagram_sizes.is_empty() {
        vec![1472, 8192, 65536]
    } else {
        a.datagram_sizes
            .iter()
            .copied()
            .filter(|s| *s > 0)
            .collect()
    };
    if let Some(s) = sizes.iter().find(|s| **s < 8 || **s > 200_000) {
        return Err(format!(
            "invalid argument `--datagram-sizes {s}`: from 8 bytes (the header) to 200 000"
        )
        .into());
    }
    let mut datagram = Vec::new();
    for size in sizes {
        datagram.extend(datagrams(size, rounds.min(5), millis * 5)?);
        progress(format!("datagrams of {size} bytes"));
    }
    Ok(ChecksumSection {
        kernels: Kernel::available_all()
            .iter()
            .map(|k| k.name().to_string())
            .collect(),
        rounds,
        millis,
        rows,
        verdict,
        datagram,
    })
}

/// The variants of the datagram experiment.
const VARIANTS: [&str; 3] = ["naive", "optimized", "elided"];

/// Paper 003's Figure 7 on this host: a sender puts a 16-bit checksum of each datagram's
/// payload (or none: elided) in an 8-byte header and sends it over a datagram socket; a
/// receiver checks every datagram as it arrives. A Unix datagram socket stands in for the LAN
/// (loopback UDP would drop datagrams when the receiver falls behind; this one blocks the
/// sender instead, so every datagram sent is checked). Returns a row per variant.
fn datagrams(size: usize, rounds: usize, millis: u64) -> Res<Vec<DatagramRow>> {
    use std::os::unix::net::UnixDatagram;
    let payload = data(size - 8);
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
    let mut counts = vec![0u64; VARIANTS.len()];
    let mut paths: Vec<Option<String>> = vec![None; VARIANTS.len()];
    let mut checksummed = vec![true; VARIANTS.len()];
    for r in 0..rounds {
        for k in 0..VARIANTS.len() {
            let v = (k + r) % VARIANTS.len();
            let (tx, rx) = UnixDatagram::pair()?;
            // The elided variant asks the paper's policy, for the path this socket's packets
            // take; the others always checksum.
            let path = PathKind::of_socket(tx.as_fd())?;
            let kernel = match VARIANTS[v] {
                "naive" => Some(Kernel::Reference),
                "optimized" => Some(Kernel::best()),
                _ => Elision::SameHostOrCrcLink
                    .needs_checksum(path)
                    .then(Kernel::best),
            };
            paths[v] = (VARIANTS[v] == "elided").then(|| path_name(path).to_string());
            checksummed[v] = kernel.is_some();
            let budget = Duration::from_millis(millis);
            let receiver = std::thread::spawn(move || -> Result<(u64, f64), String> {
                let mut buf = vec![0u8; size + 1];
                let mut n = 0u64;
                let mut first: Option<Instant> = None;
                loop {
                    let got = rx.recv(&mut buf).map_err(|e| e.to_string())?;
                    if got == 0 {
                        break;
                    }
                    first.get_or_insert_with(Instant::now);
                    if got != size {
                        return Err(format!("a datagram of {got} bytes, {size} sent"));
                    }
                    let sent = u16::from_be_bytes([buf[4], buf[5]]);
                    if let Some(k) = kernel {
                        let c = !k.sum(&buf[8..got]);
                        if c != sent {
                            return Err(format!(
                                "datagram {n}: checksum {c:#06x}, the header says {sent:#06x}"
                            ));
                        }
                    }
                    n += 1;
                }
                let ns = first.map_or(1.0, |t| t.elapsed().as_nanos() as f64);
                Ok((n, ns))
            });
            let mut dgram = vec![0u8; size];
            dgram[8..].copy_from_slice(&payload);
            let t = Instant::now();
            let mut seq = 0u32;
            while t.elapsed() < budget {
                dgram[..4].copy_from_slice(&seq.to_be_bytes());
                let c = kernel.map_or(0, |k| !k.sum(&dgram[8..]));
                dgram[4..6].copy_from_slice(&c.to_be_bytes());
                tx.send(&dgram)?;
                seq = seq.wrapping_add(1);
            }
            tx.send(&[])?;
            let (n, ns) = receiver
                .join()
                .map_err(|_| "the datagram receiver panicked".to_string())??;
            counts[v] += n;
            samples[v].push(8.0 * (n as f64 * (size - 8) as f64) / ns);
        }
    }
    let medians: Vec<f64> = samples
        .iter()
        .map(|v| fit::median(v).unwrap_or(f64::NAN))
        .collect();
    Ok(VARIANTS
        .iter()
        .enumerate()
        .map(|(v, name)| DatagramRow {
            variant: name.to_string(),
            path: paths[v].clone(),
            checksummed: checksummed[v],
            size,
            gbps: medians[v],
            gbps_spread: fit::spread(&samples[v]),
            datagrams: counts[v],
            over_naive: medians[v] / medians[0],
        })
        .collect())
}

/// A path kind as the report names it.
fn path_name(p: PathKind) -> &'static str {
    match p {
        PathKind::SameHost => "same host",
        PathKind::SingleCrcLink => "one CRC link",
        PathKind::Routed => "routed",
    }
}

/// The verdict at the largest size, if it passes the last-level cache.
pub fn verdict(rows: &[Row], llc: Option<usize>) -> Option<Verdict> {
    let large = rows.iter().map(|r| r.size).max()?;
    if llc.is_some_and(|l| large <= l) {
        return None;
    }
    let at: Vec<&Row> = rows.iter().filter(|r| r.size == large).collect();
    let best_of = |kind: &str| {
        at.iter()
            .filter(|r| r.kind == kind)
            .max_by(|a, b| a.gbps.total_cmp(&b.gbps))
            .copied()
    };
    let best = best_of("kernel")?;
    let peer = best_of("peer")?;
    let read = best_of("limit")?;
    let named = |n: &str| at.iter().find(|r| r.contender == n).map(|r| r.gbps);
    let cached_size = rows
        .iter()
        .map(|r| r.size)
        .filter(|s| *s <= llc.unwrap_or(32 << 20) / 4)
        .max();
    let over_peer_cached = cached_size.and_then(|size| {
        let best = |kind: &str| {
            rows.iter()
                .filter(|r| r.size == size && r.kind == kind)
                .map(|r| r.gbps)
                .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))))
        };
        Some(best("kernel")? / best("peer")?)
    });
    Some(Verdict {
        large_size: large,
        llc_bytes: llc,
        best_kernel: best.contender.clone(),
        best_gbps: best.gbps,
        read_gbps: read.gbps,
        of_read_bandwidth: best.gbps / read.gbps,
        fastest_peer: peer.contender.clone(),
        peer_gbps: peer.gbps,
        over_peer: best.gbps / peer.gbps,
        cached_size,
        over_peer_cached,
        unrolled_over_reference: named("unrolled").unwrap_or(f64::NAN)
            / named("reference").unwrap_or(f64::NAN),
    })
}

/// Progress units of a run: one per buffer size and one per datagram size.
pub fn units(a: &ChecksumArgs) -> usize {
    let sizes = if a.sizes.is_empty() { 6 } else { a.sizes.len() };
    let datagrams = if a.datagram_sizes.is_empty() {
        3
    } else {
        a.datagram_sizes.iter().filter(|s| **s > 0).count()
    };
    sizes + datagrams
}

/// Run the benchmark and print it.
pub fn run(a: ChecksumArgs) -> Res<()> {
    let Some(s) = crate::run_bench("checksum", units(&a) as u64, a.json, |p| measure(&a, p))?
    else {
        return Ok(());
    };
    let names: Vec<String> = {
        let mut n: Vec<String> = Vec::new();
        for r in &s.rows {
            if !n.contains(&r.contender) {
                n.push(r.contender.clone());
            }
        }
        n
    };
    println!(
        "Internet checksum throughput, Gbit/s (median of {} rounds)",
        s.rounds
    );
    print!("{:>12}", "bytes");
    for n in &names {
        print!(" {n:>17}");
    }
    println!();
    let mut sizes: Vec<usize> = s.rows.iter().map(|r| r.size).collect();
    sizes.dedup();
    for size in sizes {
        print!("{size:>12}");
        for n in &names {
            let g = s
                .rows
                .iter()
                .find(|r| r.size == size && &r.contender == n)
                .map_or(f64::NAN, |r| r.gbps);
            print!(" {g:>17.1}");
        }
        println!();
    }
    if !s.datagram.is_empty() {
        println!("datagrams checked end to end, Gbit/s of payload (over naive)");
        for r in &s.datagram {
            println!(
                "{:>8} bytes {:>10}: {:>7.2} Gbit/s ({:+.0} %)",
                r.size,
                r.variant,
                r.gbps,
                100.0 * (r.over_naive - 1.0)
            );
        }
    }
    if let Some(v) = &s.verdict {
        if let (Some(size), Some(x)) = (v.cached_size, v.over_peer_cached) {
            println!(
                "at {size} bytes (in cache): the best kernel is {x:.2}× the fastest crates.io peer (target 2×)"
            );
        }
        println!(
            "at {} bytes: {} reaches {:.1} Gbit/s, {:.0} % of the memory read bandwidth ({:.1} Gbit/s; target 90 %), {:.2}× the fastest crates.io peer ({}, {:.1} Gbit/s; target 2×); the paper's unrolled loop is {:.2}× the RFC's (the paper: more than 2×)",
            v.large_size,
            v.best_kernel,
            v.best_gbps,
            100.0 * v.of_read_bandwidth,
            v.read_gbps,
            v.over_peer,
            v.fastest_peer,
            v.peer_gbps,
            v.unrolled_over_reference
        );
    }
    Ok(())
}
