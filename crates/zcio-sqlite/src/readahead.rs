//! Sequential read-ahead through the layer: the file is read in chunks of `chunk` bytes,
//! `depth` of them in flight, each into a buffer of the layer (by `O_DIRECT` where the file
//! system allows); a read is copied out of the chunk that holds it, or, where the engine reads
//! pages in place ([`ReadAhead::fetch`]), handed out as the address in the buffer the device
//! filled, the chunk pinned until released. A read outside the window
//! that continues the last read starts the window again there (what was in flight completes
//! and is dropped); one elsewhere (an interior page of a tree) is read on its own, and the
//! window stays. The file's first chunk is kept, for the header reads SQLite makes again and
//! again.
//!
//! A page read in place has not passed through the CPU's cache as a copied one has, so the
//! engine would wait for each of its cache lines in turn: each fetch asks the CPU for the
//! bytes that follow it in the window ([`ReadAhead::with_prefetch`], [`PREFETCH`] by default),
//! which then arrive while the engine parses the page it has.

use crate::pool::{BufferPool, FileId};
use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use zcio_uio::{Completion, HandlerId, NotQueued, Opcode, Request, Target, Uio, UioError};

/// What reads through the layer did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Files read through the layer.
    pub files: u64,
    /// Main databases the layer could not open (read by SQLite's own VFS instead).
    pub fallback_files: u64,
    /// Reads the engine made.
    pub reads: u64,
    /// Requests sent to the layer.
    pub requests: u64,
    /// Bytes those requests transferred.
    pub bytes_transferred: u64,
    /// Bytes copied from the layer's buffers into the engine's.
    pub bytes_copied: u64,
    /// Times the window started again elsewhere.
    pub restarts: u64,
    /// Bytes the engine read in place in the layer's buffers (no copy).
    pub bytes_fetched: u64,
    /// Reads behind the window, made on their own (the window stays).
    pub side_reads: u64,
    /// Chunks found in the engine's buffer pool ([`crate::pool::BufferPool`]): no request.
    pub pool_hits: u64,
    /// Bytes those chunks held.
    pub bytes_pooled: u64,
    /// Bytes the CPU was asked to bring into its cache ahead of the engine's reads in place.
    pub bytes_prefetched: u64,
}

impl ReadStats {
    /// Add another's counts.
    pub fn add(&mut self, o: &ReadStats) {
        self.files += o.files;
        self.fallback_files += o.fallback_files;
        self.reads += o.reads;
        self.requests += o.requests;
        self.bytes_transferred += o.bytes_transferred;
        self.bytes_copied += o.bytes_copied;
        self.restarts += o.restarts;
        self.bytes_fetched += o.bytes_fetched;
        self.side_reads += o.side_reads;
        self.pool_hits += o.pool_hits;
        self.bytes_pooled += o.bytes_pooled;
        self.bytes_prefetched += o.bytes_prefetched;
    }

    /// What was counted since `earlier` (an earlier snapshot of the same counts).
    pub fn since(&self, earlier: &ReadStats) -> ReadStats {
        ReadStats {
            files: self.files - earlier.files,
            fallback_files: self.fallback_files - earlier.fallback_files,
            reads: self.reads - earlier.reads,
            requests: self.requests - earlier.requests,
            bytes_transferred: self.bytes_transferred - earlier.bytes_transferred,
            bytes_copied: self.bytes_copied - earlier.bytes_copied,
            restarts: self.restarts - earlier.restarts,
            bytes_fetched: self.bytes_fetched - earlier.bytes_fetched,
            side_reads: self.side_reads - earlier.side_reads,
            pool_hits: self.pool_hits - earlier.pool_hits,
            bytes_pooled: self.bytes_pooled - earlier.bytes_pooled,
            bytes_prefetched: self.bytes_prefetched - earlier.bytes_prefetched,
        }
    }
}

thread_local! {
    /// Completions of this thread's read-ahead requests, by token (the handler runs on the
    /// issuing thread, so each thread sees its own).
    static DONE: RefCell<HashMap<u64, Completion>> = RefCell::new(HashMap::new());
}

static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

