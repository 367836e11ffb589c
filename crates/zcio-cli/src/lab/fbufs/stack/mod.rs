//! Paper 001's Figures 4-6: UDP/IP throughput through a protocol stack split across protection
//! domains, with fbufs and with copies, and the aggregate operations the stack is made of.
//!
//! A sending application hands datagrams to a protocol domain (UDP and IP) that prepends the
//! UDP header, fragments each datagram into PDUs of the MTU (4 KiB by default, the paper's
//! loopback experiment's; 16 KiB was its end-to-end experiment's) each with its IP header,
//! and passes them to a receiving domain that reassembles the datagram and delivers it to the
//! receiving application, which touches it and checks it once the clock has stopped
//! ([`proto`]). Contenders ([`Contender`]): fbufs (the application's data and the protocol
//! domain's headers in fbufs, the fragments an aggregate over them, no data copied:
//! [`agg`], [`domains`]), the same with the application's data path uncached and non-volatile
//! (Figure 6); copies through Unix sockets, the headers and fragments built in
//! contiguous buffers ([`domains`]); and the whole stack in one domain, the paper's baseline
//! for the cost of domain crossings ([`local`]). Beside them, the aggregate operations timed
//! alone ([`local::aggregate_ops`]).

pub mod agg;
pub mod claims;
pub mod domains;
pub mod local;
pub mod measure;
pub mod proto;
pub mod render;

use crate::lab::fbufs::bench::Fault;
use crate::lab::{Experiment, ReportParts};
use crate::report::preset::Preset;
use crate::transfer::Res;
use proto::{PAGE, Touch};

/// Figures 4-6 of paper 001.
pub struct FbufsStack;

impl Experiment for FbufsStack {
    const ID: &'static str = "fbufs-stack";
    const PAPER: &'static str = "001";
    const TITLE: &'static str = "Figures 4-6: UDP/IP datagrams through a protocol domain to a receiving domain, by fbuf aggregates and by copies";
    const ABOUT: &'static str = "Paper 001's protocol-stack experiment, when it ran: what `zcio bench fbufs-stack --json` prints.";
    type Plan = measure::StackArgs;
    type Section = measure::StackSection;

    fn plan(preset: Preset) -> Self::Plan {
        let (sizes, rounds, volume, touch, iters) = match preset {
            Preset::Smoke => (vec![1024, 65536], 1, 1 << 20, vec!["word-per-page"], 200),
            Preset::Quick => (
                (0..6).map(|k| 1024 << (2 * k)).collect(),
                7,
                32 << 20,
                vec!["word-per-page", "every-byte"],
                2000,
            ),
            Preset::Full => (
                (0..11).map(|k| 1024 << k).collect(),
                5,
                64 << 20,
                vec!["word-per-page", "every-byte"],
                20000,
            ),
        };
        measure::StackArgs {
            sizes,
            contenders: Vec::new(),
            touch: touch.into_iter().map(String::from).collect(),
            rounds,
            volume,
            mtu: PAGE,
            op_iters: iters,
            json: true,
            fault: None,
        }
    }

    fn measure(plan: &Self::Plan, bar: &indicatif::ProgressBar) -> Res<Self::Section> {
        measure::measure(plan, bar)
    }

    const REPORT: ReportParts = ReportParts {
        findings: render::findings,
        claims: claims::claims,
        render: render::blocks,
    };
}

/// A way of passing datagrams down and up the stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contender {
    /// Every layer in this process, aggregates as with fbufs: no domain crossing.
    Single,
    /// Three processes, cached/volatile fbufs, the fragments an aggregate.
    Fbufs,
    /// As [`Contender::Fbufs`], but the application's data path uncached and non-volatile
    /// (Figure 6): its fbufs are mapped into each receiving process per datagram, and
    /// read-only in the application until freed (the headers' path stays cached: aggregates
    /// are read in place).
    Uncached,
    /// Three processes, the datagram and its fragments copied through Unix sockets.
    Copies,
}

impl Contender {
    /// Every contender.
    pub const ALL: [Contender; 4] = [
        Contender::Single,
        Contender::Fbufs,
        Contender::Uncached,
        Contender::Copies,
    ];

    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Contender::Single => local::SINGLE,
            Contender::Fbufs => "fbufs-cached-volatile",
            Contender::Uncached => "fbufs-uncached",
            Contender::Copies => "copy-unix-socket",
        }
    }

    /// The contender of a name.
    pub fn parse(s: &str) -> Option<Contender> {
        Contender::ALL.into_iter().find(|c| c.name() == s)
    }

    /// Run stream `s` (its processes started here): the time per timed datagram (ns).
    pub fn run(self, s: &Stream) -> Res<f64> {
        match self {
            Contender::Single => local::single_domain(s),
            c => domains::run(c, s),
        }
    }
}

/// One run: `warm` untimed datagrams then `count` timed ones, of `len` bytes, at an MTU of
/// `mtu` bytes, written and touched the `touch` way, `fault` spoiling or leaving out one.
#[derive(Debug, Clone, Copy)]
pub struct Stream {
    /// Datagram length (bytes).
    pub len: usize,
    /// Timed datagrams.
    pub count: usize,
    /// Untimed datagrams before them.
    pub warm: usize,
    /// IP's MTU (bytes).
    pub mtu: usize,
    /// What the applications write and touch.
    pub touch: Touch,
    /// Testing: a timed datagram spoiled or left out by the sending application.
    pub fault: Option<Fault>,
}

impl Stream {
    /// A stream of `count` timed datagrams of `len` after the warm-up: enough datagrams to
    /// cycle an 8 MiB path once (8 to 512).
    pub fn new(len: usize, count: usize, mtu: usize, touch: Touch) -> Stream {
        Stream {
            len,
            count,
            warm: ((8 << 20) / len.next_multiple_of(PAGE)).clamp(8, 512),
            mtu,
            touch,
            fault: None,
        }
    }

    /// Datagrams in all, warm-up included.
    pub fn datagrams(&self) -> u64 {
        (self.warm + self.count) as u64
    }

    /// Send the stream: `one(i)` for every datagram `i` not left out, counted from the
    /// warm-up's first, and `warmed()` once the warm-up is out, just before the clock starts.
    /// When the clock started.
    pub fn send(
        &self,
        mut warmed: impl FnMut() -> Res<()>,
        mut one: impl FnMut(usize) -> Res<()>,
    ) -> Res<std::time::Instant> {
        let mut t0 = std::time::Instant::now();
        for i in 0..self.datagrams() as usize {
            if i == self.warm {
                warmed()?;
                t0 = std::time::Instant::now();
            }
            if !self.skips(i) {
                one(i)?;
            }
        }
        Ok(t0)
    }

    /// Whether datagram `i` (counted from the warm-up's first) is left out.
    pub fn skips(&self, i: usize) -> bool {
        matches!(self.fault, Some(Fault::Skip(k)) if i.checked_sub(self.warm) == Some(k as usize))
    }

    /// Whether datagram `i` is spoiled (at [`Stream::spoiled_word`]).
    pub fn spoils(&self, i: usize) -> bool {
        matches!(self.fault, Some(Fault::Corrupt(k)) if i.checked_sub(self.warm) == Some(k as usize))
    }

    /// The word a spoiled datagram has wrong: the first of its last page, one that every touch
    /// reads.
    pub fn spoiled_word(&self) -> usize {
        (self.len - 1) / PAGE * PAGE / 8
    }
}
