//! A real measurement of `MSG_ZEROCOPY` over TCP loopback.
//!
//! With `SO_ZEROCOPY` set, `send(MSG_ZEROCOPY)` asks the kernel to send the caller's pages in
//! place instead of copying them into the socket buffer; when the pages are released the kernel
//! queues a completion on the socket's error queue (`ee_origin == SO_EE_ORIGIN_ZEROCOPY`, the
//! range of send calls in `ee_info..=ee_data`). On loopback and veth the kernel copies the data
//! anyway, because the skb would otherwise reach a receiving socket still referencing user
//! pages, and says so in the completion (`ee_code` has `SO_EE_CODE_ZEROCOPY_COPIED`). Zero-copy
//! there costs the page pinning and the completion on top of the copy, so the socket modules
//! ([`crate::stream`]) use plain sends there. On a real NIC the pages are sent in place: that is
//! share semantics (weak integrity: the application must not write the buffer until the
//! completion), which emulated copy covers with TCOW.
//!
//! [`probe_loopback`] does the whole exchange (listener on 127.0.0.1 port 0, connect, accept,
//! `SO_ZEROCOPY`, a page-aligned 64 KiB `send(MSG_ZEROCOPY)`, read on the receiver, completion
//! from the sender's error queue); [`loopback`] caches its result for the process.

use serde::{Deserialize, Serialize};
use std::io::Read;
use std::net::{Ipv4Addr, Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Bytes sent by the probe: 16 pages of 4 KiB.
const LEN: usize = 64 << 10;
/// How long the probe waits for the receiver and for the completion.
const TIMEOUT: Duration = Duration::from_secs(1);
/// Upper bound on error-queue reads (each returns one completion, usually one in all).
const MAX_ERRQUEUE_READS: usize = 64;
use zcio_vm::sockzc::{
    SO_EE_CODE_ZEROCOPY_COPIED, SO_EE_ORIGIN_ZEROCOPY, recv_errqueue, set_zerocopy,
};

/// What a MSG_ZEROCOPY send over a connected TCP loopback pair really did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ZeroCopyProbe {
    /// setsockopt(SO_ZEROCOPY) and send(MSG_ZEROCOPY) were accepted.
    pub supported: bool,
    /// The completion said the kernel copied the data anyway (SO_EE_CODE_ZEROCOPY_COPIED).
    pub copied: bool,
    /// What happened, in words (errno text when unsupported).
    pub detail: String,
}

/// The result of [`probe_loopback`], measured once per process.
pub fn loopback() -> &'static ZeroCopyProbe {
    static PROBE: OnceLock<ZeroCopyProbe> = OnceLock::new();
    PROBE.get_or_init(probe_loopback)
}

/// Send a page-aligned 64 KiB buffer with `MSG_ZEROCOPY` over a fresh TCP loopback connection
/// and read the kernel's completion: whether zero-copy sends are accepted, and whether the
/// kernel copied the data anyway. Never fails: any error gives `supported: false` and says why.
pub fn probe_loopback() -> ZeroCopyProbe {
    match measure() {
        Ok(m) => {
            let what = if m.copied {
                "has SO_EE_CODE_ZEROCOPY_COPIED: the kernel copied the data anyway"
            } else {
                "has no SO_EE_CODE_ZEROCOPY_COPIED: the pages were sent in place"
            };
            ZeroCopyProbe {
                supported: true,
                copied: m.copied,
                detail: format!(
                    "{LEN} page-aligned bytes sent with MSG_ZEROCOPY over TCP 127.0.0.1 in {} \
                     send(s); completion of ids {}..={} {what}",
                    m.sends, m.first, m.last
                ),
            }
        }
        Err(detail) => ZeroCopyProbe {
            supported: false,
            copied: false,
            detail,
        },
    }
}

/// What the completions said.
struct Measured {
    /// Number of `send` calls (each one completion id).
    sends: u32,
    /// Lowest completion id seen.
    first: u32,
    /// Highest completion id seen.
    last: u32,
    /// Any completion had `SO_EE_CODE_ZEROCOPY_COPIED`.
    copied: bool,
}

