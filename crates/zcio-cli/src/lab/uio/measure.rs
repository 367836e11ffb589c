//! `zcio bench uio`: paper 004's experiment (§III, Figures 5-9). N concurrent scan queries
//! (`select t.*, t.unique1 from tenk1 t where t.tenthous = 1000`), each on its own Wisconsin
//! table in its own database file, run by SQLite on N threads, through:
//! - `kernel`: SQLite's own VFS (buffered `pread` of each page: the kernel copies it from the
//!   page cache);
//! - `uio`: the user-level layer (`zcio-uio` through `zcio-sqlite`'s VFS) with ring initiation
//!   (a polling kernel thread) and registered buffers, SQLite reading each page in place in
//!   the buffer the device filled (`xFetch`);
//! - `uio_copy`: the same, each page copied into SQLite's buffer (`xRead`) instead;
//! - `uio_syscall`: one system call per request instead;
//! - `uio_per_request`: buffers translated by the kernel per request instead;
//! - `uio_syscall_per_request`: both;
//! - `uio_pool`: `uio` with the engine's own buffer pool on the layer
//!   ([`zcio_sqlite::BufferPool`]): the tables' chunks stay in the layer's registered buffers
//!   across queries, as a database that bypasses the kernel keeps its own pool, so that warm
//!   means warm in the pool (filled by one untimed scan of every table first) against warm in
//!   the page cache; cold empties the pool with the page cache;
//! - `uio_pool_no_prefetch`: `uio_pool` without the prefetch into the CPU's cache of the pages
//!   after each one read in place (which every in-place variant has): what the prefetch gives;
//! - `kernel_mmap`: SQLite's own VFS with its memory-mapped I/O (`pragma mmap_size`): pages
//!   read in place from the page cache, with no copy and no system call per page (not the
//!   paper's; what copy-free reading of cached data costs on Linux).
//!
//! With the tables in the page cache (`warm`) and out of it (`cold`, dropped with
//! `POSIX_FADV_DONTNEED` before every run). Every query's rows are checked against the kernel
//! VFS's. Also: the kernel variant's CPU split into copy, system calls and the rest (Figure
//! 6, estimated from primitives measured in the same run), and fio on the same files and
//! pattern beside the layer alone (no engine).

use super::devices::{self, Devices, ONE_DEVICE, devices_of, fs_of, one_device};
pub use super::print::run;
use super::raw::{FIO_ENGINES, RAW_VARIANTS, fio_available, fio_contenders, layer_alone};
use crate::report::fit;
use crate::transfer::Res;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use zcio_sqlite::tables::{self, QueryResult};
use zcio_sqlite::{BufferPool, ReadStats, UioVfs};
use zcio_uio::{Config, Initiation, Translation, Uio};

/// Bytes a read-ahead request asks for.
pub const CHUNK: usize = 128 << 10;
/// Read-ahead requests in flight per table.
pub const DEPTH: usize = 4;

/// Arguments of `zcio bench uio`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct UioArgs {
    /// Rows per table (default 60 000, the paper's: six rows match).
    #[arg(long)]
    pub rows: Option<u64>,
    /// Numbers of concurrent queries (default 1,2,4,8,16).
    #[arg(long, value_delimiter = ',')]
    pub queries: Option<Vec<usize>>,
    /// Rounds: every variant once per round, alternating (default 3).
    #[arg(long)]
    pub rounds: Option<usize>,
    /// Cache states to run: warm, cold (default both).
    #[arg(long, value_delimiter = ',')]
    pub cache: Option<Vec<String>>,
    /// Leave fio out.
    #[arg(long)]
    pub no_fio: bool,
    /// Leave out the per-device series (each table on a memory-backed loop device of its own).
    #[arg(long)]
    pub no_devices: bool,
    /// Leave out the scans through the `sqlite3` shell (with zcio's VFS loaded as an
    /// extension, built from this checkout with cargo).
    #[arg(long)]
    pub no_shell: bool,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
}

