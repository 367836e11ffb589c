//! The memory network (paper 000, §7): a full-duplex link between two processes on one host.
//!
//! - **Control** goes through a shared arena (a memfd mapped at the same address in both
//!   processes): per direction, a descriptor ring (sender to receiver) and a completion ring
//!   (receiver to sender), with eventfd doorbells. Every value read from the arena is validated.
//! - **Short data** (below the copy crossover) goes through a ring of bytes in the arena
//!   ([`ring`]): the sender copies the message in, the receiver copies it out, no system call
//!   on the way (the receiver's doorbell is rung only when it said it sleeps).
//! - **Loans** ([`loan`]) go as sealed memory files passed on the link's socket: the pages move,
//!   nothing is copied.
//! - **Data** goes by page reference through a pipe: the sender's `vmsplice` queues references to
//!   its pages (Genie's *reference pages*; the kernel keeps them alive if the sender unmaps them:
//!   *I/O-deferred deallocation*), and the receiver's `read` is the wire, the one copy every
//!   semantics makes, like the adapter's DMA in the paper. It is reported in
//!   `kernel_copied_bytes`; `cpu_copied_bytes` counts the data-passing copies zcio makes itself.
//!
//! Outputs are asynchronous: [`MemnetEndpoint::send`] returns a [`Ticket`], completed when the
//! receiver has read the message and acknowledged it; only then are pages unreferenced,
//! unprotected (TCOW) and unwired. A message queued within the link's window
//! ([`LinkOptions`]) is queued without waiting for the receiver; a longer one goes in segments
//! of the window, and an end waiting for room or for a completion takes in what its peer sent
//! meanwhile, whole, for its next receive (the path then says so). Inputs are synchronous.
//!
//! A receiver that dies makes the sender's next output or wait fail with
//! [`GenieError::PeerGone`]; a sender that dies makes a pending input fail the same way, and under
//! copy and emulated copy the application buffer is left untouched.

use crate::error::{GenieError, Result};
use crate::passing::{BouncePool, Held, InputBuffers};
use crate::profile::Profile;
use crate::region::RegionCache;
use crate::semantics::{Fallback, InputBuffering, Semantics};
use crate::waits::Wait;
pub use crate::waits::Waits;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use zcio_vm::arena::{Doorbell, SLOT_WORDS, SharedArena, SharedRing};
use zcio_vm::wire::{MIN_STRIPES, Pace, Pipe, Striped};

mod assembled;
pub mod channel;
mod input;
pub mod loan;
mod output;
pub mod ring;

const RING_SLOTS: usize = 256;
/// Where a descriptor's message lies (its word 7): on the wire, in the shared ring, in a loan's
/// memory file.
const PLACE_WIRE: u64 = 0;
const PLACE_RING: u64 = 1;
const PLACE_FILE: u64 = 2;
const DESC_MAGIC: u64 = 0x7a63_696f_4445_5343; // "zcioDESC"
const DONE_MAGIC: u64 = 0x7a63_696f_444f_4e45; // "zcioDONE"
/// How long a waiting side spins on the shared rings before it sleeps: a wake-up across vCPUs
/// costs 30-60 µs here (DESIGN.md), more than most short transfers.
const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// Spin until `ready` says so or `spin` has passed; returns whether it did.
fn spin_until(spin: std::time::Duration, mut ready: impl FnMut() -> bool) -> bool {
    let t0 = std::time::Instant::now();
    loop {
        if ready() {
            return true;
        }
        if t0.elapsed() >= spin {
            return false;
        }
        for _ in 0..64 {
            std::hint::spin_loop();
        }
    }
}

/// Largest message the link carries (1 GiB).
pub const MAX_MESSAGE: usize = 1 << 30;

fn ring_offset(i: usize) -> usize {
    let base = SharedArena::user_offset().div_ceil(64) * 64;
    base + i * SharedRing::footprint(RING_SLOTS)
}

/// Where direction `d`'s wire progress lies (direction 0: side 0 to side 1) on a link of
/// `pipes` pipes each way.
fn pace_offset(d: usize, pipes: usize) -> usize {
    ring_offset(4) + d * Pace::footprint(pipes)
}

fn arena_len(pipes: usize) -> usize {
    ring::data_offset(2, pipes)
}

