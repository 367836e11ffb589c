//! A receive path that fills pooled buffers: an io_uring *provided-buffer ring* whose buffers
//! belong to a [`BufferOwner`]:
//! - the slots of a [`PageStore`] (paper 002's DMA into discontiguous pages, as Linux offers it
//!   to a socket). Each receive takes whichever slot the kernel picks next from the ring; with
//!   several connections on one ring, a message's granules end up scattered over the store, as
//!   the paper's were, and [`crate::remap`] makes them contiguous again;
//! - buffers of a [`SharedWords`] mapping ([`SharedBuf`]): paper 001's fbufs originated by a
//!   device, a socket received straight into a data path's shared memory.
//!
//! Receives are synchronous: [`ProvidedRing::recv`] returns only once the kernel is done with
//! the request (a signal during the wait does not cut it short), so the kernel writes into the
//! owner's memory only while the owner is borrowed by that call. The buffers the ring holds
//! are owned by it until a receive hands one back filled, or [`ProvidedRing::take_back`]
//! returns them.

use crate::error::{Result, VmError};
use crate::mapping::{MapOptions, Mapping};
use crate::page::RawRange;
use crate::page::page_size;
use crate::remap::{PageStore, Slot};
use crate::shared::SharedWords;
use io_uring::{IoUring, cqueue, opcode, squeue, types};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicU16, Ordering};

/// The buffer group of a ring (one ring per io_uring instance here).
const GROUP: u16 = 0;

/// Memory whose buffers a [`ProvidedRing`] can hold for the kernel to fill.
///
/// # Safety
///
/// [`BufferOwner::buffer_range`] returns only ranges of memory that the owner keeps mapped,
/// and writable by this process, for as long as it lives, and that safe code reaches only
/// through the owner: either not at all while the ring holds the buffer (the buffer type is
/// owned, not `Clone`), or only in ways that tolerate another writer (shared memory read
/// word by word). The kernel writes into a held buffer only during [`ProvidedRing::recv`],
/// which borrows the owner mutably.
pub unsafe trait BufferOwner {
    /// A buffer, owned by whoever holds it.
    type Buf;
    /// The error of a receive into another owner than the ring's.
    const OTHER_OWNER: &'static str;
    /// The owner's identity: a ring takes buffers of one owner only.
    fn owner_id(&self) -> u64;
    /// Where `buf` lies, or why it is not one of this owner's buffers.
    fn buffer_range(&self, buf: &Self::Buf) -> Result<RawRange>;
}

// SAFETY: a slot's range is a granule of the store's private mapping, which lives as long as
// the store; slots are owned (not `Clone`) and the store's accessors take the slot, so no
// reference into a slot the ring holds exists.
unsafe impl BufferOwner for PageStore {
    type Buf = Slot;
    const OTHER_OWNER: &'static str = "a receive into another page store than the ring's";

    fn owner_id(&self) -> u64 {
        self.id()
    }

    fn buffer_range(&self, buf: &Slot) -> Result<RawRange> {
        if buf.store() != self.id() {
            return Err(VmError::Misuse {
                what: "a slot of another page store than the ring's",
            });
        }
        self.slot_range(buf)
    }
}

// SAFETY: a `SharedBuf` is made only by `SharedWords::ring_buf`, which checks that it lies
// inside the mapping and that the mapping is writable; the mapping lives as long as the
// `SharedWords`, and its memory is shared: safe code reads and writes it only word by word
// through atomics, which another writer (another process, or the kernel) may race with.
unsafe impl BufferOwner for SharedWords {
    type Buf = SharedBuf;
    const OTHER_OWNER: &'static str = "a receive into another shared mapping than the ring's";

    fn owner_id(&self) -> u64 {
        self.id()
    }

    fn buffer_range(&self, buf: &SharedBuf) -> Result<RawRange> {
        if buf.owner != self.id() {
            return Err(VmError::Misuse {
                what: "a buffer of another shared mapping than the ring's",
            });
        }
        Ok(RawRange {
            addr: self.addr() + buf.offset,
            len: buf.len,
        })
    }
}

