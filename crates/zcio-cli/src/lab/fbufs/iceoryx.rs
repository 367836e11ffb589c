//! iceoryx2 (eclipse-iceoryx/iceoryx2), a present-day zero-copy IPC middleware, as a peer of
//! paper 001's fbufs in `zcio bench fbufs`: the same experiment as the fbuf contenders of
//! [`super::bench`]. A publisher in this process streams `count` messages of `bytes` (a
//! slice payload sized per run) through an iceoryx2 publish-subscribe service to a subscriber
//! in another process (the hidden `zcio iceoryx2-sink`); both touch every message one word per
//! 4 KiB page, or every byte. The time per message is taken over the whole stream, up to the
//! receiver's "done", as for the other contenders.
//!
//! # The service
//!
//! - No message is lost: safe overflow is off and the publisher's backpressure strategy is
//!   `RetryUntilDelivered`, so a publisher that finds the subscriber's queue full waits
//!   (iceoryx2's adaptive wait: it yields, then sleeps 100 µs, then 10 ms) until the subscriber
//!   has taken a sample. A backpressure handler ends the wait with an error when the receiver
//!   process has gone (its control socket hangs up) or nothing moved for [`STALL`].
//! - As much in flight as the fbuf path holds: [`in_flight`] samples (at least 8, and at least
//!   8 MiB), that is the subscriber's queue plus the sample the subscriber holds plus the one
//!   the publisher has loaned; one subscriber, one publisher, no history.
//! - Payloads start on a page boundary, as fbufs do, so that one word per 4 KiB is one word
//!   per VM page.
//!
//! # Waiting
//!
//! The subscriber waits the usual iceoryx2 way, on an event service of the same name: the
//! publisher notifies after each send, and the subscriber, when it has drained its queue,
//! blocks in `Listener::timed_wait` (a Unix datagram socket underneath) instead of polling,
//! as the fbuf receiver blocks on its socket. iceoryx2 skips the system call when a
//! notification is still pending, so a busy subscriber costs the publisher no syscalls.
//!
//! # Warm-up
//!
//! Before the clock starts every sample of the pool has been written by the publisher and read
//! by the subscriber once (the fbuf runs likewise fill their path first): the publisher fills
//! the queue, the subscriber takes one sample and holds it, the publisher sends one more and
//! loans the last free sample, then the subscriber drains everything.
//!
//! # Checking
//!
//! As for the other contenders ([`super::bench`], "Checking what is timed"): the first word
//! of each page carries [`stamp`]`(message index, page)`, and with every byte touched the rest
//! of the page [`fill`]`(message index)`. The subscriber's touch keeps what it read in a
//! [`Record`] (the word per page, or each page's first word and the sum of the others); once it
//! has said "done" (the publisher's clock stops there) it checks every page of every message,
//! so a lost, repeated, reordered or corrupted message makes it exit with an error naming the
//! contender, the message and the page, which the publisher's side quotes.
//!
//! # No `unsafe`
//!
//! iceoryx2's safe slice loans (`loan_slice`, `write_from_fn` over bytes) initialise every
//! byte, which would add a memset of the whole payload to the word-per-page runs. Here the
//! word-per-page payload is a slice of [`Page`]s whose only initialised field is the word the
//! experiment writes; the rest of each page is `MaybeUninit`, never written and never read, so
//! `write_from_fn` writes one word per page and the code stays safe.

pub use crate::lab::fbufs::bench::Fault;
use crate::lab::fbufs::bench::{Mismatch, Record, Said, Touch, fill, stamp};
use crate::transfer::{NoConnection, Res, zcio_command};
use iceoryx2::port::update_connections::UpdateConnections;
use iceoryx2::port::{BackpressureAction, BackpressureInfo};
use iceoryx2::prelude::*;
use iceoryx2::sample_mut::SampleMut;
use iceoryx2::sample_mut_uninit::SampleMutUninit;
use iceoryx2::service::builder::publish_subscribe::Builder;
use std::fmt::Debug;
use std::io::{Read, Write};
use std::mem::MaybeUninit;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::Child;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The contender's name in tables and JSON.
pub const NAME: &str = "iceoryx2";

