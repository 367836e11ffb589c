//! Access to the fbuf region as one process sees it.
//!
//! Addresses are absolute (the region sits at the same address in every process). Every read is
//! checked against what this process can read and is done word by word with atomic loads: another
//! process may rewrite the bytes concurrently (a volatile fbuf's originator may), which yields a
//! mixture of old and new words, never undefined behaviour, and never a read outside the region.

use std::sync::atomic::{AtomicU64, Ordering};
use zcio_vm::arena::SharedArena;

/// Reading the region: bounds-checked, word-atomic.
pub trait RegionRead {
    /// The 8-byte word at `addr` (8-aligned), or `None` where this process cannot read it
    /// (outside the region, unaligned, or not mapped readable here).
    fn read_u64(&self, addr: u64) -> Option<u64>;

    /// Whether `[addr, addr + len)` is entirely readable here.
    fn readable(&self, addr: u64, len: u64) -> bool;

    /// Copy `out.len()` bytes starting at `addr` (any alignment); `false`, with `out` untouched,
    /// where any of them cannot be read.
    fn read_bytes(&self, addr: u64, out: &mut [u8]) -> bool {
        let len = out.len() as u64;
        if len == 0 {
            return true;
        }
        if !self.readable(addr, len) {
            return false;
        }
        let first = addr & !7;
        let mut w = first;
        let end = addr + len;
        while w < end {
            let Some(word) = self.read_u64(w) else {
                return false;
            };
            let bytes = word.to_ne_bytes();
            // The part of this word inside [addr, end).
            let lo = addr.max(w);
            let hi = end.min(w + 8);
            let (src, dst) = ((lo - w) as usize, (lo - addr) as usize);
            let n = (hi - lo) as usize;
            out[dst..dst + n].copy_from_slice(&bytes[src..src + n]);
            w += 8;
        }
        true
    }
}

/// Writing the region (the originator's side, for its own fbufs).
pub trait RegionWrite: RegionRead {
    /// Store the word at `addr` (8-aligned); `false` where this process may not write it.
    fn write_u64(&self, addr: u64, value: u64) -> bool;

    /// Copy `data` to `addr` (any alignment); `false`, with nothing written, where any byte
    /// may not be written here.
    fn write_bytes(&self, addr: u64, data: &[u8]) -> bool {
        let len = data.len() as u64;
        if len == 0 {
            return true;
        }
        if !self.readable(addr, len) {
            return false;
        }
        let end = addr + len;
        let mut w = addr & !7;
        while w < end {
            let lo = addr.max(w);
            let hi = end.min(w + 8);
            let mut bytes = if lo > w || hi < w + 8 {
                match self.read_u64(w) {
                    Some(old) => old.to_ne_bytes(),
                    None => return false,
                }
            } else {
                [0u8; 8]
            };
            let (dst, src) = ((lo - w) as usize, (lo - addr) as usize);
            let n = (hi - lo) as usize;
            bytes[dst..dst + n].copy_from_slice(&data[src..src + n]);
            if !self.write_u64(w, u64::from_ne_bytes(bytes)) {
                return false;
            }
            w += 8;
        }
        true
    }
}

/// A region held in this process's own memory at a given base address: for tests, and for a
/// path whose processes are threads. Words are atomics, so threads may race on it as processes
/// race on a shared region.
#[derive(Debug)]
pub struct LocalRegion {
    base: u64,
    words: Vec<AtomicU64>,
}

impl LocalRegion {
    /// A zeroed region of `len` bytes (rounded up to words) that claims the addresses
    /// `[base, base + len)`; `base` must be 8-aligned.
    pub fn new(base: u64, len: usize) -> LocalRegion {
        assert_eq!(base % 8, 0, "region base must be 8-aligned");
        LocalRegion {
            base,
            words: (0..len.div_ceil(8)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// First address.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        self.words.len() as u64 * 8
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    fn word(&self, addr: u64) -> Option<&AtomicU64> {
        if addr % 8 != 0 || addr < self.base {
            return None;
        }
        self.words.get(((addr - self.base) / 8) as usize)
    }
}

impl RegionRead for LocalRegion {
    fn read_u64(&self, addr: u64) -> Option<u64> {
        self.word(addr).map(|w| w.load(Ordering::Relaxed))
    }

    fn readable(&self, addr: u64, len: u64) -> bool {
        addr >= self.base
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.base + self.len())
    }
}

impl RegionWrite for LocalRegion {
    fn write_u64(&self, addr: u64, value: u64) -> bool {
        match self.word(addr) {
            Some(w) => {
                w.store(value, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }
}

/// The shared arena (a memfd at the same address in every process) as a region: every byte of
/// it readable and writable, through word atomics.
impl RegionRead for SharedArena {
    fn read_u64(&self, addr: u64) -> Option<u64> {
        let base = self.addr() as u64;
        if addr % 8 != 0 || !self.readable(addr, 8) {
            return None;
        }
        Some(
            self.atomic_u64((addr - base) as usize)
                .load(Ordering::Relaxed),
        )
    }

    fn readable(&self, addr: u64, len: u64) -> bool {
        let base = self.addr() as u64;
        addr >= base
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= base + self.len() as u64)
    }
}

impl RegionWrite for SharedArena {
    fn write_u64(&self, addr: u64, value: u64) -> bool {
        if addr % 8 != 0 || !self.readable(addr, 8) {
            return false;
        }
        let base = self.addr() as u64;
        self.atomic_u64((addr - base) as usize)
            .store(value, Ordering::Relaxed);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_at_any_alignment_and_never_outside() {
        let r = LocalRegion::new(0x1000, 64);
        assert!(r.write_bytes(0x1003, b"hello, fbufs"));
        let mut out = [0u8; 12];
        assert!(r.read_bytes(0x1003, &mut out));
        assert_eq!(&out, b"hello, fbufs");
        // Neighbouring bytes are untouched.
        let mut b = [9u8; 3];
        assert!(r.read_bytes(0x1000, &mut b));
        assert_eq!(b, [0, 0, 0]);
        // Outside, straddling the end, unaligned words, overflow: refused.
        let mut x = [0u8; 8];
        assert!(!r.read_bytes(0x0ff8, &mut x));
        assert!(!r.read_bytes(0x1040 - 4, &mut x));
        assert!(!r.read_bytes(u64::MAX - 3, &mut x));
        assert_eq!(r.read_u64(0x1004), None);
        assert_eq!(r.read_u64(0x1040), None);
        assert!(!r.write_u64(0x1040, 1));
        assert!(!r.write_bytes(0x103c, &[1; 8]));
        // Nothing was written by the refused write.
        let mut tail = [0u8; 4];
        assert!(r.read_bytes(0x103c, &mut tail));
        assert_eq!(tail, [0; 4]);
    }

    #[test]
    fn the_shared_arena_is_a_region() {
        let a = SharedArena::create("zcio-fbufs-test", 1 << 16).unwrap();
        let base = a.addr() as u64;
        let at = base + SharedArena::user_offset() as u64 + 5;
        assert!(RegionWrite::write_bytes(&a, at, b"across processes"));
        let mut out = [0u8; 16];
        assert!(RegionRead::read_bytes(&a, at, &mut out));
        assert_eq!(&out, b"across processes");
        assert!(!RegionRead::read_bytes(
            &a,
            base + (1 << 16) - 8,
            &mut [0u8; 9]
        ));
        assert_eq!(a.read_u64(base - 8), None);
    }
}
