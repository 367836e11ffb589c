//! Output on the memory network: descriptors published, pages referenced, completions reaped.

use super::{
    DESC_MAGIC, MemnetEndpoint, PendingOut, Ticket, Wait, WindowFull, decode_completion, spin_until,
};
use crate::breakdown::{Op, Phase, time};
use crate::error::{GenieError, Result};
use crate::passing::{Held, output_app};
use crate::path::{DataPath, RegionOut};
use crate::region::{Region, RegionState, mark};
use crate::semantics::{Accounting, Semantics};
use rustix::event::{PollFd, PollFlags};
use std::time::Duration;
use zcio_vm::arena::SLOT_WORDS;
use zcio_vm::wire::{PACE_STALL, Room};

/// What one descriptor announces: a whole message, or a segment of one.
#[derive(Debug, Clone, Copy)]
pub(super) struct Segment {
    len: usize,
    /// The page offset of its first byte in this process.
    offset: usize,
    total: usize,
    at: usize,
}

impl Segment {
    pub(super) fn whole(len: usize, offset: usize) -> Segment {
        Segment {
            len,
            offset,
            total: len,
            at: 0,
        }
    }
}

impl MemnetEndpoint {
    /// Before a message of `len` bytes is announced: wait until the window has room for it
    /// (the pipes of its first chunks drained), within this call's `wait`, or say it has none
    /// ([`WindowFull::WouldBlock`]). Nothing is announced either way.
    fn make_room(&mut self, len: usize, wait: Wait) -> Result<()> {
        const DURING: &str = "waiting for room in the window";
        let wire = self.out_wire();
        let gone = |e| GenieError::from_wire(e, "output (waiting for room)");
        if self.window_full == WindowFull::WouldBlock {
            if len > wire.window() {
                return Err(GenieError::arg(
                    "buf",
                    format!(
                        "length {len} exceeds the window, {} bytes: such a message is sent by \
                         an endpoint that waits for room (WindowFull::Wait), or over a link made \
                         with a larger window (LinkOptions::window)",
                        wire.window()
                    ),
                ));
            }
            return match wire.has_room(len).map_err(gone)? {
                true => Ok(()),
                false => Err(GenieError::WouldBlock {
                    len,
                    window: wire.window(),
                    pending: self.pending.len(),
                }),
            };
        }
        loop {
            let wire = self.out_wire();
            let Some(k) = wire.first_undrained(len).map_err(gone)? else {
                return Ok(());
            };
            let cap = wait.left(DURING)?.map_or(PACE_STALL, |l| l.min(PACE_STALL));
            if wire.wait_drained(k, cap).map_err(gone)? == Room::Interrupted && wait.interruptible()
            {
                return Err(GenieError::Interrupted { during: DURING });
            }
            // The receiver may be waiting for this end to read: take in what it sent.
            self.drain_input();
        }
    }

    /// Announce a message of `len` bytes (at page offset `offset` in the sender's memory) once
    /// the window has room for it, all within one call's waits.
    fn announce(&mut self, ticket: u64, seg: Segment, sem: Semantics) -> Result<()> {
        let wait = self.waits.start();
        self.make_room(seg.len, wait)?;
        self.publish(ticket, seg, sem, wait)
    }

