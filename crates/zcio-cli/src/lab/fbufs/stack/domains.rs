//! The stack over three processes, the paper's protection domains: the sending application
//! (this process), the protocol domain (UDP and IP: `zcio fbuf-stack-domain --role protocol`)
//! and the receiving domain (IP's reassembly and the receiving application: `--role
//! receiver`), each started by the one before it.
//!
//! - Fbufs: the application writes each datagram into an fbuf of its path (cached/volatile)
//!   and sends the reference. The protocol domain prepends the UDP header and cuts the datagram
//!   into fragments, each with its IP header, as an aggregate whose headers and nodes sit in
//!   an fbuf of its own path ([`super::agg::build`]), and sends the root; the data is never
//!   read nor copied on the way. It has offered the application's path onward once (its
//!   chunks following on a feed of their own as they are made, [`PathMirror`]), so the
//!   receiving domain maps both paths read-only, walks the aggregate, reassembles and touches
//!   the data in place. Its free of the message gives the protocol domain's fbuf back, and the
//!   protocol domain then frees the application's (messages come back in the order sent).
//!   The application keeps at most a window of datagrams in flight (1 MiB of them, 8 at least),
//!   so that the fbufs it reuses are those freed last, warm in every domain's caches and TLBs.
//!   With the application's path uncached and non-volatile (Figure 6), its fbuf is mapped into
//!   the protocol and the receiving domain per datagram and unmapped when freed.
//! - Copies: the datagram crosses each boundary through a Unix stream socket (copied in and out
//!   by the kernel); the protocol domain builds each fragment in a contiguous buffer (header
//!   and data copied in) and writes it; the receiving domain reads each fragment and copies
//!   its data into the reassembly buffer, as a conventional stack does.
//!
//! The receiving application keeps a [`Record`] of what it touched; once the stream is over it
//! checks it, and a datagram that did not arrive as sent fails the run naming the contender,
//! the datagram and the fragment ([`super::proto::Mismatch`]).

use super::agg::{Both, Scratch, build, receive, root_at, space, word_at};
use super::proto::{
    Fragments, IP_HDR, IpHdr, PAGE, Reassembly, Record, UDP_HDR, parse_udp, udp_header, write,
};
use super::{Contender, Stream};
use crate::lab::fbufs::bench::{CACHED_VOLATILE, Said, originate_on};
use crate::transfer::{NoConnection, Res, accept_child, zcio_command};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::Child;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};
use zcio_fbufs::link::{OriginatorEnd, PathMirror, Received, ReceiverEnd};
use zcio_fbufs::path::{FbufRef, Variant};
use zcio_fbufs::region::{RegionRead, RegionWrite};

/// Which process of the stack a `zcio fbuf-stack-domain` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// UDP and IP.
    Protocol,
    /// IP's reassembly and the receiving application.
    Receiver,
}

impl Role {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Role::Protocol => "protocol",
            Role::Receiver => "receiver",
        }
    }
    /// The role of a name.
    pub fn parse(s: &str) -> Option<Role> {
        [Role::Protocol, Role::Receiver]
            .into_iter()
            .find(|r| r.name() == s)
    }
    fn who(self) -> &'static str {
        match self {
            Role::Protocol => "the protocol domain",
            Role::Receiver => "the receiving domain",
        }
    }
}

/// The fbuf path's chunk and quota for fbufs of `bytes`: room for a few datagrams in flight
/// (at least 8 MiB, at least 8 fbufs).
fn quota(bytes: usize) -> (usize, usize) {
    let chunk = 1 << 20;
    (
        chunk,
        (bytes.next_multiple_of(PAGE) * 8)
            .max(8 << 20)
            .div_ceil(chunk),
    )
}

/// A domain process this one started: its connection, and what it says on its standard error.
struct Domain {
    child: Child,
    said: Said,
    who: &'static str,
}

