//! Channels by name: a listener and the channels it accepts, a channel connected by name, and
//! the calls on a channel.

use crate::buffer::zcio_buffer;
use crate::handle::{self, Handle};
use crate::status::{Error, guard, zcio_status};
use crate::{bytes, bytes_mut, out, timeout};
use std::ffi::{c_char, c_int};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;
use zcio::{Channel, ChannelListener, InputBuffering, Semantics, Ticket, Waits};

/// A timeout that never runs out (any negative number of milliseconds means the same).
pub const ZCIO_NO_TIMEOUT: i64 = -1;

/// How long "no timeout" waits for a listener in `zcio_channel_connect`: ten years.
const CONNECT_FOREVER: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The data-passing semantics of a send: what the sender may do with its buffer after
/// `zcio_channel_send` returns, and what the receiver is sure to get.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum zcio_semantics {
    /// The bytes are copied before the call returns: the buffer is the sender's again at
    /// once, and the receiver gets the bytes of the moment of the call.
    ZCIO_SEMANTICS_COPY = 0,
    /// Copy semantics without the copy where the VM allows it: the buffer's pages are
    /// protected and passed, and a write to one after the call gets a copy of that page
    /// alone. The buffer is the sender's again at once, and the receiver gets the bytes of the
    /// moment of the call. A buffer from `zcio_alloc` (page-aligned) takes this path whole.
    ZCIO_SEMANTICS_EMULATED_COPY = 1,
    /// The channel works in place on the buffer: the sender must not change (nor free) it
    /// until `zcio_channel_wait` of the send's ticket returns; the receiver gets whatever the
    /// buffer holds when it reads it.
    ZCIO_SEMANTICS_SHARE = 2,
    /// Share, with the pages referenced rather than wired: the same promise, the buffer
    /// unchanged and alive until `zcio_channel_wait` of the send's ticket returns.
    ZCIO_SEMANTICS_EMULATED_SHARE = 3,
}

fn semantics(v: c_int) -> Result<Semantics, Error> {
    use zcio_semantics::*;
    Ok(match v {
        v if v == ZCIO_SEMANTICS_COPY as c_int => Semantics::Copy,
        v if v == ZCIO_SEMANTICS_EMULATED_COPY as c_int => Semantics::EmulatedCopy,
        v if v == ZCIO_SEMANTICS_SHARE as c_int => Semantics::Share,
        v if v == ZCIO_SEMANTICS_EMULATED_SHARE as c_int => Semantics::EmulatedShare,
        v => {
            return Err(Error::invalid(
                "semantics",
                format!(
                    "{v} is no zcio_semantics (ZCIO_SEMANTICS_COPY 0, _EMULATED_COPY 1, \
                     _SHARE 2, _EMULATED_SHARE 3)"
                ),
            ));
        }
    })
}

/// A name other processes connect to (`zcio_channel_listen`), each getting a channel of its
/// own (`zcio_listener_accept`). Freed with `zcio_listener_free`, which frees the name.
pub struct zcio_listener {
    inner: Mutex<ChannelListener>,
}

impl Handle for zcio_listener {
    const KIND: &'static str = "zcio_listener";
}

/// One end of a channel (`zcio_channel_connect`, `zcio_listener_accept`). Freed with
/// `zcio_channel_free`; the peer's next call then fails with `ZCIO_PEER_GONE`.
pub struct zcio_channel {
    inner: Mutex<Channel>,
}

impl Handle for zcio_channel {
    const KIND: &'static str = "zcio_channel";
}

impl zcio_channel {
    fn new(ch: Channel) -> *mut zcio_channel {
        handle::into_raw(zcio_channel {
            inner: Mutex::new(ch),
        })
    }

    /// The channel, its waits set to end after `timeout_ms` or at a signal.
    fn lock(&self, timeout_ms: i64) -> MutexGuard<'_, Channel> {
        let mut ch = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        ch.set_waits(Waits {
            timeout: timeout(timeout_ms),
            interruptible: true,
        });
        ch
    }
}

/// Listen on `name` (a plain name: this host, this user's processes only; `tcp://host:port`
/// for peers on other hosts), into `*listener`. A name of 1 to 100 bytes; one that another
/// listener holds is refused (`ZCIO_INVALID_ARGUMENT`).
///
/// # Safety
///
/// `name` is a NUL-terminated string; `listener` points to a writable `zcio_listener *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_channel_listen(
    name: *const c_char,
    listener: *mut *mut zcio_listener,
) -> zcio_status {
    guard("zcio_channel_listen", || {
        // SAFETY: the caller's promise.
        let name = unsafe { crate::name(name, "name")? };
        let out = out(listener, "listener")?;
        let l = Channel::listen(name)?;
        let h = handle::into_raw(zcio_listener {
            inner: Mutex::new(l),
        });
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(h) };
        Ok(())
    })
}

