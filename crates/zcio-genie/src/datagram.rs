//! The UDP module's wire: messages cut into datagrams that say which message and which part of
//! it they carry, and a credit window by which the receiver bounds what the sender may have in
//! flight to what its socket buffer holds.
//!
//! UDP drops a datagram that does not fit the receiving socket's buffer, loopback included: a
//! receiver a few milliseconds late behind a fast sender loses data. So each end sizes its
//! receive buffer (`SO_RCVBUFFORCE` where allowed, else `SO_RCVBUF` up to the system's limit)
//! and tells its peer, in a *credit* datagram, how many datagrams it may send before the next
//! credit: the receiver grants more as it consumes, and a sender out of credit waits (asking
//! again now and then, in case a credit was lost on a real network). On loopback nothing is then
//! lost however late the receiver is.
//!
//! Where a datagram is lost all the same (a real network), the header tells: a receiver that
//! meets a later message, or a later part of this one, returns [`GenieError::MessageLost`] with
//! the message's sequence number and length, counts it ([`Datagrams::lost`]), and goes on with
//! the next message; a message's stray datagrams are dropped when they turn up.
//!
//! Every datagram starts with a 32-byte header: magic `ZCDG`, kind, and three words whose sense
//! the kind gives (data: message sequence number, message length, offset; credit: datagrams
//! allowed in all, the window).

use crate::error::{GenieError, Result};
use crate::waits::Wait;
use rustix::event::{PollFd, PollFlags};
use rustix::io::{Errno, IoSlice, IoSliceMut};
use rustix::net::{RecvAncillaryBuffer, RecvFlags, SendAncillaryBuffer, SendFlags};
use serde::Serialize;
use std::os::fd::BorrowedFd;
use std::time::Duration;

/// Payload bytes of one datagram.
pub const CHUNK: usize = 60 * 1024;
/// Header bytes of every datagram.
pub const HEADER: usize = 32;
/// Receive buffer each end asks for.
pub const RCVBUF: usize = 32 << 20;
/// Socket buffer one datagram is allowed: its payload and header twice over, for the kernel's
/// bookkeeping of it (a 60 KiB datagram on loopback takes about 66 KiB).
const DATAGRAM_COST: usize = 2 * (CHUNK + HEADER);

const MAGIC: u32 = u32::from_be_bytes(*b"ZCDG");
const DATA: u16 = 1;
const CREDIT: u16 = 2;
const PROBE: u16 = 3;

/// How long a sender out of credit waits before it asks again, at first (it doubles to
/// [`PROBE_MAX`]).
const PROBE_FIRST: Duration = Duration::from_millis(50);
const PROBE_MAX: Duration = Duration::from_secs(1);

/// One end's receive window: its socket buffer and the datagrams it lets its peer send ahead.
#[derive(Debug, Clone, Serialize)]
pub struct UdpWindow {
    /// The socket's receive buffer, as the kernel counts it (`SO_RCVBUF` reads back twice what
    /// was set).
    pub rcvbuf: usize,
    /// Datagrams the peer may have in flight.
    pub datagrams: u64,
    /// Whether the buffer was set past the system's limit (`SO_RCVBUFFORCE`, as root).
    pub forced: bool,
    /// Why the buffer is smaller than zcio asked, if it is.
    pub limited: Option<String>,
}

/// Which direction an end carries: a UDP end sends or receives, not both (credits for one
/// direction and data for the other would share one queue).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Sender,
    Receiver,
}

/// The state of one end of the UDP module.
#[derive(Debug)]
pub struct Datagrams {
    window: UdpWindow,
    role: Option<Role>,
    /// Sender: the next message's sequence number, datagrams sent, and allowed in all.
    next_seq: u64,
    sent: u64,
    allowed: u64,
    /// Receiver: the sequence number of the message it waits for, datagrams consumed, and
    /// consumed as of its last credit.
    expected: u64,
    consumed: u64,
    granted_at: u64,
    lost: u64,
    /// Receiver: the sender's socket is closed (a credit sent to it came back refused). What
    /// it sent before is still read; once that is all read, an input finds the peer gone
    /// instead of waiting.
    peer_gone: bool,
}

#[derive(Debug, Clone, Copy)]
struct Header {
    kind: u16,
    a: u64,
    b: u64,
    c: u64,
}

