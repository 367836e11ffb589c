//! The drill: one module's endpoints put through the semantics in turn in one process, the way a
//! program that mixes them would: for each semantics and each input buffering, runs of 5–40
//! messages of random lengths (1 byte to the longest, whole 2 MiB multiples among them) from
//! `Vec<u8>` buffers at random offsets within a page, read back in order into a fresh `Vec`
//! at a random offset, with guard bytes around the window. Every byte of every message and every
//! guard byte is checked; an error is a failure too.
//!
//! Each run allocates its own receive buffer and drops it at its end, so that the allocator
//! hands the next run memory at an address an earlier buffer had: a record kept by address that
//! outlived its buffer shows here. A receiver may be made late (`slow`): it sleeps before some
//! of its receives, so that a sender runs ahead of it.
//!
//! `zcio soak` runs the drill for every module before its random cases.

use crate::transfer::pattern;
use serde::Serialize;
use std::path::Path;
use std::time::Duration;
use zcio_genie::memnet::{self, MemnetEndpoint};
use zcio_genie::profile::Profile;
use zcio_genie::stream::{self, ModuleKind, StreamEnd};
use zcio_genie::{InputBuffering, Semantics};

/// The semantics that pass application buffers, in the order a drill takes them.
pub const SEMANTICS: [Semantics; 4] = [
    Semantics::Copy,
    Semantics::EmulatedCopy,
    Semantics::EmulatedShare,
    Semantics::Share,
];

/// Guard bytes on either side of the receive window, and their value.
const GUARD: usize = 4096;
const GUARD_BYTE: u8 = 0xA5;

/// What a drill does.
#[derive(Debug, Clone, Serialize)]
pub struct Drill {
    /// The module.
    pub module: ModuleKind,
    /// Messages for each semantics and input buffering (in runs of 5 to 40).
    pub messages: usize,
    /// Longest message (bytes).
    pub max_bytes: usize,
    /// Seed of the lengths and offsets.
    pub seed: u64,
    /// The receiver sleeps this long before one receive in eight.
    pub slow: Option<Duration>,
}

/// One failure: where, and what went wrong.
#[derive(Debug, Clone, Serialize)]
pub struct DrillFailure {
    /// Semantics of the run.
    pub semantics: Semantics,
    /// Input buffering of the run.
    pub buffering: InputBuffering,
    /// Run number (within the semantics and buffering) and message number (within the run).
    pub run: usize,
    /// See `run`.
    pub message: usize,
    /// Message length and the window's offset from a page boundary.
    pub len: usize,
    /// See `len`.
    pub offset: usize,
    /// The error, or the first wrong byte and the path the input took.
    pub what: String,
}

/// What a drill found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DrillTally {
    /// Messages received and checked.
    pub messages: usize,
    /// Bytes received and checked.
    pub bytes: u64,
    /// Bytes delivered by moving pages.
    pub swapped_bytes: u64,
    /// Moves the kernel refused for a reason other than a pinned or shared page (mappings it
    /// found incompatible), whose pages were copied instead: this process's count over the
    /// drill.
    pub refused_moves: u64,
    /// Pages copied because they could not be moved, over the drill.
    pub move_fallback_copies: u64,
    /// Each failure.
    pub failures: Vec<DrillFailure>,
}

/// A message's length: a quarter short (within two pages), a quarter medium (to 256 KiB), a
/// quarter long (to `max`), a quarter whole 2 MiB multiples (where `max` holds one).
fn length(rng: &mut fastrand::Rng, max: usize) -> usize {
    let ps = zcio_vm::page_size();
    let h = zcio_vm::page::HUGE_PAGE_SIZE;
    match rng.u8(..4) {
        0 => rng.usize(1..=(2 * ps).min(max)),
        1 => rng.usize(1..=(256 << 10).min(max)),
        3 if max >= h => rng.usize(1..=max / h) * h,
        _ => rng.usize(1..=max),
    }
}

/// The receiving side of a run.
enum Rx {
    Stream(StreamEnd),
    Memnet(MemnetEndpoint),
}

impl Rx {
    fn recv(
        &mut self,
        sem: Semantics,
        buf: &mut [u8],
        b: InputBuffering,
    ) -> zcio_genie::Result<zcio_genie::Accounting> {
        match self {
            Rx::Stream(s) => s.recv(sem, buf, b),
            Rx::Memnet(m) => {
                let want = buf.len();
                let (len, acc) = m.recv(sem, buf, b)?;
                if len != want {
                    return Err(zcio_genie::GenieError::Truncated {
                        expected: want,
                        got: len,
                    });
                }
                Ok(acc)
            }
        }
    }
}