const PS: usize = 4096;

/// How long either side waits for the other without any progress before it gives up.
pub const STALL: Duration = Duration::from_secs(60);

/// How often a waiting subscriber looks whether the publisher's process is still there.
const TICK: Duration = Duration::from_millis(100);

/// Samples in flight for messages of `bytes`: at least 8, and at least 8 MiB, like the fbuf
/// path's quota.
pub fn in_flight(bytes: usize) -> usize {
    ((8usize << 20) / bytes.max(1)).max(8)
}

/// One 4 KiB page of a word-per-page message: the word both sides touch, and the rest, which
/// neither side writes or reads.
#[repr(C)]
#[derive(Debug, ZeroCopySend)]
pub struct Page {
    word: u64,
    rest: [MaybeUninit<u8>; PS - 8],
}

type Uninit<U> = SampleMutUninit<ipc::Service, [MaybeUninit<U>], ()>;
type Written<U> = SampleMut<ipc::Service, [U], ()>;

/// What a message is made of under one touch pattern: how the publisher writes it, how the
/// subscriber touches it.
trait Unit: Debug + ZeroCopySend + Sized + 'static {
    /// The touch pattern.
    const TOUCH: Touch;
    /// Elements per 4 KiB page.
    const PER_PAGE: usize;
    /// Write message `message` into a loaned sample.
    fn write(s: Uninit<Self>, message: u64) -> Written<Self>;
    /// Spoil the last word the receiver reads: the last page's stamp for one word per page,
    /// the message's last word (past the stamp) for every byte.
    fn spoil(s: &mut Written<Self>);
    /// Touch a received message, keeping what was read in `rec` (checked later).
    fn touch(payload: &[Self], rec: &mut Record);
}

impl Unit for Page {
    const TOUCH: Touch = Touch::Word;
    const PER_PAGE: usize = 1;
    fn write(s: Uninit<Self>, message: u64) -> Written<Self> {
        s.write_from_fn(|p| Page {
            word: stamp(message, p),
            rest: [MaybeUninit::uninit(); PS - 8],
        })
    }
    fn spoil(s: &mut Written<Self>) {
        if let Some(p) = s.payload_mut().last_mut() {
            p.word ^= 1;
        }
    }
    fn touch(payload: &[Self], rec: &mut Record) {
        rec.stamps(payload.iter().map(|p| p.word));
    }
}

impl Unit for u64 {
    const TOUCH: Touch = Touch::All;
    const PER_PAGE: usize = PS / 8;
    fn write(s: Uninit<Self>, message: u64) -> Written<Self> {
        let v = fill(message);
        let mut s = s.write_from_fn(|_| v);
        for (p, page) in s.payload_mut().chunks_exact_mut(Self::PER_PAGE).enumerate() {
            page[0] = stamp(message, p);
        }
        s
    }
    fn spoil(s: &mut Written<Self>) {
        if let Some(w) = s.payload_mut().last_mut() {
            *w ^= 1;
        }
    }
    fn touch(payload: &[Self], rec: &mut Record) {
        rec.plain_words(payload);
    }
}

/// The publish-subscribe service of a run, the same on both sides.
fn pubsub<U: Unit>(
    node: &Node<ipc::Service>,
    name: &ServiceName,
    bytes: usize,
) -> Builder<[U], (), ipc::Service> {
    node.service_builder(name)
        .publish_subscribe::<[U]>()
        .payload_alignment(Alignment::new(PS).expect("a power of two"))
        .enable_safe_overflow(false)
        .subscriber_max_buffer_size(in_flight(bytes) - 2)
        .subscriber_max_borrowed_samples(1)
        .history_size(0)
        .max_subscribers(1)
        .max_publishers(1)
}

