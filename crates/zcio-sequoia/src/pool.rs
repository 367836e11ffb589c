//! Containers made ahead: a [`Pool`] prepares fresh memory files of one size on a thread of
//! its own, their pages allocated in bulk ([`zcio_vm::sealed::BlankFile`]), so that a sealed
//! container's allocation is off the path of the data that fills it.
//!
//! A sealed container cannot be filled twice: its write seal is for good. A pool therefore
//! never reuses a file: each one it hands out is fresh (zeroed, never mapped, its descriptor
//! never out of the pool's hands), is filled once by the domain that takes it
//! ([`crate::container::Domain::alloc_pooled`], [`crate::container::Domain::alloc_filled`]),
//! sealed, and freed by its last owner. What the pool saves is the per-page cost of faulting
//! a file's pages in one at a time, and the time of preparing them, moved to its thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;
use zcio_vm::VmError;
use zcio_vm::sealed::BlankFile;

/// Fresh memory files of one size, made ahead by a thread of the pool's own.
///
/// # Examples
///
/// ```
/// use std::os::fd::AsFd;
/// use std::os::unix::net::UnixStream;
/// use zcio_sequoia::container::Domain;
/// use zcio_sequoia::pool::Pool;
///
/// let pool = Pool::new(10_000, 4)?;
/// let (a_end, b_end) = UnixStream::pair()?;
/// let (mut a, mut b) = (Domain::new(), Domain::new());
/// let id = a.alloc_filled(&pool, &[7u8; 10_000])?; // a copy, sealed at once
/// a.write(a_end.as_fd(), id)?;
/// let got = b.read(b_end.as_fd(), 0, true)?;
/// assert!(b.map_read(got)?.iter().all(|&x| x == 7));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Pool {
    len: usize,
    ready: Option<Receiver<Result<BlankFile, VmError>>>,
    maker: Option<JoinHandle<()>>,
    /// CPU time the maker thread has spent, in ns.
    cpu: Arc<AtomicU64>,
}

zcio_vm::debug_summary!(Pool, |s| len: s.len);

impl Pool {
    /// A pool of files of `len` bytes (rounded up to pages), keeping `depth` (at least one)
    /// ready.
    pub fn new(len: usize, depth: usize) -> Result<Pool, VmError> {
        // The first file is made here, so that a length the system refuses is said now.
        let first = BlankFile::new("zcio-container", len)?;
        let len = first.len();
        let (tx, rx) = sync_channel(depth.max(1));
        tx.send(Ok(first)).expect("the receiver is here");
        let cpu = Arc::new(AtomicU64::new(0));
        let spent = cpu.clone();
        let maker = std::thread::Builder::new()
            .name("zcio-container-pool".into())
            .spawn(move || make(&tx, len, &spent))
            .map_err(|e| VmError::sys("spawn(container pool)", e))?;
        Ok(Pool {
            len,
            ready: Some(rx),
            maker: Some(maker),
            cpu,
        })
    }

    /// The length of its files (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether its files are empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// CPU time its thread has spent making files (user and system), in nanoseconds: the
    /// cost moved off the path, for whoever accounts for it.
    pub fn maker_cpu_ns(&self) -> u64 {
        self.cpu.load(Ordering::Relaxed)
    }

    /// The next fresh file, waiting for it if none is ready.
    pub fn take(&self) -> Result<BlankFile, VmError> {
        match self.ready.as_ref().expect("taken only in drop").recv() {
            Ok(made) => made,
            Err(_) => Err(VmError::Misuse {
                what: "a container pool whose maker thread is gone",
            }),
        }
    }
}

/// The maker thread: files until the pool is dropped (its channel closed); a failure is
/// handed on, and the next file tried after it.
fn make(tx: &SyncSender<Result<BlankFile, VmError>>, len: usize, cpu: &AtomicU64) {
    let spent = || {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
    };
    loop {
        let made = BlankFile::new("zcio-container", len);
        cpu.store(spent(), Ordering::Relaxed);
        if tx.send(made).is_err() {
            return;
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        // The channel closes first, so the maker's next send fails and it ends.
        drop(self.ready.take());
        if let Some(t) = self.maker.take() {
            let _ = t.join();
        }
    }
}
