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

use crate::breakdown::{Op, Phase, time};
use crate::error::{GenieError, Result};
use crate::passing::{BouncePool, Held, InputBuffers, Source, output_app};
use crate::path::{DataPath, RegionOut};
use crate::profile::Profile;
use crate::region::{Region, RegionCache, RegionState, fill, mark};
use crate::semantics::{Accounting, Fallback, InputBuffering, Semantics};
use rustix::event::{PollFd, PollFlags};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use zcio_vm::arena::{SLOT_WORDS, SharedArena, SharedRing};
use zcio_vm::wire::{Pipe, STRIPES, Striped};

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

fn arena_len() -> usize {
    ring_offset(4)
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
}

impl std::fmt::Debug for MemnetEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemnetEndpoint")
            .field("arena", &self.arena)
            .field("pending", &self.pending.len())
            .finish()
    }
}

/// The data wire of these pipes: used in turn, `chunk` bytes each.
fn striped(pipes: &[OwnedFd; STRIPES], chunk: usize) -> Striped<'_> {
    Striped::new([pipes[0].as_fd(), pipes[1].as_fd()], chunk)
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
        Ok(MemnetEndpoint {
            desc_tx: ring(s)?,
            desc_rx: ring(1 - s)?,
            comp_tx: ring(2 + s)?,
            comp_rx: ring(3 - s)?,
            arena,
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
        })
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
    /// (an idle wait costs none), as the paper's I/O processing time does.
    pub fn set_spin(&mut self, spin: std::time::Duration) {
        self.spin = spin;
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

    fn publish(&mut self, ticket: u64, len: usize, offset: usize, sem: Semantics) -> Result<()> {
        let mut w = [0u64; SLOT_WORDS];
        w[0] = DESC_MAGIC;
        w[1] = ticket;
        w[2] = len as u64;
        w[3] = offset as u64;
        w[4] = Semantics::ALL.iter().position(|s| *s == sem).unwrap_or(0) as u64;
        loop {
            match self.desc_tx.push(&self.arena, &w) {
                Ok(true) => return Ok(()),
                Ok(false) => self.wait_event("output (descriptor ring full)")?,
                Err(e) => return Err(GenieError::Protocol(e.to_string())),
            }
        }
    }

    /// Output an application buffer under `sem` (copy, emulated copy, share, emulated share).
    /// Returns when the data is queued; the ticket completes when the receiver has it.
    pub fn send(&mut self, sem: Semantics, buf: &[u8]) -> Result<(Ticket, Accounting)> {
        Self::check_len(buf.len())?;
        self.reap()?;
        if sem.allocation() == crate::semantics::Allocation::System {
            return Err(GenieError::arg(
                "semantics",
                format!("{sem} passes regions: use send_region"),
            ));
        }
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        // Descriptor first: the receiver finds it whenever data is readable.
        self.publish(
            ticket,
            buf.len(),
            buf.as_ptr() as usize % zcio_vm::page_size(),
            sem,
        )?;
        let (held, acc) = output_app(
            sem,
            buf,
            striped(&self.out_tx, self.out_chunk),
            &mut self.pool,
            self.profile,
        )?;
        let wait = held.wait;
        self.pending.push(PendingOut { ticket, held });
        if wait {
            self.wait(Ticket(ticket))?;
        }
        Ok((Ticket(ticket), acc))
    }

    /// Fault injection for tests: announce a message of `claimed` bytes but queue only `buf`,
    /// as a sender that dies mid-transfer would. Drop the endpoint afterwards to close the link.
    #[doc(hidden)]
    pub fn send_truncated(&mut self, buf: &[u8], claimed: usize) -> Result<()> {
        Self::check_len(claimed)?;
        let t = self.next_ticket;
        self.next_ticket += 1;
        self.publish(t, claimed, 0, Semantics::Copy)?;
        striped(&self.out_tx, self.out_chunk)
            .vmsplice_message(&[buf])
            .map_err(|e| GenieError::from_wire(e, "output"))?;
        Ok(())
    }

    /// Output a system-allocated region under a move-family semantics (paper 000, Table 4).
    /// Move deallocates the region at once (the pending output keeps its pages); emulated move
    /// hides it in the region cache; the weak moves keep it mapped in the cache.
    pub fn send_region(
        &mut self,
        sem: Semantics,
        mut region: Region,
    ) -> Result<(Ticket, Accounting)> {
        if sem.allocation() != crate::semantics::Allocation::System {
            return Err(GenieError::arg(
                "semantics",
                format!("{sem} passes application buffers: use send"),
            ));
        }
        self.reap()?;
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.publish(ticket, region.len(), 0, sem)?;
        mark(&mut region, RegionState::MovingOut);
        time(Op::Reference, || {
            striped(&self.out_tx, self.out_chunk).vmsplice_message(&[region.as_slice()])
        })
        .map_err(|e| GenieError::from_wire(e, "output"))?;
        let path = match sem {
            Semantics::Move => {
                time(Op::RegionDeallocate, || drop(region));
                DataPath::RegionOut(RegionOut::Unmapped)
            }
            _ => {
                let st = self.regions.keep(region, sem, ticket)?;
                DataPath::RegionOut(match st {
                    RegionState::MovedOut if sem == Semantics::EmulatedMove => RegionOut::Hidden,
                    RegionState::WeaklyMovedOut if sem == Semantics::WeakMove => RegionOut::Wired,
                    RegionState::WeaklyMovedOut => RegionOut::Cached,
                    _ => RegionOut::CacheFull,
                })
            }
        };
        self.pending.push(PendingOut {
            ticket,
            held: Held::default(),
        });
        Ok((
            Ticket(ticket),
            Accounting {
                granule: None,
                cpu_copied_bytes: 0,
                kernel_copied_bytes: Some(0),
                swapped_bytes: 0,
                path,
            },
        ))
    }

    /// A region for the application to fill and output under `sem` (move family): a cached
    /// one that passes the region check, else a new one (Genie's region allocation from the
    /// region cache: in steady state no mapping, no page fault, no zeroing).
    pub fn alloc_region(&mut self, len: usize, sem: Semantics) -> Result<Region> {
        Self::check_len(len)?;
        self.reap()?;
        let mut r = self.regions.take(len, sem)?;
        mark(&mut r, RegionState::MovedIn);
        Ok(r)
    }

    /// Give a region the application is done with back to this endpoint's region cache, for
    /// the next input or [`MemnetEndpoint::alloc_region`] (hidden under emulated move, kept
    /// mapped under the weak moves; deallocated under move). Returns whether it was cached.
    pub fn recycle(&mut self, mut region: Region, sem: Semantics) -> bool {
        if sem == Semantics::Move {
            // Move caches no region (it is unmapped), but its pages go back to the pool the
            // next input reads into.
            time(Op::RegionDeallocate, || self.inputs.take_back(&mut region));
            return false;
        }
        self.regions.recycle(region, sem)
    }

    /// Outputs not yet completed.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Process the completions that arrived (non-blocking).
    pub fn reap(&mut self) -> Result<usize> {
        let mut n = 0;
        loop {
            let w = match self.comp_rx.pop(&self.arena) {
                Ok(Some(w)) => w,
                Ok(None) => return Ok(n),
                Err(e) => return Err(GenieError::Protocol(e.to_string())),
            };
            let ticket = decode_completion(&w)?;
            let Some(i) = self.pending.iter().position(|p| p.ticket == ticket) else {
                return Err(GenieError::Protocol(format!(
                    "completion for unknown ticket {ticket}"
                )));
            };
            let p = self.pending.remove(i);
            crate::breakdown::in_phase(Phase::Dispose, || {
                p.held.dispose(&mut self.pool);
                self.regions.completed(p.ticket);
            });
            n += 1;
        }
    }

    /// Wait until `t` has completed.
    pub fn wait(&mut self, t: Ticket) -> Result<()> {
        loop {
            self.reap()?;
            if !self.pending.iter().any(|p| p.ticket == t.0) {
                return Ok(());
            }
            let (arena, comp) = (&self.arena, &self.comp_rx);
            if spin_until(self.spin, || comp.has_next(arena).unwrap_or(true)) {
                continue;
            }
            self.wait_event("waiting for output completion")?;
        }
    }

    /// Wait until every pending output has completed.
    pub fn flush(&mut self) -> Result<()> {
        while !self.pending.is_empty() {
            self.reap()?;
            if self.pending.is_empty() {
                break;
            }
            self.wait_event("waiting for output completion")?;
        }
        Ok(())
    }

    /// Sleep until the peer rings our doorbell; fail if it is gone (our output pipe lost its reader).
    fn wait_event(&self, during: &'static str) -> Result<()> {
        let mut fds = [
            PollFd::new(&self.my_bell, PollFlags::IN),
            PollFd::new(&self.out_tx[0], PollFlags::empty()),
            PollFd::new(&self.out_tx[1], PollFlags::empty()),
        ];
        let timeout = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: 100_000_000,
        };
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(GenieError::io("poll", e)),
        }
        // A peer that completed our outputs and then left is not gone for them: completions
        // already in the ring are reaped first.
        if fds[1..]
            .iter()
            .any(|f| f.revents().intersects(PollFlags::ERR | PollFlags::HUP))
            && !self.comp_rx.has_next(&self.arena).unwrap_or(false)
        {
            return Err(GenieError::PeerGone { during });
        }
        if fds[0].revents().contains(PollFlags::IN) {
            let mut b = [0u8; 8];
            let _ = rustix::io::read(&self.my_bell, &mut b);
        }
        Ok(())
    }

    /// Wait for the next message and return its length (validated).
    fn next_message(&mut self) -> Result<usize> {
        loop {
            match self.desc_rx.pop(&self.arena) {
                Ok(Some(w)) => {
                    let Descriptor {
                        ticket,
                        len,
                        offset,
                    } = decode_descriptor(&w)?;
                    self.cur_ticket = ticket;
                    self.cur_offset = offset;
                    // The data follows its descriptor closely: spin for it rather than sleep in
                    // the read.
                    let fd = self.in_rx[0].as_fd(); // every message starts in the first pipe
                    spin_until(self.spin, || {
                        zcio_vm::wire::queued(fd).map_or(true, |q| q > 0)
                    });
                    return Ok(len);
                }
                Ok(None) => {}
                Err(e) => return Err(GenieError::Protocol(e.to_string())),
            }
            let (arena, desc) = (&self.arena, &self.desc_rx);
            if spin_until(self.spin, || desc.has_next(arena).unwrap_or(true)) {
                continue;
            }
            // Descriptors are published before data: wait for data (or the sender's end).
            let mut fds = [PollFd::new(&self.in_rx[0], PollFlags::IN)];
            match rustix::event::poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(GenieError::io("poll", e)),
            }
            let re = fds[0].revents();
            if re.contains(PollFlags::HUP) && !re.contains(PollFlags::IN) {
                return Err(GenieError::PeerGone {
                    during: "input (waiting for a message)",
                });
            }
            if re.contains(PollFlags::IN)
                && !self
                    .desc_rx
                    .has_next(&self.arena)
                    .map_err(|e| GenieError::Protocol(e.to_string()))?
            {
                return Err(GenieError::Protocol(
                    "data arrived without a descriptor".into(),
                ));
            }
        }
    }

    fn complete(&mut self) -> Result<()> {
        Completion::new(
            &self.arena,
            &mut self.comp_tx,
            &self.peer_bell,
            self.in_rx[0].as_fd(),
            self.cur_ticket,
        )
        .post()
    }

    /// Drain and discard `len` bytes of a message that could not be delivered, keeping the
    /// stream in step.
    fn discard(&mut self, len: usize) -> Result<()> {
        let mut left = len;
        let mut junk = vec![0u8; 64 * 1024];
        let mut rx = striped(&self.in_rx, self.in_capacity).reader();
        while left > 0 {
            let n = left.min(junk.len());
            rx.read_exact(&mut junk[..n])
                .map_err(|e| GenieError::from_wire(e, "input"))?;
            left -= n;
        }
        self.complete()
    }

    /// Input the next message into the application buffer `buf` under `sem` (copy, emulated
    /// copy, share, emulated share) with the given input buffering. Returns the message length
    /// (at most `buf.len()`; a longer message is discarded with an error).
    pub fn recv(
        &mut self,
        sem: Semantics,
        buf: &mut [u8],
        buffering: InputBuffering,
    ) -> Result<(usize, Accounting)> {
        crate::breakdown::in_phase(Phase::Input, || self.recv_inner(sem, buf, buffering))
    }

    fn recv_inner(
        &mut self,
        sem: Semantics,
        buf: &mut [u8],
        buffering: InputBuffering,
    ) -> Result<(usize, Accounting)> {
        Self::check_len(buf.len())?;
        if sem.allocation() == crate::semantics::Allocation::System {
            return Err(GenieError::arg(
                "semantics",
                format!("{sem} returns regions: use recv_region"),
            ));
        }
        // Before the message is taken: a buffer that cannot be written loses nothing.
        crate::passing::check_writable(buf)?;
        self.refuse_copying_input(sem, buf, buffering)?;
        let len = self.next_message()?;
        if len > buf.len() {
            self.discard(len)?;
            return Err(GenieError::arg(
                "buf",
                format!(
                    "message of {len} bytes does not fit a buffer of {} bytes",
                    buf.len()
                ),
            ));
        }
        let done = Completion::new(
            &self.arena,
            &mut self.comp_tx,
            &self.peer_bell,
            self.in_rx[0].as_fd(),
            self.cur_ticket,
        );
        let mut src =
            PipeSource::new(&self.in_rx, self.in_capacity, self.cur_offset).completing(len, done);
        let acc = self
            .inputs
            .input_app(sem, &mut buf[..len], buffering, &mut src, self.profile)?;
        src.finish()?;
        Ok((len, acc))
    }

    /// Input the next message into a system-allocated region (move family, paper 000, Table 4):
    /// a cached region that passes the region check, else a new one. The region's pages after the
    /// data read as zeros.
    pub fn recv_region(
        &mut self,
        sem: Semantics,
        buffering: InputBuffering,
    ) -> Result<(Region, Accounting)> {
        crate::breakdown::in_phase(Phase::Input, || self.recv_region_inner(sem, buffering))
    }

    fn recv_region_inner(
        &mut self,
        sem: Semantics,
        _buffering: InputBuffering,
    ) -> Result<(Region, Accounting)> {
        if sem.allocation() != crate::semantics::Allocation::System {
            return Err(GenieError::arg(
                "semantics",
                format!("{sem} fills application buffers: use recv"),
            ));
        }
        let len = self.next_message()?;
        let mut region = if sem == Semantics::Move {
            time(Op::RegionCreate, || Region::alloc(len))?
        } else {
            self.regions.take(len, sem)?
        };
        if sem == Semantics::Move {
            let done = Completion::new(
                &self.arena,
                &mut self.comp_tx,
                &self.peer_bell,
                self.in_rx[0].as_fd(),
                self.cur_ticket,
            );
            let mut src = PipeSource::new(&self.in_rx, self.in_capacity, self.cur_offset)
                .completing(len, done);
            if let Some(d) = self.inputs.fill_region_huge(&mut region, &mut src)? {
                mark(&mut region, RegionState::MovedIn);
                src.finish()?;
                let acc = Accounting {
                    granule: Some(zcio_vm::huge::Granule::Huge),
                    cpu_copied_bytes: d.copied as u64,
                    kernel_copied_bytes: Some(len as u64),
                    swapped_bytes: d.swapped as u64,
                    path: DataPath::RegionInHugeStaging,
                };
                return Ok((region, acc));
            }
        }
        fill(&mut region)?;
        striped(&self.in_rx, self.in_capacity)
            .reader()
            .read_exact(region.as_mut_slice())
            .map_err(|e| GenieError::from_wire(e, "input"))?;
        mark(&mut region, RegionState::MovedIn);
        self.complete()?;
        let huge = region.capacity() % zcio_vm::page::HUGE_PAGE_SIZE == 0
            && zcio_vm::huge::scan(region.range()).granule() != zcio_vm::huge::Granule::Base;
        let acc = Accounting {
            granule: Some(if huge {
                zcio_vm::huge::Granule::Huge
            } else {
                zcio_vm::huge::Granule::Base
            }),
            cpu_copied_bytes: 0,
            kernel_copied_bytes: Some(len as u64),
            swapped_bytes: 0,
            path: DataPath::RegionIn { huge },
        };
        Ok((region, acc))
    }
}

