//! `zcio bench vmmr --smoke`, real producers included: every producer's message at every size
//! and policy was reassembled and checked at the receiver (or the producer said why it cannot
//! run here), a spoiled message fails the run naming the producer, and the adaptive case's
//! whole-cycle costs are recorded. Timings are never compared: the machine decides them.

mod common;

use common::{json_of, zcio};

/// `v` as a time: a positive, finite number, or the test fails naming `what`.
fn positive(v: &serde_json::Value, what: &str) -> f64 {
    match v.as_f64() {
        Some(x) if x.is_finite() && x > 0.0 => x,
        _ => panic!("{what} is not a positive, finite number: {v}"),
    }
}

#[test]
fn the_smoke_preset_runs_both_producers_at_every_size_and_policy() {
    let out = zcio()
        .args(["bench", "vmmr", "--smoke", "--json"])
        .output()
        .unwrap();
    let v = json_of(&out);
    // The rest of the experiment ran beside them.
    assert!(!v["rows"].as_array().unwrap().is_empty());
    assert!(!v["random"].as_array().unwrap().is_empty());
    let rows = v["producers"].as_array().unwrap();
    // File and socket × (4 KiB at 1 and 16 pages, 2 MiB at 1 and 2 granules) × 3 policies.
    assert_eq!(rows.len(), 2 * 4 * 3, "{rows:?}");
    for producer in ["file", "socket"] {
        for (granule, sizes) in [("4k", [1, 16]), ("2m", [1, 2])] {
            for n in sizes {
                for policy in ["remap", "copy", "adaptive"] {
                    let r = rows
                        .iter()
                        .find(|r| {
                            r["producer"] == producer
                                && r["granule"] == granule
                                && r["granules"] == n
                                && r["policy"] == policy
                        })
                        .unwrap_or_else(|| panic!("{producer} {granule} {n} {policy} missing"));
                    check_row(r);
                }
            }
        }
    }
    // The adaptive case chose on the whole cycle, measured per granule.
    for c in v["plan"]["calibration"].as_array().unwrap() {
        positive(&c["cycle_granule_ns"], "cycle_granule_ns");
        assert!(c["cycle_call_ns"].as_f64().unwrap() >= 0.0, "{c}");
    }
}

/// One producer row: numbers, or the reason there are none.
fn check_row(r: &serde_json::Value) {
    if let Some(why) = r["refused"].as_str() {
        assert!(!why.is_empty(), "{r}");
        assert!(
            r["reassemble_ns"].is_null() && r["cycle_ns"].is_null(),
            "{r}"
        );
        eprintln!("{} not measured here: {why}", r["producer"]);
        return;
    }
    let socket = r["producer"] == "socket";
    let bytes = r["bytes"].as_u64().unwrap();
    let granules = r["granules"].as_u64().unwrap();
    let per = if r["granule"] == "2m" { 512 } else { 1 };
    assert_eq!(r["pages"].as_u64().unwrap(), granules * per, "{r}");
    assert_eq!(bytes, granules * per * 4096, "{r}");
    // Two timed messages after an untimed one; a socket receive brings two messages.
    let messages = if socket { 2 } else { 1 };
    let timed = r["iterations"].as_u64().unwrap();
    assert_eq!(timed, 2 * messages, "{r}");
    assert_eq!(
        r["verified_bytes"].as_u64().unwrap(),
        3 * messages * bytes,
        "every message checked: {r}"
    );
    for (m, spread) in [
        ("reassemble_ns", "reassemble_spread_ns"),
        ("cycle_ns", "cycle_spread_ns"),
    ] {
        let x = positive(&r[m], m);
        let [lo, hi] = [0, 1].map(|i| positive(&r[spread][i], spread));
        assert!(lo <= x && x <= hi, "{r}");
    }
    if !socket {
        // Each read and reassembly contains its reassembly.
        assert!(r["cycle_ns"].as_f64() >= r["reassemble_ns"].as_f64(), "{r}");
    }
    let runs = r["runs"].as_u64().unwrap();
    assert!((1..=granules).contains(&runs), "{r}");
    if socket && granules == 16 {
        // Two connections interleave in the ring: the message is scattered.
        assert!(runs > 1, "{r}");
    }
    let remapped = r["remapped"].as_u64().unwrap();
    match r["policy"].as_str().unwrap() {
        "remap" => assert_eq!(remapped, timed, "{r}"),
        "copy" => assert_eq!(remapped, 0, "{r}"),
        _ => assert!(remapped <= timed, "{r}"),
    }
}

#[test]
fn a_spoiled_producer_message_fails_the_run_by_name() {
    for producer in ["file", "socket"] {
        let out = zcio()
            .args([
                "bench",
                "vmmr",
                "--smoke",
                "--json",
                "--parts",
                "producers",
                "--spoil",
                producer,
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            assert!(
                err.contains(&format!("{producer} producer")) && err.contains("came out wrong"),
                "{err}"
            );
            continue;
        }
        // Only a producer that cannot run here lets a spoiled run through, and it says why.
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let rows = v["producers"].as_array().unwrap();
        assert!(
            rows.iter()
                .filter(|r| r["producer"] == producer)
                .all(|r| r["refused"].is_string()),
            "{producer}: a spoiled run succeeded: {err}"
        );
    }
}
