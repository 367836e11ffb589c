//! The shared ring: messages below the copy crossover go through a ring of bytes in the link's
//! arena, as fbufs and iceoryx2 pass data, with no pipe and no system call on the way.
//!
//! Copy semantics copies every message; emulated copy copies those its calibrated crossover
//! says are cheaper to copy than to protect and reference (the profile's short-output
//! threshold, at the granule the buffer is mapped at). On the wire such a message was copied
//! into a bounce buffer, referenced into a pipe and copied out of the pipe by the kernel; here
//! the sender copies it into the ring and the receiver copies it out into its own buffer: two
//! copies, the second from the cache while the ring stays small, and no system call while
//! both ends are busy. The promises hold as they do for any copy: the receiver's bytes are
//! those of the moment of the send (the sender's buffer is free when `send` returns, so its
//! ticket is complete at once), and the receiver's buffer is its own.
//!
//! Each direction has a ring of [`RING_BYTES`] and a few control words:
//!
//! - `consumed`, written by the receiver: the ring position up to which it has copied
//!   messages out. The sender writes only ahead of it. When the ring has no room for a
//!   message, the sender waits for it while the receiver takes messages out (a stream of
//!   messages keeps to the ring, whose copies cost less than the wire's); when the receiver
//!   takes nothing out for a while (100 µs, and 1 ns a byte of the message), the message takes
//!   the wire, and so do the next ones until the receiver moves on: a sender never waits long
//!   for a busy receiver.
//! - `sleeping`, the receiver's doorbell flag ([`Doorbell`]): set just before it sleeps for a
//!   message, so that the sender rings its doorbell only then, and `watched`: set once the
//!   application watches the endpoint's descriptor itself (an event loop sleeps outside zcio),
//!   after which every message rings.
//! - `waiting`, the sender's: set just before it sleeps for room in the descriptor ring, so
//!   that the receiver, taking a descriptor, wakes it.
//!
//! Both ends derive where a message lies from their own count of the ring's messages and the
//! message's length (it starts at the next 64-byte boundary, or at the ring's start when it
//! would not fit before its end), never from a position the peer wrote: a peer that writes
//! the ring at will changes bytes, nothing else. A receiver that claims more than it was sent
//! makes the sender's ring refuse from then on (its messages take the wire).

use super::{MemnetEndpoint, pace_offset};
use crate::error::Result;
use std::os::fd::OwnedFd;
use std::sync::atomic::{Ordering, fence};
use zcio_vm::arena::{Doorbell, SharedArena};

/// Bytes of each direction's ring.
pub const RING_BYTES: usize = 8 << 20;

/// The longest message the ring carries (a quarter of it, so that several are under way).
pub const RING_MAX: usize = RING_BYTES / 4;

/// Where a message starts, and where the next one may.
const ALIGN: u64 = 64;

/// Bytes of one direction's control words (four cache lines).
const CTL_BYTES: usize = 256;

fn ctl_offset(d: usize, pipes: usize) -> usize {
    pace_offset(2, pipes).div_ceil(64) * 64 + d * CTL_BYTES
}

fn consumed_offset(d: usize, pipes: usize) -> usize {
    ctl_offset(d, pipes)
}

/// The receiver's doorbell flag of direction `d` ([`Doorbell`](zcio_vm::arena::Doorbell)).
fn sleeping_offset(d: usize, pipes: usize) -> usize {
    ctl_offset(d, pipes) + 64
}

fn watched_offset(d: usize, pipes: usize) -> usize {
    ctl_offset(d, pipes) + 128
}

fn waiting_offset(d: usize, pipes: usize) -> usize {
    ctl_offset(d, pipes) + 192
}

/// Where direction `d`'s ring starts (page-aligned); `data_offset(2, pipes)` is the end of
/// the arena's layout.
pub(super) fn data_offset(d: usize, pipes: usize) -> usize {
    let ps = zcio_vm::page_size();
    (ctl_offset(2, pipes)).div_ceil(ps) * ps + d * RING_BYTES
}

/// Where a message of `len` bytes goes when the ring's next position is `pos`: there, or at
/// the ring's start if it would run past the end.
fn place(pos: u64, len: usize) -> u64 {
    let off = pos % RING_BYTES as u64;
    if off + len as u64 > RING_BYTES as u64 {
        pos + (RING_BYTES as u64 - off)
    } else {
        pos
    }
}

