//! Instrumentation of the primitive data-passing operations (paper 000, §8.1, Table 6).
//!
//! The paper recorded the cycle counter around each primitive operation while it ran the
//! latency experiments, then fitted each operation's latency against the data length. zcio does
//! the same: when recording is on ([`enable`]), every primitive that a semantics performs is
//! timed with the monotonic clock and added to the current message's totals, keyed by the
//! operation and the phase it happened in (the sender's prepare time, the sender's dispose time,
//! the receiver's input). [`end_message`] closes a message; [`take`] returns, per operation and
//! phase, the per-message totals, ready to be fitted.
//!
//! Off (the default), each primitive costs one relaxed atomic load.

use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// A primitive data-passing operation: the paper's names (Table 6) and zcio's additions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    /// Copy the application's data into a system buffer (output under copy semantics; the
    /// partial pages of emulated copy).
    Copyin,
    /// Copy data from a system buffer into the application's buffer (input).
    Copyout,
    /// Reference the output pages: queue them on the wire without copying (`vmsplice`).
    Reference,
    /// Drop the output's page references and end its protection (completion).
    Unreference,
    /// Make the output pages read-only for TCOW (userfaultfd write-protect or `mprotect`).
    ReadOnly,
    /// Wire (lock) pages in memory (`mlock`): share and weak move.
    Wire,
    /// Unwire pages (`munlock`).
    Unwire,
    /// Swap staging pages with the application's pages (input alignment, page swapping,
    /// reverse copyout).
    Swap,
    /// Take a system input buffer (staging window) for the message: the overlay allocate of
    /// pooled buffering.
    OverlayAllocate,
    /// Create a region for system-allocated input (`mmap` of a registered mapping).
    RegionCreate,
    /// Region check of a cached region and its reuse (unhide, zero the tail).
    RegionCheck,
    /// Fill a region's pages before input (fault them in, zeroed, with `MADV_POPULATE_WRITE`):
    /// the page allocation and zeroing that a fresh region costs.
    RegionFill,
    /// Hide a region moved out under emulated move (`PROT_NONE`): the paper's invalidate.
    Invalidate,
    /// Put a region moved out into the region cache with an unmap watch (zcio's region mark out).
    RegionCache,
    /// Deallocate a region moved out under move (`munmap`; the I/O keeps its pages).
    RegionDeallocate,
    /// Check that an input buffer is writable before taking the message (zcio addition).
    AccessCheck,
}

impl Op {
    /// Every operation, in the order of the paper's table.
    pub const ALL: [Op; 16] = [
        Op::Copyin,
        Op::Copyout,
        Op::Reference,
        Op::Unreference,
        Op::ReadOnly,
        Op::Wire,
        Op::Unwire,
        Op::Swap,
        Op::OverlayAllocate,
        Op::RegionCreate,
        Op::RegionCheck,
        Op::RegionFill,
        Op::Invalidate,
        Op::RegionCache,
        Op::RegionDeallocate,
        Op::AccessCheck,
    ];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Op::Copyin => "copyin",
            Op::Copyout => "copyout",
            Op::Reference => "reference",
            Op::Unreference => "unreference",
            Op::ReadOnly => "read-only",
            Op::Wire => "wire",
            Op::Unwire => "unwire",
            Op::Swap => "swap",
            Op::OverlayAllocate => "overlay-allocate",
            Op::RegionCreate => "region-create",
            Op::RegionCheck => "region-check",
            Op::RegionFill => "region-fill",
            Op::Invalidate => "invalidate",
            Op::RegionCache => "region-cache",
            Op::RegionDeallocate => "region-deallocate",
            Op::AccessCheck => "access-check",
        }
    }
}

zcio_vm::display_by_name!(Op);

/// When an operation happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// At the sender, inside the output call (on the end-to-end latency's path).
    Prepare,
    /// At the sender, when the output completes (overlaps the receiver's work).
    Dispose,
    /// At the receiver, inside the input call (on the latency's path).
    Input,
}

/// The totals of one operation in one phase over the recorded messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpSamples {
    /// The operation.
    pub op: Op,
    /// The phase.
    pub phase: Phase,
    /// Calls over all messages.
    pub calls: u64,
    /// Time spent in the operation per message, for each message in which it happened (ns).
    pub per_message_ns: Vec<u64>,
}

const N: usize = Op::ALL.len() * 3;

