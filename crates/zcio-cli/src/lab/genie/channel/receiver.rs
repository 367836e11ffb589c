//! The receiving side of a run: the bench's process, with the sender started as `zcio
//! channel-sender`; the protocol of a run is in [`super::sender`].

use super::sender::Report;
use super::{Contender, Granule, Ring, STALL, await_client, check, fill, monotonic_ns};
use super::{ICEORYX_QUEUE, pool_message, process_cpu_ns, reply_message, unique_name};
use super::{waits, warm_up, window};
use crate::error::Context;
use crate::lab::fbufs::bench::Said;
use crate::transfer::{NoConnection, Res, accept_child, zcio_command};
use iceoryx2::port::update_connections::UpdateConnections;
use iceoryx2::prelude::*;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::Child;
use std::time::{Duration, Instant};
use zcio_genie::channel::Channel;
use zcio_genie::memnet::loan::Received;
use zcio_genie::memnet::{LinkOptions, Ticket};
use zcio_genie::{AppBuffer, InputBuffering, Semantics};

/// How often a waiting iceoryx2 receiver looks whether the sender is still there.
const TICK: Duration = Duration::from_millis(100);

/// What one run measured.
#[derive(Debug)]
pub(super) struct RunResult {
    /// Median one-way latency of the one-at-a-time messages (ns).
    pub latency_ns: f64,
    /// Half the median ping-pong round trip (ns).
    pub pingpong_ns: f64,
    /// Streamed throughput (GB/s).
    pub throughput_gbps: f64,
    /// Median send time of the one-at-a-time messages (ns).
    pub send_ns: f64,
    /// CPU time per streamed message, both processes (ns).
    pub cpu_ns: f64,
    /// Messages checked, replies included.
    pub checked: u64,
    /// The first message (or reply) that differed and where.
    pub first_mismatch: Option<(u64, usize)>,
    /// zcio's window.
    pub window: Option<usize>,
    /// zcio's path, both ends.
    pub path: Option<String>,
    /// zcio's VM granule.
    pub vm_granule: Option<String>,
    /// zcio-loan: the median time to take a message's loan (ns), also counted in every time
    /// above.
    pub make_ns: Option<f64>,
    /// zcio-loan: the messages mapped and not.
    pub loans: Option<LoanCount>,
}

/// The loans' messages at the receiver: how many came mapped ([`Received::is_mapped`]), how
/// many not (received into a buffer made for them), the input path of the first that came
/// not mapped, and how many were volatile ([`Received::is_volatile`]).
#[derive(Debug, Default, Clone)]
pub(super) struct LoanCount {
    pub mapped: u64,
    pub unmapped: u64,
    pub unmapped_path: Option<String>,
    pub volatile: u64,
}

impl LoanCount {
    pub(super) fn add(&mut self, o: LoanCount) {
        self.mapped += o.mapped;
        self.unmapped += o.unmapped;
        self.volatile += o.volatile;
        if self.unmapped_path.is_none() {
            self.unmapped_path = o.unmapped_path;
        }
    }
}

/// The receiving end of a contender's transport.
enum RxEnd {
    Zcio(Box<ZcioRx>),
    Iceoryx2(Box<IceoryxRx>),
    Unix(UnixStream),
}

/// zcio's receiving side: the channel, the semantics, the last input's accounting, the last
/// reply's ticket (until waited for).
struct ZcioRx {
    ch: Channel,
    sem: Semantics,
    /// zcio-loan: each message received by `recv_loan`, held (by the address of the ring
    /// slot it stands for) until it is checked; and how many came mapped.
    loans: Option<Loans>,
    last: Option<zcio_genie::Accounting>,
    reply: Option<Ticket>,
}

/// zcio-loan's receiving side: the messages held until checked, and how many came mapped.
#[derive(Default)]
struct Loans {
    held: std::collections::HashMap<usize, Received>,
    count: LoanCount,
}

/// Read a byte of every 4 KiB page of `m` (their sum): a loan is mapped lazily, and the first
/// touch of each page, which faults it in, is part of receiving it, as writing every page is
/// part of the other contenders' receives.
fn touch_pages(m: &[u8]) -> u8 {
    m.iter()
        .step_by(4096)
        .fold(0u8, |sum, b| sum.wrapping_add(*b))
}

