//! The receiving process as the side that starts it sees it: its connection, what it says on
//! its standard error, and how it ended.

use super::BenchError;
use std::io::Read;
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, ExitStatus};
use std::time::Instant;

/// A receiving process's standard error, read as it comes (so that the process never blocks
/// on a full pipe) and quoted if the process fails.
#[derive(Debug)]
pub struct Said(Option<std::thread::JoinHandle<String>>);

impl Said {
    /// Start reading `child`'s standard error, if it was piped (else there is nothing to say).
    pub fn collect(child: &mut Child) -> Said {
        Said(child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = e.read_to_string(&mut s);
                s
            })
        }))
    }

    /// What it said, once it has ended: its last lines (without the `zcio: ` its errors start
    /// with), `; `-separated.
    pub fn text(self) -> String {
        let Some(h) = self.0 else {
            return String::new();
        };
        let s = h.join().unwrap_or_default();
        let lines: Vec<&str> = s
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| l.strip_prefix("zcio: ").unwrap_or(l))
            .collect();
        lines[lines.len().saturating_sub(4)..].join("; ")
    }
}

/// Wait for a receiving process that should be done: an error, with what it said, unless it
/// succeeded.
pub(super) fn finish(mut child: Child, said: Said, who: &'static str) -> Result<(), BenchError> {
    let status: ExitStatus = child.wait()?;
    let said = said.text();
    if status.success() {
        Ok(())
    } else {
        Err(BenchError::Receiver {
            who,
            status: status.to_string(),
            said,
        })
    }
}

/// After the originator's error `e`: the socket shut, the receiver given 2 s to end (then
/// killed). Its own account where it failed (a receiver that found a message wrong says which
/// one), else `e`.
pub(super) fn settle(
    mut child: Child,
    said: Said,
    who: &'static str,
    sock: &UnixStream,
    e: BenchError,
) -> BenchError {
    let _ = sock.shutdown(std::net::Shutdown::Both);
    let status = crate::transfer::ended_within(&mut child, std::time::Duration::from_secs(2));
    if status.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    match status {
        Some(s) if !s.success() => BenchError::Receiver {
            who,
            status: s.to_string(),
            said: said.text(),
        },
        _ => e,
    }
}

pub(super) enum AcceptError {
    /// The receiving process ended first.
    Ended(ExitStatus),
    /// Accepting failed, or nobody connected for a minute.
    Failed(std::io::Error),
}

/// The receiving process's connection, unless it ends first or a minute passes.
/// The connection `accept` got from `child`, or the error: `who` ended before connecting (with
/// what it said), or accepting failed (the child is then killed).
pub(super) fn connection(
    accepted: Result<UnixStream, AcceptError>,
    child: &mut Child,
    who: &'static str,
    said: Said,
) -> Result<(UnixStream, Said), BenchError> {
    match accepted {
        Ok(s) => Ok((s, said)),
        Err(AcceptError::Ended(status)) => Err(BenchError::Receiver {
            who,
            status: format!("{status}, before connecting"),
            said: said.text(),
        }),
        Err(AcceptError::Failed(e)) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e.into())
        }
    }
}

pub(super) fn accept(
    listener: &UnixListener,
    child: &mut Child,
) -> Result<UnixStream, AcceptError> {
    let failed = AcceptError::Failed;
    listener.set_nonblocking(true).map_err(failed)?;
    let t0 = Instant::now();
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).map_err(failed)?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(failed(e)),
        }
        if let Some(status) = child.try_wait().map_err(failed)? {
            return Err(AcceptError::Ended(status));
        }
        if t0.elapsed() > std::time::Duration::from_secs(60) {
            return Err(failed(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the receiving process did not connect within a minute",
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
