//! A buffer freed and allocated again at the same address is a new buffer: the runtime's record
//! of the old one's registration must be gone before the new one is looked up, or the new
//! mapping (which the kernel has not registered) would be taken for registered, and pages could
//! not be moved into it. `munmap` returns once the handler has read its unmap event, not handled
//! it; the handler is made to pause between the two, so that without the wait for it the
//! lookup would find the old record every time.

mod common;

use common::swapping;
use zcio_vm::{MapOptions, Mapping, page_size};

#[test]
fn a_buffer_mapped_again_at_its_old_address_is_registered_anew() {
    let Some(rt) = swapping() else {
        return;
    };
    let ps = page_size();
    let len = 16 * ps;
    let mut stg = rt.registered_mapping(len, MapOptions::POPULATED).unwrap();
    let mut scr = rt.registered_mapping(len, MapOptions::default()).unwrap();
    let mut same_address = 0;
    rt.inject_handler_pause(std::time::Duration::from_millis(20));
    for round in 0..20u32 {
        let old = Mapping::anonymous(len, MapOptions::POPULATED).unwrap();
        let addr = old.addr();
        rt.register_app(old.range()).unwrap();
        drop(old);
        let m = Mapping::anonymous(len, MapOptions::POPULATED).unwrap();
        if m.addr() != addr {
            continue;
        }
        same_address += 1;
        rt.register_app(m.range()).unwrap();
        stg.as_mut_slice().fill(round as u8);
        // SAFETY: `m` is ours and not otherwise in use; staging and scratch are our registered
        // mappings, scratch empty (emptied after each round).
        let copied = unsafe { rt.swap(m.range(), stg.range(), scr.range()) }.unwrap();
        assert_eq!(
            copied, 0,
            "round {round}: pages were copied into the new buffer, not moved: it was taken for \
             the old one's registration"
        );
        assert!(
            m.as_slice().iter().all(|&b| b == round as u8),
            "round {round}"
        );
        // Scratch holds the buffer's old pages: empty it for the next round.
        let all = scr.range();
        scr.discard(all).unwrap();
    }
    rt.inject_handler_pause(std::time::Duration::ZERO);
    assert!(
        same_address > 0,
        "the kernel never placed the new mapping at the old one's address"
    );
}
