//! `zcio bench channel`: zcio's channel API between two processes, against iceoryx2 and a Unix
//! stream socket doing the same job, message by message verified; and its part of the report's
//! Genie section.
//!
//! # The job
//!
//! A message of any length from 1 byte up starts in the sending process's own buffer (an
//! [`AppBuffer`] in 4 KiB pages, or in transparent huge pages for the `2m` granule) and ends in
//! a buffer the receiving process owns and may write (the same kind, made once per size and
//! granule and reused by every run). Every contender does exactly that:
//!
//! - `zcio-<semantics>`: [`Channel::send`] of the sender's buffer under the semantics, and
//!   [`Channel::recv`] into the receiver's buffer (memory network, early demultiplexing, the
//!   calibrated thresholds of this machine's profile). The listener sets the link's window to
//!   the message length at least (16 MiB at least, 256 MiB at most), so that a send returns
//!   without waiting for the receiver.
//! - `zcio-loan`: the same channel, each message a loan
//!   ([`zcio_genie::memnet::loan`]): the sender takes a fresh memory file of the message's
//!   length ([`Loan::with_granule`](zcio_genie::memnet::loan::Loan::with_granule), in 2 MiB
//!   pages for `2m` from 2 MiB up, else 4 KiB pages: a smaller loan in 2 MiB pages would hold a
//!   whole one, and thousands of them gigabytes), writes the message into it in place and
//!   gives it up with `Channel::send_loan` (sealed, its descriptor passed); the receiver maps
//!   it privately with `Channel::recv_loan` and reads a byte of every 4 KiB page inside its
//!   receive (the mapping is lazy: the first touch of each page faults it in, as the others'
//!   receives write every page). No byte is copied, and the receiver's message is its own to
//!   write (a page written becomes its copy). Taking a loan is inside the clock, writing it outside: a sealed loan is never reused, so every message needs a fresh one (the
//!   others' buffers are made once, before the run); it is added to the message's latency,
//!   round trip and stream time, and also given apart ([`Row::make_ns`]). A received loan stays mapped until checked, and goes
//!   then, outside the times taken; one that came not mapped (received into a buffer made
//!   for it) is counted and its row's path says so.
//! - `iceoryx2`: publish-subscribe of a `[u8]` slice sized for the message (the publisher's
//!   `initial_max_slice_len`), page-aligned payloads, no loss (`RetryUntilDelivered`, a queue
//!   of two); the sender loans a sample, copies its buffer into it, sends it and notifies an
//!   event service (as [`crate::lab::fbufs::iceoryx`] does); the receiver, woken by the
//!   event, takes the sample and copies it into its own buffer.
//! - `unix`: a Unix stream socket with its default buffers: one `writev` of an 8-byte length
//!   and the buffer (more only where the socket takes part of them), one `readv` of both into
//!   a length word and the receiver's buffer (which, as at every contender, is the message's
//!   length; the length read must say so).
//!
//! The receiving process is the bench itself; the sender is this executable started again,
//! once per run (the hidden `zcio channel-sender`), told what to do on its command line and
//! paced over a control socket ([`sender`] has the protocol).
//!
//! # What a run measures
//!
//! Each process has a [`Ring`] of `n` buffers of the message size (the receiver's made once
//! per size and granule; every page touched before use): from 4 KiB up an [`AppBuffer`] each,
//! below 4 KiB slots of one [`AppBuffer`] (64-byte aligned), as an application keeps small
//! messages. `n`, the streamed messages of a run ([`messages`]), is [`VOLUME`]'s worth within
//! 3 and 2000 from 4 KiB up; below 4 KiB, where a message takes a microsecond or less, up to
//! 2000 × 4 KiB / size of them (16384 at most: 16384 of 64 bytes, 8000 of 1 KiB), so that the
//! stream lasts milliseconds while the ring holds 8 MiB at most. `s`, the messages sent one at
//! a time and the ping-pong's round trips ([`one_at_a_time`]), is `n`, 2000 at most: those go
//! one by one at the control socket's pace.
//!
//! A run streams `W` warm-up messages (a zcio window's worth, 3 to `n`: pools, pipes and
//! shared memory made and touched; iceoryx2 first writes and reads every sample of its pool
//! once, as [`crate::lab::fbufs::iceoryx`] does), then sends `s` messages one at a time, then
//! `s` ping-pong round trips, then streams `n`.
//! Message `i` (counted over the run) carries [`fill`]`(i)`: every 8-byte word depends on the
//! message index and its offset (a tail shorter than a word takes its word's first bytes).
//! The receiver checks every byte of every message, warm-up included, and the sender every
//! reply ([`check`]), always outside the times taken.
//!
//! - **Latency** (one at a time, through the first buffer at both ends): the sender waits for
//!   the receiver's go-ahead (the previous message checked), writes message `i` into its buffer
//!   (for zcio once the previous message's ticket has completed), reads `CLOCK_MONOTONIC` and
//!   sends; the receiver reads `CLOCK_MONOTONIC` when the message is in its buffer. Both
//!   processes read the one clock of this host, so the difference is the message's one-way
//!   time: no return leg.
//! - **Ping-pong** (one round trip at a time, through the first buffer at both ends): at the
//!   receiver's go-ahead the sender writes message `i` into its buffer, reads the clock, sends
//!   it and waits for the reply; the receiver takes the message into its buffer and at once
//!   sends a 1-byte reply (written before the go-ahead: [`reply_message`]`(i)`) over the same
//!   transport the other way: for zcio the same [`Channel`] under the same semantics; for the
//!   Unix socket the same socket, framed alike; for iceoryx2, whose publish-subscribe goes
//!   one way, a second publish-subscribe service and event service the other way, used as the
//!   first (the reply loaned, written, sent and notified; the sender woken by the event takes
//!   it and copies it out). The sender reads the clock once the reply is in its own buffer
//!   and checks it; the receiver checks the message after replying. The ping-pong latency is
//!   half the median round trip: a one-way time that needs no shared clock, and holds both
//!   directions' wake-ups.
//! - **Send time**: the sender's time inside its send (for zcio the [`Channel::send`] call;
//!   for iceoryx2 loan, copy and send, not the notification after them, whose system call
//!   may return only after the woken receiver has had the CPU; for the Unix socket the
//!   `writev`), in the one-at-a-time messages, where the receiver is waiting.
//! - **Throughput** (streamed): the sender writes the `n` messages into its ring first, then,
//!   at the receiver's go-ahead, sends them back to back, waiting only as its transport makes
//!   it (zcio's window, iceoryx2's queue, the socket's buffer); the receiver takes them into
//!   its ring back to back and checks them afterwards. Throughput is the `n` messages' bytes
//!   over the time from the first send's start to the last message's receipt.
//! - **CPU time** (streamed): the CPU time (`CLOCK_PROCESS_CPUTIME_ID`: user and system time
//!   of the whole process, as `getrusage` counts it, to the nanosecond) of both processes over
//!   the stream (the sender's from the go-ahead to the last message's completion, the
//!   receiver's from the go-ahead to the last receipt), per message. No data is written or
//!   checked in it. Every contender waits its own default way (zcio spins up to 50 µs before
//!   sleeping; iceoryx2 blocks in its listener; the socket blocks).
//!
//! The two processes are pinned to two CPUs (the first two the bench may run on), one each, so
//! that a send that wakes the receiver is not preempted by it (then the send's time would hold
//! the receiver's work) and each process's caches stay its own.
//!
//! Per contender, size and granule the row gives the median over rounds of each round's median
//! latency, ping-pong latency and send time and of each round's throughput and CPU time, with
//! the lowest and highest round. Rounds rotate the contenders' order, so that drift in the
//! machine's state hits all alike. A contender that fails at a size (iceoryx2 unable to make a
//! sample that large, say) keeps its row, with the reason, and the bench fails at its end:
//! nothing is skipped silently.

