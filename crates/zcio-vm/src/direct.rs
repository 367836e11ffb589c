//! Direct transfers through io_uring into buffers the ring owns while the kernel uses them: the
//! data path of paper 004's user-level I/O.
//!
//! - [`BufferRegion`]: one anonymous mapping cut into equal, page-aligned buffers ([`IoBuf`]),
//!   handed out one owner at a time. A buffer given to the ring is held by the ring until its
//!   request completes, so the application cannot reach, reuse or free it meanwhile; the
//!   region's mapping lives as long as any of its buffers.
//! - [`DirectRing`]: an io_uring whose requests name files by their slot in the ring's
//!   registered file table (the request's capability: a file stays open in the kernel while a
//!   request on it is in flight, whatever the application closes) and read or write one buffer.
//!   - *Initiation*: with a polling kernel thread (`SQPOLL`) a request is initiated by writing
//!     its entry into the shared submission ring, with no system call while the thread is
//!     awake; without it, each [`DirectRing::submit`] is one `io_uring_enter`. A full ring is
//!     an answer ([`PushError::Full`]), never a wait.
//!   - *Translation*: with the region registered ahead (`IORING_REGISTER_BUFFERS`: its pages
//!     pinned and translated once, the device-TLB-hit case) requests are `READ_FIXED` /
//!     `WRITE_FIXED`; otherwise plain `READ` / `WRITE`, whose pages the kernel looks up and pins
//!     per request (the kernel-handled translation).
//!   - Completions are reaped from the shared completion ring without a system call
//!     ([`DirectRing::reap`]), or waited for with one ([`DirectRing::wait`]).
//!
//! Dropping the ring waits for every request still in flight before the buffers go back.

use crate::error::{Result, VmError};
use crate::mapping::{MapOptions, Mapping};
use crate::page::page_size;
use io_uring::{IoUring, opcode, squeue, types};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex};

struct Region {
    map: Mapping,
    buf_size: usize,
    count: usize,
    free: Mutex<Vec<usize>>,
}

// SAFETY: the mapping is only reached through `IoBuf`s, each the sole owner of its part (the
// free list hands an index to one owner at a time); the free list is behind a mutex.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

/// Equal page-aligned buffers cut from one mapping.
#[derive(Clone)]
pub struct BufferRegion(Arc<Region>);

crate::debug_summary!(BufferRegion, |s|
    buffers: s.0.count, buf_size: s.0.buf_size, available: s.available());

impl BufferRegion {
    /// `count` buffers of `buf_size` bytes (a positive multiple of the page size).
    pub fn new(count: usize, buf_size: usize) -> Result<BufferRegion> {
        if count == 0 || buf_size == 0 || buf_size % page_size() != 0 {
            return Err(VmError::Misuse {
                what: "a buffer region needs at least one buffer of a positive multiple of the page size",
            });
        }
        let len = count.checked_mul(buf_size).ok_or(VmError::TooLarge {
            what: "a buffer region",
            value: usize::MAX,
            limit: crate::mapping::MAX_MAPPING,
        })?;
        let map = Mapping::anonymous(len, MapOptions::default())?;
        Ok(BufferRegion(Arc::new(Region {
            map,
            buf_size,
            count,
            free: Mutex::new((0..count).rev().collect()),
        })))
    }

    /// A free buffer, if any.
    pub fn take(&self) -> Option<IoBuf> {
        let index = self.0.free.lock().expect("free list").pop()?;
        Some(IoBuf {
            region: self.0.clone(),
            index,
        })
    }

    /// Buffers free.
    pub fn available(&self) -> usize {
        self.0.free.lock().expect("free list").len()
    }

    /// Bytes per buffer.
    pub fn buf_size(&self) -> usize {
        self.0.buf_size
    }

    /// Buffers in all.
    pub fn count(&self) -> usize {
        self.0.count
    }

    /// Whether `buf` is one of this region's.
    pub fn holds(&self, buf: &IoBuf) -> bool {
        Arc::ptr_eq(&self.0, &buf.region)
    }
}

/// One buffer of a [`BufferRegion`], owned: its bytes are reachable only through it, and it
/// goes back to the region when dropped.
pub struct IoBuf {
    region: Arc<Region>,
    index: usize,
}

crate::debug_summary!(IoBuf, |s| addr: format_args!("{:#x}", s.addr()), len: s.len());

