//! The receiving side of a run: the bench's process, with the sender started as `zcio
//! channel-sender`; the protocol of a run is in [`super::sender`].

use super::sender::Report;
use super::{Contender, Granule, STALL, await_client, check, monotonic_ns, process_cpu_ns};
use super::{ICEORYX_QUEUE, pool_message, unique_name, waits, warm_up, window};
use crate::error::Context;
use crate::lab::fbufs::bench::Said;
use crate::transfer::{NoConnection, Res, accept_child, zcio_command};
use iceoryx2::port::update_connections::UpdateConnections;
use iceoryx2::prelude::*;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::Child;
use std::time::{Duration, Instant};
use zcio_genie::channel::Channel;
use zcio_genie::memnet::LinkOptions;
use zcio_genie::{AppBuffer, InputBuffering, Semantics};

/// How often a waiting iceoryx2 receiver looks whether the sender is still there.
const TICK: Duration = Duration::from_millis(100);

/// What one run measured.
#[derive(Debug)]
pub(super) struct RunResult {
    /// Median one-way latency of the one-at-a-time messages (ns).
    pub latency_ns: f64,
    /// Streamed throughput (GB/s).
    pub throughput_gbps: f64,
    /// Median send time of the one-at-a-time messages (ns).
    pub send_ns: f64,
    /// CPU time per streamed message, both processes (ns).
    pub cpu_ns: f64,
    /// Messages checked.
    pub checked: u64,
    /// The first message that differed and where.
    pub first_mismatch: Option<(u64, usize)>,
    /// zcio's window.
    pub window: Option<usize>,
    /// zcio's path, both ends.
    pub path: Option<String>,
    /// zcio's VM granule.
    pub vm_granule: Option<String>,
}

/// The receiving end of a contender's transport.
enum RxEnd {
    Zcio(Box<ZcioRx>),
    Iceoryx2(Box<IceoryxRx>),
    Unix(UnixStream),
}

/// zcio's receiving side: the channel, the semantics, the last input's accounting.
struct ZcioRx {
    ch: Channel,
    sem: Semantics,
    last: Option<zcio_genie::Accounting>,
}

/// iceoryx2's receiving side: its node and services are kept for the ports' sake.
struct IceoryxRx {
    subscriber: iceoryx2::port::subscriber::Subscriber<ipc::Service, [u8], ()>,
    listener: iceoryx2::port::listener::Listener<ipc::Service>,
    _pubsub:
        iceoryx2::service::port_factory::publish_subscribe::PortFactory<ipc::Service, [u8], ()>,
    _event: iceoryx2::service::port_factory::event::PortFactory<ipc::Service>,
    _node: Node<ipc::Service>,
}