/// The window of a new link, each way, unless its maker says otherwise ([`LinkOptions`]).
pub const DEFAULT_WINDOW: usize = 16 << 20;

/// Most pipes a link's wire has each way: a window of the largest message at 1 MiB pipes
/// ([`MAX_MESSAGE`]; each pipe takes two descriptors, one in each process).
pub const MAX_PIPES: usize = 1100;

/// How a new link is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkOptions {
    /// The bytes of outputs each end may have queued and not yet read by its peer
    /// ([`MemnetEndpoint::window`]): an output that fits the room left returns without
    /// waiting for the receiver. Made of pipes (rounded up to whole pipes); where this user's
    /// pipe budget runs out (`/proc/sys/fs/pipe-user-pages-soft`, 64 MiB of pipes per user by
    /// default, none for root) the link gets the pipes it can, two at the least.
    pub window: usize,
}

impl Default for LinkOptions {
    fn default() -> LinkOptions {
        LinkOptions {
            window: DEFAULT_WINDOW,
        }
    }
}

/// The link arenas mapped in this process, by address: an end joined in a process that
/// already maps its link's arena (both ends of a channel or a pipe in one program, or a child
/// made by fork) shares that mapping, where mapping the arena again at an address it holds
/// could never work.
static ARENAS: std::sync::Mutex<Vec<(usize, std::sync::Weak<SharedArena>)>> =
    std::sync::Mutex::new(Vec::new());

fn arenas() -> std::sync::MutexGuard<'static, Vec<(usize, std::sync::Weak<SharedArena>)>> {
    ARENAS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Note `a` as mapped in this process.
fn mapped(a: &Arc<SharedArena>) {
    let mut g = arenas();
    g.retain(|(_, w)| w.strong_count() > 0);
    g.push((a.addr(), Arc::downgrade(a)));
}

/// The arena mapped in this process at `addr`, if `fd` is its file.
fn mapped_here(addr: usize, fd: BorrowedFd<'_>) -> Option<Arc<SharedArena>> {
    fn key(fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
        rustix::fs::fstat(fd).ok().map(|st| (st.st_dev, st.st_ino))
    }
    let theirs = key(fd)?;
    arenas()
        .iter()
        .filter(|(a, _)| *a == addr)
        .filter_map(|(_, w)| w.upgrade())
        .find(|a| key(a.fd()) == Some(theirs))
}

/// A descriptor as the receiver takes it from the ring, every word checked
/// ([`decode_descriptor`]).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    /// The sender's ticket, echoed in the completion.
    pub ticket: u64,
    /// The length of what this descriptor announces: the message, or one of its segments.
    pub len: usize,
    /// Its offset in its first page in the sender's memory (below the page size).
    pub offset: usize,
    /// The whole message's length, 1 to [`MAX_MESSAGE`] bytes: `len` unless the message is
    /// longer than the sender's window and comes in segments, each announced by a descriptor
    /// of its own.
    pub total: usize,
    /// Where in the message this segment starts (0 for a message's first descriptor).
    pub at: usize,
    /// Whether the message's bytes are in the link's shared ring ([`ring`]), not on the wire:
    /// a whole message of at most [`ring::RING_MAX`] bytes.
    pub ring: bool,
    /// Whether the message is a loan shipped as a sealed memory file ([`loan`]), its
    /// descriptor sent ahead on the link's file socket: a whole message.
    pub file: bool,
}

impl Descriptor {
    /// Whether this descriptor announces a whole message.
    pub fn whole(&self) -> bool {
        self.at == 0 && self.len == self.total
    }
}

