//! A splice whose flows run without the caller: paper 003's `SPLICE_OP_STARTFLOW` as the
//! paper describes it, where data "is automatically routed to fd2 without user process
//! intervention" and "may be accomplished by a kernel-level thread". [`DelegatedSplice`] owns
//! its two descriptors and a thread of its own that carries each flow; [`DelegatedSplice::start_flow`]
//! returns at once, and the caller learns of a flow's end by polling
//! ([`DelegatedSplice::try_complete`]), by waiting ([`DelegatedSplice::wait`]), or through a
//! descriptor that becomes readable ([`DelegatedSplice::completion_fd`], an eventfd to hand to
//! `poll`, `epoll` or io_uring).
//!
//! What differs from the paper: the thread is a thread of this process, not of the kernel
//! (Linux has no kernel-side splice loop); its CPU time is the process's. What it runs is the
//! same in-kernel transfer a [`Splice`] makes: the bytes never enter the process's memory.

use super::{Flow, Increment, Mechanism, Splice, SpliceError};
use rustix::event::EventfdFlags;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

/// A splice whose flows run on a thread of its own: paper 003's `SPLICE_OP_STARTFLOW` as the
/// paper describes it, data routed "without user process intervention". The thread is this
/// process's (Linux has no kernel-side splice loop), so its CPU time is the process's; what it
/// runs is the in-kernel transfer a [`Splice`] makes.
///
/// Flows started while one runs queue behind it; each completes in order with its own [`Flow`]
/// or error. A flow that fails on the sink leaves its stranded bytes for the next flow, as a
/// [`Splice`] does.
///
/// Dropping it returns at once: the thread finishes the flow it is in (a sink that never drains
/// keeps it, and its two descriptors, until the sink's reader goes away), skips the flows
/// queued behind, and exits, closing the descriptors.
///
/// # Examples
///
/// ```
/// use std::io::Read;
/// use std::os::unix::net::UnixStream;
/// use zcio_sequoia::ppio::{DelegatedSplice, Increment};
///
/// let dir = tempfile::tempdir()?;
/// std::fs::write(dir.path().join("from"), vec![5u8; 300_000])?;
/// let source = std::fs::File::open(dir.path().join("from"))?;
/// let (sink, mut reader) = UnixStream::pair()?;
///
/// let mut splice = DelegatedSplice::new(source.into(), sink.into())?;
/// splice.start_flow(Increment::Bytes(300_000))?; // returns at once
/// let mut got = Vec::new();
/// let mut chunk = [0u8; 65536];
/// while got.len() < 300_000 {
///     let n = reader.read(&mut chunk)?; // meanwhile the thread moves the data
///     got.extend_from_slice(&chunk[..n]);
/// }
/// assert_eq!(splice.wait()?.bytes, 300_000);
/// assert!(got.iter().all(|&b| b == 5));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct DelegatedSplice {
    orders: Option<mpsc::Sender<Increment>>,
    results: mpsc::Receiver<Result<Flow, SpliceError>>,
    /// Counts finished flows not yet taken (a semaphore eventfd: one read takes one).
    done: Arc<OwnedFd>,
    moved: Arc<AtomicU64>,
    pending: usize,
    mechanism: Mechanism,
    why: &'static str,
}

impl DelegatedSplice {
    /// `splice(source, sink)` with its own thread, which sets the splice up before this
    /// returns (the errors of [`Splice::new`]); nothing moves until
    /// [`DelegatedSplice::start_flow`].
    pub fn new(source: OwnedFd, sink: OwnedFd) -> Result<Self, SpliceError> {
        let flags = EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK | EventfdFlags::SEMAPHORE;
        let done =
            Arc::new(
                rustix::event::eventfd(0, flags).map_err(|e| SpliceError::Descriptor {
                    which: "completion eventfd",
                    source: e.into(),
                })?,
            );
        let moved = Arc::new(AtomicU64::new(0));
        let (orders, inbox) = mpsc::channel::<Increment>();
        let (outbox, results) = mpsc::channel();
        let (ready_tx, ready) = mpsc::sync_channel(1);
        let (done2, moved2) = (Arc::clone(&done), Arc::clone(&moved));
        std::thread::Builder::new()
            .name("zcio-splice".into())
            .spawn(move || {
                // The splice is set up once, here, where it lives; the caller learns how.
                let splice = match Splice::new(source.as_fd(), sink.as_fd()) {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok((splice.mechanism(), splice.why())));
                carry(splice, inbox, outbox, &done2, &moved2);
            })
            .map_err(|e| SpliceError::Descriptor {
                which: "splice thread",
                source: e,
            })?;
        let (mechanism, why) = ready.recv().map_err(|_| SpliceError::ThreadGone)??;
        Ok(DelegatedSplice {
            orders: Some(orders),
            results,
            done,
            moved,
            pending: 0,
            mechanism,
            why,
        })
    }

