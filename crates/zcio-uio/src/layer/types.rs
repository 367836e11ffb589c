//! The layer's public values: its configuration, the errors and completions of requests, and
//! its counters.

use crate::request::Request;
use zcio_vm::VmError;
use zcio_vm::direct::{IoBuf, PushError};

/// How requests reach the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Initiation {
    /// Written into the submission ring, read by a polling kernel thread: no system call while
    /// the thread is awake (the conditional store buffer's role).
    Polled,
    /// One `io_uring_enter` per request (the paper's system-call initiation).
    Syscall,
}

/// How buffer addresses are translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Translation {
    /// The buffer region registered with the ring ahead, pinned once (the device TLB hit).
    Registered,
    /// The kernel looks up and pins the pages per request (the kernel-handled miss).
    PerRequest,
}

/// A layer's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// How requests are initiated.
    pub initiation: Initiation,
    /// How buffers are translated.
    pub translation: Translation,
    /// Submission ring entries (requests queued at once).
    pub entries: u32,
    /// Buffers in the layer's region.
    pub buffers: usize,
    /// Bytes per buffer (a multiple of the page size).
    pub buf_size: usize,
    /// Milliseconds the polling kernel thread spins idle before it sleeps.
    pub sqpoll_idle_ms: u32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            initiation: Initiation::Syscall,
            translation: Translation::Registered,
            entries: 64,
            buffers: 64,
            buf_size: 64 << 10,
            sqpoll_idle_ms: 50,
        }
    }
}

/// Alignment of `O_DIRECT` offsets, lengths and addresses the layer requires.
pub const DIRECT_ALIGN: u64 = 4096;

/// What went wrong with a request, or with the layer.
#[derive(Debug, thiserror::Error)]
pub enum UioError {
    /// The record's opcode is none of [`Opcode`](crate::request::Opcode)'s.
    #[error("bad opcode {0} (1, read, or 2, write)")]
    BadOpcode(u8),
    /// Flags or reserved bytes that are not zero.
    #[error("flags {0:#x} or reserved bytes set (the only flag defined is ASYNC, 0x1)")]
    BadFlags(u8),
    /// No handler of that number.
    #[error("no handler {0} in this layer")]
    NoHandler(u16),
    /// No target in that slot.
    #[error("no target {0} in this layer (not opened, or closed)")]
    NoTarget(u32),
    /// A write to a target opened for reading.
    #[error("target {0} was opened for reading only")]
    ReadOnly(u32),
    /// A request of no bytes.
    #[error("a request of zero bytes")]
    ZeroLength,
    /// The record's buffer is not inside the buffer handed with it.
    #[error(
        "the buffer at {addr:#x} (+{len} bytes) is not inside the buffer handed with the request ({owned_addr:#x}, +{owned_len}): the layer transfers only into buffers it holds, never into memory the process may not write"
    )]
    NotOwned {
        /// The record's buffer address.
        addr: u64,
        /// Its length.
        len: u32,
        /// The handed buffer's address.
        owned_addr: usize,
        /// Its size.
        owned_len: usize,
    },
    /// Not aligned as `O_DIRECT` needs.
    #[error("{what} {value:#x} is not a multiple of {align}, as O_DIRECT on this target needs")]
    Misaligned {
        /// Offset, length or buffer address.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The alignment.
        align: u64,
    },
    /// A read past the end of the file.
    #[error("a read of {length} bytes at {offset} goes past the end of the file ({size} bytes)")]
    PastEnd {
        /// The offset.
        offset: u64,
        /// The length.
        length: u32,
        /// The file's size when opened.
        size: u64,
    },
    /// The kernel completed the request with an error.
    #[error("the device failed the request: {0}")]
    Device(std::io::Error),
    /// The ring refused the entry.
    #[error("the ring refused the request: {0}")]
    Ring(PushError),
    /// Waiting with no request of this thread in flight.
    #[error("this thread has no request in flight to wait for")]
    NothingInFlight,
    /// Opening a target failed.
    #[error("open {path}: {source}")]
    Open {
        /// The path.
        path: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// The VM layer (ring, buffers) failed.
    #[error(transparent)]
    Vm(#[from] VmError),
}

impl UioError {
    /// The negative errno a record's status carries for this error.
    pub fn status(&self) -> i32 {
        use rustix::io::Errno;
        let e = match self {
            UioError::BadOpcode(_)
            | UioError::BadFlags(_)
            | UioError::ZeroLength
            | UioError::Misaligned { .. }
            | UioError::PastEnd { .. }
            | UioError::Ring(_)
            | UioError::NothingInFlight => Errno::INVAL,
            UioError::NoHandler(_) | UioError::NoTarget(_) | UioError::ReadOnly(_) => Errno::BADF,
            UioError::NotOwned { .. } => Errno::FAULT,
            UioError::Device(e) | UioError::Open { source: e, .. } => {
                Errno::from_io_error(e).unwrap_or(Errno::IO)
            }
            UioError::Vm(_) => Errno::IO,
        };
        -e.raw_os_error()
    }
}

/// A request's completion, handed to its handler: the record with its status, the buffer
/// back, and the error if it failed.
#[derive(Debug)]
pub struct Completion {
    /// The record, `status` filled in.
    pub record: Request,
    /// The buffer handed with it.
    pub buf: IoBuf,
    /// Why it failed, if it did.
    pub error: Option<UioError>,
    /// Its place in the order the layer took completions in (reaped from the ring, or
    /// refused): a thread's handlers run in this order.
    pub sequence: u64,
}

impl Completion {
    /// The bytes transferred, in the buffer (empty if the request failed).
    pub fn data(&self) -> &[u8] {
        let n = self.record.status.max(0) as usize;
        let at = (self.record.buffer as usize).saturating_sub(self.buf.addr());
        self.buf.bytes().get(at..at + n).unwrap_or(&[])
    }
}

/// Why a request was not taken (the record and buffer come back).
#[derive(Debug)]
pub enum NotQueued {
    /// The ring is full: poll or wait, then submit again (the non-blocking flow control).
    Full {
        /// The record.
        record: Request,
        /// Its buffer.
        buf: IoBuf,
    },
    /// The record names no handler of this layer, so no completion could be delivered.
    NoHandler {
        /// The record.
        record: Request,
        /// Its buffer.
        buf: IoBuf,
    },
}

impl std::fmt::Display for NotQueued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotQueued::Full { .. } => write!(f, "the ring is full: poll, then submit again"),
            NotQueued::NoHandler { record, .. } => {
                write!(f, "no handler {} in this layer", record.handler)
            }
        }
    }
}

/// So that `uio.submit(..)?` works in a function returning `Box<dyn Error>` (the record and
/// its buffer then go back to the layer with the error).
impl std::error::Error for NotQueued {}

/// Counters of a layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UioStats {
    /// Requests that reached the ring.
    pub submitted: u64,
    /// Requests refused before the ring (completed with an error status).
    pub refused: u64,
    /// Completions delivered to handlers (or to blocking calls).
    pub delivered: u64,
    /// Kernel entries to submit.
    pub submit_enters: u64,
    /// Kernel entries to wait.
    pub wait_enters: u64,
    /// Completions dropped because the thread that issued them had ended (their handlers not
    /// run, their buffers back to the region).
    pub orphaned: u64,
}
