//! The file module's transfer: write the file and read it back in this process.

use super::cost::{CpuTime, cpu_now, summarize};
use super::sender::{Out, output_one};
use super::{
    Buf, PathTally, Res, TransferArgs, accumulate, check, check_region, configure_stream,
    paths_json, prepare,
};
use crate::error::Context;
use std::path::Path;
use std::time::Instant;
use zcio_genie::Accounting;
use zcio_genie::semantics::Allocation;
use zcio_genie::stream::StreamEnd;
use zcio_vm::VmRuntime;

/// Run a file transfer (write the file, read it back in this process) and return its result
/// object.
pub fn run_file_json(a: &TransferArgs) -> Res<serde_json::Value> {
    a.validate()?;
    let parent = a.dir.as_deref().unwrap_or(Path::new("."));
    let dir = tempfile::tempdir_in(parent)
        .with_context(|| format!("a directory in `--dir` {}", parent.display()))?;
    let path = dir.path().join("zcio-transfer.dat");
    let mut f = configure_stream(a, StreamEnd::file(&path).context("the file")?);
    let mut buf = Buf::new(a.bytes, a.offset, a.huge)?;
    let mut rbuf = Buf::new(a.bytes, a.offset, a.huge)?;
    let (mut send_acc, mut recv_acc) = (Accounting::default(), Accounting::default());
    let (mut out_paths, mut in_paths) = (PathTally::new(), PathTally::new());
    let mut lat = Vec::new();
    let mut mismatches = 0;
    let mut first = None;
    let mut scratch = Vec::new();
    let vm0 = VmRuntime::get().stats();
    let mut cpu = CpuTime::default();
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
            cpu.add(i, cpu_now() - cpu0);
            got = check_region(&region, a.seed, i, &mut scratch);
            acc
        } else {
            let acc = fe.recv(a.semantics, rbuf.get(), a.input)?;
            lat.push(t0.elapsed().as_nanos() as u64);
            cpu.add(i, cpu_now() - cpu0);
            if let Some(p) = check(rbuf.get(), a.seed, i, &mut scratch) {
                got = Some(p);
            }
            acc
        };
        if let Some(p) = got {
            mismatches += 1;
            first.get_or_insert((i, p));
        }
        accumulate(&mut send_acc, &mut out_paths, s, i);
        accumulate(&mut recv_acc, &mut in_paths, r, i);
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
