//! `zcio soak` for a minute: random transfers across processes, every byte checked, and the
//! sender's resources flat after the first cases.

use std::process::Command;

#[test]
fn a_minute_of_random_transfers_fails_nothing_and_leaks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_zcio"))
        .args(["soak", "--minutes", "1", "--max-bytes", "4194304", "--json"])
        .arg("--dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "soak failed: {stdout}\n{stderr}");
    let t: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(t["failures"].as_array().map(Vec::len), Some(0), "{t}");
    assert_eq!(t["grown"].as_array().map(Vec::len), Some(0), "{t}");
    // Enough cases to have drawn every semantics and module (8 × 5 kinds).
    let cases = t["cases"].as_u64().unwrap();
    assert!(cases > 100, "only {cases} cases in a minute: {t}");
    assert!(t["per_kind"].as_object().unwrap().len() >= 30, "{t}");
    assert_eq!(
        t["bytes"].as_u64().unwrap() > 0,
        t["messages"].as_u64().unwrap() > 0
    );
    // The data was checked: nothing written to the directory stays behind.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