    /// The wire of the message of `len` bytes just announced, whose chunks take the next ring
    /// positions.
    fn claim(&mut self, len: usize) -> zcio_vm::wire::Striped<'_> {
        let first = self.claim_first(len);
        self.out_wire().at_chunk(first)
    }

    /// [`MemnetEndpoint::claim`], the ring position only.
    fn claim_first(&mut self, len: usize) -> u64 {
        let first = self.out_next;
        self.out_next += self.out_wire().chunks(len);
        first
    }

    fn publish(&mut self, ticket: u64, seg: Segment, sem: Semantics, wait: Wait) -> Result<()> {
        self.publish_at(ticket, seg, sem, super::PLACE_WIRE, wait)
    }

    /// Publish a descriptor; `place`: where its message's bytes are (the wire, the shared
    /// ring, a loan's file). A full descriptor ring is waited out: spinning a while, then
    /// asleep until the receiver takes a descriptor.
    pub(super) fn publish_at(
        &mut self,
        ticket: u64,
        seg: Segment,
        sem: Semantics,
        place: u64,
        wait: Wait,
    ) -> Result<()> {
        let mut w = [0u64; SLOT_WORDS];
        w[0] = DESC_MAGIC;
        w[1] = ticket;
        w[2] = seg.len as u64;
        w[3] = seg.offset as u64;
        w[4] = Semantics::ALL.iter().position(|s| *s == sem).unwrap_or(0) as u64;
        w[5] = seg.total as u64;
        w[6] = seg.at as u64;
        w[7] = place;
        let push = |me: &mut Self| {
            me.desc_tx
                .push(&me.arena, &w)
                .map_err(|e| GenieError::Protocol(e.to_string()))
        };
        if push(self)? {
            return Ok(());
        }
        let mut pushed = Ok(false);
        spin_until(self.spin, || {
            pushed = push(self);
            !matches!(pushed, Ok(false))
        });
        loop {
            if pushed? {
                return Ok(());
            }
            // Asleep until the receiver takes a descriptor (it wakes a sender that said so).
            self.waiting_for_descriptor_room(true);
            pushed = push(self);
            if !matches!(pushed, Ok(false)) {
                self.waiting_for_descriptor_room(false);
                continue;
            }
            let r = self.wait_event("waiting for room to announce an output", wait);
            self.waiting_for_descriptor_room(false);
            r?;
            pushed = push(self);
        }
    }

    /// Output `buf` through the shared ring, if its semantics copies it here and the ring has
    /// room ([`super::ring`]): copied in, announced, the receiver woken if it sleeps. The
    /// ticket is complete at once (the buffer is the application's again).
    fn send_by_ring(&mut self, sem: Semantics, buf: &[u8]) -> Result<Option<(Ticket, Accounting)>> {
        let why = match sem {
            Semantics::Copy => None,
            Semantics::EmulatedCopy => {
                match crate::passing::emulated_copy_copies(buf, &self.profile) {
                    Some(why) => Some(why),
                    None => return Ok(None),
                }
            }
            _ => return Ok(None),
        };
        if !self.wait_ring_room(buf.len()) {
            return Ok(None);
        }
        time(Op::Copyin, || self.ring_put(buf));
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let wait = self.waits.start();
        // A descriptor not published leaves the ring's bytes unannounced while this end has
        // counted them: nothing more may follow.
        self.publish_at(
            ticket,
            Segment::whole(buf.len(), 0),
            sem,
            super::PLACE_RING,
            wait,
        )
        .inspect_err(|e| self.broken_out = Some(e.to_string()))?;
        self.ring_wake();
        let out = DataPath::SharedRing { out: true };
        let path = match why {
            Some(why) => DataPath::CopyFallback(why).then(out),
            None => out,
        };
        Ok(Some((
            Ticket(ticket),
            Accounting {
                granule: None,
                cpu_copied_bytes: buf.len() as u64,
                kernel_copied_bytes: Some(0),
                swapped_bytes: 0,
                path,
            },
        )))
    }

    /// Output an application buffer under `sem` (copy, emulated copy, share, emulated share).
    /// Returns when the data is queued, by page reference, which takes no longer than the
    /// page-table work while the message fits the room left in the window
    /// ([`MemnetEndpoint::window`]): the receiver need not have read any of it. The ticket
    /// completes when the receiver has it.
    ///
    /// A message that its semantics copies here (copy; emulated copy below its calibrated
    /// crossover, [`crate::profile::Thresholds::short_output_bytes`]) of at most
    /// [`super::ring::RING_MAX`] bytes goes through the link's shared ring while it has room:
    /// copied in, and the ticket complete at once ([`DataPath::SharedRing`]).
    ///
    /// A message longer than the window goes in segments of at most the window, each queued
    /// once the receiver has read the one before; meanwhile this end takes in what its peer
    /// sends it (kept for its next receive), so that two ends sending each other long messages
    /// at once both go on.
    pub fn send(&mut self, sem: Semantics, buf: &[u8]) -> Result<(Ticket, Accounting)> {
        Self::check_len(buf.len())?;
        GenieError::refuse_broken(&self.broken_out, "output")?;
        self.reap_completions()?;
        if sem.allocation() == crate::semantics::Allocation::System {
            return Err(GenieError::arg(
                "semantics",
                format!("{sem} passes regions: use send_region"),
            ));
        }
        if let Some(sent) = self.send_by_ring(sem, buf)? {
            return Ok(sent);
        }
        let (total, window, ps) = (buf.len(), self.window(), zcio_vm::page_size());
        if total <= window || self.window_full == WindowFull::WouldBlock {
            return self.send_segment(sem, buf, total, 0);
        }
        // Segments of the window at most, the second on on a page boundary of the buffer.
        let mut at = 0;
        let mut acc = Accounting::default();
        loop {
            let addr = buf.as_ptr() as usize + at;
            let n = match at {
                0 => window - (addr + window) % ps,
                _ => window,
            }
            .min(total - at);
            let (t, a) = self.send_segment(sem, &buf[at..at + n], total, at)?;
            acc.add(&a);
            at += n;
            if at == total {
                return Ok((t, acc));
            }
        }
    }

    /// Announce and queue `piece`, the bytes from `at` on of a message of `total` bytes.
    fn send_segment(
        &mut self,
        sem: Semantics,
        piece: &[u8],
        total: usize,
        at: usize,
    ) -> Result<(Ticket, Accounting)> {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let seg = Segment {
            len: piece.len(),
            offset: piece.as_ptr() as usize % zcio_vm::page_size(),
            total,
            at,
        };
        // Descriptor first: the receiver finds it whenever data is readable. A segment after
        // the first is announced with its message under way: failing to announce it leaves
        // the receiver waiting for the rest, so nothing more may follow on this wire.
        if let Err(e) = self.announce(ticket, seg, sem) {
            if at > 0 {
                self.broken_out = Some(e.to_string());
            }
            return Err(e);
        }
        // The pool is lent out for the call, as the wire borrows the rest of the endpoint.
        let mut pool = std::mem::take(&mut self.pool);
        let first = self.claim_first(piece.len());
        let out = output_app(
            sem,
            piece,
            self.out_wire().at_chunk(first),
            &mut pool,
            &self.profile,
        );
        self.pool = pool;
        // Announced but not (wholly) queued: the receiver is left waiting for data that will
        // not come, so nothing more may follow on this wire.
        let (held, acc) = out.inspect_err(|e| self.broken_out = Some(e.to_string()))?;
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
        self.announce(t, Segment::whole(claimed, 0), Semantics::Copy)?;
        let wire = self.claim(claimed);
        wire.vmsplice_message(&[buf])
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
        GenieError::refuse_broken(&self.broken_out, "output")?;
        self.reap_completions()?;
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.announce(ticket, Segment::whole(region.len(), 0), sem)?;
        mark(&mut region, RegionState::MovingOut);
        let wire = self.claim(region.len());
        time(Op::Reference, || {
            wire.vmsplice_message(&[region.as_slice()])
        })
        .map_err(|e| GenieError::from_wire(e, "output"))
        .inspect_err(|e| self.broken_out = Some(e.to_string()))?;
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
        self.reap_completions()?;
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
    ///
    /// The endpoint's descriptor ([`AsFd`](std::os::fd::AsFd)) is readable while completions
    /// or messages may be waiting; this call lets it settle until the next one is posted (it
    /// stays readable while a message waits).
    pub fn reap(&mut self) -> Result<usize> {
        // The doorbell first, then the ring: a completion posted after this read rings again.
        let mut b = [0u8; 8];
        let _ = rustix::io::read(&self.my_bell, &mut b);
        // The shared ring's doorbell too, once its messages are taken.
        self.ring.bell.woke(&self.arena);
        let announced = self
            .desc_rx
            .has_next(&self.arena)
            .map_err(|e| GenieError::Protocol(e.to_string()))?;
        if !self.assembled.is_empty() || announced {
            // Messages taken in, or announced, wait for a receive: the descriptor stays
            // readable.
            self.ring_self();
        }
        self.reap_completions()
    }

    /// [`MemnetEndpoint::reap`] without the doorbell (the output calls' own reaping).
    pub(super) fn reap_completions(&mut self) -> Result<usize> {
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
        let wait = self.waits.start();
        loop {
            self.reap_completions()?;
            if !self.pending.iter().any(|p| p.ticket == t.0) {
                return Ok(());
            }
            let (arena, comp) = (&self.arena, &self.comp_rx);
            if spin_until(self.spin, || comp.has_next(arena).unwrap_or(true)) {
                continue;
            }
            // The receiver may be waiting for this end to read before it reads.
            self.drain_input();
            self.reap_completions()?;
            if !self.pending.iter().any(|p| p.ticket == t.0) {
                return Ok(());
            }
            self.wait_event("waiting for output completion", wait)?;
        }
    }

    /// Wait until every pending output has completed.
    pub fn flush(&mut self) -> Result<()> {
        let wait = self.waits.start();
        while !self.pending.is_empty() {
            self.reap_completions()?;
            if self.pending.is_empty() {
                break;
            }
            self.drain_input();
            self.wait_event("waiting for output completion", wait)?;
        }
        Ok(())
    }

    /// Sleep until the peer rings our doorbell; fail if it is gone (our output pipe lost its reader).
    fn wait_event(&self, during: &'static str, wait: Wait) -> Result<()> {
        let mut fds = [
            PollFd::new(&self.my_bell, PollFlags::IN),
            PollFd::new(&self.out_tx[0], PollFlags::empty()),
        ];
        wait.poll(&mut fds, Some(Duration::from_millis(100)), during)?;
        // A peer that completed our outputs and then left is not gone for them: completions
        // already in the ring are reaped first.
        if fds[1].revents().intersects(PollFlags::ERR | PollFlags::HUP)
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
}