/// An iceoryx2 publish-subscribe service of `[u8]` slices and its port factory.
pub(super) type PubSub =
    iceoryx2::service::port_factory::publish_subscribe::PortFactory<ipc::Service, [u8], ()>;
/// An iceoryx2 event service's port factory.
pub(super) type Event = iceoryx2::service::port_factory::event::PortFactory<ipc::Service>;
/// A subscriber of `[u8]` slices.
pub(super) type Subscriber = iceoryx2::port::subscriber::Subscriber<ipc::Service, [u8], ()>;
/// A publisher of `[u8]` slices.
pub(super) type Publisher = iceoryx2::port::publisher::Publisher<ipc::Service, [u8], ()>;
/// An event listener.
pub(super) type Listener = iceoryx2::port::listener::Listener<ipc::Service>;

/// iceoryx2's receiving side: the messages' subscriber and listener, the replies' publisher
/// and notifier (a second pair of services, the other way); its node and services are kept
/// for the ports' sake.
struct IceoryxRx {
    subscriber: Subscriber,
    listener: Listener,
    reply_publisher: Publisher,
    reply_notifier: iceoryx2::port::notifier::Notifier<ipc::Service>,
    _pubsub: PubSub,
    _event: Event,
    _reply_pubsub: PubSub,
    _reply_event: Event,
    _node: Node<ipc::Service>,
}

/// The data transport a run sets up before the sender starts.
enum Setup {
    /// The listener, the semantics, and for the loans whether they are volatile.
    Zcio(
        zcio_genie::channel::ChannelListener,
        Semantics,
        Option<bool>,
    ),
    Iceoryx2(Box<IceoryxRx>),
    Unix(UnixListener),
}

/// The sending process, killed and reaped unless it has been waited for, and its standard
/// error, quoted if it fails.
struct Sender(Option<Child>, Option<Said>);

impl Sender {
    /// `e`, with what became of the sender and what it said, if it has ended (waiting a
    /// moment for it to).
    fn explain(&mut self, e: crate::error::Error) -> crate::error::Error {
        let Some(c) = self.0.as_mut() else {
            return e;
        };
        match crate::transfer::ended_within(c, Duration::from_secs(2)) {
            Some(s) => {
                self.0 = None;
                let said = self.1.take().map(Said::text).unwrap_or_default();
                if said.is_empty() {
                    e.context(format!("the sender process ended: {s}"))
                } else {
                    format!("{e} (the sender process ended: {s}: {said})").into()
                }
            }
            None => e,
        }
    }

