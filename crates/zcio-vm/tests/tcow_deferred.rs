//! PMD TCOW whose last step must wait (the kernel said `EAGAIN`: a userfaultfd event is
//! pending, which only the handler thread itself can read). A test binary of its own: the
//! injected deferrals are process-wide.

mod common;

use common::tcow_at_2mib;
use std::os::fd::AsFd;
use zcio_vm::page_size;
use zcio_vm::wire::{Pipe, read_exact, vmsplice_all};

#[test]
fn a_deferred_2mib_tcow_keeps_both_the_output_and_the_writer_whole() {
    let h = zcio_vm::page::HUGE_PAGE_SIZE;
    let pmds = 2;
    let Some((rt, mut m)) = tcow_at_2mib(pmds) else {
        return;
    };
    for (i, b) in m.as_mut_slice().iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(13).wrapping_add(5);
    }
    let expect = m.as_slice().to_vec();
    let p = Pipe::new(1 << 20).unwrap();
    let before = rt.stats();
    let out = rt.reference_output(m.range(), true).unwrap();
    let at = h / 2;
    vmsplice_all(p.tx.as_fd(), &[&m.as_slice()[at..at + (1 << 20)]]).unwrap();
    // Each PMD's step 3 is deferred three times: the writer waits for the handler's retries.
    rt.inject_pmd_tcow_again(3 * pmds as u32);
    let buf = m.as_mut_slice();
    for pg in (0..pmds * h).step_by(page_size()) {
        buf[pg] = 0xC3;
    }
    assert_eq!(rt.inject_pmd_tcow_again(0), 0, "every deferral was taken");
    let mut got = vec![0u8; 1 << 20];
    read_exact(p.rx.as_fd(), &mut got).unwrap();
    out.release();
    assert!(
        got[..] == expect[at..at + (1 << 20)],
        "the output kept the data of the call"
    );
    for (i, (&b, &e)) in m.as_slice().iter().zip(&expect).enumerate() {
        let want = if i % page_size() == 0 { 0xC3 } else { e };
        assert_eq!(b, want, "byte {i}");
    }
    let after = rt.stats();
    assert_eq!(
        after.tcow_huge_copies - before.tcow_huge_copies,
        pmds as u64
    );
    assert_eq!(after.tcow_copies, before.tcow_copies, "no 4 KiB TCOW");
    assert_eq!(
        zcio_vm::huge::scan(m.range()).granule(),
        zcio_vm::huge::Granule::Huge,
        "the copies moved in are huge pages"
    );
}
