//! Reverse copyout (paper 000, §5.2) into application pages that are not there yet: the page
//! is completed with the application's bytes (zeros, for a page never touched) while it is in
//! transition, and must not wait on itself for the missing page.

use std::sync::mpsc;
use std::time::Duration;
use zcio_vm::staging::Staging;
use zcio_vm::{MapOptions, Mapping, VmRuntime, page_size};

#[test]
fn a_partial_page_never_touched_is_completed_and_swapped_without_waiting_on_itself() {
    if !VmRuntime::get().capabilities().swap {
        zcio_vm::skip::skip(
            zcio_vm::skip::Capability::UffdMove,
            "no UFFDIO_MOVE: partial pages are copied out, never swapped",
        );
        return;
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let ps = page_size();
        // Three pages the application never touched; the message covers all but the first
        // 100 bytes of the first page and the last 100 of the last, so both partial pages
        // hold more than half a page of data: reverse copyout.
        let mut app = Mapping::anonymous(3 * ps, MapOptions::default()).unwrap();
        let (start, len) = (100, 3 * ps - 200);
        let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
        let mut st = Staging::new(4 * ps).unwrap();
        let addr = app.addr() + start;
        st.window(addr, len).unwrap().copy_from_slice(&data);
        let d = st
            .deliver_with(&mut app.as_mut_slice()[start..start + len], 1, ps / 2 + 1)
            .unwrap();
        let _ = tx.send((d.swapped, app.as_slice().to_vec(), data, start, len));
    });
    let (swapped, all, data, start, len) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("reverse copyout into pages never touched hung");
    assert_eq!(&all[start..start + len], &data[..], "the data");
    assert!(
        all[..start]
            .iter()
            .chain(&all[start + len..])
            .all(|&b| b == 0),
        "the application's bytes around the data (never written: zeros)"
    );
    assert_eq!(
        swapped, len,
        "every page swapped, the partial ones by reverse copyout"
    );
}
