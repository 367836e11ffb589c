//! Container shipping: ownership moves with the pages (the sender can reach them no more, a
//! second write fails), containers forwarded without mapping arrive byte-exact, a receiver's
//! changes travel on, a sender that keeps a writable mapping is refused, the stack and the heap
//! cannot be written, and files are paths too. Volatile containers are shared in place, come
//! back to their hidden mappings, and are refused by domains that do not take them; a write
//! that fails keeps the container. (A domain that goes leaking nothing is in
//! `container_leak.rs`, a process of its own so that no other test's descriptors count.)

use std::io::{Seek, SeekFrom, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use zcio_sequoia::container::{ContainerError, Domain};

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(5) as u8 ^ salt)
        .collect()
}

#[test]
fn writing_a_container_gives_it_away_and_reading_gains_it() {
    let (a_end, b_end) = UnixStream::pair().unwrap();
    let mut a = Domain::new();
    let mut b = Domain::new();
    let len = 3 * 4096 - 5;
    let data = pattern(len, 1);
    let id = a.alloc(len).unwrap();
    a.map(id).unwrap().copy_from_slice(&data);
    a.write(a_end.as_fd(), id).unwrap();
    // The sender can reach the pages no more, and cannot give them away twice.
    assert!(matches!(a.map(id), Err(ContainerError::NotOwned(_))));
    let e = a.write(a_end.as_fd(), id).unwrap_err();
    assert!(e.to_string().contains("not owned by this domain"), "{e}");
    assert_eq!(a.owned(), 0);
    let got = b.read(b_end.as_fd(), 0, true).unwrap();
    assert_eq!(b.len(got).unwrap(), len);
    assert!(b.is_mapped(got).unwrap());
    assert!(b.map_read(got).unwrap() == data.as_slice());
}

#[test]
fn containers_forwarded_unmapped_arrive_exact_and_changes_travel_on() {
    let (a_end, b_in) = UnixStream::pair().unwrap();
    let (b_out, c_in) = UnixStream::pair().unwrap();
    let (c_out, d_in) = UnixStream::pair().unwrap();
    let (mut a, mut b, mut c, mut d) = (Domain::new(), Domain::new(), Domain::new(), Domain::new());
    for (k, len) in [1usize, 4096, 4097, 640 * 480].into_iter().enumerate() {
        let data = pattern(len, k as u8);
        let id = a.alloc(len).unwrap();
        a.map(id).unwrap().copy_from_slice(&data);
        a.write(a_end.as_fd(), id).unwrap();
        // B forwards without mapping.
        let id = b.read(b_in.as_fd(), 0, false).unwrap();
        assert!(!b.is_mapped(id).unwrap());
        b.write(b_out.as_fd(), id).unwrap();
        // C reads, changes the first byte, writes on.
        let id = c.read(c_in.as_fd(), 0, true).unwrap();
        assert!(
            c.map_read(id).unwrap() == data.as_slice(),
            "{len} bytes at C"
        );
        c.map(id).unwrap()[0] ^= 0xFF;
        c.write(c_out.as_fd(), id).unwrap();
        let id = d.read(d_in.as_fd(), 0, true).unwrap();
        let mut want = data.clone();
        want[0] ^= 0xFF;
        assert!(
            d.map_read(id).unwrap() == want.as_slice(),
            "{len} bytes at D"
        );
        d.free(id).unwrap();
    }
    assert_eq!((a.owned(), b.owned(), c.owned(), d.owned()), (0, 0, 0, 0));
}

