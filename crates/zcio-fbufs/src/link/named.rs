//! Paths found by name: an originator offers its path under a name ([`PathName`]), and
//! receivers started on their own join it by that name ([`ReceiverEnd::join`]); a forwarder
//! joins upstream by one name and offers the path downstream under another. The names are
//! zcio's ([`zcio_vm::rendezvous`], their own space beside the memory network's): abstract
//! Unix sockets, open only to the originator's user unless it says otherwise.

use super::{LinkError, OriginatorEnd, ReceiverEnd};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;
use zcio_vm::rendezvous::{self, NamedListener};

/// The space of fbuf path names among zcio's names.
const SPACE: &str = "fbuf";

/// A name under which a path is offered to the receivers that join it.
#[derive(Debug)]
pub struct PathName {
    sock: NamedListener,
}

impl PathName {
    /// Offer a path under `name`. A name another path holds is refused with an error saying
    /// so.
    pub fn bind(name: &str) -> Result<PathName, LinkError> {
        Ok(PathName {
            sock: NamedListener::bind(SPACE, name)?,
        })
    }

    /// The name.
    pub fn name(&self) -> &str {
        self.sock.name()
    }

    /// Let receivers of any user join (by default only this process's user may).
    pub fn allow_any_user(&mut self, yes: bool) {
        self.sock.allow_any_user(yes);
    }

    /// Wait for the next receiver (at most `timeout`, where given) and offer it `end`'s path;
    /// returns its index among `end`'s receivers. A receiver of another user is refused and the
    /// error says so; the name goes on.
    pub fn accept(
        &self,
        end: &mut OriginatorEnd,
        timeout: Option<Duration>,
    ) -> Result<usize, LinkError> {
        let sock = self.accept_socket(timeout)?;
        end.add_receiver(sock)
    }

    /// Wait for the next receiver (at most `timeout`, where given) and return its socket,
    /// its user checked: for a forwarder, which offers the path it receives
    /// ([`super::Forwarder::new`]).
    pub fn accept_socket(&self, timeout: Option<Duration>) -> Result<UnixStream, LinkError> {
        Ok(self.sock.accept(timeout)?)
    }
}

impl AsFd for PathName {
    /// Readable when a receiver waits to be accepted.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

impl ReceiverEnd {
    /// Join the path offered under `name`, waiting up to `timeout` for it to be offered.
    pub fn join(name: &str, timeout: Duration) -> Result<ReceiverEnd, LinkError> {
        ReceiverEnd::connect(rendezvous::connect(SPACE, name, timeout)?)
    }
}
