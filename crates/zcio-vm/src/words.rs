//! Bulk stores into memory other processes may write at any time: the words of a volatile
//! container ([`crate::sealed::VolatileFile`]) or of a shared arena, reached as `&[AtomicU64]`.
//!
//! A loop of relaxed `AtomicU64::store`s is sound but is never vectorized: a 300 KiB frame
//! takes tens of thousands of single stores where `memcpy` takes a few hundred wide ones.
//! [`store`] and [`copy_within`] store the same values at `memcpy`'s speed. On x86-64 they
//! are one `rep movsb`: an opaque block to the compiler, which makes no assumption about the
//! bytes it writes (as with any store another process may race), so no undefined behaviour
//! arises whoever reads or writes them meanwhile. What is given up is per-word atomicity
//! against a racing reader: the hardware may store a word in parts, so a reader loading it
//! while the copy runs may see old and new bytes mixed, in no particular order between words
//! (as `Relaxed` stores are). Volatile containers are written only by their owner, so nothing
//! reads a word while it is stored; one that does sees a value, never undefined behaviour.
//! Elsewhere they are the loop of relaxed stores.
//!
//! # Safety
//!
//! This module holds `unsafe` for the inline assembly only; every entry point is safe: the
//! ranges are checked against the slices, which live for the call.

use std::sync::atomic::{AtomicU64, Ordering};

/// Store `src` into the first `src.len()` words of `dst` (relaxed; see the module for what a
/// racing reader may see).
///
/// # Panics
///
/// If `dst` has fewer words than `src` (as `copy_from_slice` does).
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// let words: Vec<AtomicU64> = (0..4).map(|_| AtomicU64::new(0)).collect();
/// zcio_vm::words::store(&words, &[1, 2, 3]);
/// assert_eq!(words[2].load(Ordering::Relaxed), 3);
/// assert_eq!(words[3].load(Ordering::Relaxed), 0);
/// ```
pub fn store(dst: &[AtomicU64], src: &[u64]) {
    assert!(
        src.len() <= dst.len(),
        "words::store: {} words into {}",
        src.len(),
        dst.len()
    );
    // SAFETY: `src.len()` words from `src` (readable, a plain slice this process owns) to the
    // start of `dst` (in bounds, checked); `AtomicU64` permits stores through a shared
    // reference, and the two cannot overlap: one is borrowed shared as atomics, the other as
    // plain words.
    unsafe { copy_words(src.as_ptr(), dst.as_ptr() as *mut u64, src.len()) }
}

/// Copy the words `src` of `words` to those starting at `dest` (as `slice::copy_within` does
/// for bytes; relaxed, see the module).
///
/// # Panics
///
/// If either range runs past the end of `words`, or `src` ends before it starts.
///
/// # Examples
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// let words: Vec<AtomicU64> = (0..4).map(AtomicU64::new).collect();
/// zcio_vm::words::copy_within(&words, 0..2, 2);
/// let got: Vec<u64> = words.iter().map(|w| w.load(Ordering::Relaxed)).collect();
/// assert_eq!(got, [0, 1, 0, 1]);
/// ```
pub fn copy_within(words: &[AtomicU64], src: std::ops::Range<usize>, dest: usize) {
    assert!(
        src.start <= src.end && src.end <= words.len(),
        "words::copy_within: source {src:?} of {} words",
        words.len()
    );
    let n = src.end - src.start;
    assert!(
        dest <= words.len() && n <= words.len() - dest,
        "words::copy_within: {n} words to {dest} of {}",
        words.len()
    );
    if dest > src.start && dest < src.end {
        // Overlapping, forwards: from the end, word by word.
        for k in (0..n).rev() {
            let v = words[src.start + k].load(Ordering::Relaxed);
            words[dest + k].store(v, Ordering::Relaxed);
        }
        return;
    }
    let base = words.as_ptr() as *mut u64;
    // SAFETY: both ranges are inside `words` (checked above), and either they do not overlap
    // or the destination starts at or before the source, which a forward copy handles.
    unsafe { copy_words(base.add(src.start), base.add(dest), n) }
}

/// Copy `n` words forwards from `from` to `to`.
///
/// # Safety
///
/// `from` must be readable and `to` writable for `n` words, both 8-aligned; if the ranges
/// overlap, `to` must not lie after `from`.
#[cfg(target_arch = "x86_64")]
unsafe fn copy_words(from: *const u64, to: *mut u64, n: usize) {
    debug_assert!(from as usize % 8 == 0 && to as usize % 8 == 0);
    // SAFETY: the caller's contract: `rep movsb` copies `8 n` bytes forwards from `rsi` to
    // `rdi` (the direction flag is clear at every Rust call boundary), touching nothing else.
    unsafe {
        std::arch::asm!(
            "rep movsb",
            inout("rcx") n * 8 => _,
            inout("rsi") from => _,
            inout("rdi") to => _,
            options(nostack, preserves_flags)
        );
    }
}

/// Copy `n` words forwards from `from` to `to`.
///
/// # Safety
///
/// As on x86-64: `from` readable and `to` writable for `n` words, both 8-aligned and valid as
/// `AtomicU64`; if the ranges overlap, `to` must not lie after `from`.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn copy_words(from: *const u64, to: *mut u64, n: usize) {
    for k in 0..n {
        // SAFETY: the caller's contract; both words are reached atomically, as any other
        // process may reach them.
        unsafe {
            let v = AtomicU64::from_ptr(from.add(k) as *mut u64).load(Ordering::Relaxed);
            AtomicU64::from_ptr(to.add(k)).store(v, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(n: u64) -> Vec<AtomicU64> {
        (0..n).map(AtomicU64::new).collect()
    }

    fn values(w: &[AtomicU64]) -> Vec<u64> {
        w.iter().map(|x| x.load(Ordering::Relaxed)).collect()
    }

    #[test]
    fn stores_and_copies_match_the_slice_methods() {
        let w = words(1000);
        let src: Vec<u64> = (0..700).map(|k| k * 3 + 1).collect();
        store(&w[100..], &src);
        let mut expect: Vec<u64> = (0..1000).collect();
        expect[100..800].copy_from_slice(&src);
        assert_eq!(values(&w), expect);
        for (from, to, dest) in [
            (0, 10, 500),
            (100, 400, 0),
            (5, 50, 20),
            (20, 50, 5),
            (0, 0, 9),
        ] {
            copy_within(&w, from..to, dest);
            expect.copy_within(from..to, dest);
            assert_eq!(values(&w), expect, "{from}..{to} to {dest}");
        }
    }

    #[test]
    #[should_panic(expected = "3 words into 2")]
    fn a_store_past_the_end_panics() {
        store(&words(2), &[1, 2, 3]);
    }

    #[test]
    #[should_panic(expected = "words to 3 of 4")]
    fn a_copy_past_the_end_panics() {
        copy_within(&words(4), 0..2, 3);
    }
}