/// The completion of one input message, posted to the sender's completion ring.
///
/// Posted as soon as the message's last byte has been read off the wire, before the receiver
/// delivers it (swaps pages, copies out): from then on the wire no longer references the
/// sender's pages, so the sender's dispose-time operations (unreference, end of TCOW protection)
/// overlap the receiver's, as they overlap the network and the receiver in Genie (paper 000,
/// §8.1: only prepare-time operations at the sender add to the end-to-end latency).
struct Completion<'a> {
    arena: &'a SharedArena,
    ring: &'a mut SharedRing,
    bell: BorrowedFd<'a>,
    /// The first pipe of the wire in: its writers closed means the sender is gone.
    wire: BorrowedFd<'a>,
    ticket: u64,
    posted: bool,
}

impl<'a> Completion<'a> {
    fn new(
        arena: &'a SharedArena,
        ring: &'a mut SharedRing,
        bell: &'a OwnedFd,
        wire: BorrowedFd<'a>,
        ticket: u64,
    ) -> Completion<'a> {
        Completion {
            arena,
            ring,
            bell: bell.as_fd(),
            wire,
            ticket,
            posted: false,
        }
    }

    /// Post the completion (once) and ring the sender's doorbell. A full ring waits for the
    /// sender to take completions in (it does before each output and in each wait): spinning a
    /// while, then a millisecond at a time, watching the wire; a sender gone meanwhile (killed
    /// before it took them in) would never make room, and is [`GenieError::PeerGone`].
    fn post(&mut self) -> Result<()> {
        if self.posted {
            return Ok(());
        }
        let mut w = [0u64; SLOT_WORDS];
        w[0] = DONE_MAGIC;
        w[1] = self.ticket;
        let t0 = std::time::Instant::now();
        loop {
            match self.ring.push(self.arena, &w) {
                Ok(true) => break,
                Ok(false) if t0.elapsed() < SPIN => std::thread::yield_now(),
                Ok(false) => {
                    let mut fds = [PollFd::new(&self.wire, PollFlags::empty())];
                    let ms = rustix::time::Timespec {
                        tv_sec: 0,
                        tv_nsec: 1_000_000,
                    };
                    match rustix::event::poll(&mut fds, Some(&ms)) {
                        Ok(_) | Err(rustix::io::Errno::INTR) => {}
                        Err(e) => return Err(GenieError::io("poll", e)),
                    }
                    if fds[0].revents().intersects(PollFlags::HUP | PollFlags::ERR) {
                        return Err(GenieError::PeerGone {
                            during: "input (the sender's completion ring full)",
                        });
                    }
                }
                Err(e) => return Err(GenieError::Protocol(e.to_string())),
            }
        }
        self.posted = true;
        let _ = rustix::io::write(self.bell, &1u64.to_ne_bytes());
        Ok(())
    }
}