/// Decode a descriptor slot the sender posted. The slot is in memory the sender writes at
/// will, so every word used is checked: the magic, a length of 1 to [`MAX_MESSAGE`] bytes, an
/// offset below the page size. The error names the word that broke its rule.
#[doc(hidden)]
pub fn decode_descriptor(w: &[u64; SLOT_WORDS]) -> Result<Descriptor> {
    let bad = |why: String| Err(GenieError::Protocol(format!("bad descriptor: {why}")));
    if w[0] != DESC_MAGIC {
        return bad(format!("magic {:#x}, want {DESC_MAGIC:#x}", w[0]));
    }
    let len = w[2];
    if len == 0 || len > MAX_MESSAGE as u64 {
        return bad(format!(
            "length {len}, want 1 to {MAX_MESSAGE} bytes (magic {:#x})",
            w[0]
        ));
    }
    let ps = zcio_vm::page_size() as u64;
    if w[3] >= ps {
        return bad(format!(
            "page offset {}, want below the page size ({ps})",
            w[3]
        ));
    }
    // A whole message says 0 for its total (or its length).
    let total = if w[5] == 0 { len } else { w[5] };
    if total > MAX_MESSAGE as u64 || w[6].checked_add(len).is_none_or(|end| end > total) {
        return bad(format!(
            "segment of {len} bytes at {} of a message of {total}, want within it and the \
             message at most {MAX_MESSAGE} bytes",
            w[6]
        ));
    }
    let (ring, file) = match w[7] {
        PLACE_WIRE => (false, false),
        PLACE_RING if total == len && w[6] == 0 && len <= ring::RING_MAX as u64 => (true, false),
        PLACE_FILE if total == len && w[6] == 0 && w[3] == 0 => (false, true),
        PLACE_FILE => {
            return bad(format!(
                "a loan of {len} bytes (segment at {} of {total}, page offset {}), which \
                 travels whole, at offset 0",
                w[6], w[3]
            ));
        }
        PLACE_RING => {
            return bad(format!(
                "a message of {len} bytes (segment at {} of {total}) said to be in the shared \
                 ring, which carries whole messages of at most {} bytes",
                w[6],
                ring::RING_MAX
            ));
        }
        x => {
            return bad(format!(
                "data place {x}, want 0 (wire), 1 (shared ring) or 2 (a loan's memory file)"
            ));
        }
    };
    Ok(Descriptor {
        ticket: w[1],
        len: len as usize,
        offset: w[3] as usize,
        total: total as usize,
        at: w[6] as usize,
        ring,
        file,
    })
}

/// Decode a completion slot the receiver posted: its ticket, once the magic is checked (the
/// caller looks the ticket up among its outputs).
#[doc(hidden)]
pub fn decode_completion(w: &[u64; SLOT_WORDS]) -> Result<u64> {
    if w[0] != DONE_MAGIC {
        return Err(GenieError::Protocol(format!(
            "completion slot without magic: {:#x}, want {DONE_MAGIC:#x}",
            w[0]
        )));
    }
    Ok(w[1])
}

/// What an output does when the window has no room for its message (the receiver has not yet
/// read enough of the earlier ones): [`MemnetEndpoint::set_window_full`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum WindowFull {
    /// Wait for room, within the endpoint's [`Waits`] (a timeout or a signal ends the wait
    /// with nothing announced).
    #[default]
    Wait,
    /// Return [`GenieError::WouldBlock`] at once, nothing announced: the endpoint's
    /// descriptor ([`AsFd`]) becomes readable when the receiver has read something. A message
    /// longer than the whole window never fits: it is refused with an error naming the window.
    WouldBlock,
}

/// A completion handle for an output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(pub u64);

struct PendingOut {
    ticket: u64,
    held: Held,
}

/// The file descriptors and placement one side needs to join a link.
#[derive(Debug)]
pub struct LinkParts {
    side: usize,
    arena_fd: OwnedFd,
    arena_addr: usize,
    arena_len: usize,
    out_tx: Vec<OwnedFd>,
    in_rx: Vec<OwnedFd>,
    my_bell: OwnedFd,
    peer_bell: OwnedFd,
    my_ring_bell: OwnedFd,
    peer_ring_bell: OwnedFd,
    /// This side's end of the socket loans' memory files travel on ([`loan`]).
    files: OwnedFd,
}

