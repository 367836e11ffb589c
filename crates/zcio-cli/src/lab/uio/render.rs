//! The report's section for paper 004 (user-level I/O): the scalability of N concurrent scan
//! queries by the kernel's buffered reads and by the layer's variants (Figures 5, 7, 8, 9),
//! the kernel variant's CPU split (Figure 6), and fio beside the layer alone.

use crate::lab::uio::devices::{LOOP_MEMORY, ONE_DEVICE};
use crate::lab::uio::measure::{Row, UioSection, VARIANTS};
use crate::report::doc::Block;
use crate::report::plot::{Chart, Scale, Series, Style};
use crate::report::results::Results;
use crate::report::text::{figure, h, p, table, table_of};

/// The `one-device` series' row of `variant`, `cache` and `n`.
pub(super) fn row<'a>(u: &'a UioSection, variant: &str, cache: &str, n: usize) -> Option<&'a Row> {
    row_at(u, ONE_DEVICE, variant, cache, n)
}

/// The row of `variant`, `cache` and `n` with the tables placed as `placement` says.
pub(super) fn row_at<'a>(
    u: &'a UioSection,
    placement: &str,
    variant: &str,
    cache: &str,
    n: usize,
) -> Option<&'a Row> {
    u.rows.iter().find(|r| {
        r.placement == placement && r.variant == variant && r.cache == cache && r.queries == n
    })
}

pub(super) fn max_n(u: &UioSection) -> usize {
    u.rows.iter().map(|r| r.queries).max().unwrap_or(1)
}

/// The findings that head the section.
pub fn findings(r: &Results) -> Vec<String> {
    let Some(u) = r.section::<super::Uio>() else {
        return Vec::new();
    };
    let n = max_n(u);
    let mut out = Vec::new();
    if let Some(w) = &u.layer_unavailable {
        out.push(format!(
            "User-level I/O (paper 004): only SQLite's own reads ran; {w}."
        ));
    }
    for cache in ["warm", "cold"] {
        let get = |v: &str| row(u, v, cache, n);
        let (Some(k), Some(best)) = (get("kernel"), get("uio")) else {
            continue;
        };
        let fastest = [
            "uio",
            "uio_syscall",
            "uio_per_request",
            "uio_syscall_per_request",
            "uio_pool",
        ]
        .into_iter()
        .filter_map(get)
        .max_by(|a, b| a.queries_per_s.total_cmp(&b.queries_per_s))
        .unwrap_or(best);
        let ratio = |a: Option<&Row>, b: Option<&Row>| match (a, b) {
            (Some(a), Some(b)) => format!("{:.2}×", a.queries_per_s / b.queries_per_s),
            _ => "not measured".into(),
        };
        out.push(format!(
            "User-level I/O (paper 004, {cache}: tables {} the page cache): at N = {n} concurrent SQLite scans the layer (ring initiation, registered buffers) runs {:.1} queries/s against the kernel's buffered reads' {:.1}: {:.2}× (the paper: 1.4×; zcio's target is at least 1.3× with the tables in the page cache{}); its fastest variant here, {}, {:.2}×. How the layer's variants differ: reading pages in place over copying them {}, ring over system-call initiation {}, registered over per-request translation {}; direct transfer alone (the layer with system-call initiation and per-request translation, which the kernel path also has) over the kernel's buffered reads {}. {}",
            if cache == "warm" { "in" } else { "out of" },
            best.queries_per_s,
            k.queries_per_s,
            best.over_kernel,
            if cache == "warm" {
                if target_row(u, n).is_some_and(|t| t.over_kernel >= 1.3) {
                    ", by the engine's buffer pool on the layer: met"
                } else {
                    ", by the engine's buffer pool on the layer: not met"
                }
            } else {
                ""
            },
            fastest.variant.replace('_', " "),
            fastest.over_kernel,
            ratio(get("uio"), get("uio_copy")),
            ratio(get("uio"), get("uio_syscall")),
            ratio(get("uio"), get("uio_per_request")),
            ratio(get("uio_syscall_per_request"), get("kernel")),
            match get("kernel_mmap") {
                Some(m) => format!(
                    "SQLite reading the cached pages in place by mmap: {:.2}× the buffered reads.",
                    m.over_kernel
                ),
                None => String::new(),
            }
        ));
        if let Some(pool) = get("uio_pool") {
            out.push(pool_finding(pool, get("uio_pool_no_prefetch"), n, cache));
        }
    }
    out.extend(super::per_device::finding(u));
    out.extend(u.shell.as_ref().and_then(super::shell::finding));
    if let Some(b) = u
        .breakdown
        .iter()
        .find(|b| b.cache == "warm" && b.queries == n)
    {
        out.push(format!(
            "The kernel variant's CPU at N = {n}, tables in the page cache (Figure 6): {:.3} s, of which copying {:.0} % and system calls {:.0} % (estimated from a {:.0} ns-per-KiB copy and a {:.0} ns pread measured in the same run); the paper found copying the largest part and system calls under 10 %.",
            b.cpu_s,
            100.0 * b.copy_s / b.cpu_s.max(1e-12),
            100.0 * b.syscalls_s / b.cpu_s.max(1e-12),
            u.primitives.copy_ns_per_kib,
            u.primitives.pread_ns
        ));
    }
    let best = |pre: &str, io_uring_only: bool| {
        u.raw
            .iter()
            .filter(|x| x.jobs == n && x.contender.starts_with(pre))
            .filter(|x| !io_uring_only || x.contender.contains("io_uring"))
            .max_by(|a, b| a.bytes_per_s.total_cmp(&b.bytes_per_s))
    };
    match (best("uio", false), best("fio_", true)) {
        (Some(l), Some(f)) => out.push(format!(
            "Reading the {n} tables alone (no engine) in the layer's pattern ({} KiB requests, {} in flight per file, O_DIRECT), the layer's best variant ({}) moves {:.0} MB/s and fio's best io_uring configuration ({}) {:.0} MB/s: {:.2}× (zcio's target: match or beat it: {}).",
            u.chunk >> 10,
            u.depth,
            l.contender,
            l.bytes_per_s / 1e6,
            f.contender.trim_start_matches("fio_"),
            f.bytes_per_s / 1e6,
            l.bytes_per_s / f.bytes_per_s,
            if l.bytes_per_s >= 0.95 * f.bytes_per_s {
                "met"
            } else {
                "not met"
            }
        )),
        (Some(_), None) => out.push(format!(
            "fio did not run: {}.",
            u.fio_skipped.as_deref().unwrap_or("unknown")
        )),
        _ => {}
    }
    out
}