/// Bytes after each page fetched that the CPU is asked for by default: the next two 4 KiB
/// pages (one page ahead leaves part of the wait; more gains nothing measurable here).
pub const PREFETCH: usize = 8 << 10;

/// Register the read-ahead handler with a layer.
pub fn handler(uio: &Uio) -> HandlerId {
    uio.handler(|c| {
        DONE.with(|d| d.borrow_mut().insert(c.record.argument, c));
    })
}

fn take_done(token: u64) -> Option<Completion> {
    DONE.with(|d| d.borrow_mut().remove(&token))
}

enum State {
    InFlight(u64),
    /// Read: the completion that filled it, shared with the buffer pool if there is one.
    Ready(Arc<Completion>),
}

struct Chunk {
    off: u64,
    len: usize,
    state: State,
    /// Pages of it the engine reads in place ([`ReadAhead::fetch`]): it stays while any is.
    pins: usize,
}

impl Chunk {
    /// The bytes read (the chunk must be ready).
    fn data(&self) -> &[u8] {
        let State::Ready(done) = &self.state else {
            unreachable!("made ready above")
        };
        done.data()
    }
}

/// A file read sequentially through a layer.
pub struct ReadAhead {
    uio: Arc<Uio>,
    target: Target,
    handler: HandlerId,
    size: u64,
    chunk: usize,
    depth: usize,
    window: VecDeque<Chunk>,
    head: Option<Chunk>,
    /// Chunks left behind (by the reader moving on, or a restart) with pages still fetched.
    pinned: Vec<Chunk>,
    next: u64,
    /// Where the last read ended: a miss there means the reader streams on from it.
    last_end: u64,
    abandoned: Vec<u64>,
    /// The engine's buffer pool and this file's identity in it, if reads go through one.
    pool: Option<(Arc<BufferPool>, FileId)>,
    /// Pooled chunks outside the window holding pages the engine reads in place.
    pool_pins: Vec<Arc<Completion>>,
    /// Bytes after each page fetched from the window to prefetch into the CPU's cache.
    prefetch: usize,
    stats: ReadStats,
}

impl ReadAhead {
    /// Open `path` through `uio`, reading `chunk` bytes a request (rounded to 4 KiB), `depth`
    /// requests ahead, completing to `handler` (see [`handler`]).
    pub fn open(
        uio: Arc<Uio>,
        handler: HandlerId,
        path: &Path,
        chunk: usize,
        depth: usize,
    ) -> Result<ReadAhead, UioError> {
        let target = uio.open(path, false)?;
        let size = uio.size(target)?;
        let chunk = chunk
            .next_multiple_of(4096)
            .clamp(4096, uio.config().buf_size);
        Ok(ReadAhead {
            uio,
            target,
            handler,
            size,
            chunk,
            depth: depth.max(1),
            window: VecDeque::new(),
            head: None,
            pinned: Vec::new(),
            next: 0,
            last_end: u64::MAX,
            abandoned: Vec::new(),
            pool: None,
            pool_pins: Vec::new(),
            prefetch: PREFETCH,
            stats: ReadStats {
                files: 1,
                ..ReadStats::default()
            },
        })
    }

    /// Read through `pool`: chunks it holds are not read again, and chunks read are put in
    /// it. The file is known to the pool by its identity now (see [`FileId`]).
    pub fn with_pool(mut self, pool: Arc<BufferPool>, path: &Path) -> Result<Self, UioError> {
        let id = FileId::of(path).map_err(|e| UioError::Open {
            path: path.display().to_string(),
            source: e,
        })?;
        self.pool = Some((pool, id));
        Ok(self)
    }

    /// After each page fetched from the window, ask the CPU for the `bytes` that follow it
    /// there (those the window holds read; 0: none).
    pub fn with_prefetch(mut self, bytes: usize) -> Self {
        self.prefetch = bytes;
        self
    }

    /// What it did so far (its file counted once).
    pub fn stats(&self) -> ReadStats {
        self.stats
    }

    /// The file's size.
    pub fn size(&self) -> u64 {
        self.size
    }

    fn find(&self, pos: u64) -> Option<Option<usize>> {
        let inside = |c: &Chunk| c.off <= pos && pos < c.off + c.len as u64;
        if self.head.as_ref().is_some_and(inside) {
            return Some(None);
        }
        self.window.iter().position(inside).map(Some)
    }

