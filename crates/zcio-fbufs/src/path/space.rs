//! The originator's bookkeeping of its path's space (paper 001, §3.3): which chunks are made,
//! what in each is live, the LIFO free lists, and the fresh space left to carve. It maps
//! nothing: [`super::Originator`] makes and retires the chunks it names.
//!
//! An fbuf is whole pages, anywhere in the path (it may straddle chunks, as a bump allocator
//! lays them). Fresh space is kept as extents, carved first fit by address: at first one
//! extent, the whole path, carved from its start as a bump pointer would; a retired chunk's
//! range, and the parts beyond it of free fbufs dropped with it, go back to the extents, and
//! the chunks a carve reaches that are not made must be made before the fbuf is used.
//!
//! A chunk is *idle* when it is made and no live fbuf (allocated, sent, or lent to a device)
//! overlaps it: only idle chunks may be retired. The path's cached bytes are the bytes of its
//! made chunks that no live fbuf takes: its free fbufs and the fresh space inside made chunks.

use super::FbufError;
use std::collections::{BTreeMap, HashMap};

/// What the allocator knows of one chunk.
#[derive(Debug, Clone, Copy, Default)]
struct ChunkUse {
    made: bool,
    /// Live fbufs overlapping it.
    live: u32,
    /// When an fbuf overlapping it was last freed (or it was made): the clock of [`Space`].
    last_freed: u64,
}

/// Space carved for an fbuf: its offset and length in the path, and the chunks it reaches that
/// were not made yet (the caller makes them, or gives the carve back).
#[derive(Debug)]
pub(crate) struct Carve {
    pub(crate) offset: usize,
    pub(crate) size: usize,
    pub(crate) new_chunks: Vec<usize>,
}

/// The path's space as its originator's allocator keeps it.
#[derive(Debug)]
pub(crate) struct Space {
    page: usize,
    chunk: usize,
    quota: usize,
    /// Fresh space: offset → length, coalesced.
    fresh: BTreeMap<usize, usize>,
    /// Free fbufs by page count, offsets, most recently freed last.
    free: HashMap<usize, Vec<usize>>,
    free_count: usize,
    /// Chunks up to the highest one ever made.
    chunks: Vec<ChunkUse>,
    made: usize,
    idle: usize,
    /// Bytes of live fbufs.
    live_bytes: usize,
    clock: u64,
}

impl Space {
    /// The space of a path of `quota` chunks of `chunk` bytes, in pages of `page` bytes.
    pub(crate) fn new(page: usize, chunk: usize, quota: usize) -> Space {
        Space {
            page,
            chunk,
            quota,
            fresh: BTreeMap::from([(0, chunk * quota)]),
            free: HashMap::new(),
            free_count: 0,
            chunks: Vec::new(),
            made: 0,
            idle: 0,
            live_bytes: 0,
            clock: 0,
        }
    }

    /// The chunks `[offset, offset + size)` overlaps.
    pub(crate) fn chunks_of(&self, offset: usize, size: usize) -> std::ops::Range<usize> {
        offset / self.chunk..(offset + size).div_ceil(self.chunk)
    }

    /// Chunks made and not retired.
    pub(crate) fn made(&self) -> usize {
        self.made
    }

    /// Whether chunk `k` is made.
    pub(crate) fn is_made(&self, k: usize) -> bool {
        self.chunks.get(k).is_some_and(|c| c.made)
    }

    /// Fbufs on the free lists.
    pub(crate) fn free_count(&self) -> usize {
        self.free_count
    }

    /// Whether a free fbuf of `pages` pages waits.
    pub(crate) fn has_free(&self, pages: usize) -> bool {
        self.free.get(&pages).is_some_and(|l| !l.is_empty())
    }

    /// Bytes of made chunks that no live fbuf takes.
    pub(crate) fn cached_bytes(&self) -> usize {
        self.made * self.chunk - self.live_bytes
    }