/// Where the tables lie, where the run recorded it: in the `one-device` series, and in the
/// per-device one (or why it is missing).
fn placement(u: &UioSection) -> String {
    if u.table_devices == 0 {
        return String::new();
    }
    format!(
        " The {n} tables are {n} files on {} device{}{} (the paper spread its tables over 16 disks){}.",
        u.table_devices,
        if u.table_devices == 1 { "" } else { "s" },
        u.table_fs
            .as_ref()
            .map_or(String::new(), |f| format!(", {f}")),
        super::per_device::placement(u),
        n = max_n(u),
    )
}

/// The variant zcio's warm target is judged on: the engine's buffer pool on the layer, where
/// it ran, else the layer's plain variant.
pub(super) fn target_row(u: &UioSection, n: usize) -> Option<&Row> {
    row(u, "uio_pool", "warm", n).or_else(|| row(u, "uio", "warm", n))
}

fn pool_finding(pool: &Row, bare: Option<&Row>, n: usize, cache: &str) -> String {
    let mib = pool.bytes_pooled as f64 / (1u64 << 20) as f64;
    if cache == "warm" {
        format!(
            "With the engine's own buffer pool on the layer (the tables' chunks kept in the layer's registered buffers across queries, as a database that bypasses the kernel keeps its pool; warm here means warm in that pool), N = {n} scans run at {:.2}× the kernel's buffered reads from the page cache, with {} requests to the device and {mib:.0} MiB found in the pool in the last run.{}",
            pool.over_kernel,
            pool.requests,
            bare.map_or(String::new(), |b| prefetch_finding(pool, b, n)),
        )
    } else {
        format!(
            "With the pool emptied before every run (tables out of memory), the pooled layer runs at {:.2}× the kernel's reads at N = {n}: what keeping the chunks costs when nothing is found ({} requests).",
            pool.over_kernel, pool.requests
        )
    }
}

/// What prefetching the pages after each one read in place did at `n`, warm in the pool:
/// `pool` with it, `bare` without.
fn prefetch_finding(pool: &Row, bare: &Row, n: usize) -> String {
    let mib = pool.bytes_prefetched as f64 / (1u64 << 20) as f64;
    let gain = bare.seconds / pool.seconds;
    format!(
        " Each page SQLite read in place had the bytes after it prefetched into the CPU's cache ({mib:.0} MiB in the last run); without that the same N = {n} scans take {:.3} s (spread {:.3}–{:.3}) against {:.3} s ({:.3}–{:.3}), {:.2}× the kernel's reads, with {:.3} s of user CPU against {:.3} s: {}.",
        bare.seconds,
        bare.seconds_spread[0],
        bare.seconds_spread[1],
        pool.seconds,
        pool.seconds_spread[0],
        pool.seconds_spread[1],
        bare.over_kernel,
        bare.cpu_user_s,
        pool.cpu_user_s,
        if gain >= 1.05 {
            format!("the prefetch makes the scans {gain:.2}× as fast")
        } else if gain <= 0.95 {
            format!(
                "the prefetch costs time here: without it the scans are {:.2}× as fast",
                1.0 / gain
            )
        } else {
            "the prefetch makes no difference beyond 5 % here".to_string()
        }
    )
}

