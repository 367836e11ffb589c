//! The layer: targets, handlers, submission, completion routing and delivery.
//!
//! One ring serves every thread of the process. Submission writes the record's entry under a
//! short lock (the atomicity the conditional store buffer gave) and returns at once, a full
//! ring included. Completions are reaped by one thread at a time (the *reaper*), which waits
//! in the kernel without holding the ring, so that other threads submit meanwhile; each
//! completion goes to the queue of the thread that issued it, in completion order, and its
//! handler runs when that thread polls or waits. A record flagged [`ASYNC`](crate::request::ASYNC) completes instead
//! to the layer's handler threads ([`Uio::serve_handlers`]): its handler runs there as soon as
//! the device is done, whether or not the issuing thread polls, waits, or still exists.
//!
//! A thread that ends with requests in flight (it returned, or a handler of its panicked) can
//! run no handler any more, and no other thread may run them for it: its completions are
//! dropped as they come, their buffers going back to the region ([`UioStats::orphaned`]). The
//! layer learns of the end from the thread's own thread-local state, which every thread that
//! submits to a layer holds a weak reference to that layer's queues in.

use crate::request::{FLAGS, HandlerId, Opcode, PENDING, RECORD, Request, Target};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};
use zcio_vm::direct::{BufferRegion, DirectRing, IoBuf, Op, PushError, RingWaiter};

mod types;

pub use types::{
    Completion, Config, DIRECT_ALIGN, Initiation, NotQueued, Translation, UioError, UioStats,
};

struct TargetInfo {
    size: u64,
    direct: bool,
    why_buffered: Option<String>,
    writable: bool,
}

struct Inner {
    ring: DirectRing,
    records: Vec<Option<Request>>,
    free: Vec<usize>,
}

#[derive(Default)]
struct Notify {
    queues: HashMap<u32, VecDeque<Completion>>,
    outstanding: HashMap<u32, usize>,
    /// Threads whose thread-local state knows this layer (told of their end).
    issuers: HashSet<u32>,
    /// Threads that ended with requests in flight: their completions are dropped as they come.
    ended: HashSet<u32>,
    /// Completions dropped so (and those an ending thread left queued).
    orphaned: u64,
    reaper: bool,
    /// Completions of [`ASYNC`](crate::request::ASYNC) records, for the handler threads, in completion order.
    handler_queue: VecDeque<Completion>,
}

impl Notify {
    /// The thread of `ctx` ended: what it left queued goes (returned, to be dropped outside the
    /// lock), and what it has in flight will go as it completes.
    fn thread_ended(&mut self, ctx: u32) -> Option<VecDeque<Completion>> {
        let left = self.queues.remove(&ctx);
        self.orphaned += left.as_ref().map_or(0, |q| q.len() as u64);
        self.issuers.remove(&ctx);
        if self.outstanding.get(&ctx).is_some_and(|o| *o > 0) {
            self.ended.insert(ctx);
        } else {
            self.outstanding.remove(&ctx);
        }
        left
    }

    /// Route a reaped completion to its thread's queue; `Some` (to drop outside the lock) if
    /// that thread has ended.
    fn route(&mut self, c: Completion) -> Option<Completion> {
        let ctx = c.record.context;
        let left = self.outstanding.get_mut(&ctx).map(|o| {
            *o = o.saturating_sub(1);
            *o
        });
        let ended = self.ended.contains(&ctx);
        if ended && left.unwrap_or(0) == 0 {
            self.ended.remove(&ctx);
            self.outstanding.remove(&ctx);
        }
        if c.record.is_async() {
            // A handler thread runs it: the submitting thread need not be there.
            self.handler_queue.push_back(c);
            return None;
        }
        if ended {
            self.orphaned += 1;
            return Some(c);
        }
        self.queues.entry(ctx).or_default().push_back(c);
        None
    }
}

/// The layers a thread has submitted to, told when the thread ends (its thread-local state is
/// dropped), so that they drop its completions instead of keeping them for it forever.
struct Issuer {
    ctx: u32,
    layers: Vec<Weak<Mutex<Notify>>>,
}

impl Drop for Issuer {
    fn drop(&mut self) {
        for layer in self.layers.drain(..) {
            let Some(n) = layer.upgrade() else { continue };
            let left = n.lock().ok().and_then(|mut n| n.thread_ended(self.ctx));
            drop(left); // the buffers go back to the region
        }
    }
}

type Handler = Arc<dyn Fn(Completion) + Send + Sync>;

