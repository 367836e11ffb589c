//! What the examples that run as several processes share: the process you start plays the
//! first part and starts this same program again (`std::env::current_exe()`) for every other
//! part, naming it in `ZCIO_EXAMPLE_ROLE`.

use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::example::Result;

/// How long a part waits for another to connect before it gives up.
const CONNECT_LIMIT: Duration = Duration::from_secs(30);

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

/// Accept the connection of `role`, played by `child`, on `l`; fail as soon as `child` has
/// ended without connecting (it could not start its part), or after a while: a part that
/// cannot start must not leave this one waiting for good.
#[allow(dead_code)] // only the examples whose parts connect over a Unix socket
pub fn accept_from(l: &UnixListener, child: &mut Child, role: &str) -> Result<UnixStream> {
    accept_until(l, role, Some(child))
}

/// Accept the connection of `role`, whose process another part started, on `l`: fail after a
/// while rather than wait for good.
#[allow(dead_code)] // only the examples whose parts connect to each other
pub fn accept_within(l: &UnixListener, role: &str) -> Result<UnixStream> {
    accept_until(l, role, None)
}

/// Accept on `l`, looking every few milliseconds, watching `child` where given, and say which
/// part did not connect and why. The connection returned blocks.
fn accept_until(l: &UnixListener, role: &str, mut child: Option<&mut Child>) -> Result<UnixStream> {
    let accepting = |e: std::io::Error| format!("accepting the {role}'s connection: {e}");
    l.set_nonblocking(true).map_err(accepting)?;
    let t0 = Instant::now();
    loop {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).map_err(accepting)?;
                return Ok(s);
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(accepting(e).into()),
        }
        if let Some(c) = child.as_mut()
            && let Some(s) = c.try_wait().map_err(accepting)?
        {
            return Err(
                format!("the {role} ended ({s}) before connecting; see its message above").into(),
            );
        }
        if t0.elapsed() > CONNECT_LIMIT {
            return Err(format!("the {role} did not connect within {CONNECT_LIMIT:?}").into());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_that_ends_before_connecting_is_an_error_not_a_wait() {
        let dir = tempfile::tempdir().unwrap();
        let l = UnixListener::bind(dir.path().join("s")).unwrap();
        let mut child = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
        let t0 = Instant::now();
        let e = accept_from(&l, &mut child, "receiver")
            .unwrap_err()
            .to_string();
        assert!(e.contains("the receiver ended"), "{e}");
        assert!(e.contains('3'), "{e}");
        assert!(t0.elapsed() < CONNECT_LIMIT);
    }
}
