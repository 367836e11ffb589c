//! Containers from a pool: every file a pool hands out is fresh (zeroed, never another
//! container's), a container filled from bytes keeps the bytes of the moment it was made, and
//! a sender that kept a writable descriptor of a pooled file cannot change it once it is
//! given up. Also: reading a container's bytes without mapping it, and volatile containers
//! travelling with their mappings kept shown.

use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use zcio_sequoia::container::{ContainerError, Domain};
use zcio_sequoia::pool::Pool;

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8 ^ salt)
        .collect()
}

/// Every memory file this process holds a descriptor of whose first bytes are `marker`,
/// opened again for reading and writing (as a sender keeping a back door would).
/// Each file once (by inode), however many descriptors of it there are.
fn reopen_files_starting_with(marker: &[u8]) -> Vec<std::fs::File> {
    use std::os::unix::fs::MetadataExt;
    let mut found: Vec<std::fs::File> = Vec::new();
    // The listing first: the descriptors opened below must not be listed too.
    let entries: Vec<_> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .collect();
    for e in entries {
        let Ok(link) = std::fs::read_link(e.path()) else {
            continue;
        };
        if !link.to_string_lossy().contains("memfd:zcio-container") {
            continue;
        }
        let Ok(f) = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(e.path())
        else {
            continue;
        };
        let mut head = vec![0u8; marker.len()];
        let ino = f.metadata().unwrap().ino();
        if f.read_exact_at(&mut head, 0).is_ok()
            && head == marker
            && !found.iter().any(|g| g.metadata().unwrap().ino() == ino)
        {
            found.push(f);
        }
    }
    found
}

#[test]
fn pooled_files_are_fresh_every_time_and_never_carry_another_frames_bytes() {
    let pool = Pool::new(3 * 4096, 2).unwrap();
    assert_eq!(pool.len(), 3 * 4096);
    let (tx, rx) = UnixStream::pair().unwrap();
    let (mut a, mut b) = (Domain::new(), Domain::new());
    for k in 0..40u8 {
        // Drawn in place: the pages come zeroed, whatever the frames before held.
        let len = [1, 4096, 4097, 3 * 4096][k as usize % 4];
        let id = a.alloc_pooled(&pool, len).unwrap();
        assert!(a.map(id).unwrap().iter().all(|&x| x == 0), "frame {k}");
        let data = pattern(len, k);
        a.map(id).unwrap().copy_from_slice(&data);
        a.write(tx.as_fd(), id).unwrap();
        let got = b.read(rx.as_fd(), 0, true).unwrap();
        assert!(b.map_read(got).unwrap() == data.as_slice(), "frame {k}");
        // Filled from bytes: a short frame after a long one leaves nothing of it behind.
        let short = pattern(100, k ^ 0x55);
        let id = a.alloc_filled(&pool, &short).unwrap();
        a.write(tx.as_fd(), id).unwrap();
        let got2 = b.read(rx.as_fd(), 0, true).unwrap();
        assert!(b.map_read(got2).unwrap() == short.as_slice());
        b.free(got).unwrap();
        b.free(got2).unwrap();
    }
    assert!(
        pool.maker_cpu_ns() > 0,
        "the maker thread accounts for itself"
    );
}

#[test]
fn a_filled_container_keeps_the_bytes_of_its_making_and_cannot_be_written_after() {
    let pool = Pool::new(640 * 480, 2).unwrap();
    let (tx, rx) = UnixStream::pair().unwrap();
    let (mut a, mut b) = (Domain::new(), Domain::new());
    let mut frame = pattern(640 * 480, 3);
    frame[..16].copy_from_slice(b"filled-marker-01");
    let id = a.alloc_filled(&pool, &frame).unwrap();
    // The sender's buffer changes after the container is made: the container does not.
    let sent = frame.clone();
    frame.fill(0xEE);
    // A back door: the container's file opened again for writing, before it is given up.
    let doors = reopen_files_starting_with(b"filled-marker-01");
    assert_eq!(doors.len(), 1, "the container's file, found by its bytes");
    a.write(tx.as_fd(), id).unwrap();
    for door in &doors {
        assert!(
            door.write_at(b"changed", 0).is_err(),
            "sealed against writes"
        );
        assert!(door.set_len(4096).is_err(), "sealed against shrinking");
    }
    let got = b.read(rx.as_fd(), 0, true).unwrap();
    assert!(b.map_read(got).unwrap() == sent.as_slice());
}