/// A buffer of a [`SharedWords`] mapping for a [`ProvidedRing`] (see
/// [`SharedWords::ring_buf`]): owned by whoever holds it.
#[derive(Debug, PartialEq, Eq)]
pub struct SharedBuf {
    pub(crate) owner: u64,
    pub(crate) offset: usize,
    pub(crate) len: usize,
}

impl SharedBuf {
    /// Its offset in the mapping.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Its length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// An io_uring provided-buffer ring over the buffers of one owner (by default the slots of a
/// page store).
pub struct ProvidedRing<M: BufferOwner = PageStore> {
    uring: IoUring,
    /// The ring of `io_uring_buf` entries the kernel reads (registered; unregistered on drop,
    /// before this mapping goes).
    entries: Mapping,
    /// Entries (a power of two).
    capacity: u16,
    /// Next entry to fill (the ring's tail).
    tail: u16,
    /// The owner whose buffers the ring holds.
    owner: u64,
    /// Held buffers by buffer id, with their lengths.
    held: Vec<Option<(M::Buf, usize)>>,
    /// Why the ring takes no more receives (a submission the kernel refused).
    broken: Option<String>,
}

impl<M: BufferOwner> std::fmt::Debug for ProvidedRing<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProvidedRing")
            .field("capacity", &self.capacity)
            .field("held", &self.held())
            .finish()
    }
}

/// What one receive brought.
#[derive(Debug)]
pub enum Received<B = Slot> {
    /// `bytes` bytes at the start of `slot`.
    Data {
        /// The buffer (slot) the kernel filled (the caller's now).
        slot: B,
        /// Bytes received.
        bytes: usize,
    },
    /// The peer closed its end: nothing more will come.
    End,
}