mod receiver;
pub mod render;
pub mod report;
pub mod sender;

use crate::error::Context;
use crate::lab::genie::measure::Progress;
use crate::report::preset::Preset;
use crate::transfer::Res;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use zcio_genie::channel::Channel;
use zcio_genie::semantics::Allocation;
use zcio_genie::{AppBuffer, Semantics};

pub use sender::SenderArgs;

/// How long either process waits for the other without progress before it gives up.
pub const STALL: Duration = Duration::from_secs(60);

/// The largest window a link is given (bytes).
pub const MAX_WINDOW: usize = 256 << 20;

/// Bytes a run's streamed messages add up to, by default (within [`messages`]' bounds).
pub const VOLUME: usize = 128 << 20;

/// iceoryx2's subscriber queue: the samples sent and not yet taken.
pub const ICEORYX_QUEUE: usize = 2;

/// The index of the `k`th message of iceoryx2's pool warm-up (outside a run's count, checked
/// like every other).
pub fn pool_message(k: usize) -> u64 {
    u64::MAX - 64 + k as u64
}

/// Fewest and most streamed messages of a run from [`SMALL`] up, by default; also the most
/// messages one at a time and round trips of a run ([`one_at_a_time`]).
pub const MESSAGES: (usize, usize) = (3, 2000);

/// Below this size a message is small: slots of one buffer ([`Ring`]), and more of them
/// streamed ([`messages`]).
pub const SMALL: usize = 4096;

/// The most streamed messages of a run below [`SMALL`].
pub const SMALL_MESSAGES: usize = 16384;

/// Where a ring's small messages start: each slot on a cache line of its own.
const SLOT_ALIGN: usize = 64;

/// The index of the reply to message `i` of a ping-pong (the first byte of its
/// [`fill`], checked by the sender).
pub fn reply_message(i: u64) -> u64 {
    (1 << 62) + i
}

/// The granule of the application buffers at both ends.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema, clap::ValueEnum,
)]
pub enum Granule {
    /// 4 KiB pages ([`AppBuffer::new`]).
    #[serde(rename = "4k")]
    #[value(name = "4k")]
    Base,
    /// Transparent huge pages, 2 MiB-aligned ([`AppBuffer::huge`]).
    #[serde(rename = "2m")]
    #[value(name = "2m")]
    Huge,
}

impl Granule {
    /// `4k` or `2m`.
    pub fn name(self) -> &'static str {
        match self {
            Granule::Base => "4k",
            Granule::Huge => "2m",
        }
    }

    /// A buffer of `len` bytes at this granule.
    pub fn buffer(self, len: usize) -> Res<AppBuffer> {
        Ok(match self {
            Granule::Base => AppBuffer::new(len)?,
            Granule::Huge => AppBuffer::huge(len)?,
        })
    }
}

impl std::fmt::Display for Granule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Granule {
    type Err = String;
    fn from_str(s: &str) -> Result<Granule, String> {
        match s {
            "4k" => Ok(Granule::Base),
            "2m" => Ok(Granule::Huge),
            _ => Err(format!("unknown granule `{s}` (one of: 4k, 2m)")),
        }
    }
}

/// The contenders besides zcio's buffer semantics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Baseline {
    /// zcio's loans: each message a fresh memory file the sender fills, sealed and passed
    /// whole, mapped by the receiver (no byte copied).
    ZcioLoan,
    /// zcio's volatile loans between ends that trust each other: memory files reused from
    /// message to message, lent to the receiver, mapped in place at both ends and given back
    /// (no byte copied, no fresh page once a file has made a trip).
    ZcioLoanVolatile,
    /// iceoryx2 publish-subscribe.
    Iceoryx2,
    /// A Unix stream socket.
    Unix,
}

/// One contender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    /// zcio's [`Channel`] under a semantics.
    Zcio(Semantics),
    /// zcio's [`Channel`], each message a sealed loan ([`zcio_genie::memnet::loan`]).
    Loan,
    /// zcio's [`Channel`] between ends that trust each other, each message a volatile loan.
    VolatileLoan,
    /// iceoryx2 publish-subscribe.
    Iceoryx2,
    /// A Unix stream socket.
    Unix,
}