/// One end of a memory-network link.
///
/// # Examples
///
/// Both ends in one process ([`pair`]); between two processes, one side makes the parts with
/// [`link_parts`] and hands the other its side with [`LinkParts::send_over`] (see
/// `crates/zcio/examples/memnet_emulated_copy.rs`).
///
/// ```
/// use zcio_genie::memnet::pair;
/// use zcio_genie::{AppBuffer, InputBuffering, Semantics};
///
/// let (mut tx, mut rx) = pair()?;
/// let mut out = AppBuffer::new(4 * 4096)?; // page-aligned, as the VM paths want
/// out.fill(7);
/// // Returns once the data is queued (it fits the link's pipes, so no reader is needed yet).
/// let (ticket, sent) = tx.send(Semantics::EmulatedCopy, &out)?;
/// let mut input = AppBuffer::new(4 * 4096)?;
/// let (len, _) = rx.recv(Semantics::EmulatedCopy, &mut input, InputBuffering::EarlyDemux)?;
/// tx.wait(ticket)?; // the receiver has it: the sender's pages are its own again
/// assert_eq!(len, out.len());
/// assert!(input.iter().all(|&b| b == 7));
/// println!("output path: {}", sent.path); // which mechanism, or which fallback
/// # Ok::<(), zcio_genie::GenieError>(())
/// ```
pub struct MemnetEndpoint {
    arena: Arc<SharedArena>,
    /// This end's side of the link: its output is direction `side`, its input `1 - side`.
    side: usize,
    /// The data wire out: pipes used as a ring, a chunk each (`zcio_vm::wire::Striped`).
    out_tx: Vec<OwnedFd>,
    /// The smallest of those pipes' capacities (both ends derive the chunk from it).
    out_capacity: usize,
    /// The ring position of the next output's first chunk.
    out_next: u64,
    /// The data wire in, and its pipes' capacity.
    in_rx: Vec<OwnedFd>,
    in_capacity: usize,
    /// The ring position of the next input's first chunk, and of the current one's.
    in_next: u64,
    cur_first: u64,
    /// What an output finds when the window has no room for it ([`WindowFull`]).
    window_full: WindowFull,
    my_bell: OwnedFd,
    peer_bell: OwnedFd,
    /// This end of the shared ring ([`ring`]).
    ring: Box<ring::RingEnd>,
    desc_tx: SharedRing,
    desc_rx: SharedRing,
    comp_tx: SharedRing,
    comp_rx: SharedRing,
    pending: Vec<PendingOut>,
    next_ticket: u64,
    cur_ticket: u64,
    pool: BouncePool,
    inputs: InputBuffers,
    /// Regions whose pages went out, kept for reuse by inputs.
    pub regions: RegionCache,
    profile: Arc<Profile>,
    spin: std::time::Duration,
    fallback: Fallback,
    /// Why inputs are refused: an input failed after it took a message off the wire.
    broken_in: Option<String>,
    /// How waits end besides success ([`Waits`]).
    waits: Waits,
    /// An epoll instance over the wire in and the doorbell: this endpoint's readiness
    /// ([`AsFd`]).
    ready: OwnedFd,
    /// The next message, its descriptor taken off the ring but nothing of its data read
    /// ([`MemnetEndpoint::peek_len`], or a buffer too small for it).
    held: Option<Descriptor>,
    /// Why outputs are refused: an output failed after it announced its message.
    broken_out: Option<String>,
    /// Messages taken in whole before the application asked (assembled from segments, or
    /// taken in while an output waited), the last perhaps still being assembled.
    assembled: std::collections::VecDeque<assembled::Assembled>,
    /// Loans' memory files: the socket they travel on, and those received whose messages
    /// are not yet delivered ([`loan`]).
    loans: Box<loan::LoanEnd>,
}

zcio_vm::debug_summary!(MemnetEndpoint, |s| arena: s.arena, pending: s.pending.len());

/// The data wire of these pipes (a ring, [`Striped`]), with direction `dir`'s progress in
/// `arena`.
fn striped<'a>(
    arena: &'a SharedArena,
    dir: usize,
    pipes: &'a [OwnedFd],
    capacity: usize,
) -> Striped<'a> {
    Striped::new(pipes, capacity).paced(Pace::new(
        arena,
        pace_offset(dir, pipes.len()),
        pipes.len(),
    ))
}

/// The input wire of side `side`'s endpoint.
fn wire_in<'a>(
    arena: &'a SharedArena,
    side: usize,
    pipes: &'a [OwnedFd],
    capacity: usize,
) -> Striped<'a> {
    striped(arena, 1 - side, pipes, capacity)
}

