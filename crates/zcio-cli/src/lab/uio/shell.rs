//! The scans through the `sqlite3` shell: the tables of the section's experiment scanned by
//! the paper's query in the shell of this machine (its own SQLite, not zcio's bundled one), one
//! table after another (the shell runs one statement at a time), by the shell's own VFS and by
//! zcio's VFS loaded as an extension (`crates/zcio-sqlite-ext`), warm and cold. Each round is a
//! fresh shell process: warm, it scans every table once untimed (the page cache and zcio's
//! pool filled) and then the timed scans; cold, the tables are dropped from the page cache
//! first (`posix_fadvise(POSIX_FADV_DONTNEED)` on each file) and the process's pool starts
//! empty. The time is the sum of the shell's own `.timer` over the timed scans.

use super::measure::POOL_BUDGET;
use crate::report::fit;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;
use zcio_sqlite::tables::QUERY;

/// The ways the shell reads, in the order of the rows.
pub const SHELL_VARIANTS: [&str; 3] = ["own", "zcio", "zcio_in_place"];

/// What a variant is, for the table.
fn label(v: &str) -> &'static str {
    match v {
        "own" => "the shell's own VFS (unix: a pread per page)",
        "zcio" => "zcio's VFS, loaded (pool, pages copied out)",
        "zcio_in_place" => "zcio's VFS, pages read in place (mmap_size)",
        _ => "unknown",
    }
}

/// One variant and cache state through the shell.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ShellRow {
    /// `own` (the shell's own VFS), `zcio` (the extension: the pool on the layer, pages copied
    /// out of it), or `zcio_in_place` (the same with `pragma mmap_size`, pages read in place).
    pub variant: String,
    /// `warm` or `cold`.
    pub cache: String,
    /// Seconds of the timed scans (the sum of the shell's `.timer`, which prints milliseconds):
    /// median over rounds.
    pub seconds: f64,
    /// Lowest and highest round.
    pub seconds_spread: [f64; 2],
    /// User CPU seconds of those scans (the shell's `.timer`): median.
    pub cpu_user_s: f64,
    /// System CPU seconds of those scans: median.
    pub cpu_sys_s: f64,
    /// Seconds of the whole shell process (start, load, opens, the untimed scans): median.
    pub process_seconds: f64,
    /// The shell's own VFS's seconds over these, same cache state.
    pub over_own: f64,
    /// Requests the layer made during the timed scans (the last round; zcio only).
    pub requests: u64,
    /// Bytes found in the pool during the timed scans (the last round; zcio only).
    pub bytes_pooled: u64,
    /// Bytes copied out of the layer's buffers into SQLite's (the last round; zcio only).
    pub bytes_copied: u64,
    /// Bytes SQLite read in place in the layer's buffers (the last round; zcio only).
    pub bytes_fetched: u64,
}

/// The scans through the `sqlite3` shell.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ShellSeries {
    /// Why the series is missing (no shell, the extension not built), if it is.
    pub missing: Option<String>,
    /// The shell's SQLite version.
    pub sqlite_version: Option<String>,
    /// Tables scanned (one after another) in a timed pass.
    pub tables: usize,
    /// Rounds (fresh shell processes) per variant and cache state.
    pub rounds: usize,
    /// The extension's pool, MiB (`ZCIO_SQLITE_POOL_MIB`).
    pub pool_mib: u64,
    /// How cold was made.
    pub cache_drop: String,
    /// Per variant and cache state.
    pub rows: Vec<ShellRow>,
}

impl ShellSeries {
    fn missing(why: String) -> ShellSeries {
        ShellSeries {
            missing: Some(why),
            sqlite_version: None,
            tables: 0,
            rounds: 0,
            pool_mib: 0,
            cache_drop: String::new(),
            rows: Vec::new(),
        }
    }
}

/// Steps [`series`] reports, for `caches` and `rounds`.
pub fn steps(caches: &[String], rounds: usize) -> usize {
    1 + caches
        .iter()
        .map(|c| variants(c).len() * shell_rounds(rounds))
        .sum::<usize>()
}

fn shell_rounds(rounds: usize) -> usize {
    rounds.max(5)
}

/// The variants run `cache`.
fn variants(_cache: &str) -> Vec<&'static str> {
    SHELL_VARIANTS.to_vec()
}

/// One round's numbers.
struct Round {
    seconds: f64,
    user: f64,
    sys: f64,
    process: f64,
    rows: Vec<String>,
    stats: Option<(String, String)>,
}