impl Contender {
    /// `zcio-<semantics>`, `zcio-loan`, `iceoryx2` or `unix`.
    pub fn name(self) -> String {
        match self {
            Contender::Zcio(s) => format!("zcio-{}", s.name()),
            Contender::Loan => "zcio-loan".into(),
            Contender::VolatileLoan => "zcio-loan-volatile".into(),
            Contender::Iceoryx2 => "iceoryx2".into(),
            Contender::Unix => "unix".into(),
        }
    }

    /// Whether its messages are loans.
    pub fn is_loan(self) -> bool {
        matches!(self, Contender::Loan | Contender::VolatileLoan)
    }

    /// The contender named `s` ([`Contender::name`]).
    pub fn parse(s: &str) -> Res<Contender> {
        match s {
            "iceoryx2" => Ok(Contender::Iceoryx2),
            "zcio-loan" => Ok(Contender::Loan),
            "zcio-loan-volatile" => Ok(Contender::VolatileLoan),
            "unix" => Ok(Contender::Unix),
            _ => match s.strip_prefix("zcio-") {
                Some(sem) => Ok(Contender::Zcio(sem.parse::<Semantics>()?)),
                None => Err(format!(
                    "unknown contender `{s}` (zcio-<semantics>, zcio-loan, zcio-loan-volatile, iceoryx2 or unix)"
                )
                .into()),
            },
        }
    }
}

/// Arguments of `zcio bench channel`.
#[derive(clap::Args, Debug, Clone)]
pub struct ChannelArgs {
    /// Message sizes in bytes, comma-separated: any from 1 byte up (to 1 GiB).
    #[arg(long, value_delimiter = ',', default_values_t = DEFAULT_SIZES)]
    pub bytes: Vec<usize>,
    /// Granules of the application buffers at both ends, comma-separated: `4k` (4 KiB pages)
    /// and `2m` (transparent huge pages).
    #[arg(long, value_delimiter = ',', default_values_t = [Granule::Base, Granule::Huge])]
    pub granules: Vec<Granule>,
    /// zcio's contenders: the semantics of the channel's calls, comma-separated (those whose
    /// application allocates the buffers: copy, emulated-copy, share, emulated-share).
    #[arg(long, value_delimiter = ',', default_values_t = [Semantics::Copy, Semantics::EmulatedCopy])]
    pub semantics: Vec<Semantics>,
    /// The other contenders, comma-separated: `zcio-loan` (zcio's channel, each message a
    /// loan: a fresh memory file the sender fills in place and sends with `send_loan`, sealed
    /// and passed without a copy, mapped by the receiver with `recv_loan`, which reads a byte
    /// of every 4 KiB page inside its receive; loans in 2 MiB pages for `2m` from 2 MiB up,
    /// else 4 KiB pages; taking a loan is timed and added to its message's latency, round trip and
    /// stream time, since a sealed loan is never reused), `zcio-loan-volatile` (the same
    /// between ends that trust each other: memory files reused from message to message, lent
    /// to the receiver, mapped in place and given back; the warm-up streams the whole ring so
    /// that the files are made and lent once), `iceoryx2`, `unix`.
    #[arg(long, value_delimiter = ',', default_values = ["zcio-loan", "zcio-loan-volatile", "iceoryx2", "unix"])]
    pub baselines: Vec<Baseline>,
    /// Rounds (each runs every contender once, in an order that rotates).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Streamed messages of a run (and messages one at a time, and ping-pong round trips: as
    /// many, 2000 at most). Default by size: 128 MiB of them, 3 to 2000 from 4 KiB up, up to
    /// 16384 below (2000 × 4 KiB / size).
    #[arg(long)]
    pub messages: Option<usize>,
    /// Print JSON (`{"rows": [...], ...}`) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The sizes `zcio bench channel` measures by default, and the report's full preset: small,
/// medium and large messages.
pub const DEFAULT_SIZES: [usize; 8] = [
    64,
    4096,
    64 << 10,
    256 << 10,
    1 << 20,
    16 << 20,
    64 << 20,
    256 << 20,
];

/// What a bench (or the report) measures: sizes, granules, contenders, rounds.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Plan {
    /// Message sizes (bytes).
    pub sizes: Vec<usize>,
    /// Granules of the application buffers.
    pub granules: Vec<Granule>,
    /// The contenders, by name (`zcio-copy`, `zcio-emulated-copy`, `zcio-loan`, `iceoryx2`,
    /// `unix`).
    pub contenders: Vec<String>,
    /// Rounds.
    pub rounds: usize,
    /// Streamed messages of a run, where given (else by size: [`messages`]).
    pub messages: Option<usize>,
}

impl Plan {
    /// The report's plan at `preset`: two small sizes and a few around where the granules
    /// differ, fewer rounds than the bench's default (the whole sweep, [`DEFAULT_SIZES`], is
    /// the full preset's).
    pub fn of(preset: Preset) -> Plan {
        let contenders = default_contenders();
        match preset {
            Preset::Smoke => Plan {
                sizes: vec![64 << 10, 2 << 20],
                granules: vec![Granule::Base, Granule::Huge],
                contenders,
                rounds: 1,
                messages: Some(4),
            },
            Preset::Quick => Plan {
                sizes: vec![64, 4096, 64 << 10, 16 << 20, 64 << 20],
                granules: vec![Granule::Base, Granule::Huge],
                contenders,
                rounds: 2,
                messages: None,
            },
            Preset::Full => Plan {
                sizes: DEFAULT_SIZES.to_vec(),
                granules: vec![Granule::Base, Granule::Huge],
                contenders,
                rounds: 3,
                messages: None,
            },
        }
    }