    /// `SPLICE_OP_STARTFLOW`: have up to `increment` bytes move from the source to the sink,
    /// and return at once. An increment of zero is refused here.
    pub fn start_flow(&mut self, increment: Increment) -> Result<(), SpliceError> {
        if increment == Increment::Bytes(0) {
            return Err(SpliceError::ZeroIncrement);
        }
        let sent = self.orders.as_ref().map(|o| o.send(increment));
        match sent {
            Some(Ok(())) => {
                self.pending += 1;
                Ok(())
            }
            _ => Err(SpliceError::ThreadGone),
        }
    }

    /// The oldest flow's result if it has finished, without waiting.
    pub fn try_complete(&mut self) -> Option<Result<Flow, SpliceError>> {
        match self.results.try_recv() {
            Ok(r) => Some(self.took(r)),
            Err(mpsc::TryRecvError::Empty) => None,
            Err(mpsc::TryRecvError::Disconnected) => self.gone(),
        }
    }

    /// Wait for the oldest flow to finish, and give its result.
    pub fn wait(&mut self) -> Result<Flow, SpliceError> {
        if self.pending == 0 {
            return Err(SpliceError::NoFlow);
        }
        match self.results.recv() {
            Ok(r) => self.took(r),
            Err(_) => self.gone().unwrap_or(Err(SpliceError::ThreadGone)),
        }
    }

    /// Flows started and not yet taken by [`DelegatedSplice::try_complete`] or
    /// [`DelegatedSplice::wait`].
    pub fn pending(&self) -> usize {
        self.pending
    }

    /// A descriptor that is readable while a finished flow waits to be taken (an eventfd in
    /// semaphore mode: taking the result consumes one count; do not read it yourself). It turns
    /// readable just before the result is handed over, so a [`DelegatedSplice::try_complete`]
    /// right after may still find nothing: poll again.
    pub fn completion_fd(&self) -> BorrowedFd<'_> {
        self.done.as_fd()
    }

    /// Bytes the sink has taken in the flows finished so far.
    pub fn moved(&self) -> u64 {
        self.moved.load(Ordering::Relaxed)
    }

    /// The mechanism carrying the flows.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Why that mechanism.
    pub fn why(&self) -> &'static str {
        self.why
    }

    fn took(&mut self, r: Result<Flow, SpliceError>) -> Result<Flow, SpliceError> {
        self.pending -= 1;
        // One count per finished flow, written before the result was sent: it is there.
        let _ = rustix::io::read(&*self.done, &mut [0u8; 8]);
        r
    }

    /// The thread ended without a result for a pending flow (it panicked).
    fn gone(&mut self) -> Option<Result<Flow, SpliceError>> {
        (self.pending > 0).then(|| {
            self.pending = 0;
            Err(SpliceError::ThreadGone)
        })
    }
}

impl Drop for DelegatedSplice {
    fn drop(&mut self) {
        // The thread sees the closed channel after its current flow and exits.
        self.orders = None;
    }
}

/// The splice's thread: carry each flow ordered, report it, count it on the eventfd.
fn carry(
    mut splice: Splice<'_>,
    inbox: mpsc::Receiver<Increment>,
    outbox: mpsc::Sender<Result<Flow, SpliceError>>,
    done: &OwnedFd,
    moved: &AtomicU64,
) {
    while let Ok(increment) = inbox.recv() {
        let r = splice.start_flow(increment);
        moved.store(splice.moved(), Ordering::Relaxed);
        let _ = rustix::io::write(done, &1u64.to_ne_bytes());
        if outbox.send(r).is_err() {
            return; // the owner is gone: skip what is queued
        }
    }
}