/// The shell's script for one round of `variant` over `paths` (`warm`: an untimed pass first).
fn script(lib: &Path, variant: &str, paths: &[PathBuf], warm: bool) -> String {
    let zcio = variant.starts_with("zcio");
    let mut s = String::from(".bail on\n.mode list\n");
    if zcio {
        s.push_str(&format!(".load {}\n", lib.display()));
    }
    let open = |p: &Path| {
        let vfs = if zcio { "&vfs=zcio" } else { "" };
        let mut o = format!(
            ".open 'file:{}?mode=ro{vfs}'\n.output /dev/null\n",
            p.display()
        );
        if variant == "zcio_in_place" {
            o.push_str("pragma mmap_size = 1073741824;\n");
        }
        o.push_str(".output stdout\n");
        o
    };
    let untimed = format!(".output /dev/null\n{QUERY};\n.output stdout\n");
    if warm {
        for p in paths {
            s.push_str(&open(p));
            s.push_str(&untimed);
        }
    }
    s.push_str(".print @@timed\n");
    if zcio && warm {
        s.push_str("pragma zcio_stats;\n");
    }
    for p in paths {
        s.push_str(&open(p));
        s.push_str(&format!(".timer on\n{QUERY};\n.timer off\n"));
    }
    if zcio {
        s.push_str("pragma zcio_stats;\n");
    }
    s
}

