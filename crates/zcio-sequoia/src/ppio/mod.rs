//! Peer-to-peer I/O (paper 003): `sd = splice(fd1, fd2)` establishes a kernel-managed data
//! path from a source descriptor to a sink descriptor; `SPLICE_OP_STARTFLOW` with an increment
//! moves that many bytes along it and returns control to the application. Here:
//! [`Splice::new`] and [`Splice::start_flow`] with an [`Increment`] (a number of bytes, or
//! [`Increment::Default`]: one the system finds convenient).
//!
//! Linux has the data path, not the call: whichever of its in-kernel transfers the pair of
//! descriptors allows ([`Mechanism`]) carries the flow: `copy_file_range` between two files
//! (the file systems may share blocks instead of copying), `sendfile` from a file to anything
//! else, and `splice` through a pipe the splice owns for the rest (a socket source). The
//! bytes never enter the application's memory, and there is no read/write loop behind it.
//!
//! [`DelegatedSplice`] runs the flows on a thread of its own: `start_flow` returns at once,
//! and the caller polls, waits, or watches a descriptor for each flow's end.
//!
//! Descriptors are expected to block. A sink whose reader goes away mid-flow ends the flow with
//! [`SpliceError::Sink`], which says how many bytes the sink took and how many were taken
//! from the source but are still held in the splice's pipe (they go out first on the next
//! flow): nothing is lost from the accounting. (Rust programs ignore `SIGPIPE`; a program that
//! does not gets the signal instead, as with `write`.)

mod delegated;

pub use delegated::DelegatedSplice;

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::io::Errno;
use rustix::pipe::SpliceFlags;

/// How a splice moves its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// `copy_file_range`: file to file, inside the file systems.
    CopyFileRange,
    /// `sendfile`: from a file (its pages in the page cache) to any descriptor.
    Sendfile,
    /// `splice` through a pipe: from a socket or pipe to anything.
    Splice,
}

impl Mechanism {
    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::CopyFileRange => "copy_file_range",
            Mechanism::Sendfile => "sendfile",
            Mechanism::Splice => "splice",
        }
    }
}

/// What a descriptor is, as far as choosing a mechanism goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// A regular file (or a block device).
    File,
    /// A pipe or FIFO.
    Pipe,
    /// A socket.
    Socket,
    /// Anything else (a character device, ...).
    Other,
}

impl Endpoint {
    fn of(fd: BorrowedFd<'_>, which: &'static str) -> Result<Endpoint, SpliceError> {
        let st = rustix::fs::fstat(fd).map_err(|e| SpliceError::Descriptor {
            which,
            source: e.into(),
        })?;
        use rustix::fs::FileType;
        Ok(match FileType::from_raw_mode(st.st_mode) {
            FileType::RegularFile | FileType::BlockDevice => Endpoint::File,
            FileType::Fifo => Endpoint::Pipe,
            FileType::Socket => Endpoint::Socket,
            _ => Endpoint::Other,
        })
    }
}

/// How many bytes a flow may move before control returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Increment {
    /// `SPLICE_INCREMENT_DEFAULT`: what the system finds convenient
    /// ([`Splice::default_increment`]).
    Default,
    /// At most this many bytes.
    Bytes(u64),
}

/// What one flow did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Bytes the sink took in this flow.
    pub bytes: u64,
    /// Whether the source has ended (nothing more will flow).
    pub end: bool,
}

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum SpliceError {
    /// A descriptor that cannot be used (closed, or of no kind the kernel can splice).
    #[error("the {which} descriptor: {source}")]
    Descriptor {
        /// `source` or `sink`.
        which: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
    /// The pair cannot be spliced (for instance a source that is neither a file, a socket nor
    /// a pipe).
    #[error("cannot splice a {source_kind:?} to a {sink_kind:?}: {why}")]
    Unsupported {
        /// The source's kind.
        source_kind: Endpoint,
        /// The sink's kind.
        sink_kind: Endpoint,
        /// Why.
        why: &'static str,
    },
    /// An increment of zero bytes.
    #[error("an increment of 0 bytes moves nothing")]
    ZeroIncrement,
    /// Waiting for a flow where none was started.
    #[error("no flow was started to wait for")]
    NoFlow,
    /// The thread of a [`DelegatedSplice`] is gone (it panicked): its flows cannot finish.
    #[error("the splice's thread is gone; its pending flows will not finish")]
    ThreadGone,
    /// Reading the source failed mid-flow.
    #[error("reading the source by {mechanism} failed after {moved} bytes of this flow: {source}")]
    Source {
        /// The mechanism.
        mechanism: &'static str,
        /// Bytes the sink took in this flow before the failure.
        moved: u64,
        /// The system's error.
        source: std::io::Error,
    },
    /// Writing the sink failed mid-flow (its reader gone: `EPIPE`, `ECONNRESET`).
    #[error(
        "the sink refused more data ({source}) after {moved} bytes of this flow; {stranded} bytes taken from the source wait in the splice's pipe"
    )]
    Sink {
        /// Bytes the sink took in this flow before it refused.
        moved: u64,
        /// Bytes read from the source but not yet in the sink (held in the splice's pipe,
        /// sent first by the next flow).
        stranded: u64,
        /// The system's error.
        source: std::io::Error,
    },
}

