//! Input on the memory network: descriptors validated, messages read off the wire and placed,
//! completions posted.

use super::{
    DONE_MAGIC, Descriptor, MemnetEndpoint, SPIN, Wait, decode_descriptor, spin_until, wire_in,
};
use crate::breakdown::{Op, Phase, time};
use crate::error::{GenieError, Result};
use crate::passing::{InputBuffers, Source};
use crate::path::DataPath;
use crate::profile::Profile;
use crate::region::{Region, RegionState, fill, mark};
use crate::semantics::{Accounting, InputBuffering, Semantics};
use rustix::event::{PollFd, PollFlags};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;
use zcio_vm::arena::{SLOT_WORDS, SharedArena, SharedRing};
use zcio_vm::wire::Striped;

impl MemnetEndpoint {
    /// The next descriptor: one held back (by [`MemnetEndpoint::peek_len`], a too-small
    /// buffer, or a drain that found its data not yet there) first, else the next to arrive.
    pub(super) fn take_descriptor(&mut self, w: Wait) -> Result<Descriptor> {
        match self.held.take() {
            Some(d) => Ok(d),
            None => self.next_descriptor(w),
        }
    }

    /// Make `d` the current message (or segment), whose data is read next: its chunks take the
    /// next ring positions.
    pub(super) fn start(&mut self, d: &Descriptor) {
        self.cur_ticket = d.ticket;
        self.cur_first = self.in_next;
        self.in_next += self.in_wire().chunks(d.len);
    }

    /// Whether the `len` bytes of the next message (or segment) are all on the wire.
    pub(super) fn arrived(&self, len: usize) -> Result<bool> {
        let wire =
            wire_in(&self.arena, self.side, &self.in_rx, self.in_capacity).at_chunk(self.in_next);
        Ok(len <= wire.window() && wire.queued_bytes(len)? >= len)
    }

    /// Ring this end's own doorbell: its descriptor ([`AsFd`]) becomes readable, for a message
    /// taken in while its output waited.
    pub(super) fn ring_self(&self) {
        let _ = rustix::io::write(&self.my_bell, &1u64.to_ne_bytes());
    }

