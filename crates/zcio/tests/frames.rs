//! `zcio bench containers` end to end, tiny: every variant ran through real relay and display
//! processes, every frame's number was checked at the display and the last frame whole.
//! Speeds are never compared: the machine decides them.

use std::process::Command;

#[test]
fn bench_containers_json_has_every_variant() {
    let out = Command::new(env!("CARGO_BIN_EXE_zcio"))
        .args([
            "bench",
            "containers",
            "--json",
            "--frames",
            "20",
            "--rounds",
            "1",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["bench"], "containers");
    let rows = v["rows"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["variant"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["read_write", "containers", "containers_unmapped"]);
    for r in rows {
        assert_eq!(r["frames"], 20);
        let fps = r["fps"].as_f64().unwrap();
        assert!(fps.is_finite() && fps > 0.0, "{r}");
        assert!((r["animations"].as_f64().unwrap() - fps / 30.0).abs() < 1e-9);
    }
}
