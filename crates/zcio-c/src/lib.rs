//! zcio for C: the library `libzcio_c` (shared and static) behind the header `zcio.h`
//! (`include/zcio.h`, made from this crate by cbindgen and checked in).
//!
//! Two C programs, started on their own, find each other by a name and pass a buffer under
//! emulated copy: the sender may write into its buffer as soon as `zcio_channel_send` returns,
//! and the receiver still gets the bytes of the moment of the call.
//!
//! ```c
//! #include <zcio.h>
//!
//! // The receiver:
//! zcio_listener *l; zcio_channel *rx; zcio_buffer *msg;
//! zcio_channel_listen("frames", &l);
//! zcio_listener_accept(l, ZCIO_NO_TIMEOUT, &rx);
//! zcio_channel_recv_alloc(rx, ZCIO_NO_TIMEOUT, &msg);
//!
//! // The sender, started on its own:
//! zcio_channel *tx; uint64_t ticket;
//! zcio_channel_connect("frames", 5000, &tx);
//! zcio_channel_send(tx, ZCIO_SEMANTICS_EMULATED_COPY, data, len, &ticket);
//! memset(data, 0, len);                    // the receiver still gets the bytes sent
//! zcio_channel_wait(tx, ticket, ZCIO_NO_TIMEOUT);
//! ```
//!
//! The conventions are rustls-ffi's and iceoryx2's C binding's:
//!
//! - One prefix, `zcio_`; opaque handles, each freed by its own `_free` function, which takes
//!   NULL and does nothing. A handle freed already, or of another type, is refused with
//!   `ZCIO_INVALID_ARGUMENT` (every live handle is registered), unless its address was given to
//!   a new handle meanwhile.
//! - Every function returns a [`zcio_status`] (`zcio_status_string` names it; that function
//!   alone returns a string) and writes its results through out-parameters, only on
//!   `ZCIO_OK`. `zcio_last_error` gives the last failure's whole message on this thread, named
//!   by the function that failed.
//! - Pointers are checked for NULL and lengths for 0 before anything is done; `const`
//!   pointers are not written through. No panic crosses into C: one becomes `ZCIO_PANIC`.
//! - Timeouts are milliseconds, `ZCIO_NO_TIMEOUT` (any negative value) for none; a signal
//!   with a handler ends a wait with `ZCIO_INTERRUPTED`, and nothing is lost.
//! - Threads: each handle holds a lock, so a handle may be used from several threads; their
//!   calls on it run one at a time (a receive waiting on a channel holds it until it returns:
//!   give it a timeout, or wait with `poll` on `zcio_channel_fd`, where another thread must
//!   send meanwhile). Free a handle only when no other call on it runs.

#![allow(non_camel_case_types)]

mod buffer;
mod channel;
mod fbuf;
mod handle;
mod status;

pub use buffer::{
    zcio_alloc, zcio_buffer, zcio_buffer_data, zcio_buffer_data_mut, zcio_buffer_free,
    zcio_buffer_len,
};
pub use channel::{
    ZCIO_NO_TIMEOUT, zcio_channel, zcio_channel_connect, zcio_channel_fd, zcio_channel_flush,
    zcio_channel_free, zcio_channel_listen, zcio_channel_peek_len, zcio_channel_recv,
    zcio_channel_recv_alloc, zcio_channel_send, zcio_channel_wait, zcio_listener,
    zcio_listener_accept, zcio_listener_fd, zcio_listener_free, zcio_semantics,
};
pub use fbuf::{
    ZCIO_FBUF_UNCACHED, ZCIO_FBUF_VOLATILE, zcio_fbuf, zcio_fbuf_alloc, zcio_fbuf_data,
    zcio_fbuf_free, zcio_fbuf_join, zcio_fbuf_len, zcio_fbuf_path, zcio_fbuf_path_accept,
    zcio_fbuf_path_create, zcio_fbuf_path_free, zcio_fbuf_path_wait_all, zcio_fbuf_receiver,
    zcio_fbuf_receiver_free, zcio_fbuf_recv, zcio_fbuf_send, zcio_fbuf_view, zcio_fbuf_view_data,
    zcio_fbuf_view_free, zcio_fbuf_view_len,
};
pub use status::{zcio_last_error, zcio_status, zcio_status_string};

