//! The layer: targets, handlers, submission, completion routing and delivery.
//!
//! One ring serves every thread of the process. Submission writes the record's entry under a
//! short lock (the atomicity the conditional store buffer gave) and returns at once, a full
//! ring included. Completions are reaped by one thread at a time (the *reaper*), which waits
//! in the kernel without holding the ring, so that other threads submit meanwhile; each
//! completion goes to the queue of the thread that issued it, in completion order, and its
//! handler runs when that thread polls or waits.
//!
//! A thread that ends with requests in flight (it returned, or a handler of its panicked) can
//! run no handler any more, and no other thread may run them for it: its completions are
//! dropped as they come, their buffers going back to the region ([`UioStats::orphaned`]). The
//! layer learns of the end from the thread's own thread-local state, which every thread that
//! submits to a layer holds a weak reference to that layer's queues in.

use crate::request::{HandlerId, Opcode, PENDING, RECORD, Request, Target};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, RwLock, Weak};
use zcio_vm::VmError;
use zcio_vm::direct::{BufferRegion, DirectRing, IoBuf, Op, PushError, RingWaiter};

/// How requests reach the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Initiation {
    /// Written into the submission ring, read by a polling kernel thread: no system call while
    /// the thread is awake (the conditional store buffer's role).
    Polled,
    /// One `io_uring_enter` per request (the paper's system-call initiation).
    Syscall,
}

/// How buffer addresses are translated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Translation {
    /// The buffer region registered with the ring ahead, pinned once (the device TLB hit).
    Registered,
    /// The kernel looks up and pins the pages per request (the kernel-handled miss).
    PerRequest,
}

/// A layer's configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// How requests are initiated.
    pub initiation: Initiation,
    /// How buffers are translated.
    pub translation: Translation,
    /// Submission ring entries (requests queued at once).
    pub entries: u32,
    /// Buffers in the layer's region.
    pub buffers: usize,
    /// Bytes per buffer (a multiple of the page size).
    pub buf_size: usize,
    /// Milliseconds the polling kernel thread spins idle before it sleeps.
    pub sqpoll_idle_ms: u32,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            initiation: Initiation::Syscall,
            translation: Translation::Registered,
            entries: 64,
            buffers: 64,
            buf_size: 64 << 10,
            sqpoll_idle_ms: 50,
        }
    }
}

/// Alignment of `O_DIRECT` offsets, lengths and addresses the layer requires.
pub const DIRECT_ALIGN: u64 = 4096;