struct Recorder {
    cur_ns: [u64; N],
    cur_calls: [u64; N],
    calls: [u64; N],
    per_message: BTreeMap<usize, Vec<u64>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            cur_ns: [0; N],
            cur_calls: [0; N],
            calls: [0; N],
            per_message: BTreeMap::new(),
        }
    }
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static RECORDER: Mutex<Option<Recorder>> = Mutex::new(None);

thread_local! {
    static PHASE: Cell<Phase> = const { Cell::new(Phase::Prepare) };
}

fn slot(op: Op, phase: Phase) -> usize {
    let o = Op::ALL
        .iter()
        .position(|x| *x == op)
        .expect("every op is listed");
    o * 3 + phase as usize
}

fn unslot(i: usize) -> (Op, Phase) {
    let phase = match i % 3 {
        0 => Phase::Prepare,
        1 => Phase::Dispose,
        _ => Phase::Input,
    };
    (Op::ALL[i / 3], phase)
}

/// Turn recording on or off for this process. Turning it on discards what was recorded.
pub fn enable(on: bool) {
    let mut r = RECORDER.lock().unwrap_or_else(|e| e.into_inner());
    *r = on.then(Recorder::default);
    ENABLED.store(on, Ordering::Release);
}

/// Whether recording is on.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Run `f` with this thread's operations attributed to `phase` (public for the recorder's own
/// test, which runs in a process of its own: the recorder is process-wide).
#[doc(hidden)]
pub fn in_phase<T>(phase: Phase, f: impl FnOnce() -> T) -> T {
    let old = PHASE.with(|p| p.replace(phase));
    let r = f();
    PHASE.with(|p| p.set(old));
    r
}

/// Add `ns` to `op` in this thread's phase.
pub(crate) fn record(op: Op, ns: u64) {
    if !enabled() {
        return;
    }
    let i = slot(op, PHASE.with(|p| p.get()));
    if let Some(r) = RECORDER.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        r.cur_ns[i] += ns;
        r.cur_calls[i] += 1;
    }
}

/// Run `f` as one call of `op`, timed when recording is on (public for the recorder's own
/// test, as [`in_phase`]).
#[doc(hidden)]
pub fn time<T>(op: Op, f: impl FnOnce() -> T) -> T {
    if !enabled() {
        return f();
    }
    let t = Instant::now();
    let r = f();
    record(op, t.elapsed().as_nanos() as u64);
    r
}

/// Start timing an operation whose kind is known only afterwards (see [`stop`]).
pub(crate) fn start() -> Option<Instant> {
    enabled().then(Instant::now)
}

/// Record the operation started at `t` as `op`.
pub(crate) fn stop(op: Op, t: Option<Instant>) {
    if let Some(t) = t {
        record(op, t.elapsed().as_nanos() as u64);
    }
}

/// Close the current message: its per-operation totals become one sample each.
pub fn end_message() {
    if !enabled() {
        return;
    }
    if let Some(r) = RECORDER.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        for i in 0..N {
            if r.cur_calls[i] > 0 {
                r.per_message.entry(i).or_default().push(r.cur_ns[i]);
                r.calls[i] += r.cur_calls[i];
            }
        }
        r.cur_ns = [0; N];
        r.cur_calls = [0; N];
    }
}

/// Drop what the current (unfinished) message recorded: the warm-up message, say.
pub fn discard_message() {
    if let Some(r) = RECORDER.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        r.cur_ns = [0; N];
        r.cur_calls = [0; N];
    }
}

/// What was recorded since [`enable`], per operation and phase; recording goes on afresh.
pub fn take() -> Vec<OpSamples> {
    let mut g = RECORDER.lock().unwrap_or_else(|e| e.into_inner());
    let Some(r) = g.as_mut() else {
        return Vec::new();
    };
    let r = std::mem::take(r);
    r.per_message
        .into_iter()
        .map(|(i, per_message_ns)| {
            let (op, phase) = unslot(i);
            OpSamples {
                op,
                phase,
                calls: r.calls[i],
                per_message_ns,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // The recorder itself is tried in `tests/breakdown.rs`, a process of its own: other tests
    // here record while it is on.
    #[test]
    fn every_operation_and_phase_has_a_slot_of_its_own() {
        for (i, op) in Op::ALL.iter().enumerate() {
            assert_eq!(unslot(slot(*op, Phase::Input)), (*op, Phase::Input), "{i}");
        }
    }
}