    /// Wait for it to end; an error unless it succeeded.
    fn finish(&mut self) -> Res<()> {
        let Some(mut c) = self.0.take() else {
            return Ok(());
        };
        let status = c.wait()?;
        if !status.success() {
            let said = self.1.take().map(Said::text).unwrap_or_default();
            return Err(format!("the sender process ended: {status}: {said}").into());
        }
        Ok(())
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub(super) fn node() -> Res<Node<ipc::Service>> {
    // Errors only on the console, unless IOX2_LOG_LEVEL says otherwise; no signal handlers
    // (Ctrl-C ends the bench as usual).
    iceoryx2::prelude::set_log_level_from_env_or(LogLevel::Error);
    Ok(NodeBuilder::new()
        .signal_handling_mode(SignalHandlingMode::Disabled)
        .create::<ipc::Service>()?)
}

/// The publish-subscribe service of a run, the same at both ends: page-aligned `[u8]`
/// payloads, nothing lost, one publisher and one subscriber with a queue of two.
pub(super) fn iceoryx_pubsub<'a>(
    node: &'a Node<ipc::Service>,
    name: &'a ServiceName,
) -> iceoryx2::service::builder::publish_subscribe::Builder<[u8], (), ipc::Service> {
    node.service_builder(name)
        .publish_subscribe::<[u8]>()
        .payload_alignment(Alignment::new(4096).expect("a power of two"))
        .enable_safe_overflow(false)
        .subscriber_max_buffer_size(ICEORYX_QUEUE)
        .subscriber_max_borrowed_samples(1)
        .history_size(0)
        .max_subscribers(1)
        .max_publishers(1)
}

/// The name of the iceoryx2 services that carry a run's ping-pong replies, beside `name`'s.
pub(super) fn reply_service(name: &str) -> Res<ServiceName> {
    Ok(ServiceName::new(&format!("{name}-reply"))?)
}

fn setup(c: Contender, bytes: usize, dir: &std::path::Path) -> Res<(Setup, String)> {
    Ok(match c {
        Contender::Zcio(_) | Contender::Loan | Contender::VolatileLoan => {
            let name = unique_name("zcio");
            let mut l = Channel::listen(&name)?;
            l.set_link_options(LinkOptions {
                window: window(bytes),
            });
            match c {
                Contender::Zcio(sem) => (Setup::Zcio(l, sem, None), name),
                _ => (
                    Setup::Zcio(l, Semantics::Copy, Some(c == Contender::VolatileLoan)),
                    name,
                ),
            }
        }
        Contender::Iceoryx2 => {
            let name = unique_name("iceoryx2");
            let node = node()?;
            let sname = ServiceName::new(&name)?;
            let pubsub = iceoryx_pubsub(&node, &sname).create()?;
            let event = node
                .service_builder(&sname)
                .event()
                .max_notifiers(1)
                .max_listeners(1)
                .create()?;
            let subscriber = pubsub
                .subscriber_builder()
                .buffer_size(ICEORYX_QUEUE)
                .create()?;
            let listener = event.listener_builder().create()?;
            // The replies: the same kind of services the other way, for 1-byte samples.
            let rname = reply_service(&name)?;
            let reply_pubsub = iceoryx_pubsub(&node, &rname).create()?;
            let reply_event = node
                .service_builder(&rname)
                .event()
                .max_notifiers(1)
                .max_listeners(1)
                .create()?;
            let reply_publisher = reply_pubsub
                .publisher_builder()
                .initial_max_slice_len(1)
                .max_loaned_samples(1)
                .create()
                .map_err(|e| format!("iceoryx2: a publisher of replies: {e:?}"))?;
            let reply_notifier = reply_event.notifier_builder().create()?;
            (
                Setup::Iceoryx2(Box::new(IceoryxRx {
                    subscriber,
                    listener,
                    reply_publisher,
                    reply_notifier,
                    _pubsub: pubsub,
                    _event: event,
                    _reply_pubsub: reply_pubsub,
                    _reply_event: reply_event,
                    _node: node,
                })),
                name,
            )
        }
        Contender::Unix => {
            let path = dir.join("data");
            let l = UnixListener::bind(&path)?;
            (Setup::Unix(l), path.to_string_lossy().into_owned())
        }
    })
}

/// Accept `child`'s connection on `l` (unless it ends first or [`STALL`] passes).
fn accept(l: &UnixListener, child: &mut Child, what: &str) -> Res<UnixStream> {
    match accept_child(l, Some(child), Some(STALL)) {
        Ok(s) => Ok(s),
        Err(NoConnection::Ended(s)) => {
            Err(format!("the sender ended before connecting its {what}: {s}").into())
        }
        Err(NoConnection::Stalled) => Err(format!("the sender did not connect its {what}").into()),
        Err(NoConnection::Io(e)) => Err(e.into()),
    }
}

/// Read the one-byte word `want` from the sender.
pub(super) fn expect(mut sock: &UnixStream, want: u8, what: &str) -> Res<()> {
    let mut b = [0u8; 1];
    loop {
        return match sock.read(&mut b) {
            Ok(1) if b[0] == want => Ok(()),
            Ok(1) => Err(format!("while waiting for {what}: got {:?}", b[0] as char).into()),
            Ok(_) => Err(format!("while waiting for {what}: the other process hung up").into()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => Err(format!("while waiting for {what}: {e}").into()),
        };
    }
}

/// Say the one-byte word `b` to the other process.
pub(super) fn say(mut sock: &UnixStream, b: &[u8]) -> Res<()> {
    sock.write_all(b)?;
    Ok(())
}

/// Whether the other end of `sock` has said something or hung up.
pub(super) fn readable(sock: &UnixStream) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(sock, PollFlags::IN)];
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
}

