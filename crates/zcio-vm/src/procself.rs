//! Descriptors of this process's own `/proc/self` files (`maps`, `pagemap`), opened once per
//! process: the queries on them are by address, so one descriptor serves every thread. A
//! descriptor opened before a `fork` still reads the parent's memory (`/proc/self` was resolved
//! when it was opened), so a child opens its own.

use std::os::fd::{BorrowedFd, IntoRawFd};
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// One `/proc/self` file, opened lazily per process and never closed.
pub(crate) struct SelfFile {
    path: &'static str,
    /// One more than the fork generation of the process that opened [`SelfFile::fd`] (0: none
    /// yet, or forgotten): a child sees another generation and opens its own, and no call
    /// asks the kernel for the process id.
    owner: AtomicU64,
    fd: AtomicI32,
}

impl SelfFile {
    pub(crate) const fn new(path: &'static str) -> SelfFile {
        SelfFile {
            path,
            owner: AtomicU64::new(0),
            fd: AtomicI32::new(-1),
        }
    }

    /// This process's descriptor of the file. Threads that find none at once may each open
    /// one; the last stored is used (the others stay open, at most one per such thread).
    pub(crate) fn get(&self) -> std::io::Result<BorrowedFd<'static>> {
        let me = crate::runtime::fork_generation() + 1;
        let fd = if self.owner.load(Ordering::Acquire) == me {
            self.fd.load(Ordering::Relaxed)
        } else {
            let fd = std::fs::File::open(self.path)?.into_raw_fd();
            // The descriptor before the owner: a thread that sees this process's generation sees a
            // descriptor this process opened.
            self.fd.store(fd, Ordering::Relaxed);
            self.owner.store(me, Ordering::Release);
            fd
        };
        // SAFETY: a descriptor this process opened and never closes. A program that closes
        // descriptors it does not own makes the next call on it fail (or reach whatever took
        // the number, which answers these ioctls with an error); callers then `forget` it.
        Ok(unsafe { BorrowedFd::borrow_raw(fd) })
    }

    /// The descriptor stopped answering (closed or replaced behind zcio's back): open a new
    /// one at the next [`SelfFile::get`].
    pub(crate) fn forget(&self) {
        self.owner.store(0, Ordering::Release);
    }
}
