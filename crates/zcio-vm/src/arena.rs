//! The shared arena: one memfd mapped at the same virtual address in every participating process
//! (the fbuf region of paper 001; the memory network's control path of paper 000's reproduction).
//!
//! Another process may write any byte of the arena at any time, including a buggy or malicious
//! one. So nothing here hands out `&[u8]` into it: the only access is through atomics
//! ([`SharedArena::atomic_u64`]), and every value read from it is validated by the reader before
//! it is used ([`SharedRing`] checks the peer's index against its own). Bulk bytes (a message's
//! data) are copied in and out whole ([`SharedArena::copy_in`], [`SharedArena::copy_out`]):
//! they are never interpreted, so a peer that writes them meanwhile only changes the bytes.

use crate::error::{Result, VmError};
use crate::mapping::{Mapping, memfd};
use crate::page::{HUGE_PAGE_SIZE, align_up, page_size};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

const MAGIC: u64 = 0x7a63_696f_4152_4e41; // "zcioARNA"
const VERSION: u64 = 1;
/// Words of the arena header: magic, version, length, creator pid, then user words.
const HEADER_WORDS: usize = 16;

/// Low end of the address window from which arena addresses are drawn.
const WINDOW_LO: usize = 0x2000_0000_0000;
/// High end of that window: far below the mmap base and above PIE heaps.
const WINDOW_HI: usize = 0x5000_0000_0000;

/// A memfd-backed region mapped at one address in every participant.
pub struct SharedArena {
    fd: OwnedFd,
    map: Mapping,
}

crate::debug_summary!(SharedArena, |s| addr: format_args!("{:#x}", s.addr()), len: s.len());

/// A fresh random, 2 MiB-aligned address in the arena window, for `len` bytes.
pub fn random_address(len: usize) -> usize {
    let mut b = [0u8; 8];
    let _ = rustix::rand::getrandom(&mut b, rustix::rand::GetRandomFlags::empty());
    let span = WINDOW_HI - WINDOW_LO - len;
    let r = u64::from_ne_bytes(b) as usize % span;
    (WINDOW_LO + r) & !(HUGE_PAGE_SIZE - 1)
}

