//! The real producers: a file read with `O_DIRECT` into scattered store slots, and sockets
//! received through an io_uring provided-buffer ring of store slots; each message reassembled by
//! remapping and checked byte for byte against what was sent.

use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use zcio_vm::remap::{Granule, PageStore, Slot};
use zcio_vmmr::pool::BitmapPool;
use zcio_vmmr::producer::{FileProducer, ProducerError, SocketProducer};
use zcio_vmmr::reassemble::{Path, Reassembler};

/// Reassemble the message in `slots` by remapping, check it byte for byte against `want`
/// (`what` names it in a failure), and free it: the slots it goes back to.
fn remapped(
    r: &mut Reassembler<BitmapPool>,
    store: &mut PageStore,
    slots: Vec<Slot>,
    want: &[u8],
    what: &str,
) -> Vec<Slot> {
    let m = r
        .reassemble(store, slots, want.len())
        .map_err(|e| e.error)
        .unwrap();
    assert_eq!(m.path(), Path::Remapped, "{what}");
    assert!(r.bytes(&m).unwrap() == want, "{what}");
    r.free(store, m).map_err(|e| e.error).unwrap()
}

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
            let what = format!("{granule:?}: {len} bytes at {offset}");
            let want = &data[offset..offset + len];
            let back = remapped(&mut r, &mut store, slots, want, &what);
            store.put_all(back).unwrap();
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

/// Bytes of message `m` (a different pattern per message).
fn pattern(m: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| ((i ^ m.wrapping_mul(0x9E37_79B9)).wrapping_mul(2_654_435_761) >> 11) as u8)
        .collect()
}

/// A socket producer, or the reason this machine has none (then the test skips).
fn socket_producer(store: &mut PageStore, buffers: usize) -> Option<SocketProducer> {
    match SocketProducer::new(store, buffers) {
        Ok(p) => Some(p),
        Err(ProducerError::Vm(e @ zcio_vm::VmError::Unsupported { .. })) => {
            zcio_vm::skip::skip(zcio_vm::skip::Capability::IoUring, &e.to_string());
            None
        }
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn messages_received_on_two_connections_interleave_and_come_out_byte_exact() {
    for granule in [Granule::Page, Granule::Huge] {
        let g = granule.bytes();
        let mut store = PageStore::new(64, granule).unwrap();
        let Some(mut p) = socket_producer(&mut store, 48) else {
            return;
        };
        assert_eq!((p.buffers(), store.free()), (48, 16));
        let mut r = Reassembler::new(BitmapPool::new(64), granule).unwrap();
        let (a, a_peer) = UnixStream::pair().unwrap();
        let (b, b_peer) = UnixStream::pair().unwrap();
        let sizes: Vec<(usize, usize)> =
            vec![(1, g), (3 * g - 7, 5 * g + 1), (g + 1, 9), (7 * g, 2 * g)];
        // One writer per connection (as two clients would be): the receiver takes a granule
        // from each in turn, so a single writer would block on one while the other starves.
        let writers: Vec<_> = [(a_peer, 0u32), (b_peer, 1)]
            .into_iter()
            .map(|(mut peer, i)| {
                let sizes = sizes.clone();
                std::thread::spawn(move || {
                    for (k, (la, lb)) in sizes.iter().enumerate() {
                        let len = if i == 0 { *la } else { *lb };
                        peer.write_all(&pattern(2 * k as u32 + i, len)).unwrap();
                    }
                })
            })
            .collect();
        for (k, (la, lb)) in sizes.iter().enumerate() {
            let got = p
                .receive(&mut store, &[a.as_fd(), b.as_fd()], &[*la, *lb])
                .unwrap();
            assert_eq!(got.len(), 2);
            // While both messages last, their granules alternate in the ring: neither lies in
            // adjacent slots.
            if got[0].len() > 1 && got[1].len() > 1 {
                for slots in &got {
                    assert!(
                        slots.windows(2).any(|w| w[1].index() != w[0].index() + 1),
                        "{:?}",
                        slots.iter().map(|s| s.index()).collect::<Vec<_>>()
                    );
                }
            }
            for (i, (slots, len)) in got.into_iter().zip([*la, *lb]).enumerate() {
                assert_eq!(slots.len(), len.div_ceil(g));
                let what = format!(
                    "{} message {k} on connection {i}: {len} bytes",
                    granule.name()
                );
                let want = pattern(2 * k as u32 + i as u32, len);
                let slots = remapped(&mut r, &mut store, slots, &want, &what);
                p.give_back(&store, slots).unwrap();
            }
        }
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(p.buffers(), 48, "every slot went back to the ring");
        p.close(&mut store).unwrap();
        assert_eq!(store.free(), 64);
    }
}

#[test]
fn a_connection_that_closes_mid_message_is_named_and_no_slot_is_lost() {
    let g = Granule::Page.bytes();
    let mut store = PageStore::new(32, Granule::Page).unwrap();
    let Some(mut p) = socket_producer(&mut store, 16) else {
        return;
    };
    let (a, mut a_peer) = UnixStream::pair().unwrap();
    let (b, mut b_peer) = UnixStream::pair().unwrap();
    a_peer.write_all(&pattern(1, 3 * g)).unwrap();
    // The second connection sends a granule and a half, then dies.
    b_peer.write_all(&pattern(2, g + g / 2)).unwrap();
    drop(b_peer);
    let e = p
        .receive(&mut store, &[a.as_fd(), b.as_fd()], &[3 * g, 3 * g])
        .unwrap_err();
    match e {
        ProducerError::ShortMessage {
            connection,
            received,
            len,
        } => assert_eq!((connection, received, len), (1, g + g / 2, 3 * g)),
        e => panic!("{e}"),
    }
    assert!(e.to_string().contains("connection 1 closed after"), "{e}");
    assert_eq!(
        p.buffers(),
        16,
        "the slots received so far went back to the ring"
    );
    // More than the ring holds is refused before anything is received.
    drop(a_peer);
    let e = p.receive(&mut store, &[a.as_fd()], &[17 * g]).unwrap_err();
    assert!(
        matches!(
            e,
            ProducerError::NoSlots {
                needed: 17,
                free: 16,
                ..
            }
        ),
        "{e}"
    );
    // A slot of another store is refused by the ring.
    let mut other = PageStore::new(2, Granule::Page).unwrap();
    let foreign = other.take().unwrap();
    assert!(p.give_back(&store, vec![foreign]).is_err());
    p.close(&mut store).unwrap();
    assert_eq!(store.free(), 32);
}