    /// The plan of `zcio bench channel`'s arguments, or why there is none: every size one a
    /// channel carries, semantics the channel's buffer calls take, something to run.
    pub fn of_args(a: &ChannelArgs) -> Res<Plan> {
        if a.rounds == 0 {
            return Err("invalid argument `--rounds`: 0: at least one round".into());
        }
        if a.messages == Some(0) {
            return Err("invalid argument `--messages`: 0: at least one message".into());
        }
        if a.bytes.is_empty() {
            return Err("invalid argument `--bytes`: none: at least one size".into());
        }
        if a.granules.is_empty() {
            return Err("invalid argument `--granules`: none: at least one granule".into());
        }
        for &b in &a.bytes {
            crate::transfer::check_bytes("--bytes", b)?;
        }
        for s in &a.semantics {
            if s.allocation() == Allocation::System {
                return Err(format!(
                    "invalid argument `--semantics {s}`: the channel's buffer calls take copy, emulated-copy, share or emulated-share ({s} passes regions)"
                )
                .into());
            }
        }
        let mut contenders: Vec<String> = a
            .semantics
            .iter()
            .map(|s| Contender::Zcio(*s).name())
            .collect();
        for b in &a.baselines {
            contenders.push(
                match b {
                    Baseline::ZcioLoan => Contender::Loan,
                    Baseline::ZcioLoanVolatile => Contender::VolatileLoan,
                    Baseline::Iceoryx2 => Contender::Iceoryx2,
                    Baseline::Unix => Contender::Unix,
                }
                .name(),
            );
        }
        contenders.dedup();
        if contenders.is_empty() {
            return Err("invalid arguments `--semantics`, `--baselines`: no contender".into());
        }
        let mut granules = a.granules.clone();
        granules.dedup();
        Ok(Plan {
            sizes: a.bytes.clone(),
            granules,
            contenders,
            rounds: a.rounds,
            messages: a.messages,
        })
    }

    /// Progress units of [`measure`]: one per run.
    pub fn units(&self) -> u64 {
        (self.sizes.len() * self.granules.len() * self.rounds * self.contenders.len()) as u64
    }

    /// Streamed messages of a run at `bytes`.
    pub fn messages(&self, bytes: usize) -> usize {
        self.messages.unwrap_or_else(|| messages(bytes))
    }

    /// Messages one at a time, and ping-pong round trips, of a run at `bytes`.
    pub fn one_at_a_time(&self, bytes: usize) -> usize {
        one_at_a_time(self.messages(bytes))
    }
}

/// `zcio-copy`, `zcio-emulated-copy`, `zcio-loan`, `zcio-loan-volatile`, `iceoryx2`, `unix`.
fn default_contenders() -> Vec<String> {
    [
        Contender::Zcio(Semantics::Copy),
        Contender::Zcio(Semantics::EmulatedCopy),
        Contender::Loan,
        Contender::VolatileLoan,
        Contender::Iceoryx2,
        Contender::Unix,
    ]
    .iter()
    .map(|c| c.name())
    .collect()
}

/// Streamed messages of a run at `bytes` by default: [`VOLUME`] of them, 3 at least; from
/// [`SMALL`] up 2000 at most ([`MESSAGES`]), below it `2000 × SMALL / bytes` at most (more
/// of the shorter messages, so that the stream lasts milliseconds), [`SMALL_MESSAGES`] at
/// most: a ring of small messages holds 2000 × 4 KiB (8 MiB) at most.
pub fn messages(bytes: usize) -> usize {
    let bytes = bytes.max(1);
    let most = (MESSAGES.1 * SMALL / bytes).clamp(MESSAGES.1, SMALL_MESSAGES);
    (VOLUME / bytes).clamp(MESSAGES.0, most)
}

/// Messages one at a time, and ping-pong round trips, of a run of `n` streamed messages: as
/// many, [`MESSAGES`]`.1` at most (each waits for the control socket's go-ahead).
pub fn one_at_a_time(n: usize) -> usize {
    n.min(MESSAGES.1)
}

/// Warm-up messages of a run at `bytes` of `n` messages per half: a zcio window's worth (so
/// that the pools a stream fills are made before the clock runs), 3 at least, `n` at most.
pub fn warm_up(bytes: usize, n: usize) -> usize {
    (window(bytes) / bytes.max(1)).max(3).min(n)
}

/// A process's ring: `n` buffers of one message size at one granule, every page touched.
///
/// From [`SMALL`] up each message has an [`AppBuffer`] of its own (its own pages, as a large
/// message has); below, the messages are slots of one [`AppBuffer`], each on a cache line of
/// its own (in huge pages for `2m`: the buffer is then 2 MiB at least, so that the kernel can
/// back it with one).
pub struct Ring {
    bufs: Vec<AppBuffer>,
    bytes: usize,
    n: usize,
    /// Bytes from a slot's start to the next one's, where the slots share a buffer.
    stride: Option<usize>,
}

impl Ring {
    /// `n` buffers of `bytes` at granule `g`.
    pub fn new(g: Granule, bytes: usize, n: usize) -> Res<Ring> {
        if bytes == 0 || n == 0 {
            return Err(format!("a ring of {n} buffers of {bytes} bytes: 1 of 1 at least").into());
        }
        let (bufs, stride) = if bytes < SMALL {
            let stride = bytes.next_multiple_of(SLOT_ALIGN);
            let mut len = stride
                .checked_mul(n)
                .ok_or_else(|| format!("{n} slots of {stride} bytes: too many"))?;
            if g == Granule::Huge {
                len = len.next_multiple_of(2 << 20);
            }
            (vec![g.buffer(len)?], Some(stride))
        } else {
            ((0..n).map(|_| g.buffer(bytes)).collect::<Res<_>>()?, None)
        };
        let mut r = Ring {
            bufs,
            bytes,
            n,
            stride,
        };
        let ps = zcio_vm::page_size();
        for b in &mut r.bufs {
            for x in b.iter_mut().step_by(ps) {
                *x = 1;
            }
        }
        Ok(r)
    }

    /// Buffers in the ring.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Never: a ring has one buffer at least.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The message size.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Buffer `k`.
    pub fn slot(&self, k: usize) -> &[u8] {
        match self.stride {
            Some(s) => &self.bufs[0][k * s..k * s + self.bytes],
            None => &self.bufs[k],
        }
    }

    /// Buffer `k`, to write.
    pub fn slot_mut(&mut self, k: usize) -> &mut [u8] {
        match self.stride {
            Some(s) => &mut self.bufs[0][k * s..k * s + self.bytes],
            None => &mut self.bufs[k],
        }
    }

