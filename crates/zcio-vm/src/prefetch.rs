//! Asking the CPU to bring memory into its cache before it is read.
//!
//! A copy brings what it reads into the CPU's cache as a stream, at the memory's full rate,
//! so whatever reads the copy afterwards finds it there. Reading in place gives that up: a
//! program that parses a page where the device put it waits for each of its cache lines in
//! turn. [`prefetch`] gets the copy's advantage back without the copy: it asks for every line
//! of a range at once, so the lines arrive while the program is still busy with what it has.
//!
//! A prefetch is a hint: it never faults, changes no data and may be dropped by the CPU. So
//! [`prefetch`] is safe whatever the range; it only costs an instruction per 64-byte line.
//!
//! # Safety
//!
//! This module holds `unsafe` for the intrinsic only.

/// The CPU's cache line, in bytes (64 on every x86-64 and most other CPUs).
pub const LINE: usize = 64;

/// Ask the CPU to bring every cache line of `bytes` into its caches (all levels), for a read
/// soon. Returns at once; a no-op where the target has no prefetch instruction zcio uses.
///
/// # Examples
///
/// ```
/// let page = vec![7u8; 4096];
/// zcio_vm::prefetch::prefetch(&page);
/// assert_eq!(page[4095], 7);
/// ```
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        let start = bytes.as_ptr() as usize & !(LINE - 1);
        let end = bytes.as_ptr() as usize + bytes.len();
        for line in (start..end).step_by(LINE) {
            // SAFETY: a prefetch only hints: it does not read the memory as the program does,
            // never faults and changes nothing; the addresses are lines of `bytes` besides.
            // SSE, which the instruction belongs to, is part of every x86-64.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line as *const i8) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_range_is_accepted_and_left_as_it_was() {
        let v: Vec<u8> = (0..=255u8).cycle().take(3 * 4096 + 17).collect();
        let before = v.clone();
        prefetch(&v);
        prefetch(&v[1..2]);
        prefetch(&v[63..65]);
        prefetch(&v[v.len()..]);
        prefetch(&[]);
        assert_eq!(v, before);
    }
}
