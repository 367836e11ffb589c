//! Reassembly (paper 002, §2-4): a message held in granules scattered over a [`PageStore`]
//! becomes one contiguous buffer in a [`RemapSpace`] by moving its pages into a run of free
//! granules that a [`PagePool`] finds; freeing the message moves the pages back into their
//! slots and gives the run back to the pool.
//!
//! The reassembled buffer is the application's: [`Reassembler::bytes`] and
//! [`Reassembler::bytes_mut`] reach it until [`Reassembler::free`] takes it back.
//!
//! Remapping does not always pay: a move costs a system call per run of adjacent granules, and
//! a few scattered 4 KiB pages copy faster than they move. With [`Policy::Adaptive`] the
//! reassembler predicts both costs per message from a [`Calibration`] measured on this machine
//! and copies the message instead (into a second space whose pages stay, warm) when copying is
//! predicted to be as fast; every message says which path it took ([`Message::path`]) and how
//! many bytes were moved or copied ([`Message::moved`]). [`Policy::AdaptiveCycle`] weighs the
//! whole remap cycle instead (moved in, and back out when the message is freed:
//! [`CycleCalibration`]).

pub use crate::cycle::CycleCalibration;
use crate::pool::{BitmapPool, PagePool, PoolError};
use std::sync::atomic::{AtomicU64, Ordering};
use zcio_vm::VmError;
pub use zcio_vm::remap::Calibration;
use zcio_vm::remap::{Granule, Moved, PageStore, RemapSpace, Slot};
use zcio_vm::{MapOptions, Mapping};

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
    path: Path,
}

/// How a message was made contiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    /// Its pages were moved into the remap space.
    Remapped,
    /// Its bytes were copied into the copy space (the slots keep their pages).
    Copied,
}

impl Path {
    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Path::Remapped => "remap",
            Path::Copied => "copy",
        }
    }
}

/// Which path a reassembler takes.
#[derive(Debug, Clone, PartialEq)]
pub enum Policy {
    /// Always move pages.
    Remap,
    /// Always copy.
    Copy,
    /// Per message, whichever the calibration predicts faster (copy on a tie).
    Adaptive(Box<Calibration>),
    /// Per message, whichever is predicted faster over the message's whole life: the remap
    /// cycle (moved in, and back out when freed) against the copy (copy on a tie).
    AdaptiveCycle(Box<CycleCalibration>),
}

impl Policy {
    /// The copy costs an adaptive policy predicts from.
    fn copy_costs(&self) -> Option<&Calibration> {
        match self {
            Policy::Adaptive(c) => Some(c),
            Policy::AdaptiveCycle(c) => Some(&c.move_in),
            Policy::Remap | Policy::Copy => None,
        }
    }

    /// The predicted cost of remapping `granules` granules in `calls` runs, by an adaptive
    /// policy's measure (move-in only, or the whole cycle).
    fn remap_ns(&self, granules: usize, calls: usize) -> Option<f64> {
        match self {
            Policy::Adaptive(c) => Some(c.remap_ns(granules, calls)),
            Policy::AdaptiveCycle(c) => Some(c.remap_ns(granules, calls)),
            Policy::Remap | Policy::Copy => None,
        }
    }
}

/// Copy the first `len` bytes held in `slots`, in order, into `dst`.
fn copy_slots(
    store: &PageStore,
    slots: &[Slot],
    dst: &mut [u8],
    len: usize,
) -> Result<(), VmError> {
    let g = store.granule().bytes();
    for (k, s) in slots.iter().enumerate() {
        let n = g.min(len - k * g);
        dst[k * g..k * g + n].copy_from_slice(&store.bytes(s)?[..n]);
    }
    Ok(())
}

/// Runs of slots adjacent in the store: the move calls a message costs.
fn runs(slots: &[Slot]) -> usize {
    1 + slots
        .windows(2)
        .filter(|w| w[1].index() != w[0].index() + 1)
        .count()
}

