//! The engine's buffer pool on the layer: a second scan is served from the layer's buffers
//! without a request, with the same rows; a pool smaller than the data evicts and stays exact;
//! a pool holding every buffer gives them back to new reads; a changed file is read again; a
//! page read in place keeps its buffer after the pool lets go of it; a page read in place has
//! the bytes after it in the window prefetched, and only those.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
mod common;

use common::scan_all;
use zcio_sqlite::readahead::{self, ReadAhead};
use zcio_sqlite::tables::{self, QueryResult};
use zcio_sqlite::{BufferPool, UioVfs};
use zcio_uio::{Config, Initiation, Translation, Uio};

const CHUNK: usize = 64 << 10;

fn layer(buffers: usize) -> Option<Arc<Uio>> {
    match Uio::new(Config {
        initiation: Initiation::Syscall,
        translation: Translation::Registered,
        entries: 32,
        buffers,
        buf_size: CHUNK,
        ..Config::default()
    }) {
        Ok(u) => Some(Arc::new(u)),
        // Skipped only where io_uring itself is missing (what the start-up probe checks);
        // any other refusal is this test's failure.
        Err(e) if zcio_vm::direct::DirectRing::new(2, None, None).is_err() => {
            zcio_vm::skip::skip(zcio_vm::skip::Capability::IoUring, &e.to_string());
            None
        }
        Err(e) => panic!("the layer: {e}"),
    }
}

/// A VFS called `name` on `uio` that reads `CHUNK`s, four ahead, and keeps them in a pool of
/// `chunks` chunks: the pool and the VFS.
fn pooled(name: &str, uio: Arc<Uio>, chunks: usize) -> (Arc<BufferPool>, UioVfs) {
    let pool = Arc::new(BufferPool::new(chunks));
    let vfs = UioVfs::register_pooled(name, uio, CHUNK, 4, pool.clone()).unwrap();
    (pool, vfs)
}

/// `n` tables in a fresh directory: the directory, their files, and what a scan of each gives.
fn make_tables(n: u64) -> (tempfile::TempDir, Vec<PathBuf>, Vec<QueryResult>) {
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..n)
        .map(|k| {
            let p = dir.path().join(format!("t{k}.db"));
            tables::create_tenk1(&p, 12_000 + 500 * k, k).unwrap();
            p
        })
        .collect();
    let want = paths
        .iter()
        .map(|p| tables::scan(&tables::open(p, None).unwrap()).unwrap())
        .collect();
    (dir, paths, want)
}

fn bytes_of(paths: &[PathBuf]) -> u64 {
    paths
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum()
}

#[test]
fn a_second_scan_is_served_from_the_pool_without_a_request() {
    let (_dir, paths, want) = make_tables(2);
    let size = bytes_of(&paths);
    let chunks = paths
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len().div_ceil(CHUNK as u64) as usize)
        .sum::<usize>();
    let Some(uio) = layer(chunks + 24) else {
        return;
    };
    let (pool, vfs) = pooled("zcio-pool-a", uio.clone(), chunks);
    assert_eq!(scan_all(&vfs, &paths, true), want, "first scan");
    let first = vfs.stats();
    assert!(first.bytes_transferred >= size, "{first:?} of {size}");
    assert_eq!(pool.stats().chunks, chunks, "every chunk kept: {pool:?}");
    for mmap in [true, false] {
        assert_eq!(scan_all(&vfs, &paths, mmap), want, "again, mmap {mmap}");
    }
    let after = vfs.stats();
    assert_eq!(after.requests, first.requests, "no request: {after:?}");
    assert_eq!(
        after.bytes_transferred, first.bytes_transferred,
        "{after:?}"
    );
    assert!(
        after.bytes_pooled - first.bytes_pooled >= 2 * size - 4 * CHUNK as u64,
        "both scans from the pool: {after:?} of {size}"
    );
    assert!(after.bytes_fetched > first.bytes_fetched, "{after:?}");
    drop(vfs);
    pool.clear();
    assert_eq!(uio.buffers_free(), chunks + 24, "every buffer back");
}

