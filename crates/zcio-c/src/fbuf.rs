//! Fbuf paths (paper 001): an originator offers a path under a name, receivers started on
//! their own join it by that name; the originator writes each message once into an fbuf,
//! memory of the path mapped at the same address in every process, and sends a reference; the
//! receivers read the bytes in place, read-only, and free the fbuf, which goes back to the
//! originator to be reused.

use crate::handle::{self, Handle};
use crate::status::{Error, guard, zcio_status};
use crate::{out, timeout};
use std::ffi::c_char;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use zcio::fbufs::link::{OriginatorEnd, PathName, Received, ReceiverEnd};
use zcio::fbufs::path::{Fbuf, FbufRef, Originator, PathMemory, Variant};
use zcio::fbufs::region::RegionRead;

/// A flag of `zcio_fbuf_path_create`: the originator keeps write access to an fbuf it sent
/// (else the fbuf is read-only for it too until every receiver has freed it). Receivers may
/// then see its bytes change under them: for senders the receivers trust.
pub const ZCIO_FBUF_VOLATILE: u32 = 1;
/// A flag of `zcio_fbuf_path_create`: freed fbufs give their pages back and receivers map
/// each fbuf while they hold it (else the path stays mapped whole in every process, for
/// reuse).
pub const ZCIO_FBUF_UNCACHED: u32 = 2;

/// How long a receive without timeout looks before it sleeps a while between looks.
const SPIN: Duration = Duration::from_micros(50);

/// The originator's side of a path offered under a name (`zcio_fbuf_path_create`). Freed with
/// `zcio_fbuf_path_free`, which closes the path in order once its fbufs are freed too.
pub struct zcio_fbuf_path {
    inner: Arc<Mutex<Origin>>,
}

/// What an originator holds.
struct Origin {
    end: OriginatorEnd,
    name: PathName,
    /// Receivers accepted (every send goes to all of them).
    receivers: usize,
}

impl Handle for zcio_fbuf_path {
    const KIND: &'static str = "zcio_fbuf_path";
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An fbuf the originator allocated and has not sent (`zcio_fbuf_alloc`): its bytes are the
/// originator's to write. Sent by `zcio_fbuf_send`, or given back by `zcio_fbuf_free`.
pub struct zcio_fbuf {
    path: Arc<Mutex<Origin>>,
    fbuf: Fbuf,
}

impl Handle for zcio_fbuf {
    const KIND: &'static str = "zcio_fbuf";
}

/// A receiver's end of a path joined by name (`zcio_fbuf_join`). Freed with
/// `zcio_fbuf_receiver_free`.
pub struct zcio_fbuf_receiver {
    inner: Arc<Mutex<ReceiverEnd>>,
}

impl Handle for zcio_fbuf_receiver {
    const KIND: &'static str = "zcio_fbuf_receiver";
}

/// An fbuf received (`zcio_fbuf_recv`): its bytes read in place, read-only. Freed with
/// `zcio_fbuf_view_free`, which sends it back to the originator.
pub struct zcio_fbuf_view {
    rx: Arc<Mutex<ReceiverEnd>>,
    r: FbufRef,
}

impl Handle for zcio_fbuf_view {
    const KIND: &'static str = "zcio_fbuf_view";
}

/// Offer a new path under `name` (1 to 100 bytes; this user's processes may join): at most
/// `chunks` chunks of `chunk_bytes` each (rounded up to pages), each made as the allocator
/// first needs it; `flags` 0 or `ZCIO_FBUF_VOLATILE` and `ZCIO_FBUF_UNCACHED` or-ed. The
/// path goes into `*path`; receivers join with `zcio_fbuf_join` and are taken in with
/// `zcio_fbuf_path_accept`.
///
/// # Safety
///
/// `name` is a NUL-terminated string; `path` points to a writable `zcio_fbuf_path *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_fbuf_path_create(
    name: *const c_char,
    chunk_bytes: usize,
    chunks: usize,
    flags: u32,
    path: *mut *mut zcio_fbuf_path,
) -> zcio_status {
    guard("zcio_fbuf_path_create", || {
        // SAFETY: the caller's promise.
        let name = unsafe { crate::name(name, "name")? };
        let out = out(path, "path")?;
        if chunk_bytes == 0 || chunks == 0 {
            return Err(Error::invalid(
                "chunk_bytes, chunks",
                format!("{chunks} chunks of {chunk_bytes} bytes: a path holds one byte at least"),
            ));
        }
        if flags & !(ZCIO_FBUF_VOLATILE | ZCIO_FBUF_UNCACHED) != 0 {
            return Err(Error::invalid(
                "flags",
                format!("{flags:#x}: only ZCIO_FBUF_VOLATILE (1) and ZCIO_FBUF_UNCACHED (2)"),
            ));
        }
        let variant = Variant {
            cached: flags & ZCIO_FBUF_UNCACHED == 0,
            volatile: flags & ZCIO_FBUF_VOLATILE != 0,
        };
        let named = PathName::bind(name)?;
        let memory = PathMemory::create(chunk_bytes, chunks, variant)?;
        let end = OriginatorEnd::new(Originator::new(memory.info())?);
        let h = handle::into_raw(zcio_fbuf_path {
            inner: Arc::new(Mutex::new(Origin {
                end,
                name: named,
                receivers: 0,
            })),
        });
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(h) };
        Ok(())
    })
}