/// The capacity both ends assume of these pipes: the smallest (both ends ask the same pipes,
/// so they agree).
fn capacity_of(pipes: &[OwnedFd]) -> Result<usize> {
    let mut c = usize::MAX;
    for p in pipes {
        c = c.min(
            rustix::pipe::fcntl_getpipe_size(p).map_err(|e| GenieError::io("F_GETPIPE_SZ", e))?,
        );
    }
    Ok(c)
}

/// The pipes of a link's two directions for a window of `window` bytes each way: made in
/// turn, one way then the other, while each gets the capacity of the first (this user's pipe
/// budget or descriptors may run out: the link then takes what it got, at least
/// [`MIN_STRIPES`] each way).
fn link_pipes(window: usize) -> Result<[Vec<Pipe>; 2]> {
    let full = zcio_vm::wire::pipe_max_size();
    let mut dirs: [Vec<Pipe>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..MIN_STRIPES {
        for d in &mut dirs {
            d.push(Pipe::new(full)?);
        }
    }
    let cap = dirs
        .iter()
        .flatten()
        .map(|p| p.capacity)
        .min()
        .unwrap_or(full);
    // Chunks as `Striped` makes them of this capacity.
    let chunk = zcio_vm::wire::chunk_for(cap);
    let want = window.div_ceil(chunk).clamp(MIN_STRIPES, MAX_PIPES);
    'more: while dirs[0].len() < want {
        for d in &mut dirs {
            match Pipe::new(full) {
                Ok(p) if p.capacity >= cap => d.push(p),
                _ => break 'more,
            }
        }
    }
    let n = dirs[0].len().min(dirs[1].len());
    for d in &mut dirs {
        d.truncate(n);
    }
    Ok(dirs)
}

/// Create the parts of a new link: side 0 and side 1 ([`LinkOptions::default`]).
pub fn link_parts() -> Result<(LinkParts, LinkParts, Arc<SharedArena>)> {
    link_parts_with(LinkOptions::default())
}

/// Create the parts of a new link made as `opts` says: side 0 and side 1.
pub fn link_parts_with(opts: LinkOptions) -> Result<(LinkParts, LinkParts, Arc<SharedArena>)> {
    let [p0, p1] = link_pipes(opts.window)?; // 0 -> 1, 1 -> 0
    let n = p0.len();
    let arena = SharedArena::create("zcio-memnet", arena_len(n))?;
    let dup = |fd: BorrowedFd<'_>| {
        fd.try_clone_to_owned()
            .map_err(|e| GenieError::io("dup", e))
    };
    let (p0_tx, p0_rx): (Vec<_>, Vec<_>) = p0.into_iter().map(|p| (p.tx, p.rx)).unzip();
    let (p1_tx, p1_rx): (Vec<_>, Vec<_>) = p1.into_iter().map(|p| (p.tx, p.rx)).unzip();
    let e0 = Doorbell::eventfd()?;
    let e1 = Doorbell::eventfd()?;
    let r0 = Doorbell::eventfd()?;
    let r1 = Doorbell::eventfd()?;
    let (f0, f1) = UnixStream::pair().map_err(|e| GenieError::io("socketpair (loans)", e))?;
    let s0 = LinkParts {
        side: 0,
        arena_fd: dup(arena.fd())?,
        arena_addr: arena.addr(),
        arena_len: arena.len(),
        out_tx: p0_tx,
        in_rx: p1_rx,
        my_bell: dup(e0.as_fd())?,
        peer_bell: dup(e1.as_fd())?,
        my_ring_bell: dup(r0.as_fd())?,
        peer_ring_bell: dup(r1.as_fd())?,
        files: f0.into(),
    };
    let s1 = LinkParts {
        side: 1,
        arena_fd: dup(arena.fd())?,
        arena_addr: arena.addr(),
        arena_len: arena.len(),
        out_tx: p1_tx,
        in_rx: p0_rx,
        my_bell: e1,
        peer_bell: e0,
        my_ring_bell: r1,
        peer_ring_bell: r0,
        files: f1.into(),
    };
    let arena = Arc::new(arena);
    mapped(&arena);
    Ok((s0, s1, arena))
}

