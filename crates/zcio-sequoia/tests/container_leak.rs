//! A domain that goes (as a receiving process that dies) leaks no descriptor or mapping: alone
//! in its process, so that no other test's descriptors and mappings count.

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use zcio_sequoia::container::Domain;

fn fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn a_domain_that_goes_leaks_no_descriptor_or_mapping() {
    let before = (fds(), zcio_vm::mapping::vma_count());
    {
        let (tx, rx) = UnixStream::pair().unwrap();
        let mut a = Domain::new();
        let mut b = Domain::new();
        for _ in 0..50 {
            let id = a.alloc(8192).unwrap();
            a.map(id).unwrap()[0] = 1;
            a.write(tx.as_fd(), id).unwrap();
            b.read(rx.as_fd(), 0, true).unwrap();
        }
        assert_eq!(b.owned(), 50);
        // Volatile containers, round trips and more than the region cache keeps.
        let (back_tx, back_rx) = UnixStream::pair().unwrap();
        let mut c = Domain::accepting_volatile();
        let mut ids = Vec::new();
        for _ in 0..80 {
            let id = a.alloc_volatile(8192).unwrap();
            a.map_words(id).unwrap()[0].store(2, std::sync::atomic::Ordering::Relaxed);
            a.write(tx.as_fd(), id).unwrap();
            let got = c.read(rx.as_fd(), 0, true).unwrap();
            c.write(back_tx.as_fd(), got).unwrap();
            ids.push(a.read(back_rx.as_fd(), 0, false).unwrap());
        }
        for id in ids.drain(..40) {
            a.write(tx.as_fd(), id).unwrap();
        }
        assert_eq!(a.cached(), 40);
        assert_eq!(c.cached(), 64, "the region cache is bounded");
        // The receivers go with their containers (as a process that dies would).
    }
    assert_eq!((fds(), zcio_vm::mapping::vma_count()), before);
}