/// Wait up to `timeout_ms` for the next receiver to join, and offer it the path; `*receivers`
/// (optional: NULL is allowed) gets the number of receivers taken in so far. Every later send
/// goes to all of them.
///
/// # Safety
///
/// `path` is NULL or a `zcio_fbuf_path *` not freed; `receivers` is NULL or points to a
/// writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_fbuf_path_accept(
    path: *mut zcio_fbuf_path,
    timeout_ms: i64,
    receivers: *mut usize,
) -> zcio_status {
    guard("zcio_fbuf_path_accept", || {
        // SAFETY: the caller frees `path` only when no call on it runs.
        let p = unsafe { handle::get(path, "path")? };
        let mut o = lock(&p.inner);
        let o = &mut *o;
        o.name.accept(&mut o.end, timeout(timeout_ms))?;
        o.receivers += 1;
        if !receivers.is_null() {
            // SAFETY: not NULL, and writable by the caller's promise.
            unsafe { receivers.write(o.receivers) };
        }
        Ok(())
    })
}

/// A new fbuf of `len` bytes, into `*fbuf`: the most recently freed one of its size where one
/// is free, else fresh space of the path; while the path is full, the call waits for the
/// receivers to free fbufs (`ZCIO_PEER_GONE` where none is left to). Write its bytes through
/// `zcio_fbuf_data`.
///
/// # Safety
///
/// `path` is NULL or a `zcio_fbuf_path *` not freed; `fbuf` points to a writable
/// `zcio_fbuf *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_fbuf_alloc(
    path: *mut zcio_fbuf_path,
    len: usize,
    fbuf: *mut *mut zcio_fbuf,
) -> zcio_status {
    guard("zcio_fbuf_alloc", || {
        // SAFETY: the caller frees `path` only when no call on it runs.
        let p = unsafe { handle::get(path, "path")? };
        let out = out(fbuf, "fbuf")?;
        if len == 0 {
            return Err(Error::invalid(
                "len",
                "0 bytes (an fbuf holds one byte at least)",
            ));
        }
        let f = lock(&p.inner).end.alloc_waiting(len)?;
        let h = handle::into_raw(zcio_fbuf {
            path: p.inner.clone(),
            fbuf: f,
        });
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(h) };
        Ok(())
    })
}

