//! The link's fast path: two single-producer, single-consumer rings of references in a small
//! memfd shared by the two ends of a link, one for sends (originator to receiver) and one for
//! deallocation notices (back). A reference then costs a few stores and no system call; the
//! socket beside it carries what the rings cannot: the path offer, a wake-up for a side that
//! sleeps, secure requests, the overflow of a full ring, and the end of a process.
//!
//! Each ring is a run of words: a header (consumer position, producer position, the consumer's
//! "asleep" flag, the producer's count of socket messages, the slot count, the consumer's count
//! of references it took from the socket), each on its own cache line, then the slots of three
//! words (kind, address, length).
//!
//! Both processes can write the whole memfd, so neither trusts what the other wrote there: a
//! position that runs backwards or further than the ring holds is a [`RingError`], and
//! every reference popped is checked by the link as if it came over the socket. A peer that
//! spoils the rings harms itself alone.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering, fence};
use zcio_vm::protect::Access;
use zcio_vm::shared::SharedWords;

const HEAD: usize = 0;
const TAIL: usize = 8;
const ASLEEP: usize = 16;
const MAIL: usize = 24;
const CAP: usize = 32;
const TAKEN: usize = 40;
const SLOTS: usize = 48;

/// Slots per ring unless told otherwise.
pub const DEFAULT_SLOTS: usize = 4096;
/// The most slots a ring may have.
pub const MAX_SLOTS: usize = 1 << 16;

/// A peer spoiled a ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("shared ring corrupt: positions {head}..{tail} in a ring of {slots} slots")]
pub struct RingError {
    head: u64,
    tail: u64,
    slots: u64,
}

fn ring_words(slots: usize) -> usize {
    SLOTS + 3 * slots
}

/// The two rings of one link, mapped in this process.
#[derive(Debug)]
pub struct Rings {
    map: SharedWords,
    fd: OwnedFd,
    slots: usize,
}

/// Which ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// Originator to receiver: sends.
    Sends = 0,
    /// Receiver to originator: deallocation notices.
    Frees = 1,
}

impl Rings {
    /// New rings of `slots` slots each (the originator's side).
    pub fn create(slots: usize) -> Result<Rings, zcio_vm::VmError> {
        let slots = slots.clamp(1, MAX_SLOTS);
        let len = 2 * ring_words(slots) * 8;
        let fd = zcio_vm::mapping::memfd("zcio-fbuf-rings", len)?;
        let r = Rings::map(fd, len, slots)?;
        for d in [Dir::Sends, Dir::Frees] {
            r.words(d)[CAP].store(slots as u64, Ordering::Relaxed);
        }
        Ok(r)
    }

    /// The rings another process created, from their descriptor (the receiver's side). Their
    /// size says how many slots they have; the slot count written inside must agree.
    pub fn open(fd: OwnedFd) -> Result<Rings, String> {
        let len = rustix::fs::fstat(&fd)
            .map_err(|e| format!("rings descriptor: {e}"))?
            .st_size as usize;
        let slots = (len / 16).saturating_sub(SLOTS) / 3;
        if slots == 0 || slots > MAX_SLOTS || len != 2 * ring_words(slots) * 8 {
            return Err(format!("rings of {len} bytes: not a ring pair"));
        }
        let r = Rings::map(fd, len, slots).map_err(|e| e.to_string())?;
        for d in [Dir::Sends, Dir::Frees] {
            let cap = r.words(d)[CAP].load(Ordering::Relaxed);
            if cap != slots as u64 {
                return Err(format!(
                    "rings claim {cap} slots in room for {slots}: not a ring pair"
                ));
            }
        }
        Ok(r)
    }

    fn map(fd: OwnedFd, len: usize, slots: usize) -> Result<Rings, zcio_vm::VmError> {
        // The rings are read by offset at both ends: any address will do, and a fixed one
        // could be taken here.
        let map = SharedWords::map_anywhere(fd.as_fd(), 0, len, Access::ReadWrite)?;
        Ok(Rings { map, fd, slots })
    }