    /// Read into `dst` from `off`: the bytes read (fewer at the end of the file).
    pub fn read(&mut self, dst: &mut [u8], off: u64) -> Result<usize, UioError> {
        self.stats.reads += 1;
        let end = off.saturating_add(dst.len() as u64).min(self.size);
        let mut pos = off;
        while pos < end {
            let at = match self.find(pos) {
                Some(at) => at,
                None if !self.window.is_empty() && pos != self.last_end => {
                    // Not where the reader was streaming (an interior page of the tree, say):
                    // read it on its own and keep the window.
                    pos += self.side_read(dst, off, pos, end)? as u64;
                    continue;
                }
                None => {
                    self.restart(pos)?;
                    self.find(pos).expect("the window starts at pos")
                }
            };
            let c = self.ready_chunk(at)?;
            let from = (pos - c.off) as usize;
            let n = (c.len - from).min((end - pos) as usize);
            let into = (pos - off) as usize;
            dst[into..into + n].copy_from_slice(&c.data()[from..from + n]);
            self.stats.bytes_copied += n as u64;
            pos += n as u64;
        }
        self.last_end = pos;
        self.slide(pos)?;
        Ok((pos - off) as usize)
    }

    /// Chunks wholly behind the reader at `pos` are done with (the first is kept for the
    /// header; one with fetched pages waits for them); then refill.
    fn slide(&mut self, pos: u64) -> Result<(), UioError> {
        while self
            .window
            .front()
            .is_some_and(|c| c.off + c.len as u64 <= pos && matches!(c.state, State::Ready(_)))
        {
            let c = self.window.pop_front().expect("checked");
            if c.off == 0 && self.head.is_none() {
                self.head = Some(c);
            } else if c.pins > 0 {
                self.pinned.push(c);
            }
        }
        self.fill()
    }

    /// The address of `len` bytes at `off` in a buffer a transfer filled, for the engine to
    /// read in place (no copy), pinned until [`ReadAhead::unfetch`]; `None` where they are not
    /// within one chunk of the window at the reader's position, nor, with a pool, in a pooled
    /// chunk (the engine then reads them with a copy). The memory stays valid and unchanged while pinned: the chunk is neither
    /// dropped nor refilled.
    pub fn fetch(&mut self, off: u64, len: usize) -> Result<Option<usize>, UioError> {
        let end = off.saturating_add(len as u64);
        if len == 0 || end > self.size {
            return Ok(None);
        }
        let inside = |c: &Chunk| c.off <= off && end <= c.off + c.len as u64;
        let at = match self.find(off) {
            Some(None) if self.head.as_ref().is_some_and(inside) => None,
            Some(Some(i)) if inside(&self.window[i]) && (i == 0 || off == self.last_end) => Some(i),
            None if self.window.is_empty() || off == self.last_end => {
                self.restart(off)?;
                match self.find(off) {
                    Some(Some(i)) if inside(&self.window[i]) => Some(i),
                    _ => return Ok(self.fetch_pooled(off, len)),
                }
            }
            _ => return Ok(self.fetch_pooled(off, len)),
        };
        let c = self.ready_chunk(at)?;
        let from = (off - c.off) as usize;
        if c.data().len() < from + len {
            return Ok(None);
        }
        let addr = c.data().as_ptr() as usize + from;
        c.pins += 1;
        self.stats.bytes_fetched += len as u64;
        if at.is_some() {
            self.last_end = end;
            self.slide(end)?;
            self.prefetch_from(end);
        }
        Ok(Some(addr))
    }

    /// Ask the CPU for the [`ReadAhead::with_prefetch`] bytes from `pos` that the window holds
    /// read, across chunks, so that the engine's next pages are in its cache when it reads them.
    fn prefetch_from(&mut self, mut pos: u64) {
        let stop = pos.saturating_add(self.prefetch as u64).min(self.size);
        while pos < stop {
            let Some(c) = self
                .window
                .iter()
                .find(|c| c.off <= pos && pos < c.off + c.len as u64)
            else {
                break;
            };
            let State::Ready(done) = &c.state else { break };
            let from = (pos - c.off) as usize;
            let to = ((stop - c.off) as usize).min(done.data().len());
            if to <= from {
                break;
            }
            zcio_vm::prefetch::prefetch(&done.data()[from..to]);
            self.stats.bytes_prefetched += (to - from) as u64;
            pos = c.off + to as u64;
        }
    }

