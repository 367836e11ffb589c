//! One test of this test binary run again in a child process, with environment variables set:
//! for settings a library reads once per process (`ZCIO_VM_DISABLE`), so that a test can see
//! both sides of one on the same machine.

use std::process::{Command, ExitStatus};

/// What the child did: how it ended and what it printed.
pub struct Rerun {
    /// How it ended.
    pub status: ExitStatus,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl Rerun {
    /// Whether it ended well and printed `done` (the line its scenario prints at its end, so
    /// that a child which ran no test at all does not pass).
    pub fn finished(&self, done: &str) -> bool {
        self.status.success() && self.stdout.contains(done)
    }
}

/// Run `test` (its whole name) of this test binary alone in a child, with `env` set, its
/// output not captured, and wait for it.
pub fn rerun(test: &str, env: &[(&str, &str)]) -> Rerun {
    let out = Command::new(std::env::current_exe().expect("this test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .envs(env.iter().copied())
        .output()
        .expect("the test binary runs again");
    Rerun {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
