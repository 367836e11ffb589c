//! The engine's own buffer pool on the layer: chunks of database files, read through the
//! layer into its registered buffers, kept there across reads, files and connections, as a
//! database that bypasses the kernel keeps its own buffer pool (paper 004's user-level layer
//! transfers into user memory that the application then reuses).
//!
//! A chunk is kept as the completion that filled it ([`Completion`], which owns the layer's
//! buffer), shared by reference count: the pool, the read-ahead windows and the pages the engine
//! reads in place each hold it, and the buffer goes back to the layer when the last of them
//! lets go. A pooled chunk is never written again, so a page handed out stays as it was read.
//!
//! Files are known by device, inode, size and modification time ([`FileId`]): a file changed
//! between two opens gets a new identity and its old chunks age out. A change made while a file
//! is open is not seen, the same contract SQLite's own page cache keeps for a read-only
//! database.
//!
//! The pool holds at most `capacity` chunks and drops the least recently used beyond that.
//! Since its chunks occupy the layer's buffers, a reader that finds none free asks the pool to
//! give one back ([`BufferPool::evict_one`]).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use zcio_uio::Completion;

/// A file's identity in the pool: device, inode, size and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl FileId {
    /// The identity of the file at `path` now.
    pub fn of(path: &Path) -> std::io::Result<FileId> {
        let m = std::fs::metadata(path)?;
        Ok(FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
        })
    }
}

/// What a pool did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Lookups that found their chunk.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Chunks put in.
    pub inserted: u64,
    /// Chunks dropped to stay within capacity or to free a buffer.
    pub evicted: u64,
    /// Chunks held now.
    pub chunks: usize,
    /// Bytes held now.
    pub bytes: u64,
}

struct Entry {
    data: Arc<Completion>,
    last_use: u64,
}

#[derive(Default)]
struct Inner {
    clock: u64,
    entries: HashMap<(FileId, u64), Entry>,
    stats: PoolStats,
}

/// Chunks of files kept in the layer's buffers, by file and offset.
pub struct BufferPool {
    capacity: usize,
    inner: Mutex<Inner>,
}

zcio_vm::debug_summary!(BufferPool, |s| capacity: s.capacity, stats: s.stats());

impl BufferPool {
    /// A pool of at most `capacity` chunks (at least one).
    pub fn new(capacity: usize) -> BufferPool {
        BufferPool {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Chunks it holds at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The chunk of `file` read at `offset`, if held (counted as a hit or a miss).
    pub fn get(&self, file: FileId, offset: u64) -> Option<Arc<Completion>> {
        let mut g = self.lock();
        g.clock += 1;
        let now = g.clock;
        match g.entries.get_mut(&(file, offset)) {
            Some(e) => {
                e.last_use = now;
                let data = e.data.clone();
                g.stats.hits += 1;
                Some(data)
            }
            None => {
                g.stats.misses += 1;
                None
            }
        }
    }

    /// Keep `chunk`, the bytes of `file` from `offset`, dropping the least recently used chunk
    /// if the pool is full. A chunk already held there stays (the two hold the same bytes).
    pub fn insert(&self, file: FileId, offset: u64, chunk: Arc<Completion>) {
        let mut g = self.lock();
        g.clock += 1;
        let now = g.clock;
        if let Some(e) = g.entries.get_mut(&(file, offset)) {
            e.last_use = now;
            return;
        }
        if g.entries.len() >= self.capacity {
            evict_lru(&mut g, false);
        }
        g.stats.bytes += chunk.data().len() as u64;
        g.entries.insert(
            (file, offset),
            Entry {
                data: chunk,
                last_use: now,
            },
        );
        g.stats.inserted += 1;
    }

    /// Drop the least recently used chunk that nobody else holds, so that its buffer goes back
    /// to the layer: whether there was one.
    pub fn evict_one(&self) -> bool {
        evict_lru(&mut self.lock(), true)
    }

    /// Drop every chunk (buffers still held by readers go back when they let go).
    pub fn clear(&self) {
        let mut g = self.lock();
        let n = g.entries.len() as u64;
        g.entries.clear();
        g.stats.evicted += n;
        g.stats.bytes = 0;
    }

    /// What it did so far.
    pub fn stats(&self) -> PoolStats {
        let g = self.lock();
        PoolStats {
            chunks: g.entries.len(),
            ..g.stats
        }
    }
}

/// Drop the least recently used entry (with `unshared`, only among those no reader holds):
/// whether one was dropped.
fn evict_lru(g: &mut Inner, unshared: bool) -> bool {
    let victim = g
        .entries
        .iter()
        .filter(|(_, e)| !unshared || Arc::strong_count(&e.data) == 1)
        .min_by_key(|(_, e)| e.last_use)
        .map(|(k, _)| *k);
    let Some(k) = victim else {
        return false;
    };
    let e = g.entries.remove(&k).expect("found");
    g.stats.bytes -= e.data.data().len() as u64;
    g.stats.evicted += 1;
    true
}
