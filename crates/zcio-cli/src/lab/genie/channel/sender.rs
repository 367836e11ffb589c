//! The sending side of a run: `zcio channel-sender`, started by the bench for each run.
//!
//! # A run's protocol
//!
//! The bench (the receiver) listens on a control socket and sets up the data transport (a zcio
//! channel name; iceoryx2's services, its subscriber of messages and its publisher of replies;
//! or a Unix socket path), then starts the sender with both on its command line. The sender
//! makes its ring of `n` buffers (every page touched), connects both (iceoryx2: its publisher
//! of messages, its subscriber of replies) and says `r` (ready); the receiver connects its end
//! (iceoryx2's ports to the new ones) and says `c`, and the sender connects again. iceoryx2
//! then warms its pool: every sample written and read once (`q`, `h`, `l`: the queue full, a
//! sample held by the receiver, the last sample loaned). Then:
//!
//! 1. warm-up: the sender writes `W` messages into its ring and streams them; the receiver
//!    takes them into its ring and checks them;
//! 2. one at a time: `s` times, the receiver says `g` (go), the sender writes the message into
//!    its first buffer (once the previous message's zcio ticket has completed), reads the
//!    clock and sends; the receiver takes it into its first buffer, reads the clock, checks it;
//! 3. ping-pong: `s` times, the receiver writes its 1-byte reply and says `g`; the sender
//!    writes the message into its first buffer, reads the clock, sends it and takes the reply
//!    into a 1-byte buffer of its own, reads the clock, checks the reply; the receiver takes
//!    the message into its first buffer, sends the reply, checks the message;
//! 4. the sender writes `n` messages into its ring and says `s`; the receiver says `g`, and the
//!    sender streams them; the receiver takes them into its ring, then checks them;
//! 5. the receiver says `d` (done: everything arrived), and the sender writes its [`Report`]
//!    on the control socket and exits.

use super::receiver::{Event, Listener, PubSub, Publisher, Subscriber, copy_sample, next_sample};
use super::receiver::{expect, iceoryx_pubsub, node, read_framed, readable, reply_service};
use super::receiver::{say, write_framed};
use super::{Contender, Granule, ICEORYX_QUEUE, Ring, STALL, check, connect, fill, monotonic_ns};
use super::{pool_message, process_cpu_ns, reply_message};
use crate::error::Context;
use crate::transfer::Res;
use iceoryx2::port::update_connections::UpdateConnections;
use iceoryx2::port::{BackpressureAction, BackpressureInfo};
use iceoryx2::prelude::*;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use zcio_genie::channel::Channel;
use zcio_genie::memnet::Ticket;
use zcio_genie::memnet::loan::Loan;
use zcio_genie::{AppBuffer, InputBuffering, Semantics};

/// Arguments of the hidden `zcio channel-sender`.
#[derive(clap::Args, Debug, Clone)]
pub struct SenderArgs {
    /// The bench's control socket.
    #[arg(long)]
    pub connect: PathBuf,
    /// `zcio-<semantics>`, `iceoryx2` or `unix`.
    #[arg(long)]
    pub contender: String,
    /// The zcio channel name, the iceoryx2 service name, or the Unix socket's path.
    #[arg(long)]
    pub name: String,
    /// Message size.
    #[arg(long)]
    pub bytes: usize,
    /// Granule of the sender's buffer.
    #[arg(long)]
    pub granule: Granule,
    /// Warm-up messages.
    #[arg(long)]
    pub warm_up: usize,
    /// Streamed messages.
    #[arg(long)]
    pub messages: usize,
    /// Messages one at a time, and ping-pong round trips.
    #[arg(long)]
    pub one_at_a_time: usize,
    /// The CPU to run on.
    #[arg(long)]
    pub cpu: Option<usize>,
}

