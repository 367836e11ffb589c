//! Fuzzing the shared rings' decoding (`arbtest`): a peer in shared memory writes whatever it
//! likes into a ring's indices and slots, and the consumer must answer with a slot, nothing, or
//! `RingCorrupt`, never panic, read outside the ring or loop for ever.
//!
//! `ZCIO_FUZZ_MS` sets the time budget (default 1000 ms; a longer run: `ZCIO_FUZZ_MS=600000
//! cargo test --release -p zcio-vm --test fuzz_ring`). A failure prints the seed to replay with
//! `ZCIO_FUZZ_SEED`. Arbtest keeps no corpus: the seeds in `REGRESSIONS` are replayed first,
//! every run.

use zcio_testkit::fuzz::{Result, Unstructured, fuzz};
use zcio_vm::arena::{SLOT_WORDS, SharedArena, SharedRing};

/// Seeds replayed before the timed search: all-zero input and a few sizes.
const REGRESSIONS: &[u64] = &[
    0x0000_0000_0000_1000,
    0x9e37_79b9_0000_0400,
    0x2545_f491_0000_4000,
];

#[test]
fn a_ring_written_by_a_hostile_peer_never_breaks_its_consumer() {
    const CAP: usize = 8;
    let arena = SharedArena::create("fuzz-ring", 1 << 16).unwrap();
    let off = SharedArena::user_offset().div_ceil(64) * 64;
    let span = SharedRing::footprint(CAP);
    let property = |u: &mut Unstructured<'_>| -> Result<()> {
        let mut rx = SharedRing::new(&arena, off, CAP).unwrap();
        let mut tx = SharedRing::new(&arena, off, CAP).unwrap();
        for w in 0..span / 8 {
            arena
                .atomic_u64(off + w * 8)
                .store(0, std::sync::atomic::Ordering::Relaxed);
        }
        let rounds: u8 = u.arbitrary()?;
        for _ in 0..rounds % 32 {
            match u.int_in_range(0..=3)? {
                // The honest producer.
                0 => {
                    let words: [u64; SLOT_WORDS] = u.arbitrary()?;
                    let _ = tx.push(&arena, &words);
                }
                // The hostile peer: any word of the ring (indices or slots) set to anything.
                1 => {
                    let w = u.choose_index(span / 8)?;
                    let v: u64 = u.arbitrary()?;
                    arena
                        .atomic_u64(off + w * 8)
                        .store(v, std::sync::atomic::Ordering::Relaxed);
                }
                2 => {
                    let _ = rx.has_next(&arena);
                }
                _ => {
                    // A pop returns at once whatever the indices say.
                    let _ = rx.pop(&arena);
                }
            }
        }
        Ok(())
    };
    fuzz(REGRESSIONS, property);
}