#[test]
fn a_pooled_container_drawn_in_place_cannot_be_changed_once_given_up() {
    let pool = Pool::new(5 * 4096, 1).unwrap();
    let (tx, rx) = UnixStream::pair().unwrap();
    let (mut a, mut b) = (Domain::new(), Domain::new());
    let id = a.alloc_pooled(&pool, 5 * 4096).unwrap();
    let data = {
        let mut d = pattern(5 * 4096, 9);
        d[..16].copy_from_slice(b"pooled-marker-02");
        d
    };
    a.map(id).unwrap().copy_from_slice(&data);
    let doors = reopen_files_starting_with(b"pooled-marker-02");
    assert_eq!(doors.len(), 1, "the container's file, found by its bytes");
    a.write(tx.as_fd(), id).unwrap();
    assert!(matches!(a.map(id), Err(ContainerError::NotOwned(_))));
    for door in &doors {
        assert!(
            door.write_at(b"changed", 0).is_err(),
            "sealed against writes"
        );
        assert!(
            zcio_vm::Mapping::shared_fd(door.as_fd(), 0, 4096, None).is_err(),
            "no writable shared mapping of a sealed file"
        );
    }
    let got = b.read(rx.as_fd(), 0, false).unwrap();
    let mut head = [0u8; 16];
    assert_eq!(b.peek(got, 0, &mut head).unwrap(), 16);
    assert_eq!(&head, b"pooled-marker-02");
    assert!(b.map_read(got).unwrap() == data.as_slice());
}

#[test]
fn lengths_a_pool_cannot_hold_are_refused_by_name() {
    assert!(Pool::new(0, 1).is_err());
    let pool = Pool::new(4096, 1).unwrap();
    let mut a = Domain::new();
    for e in [
        a.alloc_pooled(&pool, 4097).unwrap_err(),
        a.alloc_filled(&pool, &[1; 4097]).unwrap_err(),
    ] {
        assert!(e.to_string().contains("more bytes than the pool"), "{e}");
    }
    let e = a.alloc_filled(&pool, &[]).unwrap_err();
    assert!(e.to_string().contains("at least one byte"), "{e}");
    assert_eq!(a.owned(), 0);
    // The refusals wasted no file: the pool still hands one out.
    let id = a.alloc_filled(&pool, &[5; 10]).unwrap();
    assert_eq!(a.len(id).unwrap(), 10);
}

#[test]
fn peeking_reads_a_containers_bytes_without_mapping_it() {
    let (tx, rx) = UnixStream::pair().unwrap();
    let (mut a, mut b) = (Domain::new(), Domain::new());
    let data = pattern(10_000, 4);
    let id = a.alloc(data.len()).unwrap();
    a.map(id).unwrap().copy_from_slice(&data);
    let mut buf = [0u8; 32];
    assert_eq!(a.peek(id, 100, &mut buf).unwrap(), 32, "while filling");
    assert_eq!(buf, data[100..132]);
    a.write(tx.as_fd(), id).unwrap();
    let got = b.read(rx.as_fd(), 0, false).unwrap();
    assert_eq!(
        b.peek(got, 9_990, &mut buf).unwrap(),
        10,
        "up to the data's end"
    );
    assert_eq!(buf[..10], data[9_990..]);
    assert!(!b.is_mapped(got).unwrap(), "peeking maps nothing");
    assert_eq!(b.peek(got, 20_000, &mut buf).unwrap(), 0, "past the end");
    // The domain's own changes are what it peeks.
    b.map(got).unwrap()[0] = !data[0];
    assert_eq!(b.peek(got, 0, &mut buf[..1]).unwrap(), 1);
    assert_eq!(buf[0], !data[0]);
    let v = a.alloc_volatile(100).unwrap();
    let e = a.peek(v, 0, &mut buf).unwrap_err();
    assert!(e.to_string().contains("word by word"), "{e}");
}

#[test]
fn volatile_containers_kept_shown_travel_round_without_protection_changes() {
    use std::sync::atomic::Ordering;
    let (a_end, b_in) = UnixStream::pair().unwrap();
    let (b_back, a_back) = UnixStream::pair().unwrap();
    let mut a = Domain::new().keeping_shown();
    let mut b = Domain::accepting_volatile().keeping_shown();
    let id = a.alloc_volatile(640 * 480).unwrap();
    let first = a.map_words(id).unwrap().as_ptr();
    let mut id = id;
    for round in 0..4u64 {
        let w = a.map_words(id).unwrap();
        assert_eq!(w.as_ptr(), first, "the same mapping every round");
        zcio_vm::words::store(w, &[round, round + 1]);
        a.write(a_end.as_fd(), id).unwrap();
        assert!(matches!(a.map_words(id), Err(ContainerError::NotOwned(_))));
        assert_eq!(a.cached(), 1);
        let got = b.read(b_in.as_fd(), 0, true).unwrap();
        let w = b.map_words(got).unwrap();
        assert_eq!(w[0].load(Ordering::Relaxed), round);
        assert_eq!(w[1].load(Ordering::Relaxed), round + 1);
        w[2].store(round * 10, Ordering::Relaxed);
        b.write(b_back.as_fd(), got).unwrap();
        id = a.read(a_back.as_fd(), 0, true).unwrap();
        assert_eq!(
            a.map_words(id).unwrap()[2].load(Ordering::Relaxed),
            round * 10
        );
    }
}