/// What the sender tells the receiver at the end of a run.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Report {
    /// `CLOCK_MONOTONIC` at each message's send start (ns), every message of the run.
    pub start_ns: Vec<u64>,
    /// Time inside each message's send (ns).
    pub send_ns: Vec<u64>,
    /// Each ping-pong's round trip (ns): from the message's send start to its reply in the
    /// sender's buffer.
    pub round_trip_ns: Vec<u64>,
    /// Replies checked.
    pub replies_checked: u64,
    /// The first reply that differed ([`reply_message`]), and where, if any.
    pub reply_mismatch: Option<(u64, usize)>,
    /// The sender's CPU time over the streamed messages (ns), from the go-ahead to the last
    /// message's completion.
    pub stream_cpu_ns: u64,
    /// zcio: the output path of the last message.
    pub path: Option<String>,
    /// zcio: the granule of the last output's VM work.
    pub vm_granule: Option<String>,
    /// zcio-loan: the time taken to make each message's loan (ns), every message of the run,
    /// added to its latency, round trip and stream time (empty for the other contenders,
    /// whose buffers are made once).
    #[serde(default)]
    pub alloc_ns: Vec<u64>,
}

/// The sending end of a contender's transport.
enum TxEnd {
    Zcio(Box<ZcioTx>),
    Iceoryx2(Box<IceoryxTx>),
    Unix(UnixStream),
}

/// zcio's sending side: the channel, the semantics, the last output's ticket (until waited
/// for) and accounting.
struct ZcioTx {
    ch: Channel,
    sem: Semantics,
    /// zcio-loan: the granule the loans are made at, and those made and not yet sent, by
    /// message.
    loans: Option<(zcio_genie::Granule, std::collections::HashMap<usize, Loan>)>,
    prev: Option<Ticket>,
    last: Option<zcio_genie::Accounting>,
}

/// iceoryx2's sending side: the messages' publisher and notifier, the replies' subscriber and
/// listener; its node and services are kept for the ports' sake.
struct IceoryxTx {
    publisher: Publisher,
    notifier: iceoryx2::port::notifier::Notifier<ipc::Service>,
    reply_subscriber: Subscriber,
    reply_listener: Listener,
    _pubsub: PubSub,
    _event: Event,
    _reply_pubsub: PubSub,
    _reply_event: Event,
    _node: Node<ipc::Service>,
}

impl IceoryxTx {
    /// Loan a sample and write `buf` into it.
    fn loan(
        &self,
        buf: &[u8],
        what: &str,
    ) -> Res<iceoryx2::sample_mut::SampleMut<ipc::Service, [u8], ()>> {
        let s = self
            .publisher
            .loan_slice_uninit(buf.len())
            .map_err(|e| format!("iceoryx2: loaning {what}: {e:?}"))?;
        Ok(s.write_from_slice(buf))
    }

    /// Send a written sample and notify the receiver; `CLOCK_MONOTONIC` when the send was done
    /// (before the notification, which wakes the receiver: its system call may return only
    /// after the receiver has had the CPU).
    fn send(
        &self,
        s: iceoryx2::sample_mut::SampleMut<ipc::Service, [u8], ()>,
        what: &str,
    ) -> Res<u64> {
        let k = s.send().map_err(|e| {
            format!("iceoryx2: sending {what}: {e:?} (the receiver is gone or stuck)")
        })?;
        if k != 1 {
            return Err(format!("iceoryx2: {what} reached {k} subscribers, not 1").into());
        }
        let sent = monotonic_ns();
        self.notifier.notify()?;
        Ok(sent)
    }

    /// The pool warm-up (the receiver's side says how): every sample written once.
    fn pool_warm_up(&self, ctl: &UnixStream, buf: &mut [u8]) -> Res<()> {
        let mut one = |k: usize| -> Res<iceoryx2::sample_mut::SampleMut<ipc::Service, [u8], ()>> {
            fill(buf, pool_message(k));
            self.loan(buf, &format!("pool warm-up message {k}"))
        };
        for k in 0..ICEORYX_QUEUE {
            let s = one(k)?;
            self.send(s, "a pool warm-up message")?;
        }
        say(ctl, b"q")?;
        expect(ctl, b'h', "the receiver to hold a sample")?;
        let s = one(ICEORYX_QUEUE)?;
        self.send(s, "a pool warm-up message")?;
        let last = one(ICEORYX_QUEUE + 1)?;
        say(ctl, b"l")?;
        self.send(last, "the last pool warm-up message")?;
        Ok(())
    }
}

