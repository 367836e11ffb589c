//! The arguments of `zcio transfer`, the command line that replays them, and what is refused
//! before any process starts.

use super::Res;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use zcio_genie::semantics::Allocation;
use zcio_genie::stream::ModuleKind;
use zcio_genie::{InputBuffering, Semantics};
use zcio_vm::mapping::MAX_MAPPING;
use zcio_vm::page_size;

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
    /// Move family without region caching: each output region made anew and each input
    /// region given back to the system when the application is done with it, instead of
    /// circulating through the region cache.
    #[arg(long)]
    #[serde(default)]
    pub no_recycle: bool,
    /// Application buffers the receiver reads into in turn (message i into buffer i mod N;
    /// application-allocated semantics): an application that keeps its last N-1 messages
    /// while the next one arrives. Each input then lands in memory last used N messages
    /// earlier, as emulated copy's staging pages are with one buffer (2).
    #[arg(long, default_value_t = 1)]
    #[serde(default = "one")]
    pub receiver_buffers: usize,
}

fn one() -> usize {
    1
}

/// Most `--receiver-buffers`.
pub const MAX_RECEIVER_BUFFERS: usize = 16;

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
            no_recycle: false,
            receiver_buffers: 1,
        }
    }
}

impl TransferArgs {
    /// The `zcio transfer` command line that runs these arguments (with `--json`).
    pub fn command_line(&self) -> Vec<String> {
        let mut v = vec!["transfer".to_string()];
        for (flag, value) in [
            ("--semantics", self.semantics.to_string()),
            ("--module", self.module.to_string()),
            ("--bytes", self.bytes.to_string()),
            ("--offset", self.offset.to_string()),
            ("--input", self.input.to_string()),
            ("--count", self.count.to_string()),
            ("--seed", self.seed.to_string()),
            ("--app-work-ns", self.app_work_ns.to_string()),
            ("--receiver-buffers", self.receiver_buffers.to_string()),
        ] {
            v.push(flag.into());
            v.push(value);
        }
        v.push("--json".into());
        for (on, flag) in [
            (self.overwrite_during_output, "--overwrite-during-output"),
            (self.force_zero_copy, "--force-zero-copy"),
            (self.no_fallback, "--no-fallback"),
            (self.breakdown, "--breakdown"),
            (self.no_spin, "--no-spin"),
            (self.huge, "--huge"),
            (self.no_recycle, "--no-recycle"),
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

impl TransferArgs {
    /// Refuse what no process of the transfer could carry out, before any process starts:
    /// a length no module carries, no message, a buffer no mapping holds, buffers the memory
    /// available cannot hold.
    pub fn validate(&self) -> Res<()> {
        check_bytes("--bytes", self.bytes)?;
        if self.count == 0 {
            return Err(
                "invalid argument `--count`: 0: a transfer sends at least one message".into(),
            );
        }
        if !(1..=MAX_RECEIVER_BUFFERS).contains(&self.receiver_buffers) {
            return Err(format!(
                "invalid argument `--receiver-buffers`: {}: the receiver reads into 1 to {MAX_RECEIVER_BUFFERS} buffers in turn",
                self.receiver_buffers
            )
            .into());
        }
        // Each end maps its buffer with the offset and a page (or a huge page) of slack, in
        // one mapping, which the kernel refuses beyond the machine's memory and swap.
        let (limit, what) = match mem_info("MemTotal:").zip(mem_info("SwapTotal:")) {
            Some((m, s)) if m + s < MAX_MAPPING => (m + s, "this machine's memory and swap"),
            _ => (MAX_MAPPING, "the most zcio maps at once"),
        };
        if self.offset > limit - 2 * self.slack() - self.bytes {
            return Err(format!(
                "invalid argument `--offset`: {}: with {} bytes each end maps more than {limit} bytes at once ({what})",
                self.offset, self.bytes,
            )
            .into());
        }
        let need = self.memory_needed();
        if let Some(avail) = mem_info("MemAvailable:").filter(|&m| need > m) {
            return Err(format!(
                "invalid argument `--bytes`: {}: the buffers of both ends need {need} bytes, more than the {avail} bytes of memory available here (MemAvailable)",
                self.bytes
            )
            .into());
        }
        Ok(())
    }

    /// The slack each end maps beyond its buffer: a page, or a huge page with `--huge`.
    fn slack(&self) -> usize {
        if self.huge {
            zcio_vm::page::HUGE_PAGE_SIZE
        } else {
            page_size()
        }
    }

    /// The memory both ends' buffers take at most: each buffer mapping (all of it with
    /// `--huge`, which populates it; the sender's one and the receiver's `--receiver-buffers`),
    /// and for the system-allocated semantics a region per end.
    fn memory_needed(&self) -> usize {
        let buffer = if self.huge {
            self.offset + self.bytes + self.slack()
        } else {
            self.bytes
        };
        let regions = match self.semantics.allocation() {
            Allocation::System => 2 * self.bytes,
            Allocation::Application => 0,
        };
        (1 + self.receiver_buffers) * buffer + regions
    }
}

/// The largest message every module carries: the memory network's descriptor and the stream
/// ends both refuse longer ones.
pub const MAX_BYTES: usize = zcio_genie::memnet::MAX_MESSAGE;

/// Refuse a message length no module carries, naming the argument it came from.
pub fn check_bytes(arg: &str, bytes: usize) -> Res<()> {
    if bytes == 0 || bytes > MAX_BYTES {
        return Err(format!(
            "invalid argument `{arg}`: {bytes}: a message is 1 to {MAX_BYTES} bytes (1 GiB), the most every module carries"
        )
        .into());
    }
    Ok(())
}

/// A line of /proc/meminfo (`MemAvailable:`, the memory available for new work, `MemTotal:`,
/// `SwapTotal:`), in bytes, where known.
fn mem_info(key: &str) -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with(key))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}
