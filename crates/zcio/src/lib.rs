//! The `zcio` command's library: transfers between processes, benchmarks side by side, and the
//! reproduction report (`zcio report`) with its experiments, fitted models, plots and documents.

pub mod bench;
pub mod checksum_bench;
pub mod fbufs_bench;
pub mod iceoryx;
pub mod report;
pub mod splice_bench;
pub mod transfer;
pub mod vmmr_bench;