/// An epoll instance readable while a pipe of `wire` (the wire in) or a doorbell (`bell` for
/// completions, `ring_bell` for messages in the shared ring) is.
fn readiness(wire: &[OwnedFd], bell: &OwnedFd, ring_bell: &OwnedFd) -> Result<OwnedFd> {
    use rustix::event::epoll;
    let e = |err| GenieError::io("epoll", err);
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(e)?;
    for (i, fd) in wire.iter().chain([bell, ring_bell]).enumerate() {
        let data = epoll::EventData::new_u64(i as u64);
        epoll::add(&ep, fd, data, epoll::EventFlags::IN).map_err(e)?;
    }
    Ok(ep)
}

/// Readable when the next message's data is on the wire or in the shared ring (or its sender
/// is gone, which the next receive reports), or when a completion was posted since the last
/// [`MemnetEndpoint::reap`]: for `poll`, `epoll` or an async runtime's reactor. A wake-up
/// may find nothing to do (a completion an output call reaped on its way).
///
/// Asking for it tells the peer that this end may sleep outside zcio's own calls: from then on
/// every message it puts in the shared ring rings this end's doorbell (a system call per
/// message), where otherwise it rings only when this end said it sleeps.
impl AsFd for MemnetEndpoint {
    fn as_fd(&self) -> BorrowedFd<'_> {
        ring::watched_from_outside(&self.arena, self.side, self.out_tx.len());
        self.ready.as_fd()
    }
}

/// The descriptor of [`AsFd`], for reactors that take a raw one (tokio's `AsyncFd`).
impl std::os::fd::AsRawFd for MemnetEndpoint {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.as_fd().as_raw_fd()
    }
}

/// Two connected endpoints in this process (both directions work; for tests and threads).
pub fn pair() -> Result<(MemnetEndpoint, MemnetEndpoint)> {
    pair_with(LinkOptions::default())
}

/// [`pair`], the link made as `opts` says.
pub fn pair_with(opts: LinkOptions) -> Result<(MemnetEndpoint, MemnetEndpoint)> {
    let (a, b, arena) = link_parts_with(opts)?;
    Ok((
        MemnetEndpoint::join(a, Some(arena.clone()))?,
        MemnetEndpoint::join(b, Some(arena))?,
    ))
}

impl LinkParts {
    /// Send these parts to another process over a Unix socket (`SCM_RIGHTS`): a header with
    /// the arena and the doorbells, then the pipes, a few to a message.
    pub fn send_over(self, sock: &UnixStream) -> Result<()> {
        let header: [u64; 4] = [
            self.side as u64,
            self.arena_addr as u64,
            self.arena_len as u64,
            self.out_tx.len() as u64,
        ];
        let bytes: Vec<u8> = header.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let fds = [
            self.arena_fd.as_fd(),
            self.my_bell.as_fd(),
            self.peer_bell.as_fd(),
            self.my_ring_bell.as_fd(),
            self.peer_ring_bell.as_fd(),
            self.files.as_fd(),
        ];
        zcio_vm::wire::send_with_fds(sock.as_fd(), &bytes, &fds)?;
        let pipes: Vec<BorrowedFd<'_>> = self
            .out_tx
            .iter()
            .zip(&self.in_rx)
            .flat_map(|(o, i)| [o.as_fd(), i.as_fd()])
            .collect();
        for batch in pipes.chunks(zcio_vm::wire::MAX_FDS) {
            zcio_vm::wire::send_with_fds(sock.as_fd(), &[batch.len() as u8], batch)?;
        }
        Ok(())
    }

