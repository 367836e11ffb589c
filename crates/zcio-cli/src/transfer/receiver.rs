//! The receiving process of `zcio transfer` (`zcio peer`): takes the arguments over the
//! control connection, inputs every message, checks every byte, and reports.

use super::cost::{CpuTime, app_work, cpu_now, thread_cpu_now};
use super::wire::{recv_fd, recv_frame, send_frame};
use super::{
    Buf, PathTally, Res, TransferArgs, accumulate, check, check_region, configure_memnet,
    configure_stream,
};
use crate::error::Context;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::Path;
use zcio_genie::breakdown::OpSamples;
use zcio_genie::memnet::{LinkParts, MemnetEndpoint};
use zcio_genie::semantics::Allocation;
use zcio_genie::stream::{ModuleKind, StreamEnd};
use zcio_genie::{Accounting, InputBuffering};

/// What the receiver reports.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct PeerReport {
    pub(super) messages: usize,
    /// Messages per input path.
    #[serde(default)]
    pub(super) paths: PathTally,
    pub(super) mismatches: usize,
    pub(super) first_mismatch: Option<(usize, usize)>,
    pub(super) accounting: Accounting,
    /// The receiver's transfer CPU time.
    pub(super) cpu: CpuTime,
    /// The receiver's VMA count after its first input and after the last.
    pub(super) vma_first: usize,
    pub(super) vma_last: usize,
    pub(super) error: Option<String>,
    /// The receiver's primitive operations, when recorded.
    #[serde(default)]
    pub(super) ops: Vec<OpSamples>,
    /// CPU time of the receiving application's own work (checking, `--app-work-ns`).
    #[serde(default)]
    pub(super) app_cpu_ns: u64,
}

/// The receiving process.
pub fn peer(connect: &Path) -> Res<()> {
    let mut ctl = UnixStream::connect(connect)
        .with_context(|| format!("connect to the sender at {}", connect.display()))?;
    let a: TransferArgs = serde_json::from_slice(&recv_frame(&mut ctl)?)
        .context("the transfer's arguments from the sender")?;
    let mut report = PeerReport::default();
    let r = (|| -> Res<()> {
        enum In {
            M(MemnetEndpoint),
            S(StreamEnd),
        }
        let mut input = match a.module {
            ModuleKind::Memnet => In::M(configure_memnet(
                &a,
                MemnetEndpoint::join(LinkParts::recv_from(&ctl)?, None)?,
            )),
            kind => In::S(configure_stream(
                &a,
                StreamEnd::from_fd(kind, recv_fd(&ctl)?)?,
            )),
        };
        // Pooled-unaligned buffers are deliberately off the page boundary.
        let off = match a.input {
            InputBuffering::PooledAligned => 0,
            InputBuffering::PooledUnaligned if a.offset == 0 => 512,
            _ => a.offset,
        };
        let mut bufs = (0..a.receiver_buffers.max(1))
            .map(|_| Buf::new(a.bytes, off, a.huge))
            .collect::<Res<Vec<Buf>>>()?;
        let n_bufs = bufs.len();
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
                report.cpu.add(i, cpu_now() - cpu0);
                let c0 = thread_cpu_now();
                let bad = check_region(&region, a.seed, i, &mut scratch);
                app_work(a.app_work_ns);
                report.app_cpu_ns += thread_cpu_now() - c0;
                // Done with it: back to the region cache for the next input (Genie's region
                // deallocation into the cache), as the paper's experiments recycled regions;
                // with `--no-recycle`, back to the system (dropped: unmapped).
                match &mut input {
                    In::M(m) if !a.no_recycle => {
                        m.recycle(region, a.semantics);
                    }
                    _ => drop(region),
                }
                (acc, bad)
            } else {
                let buf = &mut bufs[i % n_bufs];
                let acc = match &mut input {
                    In::M(m) => m.recv(a.semantics, buf.get(), a.input)?.1,
                    In::S(s) => s.recv(a.semantics, buf.get(), a.input)?,
                };
                ctl.write_all(b".")?;
                report.cpu.add(i, cpu_now() - cpu0);
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
            accumulate(&mut report.accounting, &mut report.paths, acc, i);
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
