//! Shared by the layer's test files: a data file of a known pattern and a layer with it open.

#![allow(dead_code)]

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use zcio_uio::{Config, Initiation, Target, Translation, Uio};

pub fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8)
        .collect()
}

pub fn data_file(len: usize) -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("table");
    let data = pattern(len);
    let mut f = std::fs::File::create(&path).unwrap();
    f.write_all(&data).unwrap();
    f.sync_all().unwrap();
    (dir, path, data)
}

pub fn layer(initiation: Initiation, translation: Translation, entries: u32) -> Option<Uio> {
    match Uio::new(Config {
        initiation,
        translation,
        entries,
        buffers: 32,
        buf_size: 64 << 10,
        ..Config::default()
    }) {
        Ok(u) => Some(u),
        Err(e) => {
            zcio_vm::skip::skip(
                zcio_vm::skip::Capability::IoUring,
                &format!("({initiation:?}, {translation:?}): {e}"),
            );
            None
        }
    }
}

/// A data file of `len` bytes, and a layer of `entries` entries (system-call initiation) with
/// it open: the file's directory, the layer and the file's target; `None` (after saying why)
/// where this kernel refuses the layer.
pub fn opened(
    len: usize,
    translation: Translation,
    entries: u32,
) -> Option<(tempfile::TempDir, Uio, Target)> {
    let (dir, path, _data) = data_file(len);
    let uio = layer(Initiation::Syscall, translation, entries)?;
    let target = uio.open(&path, false).unwrap();
    Some((dir, uio, target))
}

/// Sets its flag when dropped: a test that fails inside a scope still stops its handler
/// thread, so the scope ends and the failure shows.
pub struct StopOnDrop<'a>(pub &'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}