impl UioArgs {
    pub(super) fn queries(&self) -> Vec<usize> {
        let mut v = self.queries.clone().unwrap_or_else(|| vec![1, 2, 4, 8, 16]);
        v.retain(|n| (1..=32).contains(n));
        v.sort_unstable();
        v.dedup();
        if v.is_empty() {
            v.push(1);
        }
        v
    }

    fn caches(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .cache
            .clone()
            .unwrap_or_else(|| vec!["warm".into(), "cold".into()]);
        v.retain(|c| c == "warm" || c == "cold");
        if v.is_empty() {
            v.push("warm".into());
        }
        v
    }

    fn rounds(&self) -> usize {
        self.rounds.unwrap_or(3).max(1)
    }

    /// Steps `measure` reports (for progress bars).
    pub fn steps(&self) -> usize {
        let warm = usize::from(self.caches().iter().any(|c| c == "warm"));
        let series = self.caches().len() * self.queries().len() * self.rounds() * VARIANTS.len();
        let max_n = self.queries().last().copied().unwrap_or(1);
        series
            + warm
            + if self.no_devices {
                0
            } else {
                series + warm + max_n
            }
            + if self.no_fio {
                0
            } else {
                FIO_ENGINES.len() * 2
            }
            + RAW_VARIANTS.len() * 2
            + if self.no_shell {
                0
            } else {
                super::shell::steps(&self.caches(), self.rounds())
            }
    }
}

/// The variants, in the order of the rows.
pub const VARIANTS: [&str; 9] = [
    "kernel",
    "uio",
    "uio_copy",
    "uio_syscall",
    "uio_per_request",
    "uio_syscall_per_request",
    "uio_pool",
    "uio_pool_no_prefetch",
    "kernel_mmap",
];

/// Whether `variant` reads through the engine's buffer pool (the one pooled layer of a series).
pub(super) fn pooled_variant(variant: &str) -> bool {
    variant.starts_with("uio_pool")
}

/// Most bytes the `uio_pool` variant's pool holds (its buffers are registered, so pinned).
pub const POOL_BUDGET: u64 = 1536 << 20;

pub(super) fn layer_config(variant: &str, queries: usize) -> Option<Config> {
    let (initiation, translation) = match variant {
        "uio" | "uio_copy" | "uio_pool" | "uio_pool_no_prefetch" => {
            (Initiation::Polled, Translation::Registered)
        }
        "uio_syscall" => (Initiation::Syscall, Translation::Registered),
        "uio_per_request" => (Initiation::Polled, Translation::PerRequest),
        "uio_syscall_per_request" => (Initiation::Syscall, Translation::PerRequest),
        _ => return None,
    };
    Some(Config {
        initiation,
        translation,
        entries: 256,
        // A window, one side read, and a window's worth dropped on a restart, per query.
        buffers: queries * (2 * DEPTH + 1) + 8,
        buf_size: CHUNK,
        sqpoll_idle_ms: 10,
    })
}

/// One variant, cache state, number of queries and placement of the tables.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Row {
    /// One of [`VARIANTS`].
    pub variant: String,
    /// Where the tables lay: `one-device` (files in one directory) or `loop-memory` (each on
    /// an ext4 file system of its own on a memory-backed loop device of its own).
    #[serde(default = "one_device")]
    pub placement: String,
    /// `warm` (tables in the page cache) or `cold`.
    pub cache: String,
    /// Concurrent queries (N).
    pub queries: usize,
    /// Seconds until all N finished: median over rounds.
    pub seconds: f64,
    /// Lowest and highest round.
    pub seconds_spread: [f64; 2],
    /// N / seconds.
    pub queries_per_s: f64,
    /// Table bytes scanned per second.
    pub bytes_per_s: f64,
    /// User CPU seconds of the process (every thread, the polling kernel thread included).
    pub cpu_user_s: f64,
    /// System CPU seconds of the process.
    pub cpu_sys_s: f64,
    /// Seconds for N over seconds for one, same variant and cache (the paper's scalability).
    pub over_one: f64,
    /// Queries per second over the kernel variant's, same N, cache and placement.
    pub over_kernel: f64,
    /// Requests the layer made (0 for `kernel`).
    pub requests: u64,
    /// Bytes copied from the layer's buffers into the engine's (0 for `kernel`).
    pub bytes_copied: u64,
    /// Bytes the engine read in place in the layer's buffers (0 for `kernel`).
    pub bytes_fetched: u64,
    /// Bytes found in the engine's buffer pool, without a request (`uio_pool` only).
    #[serde(default)]
    pub bytes_pooled: u64,
    /// Bytes the CPU was asked to bring into its cache ahead of the engine's reads in place.
    #[serde(default)]
    pub bytes_prefetched: u64,
}