impl IoBuf {
    /// Its address.
    pub fn addr(&self) -> usize {
        self.region.map.addr() + self.index * self.region.buf_size
    }

    /// Its size.
    pub fn len(&self) -> usize {
        self.region.buf_size
    }

    /// Whether it is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the buffer lies inside the region's mapping, alive while `self.region` is;
        // this handle is the only one for its index (the free list hands an index out once),
        // and while a request uses it the ring holds the handle, so nobody reaches the bytes.
        unsafe { std::slice::from_raw_parts(self.addr() as *const u8, self.len()) }
    }

    /// Its bytes, to change them.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `self` is borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.addr() as *mut u8, self.len()) }
    }
}

impl Drop for IoBuf {
    fn drop(&mut self) {
        if let Ok(mut f) = self.region.free.lock() {
            f.push(self.index);
        }
    }
}

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Read from the file into the buffer.
    Read,
    /// Write the buffer to the file.
    Write,
}

/// Why a request was not queued (its buffer comes back with it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushError {
    /// The submission ring is full, or as many requests are in flight as the completion ring
    /// holds: submit and reap, then try again.
    Full,
    /// No file in that slot of the ring's table.
    NoFile(u32),
    /// A length of zero, or more than the buffer holds.
    BadLength(usize),
    /// A buffer of another region than the one the ring registered (fixed transfers only).
    ForeignBuffer,
}

impl std::fmt::Display for PushError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PushError::Full => write!(f, "the ring is full"),
            PushError::NoFile(i) => write!(f, "no file in slot {i} of the ring's table"),
            PushError::BadLength(n) => {
                write!(f, "a transfer of {n} bytes (at least 1, within the buffer)")
            }
            PushError::ForeignBuffer => {
                write!(f, "a buffer outside the region registered with the ring")
            }
        }
    }
}

/// A completed request.
#[derive(Debug)]
pub struct Done {
    /// The tag it was pushed with.
    pub tag: u64,
    /// Bytes transferred, or a negative errno.
    pub result: i32,
    /// Its buffer, back.
    pub buf: IoBuf,
}

/// Counters of a ring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingStats {
    /// Requests queued.
    pub pushed: u64,
    /// Calls that entered the kernel to submit (with a polling thread: only to wake it).
    pub submit_enters: u64,
    /// Calls that entered the kernel to wait for completions.
    pub wait_enters: u64,
    /// Requests completed.
    pub completed: u64,
}

/// Files a ring's table holds.
pub const RING_FILES: u32 = 64;

/// An io_uring for direct transfers: see the module's documentation.
pub struct DirectRing {
    uring: IoUring,
    sqpoll: bool,
    fixed: Option<Arc<Region>>,
    files: Vec<Option<OwnedFd>>,
    in_flight: Vec<Option<(u64, IoBuf)>>,
    free_slots: Vec<usize>,
    cq_capacity: usize,
    stats: RingStats,
}

crate::debug_summary!(DirectRing, |s|
    sqpoll: s.sqpoll, fixed: s.fixed.is_some(), in_flight: s.in_flight(), stats: s.stats);

impl DirectRing {
    /// A ring of `entries` submissions; with a polling kernel thread that sleeps after
    /// `sqpoll_idle_ms` idle milliseconds if `Some`; with `fixed` registered ahead if given.
    /// A kernel that refuses any of it says so in the error.
    pub fn new(
        entries: u32,
        sqpoll_idle_ms: Option<u32>,
        fixed: Option<&BufferRegion>,
    ) -> Result<DirectRing> {
        let mut b = IoUring::builder();
        if let Some(idle) = sqpoll_idle_ms {
            b.setup_sqpoll(idle);
        }
        let uring = b
            .build(entries.max(1))
            .map_err(|e| VmError::sys("io_uring_setup", e))?;
        uring
            .submitter()
            .register_files_sparse(RING_FILES)
            .map_err(|e| VmError::sys("io_uring_register(files)", e))?;
        if let Some(r) = fixed {
            let iov = libc::iovec {
                iov_base: r.0.map.addr() as *mut libc::c_void,
                iov_len: r.0.map.len(),
            };
            // SAFETY: the iovec covers the region's mapping, which the ring keeps alive (it
            // holds the region's `Arc` in `fixed`) until it is dropped, and the ring is
            // dropped (unregistering everything) before that `Arc`.
            unsafe { uring.submitter().register_buffers(&[iov]) }
                .map_err(|e| VmError::sys("io_uring_register(buffers)", e))?;
        }
        let cq_capacity = uring.params().cq_entries() as usize;
        Ok(DirectRing {
            uring,
            sqpoll: sqpoll_idle_ms.is_some(),
            fixed: fixed.map(|r| r.0.clone()),
            files: (0..RING_FILES).map(|_| None).collect(),
            in_flight: Vec::new(),
            free_slots: Vec::new(),
            cq_capacity,
            stats: RingStats::default(),
        })
    }

