//! Reassembly by remapping: byte for byte, for every size and granule, with the pages of a
//! message scattered over the store in any order; a long run that leaves the address space and
//! the memory as they were; and misuse that is refused without losing a page.

use zcio_vm::remap::{Granule, PageStore, Slot};
use zcio_vmmr::pool::{BitmapPool, SplitMix64};
use zcio_vmmr::reassemble::{Calibration, Path, Policy, Reassembler, VmmrError};

/// A small deterministic shuffle (splitmix64), so that a message's granules lie anywhere.
fn scatter(store: &mut PageStore, n: usize, seed: u64) -> Vec<Slot> {
    let mut idx: Vec<usize> = (0..store.capacity()).collect();
    let mut rng = SplitMix64::new(seed);
    for i in (1..idx.len()).rev() {
        idx.swap(i, rng.next_u64() as usize % (i + 1));
    }
    idx.into_iter()
        .filter_map(|i| store.take_index(i))
        .take(n)
        .collect()
}

/// Fill the slots with message `seq`'s bytes (the first `len` of them) and return those bytes.
fn fill(store: &mut PageStore, slots: &[Slot], len: usize, seq: u64) -> Vec<u8> {
    let g = store.granule().bytes();
    let want: Vec<u8> = (0..len)
        .map(|i| (i as u64 ^ seq.wrapping_mul(31)).wrapping_mul(2_654_435_761) as u8)
        .collect();
    for (k, s) in slots.iter().enumerate() {
        let b = store.bytes_mut(s).unwrap();
        let part = &want[k * g..len.min((k + 1) * g)];
        b[..part.len()].copy_from_slice(part);
    }
    want
}

#[test]
fn every_size_and_granule_comes_out_byte_exact() {
    for (granule, sizes, store_n) in [
        (Granule::Page, vec![1usize, 2, 3, 17, 64, 255], 300),
        (Granule::Huge, vec![1, 2, 5], 8),
    ] {
        let g = granule.bytes();
        let mut store = PageStore::new(store_n, granule).unwrap();
        let mut r = Reassembler::new(BitmapPool::new(2 * store_n), granule).unwrap();
        for (seq, &n) in sizes.iter().enumerate() {
            // Full granules, and a last granule cut short.
            for len in [n * g, n * g - g / 3] {
                let slots = scatter(&mut store, n, seq as u64 + len as u64);
                let want = fill(&mut store, &slots, len, seq as u64);
                let m = r.reassemble(&mut store, slots, len).unwrap();
                assert_eq!(m.len(), len);
                assert!(
                    r.bytes(&m).unwrap() == want.as_slice(),
                    "{granule:?} {n} granules"
                );
                let moved = m.moved();
                assert_eq!(moved.moved + moved.copied, n * g);
                if zcio_vm::runtime::VmRuntime::get().capabilities().swap {
                    assert_eq!(moved.copied, 0, "pages of a message copied: {moved:?}");
                }
                // The pages go back into their slots, with the message's bytes.
                let slots = r.free(&mut store, m).map_err(|r| r.error).unwrap();
                for (k, s) in slots.iter().enumerate() {
                    let part = &want[k * g..len.min((k + 1) * g)];
                    assert!(&store.bytes(s).unwrap()[..part.len()] == part);
                }
                store.put_all(slots).unwrap();
            }
        }
        assert_eq!(r.live(), 0);
        assert_eq!(store.free(), store_n);
    }
}

#[test]
fn misuse_is_refused_and_loses_no_page() {
    let mut store = PageStore::new(8, Granule::Page).unwrap();
    let mut a = Reassembler::new(BitmapPool::new(4), Granule::Page).unwrap();
    let mut b = Reassembler::new(BitmapPool::new(4), Granule::Page).unwrap();
    let g = Granule::Page.bytes();
    // More granules than the pool can ever hold in a run: refused, and the slots come back.
    let slots = scatter(&mut store, 5, 1);
    let r = a.reassemble(&mut store, slots, 5 * g).unwrap_err();
    assert!(matches!(r.error, VmmrError::Pool(_)), "{}", r.error);
    assert!(r.error.to_string().contains("largest run"), "{}", r.error);
    let slots = r.given_back;
    assert_eq!(slots.len(), 5);
    // Exhausted while a message holds three of the four granules.
    let mut slots = slots;
    let rest = slots.split_off(3);
    let m3 = a.reassemble(&mut store, slots, 3 * g).unwrap();
    let r = a.reassemble(&mut store, rest, 2 * g).unwrap_err();
    assert!(r.error.to_string().contains("exhausted"), "{}", r.error);
    let slots = r.given_back;
    let back = a.free(&mut store, m3).map_err(|r| r.error).unwrap();
    store.put_all(back).unwrap();
    // A length the granules cannot hold.
    let r = a.reassemble(&mut store, slots, 3 * g).unwrap_err();
    assert!(
        r.error.to_string().contains("every granule but the last"),
        "{}",
        r.error
    );
    let slots = r.given_back;
    store.put_all(slots).unwrap();
    // A message freed into the wrong reassembler is refused, and still frees where it belongs.
    let slots = scatter(&mut store, 2, 2);
    let m = a.reassemble(&mut store, slots, 2 * g).unwrap();
    assert!(matches!(b.bytes(&m), Err(VmmrError::Foreign)));
    let r = b.free(&mut store, m).unwrap_err();
    assert!(matches!(r.error, VmmrError::Foreign), "{}", r.error);
    let m = r.given_back;
    assert_eq!(a.live(), 1);
    let back = a.free(&mut store, m).map_err(|r| r.error).unwrap();
    store.put_all(back).unwrap();
    assert_eq!((a.live(), store.free()), (0, 8));
}