/// The data transport a run sets up before the sender starts.
enum Setup {
    Zcio(zcio_genie::channel::ChannelListener, Semantics),
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

fn setup(c: Contender, bytes: usize, dir: &std::path::Path) -> Res<(Setup, String)> {
    Ok(match c {
        Contender::Zcio(sem) => {
            let name = unique_name("zcio");
            let mut l = Channel::listen(&name)?;
            l.set_link_options(LinkOptions {
                window: window(bytes),
            });
            (Setup::Zcio(l, sem), name)
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
            (
                Setup::Iceoryx2(Box::new(IceoryxRx {
                    subscriber,
                    listener,
                    _pubsub: pubsub,
                    _event: event,
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

/// Wait for iceoryx2's next sample (the sender gone, or [`STALL`] without one, is an error).
fn next_sample(
    rx: &IceoryxRx,
    ctl: &UnixStream,
) -> Res<iceoryx2::sample::Sample<ipc::Service, [u8], ()>> {
    let t0 = Instant::now();
    loop {
        if let Some(s) = rx.subscriber.receive()? {
            return Ok(s);
        }
        if rx.listener.timed_wait(|_| {}, TICK)? == 0 {
            if readable(ctl) {
                return Err("the sender went away".into());
            }
            if t0.elapsed() > STALL {
                return Err(format!("no message for {} s", STALL.as_secs()).into());
            }
        }
    }
}

/// Take iceoryx2 sample `s` into `buf` and check it against message `i`.
fn take_sample(s: &[u8], buf: &mut [u8], i: u64) -> Res<()> {
    if s.len() != buf.len() {
        return Err(format!("a sample of {} bytes, not {}", s.len(), buf.len()).into());
    }
    buf.copy_from_slice(s);
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
    let held = next_sample(rx, ctl)?;
    take_sample(held.payload(), buf, pool_message(0))?;
    say(ctl, b"h")?;
    expect(ctl, b'l', "the sender to loan the last sample")?;
    drop(held);
    for k in 1..ICEORYX_QUEUE + 2 {
        let s = next_sample(rx, ctl).with_context(|| format!("pool warm-up message {k}"))?;
        take_sample(s.payload(), buf, pool_message(k))?;
    }
    Ok(ICEORYX_QUEUE as u64 + 2)
}

impl RxEnd {
    /// Take the next message into `buf` (all of it: `buf` is its length).
    fn recv(&mut self, buf: &mut [u8], ctl: &UnixStream) -> Res<()> {
        match self {
            RxEnd::Zcio(z) => {
                let (len, acc) = z.ch.recv(z.sem, buf, InputBuffering::EarlyDemux)?;
                if len != buf.len() {
                    return Err(format!("a message of {len} bytes, not {}", buf.len()).into());
                }
                z.last = Some(acc);
            }
            RxEnd::Iceoryx2(rx) => {
                let t0 = Instant::now();
                loop {
                    if let Some(s) = rx.subscriber.receive()? {
                        let p = s.payload();
                        if p.len() != buf.len() {
                            return Err(format!(
                                "a sample of {} bytes, not {}",
                                p.len(),
                                buf.len()
                            )
                            .into());
                        }
                        buf.copy_from_slice(p);
                        return Ok(());
                    }
                    if rx.listener.timed_wait(|_| {}, TICK)? == 0 {
                        if readable(ctl) {
                            return Err("the sender went away".into());
                        }
                        if t0.elapsed() > STALL {
                            return Err(format!("no message for {} s", STALL.as_secs()).into());
                        }
                    }
                }
            }
            RxEnd::Unix(s) => {
                let mut h = [0u8; 8];
                s.read_exact(&mut h).context("the length")?;
                let len = u64::from_le_bytes(h) as usize;
                if len != buf.len() {
                    return Err(format!("a length of {len} bytes, not {}", buf.len()).into());
                }
                s.read_exact(buf).context("the message")?;
            }
        }
        Ok(())
    }
}

/// One run of contender `c`: after the warm-up, `n` messages of `bytes` one at a time and `n`
/// streamed, into `ring` (the receiver's `n` buffers, `bytes` long each, at `granule`).
pub(super) fn run(
    c: Contender,
    bytes: usize,
    granule: Granule,
    ring: &mut [AppBuffer],
    cpus: Option<[usize; 2]>,
) -> Res<RunResult> {
    let n = ring.len();
    let _pinned = cpus.map(|[me, _]| super::Pinned::to(me));
    let dir = tempfile::tempdir()?;
    let ctl_path = dir.path().join("ctl");
    let ctl_listener = UnixListener::bind(&ctl_path)?;
    let (setup, name) = setup(c, bytes, dir.path()).context("setting up")?;
    let w = warm_up(bytes, n);
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
            Setup::Zcio(l, sem) => {
                await_client(&l, child)?;
                let mut ch = l.accept(Some(STALL))?;
                ch.set_waits(waits());
                RxEnd::Zcio(Box::new(ZcioRx {
                    ch,
                    sem,
                    last: None,
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
            // The publisher is there: connect to it before it sends.
            rx.subscriber.update_connections()?;
        }
        say(&ctl, b"c")?;
        let mut pool = 0;
        if let RxEnd::Iceoryx2(rx) = &end {
            pool = pool_warm_up(rx, &ctl, &mut ring[0])?;
        }
        let mut r = receive(&mut end, &ctl, ring, w)?;
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

/// The messages of a run, into `ring` (`n` buffers): `w` streamed for warm-up, `n` one at a
/// time, `n` streamed; then the sender's report, and the run's numbers.
fn receive(end: &mut RxEnd, ctl: &UnixStream, ring: &mut [AppBuffer], w: usize) -> Res<RunResult> {
    let n = ring.len();
    let bytes = ring[0].len();
    let total = w + 2 * n;
    let mut checks = Checks::default();
    let take = |end: &mut RxEnd, buf: &mut [u8], i: usize| -> Res<()> {
        end.recv(buf, ctl)
            .with_context(|| format!("message {i} of {total}"))
    };
    // Warm-up: streamed into the ring, checked afterwards.
    for (i, buf) in ring.iter_mut().take(w).enumerate() {
        take(end, buf, i)?;
    }
    for (i, buf) in ring.iter().take(w).enumerate() {
        checks.check(buf, i);
    }
    // One at a time: go-ahead, receipt, check.
    let mut receipt = vec![0u64; total];
    for (i, at) in receipt.iter_mut().enumerate().skip(w).take(n) {
        say(ctl, b"g")?;
        take(end, &mut ring[0], i)?;
        *at = monotonic_ns();
        checks.check(&ring[0], i);
    }
    // Streamed, once the sender has written its messages: into the ring, checked afterwards.
    expect(ctl, b's', "the sender to have written the stream")?;
    let cpu0 = process_cpu_ns();
    say(ctl, b"g")?;
    for (k, buf) in ring.iter_mut().enumerate() {
        let i = w + n + k;
        take(end, buf, i)?;
        receipt[i] = monotonic_ns();
    }
    let cpu = process_cpu_ns() - cpu0;
    for (k, buf) in ring.iter().enumerate() {
        checks.check(buf, w + n + k);
    }
    say(ctl, b"d")?;
    let mut text = Vec::new();
    let mut rd = ctl;
    rd.read_to_end(&mut text).context("the sender's report")?;
    let rep: Report = serde_json::from_slice(&text).context("the sender's report (not JSON)")?;
    if rep.start_ns.len() != total || rep.send_ns.len() != total {
        return Err(format!(
            "the sender's report has {} start times, {} send times; {total} messages were sent",
            rep.start_ns.len(),
            rep.send_ns.len()
        )
        .into());
    }
    let lat: Vec<f64> = (w..w + n)
        .map(|i| receipt[i].saturating_sub(rep.start_ns[i]) as f64)
        .collect();
    let send: Vec<f64> = (w..w + n).map(|i| rep.send_ns[i] as f64).collect();
    let stream_ns = receipt[total - 1].saturating_sub(rep.start_ns[w + n]);
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
        throughput_gbps: (n * bytes) as f64 / stream_ns.max(1) as f64,
        send_ns: super::median(&send).unwrap_or(0.0),
        cpu_ns: (rep.stream_cpu_ns + cpu) as f64 / n as f64,
        checked: checks.checked,
        first_mismatch: checks.first_mismatch,
        window,
        path,
        vm_granule,
    })
}