/// The kernel variant's CPU time split (Figure 6), estimated from primitives measured in the
/// same run: copy = bytes read × the copy cost per byte; system calls = reads × the cost of
/// a one-byte `pread`; the rest is the engine.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Breakdown {
    /// Cache state.
    pub cache: String,
    /// N.
    pub queries: usize,
    /// CPU seconds (user and system).
    pub cpu_s: f64,
    /// Of which copying (estimated).
    pub copy_s: f64,
    /// Of which system calls (estimated).
    pub syscalls_s: f64,
    /// The rest.
    pub rest_s: f64,
}

/// Primitives measured for the breakdown.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Primitives {
    /// Nanoseconds to copy a KiB from a buffer larger than the cache.
    pub copy_ns_per_kib: f64,
    /// Nanoseconds of a one-byte `pread` of a cached file.
    pub pread_ns: f64,
}

/// A sequential-read rate on the tables, without the engine.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Raw {
    /// A fio engine (`fio_psync`, `fio_io_uring`, `fio_io_uring_sqpoll`, ...) or a layer
    /// variant (`uio`, ...).
    pub contender: String,
    /// Files read at once (one job or thread each).
    pub jobs: usize,
    /// Bytes per second, all files together.
    pub bytes_per_s: f64,
}

/// Everything `zcio bench uio` measured.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct UioSection {
    /// Rows per table.
    pub rows_per_table: u64,
    /// Bytes of one table's file.
    pub table_bytes: u64,
    /// Rounds.
    pub rounds: usize,
    /// Read-ahead request size, bytes.
    pub chunk: usize,
    /// Read-ahead requests in flight per table.
    pub depth: usize,
    /// Whether the tables' file system took `O_DIRECT` (else the layer read through the page
    /// cache, and says why).
    pub direct: bool,
    /// Why not, if not.
    pub direct_refused: Option<String>,
    /// Devices the tables' files lie on in the `one-device` series (distinct `st_dev`; the
    /// paper used 16 disks).
    #[serde(default)]
    pub table_devices: usize,
    /// The tables' file system.
    #[serde(default)]
    pub table_fs: Option<String>,
    /// The per-device series' devices, or why it is missing (absent from a run before it).
    #[serde(default)]
    pub devices: Option<Devices>,
    /// Why the layer's variants did not run, if they did not (no io_uring here, say).
    #[serde(default)]
    pub layer_unavailable: Option<String>,
    /// Rows a query returned (the same for every variant: checked).
    pub result_rows: u64,
    /// Per variant, cache, N and placement.
    pub rows: Vec<Row>,
    /// The kernel variant's CPU split (the `one-device` series).
    pub breakdown: Vec<Breakdown>,
    /// What the split was estimated from.
    pub primitives: Primitives,
    /// fio and the layer alone, reading the tables sequentially in the layer's requests
    /// (warm: the layer and fio's direct reads bypass the page cache anyway).
    pub raw: Vec<Raw>,
    /// Why fio is missing, if it is.
    pub fio_skipped: Option<String>,
    /// The scans through the `sqlite3` shell, zcio's VFS loaded as an extension beside the
    /// shell's own (absent from a run before it, or with `--no-shell`).
    #[serde(default)]
    pub shell: Option<super::shell::ShellSeries>,
    /// fio runs that failed, and why (the others stand).
    #[serde(default)]
    pub fio_failed: Vec<String>,
}