    /// The descriptor, to pass to the other end.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn words(&self, d: Dir) -> &[AtomicU64] {
        let n = ring_words(self.slots) * 8;
        self.map.words(d as usize * n, n)
    }

    /// Put an entry on ring `d` (this side produces it) at `*pos`; `false` when it is full.
    pub fn push(&self, d: Dir, pos: &mut u64, e: [u64; 3]) -> Result<bool, RingError> {
        let w = self.words(d);
        let head = w[HEAD].load(Ordering::Acquire);
        let slots = self.slots as u64;
        if head > *pos || *pos - head > slots {
            return Err(RingError {
                head,
                tail: *pos,
                slots,
            });
        }
        if *pos - head == slots {
            return Ok(false);
        }
        let at = SLOTS + 3 * (*pos % slots) as usize;
        for (k, v) in e.into_iter().enumerate() {
            w[at + k].store(v, Ordering::Relaxed);
        }
        *pos += 1;
        w[TAIL].store(*pos, Ordering::Release);
        Ok(true)
    }

    /// Take the next entry of ring `d` (this side consumes it) at `*pos`, if there is one.
    pub fn pop(&self, d: Dir, pos: &mut u64) -> Result<Option<[u64; 3]>, RingError> {
        let w = self.words(d);
        let tail = w[TAIL].load(Ordering::Acquire);
        let slots = self.slots as u64;
        if tail < *pos || tail - *pos > slots {
            return Err(RingError {
                head: *pos,
                tail,
                slots,
            });
        }
        if tail == *pos {
            return Ok(None);
        }
        let at = SLOTS + 3 * (*pos % slots) as usize;
        let e = [0, 1, 2].map(|k| w[at + k].load(Ordering::Relaxed));
        *pos += 1;
        w[HEAD].store(*pos, Ordering::Release);
        Ok(Some(e))
    }

    /// Whether ring `d` has entries past `pos` (without taking them).
    pub fn pending(&self, d: Dir, pos: u64) -> bool {
        self.words(d)[TAIL].load(Ordering::Acquire) != pos
    }

    /// The consumer of ring `d` is about to sleep on the socket: after this, either it sees
    /// the entries pushed meanwhile ([`Rings::pending`] once more) or their producer sees the
    /// flag and wakes it.
    pub fn announce_sleep(&self, d: Dir) {
        self.words(d)[ASLEEP].store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
    }

    /// The consumer of ring `d` is awake again.
    pub fn awake(&self, d: Dir) {
        self.words(d)[ASLEEP].store(0, Ordering::Relaxed);
    }

    /// After pushing on ring `d`: whether its consumer sleeps and must be woken (the flag is
    /// taken, so one wake-up answers one announcement).
    pub fn must_wake(&self, d: Dir) -> bool {
        fence(Ordering::SeqCst);
        let f = &self.words(d)[ASLEEP];
        f.load(Ordering::Relaxed) != 0 && f.swap(0, Ordering::AcqRel) != 0
    }

    /// The producer of ring `d` wrote a message on the socket the consumer must read.
    pub fn post_mail(&self, d: Dir) {
        self.words(d)[MAIL].fetch_add(1, Ordering::Release);
    }

    /// The count of socket messages the producer of ring `d` has posted.
    pub fn mail(&self, d: Dir) -> u64 {
        self.words(d)[MAIL].load(Ordering::Acquire)
    }

    /// The consumer of ring `d` has taken `n` references in all from the socket (those its
    /// producer sent there because the ring was full, or while earlier ones were still on the
    /// way): the producer keeps sending on the socket until the consumer has taken all of them,
    /// so that no reference on the ring overtakes one on the socket.
    pub fn set_mail_taken(&self, d: Dir, n: u64) {
        self.words(d)[TAKEN].store(n, Ordering::Release);
    }

    /// The count of references the consumer of ring `d` says it took from the socket (any
    /// value: the consumer may lie, and then only its own references are held up or reordered).
    pub fn mail_taken(&self, d: Dir) -> u64 {
        self.words(d)[TAKEN].load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_go_round_in_order_and_a_full_ring_says_so() {
        let a = Rings::create(4).unwrap();
        let fd = rustix::io::dup(a.fd()).unwrap();
        let b = Rings::open(fd).unwrap();
        let (mut tx, mut rx) = (0u64, 0u64);
        for round in 0..3u64 {
            for k in 0..4 {
                assert!(a.push(Dir::Sends, &mut tx, [1, round, k]).unwrap());
            }
            assert!(!a.push(Dir::Sends, &mut tx, [9, 9, 9]).unwrap(), "full");
            assert!(b.pending(Dir::Sends, rx));
            for k in 0..4 {
                assert_eq!(b.pop(Dir::Sends, &mut rx).unwrap(), Some([1, round, k]));
            }
            assert_eq!(b.pop(Dir::Sends, &mut rx).unwrap(), None);
        }
        // The other direction is separate.
        assert_eq!(a.pop(Dir::Frees, &mut 0).unwrap(), None);
    }

    #[test]
    fn a_spoiled_ring_is_an_error_not_a_wild_read() {
        let a = Rings::create(4).unwrap();
        let b = Rings::open(rustix::io::dup(a.fd()).unwrap()).unwrap();
        // The producer's position is pushed far ahead by a peer that lies.
        a.words(Dir::Sends)[TAIL].store(1000, Ordering::Relaxed);
        assert!(b.pop(Dir::Sends, &mut 0).is_err());
        // And backwards.
        a.words(Dir::Frees)[HEAD].store(7, Ordering::Relaxed);
        assert!(a.push(Dir::Frees, &mut 2, [0; 3]).is_err());
    }

    #[test]
    fn sleep_and_wake_hand_over_exactly_once() {
        let a = Rings::create(4).unwrap();
        assert!(!a.must_wake(Dir::Sends));
        a.announce_sleep(Dir::Sends);
        assert!(a.must_wake(Dir::Sends));
        assert!(!a.must_wake(Dir::Sends));
        a.announce_sleep(Dir::Sends);
        a.awake(Dir::Sends);
        assert!(!a.must_wake(Dir::Sends));
    }

    #[test]
    fn a_memfd_of_the_wrong_size_is_not_rings() {
        let fd = zcio_vm::mapping::memfd("not-rings", 4096).unwrap();
        assert!(Rings::open(fd).is_err());
    }
}