    /// The granule the ring's (first) buffer got: `4k`, `2m` or `mixed`.
    pub fn granule(&self) -> &'static str {
        zcio_genie::granule_of(&self.bufs[0]).name()
    }
}

/// The window a zcio link gets for messages of `bytes`: the message at least, the default
/// window at least, [`MAX_WINDOW`] at most.
pub fn window(bytes: usize) -> usize {
    bytes.clamp(zcio_genie::memnet::DEFAULT_WINDOW, MAX_WINDOW)
}

/// One contender at one size and granule.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Row {
    /// `zcio-copy`, `zcio-emulated-copy`, `zcio-loan`, `iceoryx2`, `unix`.
    pub contender: String,
    /// Message size.
    pub bytes: usize,
    /// Granule of the application buffers asked for.
    pub granule: Granule,
    /// Median over rounds of each round's median one-way latency (ns), messages one at a time:
    /// send start at the sender to the message in the receiver's buffer, `CLOCK_MONOTONIC` at
    /// both ends.
    pub latency_ns: Option<f64>,
    /// Lowest and highest round.
    pub latency_spread_ns: Option<[f64; 2]>,
    /// Median over rounds of each round's ping-pong latency (ns): half the median round trip of
    /// a message of this size and a 1-byte reply over the same transport, timed at the sender.
    pub pingpong_ns: Option<f64>,
    /// Lowest and highest round.
    pub pingpong_spread_ns: Option<[f64; 2]>,
    /// Median over rounds of each round's throughput, streamed (GB/s, 10⁹ bytes per second).
    pub throughput_gbps: Option<f64>,
    /// Lowest and highest round.
    pub throughput_spread_gbps: Option<[f64; 2]>,
    /// Median over rounds of each round's median time inside the send (ns).
    pub send_ns: Option<f64>,
    /// Lowest and highest round.
    pub send_spread_ns: Option<[f64; 2]>,
    /// Median over rounds of CPU time per streamed message, both processes (ns).
    pub cpu_ns: Option<f64>,
    /// Lowest and highest round.
    pub cpu_spread_ns: Option<[f64; 2]>,
    /// Every byte of every message of every round matched (false where a round did not run).
    pub verified: bool,
    /// Streamed messages of each run.
    pub messages: usize,
    /// Messages one at a time, and ping-pong round trips, of each run (0 in results saved
    /// before the ping-pong was measured).
    #[serde(default)]
    pub round_trips: usize,
    /// Rounds that ran.
    pub rounds: usize,
    /// Messages checked, warm-up and replies included, over all rounds.
    pub checked_messages: u64,
    /// The first message (or reply: [`reply_message`]) that differed, and its first differing
    /// byte, if any.
    pub first_mismatch: Option<(u64, usize)>,
    /// zcio: the link's window (bytes), as the endpoint reported it.
    pub window_bytes: Option<usize>,
    /// zcio: the path of the last message, as the library reported it at both ends; for
    /// zcio-loan, followed by how many messages came not mapped, if any did.
    pub path: Option<String>,
    /// zcio: the granule of the VM work, as the library reported it.
    pub vm_granule: Option<String>,
    /// The granule the receiver's buffer got (`4k`, `2m`, `mixed`): `4k` where huge pages
    /// could not be had.
    pub buffer_granule: String,
    /// Why a round did not run (or broke), if one did not: the row is then not verified.
    pub error: Option<String>,
    /// zcio-loan: median over rounds of each round's median time to take a message's loan
    /// (ns), a fresh memory file's pages allocated and mapped; also counted in the row's
    /// latency, round trip and throughput (a sealed loan is never reused, where the other
    /// contenders' buffers are made once, before the run).
    #[serde(default)]
    pub make_ns: Option<f64>,
}

/// Emulated copy against the others at one size and granule.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Ratio {
    /// Message size.
    pub bytes: usize,
    /// Granule.
    pub granule: Granule,
    /// zcio-emulated-copy's throughput / iceoryx2's.
    pub emulated_copy_vs_iceoryx2: Option<f64>,
    /// zcio-emulated-copy's throughput / the Unix socket's.
    pub emulated_copy_vs_unix: Option<f64>,
    /// zcio-emulated-copy's throughput / zcio-copy's.
    pub emulated_copy_vs_copy: Option<f64>,
}

/// What `zcio bench channel` measured: its JSON, and the report's `genie.results.channel`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ChannelSection {
    /// What was run.
    pub plan: Plan,
    /// One row per contender, size and granule.
    pub rows: Vec<Row>,
    /// Emulated copy's throughput against the others, from 2 MiB up.
    pub ratios: Vec<Ratio>,
    /// The CPUs the receiver and the sender were pinned to (none where this process may run on
    /// one CPU only).
    pub cpus: Option<[usize; 2]>,
}

impl ChannelSection {
    /// The row of `contender` at `bytes` and `granule`.
    pub fn row(&self, contender: &str, bytes: usize, granule: Granule) -> Option<&Row> {
        self.rows
            .iter()
            .find(|r| r.contender == contender && r.bytes == bytes && r.granule == granule)
    }

    /// The rows that are not verified, by name and reason.
    pub fn failures(&self) -> Vec<String> {
        self.rows
            .iter()
            .filter(|r| !r.verified)
            .map(|r| {
                format!(
                    "{} at {} B ({}): {}",
                    r.contender,
                    r.bytes,
                    r.granule,
                    match (&r.error, r.first_mismatch) {
                        (Some(e), _) => e.clone(),
                        (None, Some((m, at))) => format!("message {m} differs at byte {at}"),
                        (None, None) => "not verified".into(),
                    }
                )
            })
            .collect()
    }
}

