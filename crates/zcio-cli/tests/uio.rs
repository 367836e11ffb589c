//! `zcio bench uio` end to end, tiny: every variant ran its queries (checked against the
//! kernel VFS's rows inside the bench) at every N, with the tables on one device and each on
//! a memory-backed loop device of its own (or that series' absence said), with the fields the
//! report reads, the kernel's CPU split, and the layer alone beside fio (or fio's absence
//! said). Speeds are never compared: the machine decides them. And the memory-backed disks
//! themselves: tables read back from them, their failures, nothing left behind.

mod common;

use common::{json_of, zcio};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use zcio_cli::lab::uio::devices::TableDisks;
use zcio_sqlite::tables;
use zcio_uio::memdisk;
use zcio_vm::skip::{Capability, skip};

/// Every loop device, mount and image of `root` (a set of memory-backed disks' directory): what
/// is left of it.
fn left_of(root: &str) -> Vec<String> {
    let mut left = Vec::new();
    let losetup = Command::new("losetup").arg("-a").output().unwrap();
    let listed = String::from_utf8_lossy(&losetup.stdout);
    left.extend(
        listed
            .lines()
            .filter(|l| l.contains(root))
            .map(|l| format!("loop device: {l}")),
    );
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    left.extend(
        mounts
            .lines()
            .filter(|l| l.contains(root))
            .map(|l| format!("mount: {l}")),
    );
    let mount = Command::new("mount").output().unwrap();
    left.extend(
        String::from_utf8_lossy(&mount.stdout)
            .lines()
            .filter(|l| l.contains(root))
            .map(|l| format!("mount(8): {l}")),
    );
    if Path::new(root).exists() {
        left.push(format!("directory: {root}"));
    }
    left
}

/// Whether memory-backed loop devices can be had here; if not, the calling test skips for it.
fn loop_devices_here(what: &str) -> bool {
    match memdisk::probe(Path::new(memdisk::DEFAULT_BACKING)) {
        Ok(_) => true,
        Err(why) => {
            skip(Capability::LoopDevices, &format!("{what}: {why}"));
            false
        }
    }
}