/// The handler number of the blocking calls' completions.
const BLOCKING: u16 = 0;

static NEXT_CONTEXT: AtomicU32 = AtomicU32::new(1);
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

thread_local! {
    static CONTEXT: u32 = NEXT_CONTEXT.fetch_add(1, Ordering::Relaxed);
    static BLOCKED: RefCell<HashMap<u64, Completion>> = RefCell::new(HashMap::new());
    static ISSUER: RefCell<Issuer> = RefCell::new(Issuer {
        ctx: context(),
        layers: Vec::new(),
    });
}

fn context() -> u32 {
    CONTEXT.with(|c| *c)
}

/// A user-level I/O layer: see the crate's documentation.
///
/// # Examples
///
/// A blocking read of a file's first 4 KiB (records and handlers: see [`Uio::submit`] and
/// `crates/zcio/examples/uio_read.rs`):
///
/// ```
/// use zcio_uio::{Config, Uio};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("table");
/// std::fs::write(&path, vec![9u8; 8192])?;
///
/// let uio = match Uio::new(Config::default()) {
///     Ok(uio) => uio,
///     Err(e) => {
///         // A kernel or sandbox without io_uring: said, by capability.
///         zcio_vm::skip::skip(zcio_vm::skip::Capability::IoUring, &e.to_string());
///         return Ok(());
///     }
/// };
/// let target = uio.open(&path, false)?; // O_DIRECT where the file system allows
/// let buf = uio.buffer().expect("a free buffer");
/// let done = uio.read_blocking(target, 0, buf, 0, 4096)?;
/// assert!(done.error.is_none());
/// assert_eq!(done.data(), &[9u8; 4096][..]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Uio {
    config: Config,
    region: BufferRegion,
    inner: Mutex<Inner>,
    waiter: RingWaiter,
    targets: RwLock<Vec<Option<TargetInfo>>>,
    handlers: RwLock<Vec<Option<Handler>>>,
    /// Shared with the thread-local state of the threads that submit ([`Issuer`]).
    notify: Arc<Mutex<Notify>>,
    cv: Condvar,
    refused: AtomicU64,
    delivered: AtomicU64,
    wait_enters: AtomicU64,
    sequence: AtomicU64,
    /// The eventfd the ring signals on every completion, once asked for.
    events: std::sync::OnceLock<OwnedFd>,
}

zcio_vm::debug_summary!(Uio, |s| config: s.config, stats: s.stats());

