//! `zcio bench uio` end to end, tiny: every variant ran its queries (checked against the
//! kernel VFS's rows inside the bench) at every N, with the fields the report reads, the
//! kernel's CPU split, and the layer alone beside fio (or fio's absence said). Speeds are
//! never compared: the machine decides them.

mod common;

use common::{json_of, zcio};

#[test]
fn bench_uio_json_has_every_variant_and_n() {
    let out = zcio()
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
        .output()
        .unwrap();
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
        "kernel_mmap",
    ];
    let rows = v["rows"].as_array().unwrap();
    if let Some(why) = v["layer_unavailable"].as_str() {
        // No io_uring here: SQLite's own variants only, and the reason said.
        zcio_vm::skip::skip(
            zcio_vm::skip::Capability::IoUring,
            &format!("the layer's variants: {why}"),
        );
        assert_eq!(rows.len(), 2 * 2 * 2);
        assert!(
            rows.iter()
                .all(|r| r["variant"] == "kernel" || r["variant"] == "kernel_mmap")
        );
        return;
    }
    assert_eq!(rows.len(), 2 * 2 * variants.len());
    for cache in ["warm", "cold"] {
        for n in [1, 3] {
            for var in variants {
                let r = rows
                    .iter()
                    .find(|r| r["cache"] == cache && r["queries"] == n && r["variant"] == var)
                    .unwrap_or_else(|| panic!("{cache} {n} {var}"));
                for k in ["seconds", "queries_per_s", "bytes_per_s"] {
                    let x = r[k].as_f64().unwrap();
                    assert!(x.is_finite() && x > 0.0, "{k} in {r}");
                }
                for k in ["cpu_user_s", "cpu_sys_s"] {
                    assert!(r[k].as_f64().unwrap() >= 0.0, "{k} in {r}");
                }
                // The layer's variants made requests; SQLite's own VFS none through it, and
                // the pooled layer none with the tables warm in its pool, where it found them.
                let req = r["requests"].as_u64().unwrap();
                let warm_pool = var == "uio_pool" && cache == "warm";
                assert_eq!(req > 0, var.starts_with("uio") && !warm_pool, "{r}");
                let pooled = r["bytes_pooled"].as_u64().unwrap();
                if warm_pool {
                    let table = v["table_bytes"].as_u64().unwrap();
                    assert!(pooled >= n * table, "every table from the pool: {r}");
                } else if var != "uio_pool" {
                    assert_eq!(pooled, 0, "{r}");
                }
                // The in-place variants read pages where the transfers put them.
                let fetched = r["bytes_fetched"].as_u64().unwrap();
                assert_eq!(
                    fetched > 0,
                    var.starts_with("uio") && var != "uio_copy",
                    "{r}"
                );
            }
        }
    }
    assert_eq!(v["breakdown"].as_array().unwrap().len(), 4);
    let raw = v["raw"].as_array().unwrap();
    assert!(raw.iter().any(|r| r["contender"] == "uio"));
    if v["fio_skipped"].is_null() {
        assert!(raw.iter().any(|r| r["contender"] == "fio_io_uring_sqpoll"));
    } else {
        zcio_vm::skip::skip(
            zcio_vm::skip::Capability::Fio,
            &format!("fio beside the layer: {}", v["fio_skipped"]),
        );
    }
}
