//! The region check's watches (paper 000, §6.2.1): a watch says "gone" only when the watched
//! mapping itself was unmapped, never because an earlier mapping at the same address was.

use zcio_vm::{MapOptions, VmRuntime, page_size};

/// Unmap a registered mapping and map a new one, which the kernel tends to place at the same
/// address, and watch it at once: the unmap's event, read by the handler before `munmap`
/// returned but handled after the watch was taken, must not mark the new mapping gone (a
/// cached region so judged is never reused nor unmapped: its memory and mapping leak).
#[test]
fn a_new_mapping_at_the_address_of_one_just_unmapped_is_not_taken_for_gone() {
    let rt = VmRuntime::get();
    if rt.capabilities().tcow == zcio_vm::runtime::TcowMode::MprotectSleepOnWrite {
        zcio_vm::skip::skip(
            zcio_vm::skip::Capability::UffdWp,
            "no userfaultfd: nothing can be watched",
        );
        return;
    }
    let len = 16 * page_size();
    let mut same_address = 0;
    let mut false_gone = 0;
    let mut last = 0;
    for _ in 0..3000 {
        let m = rt.registered_mapping(len, MapOptions::default()).unwrap();
        same_address += usize::from(m.addr() == last);
        last = m.addr();
        let w = rt.watch(m.range()).expect("watchable");
        false_gone += usize::from(rt.watch_gone(w));
        rt.unwatch(w);
        drop(m);
    }
    assert!(
        same_address > 100,
        "the kernel placed only {same_address} of 3000 mappings at the address just freed: the test cannot race"
    );
    assert_eq!(
        false_gone, 0,
        "{false_gone} of 3000 fresh mappings were taken for unmapped ({same_address} at a reused address)"
    );
}
