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
//!
//! A pool of files in 2 MiB pages ([`Pool::huge`]) saves again: the kernel's work on a
//! file's pages (allocating them, entering them in its page cache, freeing them) is per page,
//! so one 2 MiB page costs a fraction of the 4 KiB pages of even a 300 KiB file, at the price
//! of the memory the 2 MiB page holds beyond the data. Where the kernel gives no huge page,
//! the files come in 4 KiB pages, and the pool counts which ([`Pool::granules`]).
//!
//! The files of [`Pool::new`] get 4 KiB pages under the machine's shared memory policy
//! `never`, and large folios (pieces of up to 2 MiB that fit in the file, a few for a frame)
//! under `within_size` or `always` ([`zcio_vm::shmem`]): the pages' cost, which dominates a
//! sealed container's, then drops several times, with no memory held beyond the file.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use zcio_vm::VmError;
use zcio_vm::huge::Granule;
use zcio_vm::sealed::BlankFile;

/// The pages of the files a pool handed out: how many in 2 MiB pages and in 4 KiB pages, and
/// why the kernel refused 2 MiB pages the last time it did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Granules {
    /// Files held in 2 MiB pages.
    pub huge: u64,
    /// Files held in 4 KiB pages.
    pub base: u64,
    /// The last refusal of 2 MiB pages (a pool asked for them only).
    pub refused: Option<String>,
}

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
    /// The pages of the files handed out.
    granules: Mutex<Granules>,
}

zcio_vm::debug_summary!(Pool, |s| len: s.len);

impl Pool {
    /// A pool of files of `len` bytes (rounded up to pages), keeping `depth` (at least one)
    /// ready: in 4 KiB pages, or in large folios where the machine's shared memory policy gives
    /// memory files them.
    pub fn new(len: usize, depth: usize) -> Result<Pool, VmError> {
        Pool::start(len, depth, BlankFile::new)
    }

    /// A pool of files of `len` bytes rounded up to whole 2 MiB, in 2 MiB pages where the
    /// kernel gives them ([`BlankFile::new_huge`]), keeping `depth` (at least one) ready.
    pub fn huge(len: usize, depth: usize) -> Result<Pool, VmError> {
        Pool::start(len, depth, BlankFile::new_huge)
    }

    fn start(
        len: usize,
        depth: usize,
        blank: fn(&str, usize) -> Result<BlankFile, VmError>,
    ) -> Result<Pool, VmError> {
        // The first file is made here, so that a length the system refuses is said now.
        let first = blank("zcio-container", len)?;
        let len = first.len();
        let (tx, rx) = sync_channel(depth.max(1));
        tx.send(Ok(first)).expect("the receiver is here");
        let cpu = Arc::new(AtomicU64::new(0));
        let spent = cpu.clone();
        let maker = std::thread::Builder::new()
            .name("zcio-container-pool".into())
            .spawn(move || make(&tx, len, &spent, blank))
            .map_err(|e| VmError::sys("spawn(container pool)", e))?;
        Ok(Pool {
            len,
            ready: Some(rx),
            maker: Some(maker),
            cpu,
            granules: Mutex::new(Granules::default()),
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

    /// The pages of the files it has handed out.
    pub fn granules(&self) -> Granules {
        self.granules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The next fresh file, waiting for it if none is ready.
    pub fn take(&self) -> Result<BlankFile, VmError> {
        let file = match self.ready.as_ref().expect("taken only in drop").recv() {
            Ok(made) => made?,
            Err(_) => {
                return Err(VmError::Misuse {
                    what: "a container pool whose maker thread is gone",
                });
            }
        };
        let mut g = self.granules.lock().unwrap_or_else(|e| e.into_inner());
        match file.granule() {
            Granule::Huge => g.huge += 1,
            _ => g.base += 1,
        }
        if let Some(why) = file.refused() {
            g.refused = Some(why.to_string());
        }
        Ok(file)
    }
}

/// The maker thread: files until the pool is dropped (its channel closed); a failure is
/// handed on, and the next file tried after it.
fn make(
    tx: &SyncSender<Result<BlankFile, VmError>>,
    len: usize,
    cpu: &AtomicU64,
    blank: fn(&str, usize) -> Result<BlankFile, VmError>,
) {
    let spent = || {
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
    };
    loop {
        let made = blank("zcio-container", len);
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