impl Domain {
    /// Start the process of `role` for stream `s` of contender `c`, and take its connection.
    fn start(role: Role, c: Contender, s: &Stream) -> Res<(Domain, UnixStream)> {
        let dir = tempfile::Builder::new()
            .prefix("zcio-fbuf-stack")
            .tempdir()?;
        let path = dir.path().join("s");
        let listener = UnixListener::bind(&path)?;
        let mut cmd = zcio_command()?;
        cmd.args(["fbuf-stack-domain", "--role", role.name(), "--connect"])
            .arg(&path)
            .args(["--contender", c.name(), "--touch", s.touch.name()])
            .args([
                "--bytes",
                &s.len.to_string(),
                "--count",
                &s.count.to_string(),
            ])
            .args(["--warm", &s.warm.to_string(), "--mtu", &s.mtu.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn()?;
        let said = Said::collect(&mut child);
        let mut d = Domain {
            child,
            said,
            who: role.who(),
        };
        match accept_child(&listener, Some(&mut d.child), Some(Duration::from_secs(60))) {
            Ok(sock) => Ok((d, sock)),
            Err(e) => {
                let why = match e {
                    NoConnection::Ended(s) => format!("ended ({s}) before connecting"),
                    NoConnection::Stalled => "did not connect within a minute".into(),
                    NoConnection::Io(e) => e.to_string(),
                };
                let _ = d.child.kill();
                let _ = d.child.wait();
                Err(format!("{} {why}{}", d.who, said_suffix(d.said.text())).into())
            }
        }
    }

    /// The process's end after this side's `result`: its own account if it failed (a
    /// receiving domain that found a datagram wrong says which), else `result`. After an error
    /// here, the socket is shut and the process given five seconds before it is killed.
    fn end<T>(mut self, result: Res<T>, sock: &UnixStream) -> Res<T> {
        let status = if result.is_ok() {
            Some(self.child.wait()?)
        } else {
            let _ = sock.shutdown(std::net::Shutdown::Both);
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match self.child.try_wait()? {
                    Some(s) => break Some(s),
                    None if Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(10))
                    }
                    None => {
                        let _ = self.child.kill();
                        let _ = self.child.wait();
                        break None;
                    }
                }
            }
        };
        match status {
            Some(s) if !s.success() => {
                Err(format!("{} ended ({s}){}", self.who, said_suffix(self.said.text())).into())
            }
            _ => result,
        }
    }
}

fn said_suffix(said: String) -> String {
    if said.is_empty() {
        said
    } else {
        format!(": {said}")
    }
}

/// The sending application's side of a run of `c` (fbufs or copies): the time per timed
/// datagram (ns), from the first timed datagram to the last one taken by the receiving
/// application.
pub fn run(c: Contender, s: &Stream) -> Res<f64> {
    let (domain, mut sock) = Domain::start(Role::Protocol, c, s)?;
    let r = match c {
        Contender::Fbufs | Contender::Uncached => app_fbufs(s, &sock, c),
        Contender::Copies => app_copies(s, &mut sock),
        Contender::Single => Err("the single domain has no processes".into()),
    };
    domain.end(r, &sock)
}

/// `zcio fbuf-stack-domain`: the protocol or the receiving domain of contender `c`, connecting
/// to `connect`.
pub fn domain(role: Role, c: Contender, s: &Stream, connect: &Path) -> Res<()> {
    let up = UnixStream::connect(connect)?;
    match (role, c) {
        (Role::Protocol, Contender::Fbufs | Contender::Uncached) => protocol_fbufs(s, up, c),
        (Role::Protocol, Contender::Copies) => protocol_copies(s, up),
        (Role::Receiver, Contender::Fbufs | Contender::Uncached) => receiver_fbufs(s, up, c),
        (Role::Receiver, Contender::Copies) => receiver_copies(s, up),
        (_, Contender::Single) => Err("the single domain has no processes".into()),
    }
}

/// Bytes of datagrams the sending application with fbufs keeps in flight at most, and at least
/// [`WINDOW_MIN`] datagrams: a sliding window, as the paper's test protocol keeps for flow
/// control. Without one, the application runs as far ahead as its path's quota lets it and
/// cycles through every fbuf of the path (8 MiB and more), each cold in the caches and TLBs of
/// the application and of the receiving domain by the time it comes round again; within it,
/// the fbufs reused are those freed last (the free lists are LIFO, §3.3), still warm.
pub(crate) const WINDOW_BYTES: usize = 1 << 20;
/// The fewest datagrams in flight: enough that no domain waits for the one before it to
/// wake up.
pub(crate) const WINDOW_MIN: usize = 8;