/// The ring's next position after a message of `len` bytes placed from `pos`.
fn after(pos: u64, len: usize) -> u64 {
    (place(pos, len) + len as u64).div_ceil(ALIGN) * ALIGN
}

/// How long a sender waits for room in the ring while the receiver takes nothing out, for a
/// message of `len` bytes: 100 µs, and 1 ns a byte (the receiver may be copying a long one).
fn patience(len: usize) -> std::time::Duration {
    std::time::Duration::from_nanos(100_000 + len as u64)
}

/// Say that the receiving end of direction `1 - side` is watched from outside zcio (an event
/// loop polls its descriptor): every message in the ring then rings its doorbell.
pub(super) fn watched_from_outside(arena: &SharedArena, side: usize, pipes: usize) {
    arena
        .atomic_u64(watched_offset(1 - side, pipes))
        .store(1, Ordering::SeqCst);
}

/// One end's side of its link's two rings.
#[derive(Debug)]
pub(super) struct RingEnd {
    /// The doorbell the peer rings for a message in the ring while this end sleeps.
    pub(super) bell: Doorbell,
    /// The peer's, with its flag.
    peer_bell: Doorbell,
    /// The next output's position, and the next input's.
    head: u64,
    /// Where the receiver's position stood when a sender last gave up waiting for room: no
    /// wait again until it moves.
    stalled_at: Option<u64>,
    tail: u64,
    /// The receiver claimed more of the ring than it was sent: outputs take the wire.
    refused: bool,
}

impl RingEnd {
    /// Side `side`'s end of a link of `pipes` pipes each way, with its doorbell and its peer's.
    pub(super) fn new(side: usize, pipes: usize, bell: OwnedFd, peer_bell: OwnedFd) -> RingEnd {
        RingEnd {
            bell: Doorbell::new(bell, sleeping_offset(1 - side, pipes)),
            peer_bell: Doorbell::new(peer_bell, sleeping_offset(side, pipes)),
            head: 0,
            stalled_at: None,
            tail: 0,
            refused: false,
        }
    }
}

impl MemnetEndpoint {
    fn pipes(&self) -> usize {
        self.out_tx.len()
    }

    /// The receiver's position in this end's output ring.
    fn consumed(&self) -> u64 {
        self.arena
            .atomic_u64(consumed_offset(self.side, self.pipes()))
            .load(Ordering::Acquire)
    }

    /// Whether the shared ring has room now for a message of `len` bytes this end sends. A
    /// receiver that claims more than it was sent turns the ring off from then on.
    fn ring_room(&mut self, len: usize) -> bool {
        if len > RING_MAX || self.ring.refused {
            return false;
        }
        let consumed = self.consumed();
        if consumed > self.ring.head {
            self.ring.refused = true;
            return false;
        }
        after(self.ring.head, len) - consumed <= RING_BYTES as u64
    }

    /// Whether the ring has room for `len` bytes, now or once the receiver has taken messages
    /// out (spinning: its copies take microseconds); `false` when it took nothing out for
    /// [`patience`], and from then on until it does.
    pub(super) fn wait_ring_room(&mut self, len: usize) -> bool {
        let mut last = (self.consumed(), std::time::Instant::now());
        let mut first = true;
        loop {
            if self.ring_room(len) {
                self.ring.stalled_at = None;
                return true;
            }
            if self.ring.refused
                || len > RING_MAX
                || (first && self.ring.stalled_at == Some(last.0))
            {
                return false;
            }
            first = false;
            let c = self.consumed();
            if c != last.0 {
                last = (c, std::time::Instant::now());
            } else if last.1.elapsed() >= patience(len) {
                self.ring.stalled_at = Some(c);
                return false;
            }
            for _ in 0..64 {
                std::hint::spin_loop();
            }
        }
    }

    /// Copy `buf` into the shared ring, where [`MemnetEndpoint::ring_room`] said there is
    /// room; returns the message's place for its descriptor to follow.
    pub(super) fn ring_put(&mut self, buf: &[u8]) {
        let at = place(self.ring.head, buf.len()) % RING_BYTES as u64;
        let base = data_offset(self.side, self.pipes());
        self.arena.copy_in(base + at as usize, buf);
        self.ring.head = after(self.ring.head, buf.len());
    }

