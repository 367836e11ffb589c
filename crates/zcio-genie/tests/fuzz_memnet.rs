//! Fuzzing the memory network's decoding of what its peer writes into the shared arena
//! (`arbtest`): the descriptors a sender posts (magic, ticket, length, page offset), which the
//! receiver validates before it reads a byte, and the completions a receiver posts (magic,
//! ticket), which the sender matches against its outputs. A peer may write any word of the
//! rings at any time: forge slots, repeat or invent tickets, move the ring positions.
//!
//! Two targets: the decoders alone ([`decode_descriptor`], [`decode_completion`]) over any
//! words, which must give a checked value or an error naming the word at fault; and a live
//! link whose rings a hostile peer rewrites, where the sender's `reap` and the receiver's
//! `recv` must answer with a result or an error, never panic or wait for ever (the receiver's
//! hostile phase runs after the sender is gone, so that a descriptor announcing data never
//! sent ends at the end of the wire instead of waiting for it).
//!
//! `ZCIO_FUZZ_MS` sets the time budget of each target (default 1000 ms; a longer run:
//! `ZCIO_FUZZ_MS=600000 cargo test --release -p zcio-genie --test fuzz_memnet`). A failure
//! prints the seed to replay with `ZCIO_FUZZ_SEED`. Arbtest keeps no corpus: the seeds in
//! `REGRESSIONS` are replayed first, every run.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use zcio_genie::memnet::{
    self, Descriptor, MAX_MESSAGE, MemnetEndpoint, decode_completion, decode_descriptor,
};
use zcio_genie::semantics::Allocation;
use zcio_genie::{InputBuffering, Semantics};
use zcio_testkit::fuzz::{Result, Unstructured, fuzz};
use zcio_vm::arena::{SLOT_WORDS, SharedArena, SharedRing};

/// Seeds replayed before the timed search: all-zero input and a few sizes.
const REGRESSIONS: &[u64] = &[
    0x0000_0000_0000_1000,
    0x9e37_79b9_0000_0400,
    0x2545_f491_0000_4000,
];

/// Words at the edges of arithmetic.
const EDGES: [u64; 9] = [
    0,
    1,
    4095,
    4096,
    u64::MAX,
    1 << 63,
    u32::MAX as u64,
    MAX_MESSAGE as u64,
    MAX_MESSAGE as u64 + 1,
];

/// The memory network's rings in its arena, as `memnet` lays them out: four rings of 256
/// slots from the first 64-byte line of the arena's user area; ring 0 carries side 0's
/// descriptors, ring 3 the completions side 1 posts for them. Checked against a real
/// transfer by [`honest_slots`], so a change of layout fails here instead of fuzzing the
/// wrong words.
fn ring_at(i: usize) -> usize {
    SharedArena::user_offset().div_ceil(64) * 64 + i * SharedRing::footprint(RING_SLOTS)
}
const RING_SLOTS: usize = 256;
const DESCRIPTORS: usize = 0;
const COMPLETIONS: usize = 3;

fn slot_at(ring: usize, index: u64) -> usize {
    ring_at(ring) + 128 + (index as usize % RING_SLOTS) * SLOT_WORDS * 8
}

fn read_slot(arena: &SharedArena, ring: usize, index: u64) -> [u64; SLOT_WORDS] {
    std::array::from_fn(|k| {
        arena
            .atomic_u64(slot_at(ring, index) + k * 8)
            .load(Ordering::Relaxed)
    })
}

/// A link between two endpoints of this process, with its arena.
fn link() -> (MemnetEndpoint, MemnetEndpoint, Arc<SharedArena>) {
    let (a, b, arena) = memnet::link_parts().unwrap();
    let mut a = MemnetEndpoint::join(a, Some(arena.clone())).unwrap();
    let mut b = MemnetEndpoint::join(b, Some(arena.clone())).unwrap();
    a.set_spin(std::time::Duration::ZERO);
    b.set_spin(std::time::Duration::ZERO);
    (a, b, arena)
}

