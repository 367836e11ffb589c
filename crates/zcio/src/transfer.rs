//! `zcio transfer`: one process outputs, a second process (spawned here, `zcio peer`) inputs,
//! each with the chosen semantics; the receiver checks every byte against the data as of the
//! sender's call. The file module writes a file and reads it back in this process.

use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;
use zcio_genie::breakdown::OpSamples;
use zcio_genie::memnet::{LinkParts, MemnetEndpoint};
use zcio_genie::semantics::Allocation;
use zcio_genie::stream::{ModuleKind, StreamEnd};
use zcio_genie::{Accounting, InputBuffering, Region, Semantics};
use zcio_vm::{MapOptions, Mapping, VmRuntime, page_size};

/// The result of the command layer: any error, shown to the user as its message.
pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Arguments of `zcio transfer`.
#[derive(clap::Args, Debug, Clone, Serialize, Deserialize)]
pub struct TransferArgs {
    /// Data-passing semantics, used for the output and the input.
    #[arg(long)]
    pub semantics: Semantics,
    /// I/O module.
    #[arg(long, default_value = "memnet")]
    pub module: ModuleKind,
    /// Bytes per message.
    #[arg(long)]
    pub bytes: usize,
    /// Offset of the buffers within a page (application-allocated semantics).
    #[arg(long, default_value_t = 0)]
    pub offset: usize,
    /// Input buffering of the receiver.
    #[arg(long, default_value = "early-demux")]
    pub input: InputBuffering,
    /// Overwrite the sender's buffer from another thread right after each call returns and until
    /// the transfer completes.
    #[arg(long)]
    pub overwrite_during_output: bool,
    /// Messages to send.
    #[arg(long, default_value_t = 1)]
    pub count: usize,
    /// Print one JSON object (otherwise a short human summary).
    #[arg(long)]
    pub json: bool,
    /// Directory for the file module's file.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Seed of the data pattern.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Take the zero-copy paths even where the calibration profile says copying is cheaper
    /// (thresholds of one page), to see what the VM mechanisms cost here.
    #[arg(long)]
    pub force_zero_copy: bool,
    /// Fail (with the reason) instead of taking a copying path where the semantics' mechanism
    /// cannot be used on this module or buffer.
    #[arg(long)]
    pub no_fallback: bool,
    /// Fault injection: the receiving process exits after this many messages.
    #[arg(long, hide = true)]
    pub peer_exit_after: Option<usize>,
    /// Time every primitive data-passing operation on both sides (the breakdown model's
    /// instrumentation) and report them under `ops`.
    #[arg(long)]
    #[serde(default)]
    pub breakdown: bool,
    /// Sleep at once when waiting instead of spinning first, so that CPU time counts only work
    /// (the I/O processing time of paper 000, Figure 4).
    #[arg(long)]
    #[serde(default)]
    pub no_spin: bool,
    /// CPU work (ns of thread CPU time) the receiving application does per message, for the
    /// system-throughput experiment.
    #[arg(long, default_value_t = 0)]
    #[serde(default)]
    pub app_work_ns: u64,
    /// Application buffers at both ends in transparent huge pages (2 MiB-aligned, plus
    /// `--offset`), so that the semantics take their 2 MiB paths.
    #[arg(long)]
    #[serde(default)]
    pub huge: bool,
}

impl TransferArgs {
    /// A memory-network transfer of `count` messages of `bytes` under `semantics`, with the
    /// defaults of the command line for the rest.
    pub fn memnet(semantics: Semantics, bytes: usize, count: usize) -> TransferArgs {
        TransferArgs {
            semantics,
            module: ModuleKind::Memnet,
            bytes,
            offset: 0,
            input: InputBuffering::EarlyDemux,
            overwrite_during_output: false,
            count,
            json: true,
            dir: None,
            seed: 1,
            force_zero_copy: false,
            no_fallback: false,
            peer_exit_after: None,
            breakdown: false,
            no_spin: false,
            app_work_ns: 0,
            huge: false,
        }
    }
}

