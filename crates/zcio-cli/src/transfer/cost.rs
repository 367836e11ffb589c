//! What a transfer cost: CPU clocks, the application's simulated work, and the result object
//! (latencies, copies, paths, the VM runtime's counters).

use super::TransferArgs;
use serde::{Deserialize, Serialize};
use zcio_genie::Accounting;
use zcio_genie::breakdown::OpSamples;
use zcio_vm::VmRuntime;

/// Transfer CPU time split at the first message, which also makes the pools, staging and
/// bounce buffers every later message reuses: the steady-state cost per message is the mean of
/// the others (as the latency is their median), and the first is reported beside it.
#[derive(Debug, Default, Clone, Copy, Serialize, Deserialize)]
pub(super) struct CpuTime {
    /// Message 0's transfer CPU time (ns).
    pub(super) first: u64,
    /// The other messages' transfer CPU time (ns), summed.
    pub(super) rest: u64,
}

impl CpuTime {
    /// Add message `i`'s transfer CPU time.
    pub(super) fn add(&mut self, i: usize, ns: u64) {
        if i == 0 {
            self.first += ns;
        } else {
            self.rest += ns;
        }
    }

    /// Both sides' times together.
    pub(super) fn plus(self, other: CpuTime) -> CpuTime {
        CpuTime {
            first: self.first + other.first,
            rest: self.rest + other.rest,
        }
    }

    /// Mean CPU time per message after the first, of `count` messages (the first alone when
    /// there is no other).
    pub(super) fn steady(self, count: usize) -> u64 {
        match count {
            0 => 0,
            1 => self.first,
            n => self.rest / (n as u64 - 1),
        }
    }
}

/// Burn `ns` of this thread's CPU time (the application's work on a message).
pub(super) fn app_work(ns: u64) {
    if ns == 0 {
        return;
    }
    let t0 = thread_cpu_now();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    while thread_cpu_now() - t0 < ns {
        for _ in 0..256 {
            super::xorshift(&mut x);
        }
        std::hint::black_box(x);
    }
}

/// CPU time of this thread so far (ns).
pub(super) fn thread_cpu_now() -> u64 {
    clock_ns(rustix::time::ClockId::ThreadCPUTime)
}

/// CPU time of this process so far (ns).
pub(super) fn cpu_now() -> u64 {
    clock_ns(rustix::time::ClockId::ProcessCPUTime)
}

fn clock_ns(clock: rustix::time::ClockId) -> u64 {
    let t = rustix::time::clock_gettime(clock);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Per operation and phase: calls per message and the spread of its time per message.
pub(super) fn ops_summary(samples: &[OpSamples], count: usize) -> Vec<serde_json::Value> {
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

pub(super) fn percentiles(mut v: Vec<u64>) -> (u64, u64, u64) {
    v.sort_unstable();
    let at = |q: usize| v[(v.len() - 1) * q / 100];
    (at(50), at(10), at(90))
}

#[allow(clippy::too_many_arguments)]
pub(super) fn summarize(
    a: &TransferArgs,
    send: Accounting,
    recv: Accounting,
    lat: &[u64],
    cpu: CpuTime,
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
        "cpu_ns": cpu.steady(a.count),
        "first_message_cpu_ns": cpu.first,
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
