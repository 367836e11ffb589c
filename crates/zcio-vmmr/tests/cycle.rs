//! The whole-cycle policy: it chooses on the cost of moving a message in and back out, not on
//! the move-in alone; and the cycle measured here is finite and positive.

use zcio_vm::remap::{Granule, PageStore, Slot};
use zcio_vmmr::pool::BitmapPool;
use zcio_vmmr::reassemble::{Calibration, CycleCalibration, Path, Policy, Reassembler};

/// A machine where moving a page in costs 100 ns a call and 20 ns a page, copying a page 205 ns
/// (0.05 ns a byte), and the whole cycle (in and back out) 400 ns a call and 150 ns a page.
fn costs() -> CycleCalibration {
    let g = Granule::Page.bytes();
    CycleCalibration {
        move_in: Calibration {
            granule: g,
            move_call_ns: 100.0,
            move_granule_ns: 20.0,
            copy_by_size: vec![(g, 0.05), (1 << 30, 0.05)],
        },
        cycle_call_ns: 400.0,
        cycle_granule_ns: 150.0,
    }
}

#[test]
fn the_cycle_policy_copies_where_the_move_in_alone_would_remap() {
    let g = Granule::Page.bytes();
    let c = costs();
    let mut store = PageStore::new(64, Granule::Page).unwrap();
    let move_in = Reassembler::with_policy(
        BitmapPool::new(64),
        Granule::Page,
        Policy::Adaptive(Box::new(c.move_in.clone())),
    )
    .unwrap();
    let mut cycle = Reassembler::with_policy(
        BitmapPool::new(64),
        Granule::Page,
        Policy::AdaptiveCycle(Box::new(c.clone())),
    )
    .unwrap();
    // 16 adjacent pages: moving in costs 100 + 16 × 20 = 420 ns, copying 16 × 205 = 3 280 ns,
    // the whole cycle 400 + 16 × 150 = 2 800 ns: both remap.
    // 4 scattered pages: moving in 4 × 100 + 4 × 20 = 480 ns, copying 820 ns, the cycle
    // 4 × 400 + 4 × 150 = 2 200 ns: the move-in alone says remap, the cycle says copy.
    for (n, adjacent, by_move_in, by_cycle) in [
        (16, true, Path::Remapped, Path::Remapped),
        (4, false, Path::Remapped, Path::Copied),
    ] {
        let slots: Vec<Slot> = if adjacent {
            (0..n).map(|i| store.take_index(i).unwrap()).collect()
        } else {
            (0..n)
                .map(|i| store.take_index(20 + 3 * i).unwrap())
                .collect()
        };
        assert!(c.move_in_ns(n, if adjacent { 1 } else { n }) < c.copy_ns(n * g));
        assert_eq!(move_in.choose(&slots, n * g), by_move_in, "{n} pages");
        assert_eq!(cycle.choose(&slots, n * g), by_cycle, "{n} pages");
        // The reassembler takes the path it chose, and the bytes come out right either way.
        for (k, s) in slots.iter().enumerate() {
            store.bytes_mut(s).unwrap().fill(k as u8 + 1);
        }
        let m = cycle
            .reassemble(&mut store, slots, n * g)
            .map_err(|r| r.error)
            .unwrap();
        assert_eq!(m.path(), by_cycle);
        let bytes = cycle.bytes(&m).unwrap();
        for k in 0..n {
            assert!(bytes[k * g..(k + 1) * g].iter().all(|b| *b == k as u8 + 1));
        }
        let back = cycle.free(&mut store, m).map_err(|r| r.error).unwrap();
        store.put_all(back).unwrap();
    }
    assert_eq!((cycle.live(), store.free()), (0, 64));
}

#[test]
fn a_measured_cycle_is_finite_and_positive() {
    for granule in [Granule::Page, Granule::Huge] {
        let move_in = Calibration::measure(granule).unwrap();
        let c = CycleCalibration::measure(move_in, granule).unwrap();
        for v in [c.cycle_call_ns, c.cycle_granule_ns] {
            assert!(v.is_finite() && v >= 0.0, "{c:?}");
        }
        // A message of one granule costs something over its cycle.
        assert!(c.remap_ns(1, 1) > 0.0, "{c:?}");
        assert_eq!(
            c.copy_ns(granule.bytes()),
            c.move_in.copy_ns(granule.bytes())
        );
    }
}