impl TxEnd {
    fn open(c: Contender, a: &SenderArgs, ctl: &UnixStream) -> Res<TxEnd> {
        Ok(match c {
            Contender::Zcio(_) | Contender::Loan | Contender::VolatileLoan => {
                TxEnd::Zcio(Box::new(ZcioTx {
                    ch: {
                        let mut ch = connect(&a.name)?;
                        ch.set_volatile_loans(c == Contender::VolatileLoan);
                        ch
                    },
                    sem: match c {
                        Contender::Zcio(sem) => sem,
                        _ => Semantics::Copy,
                    },
                    loans: c.is_loan().then(|| {
                        // A loan in 2 MiB pages holds whole ones: below 2 MiB it takes 4 KiB pages
                        // (as `Loan::new` does), or thousands of small messages would hold
                        // gigabytes.
                        let g = match a.granule {
                            Granule::Huge if a.bytes >= 2 << 20 => zcio_genie::Granule::Huge,
                            _ => zcio_genie::Granule::Base,
                        };
                        (g, std::collections::HashMap::new())
                    }),
                    prev: None,
                    last: None,
                }))
            }
            Contender::Iceoryx2 => {
                let node = node()?;
                let sname = ServiceName::new(&a.name)?;
                let pubsub = iceoryx_pubsub(&node, &sname).open()?;
                let event = node.service_builder(&sname).event().open()?;
                let watch = ctl.try_clone()?;
                let publisher = pubsub
                    .publisher_builder()
                    .initial_max_slice_len(a.bytes)
                    .max_loaned_samples(1)
                    .backpressure_strategy(BackpressureStrategy::RetryUntilDelivered)
                    .set_backpressure_handler(move |i: &BackpressureInfo| {
                        // The receiver says nothing while a send may wait: anything to read
                        // is its end. Checked now and then, not at every retry.
                        if i.retries % 64 == 63 && (readable(&watch) || i.elapsed_time > STALL) {
                            BackpressureAction::DiscardDataAndFail
                        } else {
                            BackpressureAction::Retry
                        }
                    })
                    .create()
                    .map_err(|e| {
                        format!("iceoryx2: a publisher of {}-byte samples: {e:?}", a.bytes)
                    })?;
                let notifier = event.notifier_builder().create()?;
                let rname = reply_service(&a.name)?;
                let reply_pubsub = iceoryx_pubsub(&node, &rname).open()?;
                let reply_event = node.service_builder(&rname).event().open()?;
                let reply_subscriber = reply_pubsub
                    .subscriber_builder()
                    .buffer_size(ICEORYX_QUEUE)
                    .create()?;
                let reply_listener = reply_event.listener_builder().create()?;
                TxEnd::Iceoryx2(Box::new(IceoryxTx {
                    publisher,
                    notifier,
                    reply_subscriber,
                    reply_listener,
                    _pubsub: pubsub,
                    _event: event,
                    _reply_pubsub: reply_pubsub,
                    _reply_event: reply_event,
                    _node: node,
                }))
            }
            Contender::Unix => {
                let s = UnixStream::connect(&a.name)
                    .with_context(|| format!("connect to {}", a.name))?;
                s.set_read_timeout(Some(STALL))?;
                TxEnd::Unix(s)
            }
        })
    }

    /// Before the buffer of the previous message is written again: zcio waits for that
    /// message's ticket (the receiver has it), so that no write lands on pages still on their
    /// way.
    fn prepare(&mut self) -> Res<()> {
        if let TxEnd::Zcio(z) = self
            && let Some(t) = z.prev.take()
        {
            z.ch.wait(t)?;
        }
        Ok(())
    }