/// This process's CPU so far: the total to the nanosecond, and the user and system clock
/// ticks (`/proc/self/stat`) that say how it splits.
#[derive(Debug, Clone, Copy)]
struct CpuSample {
    total_s: f64,
    user_ticks: f64,
    sys_ticks: f64,
}

fn process_cpu() -> CpuSample {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = s.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // After the command's ')': state is field 3, utime 14 and stime 15 (1-based in proc(5)).
    CpuSample {
        total_s: t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9,
        user_ticks: tick(11),
        sys_ticks: tick(12),
    }
}

/// CPU seconds (user, system) between two samples: the exact total, split as the ticks
/// between them split (a run shorter than a tick has none: all of it counts as user time).
fn cpu_between(a: CpuSample, b: CpuSample) -> (f64, f64) {
    let total = (b.total_s - a.total_s).max(0.0);
    let (u, s) = (b.user_ticks - a.user_ticks, b.sys_ticks - a.sys_ticks);
    if u + s <= 0.0 {
        return (total, 0.0);
    }
    (total * u / (u + s), total * s / (u + s))
}

fn drop_cache(paths: &[PathBuf]) -> Res<()> {
    for p in paths {
        let f = std::fs::File::open(p)?;
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)?;
    }
    Ok(())
}

fn warm_cache(paths: &[PathBuf]) -> Res<()> {
    for p in paths {
        std::hint::black_box(std::fs::read(p)?);
    }
    Ok(())
}

struct Run {
    seconds: f64,
    cpu: (f64, f64),
    stats: ReadStats,
}

/// The `uio_pool` variant's layer and VFS `name`, for every run of a series (its pool is what
/// stays warm): buffers for the reads of `max_n` queries and a pool of up to all `tables`
/// bytes, within [`POOL_BUDGET`].
pub(super) fn pooled_vfs(name: &str, max_n: usize, tables: u64) -> Res<UioVfs> {
    let chunks = tables.min(POOL_BUDGET).div_ceil(CHUNK as u64) as usize + max_n;
    let mut c = layer_config("uio_pool", max_n).expect("a layer variant");
    c.buffers += chunks;
    let uio = Arc::new(Uio::new(c)?);
    let pool = Arc::new(BufferPool::new(chunks));
    Ok(UioVfs::register_pooled(name, uio, CHUNK, DEPTH, pool)?)
}

/// Run `n` queries at once by `variant`, each checked against `want`; `uio_pool` and
/// `uio_pool_no_prefetch` through `pooled`, the others through a layer of their own.
fn run_queries(
    variant: &str,
    paths: &[PathBuf],
    want: &[QueryResult],
    n: usize,
    serial: u64,
    pooled: Option<&UioVfs>,
) -> Res<Run> {
    let own = match layer_config(variant, n) {
        Some(c) if !pooled_variant(variant) => {
            let uio = Arc::new(Uio::new(c)?);
            Some(UioVfs::register(
                &format!("zcio-bench-{serial}"),
                uio,
                CHUNK,
                DEPTH,
            )?)
        }
        _ => None,
    };
    let layer = if pooled_variant(variant) {
        let p = pooled.ok_or("uio_pool: no pooled layer")?;
        p.set_prefetch(if variant == "uio_pool_no_prefetch" {
            0
        } else {
            zcio_sqlite::readahead::PREFETCH
        });
        Some(p)
    } else {
        own.as_ref()
    };
    let before = layer.map(|v| v.stats()).unwrap_or_default();
    let name = layer.as_ref().map(|v| v.name().to_string());
    let cpu0 = process_cpu();
    let t0 = Instant::now();
    let got: Vec<rusqlite_result::R> = on_each(&paths[..n], "query", |p| {
        let c = tables::open(p, name.as_deref()).map_err(|e| e.to_string())?;
        if variant != "kernel" && variant != "uio_copy" {
            tables::use_mmap(&c, 1 << 30).map_err(|e| e.to_string())?;
        }
        let r = tables::scan(&c).map_err(|e| e.to_string());
        drop(c);
        r
    });
    let seconds = t0.elapsed().as_secs_f64();
    let cpu1 = process_cpu();
    for (k, g) in got.into_iter().enumerate() {
        let g = g.map_err(|e| format!("{variant}: query {k}: {e}"))?;
        if g != want[k] {
            return Err(format!(
                "{variant}: query {k} returned {} rows (digest {:#x}), the kernel VFS {} ({:#x})",
                g.rows, g.digest, want[k].rows, want[k].digest
            )
            .into());
        }
    }
    let st = layer.map(|v| v.stats()).unwrap_or_default().since(&before);
    if st.fallback_files > 0 {
        return Err(format!(
            "{variant}: {} tables not read through the layer",
            st.fallback_files
        )
        .into());
    }
    Ok(Run {
        seconds,
        cpu: cpu_between(cpu0, cpu1),
        stats: st,
    })
}