impl Message {
    /// How it was made contiguous.
    pub fn path(&self) -> Path {
        self.path
    }

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
///
/// # Examples
///
/// Three pages scattered in a store, made one contiguous message by moving them (a real
/// producer fills the slots: see [`crate::producer`] and
/// `crates/zcio/examples/vmmr_reassembly.rs`).
///
/// ```
/// use zcio_vm::remap::{Granule, PageStore};
/// use zcio_vmmr::pool::BitmapPool;
/// use zcio_vmmr::reassemble::Reassembler;
///
/// let g = Granule::Page.bytes();
/// let mut store = PageStore::new(8, Granule::Page)?;
/// // Slots 5, 1 and 3 of the store hold the message's pages, in that order.
/// let mut slots = Vec::new();
/// for (k, index) in [5, 1, 3].into_iter().enumerate() {
///     let s = store.take_index(index).expect("a free slot");
///     store.bytes_mut(&s)?.fill(b'a' + k as u8);
///     slots.push(s);
/// }
/// let len = 2 * g + 100; // the last page partly filled
///
/// let mut r = Reassembler::new(BitmapPool::new(store.capacity()), Granule::Page)?;
/// let m = r.reassemble(&mut store, slots, len).map_err(|refused| refused.error)?;
/// let bytes = r.bytes(&m)?; // contiguous
/// assert_eq!(bytes.len(), len);
/// assert!(bytes[..g].iter().all(|&b| b == b'a') && bytes[2 * g..].iter().all(|&b| b == b'c'));
/// println!("{}: {:?}", m.path().name(), m.moved()); // moved, or copied where it cannot be
///
/// // Freeing moves the pages back into their slots.
/// let back = r.free(&mut store, m).map_err(|refused| refused.error)?;
/// store.put_all(back)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Reassembler<P: PagePool> {
    space: RemapSpace,
    pool: P,
    policy: Policy,
    /// Where copied messages go: an ordinary mapping (in transparent huge pages where the
    /// kernel gives them, as a copy's destination would be) whose pages stay from one message
    /// to the next (made on the first copy), and the pool of its granules.
    copies: Option<(Mapping, BitmapPool)>,
    /// With [`Policy::Adaptive`], the predicted cost per byte of copying a message of `n`
    /// granules, by `n` (up to [`DECISION_TABLE`]): read per message instead of evaluating
    /// the calibration's curve (logarithms), so that deciding costs next to nothing.
    copy_per_byte: Vec<f64>,
    id: u64,
    live: usize,
    copied_back: usize,
}

/// Message sizes (granules) whose copy cost an adaptive reassembler tabulates.
const DECISION_TABLE: usize = 8192;

impl<P: PagePool> Reassembler<P> {
    /// A reassembler over a fresh remap space of `pool.capacity()` granules, always moving
    /// pages ([`Policy::Remap`]).
    pub fn new(pool: P, granule: Granule) -> Result<Self, VmmrError> {
        Self::with_policy(pool, granule, Policy::Remap)
    }