    /// The wire in, for the current message.
    pub(super) fn in_wire(&self) -> Striped<'_> {
        wire_in(&self.arena, self.side, &self.in_rx, self.in_capacity).at_chunk(self.cur_first)
    }

    /// The pipe in which the next message to be taken starts.
    fn next_pipe(&self) -> BorrowedFd<'_> {
        self.in_rx[(self.in_next % self.in_rx.len() as u64) as usize].as_fd()
    }

    /// The length of the next message, waiting for it to arrive. The message stays queued for
    /// the next receive, which may then bring a buffer of the right length.
    pub fn peek_len(&mut self) -> Result<usize> {
        GenieError::refuse_broken(&self.broken_in, "input")?;
        if let Some(m) = self.assembled.front() {
            return Ok(m.total);
        }
        let d = self.take_descriptor(self.waits.start())?;
        self.held = Some(d);
        Ok(d.total)
    }

    /// Receive the next message into a buffer of its own length, made for it (in transparent
    /// huge pages from 2 MiB, so that the 2 MiB paths run), under `sem`.
    pub fn recv_alloc(
        &mut self,
        sem: Semantics,
        buffering: InputBuffering,
    ) -> Result<(crate::AppBuffer, Accounting)> {
        let len = self.peek_len()?;
        if self.next_is_assembled() {
            // Taken in whole into a buffer of its own: that buffer is the one handed over.
            let r = self.assemble_next(Wait::FOREVER);
            self.end_input(true, r)?;
            // The buffer is the receiver's alone: every semantics' promise is kept.
            return Ok(self.pop_assembled(false).expect("assembled above"));
        }
        let mut buf = crate::AppBuffer::for_message(len)?;
        let (_, acc) = self.recv(sem, &mut buf, buffering)?;
        Ok((buf, acc))
    }

    /// Wait for the next descriptor, take it off the ring and validate it.
    fn next_descriptor(&mut self, w: Wait) -> Result<Descriptor> {
        loop {
            match self.desc_rx.pop(&self.arena) {
                Ok(Some(w)) => {
                    self.descriptor_taken();
                    let d = decode_descriptor(&w)?;
                    if d.file {
                        self.take_file(&d)?;
                    } else if !d.ring {
                        // The data follows its descriptor closely: spin for it rather than
                        // sleep in the read.
                        let fd = self.next_pipe();
                        spin_until(self.spin, || {
                            zcio_vm::wire::queued(fd).map_or(true, |q| q > 0)
                        });
                    }
                    return Ok(d);
                }
                Ok(None) => {}
                Err(e) => return Err(GenieError::Protocol(e.to_string())),
            }
            let (arena, desc) = (&self.arena, &self.desc_rx);
            if spin_until(self.spin, || desc.has_next(arena).unwrap_or(true)) {
                continue;
            }
            // Asleep until data comes on the wire (descriptors are published before data), the
            // sender rings for a message in the shared ring, or the sender is gone. Saying so
            // first, then looking once more, loses no ring.
            self.ring.bell.prepare_sleep(&self.arena);
            if self
                .desc_rx
                .has_next(&self.arena)
                .map_err(|e| GenieError::Protocol(e.to_string()))?
            {
                self.ring.bell.woke(&self.arena);
                continue;
            }
            let (next, bell) = (self.next_pipe(), self.ring.bell.fd());
            let mut fds = [
                PollFd::new(&next, PollFlags::IN),
                PollFd::new(&bell, PollFlags::IN),
            ];
            let slept = w.poll(&mut fds, None, "waiting for a message");
            let re = fds[0].revents();
            self.ring.bell.woke(&self.arena);
            slept?;
            let more = self
                .desc_rx
                .has_next(&self.arena)
                .map_err(|e| GenieError::Protocol(e.to_string()))?;
            if re.contains(PollFlags::HUP) && !re.contains(PollFlags::IN) && !more {
                return Err(GenieError::PeerGone {
                    during: "input (waiting for a message)",
                });
            }
            if re.contains(PollFlags::IN) && !more {
                return Err(GenieError::Protocol(
                    "data arrived without a descriptor".into(),
                ));
            }
        }
    }

    /// Run `f` on the input buffers and the current message of `len` bytes on the wire, as a
    /// source that posts the message's completion once its last byte is read.
    fn with_completing_source<T>(
        &mut self,
        len: usize,
        f: impl FnOnce(&mut InputBuffers, &mut PipeSource<'_>, &Profile) -> Result<T>,
    ) -> Result<T> {
        let done = Completion::new(
            &self.arena,
            &mut self.comp_tx,
            &self.peer_bell,
            self.in_rx[0].as_fd(),
            self.cur_ticket,
        );
        let mut src = PipeSource::new(
            wire_in(&self.arena, self.side, &self.in_rx, self.in_capacity).at_chunk(self.cur_first),
        )
        .completing(len, done);
        f(&mut self.inputs, &mut src, &self.profile)
    }

    pub(super) fn complete(&mut self) -> Result<()> {
        Completion::new(
            &self.arena,
            &mut self.comp_tx,
            &self.peer_bell,
            self.in_rx[0].as_fd(),
            self.cur_ticket,
        )
        .post()
    }

    /// Input the next message into the application buffer `buf` under `sem` (copy, emulated
    /// copy, share, emulated share) with the given input buffering. Returns the message length
    /// (at most `buf.len()`); a longer message stays queued, and the error
    /// ([`GenieError::TooSmall`]) names its length.
    pub fn recv(
        &mut self,
        sem: Semantics,
        buf: &mut [u8],
        buffering: InputBuffering,
    ) -> Result<(usize, Accounting)> {
        GenieError::refuse_broken(&self.broken_in, "input")?;
        let mut taken = false;
        let r = crate::breakdown::in_phase(Phase::Input, || {
            self.recv_inner(sem, buf, buffering, &mut taken)
        });
        self.end_input(taken, r)
    }

    /// The end of an input: one that failed with a message taken off the wire and not wholly
    /// read (or discarded) leaves the wire partway through it, and the endpoint refuses every
    /// later input rather than read the rest as the next message.
    fn end_input<T>(&mut self, taken: bool, r: Result<T>) -> Result<T> {
        if let Err(e) = &r
            && taken
        {
            self.broken_in = Some(e.to_string());
        }
        r
    }

    fn recv_inner(
        &mut self,
        sem: Semantics,
        buf: &mut [u8],
        buffering: InputBuffering,
        taken: &mut bool,
    ) -> Result<(usize, Accounting)> {
        Self::check_len(buf.len())?;
        if sem.allocation() == crate::semantics::Allocation::System {
            return Err(GenieError::arg(
                "semantics",
                format!("{sem} returns regions: use recv_region"),
            ));
        }
        // Before the message is taken: a buffer that cannot be written loses nothing.
        self.inputs.check_writable(buf)?;
        self.refuse_copying_input(sem, buf, buffering)?;
        let len = self.peek_len()?;
        if len > buf.len() {
            // Nothing of it read: it is the next message still.
            return Err(GenieError::TooSmall {
                needed: len,
                got: buf.len(),
            });
        }
        *taken = true;
        if !self.assembled.is_empty() {
            self.assemble_next(Wait::FOREVER)?;
            let (m, acc) = self.pop_assembled(true).expect("assembled above");
            time(Op::Copyout, || buf[..len].copy_from_slice(&m[..len]));
            return Ok((len, acc));
        }
        let d = self.take_descriptor(Wait::FOREVER)?;
        if !d.whole() {
            // In segments (longer than its sender's window), read as they come into the
            // semantics' own input path: under copy and emulated copy the buffer is written
            // only once the last has come, and nothing is copied out of an assembled one.
            let mut inputs = std::mem::take(&mut self.inputs);
            let profile = self.profile.clone();
            let mut src = SegmentSource {
                ep: self,
                first: Some(d),
                total: len,
                pos: 0,
                wire_bytes: 0,
            };
            let r = inputs.input_app(sem, &mut buf[..len], buffering, &mut src, &profile);
            self.inputs = inputs;
            return Ok((len, r?));
        }
        if d.file {
            let acc = self.file_copy_out(&d, &mut buf[..len])?;
            return Ok((len, acc));
        }
        if d.ring {
            time(Op::Copyout, || self.ring_take(&mut buf[..len]))?;
            return Ok((len, ring_accounting(len)));
        }
        self.start(&d);
        let acc = self.with_completing_source(len, |inputs, src, profile| {
            let acc = inputs.input_app(sem, &mut buf[..len], buffering, src, profile)?;
            src.finish()?;
            Ok(acc)
        })?;
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
        GenieError::refuse_broken(&self.broken_in, "input")?;
        let mut taken = false;
        let r = crate::breakdown::in_phase(Phase::Input, || {
            self.recv_region_inner(sem, buffering, &mut taken)
        });
        self.end_input(taken, r)
    }

    fn recv_region_inner(
        &mut self,
        sem: Semantics,
        _buffering: InputBuffering,
        taken: &mut bool,
    ) -> Result<(Region, Accounting)> {
        if sem.allocation() != crate::semantics::Allocation::System {
            return Err(GenieError::arg(
                "semantics",
                format!("{sem} fills application buffers: use recv"),
            ));
        }
        let len = self.peek_len()?;
        *taken = true;
        let mut region = if sem == Semantics::Move {
            time(Op::RegionCreate, || Region::alloc(len))?
        } else {
            self.regions.take(len, sem)?
        };
        if self.next_is_assembled() {
            self.assemble_next(Wait::FOREVER)?;
            let (m, acc) = self.pop_assembled(true).expect("assembled above");
            fill(&mut region)?;
            time(Op::Copyout, || {
                region.as_mut_slice()[..len].copy_from_slice(&m[..len])
            });
            mark(&mut region, RegionState::MovedIn);
            return Ok((region, acc));
        }
        let d = self.take_descriptor(Wait::FOREVER)?;
        if d.file {
            fill(&mut region)?;
            let acc = self.file_copy_out(&d, &mut region.as_mut_slice()[..len])?;
            mark(&mut region, RegionState::MovedIn);
            return Ok((region, acc));
        }
        if d.ring {
            fill(&mut region)?;
            time(Op::Copyout, || {
                self.ring_take(&mut region.as_mut_slice()[..len])
            })?;
            mark(&mut region, RegionState::MovedIn);
            return Ok((region, ring_accounting(len)));
        }
        self.start(&d);
        if sem == Semantics::Move {
            let huge = self.with_completing_source(len, |inputs, src, _| {
                let d = inputs.fill_region_huge(&mut region, src)?;
                if d.is_some() {
                    mark(&mut region, RegionState::MovedIn);
                    src.finish()?;
                }
                Ok(d)
            })?;
            if let Some(d) = huge {
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
        self.in_wire()
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

/// A message in segments on the wire, read as their descriptors come (the first already
/// taken off): each segment must continue the message where the one before ended. A
/// segment's completion is posted once it is read.
struct SegmentSource<'e> {
    ep: &'e mut MemnetEndpoint,
    first: Option<Descriptor>,
    total: usize,
    /// Bytes of the message read so far, and of them from the wire.
    pos: usize,
    wire_bytes: usize,
}

impl Source for SegmentSource<'_> {
    fn read_exact(&mut self, out: &mut [u8]) -> Result<()> {
        let mut k = 0;
        while k < out.len() {
            let d = match self.first.take() {
                Some(d) => d,
                None => self.ep.take_descriptor(Wait::FOREVER)?,
            };
            if d.ring
                || d.file
                || d.at != self.pos
                || d.total != self.total
                || d.len > out.len() - k
            {
                return Err(GenieError::Protocol(format!(
                    "a segment of {} bytes at {} of a message of {}, where {} of {} came so far",
                    d.len, d.at, d.total, self.pos, self.total
                )));
            }
            let piece = &mut out[k..k + d.len];
            self.ep.start(&d);
            self.ep
                .in_wire()
                .reader()
                .read_exact(piece)
                .map_err(|e| GenieError::from_wire(e, "input (a message's segment)"))?;
            self.ep.complete()?;
            self.wire_bytes += d.len;
            k += d.len;
            self.pos += d.len;
        }
        Ok(())
    }

    fn wait_whole(&mut self, _len: usize) -> Result<bool> {
        // Its segments come one after the other: it is never held whole.
        Ok(false)
    }

    fn kernel_copies(&self, _len: usize) -> Option<u64> {
        Some(self.wire_bytes as u64)
    }

    fn capacity(&self) -> usize {
        0
    }
}

/// What taking a message out of the shared ring cost: one copy, by this process.
fn ring_accounting(len: usize) -> Accounting {
    Accounting {
        granule: None,
        cpu_copied_bytes: len as u64,
        kernel_copied_bytes: Some(0),
        swapped_bytes: 0,
        path: DataPath::SharedRing { out: false },
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
                    let pause = Some(Duration::from_millis(1));
                    Wait::FOREVER.poll(&mut fds, pause, "posting a completion")?;
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
    /// The wire in, at the message's first chunk.
    wire: Striped<'a>,
    rx: zcio_vm::wire::StripedReader<'a>,
    /// The message's length and its completion, posted when the last byte is read.
    done: Option<(usize, Completion<'a>)>,
}

impl<'a> PipeSource<'a> {
    /// The next message of `wire` (at its first chunk), from its first byte.
    fn new(wire: Striped<'a>) -> PipeSource<'a> {
        PipeSource {
            wire,
            rx: wire.reader(),
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

    /// Bytes the pipes of a message of `len` bytes hold now (each holds one chunk at most,
    /// so all of them are this message's).
    fn held(&self, len: usize) -> Result<usize> {
        Ok(self.wire.queued_bytes(len)?)
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
        // waits with part of it queued).
        if len > self.capacity() {
            return Ok(false);
        }
        loop {
            if self.held(len)? >= len {
                return Ok(true);
            }
            let first = self.wire.pipe_at(0);
            let mut fds = [PollFd::new(&first, PollFlags::IN)];
            let _ = rustix::event::poll(
                &mut fds,
                Some(&rustix::time::Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                }),
            );
            if fds[0].revents().contains(PollFlags::HUP) && self.held(len)? < len {
                return Err(GenieError::PeerGone {
                    during: "input (outboard: message incomplete)",
                });
            }
            std::thread::yield_now();
        }
    }

    fn kernel_copies(&self, len: usize) -> Option<u64> {
        Some(len as u64)
    }

    /// The longest message the wire holds whole: its window (a chunk fits its pipe at any
    /// page offset).
    fn capacity(&self) -> usize {
        self.wire.window()
    }
}
