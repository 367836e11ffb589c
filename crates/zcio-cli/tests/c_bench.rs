//! `zcio bench c` end to end: crates/zcio-c/c/bench.c compiled at run time against the
//! libzcio_c this build made, and the same job through the Rust API (the executable's own
//! `--peer` sides), 64 KiB messages, one round; every row verified (every byte of every
//! message checked by the receiver) and a ratio made. No timing is asserted.

mod common;

use std::process::Command;

#[test]
fn both_sides_run_verified_and_the_ratio_is_made() {
    let out = common::zcio()
        .args([
            "bench", "c", "--json", "--bytes", "65536", "--rounds", "1", "--volume", "4194304",
        ])
        .output()
        .unwrap();
    let v = common::json_of(&out);
    assert_eq!(v["bench"], "c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    if Command::new(&cc).arg("--version").output().is_err() {
        // No C compiler: the section says so and has no rows (what the report shows).
        let why = v["unavailable"].as_str().expect("the reason");
        assert!(why.contains("C compiler"), "{why}");
        eprintln!("{cc} cannot be run here: {why}");
        return;
    }
    assert!(v["unavailable"].is_null(), "{v:#}");
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2, "{v:#}");
    for c in ["c", "rust"] {
        let r = rows
            .iter()
            .find(|r| r["contender"] == c && r["bytes"] == 65536)
            .unwrap_or_else(|| panic!("no row for {c}: {v:#}"));
        assert_eq!(r["verified"], true, "{r:#}");
        assert_eq!(r["rounds"], 1, "{r:#}");
        assert_eq!(r["messages"], 64, "{r:#}");
        assert!(r["error"].is_null(), "{r:#}");
        let x = r["mib_s"].as_f64().expect("mib_s");
        assert!(x > 0.0 && x.is_finite(), "{r:#}");
        assert_eq!(
            r["samples_mib_s"].as_array().map(Vec::len),
            Some(1),
            "{r:#}"
        );
    }
    let q = &v["ratios"][0];
    assert_eq!(q["bytes"], 65536, "{v:#}");
    assert!(q["c_over_rust"].as_f64().is_some_and(|x| x > 0.0), "{q:#}");
    assert!(q["target_met"].is_boolean(), "{q:#}");
}

#[test]
fn a_size_or_a_round_count_the_bench_cannot_take_is_refused_by_name() {
    for (args, name) in [
        (&["--bytes", "0"][..], "--bytes 0"),
        (&["--rounds", "0"], "--rounds"),
    ] {
        let out = common::run(&[&["bench", "c", "--json"], args].concat());
        let err = common::failure(&out);
        assert!(err.contains(name), "{err}");
    }
}
