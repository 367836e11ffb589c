//! `zcio transfer`: one process outputs, a second process (spawned here, `zcio peer`) inputs,
//! each with the chosen semantics; the receiver checks every byte against the data as of the
//! sender's call. The file module writes a file and reads it back in this process.

mod args;
mod cost;
mod file;
mod receiver;
mod sender;
mod wire;

pub use args::{MAX_BYTES, TransferArgs, check_bytes};
pub use cost::children_and_self_cpu_ns;
pub use file::run_file_json;
pub use receiver::peer;
pub use sender::run_peer;

use std::path::PathBuf;
use zcio_genie::Accounting;
use zcio_genie::Region;
use zcio_genie::memnet::MemnetEndpoint;
use zcio_genie::semantics::Allocation;
use zcio_genie::stream::{ModuleKind, StreamEnd};
use zcio_vm::{MapOptions, Mapping, page_size};

pub use crate::error::Res;

/// One step of Marsaglia's xorshift64 generator: `x`'s next state, returned too.
pub fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// The data of message `i`: a deterministic pattern both sides can regenerate.
pub fn pattern(buf: &mut [u8], seed: u64, i: usize) {
    let mut x = (seed ^ ((i as u64) << 32)).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in buf.chunks_mut(8) {
        let b = xorshift(&mut x).to_ne_bytes();
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

/// The application produces message `i` (not timed): in its buffer, or in a region it allocated
/// for the system-allocated semantics.
///
/// Over the memory network the region comes from the endpoint's region cache (Genie's region
/// allocation), so that regions circulate as in the paper's experiments; with `--no-recycle`
/// it is made anew.
fn prepare(
    a: &TransferArgs,
    buf: &mut Buf,
    i: usize,
    link: Option<&mut MemnetEndpoint>,
) -> Res<Option<Region>> {
    pattern(buf.get(), a.seed, i);
    if a.semantics.allocation() == Allocation::System {
        return Ok(Some(match link {
            Some(m) if !a.no_recycle => {
                let mut r = m.alloc_region(a.bytes, a.semantics)?;
                r.as_mut_slice().copy_from_slice(buf.get());
                r
            }
            _ => Region::from_slice(buf.get())?,
        }));
    }
    Ok(None)
}

/// The profile for this transfer: the calibrated one, or one with the smallest thresholds.
fn profile(a: &TransferArgs) -> std::sync::Arc<zcio_genie::profile::Profile> {
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

/// This transfer's settings on its memory-network endpoint: spinning, profile, fallback.
fn configure_memnet(a: &TransferArgs, mut m: MemnetEndpoint) -> MemnetEndpoint {
    if a.no_spin {
        m.set_spin(std::time::Duration::ZERO);
    }
    m.set_profile(profile(a));
    m.set_fallback(fallback(a));
    m
}

/// This transfer's settings on its stream end: profile, fallback.
fn configure_stream(a: &TransferArgs, mut s: StreamEnd) -> StreamEnd {
    s.set_profile(profile(a));
    s.set_fallback(fallback(a));
    s
}

/// Add message `i`'s accounting to the total and its path to the tally; the first message's
/// path stays the one shown as `path`.
fn accumulate(total: &mut Accounting, paths: &mut PathTally, x: Accounting, i: usize) {
    *paths.entry(x.path.to_string()).or_default() += 1;
    if i == 0 {
        *total = x;
    } else {
        total.add(&Accounting {
            path: Default::default(),
            ..x
        });
    }
}

/// First differing byte of a received region against message `i`'s pattern, counting the
/// rest of its last page, which must be zeros (nothing of another message or process shows).
fn check_region(region: &Region, seed: u64, i: usize, scratch: &mut Vec<u8>) -> Option<usize> {
    check(region.as_slice(), seed, i, scratch).or_else(|| {
        region.page_span()[region.len()..]
            .iter()
            .any(|&b| b != 0)
            .then_some(region.len())
    })
}

/// Run a transfer and print the result. Under strong integrity a receiver's data that differs
/// from the sender's fails the command (with `--json`, the result carries the reason under
/// `"error"`).
pub fn run(a: TransferArgs) -> Res<()> {
    // Both paths validate the arguments before anything starts.
    let vma_before = zcio_vm::mapping::vma_count();
    let mut v = if a.module == ModuleKind::File {
        run_file_json(&a)?
    } else {
        run_peer(&a)?
    };
    v["vma_count_before"] = vma_before.into();
    v["vma_count_after"] = zcio_vm::mapping::vma_count().into();
    let failed = v["verified"] != serde_json::Value::Bool(true)
        && a.semantics.integrity() == zcio_genie::Integrity::Strong;
    let reason = "the receiver's data differs from the sender's data as of the call";
    if a.json {
        if failed {
            return Err(crate::error::Error::new(crate::error::FailedWith {
                result: v,
                reason: reason.into(),
            }));
        }
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
    if failed {
        return Err(reason.into());
    }
    Ok(())
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

/// Why a child process's connection did not come.
#[derive(Debug)]
pub enum NoConnection {
    /// The process ended first, with this status (it is reaped).
    Ended(std::process::ExitStatus),
    /// The time allowed passed.
    Stalled,
    /// Accepting or waiting failed.
    Io(std::io::Error),
}

/// The status of `child` once it has ended, given up to `within` to end (`None`: still
/// running then, or its status could not be had).
pub fn ended_within(
    child: &mut std::process::Child,
    within: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + within;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            _ => return None,
        }
    }
}

/// The connection of the process `child` on `listener` (blocking, once made). The listener
/// and the process are polled together, so that the process's end, or `stall` passing where
/// one is given, ends the wait instead of a blocking `accept` waiting for good.
pub fn accept_child(
    listener: &std::os::unix::net::UnixListener,
    mut child: Option<&mut std::process::Child>,
    stall: Option<std::time::Duration>,
) -> Result<std::os::unix::net::UnixStream, NoConnection> {
    listener.set_nonblocking(true).map_err(NoConnection::Io)?;
    let t0 = std::time::Instant::now();
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).map_err(NoConnection::Io)?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(NoConnection::Io(e)),
        }
        if let Some(c) = child.as_mut()
            && let Some(status) = c.try_wait().map_err(NoConnection::Io)?
        {
            return Err(NoConnection::Ended(status));
        }
        if stall.is_some_and(|d| t0.elapsed() > d) {
            return Err(NoConnection::Stalled);
        }
        let mut fds = [rustix::event::PollFd::new(
            listener,
            rustix::event::PollFlags::IN,
        )];
        let tick = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 2_000_000,
        };
        let _ = rustix::event::poll(&mut fds, Some(&tick));
    }
}

/// The paths taken, message by message, as `{"output": {path: messages}, "input": {...}}`:
/// the path of the first message alone (`path`) can hide a fallback later ones took.
fn paths_json(out: &PathTally, inp: &PathTally) -> serde_json::Value {
    serde_json::json!({ "output": out, "input": inp })
}
