//! What the examples that run as several processes share: the process you start plays the
//! first part and starts this same program again (`std::env::current_exe()`) for every other
//! part, naming it in `ZCIO_EXAMPLE_ROLE`.

use std::process::Command;

use crate::example::Result;

/// Which part this process plays; unset in the process you start.
pub const ROLE: &str = "ZCIO_EXAMPLE_ROLE";

/// A command starting this program again in `role`. Under `cargo test` the program is the test
/// harness: run just the example's test `test`, which then plays the role.
pub fn peer_command(role: &str, test: &str) -> Result<Command> {
    let mut c = Command::new(std::env::current_exe()?);
    c.env(ROLE, role);
    if cfg!(test) {
        c.args([test, "--exact", "--nocapture", "--quiet"]);
    }
    Ok(c)
}

/// One part of an example: what it plays.
pub type Part = fn() -> Result<()>;

/// Play the part the environment names, one of `roles`, or start as the first (`run`).
pub fn dispatch(run: Part, roles: &[(&str, Part)]) -> Result<()> {
    match std::env::var(ROLE).as_deref() {
        Ok(other) => match roles.iter().find(|(name, _)| *name == other) {
            Some((_, play)) => play(),
            None => Err(format!("unknown role {other:?}").into()),
        },
        Err(_) => run(),
    }
}