/// Run one round: the script on a fresh shell.
fn round(
    lib: &Path,
    variant: &str,
    paths: &[PathBuf],
    warm: bool,
    pool_mib: u64,
) -> Result<Round, String> {
    let script = script(lib, variant, paths, warm);
    let t0 = Instant::now();
    let mut child = Command::new("sqlite3")
        .env("ZCIO_SQLITE_POOL_MIB", pool_mib.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("sqlite3: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("sqlite3: no stdin")?;
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        stdin.write_all(script.as_bytes())
    });
    let out = child
        .wait_with_output()
        .map_err(|e| format!("sqlite3: {e}"))?;
    let process = t0.elapsed().as_secs_f64();
    writer
        .join()
        .map_err(|_| "the script's writer panicked".to_string())?
        .map_err(|e| format!("writing the script: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() || !stderr.trim().is_empty() {
        return Err(format!(
            "sqlite3 ({variant}) failed ({}): {}",
            out.status,
            stderr.trim()
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let timed = stdout
        .split_once("@@timed\n")
        .map(|(_, t)| t)
        .ok_or("sqlite3: no timed part in its output")?;
    let (mut seconds, mut user, mut sys, mut timers) = (0.0, 0.0, 0.0, 0);
    let mut rows = Vec::new();
    let mut stats = Vec::new();
    for line in timed.lines() {
        if let Some(t) = line.strip_prefix("Run Time:") {
            // "Run Time: real 0.012 user 0.008000 sys 0.004000"
            let f: Vec<&str> = t.split_whitespace().collect();
            let num = |k: &str| {
                f.iter()
                    .position(|w| *w == k)
                    .and_then(|i| f.get(i + 1))
                    .and_then(|v| v.parse::<f64>().ok())
                    .ok_or(format!("sqlite3: a timer line without {k}: {line}"))
            };
            seconds += num("real")?;
            user += num("user")?;
            sys += num("sys")?;
            timers += 1;
        } else if line.starts_with('{') {
            stats.push(line.to_string());
        } else {
            rows.push(line.to_string());
        }
    }
    if timers != paths.len() {
        return Err(format!(
            "sqlite3 ({variant}): {timers} timed scans, not {}",
            paths.len()
        ));
    }
    let stats = match stats.len() {
        0 => None,
        1 => Some((String::new(), stats.remove(0))),
        _ => Some((stats.remove(0), stats.remove(0))),
    };
    Ok(Round {
        seconds,
        user,
        sys,
        process,
        rows,
        stats,
    })
}

/// A count in `pragma zcio_stats`' JSON (0 where it is missing).
fn stat(json: &str, key: &str) -> u64 {
    serde_json::from_str::<serde_json::Value>(json)
        .ok()
        .and_then(|v| v.get(key).and_then(|x| x.as_u64()))
        .unwrap_or(0)
}

/// The SQLite version of the `sqlite3` shell here, or why there is none.
fn shell_version() -> Result<String, String> {
    let out = Command::new("sqlite3")
        .arg("-version")
        .output()
        .map_err(|e| format!("no sqlite3 shell here ({e})"))?;
    if !out.status.success() {
        return Err(format!("sqlite3 -version failed ({})", out.status));
    }
    let v = String::from_utf8_lossy(&out.stdout);
    Ok(v.split_whitespace().next().unwrap_or("unknown").to_string())
}

/// The series on `paths` (all of them, one after another each round): every variant, warm
/// and cold as `caches` says, each scan's rows checked against the shell's own VFS's.
pub fn series(
    paths: &[PathBuf],
    table_bytes: u64,
    result_rows: u64,
    caches: &[String],
    rounds: usize,
    progress: &mut dyn FnMut(String),
) -> ShellSeries {
    let version = match shell_version() {
        Ok(v) => v,
        Err(e) => return ShellSeries::missing(e),
    };
    let lib = match zcio_sqlite::extension::build() {
        Ok(l) => l,
        Err(e) => return ShellSeries::missing(format!("the extension: {e}")),
    };
    progress("uio: the sqlite3 shell's extension built".into());
    let rounds = shell_rounds(rounds);
    let total = (paths.len() as u64 * table_bytes).min(POOL_BUDGET);
    let pool_mib = total.div_ceil(1 << 20) + 8;
    let want_rows = paths.len() * result_rows as usize;
    match measure_series(&lib, paths, want_rows, caches, rounds, pool_mib, progress) {
        Ok(rows) => ShellSeries {
            missing: None,
            sqlite_version: Some(version),
            tables: paths.len(),
            rounds,
            pool_mib,
            cache_drop: "posix_fadvise(POSIX_FADV_DONTNEED) on each table before each cold round"
                .into(),
            rows,
        },
        Err(e) => ShellSeries {
            sqlite_version: Some(version),
            ..ShellSeries::missing(e)
        },
    }
}

fn measure_series(
    lib: &Path,
    paths: &[PathBuf],
    want_rows: usize,
    caches: &[String],
    rounds: usize,
    pool_mib: u64,
    progress: &mut dyn FnMut(String),
) -> Result<Vec<ShellRow>, String> {
    let mut out = Vec::new();
    let mut want: Option<Vec<String>> = None;
    for cache in caches {
        let warm = cache == "warm";
        let vs = variants(cache);
        let mut got: Vec<Vec<Round>> = vs.iter().map(|_| Vec::new()).collect();
        for r in 0..rounds {
            for k in 0..vs.len() {
                let v = (k + r) % vs.len();
                if !warm {
                    for p in paths {
                        let f = std::fs::File::open(p).map_err(|e| e.to_string())?;
                        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)
                            .map_err(|e| format!("posix_fadvise: {e}"))?;
                    }
                }
                let run = round(lib, vs[v], paths, warm, pool_mib)?;
                match &want {
                    None if run.rows.len() != want_rows => {
                        return Err(format!(
                            "the shell through {} returned {} rows, not {want_rows}",
                            vs[v],
                            run.rows.len()
                        ));
                    }
                    None => want = Some(run.rows.clone()),
                    Some(w) if *w != run.rows => {
                        return Err(format!(
                            "the shell through {} returned other rows than through {}",
                            vs[v], vs[0]
                        ));
                    }
                    Some(_) => {}
                }
                got[v].push(run);
                progress(format!("uio: sqlite3 shell {} {cache}", vs[v]));
            }
        }
        let med = |f: &dyn Fn(&Round) -> f64, rs: &[Round]| {
            fit::median(&rs.iter().map(f).collect::<Vec<_>>()).unwrap_or(f64::NAN)
        };
        let own = med(&|x| x.seconds, &got[0]);
        for (v, rs) in vs.iter().zip(&got) {
            let secs: Vec<f64> = rs.iter().map(|x| x.seconds).collect();
            let seconds = med(&|x| x.seconds, rs);
            let (before, after) = rs.last().and_then(|x| x.stats.clone()).unwrap_or_default();
            let delta = |k: &str| stat(&after, k).saturating_sub(stat(&before, k));
            out.push(ShellRow {
                variant: v.to_string(),
                cache: cache.clone(),
                seconds,
                seconds_spread: fit::spread(&secs),
                cpu_user_s: med(&|x| x.user, rs),
                cpu_sys_s: med(&|x| x.sys, rs),
                process_seconds: med(&|x| x.process, rs),
                over_own: own / seconds,
                requests: delta("requests"),
                bytes_pooled: delta("bytes_pooled"),
                bytes_copied: delta("bytes_copied"),
                bytes_fetched: delta("bytes_fetched"),
            });
        }
    }
    Ok(out)
}

/// The finding of the series: the extension against the shell's own VFS, warm and cold, and
/// where the time goes.
pub fn finding(s: &ShellSeries) -> Option<String> {
    if let Some(w) = &s.missing {
        return Some(format!(
            "Through the sqlite3 shell: the series is missing: {w}."
        ));
    }
    let get = |v: &str, c: &str| s.rows.iter().find(|r| r.variant == v && r.cache == c);
    let (own, z) = (get("own", "warm")?, get("zcio", "warm")?);
    let mut t = format!(
        "Through the sqlite3 shell (this machine's, SQLite {}), {} scans one after another with zcio's VFS loaded as an extension and the tables warm take {:.3} s ({:.3}–{:.3}) against the shell's own VFS's {:.3} s ({:.3}–{:.3}): {:.2}× (zcio's target: at least 1.3×: {}), with {} requests to the device and {:.0} MiB copied out of the pool into SQLite's pages. The shell's own VFS spends {:.3} s of CPU in the kernel (a pread per page, each a copy from the page cache) and {:.3} s in the shell; with zcio's pool {:.3} s and {:.3} s. The whole shell process, start, load (the pool's {} MiB registered) and the untimed first pass included, takes {:.3} s with the extension against {:.3} s without.",
        s.sqlite_version.as_deref().unwrap_or("unknown"),
        s.tables,
        z.seconds,
        z.seconds_spread[0],
        z.seconds_spread[1],
        own.seconds,
        own.seconds_spread[0],
        own.seconds_spread[1],
        z.over_own,
        if z.over_own >= 1.3 { "met" } else { "not met" },
        z.requests,
        z.bytes_copied as f64 / (1u64 << 20) as f64,
        own.cpu_sys_s,
        own.cpu_user_s,
        z.cpu_sys_s,
        z.cpu_user_s,
        s.pool_mib,
        z.process_seconds,
        own.process_seconds,
    );
    if let Some(m) = get("zcio_in_place", "warm") {
        t.push_str(&format!(
            " SQLite reading the pages in place in the pool (pragma mmap_size) instead of copying them runs at {:.2}× the shell's own VFS{}.",
            m.over_own,
            if m.seconds > z.seconds {
                ": slower than copying them here, which is why the copy is the extension's default"
            } else {
                ""
            }
        ));
    }
    if let Some(c) = get("zcio", "cold") {
        t.push_str(&format!(
            " Cold (the tables dropped from the page cache, the pool empty): {:.2}×.",
            c.over_own
        ));
    }
    Some(t)
}

/// The series' paragraph and table.
pub fn blocks(s: &ShellSeries) -> Vec<crate::report::doc::Block> {
    use crate::report::text::{h, p, table_of};
    let mut b = vec![h(3, "Through the sqlite3 shell")];
    if let Some(w) = &s.missing {
        b.push(p(format!(
            "The same scans through the `sqlite3` shell did not run: {w}."
        )));
        return b;
    }
    b.push(p(format!(
        "The same {} tables, scanned by the same query in the `sqlite3` shell of this machine (SQLite {}, not zcio's bundled SQLite), one after another in one process (the shell runs one statement at a time): by the shell's own VFS, and by zcio's VFS loaded into the shell as an extension (`.load libzcio_sqlite_ext`, each table opened as `file:…?mode=ro&vfs=zcio`: read through the user-level layer into the engine's buffer pool on it, {} MiB, pages copied out of the pool into SQLite's, the extension's default), or with SQLite reading the pages in place in the pool (`pragma mmap_size`). CPU is the shell's `.timer` (user and system time of the process over the scans). Each round is a fresh shell: warm, every table is scanned once untimed first (the page cache and the pool filled); cold, the tables are dropped from the page cache first ({}) and the pool starts empty. The time is the sum of the shell's `.timer` over the {} scans (milliseconds each), the median of {} rounds with the variants alternating; every scan's rows were checked against the shell's own VFS's.",
        s.tables,
        s.sqlite_version.as_deref().unwrap_or("unknown"),
        s.pool_mib,
        s.cache_drop,
        s.tables,
        s.rounds,
    )));
    b.push(table_of(
        "Through the sqlite3 shell: seconds for the scans (lowest–highest), CPU, the whole process, and the ratio to the shell's own VFS",
        &[
            "cache",
            "variant",
            "seconds",
            "CPU user / sys s",
            "process s",
            "over the shell's VFS",
            "requests",
            "MiB copied from the pool",
        ],
        &s.rows,
        |r| {
            vec![
                r.cache.clone(),
                label(&r.variant).to_string(),
                format!(
                    "{:.3} ({:.3}–{:.3})",
                    r.seconds, r.seconds_spread[0], r.seconds_spread[1]
                ),
                format!("{:.3} / {:.3}", r.cpu_user_s, r.cpu_sys_s),
                format!("{:.3}", r.process_seconds),
                format!("{:.2}×", r.over_own),
                r.requests.to_string(),
                format!("{:.0}", r.bytes_copied as f64 / (1u64 << 20) as f64),
            ]
        },
    ));
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(variant: &str, cache: &str, seconds: f64, own: f64) -> ShellRow {
        ShellRow {
            variant: variant.into(),
            cache: cache.into(),
            seconds,
            seconds_spread: [seconds * 0.9, seconds * 1.1],
            cpu_user_s: seconds,
            cpu_sys_s: 0.0,
            process_seconds: seconds + 0.1,
            over_own: own / seconds,
            requests: 0,
            bytes_pooled: 64 << 20,
            bytes_copied: 64 << 20,
            bytes_fetched: 0,
        }
    }

    fn series(zcio_warm: f64) -> ShellSeries {
        ShellSeries {
            missing: None,
            sqlite_version: Some("3.40.1".into()),
            tables: 16,
            rounds: 5,
            pool_mib: 200,
            cache_drop: "fadvise".into(),
            rows: vec![
                row("own", "warm", 0.120, 0.120),
                row("zcio", "warm", zcio_warm, 0.120),
                row("zcio_in_place", "warm", 0.100, 0.120),
                row("own", "cold", 0.500, 0.500),
                row("zcio", "cold", 0.400, 0.500),
            ],
        }
    }

    #[test]
    fn the_finding_computes_the_target_and_where_time_goes_from_the_rows() {
        let f = finding(&series(0.060)).unwrap();
        assert!(f.contains("SQLite 3.40.1"), "{f}");
        assert!(f.contains("16 scans"), "{f}");
        assert!(
            f.contains(": 2.00× (zcio's target: at least 1.3×: met)"),
            "{f}"
        );
        assert!(f.contains("64 MiB copied out of the pool"), "{f}");
        assert!(f.contains("0.000 s of CPU in the kernel (a pread per page, each a copy from the page cache) and 0.120 s in the shell; with zcio's pool 0.000 s and 0.060 s"), "{f}");
        assert!(
            f.contains("takes 0.160 s with the extension against 0.220 s without"),
            "{f}"
        );
        assert!(f.contains("(pragma mmap_size) instead of copying them runs at 1.20×"));
        assert!(f.contains("slower than copying them here"), "{f}");
        assert!(f.contains("Cold (the tables dropped from the page cache, the pool empty): 1.25×"));
        let slow = finding(&series(0.100)).unwrap();
        assert!(
            slow.contains(": 1.20× (zcio's target: at least 1.3×: not met)"),
            "{slow}"
        );
        assert!(!slow.contains("slower than copying them here"), "{slow}");
    }

    #[test]
    fn a_missing_series_says_why_and_renders_no_table() {
        let s = ShellSeries::missing("no sqlite3 shell here".into());
        assert!(
            finding(&s)
                .unwrap()
                .contains("missing: no sqlite3 shell here")
        );
        assert_eq!(blocks(&s).len(), 2);
        assert_eq!(blocks(&series(0.06)).len(), 3);
    }

    #[test]
    fn a_round_script_times_each_scan_and_loads_zcio_only_where_used() {
        let paths = [PathBuf::from("/t/a.db"), PathBuf::from("/t/b.db")];
        let lib = Path::new("/x/libzcio_sqlite_ext.so");
        let own = script(lib, "own", &paths, true);
        assert!(!own.contains(".load"));
        assert!(!own.contains("vfs=zcio"));
        assert_eq!(own.matches(".timer on").count(), 2);
        let z = script(lib, "zcio", &paths, true);
        assert!(z.contains(".load /x/libzcio_sqlite_ext.so\n"));
        assert_eq!(z.matches("?mode=ro&vfs=zcio'").count(), 4);
        assert_eq!(z.matches("pragma zcio_stats;").count(), 2);
        let cold = script(lib, "zcio", &paths, false);
        assert_eq!(cold.matches("pragma zcio_stats;").count(), 1);
        assert_eq!(cold.matches(".open").count(), 2);
        let m = script(lib, "zcio_in_place", &paths, true);
        assert_eq!(m.matches("pragma mmap_size = 1073741824;").count(), 4);
        let timed = m.split_once("@@timed").unwrap().1;
        assert_eq!(
            timed.matches(QUERY).count(),
            2,
            "scanned untimed before, timed after"
        );
    }
}
