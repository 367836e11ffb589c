//! Access to the fbuf region as one process sees it.
//!
//! Addresses are absolute (the region sits at the same address in every process). Every read is
//! checked against what this process can read and is done word by word with atomic loads: another
//! process may rewrite the bytes concurrently (a volatile fbuf's originator may), which yields a
//! mixture of old and new words, never undefined behaviour, and never a read outside the region.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use zcio_vm::arena::SharedArena;

/// Reading the region: bounds-checked, word-atomic.
pub trait RegionRead {
    /// The words of `[addr, addr + len)` (`addr` 8-aligned, `len` a multiple of 8), or `None`
    /// where this process cannot read all of them (outside the region, unaligned, or not mapped
    /// readable here). Loops over many words go through this, one check for the whole range.
    fn words(&self, addr: u64, len: u64) -> Option<&[AtomicU64]>;

    /// Whether `[addr, addr + len)` is entirely readable here.
    fn readable(&self, addr: u64, len: u64) -> bool;

    /// The whole run of words readable here that holds the byte at `addr` (the mapping it lies
    /// in), so that a reader can look the mapping up once and check each later range against
    /// it alone ([`LastSpan`]); `None` where there is none, or where the region does not say
    /// (then every range goes through [`RegionRead::words`]).
    fn span(&self, addr: u64) -> Option<Span<'_>> {
        let _ = addr;
        None
    }

    /// The 8-byte word at `addr` (8-aligned), or `None` where this process cannot read it.
    fn read_u64(&self, addr: u64) -> Option<u64> {
        self.words(addr, 8).map(|w| w[0].load(Ordering::Relaxed))
    }

    /// The `N` words from `addr` (8-aligned), each loaded once, or `None` where this process
    /// cannot read all of them: one check for the whole range (a range that straddles two
    /// mappings, or ends past one, is refused), instead of one a word.
    fn read_words<const N: usize>(&self, addr: u64) -> Option<[u64; N]> {
        let ws = self.words(addr, 8 * N as u64)?.first_chunk::<N>()?;
        Some(ws.each_ref().map(|w| w.load(Ordering::Relaxed)))
    }

    /// Copy `out.len()` bytes starting at `addr` (any alignment); `false`, with `out` untouched,
    /// where any of them cannot be read.
    fn read_bytes(&self, addr: u64, out: &mut [u8]) -> bool {
        if out.is_empty() {
            return true;
        }
        let Some(ws) = word_span(addr, out.len()).and_then(|(a, l)| self.words(a, l)) else {
            return false;
        };
        if addr % 8 == 0 {
            // Word-aligned: one load a whole word, then the part of the last one asked for.
            let mut chunks = out.chunks_exact_mut(8);
            for (w, b) in ws.iter().zip(&mut chunks) {
                b.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
            }
            let rest = chunks.into_remainder();
            if let (false, Some(w)) = (rest.is_empty(), ws.last()) {
                let n = rest.len();
                rest.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes()[..n]);
            }
            return true;
        }
        let mut at = (addr % 8) as usize;
        let mut pos = 0;
        for w in ws {
            let b = w.load(Ordering::Relaxed).to_ne_bytes();
            let n = (8 - at).min(out.len() - pos);
            out[pos..pos + n].copy_from_slice(&b[at..at + n]);
            pos += n;
            at = 0;
        }
        true
    }
}

/// A run of words this process can read, at a given address: one mapping (or a part of one)
/// as [`RegionRead::span`] gives it. Ranges are checked against it alone.
#[derive(Debug, Clone, Copy)]
pub struct Span<'a> {
    base: u64,
    words: &'a [AtomicU64],
}

impl<'a> Span<'a> {
    /// The words `words`, which sit at `base` (8-aligned) in this process.
    pub fn new(base: u64, words: &'a [AtomicU64]) -> Span<'a> {
        assert_eq!(base % 8, 0, "a span starts on a word");
        Span { base, words }
    }

    /// First address.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// Length in bytes.
    pub fn len(&self) -> u64 {
        8 * self.words.len() as u64
    }

    /// Whether it holds no word.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Whether `[addr, addr + len)` lies in it.
    #[inline]
    pub fn holds(&self, addr: u64, len: u64) -> bool {
        addr >= self.base
            && addr
                .checked_add(len)
                .is_some_and(|e| e - self.base <= self.len())
    }

    /// The `N` words from `addr` (8-aligned), or `None` unless it holds all of them: the
    /// words of [`Span::words`] for a range whose length is known here.
    #[inline]
    pub fn array<const N: usize>(&self, addr: u64) -> Option<&'a [AtomicU64; N]> {
        // Below the base, the offset wraps to far beyond the span's length.
        let off = addr.wrapping_sub(self.base);
        if off % 8 != 0 {
            return None;
        }
        self.words
            .get(usize::try_from(off / 8).ok()?..)?
            .first_chunk::<N>()
    }