/// Datagrams of `len` bytes the sending application keeps in flight at most.
fn window(len: usize) -> usize {
    (WINDOW_BYTES / len.next_multiple_of(PAGE)).max(WINDOW_MIN)
}

/// The application's side with fbufs: each datagram written in an fbuf and sent, at most a
/// [`window`] of them in flight; the clock stops when every fbuf is back.
fn app_fbufs(s: &Stream, sock: &UnixStream, c: Contender) -> Res<f64> {
    let end = originate_on(sock, quota(s.len), variant(c))?;
    let end = std::cell::RefCell::new(end);
    let window = window(s.len);
    let t0 = s.send(
        || drain(&mut end.borrow_mut()),
        |i| {
            let mut end = end.borrow_mut();
            while end.originator.outstanding() >= window && end.receivers_alive() > 0 {
                end.poll(true)?;
            }
            let f = end.alloc_waiting(s.len)?;
            let words = end.originator.fbuf_words(&f);
            write(s.touch, i as u64, s.len, |w, x| words[w].store(x, Relaxed));
            if s.spoils(i) {
                words[s.spoiled_word()].fetch_xor(1, Relaxed);
            }
            end.send(f, &[0])?;
            Ok(())
        },
    )?;
    let mut end = end.into_inner();
    drain(&mut end)?;
    let ns = t0.elapsed().as_nanos() as f64 / s.count as f64;
    let left = end.originator.outstanding();
    end.close()?;
    if left > 0 {
        return Err(format!("{left} fbufs never came back from the protocol domain").into());
    }
    Ok(ns)
}

/// The application's data path of fbuf contender `c`: cached/volatile, or neither.
fn variant(c: Contender) -> Variant {
    let cached = c != Contender::Uncached;
    Variant {
        cached,
        volatile: cached,
    }
}

/// Bytes at the head of a protocol domain's fbuf that name the application's fbuf its message
/// refers to (its address and length), so that a receiving domain of an uncached path can map
/// it before the walk (the paper's kernel maps an uncached fbuf into each domain it is passed
/// to).
const DESC: u64 = 16;

/// Wait until every fbuf sent has come back (or no receiver is left).
fn drain(end: &mut OriginatorEnd) -> Res<()> {
    while end.originator.outstanding() > 0 && end.receivers_alive() > 0 {
        end.poll(true)?;
    }
    Ok(())
}

/// The protocol domain with fbufs: UDP and IP over the application's fbufs, headers and
/// nodes in fbufs of its own path.
fn protocol_fbufs(s: &Stream, up: UnixStream, c: Contender) -> Res<()> {
    let mut rx = ReceiverEnd::connect(up)?;
    let (domain, down) = Domain::start(Role::Receiver, c, s)?;
    let r = forward_fbufs(s, &mut rx, &down);
    domain.end(r, &down)
}

fn forward_fbufs(s: &Stream, rx: &mut ReceiverEnd, down: &UnixStream) -> Res<()> {
    // The application's path, offered onward (its chunks announced on a feed of their own as
    // they come): the receiving domain reads the data there.
    rx.mirror(down)?;
    let frags = Fragments::new(s.len, s.mtu);
    let per = (DESC as usize + space(frags)).next_multiple_of(PAGE);
    let mut end = originate_on(down, quota(per), CACHED_VOLATILE)?;
    // The application's fbufs whose messages are out, in the order sent.
    let mut held: VecDeque<FbufRef> = VecDeque::new();
    let mut id = 0u32;
    let mut idle: Option<Instant> = None;
    loop {
        release(&end, rx, &mut held)?;
        let got = if held.is_empty() {
            rx.recv_any()?
        } else {
            rx.try_recv()?
        };
        match got {
            Received::Fbuf(r) => {
                if r.len < s.len as u64 {
                    return Err(format!("a datagram of {} bytes, expected {}", r.len, s.len).into());
                }
                let f = end.alloc_waiting(per)?;
                let region = Both {
                    own: &end.originator,
                    other: &rx.receiver,
                };
                if !region.write_u64(f.addr(), r.addr) || !region.write_u64(f.addr() + 8, r.len) {
                    return Err("the protocol domain cannot write its own fbuf".into());
                }
                let m = build(&region, f.addr() + DESC, r.addr, frags, id)?;
                end.send_msg(m, vec![f], &[0])?;
                held.push_back(r);
                id = id.wrapping_add(1);
                idle = None;
            }
            Received::NotYet => {
                // Nothing from the application: look at both links for a while, yielding the
                // CPU, before sleeping on the receiving domain's frees (a wake-up costs more
                // than a few looks when either side is about to send).
                rx.flush()?;
                let since = *idle.get_or_insert_with(Instant::now);
                if end.poll(false)? > 0 {
                    idle = None;
                } else if since.elapsed() < rx.spin {
                    std::thread::yield_now();
                } else {
                    end.poll(true)?;
                    idle = None;
                }
            }
            Received::Closed => break,
            Received::Msg(m) => {
                return Err(format!(
                    "an aggregate ({} bytes) where a datagram's fbuf was expected",
                    m.len
                )
                .into());
            }
        }
    }
    while end.msgs_outstanding() > 0 && end.receivers_alive() > 0 {
        end.poll(true)?;
    }
    release(&end, rx, &mut held)?;
    rx.flush()?;
    end.close()?;
    Ok(())
}