    /// Receive parts sent with [`LinkParts::send_over`].
    pub fn recv_from(sock: &UnixStream) -> Result<LinkParts> {
        let bad = |what: String| GenieError::Protocol(format!("link setup: {what}"));
        let mut bytes = [0u8; 32];
        let (n, fds) = zcio_vm::wire::recv_with_fds(sock.as_fd(), &mut bytes)?;
        if n != 32 || fds.len() != 6 {
            return Err(bad(format!(
                "got {n} bytes and {} descriptors, want 32 and 6",
                fds.len()
            )));
        }
        let w = |i: usize| {
            u64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes")) as usize
        };
        let pipes = w(3);
        if !(MIN_STRIPES..=MAX_PIPES).contains(&pipes) {
            return Err(bad(format!(
                "{pipes} pipes each way, want {MIN_STRIPES} to {MAX_PIPES}"
            )));
        }
        let mut rest = Vec::with_capacity(2 * pipes);
        while rest.len() < 2 * pipes {
            let mut count = [0u8; 1];
            let (n, fds) = zcio_vm::wire::recv_with_fds(sock.as_fd(), &mut count)?;
            if n != 1 || fds.len() != count[0] as usize || fds.is_empty() {
                return Err(bad(format!(
                    "a batch of pipes said {} and brought {}",
                    count[0],
                    fds.len()
                )));
            }
            rest.extend(fds);
        }
        if rest.len() != 2 * pipes {
            return Err(bad(format!("{} pipe ends, want {}", rest.len(), 2 * pipes)));
        }
        let mut it = fds.into_iter();
        let mut next = || it.next().expect("counted above");
        let (arena_fd, my_bell, peer_bell) = (next(), next(), next());
        let (my_ring_bell, peer_ring_bell, files) = (next(), next(), next());
        let (mut out_tx, mut in_rx) = (Vec::new(), Vec::new());
        let mut ends = rest.into_iter();
        while let (Some(o), Some(i)) = (ends.next(), ends.next()) {
            out_tx.push(o);
            in_rx.push(i);
        }
        Ok(LinkParts {
            side: w(0),
            arena_addr: w(1),
            arena_len: w(2),
            arena_fd,
            out_tx,
            in_rx,
            my_bell,
            peer_bell,
            my_ring_bell,
            peer_ring_bell,
            files,
        })
    }
}

impl MemnetEndpoint {
    /// Join a link from its parts; `arena` is the already-mapped arena when both sides live in
    /// this process, `None` to map it (at the agreed address) here.
    pub fn join(parts: LinkParts, arena: Option<Arc<SharedArena>>) -> Result<MemnetEndpoint> {
        let n = parts.out_tx.len();
        if parts.side > 1
            || n != parts.in_rx.len()
            || !(MIN_STRIPES..=MAX_PIPES).contains(&n)
            || parts.arena_len < arena_len(n)
        {
            return Err(GenieError::Protocol(format!(
                "link setup: side {}, arena length {}, {} pipes out and {} in",
                parts.side,
                parts.arena_len,
                n,
                parts.in_rx.len()
            )));
        }
        let arena = match arena {
            Some(a) => a,
            None => match mapped_here(parts.arena_addr, parts.arena_fd.as_fd()) {
                Some(a) => a,
                None => {
                    let a = Arc::new(SharedArena::attach(
                        parts.arena_fd,
                        parts.arena_addr,
                        parts.arena_len,
                    )?);
                    mapped(&a);
                    a
                }
            },
        };
        let s = parts.side;
        let ring = |i: usize| SharedRing::new(&arena, ring_offset(i), RING_SLOTS);
        let in_capacity = capacity_of(&parts.in_rx)?;
        let out_capacity = capacity_of(&parts.out_tx)?;
        let ready = readiness(&parts.in_rx, &parts.my_bell, &parts.my_ring_bell)?;
        Ok(MemnetEndpoint {
            ready,
            desc_tx: ring(s)?,
            desc_rx: ring(1 - s)?,
            comp_tx: ring(2 + s)?,
            comp_rx: ring(3 - s)?,
            arena,
            side: s,
            out_tx: parts.out_tx,
            out_capacity,
            out_next: 0,
            in_rx: parts.in_rx,
            in_capacity,
            in_next: 0,
            cur_first: 0,
            window_full: WindowFull::Wait,
            my_bell: parts.my_bell,
            peer_bell: parts.peer_bell,
            ring: Box::new(ring::RingEnd::new(
                s,
                n,
                parts.my_ring_bell,
                parts.peer_ring_bell,
            )),
            pending: Vec::new(),
            next_ticket: 1,
            cur_ticket: 0,
            pool: BouncePool::default(),
            inputs: InputBuffers::default(),
            regions: RegionCache::default(),
            profile: Profile::current(),
            spin: SPIN,
            fallback: Fallback::Allow,
            broken_in: None,
            broken_out: None,
            held: None,
            assembled: std::collections::VecDeque::new(),
            waits: Waits::default(),
            loans: Box::new(loan::LoanEnd::new(parts.files)),
        })
    }