    /// The words of `[addr, addr + len)` (`addr` 8-aligned, `len` a multiple of 8), or `None`
    /// unless it holds all of them.
    #[inline]
    pub fn words(&self, addr: u64, len: u64) -> Option<&'a [AtomicU64]> {
        // Below the base, the offset wraps to far beyond the span's length.
        let off = addr.wrapping_sub(self.base);
        let end = off.checked_add(len)?;
        if (off | len) % 8 != 0 || end > self.len() {
            return None;
        }
        self.words.get((off / 8) as usize..(end / 8) as usize)
    }
}

/// A region read through the last two mappings reads found: a range in one of them is checked
/// against that span alone (a comparison and a slice), a range elsewhere looks its mapping up
/// again ([`RegionRead::span`]) and, where there is none that holds it whole, goes to the
/// region itself. What it reads and refuses is what the region does; a reader that reads
/// range after range in one fbuf, or goes back and forth between headers in one fbuf and data
/// in another, looks each mapping up once.
pub struct LastSpan<'r, R: RegionRead + ?Sized> {
    region: &'r R,
    /// The mapping found last, and the one before it.
    last: Cell<Option<Span<'r>>>,
    before: Cell<Option<Span<'r>>>,
}

impl<'r, R: RegionRead + ?Sized> LastSpan<'r, R> {
    /// `region`, with no mapping found yet.
    pub fn new(region: &'r R) -> LastSpan<'r, R> {
        LastSpan {
            region,
            last: Cell::new(None),
            before: Cell::new(None),
        }
    }
}

impl<R: RegionRead + ?Sized> RegionRead for LastSpan<'_, R> {
    #[inline]
    fn words(&self, addr: u64, len: u64) -> Option<&[AtomicU64]> {
        if let Some(w) = self.last.get().and_then(|s| s.words(addr, len)) {
            return Some(w);
        }
        if let Some(w) = self.before.get().and_then(|s| s.words(addr, len)) {
            return Some(w);
        }
        if let Some(s) = self.region.span(addr) {
            self.before.set(self.last.replace(Some(s)));
            if let Some(w) = s.words(addr, len) {
                return Some(w);
            }
        }
        self.region.words(addr, len)
    }

    #[inline]
    fn readable(&self, addr: u64, len: u64) -> bool {
        let held = |s: Span<'_>| s.holds(addr, len);
        self.last.get().is_some_and(held)
            || self.before.get().is_some_and(held)
            || self.region.readable(addr, len)
    }

    fn span(&self, addr: u64) -> Option<Span<'_>> {
        self.region.span(addr)
    }
}

/// The 8-aligned span `(start, len)` covering `[addr, addr + len)`, unless it overflows.
fn word_span(addr: u64, len: usize) -> Option<(u64, u64)> {
    let start = addr & !7;
    let end = addr.checked_add(len as u64)?.checked_next_multiple_of(8)?;
    Some((start, end - start))
}

/// Writing the region (the originator's side, for its own fbufs).
pub trait RegionWrite: RegionRead {
    /// The words of `[addr, addr + len)` as [`RegionRead::words`], or `None` where this process
    /// may not write all of them.
    fn words_mut(&self, addr: u64, len: u64) -> Option<&[AtomicU64]>;

    /// Store the word at `addr` (8-aligned); `false` where this process may not write it.
    fn write_u64(&self, addr: u64, value: u64) -> bool {
        self.words_mut(addr, 8)
            .map(|w| w[0].store(value, Ordering::Relaxed))
            .is_some()
    }

    /// Store `values` at `addr` (8-aligned) one after another; `false`, with nothing written,
    /// where this process may not write all of them. One check for the whole range.
    fn write_words(&self, addr: u64, values: &[u64]) -> bool {
        let Some(ws) = self.words_mut(addr, 8 * values.len() as u64) else {
            return false;
        };
        for (w, v) in ws.iter().zip(values) {
            w.store(*v, Ordering::Relaxed);
        }
        true
    }