/// `work` on each of `paths` at once, a thread each (`what` threads): their results, in order;
/// a thread that panicked is an error saying so.
pub(super) fn on_each<T: Send>(
    paths: &[PathBuf],
    what: &str,
    work: impl Fn(&Path) -> Result<T, String> + Sync,
) -> Vec<Result<T, String>> {
    let work = &work;
    std::thread::scope(|s| {
        let hs: Vec<_> = paths.iter().map(|p| s.spawn(move || work(p))).collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(format!("a {what} thread panicked")))
            })
            .collect()
    })
}

mod rusqlite_result {
    /// A query's result or its error's text.
    pub type R = Result<zcio_sqlite::tables::QueryResult, String>;
}

/// Copy and system-call costs, measured here.
fn primitives(path: &Path) -> Res<Primitives> {
    let src = vec![1u8; 64 << 20];
    let mut dst = vec![0u8; 4096];
    let t0 = Instant::now();
    for c in src.chunks(4096) {
        dst.copy_from_slice(c);
        std::hint::black_box(&dst);
    }
    let copy_ns_per_kib = t0.elapsed().as_nanos() as f64 / (src.len() / 1024) as f64;
    let f = std::fs::File::open(path)?;
    let mut one = [0u8; 1];
    let n = 20_000;
    let t0 = Instant::now();
    for k in 0..n {
        rustix::io::pread(&f, &mut one, (k % 4096) as u64)?;
    }
    let pread_ns = t0.elapsed().as_nanos() as f64 / n as f64;
    Ok(Primitives {
        copy_ns_per_kib,
        pread_ns,
    })
}

/// Run the experiment; `progress` is told each step.
pub fn measure(a: &UioArgs, progress: &mut dyn FnMut(String)) -> Res<UioSection> {
    let rows_per_table = a.rows.unwrap_or(60_000).max(10_001);
    let queries = a.queries();
    let max_n = *queries.last().expect("at least one");
    let rounds = a.rounds();
    let dir = tempfile::tempdir()?;
    let (paths, table_bytes, want) = make_tables(dir.path(), max_n, rows_per_table, progress)?;
    let (direct_refused, layer_unavailable) = probe_layer(&paths[0])?;
    let variants: Vec<&str> = VARIANTS
        .iter()
        .copied()
        .filter(|v| layer_unavailable.is_none() || layer_config(v, 1).is_none())
        .collect();
    let primitives = primitives(&paths[0])?;
    let base = Setup {
        paths: &paths,
        want: &want,
        variants: &variants,
        queries: &queries,
        rounds,
        table_bytes,
        primitives: &primitives,
        pooled: None,
        placement: ONE_DEVICE,
    };
    let pooled = if variants.iter().any(|v| pooled_variant(v)) {
        Some(pooled_vfs(
            "zcio-bench-pool",
            max_n,
            max_n as u64 * table_bytes,
        )?)
    } else {
        None
    };
    let set = Setup {
        pooled: pooled.as_ref(),
        ..base
    };
    let mut rows = Vec::new();
    let mut breakdown = Vec::new();
    let mut serial = 0u64;
    for cache in a.caches() {
        set.cache_rows(&cache, &mut serial, &mut rows, &mut breakdown, progress)?;
    }
    drop(pooled);
    // The same scans through the sqlite3 shell, zcio's VFS loaded into it as an extension.
    let shell = (!a.no_shell).then(|| {
        super::shell::series(
            &paths,
            table_bytes,
            want[0].rows,
            &a.caches(),
            rounds,
            progress,
        )
    });
    // The same scans, each table on a device of its own (with a pool of its own).
    let devices = if a.no_devices {
        Devices::missing("left out (--no-devices)")
    } else {
        devices::series(&base, &a.caches(), &mut serial, &mut rows, progress)?
    };
    // The layer alone and fio, on the same files and pattern.
    let jobs = [1, max_n];
    let mut raw = if layer_unavailable.is_none() {
        layer_alone(&paths, jobs, progress)?
    } else {
        Vec::new()
    };
    let fio_skipped = if a.no_fio {
        Some("left out (--no-fio)".to_string())
    } else {
        fio_available()
    };
    let fio_failed = if fio_skipped.is_none() {
        fio_contenders(&paths, jobs, &mut raw, progress)
    } else {
        Vec::new()
    };
    Ok(UioSection {
        rows_per_table,
        table_bytes,
        rounds,
        chunk: CHUNK,
        depth: DEPTH,
        direct: direct_refused.is_none() && layer_unavailable.is_none(),
        direct_refused,
        table_devices: devices_of(&paths),
        table_fs: fs_of(&paths[0]),
        devices: Some(devices),
        layer_unavailable,
        result_rows: want[0].rows,
        rows,
        breakdown,
        primitives,
        raw,
        fio_skipped,
        fio_failed,
        shell,
    })
}

