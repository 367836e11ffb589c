//! A receive path that fills pooled page buffers: an io_uring *provided-buffer ring* whose
//! buffers are the slots of a [`PageStore`] (paper 002's DMA into discontiguous pages, as Linux
//! offers it to a socket). Each receive takes whichever slot the kernel picks next from the
//! ring; with several connections on one ring, a message's granules end up scattered over the
//! store, as the paper's were, and [`crate::remap`] makes them contiguous again.
//!
//! Receives are synchronous: [`ProvidedRing::recv`] returns only once the kernel is done with
//! the request (a signal during the wait does not cut it short), so the kernel writes into the
//! store only while the store is borrowed by that call. The slots the ring holds are owned by
//! it until a receive hands one back filled, or [`ProvidedRing::take_back`] returns them.

use crate::error::{Result, VmError};
use crate::mapping::{MapOptions, Mapping};
use crate::page::page_size;
use crate::remap::{PageStore, Slot};
use io_uring::{IoUring, cqueue, opcode, squeue, types};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU16, Ordering};

/// The buffer group of a ring (one ring per io_uring instance here).
const GROUP: u16 = 0;

/// An io_uring provided-buffer ring over the slots of one page store.
pub struct ProvidedRing {
    uring: IoUring,
    /// The ring of `io_uring_buf` entries the kernel reads (registered; unregistered on drop,
    /// before this mapping goes).
    entries: Mapping,
    /// Entries (a power of two).
    capacity: u16,
    /// Next entry to fill (the ring's tail).
    tail: u16,
    /// The store whose slots the ring holds.
    store: u64,
    /// Held slots by buffer id.
    held: Vec<Option<Slot>>,
    /// Why the ring takes no more receives (a submission the kernel refused).
    broken: Option<String>,
}

impl std::fmt::Debug for ProvidedRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProvidedRing")
            .field("capacity", &self.capacity)
            .field("held", &self.held())
            .finish()
    }
}

/// What one receive brought.
#[derive(Debug)]
pub enum Received {
    /// `bytes` bytes at the start of `slot`.
    Data {
        /// The slot the kernel filled (the caller's now).
        slot: Slot,
        /// Bytes received.
        bytes: usize,
    },
    /// The peer closed its end: nothing more will come.
    End,
}

impl ProvidedRing {
    /// A ring of `capacity` entries (rounded up to a power of two, at most 32 768) for slots of
    /// `store`. Where the kernel has no provided-buffer rings (before 5.19, or io_uring
    /// disabled), the error says so.
    pub fn new(store: &PageStore, capacity: usize) -> Result<ProvidedRing> {
        let capacity = capacity.max(1).next_power_of_two();
        if capacity > 1 << 15 {
            return Err(VmError::TooLarge {
                what: "provided-buffer ring entries",
                value: capacity,
                limit: 1 << 15,
            });
        }
        let unsupported = |e: std::io::Error| VmError::Unsupported {
            feature: "io_uring provided-buffer rings",
            reason: e.to_string(),
        };
        let uring = IoUring::new(8).map_err(unsupported)?;
        let bytes = (capacity * std::mem::size_of::<types::BufRingEntry>()).max(page_size());
        let entries = Mapping::anonymous(
            bytes,
            MapOptions {
                populate: true,
                ..Default::default()
            },
        )?;
        // SAFETY: the entries' memory is a page-aligned private mapping of `capacity` entries,
        // owned by the ring and kept until drop, which unregisters the group before the
        // mapping is unmapped (fields drop after `Drop::drop`).
        unsafe {
            uring.submitter().register_buf_ring_with_flags(
                entries.addr() as u64,
                capacity as u16,
                GROUP,
                0,
            )
        }
        .map_err(unsupported)?;
        Ok(ProvidedRing {
            uring,
            entries,
            capacity: capacity as u16,
            tail: 0,
            store: store.id(),
            held: (0..capacity).map(|_| None).collect(),
            broken: None,
        })
    }

    /// Slots the ring holds.
    pub fn held(&self) -> usize {
        self.held.iter().filter(|s| s.is_some()).count()
    }