/// A descriptor and a completion as an honest link writes them (one message of 100 bytes on
/// the wire: share semantics references it in place, where copy would use the shared ring,
/// whose messages complete at once).
fn honest_slots() -> ([u64; SLOT_WORDS], [u64; SLOT_WORDS]) {
    let (mut a, mut b, arena) = link();
    let (t, _) = a.send(Semantics::Share, &[7u8; 100]).unwrap();
    let mut got = [0u8; 100];
    b.recv(Semantics::Share, &mut got, InputBuffering::EarlyDemux)
        .unwrap();
    a.wait(t).unwrap();
    let d = read_slot(&arena, DESCRIPTORS, 0);
    let c = read_slot(&arena, COMPLETIONS, 0);
    let want = Descriptor {
        ticket: t.0,
        len: 100,
        offset: d[3] as usize,
        total: 100,
        at: 0,
        ring: false,
        file: false,
    };
    assert_eq!(decode_descriptor(&d).unwrap(), want, "ring layout");
    assert_eq!(decode_completion(&c).unwrap(), t.0, "ring layout");
    (d, c)
}

/// `honest` with some of its words replaced: by edge values, flipped bits, or anything.
fn mutate(u: &mut Unstructured<'_>, honest: [u64; SLOT_WORDS]) -> Result<[u64; SLOT_WORDS]> {
    let mut w = honest;
    for x in &mut w {
        if u.ratio(1, 3)? {
            *x = match u.int_in_range(0..=3)? {
                0 => *u.choose(&EDGES)?,
                1 => *x ^ 1 << u.int_in_range(0..=63)?,
                2 => u.int_in_range(0..=8192)?,
                _ => u.arbitrary()?,
            };
        }
    }
    Ok(w)
}

#[test]
fn any_descriptor_or_completion_words_decode_to_checked_values_or_a_named_error() {
    let (desc, done) = honest_slots();
    let ps = zcio_vm::page_size();
    fuzz(REGRESSIONS, |u| {
        let w = mutate(u, desc)?;
        match decode_descriptor(&w) {
            Ok(d) => {
                assert!((1..=MAX_MESSAGE).contains(&d.len), "{d:?} from {w:x?}");
                assert!(d.offset < ps, "{d:?} from {w:x?}");
                assert!(
                    d.total <= MAX_MESSAGE && d.at + d.len <= d.total,
                    "{d:?} from {w:x?}"
                );
                assert_eq!(
                    (d.ticket, d.len as u64, d.offset as u64),
                    (w[1], w[2], w[3])
                );
            }
            Err(e) => {
                let e = e.to_string();
                let named = [
                    format!("{:#x}", w[0]),
                    w[2].to_string(),
                    w[3].to_string(),
                    w[6].to_string(),
                    w[7].to_string(),
                ];
                assert!(named.iter().any(|v| e.contains(v)), "{e} for {w:x?}");
            }
        }
        let w = mutate(u, done)?;
        match decode_completion(&w) {
            Ok(t) => assert_eq!(t, w[1]),
            Err(e) => assert!(e.to_string().contains(&format!("{:#x}", w[0])), "{e}"),
        }
        Ok(())
    });
}