/// What every run of a series shares.
#[derive(Clone, Copy)]
pub(super) struct Setup<'a> {
    pub(super) paths: &'a [PathBuf],
    pub(super) want: &'a [QueryResult],
    pub(super) variants: &'a [&'a str],
    pub(super) queries: &'a [usize],
    pub(super) rounds: usize,
    pub(super) table_bytes: u64,
    pub(super) primitives: &'a Primitives,
    pub(super) pooled: Option<&'a UioVfs>,
    /// Where the tables lie ([`ONE_DEVICE`], [`super::devices::LOOP_MEMORY`]).
    pub(super) placement: &'static str,
}

impl Setup<'_> {
    /// Every variant at every N with the tables `cache` (`warm` or `cold`): rows (and the
    /// kernel's CPU split) into `rows` and `breakdown`.
    pub(super) fn cache_rows(
        &self,
        cache: &str,
        serial: &mut u64,
        rows: &mut Vec<Row>,
        breakdown: &mut Vec<Breakdown>,
        progress: &mut dyn FnMut(String),
    ) -> Res<()> {
        let (paths, want, variants) = (self.paths, self.want, self.variants);
        let max_n = *self.queries.last().expect("at least one");
        if cache == "warm" {
            warm_cache(paths)?;
            if let Some(p) = self.pooled {
                // The pool warm: every table scanned through it once, untimed.
                run_queries("uio_pool", paths, want, max_n, 0, Some(p))?;
                progress("uio: uio_pool fills its pool".into());
            }
        }
        let mut one: Vec<f64> = vec![f64::NAN; variants.len()];
        for &n in self.queries {
            let mut secs: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
            let mut cpus: Vec<Vec<(f64, f64)>> = vec![Vec::new(); variants.len()];
            let mut last: Vec<ReadStats> = vec![ReadStats::default(); variants.len()];
            for r in 0..self.rounds {
                for k in 0..variants.len() {
                    let v = (k + r) % variants.len();
                    if cache == "cold" {
                        drop_cache(&paths[..n])?;
                        if let Some(p) = self.pooled.and_then(|v| v.pool()) {
                            p.clear();
                        }
                    }
                    *serial += 1;
                    let run = run_queries(variants[v], paths, want, n, *serial, self.pooled)?;
                    secs[v].push(run.seconds);
                    cpus[v].push(run.cpu);
                    last[v] = run.stats;
                    progress(format!(
                        "uio: {} {cache} N={n} {}",
                        variants[v], self.placement
                    ));
                }
            }
            let med: Vec<f64> = secs
                .iter()
                .map(|s| fit::median(s).unwrap_or(f64::NAN))
                .collect();
            if n == self.queries[0] {
                one.clone_from(&med);
            }
            for (v, name) in variants.iter().enumerate() {
                let cu = fit::median(&cpus[v].iter().map(|c| c.0).collect::<Vec<_>>())
                    .unwrap_or(f64::NAN);
                let cs = fit::median(&cpus[v].iter().map(|c| c.1).collect::<Vec<_>>())
                    .unwrap_or(f64::NAN);
                rows.push(Row {
                    variant: name.to_string(),
                    placement: self.placement.to_string(),
                    cache: cache.to_string(),
                    queries: n,
                    seconds: med[v],
                    seconds_spread: fit::spread(&secs[v]),
                    queries_per_s: n as f64 / med[v],
                    bytes_per_s: (n as u64 * self.table_bytes) as f64 / med[v],
                    cpu_user_s: cu,
                    cpu_sys_s: cs,
                    over_one: med[v] / one[v],
                    over_kernel: med[0] / med[v],
                    requests: last[v].requests,
                    bytes_copied: last[v].bytes_copied,
                    bytes_fetched: last[v].bytes_fetched,
                    bytes_pooled: last[v].bytes_pooled,
                    bytes_prefetched: last[v].bytes_prefetched,
                });
                if *name == "kernel" {
                    let bytes = (n as u64 * self.table_bytes) as f64;
                    breakdown.push(kernel_breakdown(cache, n, bytes, self.primitives, cu, cs));
                }
            }
        }
        Ok(())
    }
}