/// The sender of a run, on a thread of its own for the socket, pipe and memory modules (the
/// file module's one end writes all first): returns the first error it met.
fn start_sender(
    module: ModuleKind,
    sem: Semantics,
    msgs: Vec<(usize, usize)>,
    seed: u64,
) -> zcio_genie::Result<(Rx, std::thread::JoinHandle<Result<(), String>>)> {
    let send_all = move |send: &mut dyn FnMut(&[u8]) -> zcio_genie::Result<()>| {
        for (i, &(len, off)) in msgs.iter().enumerate() {
            let mut v = vec![0u8; len + off];
            pattern(&mut v[off..], seed, i);
            send(&v[off..]).map_err(|e| format!("send of message {i} ({len} bytes): {e}"))?;
        }
        Ok(())
    };
    if module == ModuleKind::Memnet {
        let (mut tx, mut rx) = memnet::pair()?;
        tx.set_profile(Profile::zero_copy());
        rx.set_profile(Profile::zero_copy());
        // Share semantics lend the buffer until the output completes (weak integrity): wait
        // before it is freed. The copy semantics return it at once.
        let lent = sem.integrity() == zcio_genie::Integrity::Weak;
        let h = std::thread::spawn(move || {
            send_all(&mut |b| {
                let (t, _) = tx.send(sem, b)?;
                if lent { tx.wait(t) } else { Ok(()) }
            })?;
            tx.flush().map_err(|e| format!("flush: {e}"))
        });
        return Ok((Rx::Memnet(rx), h));
    }
    let (mut tx, mut rx) = stream::pair(module)?;
    tx.set_profile(Profile::zero_copy());
    rx.set_profile(Profile::zero_copy());
    let h = std::thread::spawn(move || send_all(&mut |b| tx.send(sem, b).map(|_| ())));
    Ok((Rx::Stream(rx), h))
}

/// Run the drill; `dir` holds the file module's files. `progress` is told of each run.
pub fn run(d: &Drill, dir: &Path, progress: &mut dyn FnMut(String)) -> DrillTally {
    let mut rng = fastrand::Rng::with_seed(d.seed);
    let ps = zcio_vm::page_size();
    let mut t = DrillTally::default();
    let vm0 = zcio_vm::VmRuntime::get().stats();
    let mut runs = 0;
    for sem in SEMANTICS {
        for buffering in InputBuffering::ALL {
            let mut left = d.messages;
            let mut run = 0;
            while left > 0 {
                let n = rng.usize(5..=40).min(left);
                left -= n;
                let msgs: Vec<(usize, usize)> = (0..n)
                    .map(|_| (length(&mut rng, d.max_bytes), rng.usize(..ps)))
                    .collect();
                let seed = rng.u64(..);
                let offsets: Vec<usize> = (0..n).map(|_| rng.usize(1..ps)).collect();
                progress(format!(
                    "{} {sem} {buffering}: run {run}, {n} messages",
                    d.module
                ));
                let fail = |message: usize, len: usize, offset: usize, what: String| DrillFailure {
                    semantics: sem,
                    buffering,
                    run,
                    message,
                    len,
                    offset,
                    what,
                };
                let kind = RecvKind::ALL[runs % RecvKind::ALL.len()];
                runs += 1;
                let r = one_run(
                    d,
                    dir,
                    (sem, buffering, kind),
                    &msgs,
                    &offsets,
                    seed,
                    run,
                    &mut t,
                );
                match r {
                    Ok(mut f) => t.failures.extend(f.drain(..).map(|(i, w)| {
                        let len = msgs.get(i).map_or(0, |m| m.0);
                        fail(i, len, offsets.get(i).copied().unwrap_or(0), w)
                    })),
                    Err(e) => t.failures.push(fail(0, 0, 0, format!("setting up: {e}"))),
                }
                run += 1;
            }
        }
    }
    let vm = zcio_vm::VmRuntime::get().stats();
    t.refused_moves = vm.refused_moves - vm0.refused_moves;
    t.move_fallback_copies = vm.move_fallback_copies - vm0.move_fallback_copies;
    t
}

/// Where a run's receive buffer lives.
#[derive(Debug, Clone, Copy)]
enum RecvKind {
    /// A `Vec` from the allocator (the heap, or a mapping of its own when large).
    Heap,
    /// A mapping of its own, unmapped at the run's end.
    Mapping,
    /// A mapping of its own made of two mappings side by side (split in the middle, as a
    /// neighbour's different advice splits one): one buffer over two VMAs.
    Split,
}

