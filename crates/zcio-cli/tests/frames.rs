//! `zcio bench containers` end to end, tiny: every variant ran through real relay and display
//! processes, on pipelines of one and two relays, every frame's number was checked at the
//! display and the last frame whole, and every process said its CPU time. Speeds are never
//! compared: the machine decides them.

mod common;

use common::{bench_json, strings};
use std::sync::Mutex;

/// The benches of this file, one at a time: the kernel's counters of large folios, which one
/// of them reads, count the whole machine's.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn bench_containers_json_has_every_variant() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let v = bench_json(
        "containers",
        &[
            "--frames",
            "20",
            "--rounds",
            "1",
            "--relays",
            "1,2",
            "--frame",
            "640x480x1,128x128x4",
        ],
    );
    let rows = v["rows"].as_array().unwrap();
    let names = strings(&v["rows"], "variant");
    let variants = [
        "read_write",
        "containers",
        "containers_unmapped",
        "containers_pooled",
        "containers_pooled_copy",
        "containers_pooled_copy_unmapped",
        "containers_huge",
        "containers_huge_unmapped",
        "volatile",
        "volatile_unmapped",
    ];
    assert_eq!(names, [variants, variants, variants, variants].concat());
    assert_eq!(v["in_flight"], 8);
    for (k, r) in rows.iter().enumerate() {
        // The paper's frames first, then the smaller ones, as many bytes a run (at least 20).
        let (width, frames) = if k < 2 * variants.len() {
            (640, 20)
        } else {
            (128, 20 * 640 * 480 / (128 * 128 * 4))
        };
        assert_eq!(r["frame"]["width"], width, "{r}");
        assert_eq!(r["frames"], frames, "{r}");
        assert_eq!(r["relays"], 1 + (k / variants.len()) % 2);
        let cpu = r["cpu_us_per_frame"].as_f64().unwrap();
        assert!(cpu.is_finite() && cpu > 0.0, "{r}");
        let fps = r["fps"].as_f64().unwrap();
        assert!(fps.is_finite() && fps > 0.0, "{r}");
        assert!((r["animations"].as_f64().unwrap() - fps / 30.0).abs() < 1e-9);
        // One round: the processes' parts are the whole; only a pooled sender has a pool.
        let part = |k: &str| r["cpu_parts_us"][k].as_f64().unwrap();
        let sum = part("sender") + part("pool") + part("relays") + part("display");
        assert!((sum - cpu).abs() < 1e-6 * cpu, "{r}");
        let name = r["variant"].as_str().unwrap();
        let pooled = name.starts_with("containers_pooled") || name.starts_with("containers_huge");
        assert_eq!(part("pool") > 0.0, pooled, "{r}");
        // Only the variants in 2 MiB pages account for their files' pages.
        let share = r["huge_share"].as_f64();
        assert_eq!(share.is_some(), name.starts_with("containers_huge"), "{r}");
        assert!(share.is_none_or(|s| (0.0..=1.0).contains(&s)), "{r}");
    }
}

#[test]
fn bench_containers_refuses_a_frame_size_by_name() {
    for bad in ["640x480", "0x480x1", "3x3x1", "640x480xq", "9000x9000x4"] {
        let out = common::zcio()
            .args(["bench", "containers", "--frame", bad, "--json"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{bad} was taken");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(bad), "{bad}: {err}");
    }
}

/// A tiny `zcio bench containers`, one relay, the paper's frames, asked for `policy`.
fn with_policy(policy: &str) -> serde_json::Value {
    bench_json(
        "containers",
        &[
            "--frames",
            "20",
            "--rounds",
            "1",
            "--relays",
            "1",
            "--frame",
            "640x480x1",
            "--shmem-policy",
            policy,
        ],
    )
}

#[test]
fn bench_containers_measures_the_pooled_variants_again_under_a_policy_it_sets_and_puts_back() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let found = zcio_vm::shmem::ShmemPolicy::current().ok();
    let v = with_policy("within_size");
    assert_eq!(
        zcio_vm::shmem::ShmemPolicy::current().ok(),
        found,
        "the policy found is back"
    );
    assert_eq!(v["shmem_policy"].as_str(), found.map(|p| p.name()));
    // The probe's own judgement (`zcio probe`, `shmem-policy`).
    if let Some(why) = zcio_vm::shmem::unavailable_reason() {
        let refused = v["shmem_policy_refused"].as_str();
        assert!(refused.is_some_and(|r| !r.is_empty()), "{v}");
        zcio_vm::skip::skip(zcio_vm::skip::Capability::ShmemPolicy, &why);
        return;
    }
    assert!(v["shmem_policy_refused"].is_null(), "{v}");
    let rows = v["rows"].as_array().unwrap();
    let set: Vec<_> = rows
        .iter()
        .filter(|r| r["shmem_override"] == true)
        .collect();
    let names: Vec<_> = set.iter().map(|r| r["variant"].as_str().unwrap()).collect();
    if found == Some(zcio_vm::shmem::ShmemPolicy::WithinSize) {
        assert!(set.is_empty(), "the machine's own policy is not run twice");
        return;
    }
    assert_eq!(
        names,
        [
            "containers",
            "containers_unmapped",
            "containers_pooled",
            "containers_pooled_copy",
            "containers_pooled_copy_unmapped"
        ]
    );
    for r in &set {
        assert_eq!(r["shmem_policy"], "within_size", "{r}");
        let own = rows
            .iter()
            .find(|o| o["variant"] == r["variant"] && o["shmem_override"] == false)
            .unwrap();
        // 300 KiB fits 256 + 32 + 8 + 4 KiB: three large folios a file, counted over the
        // whole machine while the run went on.
        let folios = r["large_folios_per_frame"].as_f64().unwrap();
        assert!(folios >= 3.0, "{r}");
        let fps = r["fps"].as_f64().unwrap();
        assert!(fps.is_finite() && fps > 0.0, "{r}");
        if found.is_some_and(|p| !p.gives_large_folios()) {
            let before = own["large_folios_per_frame"].as_f64().unwrap();
            assert!(before < 1.0, "under {found:?}: {own}");
        }
    }
}

#[test]
fn bench_containers_refuses_an_unknown_policy_by_name() {
    let out = common::zcio()
        .args([
            "bench",
            "containers",
            "--shmem-policy",
            "sometimes",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("sometimes") && err.contains("within_size"),
        "{err}"
    );
}

#[test]
fn bench_containers_runs_without_the_policy_and_says_why_while_another_process_holds_it() {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // The probe's own judgement (`zcio probe`, `shmem-policy`).
    if let Some(why) = zcio_vm::shmem::unavailable_reason() {
        zcio_vm::skip::skip(zcio_vm::skip::Capability::ShmemPolicy, &why);
        return;
    }
    let found = zcio_vm::shmem::ShmemPolicy::current().unwrap();
    // This process holds an override (of the policy found: nothing changes meanwhile).
    let held = zcio_vm::shmem::PolicyOverride::set(found).unwrap();
    let want = if found == zcio_vm::shmem::ShmemPolicy::Always {
        "within_size"
    } else {
        "always"
    };
    let v = with_policy(want);
    drop(held);
    let why = v["shmem_policy_refused"].as_str().unwrap_or_default();
    assert!(why.contains("another process holds"), "{v}");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 10, "the machine's own policy only");
    assert!(rows.iter().all(|r| r["shmem_override"] == false));
    assert_eq!(zcio_vm::shmem::ShmemPolicy::current().unwrap(), found);
}