fn node() -> Res<Node<ipc::Service>> {
    // iceoryx2 logs warnings on the console (a full notification socket, for one): errors only,
    // unless IOX2_LOG_LEVEL says otherwise. Its signal handlers would keep Ctrl-C from ending
    // the command: none.
    iceoryx2::prelude::set_log_level_from_env_or(LogLevel::Error);
    Ok(NodeBuilder::new()
        .signal_handling_mode(SignalHandlingMode::Disabled)
        .create::<ipc::Service>()?)
}

/// A service name no other run uses: this process, a counter, the time.
fn service_name() -> String {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "zcio/bench-fbufs/{}-{}-{nanos}",
        std::process::id(),
        RUNS.fetch_add(1, Ordering::Relaxed)
    )
}

/// Whether the other end of `sock` has said something or hung up.
fn readable(sock: &UnixStream) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(sock, PollFlags::IN)];
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
}

/// Read the one-byte word `want` from the other side.
fn expect(mut sock: &UnixStream, want: u8, what: &str) -> Res<()> {
    let mut b = [0u8; 1];
    loop {
        // A wait the kernel interrupted (a signal, or io_uring's task work, ends a socket
        // read that has a timeout with EINTR) is waited again.
        return match sock.read(&mut b) {
            Ok(1) if b[0] == want => Ok(()),
            Ok(1) => Err(format!("while waiting for {what}: got {:?}", b[0] as char).into()),
            Ok(_) => Err(format!("while waiting for {what}: the other process hung up").into()),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => Err(format!("while waiting for {what}: {e}").into()),
        };
    }
}

/// The receiver process, killed and reaped unless it has been waited for, and its standard
/// error, quoted if it fails.
struct Receiver(Option<Child>, Option<Said>);

impl Receiver {
    fn new(mut child: Child) -> Receiver {
        let said = Said::collect(&mut child);
        Receiver(Some(child), Some(said))
    }

    /// `status`, with what the process said.
    fn ended(&mut self, status: std::process::ExitStatus) -> String {
        let said = self.1.take().map(Said::text).unwrap_or_default();
        if said.is_empty() {
            format!("the iceoryx2 receiver process ended: {status}")
        } else {
            format!("the iceoryx2 receiver process ended: {status}: {said}")
        }
    }

    /// Wait for it to end; an error unless it succeeded.
    fn finish(&mut self) -> Res<()> {
        let Some(mut c) = self.0.take() else {
            return Ok(());
        };
        let status = c.wait()?;
        if !status.success() {
            return Err(self.ended(status).into());
        }
        Ok(())
    }