    /// Copy `data` to `addr` (any alignment); `false`, with nothing written, where any byte
    /// may not be written here.
    fn write_bytes(&self, addr: u64, data: &[u8]) -> bool {
        if data.is_empty() {
            return true;
        }
        let Some(ws) = word_span(addr, data.len()).and_then(|(a, l)| self.words_mut(a, l)) else {
            return false;
        };
        if addr % 8 == 0 {
            // Word-aligned: one store a whole word, without a bounds check a byte; then the
            // partial last word keeps the bytes after the part written.
            let mut chunks = data.chunks_exact(8);
            for (w, b) in ws.iter().zip(&mut chunks) {
                let b: [u8; 8] = b.try_into().expect("8 bytes");
                w.store(u64::from_ne_bytes(b), Ordering::Relaxed);
            }
            let rest = chunks.remainder();
            if let (false, Some(w)) = (rest.is_empty(), ws.last()) {
                let mut b = w.load(Ordering::Relaxed).to_ne_bytes();
                b[..rest.len()].copy_from_slice(rest);
                w.store(u64::from_ne_bytes(b), Ordering::Relaxed);
            }
            return true;
        }
        let mut at = (addr % 8) as usize;
        let mut pos = 0;
        for w in ws {
            let n = (8 - at).min(data.len() - pos);
            let mut b = if n < 8 {
                // A partial word keeps the bytes around the part written.
                w.load(Ordering::Relaxed).to_ne_bytes()
            } else {
                [0u8; 8]
            };
            b[at..at + n].copy_from_slice(&data[pos..pos + n]);
            w.store(u64::from_ne_bytes(b), Ordering::Relaxed);
            pos += n;
            at = 0;
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
}

impl RegionRead for LocalRegion {
    fn words(&self, addr: u64, len: u64) -> Option<&[AtomicU64]> {
        if addr % 8 != 0 || len % 8 != 0 || addr < self.base {
            return None;
        }
        let first = ((addr - self.base) / 8) as usize;
        self.words
            .get(first..first.checked_add((len / 8) as usize)?)
    }

    fn readable(&self, addr: u64, len: u64) -> bool {
        addr >= self.base
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.base + self.len())
    }

    fn span(&self, addr: u64) -> Option<Span<'_>> {
        self.readable(addr, 1)
            .then(|| Span::new(self.base, &self.words))
    }
}

impl RegionWrite for LocalRegion {
    fn words_mut(&self, addr: u64, len: u64) -> Option<&[AtomicU64]> {
        self.words(addr, len)
    }
}