/// Free the application's fbufs whose messages the receiving domain has freed: the oldest
/// ones, as messages come back in the order sent.
fn release(end: &OriginatorEnd, rx: &mut ReceiverEnd, held: &mut VecDeque<FbufRef>) -> Res<()> {
    while held.len() > end.msgs_outstanding() {
        let r = held.pop_front().expect("more held than out");
        rx.free(r)?;
    }
    Ok(())
}

/// The receiving domain with fbufs: both paths mapped read-only, every message walked,
/// reassembled and touched in place, then freed.
fn receiver_fbufs(s: &Stream, up: UnixStream, c: Contender) -> Res<()> {
    let mut data = PathMirror::accept(&up)?;
    let mut rx = ReceiverEnd::connect(up)?;
    let mut rec = Record::new(c.name(), s.touch, s.len, s.mtu, s.datagrams());
    let frags = rec.fragments();
    let mut scratch = Scratch::default();
    loop {
        match rx.recv_any()? {
            Received::Msg(m) => {
                // The application's fbuf the message refers to, taken (mapped, uncached).
                let at = m.root.wrapping_sub(root_at(DESC, frags));
                let r = match (rx.receiver.read_u64(at), rx.receiver.read_u64(at + 8)) {
                    (Some(addr), Some(len)) => FbufRef { addr, len },
                    _ => {
                        return Err(
                            format!("{}: a message without its fbuf named", c.name()).into()
                        );
                    }
                };
                data.receive(r)?;
                let region = Both {
                    own: &rx.receiver,
                    other: data.receiver(),
                };
                let id = rec.received() as u32;
                receive(&region, m, id, &mut rec, &mut scratch)
                    .map_err(|e| format!("{}: {e}", c.name()))?;
                data.free(r)?;
                rx.free_msg(m)?;
            }
            Received::Closed => break,
            Received::NotYet => {}
            Received::Fbuf(r) => {
                return Err(
                    format!("an fbuf ({} bytes) where a message was expected", r.len).into(),
                );
            }
        }
    }
    rx.flush()?;
    if rec.received() != rec.expected() {
        return Err(format!(
            "{}: {} datagrams came of the {} expected",
            c.name(),
            rec.received(),
            rec.expected()
        )
        .into());
    }
    rec.check()?;
    Ok(())
}

/// The application's side with copies: each datagram (its length, then its bytes) written to
/// the socket; the clock stops at the receiving domain's "done", relayed by the protocol
/// domain.
fn app_copies(s: &Stream, sock: &mut UnixStream) -> Res<f64> {
    let mut buf = vec![0u8; 8 + s.len.next_multiple_of(8)];
    buf[..8].copy_from_slice(&(s.len as u64).to_le_bytes());
    let t0 = s.send(
        || Ok(()),
        |i| {
            write(s.touch, i as u64, s.len, |w, x| {
                buf[8 + 8 * w..16 + 8 * w].copy_from_slice(&x.to_le_bytes())
            });
            if s.spoils(i) {
                buf[8 + 8 * s.spoiled_word()] ^= 1;
            }
            sock.write_all(&buf[..8 + s.len])?;
            Ok(())
        },
    )?;
    sock.shutdown(std::net::Shutdown::Write)?;
    done(sock, "the receiving domain's done")?;
    Ok(t0.elapsed().as_nanos() as f64 / s.count as f64)
}

