//! A registration whose memory was given back and is in use again is dropped at its first
//! missing fault, instead of serving every later first touch through the handler thread. One
//! test in its own process, so that the runtime's counters move only for it.

mod common;

use common::tcow_by_moving;
use std::time::Duration;
use zcio_vm::{MapOptions, Mapping, page_size};

#[test]
fn memory_given_back_and_used_again_leaves_the_handler_after_one_fault() {
    let Some(rt) = tcow_by_moving() else {
        return;
    };
    let ps = page_size();
    let pages = 16;
    let mut m = Mapping::anonymous(pages * ps, MapOptions::POPULATED).unwrap();
    let r = m.range();
    // A buffer used for I/O (registered), then freed by an allocator that trims it.
    rt.register_app(r).unwrap();
    m.discard(r).unwrap();
    let before = rt.stats();
    // Its memory holds something else now: every page is written once.
    for (i, b) in m.as_mut_slice().iter_mut().enumerate().step_by(ps) {
        *b = i as u8 | 1;
    }
    let after = rt.stats();
    assert_eq!(
        after.released_registrations,
        before.released_registrations + 1,
        "the stale registration was not dropped"
    );
    assert!(
        after.missing_faults - before.missing_faults < pages as u64,
        "{} of {pages} first touches went through the handler thread",
        after.missing_faults - before.missing_faults
    );
    assert!(
        m.as_slice()
            .iter()
            .enumerate()
            .step_by(ps)
            .all(|(i, b)| *b == i as u8 | 1),
        "a write was lost"
    );
    // Used for I/O again, it is registered again and works: an output protects it and a
    // write during it is served by TCOW.
    let regs = rt.stats().registrations;
    let out = rt.reference_output(r, true).unwrap();
    assert_eq!(rt.stats().registrations, regs + 1);
    let tcow = rt.stats().tcow_faults;
    m.as_mut_slice()[0] = 0xEE;
    assert!(
        rt.stats().tcow_faults > tcow,
        "the write during the output took no TCOW fault"
    );
    out.release();
    std::thread::sleep(Duration::from_millis(1));
    assert_eq!(m.as_slice()[0], 0xEE);

    // A registration with an output pending is kept, and its missing pages served.
    let mut m = Mapping::anonymous(8 * ps, MapOptions::POPULATED).unwrap();
    let r = m.range();
    let out = rt.reference_output(r, true).unwrap();
    let released = rt.stats().released_registrations;
    // The application gives pages under output back (a misuse the output survives): touching
    // them again is served by the handler, and the registration stays.
    m.discard(r).unwrap();
    m.as_mut_slice()[3 * ps] = 9;
    assert_eq!(m.as_slice()[3 * ps], 9);
    assert_eq!(rt.stats().released_registrations, released);
    out.release();
}
