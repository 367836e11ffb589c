//! Channels: two programs find each other by a name and pass messages under the semantics of
//! their choice, on one host or across hosts, with the same calls.
//!
//! - A plain name (`"frames"`) is a channel on this host: the memory network
//!   ([`crate::memnet`]), set up through an abstract Unix socket ([`crate::memnet::channel`]),
//!   open only to this user unless the listener says otherwise.
//! - `tcp://host:port` is a channel to another host: the TCP module ([`crate::stream`]), each
//!   message framed by a 16-byte header (a magic word and its length), open to whoever reaches
//!   the port.
//!
//! A program written against [`Channel`] runs unchanged when its peer moves to another
//! machine: only the name changes. What differs is said by the calls' [`Accounting`]: the
//! path each message took and the copies it made.
//!
//! ```no_run
//! use std::time::Duration;
//! use zcio_genie::channel::Channel;
//! use zcio_genie::{InputBuffering, Semantics};
//!
//! // One program (or "tcp://0.0.0.0:7000" to be reached from other hosts):
//! let listener = Channel::listen("frames")?;
//! let mut rx = listener.accept(None)?;
//! let (msg, _) = rx.recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux)?;
//!
//! // Another, started on its own (or "tcp://that-host:7000"):
//! let mut tx = Channel::connect("frames", Duration::from_secs(5))?;
//! let (ticket, _) = tx.send(Semantics::EmulatedCopy, &vec![7u8; 1 << 20])?;
//! tx.wait(ticket)?;
//! # Ok::<(), zcio_genie::GenieError>(())
//! ```

use crate::AppBuffer;
use crate::error::{GenieError, Result};
use crate::memnet::loan::{Loan, Received};
use crate::memnet::{self, LinkOptions, MemnetEndpoint, Ticket, Waits};
use crate::semantics::{Accounting, InputBuffering, Semantics};
use crate::stream::{ModuleKind, StreamEnd};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// The prefix of a channel name that reaches another host over TCP.
pub const TCP_PREFIX: &str = "tcp://";

/// "zcioMSG\0": the first word of a message's header on a TCP channel.
const FRAME_MAGIC: u64 = 0x7a63_696f_4d53_4700;
const HEADER: usize = 16;

/// Where a channel name leads.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Address {
    /// A name on this host (the memory network).
    Local(String),
    /// `host:port` over TCP.
    Tcp(String),
}

fn address(name: &str) -> Result<Address> {
    match name.strip_prefix(TCP_PREFIX) {
        Some(hp)
            if hp
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && !p.is_empty()) =>
        {
            Ok(Address::Tcp(hp.to_string()))
        }
        Some(_) => Err(GenieError::arg(
            "name",
            format!("`{name}`: a TCP channel is named tcp://host:port"),
        )),
        None if name.contains("://") => Err(GenieError::arg(
            "name",
            format!("`{name}`: the channels are a plain name (this host) or tcp://host:port"),
        )),
        None => Ok(Address::Local(name.to_string())),
    }
}

/// A name other programs connect to, each getting a [`Channel`] of its own.
#[derive(Debug)]
pub struct ChannelListener {
    inner: ListenerKind,
}

#[derive(Debug)]
enum ListenerKind {
    Local(memnet::channel::Listener),
    Tcp(TcpListener),
}

impl ChannelListener {
    /// Listen on `name` ([`Channel::listen`]).
    pub fn bind(name: &str) -> Result<ChannelListener> {
        let inner = match address(name)? {
            Address::Local(n) => ListenerKind::Local(memnet::channel::Listener::bind(&n)?),
            Address::Tcp(hp) => ListenerKind::Tcp(
                TcpListener::bind(&hp).map_err(|e| GenieError::io("bind(tcp channel)", e))?,
            ),
        };
        Ok(ChannelListener { inner })
    }

    /// The name a peer connects to: the name bound, or for TCP `tcp://address:port` with the
    /// port the system chose where the name said 0.
    pub fn name(&self) -> Result<String> {
        match &self.inner {
            ListenerKind::Local(l) => Ok(l.name().to_string()),
            ListenerKind::Tcp(t) => {
                let a = t
                    .local_addr()
                    .map_err(|e| GenieError::io("getsockname(tcp channel)", e))?;
                Ok(format!("{TCP_PREFIX}{a}"))
            }
        }
    }

    /// Let processes of any user connect (on this host; by default only this process's user
    /// may). A TCP channel checks no user: whoever reaches the port connects.
    pub fn allow_any_user(&mut self, yes: bool) {
        if let ListenerKind::Local(l) = &mut self.inner {
            l.allow_any_user(yes);
        }
    }

