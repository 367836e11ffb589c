//! The per-device series of paper 004's experiment: the same scans with each table on a block
//! device of its own, as the paper's tables were on 16 disks. The devices are memory-backed
//! ([`zcio_uio::memdisk`]): an ext4 file system on a loop device over an image file in tmpfs,
//! one table each, with no seek and no disk latency, so that the cost of the I/O path itself
//! (copies, system calls, translation) decides. Cold there means dropped from each ext4's page
//! cache: the data then comes from the memory-backed device. Where such devices cannot be had
//! (not root, no loop support, no `mkfs.ext4`, a mount refused, too little memory), the series
//! is missing and the section says why.

use super::measure::{Row, Setup, pooled_vfs, probe_layer};
use crate::error::Context;
use crate::transfer::Res;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;
use zcio_uio::memdisk::{DEFAULT_BACKING, MIN_BYTES, MemoryDisks};

/// Placement of the tables as files in one directory, on whatever device holds it.
pub const ONE_DEVICE: &str = "one-device";
/// Placement of each table on a memory-backed loop device of its own.
pub const LOOP_MEMORY: &str = "loop-memory";

/// [`ONE_DEVICE`], for rows written before there was a placement.
pub(super) fn one_device() -> String {
    ONE_DEVICE.into()
}

/// The per-device series' devices, or why the series is missing.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct Devices {
    /// The series' placement of the tables (`loop-memory`).
    pub placement: String,
    /// Devices its tables lay on, one table each (distinct `st_dev`); 0 where it is missing.
    pub count: usize,
    /// What the devices are and what holds their data.
    pub backing: Option<String>,
    /// The file system on each.
    pub fs: Option<String>,
    /// Bytes of each device.
    pub device_bytes: u64,
    /// Devices whose loop driver read its image with direct I/O (the others through the page
    /// cache of the image's file system).
    pub direct_io: usize,
    /// Why the layer's reads of the tables there went through the page cache, if they did.
    pub layer_direct_refused: Option<String>,
    /// Seconds to set the devices up and copy the tables onto them.
    pub setup_s: f64,
    /// Why the series is missing, if it is.
    pub missing: Option<String>,
}

impl Devices {
    /// The series missing, and why.
    pub fn missing(why: impl Into<String>) -> Devices {
        Devices {
            placement: LOOP_MEMORY.into(),
            missing: Some(why.into()),
            ..Default::default()
        }
    }
}

/// Bytes of a memory-backed disk that holds a table of `table` bytes: the table, ext4's
/// journal, inode tables and slack.
pub fn disk_bytes_for(table: u64) -> u64 {
    (table + table / 4 + (32 << 20))
        .next_multiple_of(1 << 20)
        .max(MIN_BYTES)
}

/// Whether `count` disks of `disk` bytes, holding tables of `table` bytes, fit: in `backing`'s
/// free space, and in the memory available beside a page-cache copy and a pool of the tables.
fn memory_allows(count: usize, disk: u64, table: u64, backing: &Path) -> Result<(), String> {
    let mib = |b: u64| b >> 20;
    let disks = count as u64 * disk;
    let need = disks + 2 * count as u64 * table + (512 << 20);
    let free = rustix::fs::statvfs(backing)
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
        .map_err(|e| format!("{}: {e}", backing.display()))?;
    let available = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemAvailable:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|k| k.parse::<u64>().ok())
        })
        .map_or(u64::MAX, |k| k * 1024);
    if free < disks || available < need {
        return Err(format!(
            "{count} memory-backed disks of {} MiB need {} MiB in {} ({} MiB free) and {} MiB of memory with the tables cached and pooled ({} MiB available)",
            mib(disk),
            mib(disks),
            backing.display(),
            mib(free),
            mib(need),
            mib(available.min(u64::MAX >> 1))
        ));
    }
    Ok(())
}

/// Tables copied onto memory-backed disks, one each; the disks go with it (unmounted,
/// detached, their images deleted).
pub struct TableDisks {
    disks: MemoryDisks,
    paths: Vec<PathBuf>,
}

