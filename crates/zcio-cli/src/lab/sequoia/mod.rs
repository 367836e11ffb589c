//! Paper 003 (Sequoia 2000): the Internet checksum, frames through containers, and
//! peer-to-peer I/O by splice.

pub mod checksum;
pub mod containers;
pub mod splice;
