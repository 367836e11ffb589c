//! The real producer: a file read with `O_DIRECT` into scattered store slots, then reassembled
//! by remapping and checked byte for byte against the file.

use std::io::Write;
use zcio_vm::remap::{Granule, PageStore};
use zcio_vmmr::pool::BitmapPool;
use zcio_vmmr::producer::{FileProducer, ProducerError};
use zcio_vmmr::reassemble::{Path, Reassembler};

#[test]
fn messages_read_from_a_file_come_out_contiguous_and_byte_exact() {
    // Under target/, which lives on a disk file system more often than /tmp does.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let path = dir.path().join("messages");
    let data: Vec<u8> = (0..(3 << 20) + 123u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    drop(f);
    let mut p = FileProducer::open(&path).unwrap();
    if let Err(why) = p.direct() {
        println!("O_DIRECT not used: {why}");
    }
    for granule in [Granule::Page, Granule::Huge] {
        let g = granule.bytes();
        let mut store = PageStore::new(16.max(4 * (1 << 20) / g), granule).unwrap();
        // Scatter the store's free list: take every slot, give them back in a shuffled order.
        let mut all: Vec<_> = (0..store.capacity()).filter_map(|_| store.take()).collect();
        let mut k = 7usize;
        while !all.is_empty() {
            k = (k * 31 + 11) % all.len();
            store.put(all.swap_remove(k)).unwrap();
        }
        let mut r = Reassembler::new(BitmapPool::new(store.capacity()), granule).unwrap();
        for (offset, len) in [(0usize, 1usize), (0, g), (g, 3 * g - 7), (0, data.len())] {
            if len > store.free() * g || offset + len > data.len() {
                continue;
            }
            let slots = p.read_message(&mut store, offset as u64, len).unwrap();
            let m = r
                .reassemble(&mut store, slots, len)
                .map_err(|r| r.error)
                .unwrap();
            assert_eq!(m.path(), Path::Remapped);
            assert!(
                r.bytes(&m).unwrap() == &data[offset..offset + len],
                "{granule:?}: {len} bytes at {offset}"
            );
            for s in r.free(&mut store, m).map_err(|r| r.error).unwrap() {
                store.put(s).unwrap();
            }
        }
        // Past the end of the file, and an offset the device cannot start at: clear errors,
        // and the store keeps every slot.
        let free = store.free();
        let e = p
            .read_message(&mut store, (data.len() / g * g) as u64, 2 * g)
            .unwrap_err();
        assert!(matches!(e, ProducerError::ShortFile { .. }), "{e}");
        let e = p.read_message(&mut store, 5, 10).unwrap_err();
        assert!(
            e.to_string().contains("not a multiple of the granule"),
            "{e}"
        );
        assert_eq!(store.free(), free);
    }
}