/// What went wrong with a request, or with the layer.
#[derive(Debug, thiserror::Error)]
pub enum UioError {
    /// The record's opcode is none of [`Opcode`]'s.
    #[error("bad opcode {0} (1, read, or 2, write)")]
    BadOpcode(u8),
    /// Flags or reserved bytes that are not zero.
    #[error("flags {0:#x} or reserved bytes set (none are defined)")]
    BadFlags(u8),
    /// No handler of that number.
    #[error("no handler {0} in this layer")]
    NoHandler(u16),
    /// No target in that slot.
    #[error("no target {0} in this layer (not opened, or closed)")]
    NoTarget(u32),
    /// A write to a target opened for reading.
    #[error("target {0} was opened for reading only")]
    ReadOnly(u32),
    /// A request of no bytes.
    #[error("a request of zero bytes")]
    ZeroLength,
    /// The record's buffer is not inside the buffer handed with it.
    #[error(
        "the buffer at {addr:#x} (+{len} bytes) is not inside the buffer handed with the request ({owned_addr:#x}, +{owned_len}): the layer transfers only into buffers it holds, never into memory the process may not write"
    )]
    NotOwned {
        /// The record's buffer address.
        addr: u64,
        /// Its length.
        len: u32,
        /// The handed buffer's address.
        owned_addr: usize,
        /// Its size.
        owned_len: usize,
    },
    /// Not aligned as `O_DIRECT` needs.
    #[error("{what} {value:#x} is not a multiple of {align}, as O_DIRECT on this target needs")]
    Misaligned {
        /// Offset, length or buffer address.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The alignment.
        align: u64,
    },
    /// A read past the end of the file.
    #[error("a read of {length} bytes at {offset} goes past the end of the file ({size} bytes)")]
    PastEnd {
        /// The offset.
        offset: u64,
        /// The length.
        length: u32,
        /// The file's size when opened.
        size: u64,
    },
    /// The kernel completed the request with an error.
    #[error("the device failed the request: {0}")]
    Device(std::io::Error),
    /// The ring refused the entry.
    #[error("the ring refused the request: {0}")]
    Ring(PushError),
    /// Waiting with no request of this thread in flight.
    #[error("this thread has no request in flight to wait for")]
    NothingInFlight,
    /// Opening a target failed.
    #[error("open {path}: {source}")]
    Open {
        /// The path.
        path: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// The VM layer (ring, buffers) failed.
    #[error(transparent)]
    Vm(#[from] VmError),
}

impl UioError {
    /// The negative errno a record's status carries for this error.
    pub fn status(&self) -> i32 {
        use rustix::io::Errno;
        let e = match self {
            UioError::BadOpcode(_)
            | UioError::BadFlags(_)
            | UioError::ZeroLength
            | UioError::Misaligned { .. }
            | UioError::PastEnd { .. }
            | UioError::Ring(_)
            | UioError::NothingInFlight => Errno::INVAL,
            UioError::NoHandler(_) | UioError::NoTarget(_) | UioError::ReadOnly(_) => Errno::BADF,
            UioError::NotOwned { .. } => Errno::FAULT,
            UioError::Device(e) | UioError::Open { source: e, .. } => {
                Errno::from_io_error(e).unwrap_or(Errno::IO)
            }
            UioError::Vm(_) => Errno::IO,
        };
        -e.raw_os_error()
    }
}

/// A request's completion, handed to its handler: the record with its status, the buffer
/// back, and the error if it failed.
#[derive(Debug)]
pub struct Completion {
    /// The record, `status` filled in.
    pub record: Request,
    /// The buffer handed with it.
    pub buf: IoBuf,
    /// Why it failed, if it did.
    pub error: Option<UioError>,
    /// Its place in the order the layer took completions in (reaped from the ring, or
    /// refused): a thread's handlers run in this order.
    pub sequence: u64,
}

impl Completion {
    /// The bytes transferred, in the buffer (empty if the request failed).
    pub fn data(&self) -> &[u8] {
        let n = self.record.status.max(0) as usize;
        let at = (self.record.buffer as usize).saturating_sub(self.buf.addr());
        self.buf.bytes().get(at..at + n).unwrap_or(&[])
    }
}

/// Why a request was not taken (the record and buffer come back).
#[derive(Debug)]
pub enum NotQueued {
    /// The ring is full: poll or wait, then submit again (the non-blocking flow control).
    Full {
        /// The record.
        record: Request,
        /// Its buffer.
        buf: IoBuf,
    },
    /// The record names no handler of this layer, so no completion could be delivered.
    NoHandler {
        /// The record.
        record: Request,
        /// Its buffer.
        buf: IoBuf,
    },
}

impl std::fmt::Display for NotQueued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotQueued::Full { .. } => write!(f, "the ring is full: poll, then submit again"),
            NotQueued::NoHandler { record, .. } => {
                write!(f, "no handler {} in this layer", record.handler)
            }
        }
    }
}

/// So that `uio.submit(..)?` works in a function returning `Box<dyn Error>` (the record and
/// its buffer then go back to the layer with the error).
impl std::error::Error for NotQueued {}

/// Counters of a layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UioStats {
    /// Requests that reached the ring.
    pub submitted: u64,
    /// Requests refused before the ring (completed with an error status).
    pub refused: u64,
    /// Completions delivered to handlers (or to blocking calls).
    pub delivered: u64,
    /// Kernel entries to submit.
    pub submit_enters: u64,
    /// Kernel entries to wait.
    pub wait_enters: u64,
    /// Completions dropped because the thread that issued them had ended (their handlers not
    /// run, their buffers back to the region).
    pub orphaned: u64,
}

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
        if self.ended.contains(&ctx) {
            self.orphaned += 1;
            if left.unwrap_or(0) == 0 {
                self.ended.remove(&ctx);
                self.outstanding.remove(&ctx);
            }
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
}

impl std::fmt::Debug for Uio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uio")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish()
    }
}

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
        if rec.flags != 0 || rec.reserved != [0; 12] {
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
        n.queues
            .entry(rec.context)
            .or_default()
            .push_back(Completion {
                record: rec,
                buf,
                error: Some(e),
                sequence,
            });
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
            let h = self.handlers.read().expect("handlers")[c.record.handler as usize].clone();
            if let Some(h) = h {
                h(c);
            }
        }
        n
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