    /// A reassembler with a policy for choosing between moving and copying.
    pub fn with_policy(pool: P, granule: Granule, policy: Policy) -> Result<Self, VmmrError> {
        let g = granule.bytes();
        let copy_per_byte = match policy.copy_costs() {
            Some(c) => (0..=DECISION_TABLE.min(pool.capacity()))
                .map(|n| c.copy_ns(n.max(1) * g) / (n.max(1) * g) as f64)
                .collect(),
            None => Vec::new(),
        };
        Ok(Reassembler {
            space: RemapSpace::new(pool.capacity(), granule)?,
            pool,
            policy,
            copies: None,
            copy_per_byte,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            live: 0,
            copied_back: 0,
        })
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Which path a message of `slots` would take.
    pub fn choose(&self, slots: &[Slot], len: usize) -> Path {
        let (Some(c), Some(one_call)) = (
            self.policy.copy_costs(),
            self.policy.remap_ns(slots.len(), 1),
        ) else {
            return match self.policy {
                Policy::Copy => Path::Copied,
                _ => Path::Remapped,
            };
        };
        let n = slots.len();
        let copy = match self.copy_per_byte.get(n) {
            Some(per_byte) => per_byte * len as f64,
            None => c.copy_ns(len),
        };
        // Moving in one call is the best a layout can do: below that, copy without counting
        // the runs.
        let remap = || {
            self.policy
                .remap_ns(n, runs(slots))
                .unwrap_or(f64::INFINITY)
        };
        if one_call >= copy || remap() >= copy {
            Path::Copied
        } else {
            Path::Remapped
        }
    }

    /// The page pool.
    pub fn pool(&self) -> &P {
        &self.pool
    }

    /// The page pool, to shape it (the benchmarks' fragmented maps).
    pub fn pool_mut(&mut self) -> &mut P {
        &mut self.pool
    }

    /// Bytes copied rather than moved when messages' pages went back to their slots (pages
    /// the kernel would not move), over this reassembler's life.
    pub fn copied_back(&self) -> usize {
        self.copied_back
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
        if self.choose(&slots, len) == Path::Copied {
            return self.copy(store, slots, len);
        }
        let first = match self.pool.alloc(n) {
            Ok(f) => f,
            Err(e) => return Err(refuse(e, slots)),
        };
        match self.space.move_in(store, first, &slots) {
            Ok(moved) => Ok(self.issue(first, len, slots, moved, Path::Remapped)),
            Err(e) => {
                let _ = self.pool.free(first, n);
                Err(refuse(e, slots))
            }
        }
    }

    /// A message of this reassembler's, counted live: `len` bytes at granule `first` of its
    /// range (or of its copies), from `slots`.
    fn issue(
        &mut self,
        first: usize,
        len: usize,
        slots: Vec<Slot>,
        moved: Moved,
        path: Path,
    ) -> Message {
        self.live += 1;
        Message {
            owner: self.id,
            first,
            len,
            slots,
            moved,
            path,
        }
    }

    fn copy(
        &mut self,
        store: &mut PageStore,
        slots: Vec<Slot>,
        len: usize,
    ) -> Result<Message, Box<Refused<Vec<Slot>>>> {
        let n = slots.len();
        let g = self.space.granule().bytes();
        if self.copies.is_none() {
            let cap = self.space.capacity();
            match Mapping::anonymous(cap * g, MapOptions::HUGE) {
                Ok(map) => self.copies = Some((map, BitmapPool::new(cap))),
                Err(e) => return Err(refuse(e, slots)),
            }
        }
        let (map, pool) = self.copies.as_mut().expect("made above");
        let first = match pool.alloc(n) {
            Ok(f) => f,
            Err(e) => return Err(refuse(e, slots)),
        };
        let dst = &mut map.as_mut_slice()[first * g..(first + n) * g];
        let done = copy_slots(store, &slots, dst, len);
        if let Err(e) = done {
            let _ = pool.free(first, n);
            return Err(refuse(e, slots));
        }
        let moved = Moved {
            moved: 0,
            copied: len,
            calls: 0,
        };
        Ok(self.issue(first, len, slots, moved, Path::Copied))
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
        match m.path {
            Path::Remapped => Ok(&self.space.bytes(m.first, m.slots.len())?[..m.len]),
            Path::Copied => {
                let (map, _) = self.copies.as_ref().ok_or(VmmrError::Foreign)?;
                let at = m.first * self.space.granule().bytes();
                Ok(&map.as_slice()[at..at + m.len])
            }
        }
    }

    /// The message's bytes, to change them in place.
    pub fn bytes_mut(&mut self, m: &Message) -> Result<&mut [u8], VmmrError> {
        self.check(m)?;
        match m.path {
            Path::Remapped => Ok(&mut self.space.bytes_mut(m.first, m.slots.len())?[..m.len]),
            Path::Copied => {
                let at = m.first * self.space.granule().bytes();
                let (map, _) = self.copies.as_mut().ok_or(VmmrError::Foreign)?;
                Ok(&mut map.as_mut_slice()[at..at + m.len])
            }
        }
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
        let freed = match m.path {
            Path::Remapped => {
                match self.space.move_out(store, m.first, &m.slots) {
                    Ok(back) => self.copied_back += back.copied,
                    Err(e) => return Err(refuse(e, m)),
                }
                self.pool.free(m.first, m.slots.len())
            }
            // A copy's slots never gave up their pages; its run's pages stay for the next copy.
            Path::Copied => match self.copies.as_mut() {
                Some((_, pool)) => pool.free(m.first, m.slots.len()),
                None => return Err(refuse(VmmrError::Foreign, m)),
            },
        };
        debug_assert!(freed.is_ok(), "a run this reassembler allocated: {freed:?}");
        self.live -= 1;
        Ok(m.slots)
    }
}
