//! The memory network (paper 000, §7): a full-duplex link between two processes on one host.
//!
//! - **Control** goes through a shared arena (a memfd mapped at the same address in both
//!   processes): per direction, a descriptor ring (sender to receiver) and a completion ring
//!   (receiver to sender), with eventfd doorbells. Every value read from the arena is validated.
//! - **Data** goes by page reference through a pipe: the sender's `vmsplice` queues references to
//!   its pages (Genie's *reference pages*; the kernel keeps them alive if the sender unmaps them:
//!   *I/O-deferred deallocation*), and the receiver's `read` is the wire, the one copy every
//!   semantics makes, like the adapter's DMA in the paper. It is reported in
//!   `kernel_copied_bytes`; `cpu_copied_bytes` counts the data-passing copies zcio makes itself.
//!
//! Outputs are asynchronous: [`MemnetEndpoint::send`] returns a [`Ticket`], completed when the
//! receiver has read the message and acknowledged it; only then are pages unreferenced,
//! unprotected (TCOW) and unwired. Inputs are synchronous.
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
use zcio_vm::arena::{SLOT_WORDS, SharedArena, SharedRing};
use zcio_vm::wire::{Pace, Pipe, STRIPES, Striped};

pub mod channel;
mod input;
mod output;

const RING_SLOTS: usize = 256;
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

/// Where direction `d`'s wire progress lies (direction 0: side 0 to side 1).
fn pace_offset(d: usize) -> usize {
    ring_offset(4) + d * Pace::FOOTPRINT
}

fn arena_len() -> usize {
    pace_offset(2)
}

/// A descriptor as the receiver takes it from the ring, every word checked
/// ([`decode_descriptor`]).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    /// The sender's ticket, echoed in the completion.
    pub ticket: u64,
    /// The message's length: 1 to [`MAX_MESSAGE`] bytes.
    pub len: usize,
    /// The message's offset in its first page in the sender's memory (below the page size).
    pub offset: usize,
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
    Ok(Descriptor {
        ticket: w[1],
        len: len as usize,
        offset: w[3] as usize,
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
    out_tx: [OwnedFd; STRIPES],
    in_rx: [OwnedFd; STRIPES],
    my_bell: OwnedFd,
    peer_bell: OwnedFd,
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
    /// The data wire out: pipes used in turn, a chunk each (`zcio_vm::wire::Striped`).
    out_tx: [OwnedFd; STRIPES],
    out_chunk: usize,
    /// The data wire in, and its chunk (the smaller pipe's capacity, as the sender's).
    in_rx: [OwnedFd; STRIPES],
    in_capacity: usize,
    my_bell: OwnedFd,
    peer_bell: OwnedFd,
    desc_tx: SharedRing,
    desc_rx: SharedRing,
    comp_tx: SharedRing,
    comp_rx: SharedRing,
    pending: Vec<PendingOut>,
    next_ticket: u64,
    cur_ticket: u64,
    /// Page offset of the current message in the sender's memory (its descriptor says): how
    /// many pipe slots its chunks take.
    cur_offset: usize,
    pool: BouncePool,
    inputs: InputBuffers,
    /// Regions whose pages went out, kept for reuse by inputs.
    pub regions: RegionCache,
    profile: &'static Profile,
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
}

zcio_vm::debug_summary!(MemnetEndpoint, |s| arena: s.arena, pending: s.pending.len());

/// The data wire of these pipes: used in turn, `chunk` bytes each, with direction `dir`'s
/// progress in `arena`; its writer sleeps while the pipe is full when `sleep` is set (see
/// [`Pace`]).
fn striped<'a>(
    arena: &'a SharedArena,
    dir: usize,
    pipes: &'a [OwnedFd; STRIPES],
    chunk: usize,
    sleep: bool,
) -> Striped<'a> {
    Striped::new([pipes[0].as_fd(), pipes[1].as_fd()], chunk)
        .paced(Pace::new(arena, pace_offset(dir)), sleep)
}

/// The input wire of side `side`'s endpoint (its reader reports progress; writers sleep).
fn wire_in<'a>(
    arena: &'a SharedArena,
    side: usize,
    pipes: &'a [OwnedFd; STRIPES],
    chunk: usize,
) -> Striped<'a> {
    striped(arena, 1 - side, pipes, chunk, false)
}