    /// Release the page fetched at `off` whose address was `addr`. The address decides which
    /// chunk held it: after a restart two chunks may cover the same offsets, and releasing
    /// the other one's pin would let a page still in use be refilled.
    pub fn unfetch(&mut self, off: u64, addr: usize) {
        let holds = |c: &Chunk| {
            c.pins > 0
                && c.off <= off
                && off < c.off + c.len as u64
                && match &c.state {
                    State::Ready(d) => {
                        let base = d.data().as_ptr() as usize;
                        base <= addr && addr < base + d.data().len()
                    }
                    State::InFlight(_) => false,
                }
        };
        if let Some(c) = self.head.as_mut().filter(|c| holds(c)) {
            c.pins -= 1;
        } else if let Some(c) = self.window.iter_mut().find(|c| holds(c)) {
            c.pins -= 1;
        } else if let Some(i) = self.pinned.iter().position(holds) {
            self.pinned[i].pins -= 1;
            if self.pinned[i].pins == 0 {
                self.pinned.swap_remove(i);
            }
        } else if let Some(i) = self.pool_pins.iter().position(|d| {
            let base = d.data().as_ptr() as usize;
            base <= addr && addr < base + d.data().len()
        }) {
            self.pool_pins.swap_remove(i);
        }
    }

    /// Visit the whole file in order, chunk by chunk, in the buffers the transfers filled (no
    /// copy): the bytes visited.
    pub fn scan(&mut self, mut visit: impl FnMut(&[u8])) -> Result<u64, UioError> {
        self.restart(0)?;
        let mut pos = 0;
        while pos < self.size {
            let i = self
                .window
                .iter()
                .position(|c| c.off == pos)
                .ok_or(UioError::Ring(zcio_vm::direct::PushError::Full))?;
            self.ready(i)?;
            let c = self.window.remove(i).expect("found");
            if let State::Ready(done) = &c.state {
                visit(done.data());
            }
            pos += c.len as u64;
            drop(c);
            self.fill()?;
            while self.window.is_empty() && pos < self.size {
                self.await_buffer()?;
                self.fill()?;
            }
        }
        Ok(pos)
    }

    /// Read the pages holding `[pos, end)` (at most a chunk) with one blocking request and
    /// copy them out: the bytes copied.
    fn side_read(
        &mut self,
        dst: &mut [u8],
        off: u64,
        pos: u64,
        end: u64,
    ) -> Result<usize, UioError> {
        if let Some(n) = self.side_read_pooled(dst, off, pos, end)? {
            return Ok(n);
        }
        let start = pos - pos % 4096;
        let stop = end
            .min(start + self.chunk as u64)
            .next_multiple_of(4096)
            .min(self.size);
        let c = self.blocking_read(start, (stop - start) as u32)?;
        self.copy_out(c.data(), start, dst, off, pos, end)
    }

    /// Read `len` bytes from `start` with one blocking request (a side read).
    fn blocking_read(&mut self, start: u64, len: u32) -> Result<Completion, UioError> {
        let buf = loop {
            match self.take_buffer() {
                Some(b) => break b,
                None => self.await_buffer()?,
            }
        };
        let mut c = self.uio.read_blocking(self.target, start, buf, 0, len)?;
        if let Some(e) = c.error.take() {
            return Err(e);
        }
        self.stats.side_reads += 1;
        self.stats.requests += 1;
        self.stats.bytes_transferred += len as u64;
        Ok(c)
    }

    /// Copy the bytes of `[pos, end)` that `data` (read from `start`) holds into `dst` (which
    /// starts at `off`): the bytes copied, at least one.
    fn copy_out(
        &mut self,
        data: &[u8],
        start: u64,
        dst: &mut [u8],
        off: u64,
        pos: u64,
        end: u64,
    ) -> Result<usize, UioError> {
        let from = (pos - start) as usize;
        let n = data.len().saturating_sub(from).min((end - pos) as usize);
        if n == 0 {
            return Err(UioError::PastEnd {
                offset: pos,
                length: (end - pos) as u32,
                size: self.size,
            });
        }
        let into = (pos - off) as usize;
        dst[into..into + n].copy_from_slice(&data[from..from + n]);
        self.stats.bytes_copied += n as u64;
        Ok(n)
    }