    /// Entries.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    fn tail_word(&self) -> &AtomicU16 {
        // SAFETY: the ring's tail is the `resv` field of its first entry, a u16 at a 2-byte
        // aligned offset inside the entries' mapping, which lives as long as `self`; the
        // kernel only reads it, and it is only ever accessed atomically here.
        unsafe {
            &*(types::BufRingEntry::tail(self.entries.addr() as *const types::BufRingEntry)
                as *const AtomicU16)
        }
    }

    /// Hand a slot of the store to the ring, for the kernel to fill. A slot of another store,
    /// or one too many, is refused and handed back with the error.
    pub fn provide(
        &mut self,
        store: &PageStore,
        slot: Slot,
    ) -> std::result::Result<(), (VmError, Slot)> {
        if slot.store() != self.store || store.id() != self.store {
            return Err((
                VmError::Misuse {
                    what: "a slot of another page store than the ring's",
                },
                slot,
            ));
        }
        let range = match store.slot_range(&slot) {
            Ok(r) => r,
            Err(e) => return Err((e, slot)),
        };
        let Some(bid) = self.held.iter().position(|s| s.is_none()) else {
            return Err((
                VmError::Misuse {
                    what: "more slots than the provided-buffer ring has entries",
                },
                slot,
            ));
        };
        let i = (self.tail & (self.capacity - 1)) as usize;
        // SAFETY: entry `i` lies inside the entries' mapping (i < capacity); the kernel reads
        // only entries between its head and the published tail, and `i` is not among them
        // until the tail is advanced below; fields are plain integers. Only the entry's addr,
        // len and bid are written: its `resv` is the ring's tail when i is 0.
        unsafe {
            let e = &mut *(self.entries.addr() as *mut types::BufRingEntry).add(i);
            e.set_addr(range.addr as u64);
            e.set_len(range.len as u32);
            e.set_bid(bid as u16);
        }
        self.held[bid] = Some(slot);
        self.tail = self.tail.wrapping_add(1);
        self.tail_word().store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Receive up to `len` bytes (at most a granule) from the socket `fd` into the next slot
    /// of the ring, waiting for all of them (`MSG_WAITALL`) unless the peer closes first.
    pub fn recv(
        &mut self,
        store: &mut PageStore,
        fd: BorrowedFd<'_>,
        len: usize,
    ) -> Result<Received> {
        if store.id() != self.store {
            return Err(VmError::Misuse {
                what: "a receive into another page store than the ring's",
            });
        }
        let granule = store.granule().bytes();
        if len == 0 || len > granule {
            return Err(VmError::TooLarge {
                what: "a receive into one slot",
                value: len,
                limit: granule,
            });
        }
        if self.held() == 0 {
            return Err(VmError::Misuse {
                what: "a receive with no slot provided to the ring",
            });
        }
        if let Some(why) = &self.broken {
            return Err(VmError::Unsupported {
                feature: "receives on this ring",
                reason: format!("an earlier submission failed: {why}"),
            });
        }
        let sqe = opcode::Recv::new(types::Fd(fd.as_raw_fd()), std::ptr::null_mut(), len as u32)
            .buf_group(GROUP)
            .flags(libc::MSG_WAITALL)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT)
            .user_data(1);
        // SAFETY: the request names no user memory but the ring's provided buffers: slots of
        // `store`, which this call borrows mutably (no reference into it is alive) and which
        // the ring owns; the call waits below for the completion, so the kernel writes only
        // while this borrow lasts.
        unsafe { self.uring.submission().push(&sqe) }.map_err(|_| VmError::Misuse {
            what: "a receive while the submission queue is full",
        })?;
        let cqe = loop {
            match self.uring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                // Not taken by the kernel (still in the submission queue): nothing is in
                // flight, so the error can be returned. Taken: the request may still be in
                // flight; wait it out, never returning before its completion.
                Err(e) => {
                    if !self.uring.submission().is_empty() {
                        // The entry stays queued, and a later submission would carry it: the
                        // ring takes no more receives.
                        self.broken = Some(e.to_string());
                        return Err(VmError::sys("io_uring submit", e));
                    }
                    std::thread::yield_now();
                }
            }
            if let Some(c) = self.uring.completion().next() {
                break c;
            }
        };
        let slot = cqueue::buffer_select(cqe.flags())
            .and_then(|bid| self.held.get_mut(bid as usize).and_then(Option::take));
        let res = cqe.result();
        if res < 0 {
            if let Some(s) = slot {
                self.provide(store, s).map_err(|(e, _)| e)?;
            }
            return Err(VmError::sys(
                "io_uring recv into a provided buffer",
                std::io::Error::from_raw_os_error(-res),
            ));
        }
        match (slot, res) {
            (Some(s), 0) => {
                self.provide(store, s).map_err(|(e, _)| e)?;
                Ok(Received::End)
            }
            (None, 0) => Ok(Received::End),
            (Some(slot), n) => Ok(Received::Data {
                slot,
                bytes: n as usize,
            }),
            (None, _) => Err(VmError::Misuse {
                what: "the kernel reported data without a provided buffer",
            }),
        }
    }

    /// Take back every slot the ring holds (they stay in the ring's entries, never to be used:
    /// the ring is empty afterwards and takes new slots with [`ProvidedRing::provide`]).
    pub fn take_back(&mut self) -> Vec<Slot> {
        // The kernel may still read the published entries: make them unreachable by
        // re-registering the group empty.
        let _ = self.uring.submitter().unregister_buf_ring(GROUP);
        // The kernel starts an empty ring at head 0: the tail in memory must say so too.
        self.tail_word().store(0, Ordering::Release);
        // SAFETY: as in `new`: the same mapping, owned by the ring, unregistered before drop.
        let again = unsafe {
            self.uring.submitter().register_buf_ring_with_flags(
                self.entries.addr() as u64,
                self.capacity,
                GROUP,
                0,
            )
        };
        debug_assert!(again.is_ok(), "re-registering the ring: {again:?}");
        self.tail = 0;
        self.held.iter_mut().filter_map(Option::take).collect()
    }
}

