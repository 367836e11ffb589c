//! Statuses, the errors behind them, the last error's message, and the guard every entry
//! point runs its body in.

use std::cell::RefCell;
use std::ffi::{CStr, c_char, c_int};
use std::panic::{AssertUnwindSafe, catch_unwind};
use zcio::ErrorKind;
use zcio::GenieError;
use zcio::fbufs::link::LinkError;
use zcio::fbufs::path::FbufError;
use zcio::vm::rendezvous::RendezvousError;

/// What a call of zcio's C interface did: `ZCIO_OK`, or why it failed. Every function but
/// `zcio_status_string` returns one; `zcio_last_error` gives the failure's whole message.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum zcio_status {
    /// The call did what it was asked; its out-parameters are written.
    ZCIO_OK = 0,
    /// A pointer argument was NULL.
    ZCIO_NULL_ARGUMENT = 1,
    /// An argument broke a rule of the call (a length of 0, an unknown semantics, a name too
    /// long, a handle freed already); the message names it.
    ZCIO_INVALID_ARGUMENT = 2,
    /// The buffer is smaller than the next message, which stays queued:
    /// `zcio_channel_peek_len` says its length.
    ZCIO_TOO_SMALL = 3,
    /// A wait ran out of its time; nothing was taken, and the handle goes on.
    ZCIO_TIMED_OUT = 4,
    /// The peer is gone (closed, crashed or killed).
    ZCIO_PEER_GONE = 5,
    /// The call would have had to wait, and may not: try again later.
    ZCIO_WOULD_BLOCK = 6,
    /// A signal (one with a handler) ended a wait; nothing was taken, and the handle goes on.
    ZCIO_INTERRUPTED = 7,
    /// zcio panicked inside the call (a bug in zcio); the panic did not cross into C.
    ZCIO_PANIC = 8,
    /// A system call failed; the message names it and its errno.
    ZCIO_IO = 9,
    /// The channel cannot carry the semantics asked for.
    ZCIO_UNSUPPORTED = 10,
    /// Fewer bytes arrived than the message needed.
    ZCIO_TRUNCATED = 11,
    /// A message was lost on the way; the channel goes on with the next.
    ZCIO_MESSAGE_LOST = 12,
    /// The channel refuses this direction: an earlier call failed partway through a message.
    /// Make a new channel.
    ZCIO_REFUSED = 13,
    /// The caller may not do this (a process of another user).
    ZCIO_NOT_PERMITTED = 14,
    /// The peer broke zcio's protocol.
    ZCIO_PROTOCOL = 15,
    /// The VM layer refused (a length, an alignment, a limit of the system).
    ZCIO_VM = 16,
    /// The sender closed the fbuf path in order: nothing more comes.
    ZCIO_CLOSED = 17,
    /// A failure of another kind; the message says what.
    ZCIO_OTHER = 18,
}

use zcio_status::*;

/// The statuses and their strings, in order of value.
const STRINGS: [(zcio_status, &CStr); 19] = [
    (ZCIO_OK, c"ZCIO_OK: success"),
    (
        ZCIO_NULL_ARGUMENT,
        c"ZCIO_NULL_ARGUMENT: a pointer argument was NULL",
    ),
    (
        ZCIO_INVALID_ARGUMENT,
        c"ZCIO_INVALID_ARGUMENT: an argument broke a rule of the call",
    ),
    (
        ZCIO_TOO_SMALL,
        c"ZCIO_TOO_SMALL: the buffer is smaller than the next message, which stays queued",
    ),
    (
        ZCIO_TIMED_OUT,
        c"ZCIO_TIMED_OUT: a wait ran out of its time",
    ),
    (ZCIO_PEER_GONE, c"ZCIO_PEER_GONE: the peer is gone"),
    (
        ZCIO_WOULD_BLOCK,
        c"ZCIO_WOULD_BLOCK: the call would have had to wait",
    ),
    (ZCIO_INTERRUPTED, c"ZCIO_INTERRUPTED: a signal ended a wait"),
    (ZCIO_PANIC, c"ZCIO_PANIC: zcio panicked inside the call"),
    (ZCIO_IO, c"ZCIO_IO: a system call failed"),
    (
        ZCIO_UNSUPPORTED,
        c"ZCIO_UNSUPPORTED: the channel cannot carry this semantics",
    ),
    (
        ZCIO_TRUNCATED,
        c"ZCIO_TRUNCATED: fewer bytes arrived than the message needed",
    ),
    (ZCIO_MESSAGE_LOST, c"ZCIO_MESSAGE_LOST: a message was lost"),
    (
        ZCIO_REFUSED,
        c"ZCIO_REFUSED: the channel refuses this direction after an earlier failure",
    ),
    (
        ZCIO_NOT_PERMITTED,
        c"ZCIO_NOT_PERMITTED: the caller may not do this",
    ),
    (ZCIO_PROTOCOL, c"ZCIO_PROTOCOL: the peer broke the protocol"),
    (ZCIO_VM, c"ZCIO_VM: the VM layer refused"),
    (
        ZCIO_CLOSED,
        c"ZCIO_CLOSED: the sender closed the path in order",
    ),
    (ZCIO_OTHER, c"ZCIO_OTHER: another failure"),
];

