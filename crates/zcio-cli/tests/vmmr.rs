//! `zcio bench vmmr` end to end, at a tiny size set: every row and random map carries its
//! fields with positive, finite times, every message was checked (a spoiled one fails the run),
//! and bad arguments are named. Timings are never compared: the machine decides them.

mod common;

use common::{json_of, zcio};
use std::process::Output;

const TINY: [&str; 19] = [
    "bench",
    "vmmr",
    "--json",
    "--sizes-4k",
    "1,3",
    "--sizes-2m",
    "1",
    "--random-sizes",
    "1,4",
    "--regimes",
    "8000x3,2000x2",
    "--iterations",
    "2",
    "--cold-iterations",
    "1",
    "--random-iterations",
    "2",
    "--parts",
    "4k,2m,cold,random",
];

fn run(args: &[&str]) -> Output {
    zcio().args(args).output().unwrap()
}

fn positive(v: &serde_json::Value, what: &str) -> f64 {
    let x = v
        .as_f64()
        .unwrap_or_else(|| panic!("{what} is not a number: {v}"));
    assert!(x.is_finite() && x > 0.0, "{what} = {x}");
    x
}

#[test]
fn bench_vmmr_json_has_every_row_with_positive_finite_times() {
    let out = run(&TINY);
    let v = json_of(&out);
    assert_eq!(v["bench"], "vmmr");
    let moves = v["plan"]["move_available"] == true;
    let rows = v["rows"].as_array().unwrap();
    // Warm: (2 sizes of 4 KiB + 1 of 2 MiB) × 2 layouts; cold: 2 sizes × 2 layouts.
    assert_eq!(rows.len(), 3 * 2 + 2 * 2);
    for r in rows {
        let granule = r["granule"].as_str().unwrap();
        let layout = r["layout"].as_str().unwrap();
        assert!(["4k", "2m"].contains(&granule), "{r}");
        assert!(["scattered", "adjacent"].contains(&layout), "{r}");
        assert!(
            ["warm", "cold"].contains(&r["caches"].as_str().unwrap()),
            "{r}"
        );
        let granules = r["granules"].as_u64().unwrap();
        let per = if granule == "2m" { 512 } else { 1 };
        assert_eq!(r["pages"].as_u64().unwrap(), granules * per, "{r}");
        assert_eq!(r["bytes"].as_u64().unwrap(), granules * per * 4096, "{r}");
        positive(&r["memcpy_ns"], "memcpy_ns");
        for x in r["memcpy_spread_ns"].as_array().unwrap() {
            positive(x, "memcpy_spread_ns");
        }
        let cases = r["vmmr_ns"].as_object().unwrap();
        for case in ["no_search", "minimal_search", "worst_case_search"] {
            positive(&r["vmmr_ns"][case], case);
            let [lo, hi] = [0, 1].map(|i| positive(&r["vmmr_spread_ns"][case][i], case));
            assert!(lo <= hi, "{r}");
        }
        if r["caches"] == "warm" {
            for case in ["size_class_worst_case", "buddy", "copy", "adaptive"] {
                positive(&r["vmmr_ns"][case], case);
            }
            // The pool's part is timed for the cases that move pages.
            for (case, _) in cases {
                if !["copy", "adaptive"].contains(&case.as_str()) {
                    positive(&r["pool_ns"][case], "pool_ns");
                }
            }
            assert!(
                ["remap", "copy"].contains(&r["adaptive_path"].as_str().unwrap()),
                "{r}"
            );
        } else {
            assert!(r["adaptive_path"].is_null(), "{r}");
            assert!(r["vmmr_ns"].get("adaptive").is_none(), "{r}");
        }
        positive(&r["speedup"], "speedup");
        // One move call per granule scattered, one per message adjacent.
        let calls = if layout == "scattered" { granules } else { 1 };
        assert_eq!(r["move_calls"].as_u64().unwrap(), calls, "{r}");
        if moves {
            assert_eq!(r["copied_bytes"], 0, "{r}");
        }
    }
    let random = v["random"].as_array().unwrap();
    // Bitmap, size classes and buddy at 1 and 4 pages.
    assert_eq!(random.len(), 3 * 2);
    for s in random {
        let maps = s["maps"].as_array().unwrap();
        assert_eq!(maps.len(), 5, "{s}");
        for m in maps {
            let level = m["allocation_level"].as_f64().unwrap();
            assert!((0.0..=1.0).contains(&level), "{m}");
            for k in ["mean_ns", "median_ns", "min_ns", "max_ns", "pool_ns"] {
                positive(&m[k], k);
            }
        }
        for k in ["min_ns", "max_ns", "max_map_median_ns"] {
            positive(&s[k], k);
        }
    }
    let d = &v["derived"];
    assert_eq!(d["crossovers"].as_array().unwrap().len(), 6);
    for x in d["speedups"].as_array().unwrap() {
        positive(&x["speedup"], "speedup");
        positive(&x["vmmr_gbits"], "vmmr_gbits");
    }
    assert!(!d["costs"].as_array().unwrap().is_empty());
    // The adaptive case chose by the calibration it names, and is judged per warm series.
    let cal = v["plan"]["calibration"].as_array().unwrap();
    assert!(cal.iter().any(|c| c["granule"] == "4k"), "{cal:?}");
    for c in cal {
        assert!(["profile", "measured"].contains(&c["source"].as_str().unwrap()));
        assert!(!c["copy_by_size"].as_array().unwrap().is_empty(), "{c}");
    }
    let verdicts = d["adaptive"].as_array().unwrap();
    assert_eq!(verdicts.len(), 2 * cal.len(), "{verdicts:?}");
    for a in verdicts {
        assert_eq!(a["caches"], "warm");
        positive(&a["worst_ratio"], "worst_ratio");
        let sizes = if a["granule"] == "2m" { 1 } else { 2 };
        assert_eq!(a["sizes"], sizes, "{a}");
        assert_eq!(
            a["within_5_percent"],
            a["over_5_percent"].as_array().unwrap().is_empty(),
            "{a}"
        );
    }
}

#[test]
fn a_spoiled_message_fails_the_bench_loudly() {
    for case in ["memcpy", "minimal_search"] {
        let mut args: Vec<&str> = TINY.to_vec();
        args.extend(["--spoil", case]);
        let out = run(&args);
        assert!(!out.status.success(), "{case}: a spoiled run succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("came out wrong") && err.contains(case),
            "{err}"
        );
    }
}

#[test]
fn bad_arguments_are_named() {
    for (args, needle) in [
        (
            &["bench", "vmmr", "--parts", "teleport"][..],
            "--parts teleport",
        ),
        (&["bench", "vmmr", "--regimes", "500"][..], "--regimes 500"),
        (&["bench", "vmmr", "--sizes-4k", "0"][..], "sizes-4k"),
        (&["bench", "vmmr", "--iterations", "0"][..], "iterations"),
    ] {
        let out = run(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