    /// Let this endpoint's waits end after a time, or at a signal ([`Waits`]).
    pub fn set_waits(&mut self, w: Waits) {
        self.waits = w;
    }

    /// Choose what happens when a semantics' mechanism cannot be used here ([`Fallback`]).
    pub fn set_fallback(&mut self, f: Fallback) {
        self.fallback = f;
    }

    /// Under [`Fallback::Refuse`], refuse an input that would be copied in bulk although its
    /// semantics avoids copies: pooled buffers start at a page boundary, so a buffer that does
    /// not cannot take their pages (paper 000, Figure 7); without `UFFDIO_MOVE` swaps are copies.
    fn refuse_copying_input(
        &self,
        sem: Semantics,
        buf: &[u8],
        buffering: InputBuffering,
    ) -> Result<()> {
        if self.fallback == Fallback::Allow || sem == Semantics::Copy {
            return Ok(());
        }
        let ps = zcio_vm::page_size();
        let off = buf.as_ptr() as usize % ps;
        let pooled = matches!(
            buffering,
            InputBuffering::PooledAligned | InputBuffering::PooledUnaligned
        );
        let swaps = pooled || sem == Semantics::EmulatedCopy;
        let reason = if pooled && off != 0 {
            format!(
                "pooled input buffers start at a page boundary and this buffer at page offset {off}: the data would be copied out (align it as preferred_alignment() says)"
            )
        } else if swaps && !zcio_vm::VmRuntime::get().capabilities().swap {
            "page swapping (UFFDIO_MOVE) is unavailable here: the data would be copied out"
                .to_string()
        } else {
            return Ok(());
        };
        Err(GenieError::Unsupported {
            semantics: sem,
            module: "memnet",
            reason,
        })
    }

    /// How long a wait spins before it sleeps (default 50 µs): spinning cuts the latency of
    /// short messages by a wake-up, at the price of CPU time. Zero measures CPU time honestly
    /// (an idle wait costs none), as the paper's I/O processing time does. (An output waiting
    /// for the receiver to drain a pipe always sleeps, [`Pace`].)
    pub fn set_spin(&mut self, spin: std::time::Duration) {
        self.spin = spin;
    }

    /// How many times this end's output has slept until the receiver drained a pipe of the
    /// wire ([`Pace`]).
    pub fn output_wire_sleeps(&self) -> u64 {
        Pace::new(
            &self.arena,
            pace_offset(self.side, self.out_tx.len()),
            self.out_tx.len(),
        )
        .sleeps()
    }

    /// The output wire, for the next message.
    fn out_wire(&self) -> Striped<'_> {
        striped(&self.arena, self.side, &self.out_tx, self.out_capacity).at_chunk(self.out_next)
    }

    /// The bytes of outputs this end may have queued and not yet read by the receiver: an
    /// output of up to this length, sent when the receiver has read the earlier ones, returns
    /// without waiting for it however long it takes to read ([`LinkOptions::window`]). Longer
    /// outputs are fed to the wire as the receiver reads, and return when the rest fits.
    pub fn window(&self) -> usize {
        Striped::new(&self.out_tx, self.out_capacity).window()
    }

    /// Choose what an output finds when the window has no room for it ([`WindowFull`]).
    pub fn set_window_full(&mut self, w: WindowFull) {
        self.window_full = w;
    }

    /// Use another calibration profile for this endpoint's thresholds.
    pub fn set_profile(&mut self, p: Arc<Profile>) {
        self.profile = p;
    }

    /// Preferred alignment and length granularity for input buffers (paper 000, §5.2: the call
    /// through which the application asks for the module's preferred alignment): page size.
    pub fn preferred_alignment(&self) -> (usize, usize) {
        (zcio_vm::page_size(), zcio_vm::page_size())
    }

    pub(crate) fn check_len(len: usize) -> Result<()> {
        if len == 0 {
            return Err(GenieError::arg(
                "buf",
                "length 0: a message carries at least one byte",
            ));
        }
        if len > MAX_MESSAGE {
            return Err(GenieError::arg(
                "buf",
                format!("length {len} exceeds the largest message, {MAX_MESSAGE} bytes"),
            ));
        }
        Ok(())
    }
}