/// The fbuf's bytes, to write, into `*data` (`zcio_fbuf_len` of them; an fbuf made fresh
/// reads as zeros, a reused one holds what it last carried). Valid until the fbuf is sent or
/// freed.
///
/// # Safety
///
/// `fbuf` is NULL or a `zcio_fbuf *` not sent nor freed; `data` points to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_fbuf_data(fbuf: *mut zcio_fbuf, data: *mut *mut u8) -> zcio_status {
    guard("zcio_fbuf_data", || {
        // SAFETY: the caller frees `fbuf` only when no call on it runs.
        let f = unsafe { handle::get(fbuf, "fbuf")? };
        let out = out(data, "data")?;
        let o = lock(&f.path);
        // The words are the path's mapping, writable in this process while the fbuf is
        // unsent; they stay where they are while the path lives, which the handle keeps.
        let p = o
            .end
            .originator
            .fbuf_words(&f.fbuf)
            .as_ptr()
            .cast::<u8>()
            .cast_mut();
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(p) };
        Ok(())
    })
}

/// The fbuf's length in bytes, into `*len`.
///
/// # Safety
///
/// `fbuf` is NULL or a `zcio_fbuf *` not sent nor freed; `len` points to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_fbuf_len(fbuf: *const zcio_fbuf, len: *mut usize) -> zcio_status {
    guard("zcio_fbuf_len", || {
        // SAFETY: the caller frees `fbuf` only when no call on it runs.
        let f = unsafe { handle::get(fbuf, "fbuf")? };
        let out = out(len, "len")?;
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(f.fbuf.len() as usize) };
        Ok(())
    })
}

/// Send `*fbuf` to every receiver taken in, and set `*fbuf` to NULL: the fbuf is the path's
/// from then on (on a path that is not volatile, it is read-only here until every receiver
/// has freed it), whether the send succeeds or fails past the checks of its arguments. Where
/// no receiver has been taken in yet, the call fails with `ZCIO_INVALID_ARGUMENT` and leaves
/// `*fbuf` the caller's.
///
/// # Safety
///
/// `fbuf` points to a `zcio_fbuf *` that is NULL or not sent nor freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_fbuf_send(fbuf: *mut *mut zcio_fbuf) -> zcio_status {
    guard("zcio_fbuf_send", || {
        let slot = out(fbuf, "fbuf")?;
        // SAFETY: `slot` is not NULL and points to a `zcio_fbuf *` (the caller's promise).
        let h = unsafe { slot.read() };
        // SAFETY: the caller frees the fbuf only when no call on it runs.
        let f = unsafe { handle::get(h, "*fbuf")? };
        let receivers = lock(&f.path).receivers;
        if receivers == 0 {
            return Err(Error::invalid(
                "fbuf",
                "its path has no receiver yet (zcio_fbuf_path_accept)",
            ));
        }
        let f = handle::take(h, "*fbuf")?;
        // SAFETY: as above; the fbuf is taken, so the caller's pointer goes.
        unsafe { slot.write(std::ptr::null_mut()) };
        let to: Vec<usize> = (0..receivers).collect();
        lock(&f.path).end.send(f.fbuf, &to)?;
        Ok(())
    })
}

/// Give back an fbuf never sent (to the path's free list). NULL is allowed.
///
/// # Safety
///
/// `fbuf` is NULL or a `zcio_fbuf *` not sent; no other call on it runs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_fbuf_free(fbuf: *mut zcio_fbuf) -> zcio_status {
    guard("zcio_fbuf_free", || {
        if fbuf.is_null() {
            return Ok(());
        }
        let f = handle::take(fbuf, "fbuf")?;
        lock(&f.path).end.originator.free(f.fbuf)?;
        Ok(())
    })
}

/// Wait up to `timeout_ms` until every fbuf sent has come back from every receiver
/// (`ZCIO_PEER_GONE` where a receiver went without freeing what it held).
///
/// # Safety
///
/// `path` is NULL or a `zcio_fbuf_path *` not freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_fbuf_path_wait_all(
    path: *mut zcio_fbuf_path,
    timeout_ms: i64,
) -> zcio_status {
    guard("zcio_fbuf_path_wait_all", || {
        // SAFETY: the caller frees `path` only when no call on it runs.
        let p = unsafe { handle::get(path, "path")? };
        let deadline = timeout(timeout_ms).map(|t| Instant::now() + t);
        let mut o = lock(&p.inner);
        let mut naps = 0u32;
        loop {
            if o.end.originator.outstanding() == 0 {
                return Ok(());
            }
            if o.end.receivers_alive() == 0 {
                return Err(Error::new(
                    zcio_status::ZCIO_PEER_GONE,
                    format!(
                        "{} fbufs are out and no receiver is left to free them",
                        o.end.originator.outstanding()
                    ),
                ));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::new(
                    zcio_status::ZCIO_TIMED_OUT,
                    format!(
                        "timed out after {timeout_ms} ms with {} fbufs still out",
                        o.end.originator.outstanding()
                    ),
                ));
            }
            if o.end.poll(false)? == 0 {
                nap(&mut naps);
            }
        }
    })
}

