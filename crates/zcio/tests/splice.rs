//! `zcio bench splice` end to end, tiny: both variants on every pair, with positive
//! throughputs, latencies and availabilities (every run's data was checked at its end), and
//! the mechanism each pair got. Speeds are never compared: the machine decides them.

use std::process::Command;

#[test]
fn bench_splice_json_has_both_variants_on_every_pair() {
    let out = Command::new(env!("CARGO_BIN_EXE_zcio"))
        .args([
            "bench",
            "splice",
            "--json",
            "--mib",
            "2",
            "--rounds",
            "1",
            "--seconds",
            "0.05",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["bench"], "splice");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    for r in rows {
        for k in [
            "gbps",
            "latency_us",
            "pace_gbps",
            "paced_gbps",
            "cpu_availability",
        ] {
            let x = r[k].as_f64().unwrap();
            assert!(x.is_finite() && x > 0.0, "{k} in {r}");
        }
        let want = match (r["pair"].as_str().unwrap(), r["variant"].as_str().unwrap()) {
            (_, "read_write") => vec!["read/write"],
            ("file_to_socket", _) => vec!["sendfile"],
            ("file_to_file", _) => vec!["copy_file_range", "sendfile"],
            _ => vec!["splice"],
        };
        assert!(want.contains(&r["mechanism"].as_str().unwrap()), "{r}");
    }
    assert_eq!(v["verdicts"].as_array().unwrap().len(), 3);
    // The file system the files lived on is named.
    assert!(!v["files_fs"].as_str().unwrap().is_empty(), "{v}");
}