/// A kernel-managed data path from a source descriptor to a sink descriptor.
///
/// # Examples
///
/// A file to a file, 64 KiB per flow:
///
/// ```
/// use std::os::fd::AsFd;
/// use zcio_sequoia::ppio::{Increment, Splice};
///
/// let dir = tempfile::tempdir()?;
/// let data = vec![7u8; 200_000];
/// std::fs::write(dir.path().join("from"), &data)?;
/// let source = std::fs::File::open(dir.path().join("from"))?;
/// let sink = std::fs::File::create(dir.path().join("to"))?;
///
/// let mut splice = Splice::new(source.as_fd(), sink.as_fd())?;
/// println!("{}: {}", splice.mechanism().name(), splice.why());
/// while !splice.start_flow(Increment::Bytes(64 * 1024))?.end {}
/// assert_eq!(splice.moved(), data.len() as u64);
/// assert_eq!(std::fs::read(dir.path().join("to"))?, data);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Splice<'fd> {
    source: BorrowedFd<'fd>,
    sink: BorrowedFd<'fd>,
    mechanism: Mechanism,
    why: &'static str,
    /// With [`Mechanism::Splice`], the pipe between the two (read end, write end), unless one
    /// of them is a pipe already.
    pipe: Option<(OwnedFd, OwnedFd)>,
    /// Bytes in that pipe, taken from the source, not yet in the sink.
    stranded: u64,
    /// Capacity of that pipe (or the chunk a single call moves).
    chunk: usize,
    moved: u64,
}

/// The most one call moves (Linux caps a transfer at 2 GiB − 4 KiB).
const MAX_CALL: usize = 0x7fff_f000;

