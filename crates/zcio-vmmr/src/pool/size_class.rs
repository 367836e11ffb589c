//! Bitmaps of pre-concatenated blocks (§4.3, §5): one bitmap per size class, and an overflow
//! region.

use super::{
    BitmapPool, PagePool, PoolError, SIZE_CLASS_NAMES, SIZE_CLASSES, check_give_back,
    check_request, exhausted,
};
use std::collections::BTreeMap;

/// How a [`SizeClassPool`] divides its range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeClassSplit {
    /// Blocks of each class, in the order of [`SIZE_CLASSES`].
    pub blocks: [usize; 5],
    /// Granules of the overflow region (a [`BitmapPool`] for requests above 256 granules and
    /// for requests no class can serve).
    pub overflow: usize,
}

impl SizeClassSplit {
    /// The default split of `capacity` granules: six equal shares, one per class (rounded down
    /// to whole blocks) and one for the overflow region, which also takes what rounding leaves.
    pub fn even(capacity: usize) -> Self {
        let share = capacity / 6;
        let blocks = SIZE_CLASSES.map(|size| share / size);
        let in_classes: usize = blocks.iter().zip(SIZE_CLASSES).map(|(b, s)| b * s).sum();
        Self {
            blocks,
            overflow: capacity - in_classes,
        }
    }

    /// Granules in all, or `None` if the sum overflows.
    pub fn capacity(&self) -> Option<usize> {
        self.blocks
            .iter()
            .zip(SIZE_CLASSES)
            .try_fold(self.overflow, |acc, (&b, s)| {
                acc.checked_add(b.checked_mul(s)?)
            })
    }
}

/// Where one size class lies and how full it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassStats {
    /// The paper's name of the class.
    pub name: &'static str,
    /// Granules per block.
    pub block: usize,
    /// First granule of the class's region.
    pub start: usize,
    /// Blocks in the class.
    pub blocks: usize,
    /// Blocks free.
    pub free_blocks: usize,
}

/// One allocation of a [`SizeClassPool`]: where it is and what it set aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Block {
    /// First granule.
    pub first: usize,
    /// Granules set aside (the class's block size, or the exact request in the overflow
    /// region); the request was for at most this many.
    pub granules: usize,
    /// The size class (index into [`SIZE_CLASSES`]), `None` for the overflow region.
    pub class: Option<usize>,
}

#[derive(Clone)]
struct Class {
    block: usize,
    start: usize,
    /// One bit per block.
    map: BitmapPool,
    /// `n - 1` of the request each allocated block serves.
    asked: Vec<u8>,
}

#[derive(Clone)]
struct Overflow {
    start: usize,
    map: BitmapPool,
    /// Live allocations: local first granule → n.
    live: BTreeMap<usize, usize>,
}

/// Bitmaps of pre-concatenated blocks (§4.3, §5): one bitmap per size class of 1, 4, 16, 64
/// and 256 granules, each bit a whole block, so a request needs a one-bit search.
///
/// `alloc(n)` takes one block from the smallest class whose block holds `n` (rounding `n` up:
/// a request of 17 takes a block of 64 and wastes 47 granules, counted by
/// [`wasted_granules`](Self::wasted_granules)); when that class has no free block it falls
/// back to the next larger class, and after the largest to the overflow region. Requests above
/// 256 granules go straight to the overflow region, a [`BitmapPool`] searched first fit for
/// exactly `n` granules (no rounding); with no overflow region they get
/// [`PoolError::TooLarge`] naming the largest class.
///
/// `free(first, n)` takes back exactly one allocation, with the `n` it was asked for:
/// anything else is [`PoolError::NotARun`] (or [`PoolError::DoubleFree`] when `first` lies in
/// a free block).
///
/// Layout: the classes' regions from the largest block to the smallest, so that every block
/// is aligned to its own size, then the overflow region:
///
/// ```text
/// [ huge ×256 | large ×64 | medium ×16 | small ×4 | tiny ×1 | overflow ]
/// 0                                                                capacity
/// ```
///
/// ```
/// use zcio_vmmr::pool::{PagePool, SizeClassPool, SizeClassSplit};
/// let mut pool = SizeClassPool::new(SizeClassSplit { blocks: [8, 8, 8, 8, 8], overflow: 1024 })?;
/// let b = pool.alloc_block(17)?;
/// assert_eq!((b.granules, b.class), (64, Some(3)));
/// assert_eq!(pool.wasted_granules(), 47);
/// let big = pool.alloc(300)?; // overflow region, exact
/// pool.free(b.first, 17)?;
/// pool.free(big, 300)?;
/// # Ok::<(), zcio_vmmr::pool::PoolError>(())
/// ```
#[derive(Clone)]
pub struct SizeClassPool {
    classes: [Class; 5],
    overflow: Overflow,
    capacity: usize,
    wasted: usize,
}