impl<M: BufferOwner> ProvidedRing<M> {
    /// A ring of `capacity` entries (rounded up to a power of two, at most 32 768) for buffers
    /// of `owner`. Where the kernel has no provided-buffer rings (before 5.19, or io_uring
    /// disabled), the error says so.
    pub fn new(owner: &M, capacity: usize) -> Result<ProvidedRing<M>> {
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
        let entries = Mapping::anonymous(bytes, MapOptions::POPULATED)?;
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
            owner: owner.owner_id(),
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

    /// Hand a buffer of the owner to the ring, for the kernel to fill. A buffer of another
    /// owner, or one too many, is refused and handed back with the error.
    pub fn provide(
        &mut self,
        owner: &M,
        slot: M::Buf,
    ) -> std::result::Result<(), (VmError, M::Buf)> {
        if owner.owner_id() != self.owner {
            return Err((
                VmError::Misuse {
                    what: "a buffer of another owner than the ring's",
                },
                slot,
            ));
        }
        let range = match owner.buffer_range(&slot) {
            Ok(r) if r.len > 0 && r.len <= u32::MAX as usize => r,
            Ok(_) => {
                return Err((
                    VmError::Misuse {
                        what: "an empty buffer, or one of 4 GiB or more",
                    },
                    slot,
                ));
            }
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
        self.held[bid] = Some((slot, range.len));
        self.tail = self.tail.wrapping_add(1);
        self.tail_word().store(self.tail, Ordering::Release);
        Ok(())
    }

    /// Receive up to `len` bytes (at most the smallest held buffer's length: a granule of a
    /// page store) from the socket `fd` into the next buffer of the ring, waiting for all of
    /// them (`MSG_WAITALL`) unless the peer closes first.
    pub fn recv(
        &mut self,
        owner: &mut M,
        fd: BorrowedFd<'_>,
        len: usize,
    ) -> Result<Received<M::Buf>> {
        if owner.owner_id() != self.owner {
            return Err(VmError::Misuse {
                what: M::OTHER_OWNER,
            });
        }
        let smallest = self
            .held
            .iter()
            .flatten()
            .map(|(_, l)| *l)
            .min()
            .unwrap_or(0);
        if len == 0 || (smallest > 0 && len > smallest) {
            return Err(VmError::TooLarge {
                what: "a receive into one buffer",
                value: len,
                limit: smallest,
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
        // SAFETY: the request names no user memory but the ring's provided buffers: buffers of
        // `owner`, which this call borrows mutably and which the ring owns (`BufferOwner`'s
        // contract: mapped and writable, and reached by safe code only in ways that tolerate
        // the write); the call waits below for the completion, so the kernel writes only
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
            .and_then(|bid| self.held.get_mut(bid as usize).and_then(Option::take))
            .map(|(b, _)| b);
        let res = cqe.result();
        if res < 0 {
            if let Some(s) = slot {
                self.provide(owner, s).map_err(|(e, _)| e)?;
            }
            return Err(VmError::sys(
                "io_uring recv into a provided buffer",
                std::io::Error::from_raw_os_error(-res),
            ));
        }
        match (slot, res) {
            (Some(s), 0) => {
                self.provide(owner, s).map_err(|(e, _)| e)?;
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

    /// Take back every buffer the ring holds (they stay in the ring's entries, never to be
    /// used: the ring is empty afterwards and takes new ones with [`ProvidedRing::provide`]).
    pub fn take_back(&mut self) -> Vec<M::Buf> {
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
        self.held
            .iter_mut()
            .filter_map(Option::take)
            .map(|(b, _)| b)
            .collect()
    }
}

impl<M: BufferOwner> Drop for ProvidedRing<M> {
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
        store.put_all(ring.take_back()).unwrap();
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

    #[test]
    fn a_shared_mapping_lends_only_its_own_writable_buffers() {
        use crate::protect::Access;
        let fd = crate::mapping::memfd("zcio-ring-test", 4 * page_size()).unwrap();
        let mut rw =
            SharedWords::map_anywhere(fd.as_fd(), 0, 4 * page_size(), Access::ReadWrite).unwrap();
        let ro =
            SharedWords::map_anywhere(fd.as_fd(), 0, 4 * page_size(), Access::ReadOnly).unwrap();
        let e = ro.ring_buf(0, 100).unwrap_err();
        assert!(e.to_string().contains("may not write"), "{e}");
        assert!(rw.ring_buf(0, 0).is_err());
        assert!(rw.ring_buf(3 * page_size(), page_size() + 1).is_err());
        let mut ring = match ProvidedRing::new(&rw, 2) {
            Ok(r) => r,
            Err(e @ VmError::Unsupported { .. }) => {
                crate::skip::skip(crate::skip::Capability::IoUring, &e.to_string());
                return;
            }
            Err(e) => panic!("{e}"),
        };
        // A buffer of another mapping of the same memory is not this one's.
        let other =
            SharedWords::map_anywhere(fd.as_fd(), 0, 4 * page_size(), Access::ReadWrite).unwrap();
        let (e, _) = ring
            .provide(&rw, other.ring_buf(0, 100).unwrap())
            .unwrap_err();
        assert!(e.to_string().contains("another shared mapping"), "{e}");
        ring.provide(&rw, rw.ring_buf(page_size() + 8, 100).unwrap())
            .unwrap();
        let (a, mut peer) = UnixStream::pair().unwrap();
        peer.write_all(b"into shared memory").unwrap();
        let Received::Data { slot, bytes } = ring.recv(&mut rw, a.as_fd(), 18).unwrap() else {
            panic!("no data")
        };
        assert_eq!((slot.offset(), bytes), (page_size() + 8, 18));
        let got: Vec<u8> = ro
            .words(page_size() + 8, 24)
            .iter()
            .flat_map(|w| w.load(Ordering::Relaxed).to_le_bytes())
            .take(18)
            .collect();
        assert_eq!(got, b"into shared memory", "seen through another mapping");
    }
}