impl TableDisks {
    /// Each of `tables` copied onto a memory-backed disk of its own with its image in
    /// `backing`, and synced to it (so that dropping it from the page cache leaves it on the
    /// device), once the memory is found to hold them; each copy is a step of `progress`.
    pub fn new(
        tables: &[PathBuf],
        backing: &Path,
        progress: &mut dyn FnMut(String),
    ) -> Res<TableDisks> {
        let mut table = 0;
        for t in tables {
            table = table.max(std::fs::metadata(t).with_context(|| t.display())?.len());
        }
        let disk = disk_bytes_for(table);
        memory_allows(tables.len(), disk, table, backing)?;
        let disks = MemoryDisks::new(tables.len(), disk, backing)?;
        let mut paths = Vec::new();
        for (k, (t, m)) in tables.iter().zip(disks.mounts()).enumerate() {
            let to = m.join(t.file_name().ok_or("a table without a file name")?);
            let copied = std::fs::copy(t, &to).and_then(|_| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&to)
                    .and_then(|f| f.sync_all())
            });
            copied.with_context(|| format!("copying {} to {}", t.display(), to.display()))?;
            paths.push(to);
            progress(format!(
                "uio: table {} of {} on its own device",
                k + 1,
                tables.len()
            ));
        }
        Ok(TableDisks { disks, paths })
    }

    /// The tables, each on its disk, in the order given.
    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// The disks.
    pub fn disks(&self) -> &MemoryDisks {
        &self.disks
    }

    /// Take the disks down, saying what could not be.
    pub fn close(self) -> Res<()> {
        Ok(self.disks.close()?)
    }
}

/// The per-device series: every variant of `base` at every N in each of `caches`, the tables
/// copied onto memory-backed disks of their own (their images in [`DEFAULT_BACKING`]); rows
/// into `rows`; the devices' record, which says why the series is missing where the disks
/// could not be had.
pub(super) fn series(
    base: &Setup<'_>,
    caches: &[String],
    serial: &mut u64,
    rows: &mut Vec<Row>,
    progress: &mut dyn FnMut(String),
) -> Res<Devices> {
    let t0 = Instant::now();
    let disks = match TableDisks::new(base.paths, Path::new(DEFAULT_BACKING), progress) {
        Ok(d) => d,
        Err(e) => return Ok(Devices::missing(e.to_string())),
    };
    let setup_s = t0.elapsed().as_secs_f64();
    let max_n = base.paths.len();
    let paths = disks.paths();
    let layer_direct_refused = probe_layer(&paths[0])?.0;
    let pooled = if base
        .variants
        .iter()
        .any(|v| super::measure::pooled_variant(v))
    {
        Some(pooled_vfs(
            "zcio-bench-pool-loop",
            max_n,
            max_n as u64 * base.table_bytes,
        )?)
    } else {
        None
    };
    let set = Setup {
        paths,
        pooled: pooled.as_ref(),
        placement: LOOP_MEMORY,
        ..*base
    };
    for cache in caches {
        set.cache_rows(cache, serial, rows, &mut Vec::new(), progress)?;
    }
    drop(pooled);
    let on = disks.disks().disks();
    let devices = Devices {
        placement: LOOP_MEMORY.into(),
        count: devices_of(paths),
        backing: Some(format!(
            "loop devices, each over an image file in tmpfs at {DEFAULT_BACKING}"
        )),
        fs: fs_of(&paths[0]),
        device_bytes: disks.disks().bytes(),
        direct_io: on.iter().filter(|d| d.direct_io()).count(),
        layer_direct_refused,
        setup_s,
        missing: None,
    };
    disks.close()?;
    Ok(devices)
}

/// Distinct devices the files lie on.
pub(super) fn devices_of(paths: &[PathBuf]) -> usize {
    use std::os::unix::fs::MetadataExt;
    let mut devs: Vec<u64> = paths
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.dev())
        .collect();
    devs.sort_unstable();
    devs.dedup();
    devs.len()
}

/// The file system `path` lies on, by name where known.
pub(super) fn fs_of(path: &Path) -> Option<String> {
    let st = rustix::fs::statfs(path).ok()?;
    let name = match st.f_type as u64 {
        0xEF53 => "ext4".to_string(),
        0x0102_1994 => "tmpfs".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x794C_7630 => "overlayfs".into(),
        other => format!("file system type {other:#x}"),
    };
    Some(name)
}
