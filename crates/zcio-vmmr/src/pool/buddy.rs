//! A binary buddy allocator (§4.1, §4.3).

use super::{PagePool, PoolError, check_give_back, check_request, exhausted};

/// End of a free list.
const NIL: u32 = u32::MAX;
/// `state` of a granule that heads no block.
const NOT_HEAD: u8 = 0;
/// `state` flag: heads a free block (order in the low bits).
const FREE_HEAD: u8 = 0x40;
/// `state` flag: heads an allocated block (order in the low bits).
const ALLOC_HEAD: u8 = 0x80;
/// Mask of the order in `state`.
const ORDER_MASK: u8 = 0x3F;
/// Orders 0..=31 (capacity below 2^32).
const ORDERS: usize = 32;

/// A binary buddy allocator (the organization §4.1 and §4.3 recommend over the bitmap).
///
/// Blocks are `2^k` granules aligned to `2^k`. A capacity that is not a power of two is managed
/// as its maximal power-of-two blocks, largest first (1000 = 512 + 256 + 128 + 64 + 32 + 8, at
/// granules 0, 512, 768, 896, 960, 992); a block is never merged past them, so the largest
/// allocation is the largest of them ([`largest_alloc`](PagePool::largest_alloc)).
///
/// `alloc(n)` rounds `n` up to a power of two (a request of 17 takes 32 granules and wastes
/// 15, counted by [`wasted_granules`](Self::wasted_granules)), takes a free block of the
/// smallest order that has one and splits it down; `free` merges the block with its buddy as
/// long as the buddy is free. Both are O(log capacity): a free list per order (doubly linked
/// through per-granule arrays), a bit mask of the non-empty orders.
///
/// `free(first, n)` takes back exactly one allocation, with the `n` it was asked for:
/// anything else is [`PoolError::NotARun`] (or [`PoolError::DoubleFree`] when `first` lies in
/// a free block).
///
/// Memory: 9 bytes per granule (an order byte and two 32-bit links), so capacity is limited
/// to `u32::MAX - 1` granules.
#[derive(Clone)]
pub struct BuddyPool {
    capacity: usize,
    /// Per granule: `NOT_HEAD`, or `FREE_HEAD | order`, or `ALLOC_HEAD | order`.
    state: Vec<u8>,
    /// Free heads: next in the free list. Allocated heads: the `n` asked for.
    next: Vec<u32>,
    /// Free heads: previous in the free list.
    prev: Vec<u32>,
    /// Head of each order's free list.
    lists: [u32; ORDERS],
    /// Bit k set iff order k's free list is non-empty.
    nonempty: u32,
    /// Order of the largest top-level block.
    top_order: Option<u8>,
    free: usize,
    wasted: usize,
}

zcio_vm::debug_summary!(BuddyPool, |s|
    capacity: s.capacity, free: s.free, wasted: s.wasted, free_blocks: s.free_blocks(), ..);

/// The order of the smallest power of two `>= n` (`n >= 1`).
fn order_for(n: usize) -> usize {
    n.next_power_of_two().trailing_zeros() as usize
}

impl BuddyPool {
    /// The largest capacity a buddy pool supports.
    pub const MAX_CAPACITY: usize = (u32::MAX - 1) as usize;

    /// An empty pool of `capacity` granules.
    ///
    /// Errors: [`PoolError::CapacityTooLarge`] above [`Self::MAX_CAPACITY`];
    /// [`PoolError::OutOfMemory`] where its bookkeeping (9 bytes a granule) exceeds the memory
    /// available.
    pub fn new(capacity: usize) -> Result<Self, PoolError> {
        if capacity > Self::MAX_CAPACITY {
            return Err(PoolError::CapacityTooLarge {
                pool: "buddy",
                capacity,
                limit: Self::MAX_CAPACITY,
            });
        }
        let per_granule = std::mem::size_of_val(&NOT_HEAD) + 2 * std::mem::size_of_val(&NIL);
        super::within_memory("buddy", capacity, capacity.saturating_mul(per_granule))?;
        let mut pool = Self {
            capacity,
            state: vec![NOT_HEAD; capacity],
            next: vec![NIL; capacity],
            prev: vec![NIL; capacity],
            lists: [NIL; ORDERS],
            nonempty: 0,
            top_order: None,
            free: capacity,
            wasted: 0,
        };
        let mut at = 0usize;
        for k in (0..ORDERS).rev() {
            if capacity & (1 << k) != 0 {
                pool.top_order.get_or_insert(k as u8);
                pool.push(at, k);
                at += 1 << k;
            }
        }
        Ok(pool)
    }

    /// Granules set aside by live allocations beyond what they asked for (rounding up to a
    /// power of two).
    pub fn wasted_granules(&self) -> usize {
        self.wasted
    }

