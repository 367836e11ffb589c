//! What the end-to-end tests share: the `zcio` binary this build made, its runs that must
//! succeed or fail, and the JSON they print or write.

// Each test file uses what it needs of this module.
#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

/// The `zcio` binary this build made.
pub fn zcio() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zcio"))
}

/// A `zcio bench fbufs` small enough for a test: two sizes, one round of 1 MiB.
pub const FBUFS_TWO_SIZES: &[&str] = &[
    "--sizes",
    "4096,65536",
    "--rounds",
    "1",
    "--volume",
    "1048576",
];

/// `zcio` run to its end with `args`.
pub fn run(args: &[&str]) -> Output {
    zcio().args(args).output().unwrap()
}

/// Check that the run succeeded (its stderr is the failure's message).
pub fn succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The stderr of a run that must fail, having checked that it failed.
pub fn failure(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "the run succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The JSON `out` printed on stdout, having checked that the run succeeded (its stderr is the
/// failure's message).
pub fn json_of(out: &Output) -> serde_json::Value {
    succeeded(out);
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The JSON `zcio bench <bench> --json <args>` printed, having checked that the run succeeded
/// and that the JSON says it is that bench's.
pub fn bench_json(bench: &str, args: &[&str]) -> serde_json::Value {
    let v = json_of(&run(&[&["bench", bench, "--json"], args].concat()));
    assert_eq!(v["bench"], bench);
    v
}

/// The JSON document in the file at `path`.
pub fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The string under `key` of every element of the array `v`.
pub fn strings<'a>(v: &'a serde_json::Value, key: &str) -> Vec<&'a str> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|e| e[key].as_str().unwrap())
        .collect()
}