    /// How the links of the next clients on this host are made ([`LinkOptions`]: their
    /// window). No effect on TCP channels.
    pub fn set_link_options(&mut self, opts: LinkOptions) {
        if let ListenerKind::Local(l) = &mut self.inner {
            l.set_link_options(opts);
        }
    }

    /// Wait for the next client (at most `timeout`, where given; a signal ends the wait with
    /// [`GenieError::Interrupted`]) and return its channel.
    pub fn accept(&self, timeout: Option<Duration>) -> Result<Channel> {
        match &self.inner {
            ListenerKind::Local(l) => Ok(Channel::local(l.accept(timeout)?)),
            ListenerKind::Tcp(t) => {
                if let Some(d) = timeout {
                    zcio_vm::rendezvous::wait_readable(t.as_fd(), d, "waiting for a client")?;
                }
                let (s, _) = t
                    .accept()
                    .map_err(|e| GenieError::io("accept(tcp channel)", e))?;
                Channel::tcp(s)
            }
        }
    }
}

impl AsFd for ChannelListener {
    /// Readable when a client waits to be accepted.
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.inner {
            ListenerKind::Local(l) => l.as_fd(),
            ListenerKind::Tcp(t) => t.as_fd(),
        }
    }
}

/// One end of a channel: a memory-network link on this host, or a TCP connection to another.
///
/// Outputs return a [`Ticket`] that completes when the receiver has the message (on this host,
/// once it has read it; over TCP, once the kernel has it: the call has already completed).
/// [`Channel::wait`] waits for one. Inputs are synchronous. Errors match by
/// [`GenieError::kind`].
pub struct Channel {
    inner: ChannelKind,
}

zcio_vm::debug_summary!(Channel, |s| transport: s.transport());

enum ChannelKind {
    Local(MemnetEndpoint),
    Tcp(Framed),
}

/// A TCP end with each message framed by its header.
struct Framed {
    end: StreamEnd,
    /// The next message's length, its header read and its body not.
    held: Option<usize>,
    /// Tickets handed out (each complete when handed out).
    sent: u64,
}

impl Channel {
    /// Listen on `name`: a plain name on this host, or `tcp://address:port` for peers on
    /// other hosts (port 0: one the system chooses, [`ChannelListener::name`] says which).
    pub fn listen(name: &str) -> Result<ChannelListener> {
        ChannelListener::bind(name)
    }