/// Wait up to `timeout_ms` (`ZCIO_NO_TIMEOUT`: as long as it takes) for the next process to
/// connect, and give its channel in `*channel`.
///
/// # Safety
///
/// `listener` is NULL or a `zcio_listener *` not freed; `channel` points to a writable
/// `zcio_channel *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_listener_accept(
    listener: *const zcio_listener,
    timeout_ms: i64,
    channel: *mut *mut zcio_channel,
) -> zcio_status {
    guard("zcio_listener_accept", || {
        // SAFETY: the caller frees `listener` only when no call on it runs.
        let l = unsafe { handle::get(listener, "listener")? };
        let out = out(channel, "channel")?;
        let ch = l
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .accept(timeout(timeout_ms))?;
        let h = zcio_channel::new(ch);
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(h) };
        Ok(())
    })
}

/// The listener's file descriptor, into `*fd`: readable when a process waits to be accepted
/// (for `poll`, `epoll`). The listener owns it: do not close it.
///
/// # Safety
///
/// `listener` is NULL or a `zcio_listener *` not freed; `fd` points to a writable `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_listener_fd(
    listener: *const zcio_listener,
    fd: *mut c_int,
) -> zcio_status {
    guard("zcio_listener_fd", || {
        // SAFETY: the caller frees `listener` only when no call on it runs.
        let l = unsafe { handle::get(listener, "listener")? };
        let out = out(fd, "fd")?;
        let raw = l
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_fd()
            .as_raw_fd();
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(raw) };
        Ok(())
    })
}

/// Stop listening: the name is free again (channels accepted go on). NULL is allowed.
///
/// # Safety
///
/// `listener` is NULL or a `zcio_listener *`; no other call on it runs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_listener_free(listener: *mut zcio_listener) -> zcio_status {
    guard("zcio_listener_free", || handle::free(listener, "listener"))
}

/// Connect to the listener of `name`, waiting up to `timeout_ms` for it to be there
/// (`ZCIO_NO_TIMEOUT`: as long as it takes); a name nobody listens on fails with
/// `ZCIO_TIMED_OUT` once the time has passed. The channel goes into `*channel`.
///
/// # Safety
///
/// `name` is a NUL-terminated string; `channel` points to a writable `zcio_channel *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_channel_connect(
    name: *const c_char,
    timeout_ms: i64,
    channel: *mut *mut zcio_channel,
) -> zcio_status {
    guard("zcio_channel_connect", || {
        // SAFETY: the caller's promise.
        let name = unsafe { crate::name(name, "name")? };
        let out = out(channel, "channel")?;
        let ch = Channel::connect(name, timeout(timeout_ms).unwrap_or(CONNECT_FOREVER))?;
        let h = zcio_channel::new(ch);
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(h) };
        Ok(())
    })
}

/// Send the `len` bytes at `buf` under `semantics` (a `zcio_semantics`), as one message;
/// `*ticket` gets its ticket for `zcio_channel_wait`. Returns once the message is queued, while
/// it fits the channel's window of messages not yet read (16 MiB); beyond, it waits for the
/// receiver to read (ending at a signal with `ZCIO_INTERRUPTED`). Under copy and emulated copy
/// the buffer is the caller's again at once; under share and emulated share it must stay
/// unchanged and alive until `zcio_channel_wait(channel, ticket, ...)` returns `ZCIO_OK`.
///
/// # Safety
///
/// `channel` is NULL or a `zcio_channel *` not freed; `buf` points to `len` readable bytes;
/// `ticket` points to a writable `uint64_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_channel_send(
    channel: *mut zcio_channel,
    semantics: c_int,
    buf: *const u8,
    len: usize,
    ticket: *mut u64,
) -> zcio_status {
    guard("zcio_channel_send", || {
        // SAFETY: the caller frees `channel` only when no call on it runs.
        let ch = unsafe { handle::get(channel, "channel")? };
        let sem = self::semantics(semantics)?;
        // SAFETY: the caller's promise: `len` readable bytes (under share, left alone until
        // the ticket completes).
        let data = unsafe { bytes(buf, len, "buf", false)? };
        let out = out(ticket, "ticket")?;
        let (t, _) = ch.lock(ZCIO_NO_TIMEOUT).send(sem, data)?;
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(t.0) };
        Ok(())
    })
}