impl SharedArena {
    /// Create an arena of `len` bytes at a fresh address, retrying a few addresses if one is taken.
    pub fn create(name: &str, len: usize) -> Result<SharedArena> {
        let len = align_up(len.max(page_size()), page_size()).ok_or(VmError::TooLarge {
            what: "arena length",
            value: len,
            limit: crate::mapping::MAX_MAPPING,
        })?;
        if len > crate::mapping::MAX_MAPPING {
            return Err(VmError::TooLarge {
                what: "arena length",
                value: len,
                limit: crate::mapping::MAX_MAPPING,
            });
        }
        let fd = memfd(name, len)?;
        let mut last = None;
        for _ in 0..8 {
            let addr = random_address(len);
            match Mapping::shared_fd(fd.as_fd(), 0, len, Some(addr)) {
                Ok(map) => {
                    let a = SharedArena { fd, map };
                    a.atomic_u64(0).store(MAGIC, Ordering::Relaxed);
                    a.atomic_u64(8).store(VERSION, Ordering::Relaxed);
                    a.atomic_u64(16).store(len as u64, Ordering::Relaxed);
                    a.atomic_u64(24)
                        .store(std::process::id() as u64, Ordering::Release);
                    return Ok(a);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("tried at least once"))
    }

    /// Map an arena another process created, at the address it chose.
    ///
    /// Fails with [`VmError::ArenaPlacement`] if that address is taken here (the creator then picks
    /// another), and with a clear error if the memfd is not a zcio arena of that length.
    pub fn attach(fd: OwnedFd, addr: usize, len: usize) -> Result<SharedArena> {
        let st = rustix::fs::fstat(&fd).map_err(|e| VmError::sys("fstat(arena)", e.into()))?;
        if (st.st_size as usize) < len {
            return Err(VmError::OutOfBounds {
                what: "arena length",
                start: 0,
                end: len,
                bound_start: 0,
                bound_end: st.st_size as usize,
            });
        }
        let map = Mapping::shared_fd(fd.as_fd(), 0, len, Some(addr))?;
        let a = SharedArena { fd, map };
        if a.atomic_u64(0).load(Ordering::Acquire) != MAGIC
            || a.atomic_u64(8).load(Ordering::Relaxed) != VERSION
        {
            return Err(VmError::Unsupported {
                feature: "shared arena",
                reason: "the memfd does not hold a zcio arena of this version".into(),
            });
        }
        Ok(a)
    }

    /// Start address (the same in every participant).
    pub fn addr(&self) -> usize {
        self.map.addr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Never true.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The memfd (to pass to other participants with `SCM_RIGHTS`).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Offset of the first byte after the arena header, where users lay out their structures.
    pub fn user_offset() -> usize {
        HEADER_WORDS * 8
    }

    /// The 64-bit atomic at byte `offset`.
    ///
    /// # Panics
    /// If `offset` is not 8-aligned or lies outside the arena: offsets come from this process's
    /// own layout, never from shared memory, so a bad one is a bug here.
    pub fn atomic_u64(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: the arena hands out no byte slices of its mapping: its words are reached only
        // atomically.
        let w = unsafe { self.map.atomic_words_in("arena word", offset, 8) };
        &w[0]
    }

    /// The words of `[offset, offset + len)` (8-aligned, in bounds), for loops over many words.
    ///
    /// # Panics
    /// As [`SharedArena::atomic_u64`].
    pub fn atomic_u64s(&self, offset: usize, len: usize) -> &[AtomicU64] {
        // SAFETY: as in `atomic_u64`, the arena's words are reached only atomically.
        unsafe { self.map.atomic_words_in("arena range", offset, len) }
    }

    /// The 32-bit atomic at byte `offset` (for doorbell flags).
    pub fn atomic_u32(&self, offset: usize) -> &AtomicU32 {
        assert!(
            offset % 4 == 0 && offset + 4 <= self.len(),
            "arena offset {offset} out of bounds"
        );
        // SAFETY: as for atomic_u64.
        unsafe { &*((self.addr() + offset) as *const AtomicU32) }
    }

    /// Copy `data` into the arena at byte `offset`, at memcpy speed (a message's bytes).
    ///
    /// # Panics
    /// If `[offset, offset + data.len())` lies outside the arena: offsets come from this
    /// process's own layout, never from shared memory.
    pub fn copy_in(&self, offset: usize, data: &[u8]) {
        self.check_bytes(offset, data.len());
        // SAFETY: the range lies inside the mapping (checked above), which lives as long as
        // `self`; no Rust reference into the arena exists (its words are reached only through
        // atomics and these copies), so writing through a raw pointer aliases nothing. Another
        // process may write the same bytes meanwhile: they are plain bytes, never read back as
        // a value with invariants, so a race leaves a mixture of bytes and nothing else.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                (self.addr() + offset) as *mut u8,
                data.len(),
            )
        };
    }

    /// Copy the arena's bytes at `offset` into `out`, at memcpy speed. A peer writing them
    /// meanwhile yields some mixture of its bytes: the caller treats them as data only.
    ///
    /// # Panics
    /// As [`SharedArena::copy_in`].
    pub fn copy_out(&self, offset: usize, out: &mut [u8]) {
        self.check_bytes(offset, out.len());
        // SAFETY: as in `copy_in`: in bounds, no reference into the arena aliases it, and the
        // bytes read are data the caller validates (or delivers) as bytes, whatever they are.
        unsafe {
            std::ptr::copy_nonoverlapping(
                (self.addr() + offset) as *const u8,
                out.as_mut_ptr(),
                out.len(),
            )
        };
    }

    fn check_bytes(&self, offset: usize, len: usize) {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len()),
            "arena bytes [{offset}, +{len}) out of bounds (arena of {} bytes)",
            self.len()
        );
    }

    /// Copy bytes out of the arena (each word read atomically, so a concurrent writer yields some
    /// mixture of old and new words but never undefined behaviour).
    pub fn read_bytes(&self, offset: usize, out: &mut [u8]) {
        assert!(offset % 8 == 0 && offset + out.len() <= self.len());
        for (i, chunk) in out.chunks_mut(8).enumerate() {
            let w = self
                .atomic_u64(offset + i * 8)
                .load(Ordering::Relaxed)
                .to_ne_bytes();
            chunk.copy_from_slice(&w[..chunk.len()]);
        }
    }

    /// Copy bytes into the arena, word by word.
    pub fn write_bytes(&self, offset: usize, data: &[u8]) {
        assert!(offset % 8 == 0 && offset + data.len() <= self.len());
        for (i, chunk) in data.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.atomic_u64(offset + i * 8)
                .store(u64::from_ne_bytes(w), Ordering::Relaxed);
        }
    }
}

