//! Fbufs originated by a device: a socket received straight into a path's fbufs. Every byte
//! lands in an fbuf of the path, at the address every process of the path knows, and what
//! arrives is exactly what the peer wrote; bad requests are refused by name, and the fbufs
//! come back.

use std::collections::HashSet;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use zcio_fbufs::device::SocketSource;
use zcio_fbufs::path::{FbufError, Originator, PathMemory, Variant};
use zcio_fbufs::region::RegionRead;
use zcio_vm::protect::Access;
use zcio_vm::shared::SharedWords;

const SIZE: usize = 16 << 10;

fn source(o: &mut Originator, buffers: usize) -> Option<SocketSource> {
    match SocketSource::new(o, buffers, SIZE) {
        Ok(s) => Some(s),
        Err(FbufError::Vm(e @ zcio_vm::VmError::Unsupported { .. })) => {
            zcio_vm::skip::skip(zcio_vm::skip::Capability::IoUring, &e.to_string());
            None
        }
        Err(e) => panic!("{e}"),
    }
}

/// A path of `chunks` chunks of `chunk_bytes`, and its originator.
fn originated(chunk_bytes: usize, chunks: usize, variant: Variant) -> (PathMemory, Originator) {
    let path = PathMemory::create(chunk_bytes, chunks, variant).unwrap();
    let o = path.originator().unwrap();
    (path, o)
}

fn message(k: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31) ^ k).collect()
}

#[test]
fn a_socket_lands_in_fbufs_a_receiver_reads_and_every_byte_is_the_peers() {
    for variant in [Variant::CACHED_VOLATILE, Variant::CACHED] {
        let (path, mut o) = originated(64 << 10, 4, variant);
        let Some(mut src) = source(&mut o, 4) else {
            return;
        };
        assert_eq!(src.held(), 4);
        // A chunk lent to the ring is live: a budget of nothing retires none of it.
        o.set_cache_budget(0).unwrap();
        assert_eq!(o.chunks_used(), 1);
        let (a, mut peer) = UnixStream::pair().unwrap();
        let lens = [10_000, 1, SIZE, 4096];
        let writer = std::thread::spawn(move || {
            for (k, len) in lens.iter().enumerate() {
                peer.write_all(&message(k as u8, *len)).unwrap();
            }
        });
        let mut seen = HashSet::new();
        for (k, len) in lens.iter().enumerate() {
            let f = src.recv(&mut o, a.as_fd(), *len).unwrap().expect("data");
            assert_eq!(f.len(), *len as u64);
            assert!(path.info().contains(f.addr(), f.len()), "in the path");
            assert!(seen.insert(f.addr()), "a fresh fbuf each time");
            let sent = o.send(f, 1).unwrap();
            src.refill(&mut o).unwrap();
            // In the path's memory as the peer wrote it, for the originator and the others.
            let mut got = vec![0u8; *len];
            assert!(o.read_bytes(sent.addr, &mut got));
            assert!(got == message(k as u8, *len), "message {k}, {variant:?}");
            // What every other process of the path sees: the chunk's memory through its
            // read-only descriptor (mapped anywhere here, where the path's address is taken).
            let (cb, off) = (64 << 10, (sent.addr - path.info().addr as u64) as usize);
            let view =
                SharedWords::map_anywhere(o.chunk_fd(off / cb).unwrap(), 0, cb, Access::ReadOnly)
                    .unwrap();
            let words = view.words(off % cb, len.next_multiple_of(8));
            let seen: Vec<u8> = words
                .iter()
                .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
                .take(*len)
                .collect();
            assert!(seen == got, "the other processes' view, message {k}");
            o.freed(sent).unwrap();
        }
        writer.join().unwrap();
        assert_eq!(src.held(), 4, "refilled");
        src.close(&mut o).unwrap();
        assert_eq!(o.outstanding(), 0);
        // Every fbuf back, nothing live: under the budget of nothing, every chunk goes.
        assert_eq!((o.chunks_used(), o.cached_bytes()), (0, 0));
    }
}