#[test]
fn a_sender_that_keeps_the_pages_writable_is_refused() {
    let (tx, rx) = UnixStream::pair().unwrap();
    let ps = zcio_vm::page_size();
    let raw = zcio_vm::mapping::memfd("evil", ps).unwrap();
    let keep = zcio_vm::Mapping::shared_fd(raw.as_fd(), 0, ps, None).unwrap();
    let mut head = [0u8; 16];
    head[..8].copy_from_slice(&(ps as u64).to_le_bytes());
    zcio_vm::wire::send_with_fds(tx.as_fd(), &head, &[raw.as_fd()]).unwrap();
    let mut b = Domain::new();
    let e = b.read(rx.as_fd(), 0, true).unwrap_err();
    assert!(
        e.to_string().contains("still has mapped for writing"),
        "{e}"
    );
    assert_eq!(b.owned(), 0);
    drop(keep);
    // A message without a container, and a closed path.
    zcio_vm::wire::send_with_fds(tx.as_fd(), b"12345678", &[]).unwrap();
    let e = b.read(rx.as_fd(), 0, true).unwrap_err();
    assert!(matches!(e, ContainerError::Malformed(_)), "{e}");
    // The writer says it is done: the path ends; a closed socket without that is a writer
    // gone mid-stream, not an end.
    Domain::new().finish(tx.as_fd()).unwrap();
    assert!(matches!(
        b.read(rx.as_fd(), 0, true),
        Err(ContainerError::End)
    ));
    drop(tx);
    let e = b.read(rx.as_fd(), 0, true).unwrap_err();
    assert!(matches!(e, ContainerError::PeerGone { .. }), "{e}");
    assert!(e.to_string().contains("died"), "{e}");
}

#[test]
fn the_stack_and_the_heap_cannot_be_written() {
    let (tx, _rx) = UnixStream::pair().unwrap();
    let mut a = Domain::new();
    let on_stack = [1u8, 2, 3];
    let e = a.write_bytes(tx.as_fd(), &on_stack).unwrap_err();
    assert!(e.to_string().contains("not a container"), "{e}");
    let on_heap = vec![7u8; 4096];
    assert!(matches!(
        a.write_bytes(tx.as_fd(), &on_heap),
        Err(ContainerError::NotAContainer { .. })
    ));
    // A copy of a container's bytes is not the container.
    let id = a.alloc(100).unwrap();
    a.map(id).unwrap()[..3].copy_from_slice(b"abc");
    let copy = a.map_read(id).unwrap().to_vec();
    assert!(matches!(
        a.write_bytes(tx.as_fd(), &copy),
        Err(ContainerError::NotAContainer { len: 100, .. })
    ));
    assert_eq!(a.owned(), 1, "nothing was given away");
    assert!(matches!(a.alloc(0), Err(ContainerError::BadLength { .. })));
}

#[test]
fn files_are_paths_too() {
    let data = pattern(10_000, 9);
    let mut a = Domain::new();
    let id = a.alloc(data.len()).unwrap();
    a.map(id).unwrap().copy_from_slice(&data);
    let mut f = tempfile::tempfile().unwrap();
    a.write(f.as_fd(), id).unwrap();
    assert_eq!(a.owned(), 0);
    f.seek(SeekFrom::Start(0)).unwrap();
    let mut b = Domain::new();
    let id = b.read(f.as_fd(), 4096, false).unwrap();
    assert_eq!(b.len(id).unwrap(), 4096);
    assert!(b.map_read(id).unwrap() == &data[..4096]);
    let id2 = b.read(f.as_fd(), 100_000, true).unwrap();
    assert!(
        b.map_read(id2).unwrap() == &data[4096..],
        "the rest of the file"
    );
    assert!(matches!(
        b.read(f.as_fd(), 10, true),
        Err(ContainerError::End)
    ));
    // A container read from one file written to another.
    let mut g = tempfile::tempfile().unwrap();
    b.write(g.as_fd(), id).unwrap();
    g.flush().unwrap();
    assert_eq!(
        std::fs::read(format!("/proc/self/fd/{}", {
            use std::os::fd::AsRawFd;
            g.as_raw_fd()
        }))
        .unwrap(),
        &data[..4096]
    );
}

fn load_bytes(words: &[std::sync::atomic::AtomicU64], len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = words
        .iter()
        .flat_map(|w| w.load(std::sync::atomic::Ordering::Relaxed).to_le_bytes())
        .collect();
    v.truncate(len);
    v
}