    /// Connect to the listener of `name`, waiting up to `timeout` for it to be there; a name
    /// nobody listens on fails with [`GenieError::TimedOut`] once the time has passed.
    pub fn connect(name: &str, timeout: Duration) -> Result<Channel> {
        match address(name)? {
            Address::Local(n) => Ok(Channel::local(memnet::channel::connect(&n, timeout)?)),
            Address::Tcp(hp) => {
                let deadline = Instant::now() + timeout;
                let addrs: Vec<_> = hp
                    .to_socket_addrs()
                    .map_err(|e| GenieError::io("resolving the tcp channel's host", e))?
                    .collect();
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    let mut last = None;
                    for a in &addrs {
                        match TcpStream::connect_timeout(a, left.max(Duration::from_millis(1))) {
                            Ok(s) => return Channel::tcp(s),
                            Err(e) => last = Some(e),
                        }
                    }
                    if Instant::now() >= deadline {
                        return Err(match last {
                            Some(e) if e.kind() != std::io::ErrorKind::ConnectionRefused => {
                                GenieError::io("connect(tcp channel)", e)
                            }
                            _ => GenieError::TimedOut {
                                during: "waiting for a listener of the channel name",
                                after: timeout,
                            },
                        });
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }

    /// A channel over a memory-network endpoint set up otherwise ([`memnet::pair`] in one
    /// process, say).
    pub fn local(end: MemnetEndpoint) -> Channel {
        Channel {
            inner: ChannelKind::Local(end),
        }
    }

    fn tcp(s: TcpStream) -> Result<Channel> {
        s.set_nodelay(true)
            .map_err(|e| GenieError::io("TCP_NODELAY", e))?;
        let end = StreamEnd::from_fd(ModuleKind::Tcp, OwnedFd::from(s))?;
        Ok(Channel {
            inner: ChannelKind::Tcp(Framed {
                end,
                held: None,
                sent: 0,
            }),
        })
    }

    /// `memnet` (this host) or `tcp` (another).
    pub fn transport(&self) -> &'static str {
        match self.inner {
            ChannelKind::Local(_) => "memnet",
            ChannelKind::Tcp(_) => "tcp",
        }
    }

    /// The memory-network endpoint of a channel on this host, for what only it offers (the
    /// move family's regions, the window, spinning).
    pub fn memnet(&mut self) -> Option<&mut MemnetEndpoint> {
        match &mut self.inner {
            ChannelKind::Local(m) => Some(m),
            ChannelKind::Tcp(_) => None,
        }
    }

    /// Use another calibration profile for this channel's thresholds
    /// ([`crate::profile::Profile::zero_copy`] takes the VM paths from the first page up).
    pub fn set_profile(&mut self, p: std::sync::Arc<crate::profile::Profile>) {
        match &mut self.inner {
            ChannelKind::Local(m) => m.set_profile(p),
            ChannelKind::Tcp(f) => f.end.set_profile(p),
        }
    }

    /// Let this channel's waits end after a time, or at a signal ([`Waits`]).
    pub fn set_waits(&mut self, w: Waits) {
        match &mut self.inner {
            ChannelKind::Local(m) => m.set_waits(w),
            ChannelKind::Tcp(f) => f.end.set_waits(w),
        }
    }

    /// Output `buf` under `sem` (copy, emulated copy, share, emulated share): returns once the
    /// data is queued; the ticket completes when the receiver has it.
    pub fn send(&mut self, sem: Semantics, buf: &[u8]) -> Result<(Ticket, Accounting)> {
        match &mut self.inner {
            ChannelKind::Local(m) => m.send(sem, buf),
            ChannelKind::Tcp(f) => {
                MemnetEndpoint::check_len(buf.len())?;
                let mut h = [0u8; HEADER];
                h[..8].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
                h[8..].copy_from_slice(&(buf.len() as u64).to_le_bytes());
                f.end.send(Semantics::Copy, &h)?;
                let acc = f.end.send(sem, buf)?;
                f.sent += 1;
                Ok((Ticket(f.sent), acc))
            }
        }
    }

    /// Wait until output `t` has completed.
    pub fn wait(&mut self, t: Ticket) -> Result<()> {
        match &mut self.inner {
            ChannelKind::Local(m) => m.wait(t),
            ChannelKind::Tcp(f) if t.0 >= 1 && t.0 <= f.sent => Ok(()),
            ChannelKind::Tcp(_) => Err(GenieError::arg(
                "ticket",
                format!("{} was not handed out by this channel", t.0),
            )),
        }
    }

    /// Wait until every output has completed.
    pub fn flush(&mut self) -> Result<()> {
        match &mut self.inner {
            ChannelKind::Local(m) => m.flush(),
            ChannelKind::Tcp(_) => Ok(()),
        }
    }

    /// The length of the next message, waiting for it; the message stays queued.
    pub fn peek_len(&mut self) -> Result<usize> {
        match &mut self.inner {
            ChannelKind::Local(m) => m.peek_len(),
            ChannelKind::Tcp(f) => f.peek_len(),
        }
    }

    /// Input the next message into `buf` under `sem`; returns its length. A message longer
    /// than `buf` stays queued and the error ([`GenieError::TooSmall`]) names its length.
    pub fn recv(
        &mut self,
        sem: Semantics,
        buf: &mut [u8],
        buffering: InputBuffering,
    ) -> Result<(usize, Accounting)> {
        match &mut self.inner {
            ChannelKind::Local(m) => m.recv(sem, buf, buffering),
            ChannelKind::Tcp(f) => {
                let len = f.peek_len()?;
                if len > buf.len() {
                    return Err(GenieError::TooSmall {
                        needed: len,
                        got: buf.len(),
                    });
                }
                f.held = None;
                let acc = f.end.recv(sem, &mut buf[..len], buffering)?;
                Ok((len, acc))
            }
        }
    }

    /// Input the next message into a buffer of its own length, made for it (in transparent
    /// huge pages from 2 MiB).
    pub fn recv_alloc(
        &mut self,
        sem: Semantics,
        buffering: InputBuffering,
    ) -> Result<(AppBuffer, Accounting)> {
        match &mut self.inner {
            ChannelKind::Local(m) => m.recv_alloc(sem, buffering),
            ChannelKind::Tcp(_) => {
                let len = self.peek_len()?;
                let mut buf = AppBuffer::for_message(len)?;
                let (_, acc) = self.recv(sem, &mut buf, buffering)?;
                Ok((buf, acc))
            }
        }
    }

    /// A buffer of `len` bytes to fill and send with [`Channel::send_loan`]: on this host a
    /// memory file whose pages move to the receiver without a copy
    /// ([`memnet::loan`]), in 2 MiB pages from 2 MiB where the kernel
    /// gives them (sealed, or volatile and reused: [`Channel::set_volatile_loans`]); over TCP
    /// private memory, sent by copy.
    pub fn loan(&mut self, len: usize) -> Result<Loan> {
        match &mut self.inner {
            ChannelKind::Local(m) => m.loan(len),
            ChannelKind::Tcp(_) => Loan::owned(len),
        }
    }

    /// Trust the peer with volatile loans, or stop: on this host this end's loans become
    /// memory files reused from loan to loan (lent to the receiver, given back when it drops
    /// them), and the peer's are mapped here in place; both ends must say so
    /// ([`MemnetEndpoint::set_volatile_loans`] says what is given up). No effect over TCP.
    pub fn set_volatile_loans(&mut self, yes: bool) {
        if let ChannelKind::Local(m) = &mut self.inner {
            m.set_volatile_loans(yes);
        }
    }

    /// Send a loan: on this host its pages go to the receiver (sealed so that nobody can
    /// change them again, or lent where volatile), and the loan is this process's no more;
    /// over TCP its bytes are sent. Returns without waiting for the receiver; the ticket is
    /// complete.
    pub fn send_loan(&mut self, loan: Loan) -> Result<(Ticket, Accounting)> {
        match &mut self.inner {
            ChannelKind::Local(m) => m.send_loan(loan),
            ChannelKind::Tcp(_) => self.send(Semantics::Copy, &loan),
        }
    }

    /// Send the bytes `range` of a loan under emulated copy and keep the loan, to read and
    /// write on: on this host, the first time, its file is sealed and shipped without a copy
    /// and the sender's pages become copy-on-write ([`MemnetEndpoint::send_loan_copy`]);
    /// over TCP the bytes are sent. Returns without waiting for the receiver; the ticket is
    /// complete.
    pub fn send_loan_copy(
        &mut self,
        loan: &mut Loan,
        range: std::ops::Range<usize>,
    ) -> Result<(Ticket, Accounting)> {
        match &mut self.inner {
            ChannelKind::Local(m) => m.send_loan_copy(loan, range),
            ChannelKind::Tcp(_) => match loan.get(range.clone()) {
                Some(bytes) => self.send(Semantics::Copy, bytes),
                None => Err(crate::error::GenieError::arg(
                    "range",
                    format!(
                        "bytes {}..{} of a loan of {} bytes",
                        range.start,
                        range.end,
                        loan.len()
                    ),
                )),
            },
        }
    }

    /// Receive the next message as bytes of this process's own, to read and write: a loan's
    /// pages mapped here without a copy ([`Received::is_mapped`]), any other message
    /// received into a buffer made for it. Waits within the channel's waits.
    pub fn recv_loan(&mut self) -> Result<(Received, Accounting)> {
        match &mut self.inner {
            ChannelKind::Local(m) => m.recv_loan(),
            ChannelKind::Tcp(_) => {
                let (buf, acc) =
                    self.recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux)?;
                Ok((Received::owned(buf), acc))
            }
        }
    }
}

impl Framed {
    fn peek_len(&mut self) -> Result<usize> {
        if let Some(n) = self.held {
            return Ok(n);
        }
        let mut h = [0u8; HEADER];
        self.end
            .recv(Semantics::Copy, &mut h, InputBuffering::EarlyDemux)?;
        let word = |i: usize| u64::from_le_bytes(h[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let (magic, len) = (word(0), word(1));
        if magic != FRAME_MAGIC || len == 0 || len > memnet::MAX_MESSAGE as u64 {
            // The stream's place in the messages is lost: refuse the rest.
            let e = GenieError::Protocol(format!(
                "a TCP channel's message header: magic {magic:#x} (want {FRAME_MAGIC:#x}), \
                 length {len} (want 1 to {})",
                memnet::MAX_MESSAGE
            ));
            self.end.break_input(&e);
            return Err(e);
        }
        self.held = Some(len as usize);
        Ok(len as usize)
    }
}

impl AsFd for Channel {
    /// Readable when a message is ready to be received (on this host also when an output has
    /// completed: [`MemnetEndpoint::reap`]).
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.inner {
            ChannelKind::Local(m) => m.as_fd(),
            ChannelKind::Tcp(f) => f.end.as_fd(),
        }
    }
}

/// The descriptor of [`AsFd`], for reactors that take a raw one (tokio's `AsyncFd`): the
/// channel owns it for its whole life, and it is always the same one.
impl std::os::fd::AsRawFd for Channel {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.as_fd().as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_lead_to_this_host_or_over_tcp_and_bad_ones_are_named() {
        assert_eq!(address("frames").unwrap(), Address::Local("frames".into()));
        assert_eq!(
            address("tcp://10.0.0.1:7000").unwrap(),
            Address::Tcp("10.0.0.1:7000".into())
        );
        for bad in ["tcp://nohost", "tcp://:7", "udp://x:1"] {
            let e = address(bad).unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
    }
}
