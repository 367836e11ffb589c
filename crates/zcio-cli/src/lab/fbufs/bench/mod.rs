//! The fbuf experiments of paper 001 (Table 1, Figure 3): an originator process hands messages
//! to a receiver process, each touching every page once (the paper's "writes one word in each
//! VM page", "touches one word in each page") or every byte, with fbufs in their four variants
//! and, for comparison, a fresh memfd passed and mapped per message (page remapping) and copies
//! through a pipe and a Unix socket. Beside them, fbufs originated by a device: messages that
//! arrive on a socket, received straight into fbufs or copied into them.
//!
//! The originator runs here; the receiver is another process running [`sink`] (the `zcio`
//! command's hidden `fbuf-sink`). Messages stream: the originator does not wait for each one,
//! so the time per message over a run is the incremental cost the paper reports, and its slope
//! against the page count is the per-page cost.
//!
//! # Checking what is timed
//!
//! Every message's content is checked at the receiver, after the clock has stopped:
//!
//! - The originator writes [`stamp`]`(message, page)` into the first word of every page of
//!   every message (touching one word per page, that word is the one it writes; touching every
//!   byte, the rest of each page is [`fill`]`(message)`).
//! - The receiver's touch reads the first word of each page (one word per page), or every word
//!   (every byte), as the paper's receiver does, and keeps what it read in a [`Record`]
//!   allocated and faulted in before the stream: the word per page, or each page's first word
//!   and the sum of its other words. What is read has to go somewhere for the touch to
//!   happen at all; here it is one store per page, and the comparison waits.
//! - When the stream is over (the receiver has said "done", or the originator has every fbuf
//!   back and has stopped its clock), the receiver compares the record with what the originator
//!   wrote ([`Record::check`]): every page's stamp, and with every byte touched every page's
//!   sum, and the number of messages. A mismatch ends the receiver process with an error
//!   naming the contender, the message and the page ([`Mismatch`]), which the originator
//!   returns as its own ([`BenchError::Receiver`]).
//!
//! A stamp catches a lost, repeated, reordered, misplaced or stale message, or a page of one
//! in the wrong place; the sum catches a changed word anywhere in a page (it does not see two
//! words of a page swapped). [`Fault`] makes the originator spoil or leave out a message on
//! purpose, to see the receiver notice.

mod check;
mod originate;
mod process;
mod sink;

pub use check::{Fault, Mismatch, PAGE, Record, fill, page_sum, stamp, write_bytes, write_words};
pub use originate::run;
pub use process::Said;
pub use sink::{Role, sink};

use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use zcio_fbufs::link::{LinkError, OriginatorEnd};
use zcio_fbufs::path::{FbufError, Originator, PathMemory, Variant};

/// The `bytes` of the memfd `fd` mapped with `access` at a random address: page remapping's
/// mapping of each message, in the originator and in the receiver.
fn map_remapped(
    fd: BorrowedFd<'_>,
    bytes: usize,
    access: zcio_vm::protect::Access,
) -> Result<zcio_vm::shared::SharedWords, zcio_vm::VmError> {
    zcio_vm::shared::SharedWords::map(fd, 0, bytes, zcio_vm::arena::random_address(bytes), access)
}

/// Cached/volatile fbufs: the forwarding server's path, device-originated fbufs' and the
/// protocol stack's own headers'.
pub const CACHED_VOLATILE: Variant = Variant {
    cached: true,
    volatile: true,
};

/// An originator of a new path of fbufs of variant `v`, `quota` chunks of `chunk` bytes,
/// offered to the receiver connected on `sock`.
pub fn originate_on(
    sock: &UnixStream,
    (chunk, quota): (usize, usize),
    v: Variant,
) -> Result<OriginatorEnd, LinkError> {
    let p = PathMemory::create(chunk, quota, v)?;
    let mut end = OriginatorEnd::new(Originator::new(p.info())?);
    end.add_receiver(sock.try_clone()?)?;
    Ok(end)
}

/// A way of passing the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    /// Fbufs of a variant.
    Fbufs(Variant),
    /// Cached/volatile fbufs through a server process that forwards each reference to the
    /// receiver without touching the data (the paper's three-domain path, Figure 4).
    Forwarded,
    /// A fresh memfd per message, passed with `SCM_RIGHTS` and mapped by the receiver.
    Remap,
    /// Copies through a Unix stream socket.
    UnixSocket,
    /// Copies through a pipe.
    Pipe,
    /// Fbufs originated by a device: the messages come from a socket (written by a device
    /// thread of the originating process) and are received straight into cached/volatile
    /// fbufs through an io_uring provided-buffer ring, then sent on untouched; or, `copied`,
    /// received into a private buffer and copied into the fbuf, as an originator without
    /// device-originated fbufs does.
    Device {
        /// Received into a private buffer and copied into the fbuf.
        copied: bool,
    },
}