use status::Error;
use std::ffi::{CStr, c_char};
use std::time::Duration;

/// The Internet checksum (RFC 1071) of `len` bytes at `data`, with the fastest kernel this CPU
/// has, into `*sum`: a number (`0x220d` for RFC 1071's example, whose bytes sum to `0xddf2`),
/// to be stored in a header in network byte order (`htons`). `len` may be 0 (the checksum of
/// nothing, `0xffff`).
///
/// # Safety
///
/// `data` points to `len` readable bytes; `sum` to a writable `uint16_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_checksum(data: *const u8, len: usize, sum: *mut u16) -> zcio_status {
    status::guard("zcio_checksum", || {
        // SAFETY: the caller's promise.
        let bytes = unsafe { bytes(data, len, "data", true)? };
        let out = out(sum, "sum")?;
        let s = zcio::checksum::checksum(bytes);
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(s) };
        Ok(())
    })
}

/// The bytes `[p, p + len)` of argument `arg`, checked: not NULL, and `len` not 0 (unless
/// `empty_ok`) nor past what a slice may hold.
///
/// # Safety
///
/// `p` is NULL or points to `len` readable bytes that nothing writes while the slice lives.
pub(crate) unsafe fn bytes<'a>(
    p: *const u8,
    len: usize,
    arg: &str,
    empty_ok: bool,
) -> Result<&'a [u8], Error> {
    check_buf(p, len, arg, empty_ok)?;
    // SAFETY: not NULL, `len` within `isize::MAX` (checked), readable by the caller's promise.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// The writable bytes `[p, p + len)` of argument `arg`, checked as [`bytes`] does (`len` 0
/// refused).
///
/// # Safety
///
/// `p` is NULL or points to `len` writable bytes that nothing else reads or writes while the
/// slice lives.
pub(crate) unsafe fn bytes_mut<'a>(
    p: *mut u8,
    len: usize,
    arg: &str,
) -> Result<&'a mut [u8], Error> {
    check_buf(p, len, arg, false)?;
    // SAFETY: not NULL, `len` within `isize::MAX` (checked), writable and unaliased by the
    // caller's promise.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

fn check_buf(p: *const u8, len: usize, arg: &str, empty_ok: bool) -> Result<(), Error> {
    if p.is_null() {
        return Err(Error::null(arg));
    }
    if len == 0 && !empty_ok {
        return Err(Error::invalid(
            &format!("{arg}'s length"),
            "0 bytes (a message holds one byte at least)",
        ));
    }
    if len > isize::MAX as usize {
        return Err(Error::invalid(
            &format!("{arg}'s length"),
            format!("{len} bytes, more than any buffer holds"),
        ));
    }
    Ok(())
}

/// Out-parameter `arg`, checked not to be NULL.
pub(crate) fn out<T>(p: *mut T, arg: &str) -> Result<*mut T, Error> {
    if p.is_null() {
        Err(Error::null(arg))
    } else {
        Ok(p)
    }
}

/// The C string `name` (argument `arg`) as UTF-8.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string.
pub(crate) unsafe fn name<'a>(name: *const c_char, arg: &str) -> Result<&'a str, Error> {
    if name.is_null() {
        return Err(Error::null(arg));
    }
    // SAFETY: not NULL, NUL-terminated by the caller's promise.
    let s = unsafe { CStr::from_ptr(name) };
    s.to_str()
        .map_err(|e| Error::invalid(arg, format!("{s:?} is not UTF-8: {e}")))
}

/// A timeout in milliseconds: `None` for a negative one ([`ZCIO_NO_TIMEOUT`]).
pub(crate) fn timeout(ms: i64) -> Option<Duration> {
    u64::try_from(ms).ok().map(Duration::from_millis)
}
