//! Test support shared by zcio's crates, written once: the runner of the fuzz targets
//! ([`fuzz`]), what the kill tests have in common ([`kill`]): the run's seed and a generator
//! seeded with it, a watchdog that fails a round which hangs, and a baseline of the process's
//! resources that each round must come back to; seeded test data ([`data`]); one test run
//! again in a child process with settings read once per process ([`child`]); and the Python
//! packages the Python tests need ([`python`]).
//!
//! Only tests use it (a dev-dependency of the crates whose tests do).

#![forbid(unsafe_code)]

pub mod child;
pub mod data;
pub mod fuzz;
pub mod kill;
pub mod python;