    /// Have the kernel signal the eventfd `fd` each time it posts a completion
    /// (`IORING_REGISTER_EVENTFD`): one per ring.
    pub fn register_eventfd(&mut self, fd: BorrowedFd<'_>) -> Result<()> {
        self.uring
            .submitter()
            .register_eventfd(fd.as_raw_fd())
            .map_err(|e| VmError::sys("io_uring_register(eventfd)", e))
    }

    /// Whether a polling kernel thread initiates requests.
    pub fn polled(&self) -> bool {
        self.sqpoll
    }

    /// Whether transfers use the registered region.
    pub fn fixed(&self) -> bool {
        self.fixed.is_some()
    }

    /// Put `fd` in the ring's file table: its slot.
    pub fn register_file(&mut self, fd: OwnedFd) -> Result<u32> {
        let slot = self
            .files
            .iter()
            .position(Option::is_none)
            .ok_or(VmError::Misuse {
                what: "a ring's file table is full (64 files)",
            })?;
        self.uring
            .submitter()
            .register_files_update(slot as u32, &[fd.as_raw_fd()])
            .map_err(|e| VmError::sys("io_uring_register(files update)", e))?;
        self.files[slot] = Some(fd);
        Ok(slot as u32)
    }

    /// Take the file out of slot `slot` (requests in flight on it finish on it).
    pub fn unregister_file(&mut self, slot: u32) -> Result<()> {
        if self.files.get(slot as usize).is_none_or(Option::is_none) {
            return Err(VmError::Misuse {
                what: "no file in that slot of the ring's table",
            });
        }
        self.uring
            .submitter()
            .register_files_update(slot, &[-1])
            .map_err(|e| VmError::sys("io_uring_register(files update)", e))?;
        self.files[slot as usize] = None;
        Ok(())
    }

