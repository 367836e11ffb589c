//! # zcio-sqlite-ext: zcio's SQLite VFS as a loadable extension
//!
//! A shared library any SQLite program loads (`.load ./libzcio_sqlite_ext` in the `sqlite3`
//! shell, `sqlite3_load_extension` in C, `Connection::load_extension` in rusqlite): it registers
//! the VFS of [`zcio_sqlite::vfs`] under the name `zcio`, main databases opened read-only then
//! read through the user-level I/O layer ([`zcio_uio`]) into the engine's buffer pool
//! ([`zcio_sqlite::BufferPool`]), which keeps the files' chunks across reads and connections.
//! The extension stays loaded for the life of the process (`SQLITE_OK_LOAD_PERMANENTLY`), so the
//! VFS outlives the connection that loaded it.
//!
//! - A database picks it by name: `file:x.db?vfs=zcio` (URI file names on), or
//!   `sqlite3_open_v2(.., "zcio")`.
//! - Loaded through the entry point `sqlite3_zciodefault_init` instead (`.load
//!   ./libzcio_sqlite_ext sqlite3_zciodefault_init`), it is also made the default VFS, for every
//!   database opened from then on without a `vfs=`.
//! - Read when it is first loaded: `ZCIO_SQLITE_POOL_MIB`, the pool's size in MiB (default
//!   256; its buffers are registered with the kernel, so pinned while the process lives), and
//!   `ZCIO_SQLITE_INITIATION`, `polled` (the default: a polling kernel thread takes requests,
//!   no system call per request) or `syscall` (one system call per request).
//!
//! SQLite reaches the layer only for a main database opened read-only (`mode=ro`, `.open
//! --readonly`, `sqlite3 -readonly`); any other file opened through `zcio` (a database opened
//! for writing, its journal, temporary files) is SQLite's own `unix` file, whole. With SQLite's
//! memory-mapped reads on (`pragma mmap_size`), pages are read in place in the pool's buffers;
//! otherwise each is copied out of them. Where the layer cannot run (no io_uring), loading
//! fails with the kernel's reason.

use rusqlite::{Connection, ffi};
use std::ffi::{c_char, c_int};
use std::sync::{Arc, OnceLock};
use zcio_sqlite::{BufferPool, UioVfs};
use zcio_uio::{Config, Initiation, Translation, Uio};

/// The name the VFS is registered under.
pub const NAME: &str = "zcio";
/// Bytes a request reads (and the size of a pooled chunk).
pub const CHUNK: usize = 128 << 10;
/// Requests in flight per file.
pub const DEPTH: usize = 4;
/// The pool's size unless `ZCIO_SQLITE_POOL_MIB` says otherwise.
pub const POOL_MIB: usize = 256;

/// The VFS, made at the first load and registered for the rest of the process (or why it could
/// not be).
static VFS: OnceLock<Result<UioVfs, String>> = OnceLock::new();

/// The layer and pool the environment asks for, and the VFS over them.
fn make() -> Result<UioVfs, String> {
    let pool_mib = match std::env::var("ZCIO_SQLITE_POOL_MIB") {
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .ok()
            .filter(|&m| m > 0)
            .ok_or(format!(
                "ZCIO_SQLITE_POOL_MIB must be a number of MiB above 0, not {v:?}"
            ))?,
        Err(_) => POOL_MIB,
    };
    let initiation = match std::env::var("ZCIO_SQLITE_INITIATION").as_deref() {
        Err(_) | Ok("polled") => Initiation::Polled,
        Ok("syscall") => Initiation::Syscall,
        Ok(other) => {
            return Err(format!(
                "ZCIO_SQLITE_INITIATION must be polled or syscall, not {other:?}"
            ));
        }
    };
    let chunks = (pool_mib << 20).div_ceil(CHUNK);
    let uio = Uio::new(Config {
        initiation,
        translation: Translation::Registered,
        entries: 256,
        // The pool's chunks, and a window, a side read and a restart's leftovers for each of a
        // few files read at once beside them.
        buffers: chunks + 4 * (2 * DEPTH + 1),
        buf_size: CHUNK,
        sqpoll_idle_ms: 10,
    })
    .map_err(|e| format!("the user-level I/O layer cannot run here: {e}"))?;
    let pool = Arc::new(BufferPool::new(chunks));
    UioVfs::register_pooled(NAME, Arc::new(uio), CHUNK, DEPTH, pool).map_err(|e| e.to_string())
}

/// Register the VFS (once per process), the default too if `default`: whether SQLite keeps the
/// library loaded (always, once registered).
fn register(default: bool) -> rusqlite::Result<bool> {
    let fail = |msg: String| {
        rusqlite::Error::SqliteFailure(
            ffi::Error::new(ffi::SQLITE_ERROR),
            Some(format!("zcio: {msg}")),
        )
    };
    let vfs = VFS
        .get_or_init(make)
        .as_ref()
        .map_err(|e| fail(e.clone()))?;
    if default {
        vfs.make_default().map_err(|e| fail(e.to_string()))?;
    }
    Ok(true)
}

fn init(_db: Connection) -> rusqlite::Result<bool> {
    register(false)
}

fn init_default(_db: Connection) -> rusqlite::Result<bool> {
    register(true)
}

/// The entry point SQLite finds by the library's name (`libzcio_sqlite_ext.so`): registers
/// the `zcio` VFS.
///
/// # Safety
/// Called by SQLite's extension loader, with the arguments it passes every entry point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sqlite3_zciosqliteext_init(
    db: *mut ffi::sqlite3,
    err: *mut *mut c_char,
    api: *mut ffi::sqlite3_api_routines,
) -> c_int {
    // SAFETY: SQLite's own arguments, passed on; `init` only registers the VFS.
    unsafe { Connection::extension_init2(db, err, api, init) }
}

/// The entry point that registers the `zcio` VFS and makes it SQLite's default.
///
/// # Safety
/// As [`sqlite3_zciosqliteext_init`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sqlite3_zciodefault_init(
    db: *mut ffi::sqlite3,
    err: *mut *mut c_char,
    api: *mut ffi::sqlite3_api_routines,
) -> c_int {
    // SAFETY: as above.
    unsafe { Connection::extension_init2(db, err, api, init_default) }
}