/// Read the one-byte "done".
fn done(mut sock: &UnixStream, what: &str) -> Res<()> {
    let mut d = [0u8; 1];
    if sock.read_exact(&mut d).is_err() || d != *b"d" {
        return Err(format!("the stream ended without {what}").into());
    }
    Ok(())
}

/// The protocol domain with copies: each datagram read, each fragment built in a contiguous
/// buffer and written on.
fn protocol_copies(s: &Stream, mut up: UnixStream) -> Res<()> {
    let (domain, mut down) = Domain::start(Role::Receiver, Contender::Copies, s)?;
    let frags = Fragments::new(s.len, s.mtu);
    let mut dgram = vec![0u8; s.len];
    let mut pdu = Vec::with_capacity(IP_HDR + frags.per);
    let mut id = 0u32;
    let r = (|| -> Res<()> {
        loop {
            let mut len = [0u8; 8];
            match up.read_exact(&mut len) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e.into()),
            }
            if u64::from_le_bytes(len) != s.len as u64 {
                return Err(format!(
                    "a datagram of {} bytes, expected {}",
                    u64::from_le_bytes(len),
                    s.len
                )
                .into());
            }
            up.read_exact(&mut dgram)?;
            for k in 0..frags.count() {
                pdu.clear();
                pdu.extend_from_slice(&frags.header(k, id).bytes());
                if k == 0 {
                    pdu.extend_from_slice(&udp_header(s.len));
                }
                let (off, n) = frags.data(k);
                pdu.extend_from_slice(&dgram[off..off + n]);
                down.write_all(&pdu)?;
            }
            id = id.wrapping_add(1);
        }
        down.shutdown(std::net::Shutdown::Write)?;
        done(&down, "the receiving domain's done")?;
        up.write_all(b"d")?;
        Ok(())
    })();
    domain.end(r, &down)
}

/// The receiving domain with copies: each fragment read, its data copied into the
/// reassembly buffer, the datagram touched there once complete; "done" when every datagram
/// came, then the check.
fn receiver_copies(s: &Stream, mut up: UnixStream) -> Res<()> {
    let name = Contender::Copies.name();
    let mut rec = Record::new(name, s.touch, s.len, s.mtu, s.datagrams());
    let frags = rec.fragments();
    // The IP payload (the UDP header and the data), in whole words for the touch.
    let mut ip = vec![0u8; (UDP_HDR + s.len).next_multiple_of(8) + 8];
    let mut pdu = vec![0u8; frags.per];
    while rec.received() < rec.expected() {
        let id = rec.received() as u32;
        let mut r = Reassembly::new(id);
        loop {
            let mut hb = [0u8; IP_HDR];
            match up.read_exact(&mut hb) {
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && r.is_empty() => {
                    return Err(format!(
                        "{name}: {} datagrams came of the {} expected",
                        id,
                        rec.expected()
                    )
                    .into());
                }
                x => x?,
            }
            let h = IpHdr::parse(&hb).map_err(|e| format!("{name}: datagram {id}: {e}"))?;
            let n = h.total as usize - IP_HDR;
            if n > pdu.len() || h.offset as usize + n > frags.payload {
                return Err(format!(
                    "{name}: datagram {id}: a fragment of {n} bytes at {}",
                    h.offset
                )
                .into());
            }
            up.read_exact(&mut pdu[..n])?;
            let (_, last) = r.take(&h).map_err(|e| format!("{name}: {e}"))?;
            ip[h.offset as usize..h.offset as usize + n].copy_from_slice(&pdu[..n]);
            if last {
                break;
            }
        }
        let udp: [u8; UDP_HDR] = ip[..UDP_HDR].try_into().expect("8 bytes");
        if r.len() != frags.payload || parse_udp(&udp) != Ok(s.len) {
            return Err(format!(
                "{name}: datagram {id}: reassembled {} bytes of {}",
                r.len(),
                frags.payload
            )
            .into());
        }
        for k in 0..frags.count() {
            let off = UDP_HDR + frags.data(k).0;
            rec.keep(k, |i| word_at(&ip[off..], i));
        }
        rec.next();
    }
    up.write_all(b"d")?;
    rec.check()?;
    Ok(())
}
