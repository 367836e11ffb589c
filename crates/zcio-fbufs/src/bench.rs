//! The fbuf experiments of paper 001 (Table 1, Figure 3): an originator process hands messages
//! to a receiver process, each touching every page once (the paper's "writes one word in each
//! VM page", "touches one word in each page") or every byte, with fbufs in their four variants
//! and, for comparison, a fresh memfd passed and mapped per message (page remapping) and copies
//! through a pipe and a Unix socket.
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

use crate::link::{LinkError, OriginatorEnd, ReceiverEnd};
use crate::path::{FbufError, Originator, PathMemory, Variant};
use crate::region::RegionRead;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Child, ExitStatus};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

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
}

impl Contender {
    /// Every contender, in the order of the paper's Table 1 (then the copy peers).
    pub const ALL: [Contender; 8] = [
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

/// Bytes of a page: each page of a message carries a stamp.
pub const PAGE: usize = 4096;
const PS: usize = PAGE;
/// Words of a page.
const WPP: usize = PS / 8;

/// The word at the start of page `page` of message `message` (messages counted from 0 over
/// the whole stream, warm-up included): a different word for every message below 2⁴⁰ and
/// page below 2¹⁶ (messages up to 256 MiB).
pub fn stamp(message: u64, page: usize) -> u64 {
    0x5a00_0000_0000_0000 ^ message ^ ((page as u64) << 40)
}

/// Every word of message `message` but its pages' stamps, when every byte is touched.
pub fn fill(message: u64) -> u64 {
    0xa5a5_a5a5_a5a5_a5a5 ^ message.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// What the words after the stamp of a page of `words` words of message `message` sum to
/// (wrapping), when every byte is touched.
pub fn page_sum(message: u64, words: usize) -> u64 {
    fill(message).wrapping_mul(words.saturating_sub(1) as u64)
}

/// Write message `message` into `words` (an fbuf, a mapped memfd) the `touch` way: the stamp
/// of every page, and with [`Touch::All`] [`fill`] in every other word.
pub fn write_words(words: &[AtomicU64], touch: Touch, message: u64) {
    match touch {
        Touch::Word => {
            for (p, w) in words.iter().step_by(WPP).enumerate() {
                w.store(stamp(message, p), Relaxed);
            }
        }
        Touch::All => {
            let v = fill(message);
            for (p, page) in words.chunks(WPP).enumerate() {
                page[0].store(stamp(message, p), Relaxed);
                page[1..].iter().for_each(|w| w.store(v, Relaxed));
            }
        }
    }
}

/// Write message `message` into `buf` (a copy's buffer) the `touch` way, as [`write_words`]
/// does; bytes past the last whole word are left alone.
pub fn write_bytes(buf: &mut [u8], touch: Touch, message: u64) {
    let whole = buf.len() / 8 * 8;
    let buf = &mut buf[..whole];
    match touch {
        Touch::Word => {
            for (p, page) in buf.chunks_mut(PS).enumerate() {
                page[..8].copy_from_slice(&stamp(message, p).to_ne_bytes());
            }
        }
        Touch::All => {
            let v = fill(message).to_ne_bytes();
            for (p, page) in buf.chunks_mut(PS).enumerate() {
                page[..8].copy_from_slice(&stamp(message, p).to_ne_bytes());
                page[8..]
                    .chunks_exact_mut(8)
                    .for_each(|w| w.copy_from_slice(&v));
            }
        }
    }
}

/// The word of a message of `words` words that [`Fault::Corrupt`] spoils: the last page's
/// stamp with one word per page, the message's last word (past the stamp, seen only through
/// its page's sum) with every byte.
fn spoiled_word(words: usize, touch: Touch) -> usize {
    match touch {
        Touch::Word => (words - 1) / WPP * WPP,
        Touch::All => words - 1,
    }
}

/// A message spoiled or left out on purpose, to see the receiver notice (the tests, through
/// the hidden `--fault` of `zcio bench fbufs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The last word the receiver reads of timed message K is wrong (receivers that count
    /// the warm-up too, fbufs' and iceoryx2's, name it by its place in the whole stream).
    Corrupt(u64),
    /// Timed message K is never sent.
    Skip(u64),
}

impl std::str::FromStr for Fault {
    type Err = String;
    fn from_str(s: &str) -> Result<Fault, String> {
        let bad = || format!("`{s}`: expected corrupt:K or skip:K (K a timed message's index)");
        let (kind, k) = s.split_once(':').ok_or_else(bad)?;
        let k: u64 = k.parse().map_err(|_| bad())?;
        match kind {
            "corrupt" => Ok(Fault::Corrupt(k)),
            "skip" => Ok(Fault::Skip(k)),
            _ => Err(bad()),
        }
    }
}

/// What a receiver keeps of the messages it touches, to be checked once the clock has
/// stopped ([`Record::check`]): per page, the word it read (one word per page), or the page's
/// first word and the wrapping sum of its other words (every byte).
///
/// ```
/// use zcio_fbufs::bench::{Mismatch, Record, Touch, write_bytes};
/// let mut rec = Record::new("copy-pipe", Touch::Word, 8192, 2);
/// let mut msg = vec![0u8; 8192];
/// for m in 0..2 {
///     write_bytes(&mut msg, Touch::Word, m);
///     if m == 1 {
///         msg[4096] ^= 1; // the second page's stamp
///     }
///     rec.bytes(&msg);
/// }
/// let e = rec.check().unwrap_err();
/// assert!(matches!(e, Mismatch::Stamp { message: 1, page: 1, .. }));
/// assert!(e.to_string().starts_with("copy-pipe: message 1, page 1: read stamp"));
/// ```
#[derive(Debug)]
pub struct Record {
    contender: &'static str,
    touch: Touch,
    bytes: usize,
    expected: u64,
    received: u64,
    kept: Vec<u64>,
    /// The first message of the wrong length, and its length.
    wrong_length: Option<(u64, usize)>,
}

impl Record {
    /// A record of `messages` messages of `bytes` each (whole words: a remainder is neither
    /// touched nor checked) passed by `contender`. Its memory is allocated and written now, so
    /// that keeping costs no page fault later.
    pub fn new(contender: &'static str, touch: Touch, bytes: usize, messages: u64) -> Record {
        let n = Self::entries(touch, bytes).saturating_mul(messages as usize);
        let mut kept = vec![u64::MAX; n];
        std::hint::black_box(&mut kept);
        kept.clear();
        Record {
            contender,
            touch,
            bytes,
            expected: messages,
            received: 0,
            kept,
            wrong_length: None,
        }
    }

    /// Entries kept per message.
    fn entries(touch: Touch, bytes: usize) -> usize {
        let pages = (bytes / 8).div_ceil(WPP);
        match touch {
            Touch::Word => pages,
            Touch::All => 2 * pages,
        }
    }

    /// The contender whose messages these are.
    pub fn contender(&self) -> &'static str {
        self.contender
    }

    /// Messages touched so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Messages expected.
    pub fn expected(&self) -> u64 {
        self.expected
    }

    /// Count a message of `len` bytes in; false (its entries kept as zeros, the length noted)
    /// if that is not the length expected.
    fn begin(&mut self, len: usize) -> bool {
        self.received += 1;
        if len / 8 == self.bytes / 8 {
            return true;
        }
        if self.wrong_length.is_none() {
            self.wrong_length = Some((self.received - 1, len));
        }
        let n = Self::entries(self.touch, self.bytes);
        self.kept.extend(std::iter::repeat_n(0, n));
        false
    }

    /// Touch the next message, in shared memory (an fbuf, a mapped memfd), keeping what was
    /// read.
    pub fn words(&mut self, words: &[AtomicU64]) {
        if !self.begin(words.len() * 8) {
            return;
        }
        match self.touch {
            Touch::Word => {
                for w in words.iter().step_by(WPP) {
                    self.kept.push(w.load(Relaxed));
                }
            }
            Touch::All => {
                for page in words.chunks(WPP) {
                    let rest = page[1..]
                        .iter()
                        .fold(0u64, |a, w| a.wrapping_add(w.load(Relaxed)));
                    self.kept.push(page[0].load(Relaxed));
                    self.kept.push(rest);
                }
            }
        }
    }

    /// Touch the next message, of plain words (one per 8 bytes of the message).
    pub fn plain_words(&mut self, words: &[u64]) {
        if !self.begin(words.len() * 8) {
            return;
        }
        match self.touch {
            Touch::Word => {
                for w in words.iter().step_by(WPP) {
                    self.kept.push(*w);
                }
            }
            Touch::All => {
                for page in words.chunks(WPP) {
                    let rest = page[1..].iter().fold(0u64, |a, w| a.wrapping_add(*w));
                    self.kept.push(page[0]);
                    self.kept.push(rest);
                }
            }
        }
    }

    /// Touch the next message, in private memory (a copy's buffer).
    pub fn bytes(&mut self, buf: &[u8]) {
        if !self.begin(buf.len()) {
            return;
        }
        let word = |b: &[u8]| u64::from_ne_bytes(b.try_into().expect("8 bytes"));
        let buf = &buf[..buf.len() / 8 * 8];
        match self.touch {
            Touch::Word => {
                for page in buf.chunks(PS) {
                    self.kept.push(word(&page[..8]));
                }
            }
            Touch::All => {
                for page in buf.chunks(PS) {
                    let rest = page[8..]
                        .chunks_exact(8)
                        .fold(0u64, |a, w| a.wrapping_add(word(w)));
                    self.kept.push(word(&page[..8]));
                    self.kept.push(rest);
                }
            }
        }
    }

    /// Keep the next message's stamps, read by the caller one per page (touching one word
    /// per page; with [`Touch::All`] the pages' sums are kept as zeros, and do not check).
    pub fn stamps(&mut self, stamps: impl ExactSizeIterator<Item = u64>) {
        if !self.begin(stamps.len() * PS) {
            return;
        }
        for s in stamps {
            self.kept.push(s);
            if self.touch == Touch::All {
                self.kept.push(0);
            }
        }
    }

    /// Compare what was kept with what the originator wrote: every page's stamp, every page's
    /// sum when every byte was touched, every message's length, and the number of messages.
    /// The first difference, in stream order, names the contender, the message and the page.
    pub fn check(&self) -> Result<(), Mismatch> {
        let contender = self.contender;
        let per = Self::entries(self.touch, self.bytes);
        let words = self.bytes / 8;
        for (m, kept) in self.kept.chunks(per.max(1)).enumerate() {
            let message = m as u64;
            if let Some((at, len)) = self.wrong_length
                && at == message
            {
                return Err(Mismatch::Length {
                    contender,
                    message,
                    len,
                    expected: self.bytes,
                });
            }
            let pages: Box<dyn Iterator<Item = (u64, Option<u64>)>> = match self.touch {
                Touch::Word => Box::new(kept.iter().map(|w| (*w, None))),
                Touch::All => Box::new(kept.chunks_exact(2).map(|e| (e[0], Some(e[1])))),
            };
            for (page, (read, sum)) in pages.enumerate() {
                let expected = stamp(message, page);
                if read != expected {
                    return Err(Mismatch::Stamp {
                        contender,
                        message,
                        page,
                        read,
                        expected,
                    });
                }
                let Some(sum) = sum else { continue };
                let expected = page_sum(message, (words - page * WPP).min(WPP));
                if sum != expected {
                    return Err(Mismatch::Data {
                        contender,
                        message,
                        page,
                        sum,
                        expected,
                    });
                }
            }
        }
        if self.received != self.expected {
            return Err(Mismatch::Count {
                contender,
                received: self.received,
                expected: self.expected,
            });
        }
        Ok(())
    }
}

/// A message that did not arrive as it was sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// A page's stamp is not the one written there: a lost, repeated, reordered, stale or
    /// corrupted message, or a page out of place.
    Stamp {
        /// The contender.
        contender: &'static str,
        /// The message, counted from 0 over the stream.
        message: u64,
        /// The page of the message.
        page: usize,
        /// The word read.
        read: u64,
        /// The stamp written.
        expected: u64,
    },
    /// The words after a page's stamp do not sum to what was written (every byte touched):
    /// data corrupted.
    Data {
        /// The contender.
        contender: &'static str,
        /// The message.
        message: u64,
        /// The page of the message.
        page: usize,
        /// Their sum as read.
        sum: u64,
        /// Their sum as written.
        expected: u64,
    },
    /// A message of the wrong length.
    Length {
        /// The contender.
        contender: &'static str,
        /// The message.
        message: u64,
        /// Its length (bytes).
        len: usize,
        /// The length sent (bytes).
        expected: usize,
    },
    /// Not as many messages as were sent.
    Count {
        /// The contender.
        contender: &'static str,
        /// Messages received.
        received: u64,
        /// Messages sent.
        expected: u64,
    },
}