    /// Requests in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.len() - self.free_slots.len()
    }

    /// Counters.
    pub fn stats(&self) -> RingStats {
        self.stats
    }

    /// Queue `op` of `len` bytes at `offset` of the file in `slot`, on the bytes of `buf` from
    /// `at` (the ring holds the buffer until the request completes); `tag` comes back with the
    /// completion. Not yet submitted: see [`DirectRing::submit`].
    #[allow(clippy::too_many_arguments)]
    pub fn try_push(
        &mut self,
        op: Op,
        slot: u32,
        offset: u64,
        buf: IoBuf,
        at: usize,
        len: usize,
        tag: u64,
    ) -> std::result::Result<(), (PushError, IoBuf)> {
        if self.files.get(slot as usize).is_none_or(Option::is_none) {
            return Err((PushError::NoFile(slot), buf));
        }
        if len == 0 || at.checked_add(len).is_none_or(|e| e > buf.len()) || len > u32::MAX as usize
        {
            return Err((PushError::BadLength(len), buf));
        }
        if let Some(r) = &self.fixed
            && !Arc::ptr_eq(r, &buf.region)
        {
            return Err((PushError::ForeignBuffer, buf));
        }
        if self.in_flight() >= self.cq_capacity || self.uring.submission().is_full() {
            return Err((PushError::Full, buf));
        }
        let index = match self.free_slots.pop() {
            Some(i) => i,
            None => {
                self.in_flight.push(None);
                self.in_flight.len() - 1
            }
        };
        let ptr = (buf.addr() + at) as *mut u8;
        let file = types::Fixed(slot);
        let entry = match (op, self.fixed.is_some()) {
            (Op::Read, true) => opcode::ReadFixed::new(file, ptr, len as u32, 0)
                .offset(offset)
                .build(),
            (Op::Read, false) => opcode::Read::new(file, ptr, len as u32)
                .offset(offset)
                .build(),
            (Op::Write, true) => opcode::WriteFixed::new(file, ptr, len as u32, 0)
                .offset(offset)
                .build(),
            (Op::Write, false) => opcode::Write::new(file, ptr, len as u32)
                .offset(offset)
                .build(),
        }
        .user_data(index as u64);
        let entry: squeue::Entry = entry;
        // SAFETY: the entry names `len` bytes of `buf` from `at` (inside it: checked above),
        // and the ring now holds the buffer in
        // `in_flight[index]` until the completion for `index` is reaped (or, on drop, waited
        // for); the file is a slot of the registered table, which the kernel keeps open for
        // the request. With fixed transfers the buffer lies in the registered region (checked
        // above).
        let pushed = unsafe { self.uring.submission().push(&entry) };
        if pushed.is_err() {
            self.free_slots.push(index);
            return Err((PushError::Full, buf));
        }
        self.in_flight[index] = Some((tag, buf));
        self.stats.pushed += 1;
        Ok(())
    }

    /// Make queued requests visible to the kernel: with a polling thread that is awake, no
    /// system call (whether one was made is the answer); otherwise one `io_uring_enter`.
    pub fn submit(&mut self) -> Result<bool> {
        if self.sqpoll {
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            let mut sq = self.uring.submission();
            sq.sync();
            if !sq.need_wakeup() && !sq.cq_overflow() && !sq.taskrun() {
                return Ok(false);
            }
        }
        self.enter(0)?;
        self.stats.submit_enters += 1;
        Ok(true)
    }

    fn enter(&mut self, want: usize) -> Result<()> {
        loop {
            match self.uring.submitter().submit_and_wait(want) {
                Ok(_) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) && want == 0 => return Ok(()),
                Err(e) => return Err(VmError::sys("io_uring_enter", e)),
            }
        }
    }

    /// Completed requests, without a system call: appended to `out`; how many.
    pub fn reap(&mut self, out: &mut Vec<Done>) -> usize {
        let mut n = 0;
        let mut cq = self.uring.completion();
        cq.sync();
        for c in &mut cq {
            let index = c.user_data() as usize;
            let Some((tag, buf)) = self.in_flight.get_mut(index).and_then(Option::take) else {
                continue;
            };
            self.free_slots.push(index);
            out.push(Done {
                tag,
                result: c.result(),
                buf,
            });
            n += 1;
        }
        self.stats.completed += n as u64;
        n
    }

    /// A handle that waits for completions in the kernel without holding the ring, so that
    /// other threads can submit meanwhile (a dup of the ring's descriptor).
    pub fn waiter(&self) -> Result<RingWaiter> {
        // SAFETY: the ring's descriptor is open while `self` lives, and is only duplicated here.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.uring.as_raw_fd()) };
        let fd = rustix::io::fcntl_dupfd_cloexec(fd, 0)
            .map_err(|e| VmError::sys("dup(io_uring)", e.into()))?;
        Ok(RingWaiter { fd })
    }

    /// Wait in the kernel until at least one request completes (or none is in flight).
    pub fn wait(&mut self) -> Result<()> {
        if self.in_flight() == 0 {
            return Ok(());
        }
        self.stats.wait_enters += 1;
        self.enter(1)
    }
}

/// Waits in the kernel for a ring's completions ([`DirectRing::waiter`]).
#[derive(Debug)]
pub struct RingWaiter {
    fd: OwnedFd,
}

impl RingWaiter {
    /// Block until the ring's completion queue holds at least one completion (returning at
    /// once if it does; a signal also ends the wait early).
    pub fn wait(&self) -> Result<()> {
        // SAFETY: io_uring_enter with nothing to submit and no argument pointer: it only
        // waits for a completion on the ring behind this descriptor, which is open.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                self.fd.as_raw_fd(),
                0u32,
                1u32,
                io_uring_getevents(),
                std::ptr::null::<libc::c_void>(),
                0usize,
            )
        };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(VmError::sys("io_uring_enter(wait)", e));
            }
        }
        Ok(())
    }
}

/// `IORING_ENTER_GETEVENTS`.
fn io_uring_getevents() -> u32 {
    1
}

