//! Reassembly (paper 002, §2-4): a message held in granules scattered over a [`PageStore`]
//! becomes one contiguous buffer in a [`RemapSpace`] by moving its pages into a run of free
//! granules that a [`PagePool`] finds; freeing the message moves the pages back into their
//! slots and gives the run back to the pool.
//!
//! The reassembled buffer is the application's: [`Reassembler::bytes`] and
//! [`Reassembler::bytes_mut`] reach it until [`Reassembler::free`] takes it back. Nothing is
//! copied unless the kernel refuses to move a page (pinned), or cannot move pages at all; every
//! message says which ([`Message::moved`]).

use crate::pool::{PagePool, PoolError};
use std::sync::atomic::{AtomicU64, Ordering};
use zcio_vm::VmError;
use zcio_vm::remap::{Granule, Moved, PageStore, RemapSpace, Slot};

/// What went wrong in a reassembly.
#[derive(Debug, thiserror::Error)]
pub enum VmmrError {
    /// The page pool refused (exhausted, or misused).
    #[error(transparent)]
    Pool(#[from] PoolError),
    /// The VM layer refused.
    #[error(transparent)]
    Vm(#[from] VmError),
    /// A message of another reassembler.
    #[error("this message was reassembled elsewhere (another reassembler)")]
    Foreign,
    /// A message without a granule, or a length its granules cannot hold.
    #[error("a message of {len} bytes in {granules} granules of {granule} bytes: {why}")]
    BadLength {
        /// Bytes claimed.
        len: usize,
        /// Granules given.
        granules: usize,
        /// Granule size.
        granule: usize,
        /// The rule broken.
        why: &'static str,
    },
}

/// An operation refused, with what it was given handed back (nothing is lost).
#[derive(Debug)]
pub struct Refused<T> {
    /// Why.
    pub error: VmmrError,
    /// What the operation was given.
    pub given_back: T,
}

fn refuse<T, E: Into<VmmrError>>(error: E, given_back: T) -> Box<Refused<T>> {
    Box::new(Refused {
        error: error.into(),
        given_back,
    })
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A reassembled message: a run of the remap space holding its bytes, and the slots its pages
/// came from (they go back there when it is freed).
#[derive(Debug)]
pub struct Message {
    owner: u64,
    first: usize,
    len: usize,
    slots: Vec<Slot>,
    moved: Moved,
}

impl Message {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first granule of its run in the remap space.
    pub fn first_granule(&self) -> usize {
        self.first
    }

    /// How its pages got there: moved, or copied where the kernel would not move them.
    pub fn moved(&self) -> Moved {
        self.moved
    }
}

/// A remap space and the page pool that says which of its granules are free.
pub struct Reassembler<P: PagePool> {
    space: RemapSpace,
    pool: P,
    id: u64,
    live: usize,
}

impl<P: PagePool> Reassembler<P> {
    /// A reassembler over a fresh remap space of `pool.capacity()` granules.
    pub fn new(pool: P, granule: Granule) -> Result<Self, VmmrError> {
        Ok(Reassembler {
            space: RemapSpace::new(pool.capacity(), granule)?,
            pool,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            live: 0,
        })
    }

    /// The page pool.
    pub fn pool(&self) -> &P {
        &self.pool
    }

    /// The page pool, to shape it (the benchmarks' fragmented maps).
    pub fn pool_mut(&mut self) -> &mut P {
        &mut self.pool
    }

    /// Messages reassembled and not yet freed.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Reassemble the `len` bytes held in `slots`, in order (every granule full but the last).
    /// On an error the slots come back with it untouched, so nothing is lost.
    pub fn reassemble(
        &mut self,
        store: &mut PageStore,
        slots: Vec<Slot>,
        len: usize,
    ) -> Result<Message, Box<Refused<Vec<Slot>>>> {
        let g = self.space.granule().bytes();
        let n = slots.len();
        let bad = |why| VmmrError::BadLength {
            len,
            granules: n,
            granule: g,
            why,
        };
        if n == 0 || len == 0 {
            return Err(refuse(bad("a message holds at least one byte"), slots));
        }
        if len > n * g || len <= (n - 1) * g {
            return Err(refuse(
                bad("every granule but the last must be full"),
                slots,
            ));
        }
        let first = match self.pool.alloc(n) {
            Ok(f) => f,
            Err(e) => return Err(refuse(e, slots)),
        };
        match self.space.move_in(store, first, &slots) {
            Ok(moved) => {
                self.live += 1;
                Ok(Message {
                    owner: self.id,
                    first,
                    len,
                    slots,
                    moved,
                })
            }
            Err(e) => {
                let _ = self.pool.free(first, n);
                Err(refuse(e, slots))
            }
        }
    }

    fn check(&self, m: &Message) -> Result<(), VmmrError> {
        if m.owner != self.id {
            return Err(VmmrError::Foreign);
        }
        Ok(())
    }

    /// The message's bytes, contiguous.
    pub fn bytes(&self, m: &Message) -> Result<&[u8], VmmrError> {
        self.check(m)?;
        Ok(&self.space.bytes(m.first, m.slots.len())?[..m.len])
    }

    /// The message's bytes, to change them in place.
    pub fn bytes_mut(&mut self, m: &Message) -> Result<&mut [u8], VmmrError> {
        self.check(m)?;
        Ok(&mut self.space.bytes_mut(m.first, m.slots.len())?[..m.len])
    }

    /// Free a message: its pages go back into its slots (returned, full of its bytes, for the
    /// producer to reuse) and its run goes back to the pool. A message of another reassembler,
    /// or one whose pages cannot be moved back, is handed back with the error.
    pub fn free(
        &mut self,
        store: &mut PageStore,
        m: Message,
    ) -> Result<Vec<Slot>, Box<Refused<Message>>> {
        if let Err(e) = self.check(&m) {
            return Err(refuse(e, m));
        }
        if let Err(e) = self.space.move_out(store, m.first, &m.slots) {
            return Err(refuse(e, m));
        }
        let freed = self.pool.free(m.first, m.slots.len());
        debug_assert!(freed.is_ok(), "a run this reassembler allocated: {freed:?}");
        self.live -= 1;
        Ok(m.slots)
    }
}