impl Mismatch {
    /// The contender that delivered the message.
    pub fn contender(&self) -> &'static str {
        match self {
            Mismatch::Stamp { contender, .. }
            | Mismatch::Data { contender, .. }
            | Mismatch::Length { contender, .. }
            | Mismatch::Count { contender, .. } => contender,
        }
    }
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Mismatch::Stamp {
                contender,
                message,
                page,
                read,
                expected,
            } => write!(
                f,
                "{contender}: message {message}, page {page}: read stamp {read:#x}, expected {expected:#x} (a lost, repeated, reordered or corrupted message)"
            ),
            Mismatch::Data {
                contender,
                message,
                page,
                sum,
                expected,
            } => write!(
                f,
                "{contender}: message {message}, page {page}: the words after the stamp sum to {sum:#x}, expected {expected:#x} (corrupted data)"
            ),
            Mismatch::Length {
                contender,
                message,
                len,
                expected,
            } => write!(
                f,
                "{contender}: message {message} is {len} bytes long, {expected} were sent"
            ),
            Mismatch::Count {
                contender,
                received,
                expected,
            } if received < expected => write!(
                f,
                "{contender}: {received} messages arrived of {expected} (lost messages)"
            ),
            Mismatch::Count {
                contender,
                received,
                expected,
            } => write!(
                f,
                "{contender}: {received} messages arrived, {expected} were sent"
            ),
        }
    }
}

