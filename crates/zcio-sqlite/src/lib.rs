//! # zcio-sqlite: a real database engine over user-level I/O (paper 004's benchmark)
//!
//! - [`vfs`]: a SQLite VFS whose main-database reads go through a [`zcio_uio::Uio`] layer
//!   (the ABI edge with SQLite; this crate's only `unsafe`).
//! - [`readahead`]: the sequential read-ahead those reads use: large `O_DIRECT` requests in
//!   flight into the layer's buffers, pages copied out to the engine.
//! - [`pool`]: the engine's own buffer pool, chunks kept in the layer's buffers across reads
//!   and connections.
//! - [`tables`]: the Wisconsin `tenk1` tables and the paper's scan query.
//! - [`extension`]: the VFS as a SQLite loadable extension (`crates/zcio-sqlite-ext`), built
//!   from this checkout for the shell's tests and bench.
//!
//! SQLite itself is bundled (the `bundled` feature, the default), or, with
//! `loadable_extension` instead, reached through the API table of the program that loads the
//! extension.

pub mod extension;
pub mod pool;
pub mod readahead;
pub mod tables;
pub mod vfs;

pub use pool::{BufferPool, PoolStats};
pub use readahead::ReadStats;
pub use vfs::UioVfs;