/// A static, NUL-terminated string naming `status` and saying what it means (never NULL; an
/// unknown value gets a string saying so). The whole message of the last failure is
/// `zcio_last_error`'s.
#[unsafe(no_mangle)]
pub extern "C" fn zcio_status_string(status: c_int) -> *const c_char {
    usize::try_from(status)
        .ok()
        .and_then(|i| STRINGS.get(i))
        .map_or(c"unknown zcio_status", |(_, s)| s)
        .as_ptr()
}

/// A failure: its status and its message.
#[derive(Debug)]
pub(crate) struct Error {
    pub(crate) status: zcio_status,
    pub(crate) msg: String,
}

impl Error {
    pub(crate) fn new(status: zcio_status, msg: impl Into<String>) -> Error {
        Error {
            status,
            msg: msg.into(),
        }
    }

    /// Argument `arg` was NULL.
    pub(crate) fn null(arg: &str) -> Error {
        Error::new(ZCIO_NULL_ARGUMENT, format!("argument `{arg}` is NULL"))
    }

    /// Argument `arg` broke `rule`.
    pub(crate) fn invalid(arg: &str, rule: impl std::fmt::Display) -> Error {
        Error::new(
            ZCIO_INVALID_ARGUMENT,
            format!("invalid argument `{arg}`: {rule}"),
        )
    }
}

/// The status of a zcio error's kind.
pub(crate) fn status_of(kind: ErrorKind) -> zcio_status {
    match kind {
        ErrorKind::InvalidArgument => ZCIO_INVALID_ARGUMENT,
        ErrorKind::Unsupported => ZCIO_UNSUPPORTED,
        ErrorKind::PeerGone => ZCIO_PEER_GONE,
        ErrorKind::TimedOut => ZCIO_TIMED_OUT,
        ErrorKind::Interrupted => ZCIO_INTERRUPTED,
        ErrorKind::TooSmall { .. } => ZCIO_TOO_SMALL,
        ErrorKind::Truncated => ZCIO_TRUNCATED,
        ErrorKind::MessageLost => ZCIO_MESSAGE_LOST,
        ErrorKind::Refused => ZCIO_REFUSED,
        ErrorKind::WouldBlock => ZCIO_WOULD_BLOCK,
        ErrorKind::NotPermitted => ZCIO_NOT_PERMITTED,
        ErrorKind::Protocol => ZCIO_PROTOCOL,
        ErrorKind::Io { .. } => ZCIO_IO,
        ErrorKind::Vm => ZCIO_VM,
        _ => ZCIO_OTHER,
    }
}

impl From<GenieError> for Error {
    fn from(e: GenieError) -> Error {
        Error::new(status_of(e.kind()), e.to_string())
    }
}

fn vm_status(e: &zcio::vm::VmError) -> zcio_status {
    if e.errno().is_some() {
        ZCIO_IO
    } else {
        ZCIO_VM
    }
}

fn rendezvous_status(e: &RendezvousError) -> zcio_status {
    match e {
        RendezvousError::BadName { .. } | RendezvousError::Taken { .. } => ZCIO_INVALID_ARGUMENT,
        RendezvousError::TimedOut { .. } => ZCIO_TIMED_OUT,
        RendezvousError::Interrupted { .. } => ZCIO_INTERRUPTED,
        RendezvousError::NotPermitted { .. } => ZCIO_NOT_PERMITTED,
        RendezvousError::Io { .. } => ZCIO_IO,
        _ => ZCIO_OTHER,
    }
}

fn fbuf_status(e: &FbufError) -> zcio_status {
    match e {
        FbufError::Quota { .. } | FbufError::NeedChunks { .. } => ZCIO_WOULD_BLOCK,
        FbufError::Refused(_) => ZCIO_REFUSED,
        FbufError::Vm(v) => vm_status(v),
        _ => ZCIO_INVALID_ARGUMENT,
    }
}

impl From<FbufError> for Error {
    fn from(e: FbufError) -> Error {
        Error::new(fbuf_status(&e), e.to_string())
    }
}