impl Contender {
    /// Every contender, in the order of the paper's Table 1 (then the copy peers).
    pub const ALL: [Contender; 10] = [
        Contender::Fbufs(Variant {
            cached: true,
            volatile: true,
        }),
        Contender::Fbufs(Variant {
            cached: false,
            volatile: true,
        }),
        Contender::Fbufs(Variant {
            cached: true,
            volatile: false,
        }),
        Contender::Fbufs(Variant {
            cached: false,
            volatile: false,
        }),
        Contender::Forwarded,
        Contender::Remap,
        Contender::UnixSocket,
        Contender::Pipe,
        Contender::Device { copied: false },
        Contender::Device { copied: true },
    ];

    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Contender::Fbufs(Variant {
                cached: true,
                volatile: true,
            }) => "fbufs-cached-volatile",
            Contender::Fbufs(Variant {
                cached: false,
                volatile: true,
            }) => "fbufs-volatile",
            Contender::Fbufs(Variant {
                cached: true,
                volatile: false,
            }) => "fbufs-cached",
            Contender::Fbufs(_) => "fbufs",
            Contender::Forwarded => "fbufs-cached-volatile-via-server",
            Contender::Remap => "page-remap-memfd",
            Contender::UnixSocket => "copy-unix-socket",
            Contender::Pipe => "copy-pipe",
            Contender::Device { copied: false } => "fbufs-from-socket",
            Contender::Device { copied: true } => "socket-copied-into-fbufs",
        }
    }

    /// The contender of a name.
    pub fn parse(s: &str) -> Option<Contender> {
        Contender::ALL.into_iter().find(|c| c.name() == s)
    }
}

/// What each side touches in a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touch {
    /// One word per page (the paper's experiment).
    Word,
    /// Every byte.
    All,
}

impl Touch {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Touch::Word => "word-per-page",
            Touch::All => "every-byte",
        }
    }
    /// The touch of a name.
    pub fn parse(s: &str) -> Option<Touch> {
        [Touch::Word, Touch::All]
            .into_iter()
            .find(|t| t.name() == s)
    }
}

/// What went wrong in a run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The link, the path, the VM layer or a socket failed.
    #[error(transparent)]
    Link(#[from] LinkError),
    /// A message did not arrive as it was sent (found by the receiver).
    #[error(transparent)]
    Mismatch(#[from] Mismatch),
    /// The receiving process failed; what it said on its standard error, if it was collected.
    #[error("{who} ended ({status}){}", said_suffix(.said))]
    Receiver {
        /// Which process.
        who: &'static str,
        /// How it ended.
        status: String,
        /// Its last lines of standard error, `; `-separated.
        said: String,
    },
    /// A size or count the run cannot have.
    #[error("invalid argument: {0}")]
    Argument(String),
}

fn said_suffix(said: &str) -> String {
    if said.is_empty() {
        String::new()
    } else {
        format!(": {said}")
    }
}

impl From<std::io::Error> for BenchError {
    fn from(e: std::io::Error) -> Self {
        BenchError::Link(e.into())
    }
}

impl From<zcio_vm::VmError> for BenchError {
    fn from(e: zcio_vm::VmError) -> Self {
        BenchError::Link(e.into())
    }
}

impl From<FbufError> for BenchError {
    fn from(e: FbufError) -> Self {
        BenchError::Link(e.into())
    }
}

/// One run: `count` messages of `bytes`.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// Wall time per message (ns), over the whole stream.
    pub ns_per_message: f64,
}

fn path_quota(bytes: usize) -> (usize, usize) {
    // Room for a few messages in flight: at least 8 MiB, at least 8 messages.
    let chunk = 1 << 20;
    let want = (bytes * 8).max(8 << 20);
    (chunk, want.div_ceil(chunk))
}

/// The untimed messages a fbuf run starts with: enough to fill its path once.
fn warm_up(bytes: usize) -> usize {
    let (chunk, quota) = path_quota(bytes);
    (chunk * quota / bytes.div_ceil(PAGE) / PAGE).max(1)
}

/// Messages the receiver of contender `c` takes in a run of `count` timed messages of `bytes`:
/// the fbuf runs' warm-up too.
pub fn messages(c: Contender, bytes: usize, count: usize) -> u64 {
    match c {
        Contender::Fbufs(_) | Contender::Forwarded | Contender::Device { .. } => {
            (warm_up(bytes) + count) as u64
        }
        _ => count as u64,
    }
}

fn check_run(bytes: usize, count: usize) -> Result<(), BenchError> {
    if bytes == 0 || bytes % PAGE != 0 || count == 0 {
        return Err(BenchError::Argument(format!(
            "{bytes} bytes × {count} messages: the size must be a positive multiple of {PAGE} and the count positive"
        )));
    }
    Ok(())
}