/// A hostile peer's write into ring `ring`: a forged slot appended after the producer's
/// position (made from `honest`), a slot rewritten in place, or any word of the ring.
fn tamper(
    u: &mut Unstructured<'_>,
    arena: &SharedArena,
    ring: usize,
    honest: [u64; SLOT_WORDS],
) -> Result<()> {
    let head = arena.atomic_u64(ring_at(ring));
    match u.int_in_range(0..=3)? {
        0 | 1 => {
            let h = head.load(Ordering::Acquire);
            let w = mutate(u, honest)?;
            for (k, x) in w.iter().enumerate() {
                arena
                    .atomic_u64(slot_at(ring, h) + k * 8)
                    .store(*x, Ordering::Relaxed);
            }
            head.store(h.wrapping_add(1), Ordering::Release);
        }
        2 => {
            let i = u.int_in_range(0..=RING_SLOTS as u64)?;
            let w = mutate(u, read_slot(arena, ring, i))?;
            for (k, x) in w.iter().enumerate() {
                arena
                    .atomic_u64(slot_at(ring, i) + k * 8)
                    .store(*x, Ordering::Relaxed);
            }
        }
        _ => {
            // The positions (head, then tail a line further) or any word of the ring.
            let at = match u.int_in_range(0..=2)? {
                0 => ring_at(ring),
                1 => ring_at(ring) + 64,
                _ => ring_at(ring) + u.choose_index(SharedRing::footprint(RING_SLOTS) / 8)? * 8,
            };
            let old = arena.atomic_u64(at).load(Ordering::Relaxed);
            let v = match u.int_in_range(0..=2)? {
                0 => old.wrapping_add(u.int_in_range(0..=300)?).wrapping_sub(150),
                1 => *u.choose(&EDGES)?,
                _ => u.arbitrary()?,
            };
            arena.atomic_u64(at).store(v, Ordering::Release);
        }
    }
    Ok(())
}

#[test]
fn a_peer_rewriting_the_rings_gets_errors_never_a_panic_or_a_hang() {
    let (desc, done) = honest_slots();
    // The system-allocated semantics, whose input allocates a region of the announced length.
    let moves: Vec<Semantics> = Semantics::ALL
        .into_iter()
        .filter(|s| s.allocation() == Allocation::System)
        .collect();
    fuzz(REGRESSIONS, |u| {
        let (mut a, mut b, arena) = link();
        // Side 0 sends a few messages; side 1 takes some of them honestly.
        let mut lens = Vec::new();
        for _ in 0..u.int_in_range(0..=6)? {
            let len = u.int_in_range(1..=3 * 4096)?;
            let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
            a.send(Semantics::Copy, &data).unwrap();
            lens.push(len);
        }
        let taken = u.int_in_range(0..=lens.len())?;
        for (k, &len) in lens[..taken].iter().enumerate() {
            let mut got = vec![0u8; len];
            let (n, _) = b
                .recv(Semantics::Copy, &mut got, *u.choose(&InputBuffering::ALL)?)
                .unwrap();
            assert_eq!(n, len, "message {k}");
        }
        // The sender's completions, rewritten by the receiver's side.
        for _ in 0..u.int_in_range(0..=4)? {
            tamper(u, &arena, COMPLETIONS, done)?;
        }
        let before = a.pending();
        match a.reap() {
            Ok(n) => assert!(n <= before && a.pending() == before - n, "{n} of {before}"),
            Err(e) => assert!(!e.to_string().is_empty()),
        }
        // The receiver's descriptors, rewritten by the sender's side, which then leaves.
        for _ in 0..u.int_in_range(0..=4)? {
            tamper(u, &arena, DESCRIPTORS, desc)?;
        }
        drop(a);
        let mut ended = false;
        for _ in 0..64 {
            let buffering = *u.choose(&InputBuffering::ALL)?;
            let got = if u.ratio(1, 3)? {
                // Into a region the receiver allocates from the forged length (up to 1 GiB and
                // beyond: EDGES): refused or failed with the sender gone, never a region filled
                // from nowhere.
                let sem = *u.choose(&moves)?;
                b.recv_region(sem, buffering).map(|(r, _)| {
                    assert!(!r.is_empty() && r.len() <= MAX_MESSAGE, "{} bytes", r.len());
                    r.len()
                })
            } else {
                let mut buf = vec![0u8; u.int_in_range(1..=4 * 4096)?];
                b.recv(Semantics::Copy, &mut buf, buffering).map(|(n, _)| {
                    assert!(n >= 1 && n <= buf.len(), "{n} bytes in {}", buf.len());
                    n
                })
            };
            if let Err(e) = got {
                assert!(!e.to_string().is_empty());
                ended = true;
                break;
            }
        }
        assert!(ended, "the receiver never saw the sender leave");
        Ok(())
    });
}