    /// Space for an fbuf of `len` bytes: the most recently freed fbuf of its page count, else
    /// fresh space, first fit by address, inside the first `granted` chunks.
    pub(crate) fn carve(&mut self, len: usize, granted: usize) -> Result<Carve, FbufError> {
        let pages = len.div_ceil(self.page);
        let size = pages * self.page;
        if let Some(offset) = self.free.get_mut(&pages).and_then(Vec::pop) {
            self.free_count -= 1;
            self.mark_live(offset, size);
            return Ok(Carve {
                offset,
                size,
                new_chunks: Vec::new(),
            });
        }
        let Some((&at, &extent)) = self.fresh.iter().find(|(_, l)| **l >= size) else {
            // As a bump allocator would say it: the chunk the fbuf would need past the end.
            let tail = self
                .fresh
                .last_key_value()
                .filter(|(o, l)| *o + *l == self.chunk * self.quota)
                .map_or(self.chunk * self.quota, |(o, _)| *o);
            return Err(FbufError::Quota {
                asked: len,
                needed: (tail + size).div_ceil(self.chunk),
                quota: self.quota,
                chunk_bytes: self.chunk,
            });
        };
        let needed = (at + size).div_ceil(self.chunk);
        if needed > granted {
            return Err(FbufError::NeedChunks { needed, granted });
        }
        self.fresh.remove(&at);
        if extent > size {
            self.fresh.insert(at + size, extent - size);
        }
        let new_chunks: Vec<usize> = self
            .chunks_of(at, size)
            .filter(|k| !self.is_made(*k))
            .collect();
        for k in &new_chunks {
            self.make(*k);
        }
        self.mark_live(at, size);
        Ok(Carve {
            offset: at,
            size,
            new_chunks,
        })
    }

    /// Give back a carve whose new chunks could not be made (nothing of it was used).
    pub(crate) fn uncarve(&mut self, c: &Carve) {
        self.unmark_live(c.offset, c.size);
        for k in &c.new_chunks {
            self.unmake(*k);
        }
        self.add_fresh(c.offset, c.size);
    }

    fn make(&mut self, k: usize) {
        if self.chunks.len() <= k {
            self.chunks.resize(k + 1, ChunkUse::default());
        }
        self.clock += 1;
        self.chunks[k] = ChunkUse {
            made: true,
            live: 0,
            last_freed: self.clock,
        };
        self.made += 1;
        self.idle += 1;
    }

    fn unmake(&mut self, k: usize) {
        let c = &mut self.chunks[k];
        debug_assert!(c.made && c.live == 0, "unmaking chunk {k}: {c:?}");
        c.made = false;
        self.made -= 1;
        self.idle -= 1;
    }

    fn mark_live(&mut self, offset: usize, size: usize) {
        for k in self.chunks_of(offset, size) {
            let c = &mut self.chunks[k];
            if c.live == 0 {
                self.idle -= 1;
            }
            c.live += 1;
        }
        self.live_bytes += size;
    }

    fn unmark_live(&mut self, offset: usize, size: usize) {
        self.clock += 1;
        for k in self.chunks_of(offset, size) {
            let c = &mut self.chunks[k];
            c.live -= 1;
            c.last_freed = self.clock;
            if c.live == 0 {
                self.idle += 1;
            }
        }
        self.live_bytes -= size;
    }

    /// A live fbuf of `size` bytes at `offset` is free again: on its free list, most recent.
    pub(crate) fn recycle(&mut self, offset: usize, size: usize) {
        self.unmark_live(offset, size);
        self.free.entry(size / self.page).or_default().push(offset);
        self.free_count += 1;
    }

    /// The idle chunk whose fbufs were freed least recently (the cold end of the LIFO lists).
    pub(crate) fn coldest_idle(&self) -> Option<usize> {
        if self.idle == 0 {
            return None;
        }
        (0..self.chunks.len())
            .filter(|k| self.chunks[*k].made && self.chunks[*k].live == 0)
            .min_by_key(|k| self.chunks[*k].last_freed)
    }

    /// Whether chunk `k` is made and idle (it may be retired).
    pub(crate) fn is_idle(&self, k: usize) -> bool {
        self.chunks.get(k).is_some_and(|c| c.made && c.live == 0)
    }