/// Figures 5, 7 and 8 (`qps` false: time for N over time for one) or queries per second, per
/// variant, for `cache` and the tables placed as `placement` says.
pub(super) fn scaling_chart(
    u: &UioSection,
    placement: &str,
    cache: &str,
    title: &str,
    qps: bool,
) -> Chart {
    let series = VARIANTS
        .iter()
        .enumerate()
        .map(|(k, v)| {
            let rows: Vec<&Row> = u
                .rows
                .iter()
                .filter(|r| r.variant == *v && r.cache == cache && r.placement == placement)
                .collect();
            Series {
                name: v.replace('_', " "),
                points: rows
                    .iter()
                    .map(|r| {
                        (
                            r.queries as f64,
                            if qps { r.queries_per_s } else { r.over_one },
                        )
                    })
                    .collect(),
                style: Style::Line,
                band: (!qps).then(|| {
                    rows.iter()
                        .map(|r| {
                            let one = r.seconds / r.over_one;
                            (
                                r.queries as f64,
                                r.seconds_spread[0] / one,
                                r.seconds_spread[1] / one,
                            )
                        })
                        .collect()
                }),
                color: Some(k),
            }
        })
        .collect();
    Chart {
        title: title.into(),
        x_label: "concurrent queries N".into(),
        y_label: if qps {
            "queries per second".into()
        } else {
            "time for N queries / time for one".into()
        },
        x_scale: Scale::Log,
        y_scale: Scale::Log,
        series,
    }
}

/// The section.
pub fn blocks(r: &Results) -> Vec<Block> {
    let Some(u) = r.section::<super::Uio>() else {
        return Vec::new();
    };
    let caches: Vec<&str> = ["warm", "cold"]
        .into_iter()
        .filter(|c| {
            u.rows
                .iter()
                .any(|r| r.cache == *c && r.placement == ONE_DEVICE)
        })
        .collect();
    let mut b = vec![
        h(
            2,
            "Paper 004 — user-level I/O: concurrent scans by a real engine",
        ),
        p(format!(
            "N threads each run the paper's query (`select t.*, t.unique1 from tenk1 t where t.tenthous = 1000`, {} rows returned) with SQLite on its own Wisconsin tenk1 table of {} rows ({:.1} MiB, one database file each), all N at once; the time is until the last finishes, the median of {} rounds with the variants alternating. `kernel`: SQLite's own VFS, a buffered pread per 4 KiB page. `uio`: SQLite's main-database reads through zcio-uio (zcio-sqlite's VFS): read-ahead of {} KiB O_DIRECT requests, {} in flight per table, into buffers registered with the ring, initiated through the submission ring read by a polling kernel thread, completions delivered to the issuing thread's handler; SQLite reads each page in place in the buffer the transfer filled (its memory-mapped interface, xFetch, served from the layer's buffers), pages off the read-ahead's path copied. `uio copy`: every page copied into SQLite's buffer (xRead) instead. `uio syscall`: one io_uring_enter per request instead of the polling thread; `uio per request`: buffers the kernel translates and pins per request instead of registered ones. `uio pool`: `uio` with the engine's own buffer pool on the layer: the tables' chunks kept in the layer's registered buffers across queries, as a database that bypasses the kernel keeps its own pool (filled by one untimed scan of every table before the warm runs, emptied before every cold run). Every variant that reads pages in place asks the CPU, at each page, to bring the next 8 KiB the read-ahead holds into its cache (a copy streams what it reads through the cache; a page read in place would be waited for a cache line at a time); `uio pool no prefetch` is `uio pool` without that. `kernel mmap` (not the paper's): SQLite's memory-mapped reads, pages read in place from the page cache.{} Warm: the tables in the page cache; cold: dropped from it before every run (POSIX_FADV_DONTNEED; a cache below the kernel, such as a hypervisor's, may still hold them). O_DIRECT reads bypass the page cache either way{}. Every query's rows were checked against the kernel VFS's. CPU is the process's (every thread, the polling kernel thread included).",
            u.result_rows,
            u.rows_per_table,
            u.table_bytes as f64 / (1u64 << 20) as f64,
            u.rounds,
            u.chunk >> 10,
            u.depth,
            placement(u),
            match (&u.layer_unavailable, &u.direct_refused) {
                (Some(w), _) => format!(" ({w}: only SQLite's own variants ran)"),
                (None, None) => String::new(),
                (None, Some(w)) => format!(" (here they could not: {w})"),
            }
        )),
    ];
    for cache in &caches {
        b.push(figure(
            &format!("uio-scaling-{cache}"),
            format!(
                "Scalability ({cache}; Figures 5, 7 and 8): time for N concurrent queries over the time for one, per variant (bars: lowest and highest round). Flat is perfect scaling; on {cpus} CPUs a CPU-bound variant grows as N/{cpus}.",
                cpus = r.machine.logical_cpus
            ),
            scaling_chart(
                u,
                ONE_DEVICE,
                cache,
                &format!("N concurrent scans, tables {cache}"),
                false,
            ),
        ));
    }
    if caches.contains(&"warm") {
        b.push(figure(
            "uio-throughput-warm",
            "Throughput with the tables in the page cache (Figure 9's comparison): queries per second against N, per variant.".into(),
            scaling_chart(
                u,
                ONE_DEVICE,
                "warm",
                "Queries per second, tables warm",
                true,
            ),
        ));
    }
    b.push(variants_table(u, ONE_DEVICE));
    b.extend(super::per_device::blocks(u));
    if let Some(s) = &u.shell {
        b.extend(super::shell::blocks(s));
    }
    b.push(kernel_cpu_table(u));
    b.push(layer_alone_table(u));
    b.push(p(super::discussion::closing(u)));
    b
}