    /// After a message's descriptor is published: ring the receiver's doorbell if it said it
    /// sleeps, or is watched from outside.
    pub(super) fn ring_wake(&self) {
        fence(Ordering::SeqCst);
        let watched = self
            .arena
            .atomic_u64(watched_offset(self.side, self.pipes()));
        if watched.load(Ordering::Relaxed) != 0 {
            let _ = rustix::io::write(self.ring.peer_bell.fd(), &1u64.to_ne_bytes());
        } else {
            self.ring.peer_bell.ring(&self.arena);
        }
    }

    /// Copy the next message of the ring in (its descriptor taken off, `out` its length) and
    /// give its room back.
    pub(super) fn ring_take(&mut self, out: &mut [u8]) -> Result<()> {
        let d = 1 - self.side;
        let n = self.pipes();
        let at = place(self.ring.tail, out.len()) % RING_BYTES as u64;
        self.arena.copy_out(data_offset(d, n) + at as usize, out);
        self.ring.tail = after(self.ring.tail, out.len());
        self.arena
            .atomic_u64(consumed_offset(d, n))
            .store(self.ring.tail, Ordering::Release);
        Ok(())
    }

    /// The receiver, having taken a descriptor off the ring: wake the sender if it sleeps for
    /// room in it.
    pub(super) fn descriptor_taken(&self) {
        fence(Ordering::SeqCst);
        let flag = self
            .arena
            .atomic_u32(waiting_offset(1 - self.side, self.pipes()));
        if flag.load(Ordering::Relaxed) != 0 && flag.swap(0, Ordering::SeqCst) != 0 {
            let _ = rustix::io::write(&self.peer_bell, &1u64.to_ne_bytes());
        }
    }

    /// The sender, about to sleep for room in the descriptor ring: say so (re-check the ring
    /// after this, before sleeping).
    pub(super) fn waiting_for_descriptor_room(&self, yes: bool) {
        self.arena
            .atomic_u32(waiting_offset(self.side, self.pipes()))
            .store(yes as u32, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_never_straddle_the_ring_end_and_start_aligned() {
        let r = RING_BYTES as u64;
        assert_eq!(place(0, 100), 0);
        assert_eq!(after(0, 100), 128);
        // One that would straddle the end starts at the next lap.
        assert_eq!(place(r - 64, 100), r);
        assert_eq!(after(r - 64, 100), r + 128);
        // One that ends exactly at the end stays.
        assert_eq!(place(r - RING_MAX as u64, RING_MAX), r - RING_MAX as u64);
        for pos in [0, 64, r - 64, 3 * r + 4096] {
            for len in [1, 63, 64, 65, 4096, RING_MAX] {
                let p = place(pos, len);
                assert!(p >= pos && p % ALIGN == 0);
                assert!((p % r) + len as u64 <= r, "pos {pos} len {len}");
                assert!(after(pos, len) - pos <= (RING_MAX as u64) * 2 + ALIGN);
            }
        }
    }

    #[test]
    fn a_receiver_claiming_more_than_it_was_sent_turns_the_ring_off_and_loses_nothing() {
        use crate::{InputBuffering, Semantics};
        let (mut tx, mut rx) = super::super::pair().unwrap();
        let (_, acc) = tx.send(Semantics::Copy, b"first").unwrap();
        assert_eq!(acc.path, crate::DataPath::SharedRing { out: true });
        // The receiver's side writes a position the sender never reached.
        let n = tx.pipes();
        tx.arena
            .atomic_u64(consumed_offset(tx.side, n))
            .store(1 << 40, Ordering::Release);
        let (_, acc) = tx.send(Semantics::Copy, b"second").unwrap();
        assert!(
            !matches!(acc.path, crate::DataPath::SharedRing { .. }),
            "{}",
            acc.path
        );
        // Both arrive, in order: the first from the ring, the second from the wire.
        let mut got = [0u8; 16];
        for want in [&b"first"[..], b"second"] {
            let (len, _) = rx
                .recv(Semantics::Copy, &mut got, InputBuffering::EarlyDemux)
                .unwrap();
            assert_eq!(&got[..len], want);
        }
    }
}
