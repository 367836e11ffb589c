//! `zcio bench uio`'s output without `--json`: the section as lines of text.

use super::measure::{UioArgs, measure};
use crate::transfer::Res;

/// Run the benchmark and print it.
pub fn run(a: UioArgs) -> Res<()> {
    let steps = a.steps() + a.queries().last().copied().unwrap_or(1);
    let Some(s) = crate::run_bench("uio", steps as u64, a.json, |p| measure(&a, p))? else {
        return Ok(());
    };
    println!(
        "{} tables of {} rows ({:.1} MiB each), {} rows a query; median of {} rounds; O_DIRECT: {}",
        s.rows.iter().map(|r| r.queries).max().unwrap_or(0),
        s.rows_per_table,
        s.table_bytes as f64 / (1u64 << 20) as f64,
        s.result_rows,
        s.rounds,
        s.direct_refused.as_deref().unwrap_or("yes")
    );
    if let Some(d) = &s.devices {
        match &d.missing {
            Some(why) => println!("per-device series ({}): missing: {why}", d.placement),
            None => println!(
                "per-device series ({}): {} {} of {} MiB, {} each, loop direct I/O on {} of them; set up in {:.1} s",
                d.placement,
                d.count,
                d.backing.as_deref().unwrap_or("devices"),
                d.device_bytes >> 20,
                d.fs.as_deref().unwrap_or("unknown file system"),
                d.direct_io,
                d.setup_s
            ),
        }
    }
    for r in &s.rows {
        println!(
            "{:<11} {:<5} N={:<3} {:<24} {:>8.3} s ({:.3}–{:.3}) {:>8.1} q/s {:>7.1} MB/s  cpu {:.2} user {:.2} sys  {:>5.2}× one  {:>5.2}× kernel",
            r.placement,
            r.cache,
            r.queries,
            r.variant,
            r.seconds,
            r.seconds_spread[0],
            r.seconds_spread[1],
            r.queries_per_s,
            r.bytes_per_s / 1e6,
            r.cpu_user_s,
            r.cpu_sys_s,
            r.over_one,
            r.over_kernel
        );
    }
    for b in &s.breakdown {
        println!(
            "kernel CPU {} N={}: {:.3} s = copy {:.3} + system calls {:.3} + the rest {:.3}",
            b.cache, b.queries, b.cpu_s, b.copy_s, b.syscalls_s, b.rest_s
        );
    }
    for r in &s.raw {
        println!(
            "alone: {:<30} {:>2} files {:>8.1} MB/s",
            r.contender,
            r.jobs,
            r.bytes_per_s / 1e6
        );
    }
    if let Some(sh) = &s.shell {
        match &sh.missing {
            Some(why) => println!("sqlite3 shell: missing: {why}"),
            None => {
                for r in &sh.rows {
                    println!(
                        "shell: {:<5} {:<14} {:>8.3} s ({:.3}–{:.3})  cpu {:.3} user {:.3} sys  process {:.3} s  {:>5.2}× the shell's VFS  {} requests",
                        r.cache,
                        r.variant,
                        r.seconds,
                        r.seconds_spread[0],
                        r.seconds_spread[1],
                        r.cpu_user_s,
                        r.cpu_sys_s,
                        r.process_seconds,
                        r.over_own,
                        r.requests
                    );
                }
            }
        }
        if let Some(f) = super::shell::finding(sh) {
            println!("{f}");
        }
    }
    if let Some(w) = &s.layer_unavailable {
        println!("{w}");
    }
    if let Some(w) = &s.fio_skipped {
        println!("fio: {w}");
    }
    for f in &s.fio_failed {
        println!("fio failed: {f}");
    }
    Ok(())
}