/// Emulated copy's throughput against the others at every size from 2 MiB up.
pub fn ratios(rows: &[Row], plan: &Plan) -> Vec<Ratio> {
    let ec = Contender::Zcio(Semantics::EmulatedCopy).name();
    let cp = Contender::Zcio(Semantics::Copy).name();
    let tp = |c: &str, b: usize, g: Granule| {
        rows.iter()
            .find(|r| r.contender == c && r.bytes == b && r.granule == g && r.verified)
            .and_then(|r| r.throughput_gbps)
    };
    let mut out = Vec::new();
    for &g in &plan.granules {
        for &b in plan.sizes.iter().filter(|b| **b >= 2 << 20) {
            let Some(e) = tp(&ec, b, g) else { continue };
            out.push(Ratio {
                bytes: b,
                granule: g,
                emulated_copy_vs_iceoryx2: tp("iceoryx2", b, g).map(|x| e / x),
                emulated_copy_vs_unix: tp("unix", b, g).map(|x| e / x),
                emulated_copy_vs_copy: tp(&cp, b, g).map(|x| e / x),
            });
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// The data.

/// Word `k` (the 8 bytes at offset `8k`) of message `i`.
#[inline]
fn word(base: u64, k: usize) -> u64 {
    base.wrapping_add((k as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// The first word of message `i`: its index, spread.
fn base(i: u64) -> u64 {
    (i.wrapping_add(1)).wrapping_mul(0xD1B5_4A32_D192_ED03) ^ 0x7a63_696f_6368_616e
}

/// Write message `i` into `buf`: each 8-byte word `k` depends on `i` and `k` (a tail shorter
/// than a word takes the first bytes of its word).
pub fn fill(buf: &mut [u8], i: u64) {
    let b = base(i);
    let mut words = buf.chunks_exact_mut(8);
    for (k, w) in (&mut words).enumerate() {
        w.copy_from_slice(&word(b, k).to_le_bytes());
    }
    let n = buf.len() / 8;
    let tail = &mut buf[n * 8..];
    let last = word(b, n).to_le_bytes();
    let t = tail.len();
    tail.copy_from_slice(&last[..t]);
}

/// Check every byte of `buf` against message `i`: the offset of the first that differs, if
/// any.
pub fn check(buf: &[u8], i: u64) -> Option<usize> {
    const BLOCK: usize = 4096;
    let b = base(i);
    // A block at a time, its words' differences or-ed together (which vectorises); the first
    // differing byte is looked for only in a block that differs.
    for (j, block) in buf.chunks(BLOCK).enumerate() {
        let k0 = j * BLOCK / 8;
        let mut diff = 0u64;
        let words = block.chunks_exact(8);
        let rest = words.remainder();
        for (k, w) in words.enumerate() {
            diff |= u64::from_le_bytes(w.try_into().expect("8 bytes")) ^ word(b, k0 + k);
        }
        let n = block.len() / 8;
        let last = word(b, k0 + n).to_le_bytes();
        let tail_ok = rest == &last[..rest.len()];
        if diff != 0 || !tail_ok {
            let mut want = vec![0u8; block.len()];
            for (k, w) in (k0..).zip(want.chunks_mut(8)) {
                let v = word(b, k).to_le_bytes();
                w.copy_from_slice(&v[..w.len()]);
            }
            let at = block
                .iter()
                .zip(&want)
                .position(|(x, y)| x != y)
                .unwrap_or(0);
            return Some(j * BLOCK + at);
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Clocks.

fn clock_ns(id: rustix::time::ClockId) -> u64 {
    let t = rustix::time::clock_gettime(id);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// `CLOCK_MONOTONIC`, the one both processes of a run read (ns).
pub fn monotonic_ns() -> u64 {
    clock_ns(rustix::time::ClockId::Monotonic)
}

/// This process's CPU time, user and system, all threads (ns).
pub fn process_cpu_ns() -> u64 {
    clock_ns(rustix::time::ClockId::ProcessCPUTime)
}

/// The CPUs a run's two processes are pinned to (the receiver's, the sender's): the first two
/// this thread may run on, if it may run on two.
pub fn cpus() -> Option<[usize; 2]> {
    use rustix::thread::{CpuSet, sched_getaffinity};
    let set = sched_getaffinity(None).ok()?;
    let mut on = (0..CpuSet::MAX_CPU).filter(|c| set.is_set(*c));
    Some([on.next()?, on.next()?])
}

/// This thread pinned to one CPU until the guard goes, then free to run where it could before.
pub struct Pinned(Option<rustix::thread::CpuSet>);

impl Pinned {
    /// Pin this thread to `cpu` (nothing, where that fails).
    pub fn to(cpu: usize) -> Pinned {
        use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};
        let before = sched_getaffinity(None).ok();
        let mut one = CpuSet::new();
        one.set(cpu);
        match sched_setaffinity(None, &one) {
            Ok(()) => Pinned(before),
            Err(_) => Pinned(None),
        }
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(s) = &self.0 {
            let _ = rustix::thread::sched_setaffinity(None, s);
        }
    }
}

/// A name no other run uses: this process, a counter, the time.
pub fn unique_name(what: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() % 1_000_000_000_000);
    format!(
        "zcio-bench-channel-{what}-{}-{}-{nanos}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    )
}

// ---------------------------------------------------------------------------------------------
// The bench.

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

fn spread(v: &[f64]) -> Option<[f64; 2]> {
    let lo = v.iter().copied().reduce(f64::min)?;
    let hi = v.iter().copied().reduce(f64::max)?;
    Some([lo, hi])
}

/// One contender's rounds at one size and granule, as they come in.
#[derive(Default)]
struct Rounds {
    latency: Vec<f64>,
    pingpong: Vec<f64>,
    throughput: Vec<f64>,
    send: Vec<f64>,
    cpu: Vec<f64>,
    checked: u64,
    first_mismatch: Option<(u64, usize)>,
    window: Option<usize>,
    path: Option<String>,
    vm_granule: Option<String>,
    error: Option<String>,
    make: Vec<f64>,
    loans: Option<receiver::LoanCount>,
}

impl Rounds {
    fn add(&mut self, r: receiver::RunResult) {
        self.latency.push(r.latency_ns);
        self.pingpong.push(r.pingpong_ns);
        self.throughput.push(r.throughput_gbps);
        self.send.push(r.send_ns);
        self.cpu.push(r.cpu_ns);
        self.checked += r.checked;
        if self.first_mismatch.is_none() {
            self.first_mismatch = r.first_mismatch;
        }
        self.window = r.window.or(self.window);
        self.path = r.path.or(self.path.take());
        self.vm_granule = r.vm_granule.or(self.vm_granule.take());
        self.make.extend(r.make_ns);
        if let Some(l) = r.loans {
            self.loans.get_or_insert_with(Default::default).add(l);
        }
    }

    fn row(self, contender: String, bytes: usize, granule: Granule, ring: &Ring, s: usize) -> Row {
        let ran = self.latency.len();
        let volatile = contender == Contender::VolatileLoan.name();
        Row {
            contender,
            bytes,
            granule,
            latency_ns: median(&self.latency),
            latency_spread_ns: spread(&self.latency),
            pingpong_ns: median(&self.pingpong),
            pingpong_spread_ns: spread(&self.pingpong),
            throughput_gbps: median(&self.throughput),
            throughput_spread_gbps: spread(&self.throughput),
            send_ns: median(&self.send),
            send_spread_ns: spread(&self.send),
            cpu_ns: median(&self.cpu),
            cpu_spread_ns: spread(&self.cpu),
            verified: ran > 0 && self.error.is_none() && self.first_mismatch.is_none(),
            messages: ring.len(),
            round_trips: s,
            rounds: ran,
            checked_messages: self.checked,
            first_mismatch: self.first_mismatch,
            window_bytes: self.window,
            path: match (self.path, &self.loans) {
                (Some(p), Some(l)) if l.unmapped > 0 => Some(format!(
                    "{p}; NOT MAPPED: {} of {} messages ({})",
                    l.unmapped,
                    l.unmapped + l.mapped,
                    l.unmapped_path.as_deref().unwrap_or("?")
                )),
                (Some(p), Some(l)) if volatile && l.volatile < l.mapped + l.unmapped => {
                    Some(format!(
                        "{p}; volatile: {} of {} messages (the others sealed: more than {} \
                         were held at once)",
                        l.volatile,
                        l.mapped + l.unmapped,
                        zcio_genie::memnet::loan::LENT_FILES
                    ))
                }
                (p, _) => p,
            },
            vm_granule: self.vm_granule,
            buffer_granule: ring.granule().to_string(),
            error: self.error,
            make_ns: median(&self.make),
        }
    }
}

/// Run `plan`, one progress unit per run; every contender's row, failures included.
pub fn measure(plan: &Plan, p: &dyn Progress) -> Res<ChannelSection> {
    let contenders: Vec<Contender> = plan
        .contenders
        .iter()
        .map(|c| Contender::parse(c))
        .collect::<Res<_>>()?;
    let cpus = cpus();
    let mut rows = Vec::new();
    for &bytes in &plan.sizes {
        let (n, s) = (plan.messages(bytes), plan.one_at_a_time(bytes));
        for &g in &plan.granules {
            // The receiver's own buffers, made once and reused by every run at this size.
            let mut ring = Ring::new(g, bytes, n)
                .with_context(|| format!("the receiver's {n} buffers of {bytes} bytes, {g}"))?;
            let mut per: Vec<Rounds> = contenders.iter().map(|_| Rounds::default()).collect();
            for round in 0..plan.rounds {
                for k in 0..contenders.len() {
                    let i = (k + round) % contenders.len();
                    let c = contenders[i];
                    p.what(format!(
                        "channel: {} {} B {g}, round {}",
                        c.name(),
                        bytes,
                        round + 1
                    ));
                    if per[i].error.is_none() {
                        match receiver::run(c, g, &mut ring, s, cpus) {
                            Ok(r) => per[i].add(r),
                            Err(e) => per[i].error = Some(format!("round {}: {e}", round + 1)),
                        }
                    }
                    p.inc();
                }
            }
            for (c, r) in contenders.iter().zip(per) {
                rows.push(r.row(c.name(), bytes, g, &ring, s));
            }
        }
    }
    let ratios = ratios(&rows, plan);
    Ok(ChannelSection {
        plan: plan.clone(),
        rows,
        ratios,
        cpus,
    })
}

/// `zcio bench channel`: measure, print a table (or JSON); fail, having printed, if a row
/// is not verified.
pub fn run(a: ChannelArgs) -> Res<()> {
    let plan = Plan::of_args(&a)?;
    crate::report::ensure_profile(&std::env::temp_dir())?;
    let bar = crate::bench_bar(plan.units());
    let s = measure(&plan, &bar)?;
    bar.finish_and_clear();
    crate::finish_checked_bench(
        "channel",
        &s,
        s.rows.len(),
        "not verified",
        &s.failures(),
        a.json,
        || render::text_table(&s),
    )
}

/// Whether the zcio listener `l` has a client waiting, watching `child` meanwhile: `Ok(())`
/// once one waits; an error if the child ends first or [`STALL`] passes.
fn await_client(
    l: &zcio_genie::channel::ChannelListener,
    child: &mut std::process::Child,
) -> Res<()> {
    let t0 = std::time::Instant::now();
    loop {
        let mut fds = [rustix::event::PollFd::new(l, rustix::event::PollFlags::IN)];
        let tick = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 2_000_000,
        };
        match rustix::event::poll(&mut fds, Some(&tick)) {
            Ok(n) if n > 0 => return Ok(()),
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
        if let Some(s) = child.try_wait()? {
            return Err(format!("the sender ended before connecting: {s}").into());
        }
        if t0.elapsed() > STALL {
            return Err("the sender did not connect".into());
        }
    }
}

/// A zcio channel's waits in this bench: give up after [`STALL`].
fn waits() -> zcio_genie::Waits {
    zcio_genie::Waits {
        timeout: Some(STALL),
        interruptible: false,
    }
}

/// Connect to the zcio channel `name` as the sender, with the bench's waits.
fn connect(name: &str) -> Res<Channel> {
    let mut ch = Channel::connect(name, STALL)?;
    ch.set_waits(waits());
    Ok(ch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_depends_on_message_and_offset_and_every_byte_is_checked() {
        for len in [1usize, 3, 7, 8, 63, 64, 100, 4095, 4096, 4097, 3 * 4096 + 5] {
            let mut a = vec![0u8; len];
            fill(&mut a, 3);
            assert_eq!(check(&a, 3), None, "{len}");
            if len >= 8 {
                assert_ne!(check(&a, 4), None, "{len}");
            }
            for at in [0, len / 2, len - 1] {
                let mut b = a.clone();
                b[at] ^= 0x40;
                assert_eq!(check(&b, 3), Some(at), "{len} {at}");
            }
        }
        let mut a = vec![0u8; 64];
        fill(&mut a, 0);
        assert_ne!(a[..8], a[8..16]);
    }

    #[test]
    fn contenders_round_trip_by_name_and_the_plan_refuses_what_cannot_run() {
        for c in default_contenders() {
            assert_eq!(Contender::parse(&c).unwrap().name(), c);
        }
        assert!(Contender::parse("zcio-move").is_ok());
        assert!(Contender::parse("tcp").is_err());
        let args = |extra: &[&str]| {
            use clap::Parser;
            #[derive(clap::Parser)]
            struct P {
                #[command(flatten)]
                a: ChannelArgs,
            }
            let mut v = vec!["p"];
            v.extend(extra);
            P::try_parse_from(v).map(|p| p.a)
        };
        let a = args(&[]).unwrap();
        let p = Plan::of_args(&a).unwrap();
        assert_eq!(p.contenders, default_contenders());
        assert_eq!(p.sizes, DEFAULT_SIZES);
        assert_eq!(p.granules, [Granule::Base, Granule::Huge]);
        let e = Plan::of_args(&args(&["--semantics", "move"]).unwrap()).unwrap_err();
        assert!(e.to_string().contains("--semantics move"), "{e}");
        let e = Plan::of_args(&args(&["--rounds", "0"]).unwrap()).unwrap_err();
        assert!(e.to_string().contains("--rounds"), "{e}");
        let e = Plan::of_args(&args(&["--bytes", "0"]).unwrap()).unwrap_err();
        assert!(e.to_string().contains("--bytes"), "{e}");
        let p = Plan::of_args(&args(&["--bytes", "1,7,100,4097"]).unwrap()).unwrap();
        assert_eq!(p.sizes, [1, 7, 100, 4097]);
        assert!(args(&["--granules", "1g"]).is_err());
        let p = Plan::of_args(&args(&["--semantics", "copy", "--baselines", "zcio-loan"]).unwrap())
            .unwrap();
        assert_eq!(p.contenders, ["zcio-copy", "zcio-loan"]);
        assert_eq!(Contender::parse("zcio-loan").unwrap(), Contender::Loan);
    }

    #[test]
    fn a_pinned_thread_runs_where_it_could_before_once_the_guard_goes() {
        use rustix::thread::{CpuSet, sched_getaffinity};
        let on =
            |s: &CpuSet| -> Vec<usize> { (0..CpuSet::MAX_CPU).filter(|c| s.is_set(*c)).collect() };
        let before = on(&sched_getaffinity(None).unwrap());
        let Some([a, b]) = cpus() else {
            assert_eq!(before.len(), 1);
            return;
        };
        assert_eq!([a, b], [before[0], before[1]]);
        {
            let _p = Pinned::to(b);
            assert_eq!(on(&sched_getaffinity(None).unwrap()), [b]);
        }
        assert_eq!(on(&sched_getaffinity(None).unwrap()), before);
    }

    #[test]
    fn messages_scale_with_size_within_bounds_and_windows_cover_messages() {
        assert_eq!(messages(1), SMALL_MESSAGES);
        assert_eq!(messages(64), SMALL_MESSAGES);
        assert_eq!(messages(1024), 8000);
        assert_eq!(messages(2048), 4000);
        assert_eq!(messages(4095), 2000);
        assert_eq!(messages(4096), MESSAGES.1);
        assert_eq!(messages(1 << 20), 128);
        assert_eq!(messages(256 << 20), MESSAGES.0);
        for b in [1, 64, 100, 1024, 4095] {
            assert!(messages(b) * b.next_multiple_of(SLOT_ALIGN) <= (8 << 20) + (1 << 20));
        }
        assert_eq!(one_at_a_time(SMALL_MESSAGES), MESSAGES.1);
        assert_eq!(one_at_a_time(128), 128);
        assert_eq!(window(4096), zcio_genie::memnet::DEFAULT_WINDOW);
        assert_eq!(window(64 << 20), 64 << 20);
        assert_eq!(window(1 << 30), MAX_WINDOW);
        assert_eq!(warm_up(4096, 2000), 2000);
        assert_eq!(warm_up(1 << 20, 128), 16);
        assert_eq!(warm_up(256 << 20, 3), 3);
        assert_eq!(warm_up(256 << 20, 1), 1);
    }

    #[test]
    fn a_ring_of_small_messages_is_slots_of_one_buffer_and_of_large_ones_a_buffer_each() {
        for (bytes, n) in [
            (1usize, 5usize),
            (64, 100),
            (100, 7),
            (4095, 3),
            (4096, 3),
            (5000, 2),
        ] {
            for g in [Granule::Base, Granule::Huge] {
                let mut r = Ring::new(g, bytes, n).unwrap();
                assert_eq!((r.len(), r.bytes()), (n, bytes));
                assert_eq!(r.bufs.len(), if bytes < SMALL { 1 } else { n });
                for k in 0..n {
                    assert_eq!(r.slot(k).len(), bytes);
                    assert_eq!(r.slot(k).as_ptr() as usize % SLOT_ALIGN, 0);
                    fill(r.slot_mut(k), k as u64);
                }
                // No slot overlaps another: each still holds its own message.
                for k in 0..n {
                    assert_eq!(check(r.slot(k), k as u64), None, "{bytes} {k}");
                }
            }
        }
        assert!(Ring::new(Granule::Base, 0, 1).is_err());
    }
}