impl std::error::Error for Mismatch {}

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

/// A receiving process's standard error, read as it comes (so that the process never blocks
/// on a full pipe) and quoted if the process fails.
#[derive(Debug)]
pub struct Said(Option<std::thread::JoinHandle<String>>);

impl Said {
    /// Start reading `child`'s standard error, if it was piped (else there is nothing to say).
    pub fn collect(child: &mut Child) -> Said {
        Said(child.stderr.take().map(|mut e| {
            std::thread::spawn(move || {
                let mut s = String::new();
                let _ = e.read_to_string(&mut s);
                s
            })
        }))
    }

    /// What it said, once it has ended: its last lines (without the `zcio: ` its errors start
    /// with), `; `-separated.
    pub fn text(self) -> String {
        let Some(h) = self.0 else {
            return String::new();
        };
        let s = h.join().unwrap_or_default();
        let lines: Vec<&str> = s
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| l.strip_prefix("zcio: ").unwrap_or(l))
            .collect();
        lines[lines.len().saturating_sub(4)..].join("; ")
    }
}

/// Wait for a receiving process that should be done: an error, with what it said, unless it
/// succeeded.
fn finish(mut child: Child, said: Said, who: &'static str) -> Result<(), BenchError> {
    let status: ExitStatus = child.wait()?;
    let said = said.text();
    if status.success() {
        Ok(())
    } else {
        Err(BenchError::Receiver {
            who,
            status: status.to_string(),
            said,
        })
    }
}

