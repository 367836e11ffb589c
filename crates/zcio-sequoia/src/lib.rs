//! # zcio-sequoia: Sequoia 2000's I/O remedies (paper 003)
//!
//! - [`container`]: container shipping: pages owned by one domain at a time, given up by
//!   writing them to an I/O path and gained by reading, mapped only if wanted.
//! - [`pool`]: containers made ahead: fresh memory files whose pages a thread allocates in
//!   bulk before the data that fills them exists.
//! - [`ppio`]: peer-to-peer I/O: a [`ppio::Splice`] between a source and a sink descriptor
//!   moves data inside the kernel, in increments the application chooses, without the data
//!   ever passing through the application.
//!
//! The Internet checksum of the same paper is its own crate, `zcio-checksum`.
#![forbid(unsafe_code)]

pub mod container;
pub mod pool;
pub mod ppio;