#[test]
fn a_pool_smaller_than_the_tables_evicts_and_reads_stay_exact() {
    let (_dir, paths, want) = make_tables(3);
    let Some(uio) = layer(40) else {
        return;
    };
    let (pool, vfs) = pooled("zcio-pool-b", uio, 5);
    for round in 0..2 {
        assert_eq!(scan_all(&vfs, &paths, round == 0), want, "round {round}");
        let st = pool.stats();
        assert!(st.chunks <= 5, "{st:?}");
        assert!(st.evicted > 0, "{st:?}");
    }
    assert!(vfs.stats().requests > 0);
}

#[test]
fn a_pool_holding_every_buffer_gives_them_back_to_new_reads() {
    let (_dir, paths, want) = make_tables(2);
    let Some(uio) = layer(10) else {
        return;
    };
    // Room for more chunks than the layer has buffers: after the first table, the pool holds
    // them all, and the second table's reads must get theirs back from it.
    let (pool, vfs) = pooled("zcio-pool-c", uio.clone(), 1000);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| {
            for (p, w) in paths.iter().zip(&want) {
                let got = scan_all(&vfs, std::slice::from_ref(p), true);
                assert_eq!(&got[0], w, "{}", p.display());
            }
            tx.send(()).unwrap();
        });
        rx.recv_timeout(Duration::from_secs(120))
            .expect("the reads went on (no hang waiting for a buffer the pool held)");
    });
    assert_eq!(uio.buffers_free(), 10 - pool.stats().chunks);
    assert!(pool.stats().evicted > 0, "{pool:?}");
}

#[test]
fn a_changed_file_is_read_again_not_served_from_its_old_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let len = 5 * CHUNK + 4096;
    let old: Vec<u8> = (0..len).map(|i| (i / 4096) as u8).collect();
    std::fs::write(&path, &old).unwrap();
    let Some(uio) = layer(16) else {
        return;
    };
    let h = readahead::handler(&uio);
    let pool = Arc::new(BufferPool::new(16));
    let read = |want: &[u8]| {
        let mut ra = ReadAhead::open(uio.clone(), h, &path, CHUNK, 2)
            .unwrap()
            .with_pool(pool.clone(), &path)
            .unwrap();
        let mut got = vec![0u8; len];
        assert_eq!(ra.read(&mut got, 0).unwrap(), len);
        assert!(got == want, "the file's bytes as they are now");
        ra.stats()
    };
    let first = read(&old);
    assert!(first.bytes_transferred >= len as u64, "{first:?}");
    assert_eq!(pool.stats().chunks, 6, "{pool:?}");
    let again = read(&old);
    assert_eq!(
        again.requests, 0,
        "the second read from the pool: {again:?} {pool:?}"
    );
    let new: Vec<u8> = old.iter().map(|b| b ^ 0x5a).collect();
    std::fs::write(&path, &new).unwrap();
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(std::time::SystemTime::now() + Duration::from_secs(5))
        .unwrap();
    drop(f);
    let st = read(&new);
    assert!(
        st.bytes_transferred >= len as u64,
        "read again whole: {st:?}"
    );
}

