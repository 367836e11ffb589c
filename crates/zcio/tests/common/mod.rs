//! What the end-to-end tests share: the `zcio` binary this build made, and the JSON a run that
//! must succeed printed.

// Each test file uses what it needs of this module.
#![allow(dead_code)]

use std::process::{Command, Output};

/// The `zcio` binary this build made.
pub fn zcio() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zcio"))
}

/// The JSON `out` printed on stdout, having checked that the run succeeded (its stderr is the
/// failure's message).
pub fn json_of(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}