#[test]
fn bad_requests_are_refused_by_name_and_the_fbufs_come_back() {
    let variant = Variant::CACHED_VOLATILE;
    let (path, mut o) = originated(64 << 10, 2, variant);
    assert!(matches!(
        SocketSource::new(&mut o, 2, 0),
        Err(FbufError::Empty)
    ));
    let Some(mut src) = source(&mut o, 2) else {
        return;
    };
    let (a, peer) = UnixStream::pair().unwrap();
    // More than one fbuf holds.
    let e = src.recv(&mut o, a.as_fd(), SIZE + 1).unwrap_err();
    assert!(e.to_string().contains("one buffer"), "{e}");
    // Another path's originator.
    let (_other, mut o2) = originated(64 << 10, 2, variant);
    let e = src.recv(&mut o2, a.as_fd(), 10).unwrap_err();
    assert!(e.to_string().contains("another stitched range"), "{e}");
    // The peer closes: no fbuf taken.
    drop(peer);
    assert!(src.recv(&mut o, a.as_fd(), 10).unwrap().is_none());
    assert_eq!(src.held(), 2);
    // A quota too small for the ring: refused, nothing kept.
    let (_small, mut o3) = originated(SIZE, 1, variant);
    assert!(matches!(
        SocketSource::new(&mut o3, 2, SIZE),
        Err(FbufError::Quota { .. })
    ));
    assert_eq!(o3.cached(), 1, "the one fbuf it got went back");
    // Closed: both fbufs back on the free list, reused by the next allocation.
    src.close(&mut o).unwrap();
    assert_eq!(o.cached(), 2);
    let f = o.alloc(SIZE).unwrap();
    assert!(path.info().contains(f.addr(), f.len()));
    assert_eq!(o.cached(), 1);
}

#[test]
fn an_fbuf_the_caller_allocated_is_received_into_and_a_small_one_is_refused_and_given_back() {
    let (_path, mut o) = originated(64 << 10, 2, Variant::CACHED_VOLATILE);
    let Some(mut src) = source(&mut o, 2) else {
        return;
    };
    // Smaller than the source's size: refused by name, and back on the free list.
    let small = o.alloc(SIZE / 2).unwrap();
    let at = small.addr();
    let e = src.provide(&mut o, small).unwrap_err();
    assert!(e.to_string().contains("at least the source's size"), "{e}");
    let again = o.alloc(SIZE / 2).unwrap();
    assert_eq!(
        again.addr(),
        at,
        "the refused fbuf went back to the free list"
    );
    o.free(again).unwrap();
    let (a, mut peer) = UnixStream::pair().unwrap();
    for k in 1..=3u8 {
        peer.write_all(&message(k, SIZE)).unwrap();
    }
    // Beyond the ring's room: refused, and given back.
    let extra = o.alloc(SIZE).unwrap();
    let extra_at = extra.addr();
    assert!(src.provide(&mut o, extra).is_err());
    let again = o.alloc(SIZE).unwrap();
    assert_eq!(
        again.addr(),
        extra_at,
        "the fbuf the full ring refused went back"
    );
    o.free(again).unwrap();
    // One received, then one of the caller's own provided in its place: every receive lands
    // in an fbuf holding exactly what the peer wrote, the provided one among them.
    let mut addrs = HashSet::new();
    let mut mine_at = 0;
    for k in 1..=3u8 {
        let f = src.recv(&mut o, a.as_fd(), SIZE).unwrap().expect("data");
        let mut got = vec![0u8; SIZE];
        let sent = o.send(f, 1).unwrap();
        assert!(o.read_bytes(sent.addr, &mut got));
        assert!(got == message(k, SIZE), "message {k}");
        addrs.insert(sent.addr);
        if k == 1 {
            let mine = o.alloc(SIZE).unwrap();
            mine_at = mine.addr();
            src.provide(&mut o, mine).unwrap();
        }
        o.freed(sent).unwrap();
    }
    assert!(
        addrs.contains(&mine_at),
        "the provided fbuf was received into"
    );
    assert_eq!(src.held(), 0);
    src.close(&mut o).unwrap();
    assert_eq!(o.outstanding(), 0);
}