/// Receive the next message into the `len` bytes at `buf`, waiting up to `timeout_ms` for it;
/// `*received` gets its length. A message longer than `len` stays queued and the call returns
/// `ZCIO_TOO_SMALL` (`zcio_channel_peek_len` says its length; the last error names it too).
///
/// # Safety
///
/// `channel` is NULL or a `zcio_channel *` not freed; `buf` points to `len` writable bytes;
/// `received` points to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_channel_recv(
    channel: *mut zcio_channel,
    buf: *mut u8,
    len: usize,
    timeout_ms: i64,
    received: *mut usize,
) -> zcio_status {
    guard("zcio_channel_recv", || {
        // SAFETY: the caller frees `channel` only when no call on it runs.
        let ch = unsafe { handle::get(channel, "channel")? };
        // SAFETY: the caller's promise: `len` writable bytes, nothing else using them.
        let data = unsafe { bytes_mut(buf, len, "buf")? };
        let out = out(received, "received")?;
        let (n, _) =
            ch.lock(timeout_ms)
                .recv(Semantics::EmulatedCopy, data, InputBuffering::EarlyDemux)?;
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(n) };
        Ok(())
    })
}

/// Receive the next message into a buffer of its own length that zcio makes (a message sent
/// from a `zcio_alloc` buffer, or a large one, is mapped rather than copied where it can be),
/// waiting up to `timeout_ms` for it; `*buffer` gets it, this process's own to read and write,
/// freed with `zcio_buffer_free`.
///
/// # Safety
///
/// `channel` is NULL or a `zcio_channel *` not freed; `buffer` points to a writable
/// `zcio_buffer *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_channel_recv_alloc(
    channel: *mut zcio_channel,
    timeout_ms: i64,
    buffer: *mut *mut zcio_buffer,
) -> zcio_status {
    guard("zcio_channel_recv_alloc", || {
        // SAFETY: the caller frees `channel` only when no call on it runs.
        let ch = unsafe { handle::get(channel, "channel")? };
        let out = out(buffer, "buffer")?;
        let (r, _) = ch.lock(timeout_ms).recv_loan()?;
        let h = handle::into_raw(zcio_buffer::received(r));
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(h) };
        Ok(())
    })
}

/// The length of the next message, into `*len`, waiting up to `timeout_ms` for it; the
/// message stays queued.
///
/// # Safety
///
/// `channel` is NULL or a `zcio_channel *` not freed; `len` points to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_channel_peek_len(
    channel: *mut zcio_channel,
    timeout_ms: i64,
    len: *mut usize,
) -> zcio_status {
    guard("zcio_channel_peek_len", || {
        // SAFETY: the caller frees `channel` only when no call on it runs.
        let ch = unsafe { handle::get(channel, "channel")? };
        let out = out(len, "len")?;
        let n = ch.lock(timeout_ms).peek_len()?;
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(n) };
        Ok(())
    })
}

/// Wait up to `timeout_ms` until the send of `ticket` has completed (the receiver has the
/// message): after that, a buffer sent under share semantics is the caller's again.
///
/// # Safety
///
/// `channel` is NULL or a `zcio_channel *` not freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_channel_wait(
    channel: *mut zcio_channel,
    ticket: u64,
    timeout_ms: i64,
) -> zcio_status {
    guard("zcio_channel_wait", || {
        // SAFETY: the caller frees `channel` only when no call on it runs.
        let ch = unsafe { handle::get(channel, "channel")? };
        Ok(ch.lock(timeout_ms).wait(Ticket(ticket))?)
    })
}

/// Wait up to `timeout_ms` until every send on the channel has completed.
///
/// # Safety
///
/// `channel` is NULL or a `zcio_channel *` not freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_channel_flush(
    channel: *mut zcio_channel,
    timeout_ms: i64,
) -> zcio_status {
    guard("zcio_channel_flush", || {
        // SAFETY: the caller frees `channel` only when no call on it runs.
        let ch = unsafe { handle::get(channel, "channel")? };
        Ok(ch.lock(timeout_ms).flush()?)
    })
}

/// The channel's file descriptor, into `*fd`: readable when a message is ready to be received
/// (or, on this host, when a send has completed), for `poll` and `epoll`. The channel owns
/// it, the same one for its whole life: do not close it.
///
/// # Safety
///
/// `channel` is NULL or a `zcio_channel *` not freed; `fd` points to a writable `int`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_channel_fd(
    channel: *const zcio_channel,
    fd: *mut c_int,
) -> zcio_status {
    guard("zcio_channel_fd", || {
        // SAFETY: the caller frees `channel` only when no call on it runs.
        let ch = unsafe { handle::get(channel, "channel")? };
        let out = out(fd, "fd")?;
        let raw = ch
            .inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_raw_fd();
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(raw) };
        Ok(())
    })
}

/// Close and free a channel: the peer's calls then fail with `ZCIO_PEER_GONE`. Call
/// `zcio_channel_flush` first where the receiver must have every message sent. NULL is
/// allowed.
///
/// # Safety
///
/// `channel` is NULL or a `zcio_channel *`; no other call on it runs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_channel_free(channel: *mut zcio_channel) -> zcio_status {
    guard("zcio_channel_free", || handle::free(channel, "channel"))
}