/// Sleep a little longer each time, up to a millisecond.
fn nap(naps: &mut u32) {
    *naps = naps.saturating_add(1);
    if *naps > 20 {
        std::thread::sleep(Duration::from_micros(u64::from(*naps).min(1000)));
    } else {
        std::thread::yield_now();
    }
}

/// Close the path in order and free its handle: every receiver gets the end of the path once
/// it has taken what was sent (`ZCIO_CLOSED`), and the name is free again. Fbufs still
/// allocated keep the path until they are sent or freed. NULL is allowed.
///
/// # Safety
///
/// `path` is NULL or a `zcio_fbuf_path *`; no other call on it runs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_fbuf_path_free(path: *mut zcio_fbuf_path) -> zcio_status {
    guard("zcio_fbuf_path_free", || {
        if path.is_null() {
            return Ok(());
        }
        let p = handle::take(path, "path")?;
        let closed = lock(&p.inner).end.close();
        drop(p);
        Ok(closed?)
    })
}

/// Join the path offered under `name`, waiting up to `timeout_ms` for it to be offered; the
/// receiver's end goes into `*receiver`.
///
/// # Safety
///
/// `name` is a NUL-terminated string; `receiver` points to a writable `zcio_fbuf_receiver *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_fbuf_join(
    name: *const c_char,
    timeout_ms: i64,
    receiver: *mut *mut zcio_fbuf_receiver,
) -> zcio_status {
    guard("zcio_fbuf_join", || {
        // SAFETY: the caller's promise.
        let name = unsafe { crate::name(name, "name")? };
        let out = out(receiver, "receiver")?;
        let t = timeout(timeout_ms).unwrap_or(Duration::from_secs(10 * 365 * 24 * 3600));
        let rx = ReceiverEnd::join(name, t)?;
        let h = handle::into_raw(zcio_fbuf_receiver {
            inner: Arc::new(Mutex::new(rx)),
        });
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(h) };
        Ok(())
    })
}

/// Receive the next fbuf, waiting up to `timeout_ms` for it, into `*view`: its bytes read in
/// place (`zcio_fbuf_view_data`), read-only, until `zcio_fbuf_view_free`. `ZCIO_CLOSED` when
/// the originator closed the path in order and everything sent has been taken;
/// `ZCIO_PEER_GONE` when it went without closing it.
///
/// # Safety
///
/// `receiver` is NULL or a `zcio_fbuf_receiver *` not freed; `view` points to a writable
/// `zcio_fbuf_view *`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_fbuf_recv(
    receiver: *mut zcio_fbuf_receiver,
    timeout_ms: i64,
    view: *mut *mut zcio_fbuf_view,
) -> zcio_status {
    guard("zcio_fbuf_recv", || {
        // SAFETY: the caller frees `receiver` only when no call on it runs.
        let h = unsafe { handle::get(receiver, "receiver")? };
        let out = out(view, "view")?;
        let deadline = timeout(timeout_ms).map(|t| Instant::now() + t);
        let mut rx = lock(&h.inner);
        let start = Instant::now();
        let mut naps = 0u32;
        let got = loop {
            let got = if deadline.is_none() {
                rx.recv_any()?
            } else {
                rx.try_recv()?
            };
            if got != Received::NotYet {
                break got;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                rx.flush()?;
                return Err(Error::new(
                    zcio_status::ZCIO_TIMED_OUT,
                    format!("timed out after {timeout_ms} ms waiting for an fbuf"),
                ));
            }
            if start.elapsed() > SPIN {
                // About to sleep: the notices held back go to the originator first.
                rx.flush()?;
                nap(&mut naps);
            }
        };
        let r = match got {
            Received::Fbuf(r) => r,
            Received::Msg(m) => {
                rx.free_msg(m)?;
                return Err(Error::new(
                    zcio_status::ZCIO_UNSUPPORTED,
                    format!(
                        "an aggregate message ({} bytes) came, which the C interface does not \
                         walk; it was freed",
                        m.len
                    ),
                ));
            }
            Received::Closed | Received::NotYet => {
                return Err(Error::new(
                    zcio_status::ZCIO_CLOSED,
                    "the originator closed the path: nothing more comes",
                ));
            }
        };
        if !rx.receiver.readable(r.addr, r.len) {
            rx.free(r)?;
            return Err(Error::new(
                zcio_status::ZCIO_PROTOCOL,
                format!(
                    "an fbuf at {:#x} ({} bytes) that this process cannot read; it was freed",
                    r.addr, r.len
                ),
            ));
        }
        drop(rx);
        let v = handle::into_raw(zcio_fbuf_view {
            rx: h.inner.clone(),
            r,
        });
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(v) };
        Ok(())
    })
}