/// After the originator's error `e`: the socket shut, the receiver given 2 s to end (then
/// killed). Its own account where it failed (a receiver that found a message wrong says which
/// one), else `e`.
fn settle(
    mut child: Child,
    said: Said,
    who: &'static str,
    sock: &UnixStream,
    e: BenchError,
) -> BenchError {
    let _ = sock.shutdown(std::net::Shutdown::Both);
    let deadline = Instant::now() + std::time::Duration::from_secs(2);
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    match status {
        Some(s) if !s.success() => BenchError::Receiver {
            who,
            status: s.to_string(),
            said: said.text(),
        },
        _ => e,
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
    (chunk * quota / bytes.div_ceil(PS) / PS).max(1)
}

/// Messages the receiver of contender `c` takes in a run of `count` timed messages of `bytes`:
/// the fbuf runs' warm-up too.
pub fn messages(c: Contender, bytes: usize, count: usize) -> u64 {
    match c {
        Contender::Fbufs(_) | Contender::Forwarded => (warm_up(bytes) + count) as u64,
        _ => count as u64,
    }
}

fn check_run(bytes: usize, count: usize) -> Result<(), BenchError> {
    if bytes == 0 || bytes % PS != 0 || count == 0 {
        return Err(BenchError::Argument(format!(
            "{bytes} bytes × {count} messages: the size must be a positive multiple of {PS} and the count positive"
        )));
    }
    Ok(())
}

/// Run `count` messages of `bytes` (a positive multiple of [`PAGE`]) from here to a receiver
/// started by `spawn_sink` (which gets the socket path to connect to and must start a process
/// running [`sink`] as a [`Role::Receiver`], or for [`Contender::Forwarded`] as its
/// [`Role::Server`]; its standard error piped, so that a failure can be quoted), spoiling a
/// message if `fault` says so.
///
/// The time per message is taken from the first timed message to the receiver's "done" (to
/// the last fbuf given back, for fbufs); the receiver checks every message after that, and a
/// message that did not arrive as sent fails the run with [`BenchError::Receiver`], quoting
/// the receiver's [`Mismatch`].
pub fn run(
    c: Contender,
    bytes: usize,
    count: usize,
    touch: Touch,
    fault: Option<Fault>,
    spawn_sink: &dyn Fn(&Path) -> std::io::Result<Child>,
) -> Result<Run, BenchError> {
    check_run(bytes, count)?;
    let dir = std::env::temp_dir().join(format!(
        "zcio-fbuf-bench-{}-{}",
        std::process::id(),
        Instant::now().elapsed().as_nanos() ^ bytes as u128
    ));
    std::fs::create_dir_all(&dir)?;
    let sock_path = dir.join("s");
    let listener = UnixListener::bind(&sock_path)?;
    let mut child = spawn_sink(&sock_path)?;
    let said = Said::collect(&mut child);
    let who = match c {
        Contender::Forwarded => "the forwarding server process",
        _ => "the receiver process",
    };
    let accepted = accept(&listener, &mut child);
    let _ = std::fs::remove_dir_all(&dir);
    let (mut sock, said) = connection(accepted, &mut child, who, said)?;
    match originate(c, bytes, count, touch, fault, &mut sock) {
        Ok(ns) => {
            finish(child, said, who)?;
            Ok(Run { ns_per_message: ns })
        }
        Err(e) => Err(settle(child, said, who, &sock, e)),
    }
}

enum AcceptError {
    /// The receiving process ended first.
    Ended(ExitStatus),
    /// Accepting failed, or nobody connected for a minute.
    Failed(std::io::Error),
}

/// The receiving process's connection, unless it ends first or a minute passes.
/// The connection `accept` got from `child`, or the error: `who` ended before connecting (with
/// what it said), or accepting failed (the child is then killed).
fn connection(
    accepted: Result<UnixStream, AcceptError>,
    child: &mut Child,
    who: &'static str,
    said: Said,
) -> Result<(UnixStream, Said), BenchError> {
    match accepted {
        Ok(s) => Ok((s, said)),
        Err(AcceptError::Ended(status)) => Err(BenchError::Receiver {
            who,
            status: format!("{status}, before connecting"),
            said: said.text(),
        }),
        Err(AcceptError::Failed(e)) => {
            let _ = child.kill();
            let _ = child.wait();
            Err(e.into())
        }
    }
}

fn accept(listener: &UnixListener, child: &mut Child) -> Result<UnixStream, AcceptError> {
    let failed = AcceptError::Failed;
    listener.set_nonblocking(true).map_err(failed)?;
    let t0 = Instant::now();
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).map_err(failed)?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(failed(e)),
        }
        if let Some(status) = child.try_wait().map_err(failed)? {
            return Err(AcceptError::Ended(status));
        }
        if t0.elapsed() > std::time::Duration::from_secs(60) {
            return Err(failed(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the receiving process did not connect within a minute",
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The originator's side of a run: the time per message (ns).
fn originate(
    c: Contender,
    bytes: usize,
    count: usize,
    touch: Touch,
    fault: Option<Fault>,
    sock: &mut UnixStream,
) -> Result<f64, BenchError> {
    let skip = |k: usize| fault == Some(Fault::Skip(k as u64));
    let spoil = |k: usize| fault == Some(Fault::Corrupt(k as u64));
    let t0;
    match c {
        Contender::Fbufs(_) | Contender::Forwarded => {
            let v = match c {
                Contender::Fbufs(v) => v,
                _ => Variant {
                    cached: true,
                    volatile: true,
                },
            };
            let (chunk, quota) = path_quota(bytes);
            let p = PathMemory::create(chunk, quota, v)?;
            let mut end = OriginatorEnd::new(Originator::new(p.fd(), p.info())?);
            end.add_receiver(sock.try_clone()?, p.receiver_fd()?.as_fd())?;
            // A warm-up pass fills the path once (untimed): the timed messages then run in the
            // steady state the paper measured, reusing cached fbufs whose pages exist.
            let warm = warm_up(bytes);
            let mut start = None;
            for i in 0..warm + count {
                if i == warm {
                    while end.originator.outstanding() > 0 && end.receivers_alive() > 0 {
                        end.poll(true)?;
                    }
                    start = Some(Instant::now());
                }
                let timed = i.checked_sub(warm);
                if timed.is_some_and(skip) {
                    continue;
                }
                let f = end.alloc_waiting(bytes)?;
                // The message is made in place, in the fbuf (the paper's originator writes its
                // data where it will be sent from).
                let words = end.originator.fbuf_words(&f);
                write_words(words, touch, i as u64);
                if timed.is_some_and(spoil) {
                    words[spoiled_word(words.len(), touch)].fetch_xor(1, Relaxed);
                }
                end.send(f, &[0])?;
            }
            // Every fbuf back means the receiver has touched them all (the link carries the
            // notices, so no separate "done"); the receiver checks them once the link closes.
            while end.originator.outstanding() > 0 && end.receivers_alive() > 0 {
                end.poll(true)?;
            }
            let ns = start.expect("count > 0").elapsed().as_nanos() as f64 / count as f64;
            // Closed in order: the receiver takes the goodbye for the end of the stream.
            let outstanding = end.originator.outstanding();
            end.close()?;
            sock.shutdown(std::net::Shutdown::Both)?;
            if outstanding > 0 {
                return Err(LinkError::PeerGone {
                    during: "the benchmark (fbufs not freed)",
                }
                .into());
            }
            return Ok(ns);
        }
        Contender::Remap => {
            t0 = Instant::now();
            for i in 0..count {
                if skip(i) {
                    continue;
                }
                let fd = zcio_vm::mapping::memfd("zcio-remap", bytes)?;
                let w = zcio_vm::shared::SharedWords::map(
                    fd.as_fd(),
                    0,
                    bytes,
                    zcio_vm::arena::random_address(bytes),
                    zcio_vm::protect::Access::ReadWrite,
                )?;
                let words = w.words(0, bytes);
                write_words(words, touch, i as u64);
                if spoil(i) {
                    words[spoiled_word(words.len(), touch)].fetch_xor(1, Relaxed);
                }
                drop(w);
                zcio_vm::wire::send_with_fds(
                    sock.as_fd(),
                    &(bytes as u64).to_le_bytes(),
                    &[fd.as_fd()],
                )?;
            }
        }
        Contender::UnixSocket | Contender::Pipe => {
            let pipe = if c == Contender::Pipe {
                let pipe = zcio_vm::wire::Pipe::new(bytes.clamp(PS, 1 << 20))?;
                zcio_vm::wire::send_with_fds(sock.as_fd(), b"p", &[pipe.rx.as_fd()])?;
                Some(pipe.tx)
            } else {
                None
            };
            // The sender's buffer, written and copied out once per message.
            let mut page = vec![0u8; bytes];
            t0 = Instant::now();
            for i in 0..count {
                if skip(i) {
                    continue;
                }
                write_bytes(&mut page, touch, i as u64);
                if spoil(i) {
                    let k = spoiled_word(bytes / 8, touch);
                    page[8 * k] ^= 1;
                }
                match &pipe {
                    Some(tx) => zcio_vm::wire::write_all(tx.as_fd(), &page)?,
                    None => sock.write_all(&page)?,
                }
            }
            // A receiver short of messages sees the end instead of waiting for more.
            drop(pipe);
        }
    }
    sock.shutdown(std::net::Shutdown::Write)?;
    // The receiver says when it has touched the last message (and checks them after).
    let mut done = [0u8; 1];
    if sock.read_exact(&mut done).is_err() || done != *b"d" {
        return Err(LinkError::PeerGone {
            during: "before the receiver had every message",
        }
        .into());
    }
    Ok(t0.elapsed().as_nanos() as f64 / count as f64)
}

/// What a receiving process of [`sink`] does.
pub enum Role<'a> {
    /// Take the messages, touch them, and check them once the clock has stopped.
    Receiver,
    /// For [`Contender::Forwarded`]: the forwarding server. It listens for the receiver,
    /// starts it with the function (given the socket path to connect to, it must start a
    /// process running [`sink`] for the same contender as a [`Role::Receiver`], its standard
    /// error piped), and forwards every reference to it without touching the data.
    Server(&'a dyn Fn(&Path) -> std::io::Result<Child>),
}

/// The receiving process: connect to `sock_path`, take `count` timed messages of `bytes`
/// passed the `c` way (and the fbuf runs' warm-up), touch each, say when done, then check
/// every message ([`Record::check`]): a message that did not arrive as it was sent is a
/// [`BenchError::Mismatch`] naming the contender, the message and the page.
pub fn sink(
    sock_path: &Path,
    c: Contender,
    role: Role<'_>,
    bytes: usize,
    count: usize,
    touch: Touch,
) -> Result<(), BenchError> {
    check_run(bytes, count)?;
    // Allocated before the stream, so that keeping costs no page fault in it (a server keeps
    // nothing).
    let kept = match role {
        Role::Receiver => messages(c, bytes, count),
        Role::Server(_) => 0,
    };
    let mut rec = Record::new(c.name(), touch, bytes, kept);
    let sock = UnixStream::connect(sock_path)?;
    match (c, role) {
        (Contender::Forwarded, Role::Server(spawn_next)) => {
            let up = ReceiverEnd::connect(sock)?;
            let down_path =
                std::env::temp_dir().join(format!("zcio-fbuf-fwd-{}.sock", std::process::id()));
            let _ = std::fs::remove_file(&down_path);
            let listener = UnixListener::bind(&down_path)?;
            let mut child = spawn_next(&down_path)?;
            let said = Said::collect(&mut child);
            let who = "the receiver behind the forwarding server";
            let accepted = accept(&listener, &mut child);
            let _ = std::fs::remove_file(&down_path);
            let (down, said) = connection(accepted, &mut child, who, said)?;
            let mut f = crate::link::Forwarder::new(up, down)?;
            f.run()?;
            drop(f);
            finish(child, said, who)
        }
        (_, Role::Server(_)) => Err(BenchError::Argument(format!(
            "{}: only {} has a forwarding server",
            c.name(),
            Contender::Forwarded.name()
        ))),
        (Contender::Fbufs(_) | Contender::Forwarded, Role::Receiver) => {
            // Warm-up and timed messages alike, until the originator closes the link.
            let mut rx = ReceiverEnd::connect(sock.try_clone()?)?;
            while let Some(r) = rx.recv()? {
                let words = rx
                    .receiver
                    .words(r.addr, r.len.next_multiple_of(8))
                    .ok_or_else(|| LinkError::Protocol(format!("{r:?} is not readable here")))?;
                rec.words(words);
                rx.free(r)?;
            }
            rx.flush()?;
            // The originator has every fbuf back, its clock stopped: check.
            rec.check()?;
            Ok(())
        }
        (Contender::Remap, Role::Receiver) => {
            while rec.received() < rec.expected() {
                let mut len = [0u8; 8];
                let (n, mut fds) = zcio_vm::wire::recv_with_fds(sock.as_fd(), &mut len)?;
                if n == 0 && fds.is_empty() {
                    break; // the originator sent no more
                }
                if n != 8 || fds.len() != 1 {
                    return Err(LinkError::Protocol("remap: bad message".into()).into());
                }
                let fd = fds.pop().expect("one");
                let len = u64::from_le_bytes(len) as usize;
                let w = zcio_vm::shared::SharedWords::map(
                    fd.as_fd(),
                    0,
                    len,
                    zcio_vm::arena::random_address(len),
                    zcio_vm::protect::Access::ReadOnly,
                )?;
                rec.words(w.words(0, len / 8 * 8));
            }
            done_then_check(&sock, &rec)
        }
        (Contender::UnixSocket | Contender::Pipe, Role::Receiver) => {
            let mut from: Box<dyn Read> = if c == Contender::Pipe {
                let mut b = [0u8; 1];
                let (_, mut fds) = zcio_vm::wire::recv_with_fds(sock.as_fd(), &mut b)?;
                let rx = fds
                    .pop()
                    .ok_or_else(|| LinkError::Protocol("pipe not passed".into()))?;
                Box::new(std::fs::File::from(rx))
            } else {
                Box::new(sock.try_clone()?)
            };
            let mut buf = vec![0u8; bytes];
            while rec.received() < rec.expected() {
                match from.read_exact(&mut buf) {
                    Ok(()) => rec.bytes(&buf),
                    // The originator sent no more.
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(e.into()),
                }
            }
            done_then_check(&sock, &rec)
        }
    }
}

/// Say "done" if every message came (the originator's clock stops there), then check them.
fn done_then_check(mut sock: &UnixStream, rec: &Record) -> Result<(), BenchError> {
    if rec.received() == rec.expected() {
        sock.write_all(b"d")?;
    }
    rec.check()?;
    Ok(())
}