impl TransferArgs {
    /// The `zcio transfer` command line that runs these arguments (with `--json`).
    pub fn command_line(&self) -> Vec<String> {
        let mut v = vec![
            "transfer".to_string(),
            "--semantics".into(),
            self.semantics.to_string(),
            "--module".into(),
            self.module.to_string(),
            "--bytes".into(),
            self.bytes.to_string(),
            "--offset".into(),
            self.offset.to_string(),
            "--input".into(),
            self.input.to_string(),
            "--count".into(),
            self.count.to_string(),
            "--seed".into(),
            self.seed.to_string(),
            "--app-work-ns".into(),
            self.app_work_ns.to_string(),
            "--json".into(),
        ];
        for (on, flag) in [
            (self.overwrite_during_output, "--overwrite-during-output"),
            (self.force_zero_copy, "--force-zero-copy"),
            (self.no_fallback, "--no-fallback"),
            (self.breakdown, "--breakdown"),
            (self.no_spin, "--no-spin"),
            (self.huge, "--huge"),
        ] {
            if on {
                v.push(flag.into());
            }
        }
        if let Some(d) = &self.dir {
            v.push("--dir".into());
            v.push(d.display().to_string());
        }
        v
    }
}

/// Burn `ns` of this thread's CPU time (the application's work on a message).
fn app_work(ns: u64) {
    if ns == 0 {
        return;
    }
    let t0 = thread_cpu_now();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    while thread_cpu_now() - t0 < ns {
        for _ in 0..256 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
        }
        std::hint::black_box(x);
    }
}

fn thread_cpu_now() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Per operation and phase: calls per message and the spread of its time per message.
fn ops_summary(samples: &[OpSamples], count: usize) -> Vec<serde_json::Value> {
    samples
        .iter()
        .map(|s| {
            let (p50, p10, p90) = percentiles(s.per_message_ns.clone());
            serde_json::json!({
                "op": s.op,
                "phase": s.phase,
                "messages": s.per_message_ns.len(),
                "calls_per_message": s.calls as f64 / s.per_message_ns.len().max(1) as f64,
                "share_of_messages": s.per_message_ns.len() as f64 / count.max(1) as f64,
                "median_ns": p50,
                "p10_ns": p10,
                "p90_ns": p90,
            })
        })
        .collect()
}

