//! Waits that end other than in what they wait for: after a time, or at a signal where the
//! caller asks for that ([`Waits`]), for the memory network and the socket and pipe modules.

use crate::error::{GenieError, Result};
use rustix::event::PollFd;
use std::time::Duration;

/// Wait until one of `fds` is ready or `timeout` (`None`: no limit) passes; a signal ends the
/// wait with [`GenieError::Interrupted`] (see [`Wait::poll`] for the waits that go on).
fn poll(fds: &mut [PollFd<'_>], timeout: Option<Duration>) -> Result<()> {
    let ts = timeout.map(|d| rustix::time::Timespec {
        tv_sec: d.as_secs() as _,
        tv_nsec: d.subsec_nanos() as _,
    });
    match rustix::event::poll(fds, ts.as_ref()) {
        Ok(_) => Ok(()),
        Err(rustix::io::Errno::INTR) => Err(GenieError::Interrupted { during: "poll" }),
        Err(e) => Err(GenieError::io("poll", e)),
    }
}

/// How an endpoint's waits may end other than in what they wait for. On the memory network:
/// the waits for a message to begin (`recv`, `recv_region`, `peek_len`, `recv_alloc`), for room
/// to announce one (`send`), for completions (`wait`, `flush`); on a socket or pipe
/// ([`crate::stream::StreamEnd::set_waits`]), the wait for a message's first bytes. Such an end
/// takes nothing and announces nothing: the endpoint goes on. Once a message's data is being
/// read, the read runs to its end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waits {
    /// Give a wait up after this long, with [`GenieError::TimedOut`]; `None`: wait as long as
    /// it takes (the peer's death still ends it).
    pub timeout: Option<Duration>,
    /// A signal delivered to the waiting thread ends the wait with
    /// [`GenieError::Interrupted`] (once its handler has run); otherwise the wait goes on.
    pub interruptible: bool,
}

/// One call's waits: when they run out, and whether a signal ends them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Wait {
    deadline: Option<(std::time::Instant, Duration)>,
    interruptible: bool,
}

impl Waits {
    /// The waits of a call starting now.
    pub(crate) fn start(&self) -> Wait {
        Wait {
            deadline: self.timeout.map(|t| (std::time::Instant::now() + t, t)),
            interruptible: self.interruptible,
        }
    }
}

impl Wait {
    /// A wait with no time limit that signals do not end.
    pub(crate) const FOREVER: Wait = Wait {
        deadline: None,
        interruptible: false,
    };

    /// The time this call has left (`None`: no limit), or [`GenieError::TimedOut`] when it has
    /// run out.
    pub(crate) fn left(&self, during: &'static str) -> Result<Option<Duration>> {
        match self.deadline {
            Some((at, after)) => {
                let now = std::time::Instant::now();
                if now >= at {
                    return Err(GenieError::TimedOut { during, after });
                }
                Ok(Some(at - now))
            }
            None => Ok(None),
        }
    }

    /// Whether a signal ends this call's waits.
    pub(crate) fn interruptible(&self) -> bool {
        self.interruptible
    }

    /// Poll `fds` for at most `cap`, or until this call's time runs out (then
    /// [`GenieError::TimedOut`]) or a signal ends the wait where the call allows it.
    pub(crate) fn poll(
        &self,
        fds: &mut [PollFd<'_>],
        cap: Option<Duration>,
        during: &'static str,
    ) -> Result<()> {
        let left = self.left(during)?;
        let t = match (left, cap) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match poll(fds, t) {
            Err(GenieError::Interrupted { .. }) if self.interruptible => {
                Err(GenieError::Interrupted { during })
            }
            Err(GenieError::Interrupted { .. }) => Ok(()),
            r => r,
        }
    }
}