/// The fbuf's bytes, read-only, into `*data`: valid until `zcio_fbuf_view_free`. On a
/// volatile path the originator may still change them.
///
/// # Safety
///
/// `view` is NULL or a `zcio_fbuf_view *` not freed; `data` points to a writable pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_fbuf_view_data(
    view: *const zcio_fbuf_view,
    data: *mut *const u8,
) -> zcio_status {
    guard("zcio_fbuf_view_data", || {
        // SAFETY: the caller frees `view` only when no call on it runs.
        let v = unsafe { handle::get(view, "view")? };
        let out = out(data, "data")?;
        // SAFETY: `out` is not NULL and writable (the caller's promise). The address is the
        // fbuf's, mapped read-only in this process (checked when it was received) while the
        // view holds it.
        unsafe { out.write(v.r.addr as usize as *const u8) };
        Ok(())
    })
}

/// The fbuf's length in bytes, into `*len`.
///
/// # Safety
///
/// `view` is NULL or a `zcio_fbuf_view *` not freed; `len` points to a writable `size_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_fbuf_view_len(
    view: *const zcio_fbuf_view,
    len: *mut usize,
) -> zcio_status {
    guard("zcio_fbuf_view_len", || {
        // SAFETY: the caller frees `view` only when no call on it runs.
        let v = unsafe { handle::get(view, "view")? };
        let out = out(len, "len")?;
        // SAFETY: `out` is not NULL and writable (the caller's promise).
        unsafe { out.write(v.r.len as usize) };
        Ok(())
    })
}

/// Free a received fbuf: its bytes are no longer to be read here, and it goes back to the
/// originator to be reused. NULL is allowed.
///
/// # Safety
///
/// `view` is NULL or a `zcio_fbuf_view *`; no other call on it runs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_fbuf_view_free(view: *mut zcio_fbuf_view) -> zcio_status {
    guard("zcio_fbuf_view_free", || {
        if view.is_null() {
            return Ok(());
        }
        let v = handle::take(view, "view")?;
        lock(&v.rx).free(v.r)?;
        Ok(())
    })
}

/// Leave the path: the notices of fbufs freed go to the originator, then the handle is freed
/// (views still held keep the path mapped until they are freed). NULL is allowed.
///
/// # Safety
///
/// `receiver` is NULL or a `zcio_fbuf_receiver *`; no other call on it runs.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zcio_fbuf_receiver_free(receiver: *mut zcio_fbuf_receiver) -> zcio_status {
    guard("zcio_fbuf_receiver_free", || {
        if receiver.is_null() {
            return Ok(());
        }
        let h = handle::take(receiver, "receiver")?;
        let flushed = lock(&h.inner).flush();
        drop(h);
        Ok(flushed?)
    })
}