impl From<LinkError> for Error {
    fn from(e: LinkError) -> Error {
        let status = match &e {
            LinkError::Fbuf(f) => fbuf_status(f),
            LinkError::Io(_) => ZCIO_IO,
            LinkError::Vm(v) => vm_status(v),
            LinkError::Rendezvous(r) => rendezvous_status(r),
            LinkError::Protocol(_) => ZCIO_PROTOCOL,
            LinkError::PeerGone { .. } | LinkError::Stalled { .. } => ZCIO_PEER_GONE,
        };
        Error::new(status, e.to_string())
    }
}

thread_local! {
    /// The message of this thread's last failed call.
    static LAST: RefCell<String> = const { RefCell::new(String::new()) };
}

fn set_last(msg: String) {
    LAST.with(|l| *l.borrow_mut() = msg);
}

/// Run `body`, the work of the entry point `func`, so that nothing but a status leaves it: a
/// failure's message becomes this thread's last error, named by `func`, and a panic becomes
/// `ZCIO_PANIC`.
pub(crate) fn guard(func: &str, body: impl FnOnce() -> Result<(), Error>) -> zcio_status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => ZCIO_OK,
        Ok(Err(e)) => {
            set_last(format!("{func}: {}", e.msg));
            e.status
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            set_last(format!("{func}: zcio panicked (a bug in zcio): {what}"));
            ZCIO_PANIC
        }
    }
}

/// Copy the message of the last call on this thread that failed into `buf` (`len` bytes),
/// NUL-terminated, cut short where it does not fit (`len` of 0 is refused); `*written`
/// (optional: NULL is allowed) gets the bytes written before the NUL. A thread on which no call
/// failed yet gets an empty string. Calls that succeed leave the message as it is, as `errno`.
///
/// # Safety
///
/// `buf` is NULL or points to `len` writable bytes; `written` is NULL or points to a
/// writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_last_error(
    buf: *mut c_char,
    len: usize,
    written: *mut usize,
) -> zcio_status {
    if buf.is_null() {
        return ZCIO_NULL_ARGUMENT;
    }
    if len == 0 {
        return ZCIO_INVALID_ARGUMENT;
    }
    let n = LAST.with(|l| {
        let l = l.borrow();
        let n = l.len().min(len - 1);
        // SAFETY: `buf` is not NULL and holds `len` bytes (the caller's promise); `n + 1 <= len`
        // bytes are written, the message's (which lives in this thread's storage and does not
        // overlap a caller's buffer) and a NUL.
        unsafe {
            std::ptr::copy_nonoverlapping(l.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
        n
    });
    if !written.is_null() {
        // SAFETY: not NULL, and writable by the caller's promise.
        unsafe { *written = n };
    }
    ZCIO_OK
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_its_own_string_in_order() {
        for (i, (s, text)) in STRINGS.iter().enumerate() {
            assert_eq!(*s as usize, i, "{text:?} is out of order");
            let name = format!("{s:?}");
            assert!(
                text.to_str().unwrap().starts_with(&format!("{name}: ")),
                "{text:?} does not name {name}"
            );
            // SAFETY: zcio_status_string returns a static NUL-terminated string.
            let got = unsafe { CStr::from_ptr(zcio_status_string(i as c_int)) };
            assert_eq!(got, *text);
        }
        for bad in [-1, STRINGS.len() as c_int, c_int::MAX] {
            // SAFETY: as above.
            let got = unsafe { CStr::from_ptr(zcio_status_string(bad)) };
            assert_eq!(got, c"unknown zcio_status");
        }
    }

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let s = guard("zcio_test", || panic!("on purpose"));
        assert_eq!(s, ZCIO_PANIC);
        let mut buf = [0 as c_char; 128];
        let mut n = 0;
        // SAFETY: `buf` holds 128 bytes, `n` is a usize.
        let s = unsafe { zcio_last_error(buf.as_mut_ptr(), buf.len(), &mut n) };
        assert_eq!(s, ZCIO_OK);
        // SAFETY: zcio_last_error NUL-terminated it.
        let msg = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_str().unwrap();
        assert_eq!(msg, "zcio_test: zcio panicked (a bug in zcio): on purpose");
        assert_eq!(n, msg.len());
        // Cut short, still terminated.
        let mut small = [1 as c_char; 5];
        // SAFETY: `small` holds 5 bytes; `written` may be NULL.
        let s = unsafe { zcio_last_error(small.as_mut_ptr(), 5, std::ptr::null_mut()) };
        assert_eq!(s, ZCIO_OK);
        // SAFETY: NUL-terminated by the call.
        assert_eq!(unsafe { CStr::from_ptr(small.as_ptr()) }, c"zcio");
    }
}
