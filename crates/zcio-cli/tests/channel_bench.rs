//! `zcio bench channel` end to end: zcio's channel against iceoryx2 and a Unix socket between
//! two processes, every contender at every size and granule asked for, every message checked,
//! every number there. No timing is asserted.

mod common;

use common::bench_json;

#[test]
fn every_contender_runs_at_every_size_and_granule_and_every_byte_is_checked() {
    let v = bench_json(
        "channel",
        &[
            "--bytes",
            "4096,1048576",
            "--rounds",
            "1",
            "--granules",
            "4k",
        ],
    );
    let rows = v["rows"].as_array().expect("rows");
    let contenders = ["zcio-copy", "zcio-emulated-copy", "iceoryx2", "unix"];
    assert_eq!(rows.len(), contenders.len() * 2, "{v:#}");
    for c in contenders {
        for bytes in [4096u64, 1048576] {
            let r = rows
                .iter()
                .find(|r| r["contender"] == c && r["bytes"] == bytes && r["granule"] == "4k")
                .unwrap_or_else(|| panic!("no row for {c} at {bytes} B: {v:#}"));
            assert_eq!(r["verified"], true, "{r:#}");
            for f in ["latency_ns", "throughput_gbps", "send_ns", "cpu_ns"] {
                let x = r[f]
                    .as_f64()
                    .unwrap_or_else(|| panic!("{f} missing: {r:#}"));
                assert!(x > 0.0 && x.is_finite(), "{f} = {x}: {r:#}");
            }
            assert!(r["messages"].as_u64().unwrap() >= 3, "{r:#}");
            assert!(
                r["checked_messages"].as_u64().unwrap() >= 2 * r["messages"].as_u64().unwrap(),
                "{r:#}"
            );
            if c.starts_with("zcio-") {
                // The window holds the message, so that a send need not wait for the receiver.
                assert!(r["window_bytes"].as_u64().unwrap() >= bytes, "{r:#}");
                assert!(!r["path"].as_str().unwrap().is_empty(), "{r:#}");
            }
        }
    }
}

#[test]
fn huge_page_buffers_are_a_granule_of_their_own_rows() {
    let v = bench_json(
        "channel",
        &[
            "--bytes",
            "2097152",
            "--rounds",
            "1",
            "--granules",
            "4k,2m",
            "--semantics",
            "emulated-copy",
            "--baselines",
            "unix",
            "--messages",
            "3",
        ],
    );
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 4, "{v:#}");
    for g in ["4k", "2m"] {
        for c in ["zcio-emulated-copy", "unix"] {
            let r = rows
                .iter()
                .find(|r| r["contender"] == c && r["granule"] == g)
                .unwrap_or_else(|| panic!("no row for {c} at {g}: {v:#}"));
            assert_eq!(r["verified"], true, "{r:#}");
            assert_eq!(r["messages"], 3, "{r:#}");
            assert!(r["throughput_gbps"].as_f64().unwrap() > 0.0, "{r:#}");
        }
    }
    // The ratios are computed from the rows at 2 MiB and up: one per granule, against unix.
    let ratios = v["ratios"].as_array().expect("ratios");
    assert_eq!(ratios.len(), 2, "{v:#}");
    for q in ratios {
        assert!(q["emulated_copy_vs_unix"].as_f64().unwrap() > 0.0, "{q:#}");
        assert!(q["emulated_copy_vs_iceoryx2"].is_null(), "{q:#}");
    }
}

#[test]
fn a_semantics_the_channel_cannot_send_from_a_buffer_is_refused_by_name() {
    let out = common::run(&["bench", "channel", "--semantics", "move", "--json"]);
    let err = common::failure(&out);
    assert!(err.contains("--semantics move"), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["error"].as_str().unwrap().contains("--semantics move"));
}
