//! Handles: boxes given to C as opaque pointers, each registered while it lives, so that a
//! handle freed already (or a pointer that never was one, or one of another type) is refused
//! with `ZCIO_INVALID_ARGUMENT` instead of being used. A freed handle's address may be given
//! to a new handle later; a call through the old pointer then reaches the new handle, never
//! freed memory.

use crate::status::Error;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};

/// A type handed to C as an opaque pointer.
pub(crate) trait Handle {
    /// Its C name.
    const KIND: &'static str;
}

/// The live handles: address → type.
static LIVE: LazyLock<Mutex<HashMap<usize, &'static str>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn live() -> std::sync::MutexGuard<'static, HashMap<usize, &'static str>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Box `v` and register it: the pointer to give to C.
pub(crate) fn into_raw<T: Handle>(v: T) -> *mut T {
    let p = Box::into_raw(Box::new(v));
    live().insert(p as usize, T::KIND);
    p
}

/// Whether `p` (argument `arg`) is a live handle of type `T`; with `remove`, unregister it
/// too (under the same lock, so that two threads freeing one handle free it once).
fn check<T: Handle>(p: *const T, arg: &str, remove: bool) -> Result<(), Error> {
    if p.is_null() {
        return Err(Error::null(arg));
    }
    let mut live = live();
    match live.get(&(p as usize)) {
        Some(k) if *k == T::KIND => {
            if remove {
                live.remove(&(p as usize));
            }
            Ok(())
        }
        Some(k) => Err(Error::invalid(
            arg,
            format!("a {k}, where a {} was expected", T::KIND),
        )),
        None => Err(Error::invalid(
            arg,
            format!("not a live {}: freed already, or not made by zcio", T::KIND),
        )),
    }
}

/// The handle `p` (argument `arg`), checked to be a live one of type `T`.
///
/// # Safety
///
/// No call frees `p` while the reference lives (the C interface's rule: free a handle only
/// when no other call on it runs).
pub(crate) unsafe fn get<'a, T: Handle>(p: *const T, arg: &str) -> Result<&'a T, Error> {
    check(p, arg, false)?;
    // SAFETY: `p` is registered, so it came from `into_raw` for a `T` and has not been freed
    // (freeing unregisters it first); the caller keeps it alive while the reference lives.
    Ok(unsafe { &*p })
}

/// Take the handle `p` (argument `arg`) back out of C's hands: unregistered, its box
/// returned.
pub(crate) fn take<T: Handle>(p: *mut T, arg: &str) -> Result<Box<T>, Error> {
    check(p, arg, true)?;
    // SAFETY: `p` was registered as a `T` until just now, so it came from `Box::into_raw` in
    // `into_raw`; unregistered under the lock, so no other call takes it again.
    Ok(unsafe { Box::from_raw(p) })
}

/// Unregister and drop the handle `p` (argument `arg`); NULL is allowed and does nothing.
pub(crate) fn free<T: Handle>(p: *mut T, arg: &str) -> Result<(), Error> {
    if p.is_null() {
        return Ok(());
    }
    drop(take(p, arg)?);
    Ok(())
}

/// Every handle may be used from any thread (the C interface's promise): each is `Send` and
/// `Sync`, checked here at compile time.
const _: () = {
    const fn threads<T: Send + Sync>() {}
    threads::<crate::zcio_channel>();
    threads::<crate::zcio_listener>();
    threads::<crate::zcio_buffer>();
    threads::<crate::zcio_fbuf_path>();
    threads::<crate::zcio_fbuf>();
    threads::<crate::zcio_fbuf_receiver>();
    threads::<crate::zcio_fbuf_view>();
};