struct PipeSource<'a> {
    /// The wire's pipes; every message starts in the first.
    pipes: [BorrowedFd<'a>; STRIPES],
    rx: zcio_vm::wire::StripedReader<'a>,
    /// Bytes one pipe holds, and the chunk of a message each pipe takes in turn.
    capacity: usize,
    /// Page offset of the message in the sender's memory.
    offset: usize,
    /// The message's length and its completion, posted when the last byte is read.
    done: Option<(usize, Completion<'a>)>,
}

impl<'a> PipeSource<'a> {
    /// The next message of the wire of these pipes, from its first byte.
    fn new(pipes: &'a [OwnedFd; STRIPES], capacity: usize, offset: usize) -> PipeSource<'a> {
        PipeSource {
            pipes: std::array::from_fn(|i| pipes[i].as_fd()),
            rx: striped(pipes, capacity).reader(),
            capacity,
            offset,
            done: None,
        }
    }

    /// Post `done` as soon as the message's `len` bytes have been read.
    fn completing(mut self, len: usize, done: Completion<'a>) -> PipeSource<'a> {
        self.done = Some((len, done));
        self
    }

    /// The message has been delivered: post its completion if the last read did not.
    fn finish(&mut self) -> Result<()> {
        match self.done.as_mut() {
            Some((_, c)) => c.post(),
            None => Ok(()),
        }
    }
}

impl Source for PipeSource<'_> {
    fn read_exact(&mut self, buf: &mut [u8]) -> Result<()> {
        self.rx
            .read_exact(buf)
            .map_err(|e| GenieError::from_wire(e, "input"))?;
        match self.done.as_mut() {
            Some((len, c)) if self.rx.position() >= *len => c.post(),
            _ => Ok(()),
        }
    }

    fn wait_whole(&mut self, len: usize) -> Result<bool> {
        // Only a message that the wire holds whole can be waited for (otherwise the sender
        // blocks with part of it queued).
        if len > self.capacity() {
            return Ok(false);
        }
        let used = len.div_ceil(self.capacity).min(STRIPES);
        loop {
            // One sender queues messages in order: once this message's pipes hold `len` bytes,
            // all of it is here (bytes beyond it belong to messages queued after it).
            let mut q = 0;
            for p in &self.pipes[..used] {
                q += zcio_vm::wire::queued(*p)?;
            }
            if q >= len {
                return Ok(true);
            }
            let mut fds = [PollFd::new(&self.pipes[0], PollFlags::IN)];
            let _ = rustix::event::poll(
                &mut fds,
                Some(&rustix::time::Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                }),
            );
            if fds[0].revents().contains(PollFlags::HUP) {
                let mut q = 0;
                for p in &self.pipes[..used] {
                    q += zcio_vm::wire::queued(*p)?;
                }
                if q < len {
                    return Err(GenieError::PeerGone {
                        during: "input (outboard: message incomplete)",
                    });
                }
            }
            std::thread::yield_now();
        }
    }

    fn kernel_copies(&self, len: usize) -> Option<u64> {
        Some(len as u64)
    }

    /// The longest message at this page offset that the wire holds whole. A pipe holds
    /// `capacity / page` page slots, and a chunk off the page boundary spans one page more than
    /// its length in pages: a message on the boundary fills every pipe, one off it only the
    /// first (its first chunk already overflows its pipe).
    fn capacity(&self) -> usize {
        if self.offset == 0 {
            STRIPES * self.capacity
        } else {
            self.capacity - self.offset
        }
    }
}
