//! Mappings are released: 100 mappings made and dropped leave the process's VMA count where it
//! was. Alone in its process, so that no other test's mappings count.

use zcio_vm::mapping::vma_count;
use zcio_vm::{MapOptions, Mapping};

#[test]
fn mappings_are_released() {
    let before = vma_count();
    for _ in 0..100 {
        let _m = Mapping::anonymous(1 << 20, MapOptions::default()).unwrap();
    }
    assert!(
        vma_count() <= before + 2,
        "{} VMAs, {before} before",
        vma_count()
    );
}