impl Drop for DirectRing {
    fn drop(&mut self) {
        // Every request in flight completes before its buffer goes back.
        let mut done = Vec::new();
        let mut failures = 0;
        while self.in_flight() > 0 && failures < 100 {
            if self.enter(1).is_err() {
                failures += 1;
            }
            self.reap(&mut done);
        }
        if self.in_flight() > 0 {
            // The kernel could not be waited for: never let those pages be reused.
            for (_, buf) in self.in_flight.drain(..).flatten() {
                std::mem::forget(buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(bytes: &[u8]) -> (tempfile::NamedTempFile, OwnedFd) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        f.flush().unwrap();
        let fd: OwnedFd = std::fs::File::open(f.path()).unwrap().into();
        (f, fd)
    }

    #[test]
    fn reads_land_in_owned_buffers_for_every_initiation_and_translation() {
        let ps = page_size();
        let data: Vec<u8> = (0..8 * ps).map(|i| (i * 7 + i / 4096) as u8).collect();
        for (sqpoll, fixed) in [
            (None, false),
            (None, true),
            (Some(50), false),
            (Some(50), true),
        ] {
            let region = BufferRegion::new(4, 2 * ps).unwrap();
            let mut ring = match DirectRing::new(8, sqpoll, fixed.then_some(&region)) {
                Ok(r) => r,
                Err(e) => {
                    crate::skip::skip(
                        crate::skip::Capability::IoUring,
                        &format!("(sqpoll {sqpoll:?}, fixed {fixed}): {e}"),
                    );
                    continue;
                }
            };
            let (_keep, fd) = file(&data);
            let slot = ring.register_file(fd).unwrap();
            for k in 0..4 {
                let buf = region.take().unwrap();
                ring.try_push(
                    Op::Read,
                    slot,
                    (k * 2 * ps) as u64,
                    buf,
                    0,
                    2 * ps,
                    k as u64,
                )
                .unwrap();
            }
            assert_eq!(region.available(), 0, "the ring holds them");
            let entered = ring.submit().unwrap();
            assert_eq!(entered, sqpoll.is_none() || ring.stats().submit_enters > 0);
            let mut done = Vec::new();
            while done.len() < 4 {
                if ring.reap(&mut done) == 0 {
                    ring.wait().unwrap();
                }
            }
            for d in &done {
                let k = d.tag as usize;
                assert_eq!(d.result, (2 * ps) as i32);
                assert!(
                    d.buf.bytes() == &data[k * 2 * ps..(k + 1) * 2 * ps],
                    "request {k}"
                );
            }
            drop(done);
            assert_eq!(region.available(), 4, "every buffer back");
            assert_eq!(ring.in_flight(), 0);
        }
    }

    #[test]
    fn a_full_ring_bad_slots_lengths_and_foreign_buffers_are_answers() {
        let ps = page_size();
        let region = BufferRegion::new(8, ps).unwrap();
        let other = BufferRegion::new(1, ps).unwrap();
        let mut ring = match DirectRing::new(2, None, Some(&region)) {
            Ok(r) => r,
            Err(e) => {
                crate::skip::skip(crate::skip::Capability::IoUring, &e.to_string());
                return;
            }
        };
        let (_keep, fd) = file(&vec![1u8; 8 * ps]);
        let slot = ring.register_file(fd).unwrap();
        let (e, _) = ring
            .try_push(Op::Read, slot + 1, 0, region.take().unwrap(), 0, ps, 0)
            .unwrap_err();
        assert_eq!(e, PushError::NoFile(slot + 1));
        let (e, _) = ring
            .try_push(Op::Read, slot, 0, region.take().unwrap(), 0, ps + 1, 0)
            .unwrap_err();
        assert_eq!(e, PushError::BadLength(ps + 1));
        let (e, _) = ring
            .try_push(Op::Read, slot, 0, other.take().unwrap(), 0, ps, 0)
            .unwrap_err();
        assert_eq!(e, PushError::ForeignBuffer);
        let mut full = None;
        for k in 0..8 {
            match ring.try_push(Op::Read, slot, 0, region.take().unwrap(), 0, ps, k) {
                Ok(()) => {}
                Err((e, _)) => {
                    full = Some((k, e));
                    break;
                }
            }
        }
        let (k, e) = full.expect("a two-entry ring fills");
        assert_eq!(e, PushError::Full);
        assert!(k >= 2, "{k}");
        assert_eq!(ring.stats().pushed, k);
        // Dropping the ring with requests in flight waits for them.
        drop(ring);
        assert_eq!(region.available(), 8);
    }
}