zcio_vm::debug_summary!(SizeClassPool, |s|
    capacity: s.capacity, classes: s.class_stats(), overflow: s.overflow.map, wasted: s.wasted);

impl SizeClassPool {
    /// A pool divided as `split` says.
    ///
    /// Errors: [`PoolError::CapacityTooLarge`] when the granules add up past `usize::MAX`;
    /// [`PoolError::OutOfMemory`] where its bookkeeping (a bit per block and per overflow
    /// granule, a byte per block) exceeds the memory available.
    pub fn new(split: SizeClassSplit) -> Result<Self, PoolError> {
        let capacity = split.capacity().ok_or(PoolError::CapacityTooLarge {
            pool: "size-classes",
            capacity: usize::MAX,
            limit: usize::MAX,
        })?;
        let blocks = split
            .blocks
            .iter()
            .fold(0usize, |a, b| a.saturating_add(*b));
        let bytes = blocks
            .saturating_add(blocks / 8)
            .saturating_add(split.overflow / 8);
        super::within_memory("size-classes", capacity, bytes)?;
        Ok(Self::build(split, capacity))
    }

    /// A pool of `capacity` granules with the default split, [`SizeClassSplit::even`].
    pub fn with_capacity(capacity: usize) -> Self {
        // An even split adds up to its capacity.
        Self::build(SizeClassSplit::even(capacity), capacity)
    }

    /// The pool for `split`, whose granules add up to `capacity`.
    fn build(split: SizeClassSplit, capacity: usize) -> Self {
        let mut start = 0usize;
        let mut class = |c: usize| {
            let block = SIZE_CLASSES[c];
            let blocks = split.blocks[c];
            let class = Class {
                block,
                start,
                map: BitmapPool::new(blocks),
                asked: vec![0; blocks],
            };
            start += blocks * block;
            class
        };
        // Largest blocks first, so every block is aligned to its size.
        let [c4, c3, c2, c1, c0] = [4, 3, 2, 1, 0].map(&mut class);
        let overflow = Overflow {
            start,
            map: BitmapPool::new(split.overflow),
            live: BTreeMap::new(),
        };
        Self {
            classes: [c0, c1, c2, c3, c4],
            overflow,
            capacity,
            wasted: 0,
        }
    }

    /// The split the pool was built with.
    pub fn split(&self) -> SizeClassSplit {
        SizeClassSplit {
            blocks: self.classes.each_ref().map(|c| c.map.capacity()),
            overflow: self.overflow.map.capacity(),
        }
    }

    /// Where each class lies and how many of its blocks are free, smallest class first.
    pub fn class_stats(&self) -> [ClassStats; 5] {
        let mut i = 0;
        self.classes.each_ref().map(|c| {
            let s = ClassStats {
                name: SIZE_CLASS_NAMES[i],
                block: c.block,
                start: c.start,
                blocks: c.map.capacity(),
                free_blocks: c.map.free_granules(),
            };
            i += 1;
            s
        })
    }

