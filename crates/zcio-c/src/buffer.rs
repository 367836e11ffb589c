//! Buffers zcio makes: memory to fill and send (`zcio_alloc`, in 2 MiB pages from 2 MiB) and
//! messages received into memory of their own (`zcio_channel_recv_alloc`).

use crate::handle::{self, Handle};
use crate::status::{guard, zcio_status};
use std::sync::Mutex;
use zcio::{AppBuffer, Received};

/// Bytes zcio made, this process's own to read and write: from `zcio_alloc`, or a message
/// from `zcio_channel_recv_alloc`. Freed with `zcio_buffer_free`.
pub struct zcio_buffer {
    bytes: Mutex<Bytes>,
}

impl Handle for zcio_buffer {
    const KIND: &'static str = "zcio_buffer";
}

/// What a buffer holds.
enum Bytes {
    Made(AppBuffer),
    Received(Received),
}

impl Bytes {
    fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Bytes::Made(b) => b,
            Bytes::Received(r) => r,
        }
    }
}

impl zcio_buffer {
    pub(crate) fn received(r: Received) -> zcio_buffer {
        zcio_buffer {
            bytes: Mutex::new(Bytes::Received(r)),
        }
    }

    /// The buffer's start and length.
    fn span(&self) -> (*mut u8, usize) {
        let mut b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        let s = b.as_mut_slice();
        (s.as_mut_ptr(), s.len())
    }
}

/// `len` bytes of zcio's, zeroed and page-aligned, in 2 MiB pages from 2 MiB where the kernel
/// gives them (in 4 KiB pages otherwise), into `*buffer`. Fill it through
/// `zcio_buffer_data_mut` and send it: an emulated-copy send of such a buffer protects its
/// pages instead of copying them, and a later write copies only the page it touches.
///
/// # Safety
///
/// `buffer` points to a writable `zcio_buffer *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_alloc(len: usize, buffer: *mut *mut zcio_buffer) -> zcio_status {
    guard("zcio_alloc", || {
        let out = crate::out(buffer, "buffer")?;
        if len == 0 {
            return Err(crate::Error::invalid("len", "0 bytes"));
        }
        let b = AppBuffer::for_message(len)?;
        let h = handle::into_raw(zcio_buffer {
            bytes: Mutex::new(Bytes::Made(b)),
        });
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(h) };
        Ok(())
    })
}

/// The buffer's bytes, to read, into `*data` (valid until `zcio_buffer_free`).
///
/// # Safety
///
/// `buffer` is NULL or a `zcio_buffer *` not freed; `data` points to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_buffer_data(
    buffer: *const zcio_buffer,
    data: *mut *const u8,
) -> zcio_status {
    guard("zcio_buffer_data", || {
        // SAFETY: the caller frees `buffer` only when no call on it runs.
        let b = unsafe { handle::get(buffer, "buffer")? };
        let out = crate::out(data, "data")?;
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(b.span().0.cast_const()) };
        Ok(())
    })
}

/// The buffer's bytes, to read and write, into `*data` (valid until `zcio_buffer_free`).
///
/// # Safety
///
/// `buffer` is NULL or a `zcio_buffer *` not freed; `data` points to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_buffer_data_mut(
    buffer: *mut zcio_buffer,
    data: *mut *mut u8,
) -> zcio_status {
    guard("zcio_buffer_data_mut", || {
        // SAFETY: the caller frees `buffer` only when no call on it runs.
        let b = unsafe { handle::get(buffer, "buffer")? };
        let out = crate::out(data, "data")?;
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(b.span().0) };
        Ok(())
    })
}

/// The buffer's length in bytes, into `*len`.
///
/// # Safety
///
/// `buffer` is NULL or a `zcio_buffer *` not freed; `len` points to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_buffer_len(
    buffer: *const zcio_buffer,
    len: *mut usize,
) -> zcio_status {
    guard("zcio_buffer_len", || {
        // SAFETY: the caller frees `buffer` only when no call on it runs.
        let b = unsafe { handle::get(buffer, "buffer")? };
        let out = crate::out(len, "len")?;
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(b.span().1) };
        Ok(())
    })
}

/// Free a buffer (its memory is unmapped: pointers into it are no longer valid). NULL is
/// allowed and does nothing.
///
/// # Safety
///
/// `buffer` is NULL or a `zcio_buffer *`; no other call on it runs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_buffer_free(buffer: *mut zcio_buffer) -> zcio_status {
    guard("zcio_buffer_free", || handle::free(buffer, "buffer"))
}