impl Header {
    fn encode(&self) -> [u8; HEADER] {
        let mut h = [0u8; HEADER];
        h[0..4].copy_from_slice(&MAGIC.to_be_bytes());
        h[4..6].copy_from_slice(&self.kind.to_le_bytes());
        h[8..16].copy_from_slice(&self.a.to_le_bytes());
        h[16..24].copy_from_slice(&self.b.to_le_bytes());
        h[24..32].copy_from_slice(&self.c.to_le_bytes());
        h
    }

    fn decode(h: &[u8], n: usize) -> Option<Header> {
        if n < HEADER || h[0..4] != MAGIC.to_be_bytes() {
            return None;
        }
        let word = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
        Some(Header {
            kind: u16::from_le_bytes([h[4], h[5]]),
            a: word(8),
            b: word(16),
            c: word(24),
        })
    }
}

fn gone(during: &'static str) -> GenieError {
    GenieError::PeerGone { during }
}

/// Send one datagram of `parts`, retrying while the kernel is out of buffers for a moment.
fn send(fd: BorrowedFd<'_>, parts: &[IoSlice<'_>]) -> Result<()> {
    loop {
        let mut control = SendAncillaryBuffer::default();
        match rustix::net::sendmsg(fd, parts, &mut control, SendFlags::empty()) {
            Ok(_) => return Ok(()),
            Err(Errno::INTR) => {}
            Err(Errno::NOBUFS) | Err(Errno::AGAIN) => std::thread::yield_now(),
            Err(Errno::CONNREFUSED) => return Err(gone("output")),
            Err(e) => return Err(GenieError::io("sendmsg(udp)", e)),
        }
    }
}