    /// The pooled chunk at `off` if it holds `len` bytes (counted as a pool hit).
    fn pooled(&mut self, off: u64, len: usize) -> Option<Arc<Completion>> {
        let (pool, id) = self.pool.as_ref()?;
        let hit = pool.get(*id, off).filter(|c| c.data().len() == len)?;
        self.stats.pool_hits += 1;
        self.stats.bytes_pooled += len as u64;
        Some(hit)
    }

    /// A free buffer of the layer; with a pool, one it gives back if none is free.
    fn take_buffer(&self) -> Option<zcio_vm::direct::IoBuf> {
        if let Some(b) = self.uio.buffer() {
            return Some(b);
        }
        let (pool, _) = self.pool.as_ref()?;
        while pool.evict_one() {
            if let Some(b) = self.uio.buffer() {
                return Some(b);
            }
        }
        None
    }

    /// With a pool: the chunk that holds `pos`, from the pool, or read whole with one blocking
    /// request and put in it; the bytes copied from it into `dst` (`None` without a pool).
    fn side_read_pooled(
        &mut self,
        dst: &mut [u8],
        off: u64,
        pos: u64,
        end: u64,
    ) -> Result<Option<usize>, UioError> {
        let Some((pool, id)) = self.pool.clone() else {
            return Ok(None);
        };
        let start = pos - pos % self.chunk as u64;
        let len = (self.chunk as u64).min(self.size - start) as usize;
        let c = match self.pooled(start, len) {
            Some(c) => c,
            None => {
                let read_len = (len as u64).next_multiple_of(4096) as u32;
                let c = Arc::new(self.blocking_read(start, read_len)?);
                if c.data().len() == len {
                    pool.insert(id, start, c.clone());
                }
                c
            }
        };
        self.copy_out(c.data(), start, dst, off, pos, end).map(Some)
    }

    /// With a pool: the address of `len` bytes at `off` in the pooled chunk that holds them,
    /// pinned until [`ReadAhead::unfetch`].
    fn fetch_pooled(&mut self, off: u64, len: usize) -> Option<usize> {
        let start = off - off % self.chunk as u64;
        let chunk_len = (self.chunk as u64).min(self.size - start) as usize;
        let from = (off - start) as usize;
        if from + len > chunk_len {
            return None;
        }
        let c = self.pooled(start, chunk_len)?;
        let addr = c.data().as_ptr() as usize + from;
        self.pool_pins.push(c);
        self.stats.bytes_fetched += len as u64;
        Some(addr)
    }

    fn restart(&mut self, pos: u64) -> Result<(), UioError> {
        for c in self.window.drain(..) {
            match c.state {
                State::InFlight(t) => self.abandoned.push(t),
                State::Ready(_) if c.pins > 0 => self.pinned.push(c),
                State::Ready(_) => {}
            }
        }
        self.stats.restarts += 1;
        self.next = pos - pos % self.chunk as u64;
        loop {
            self.fill()?;
            if !self.window.is_empty() {
                return Ok(());
            }
            self.await_buffer()?;
        }
    }

    /// No buffer is free: wait for this thread's dropped requests to come back, or, if it has
    /// none in flight, for other threads to give theirs back.
    fn await_buffer(&mut self) -> Result<(), UioError> {
        self.drop_abandoned();
        match self.uio.wait() {
            Ok(_) => {}
            Err(UioError::NothingInFlight) => {
                std::thread::yield_now();
                self.uio.poll();
            }
            Err(e) => return Err(e),
        }
        self.drop_abandoned();
        Ok(())
    }