/// The chunk a striped wire of these pipes uses: the smaller pipe's capacity (both ends ask
/// the same pipes, so they agree).
fn chunk_of(pipes: &[OwnedFd; STRIPES]) -> Result<usize> {
    let mut c = usize::MAX;
    for p in pipes {
        c = c.min(
            rustix::pipe::fcntl_getpipe_size(p).map_err(|e| GenieError::io("F_GETPIPE_SZ", e))?,
        );
    }
    Ok(c)
}

/// Create the parts of a new link: side 0 and side 1.
pub fn link_parts() -> Result<(LinkParts, LinkParts, Arc<SharedArena>)> {
    let arena = SharedArena::create("zcio-memnet", arena_len())?;
    let dup = |fd: BorrowedFd<'_>| {
        fd.try_clone_to_owned()
            .map_err(|e| GenieError::io("dup", e))
    };
    // Each direction's wire is STRIPES pipes used in turn (see `Striped`).
    let pipes = || -> Result<[Pipe; STRIPES]> {
        Ok([
            Pipe::new(zcio_vm::wire::pipe_max_size())?,
            Pipe::new(zcio_vm::wire::pipe_max_size())?,
        ])
    };
    let p0 = pipes()?; // 0 -> 1
    let [a, b] = pipes()?; // 1 -> 0
    let (p1_tx, p1_rx) = ([a.tx, b.tx], [a.rx, b.rx]);
    let [a, b] = &p0;
    let p0_rx = [dup(a.rx.as_fd())?, dup(b.rx.as_fd())?];
    let e0 = zcio_vm::arena::Doorbell::eventfd()?;
    let e1 = zcio_vm::arena::Doorbell::eventfd()?;
    let s0 = LinkParts {
        side: 0,
        arena_fd: dup(arena.fd())?,
        arena_addr: arena.addr(),
        arena_len: arena.len(),
        out_tx: p0.map(|p| p.tx),
        in_rx: p1_rx,
        my_bell: dup(e0.as_fd())?,
        peer_bell: dup(e1.as_fd())?,
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
    };
    Ok((s0, s1, Arc::new(arena)))
}

/// An epoll instance readable while `wire` (the wire in) or `bell` (the doorbell) is.
fn readiness(wire: &OwnedFd, bell: &OwnedFd) -> Result<OwnedFd> {
    use rustix::event::epoll;
    let e = |err| GenieError::io("epoll", err);
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).map_err(e)?;
    for (i, fd) in [wire, bell].into_iter().enumerate() {
        let data = epoll::EventData::new_u64(i as u64);
        epoll::add(&ep, fd, data, epoll::EventFlags::IN).map_err(e)?;
    }
    Ok(ep)
}

/// Readable when the next message's data is on the wire (or its sender is gone, which the
/// next receive reports), or when a completion was posted since the last
/// [`MemnetEndpoint::reap`]: for `poll`, `epoll` or an async runtime's reactor. A wake-up
/// may find nothing to do (a completion an output call reaped on its way).
impl AsFd for MemnetEndpoint {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.ready.as_fd()
    }
}

/// Two connected endpoints in this process (both directions work; for tests and threads).
pub fn pair() -> Result<(MemnetEndpoint, MemnetEndpoint)> {
    let (a, b, arena) = link_parts()?;
    Ok((
        MemnetEndpoint::join(a, Some(arena.clone()))?,
        MemnetEndpoint::join(b, Some(arena))?,
    ))
}

impl LinkParts {
    /// Send these parts to another process over a Unix socket (`SCM_RIGHTS`).
    pub fn send_over(self, sock: &UnixStream) -> Result<()> {
        let header: [u64; 3] = [
            self.side as u64,
            self.arena_addr as u64,
            self.arena_len as u64,
        ];
        let bytes: Vec<u8> = header.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let fds = [
            self.arena_fd.as_fd(),
            self.out_tx[0].as_fd(),
            self.out_tx[1].as_fd(),
            self.in_rx[0].as_fd(),
            self.in_rx[1].as_fd(),
            self.my_bell.as_fd(),
            self.peer_bell.as_fd(),
        ];
        zcio_vm::wire::send_with_fds(sock.as_fd(), &bytes, &fds)?;
        Ok(())
    }

