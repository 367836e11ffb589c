//! `zcio bench checksum` end to end, at tiny sizes: every contender at every size with a
//! positive throughput (each was checked against RFC 1071's loop before it was timed), and
//! bad arguments named. Throughputs are never compared: the machine decides them.

mod common;

use common::{bench_json, failure, run};

#[test]
fn bench_checksum_json_has_every_contender_at_every_size() {
    let v = bench_json(
        "checksum",
        &[
            "--sizes",
            "64,4097,100000",
            "--rounds",
            "2",
            "--millis",
            "1",
            "--datagram-sizes",
            "64,1000",
        ],
    );
    let kernels: Vec<&str> = v["kernels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert!(kernels.contains(&"reference") && kernels.contains(&"unrolled"));
    let rows = v["rows"].as_array().unwrap();
    // Fused copy, two peers (one also built for the kernels' instruction sets), read.
    let contenders = kernels.len() + 5;
    assert_eq!(rows.len(), 3 * contenders);
    for r in rows {
        let g = r["gbps"].as_f64().unwrap();
        assert!(g.is_finite() && g > 0.0, "{r}");
        let [lo, hi] = [0, 1].map(|i| r["gbps_spread"][i].as_f64().unwrap());
        assert!(lo <= g && g <= hi, "{r}");
        assert!(
            ["kernel", "fused", "peer", "limit"].contains(&r["kind"].as_str().unwrap()),
            "{r}"
        );
    }
    for peer in [
        "internet-checksum",
        "internet-checksum/native",
        "ip4sum",
        "fused_copy",
        "read",
    ] {
        assert!(rows.iter().any(|r| r["contender"] == peer), "{peer}");
    }
    // Every datagram was checked at the receiver (a wrong checksum fails the run).
    let d = v["datagram"].as_array().unwrap();
    assert_eq!(d.len(), 2 * 3);
    for r in d {
        assert!(["naive", "optimized", "elided"].contains(&r["variant"].as_str().unwrap()));
        assert!(r["gbps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["datagrams"].as_u64().unwrap() > 0, "{r}");
        // The elision policy placed the Unix socket on this host and skipped the checksum;
        // the other variants always compute it.
        let elided = r["variant"] == "elided";
        assert_eq!(r["checksummed"], !elided, "{r}");
        if elided {
            assert_eq!(r["path"], "same host", "{r}");
        }
    }
}

#[test]
fn a_datagram_smaller_than_its_header_is_refused() {
    let err = failure(&run(&[
        "bench",
        "checksum",
        "--sizes",
        "64",
        "--datagram-sizes",
        "4",
    ]));
    assert!(err.contains("--datagram-sizes 4"), "{err}");
}

#[test]
fn a_bad_size_is_named() {
    let err = failure(&run(&["bench", "checksum", "--sizes", "0"]));
    assert!(err.contains("--sizes 0"), "{err}");
}