    fn fill(&mut self) -> Result<(), UioError> {
        while self.window.len() < self.depth && self.next < self.size {
            let len = (self.chunk as u64).min(self.size - self.next) as usize;
            if let Some(hit) = self.pooled(self.next, len) {
                self.window.push_back(Chunk {
                    off: self.next,
                    len,
                    state: State::Ready(hit),
                    pins: 0,
                });
                self.next += len as u64;
                continue;
            }
            let Some(buf) = self.take_buffer() else { break };
            let token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
            let rec = Request::new(
                Opcode::Read,
                self.target,
                self.next,
                buf.addr(),
                len as u32,
                self.handler,
                token,
            );
            match self.uio.submit(rec, buf) {
                Ok(()) => {}
                Err(NotQueued::Full { .. }) => break,
                Err(NotQueued::NoHandler { record, .. }) => {
                    return Err(UioError::NoHandler(record.handler));
                }
            }
            self.window.push_back(Chunk {
                off: self.next,
                len,
                state: State::InFlight(token),
                pins: 0,
            });
            self.stats.requests += 1;
            self.stats.bytes_transferred += len as u64;
            self.next += len as u64;
        }
        Ok(())
    }

    /// The chunk at window index `at` (`None`: the head chunk, read on its own), its read
    /// completed.
    fn ready_chunk(&mut self, at: Option<usize>) -> Result<&mut Chunk, UioError> {
        match at {
            None => Ok(self.head.as_mut().expect("found")),
            Some(i) => {
                self.ready(i)?;
                Ok(&mut self.window[i])
            }
        }
    }

    fn ready(&mut self, i: usize) -> Result<(), UioError> {
        loop {
            self.drop_abandoned();
            let State::InFlight(token) = self.window[i].state else {
                return Ok(());
            };
            if let Some(mut c) = take_done(token) {
                if let Some(e) = c.error.take() {
                    self.window.remove(i);
                    return Err(e);
                }
                let c = Arc::new(c);
                let chunk = &self.window[i];
                if let Some((pool, id)) = &self.pool
                    && c.data().len() == chunk.len
                {
                    pool.insert(*id, chunk.off, c.clone());
                }
                self.window[i].state = State::Ready(c);
                return Ok(());
            }
            self.uio.wait()?;
        }
    }

    fn drop_abandoned(&mut self) {
        self.abandoned.retain(|t| take_done(*t).is_none());
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Every request of this file completes before it goes (their buffers return).
        for c in self.window.drain(..) {
            if let State::InFlight(t) = c.state {
                self.abandoned.push(t);
            }
        }
        while !self.abandoned.is_empty() {
            self.drop_abandoned();
            if self.abandoned.is_empty() || self.uio.wait().is_err() {
                break;
            }
        }
        let _ = self.uio.close(self.target);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcio_uio::Config;

    #[test]
    fn a_release_goes_to_the_chunk_that_held_the_page_not_one_covering_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data: Vec<u8> = (0..64 * 1024).map(|i| (i / 4096) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let uio = match Uio::new(Config {
            buffers: 8,
            buf_size: 16 << 10,
            ..Config::default()
        }) {
            Ok(u) => Arc::new(u),
            // Skipped only where io_uring itself is missing (what the start-up probe checks);
            // any other refusal is this test's failure.
            Err(e) if zcio_vm::direct::DirectRing::new(2, None, None).is_err() => {
                zcio_vm::skip::skip(zcio_vm::skip::Capability::IoUring, &e.to_string());
                return;
            }
            Err(e) => panic!("the layer: {e}"),
        };
        let h = handler(&uio);
        let mut ra = ReadAhead::open(uio, h, &path, 16 << 10, 2).unwrap();
        let a = ra.fetch(4096, 4096).unwrap().expect("in place");
        // The window starts again at the same place: the old chunk, still pinned, is kept
        // beside a new one covering the same bytes.
        ra.restart(0).unwrap();
        assert_eq!(ra.pinned.len(), 1);
        let b = ra.fetch(8192, 4096).unwrap().expect("in place");
        assert_ne!(a - 4096, b - 8192, "two buffers");
        ra.unfetch(4096, a);
        assert!(ra.pinned.is_empty(), "the old chunk released");
        assert_eq!(
            ra.window[0].pins, 1,
            "the page still in use keeps its chunk"
        );
        ra.unfetch(8192, b);
        assert_eq!(ra.window[0].pins, 0);
    }
}
