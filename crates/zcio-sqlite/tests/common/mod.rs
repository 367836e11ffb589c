//! What the engine tests share.

use std::path::PathBuf;
use zcio_sqlite::UioVfs;
use zcio_sqlite::tables::{self, QueryResult};

/// Scan `paths` through `vfs`, one thread each, pages in place with `mmap`.
pub fn scan_all(vfs: &UioVfs, paths: &[PathBuf], mmap: bool) -> Vec<QueryResult> {
    std::thread::scope(|s| {
        let hs: Vec<_> = paths
            .iter()
            .map(|p| {
                let name = vfs.name().to_string();
                s.spawn(move || {
                    let c = tables::open(p, Some(&name)).unwrap();
                    if mmap {
                        tables::use_mmap(&c, 1 << 30).unwrap();
                    }
                    tables::scan(&c).unwrap()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}