/// The data of message `i`: a deterministic pattern both sides can regenerate.
pub fn pattern(buf: &mut [u8], seed: u64, i: usize) {
    let mut x = (seed ^ ((i as u64) << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_ne_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// First differing byte between `buf` and the pattern, if any.
fn check(buf: &[u8], seed: u64, i: usize, scratch: &mut Vec<u8>) -> Option<usize> {
    scratch.resize(buf.len(), 0);
    pattern(scratch, seed, i);
    if buf == &scratch[..] {
        return None;
    }
    buf.iter().zip(scratch.iter()).position(|(a, b)| a != b)
}

/// A buffer at a page offset in its own mapping.
struct Buf {
    map: Mapping,
    off: usize,
    len: usize,
}

impl Buf {
    fn new(len: usize, off: usize, huge: bool) -> Res<Buf> {
        let opts = MapOptions {
            huge,
            populate: huge,
            ..Default::default()
        };
        Ok(Buf {
            map: Mapping::anonymous(len + off + page_size(), opts)?,
            off,
            len,
        })
    }
    fn get(&mut self) -> &mut [u8] {
        &mut self.map.as_mut_slice()[self.off..self.off + self.len]
    }
}

/// How many messages took each path (the accounting's `path`, per message).
pub type PathTally = std::collections::BTreeMap<String, usize>;

/// What the receiver reports.
#[derive(Debug, Default, Serialize, Deserialize)]
struct PeerReport {
    messages: usize,
    /// Messages per input path.
    #[serde(default)]
    paths: PathTally,
    mismatches: usize,
    first_mismatch: Option<(usize, usize)>,
    accounting: Accounting,
    cpu_ns: u64,
    /// The receiver's VMA count after its first input and after the last.
    vma_first: usize,
    vma_last: usize,
    error: Option<String>,
    /// The receiver's primitive operations, when recorded.
    #[serde(default)]
    ops: Vec<OpSamples>,
    /// CPU time of the receiving application's own work (checking, `--app-work-ns`).
    #[serde(default)]
    app_cpu_ns: u64,
}

fn cpu_now() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn send_frame(s: &mut UnixStream, data: &[u8]) -> Res<()> {
    s.write_all(&(data.len() as u64).to_ne_bytes())?;
    s.write_all(data)?;
    Ok(())
}

fn recv_frame(s: &mut UnixStream) -> Res<Vec<u8>> {
    let mut l = [0u8; 8];
    s.read_exact(&mut l)?;
    let n = u64::from_ne_bytes(l) as usize;
    if n > 1 << 20 {
        return Err(format!("control frame of {n} bytes").into());
    }
    let mut v = vec![0u8; n];
    s.read_exact(&mut v)?;
    Ok(v)
}

fn send_fd(s: &UnixStream, fd: &OwnedFd) -> Res<()> {
    zcio_vm::wire::send_with_fds(s.as_fd(), b"F", &[fd.as_fd()])?;
    Ok(())
}

fn recv_fd(s: &UnixStream) -> Res<OwnedFd> {
    let mut b = [0u8; 1];
    let (_, mut fds) = zcio_vm::wire::recv_with_fds(s.as_fd(), &mut b)?;
    fds.pop().ok_or_else(|| "no descriptor received".into())
}

/// The application produces message `i` (not timed): in its buffer, or in a region it allocated
/// for the system-allocated semantics.
///
/// Over the memory network the region comes from the endpoint's region cache (Genie's region
/// allocation), so that regions circulate as in the paper's experiments.
fn prepare(
    a: &TransferArgs,
    buf: &mut Buf,
    i: usize,
    link: Option<&mut MemnetEndpoint>,
) -> Res<Option<Region>> {
    pattern(buf.get(), a.seed, i);
    if a.semantics.allocation() == Allocation::System {
        return Ok(Some(match link {
            Some(m) => {
                let mut r = m.alloc_region(a.bytes, a.semantics)?;
                r.as_mut_slice().copy_from_slice(buf.get());
                r
            }
            None => Region::from_slice(buf.get())?,
        }));
    }
    Ok(None)
}

/// The profile for this transfer: the calibrated one, or one with the smallest thresholds.
fn profile(a: &TransferArgs) -> &'static zcio_genie::profile::Profile {
    if a.force_zero_copy {
        zcio_genie::profile::Profile::zero_copy()
    } else {
        zcio_genie::profile::Profile::current()
    }
}

fn fallback(a: &TransferArgs) -> zcio_genie::Fallback {
    if a.no_fallback {
        zcio_genie::Fallback::Refuse
    } else {
        zcio_genie::Fallback::Allow
    }
}

enum Out {
    Memnet(MemnetEndpoint),
    Stream(StreamEnd),
}

impl TransferArgs {
    /// Refuse what no process of the transfer could carry out, before any process starts.
    pub fn validate(&self) -> Res<()> {
        if self.bytes == 0 {
            return Err(
                "invalid argument `--bytes`: length 0: a transfer carries at least one byte".into(),
            );
        }
        if self.count == 0 {
            return Err("invalid argument `--count`: at least one message".into());
        }
        // Each end maps its buffer with the offset and a page (or a huge page) of slack.
        let slack = if self.huge {
            zcio_vm::page::HUGE_PAGE_SIZE
        } else {
            page_size()
        };
        let limit = zcio_vm::mapping::MAX_MAPPING - 2 * slack;
        if self.bytes > limit || self.offset > limit - self.bytes {
            return Err(format!(
                "invalid argument `--bytes`/`--offset`: {} bytes at offset {}: a buffer ends at most {limit} bytes from its mapping's start (zcio maps at most {} bytes at once)",
                self.bytes,
                self.offset,
                zcio_vm::mapping::MAX_MAPPING
            )
            .into());
        }
        Ok(())
    }
}

/// Run a transfer and print the result.
pub fn run(a: TransferArgs) -> Res<()> {
    // Both paths validate the arguments before anything starts.
    let vma_before = zcio_vm::mapping::vma_count();
    let result = if a.module == ModuleKind::File {
        run_file_json(&a)?
    } else {
        run_peer(&a)?
    };
    let mut v = result;
    v["vma_count_before"] = vma_before.into();
    v["vma_count_after"] = zcio_vm::mapping::vma_count().into();
    if a.json {
        println!("{}", serde_json::to_string(&v)?);
    } else {
        println!(
            "{} over {}: {} x {} bytes, verified={}, cpu copies {} B/msg, kernel copies {} B/msg, latency {} ns (median), path: {}",
            a.semantics,
            a.module,
            a.count,
            a.bytes,
            v["verified"],
            v["cpu_copied_bytes"],
            v["kernel_copied_bytes"],
            v["latency_ns"],
            v["path"]
        );
    }
    if v["verified"] != serde_json::Value::Bool(true)
        && a.semantics.integrity() == zcio_genie::Integrity::Strong
    {
        return Err("the receiver's data differs from the sender's data as of the call".into());
    }
    Ok(())
}

fn percentiles(mut v: Vec<u64>) -> (u64, u64, u64) {
    v.sort_unstable();
    let at = |q: usize| v[(v.len() - 1) * q / 100];
    (at(50), at(10), at(90))
}

/// Output one message; returns the sender's accounting. Overwrites the buffer after the call if
/// asked, until `done` returns.
fn output_one(
    out: &mut Out,
    a: &TransferArgs,
    buf: &mut Buf,
    region: Option<Region>,
    mut done: impl FnMut(&mut Out) -> Res<()>,
) -> Res<Accounting> {
    let system = region.is_some();
    let acc;
    let ticket;
    if let Some(r) = region {
        (ticket, acc) = match out {
            Out::Memnet(m) => {
                let (t, acc) = m.send_region(a.semantics, r)?;
                (Some(t), acc)
            }
            Out::Stream(s) => (None, s.send_region(a.semantics, r)?),
        };
    } else {
        (ticket, acc) = match out {
            Out::Memnet(m) => {
                let (t, acc) = m.send(a.semantics, buf.get())?;
                (Some(t), acc)
            }
            Out::Stream(s) => (None, s.send(a.semantics, buf.get())?),
        };
    }
    let stop = AtomicBool::new(false);
    let writes = AtomicU64::new(0);
    let overwrite = a.overwrite_during_output && !system;
    let data = buf.get();
    std::thread::scope(|sc| -> Res<()> {
        if overwrite {
            sc.spawn(|| {
                let mut k = 0u8;
                while !stop.load(Ordering::Relaxed) {
                    k = k.wrapping_add(1);
                    data.fill(k);
                    writes.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        let r = (|| -> Res<()> {
            if let (Out::Memnet(m), Some(t)) = (&mut *out, ticket) {
                m.wait(t)?;
            }
            done(out)
        })();
        stop.store(true, Ordering::Relaxed);
        r
    })?;
    Ok(acc)
}

/// The calibration profile file every process of a run uses, when it is not the default one
/// (see [`crate::report::ensure_profile`]); handed to child processes as `$ZCIO_PROFILE`.
pub static CHILD_PROFILE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// A command running this executable, with the run's profile in its environment.
pub fn zcio_command() -> Res<std::process::Command> {
    let mut c = std::process::Command::new(std::env::current_exe()?);
    if let Some(p) = CHILD_PROFILE.get() {
        c.env(zcio_genie::profile::PROFILE_ENV, p);
    }
    Ok(c)
}

/// Run a transfer to a second process and return its result object (what `--json` prints).
pub fn run_peer(a: &TransferArgs) -> Res<serde_json::Value> {
    a.validate()?;
    let dir = tempfile::tempdir()?;
    let sock_path = dir.path().join("ctl");
    let listener = UnixListener::bind(&sock_path)?;
    let mut child = zcio_command()?
        .arg("peer")
        .arg("--connect")
        .arg(&sock_path)
        .spawn()?;
    let (mut ctl, _) = listener.accept()?;
    send_frame(&mut ctl, &serde_json::to_vec(a)?)?;
    let mut out = match a.module {
        ModuleKind::Memnet => {
            let (mine, theirs, arena) = zcio_genie::memnet::link_parts()?;
            theirs.send_over(&ctl)?;
            let mut m = MemnetEndpoint::join(mine, Some(arena))?;
            if a.no_spin {
                m.set_spin(std::time::Duration::ZERO);
            }
            m.set_profile(profile(a));
            m.set_fallback(fallback(a));
            Out::Memnet(m)
        }
        kind => {
            let (tx, rx_end) = zcio_genie::stream::pair_fds(kind)?;
            send_fd(&ctl, &rx_end)?;
            drop(rx_end);
            let mut s = StreamEnd::from_fd(kind, tx)?;
            s.set_profile(profile(a));
            s.set_fallback(fallback(a));
            Out::Stream(s)
        }
    };
    let mut buf = Buf::new(a.bytes, a.offset, a.huge)?;
    let mut lat = Vec::with_capacity(a.count);
    let mut out_paths = PathTally::new();
    let mut acc = Accounting::default();
    let vm0 = VmRuntime::get().stats();
    let mut cpu_sender = 0;
    let mut err = None;
    let mut vma_first = 0;
    let mut app_cpu = 0;
    zcio_genie::breakdown::enable(a.breakdown);
    let wall0 = Instant::now();
    for i in 0..a.count {
        let c0 = thread_cpu_now();
        let link = match &mut out {
            Out::Memnet(m) => Some(m),
            Out::Stream(_) => None,
        };
        let region = prepare(a, &mut buf, i, link)?;
        app_cpu += thread_cpu_now() - c0;
        // CPU time and latency cover the transfer only: not making the data, not checking it.
        let cpu0 = cpu_now();
        let t0 = Instant::now();
        let r = output_one(&mut out, a, &mut buf, region, |_| {
            let mut b = [0u8; 1];
            ctl.read_exact(&mut b)
                .map_err(|_| "peer disappeared during the transfer".into())
        });
        let elapsed = t0.elapsed().as_nanos() as u64;
        cpu_sender += cpu_now() - cpu0;
        // The receiver has checked the message and waits in its next input.
        let mut ready = [0u8; 1];
        let r = r.and_then(|x| {
            ctl.read_exact(&mut ready)
                .map_err(|_| "peer disappeared during the transfer".into())
                .map(|_| x)
        });
        // The first message warms the caches and the pools: not a sample of the breakdown.
        if i == 0 {
            zcio_genie::breakdown::discard_message();
        } else {
            zcio_genie::breakdown::end_message();
        }
        match r {
            Ok(x) => {
                lat.push(elapsed);
                *out_paths.entry(x.path.to_string()).or_default() += 1;
                if i == 0 {
                    vma_first = zcio_vm::mapping::vma_count();
                }
                if i == 0 {
                    acc = x;
                } else {
                    acc.add(&Accounting {
                        path: Default::default(),
                        ..x
                    });
                }
            }
            Err(e) => {
                err = Some(e.to_string());
                break;
            }
        }
    }
    let wall_ns = wall0.elapsed().as_nanos() as u64;
    let sender_ops = zcio_genie::breakdown::take();
    zcio_genie::breakdown::enable(false);
    let vm1 = VmRuntime::get().stats();
    let vma_last = zcio_vm::mapping::vma_count();
    drop(out);
    let report: PeerReport = recv_frame(&mut ctl)
        .ok()
        .and_then(|f| serde_json::from_slice(&f).ok())
        .unwrap_or_default();
    let status = child.wait()?;
    if let Some(e) = err.or(report.error.clone()) {
        return Err(format!("transfer failed: {e} (receiver exit status: {status})").into());
    }
    let mut v = summarize(
        a,
        acc,
        report.accounting,
        &lat,
        cpu_sender + report.cpu_ns,
        report.mismatches == 0 && report.messages == a.count,
        report.first_mismatch,
        vm0,
        vm1,
    );
    v["paths"] = paths_json(&out_paths, &report.paths);
    let mut ops = sender_ops;
    ops.extend(report.ops.iter().cloned());
    if a.breakdown {
        v["ops"] = ops_summary(&ops, a.count.saturating_sub(1)).into();
    }
    let n = a.count as u64;
    v["app_cpu_ns"] = ((app_cpu + report.app_cpu_ns) / n).into();
    v["wall_ns"] = wall_ns.into();
    v["messages_per_s"] = (a.count as f64 / (wall_ns as f64 / 1e9)).into();
    v["vma"] = serde_json::json!({
        "sender_after_first": vma_first,
        "sender_after_last": vma_last,
        "receiver_after_first": report.vma_first,
        "receiver_after_last": report.vma_last,
    });
    Ok(v)
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    a: &TransferArgs,
    send: Accounting,
    recv: Accounting,
    lat: &[u64],
    cpu_ns: u64,
    verified: bool,
    first_mismatch: Option<(usize, usize)>,
    vm0: zcio_vm::runtime::VmStats,
    vm1: zcio_vm::runtime::VmStats,
) -> serde_json::Value {
    let n = a.count as u64;
    let (p50, p10, p90) = percentiles(lat.to_vec());
    let kernel = match (send.kernel_copied_bytes, recv.kernel_copied_bytes) {
        (Some(x), Some(y)) => Some((x + y) / n),
        _ => None,
    };
    serde_json::json!({
        "semantics": a.semantics,
        "module": a.module,
        "input": a.input,
        "bytes": a.bytes,
        "offset": a.offset,
        "count": a.count,
        "verified": verified,
        "first_mismatch": first_mismatch,
        "cpu_copied_bytes": (send.cpu_copied_bytes + recv.cpu_copied_bytes + (vm1.tcow_copied_bytes - vm0.tcow_copied_bytes)) / n,
        "granule": match (send.granule, recv.granule) {
            (Some(a), Some(b)) if a != b => Some(zcio_genie::Granule::Mixed),
            (a, b) => a.or(b),
        },
        "huge": a.huge,
        "kernel_copied_bytes": kernel,
        "swapped_bytes": (send.swapped_bytes + recv.swapped_bytes) / n,
        "path": format!("output: {}; input: {}", send.path, recv.path),
        "latency_ns": p50,
        "latency_p10_ns": p10,
        "latency_p90_ns": p90,
        "latencies_ns": lat,
        "cpu_ns": cpu_ns / n,
        "sender": { "cpu_copied_bytes": send.cpu_copied_bytes / n, "kernel_copied_bytes": send.kernel_copied_bytes.map(|k| k / n), "path": send.path },
        "receiver": { "cpu_copied_bytes": recv.cpu_copied_bytes / n, "kernel_copied_bytes": recv.kernel_copied_bytes.map(|k| k / n), "swapped_bytes": recv.swapped_bytes / n, "path": recv.path },
        "tcow_faults": vm1.tcow_faults - vm0.tcow_faults,
        "tcow_page_copies": vm1.tcow_copies - vm0.tcow_copies,
        "tcow_huge_copies": vm1.tcow_huge_copies - vm0.tcow_huge_copies,
        "tcow_copied_bytes": vm1.tcow_copied_bytes - vm0.tcow_copied_bytes,
        "sleep_on_write": vm1.sleep_on_write - vm0.sleep_on_write,
        "vm": VmRuntime::get().capabilities(),
    })
}

/// CPU time of this process and of its waited-for children so far (ns; clock-tick resolution).
pub fn children_and_self_cpu_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at the state, field 3.
    let rest = stat.rsplit_once(')').map_or("", |x| x.1);
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // utime, stime, cutime, cstime are fields 14-17, i.e. indices 11-14 after the state.
    let ticks: u64 = f.get(11..15).map_or(0, |x| x.iter().sum());
    ticks * 1_000_000_000 / rustix::param::clock_ticks_per_second()
}

/// Run a file transfer (write the file, read it back in this process) and return its result
/// object.
pub fn run_file_json(a: &TransferArgs) -> Res<serde_json::Value> {
    a.validate()?;
    let dir = match &a.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir_in(".")?,
    };
    let path = dir.path().join("zcio-transfer.dat");
    let mut f = StreamEnd::file(&path)?;
    f.set_profile(profile(a));
    f.set_fallback(fallback(a));
    let mut buf = Buf::new(a.bytes, a.offset, a.huge)?;
    let mut rbuf = Buf::new(a.bytes, a.offset, a.huge)?;
    let (mut send_acc, mut recv_acc) = (Accounting::default(), Accounting::default());
    let (mut out_paths, mut in_paths) = (PathTally::new(), PathTally::new());
    let mut lat = Vec::new();
    let mut mismatches = 0;
    let mut first = None;
    let mut scratch = Vec::new();
    let vm0 = VmRuntime::get().stats();
    let mut cpu = 0;
    let mut out = Out::Stream(f);
    for i in 0..a.count {
        let region = prepare(a, &mut buf, i, None)?;
        let cpu0 = cpu_now();
        let t0 = Instant::now();
        let mut got = None;
        let s = output_one(&mut out, a, &mut buf, region, |_| Ok(()))?;
        let Out::Stream(fe) = &mut out else {
            unreachable!()
        };
        let r = if a.semantics.allocation() == Allocation::System {
            let (region, acc) = fe.recv_region(a.semantics, a.bytes)?;
            lat.push(t0.elapsed().as_nanos() as u64);
            cpu += cpu_now() - cpu0;
            got = check(region.as_slice(), a.seed, i, &mut scratch);
            if got.is_none() && region.page_span()[a.bytes..].iter().any(|&b| b != 0) {
                got = Some(a.bytes);
            }
            acc
        } else {
            let acc = fe.recv(a.semantics, rbuf.get(), a.input)?;
            lat.push(t0.elapsed().as_nanos() as u64);
            cpu += cpu_now() - cpu0;
            if let Some(p) = check(rbuf.get(), a.seed, i, &mut scratch) {
                got = Some(p);
            }
            acc
        };
        if let Some(p) = got {
            mismatches += 1;
            first.get_or_insert((i, p));
        }
        *out_paths.entry(s.path.to_string()).or_default() += 1;
        *in_paths.entry(r.path.to_string()).or_default() += 1;
        if i == 0 {
            send_acc = s;
            recv_acc = r;
        } else {
            send_acc.add(&Accounting {
                path: Default::default(),
                ..s
            });
            recv_acc.add(&Accounting {
                path: Default::default(),
                ..r
            });
        }
    }
    let vm1 = VmRuntime::get().stats();
    f = match out {
        Out::Stream(f) => f,
        Out::Memnet(_) => unreachable!(),
    };
    if let Some(r) = f.direct_unavailable() {
        send_acc.path = std::mem::take(&mut send_acc.path).direct_unavailable(r);
    }
    let mut v = summarize(
        a,
        send_acc,
        recv_acc,
        &lat,
        cpu,
        mismatches == 0,
        first,
        vm0,
        vm1,
    );
    v["paths"] = paths_json(&out_paths, &in_paths);
    Ok(v)
}

/// The paths taken, message by message, as `{"output": {path: messages}, "input": {...}}`:
/// the path of the first message alone (`path`) can hide a fallback later ones took.
fn paths_json(out: &PathTally, inp: &PathTally) -> serde_json::Value {
    serde_json::json!({ "output": out, "input": inp })
}

/// The receiving process.
pub fn peer(connect: &Path) -> Res<()> {
    let mut ctl = UnixStream::connect(connect)?;
    let a: TransferArgs = serde_json::from_slice(&recv_frame(&mut ctl)?)?;
    let mut report = PeerReport::default();
    let r = (|| -> Res<()> {
        enum In {
            M(MemnetEndpoint),
            S(StreamEnd),
        }
        let mut input = match a.module {
            ModuleKind::Memnet => {
                let mut m = MemnetEndpoint::join(LinkParts::recv_from(&ctl)?, None)?;
                if a.no_spin {
                    m.set_spin(std::time::Duration::ZERO);
                }
                m.set_profile(profile(&a));
                m.set_fallback(fallback(&a));
                In::M(m)
            }
            kind => {
                let mut s = StreamEnd::from_fd(kind, recv_fd(&ctl)?)?;
                s.set_profile(profile(&a));
                s.set_fallback(fallback(&a));
                In::S(s)
            }
        };
        // Pooled-unaligned buffers are deliberately off the page boundary.
        let off = match a.input {
            InputBuffering::PooledAligned => 0,
            InputBuffering::PooledUnaligned if a.offset == 0 => 512,
            _ => a.offset,
        };
        let mut buf = Buf::new(a.bytes, off, a.huge)?;
        let mut scratch = Vec::new();
        zcio_genie::breakdown::enable(a.breakdown);
        for i in 0..a.count {
            if a.peer_exit_after == Some(i) {
                std::process::exit(3);
            }
            let cpu0 = cpu_now();
            let (acc, bad) = if a.semantics.allocation() == Allocation::System {
                let (region, acc) = match &mut input {
                    In::M(m) => m.recv_region(a.semantics, a.input)?,
                    In::S(s) => s.recv_region(a.semantics, a.bytes)?,
                };
                ctl.write_all(b".")?;
                report.cpu_ns += cpu_now() - cpu0;
                let c0 = thread_cpu_now();
                let mut bad = check(region.as_slice(), a.seed, i, &mut scratch);
                if bad.is_none() && region.page_span()[region.len()..].iter().any(|&b| b != 0) {
                    bad = Some(region.len());
                }
                app_work(a.app_work_ns);
                report.app_cpu_ns += thread_cpu_now() - c0;
                // Done with it: back to the region cache for the next input (Genie's region
                // deallocation into the cache), as the paper's experiments recycled regions.
                if let In::M(m) = &mut input {
                    m.recycle(region, a.semantics);
                }
                (acc, bad)
            } else {
                let acc = match &mut input {
                    In::M(m) => m.recv(a.semantics, buf.get(), a.input)?.1,
                    In::S(s) => s.recv(a.semantics, buf.get(), a.input)?,
                };
                ctl.write_all(b".")?;
                report.cpu_ns += cpu_now() - cpu0;
                let c0 = thread_cpu_now();
                let bad = check(buf.get(), a.seed, i, &mut scratch);
                app_work(a.app_work_ns);
                report.app_cpu_ns += thread_cpu_now() - c0;
                (acc, bad)
            };
            if i == 0 {
                zcio_genie::breakdown::discard_message();
            } else {
                zcio_genie::breakdown::end_message();
            }
            ctl.write_all(b"r")?;
            if let Some(p) = bad {
                report.mismatches += 1;
                report.first_mismatch.get_or_insert((i, p));
            }
            *report.paths.entry(acc.path.to_string()).or_default() += 1;
            if i == 0 {
                report.accounting = acc;
            } else {
                report.accounting.add(&Accounting {
                    path: Default::default(),
                    ..acc
                });
            }
            report.messages += 1;
            if i == 0 {
                report.vma_first = zcio_vm::mapping::vma_count();
            }
        }
        report.vma_last = zcio_vm::mapping::vma_count();
        report.ops = zcio_genie::breakdown::take();
        Ok(())
    })();
    if let Err(e) = r {
        report.error = Some(e.to_string());
    }
    send_frame(&mut ctl, &serde_json::to_vec(&report)?)?;
    Ok(())
}