fn store_bytes(words: &[std::sync::atomic::AtomicU64], data: &[u8]) {
    for (w, chunk) in words.iter().zip(data.chunks(8)) {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        w.store(u64::from_le_bytes(b), std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn volatile_containers_travel_in_place_and_come_back_to_their_hidden_mapping() {
    let (a_end, b_in) = UnixStream::pair().unwrap();
    let (b_out, c_in) = UnixStream::pair().unwrap();
    let (c_back, a_back) = UnixStream::pair().unwrap();
    let mut a = Domain::new();
    let mut b = Domain::accepting_volatile();
    let mut c = Domain::accepting_volatile();
    let len = 640 * 480;
    let id = a.alloc_volatile(len).unwrap();
    assert!(a.is_volatile(id).unwrap());
    let first = a.map_words(id).unwrap().as_ptr();
    for round in 0..3u8 {
        let id = if round == 0 {
            id
        } else {
            // Back from C: the same mapping, shown again, with C's change.
            let id = a.read(a_back.as_fd(), 0, true).unwrap();
            assert_eq!(a.cached(), 0, "taken out of the region cache");
            let w = a.map_words(id).unwrap();
            assert_eq!(w.as_ptr(), first, "the hidden mapping is reused");
            assert_eq!(load_bytes(w, 1), [(round - 1) ^ 0xFF]);
            id
        };
        let data = pattern(len, round);
        store_bytes(a.map_words(id).unwrap(), &data);
        a.write(a_end.as_fd(), id).unwrap();
        assert!(matches!(a.map_words(id), Err(ContainerError::NotOwned(_))));
        assert_eq!(a.cached(), 1, "its mapping hidden and kept");
        // B forwards it unmapped.
        let id = b.read(b_in.as_fd(), 0, false).unwrap();
        assert!(!b.is_mapped(id).unwrap());
        b.write(b_out.as_fd(), id).unwrap();
        assert_eq!(
            (b.owned(), b.cached()),
            (0, 1),
            "kept unmapped, once, for its return"
        );
        // C sees the bytes in place, changes the first, and gives it back.
        let id = c.read(c_in.as_fd(), 0, true).unwrap();
        assert_eq!(c.len(id).unwrap(), len);
        assert!(
            load_bytes(c.map_words(id).unwrap(), len) == data,
            "round {round} at C"
        );
        let e = c.map_read(id).unwrap_err();
        assert!(e.to_string().contains("word by word"), "{e}");
        let mut first_byte = data[..8].to_vec();
        first_byte[0] = round ^ 0xFF;
        store_bytes(&c.map_words(id).unwrap()[..1], &first_byte);
        c.write(c_back.as_fd(), id).unwrap();
    }
    assert_eq!((a.owned(), b.owned(), c.owned()), (0, 0, 0));
}

#[test]
fn a_domain_that_takes_no_volatile_container_refuses_one_and_kinds_do_not_mix() {
    let (tx, rx) = UnixStream::pair().unwrap();
    let mut a = Domain::new();
    let mut b = Domain::new();
    let id = a.alloc_volatile(100).unwrap();
    a.write(tx.as_fd(), id).unwrap();
    let e = b.read(rx.as_fd(), 0, true).unwrap_err();
    assert!(matches!(e, ContainerError::VolatileRefused), "{e}");
    assert!(e.to_string().contains("takes only sealed ones"), "{e}");
    assert_eq!(b.owned(), 0);
    let s = a.alloc(100).unwrap();
    let e = a.map_words(s).unwrap_err();
    assert!(e.to_string().contains("reached as bytes"), "{e}");
    assert!(!a.is_volatile(s).unwrap());
    // An unknown kind is malformed.
    let mut head = [0u8; 16];
    head[..8].copy_from_slice(&1u64.to_le_bytes());
    head[8..].copy_from_slice(&7u64.to_le_bytes());
    let f = zcio_vm::mapping::memfd("k", 4096).unwrap();
    zcio_vm::wire::send_with_fds(tx.as_fd(), &head, &[f.as_fd()]).unwrap();
    let e = b.read(rx.as_fd(), 0, true).unwrap_err();
    assert!(e.to_string().contains("kind 7"), "{e}");
}

#[test]
fn a_write_to_a_path_that_is_gone_keeps_the_container() {
    let (tx, rx) = UnixStream::pair().unwrap();
    drop(rx);
    let mut a = Domain::new();
    let data = pattern(5000, 9);
    let s = a.alloc(5000).unwrap();
    a.map(s).unwrap().copy_from_slice(&data);
    let v = a.alloc_volatile(5000).unwrap();
    store_bytes(a.map_words(v).unwrap(), &data);
    for id in [s, v] {
        let e = a.write(tx.as_fd(), id).unwrap_err();
        assert!(e.to_string().to_lowercase().contains("pipe"), "{e}");
    }
    assert_eq!(a.owned(), 2);
    assert!(a.map_read(s).unwrap() == data.as_slice());
    assert!(load_bytes(a.map_words(v).unwrap(), 5000) == data);
}
