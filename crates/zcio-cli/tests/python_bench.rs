//! `zcio bench python` end to end: a 1 MiB numpy array from one Python process to another by
//! every contender (the Rust processes of the baseline among them), one round; every row
//! verified, and zcio's receiver never seeing the sender's later change. No timing is
//! asserted. numpy and iceoryx2's package are installed for the run where python3 cannot
//! import them ([`zcio_testkit::python`]).

mod common;

#[test]
fn every_contender_that_runs_is_verified_and_zcios_receiver_never_sees_the_later_change() {
    let path =
        zcio_testkit::python::path_with(&[], &[("numpy", "numpy"), ("iceoryx2", "iceoryx2")]);
    let v = common::json_of(
        &common::zcio()
            .args([
                "bench", "python", "--json", "--bytes", "1048576", "--rounds", "1",
            ])
            .env("PYTHONPATH", path)
            .output()
            .unwrap(),
    );
    assert_eq!(v["bench"], "python");
    let rows = v["rows"].as_array().expect("rows");
    assert!(v["unavailable"].is_null(), "{v:#}");
    let contenders = zcio_cli::lab::genie::python::CONTENDERS;
    assert_eq!(rows.len(), contenders.len(), "{v:#}");
    for c in contenders {
        let r = rows
            .iter()
            .find(|r| r["contender"] == c && r["bytes"] == 1048576)
            .unwrap_or_else(|| panic!("no row for {c}: {v:#}"));
        assert_eq!(r["verified"], true, "{r:#}");
        assert_eq!(r["rounds"], 1, "{r:#}");
        assert!(r["error"].is_null(), "{r:#}");
        for f in [
            "latency_ns",
            "send_ns",
            "cpu_ns",
            "first_latency_ns",
            "first_send_ns",
            "rss_a_kib",
            "rss_b_kib",
        ] {
            let x = r[f]
                .as_f64()
                .unwrap_or_else(|| panic!("{f} missing: {r:#}"));
            assert!(x > 0.0 && x.is_finite(), "{f} = {x}: {r:#}");
        }
        let [lo, hi] = [0, 1].map(|k| r["latency_spread_ns"][k].as_f64().unwrap());
        assert!(lo <= hi && lo > 0.0, "{r:#}");
        if c.starts_with("zcio") || c.starts_with("rust") {
            assert_eq!(r["saw_later_change"], false, "{r:#}");
        }
    }
}

#[test]
fn an_array_size_the_script_cannot_take_is_refused_by_name() {
    let out = common::run(&["bench", "python", "--bytes", "1001", "--json"]);
    let err = common::failure(&out);
    assert!(err.contains("--bytes 1001"), "{err}");
}