    /// The buffer message `i` is written into: ring slot `k`, or for zcio-loan a fresh loan,
    /// the time taken to make it written to `alloc[i]` (and counted in the message's times).
    fn buffer<'a>(
        &'a mut self,
        ring: &'a mut Ring,
        k: usize,
        i: usize,
        alloc: &mut [u64],
    ) -> Res<&'a mut [u8]> {
        if let TxEnd::Zcio(z) = self
            && let Some((g, made)) = &mut z.loans
        {
            let t0 = monotonic_ns();
            let loan = match z.ch.memnet() {
                Some(m) => m.loan_with_granule(ring.bytes(), *g)?,
                None => Loan::with_granule(ring.bytes(), *g)?,
            };
            alloc[i] = monotonic_ns() - t0;
            return Ok(&mut made.entry(i).insert_entry(loan).into_mut()[..]);
        }
        Ok(ring.slot_mut(k))
    }

    /// Send `buf` as message `i`; `CLOCK_MONOTONIC` when the send was done (for iceoryx2 the
    /// loan, the copy and the send, not the notification after them; for zcio-loan the
    /// `send_loan` of the loan made for message `i`, not `buf`).
    fn send(&mut self, buf: &[u8], i: usize) -> Res<u64> {
        match self {
            TxEnd::Zcio(z) => {
                let acc = match &mut z.loans {
                    Some((_, made)) => {
                        let loan = made
                            .remove(&i)
                            .ok_or_else(|| format!("no loan made for message {i}"))?;
                        z.ch.send_loan(loan)?.1
                    }
                    None => {
                        let (t, acc) = z.ch.send(z.sem, buf)?;
                        z.prev = Some(t);
                        acc
                    }
                };
                z.last = Some(acc);
            }
            TxEnd::Iceoryx2(tx) => {
                let what = format!("message {i}");
                let s = tx.loan(buf, &what)?;
                return tx.send(s, &what);
            }
            TxEnd::Unix(s) => write_framed(s, buf)?,
        }
        Ok(monotonic_ns())
    }

    /// Take the receiver's reply into `buf` (all of it: `buf` is its length).
    fn take_reply(&mut self, buf: &mut [u8], ctl: &UnixStream) -> Res<()> {
        match self {
            TxEnd::Zcio(z) => {
                let (len, _) = z.ch.recv(z.sem, buf, InputBuffering::EarlyDemux)?;
                if len != buf.len() {
                    return Err(format!("a reply of {len} bytes, not {}", buf.len()).into());
                }
            }
            TxEnd::Iceoryx2(tx) => {
                let s = next_sample(&tx.reply_subscriber, &tx.reply_listener, ctl)?;
                copy_sample(s.payload(), buf)?;
            }
            TxEnd::Unix(s) => read_framed(s, buf)?,
        }
        Ok(())
    }

    /// After a phase: zcio waits until the receiver has every message.
    fn finish(&mut self) -> Res<()> {
        if let TxEnd::Zcio(z) = self {
            z.ch.flush()?;
            z.prev = None;
        }
        Ok(())
    }
}

