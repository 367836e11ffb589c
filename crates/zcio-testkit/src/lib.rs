//! Test support shared by zcio's crates, written once: the runner of the fuzz targets
//! ([`fuzz`]), what the kill tests have in common ([`kill`]): the run's seed and a generator
//! seeded with it, a watchdog that fails a round which hangs, and a baseline of the process's
//! resources that each round must come back to; and seeded test data ([`data`]).
//!
//! Only tests use it (a dev-dependency of the crates whose tests do).

#![forbid(unsafe_code)]

pub mod data;
pub mod fuzz;
pub mod kill;