/// Take the next datagram off the queue into `parts`; returns its length (past what `parts`
/// hold, where it was longer). `None` where nothing is queued and `flags` say `DONTWAIT`.
fn take(
    fd: BorrowedFd<'_>,
    parts: &mut [IoSliceMut<'_>],
    flags: RecvFlags,
) -> Result<Option<usize>> {
    loop {
        let mut control = RecvAncillaryBuffer::default();
        match rustix::net::recvmsg(fd, parts, &mut control, flags | RecvFlags::TRUNC) {
            Ok(m) => return Ok(Some(m.bytes)),
            Err(Errno::INTR) => {}
            Err(Errno::AGAIN) if flags.contains(RecvFlags::DONTWAIT) => return Ok(None),
            Err(Errno::CONNREFUSED) => return Err(gone("input")),
            Err(e) => return Err(GenieError::io("recvmsg(udp)", e)),
        }
    }
}

impl Datagrams {
    /// Set up the UDP end `fd`: size its receive buffer and send its peer the first credit.
    pub fn new(fd: BorrowedFd<'_>) -> Result<Datagrams> {
        use rustix::net::sockopt;
        let forced = sockopt::set_socket_recv_buffer_size_force(fd, RCVBUF).is_ok();
        let mut limited = None;
        if !forced {
            let _ = sockopt::set_socket_recv_buffer_size(fd, RCVBUF);
        }
        let rcvbuf = sockopt::socket_recv_buffer_size(fd)
            .map_err(|e| GenieError::io("getsockopt(SO_RCVBUF)", e))?;
        if rcvbuf < 2 * RCVBUF {
            limited = Some(format!(
                "the receive buffer is {rcvbuf} bytes, not {}: SO_RCVBUFFORCE needs \
                 CAP_NET_ADMIN, and SO_RCVBUF stops at net.core.rmem_max",
                2 * RCVBUF
            ));
        }
        let window = UdpWindow {
            rcvbuf,
            datagrams: (rcvbuf / DATAGRAM_COST).max(1) as u64,
            forced,
            limited,
        };
        let d = Datagrams {
            window,
            role: None,
            next_seq: 0,
            sent: 0,
            allowed: 0,
            expected: 0,
            consumed: 0,
            granted_at: 0,
            lost: 0,
            peer_gone: false,
        };
        d.grant(fd)?;
        Ok(d)
    }

    /// This end's receive window.
    pub fn window(&self) -> &UdpWindow {
        &self.window
    }

    /// Messages found lost on the way so far.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    fn take_role(&mut self, r: Role) -> Result<()> {
        match self.role {
            Some(had) if had != r => Err(GenieError::arg(
                "endpoint",
                "a UDP end carries one direction: this one has already been used the other way \
                 (send on one end of the pair, receive on the other)",
            )),
            _ => {
                self.role = Some(r);
                Ok(())
            }
        }
    }

    /// Tell the peer how many datagrams it may have sent in all.
    fn grant(&self, fd: BorrowedFd<'_>) -> Result<()> {
        let h = Header {
            kind: CREDIT,
            a: self.consumed + self.window.datagrams,
            b: self.window.datagrams,
            c: 0,
        };
        send(fd, &[IoSlice::new(&h.encode())])
    }

    /// A credit where a quarter of the window was consumed since the last (or, with `all`,
    /// where anything was). A sender that is gone needs none: the datagrams it sent are read
    /// all the same.
    fn grant_due(&mut self, fd: BorrowedFd<'_>, all: bool) -> Result<()> {
        let since = self.consumed - self.granted_at;
        if since > 0 && (all || since >= (self.window.datagrams / 4).max(1)) && !self.peer_gone {
            self.granted_at = self.consumed;
            self.receiver_sent(self.grant(fd))?;
        }
        Ok(())
    }

    /// The receiver's view of a send to its sender: refused means the sender is gone, which
    /// is no error while what it sent is still queued here.
    fn receiver_sent(&mut self, r: Result<()>) -> Result<()> {
        match r {
            Err(GenieError::PeerGone { .. }) => {
                self.peer_gone = true;
                Ok(())
            }
            r => r,
        }
    }

    /// Take the next datagram off the receiver's queue (as [`take`]). A refusal reported by
    /// the socket (an earlier credit reached a closed sender: the kernel reports it once, on
    /// the next receive) marks the sender gone and reads on; with the sender gone, an empty
    /// queue is [`GenieError::PeerGone`] instead of a wait.
    fn take_rx(
        &mut self,
        fd: BorrowedFd<'_>,
        parts: &mut [IoSliceMut<'_>],
        mut flags: RecvFlags,
    ) -> Result<Option<usize>> {
        loop {
            if self.peer_gone {
                flags |= RecvFlags::DONTWAIT;
            }
            match take(fd, parts, flags) {
                Err(GenieError::PeerGone { .. }) => self.peer_gone = true,
                Ok(None) if self.peer_gone => return Err(gone("input")),
                r => return r,
            }
        }
    }

    /// Send `buf` as one message, a datagram at a time as credit allows.
    pub fn send_message(&mut self, fd: BorrowedFd<'_>, buf: &[u8]) -> Result<()> {
        self.take_role(Role::Sender)?;
        let seq = self.next_seq;
        self.next_seq += 1;
        for (i, c) in buf.chunks(CHUNK).enumerate() {
            self.wait_credit(fd)?;
            let h = Header {
                kind: DATA,
                a: seq,
                b: buf.len() as u64,
                c: (i * CHUNK) as u64,
            };
            send(fd, &[IoSlice::new(&h.encode()), IoSlice::new(c)])?;
            self.sent += 1;
        }
        Ok(())
    }

    /// Wait until one more datagram is allowed, taking in the credits that came.
    fn wait_credit(&mut self, fd: BorrowedFd<'_>) -> Result<()> {
        let mut pause = PROBE_FIRST;
        while self.sent >= self.allowed {
            let mut fds = [rustix::event::PollFd::new(
                &fd,
                rustix::event::PollFlags::IN,
            )];
            let ts = rustix::time::Timespec::try_from(pause).expect("a short pause");
            match rustix::event::poll(&mut fds, Some(&ts)) {
                Ok(0) => {
                    // No credit came: ask again (a credit may have been lost), which also
                    // finds a receiver that is gone.
                    let h = Header {
                        kind: PROBE,
                        a: self.sent,
                        b: 0,
                        c: 0,
                    };
                    send(fd, &[IoSlice::new(&h.encode())])?;
                    pause = (pause * 2).min(PROBE_MAX);
                    continue;
                }
                Ok(_) | Err(Errno::INTR) => {}
                Err(e) => return Err(GenieError::io("poll(udp)", e)),
            }
            let mut h = [0u8; HEADER];
            while let Some(n) = take(fd, &mut [IoSliceMut::new(&mut h)], RecvFlags::DONTWAIT)? {
                match Header::decode(&h, n) {
                    Some(c) if c.kind == CREDIT => self.allowed = self.allowed.max(c.a),
                    Some(c) if c.kind == DATA => {
                        return Err(GenieError::Protocol(
                            "a data datagram reached the sending end of a UDP pair".into(),
                        ));
                    }
                    _ => {} // a probe, or not ours: nothing to do
                }
            }
        }
        Ok(())
    }

    /// Receive the next message into `buf`, which must be its length; the wait for its first
    /// datagram ends as `wait` allows.
    pub(crate) fn recv_message(
        &mut self,
        fd: BorrowedFd<'_>,
        buf: &mut [u8],
        wait: Wait,
    ) -> Result<()> {
        self.take_role(Role::Receiver)?;
        let len = buf.len();
        let mut got = 0;
        loop {
            let mut h = [0u8; HEADER];
            let peek = RecvFlags::PEEK | RecvFlags::DONTWAIT;
            let n = match self.take_rx(fd, &mut [IoSliceMut::new(&mut h)], peek)? {
                Some(n) => n,
                None => {
                    // Nothing queued: grant what was consumed before waiting, so that a
                    // sender out of credit is not waiting for this receiver meanwhile. Once
                    // part of the message is in, the read runs to its end.
                    self.grant_due(fd, true)?;
                    let w = if got == 0 { wait } else { Wait::FOREVER };
                    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
                    w.poll(&mut fds, None, "waiting for a message")?;
                    continue;
                }
            };
            let Some(hd) = Header::decode(&h, n) else {
                self.drop_one(fd)?;
                return Err(GenieError::Protocol(format!(
                    "a datagram of {n} bytes that is not zcio's reached the UDP module"
                )));
            };
            match hd.kind {
                DATA => {}
                PROBE => {
                    self.drop_one(fd)?;
                    self.granted_at = self.consumed;
                    let sent = self.grant(fd);
                    self.receiver_sent(sent)?;
                    continue;
                }
                _ => {
                    self.drop_one(fd)?; // a credit: this end does not send
                    continue;
                }
            }
            let (seq, msg_len, off) = (hd.a, hd.b as usize, hd.c as usize);
            if seq < self.expected {
                self.drop_one(fd)?; // a stray part of a message already given up
                self.consumed += 1;
                continue;
            }
            if seq > self.expected {
                return Err(self.lose(
                    match got {
                        0 => format!("no datagram of it arrived (the next is of message {seq})"),
                        g => format!("{g} bytes of it arrived, then message {seq} began"),
                    },
                    len,
                ));
            }
            if msg_len != len && got == 0 {
                // Nothing of it taken: it stays queued for an input of its length.
                return Err(if msg_len > len {
                    GenieError::TooSmall {
                        needed: msg_len,
                        got: len,
                    }
                } else {
                    GenieError::Truncated {
                        expected: len,
                        got: msg_len,
                    }
                });
            }
            if msg_len != len {
                self.expected += 1; // its datagrams are dropped as they come
                return Err(GenieError::Protocol(format!(
                    "message {seq} announced {msg_len} bytes after {got} bytes of it announced {len}"
                )));
            }
            if off != got {
                return Err(self.lose(format!("the datagram at byte {got} never came"), len));
            }
            let want = (len - got).min(CHUNK);
            let mut parts = [
                IoSliceMut::new(&mut h),
                IoSliceMut::new(&mut buf[got..got + want]),
            ];
            let n = self
                .take_rx(fd, &mut parts, RecvFlags::empty())?
                .unwrap_or(0);
            self.consumed += 1;
            if n != HEADER + want {
                self.expected += 1;
                return Err(GenieError::Protocol(format!(
                    "a datagram of message {seq} carried {} bytes at byte {got}, not {want}",
                    n.saturating_sub(HEADER)
                )));
            }
            got += want;
            self.grant_due(fd, false)?;
            if got == len {
                self.expected += 1;
                return Ok(());
            }
        }
    }

    /// Give up the message awaited: counted lost, and the next is awaited.
    fn lose(&mut self, detail: String, len: usize) -> GenieError {
        let seq = self.expected;
        self.expected += 1;
        self.lost += 1;
        GenieError::MessageLost { seq, len, detail }
    }

    /// Take the next datagram off the queue and drop it.
    fn drop_one(&mut self, fd: BorrowedFd<'_>) -> Result<()> {
        let mut h = [0u8; HEADER];
        self.take_rx(fd, &mut [IoSliceMut::new(&mut h)], RecvFlags::empty())?;
        Ok(())
    }
}