#[test]
fn bench_uio_json_has_every_variant_and_n() {
    let child = zcio()
        .args([
            "bench",
            "uio",
            "--json",
            "--rows",
            "10001",
            "--queries",
            "1,3",
            "--rounds",
            "1",
            "--cache",
            "warm,cold",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let v = json_of(&out);
    assert_eq!(v["bench"], "uio");
    assert_eq!(
        v["result_rows"], 1,
        "tenthous = 1000 matches one of 10 001 rows"
    );
    let variants = [
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
    let rows = v["rows"].as_array().unwrap();
    // The per-device series ran, each of the 3 tables on a memory-backed loop device of its
    // own, or says why not; either way its disks are gone.
    let d = &v["devices"];
    assert_eq!(d["placement"], "loop-memory");
    let placements: &[&str] = match d["missing"].as_str() {
        Some(why) => {
            assert!(!why.is_empty());
            assert_eq!(d["count"], 0);
            skip(
                Capability::LoopDevices,
                &format!("the per-device series: {why}"),
            );
            &["one-device"]
        }
        None => {
            assert_eq!(d["count"], 3, "{d}");
            assert_eq!(d["fs"], "ext4", "{d}");
            assert!(d["device_bytes"].as_u64().unwrap() >= 16 << 20, "{d}");
            assert!(d["direct_io"].as_u64().unwrap() <= 3, "{d}");
            assert!(d["setup_s"].as_f64().unwrap() > 0.0, "{d}");
            assert!(d["backing"].as_str().unwrap().contains("tmpfs"), "{d}");
            &["one-device", "loop-memory"]
        }
    };
    let shm = std::fs::read_dir(memdisk::DEFAULT_BACKING).unwrap();
    for e in shm {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("zcio-disks-{pid}-")) {
            let root = format!("{}/{name}", memdisk::DEFAULT_BACKING);
            panic!("left behind: {:?}", left_of(&root));
        }
    }
    let root = format!("{}/zcio-disks-{pid}-", memdisk::DEFAULT_BACKING);
    assert_eq!(left_of(&root), Vec::<String>::new());
    if let Some(why) = v["layer_unavailable"].as_str() {
        // No io_uring here: SQLite's own variants only, and the reason said.
        skip(Capability::IoUring, &format!("the layer's variants: {why}"));
        assert_eq!(rows.len(), placements.len() * 2 * 2 * 2);
        assert!(
            rows.iter()
                .all(|r| r["variant"] == "kernel" || r["variant"] == "kernel_mmap")
        );
        return;
    }
    assert_eq!(rows.len(), placements.len() * 2 * 2 * variants.len());
    for placement in placements {
        for cache in ["warm", "cold"] {
            for n in [1, 3] {
                for var in variants {
                    let r = rows
                        .iter()
                        .find(|r| {
                            r["placement"] == *placement
                                && r["cache"] == cache
                                && r["queries"] == n
                                && r["variant"] == var
                        })
                        .unwrap_or_else(|| panic!("{placement} {cache} {n} {var}"));
                    check_row(&v, r, var, cache, n);
                }
            }
        }
    }
    // The kernel's CPU split is the one-device series'.
    assert_eq!(v["breakdown"].as_array().unwrap().len(), 4);
    let raw = v["raw"].as_array().unwrap();
    assert!(raw.iter().any(|r| r["contender"] == "uio"));
    if v["fio_skipped"].is_null() {
        assert!(raw.iter().any(|r| r["contender"] == "fio_io_uring_sqpoll"));
    } else {
        skip(
            Capability::Fio,
            &format!("fio beside the layer: {}", v["fio_skipped"]),
        );
    }
    // The same scans through the sqlite3 shell (which CI installs: its absence fails here),
    // zcio's VFS loaded into it as an extension.
    let sh = &v["shell"];
    assert!(
        sh["missing"].is_null(),
        "the shell series: {}",
        sh["missing"]
    );
    assert_eq!(sh["tables"], 3);
    assert!(sh["rounds"].as_u64().unwrap() >= 5);
    let shell_rows = sh["rows"].as_array().unwrap();
    assert_eq!(shell_rows.len(), 2 * 3, "{sh}");
    for cache in ["warm", "cold"] {
        for var in ["own", "zcio", "zcio_in_place"] {
            let r = shell_rows
                .iter()
                .find(|r| r["cache"] == cache && r["variant"] == var)
                .unwrap_or_else(|| panic!("shell {cache} {var}"));
            let secs = r["seconds"].as_f64().unwrap();
            let [lo, hi] = [0, 1].map(|i| r["seconds_spread"][i].as_f64().unwrap());
            assert!(lo <= secs && secs <= hi, "{r}");
            assert!(r["process_seconds"].as_f64().unwrap() > 0.0, "{r}");
            assert!(r["over_own"].as_f64().unwrap().is_finite(), "{r}");
            let (requests, copied, fetched) = (
                r["requests"].as_u64().unwrap(),
                r["bytes_copied"].as_u64().unwrap(),
                r["bytes_fetched"].as_u64().unwrap(),
            );
            match (var, cache) {
                ("own", _) => assert_eq!((requests, copied, fetched), (0, 0, 0), "{r}"),
                // Warm in the pool: no request, every page copied out of it.
                ("zcio", "warm") => {
                    assert_eq!(requests, 0, "{r}");
                    assert!(
                        copied >= 3 * v["table_bytes"].as_u64().unwrap() * 9 / 10,
                        "{r}"
                    );
                }
                ("zcio", _) => assert!(requests > 0 && copied > 0, "{r}"),
                (_, "warm") => assert!(requests == 0 && fetched > 0, "{r}"),
                _ => assert!(requests > 0 && fetched > 0, "{r}"),
            }
        }
    }
}

/// One row of `zcio bench uio --json` (`v`), of `var`, `cache` and `n`: its times, CPU and the
/// layer's counters as the variant makes them.
fn check_row(v: &serde_json::Value, r: &serde_json::Value, var: &str, cache: &str, n: u64) {
    for k in ["seconds", "queries_per_s", "bytes_per_s"] {
        let x = r[k].as_f64().unwrap();
        assert!(x.is_finite() && x > 0.0, "{k} in {r}");
    }
    for k in ["cpu_user_s", "cpu_sys_s"] {
        assert!(r[k].as_f64().unwrap() >= 0.0, "{k} in {r}");
    }
    // The layer's variants made requests; SQLite's own VFS none through it, and the pooled
    // layer none with the tables warm in its pool, where it found them.
    let req = r["requests"].as_u64().unwrap();
    let pool = var.starts_with("uio_pool");
    let warm_pool = pool && cache == "warm";
    assert_eq!(req > 0, var.starts_with("uio") && !warm_pool, "{r}");
    let pooled = r["bytes_pooled"].as_u64().unwrap();
    if warm_pool {
        let table = v["table_bytes"].as_u64().unwrap();
        assert!(pooled >= n * table, "every table from the pool: {r}");
    } else if !pool {
        assert_eq!(pooled, 0, "{r}");
    }
    // The in-place variants read pages where the transfers put them.
    let fetched = r["bytes_fetched"].as_u64().unwrap();
    assert_eq!(
        fetched > 0,
        var.starts_with("uio") && var != "uio_copy",
        "{r}"
    );
    // They have the pages after each prefetched into the CPU's cache, but for the variant
    // without it. Where the window holds the next pages (every pooled one warm), most pages did.
    let prefetched = r["bytes_prefetched"].as_u64().unwrap();
    assert_eq!(
        prefetched > 0,
        fetched > 0 && var != "uio_pool_no_prefetch",
        "{r}"
    );
    if warm_pool && var == "uio_pool" {
        assert!(prefetched > fetched, "two pages ahead of most pages: {r}");
    }
}

#[test]
fn two_tables_on_two_memory_backed_disks_read_back_and_leave_nothing_behind() {
    if !loop_devices_here("two tables on two memory-backed disks") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let tables: Vec<PathBuf> = (0..2)
        .map(|k| dir.path().join(format!("tenk1-{k}.db")))
        .collect();
    for (k, t) in tables.iter().enumerate() {
        tables::create_tenk1(t, 10_001, k as u64 + 1).unwrap();
    }
    let mut steps = 0;
    let disks = TableDisks::new(&tables, Path::new(memdisk::DEFAULT_BACKING), &mut |_| {
        steps += 1
    })
    .unwrap();
    assert_eq!(steps, 2);
    let root = disks.disks().root().to_string_lossy().into_owned();
    assert!(root.starts_with(memdisk::DEFAULT_BACKING), "{root}");
    let paths = disks.paths().to_vec();
    assert_eq!(paths.len(), 2);
    // Each table on a device of its own, none the source's, on ext4 on a loop device.
    let dev = |p: &Path| std::fs::metadata(p).unwrap().dev();
    assert_ne!(dev(&paths[0]), dev(&paths[1]));
    assert!(paths.iter().all(|p| dev(p) != dev(&tables[0])));
    for (d, p) in disks.disks().disks().iter().zip(&paths) {
        assert!(p.starts_with(d.mount()), "{p:?} on {:?}", d.mount());
        assert!(
            d.device().to_string_lossy().starts_with("/dev/loop"),
            "{d:?}"
        );
        assert!(d.image().starts_with(&root), "{d:?}");
        let listed = Command::new("losetup").arg("-a").output().unwrap();
        assert!(
            String::from_utf8_lossy(&listed.stdout).contains(&*d.image().to_string_lossy()),
            "{d:?} not attached"
        );
    }
    assert_eq!(left_of(&root).len(), 2 + 2 * 2 + 1, "{:?}", left_of(&root));
    // The rows each copy gives are the original's, read from the page cache and again from
    // the device.
    for (t, p) in tables.iter().zip(&paths) {
        let want = tables::scan(&tables::open(t, None).unwrap()).unwrap();
        assert_eq!(tables::scan(&tables::open(p, None).unwrap()).unwrap(), want);
        let f = std::fs::File::open(p).unwrap();
        rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed).unwrap();
        assert_eq!(tables::scan(&tables::open(p, None).unwrap()).unwrap(), want);
        assert_eq!(want.rows, 1);
    }
    drop(disks);
    assert_eq!(left_of(&root), Vec::<String>::new());
}

#[test]
fn disks_that_fail_or_panic_leave_nothing_behind_and_failures_say_why() {
    // A backing directory that is not there: refused before anything is made.
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("tenk1-0.db");
    tables::create_tenk1(&table, 10_001, 1).unwrap();
    let gone = dir.path().join("no-such-dir");
    let e = TableDisks::new(std::slice::from_ref(&table), &gone, &mut |_| {})
        .err()
        .expect("no backing directory");
    let e = e.to_string();
    assert!(
        e.contains("no-such-dir") && e.contains("No such file"),
        "{e}"
    );
    // A table that is not there: refused before anything is made.
    let e = TableDisks::new(
        &[dir.path().join("missing.db")],
        Path::new(memdisk::DEFAULT_BACKING),
        &mut |_| {},
    )
    .err()
    .expect("no table");
    assert!(e.to_string().contains("missing.db"), "{e}");
    if !loop_devices_here("a refused mount") {
        return;
    }
    // A mount refused (an option ext4 does not know) after the first disk was attached and
    // made: the error is mount's, and the disk is detached and its image deleted.
    let backing = Path::new(memdisk::DEFAULT_BACKING);
    let e =
        memdisk::MemoryDisks::with_options(2, memdisk::MIN_BYTES, backing, "zcio-no-such-option")
            .unwrap_err();
    assert!(
        e.step
            .starts_with("mount -t ext4 -o zcio-no-such-option /dev/loop"),
        "{e}"
    );
    assert!(e.detail.contains("exit status"), "{e}");
    let at = e.step.rsplit(' ').next().unwrap();
    let root = Path::new(at)
        .parent()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        root.starts_with(&format!("{}/zcio-disks-", memdisk::DEFAULT_BACKING)),
        "{root}"
    );
    assert_eq!(left_of(&root), Vec::<String>::new());
    // A panic while the disks are up: unwinding takes them down.
    let made = std::sync::Mutex::new(String::new());
    let panicked = std::panic::catch_unwind(|| {
        let disks = memdisk::MemoryDisks::new(1, memdisk::MIN_BYTES, backing).unwrap();
        *made.lock().unwrap() = disks.root().to_string_lossy().into_owned();
        assert_eq!(left_of(&disks.root().to_string_lossy()).len(), 4);
        panic!("a query failed");
    });
    assert!(panicked.is_err());
    let root = made.into_inner().unwrap();
    assert!(!root.is_empty());
    assert_eq!(left_of(&root), Vec::<String>::new());
}

