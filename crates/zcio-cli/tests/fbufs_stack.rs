//! `zcio bench fbufs-stack` (paper 001, Figures 4-6) end to end: every contender delivers
//! datagrams of awkward sizes through the stack byte for byte, a spoiled or missing datagram
//! fails the run with the receiving application's account naming the contender, the datagram
//! and the fragment, and the experiment's smoke preset writes its section and its report.

mod common;

use common::{json_of, read_json, strings, succeeded, zcio};
use zcio_cli::lab::fbufs::stack::proto::{PAGE, Touch};
use zcio_cli::lab::fbufs::stack::{Contender, Stream};

/// 1 byte, one short of the MTU, the MTU, one past it, and 64 KiB + 3.
const ODD: &str = "1,4095,4096,4097,65539";

#[test]
fn every_contender_delivers_odd_sizes_byte_for_byte() {
    let out = zcio()
        .args([
            "bench",
            "fbufs-stack",
            "--sizes",
            ODD,
            "--touch",
            "every-byte-exact",
        ])
        .args([
            "--rounds",
            "1",
            "--volume",
            "65536",
            "--op-iters",
            "0",
            "--json",
        ])
        .output()
        .unwrap();
    let v = json_of(&out);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4 * 5, "{rows:?}");
    for c in Contender::ALL {
        for (bytes, fragments) in [(1, 1), (4095, 2), (4096, 2), (4097, 2), (65539, 17)] {
            let r = rows
                .iter()
                .find(|r| r["variant"] == c.name() && r["bytes"] == bytes)
                .unwrap_or_else(|| panic!("{} at {bytes} missing", c.name()));
            assert_eq!(r["fragments"], fragments, "{r}");
            assert_eq!(r["touch"], "every-byte-exact");
            let ns = r["ns_per_datagram"].as_f64().unwrap();
            assert!(ns > 0.0 && ns.is_finite(), "{r}");
        }
    }
    assert_eq!(v["mtu"], PAGE);
}

/// Run one contender with `fault` at `bytes`: its standard error, having checked it failed.
fn failing(c: Contender, touch: Touch, bytes: usize, fault: &str) -> String {
    let out = zcio()
        .args([
            "bench",
            "fbufs-stack",
            "--contenders",
            c.name(),
            "--touch",
            touch.name(),
        ])
        .args([
            "--sizes",
            &bytes.to_string(),
            "--rounds",
            "1",
            "--volume",
            "65536",
        ])
        .args(["--op-iters", "0", "--fault", fault])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(
        !out.status.success(),
        "{} {touch:?} {fault}: the run succeeded",
        c.name()
    );
    err
}

#[test]
fn a_spoiled_fragment_fails_the_run_naming_the_contender_datagram_and_fragment() {
    let bytes = 65539;
    for c in Contender::ALL {
        for touch in Touch::ALL {
            // The sender spoils the first word of the datagram's last page: fragment 16.
            let s = Stream::new(bytes, 16, PAGE, touch);
            let err = failing(c, touch, bytes, "corrupt:2");
            let want = format!(
                "{}: datagram {} (of {bytes} bytes), fragment 16: the receiving application read",
                c.name(),
                s.warm + 2
            );
            assert!(err.contains(&want), "{} {touch:?}: {err}", c.name());
            if touch == Touch::Exact {
                // One more than the offset of the byte spoiled: 65536, the last page's first.
                assert!(err.contains("read 0x0000000000010001"), "{err}");
            }
        }
    }
}

#[test]
fn a_missing_datagram_fails_the_run() {
    for c in Contender::ALL {
        let err = failing(c, Touch::Word, 5000, "skip:3");
        assert!(err.contains(c.name()), "{}: {err}", c.name());
    }
}

#[test]
fn the_smoke_preset_writes_its_section_claims_and_figure() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let r = zcio()
        .args(["report", "--smoke", "--only", "fbufs-stack", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    succeeded(&r);
    let results = read_json(&out.join("results.json"));
    let s = &results["fbufs-stack"];
    let rows = s["rows"].as_array().unwrap();
    // Smoke: two sizes, four contenders, one touch.
    assert_eq!(rows.len(), 2 * 4, "{s}");
    let ops = strings(&s["ops"], "op");
    for op in [
        "join",
        "split",
        "prepend-header",
        "fragment-datagram",
        "walk-reassemble",
    ] {
        assert!(ops.contains(&op), "{op} missing: {ops:?}");
    }
    let md = std::fs::read_to_string(out.join("REPORT.md")).unwrap();
    assert!(
        md.contains("Paper 001 — UDP/IP through protection domains"),
        "{md}"
    );
    assert!(
        md.contains("keeps over 90% of one domain's throughput"),
        "{md}"
    );
    assert!(
        out.join("plots/fbufs-stack-fig4-word-per-page.svg")
            .is_file()
    );
}

#[test]
fn an_unknown_contender_or_touch_or_an_empty_datagram_is_refused_by_name() {
    for (args, want) in [
        (["--contenders", "fbufs-nope"], "--contenders fbufs-nope"),
        (["--touch", "every-other-byte"], "--touch every-other-byte"),
        (["--sizes", "0"], "--sizes must be positive"),
    ] {
        let out = zcio()
            .args(["bench", "fbufs-stack", "--rounds", "1", "--op-iters", "0"])
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(want),
            "{args:?}: {err}"
        );
    }
}
