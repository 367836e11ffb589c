//! Memory-network links between processes that find each other by name: a [`Listener`] binds a
//! name, each [`connect`] to it gets a link of its own.
//!
//! A name is an abstract Unix socket ([`zcio_vm::rendezvous`]: nothing in the file system to
//! clean up; it goes when the listener does; both processes must share a network namespace,
//! where abstract names live). The listener makes a link's parts, hands the client its side
//! over the socket, and waits for the client's word that it mapped the shared arena at the
//! agreed address; where that address is taken in the client, the listener makes the parts
//! again elsewhere (a few times). Only a process of the listener's own user may connect unless
//! the listener says otherwise ([`Listener::allow_any_user`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use zcio_genie::memnet::channel::{Listener, connect};
//! use zcio_genie::{InputBuffering, Semantics};
//!
//! // One process:
//! let listener = Listener::bind("frames")?;
//! let mut rx = listener.accept(None)?;
//! let (got, _) = rx.recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux)?;
//!
//! // Another, started on its own:
//! let mut tx = connect("frames", Duration::from_secs(5))?;
//! let (ticket, _) = tx.send(Semantics::EmulatedCopy, &vec![7u8; 1 << 20])?;
//! tx.wait(ticket)?;
//! # Ok::<(), zcio_genie::GenieError>(())
//! ```

use super::{LinkOptions, LinkParts, MemnetEndpoint, link_parts_with};
use crate::error::{GenieError, Result};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;
use zcio_vm::rendezvous::{self, NamedListener};

/// The space of memory-network names among zcio's names ([`zcio_vm::rendezvous`]).
const SPACE: &str = "memnet";

/// Times the listener makes a link's parts again where the client could not map the arena.
const PLACEMENT_TRIES: usize = 8;

/// The client's word after it received a link's parts.
const JOINED: u8 = 1;
const PLACE_TAKEN: u8 = 2;

/// How long a step of the setup may take once a client is connected (a client that connects
/// and then does nothing must not hold the listener for ever).
const SETUP: Duration = Duration::from_secs(10);

/// A name other processes connect to, each getting a memory-network link of its own.
#[derive(Debug)]
pub struct Listener {
    sock: NamedListener,
    link: LinkOptions,
}

impl Listener {
    /// Bind `name`. A name another listener holds is refused with an error saying so.
    pub fn bind(name: &str) -> Result<Listener> {
        Ok(Listener {
            sock: NamedListener::bind(SPACE, name)?,
            link: LinkOptions::default(),
        })
    }

    /// The name.
    pub fn name(&self) -> &str {
        self.sock.name()
    }

    /// Let processes of any user connect (by default only this process's user may).
    pub fn allow_any_user(&mut self, yes: bool) {
        self.sock.allow_any_user(yes);
    }

    /// How the links of the next clients are made (their window, [`LinkOptions`]): the
    /// listener's choice holds for both ends.
    pub fn set_link_options(&mut self, opts: LinkOptions) {
        self.link = opts;
    }

    /// Wait for the next client (at most `timeout`, where given; a signal ends that wait with
    /// [`GenieError::Interrupted`]) and set its link up; returns this side's endpoint. A
    /// client of another user is refused (its connection closed) and the error says so; the
    /// listener goes on.
    pub fn accept(&self, timeout: Option<Duration>) -> Result<MemnetEndpoint> {
        let conn = self.sock.accept(timeout)?;
        setup_timeouts(&conn)?;
        for _ in 0..PLACEMENT_TRIES {
            let (mine, theirs, arena) = link_parts_with(self.link)?;
            theirs.send_over(&conn)?;
            let mut word = [0u8; 1];
            (&conn)
                .read_exact(&mut word)
                .map_err(|e| GenieError::io("channel setup (the client's word)", e))?;
            match word[0] {
                JOINED => return MemnetEndpoint::join(mine, Some(arena)),
                PLACE_TAKEN => continue,
                w => {
                    return Err(GenieError::Protocol(format!(
                        "channel setup: the client said {w}"
                    )));
                }
            }
        }
        Err(GenieError::Protocol(format!(
            "channel setup: the client could map none of {PLACEMENT_TRIES} arena addresses"
        )))
    }
}

impl AsFd for Listener {
    /// Readable when a client waits to be accepted.
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

fn setup_timeouts(s: &UnixStream) -> Result<()> {
    s.set_read_timeout(Some(SETUP))
        .and_then(|()| s.set_write_timeout(Some(SETUP)))
        .map_err(|e| GenieError::io("channel setup", e))
}

/// Connect to the listener of `name`, waiting up to `timeout` for one to be there, and set the
/// link up; returns this side's endpoint.
pub fn connect(name: &str, timeout: Duration) -> Result<MemnetEndpoint> {
    let conn = rendezvous::connect(SPACE, name, timeout)?;
    setup_timeouts(&conn)?;
    for _ in 0..PLACEMENT_TRIES {
        let parts = LinkParts::recv_from(&conn)?;
        match MemnetEndpoint::join(parts, None) {
            Ok(end) => {
                (&conn)
                    .write_all(&[JOINED])
                    .map_err(|e| GenieError::io("channel setup (joined)", e))?;
                return Ok(end);
            }
            Err(GenieError::Vm(zcio_vm::VmError::ArenaPlacement { .. })) => {
                (&conn)
                    .write_all(&[PLACE_TAKEN])
                    .map_err(|e| GenieError::io("channel setup (place taken)", e))?;
            }
            Err(e) => return Err(e),
        }
    }
    Err(GenieError::Protocol(format!(
        "channel setup: none of {PLACEMENT_TRIES} arena addresses could be mapped here"
    )))
}