/// Words in one ring slot (64 bytes, one cache line).
pub const SLOT_WORDS: usize = 8;

/// The peer broke the ring protocol (only a buggy or malicious process can cause this).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "shared ring at offset {offset}: peer index {peer} is inconsistent with ours {ours} (capacity {capacity})"
)]
pub struct RingCorrupt {
    /// Ring offset.
    pub offset: usize,
    /// The peer's index as read.
    pub peer: u64,
    /// Our index.
    pub ours: u64,
    /// Capacity.
    pub capacity: usize,
}

/// One end of a single-producer single-consumer ring of 64-byte slots in a [`SharedArena`].
///
/// Each side owns one index and keeps its own copy of it; the other side's index is read from
/// shared memory and validated before use, so a corrupt peer yields [`RingCorrupt`], never an
/// out-of-bounds access or a hang.
#[derive(Debug)]
pub struct SharedRing {
    offset: usize,
    capacity: usize,
    /// Our own index (head if producer, tail if consumer).
    mine: u64,
}

impl SharedRing {
    /// Bytes a ring of `capacity` slots occupies (two index lines plus the slots).
    pub fn footprint(capacity: usize) -> usize {
        128 + capacity * SLOT_WORDS * 8
    }

    /// A ring end at `offset` (64-aligned) with `capacity` slots (a power of two).
    pub fn new(arena: &SharedArena, offset: usize, capacity: usize) -> Result<SharedRing> {
        if !capacity.is_power_of_two()
            || offset % 64 != 0
            || offset + Self::footprint(capacity) > arena.len()
        {
            return Err(VmError::OutOfBounds {
                what: "ring",
                start: offset,
                end: offset + Self::footprint(capacity),
                bound_start: 0,
                bound_end: arena.len(),
            });
        }
        Ok(SharedRing {
            offset,
            capacity,
            mine: 0,
        })
    }

    fn head<'a>(&self, a: &'a SharedArena) -> &'a AtomicU64 {
        a.atomic_u64(self.offset)
    }
    fn tail<'a>(&self, a: &'a SharedArena) -> &'a AtomicU64 {
        a.atomic_u64(self.offset + 64)
    }
    fn slot(&self, idx: u64) -> usize {
        self.offset + 128 + (idx as usize & (self.capacity - 1)) * SLOT_WORDS * 8
    }

    /// Producer: append a slot. `Ok(false)` when the ring is full.
    pub fn push(
        &mut self,
        a: &SharedArena,
        words: &[u64; SLOT_WORDS],
    ) -> Result<bool, RingCorrupt> {
        let tail = self.tail(a).load(Ordering::Acquire);
        if tail > self.mine || self.mine - tail > self.capacity as u64 {
            return Err(self.corrupt(tail));
        }
        if self.mine - tail == self.capacity as u64 {
            return Ok(false);
        }
        let s = self.slot(self.mine);
        for (i, w) in words.iter().enumerate() {
            a.atomic_u64(s + i * 8).store(*w, Ordering::Relaxed);
        }
        self.mine += 1;
        self.head(a).store(self.mine, Ordering::Release);
        Ok(true)
    }

    /// Consumer: take the next slot, if any.
    pub fn pop(&mut self, a: &SharedArena) -> Result<Option<[u64; SLOT_WORDS]>, RingCorrupt> {
        let head = self.head(a).load(Ordering::Acquire);
        if head < self.mine || head - self.mine > self.capacity as u64 {
            return Err(self.corrupt(head));
        }
        if head == self.mine {
            return Ok(None);
        }
        let s = self.slot(self.mine);
        let mut words = [0u64; SLOT_WORDS];
        for (i, w) in words.iter_mut().enumerate() {
            *w = a.atomic_u64(s + i * 8).load(Ordering::Relaxed);
        }
        self.mine += 1;
        self.tail(a).store(self.mine, Ordering::Release);
        Ok(Some(words))
    }

    /// Consumer: whether a slot is waiting (validated like `pop`).
    pub fn has_next(&self, a: &SharedArena) -> Result<bool, RingCorrupt> {
        let head = self.head(a).load(Ordering::Acquire);
        if head < self.mine || head - self.mine > self.capacity as u64 {
            return Err(self.corrupt(head));
        }
        Ok(head != self.mine)
    }

    fn corrupt(&self, peer: u64) -> RingCorrupt {
        RingCorrupt {
            offset: self.offset,
            peer,
            ours: self.mine,
            capacity: self.capacity,
        }
    }
}

