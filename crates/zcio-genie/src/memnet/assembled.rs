//! Messages taken off the wire whole into a buffer of their own before the application asks:
//! a message longer than its sender's window, which comes in segments, and whatever arrives
//! while this end's own output waits for room ([`MemnetEndpoint::drain_input`]: two ends
//! sending each other long messages at once both go on, each taking in the other's).
//!
//! Reading a segment off the pipes is the one copy every input makes (the wire); handing the
//! buffer over (`recv_alloc`) adds none, copying it into the application's buffer (`recv`,
//! `recv_region`) adds one, counted in `cpu_copied_bytes`.

use super::{Descriptor, MemnetEndpoint, Wait, decode_descriptor};
use crate::AppBuffer;
use crate::error::{GenieError, Result};
use crate::path::DataPath;
use crate::semantics::Accounting;

/// A message taken in, whole or being assembled.
#[derive(Debug)]
pub(super) struct Assembled {
    /// The message's length.
    pub(super) total: usize,
    /// Its bytes, `got` of them read so far.
    pub(super) buf: AppBuffer,
    pub(super) got: usize,
    /// Its bytes that came through the shared ring (copied by this process, not the kernel).
    pub(super) ring_bytes: usize,
}

/// Bytes of messages taken in while this end's output waits, beyond which no new one is begun
/// (the one under way is finished): what a peer that sends without reading can make this end
/// hold.
const DRAIN_LIMIT: usize = 1 << 30;

impl MemnetEndpoint {
    /// Whether the next message is taken in whole before it is delivered: one already taken
    /// in, or one that comes in segments.
    pub(super) fn next_is_assembled(&self) -> bool {
        !self.assembled.is_empty() || self.held.is_some_and(|d| !d.whole())
    }

    /// Read segment `d` (its descriptor taken off the ring) into the message being assembled,
    /// and post its completion.
    fn read_segment(&mut self, d: Descriptor) -> Result<()> {
        let mut m = match self.assembled.pop_back() {
            Some(m) if m.got < m.total => m,
            other => {
                self.assembled.extend(other);
                return Err(GenieError::Protocol(format!(
                    "a segment at {} of a message of {} bytes, with no message under way",
                    d.at, d.total
                )));
            }
        };
        if d.at != m.got || d.total != m.total {
            return Err(GenieError::Protocol(format!(
                "a segment at {} of a message of {} bytes, where {} of {} came so far",
                d.at, d.total, m.got, m.total
            )));
        }
        if d.file {
            let r = self.file_copy_out(&d, &mut m.buf[d.at..d.at + d.len]);
            m.got += d.len;
            self.assembled.push_back(m);
            return r.map(|_| ());
        }
        if d.ring {
            let r = self.ring_take(&mut m.buf[d.at..d.at + d.len]);
            m.got += d.len;
            m.ring_bytes += d.len;
            self.assembled.push_back(m);
            return r;
        }
        self.start(&d);
        let r = self
            .in_wire()
            .reader()
            .read_exact(&mut m.buf[d.at..d.at + d.len])
            .map_err(|e| GenieError::from_wire(e, "input (a message's segment)"));
        m.got += d.len;
        self.assembled.push_back(m);
        r?;
        self.complete()
    }

    /// Begin assembling the message `d` starts (its descriptor taken off the ring) and read
    /// its first segment.
    fn begin_assembled(&mut self, d: Descriptor) -> Result<()> {
        if d.at != 0 {
            return Err(GenieError::Protocol(format!(
                "a segment at {} of a message of {} bytes, without the message's start",
                d.at, d.total
            )));
        }
        let buf = AppBuffer::for_message(d.total)?;
        self.assembled.push_back(Assembled {
            total: d.total,
            buf,
            got: 0,
            ring_bytes: 0,
        });
        self.read_segment(d)
    }

    /// Take the next message in whole (the one already begun, or the next to arrive), waiting
    /// for its segments as they come: the data of a message begun is on its way.
    pub(super) fn assemble_next(&mut self, w: Wait) -> Result<()> {
        if self.assembled.is_empty() {
            let d = self.take_descriptor(w)?;
            self.begin_assembled(d)?;
        }
        while self.assembled.front().is_some_and(|m| m.got < m.total) {
            let d = self.take_descriptor(Wait::FOREVER)?;
            self.read_segment(d)?;
        }
        Ok(())
    }

    /// The next message, taken in whole ([`MemnetEndpoint::assemble_next`] first), and what
    /// taking it cost: the wire's read; `copied_out` where the caller copies it on.
    pub(super) fn pop_assembled(&mut self, copied_out: bool) -> Option<(AppBuffer, Accounting)> {
        let m = self.assembled.pop_front()?;
        let (kernel, cpu) = ((m.total - m.ring_bytes) as u64, m.ring_bytes as u64);
        let acc = Accounting {
            granule: None,
            cpu_copied_bytes: cpu + if copied_out { m.total as u64 } else { 0 },
            kernel_copied_bytes: Some(kernel),
            swapped_bytes: 0,
            path: DataPath::Assembled { copied_out },
        };
        Some((m.buf, acc))
    }

    /// While this end's output waits (for room in the window, or for a completion), take in
    /// what the peer has sent whole, so that a peer waiting for this end to read goes on. A
    /// failure here fails this end's input, never the output that waits: the input refuses
    /// from then on.
    pub(super) fn drain_input(&mut self) {
        if self.broken_in.is_some() {
            return;
        }
        let before = self.assembled.len();
        if let Err(e) = self.drain_arrived() {
            self.broken_in = Some(e.to_string());
        }
        if self.assembled.len() > before {
            self.ring_self();
        }
    }

    fn drain_arrived(&mut self) -> Result<()> {
        loop {
            let under_way = self.assembled.back().is_some_and(|m| m.got < m.total);
            let held: usize = self.assembled.iter().map(|m| m.total).sum();
            if !under_way && held >= DRAIN_LIMIT {
                return Ok(());
            }
            let d = match self.held.take() {
                Some(d) => d,
                None => match self
                    .desc_rx
                    .pop(&self.arena)
                    .map_err(|e| GenieError::Protocol(e.to_string()))?
                {
                    Some(w) => {
                        let d = decode_descriptor(&w)?;
                        if d.file {
                            self.take_file(&d)?;
                        }
                        d
                    }
                    None => return Ok(()),
                },
            };
            // Only what has arrived whole: a peer that announces and sends nothing does not
            // hold this end up.
            if !d.ring && !d.file && !self.arrived(d.len)? {
                self.held = Some(d);
                return Ok(());
            }
            if under_way {
                // A ring message is whole: read_segment refuses it while one is under way.
                self.read_segment(d)?;
            } else {
                self.begin_assembled(d)?;
            }
        }
    }
}
