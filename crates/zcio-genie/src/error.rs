//! Errors of the Genie layer: typed, each naming the argument and the rule it broke.

use crate::semantics::Semantics;
use zcio_vm::VmError;

/// What went wrong in a data transfer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GenieError {
    /// An argument broke a rule of the call.
    #[error("invalid argument `{arg}`: {rule}")]
    InvalidArgument {
        /// Which argument.
        arg: &'static str,
        /// The rule it broke, with the values involved.
        rule: String,
    },
    /// The module cannot carry this semantics and the caller asked not to fall back.
    #[error("{semantics} is not supported by the {module} module: {reason}")]
    Unsupported {
        /// The semantics asked for.
        semantics: Semantics,
        /// The module.
        module: &'static str,
        /// Why.
        reason: String,
    },
    /// The peer went away (closed, crashed or was killed) during the transfer.
    #[error("peer disappeared during {during}")]
    PeerGone {
        /// What was in progress.
        during: &'static str,
    },
    /// Fewer bytes arrived than the transfer needed (short file, truncated message).
    #[error("truncated input: expected {expected} bytes, got {got}")]
    Truncated {
        /// Bytes expected.
        expected: usize,
        /// Bytes received.
        got: usize,
    },
    /// The peer broke the protocol of the memory network (a buggy or malicious peer).
    #[error("peer broke the protocol: {0}")]
    Protocol(String),
    /// A system call failed.
    #[error("{op} failed: {source}")]
    Io {
        /// The operation.
        op: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The VM layer failed.
    #[error(transparent)]
    Vm(#[from] VmError),
    /// A wait ran out of the time the endpoint allows its waits ([`crate::memnet::Waits`]);
    /// nothing was taken, and the endpoint goes on.
    #[error("timed out after {after:?} {during}")]
    TimedOut {
        /// What was waited for.
        during: &'static str,
        /// The time allowed.
        after: std::time::Duration,
    },
    /// The output's window has no room for the message now, and the endpoint was asked not
    /// to wait for it ([`crate::memnet::WindowFull::WouldBlock`]); nothing was announced, and
    /// the endpoint goes on: try again when an earlier output has completed.
    #[error(
        "the window has no room for {len} bytes now ({window} bytes, {pending} outputs pending)"
    )]
    WouldBlock {
        /// The message's length.
        len: usize,
        /// The window.
        window: usize,
        /// Outputs not yet completed.
        pending: usize,
    },
    /// A signal reached the thread during a wait the endpoint lets signals end
    /// ([`crate::memnet::Waits`]); nothing was taken, and the endpoint goes on.
    #[error("interrupted by a signal {during}")]
    Interrupted {
        /// What was waited for.
        during: &'static str,
    },
    /// The caller may not do this (a process of another user connecting to a channel).
    #[error("not permitted: {reason}")]
    NotPermitted {
        /// Who asked for what, and who may.
        reason: String,
    },
    /// The buffer is smaller than the next message. The message stays queued: a call with a
    /// buffer of `needed` bytes (or one that allocates, `recv_alloc`) receives it.
    #[error(
        "the next message is {needed} bytes, and the buffer only {got}: the message stays queued"
    )]
    TooSmall {
        /// The message's length.
        needed: usize,
        /// The buffer's length.
        got: usize,
    },
    /// An earlier call on this endpoint failed partway through a message (the peer died, the
    /// module failed), so that the endpoint can no longer tell where the next message starts:
    /// it refuses every later call in that direction rather than hand out the wrong bytes.
    /// Make a new endpoint.
    #[error(
        "this endpoint refuses {direction}: an earlier {direction} failed partway through a message ({cause})"
    )]
    Broken {
        /// `input` or `output`.
        direction: &'static str,
        /// The error of the call that failed.
        cause: String,
    },
    /// A message was lost on the way (a datagram module on a real network, or a receiver
    /// later than its window allowed); the endpoint goes on with the next message.
    #[error("message {seq} ({len} bytes) was lost on the way: {detail}")]
    MessageLost {
        /// The message's sequence number (from 0 on the endpoint's wire).
        seq: u64,
        /// Its length: as its datagrams announced it, or as the input asked where none of
        /// them arrived.
        len: usize,
        /// What was seen of it.
        detail: String,
    },
}

impl GenieError {
    pub(crate) fn io(op: &'static str, e: impl Into<std::io::Error>) -> Self {
        GenieError::Io {
            op,
            source: e.into(),
        }
    }

    pub(crate) fn arg(arg: &'static str, rule: impl Into<String>) -> Self {
        GenieError::InvalidArgument {
            arg,
            rule: rule.into(),
        }
    }

