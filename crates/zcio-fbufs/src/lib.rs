//! # zcio-fbufs: fast buffers across processes (paper 001)
//!
//! Fbufs hand I/O data from process to process along a data path without copying: the fbuf
//! region is mapped at the same virtual address in every process of the path, so a reference is
//! an address that means the same thing everywhere.
//!
//! The modules, bottom up:
//! - [`region`]: how a process reads and writes the fbuf region. Every read is bounds-checked
//!   and word-atomic, because another process (a buggy or malicious originator of a volatile
//!   fbuf) may rewrite any byte at any time; loops go through word slices, one check per range.
//! - [`path`]: a data path's fbufs: one range of addresses per path, the same everywhere,
//!   whose chunks (under a quota) are memfds of their own, made as the allocator needs them,
//!   read-only in receivers (enforced by the kernel: their descriptors are read-only and the
//!   memory sealed against every writer but the originator's mapping), LIFO free lists, cached
//!   or uncached, volatile or not (a non-volatile send makes the fbuf read-only in the
//!   originator until every receiver has freed it), and a budget of cached bytes past which
//!   chunks holding no live fbuf are retired, coldest first, their pages given back (the
//!   paper's pageable fbuf memory).
//! - [`aggregate`]: x-kernel aggregate objects (§3.2.3, Figure 2): a DAG of leaf, join and
//!   slice nodes stored in the region itself, so that a send passes one root reference. It
//!   offers join, split, clip and header prepend, and a receiver-side reader that checks every
//!   reference, survives cycles and concurrent rewriting, reads unreadable references as "no
//!   data", and returns application data units across fragment boundaries, copying only the
//!   units that straddle fragments (§5.2).
//! - [`device`]: fbufs originated by a device: a socket received straight into a path's
//!   fbufs through an io_uring provided-buffer ring.
//! - [`ring`]: the shared single-producer rings a link passes references through.
//! - [`link`]: fbufs and aggregate messages between processes: the path offered once, its
//!   chunks announced (each with a read-only descriptor) and retired by frames in order with
//!   the references, references and deallocation notices through the rings (the socket
//!   beside them for wake-ups, requests and overflow, with notices piggybacked on requests),
//!   every reference of a receiver that dies released (seen through a pidfd), and a forwarding
//!   server for three-process paths.
//! - [`owner`]: the region's owner (the kernel's role): paths created, chunks granted against
//!   quotas and a budget, and taken back when every process of a path is gone.
//!
//! The experiments of Table 1 and Figure 3 (fbuf variants against page remapping and copies,
//! between two processes) live with the `zcio` command (`zcio bench fbufs`), not here.
#![forbid(unsafe_code)]

pub mod aggregate;
pub mod device;
pub mod link;
pub mod owner;
pub mod path;
pub mod region;
pub mod ring;

/// The test pattern of message `seq`: `len` bytes both ends can regenerate (used by the tests
/// and their peer processes).
pub fn pattern(seq: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|j| (seq.wrapping_mul(131) ^ j.wrapping_mul(7) ^ (j >> 8)) as u8)
        .collect()
}

/// The length of message `seq` in the tests' streams: varying, from 1 KiB to about 70 KiB.
pub fn pattern_len(seq: u64) -> usize {
    1024 + (seq as usize * 4099) % (68 * 1024)
}