fn measure() -> Result<Measured, String> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("bind(127.0.0.1:0): {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("getsockname: {e}"))?;
    let tx = TcpStream::connect(addr).map_err(|e| format!("connect({addr}): {e}"))?;
    let (rx, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
    rx.set_read_timeout(Some(TIMEOUT))
        .map_err(|e| format!("SO_RCVTIMEO: {e}"))?;
    tx.set_write_timeout(Some(TIMEOUT))
        .map_err(|e| format!("SO_SNDTIMEO: {e}"))?;
    set_zerocopy(tx.as_fd()).map_err(|e| format!("setsockopt(SO_ZEROCOPY): {e}"))?;

    // A page-aligned window of a heap buffer, filled so that its pages are real, not the zero page.
    let page = zcio_vm::page::page_size();
    let mut backing = vec![0u8; LEN + page];
    let off = backing.as_ptr().align_offset(page);
    let buf = &mut backing[off..off + LEN];
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let buf = &*buf;

    let (sent, received) = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut got = vec![0u8; LEN];
            (&rx).read_exact(&mut got).map(|()| got)
        });
        let sent = send_all_zerocopy(&tx, buf);
        if sent.is_err() {
            // Let the reader see end of file instead of waiting out its timeout.
            let _ = tx.shutdown(Shutdown::Write);
        }
        let received = reader
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("reader thread panicked")));
        (sent, received)
    });
    let sends = sent?;
    match received {
        Ok(got) if got == buf => {}
        Ok(_) => return Err("the receiver read different bytes than were sent".into()),
        Err(e) => return Err(format!("receiver read: {e}")),
    }

    // Read completions until they cover ids 0..sends, or the deadline passes.
    let deadline = Instant::now() + TIMEOUT;
    let mut covered: u64 = 0;
    let mut first = u32::MAX;
    let mut last = 0u32;
    let mut copied = false;
    let mut reads = 0;
    while covered < u64::from(sends) {
        if reads >= MAX_ERRQUEUE_READS {
            return Err(format!(
                "{reads} error-queue reads did not complete all {sends} zero-copy send(s)"
            ));
        }
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            return Err(format!(
                "no MSG_ZEROCOPY completion for all {sends} send(s) on the error queue within \
                 {} ms ({covered} completed)",
                TIMEOUT.as_millis()
            ));
        };
        let left = rustix::time::Timespec {
            tv_sec: left.as_secs() as _,
            tv_nsec: left.subsec_nanos() as _,
        };
        // POLLERR is reported whatever the requested events are.
        let mut fds = [rustix::event::PollFd::new(
            &tx,
            rustix::event::PollFlags::empty(),
        )];
        match rustix::event::poll(&mut fds, Some(&left)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(format!("poll: {e}")),
        }
        let revents = fds[0].revents();
        if revents.contains(rustix::event::PollFlags::NVAL) {
            return Err("poll: POLLNVAL on the sending socket".into());
        }
        if !revents.contains(rustix::event::PollFlags::ERR) {
            continue;
        }
        while covered < u64::from(sends) && reads < MAX_ERRQUEUE_READS {
            reads += 1;
            let ee = match recv_errqueue(tx.as_fd()) {
                Ok(Some(ee)) => ee,
                Ok(None) => break,
                Err(e) => return Err(format!("recvmsg(MSG_ERRQUEUE): {e}")),
            };
            if ee.origin != SO_EE_ORIGIN_ZEROCOPY || ee.errno != 0 {
                return Err(format!(
                    "unexpected error-queue entry: origin {} errno {} ({})",
                    ee.origin,
                    ee.errno,
                    std::io::Error::from_raw_os_error(ee.errno as i32)
                ));
            }
            let (lo, hi) = (ee.info, ee.data);
            covered += u64::from(hi.wrapping_sub(lo)) + 1;
            first = first.min(lo);
            last = last.max(hi);
            copied |= ee.code & SO_EE_CODE_ZEROCOPY_COPIED != 0;
        }
    }
    // The pages of `backing` may be freed only now that every completion has arrived.
    drop(backing);
    Ok(Measured {
        sends,
        first,
        last,
        copied,
    })
}

/// Send all of `buf` with `MSG_ZEROCOPY`; returns the number of `send` calls, each of which
/// gets one completion id.
fn send_all_zerocopy(tx: &TcpStream, buf: &[u8]) -> Result<u32, String> {
    let flags = rustix::net::SendFlags::from_bits_retain(libc::MSG_ZEROCOPY as u32)
        | rustix::net::SendFlags::NOSIGNAL;
    let mut sent = 0;
    let mut calls = 0u32;
    while sent < buf.len() {
        match rustix::net::send(tx, &buf[sent..], flags) {
            Ok(0) => return Err("send(MSG_ZEROCOPY) wrote nothing".into()),
            Ok(n) => {
                sent += n;
                calls += 1;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                return Err(format!(
                    "send(MSG_ZEROCOPY) after {sent} of {} bytes: {}",
                    buf.len(),
                    std::io::Error::from(e)
                ));
            }
        }
    }
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zerocopy_loopback_probe() {
        let p = probe_loopback();
        eprintln!(
            "MSG_ZEROCOPY on loopback: supported={} copied={} detail: {}",
            p.supported, p.copied, p.detail
        );
        assert!(!p.detail.is_empty());
        if !p.supported {
            assert!(!p.copied);
        }
        assert!(std::ptr::eq(loopback(), loopback()));
    }
}