#[test]
fn disks_a_killed_process_left_up_are_taken_down_by_the_next_set() {
    if !loop_devices_here("disks left by an ended process") {
        return;
    }
    let backing = Path::new(memdisk::DEFAULT_BACKING);
    // Two disks up, then forgotten, as a process killed by a signal leaves them: the set's
    // directory renamed after a process that has ended.
    let disks = memdisk::MemoryDisks::new(2, memdisk::MIN_BYTES, backing).unwrap();
    let live = disks.root().to_path_buf();
    std::mem::forget(disks);
    let mut ended = Command::new("true").spawn().unwrap();
    let pid = ended.id();
    ended.wait().unwrap();
    let stale = backing.join(format!("zcio-disks-{pid}-0"));
    std::fs::rename(&live, &stale).unwrap();
    let stale_name = stale.to_string_lossy().into_owned();
    assert_eq!(
        left_of(&stale_name).len(),
        1 + 2 * 3,
        "{:?}",
        left_of(&stale_name)
    );
    // The next set made there takes them down first; its own disks are untouched.
    let next = memdisk::MemoryDisks::new(1, memdisk::MIN_BYTES, backing).unwrap();
    assert_eq!(left_of(&stale_name), Vec::<String>::new());
    let next_root = next.root().to_string_lossy().into_owned();
    assert_eq!(left_of(&next_root).len(), 4, "{:?}", left_of(&next_root));
    // A set whose process is alive (this one's) is never swept.
    let (swept, failed) = memdisk::sweep_stale(backing);
    assert!(
        swept.is_empty() && failed.is_empty(),
        "{swept:?} {failed:?}"
    );
    assert_eq!(left_of(&next_root).len(), 4);
    next.close().unwrap();
    assert_eq!(left_of(&next_root), Vec::<String>::new());
}