impl<'fd> Splice<'fd> {
    /// `splice(source, sink)`: establish the path, choosing the mechanism the pair allows.
    /// Nothing moves until [`Splice::start_flow`].
    pub fn new(source: BorrowedFd<'fd>, sink: BorrowedFd<'fd>) -> Result<Self, SpliceError> {
        let from = Endpoint::of(source, "source")?;
        let to = Endpoint::of(sink, "sink")?;
        let unsupported = |why| SpliceError::Unsupported {
            source_kind: from,
            sink_kind: to,
            why,
        };
        let (mechanism, why) = match (from, to) {
            (Endpoint::File, Endpoint::File) => (
                Mechanism::CopyFileRange,
                "file to file: copy_file_range, inside the file systems",
            ),
            (Endpoint::File, _) => (
                Mechanism::Sendfile,
                "from a file: sendfile, from the page cache",
            ),
            (Endpoint::Socket | Endpoint::Pipe, _) => (
                Mechanism::Splice,
                "from a socket or pipe: splice, through a pipe",
            ),
            (Endpoint::Other, _) => {
                return Err(unsupported(
                    "the kernel moves data only from files, sockets and pipes",
                ));
            }
        };
        let mut s = Splice {
            source,
            sink,
            mechanism,
            why,
            pipe: None,
            stranded: 0,
            chunk: 1 << 20,
            moved: 0,
        };
        if mechanism == Mechanism::Splice {
            if from == Endpoint::Pipe || to == Endpoint::Pipe {
                s.chunk = 1 << 16;
            } else {
                let (r, w) =
                    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| {
                        SpliceError::Descriptor {
                            which: "splice's own pipe",
                            source: e.into(),
                        }
                    })?;
                // A larger pipe moves more per call; the default (64 KiB) where the system
                // refuses.
                let _ = rustix::pipe::fcntl_setpipe_size(&w, 1 << 20);
                s.chunk = rustix::pipe::fcntl_getpipe_size(&w).unwrap_or(1 << 16);
                s.pipe = Some((r, w));
            }
        }
        Ok(s)
    }

    /// The mechanism carrying the flow.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// Why that mechanism.
    pub fn why(&self) -> &'static str {
        self.why
    }

    /// What [`Increment::Default`] moves: the pipe's capacity for a splice, else 1 MiB.
    pub fn default_increment(&self) -> u64 {
        self.chunk as u64
    }

    /// Bytes the sink has taken over the splice's life.
    pub fn moved(&self) -> u64 {
        self.moved
    }

    /// Bytes taken from the source and not yet in the sink (after a sink failure).
    pub fn stranded(&self) -> u64 {
        self.stranded
    }

    /// `SPLICE_OP_STARTFLOW`: move up to `increment` bytes from the source to the sink, then
    /// return. Fewer move only if the source ends (`Flow::end`).
    pub fn start_flow(&mut self, increment: Increment) -> Result<Flow, SpliceError> {
        let want = match increment {
            Increment::Default => self.default_increment(),
            Increment::Bytes(0) => return Err(SpliceError::ZeroIncrement),
            Increment::Bytes(n) => n,
        };
        let mut flow = Flow {
            bytes: 0,
            end: false,
        };
        // What an earlier flow left in the pipe goes first.
        if self.stranded > 0 {
            let first = self.stranded.min(want);
            if self.drain(&mut flow, first)? < first {
                return Ok(flow);
            }
        }
        while flow.bytes < want && !flow.end {
            let len = (want - flow.bytes)
                .min(self.chunk as u64)
                .min(MAX_CALL as u64) as usize;
            let n = match self.mechanism {
                Mechanism::CopyFileRange => {
                    match self.call(&mut flow, |s| {
                        rustix::fs::copy_file_range(s.source, None, s.sink, None, len)
                    }) {
                        // Two file systems that cannot copy between them (or a kernel without
                        // it): sendfile carries file to file too.
                        Err(SpliceError::Source { source, .. })
                            if matches!(
                                Errno::from_io_error(&source),
                                Some(Errno::XDEV | Errno::INVAL | Errno::OPNOTSUPP | Errno::NOSYS)
                            ) =>
                        {
                            self.mechanism = Mechanism::Sendfile;
                            self.why =
                                "file to file: copy_file_range refused here, sendfile instead";
                            continue;
                        }
                        r => r,
                    }
                }
                Mechanism::Sendfile => self.call(&mut flow, |s| {
                    rustix::fs::sendfile(s.sink, s.source, None, len)
                }),
                Mechanism::Splice => self.splice_once(&mut flow, len),
            }?;
            if n == 0 {
                flow.end = true;
            }
        }
        Ok(flow)
    }

    /// One direct call (copy_file_range, sendfile), retried on EINTR; its bytes counted.
    fn call(
        &mut self,
        flow: &mut Flow,
        op: impl Fn(&Self) -> rustix::io::Result<usize>,
    ) -> Result<u64, SpliceError> {
        loop {
            match op(self) {
                Ok(n) => {
                    flow.bytes += n as u64;
                    self.moved += n as u64;
                    return Ok(n as u64);
                }
                Err(Errno::INTR) => continue,
                Err(e) => return Err(self.fault(flow, e)),
            }
        }
    }

    /// Which end a failure of a direct call is on: the sink's errors are the ones a reader
    /// going away (or a full device) produces; the rest are the source's.
    fn fault(&self, flow: &Flow, e: Errno) -> SpliceError {
        let sink_side = matches!(
            e,
            Errno::PIPE | Errno::CONNRESET | Errno::NOSPC | Errno::FBIG | Errno::DQUOT
        ) || rustix::fs::fstat(self.sink).is_err();
        if sink_side {
            SpliceError::Sink {
                moved: flow.bytes,
                stranded: self.stranded,
                source: e.into(),
            }
        } else {
            SpliceError::Source {
                mechanism: self.mechanism.name(),
                moved: flow.bytes,
                source: e.into(),
            }
        }
    }

    /// Source into the pipe (or straight to a pipe sink), then the pipe into the sink.
    fn splice_once(&mut self, flow: &mut Flow, len: usize) -> Result<u64, SpliceError> {
        let into = match &self.pipe {
            Some((_, w)) => w.as_fd(),
            None => self.sink,
        };
        let n = loop {
            match rustix::pipe::splice(
                self.source,
                None,
                into,
                None,
                len,
                SpliceFlags::MOVE | SpliceFlags::MORE,
            ) {
                Ok(n) => break n as u64,
                Err(Errno::INTR) => continue,
                Err(e) if self.pipe.is_none() => return Err(self.fault(flow, e)),
                Err(e) => {
                    return Err(SpliceError::Source {
                        mechanism: "splice",
                        moved: flow.bytes,
                        source: e.into(),
                    });
                }
            }
        };
        if self.pipe.is_none() {
            flow.bytes += n;
            self.moved += n;
            return Ok(n);
        }
        self.stranded += n;
        self.drain(flow, n)?;
        Ok(n)
    }

    /// Move `n` stranded bytes from the pipe into the sink.
    fn drain(&mut self, flow: &mut Flow, n: u64) -> Result<u64, SpliceError> {
        let Some((r, _)) = &self.pipe else {
            return Ok(0);
        };
        let mut done = 0;
        while done < n {
            match rustix::pipe::splice(
                r,
                None,
                self.sink,
                None,
                (n - done) as usize,
                SpliceFlags::MOVE | SpliceFlags::MORE,
            ) {
                Ok(0) => break,
                Ok(k) => {
                    done += k as u64;
                    self.stranded -= k as u64;
                    flow.bytes += k as u64;
                    self.moved += k as u64;
                }
                Err(Errno::INTR) => continue,
                Err(e) => {
                    return Err(SpliceError::Sink {
                        moved: flow.bytes,
                        stranded: self.stranded,
                        source: e.into(),
                    });
                }
            }
        }
        Ok(done)
    }
}