/// A wake-up channel: an eventfd plus a "sleeping" flag in the arena, so that the signalling side
/// pays a system call only when the other side is actually asleep.
#[derive(Debug)]
pub struct Doorbell {
    efd: OwnedFd,
    flag_offset: usize,
}

impl Doorbell {
    /// A new doorbell whose flag lives at `flag_offset` (4-aligned) in the arena.
    pub fn new(efd: OwnedFd, flag_offset: usize) -> Doorbell {
        Doorbell { efd, flag_offset }
    }

    /// A fresh eventfd for a doorbell.
    pub fn eventfd() -> Result<OwnedFd> {
        rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
        )
        .map_err(|e| VmError::sys("eventfd", e.into()))
    }

    /// The eventfd (to pass to the peer, or to poll).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.efd.as_fd()
    }

    /// Waiter: announce that we are about to sleep. Re-check the condition after this and before
    /// blocking on [`Doorbell::fd`].
    pub fn prepare_sleep(&self, a: &SharedArena) {
        a.atomic_u32(self.flag_offset).store(1, Ordering::SeqCst);
    }

    /// Waiter: no longer sleeping; drain pending rings.
    pub fn woke(&self, a: &SharedArena) {
        a.atomic_u32(self.flag_offset).store(0, Ordering::SeqCst);
        let mut buf = [0u8; 8];
        let _ = rustix::io::read(&self.efd, &mut buf);
    }

    /// Signaller: wake the waiter if it announced sleep.
    pub fn ring(&self, a: &SharedArena) {
        if a.atomic_u32(self.flag_offset).swap(0, Ordering::SeqCst) != 0 {
            let _ = rustix::io::write(&self.efd, &1u64.to_ne_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bulk_copies_land_where_asked_and_refuse_to_leave_the_arena() {
        let a = SharedArena::create("t", 1 << 16).unwrap();
        let data: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        a.copy_in(4099, &data);
        let mut back = vec![0u8; 5000];
        a.copy_out(4099, &mut back);
        assert_eq!(back, data);
        let mut word = [0u8; 8];
        a.read_bytes(4096, &mut word);
        assert_eq!(&word[3..], &data[..5], "copied at the byte asked");
        let out = std::panic::catch_unwind(|| a.copy_in((1 << 16) - 10, &[0u8; 11]));
        assert!(out.is_err(), "a copy past the end must panic, not write");
    }

    #[test]
    fn ring_round_trip_and_full() {
        let a = SharedArena::create("t", 1 << 16).unwrap();
        let off = 1024;
        let mut p = SharedRing::new(&a, off, 4).unwrap();
        let mut c = SharedRing::new(&a, off, 4).unwrap();
        for i in 0..4u64 {
            assert!(p.push(&a, &[i; SLOT_WORDS]).unwrap());
        }
        assert!(!p.push(&a, &[9; SLOT_WORDS]).unwrap(), "full ring refuses");
        for i in 0..4u64 {
            assert_eq!(c.pop(&a).unwrap(), Some([i; SLOT_WORDS]));
        }
        assert_eq!(c.pop(&a).unwrap(), None);
    }

    #[test]
    fn corrupt_peer_index_is_detected() {
        let a = SharedArena::create("t", 1 << 16).unwrap();
        let mut c = SharedRing::new(&a, 0x400, 8).unwrap();
        a.atomic_u64(0x400).store(1 << 40, Ordering::Release); // a "producer" jumps ahead
        assert!(c.pop(&a).is_err());
        let mut p = SharedRing::new(&a, 0x800, 8).unwrap();
        a.atomic_u64(0x800 + 64).store(5, Ordering::Release); // a "consumer" claims more than produced
        assert!(p.push(&a, &[0; SLOT_WORDS]).is_err());
    }

    #[test]
    fn arena_is_at_its_address_and_attachable_in_another_mapping_slot() {
        let a = SharedArena::create("t", 8192).unwrap();
        assert_eq!(a.addr() % HUGE_PAGE_SIZE, 0);
        a.write_bytes(256, b"hello arena");
        let mut out = [0u8; 11];
        a.read_bytes(256, &mut out);
        assert_eq!(&out, b"hello arena");
        // Attaching at the same address in the same process must fail cleanly (it is taken).
        let fd2 = rustix::io::dup(a.fd()).unwrap();
        let e = SharedArena::attach(fd2, a.addr(), a.len()).unwrap_err();
        assert!(matches!(e, VmError::ArenaPlacement { .. }), "{e}");
    }
}
