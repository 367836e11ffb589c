//! Table 10 of paper 000: copy bandwidths by working set and the wire's rate, measured here
//! and now.

use super::measure::Bandwidths;
use crate::report::fit::{self};
use crate::transfer::Res;
use std::time::Instant;

fn median_of(mut f: impl FnMut() -> f64, reps: usize) -> f64 {
    let v: Vec<f64> = (0..reps).map(|_| f()).collect();
    fit::median(&v).unwrap_or(0.0)
}

/// Copy bandwidths by working set, and the wire's rate, measured here and now.
pub fn bandwidths(quick: bool, machine: &crate::report::machine::Machine) -> Res<Bandwidths> {
    let l2 = machine.cache_bytes(2).unwrap_or(512 * 1024);
    let l3 = machine.cache_bytes(3).unwrap_or(8 << 20);
    let cache_bytes = (l2 / 2).max(16 * 1024);
    let memory_bytes = (8 * l3).max(64 << 20);
    let mut sizes = vec![16 * 1024, cache_bytes, l2 * 2, l3 / 2, memory_bytes];
    sizes.sort_unstable();
    sizes.dedup();
    let reps = if quick { 5 } else { 15 };
    let mut copy = Vec::new();
    for &n in &sizes {
        let src = vec![0x5Au8; n];
        let mut dst = vec![0u8; n];
        // Repeat small copies so that each timing spans at least ~8 MiB.
        let iters = ((8 << 20) / n).max(1);
        dst.copy_from_slice(&src);
        let ns = median_of(
            || {
                let t = Instant::now();
                for _ in 0..iters {
                    dst.copy_from_slice(std::hint::black_box(&src));
                    std::hint::black_box(&mut dst);
                }
                t.elapsed().as_nanos() as f64 / iters as f64
            },
            reps,
        );
        copy.push((n, n as f64 / ns));
    }
    Ok(Bandwidths {
        copy,
        wire_gbps: wire_rate(reps)?,
        cache_bytes,
        memory_bytes,
    })
}

/// The memory network's wire as the experiments use it: one thread writes fresh data into its
/// buffer and references its pages into a pipe with `vmsplice`; once all of it is queued, the
/// other thread (on the other CPU, where there is one) reads it out, and only the read — the
/// kernel's one copy, of data last written by another CPU — is timed. 1 MiB at a time.
fn wire_rate(reps: usize) -> Res<f64> {
    let len = 1usize << 20;
    let pipe = zcio_vm::wire::Pipe::new(len)?;
    if zcio_vm::wire::pipe_max_size() < len {
        return Err(format!(
            "pipes hold at most {} bytes here",
            zcio_vm::wire::pipe_max_size()
        )
        .into());
    }
    let (rx, tx) = (pipe.rx, pipe.tx);
    let mut src = zcio_vm::Mapping::anonymous(len, zcio_vm::MapOptions::default())?;
    let mut dst = vec![0u8; len];
    let mut samples = Vec::new();
    std::thread::scope(|sc| -> Res<()> {
        let (go_tx, go_rx) = std::sync::mpsc::channel::<Option<u8>>();
        let (queued_tx, queued_rx) = std::sync::mpsc::channel::<()>();
        let txfd = &tx;
        let data = &mut src;
        let h = sc.spawn(move || -> Result<(), String> {
            while let Ok(Some(k)) = go_rx.recv() {
                data.as_mut_slice().fill(k);
                zcio_vm::wire::vmsplice_all(std::os::fd::AsFd::as_fd(txfd), &[data.as_slice()])
                    .map_err(|e| e.to_string())?;
                queued_tx.send(()).map_err(|e| e.to_string())?;
            }
            Ok(())
        });
        for k in 0..reps.max(1) * 4 + 1 {
            go_tx.send(Some(k as u8))?;
            queued_rx.recv()?;
            let t = Instant::now();
            zcio_vm::wire::read_exact(std::os::fd::AsFd::as_fd(&rx), &mut dst)?;
            samples.push(len as f64 / t.elapsed().as_nanos() as f64);
            if dst[len - 1] != k as u8 {
                return Err("the wire delivered other bytes than were queued".into());
            }
        }
        go_tx.send(None)?;
        h.join().map_err(|_| "wire thread panicked")??;
        Ok(())
    })?;
    samples.remove(0); // warm-up
    Ok(fit::median(&samples).unwrap_or(0.0))
}