impl Drop for ProvidedRing {
    fn drop(&mut self) {
        // Before the entries' mapping goes (fields drop after this).
        let _ = self.uring.submitter().unregister_buf_ring(GROUP);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remap::Granule;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_receive_fills_the_next_slot_and_bad_requests_are_refused() {
        let mut store = PageStore::new(8, Granule::Page).unwrap();
        let mut ring = match ProvidedRing::new(&store, 3) {
            Ok(r) => r,
            Err(e @ VmError::Unsupported { .. }) => {
                crate::skip::skip(crate::skip::Capability::IoUring, &e.to_string());
                return;
            }
            Err(e) => panic!("{e}"),
        };
        assert_eq!(ring.capacity(), 4);
        let (a, mut peer) = UnixStream::pair().unwrap();
        // Nothing provided yet.
        let e = ring.recv(&mut store, a.as_fd(), 10).unwrap_err();
        assert!(e.to_string().contains("no slot provided"), "{e}");
        for _ in 0..4 {
            let s = store.take().unwrap();
            ring.provide(&store, s).unwrap();
        }
        let s = store.take().unwrap();
        let (e, s) = ring.provide(&store, s).unwrap_err();
        assert!(e.to_string().contains("more slots than"), "{e}");
        store.put(s).unwrap();
        // Lengths: none, more than a granule.
        assert!(ring.recv(&mut store, a.as_fd(), 0).is_err());
        assert!(ring.recv(&mut store, a.as_fd(), page_size() + 1).is_err());
        // Another store.
        let mut other = PageStore::new(1, Granule::Page).unwrap();
        let e = ring.recv(&mut other, a.as_fd(), 10).unwrap_err();
        assert!(e.to_string().contains("another page store"), "{e}");
        peer.write_all(b"hello, slot").unwrap();
        let Received::Data { slot, bytes } = ring.recv(&mut store, a.as_fd(), 11).unwrap() else {
            panic!("no data")
        };
        assert_eq!(bytes, 11);
        assert_eq!(&store.bytes(&slot).unwrap()[..11], b"hello, slot");
        assert_eq!(ring.held(), 3);
        drop(peer);
        assert!(matches!(
            ring.recv(&mut store, a.as_fd(), 11).unwrap(),
            Received::End
        ));
        assert_eq!(ring.held(), 3, "the end takes no slot");
        store.put(slot).unwrap();
        for s in ring.take_back() {
            store.put(s).unwrap();
        }
        assert_eq!((ring.held(), store.free()), (0, 8));
        // The emptied ring takes slots again and receives into them.
        let (a, mut peer) = UnixStream::pair().unwrap();
        let s = store.take().unwrap();
        ring.provide(&store, s).unwrap();
        peer.write_all(b"again").unwrap();
        let Received::Data { slot, bytes } = ring.recv(&mut store, a.as_fd(), 5).unwrap() else {
            panic!("no data")
        };
        assert_eq!(
            (&store.bytes(&slot).unwrap()[..bytes], bytes),
            (&b"again"[..], 5)
        );
        store.put(slot).unwrap();
    }
}
