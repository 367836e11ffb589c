//! Every path lies inside the reserved region, at the address every process of the path maps
//! it at; a path whose range overlaps one this process has mapped is refused by name.

use zcio_fbufs::path::{PathInfo, PathMemory, Receiver, Variant};

#[test]
fn paths_lie_in_the_reserved_region_and_overlaps_are_refused() {
    let variant = Variant::CACHED_VOLATILE;
    let a = PathMemory::create(64 << 10, 4, variant).unwrap();
    let b = PathMemory::create(64 << 10, 4, variant).unwrap();
    for p in [&a, &b] {
        let i = p.info();
        assert!(zcio_vm::reserve::contains(i.addr, i.len()), "{i:?}");
    }
    let _oa = a.originator().unwrap();
    // A receiver told that path b lies over path a's range (a lying or confused peer).
    let lying = PathInfo {
        addr: a.info().addr + 4096,
        ..b.info()
    };
    let e = Receiver::new(lying).unwrap_err().to_string();
    assert!(e.contains("overlaps"), "{e}");
    // Path b where it really is: mapped beside a.
    let _ob = b.originator().unwrap();
}