/// Every variant, cache state and N of the tables placed as `placement` says: the times, rates
/// and ratios the figures plot.
pub(super) fn variants_table(u: &UioSection, placement: &str) -> Block {
    let rows: Vec<Row> = u
        .rows
        .iter()
        .filter(|r| r.placement == placement)
        .cloned()
        .collect();
    table_of(
        &format!(
            "Per variant, cache state and N{}: median seconds (lowest–highest), queries/s, MB/s, CPU, scaling and the kernel ratio",
            if placement == LOOP_MEMORY {
                ", each table on a memory-backed device of its own"
            } else {
                ""
            }
        ),
        &[
            "cache",
            "N",
            "variant",
            "seconds",
            "queries/s",
            "MB/s",
            "CPU user / sys s",
            "over one",
            "over kernel",
        ],
        &rows,
        |r| {
            vec![
                r.cache.clone(),
                r.queries.to_string(),
                r.variant.replace('_', " "),
                format!(
                    "{:.3} ({:.3}–{:.3})",
                    r.seconds, r.seconds_spread[0], r.seconds_spread[1]
                ),
                format!("{:.1}", r.queries_per_s),
                format!("{:.0}", r.bytes_per_s / 1e6),
                format!("{:.2} / {:.2}", r.cpu_user_s, r.cpu_sys_s),
                format!("{:.2}", r.over_one),
                format!("{:.2}×", r.over_kernel),
            ]
        },
    )
}

/// Figure 6: the kernel variant's CPU split into copies, system calls and the rest.
fn kernel_cpu_table(u: &UioSection) -> Block {
    table(
        &format!(
            "Figure 6: the kernel variant's CPU, split (copy and system calls estimated from a {:.0} ns-per-KiB copy and a {:.0} ns one-byte pread measured in this run)",
            u.primitives.copy_ns_per_kib, u.primitives.pread_ns
        ),
        &["cache", "N", "CPU s", "copy", "system calls", "the rest"],
        u.breakdown
            .iter()
            .map(|x| {
                // A share only of CPU time that holds the estimate (the parts are estimated
                // from primitives, the whole measured).
                let pc = |v: f64| {
                    if v > x.cpu_s {
                        format!("{v:.3} s (more than the CPU measured)")
                    } else if x.cpu_s > 0.0 {
                        format!("{:.3} s ({:.0} %)", v, 100.0 * v / x.cpu_s)
                    } else {
                        format!("{v:.3} s")
                    }
                };
                vec![
                    x.cache.clone(),
                    x.queries.to_string(),
                    format!("{:.3}", x.cpu_s),
                    pc(x.copy_s),
                    pc(x.syscalls_s),
                    pc(x.rest_s),
                ]
            })
            .collect(),
    )
}

/// The tables read alone, no engine: the layer's raw variants beside fio.
fn layer_alone_table(u: &UioSection) -> Block {
    table_of(
        &format!(
            "The tables read alone, no engine, in the layer's pattern ({} KiB sequential O_DIRECT reads, {} in flight per file): the layer's variants and fio{}",
            u.chunk >> 10,
            u.depth,
            u.fio_skipped
                .as_ref()
                .map(|w| format!(" (fio: {w})"))
                .or_else(|| {
                    (!u.fio_failed.is_empty())
                        .then(|| format!(" (fio failed: {})", u.fio_failed.join("; ")))
                })
                .unwrap_or_default()
        ),
        &["contender", "files", "MB/s"],
        &u.raw,
        |x| {
            vec![
                x.contender.replace('_', " "),
                x.jobs.to_string(),
                format!("{:.0}", x.bytes_per_s / 1e6),
            ]
        },
    )
}