#[test]
fn the_adaptive_path_copies_what_would_not_pay_and_moves_what_would() {
    let g = Granule::Page.bytes();
    // A machine where a move call costs 800 ns and a page in it 90 ns, and copying a page
    // 205 ns: one scattered page copies, a run of 64 adjacent pages moves.
    let cal = Calibration {
        granule: g,
        move_call_ns: 800.0,
        move_granule_ns: 90.0,
        copy_by_size: vec![(g, 0.05), (1 << 30, 0.05)],
    };
    let mut store = PageStore::new(128, Granule::Page).unwrap();
    let mut r = Reassembler::with_policy(
        BitmapPool::new(256),
        Granule::Page,
        Policy::Adaptive(Box::new(cal)),
    )
    .unwrap();
    for (n, adjacent, want_path) in [
        (1, false, Path::Copied),
        (8, false, Path::Copied),
        (64, true, Path::Remapped),
    ] {
        let slots: Vec<Slot> = if adjacent {
            (0..n).map(|i| store.take_index(i).unwrap()).collect()
        } else {
            scatter(&mut store, n, n as u64)
        };
        let want = fill(&mut store, &slots, n * g, n as u64);
        assert_eq!(r.choose(&slots, n * g), want_path, "{n} pages");
        let m = r
            .reassemble(&mut store, slots, n * g)
            .map_err(|r| r.error)
            .unwrap();
        assert_eq!(m.path(), want_path);
        assert!(
            r.bytes(&m).unwrap() == want.as_slice(),
            "{n} pages by {want_path:?}"
        );
        let slots = r.free(&mut store, m).map_err(|r| r.error).unwrap();
        // Either way the slots come back holding the message.
        assert!(store.bytes(&slots[0]).unwrap()[..g] == want[..g]);
        store.put_all(slots).unwrap();
    }
    assert_eq!(r.live(), 0);
}

#[test]
fn a_copying_reassembler_keeps_the_slots_pages_and_a_measured_calibration_is_sane() {
    let mut store = PageStore::new(16, Granule::Page).unwrap();
    let mut r = Reassembler::with_policy(BitmapPool::new(16), Granule::Page, Policy::Copy).unwrap();
    let g = Granule::Page.bytes();
    let slots = scatter(&mut store, 3, 9);
    let want = fill(&mut store, &slots, 3 * g - 5, 9);
    let m = r
        .reassemble(&mut store, slots, 3 * g - 5)
        .map_err(|r| r.error)
        .unwrap();
    assert_eq!(
        (m.path(), m.moved().copied, m.moved().moved),
        (Path::Copied, 3 * g - 5, 0)
    );
    assert!(r.bytes(&m).unwrap() == want.as_slice());
    r.bytes_mut(&m).unwrap()[0] ^= 0xff;
    let back = r.free(&mut store, m).map_err(|r| r.error).unwrap();
    store.put_all(back).unwrap();
    for granule in [Granule::Page, Granule::Huge] {
        let c = Calibration::measure(granule).unwrap();
        for v in [c.move_call_ns, c.move_granule_ns] {
            assert!(v.is_finite() && v >= 0.0, "{c:?}");
        }
        assert_eq!(c.granule, granule.bytes());
        assert!(c.copy_by_size.len() >= 3, "{c:?}");
        assert!(
            c.copy_by_size
                .iter()
                .all(|(n, ns)| *n >= granule.bytes() && ns.is_finite() && *ns > 0.0),
            "{c:?}"
        );
        // Copying more costs more, whatever the caches do to the per-byte cost.
        assert!(
            c.copy_ns(64 * granule.bytes()) > c.copy_ns(granule.bytes()),
            "{c:?}"
        );
    }
}