impl Uio {
    /// A layer with its ring and buffer region. A kernel that refuses a polling thread or
    /// registered buffers says so in the error.
    pub fn new(config: Config) -> Result<Uio, UioError> {
        let region = BufferRegion::new(config.buffers, config.buf_size)?;
        let ring = DirectRing::new(
            config.entries,
            (config.initiation == Initiation::Polled).then_some(config.sqpoll_idle_ms),
            (config.translation == Translation::Registered).then_some(&region),
        )?;
        let waiter = ring.waiter()?;
        Ok(Uio {
            config,
            region,
            inner: Mutex::new(Inner {
                ring,
                records: Vec::new(),
                free: Vec::new(),
            }),
            waiter,
            targets: RwLock::new((0..zcio_vm::direct::RING_FILES).map(|_| None).collect()),
            // Handler 0 is the blocking calls'.
            handlers: RwLock::new(vec![None]),
            notify: Arc::new(Mutex::new(Notify::default())),
            cv: Condvar::new(),
            refused: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            wait_enters: AtomicU64::new(0),
            sequence: AtomicU64::new(0),
            events: std::sync::OnceLock::new(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> UioStats {
        let r = self.inner.lock().expect("ring").ring.stats();
        UioStats {
            submitted: r.pushed,
            refused: self.refused.load(Ordering::Relaxed),
            delivered: self.delivered.load(Ordering::Relaxed),
            submit_enters: r.submit_enters,
            wait_enters: r.wait_enters + self.wait_enters.load(Ordering::Relaxed),
            orphaned: self.notify.lock().expect("notify").orphaned,
        }
    }

    /// A free buffer of the layer's region, if any (dropped buffers come back).
    pub fn buffer(&self) -> Option<IoBuf> {
        self.region.take()
    }

    /// Buffers free.
    pub fn buffers_free(&self) -> usize {
        self.region.available()
    }

    /// Open `path` as a target, with `O_DIRECT` where its file system allows (else through
    /// the page cache, the reason kept: [`Uio::buffered_because`]); for writing too if
    /// `writable`.
    pub fn open(&self, path: &Path, writable: bool) -> Result<Target, UioError> {
        use rustix::fs::{Mode, OFlags};
        let mode = if writable {
            OFlags::RDWR
        } else {
            OFlags::RDONLY
        };
        let open = |extra| rustix::fs::open(path, mode | OFlags::CLOEXEC | extra, Mode::empty());
        let err = |e: rustix::io::Errno| UioError::Open {
            path: path.display().to_string(),
            source: e.into(),
        };
        let (fd, why): (OwnedFd, Option<String>) = match open(OFlags::DIRECT) {
            Ok(fd) => (fd, None),
            Err(rustix::io::Errno::INVAL) => (
                open(OFlags::empty()).map_err(err)?,
                Some("the file system refused O_DIRECT (EINVAL): through the page cache".into()),
            ),
            Err(e) => return Err(err(e)),
        };
        let size = rustix::fs::fstat(&fd).map_err(err)?.st_size as u64;
        let slot = self.inner.lock().expect("ring").ring.register_file(fd)?;
        self.targets.write().expect("targets")[slot as usize] = Some(TargetInfo {
            size,
            direct: why.is_none(),
            why_buffered: why,
            writable,
        });
        Ok(Target(slot))
    }

    /// Why a target goes through the page cache (`None`: it is `O_DIRECT`).
    pub fn buffered_because(&self, t: Target) -> Option<String> {
        self.targets.read().expect("targets")[t.0 as usize]
            .as_ref()
            .and_then(|i| i.why_buffered.clone())
    }

    /// The size of a target's file when it was opened.
    pub fn size(&self, t: Target) -> Result<u64, UioError> {
        self.targets
            .read()
            .expect("targets")
            .get(t.0 as usize)
            .and_then(|i| i.as_ref().map(|i| i.size))
            .ok_or(UioError::NoTarget(t.0))
    }

    /// Close a target (requests in flight on it finish on it).
    pub fn close(&self, t: Target) -> Result<(), UioError> {
        let mut targets = self.targets.write().expect("targets");
        if targets.get(t.0 as usize).is_none_or(Option::is_none) {
            return Err(UioError::NoTarget(t.0));
        }
        self.inner.lock().expect("ring").ring.unregister_file(t.0)?;
        targets[t.0 as usize] = None;
        Ok(())
    }

    /// Register a handler: its number, for records.
    pub fn handler(&self, f: impl Fn(Completion) + Send + Sync + 'static) -> HandlerId {
        let mut h = self.handlers.write().expect("handlers");
        h.push(Some(Arc::new(f)));
        assert!(h.len() <= u16::MAX as usize, "at most 65 535 handlers");
        HandlerId((h.len() - 1) as u16)
    }

    fn check(&self, rec: &Request, buf: &IoBuf) -> Result<(Op, usize), UioError> {
        let op = match Opcode::from_raw(rec.opcode) {
            Some(Opcode::Read) => Op::Read,
            Some(Opcode::Write) => Op::Write,
            None => return Err(UioError::BadOpcode(rec.opcode)),
        };
        if rec.flags & !FLAGS != 0 || rec.reserved != [0; 12] {
            return Err(UioError::BadFlags(rec.flags));
        }
        let targets = self.targets.read().expect("targets");
        let info = targets
            .get(rec.target as usize)
            .and_then(Option::as_ref)
            .ok_or(UioError::NoTarget(rec.target))?;
        if op == Op::Write && !info.writable {
            return Err(UioError::ReadOnly(rec.target));
        }
        if rec.length == 0 {
            return Err(UioError::ZeroLength);
        }
        let start = buf.addr() as u64;
        let end = start + buf.len() as u64;
        if rec.buffer < start || rec.buffer.saturating_add(rec.length as u64) > end {
            return Err(UioError::NotOwned {
                addr: rec.buffer,
                len: rec.length,
                owned_addr: buf.addr(),
                owned_len: buf.len(),
            });
        }
        if info.direct {
            for (what, value) in [
                ("offset", rec.offset),
                ("length", rec.length as u64),
                ("buffer address", rec.buffer),
            ] {
                if value % DIRECT_ALIGN != 0 {
                    return Err(UioError::Misaligned {
                        what,
                        value,
                        align: DIRECT_ALIGN,
                    });
                }
            }
        }
        if op == Op::Read && rec.offset.saturating_add(rec.length as u64) > info.size {
            return Err(UioError::PastEnd {
                offset: rec.offset,
                length: rec.length,
                size: info.size,
            });
        }
        Ok((op, (rec.buffer - start) as usize))
    }

    /// Submit `record` on `buf` (the layer holds the buffer until the completion gives it
    /// back). Returns at once: a full ring is [`NotQueued::Full`]. A record that fails its
    /// checks completes with an error status (to its handler, never reaching the device);
    /// one naming no handler is refused here.
    pub fn submit(&self, record: Request, buf: IoBuf) -> Result<(), NotQueued> {
        if record.handler == BLOCKING || !self.has_handler(record.handler) {
            return Err(NotQueued::NoHandler { record, buf });
        }
        self.submit_inner(record, buf)
    }

    /// Submit a record given as its 64 bytes.
    pub fn submit_bytes(&self, bytes: &[u8; RECORD], buf: IoBuf) -> Result<(), NotQueued> {
        self.submit(Request::from_bytes(bytes), buf)
    }

    fn has_handler(&self, h: u16) -> bool {
        self.handlers
            .read()
            .expect("handlers")
            .get(h as usize)
            .is_some_and(Option::is_some)
    }

    fn submit_inner(&self, mut rec: Request, buf: IoBuf) -> Result<(), NotQueued> {
        let me = context();
        rec.context = me;
        rec.status = PENDING;
        let (op, at) = match self.check(&rec, &buf) {
            Ok(x) => x,
            Err(e) => {
                self.refuse(rec, buf, e);
                return Ok(());
            }
        };
        let first = {
            let mut n = self.notify.lock().expect("notify");
            *n.outstanding.entry(me).or_default() += 1;
            n.issuers.insert(me)
        };
        if first {
            // This thread's first request here: the layer is told when the thread ends.
            let weak = Arc::downgrade(&self.notify);
            let _ = ISSUER.try_with(|i| {
                let mut i = i.borrow_mut();
                i.layers.retain(|l| l.strong_count() > 0);
                i.layers.push(weak);
            });
        }
        let mut inner = self.inner.lock().expect("ring");
        let index = match inner.free.pop() {
            Some(i) => i,
            None => {
                inner.records.push(None);
                inner.records.len() - 1
            }
        };
        inner.records[index] = Some(rec);
        let pushed = inner.ring.try_push(
            op,
            rec.target,
            rec.offset,
            buf,
            at,
            rec.length as usize,
            index as u64,
        );
        let failed = match pushed {
            Ok(()) => {
                // An error here leaves the entry queued; the next submission takes it.
                let _ = inner.ring.submit();
                if rec.is_async() {
                    // A handler thread idle for want of anything in flight reaps now.
                    self.cv.notify_all();
                }
                None
            }
            Err(x) => Some(x),
        };
        if let Some((e, buf)) = failed {
            inner.records[index] = None;
            inner.free.push(index);
            drop(inner);
            self.settle(me);
            if e == PushError::Full {
                return Err(NotQueued::Full { record: rec, buf });
            }
            self.refuse(rec, buf, UioError::Ring(e));
        }
        Ok(())
    }

    fn settle(&self, me: u32) {
        let mut n = self.notify.lock().expect("notify");
        if let Some(o) = n.outstanding.get_mut(&me) {
            *o = o.saturating_sub(1);
        }
    }

    fn refuse(&self, mut rec: Request, buf: IoBuf, e: UioError) {
        rec.status = e.status();
        self.refused.fetch_add(1, Ordering::Relaxed);
        let mut n = self.notify.lock().expect("notify");
        let sequence = self.sequence.fetch_add(1, Ordering::Relaxed);
        let c = Completion {
            record: rec,
            buf,
            error: Some(e),
            sequence,
        };
        if rec.is_async() {
            n.handler_queue.push_back(c);
            drop(n);
            self.cv.notify_all();
        } else {
            n.queues.entry(rec.context).or_default().push_back(c);
        }
    }

    /// Reap completions from the ring (the reaper only) and route them to their threads'
    /// queues; how many.
    fn reap(&self) -> usize {
        let mut done = Vec::new();
        let mut out = Vec::new();
        {
            let mut inner = self.inner.lock().expect("ring");
            inner.ring.reap(&mut done);
            for d in done {
                let index = d.tag as usize;
                let Some(mut rec) = inner.records.get_mut(index).and_then(Option::take) else {
                    continue;
                };
                inner.free.push(index);
                rec.status = d.result;
                let error = (d.result < 0)
                    .then(|| UioError::Device(std::io::Error::from_raw_os_error(-d.result)));
                out.push(Completion {
                    record: rec,
                    buf: d.buf,
                    error,
                    sequence: 0,
                });
            }
        }
        let n = out.len();
        if n > 0 {
            let mut q = self.notify.lock().expect("notify");
            let mut orphans = Vec::new();
            for mut c in out {
                c.sequence = self.sequence.fetch_add(1, Ordering::Relaxed);
                orphans.extend(q.route(c));
            }
            drop(q);
            drop(orphans); // their buffers go back to the region
            self.cv.notify_all();
        }
        n
    }

    /// As the reaper: reap; if nothing came and something is in flight, wait in the kernel
    /// (without the ring's lock) and reap again.
    fn reap_blocking(&self) -> Result<(), UioError> {
        if self.reap() > 0 {
            return Ok(());
        }
        if self.inner.lock().expect("ring").ring.in_flight() == 0 {
            return Ok(());
        }
        self.wait_enters.fetch_add(1, Ordering::Relaxed);
        self.waiter.wait()?;
        self.reap();
        Ok(())
    }

    /// Run the handlers of this thread's completions, in order: how many.
    fn deliver(&self) -> usize {
        let me = context();
        let mut n = 0;
        loop {
            let c = {
                let mut q = self.notify.lock().expect("notify");
                match q.queues.get_mut(&me).and_then(VecDeque::pop_front) {
                    Some(c) => c,
                    None => break,
                }
            };
            n += 1;
            self.delivered.fetch_add(1, Ordering::Relaxed);
            if c.record.handler == BLOCKING {
                BLOCKED.with(|b| b.borrow_mut().insert(c.record.argument, c));
                continue;
            }
            self.run_handler(c);
        }
        n
    }

    fn run_handler(&self, c: Completion) {
        let h = self.handlers.read().expect("handlers")[c.record.handler as usize].clone();
        if let Some(h) = h {
            h(c);
        }
    }

    /// Be a handler thread until `stop` is set: reap completions as the device signals them and
    /// run the handlers of [`ASYNC`](crate::request::ASYNC) records (every thread's, in completion order) here, so that
    /// the threads that submitted them need not poll or wait (the paper's asynchronous notification: the handler
    /// runs when the I/O is done, not when the application next looks). Completions of other
    /// records still go to their own threads. Returns how many handlers ran. Any number of
    /// threads may serve; each completion runs once. A handler that panics ends the serving
    /// thread with the panic.
    ///
    /// `stop` is looked at between completions and at least every millisecond while idle; a
    /// serving thread that is reaping waits in the kernel for the requests in flight.
    pub fn serve_handlers(&self, stop: &std::sync::atomic::AtomicBool) -> Result<usize, UioError> {
        let mut ran = 0;
        loop {
            let mut n = self.notify.lock().expect("notify");
            if let Some(c) = n.handler_queue.pop_front() {
                drop(n);
                self.delivered.fetch_add(1, Ordering::Relaxed);
                self.run_handler(c);
                ran += 1;
                continue;
            }
            if stop.load(Ordering::Acquire) {
                return Ok(ran);
            }
            let in_flight = self.inner.lock().expect("ring").ring.in_flight() > 0;
            if in_flight && !n.reaper {
                n.reaper = true;
                drop(n);
                let r = self.reap_blocking();
                self.notify.lock().expect("notify").reaper = false;
                self.cv.notify_all();
                r?;
                continue;
            }
            // Nothing in flight, or another thread reaping: wait to be told (a completion
            // routed, an ASYNC record submitted) or for the next look at `stop`.
            let (n, _) = self
                .cv
                .wait_timeout(n, std::time::Duration::from_millis(1))
                .expect("notify");
            drop(n);
        }
    }

    /// Completions of [`ASYNC`](crate::request::ASYNC) records waiting for a handler thread.
    pub fn handler_queue_len(&self) -> usize {
        self.notify.lock().expect("notify").handler_queue.len()
    }

    /// Asynchronous delivery: a descriptor that turns readable when the device completes a
    /// request (an eventfd the ring signals on every completion), to wait on with `poll`,
    /// `epoll` or another ring beside the application's other descriptors instead of
    /// blocking in [`Uio::wait`]. On wake-up, read it (8 bytes, which acknowledges every
    /// completion signalled so far) and call [`Uio::poll`] on the issuing thread, which runs
    /// that thread's handlers. Completions go to the thread that issued them, so an event
    /// loop waits on the descriptor of a layer whose requests it issues itself.
    pub fn completion_fd(&self) -> Result<std::os::fd::BorrowedFd<'_>, UioError> {
        use std::os::fd::AsFd;
        if let Some(fd) = self.events.get() {
            return Ok(fd.as_fd());
        }
        // Made and registered under the ring's lock: one eventfd per ring.
        let mut inner = self.inner.lock().expect("ring");
        if self.events.get().is_none() {
            let flags =
                rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK;
            let fd = rustix::event::eventfd(0, flags)
                .map_err(|e| zcio_vm::VmError::sys("eventfd(completions)", e.into()))?;
            inner.ring.register_eventfd(fd.as_fd())?;
            let _ = self.events.set(fd);
        }
        drop(inner);
        Ok(self.events.get().expect("set above").as_fd())
    }

    /// Reap what has completed (if no other thread is reaping) and run this thread's
    /// handlers: how many ran. Never waits.
    pub fn poll(&self) -> usize {
        let reaper = {
            let mut n = self.notify.lock().expect("notify");
            !std::mem::replace(&mut n.reaper, true)
        };
        if reaper {
            self.reap();
            self.notify.lock().expect("notify").reaper = false;
            self.cv.notify_all();
        }
        self.deliver()
    }

    /// Wait until at least one of this thread's completions is delivered (its handler run):
    /// how many ran. An error if this thread has nothing in flight.
    pub fn wait(&self) -> Result<usize, UioError> {
        loop {
            let d = self.poll();
            if d > 0 {
                return Ok(d);
            }
            self.wait_own()?;
        }
    }

    /// Wait until every completion of this thread is delivered (its handler run): how many
    /// ran. Unlike [`wait`](Self::wait), nothing in flight is no error: none ran.
    pub fn wait_all(&self) -> Result<usize, UioError> {
        let mut ran = 0;
        loop {
            match self.wait() {
                Ok(d) => ran += d,
                Err(UioError::NothingInFlight) => return Ok(ran),
                Err(e) => return Err(e),
            }
        }
    }

    /// Block until this thread's queue holds a completion.
    fn wait_own(&self) -> Result<(), UioError> {
        let me = context();
        let mut n = self.notify.lock().expect("notify");
        loop {
            if n.queues.get(&me).is_some_and(|q| !q.is_empty()) {
                return Ok(());
            }
            if n.outstanding.get(&me).copied().unwrap_or(0) == 0 {
                return Err(UioError::NothingInFlight);
            }
            if !n.reaper {
                n.reaper = true;
                drop(n);
                let r = self.reap_blocking();
                n = self.notify.lock().expect("notify");
                n.reaper = false;
                self.cv.notify_all();
                r?;
                continue;
            }
            n = self.cv.wait(n).expect("notify");
        }
    }

    /// Make progress for a thread that found the ring full: reap (waiting in the kernel if
    /// needed), or wait briefly for the reaper.
    fn progress(&self) -> Result<(), UioError> {
        let mut n = self.notify.lock().expect("notify");
        if !n.reaper {
            n.reaper = true;
            drop(n);
            let r = self.reap_blocking();
            self.notify.lock().expect("notify").reaper = false;
            self.cv.notify_all();
            self.deliver();
            return r;
        }
        let (n, _) = self
            .cv
            .wait_timeout(n, std::time::Duration::from_millis(1))
            .expect("notify");
        drop(n);
        self.deliver();
        Ok(())
    }

    /// The blocking call (the thread library's role): read `length` bytes at `offset` of
    /// `target` into `buf` from byte `at`, and wait for it; other completions of this thread
    /// that arrive meanwhile run their handlers. The completion carries the buffer back and
    /// the error, if any.
    pub fn read_blocking(
        &self,
        target: Target,
        offset: u64,
        buf: IoBuf,
        at: usize,
        length: u32,
    ) -> Result<Completion, UioError> {
        let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
        let mut rec = Request::new(
            Opcode::Read,
            target,
            offset,
            buf.addr() + at,
            length,
            HandlerId(BLOCKING),
            token,
        );
        let mut buf = buf;
        loop {
            match self.submit_inner(rec, buf) {
                Ok(()) => break,
                Err(NotQueued::Full { record, buf: b }) => {
                    rec = record;
                    buf = b;
                    self.progress()?;
                }
                Err(NotQueued::NoHandler { .. }) => unreachable!("the blocking handler"),
            }
        }
        loop {
            if let Some(c) = BLOCKED.with(|b| b.borrow_mut().remove(&token)) {
                return Ok(c);
            }
            self.wait()?;
        }
    }
}
