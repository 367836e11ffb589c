//! The sending side of a transfer to a second process (`zcio peer`).

use super::cost::{CpuTime, cpu_now, ops_summary, summarize, thread_cpu_now};
use super::receiver::PeerReport;
use super::wire::{recv_frame, send_fd, send_frame};
use super::{
    Buf, PathTally, Res, TransferArgs, accumulate, configure_memnet, configure_stream, paths_json,
    prepare, zcio_command,
};
use crate::error::{Context, Error};
use std::io::Read;
use std::os::unix::net::UnixListener;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;
use zcio_genie::memnet::MemnetEndpoint;
use zcio_genie::stream::{ModuleKind, StreamEnd};
use zcio_genie::{Accounting, Region};
use zcio_vm::VmRuntime;

pub(super) enum Out {
    Memnet(MemnetEndpoint),
    Stream(StreamEnd),
}

/// Output one message; returns the sender's accounting. Overwrites the buffer after the call if
/// asked, until `done` returns.
pub(super) fn output_one(
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

/// Run a transfer to a second process and return its result object (what `--json` prints).
pub fn run_peer(a: &TransferArgs) -> Res<serde_json::Value> {
    a.validate()?;
    let dir = tempfile::tempdir().context("a directory for the control socket")?;
    let sock_path = dir.path().join("ctl");
    let listener = UnixListener::bind(&sock_path).context("the control socket")?;
    let mut child = zcio_command()?
        .arg("peer")
        .arg("--connect")
        .arg(&sock_path)
        .spawn()
        .context("start the receiving process")?;
    let mut ctl =
        accept_from(&listener, &mut child).context("the receiving process's connection")?;
    send_frame(&mut ctl, &serde_json::to_vec(a)?).context("hand the receiver its arguments")?;
    let mut out = open_output(a, &ctl).with_context(|| format!("open the {} module", a.module))?;
    let sent = send_all(a, &mut out, &mut ctl)?;
    drop(out);
    let report: PeerReport = recv_frame(&mut ctl)
        .ok()
        .and_then(|f| serde_json::from_slice(&f).ok())
        .unwrap_or_default();
    let status = child.wait().context("wait for the receiving process")?;
    if let Some(e) = sent.err {
        return Err(e.context(format!("sender (receiver exit status: {status})")));
    }
    if let Some(e) = &report.error {
        return Err(format!("receiver: {e} (exit status: {status})").into());
    }
    Ok(result(a, sent, report))
}

/// The receiving process's connection; an error naming its exit status, rather than a wait
/// forever, if it ends before it connects.
fn accept_from(listener: &UnixListener, child: &mut std::process::Child) -> Res<UnixStream> {
    match super::accept_child(listener, Some(child), None) {
        Ok(s) => Ok(s),
        Err(super::NoConnection::Ended(status)) => {
            Err(format!("the receiving process ended ({status}) before it connected").into())
        }
        Err(super::NoConnection::Stalled) => Err("the receiving process did not connect".into()),
        Err(super::NoConnection::Io(e)) => Err(e.into()),
    }
}

/// The sender's end of the module, the receiver's handed over the control connection.
fn open_output(a: &TransferArgs, ctl: &UnixStream) -> Res<Out> {
    Ok(match a.module {
        ModuleKind::Memnet => {
            let (mine, theirs, arena) = zcio_genie::memnet::link_parts()?;
            theirs.send_over(ctl)?;
            Out::Memnet(configure_memnet(
                a,
                MemnetEndpoint::join(mine, Some(arena))?,
            ))
        }
        kind => {
            let (tx, rx_end) = zcio_genie::stream::pair_fds(kind)?;
            send_fd(ctl, &rx_end)?;
            drop(rx_end);
            Out::Stream(configure_stream(a, StreamEnd::from_fd(kind, tx)?))
        }
    })
}

/// What the sender measured over the messages it sent.
struct Sent {
    lat: Vec<u64>,
    paths: PathTally,
    acc: Accounting,
    /// Transfer CPU time (ns) and the application's own (making the data).
    cpu: CpuTime,
    app_cpu: u64,
    /// What stopped the sending, if something did.
    err: Option<Error>,
    vma_first: usize,
    vma_last: usize,
    wall_ns: u64,
    ops: Vec<zcio_genie::breakdown::OpSamples>,
    /// How often the output slept until the receiver made room on the wire (memory network).
    wire_sleeps: Option<u64>,
    vm0: zcio_vm::runtime::VmStats,
    vm1: zcio_vm::runtime::VmStats,
}

/// Send the messages, each after the receiver is ready for it; stop at the first failure.
fn send_all(a: &TransferArgs, out: &mut Out, ctl: &mut UnixStream) -> Res<Sent> {
    let mut buf = Buf::new(a.bytes, a.offset, a.huge).context("the sender's buffer")?;
    let mut s = Sent {
        lat: Vec::with_capacity(a.count),
        paths: PathTally::new(),
        acc: Accounting::default(),
        cpu: CpuTime::default(),
        app_cpu: 0,
        err: None,
        vma_first: 0,
        vma_last: 0,
        wall_ns: 0,
        ops: Vec::new(),
        wire_sleeps: None,
        vm0: VmRuntime::get().stats(),
        vm1: Default::default(),
    };
    let gone = |_| Error::msg("peer disappeared during the transfer");
    zcio_genie::breakdown::enable(a.breakdown);
    let wall0 = Instant::now();
    for i in 0..a.count {
        let c0 = thread_cpu_now();
        let link = match out {
            Out::Memnet(m) => Some(m),
            Out::Stream(_) => None,
        };
        let region = prepare(a, &mut buf, i, link)?;
        s.app_cpu += thread_cpu_now() - c0;
        // CPU time and latency cover the transfer only: not making the data, not checking it.
        let cpu0 = cpu_now();
        let t0 = Instant::now();
        let r = output_one(out, a, &mut buf, region, |_| {
            ctl.read_exact(&mut [0u8; 1]).map_err(gone)
        });
        let elapsed = t0.elapsed().as_nanos() as u64;
        s.cpu.add(i, cpu_now() - cpu0);
        // The receiver has checked the message and waits in its next input.
        let r = r.and_then(|x| ctl.read_exact(&mut [0u8; 1]).map_err(gone).map(|_| x));
        // The first message warms the caches and the pools: not a sample of the breakdown.
        if i == 0 {
            zcio_genie::breakdown::discard_message();
        } else {
            zcio_genie::breakdown::end_message();
        }
        match r {
            Ok(x) => {
                s.lat.push(elapsed);
                if i == 0 {
                    s.vma_first = zcio_vm::mapping::vma_count();
                }
                accumulate(&mut s.acc, &mut s.paths, x, i);
            }
            Err(e) => {
                s.err = Some(e.context(format!("message {i}")));
                break;
            }
        }
    }
    s.wall_ns = wall0.elapsed().as_nanos() as u64;
    if let Out::Memnet(m) = out {
        s.wire_sleeps = Some(m.output_wire_sleeps());
    }
    s.ops = zcio_genie::breakdown::take();
    zcio_genie::breakdown::enable(false);
    s.vm1 = VmRuntime::get().stats();
    s.vma_last = zcio_vm::mapping::vma_count();
    Ok(s)
}

/// The result object of a transfer to a second process: both sides' measures.
fn result(a: &TransferArgs, sent: Sent, report: PeerReport) -> serde_json::Value {
    let mut v = summarize(
        a,
        sent.acc,
        report.accounting,
        &sent.lat,
        sent.cpu.plus(report.cpu),
        report.mismatches == 0 && report.messages == a.count,
        report.first_mismatch,
        sent.vm0,
        sent.vm1,
    );
    v["paths"] = paths_json(&sent.paths, &report.paths);
    let mut ops = sent.ops;
    ops.extend(report.ops.iter().cloned());
    if a.breakdown {
        v["ops"] = ops_summary(&ops, a.count.saturating_sub(1)).into();
    }
    let n = a.count as u64;
    v["app_cpu_ns"] = ((sent.app_cpu + report.app_cpu_ns) / n).into();
    v["sender"]["cpu_ns"] = sent.cpu.steady(a.count).into();
    v["sender"]["wire_sleeps"] = sent.wire_sleeps.into();
    v["receiver"]["cpu_ns"] = report.cpu.steady(a.count).into();
    v["wall_ns"] = sent.wall_ns.into();
    v["messages_per_s"] = (a.count as f64 / (sent.wall_ns as f64 / 1e9)).into();
    v["vma"] = serde_json::json!({
        "sender_after_first": sent.vma_first,
        "sender_after_last": sent.vma_last,
        "receiver_after_first": report.vma_first,
        "receiver_after_last": report.vma_last,
    });
    v
}

#[cfg(test)]
mod tests {
    use super::accept_from;
    use std::os::unix::net::{UnixListener, UnixStream};

    #[test]
    fn a_receiver_that_ends_before_it_connects_is_an_error_not_a_wait() {
        let dir = tempfile::tempdir().unwrap();
        let listener = UnixListener::bind(dir.path().join("ctl")).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let t0 = std::time::Instant::now();
        let e = accept_from(&listener, &mut child).unwrap_err().to_string();
        assert!(
            e.contains("ended") && e.contains("before it connected"),
            "{e}"
        );
        assert!(t0.elapsed() < std::time::Duration::from_secs(10));
    }

    #[test]
    fn a_receiver_that_connects_is_accepted_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctl");
        let listener = UnixListener::bind(&path).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let client = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            UnixStream::connect(path).unwrap()
        });
        let s = accept_from(&listener, &mut child).unwrap();
        let _c = client.join().unwrap();
        let flags = rustix::fs::fcntl_getfl(&s).unwrap();
        assert!(!flags.contains(rustix::fs::OFlags::NONBLOCK));
        let _ = child.kill();
        let _ = child.wait();
    }
}