    /// First granule of the overflow region.
    pub fn overflow_start(&self) -> usize {
        self.overflow.start
    }

    /// Granules of the overflow region.
    pub fn overflow_capacity(&self) -> usize {
        self.overflow.map.capacity()
    }

    /// Granules set aside by live allocations beyond what they asked for (rounding up to a
    /// block, or falling back to a larger class).
    pub fn wasted_granules(&self) -> usize {
        self.wasted
    }

    /// Like [`alloc`](PagePool::alloc), saying which block it took.
    pub fn alloc_block(&mut self, n: usize) -> Result<Block, PoolError> {
        check_request(n, self.largest_alloc())?;
        if n <= SIZE_CLASSES[4] {
            let smallest = SIZE_CLASSES.iter().position(|&s| s >= n).unwrap_or(4);
            for c in smallest..SIZE_CLASSES.len() {
                let class = &mut self.classes[c];
                if let Ok(b) = class.map.alloc(1) {
                    class.asked[b] = (n - 1) as u8;
                    self.wasted += class.block - n;
                    return Ok(Block {
                        first: class.start + b * class.block,
                        granules: class.block,
                        class: Some(c),
                    });
                }
            }
        }
        if n <= self.overflow.map.capacity() {
            if let Ok(local) = self.overflow.map.alloc(n) {
                self.overflow.live.insert(local, n);
                return Ok(Block {
                    first: self.overflow.start + local,
                    granules: n,
                    class: None,
                });
            }
        }
        let class_largest = self
            .classes
            .iter()
            .filter(|c| c.map.free_granules() > 0)
            .map(|c| c.block)
            .max()
            .unwrap_or(0);
        let largest = class_largest.max(self.overflow.map.largest_free_run());
        Err(exhausted(self, n, largest))
    }
}

impl PagePool for SizeClassPool {
    fn alloc(&mut self, n: usize) -> Result<usize, PoolError> {
        self.alloc_block(n).map(|b| b.first)
    }

    /// Takes back exactly one allocation: `first` as returned, `n` as asked.
    fn free(&mut self, first: usize, n: usize) -> Result<(), PoolError> {
        check_give_back(first, n, self.capacity)?;
        let not_a_run = PoolError::NotARun {
            first,
            n,
            pool: self.name(),
        };
        if first >= self.overflow.start {
            let local = first - self.overflow.start;
            return match self.overflow.live.get(&local) {
                Some(&asked) if asked == n => {
                    self.overflow.live.remove(&local);
                    self.overflow.map.free(local, n)
                }
                Some(_) => Err(not_a_run),
                None if self.overflow.map.is_free(local) => {
                    Err(PoolError::DoubleFree { granule: first })
                }
                None => Err(not_a_run),
            };
        }
        let Some(class) = self
            .classes
            .iter_mut()
            .find(|c| (c.start..c.start + c.map.capacity() * c.block).contains(&first))
        else {
            return Err(not_a_run);
        };
        let offset = first - class.start;
        let b = offset / class.block;
        if class.map.is_free(b) {
            return Err(PoolError::DoubleFree { granule: first });
        }
        if offset % class.block != 0 || usize::from(class.asked[b]) + 1 != n {
            return Err(not_a_run);
        }
        class.map.free(b, 1)?;
        self.wasted -= class.block - n;
        Ok(())
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn free_granules(&self) -> usize {
        self.classes
            .iter()
            .map(|c| c.map.free_granules() * c.block)
            .sum::<usize>()
            + self.overflow.map.free_granules()
    }

    /// The largest block of a class that has blocks, or the overflow region's size if larger.
    fn largest_alloc(&self) -> usize {
        self.classes
            .iter()
            .filter(|c| c.map.capacity() > 0)
            .map(|c| c.block)
            .max()
            .unwrap_or(0)
            .max(self.overflow.map.capacity())
    }

    fn name(&self) -> &'static str {
        "size-classes"
    }
}