    /// Free blocks of each order (index k counts blocks of `2^k` granules); walks the lists.
    pub fn free_blocks(&self) -> Vec<usize> {
        let top = self.top_order.map_or(0, |k| k as usize + 1);
        (0..top)
            .map(|k| {
                let mut count = 0;
                let mut at = self.lists[k];
                while at != NIL {
                    count += 1;
                    at = self.next[at as usize];
                }
                count
            })
            .collect()
    }

    /// The largest free block, in granules (0 if none).
    pub fn largest_free_block(&self) -> usize {
        if self.nonempty == 0 {
            0
        } else {
            1 << (31 - self.nonempty.leading_zeros())
        }
    }

    fn push(&mut self, at: usize, k: usize) {
        let head = self.lists[k];
        self.state[at] = FREE_HEAD | k as u8;
        self.next[at] = head;
        self.prev[at] = NIL;
        if head != NIL {
            self.prev[head as usize] = at as u32;
        }
        self.lists[k] = at as u32;
        self.nonempty |= 1 << k;
    }

    fn unlink(&mut self, at: usize, k: usize) {
        let (p, n) = (self.prev[at], self.next[at]);
        if p == NIL {
            self.lists[k] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n != NIL {
            self.prev[n as usize] = p;
        }
        if self.lists[k] == NIL {
            self.nonempty &= !(1 << k);
        }
        self.state[at] = NOT_HEAD;
    }

    /// The head and state of the block holding `granule` (`granule < capacity`).
    fn block_of(&self, granule: usize) -> (usize, u8) {
        for k in 0..ORDERS {
            let head = granule & !((1usize << k) - 1);
            let s = self.state[head];
            if s != NOT_HEAD && usize::from(s & ORDER_MASK) == k {
                return (head, s);
            }
        }
        unreachable!("blocks cover the pool")
    }
}

impl PagePool for BuddyPool {
    fn alloc(&mut self, n: usize) -> Result<usize, PoolError> {
        check_request(n, self.largest_alloc())?;
        let k = order_for(n);
        let candidates = self.nonempty & !((1u32 << k) - 1);
        if candidates == 0 {
            return Err(exhausted(self, n, self.largest_free_block()));
        }
        let mut j = candidates.trailing_zeros() as usize;
        let at = self.lists[j] as usize;
        self.unlink(at, j);
        while j > k {
            j -= 1;
            self.push(at + (1 << j), j);
        }
        self.state[at] = ALLOC_HEAD | k as u8;
        self.next[at] = n as u32;
        self.free -= 1 << k;
        self.wasted += (1 << k) - n;
        Ok(at)
    }

    /// Takes back exactly one allocation: `first` as returned, `n` as asked.
    fn free(&mut self, first: usize, n: usize) -> Result<(), PoolError> {
        check_give_back(first, n, self.capacity)?;
        let s = self.state[first];
        if s & ALLOC_HEAD == 0 || self.next[first] as usize != n {
            let (_, holder) = self.block_of(first);
            return Err(if holder & FREE_HEAD != 0 {
                PoolError::DoubleFree { granule: first }
            } else {
                PoolError::NotARun {
                    first,
                    n,
                    pool: self.name(),
                }
            });
        }
        let mut k = usize::from(s & ORDER_MASK);
        self.free += 1 << k;
        self.wasted -= (1 << k) - n;
        self.state[first] = NOT_HEAD;
        let mut at = first;
        loop {
            let buddy = at ^ (1 << k);
            if buddy >= self.capacity || self.state[buddy] != FREE_HEAD | k as u8 {
                break;
            }
            self.unlink(buddy, k);
            at = at.min(buddy);
            k += 1;
        }
        self.push(at, k);
        Ok(())
    }

    /// The largest top-level block (the largest power of two `<= capacity`).
    fn largest_alloc(&self) -> usize {
        self.top_order.map_or(0, |k| 1 << k)
    }

    counted_pool!("buddy");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_for_rounds_up() {
        assert_eq!(order_for(1), 0);
        assert_eq!(order_for(2), 1);
        assert_eq!(order_for(3), 2);
        assert_eq!(order_for(17), 5);
    }

    #[test]
    fn buddy_decomposes_capacity() {
        let pool = BuddyPool::new(1000).unwrap();
        let blocks = pool.free_blocks();
        assert_eq!(blocks, vec![0, 0, 0, 1, 0, 1, 1, 1, 1, 1]);
        for (at, k) in [(0, 9), (512, 8), (768, 7), (896, 6), (960, 5), (992, 3)] {
            assert_eq!(pool.state[at], FREE_HEAD | k);
        }
    }
}
