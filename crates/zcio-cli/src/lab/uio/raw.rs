//! The layer alone and fio, on the tables the queries read, in the layer's requests (no
//! engine): what the device and the layer deliver without SQLite.

use super::measure::{CHUNK, DEPTH, Raw, layer_config, on_each};
use crate::transfer::Res;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;
use zcio_sqlite::readahead::ReadAhead;
use zcio_uio::Uio;

/// The layer's variants run alone.
pub const RAW_VARIANTS: [&str; 4] = [
    "uio",
    "uio_syscall",
    "uio_per_request",
    "uio_syscall_per_request",
];

/// fio's engines run beside them.
pub const FIO_ENGINES: [&str; 5] = [
    "psync",
    "io_uring",
    "io_uring_sqpoll",
    "io_uring_fixedbufs",
    "io_uring_sqpoll_fixedbufs",
];

/// The layer alone: `jobs` threads each scan a table through read-ahead, visiting the
/// buffers in place. Bytes per second.
fn raw_layer(variant: &str, paths: &[PathBuf], jobs: usize) -> Res<f64> {
    let uio = Arc::new(Uio::new(
        layer_config(variant, jobs).expect("a layer variant"),
    )?);
    let handler = zcio_sqlite::readahead::handler(&uio);
    let t0 = Instant::now();
    let total: Result<u64, String> = on_each(&paths[..jobs], "scan", |p| {
        let mut ra =
            ReadAhead::open(uio.clone(), handler, p, CHUNK, DEPTH).map_err(|e| e.to_string())?;
        let mut sum = 0u64;
        let n = ra
            .scan(|b| sum = sum.wrapping_add(b[0] as u64))
            .map_err(|e| e.to_string())?;
        std::hint::black_box(sum);
        Ok(n)
    })
    .into_iter()
    .sum();
    let secs = t0.elapsed().as_secs_f64();
    Ok(total? as f64 / secs)
}

/// fio on `jobs` of the tables with `engine`: bytes per second.
fn fio(engine: &str, paths: &[PathBuf], jobs: usize) -> Res<f64> {
    let mut cmd = std::process::Command::new("fio");
    cmd.args([
        "--output-format=json",
        "--group_reporting",
        "--thread",
        "--readonly",
        "--rw=read",
        "--direct=1",
        "--invalidate=0",
    ])
    .arg(format!("--bs={CHUNK}"))
    .arg(format!("--iodepth={DEPTH}"));
    let (eng, opts): (&str, &[&str]) = match engine {
        "psync" => ("psync", &[]),
        "io_uring" => ("io_uring", &[]),
        "io_uring_sqpoll" => ("io_uring", &["--sqthread_poll=1"]),
        "io_uring_fixedbufs" => ("io_uring", &["--fixedbufs=1"]),
        "io_uring_sqpoll_fixedbufs" => ("io_uring", &["--sqthread_poll=1", "--fixedbufs=1"]),
        other => return Err(format!("unknown fio engine {other}").into()),
    };
    cmd.arg(format!("--ioengine={eng}")).args(opts);
    for (k, p) in paths[..jobs].iter().enumerate() {
        cmd.arg(format!("--name=t{k}"))
            .arg(format!("--filename={}", p.display()));
    }
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(format!(
            "fio ({engine}) failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
        .into());
    }
    // fio may print notes before its JSON.
    let text = String::from_utf8_lossy(&out.stdout);
    let json = text.find('{').map_or("", |i| &text[i..]);
    let v: serde_json::Value = serde_json::from_str(json)?;
    let bw = v["jobs"][0]["read"]["bw_bytes"]
        .as_f64()
        .ok_or("fio printed no read bandwidth")?;
    Ok(bw)
}

/// Why fio cannot run here, if it cannot.
pub fn fio_available() -> Option<String> {
    match std::process::Command::new("fio").arg("--version").output() {
        Ok(o) if o.status.success() => None,
        _ => Some("fio is not installed (apt-get install fio)".into()),
    }
}

/// The layer alone, with 1 and with all files: bytes per second of each raw variant.
pub fn layer_alone(
    paths: &[PathBuf],
    jobs: [usize; 2],
    progress: &mut dyn FnMut(String),
) -> Res<Vec<Raw>> {
    let mut raw = Vec::new();
    for &j in &jobs {
        for v in RAW_VARIANTS {
            raw.push(Raw {
                contender: v.to_string(),
                jobs: j,
                bytes_per_s: raw_layer(v, paths, j)?,
            });
            progress(format!("uio: the layer alone, {v}, {j} files"));
        }
    }
    Ok(raw)
}

/// fio with each engine, with 1 and with all files, into `raw`; an engine this kernel or fio
/// lacks is noted (returned), not fatal.
pub fn fio_contenders(
    paths: &[PathBuf],
    jobs: [usize; 2],
    raw: &mut Vec<Raw>,
    progress: &mut dyn FnMut(String),
) -> Vec<String> {
    let mut fio_failed = Vec::new();
    for &j in &jobs {
        for e in FIO_ENGINES {
            // An engine this kernel or fio lacks is noted, not fatal.
            match fio(e, paths, j) {
                Ok(bytes_per_s) => raw.push(Raw {
                    contender: format!("fio_{e}"),
                    jobs: j,
                    bytes_per_s,
                }),
                Err(err) => fio_failed.push(format!("{e} with {j} files: {err}")),
            }
            progress(format!("uio: fio {e}, {j} files"));
        }
    }
    fio_failed
}
