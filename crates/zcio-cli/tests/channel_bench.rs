//! `zcio bench channel` end to end: zcio's channel against iceoryx2 and a Unix socket between
//! two processes, every contender at every size and granule asked for (small messages, of
//! lengths no multiple of a word or a page, and large ones), one-way and ping-pong latency,
//! every message and reply checked, every number there. No timing is asserted.

mod common;

use common::bench_json;

#[test]
fn every_contender_runs_at_every_size_and_granule_and_every_byte_is_checked() {
    let sizes = [64u64, 4096, 1048576];
    let v = bench_json(
        "channel",
        &[
            "--bytes",
            "64,4096,1048576",
            "--rounds",
            "1",
            "--granules",
            "4k",
        ],
    );
    let rows = v["rows"].as_array().expect("rows");
    let contenders = [
        "zcio-copy",
        "zcio-emulated-copy",
        "zcio-loan",
        "zcio-loan-volatile",
        "iceoryx2",
        "unix",
    ];
    assert_eq!(rows.len(), contenders.len() * sizes.len(), "{v:#}");
    for c in contenders {
        for bytes in sizes {
            let r = rows
                .iter()
                .find(|r| r["contender"] == c && r["bytes"] == bytes && r["granule"] == "4k")
                .unwrap_or_else(|| panic!("no row for {c} at {bytes} B: {v:#}"));
            assert_eq!(r["verified"], true, "{r:#}");
            for f in [
                "latency_ns",
                "pingpong_ns",
                "throughput_gbps",
                "send_ns",
                "cpu_ns",
            ] {
                let x = r[f]
                    .as_f64()
                    .unwrap_or_else(|| panic!("{f} missing: {r:#}"));
                assert!(x > 0.0 && x.is_finite(), "{f} = {x}: {r:#}");
            }
            let [lo, hi] = [0, 1].map(|k| r["pingpong_spread_ns"][k].as_f64().unwrap());
            assert!(lo <= hi && lo > 0.0, "{r:#}");
            let (n, s) = (
                r["messages"].as_u64().unwrap(),
                r["round_trips"].as_u64().unwrap(),
            );
            assert!(n >= 3 && (1..=n.min(2000)).contains(&s), "{r:#}");
            // Small messages are streamed by the thousand (16384 of 64 bytes), large ones fewer.
            match bytes {
                64 => assert_eq!((n, s), (16384, 2000), "{r:#}"),
                4096 => assert_eq!((n, s), (2000, 2000), "{r:#}"),
                _ => assert_eq!((n, s), (128, 128), "{r:#}"),
            }
            // Every message (one at a time, ping-pong, streamed) and every reply.
            assert!(
                r["checked_messages"].as_u64().unwrap() >= n + 3 * s,
                "{r:#}"
            );
            if c.starts_with("zcio-") {
                // The window holds the message, so that a send need not wait for the receiver.
                assert!(r["window_bytes"].as_u64().unwrap() >= bytes, "{r:#}");
                assert!(!r["path"].as_str().unwrap().is_empty(), "{r:#}");
            }
            if c == "zcio-loan-volatile" {
                // Lent and mapped in place, no byte copied; below 1 MiB more messages are
                // held at once than files are lent, and the others are sealed loans.
                let path = r["path"].as_str().unwrap();
                let lent = "output: weak move: a volatile memory file lent, its mapping kept; \
                            input: weak move: a volatile memory file mapped in place";
                if bytes == 1048576 {
                    assert!(
                        path.starts_with(lent) && !path.contains("volatile: "),
                        "{r:#}"
                    );
                } else {
                    assert!(
                        path.contains("; volatile: ") && !path.contains("NOT MAPPED"),
                        "{r:#}"
                    );
                }
            }
            if c == "zcio-loan" {
                // Every loan's pages passed and mapped: no byte copied.
                let path = r["path"].as_str().unwrap();
                assert!(
                    path.contains("sealed memory file's pages handed over")
                        && path.contains("sealed memory file mapped privately"),
                    "{r:#}"
                );
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
