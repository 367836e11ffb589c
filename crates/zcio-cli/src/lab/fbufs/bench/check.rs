//! What a run checks once its clock has stopped: the stamps and fill the originator writes,
//! the [`Record`] a receiver keeps, and the [`Mismatch`] it reports.

use super::Touch;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;

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
pub(super) fn spoiled_word(words: usize, touch: Touch) -> usize {
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
/// use zcio_cli::lab::fbufs::bench::{Mismatch, Record, Touch, write_bytes};
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
        self.touch_words(words, |w| w.load(Relaxed));
    }

    /// Touch the next message, of plain words (one per 8 bytes of the message).
    pub fn plain_words(&mut self, words: &[u64]) {
        self.touch_words(words, |w| *w);
    }

    /// Touch the next message, of `words` each read with `load`, keeping what was read.
    fn touch_words<W>(&mut self, words: &[W], load: impl Fn(&W) -> u64) {
        if !self.begin(words.len() * 8) {
            return;
        }
        match self.touch {
            Touch::Word => {
                for w in words.iter().step_by(WPP) {
                    self.kept.push(load(w));
                }
            }
            Touch::All => {
                for page in words.chunks(WPP) {
                    let rest = page[1..].iter().fold(0u64, |a, w| a.wrapping_add(load(w)));
                    self.kept.push(load(&page[0]));
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