    /// Refuse a call in `direction` where an earlier one failed partway through a message
    /// (`broken` holds its error).
    pub(crate) fn refuse_broken(broken: &Option<String>, direction: &'static str) -> Result<()> {
        match broken {
            Some(cause) => Err(GenieError::Broken {
                direction,
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Map broken-pipe / end-of-file style VM errors to [`GenieError::PeerGone`].
    pub(crate) fn from_wire(e: VmError, during: &'static str) -> Self {
        let gone = match &e {
            VmError::Sys { source, .. } => {
                matches!(
                    source.kind(),
                    std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::BrokenPipe
                ) || source.raw_os_error() == Some(rustix::io::Errno::PIPE.raw_os_error())
                    || source.raw_os_error() == Some(rustix::io::Errno::CONNRESET.raw_os_error())
            }
            _ => false,
        };
        if gone {
            GenieError::PeerGone { during }
        } else {
            GenieError::Vm(e)
        }
    }
}

impl From<zcio_vm::rendezvous::RendezvousError> for GenieError {
    fn from(e: zcio_vm::rendezvous::RendezvousError) -> Self {
        use zcio_vm::rendezvous::RendezvousError as R;
        match e {
            R::BadName { .. } | R::Taken { .. } => GenieError::arg("name", e.to_string()),
            R::TimedOut { during, after } => GenieError::TimedOut { during, after },
            R::Interrupted { during } => GenieError::Interrupted { during },
            R::NotPermitted { .. } => GenieError::NotPermitted {
                reason: e.to_string(),
            },
            R::Io { op, source } => GenieError::Io { op, source },
            _ => GenieError::io("meeting by name", std::io::Error::other(e.to_string())),
        }
    }
}

/// What kind of failure a [`GenieError`] is, for matching without its details
/// ([`GenieError::kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An argument broke a rule of the call.
    InvalidArgument,
    /// The module cannot carry the semantics without copying, and the caller refused that.
    Unsupported,
    /// The peer is gone.
    PeerGone,
    /// A wait ran out of its time.
    TimedOut,
    /// A signal ended a wait.
    Interrupted,
    /// The buffer is smaller than the next message, which stays queued.
    TooSmall {
        /// The message's length.
        needed: usize,
    },
    /// Fewer bytes arrived than the input asked for.
    Truncated,
    /// A message was lost on the way.
    MessageLost,
    /// The endpoint refuses calls in this direction after an earlier failure.
    Refused,
    /// The call would have waited, and the caller asked it not to.
    WouldBlock,
    /// The caller may not do this.
    NotPermitted,
    /// The peer broke the protocol.
    Protocol,
    /// A system call failed, with its errno where there is one.
    Io {
        /// The errno.
        errno: Option<i32>,
    },
    /// Something else the VM layer refused (a length, an alignment, a limit).
    Vm,
}

impl GenieError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        match self {
            GenieError::InvalidArgument { .. } => ErrorKind::InvalidArgument,
            GenieError::Unsupported { .. } => ErrorKind::Unsupported,
            GenieError::PeerGone { .. } => ErrorKind::PeerGone,
            GenieError::TimedOut { .. } => ErrorKind::TimedOut,
            GenieError::Interrupted { .. } => ErrorKind::Interrupted,
            GenieError::WouldBlock { .. } => ErrorKind::WouldBlock,
            GenieError::TooSmall { needed, .. } => ErrorKind::TooSmall { needed: *needed },
            GenieError::Truncated { .. } => ErrorKind::Truncated,
            GenieError::MessageLost { .. } => ErrorKind::MessageLost,
            GenieError::Broken { .. } => ErrorKind::Refused,
            GenieError::NotPermitted { .. } => ErrorKind::NotPermitted,
            GenieError::Protocol(_) => ErrorKind::Protocol,
            GenieError::Io { source, .. } => ErrorKind::Io {
                errno: source.raw_os_error(),
            },
            GenieError::Vm(e) => match e.errno() {
                Some(errno) => ErrorKind::Io { errno: Some(errno) },
                None => ErrorKind::Vm,
            },
        }
    }
}

/// Result of the Genie layer.
pub type Result<T, E = GenieError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_has_its_kind() {
        let io = std::io::Error::from_raw_os_error(libc::EBADF);
        let cases = [
            (GenieError::arg("buf", "x"), ErrorKind::InvalidArgument),
            (
                GenieError::Unsupported {
                    semantics: crate::Semantics::Share,
                    module: "pipe",
                    reason: "x".into(),
                },
                ErrorKind::Unsupported,
            ),
            (GenieError::PeerGone { during: "x" }, ErrorKind::PeerGone),
            (
                GenieError::TimedOut {
                    during: "x",
                    after: std::time::Duration::from_millis(1),
                },
                ErrorKind::TimedOut,
            ),
            (
                GenieError::Interrupted { during: "x" },
                ErrorKind::Interrupted,
            ),
            (
                GenieError::WouldBlock {
                    len: 1,
                    window: 2,
                    pending: 3,
                },
                ErrorKind::WouldBlock,
            ),
            (
                GenieError::TooSmall { needed: 9, got: 3 },
                ErrorKind::TooSmall { needed: 9 },
            ),
            (
                GenieError::Truncated {
                    expected: 2,
                    got: 1,
                },
                ErrorKind::Truncated,
            ),
            (
                GenieError::MessageLost {
                    seq: 1,
                    len: 2,
                    detail: "x".into(),
                },
                ErrorKind::MessageLost,
            ),
            (
                GenieError::Broken {
                    direction: "input",
                    cause: "x".into(),
                },
                ErrorKind::Refused,
            ),
            (GenieError::Protocol("x".into()), ErrorKind::Protocol),
            (
                GenieError::NotPermitted { reason: "x".into() },
                ErrorKind::NotPermitted,
            ),
            (
                GenieError::io("read", io),
                ErrorKind::Io {
                    errno: Some(libc::EBADF),
                },
            ),
            (GenieError::Vm(VmError::Empty { what: "x" }), ErrorKind::Vm),
        ];
        for (e, kind) in cases {
            assert_eq!(e.kind(), kind, "{e}");
        }
    }
}
