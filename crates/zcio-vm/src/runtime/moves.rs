//! Moving pages: the retry policy for `EAGAIN`, and filling a page by copy where a page
//! cannot be moved.

use super::{EAGAIN_RETRIES, VmRuntime};
use crate::error::VmError;
use crate::page::page_size;
use crate::uffd::Userfaultfd;

/// Run `op` again while it fails with `EAGAIN` (the address space is changing: an event awaits
/// the handler thread), at most [`EAGAIN_RETRIES`] times. Not for the handler thread, nor with
/// the state lock held: only the handler's next read of its events ends the `EAGAIN`.
pub(super) fn retry_eagain<T, E>(
    errno: impl Fn(&E) -> Option<i32>,
    mut op: impl FnMut() -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    let mut busy = 0;
    loop {
        match op() {
            Err(e) if errno(&e) == Some(libc::EAGAIN) && busy < EAGAIN_RETRIES => {
                busy += 1;
                std::thread::yield_now();
            }
            r => return r,
        }
    }
}

impl VmRuntime {
    /// Put a copy of the page at `src` at `dst`, whether `dst` is populated or empty. An empty
    /// page is filled with `UFFDIO_COPY` (a plain write to it could fault into the handler, which
    /// leaves pages in transition alone: the writer would wait for itself); `EAGAIN` (the
    /// address space is changing, an event awaits the handler thread) is retried.
    ///
    /// # Safety
    /// `dst` is one page the caller owns for writing, in a range registered with this runtime's
    /// userfaultfd; `src` is one readable page.
    pub(super) unsafe fn fill_page(&self, u: &Userfaultfd, dst: usize, src: usize) {
        let ps = page_size();
        // SAFETY: the caller's contract.
        if retry_eagain(VmError::errno, || unsafe { u.copy(dst, src, ps, false) }).is_ok() {
            return;
        }
        // EEXIST: the page is populated, so a plain write cannot fault.
        // SAFETY: the caller's contract; the page is populated.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, ps) };
    }
}