impl RecvKind {
    const ALL: [RecvKind; 3] = [RecvKind::Heap, RecvKind::Mapping, RecvKind::Split];
}

enum RecvBuf {
    Heap(Vec<u8>),
    Mapped(zcio_vm::Mapping),
}

impl RecvBuf {
    fn new(kind: RecvKind, len: usize) -> zcio_genie::Result<RecvBuf> {
        let map = || zcio_vm::Mapping::anonymous(len, zcio_vm::MapOptions::default());
        Ok(match kind {
            RecvKind::Heap => RecvBuf::Heap(vec![0; len]),
            RecvKind::Mapping => RecvBuf::Mapped(map()?),
            RecvKind::Split => {
                let m = map()?;
                let ps = zcio_vm::page_size();
                let half = m.len() / 2 / ps * ps;
                let r = m.range().sub(half, m.len() - half)?;
                m.advise_range(r, libc::MADV_NOHUGEPAGE, "madvise(MADV_NOHUGEPAGE)")?;
                RecvBuf::Mapped(m)
            }
        })
    }

    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            RecvBuf::Heap(v) => v,
            RecvBuf::Mapped(m) => m.as_mut_slice(),
        }
    }
}

/// One run: a fresh endpoint pair (a fresh file), a fresh receive buffer. Returns the
/// failures by message number.
#[allow(clippy::too_many_arguments)]
fn one_run(
    d: &Drill,
    dir: &Path,
    (sem, buffering, kind): (Semantics, InputBuffering, RecvKind),
    msgs: &[(usize, usize)],
    offsets: &[usize],
    seed: u64,
    run: usize,
    t: &mut DrillTally,
) -> zcio_genie::Result<Vec<(usize, String)>> {
    let mut failures = Vec::new();
    let (mut rx, sender) = if d.module == ModuleKind::File {
        let path = dir.join(format!("zcio-drill-{}-{sem}-{buffering}-{run}", d.seed));
        let mut f = StreamEnd::file(&path)?;
        let _ = std::fs::remove_file(&path);
        f.set_profile(Profile::zero_copy());
        for (i, &(len, off)) in msgs.iter().enumerate() {
            let mut v = vec![0u8; len + off];
            pattern(&mut v[off..], seed, i);
            if let Err(e) = f.send(sem, &v[off..]) {
                failures.push((i, format!("write: {e}")));
                return Ok(failures);
            }
        }
        (Rx::Stream(f), None)
    } else {
        let (rx, h) = start_sender(d.module, sem, msgs.to_vec(), seed)?;
        (rx, Some(h))
    };
    let ps = zcio_vm::page_size();
    let max = msgs.iter().map(|m| m.0).max().unwrap_or(0);
    // The run's own receive buffer, dropped at its end.
    let mut rb = RecvBuf::new(kind, GUARD + ps + max + GUARD)?;
    let buf = rb.as_mut_slice();
    buf.fill(GUARD_BYTE);
    let mut want = Vec::new();
    for (i, &(len, _)) in msgs.iter().enumerate() {
        if d.slow.is_some_and(|_| i % 8 == 7) {
            std::thread::sleep(d.slow.unwrap_or_default());
        }
        let at = GUARD + offsets[i];
        let r = rx.recv(sem, &mut buf[at..at + len], buffering);
        want.resize(len, 0);
        pattern(&mut want, seed, i);
        match r {
            Err(e) => failures.push((i, format!("recv: {e}"))),
            Ok(acc) => {
                t.messages += 1;
                t.bytes += len as u64;
                t.swapped_bytes += acc.swapped_bytes;
                if let Some(k) = buf[at..at + len]
                    .iter()
                    .zip(&want)
                    .position(|(a, b)| a != b)
                {
                    failures.push((
                        i,
                        format!("Ok with wrong bytes from byte {k} (path `{}`)", acc.path),
                    ));
                } else if let Some(k) = buf[..at]
                    .iter()
                    .chain(&buf[at + len..])
                    .position(|&b| b != GUARD_BYTE)
                {
                    failures.push((
                        i,
                        format!(
                            "a guard byte was written ({k} of the guards; path `{}`)",
                            acc.path
                        ),
                    ));
                }
            }
        }
        // The guard bytes again, and the window blank for the next message.
        buf[at..at + len].fill(GUARD_BYTE);
    }
    drop(rx);
    if let Some(h) = sender {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) if failures.is_empty() => failures.push((msgs.len(), e)),
            Ok(Err(_)) => {}
            Err(_) => failures.push((msgs.len(), "the sender panicked".into())),
        }
    }
    Ok(failures)
}
