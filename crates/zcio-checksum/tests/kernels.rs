//! Every kernel against RFC 1071's loop: all lengths to 4 096 bytes at every alignment, large
//! random buffers, data in pieces, one word changed (RFC 1624), and the fused copy.

use proptest::prelude::*;
use zcio_checksum::{Checksum, Kernel, checksum, copy_and_checksum, update};

/// Bytes from a seed (SplitMix64).
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}

/// RFC 1071's sum, written out once more here, independently of the crate.
fn rfc1071(data: &[u8]) -> u16 {
    let mut sum: u64 = data
        .chunks(2)
        .map(|w| ((w[0] as u64) << 8) | w.get(1).map_or(0, |b| *b as u64))
        .sum();
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

/// One's-complement equality: 0x0000 and 0xFFFF are both zero.
fn same(a: u16, b: u16) -> bool {
    a == b || (a == 0 && b == 0xFFFF) || (a == 0xFFFF && b == 0)
}

#[test]
fn every_kernel_equals_the_reference_at_every_length_to_4096() {
    let buf = bytes(1, 4096 + 64);
    for offset in [0, 1, 3, 8, 31, 63] {
        for len in 0..=4096 {
            let d = &buf[offset..offset + len];
            let want = rfc1071(d);
            for k in Kernel::ALL {
                assert_eq!(k.sum(d), want, "{k:?} length {len} offset {offset}");
            }
        }
    }
}

#[test]
fn every_kernel_equals_the_reference_on_large_random_buffers() {
    for (seed, len) in [(2, (16 << 20) + 7), (3, (1 << 20) + 64), (4, 3 << 20)] {
        let d = bytes(seed, len);
        let want = rfc1071(&d);
        for k in Kernel::ALL {
            assert_eq!(k.sum(&d), want, "{k:?} {len} bytes");
        }
    }
    // All ones: the largest sums, where a lost carry would show.
    let ones = vec![0xFF; (5 << 20) + 1];
    for k in Kernel::ALL {
        assert_eq!(k.sum(&ones), rfc1071(&ones), "{k:?}");
    }
}

#[test]
fn the_kernels_this_machine_runs_are_named() {
    let all = Kernel::available_all();
    println!(
        "kernels available: {:?}",
        all.iter().map(|k| k.name()).collect::<Vec<_>>()
    );
    assert!(all.contains(&Kernel::Reference) && all.contains(&Kernel::Unrolled));
    assert_eq!(Kernel::best(), *all.last().unwrap());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn kernels_agree_at_any_length_and_alignment(
        seed in any::<u64>(), len in 0..=4096usize, offset in 0..64usize,
    ) {
        let buf = bytes(seed, len + 64);
        let d = &buf[offset..offset + len];
        let want = rfc1071(d);
        for k in Kernel::ALL {
            prop_assert_eq!(k.sum(d), want, "{:?}", k);
        }
        prop_assert_eq!(checksum(d), !want);
    }

    #[test]
    fn pieces_of_any_length_sum_as_the_whole(
        seed in any::<u64>(), len in 0..20_000usize, cuts in proptest::collection::vec(0..20_000usize, 0..8),
    ) {
        let d = bytes(seed, len);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(len)).collect();
        cuts.push(0);
        cuts.push(len);
        cuts.sort_unstable();
        let mut c = Checksum::new();
        for w in cuts.windows(2) {
            c.add(&d[w[0]..w[1]]);
        }
        prop_assert!(same(c.finish(), checksum(&d)), "{:#x} vs {:#x}", c.finish(), checksum(&d));
    }

    #[test]
    fn an_incremental_update_equals_recomputing(
        seed in any::<u64>(), words in 1..2048usize, at in any::<prop::sample::Index>(), new in any::<u16>(),
    ) {
        let mut d = bytes(seed, 2 * words);
        let i = at.index(words);
        let old = u16::from_be_bytes([d[2 * i], d[2 * i + 1]]);
        let before = checksum(&d);
        d[2 * i..2 * i + 2].copy_from_slice(&new.to_be_bytes());
        let after = update(before, old, new);
        prop_assert!(same(after, checksum(&d)), "{:#x} vs {:#x}", after, checksum(&d));
    }

    #[test]
    fn the_fused_copy_copies_and_sums(seed in any::<u64>(), len in 0..70_000usize, offset in 0..64usize) {
        let src = bytes(seed, len + 64);
        let src = &src[offset..offset + len];
        let mut dst = vec![0u8; len];
        let c = copy_and_checksum(src, &mut dst);
        prop_assert!(dst == src);
        prop_assert_eq!(c, !rfc1071(src));
    }
}

#[test]
#[should_panic(expected = "lengths differ")]
fn the_fused_copy_refuses_unequal_lengths() {
    let mut dst = [0u8; 3];
    copy_and_checksum(&[1, 2, 3, 4], &mut dst);
}
