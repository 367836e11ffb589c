//! The runtime's table of registered application ranges: alone in its own process (one test),
//! so that it knows how full the table is.

mod common;

use common::tcow_by_moving;
use zcio_vm::runtime::MAX_REGISTRATIONS;
use zcio_vm::{MapOptions, Mapping, RawRange, page_size};

/// Evicting the least recently used of two overlapping registrations must not unregister the
/// pages the other one covers: an output over the other one still write-protects them.
#[test]
fn evicting_one_of_two_overlapping_registrations_keeps_the_other() {
    let Some(rt) = tcow_by_moving() else {
        return;
    };
    let ps = page_size();
    let m = Mapping::anonymous(8 * ps, MapOptions::POPULATED).unwrap();
    let at = |first: usize, pages: usize| RawRange {
        addr: m.addr() + first * ps,
        len: pages * ps,
    };
    let (a, b) = (at(0, 4), at(2, 4)); // overlapping on pages 2 and 3
    rt.register_app(a).unwrap();
    rt.register_app(b).unwrap();
    // Fill the table, then use `b` again: `a` is now the least recently used.
    let others: Vec<Mapping> = (0..MAX_REGISTRATIONS - 2)
        .map(|_| {
            let o = Mapping::anonymous(ps, MapOptions::POPULATED).unwrap();
            rt.register_app(o.range()).unwrap();
            o
        })
        .collect();
    rt.register_app(b).unwrap();
    // One more registration evicts `a`.
    let last = Mapping::anonymous(ps, MapOptions::default()).unwrap();
    rt.register_app(last.range()).unwrap();
    // A swap into `b` moves all of its pages, 2 and 3 included (UFFDIO_MOVE wants them
    // registered), and an output over it write-protects them.
    let mut stg = rt
        .registered_mapping(4 * ps, MapOptions::POPULATED)
        .unwrap();
    stg.as_mut_slice().fill(0x7E);
    let scr = rt
        .registered_mapping(4 * ps, MapOptions::default())
        .unwrap();
    // SAFETY: `b` is pages of our mapping `m`, not otherwise in use; staging and scratch are
    // our registered mappings, scratch empty.
    let copied = unsafe { rt.swap(b, stg.range(), scr.range()) };
    assert!(
        copied.is_ok(),
        "a swap into the surviving registration failed: {}",
        copied.unwrap_err()
    );
    assert_eq!(copied.unwrap(), 0, "pages of `b` were copied, not moved");
    assert!(m.as_slice()[2 * ps..6 * ps].iter().all(|&x| x == 0x7E));
    let out = rt.reference_output(b, true);
    assert!(
        out.is_ok(),
        "an output over the surviving registration failed: {}",
        out.unwrap_err()
    );
    drop(out);
    drop(others);
}