    /// `e`, with what became of the receiver (and what it said).
    fn explain(&mut self, e: crate::error::Error) -> crate::error::Error {
        let Some(c) = self.0.as_mut() else {
            return e;
        };
        // It may be on its way out: give it a moment before killing it.
        match crate::transfer::ended_within(c, Duration::from_secs(2)) {
            Some(s) => {
                self.0 = None;
                format!("{e} ({})", self.ended(s)).into()
            }
            None => e,
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Accept the receiver's connection, unless its process ends first or [`STALL`] passes.
fn accept(listener: &UnixListener, rx: &mut Receiver) -> Res<UnixStream> {
    match crate::transfer::accept_child(listener, rx.0.as_mut(), Some(STALL)) {
        Ok(s) => Ok(s),
        Err(NoConnection::Ended(s)) => {
            rx.0 = None;
            Err(format!("{} before connecting", rx.ended(s)).into())
        }
        Err(NoConnection::Stalled) => Err("the iceoryx2 receiver process did not connect".into()),
        Err(NoConnection::Io(e)) => Err(e.into()),
    }
}

/// Stream `count` messages of `bytes` (a multiple of 4096) to a receiver process, both sides
/// touching them the `touch` way; the time per message (ns) over the whole stream.
pub fn run(bytes: usize, count: usize, touch: Touch, fault: Option<Fault>) -> Res<f64> {
    if bytes == 0 || bytes % PS != 0 || count == 0 {
        return Err(format!(
            "iceoryx2: {bytes} bytes × {count} messages (the size must be a positive multiple of 4096)"
        )
        .into());
    }
    match touch {
        Touch::Word => originate::<Page>(bytes, count, touch, fault),
        Touch::All => originate::<u64>(bytes, count, touch, fault),
    }
}

fn originate<U: Unit>(bytes: usize, count: usize, touch: Touch, fault: Option<Fault>) -> Res<f64> {
    let name = service_name();
    let sname = ServiceName::new(&name)?;
    let node = node()?;
    let service = pubsub::<U>(&node, &sname, bytes).create()?;
    let event = node
        .service_builder(&sname)
        .event()
        .max_notifiers(1)
        .max_listeners(1)
        .create()?;
    let dir = tempfile::tempdir()?;
    let ctl = dir.path().join("ctl");
    let listener = UnixListener::bind(&ctl)?;
    let warm = in_flight(bytes) as u64;
    let child = zcio_command()?
        .args(["iceoryx2-sink", "--connect"])
        .arg(&ctl)
        .args(["--service", &name, "--touch", touch.name()])
        .args(["--bytes", &bytes.to_string()])
        .args(["--messages", &(warm + count as u64).to_string()])
        // Its errors are quoted in the run's; stdout stays the bench's own (JSON on request).
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let mut rx = Receiver::new(child);
    let r = (|| -> Res<f64> {
        let sock = accept(&listener, &mut rx)?;
        sock.set_read_timeout(Some(STALL))?;
        let watch = sock.try_clone()?;
        let publisher = service
            .publisher_builder()
            .initial_max_slice_len(bytes / PS * U::PER_PAGE)
            .max_loaned_samples(1)
            .backpressure_strategy(BackpressureStrategy::RetryUntilDelivered)
            .set_backpressure_handler(move |i: &BackpressureInfo| {
                // Checked now and then: a poll per retry would slow the wait's first spins.
                if i.retries % 64 == 63 && (readable(&watch) || i.elapsed_time > STALL) {
                    BackpressureAction::DiscardDataAndFail
                } else {
                    BackpressureAction::Retry
                }
            })
            .create()?;
        let notifier = event.notifier_builder().create()?;
        expect(&sock, b'r', "the receiver to subscribe")?;
        publisher.update_connections()?;
        let pages = bytes / PS;
        let send = |s: Written<U>, i: u64| -> Res<()> {
            let n = s.send().map_err(|e| {
                format!("iceoryx2: sending message {i}: {e:?} (the receiver is gone or stuck)")
            })?;
            if n != 1 {
                return Err(format!("iceoryx2: message {i} reached {n} subscribers, not 1").into());
            }
            notifier.notify()?;
            Ok(())
        };
        let loan = |i: u64| -> Res<Written<U>> {
            let s = publisher
                .loan_slice_uninit(pages * U::PER_PAGE)
                .map_err(|e| format!("iceoryx2: loaning message {i}: {e:?}"))?;
            Ok(U::write(s, i))
        };
        // Warm-up: every sample of the pool written and read once (see the module docs).
        let queue = warm - 2;
        for i in 0..queue {
            send(loan(i)?, i)?;
        }
        (&sock).write_all(b"1")?;
        expect(&sock, b'h', "the receiver to hold a sample")?;
        send(loan(queue)?, queue)?;
        let last = loan(queue + 1)?;
        (&sock).write_all(b"2")?;
        send(last, queue + 1)?;
        expect(&sock, b'w', "the receiver to finish the warm-up")?;
        let t0 = Instant::now();
        for k in 0..count as u64 {
            if fault == Some(Fault::Skip(k)) {
                continue;
            }
            let i = warm + k;
            let mut s = loan(i)?;
            if fault == Some(Fault::Corrupt(k)) {
                U::spoil(&mut s);
            }
            send(s, i)?;
        }
        // Everything is sent: a receiver short of messages need not wait to be sure. A
        // receiver that already has them all may have said so and gone (then this write finds
        // the socket closed, and its 'd' is still there to read).
        let _ = (&sock).write_all(b"e");
        expect(&sock, b'd', "the receiver's last message")?;
        Ok(t0.elapsed().as_nanos() as f64 / count as f64)
    })();
    let ns = r.map_err(|e| rx.explain(e))?;
    rx.finish()?;
    Ok(ns)
}

/// `zcio iceoryx2-sink`: connect to `connect`, subscribe to `service`, take `messages`
/// messages of `bytes` (warm-up included), touch each, say when done, then check them all.
pub fn sink(connect: &Path, service: &str, touch: &str, bytes: usize, messages: u64) -> Res<()> {
    let touch = Touch::parse(touch).ok_or("unknown touch")?;
    let r = match touch {
        Touch::Word => receive::<Page>(connect, service, bytes, messages),
        Touch::All => receive::<u64>(connect, service, bytes, messages),
    };
    r.map_err(|e| format!("iceoryx2 receiver: {e}").into())
}

fn receive<U: Unit>(connect: &Path, service: &str, bytes: usize, messages: u64) -> Res<()> {
    // Allocated before the stream, so that keeping costs no page fault in it.
    let mut rec = Record::new(NAME, U::TOUCH, bytes, messages);
    match stream::<U>(connect, service, bytes, messages, &mut rec) {
        // "done" said: the publisher's clock has stopped.
        Ok(()) => Ok(rec.check()?),
        // A message that came wrong says more than the stream that broke after it.
        Err(e) => match rec.check() {
            Err(m) if !matches!(m, Mismatch::Count { .. }) => Err(m.into()),
            _ => Err(e),
        },
    }
}

/// Take the stream, touching each message into `rec`, and say "done".
fn stream<U: Unit>(
    connect: &Path,
    service: &str,
    bytes: usize,
    messages: u64,
    rec: &mut Record,
) -> Res<()> {
    let sock = UnixStream::connect(connect)?;
    sock.set_read_timeout(Some(STALL))?;
    let node = node()?;
    let sname = ServiceName::new(service)?;
    let pubsub = pubsub::<U>(&node, &sname, bytes).open()?;
    let event = node.service_builder(&sname).event().open()?;
    let queue = in_flight(bytes) - 2;
    let subscriber = pubsub.subscriber_builder().buffer_size(queue).create()?;
    let listener = event.listener_builder().create()?;
    (&sock).write_all(b"r")?;
    let mut next = 0u64;
    let mut progress = Instant::now();
    // The next sample, waiting for it on the listener.
    let mut ended = false;
    let mut take = |next: u64| -> Res<_> {
        loop {
            if let Some(s) = subscriber.receive()? {
                progress = Instant::now();
                return Ok(s);
            }
            if ended {
                return Err(format!(
                    "the publisher has sent everything, but message {next} and later did not come ({messages} expected: lost messages)"
                )
                .into());
            }
            if listener.timed_wait(|_| {}, TICK)? == 0 && readable(&sock) {
                // Said after the last send: whatever was sent is in the queue now.
                let mut b = [0u8; 1];
                match (&sock).read(&mut b) {
                    Ok(1) if b[0] == b'e' => ended = true,
                    _ => return Err("the publisher's process went away".into()),
                }
            } else if progress.elapsed() > STALL {
                return Err(format!("no message for {} s", STALL.as_secs()).into());
            }
        }
    };
    expect(&sock, b'1', "the publisher to fill the queue")?;
    let held = take(next)?;
    U::touch(held.payload(), rec);
    next += 1;
    (&sock).write_all(b"h")?;
    expect(&sock, b'2', "the publisher to loan the last sample")?;
    drop(held);
    let warm = queue as u64 + 2;
    while next < messages {
        let s = take(next)?;
        U::touch(s.payload(), rec);
        drop(s);
        next += 1;
        if next == warm {
            (&sock).write_all(b"w")?;
        }
    }
    (&sock).write_all(b"d")?;
    Ok(())
}
