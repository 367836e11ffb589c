//! Names by which two processes started on their own meet: a listener binds a name, a
//! process that connects to it gets a Unix stream socket to the listener, over which the
//! layers above set up what they share (a memory-network link, an fbuf path).
//!
//! A name is an abstract Unix socket, `zcio/<space>/<name>` (nothing in the file system to
//! clean up; it goes when the listener does; both processes must share a network namespace,
//! where abstract names live). Only a process of the listener's own user may connect unless
//! the listener says otherwise ([`NamedListener::allow_any_user`]): the kernel's record of the
//! peer (`SO_PEERCRED`) is checked at each accept.

use std::os::fd::{AsFd, BorrowedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::time::{Duration, Instant};

/// Why meeting by name failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RendezvousError {
    /// The name breaks the rules of names.
    #[error("`{name}`: a name is 1 to 100 bytes, without NUL")]
    BadName {
        /// The name given.
        name: String,
    },
    /// Another listener holds the name.
    #[error("the name `{name}` is taken by another listener")]
    Taken {
        /// The name.
        name: String,
    },
    /// Nobody listened on the name, or no client came, within the time allowed.
    #[error("timed out after {after:?} {during}")]
    TimedOut {
        /// What was waited for.
        during: &'static str,
        /// The time allowed.
        after: Duration,
    },
    /// A signal ended the wait for a client.
    #[error("interrupted by a signal {during}")]
    Interrupted {
        /// What was waited for.
        during: &'static str,
    },
    /// A process of another user connected, and the listener lets only its own user in.
    #[error(
        "a process of user {uid} asked to connect to `{name}`, which only user {owner} may (allow_any_user)"
    )]
    NotPermitted {
        /// The connecting process's user.
        uid: u32,
        /// The listener's user.
        owner: u32,
        /// The name.
        name: String,
    },
    /// A system call failed.
    #[error("{op} failed: {source}")]
    Io {
        /// The call.
        op: &'static str,
        /// Its error.
        #[source]
        source: std::io::Error,
    },
}

type Result<T> = std::result::Result<T, RendezvousError>;

fn io(op: &'static str) -> impl FnOnce(std::io::Error) -> RendezvousError {
    move |source| RendezvousError::Io { op, source }
}

fn address(space: &str, name: &str) -> Result<SocketAddr> {
    if name.is_empty() || name.len() > 100 || name.contains('\0') {
        return Err(RendezvousError::BadName { name: name.into() });
    }
    SocketAddr::from_abstract_name(format!("zcio/{space}/{name}")).map_err(io("socket name"))
}

/// A name other processes connect to.
#[derive(Debug)]
pub struct NamedListener {
    sock: UnixListener,
    name: String,
    any_user: bool,
}

impl NamedListener {
    /// Bind `name` in `space` (each layer names its own: `memnet`, `fbuf`). A name another
    /// listener holds is refused ([`RendezvousError::Taken`]).
    pub fn bind(space: &str, name: &str) -> Result<NamedListener> {
        let sock = UnixListener::bind_addr(&address(space, name)?).map_err(|e| match e.kind() {
            std::io::ErrorKind::AddrInUse => RendezvousError::Taken { name: name.into() },
            _ => RendezvousError::Io {
                op: "bind",
                source: e,
            },
        })?;
        Ok(NamedListener {
            sock,
            name: name.to_string(),
            any_user: false,
        })
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Let processes of any user connect (by default only this process's user may).
    pub fn allow_any_user(&mut self, yes: bool) {
        self.any_user = yes;
    }

    /// Wait for the next client, at most `timeout` where given (a signal ends that wait with
    /// [`RendezvousError::Interrupted`]), and check its user. A client of another user is
    /// refused (its connection closed) and the error says so; the listener goes on.
    pub fn accept(&self, timeout: Option<Duration>) -> Result<UnixStream> {
        if let Some(t) = timeout {
            wait_readable(self.sock.as_fd(), t, "waiting for a client")?;
        }
        let (conn, _) = self.sock.accept().map_err(io("accept"))?;
        let cred = rustix::net::sockopt::socket_peercred(&conn)
            .map_err(|e| io("SO_PEERCRED")(e.into()))?;
        let me = rustix::process::getuid();
        if cred.uid != me && !self.any_user {
            return Err(RendezvousError::NotPermitted {
                uid: cred.uid.as_raw(),
                owner: me.as_raw(),
                name: self.name.clone(),
            });
        }
        Ok(conn)
    }
}

impl AsFd for NamedListener {
    /// Readable when a client waits to be accepted.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

/// Wait up to `t` for `fd` to be readable (a listening socket: for a client); a signal ends
/// the wait ([`RendezvousError::Interrupted`]).
pub fn wait_readable(fd: BorrowedFd<'_>, t: Duration, during: &'static str) -> Result<()> {
    use rustix::event::{PollFd, PollFlags, poll};
    let deadline = Instant::now() + t;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(RendezvousError::TimedOut { during, after: t });
        }
        let ts = rustix::time::Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        match poll(&mut fds, Some(&ts)) {
            Ok(_) if !fds[0].revents().is_empty() => return Ok(()),
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Err(RendezvousError::Interrupted { during }),
            Err(e) => return Err(io("poll")(e.into())),
        }
    }
}

/// Connect to the listener of `name` in `space`, waiting up to `timeout` for one to be there.
pub fn connect(space: &str, name: &str, timeout: Duration) -> Result<UnixStream> {
    let addr = address(space, name)?;
    let deadline = Instant::now() + timeout;
    loop {
        match UnixStream::connect_addr(&addr) {
            Ok(c) => return Ok(c),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
                ) =>
            {
                if Instant::now() >= deadline {
                    return Err(RendezvousError::TimedOut {
                        during: "waiting for a listener of the name",
                        after: timeout,
                    });
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(io("connect")(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_and_a_client_meet_and_the_rules_hold() {
        let name = format!("rendezvous-test-{}", std::process::id());
        let l = NamedListener::bind("test", &name).unwrap();
        assert!(matches!(
            NamedListener::bind("test", &name),
            Err(RendezvousError::Taken { .. })
        ));
        // The same name in another space is another name.
        let _other = NamedListener::bind("other", &name).unwrap();
        let c = connect("test", &name, Duration::from_secs(1)).unwrap();
        let s = l.accept(Some(Duration::from_secs(1))).unwrap();
        assert_eq!(
            rustix::net::sockopt::socket_peercred(&s).unwrap().pid,
            rustix::process::getpid()
        );
        drop(c);
        assert!(matches!(
            l.accept(Some(Duration::from_millis(20))),
            Err(RendezvousError::TimedOut { .. })
        ));
        assert!(matches!(
            connect("test", "nobody-here", Duration::from_millis(20)),
            Err(RendezvousError::TimedOut { .. })
        ));
        assert!(matches!(
            NamedListener::bind("test", ""),
            Err(RendezvousError::BadName { .. })
        ));
    }
}