    /// Retire idle chunk `k`: the free fbufs overlapping it leave their lists and are fresh
    /// space again, with their parts in the chunks beside it.
    pub(crate) fn retire(&mut self, k: usize) {
        debug_assert!(self.is_idle(k), "retiring chunk {k}");
        let (lo, hi) = (k * self.chunk, (k + 1) * self.chunk);
        let page = self.page;
        let mut dropped = Vec::new();
        for (pages, list) in &mut self.free {
            let size = pages * page;
            list.retain(|o| {
                let keep = *o + size <= lo || *o >= hi;
                if !keep {
                    dropped.push((*o, size));
                }
                keep
            });
        }
        self.free_count -= dropped.len();
        self.unmake(k);
        // An idle chunk's range is fresh space and free fbufs: those fbufs, whole, are fresh
        // again (their parts in the chunks beside it too).
        for (o, size) in dropped {
            self.add_fresh(o, size);
        }
    }

    /// `[offset, offset + len)` is fresh again, joined with the extents beside it.
    fn add_fresh(&mut self, offset: usize, len: usize) {
        let (mut at, mut len) = (offset, len);
        if let Some((&o, &l)) = self.fresh.range(..at).next_back()
            && o + l == at
        {
            self.fresh.remove(&o);
            at = o;
            len += l;
        }
        if let Some(l) = self.fresh.remove(&(at + len)) {
            len += l;
        }
        self.fresh.insert(at, len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: usize = 4096;

    fn space(chunks: usize) -> Space {
        Space::new(P, 4 * P, chunks)
    }

    #[test]
    fn carving_bumps_then_reuses_lifo_and_makes_chunks_as_reached() {
        let mut s = space(4);
        let a = s.carve(3 * P, 4).unwrap();
        assert_eq!((a.offset, a.new_chunks.clone()), (0, vec![0]));
        let b = s.carve(3 * P, 4).unwrap();
        assert_eq!((b.offset, b.new_chunks.clone()), (3 * P, vec![1]));
        assert_eq!((s.made(), s.cached_bytes()), (2, 2 * P));
        s.recycle(a.offset, a.size);
        s.recycle(b.offset, b.size);
        assert_eq!(s.cached_bytes(), 8 * P);
        // LIFO: the last freed first.
        assert_eq!(s.carve(2 * P + 1, 4).unwrap().offset, 3 * P);
        assert!(matches!(
            s.carve(9 * P, 2),
            Err(FbufError::NeedChunks { needed: 4, .. })
        ));
        assert!(matches!(
            s.carve(11 * P, 4),
            Err(FbufError::Quota { needed: 5, .. })
        ));
    }

    #[test]
    fn retiring_an_idle_chunk_drops_its_free_fbufs_and_frees_its_space() {
        let mut s = space(4);
        // Fbufs of 3 pages in chunks of 4: the second straddles chunks 0 and 1.
        let f: Vec<Carve> = (0..4).map(|_| s.carve(3 * P, 4).unwrap()).collect();
        assert_eq!(s.made(), 3);
        assert_eq!(s.coldest_idle(), None, "all live");
        s.recycle(f[0].offset, f[0].size);
        s.recycle(f[1].offset, f[1].size);
        // Chunk 0 is idle (f0, f1 free); chunk 1 holds f2 still.
        assert_eq!(s.coldest_idle(), Some(0));
        s.retire(0);
        assert_eq!((s.made(), s.free_count()), (2, 0));
        // Chunk 0's range and f1's part in chunk 1 are fresh again, side by side.
        assert_eq!(s.fresh.first_key_value(), Some((&0, &(6 * P))));
        let g = s.carve(5 * P, 4).unwrap();
        assert_eq!((g.offset, g.new_chunks.clone()), (0, vec![0]));
        s.uncarve(&g);
        assert_eq!(s.fresh.first_key_value(), Some((&0, &(6 * P))));
        assert!(!s.is_made(0));
        // Freed last, chunk 2's fbufs are the warmest: chunk 1 goes first, then 2.
        s.recycle(f[2].offset, f[2].size);
        s.recycle(f[3].offset, f[3].size);
        assert_eq!(s.coldest_idle(), Some(1));
        s.retire(1);
        s.retire(2);
        assert_eq!((s.made(), s.cached_bytes(), s.free_count()), (0, 0, 0));
        assert_eq!(s.fresh.len(), 1, "{:?}", s.fresh);
    }
}