    /// Receive parts sent with [`LinkParts::send_over`].
    pub fn recv_from(sock: &UnixStream) -> Result<LinkParts> {
        let mut bytes = [0u8; 24];
        let (n, fds) = zcio_vm::wire::recv_with_fds(sock.as_fd(), &mut bytes)?;
        if n != 24 || fds.len() != 3 + 2 * STRIPES {
            return Err(GenieError::Protocol(format!(
                "link setup: got {n} bytes and {} descriptors, want 24 and {}",
                fds.len(),
                3 + 2 * STRIPES
            )));
        }
        let w = |i: usize| {
            u64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes")) as usize
        };
        let mut it = fds.into_iter();
        let mut next = || it.next().expect("counted above");
        Ok(LinkParts {
            side: w(0),
            arena_addr: w(1),
            arena_len: w(2),
            arena_fd: next(),
            out_tx: [next(), next()],
            in_rx: [next(), next()],
            my_bell: next(),
            peer_bell: next(),
        })
    }
}

impl MemnetEndpoint {
    /// Join a link from its parts; `arena` is the already-mapped arena when both sides live in
    /// this process, `None` to map it (at the agreed address) here.
    pub fn join(parts: LinkParts, arena: Option<Arc<SharedArena>>) -> Result<MemnetEndpoint> {
        if parts.side > 1 || parts.arena_len < arena_len() {
            return Err(GenieError::Protocol(format!(
                "link setup: side {} arena length {}",
                parts.side, parts.arena_len
            )));
        }
        let arena = match arena {
            Some(a) => a,
            None => Arc::new(SharedArena::attach(
                parts.arena_fd,
                parts.arena_addr,
                parts.arena_len,
            )?),
        };
        let s = parts.side;
        let ring = |i: usize| SharedRing::new(&arena, ring_offset(i), RING_SLOTS);
        let in_capacity = chunk_of(&parts.in_rx)?;
        let out_chunk = chunk_of(&parts.out_tx)?;
        let ready = readiness(&parts.in_rx[0], &parts.my_bell)?;
        Ok(MemnetEndpoint {
            ready,
            desc_tx: ring(s)?,
            desc_rx: ring(1 - s)?,
            comp_tx: ring(2 + s)?,
            comp_rx: ring(3 - s)?,
            arena,
            side: s,
            out_tx: parts.out_tx,
            out_chunk,
            in_rx: parts.in_rx,
            in_capacity,
            my_bell: parts.my_bell,
            peer_bell: parts.peer_bell,
            pending: Vec::new(),
            next_ticket: 1,
            cur_ticket: 0,
            cur_offset: 0,
            pool: BouncePool::default(),
            inputs: InputBuffers::default(),
            regions: RegionCache::default(),
            profile: Profile::current(),
            spin: SPIN,
            fallback: Fallback::Allow,
            broken_in: None,
            broken_out: None,
            held: None,
            waits: Waits::default(),
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
    /// (an idle wait costs none), as the paper's I/O processing time does: an output waiting
    /// for the reader to make room on the wire then sleeps too, where it would otherwise spin
    /// in the kernel on the pipe the reader copies from ([`Pace`]).
    pub fn set_spin(&mut self, spin: std::time::Duration) {
        self.spin = spin;
    }

    /// How many times this end's output has slept until the receiver made room on the wire
    /// (only while waits do not spin, [`MemnetEndpoint::set_spin`]; see [`Pace`]).
    pub fn output_wire_sleeps(&self) -> u64 {
        Pace::new(&self.arena, pace_offset(self.side)).sleeps()
    }

    /// The output wire: its writer sleeps while the pipe is full when waits do not spin.
    fn out_wire(&self) -> Striped<'_> {
        let sleep = self.spin.is_zero();
        striped(&self.arena, self.side, &self.out_tx, self.out_chunk, sleep)
    }

    /// Use another calibration profile for this endpoint's thresholds.
    pub fn set_profile(&mut self, p: &'static Profile) {
        self.profile = p;
    }

    /// Preferred alignment and length granularity for input buffers (paper 000, §5.2: the call
    /// through which the application asks for the module's preferred alignment): page size.
    pub fn preferred_alignment(&self) -> (usize, usize) {
        (zcio_vm::page_size(), zcio_vm::page_size())
    }

    fn check_len(len: usize) -> Result<()> {
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