/// The `max_n` tables, each of `rows_per_table` rows, in `dir`: their paths, the size of one, and
/// each one's scan (the result every variant must return).
fn make_tables(
    dir: &Path,
    max_n: usize,
    rows_per_table: u64,
    progress: &mut dyn FnMut(String),
) -> Res<(Vec<PathBuf>, u64, Vec<QueryResult>)> {
    let paths: Vec<PathBuf> = (0..max_n)
        .map(|k| dir.join(format!("tenk1-{k}.db")))
        .collect();
    for (k, p) in paths.iter().enumerate() {
        tables::create_tenk1(p, rows_per_table, k as u64 + 1)?;
        progress(format!("uio: table {} of {max_n}", k + 1));
    }
    let table_bytes = std::fs::metadata(&paths[0])?.len();
    let want: Vec<QueryResult> = paths
        .iter()
        .map(|p| tables::scan(&tables::open(p, None)?))
        .collect::<Result<_, _>>()?;
    Ok((paths, table_bytes, want))
}

/// Whether the layer goes direct here (`None`, or why it buffers), and whether it works here at
/// all (io_uring may be missing or disabled): if not, only SQLite's own variants run, and the
/// section says why.
pub(super) fn probe_layer(path: &Path) -> Res<(Option<String>, Option<String>)> {
    Ok(
        match Uio::new(layer_config("uio_syscall", 1).expect("a layer variant")) {
            Ok(probe) => {
                let t = probe.open(path, false)?;
                (probe.buffered_because(t), None)
            }
            Err(e) => (
                None,
                Some(format!("the user-level layer cannot run here: {e}")),
            ),
        },
    )
}

/// Where the kernel variant's CPU time (`cu` user, `cs` system) went for `n` queries reading
/// `bytes`: the copies and the system calls the primitives predict, and the rest.
fn kernel_breakdown(
    cache: &str,
    n: usize,
    bytes: f64,
    primitives: &Primitives,
    cu: f64,
    cs: f64,
) -> Breakdown {
    let copy_s = bytes / 1024.0 * primitives.copy_ns_per_kib / 1e9;
    let syscalls_s = bytes / 4096.0 * primitives.pread_ns / 1e9;
    let cpu_s = cu + cs;
    Breakdown {
        cache: cache.to_string(),
        queries: n,
        cpu_s,
        copy_s,
        syscalls_s,
        rest_s: (cpu_s - copy_s - syscalls_s).max(0.0),
    }
}