#[test]
fn a_page_read_in_place_keeps_its_buffer_after_the_pool_lets_go() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let len = 4 * CHUNK;
    std::fs::write(&path, vec![7u8; len]).unwrap();
    let Some(uio) = layer(8) else {
        return;
    };
    let h = readahead::handler(&uio);
    let pool = Arc::new(BufferPool::new(8));
    let open = || {
        ReadAhead::open(uio.clone(), h, &path, CHUNK, 2)
            .unwrap()
            .with_pool(pool.clone(), &path)
            .unwrap()
    };
    let mut ra = open();
    let mut all = vec![0u8; len];
    ra.read(&mut all, 0).unwrap();
    drop(ra);
    assert_eq!(pool.stats().chunks, 4);
    // A page of the third chunk: the new reader's window starts there, from the pool.
    let mut ra = open();
    let off = 2 * CHUNK as u64 + 4096;
    let in_window = ra.fetch(off, 4096).unwrap().expect("in place");
    assert_eq!(ra.stats().pool_hits, 2, "a window of two, both pooled");
    // A page of the first chunk, behind the window: pinned straight from the pool.
    let behind = ra.fetch(4096, 4096).unwrap().expect("in place");
    assert_eq!(ra.stats().pool_hits, 3);
    assert_eq!(ra.stats().requests, 0);
    pool.clear();
    assert_eq!(
        uio.buffers_free(),
        8 - 3,
        "the window's two chunks and the pinned first one stay after the pool lets go"
    );
    ra.unfetch(4096, behind);
    assert_eq!(uio.buffers_free(), 8 - 2, "released: its buffer back");
    ra.unfetch(off, in_window);
    drop(ra);
    assert_eq!(uio.buffers_free(), 8, "every buffer back");
}

#[test]
fn a_page_read_in_place_has_the_next_pages_of_the_window_prefetched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let len = 4 * CHUNK;
    std::fs::write(&path, vec![3u8; len]).unwrap();
    let Some(uio) = layer(8) else {
        return;
    };
    let h = readahead::handler(&uio);
    let pool = Arc::new(BufferPool::new(8));
    let open = |ahead: usize| {
        ReadAhead::open(uio.clone(), h, &path, CHUNK, 2)
            .unwrap()
            .with_pool(pool.clone(), &path)
            .unwrap()
            .with_prefetch(ahead)
    };
    let mut ra = open(0);
    let mut all = vec![0u8; len];
    ra.read(&mut all, 0).unwrap();
    assert_eq!(ra.stats().bytes_prefetched, 0, "a copy prefetches nothing");
    drop(ra);
    // Every page from the second chunk to the end, in place, as a scan fetches them: each asks
    // for the 8 KiB after it, across chunk boundaries, but not past the end of the file.
    let pages = (len - CHUNK) / 4096;
    for (ahead, want) in [
        (8192, (pages - 2) * 8192 + 4096),
        (4096, (pages - 1) * 4096),
        (0, 0),
    ] {
        let mut ra = open(ahead);
        let mut held = Vec::new();
        for p in 0..pages {
            let off = (CHUNK + p * 4096) as u64;
            held.push((off, ra.fetch(off, 4096).unwrap().expect("in place")));
            if held.len() > 2 {
                let (o, a) = held.remove(0);
                ra.unfetch(o, a);
            }
        }
        let st = ra.stats();
        assert_eq!(st.requests, 0, "all from the pool: {st:?}");
        assert_eq!(st.bytes_fetched, (pages * 4096) as u64, "{st:?}");
        assert_eq!(st.bytes_prefetched, want as u64, "{ahead} ahead: {st:?}");
        for (o, a) in held {
            ra.unfetch(o, a);
        }
    }
    // Through the engine: the same rows either way; prefetched only when asked.
    let (_dir, paths, want) = make_tables(2);
    let Some(uio) = layer(64) else {
        return;
    };
    let (_pool, vfs) = pooled("zcio-pool-prefetch", uio, 32);
    assert_eq!(vfs.prefetch(), readahead::PREFETCH);
    assert_eq!(scan_all(&vfs, &paths, true), want, "prefetching");
    let on = vfs.stats();
    assert!(
        on.bytes_prefetched > on.bytes_fetched / 2,
        "most pages had the next ones prefetched: {on:?}"
    );
    vfs.set_prefetch(0);
    assert_eq!(scan_all(&vfs, &paths, true), want, "not prefetching");
    let off = vfs.stats().since(&on);
    assert!(off.bytes_fetched > 0, "{off:?}");
    assert_eq!(off.bytes_prefetched, 0, "{off:?}");
}
