//! A long run of reassemblies, alone in its process so that its address space and memory are
//! its own: 100 000 messages leave the VMA count and the resident memory where they were.

use zcio_vm::remap::{Granule, PageStore, Slot};
use zcio_vmmr::pool::BitmapPool;
use zcio_vmmr::reassemble::Reassembler;

fn vmas() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .lines()
        .count()
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

#[test]
fn a_hundred_thousand_reassemblies_leave_the_address_space_and_memory_as_they_were() {
    let mut store = PageStore::new(64, Granule::Page).unwrap();
    let mut r = Reassembler::new(BitmapPool::new(256), Granule::Page).unwrap();
    let g = Granule::Page.bytes();
    let mut held: Vec<Slot> = Vec::new();
    let mut cycle = |seq: u64, store: &mut PageStore, r: &mut Reassembler<BitmapPool>| {
        let n = 1 + (seq % 8) as usize;
        // Slots in reverse order, so no two are adjacent in the move.
        let mut slots: Vec<Slot> = (0..n).map(|_| store.take().unwrap()).collect();
        slots.reverse();
        for s in &slots {
            store.bytes_mut(s).unwrap()[0] = seq as u8;
        }
        let m = r.reassemble(store, slots, n * g).unwrap();
        assert_eq!(r.bytes(&m).unwrap()[0], seq as u8);
        // Two messages live at a time, so runs are found at shifting places.
        let old = std::mem::take(&mut held);
        store.put_all(old).unwrap();
        held = r.free(store, m).map_err(|r| r.error).unwrap();
    };
    for seq in 0..1000 {
        cycle(seq, &mut store, &mut r);
    }
    let (vmas0, rss0) = (vmas(), rss_kib());
    for seq in 1000..100_000 {
        cycle(seq, &mut store, &mut r);
    }
    let (vmas1, rss1) = (vmas(), rss_kib());
    assert!(vmas1 <= vmas0 + 2, "VMAs grew from {vmas0} to {vmas1}");
    assert!(
        rss1 <= rss0 + 1024,
        "RSS grew from {rss0} KiB to {rss1} KiB"
    );
    assert_eq!(r.live(), 0);
}