/// Wait for `subscriber`'s next sample, blocking in `listener` between looks (the other
/// process saying anything on `ctl` while it should be sending, or [`STALL`] without a
/// sample, is an error).
pub(super) fn next_sample(
    subscriber: &Subscriber,
    listener: &Listener,
    ctl: &UnixStream,
) -> Res<iceoryx2::sample::Sample<ipc::Service, [u8], ()>> {
    let t0 = Instant::now();
    loop {
        if let Some(s) = subscriber.receive()? {
            return Ok(s);
        }
        if listener.timed_wait(|_| {}, TICK)? == 0 {
            if readable(ctl) {
                return Err("the other process went away".into());
            }
            if t0.elapsed() > STALL {
                return Err(format!("no message for {} s", STALL.as_secs()).into());
            }
        }
    }
}

/// Copy iceoryx2 sample `s` into `buf`, which is the message's length.
pub(super) fn copy_sample(s: &[u8], buf: &mut [u8]) -> Res<()> {
    if s.len() != buf.len() {
        return Err(format!("a sample of {} bytes, not {}", s.len(), buf.len()).into());
    }
    buf.copy_from_slice(s);
    Ok(())
}

/// Write the 8-byte length of `buf` and `buf` on `s` with one `writev` (more where the socket
/// takes part of them).
pub(super) fn write_framed(mut s: &UnixStream, buf: &[u8]) -> Res<()> {
    let h = (buf.len() as u64).to_le_bytes();
    let mut parts = [IoSlice::new(&h), IoSlice::new(buf)];
    let mut rest = &mut parts[..];
    while !rest.is_empty() {
        match s.write_vectored(rest) {
            Ok(0) => return Err("the socket took nothing: the other end is gone".into()),
            Ok(k) => IoSlice::advance_slices(&mut rest, k),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Read a message framed by [`write_framed`] into `buf`, which is its length: one `readv` of
/// the length word and `buf` (more where the socket has part of them), then the length
/// checked.
pub(super) fn read_framed(mut s: &UnixStream, buf: &mut [u8]) -> Res<()> {
    let want = buf.len();
    let mut h = [0u8; 8];
    let mut got = 0;
    {
        let mut parts = [IoSliceMut::new(&mut h), IoSliceMut::new(buf)];
        let mut rest = &mut parts[..];
        while !rest.is_empty() {
            match s.read_vectored(rest) {
                Ok(0) => {
                    return Err(
                        format!("the other end hung up after {got} of {} bytes", 8 + want).into(),
                    );
                }
                Ok(k) => {
                    got += k;
                    IoSliceMut::advance_slices(&mut rest, k);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    let len = u64::from_le_bytes(h) as usize;
    if len != want {
        return Err(format!("a length of {len} bytes, not {want}").into());
    }
    Ok(())
}

/// Take iceoryx2 sample `s` into `buf` and check it against message `i`.
fn take_sample(s: &[u8], buf: &mut [u8], i: u64) -> Res<()> {
    copy_sample(s, buf)?;
    match check(buf, i) {
        None => Ok(()),
        Some(at) => Err(format!("pool warm-up message {i} differs at byte {at}").into()),
    }
}

/// iceoryx2's pool warm-up, as `zcio bench fbufs` does it: every sample of the publisher's
/// pool written by the sender and read here once before any clock runs (a sample used for the
/// first time costs page faults at both ends). The sender fills the queue; this end takes one
/// sample and holds it; the sender sends one more and loans the last free sample; this end
/// lets go and takes the rest. The messages taken, each checked.
fn pool_warm_up(rx: &IceoryxRx, ctl: &UnixStream, buf: &mut [u8]) -> Res<u64> {
    expect(ctl, b'q', "the sender to fill the queue")?;
    let held = next_sample(&rx.subscriber, &rx.listener, ctl)?;
    take_sample(held.payload(), buf, pool_message(0))?;
    say(ctl, b"h")?;
    expect(ctl, b'l', "the sender to loan the last sample")?;
    drop(held);
    for k in 1..ICEORYX_QUEUE + 2 {
        let s = next_sample(&rx.subscriber, &rx.listener, ctl)
            .with_context(|| format!("pool warm-up message {k}"))?;
        take_sample(s.payload(), buf, pool_message(k))?;
    }
    Ok(ICEORYX_QUEUE as u64 + 2)
}

impl RxEnd {
    /// The bytes of the message last received for the ring slot `slot`: the slot, or the loan
    /// held for it.
    fn bytes_of<'a>(&'a self, slot: &'a [u8]) -> &'a [u8] {
        match self {
            RxEnd::Zcio(z) => match z
                .loans
                .as_ref()
                .and_then(|l| l.held.get(&(slot.as_ptr() as usize)))
            {
                Some(m) => m,
                None => slot,
            },
            _ => slot,
        }
    }

    /// Let the loans held go, once checked (outside the times taken: the other contenders'
    /// buffers stay for the next message).
    fn release(&mut self) {
        if let RxEnd::Zcio(z) = self
            && let Some(l) = &mut z.loans
        {
            l.held.clear();
        }
    }

    /// Take the next message into `buf` (all of it: `buf` is its length).
    fn recv(&mut self, buf: &mut [u8], ctl: &UnixStream) -> Res<()> {
        match self {
            RxEnd::Zcio(z) => {
                if let Some(l) = &mut z.loans {
                    let (m, acc) = z.ch.recv_loan()?;
                    std::hint::black_box(touch_pages(&m));
                    if m.len() != buf.len() {
                        return Err(
                            format!("a message of {} bytes, not {}", m.len(), buf.len()).into()
                        );
                    }
                    l.count.volatile += u64::from(m.is_volatile());
                    if m.is_mapped() {
                        l.count.mapped += 1;
                    } else {
                        l.count.unmapped += 1;
                        l.count
                            .unmapped_path
                            .get_or_insert_with(|| acc.path.to_string());
                    }
                    if l.held.insert(buf.as_ptr() as usize, m).is_some() {
                        return Err("a loan received for a slot whose last was not checked".into());
                    }
                    z.last = Some(acc);
                    return Ok(());
                }
                let (len, acc) = z.ch.recv(z.sem, buf, InputBuffering::EarlyDemux)?;
                if len != buf.len() {
                    return Err(format!("a message of {len} bytes, not {}", buf.len()).into());
                }
                z.last = Some(acc);
            }
            RxEnd::Iceoryx2(rx) => {
                let s = next_sample(&rx.subscriber, &rx.listener, ctl)?;
                copy_sample(s.payload(), buf)?;
            }
            RxEnd::Unix(s) => read_framed(s, buf)?,
        }
        Ok(())
    }

    /// Before the reply buffer is written again: zcio waits for the previous reply's ticket.
    fn prepare_reply(&mut self) -> Res<()> {
        if let RxEnd::Zcio(z) = self
            && let Some(t) = z.reply.take()
        {
            z.ch.wait(t)?;
        }
        Ok(())
    }

    /// Send the reply `buf` the other way over the same transport.
    fn reply(&mut self, buf: &[u8]) -> Res<()> {
        match self {
            RxEnd::Zcio(z) => {
                let (t, _) = z.ch.send(z.sem, buf)?;
                z.reply = Some(t);
            }
            RxEnd::Iceoryx2(rx) => {
                let s = rx
                    .reply_publisher
                    .loan_slice_uninit(buf.len())
                    .map_err(|e| format!("iceoryx2: loaning a reply: {e:?}"))?;
                let k = s
                    .write_from_slice(buf)
                    .send()
                    .map_err(|e| format!("iceoryx2: sending a reply: {e:?}"))?;
                if k != 1 {
                    return Err(format!("iceoryx2: a reply reached {k} subscribers, not 1").into());
                }
                rx.reply_notifier.notify()?;
            }
            RxEnd::Unix(s) => write_framed(s, buf)?,
        }
        Ok(())
    }

    /// After the ping-pong: zcio waits until the sender has every reply.
    fn finish_replies(&mut self) -> Res<()> {
        if let RxEnd::Zcio(z) = self {
            z.ch.flush()?;
            z.reply = None;
        }
        Ok(())
    }
}

/// One run of contender `c`: after the warm-up, `s` messages one at a time, `s` ping-pong round
/// trips and `n` messages streamed, into `ring` (the receiver's `n` buffers of the message
/// size, at `granule`).
pub(super) fn run(
    c: Contender,
    granule: Granule,
    ring: &mut Ring,
    s: usize,
    cpus: Option<[usize; 2]>,
) -> Res<RunResult> {
    let (n, bytes) = (ring.len(), ring.bytes());
    let _pinned = cpus.map(|[me, _]| super::Pinned::to(me));
    let dir = tempfile::tempdir()?;
    let ctl_path = dir.path().join("ctl");
    let ctl_listener = UnixListener::bind(&ctl_path)?;
    let (setup, name) = setup(c, bytes, dir.path()).context("setting up")?;
    // Volatile loans come from a pool of files, which the warm-up fills as iceoryx2's is:
    // every file a stream needs made and lent once.
    let w = if c == Contender::VolatileLoan {
        n
    } else {
        warm_up(bytes, n)
    };
    let mut cmd = zcio_command()?;
    cmd.arg("channel-sender");
    if let Some([_, them]) = cpus {
        cmd.args(["--cpu", &them.to_string()]);
    }
    let mut child = cmd
        .arg("--connect")
        .arg(&ctl_path)
        .args(["--contender", &c.name(), "--name", &name])
        .args(["--bytes", &bytes.to_string(), "--granule", granule.name()])
        .args(["--warm-up", &w.to_string(), "--messages", &n.to_string()])
        .args(["--one-at-a-time", &s.to_string()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let said = Said::collect(&mut child);
    let mut sender = Sender(Some(child), Some(said));
    let r = (|| -> Res<RunResult> {
        let child = sender.0.as_mut().expect("running");
        let ctl = accept(&ctl_listener, child, "control socket")?;
        ctl.set_read_timeout(Some(STALL))?;
        let mut end = match setup {
            Setup::Zcio(l, sem, loans) => {
                await_client(&l, child)?;
                let mut ch = l.accept(Some(STALL))?;
                ch.set_waits(waits());
                ch.set_volatile_loans(loans == Some(true));
                RxEnd::Zcio(Box::new(ZcioRx {
                    ch,
                    sem,
                    loans: loans.map(|_| Loans::default()),
                    last: None,
                    reply: None,
                }))
            }
            Setup::Iceoryx2(rx) => RxEnd::Iceoryx2(rx),
            Setup::Unix(l) => {
                let s = accept(&l, child, "socket")?;
                s.set_read_timeout(Some(STALL))?;
                RxEnd::Unix(s)
            }
        };
        expect(&ctl, b'r', "the sender to be ready")?;
        if let RxEnd::Iceoryx2(rx) = &end {
            // The publisher is there: connect to it before it sends; and the replies'
            // subscriber, to it.
            rx.subscriber.update_connections()?;
            rx.reply_publisher.update_connections()?;
        }
        say(&ctl, b"c")?;
        let mut pool = 0;
        if let RxEnd::Iceoryx2(rx) = &end {
            pool = pool_warm_up(rx, &ctl, ring.slot_mut(0))?;
        }
        let mut r = receive(&mut end, &ctl, ring, w, s)?;
        r.checked += pool;
        Ok(r)
    })();
    let r = r.map_err(|e| sender.explain(e));
    let r = r?;
    sender.finish()?;
    Ok(r)
}

/// Checks of a run's messages: how many, and the first that differed.
#[derive(Default)]
struct Checks {
    checked: u64,
    first_mismatch: Option<(u64, usize)>,
}

impl Checks {
    /// Check `buf` against message `i`.
    fn check(&mut self, buf: &[u8], i: usize) {
        if let (None, Some(at)) = (self.first_mismatch, check(buf, i as u64)) {
            self.first_mismatch = Some((i as u64, at));
        }
        self.checked += 1;
    }
}

/// The messages of a run, into `ring` (`n` buffers): `w` streamed for warm-up, `s` one at a
/// time, `s` ping-pong round trips (each message answered by a 1-byte reply), `n` streamed;
/// then the sender's report, and the run's numbers.
fn receive(
    end: &mut RxEnd,
    ctl: &UnixStream,
    ring: &mut Ring,
    w: usize,
    s: usize,
) -> Res<RunResult> {
    let (n, bytes) = (ring.len(), ring.bytes());
    let (pingpong, stream) = (w + s, w + 2 * s);
    let total = stream + n;
    let mut checks = Checks::default();
    let take = |end: &mut RxEnd, buf: &mut [u8], i: usize| -> Res<()> {
        end.recv(buf, ctl)
            .with_context(|| format!("message {i} of {total}"))
    };
    // Warm-up: streamed into the ring, checked afterwards.
    for i in 0..w {
        take(end, ring.slot_mut(i), i)?;
    }
    for i in 0..w {
        checks.check(end.bytes_of(ring.slot(i)), i);
    }
    end.release();
    // One at a time: go-ahead, receipt, check.
    let mut receipt = vec![0u64; total];
    for (i, at) in receipt.iter_mut().enumerate().skip(w).take(s) {
        say(ctl, b"g")?;
        take(end, ring.slot_mut(0), i)?;
        *at = monotonic_ns();
        checks.check(end.bytes_of(ring.slot(0)), i);
        end.release();
    }
    // Ping-pong: the reply written, go-ahead, receipt, reply, check.
    let mut reply = AppBuffer::new(1)?;
    for i in pingpong..stream {
        end.prepare_reply()?;
        fill(&mut reply, reply_message(i as u64));
        say(ctl, b"g")?;
        take(end, ring.slot_mut(0), i)?;
        end.reply(&reply)
            .with_context(|| format!("the reply to message {i}"))?;
        checks.check(end.bytes_of(ring.slot(0)), i);
        end.release();
    }
    end.finish_replies()?;
    // Streamed, once the sender has written its messages: into the ring, checked afterwards.
    expect(ctl, b's', "the sender to have written the stream")?;
    let cpu0 = process_cpu_ns();
    say(ctl, b"g")?;
    for k in 0..n {
        let i = stream + k;
        take(end, ring.slot_mut(k), i)?;
        receipt[i] = monotonic_ns();
    }
    let cpu = process_cpu_ns() - cpu0;
    for k in 0..n {
        checks.check(end.bytes_of(ring.slot(k)), stream + k);
    }
    end.release();
    say(ctl, b"d")?;
    let mut text = Vec::new();
    let mut rd = ctl;
    rd.read_to_end(&mut text).context("the sender's report")?;
    let rep: Report = serde_json::from_slice(&text).context("the sender's report (not JSON)")?;
    if rep.start_ns.len() != total || rep.send_ns.len() != total || rep.round_trip_ns.len() != s {
        return Err(format!(
            "the sender's report has {} start times, {} send times, {} round trips; {total} messages were sent, {s} of them round trips",
            rep.start_ns.len(),
            rep.send_ns.len(),
            rep.round_trip_ns.len()
        )
        .into());
    }
    checks.checked += rep.replies_checked;
    if checks.first_mismatch.is_none() {
        checks.first_mismatch = rep.reply_mismatch;
    }
    // zcio-loan makes a loan for every message (a sealed one is never reused): its making is
    // part of each message's cost, where the others reuse buffers made once.
    let alloc = |i: usize| rep.alloc_ns.get(i).copied().unwrap_or(0);
    let lat: Vec<f64> = (w..w + s)
        .map(|i| (receipt[i].saturating_sub(rep.start_ns[i]) + alloc(i)) as f64)
        .collect();
    let send: Vec<f64> = (w..w + s).map(|i| rep.send_ns[i] as f64).collect();
    let rtt: Vec<f64> = rep.round_trip_ns.iter().map(|t| *t as f64).collect();
    let stream_ns = receipt[total - 1].saturating_sub(rep.start_ns[stream])
        + (stream..total).map(alloc).sum::<u64>();
    let make: Vec<f64> = rep.alloc_ns.iter().map(|t| *t as f64).collect();
    let loans = match end {
        RxEnd::Zcio(z) => z.loans.as_ref().map(|l| l.count.clone()),
        _ => None,
    };
    let (window, path, vm_granule) = match end {
        RxEnd::Zcio(z) => (
            z.ch.memnet().map(|m| m.window()),
            Some(format!(
                "output: {}; input: {}",
                rep.path.as_deref().unwrap_or("?"),
                z.last.as_ref().map_or("?".into(), |a| a.path.to_string())
            )),
            rep.vm_granule.clone().or_else(|| {
                z.last
                    .as_ref()
                    .and_then(|a| a.granule.map(|g| g.name().to_string()))
            }),
        ),
        _ => (None, None, None),
    };
    Ok(RunResult {
        latency_ns: super::median(&lat).unwrap_or(0.0),
        pingpong_ns: super::median(&rtt).unwrap_or(0.0) / 2.0,
        throughput_gbps: (n * bytes) as f64 / stream_ns.max(1) as f64,
        send_ns: super::median(&send).unwrap_or(0.0),
        cpu_ns: (rep.stream_cpu_ns + cpu) as f64 / n as f64,
        checked: checks.checked,
        first_mismatch: checks.first_mismatch,
        window,
        path,
        vm_granule,
        make_ns: super::median(&make),
        loans,
    })
}