/// `zcio channel-sender`: one run's sending process.
pub fn run(a: &SenderArgs) -> Res<()> {
    let c = Contender::parse(&a.contender)?;
    let _pinned = a.cpu.map(super::Pinned::to);
    let ctl = UnixStream::connect(&a.connect)
        .with_context(|| format!("connect to the bench at {}", a.connect.display()))?;
    ctl.set_read_timeout(Some(STALL))?;
    let (w, n, s) = (a.warm_up, a.messages, a.one_at_a_time);
    if n == 0 || w > n || s == 0 || s > n {
        return Err(format!(
            "{w} warm-up messages, {n} streamed, {s} one at a time: 1 ≤ n, w ≤ n, 1 ≤ s ≤ n"
        )
        .into());
    }
    let mut ring = Ring::new(a.granule, a.bytes, n)?;
    let mut end = TxEnd::open(c, a, &ctl).with_context(|| format!("{}: setting up", c.name()))?;
    say(&ctl, b"r")?;
    expect(&ctl, b'c', "the receiver to connect")?;
    if let TxEnd::Iceoryx2(tx) = &end {
        tx.publisher.update_connections()?;
        tx.reply_subscriber.update_connections()?;
        tx.pool_warm_up(&ctl, ring.slot_mut(0))?;
    }
    let (pingpong, stream) = (w + s, w + 2 * s);
    let total = stream + n;
    let mut start = vec![0u64; total];
    let mut send = vec![0u64; total];
    let mut alloc = vec![0u64; total];
    let mut one = |end: &mut TxEnd, buf: &[u8], i: usize| -> Res<()> {
        let t0 = monotonic_ns();
        let t1 = end.send(buf, i)?;
        start[i] = t0;
        send[i] = t1 - t0;
        Ok(())
    };
    // Warm-up: written into the ring, then streamed.
    for i in 0..w {
        fill(end.buffer(&mut ring, i, i, &mut alloc)?, i as u64);
    }
    for i in 0..w {
        one(&mut end, ring.slot(i), i)?;
    }
    end.finish()?;
    // One at a time, from the first buffer, written again for each message.
    for i in w..pingpong {
        expect(&ctl, b'g', "the go-ahead")?;
        end.prepare()?;
        fill(end.buffer(&mut ring, 0, i, &mut alloc)?, i as u64);
        one(&mut end, ring.slot(0), i)?;
    }
    end.finish()?;
    // Ping-pong: from the first buffer, each message answered by a 1-byte reply.
    let mut reply = AppBuffer::new(1)?;
    let mut round_trip_ns = Vec::with_capacity(s);
    let (mut replies_checked, mut reply_mismatch) = (0, None);
    for i in pingpong..stream {
        expect(&ctl, b'g', "the go-ahead of a round trip")?;
        end.prepare()?;
        fill(end.buffer(&mut ring, 0, i, &mut alloc)?, i as u64);
        let t0 = monotonic_ns();
        one(&mut end, ring.slot(0), i)?;
        end.take_reply(&mut reply, &ctl)
            .with_context(|| format!("the reply to message {i}"))?;
        // A loan is made for every message (a sealed one is never reused): its making is
        // part of the message's cost, where the others reuse buffers made once.
        round_trip_ns.push(monotonic_ns() - t0 + alloc[i]);
        let r = reply_message(i as u64);
        if let (None, Some(at)) = (reply_mismatch, check(&reply, r)) {
            reply_mismatch = Some((r, at));
        }
        replies_checked += 1;
    }
    end.finish()?;
    // Streamed: every message written into the ring (for zcio-loan, its loan taken and
    // written) first.
    for k in 0..n {
        fill(
            end.buffer(&mut ring, k, stream + k, &mut alloc)?,
            (stream + k) as u64,
        );
    }
    say(&ctl, b"s")?;
    expect(&ctl, b'g', "the go-ahead of the stream")?;
    let cpu0 = process_cpu_ns();
    for k in 0..n {
        one(&mut end, ring.slot(k), stream + k)?;
    }
    end.finish()?;
    let stream_cpu_ns = process_cpu_ns() - cpu0;
    expect(&ctl, b'd', "the receiver to have every message")?;
    let (path, vm_granule) = match &end {
        TxEnd::Zcio(z) => (
            z.last.as_ref().map(|a| a.path.to_string()),
            z.last
                .as_ref()
                .and_then(|a| a.granule.map(|g| g.name().to_string())),
        ),
        _ => (None, None),
    };
    let report = Report {
        start_ns: start,
        send_ns: send,
        round_trip_ns,
        replies_checked,
        reply_mismatch,
        stream_cpu_ns,
        path,
        vm_granule,
        alloc_ns: if c.is_loan() { alloc } else { Vec::new() },
    };
    let mut out = &ctl;
    out.write_all(&serde_json::to_vec(&report)?)?;
    let _ = ctl.shutdown(std::net::Shutdown::Write);
    drop(end);
    Ok(())
}