/// The shared arena (a memfd at the same address in every process) as a region: every byte of
/// it readable and writable, through word atomics.
impl RegionRead for SharedArena {
    fn words(&self, addr: u64, len: u64) -> Option<&[AtomicU64]> {
        if addr % 8 != 0 || len % 8 != 0 || !self.readable(addr, len) {
            return None;
        }
        let base = self.addr() as u64;
        Some(self.atomic_u64s((addr - base) as usize, len as usize))
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
    fn words_mut(&self, addr: u64, len: u64) -> Option<&[AtomicU64]> {
        self.words(addr, len)
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
    fn words_of_a_range_are_read_and_written_with_one_check_and_never_outside() {
        let r = LocalRegion::new(0x1000, 64);
        assert!(r.write_words(0x1008, &[1, 2, 3]));
        assert_eq!(r.read_words::<4>(0x1000), Some([0, 1, 2, 3]));
        assert_eq!(r.read_words::<0>(0x1040), Some([]));
        // The last word is in; a range that ends one word past the end is refused whole.
        assert_eq!(r.read_words::<1>(0x1038), Some([0]));
        assert_eq!(r.read_words::<2>(0x1038), None);
        assert!(!r.write_words(0x1030, &[7, 7, 7]));
        assert_eq!(r.read_words::<2>(0x1030), Some([0, 0]), "nothing written");
        // Before the start, unaligned, wrapping past the top of the address space: refused.
        assert_eq!(r.read_words::<1>(0x0ff8), None);
        assert_eq!(r.read_words::<1>(0x1004), None);
        assert_eq!(r.read_words::<4>(u64::MAX - 7), None);
        assert!(!r.write_words(0x1004, &[1]));
    }

    /// Two regions side by side, as two mappings of one process: a range is read only where
    /// one of them holds all of it.
    struct Two(LocalRegion, LocalRegion);

    impl RegionRead for Two {
        fn words(&self, addr: u64, len: u64) -> Option<&[AtomicU64]> {
            self.0.words(addr, len).or_else(|| self.1.words(addr, len))
        }
        fn readable(&self, addr: u64, len: u64) -> bool {
            self.0.readable(addr, len) || self.1.readable(addr, len)
        }
        fn span(&self, addr: u64) -> Option<Span<'_>> {
            self.0.span(addr).or_else(|| self.1.span(addr))
        }
    }

    #[test]
    fn a_span_holds_its_own_words_only() {
        let r = LocalRegion::new(0x1000, 64);
        assert!(r.write_words(0x1000, &[1, 2, 3, 4, 5, 6, 7, 8]));
        let s = r.span(0x1020).unwrap();
        assert_eq!((s.base(), s.len()), (0x1000, 64));
        assert_eq!(
            s.words(0x1038, 8).map(|w| w[0].load(Ordering::Relaxed)),
            Some(8)
        );
        assert!(s.words(0x1038, 16).is_none(), "ends past it");
        assert!(s.words(0x0ff8, 8).is_none(), "starts before it");
        assert!(s.words(0x1004, 8).is_none() && s.words(0x1000, 4).is_none());
        assert!(s.words(u64::MAX - 7, 16).is_none());
        assert!(s.holds(0x1001, 63) && !s.holds(0x1001, 64) && !s.holds(0x0fff, 2));
        let load = |w: &[AtomicU64; 2]| w.each_ref().map(|x| x.load(Ordering::Relaxed));
        assert_eq!(s.array::<2>(0x1030).map(load), Some([7, 8]));
        assert!(s.array::<2>(0x1038).is_none(), "ends past it");
        assert!(s.array::<1>(0x0ff8).is_none() && s.array::<1>(0x1004).is_none());
        assert!(s.array::<1>(u64::MAX - 7).is_none() && s.array::<1>(0x1040).is_none());
        assert!(r.span(0x1040).is_none() && r.span(0x0fff).is_none());
    }

    #[test]
    fn reads_through_the_last_spans_are_the_regions_reads() {
        let two = Two(LocalRegion::new(0x1000, 64), LocalRegion::new(0x1040, 64));
        for (i, at) in (0x1000..0x1080).step_by(8).enumerate() {
            assert!(two.0.write_u64(at, i as u64) || two.1.write_u64(at, i as u64));
        }
        let c = LastSpan::new(&two);
        // Back and forth between the two: each found once, then read from its span.
        for _ in 0..3 {
            assert_eq!(c.read_words::<2>(0x1030), Some([6, 7]));
            assert_eq!(c.read_words::<2>(0x1040), Some([8, 9]));
        }
        // Both spans known, and still a range across them is refused whole, as by the region.
        assert_eq!(c.read_words::<2>(0x1038), None);
        assert_eq!(two.read_words::<2>(0x1038), None);
        assert!(!c.readable(0x1038, 16) && c.readable(0x1038, 8));
        // Past the second, before the first, unaligned: refused.
        assert_eq!(c.read_words::<1>(0x1080), None);
        assert_eq!(c.read_words::<2>(0x1078), None);
        assert_eq!(c.read_words::<1>(0x0ff8), None);
        assert_eq!(c.read_words::<1>(0x1044), None);
        let mut b = [0u8; 3];
        assert!(c.read_bytes(0x1047, &mut b) && b == [0, 9, 0]);
        assert!(!c.read_bytes(0x107f, &mut [0u8; 2]));
    }

    #[test]
    fn every_offset_and_length_reads_and_writes_exactly_its_bytes() {
        // Every start in two words and every length up to five words, aligned and not, against
        // a plain byte array: what is written lands exactly there, the bytes around it stay,
        // and every range reads back what the model holds.
        const LEN: usize = 64;
        let base = 0x1000;
        for at in 0..16usize {
            for len in 0..=40usize {
                let r = LocalRegion::new(base, LEN);
                let mut model = [0xA5u8; LEN];
                assert!(r.write_bytes(base, &model));
                let data: Vec<u8> = (0..len).map(|i| (i * 7 + at) as u8 | 1).collect();
                assert!(
                    r.write_bytes(base + at as u64, &data),
                    "write at {at}, {len}"
                );
                model[at..at + len].copy_from_slice(&data);
                for from in 0..LEN {
                    for n in [0, 1, 7, 8, 9, 17, LEN - from] {
                        let n = n.min(LEN - from);
                        let mut out = vec![0u8; n];
                        assert!(r.read_bytes(base + from as u64, &mut out));
                        assert_eq!(
                            out,
                            &model[from..from + n],
                            "written at {at} ({len} bytes), read at {from} ({n} bytes)"
                        );
                    }
                }
            }
        }
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
