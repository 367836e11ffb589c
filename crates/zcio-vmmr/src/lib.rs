//! # zcio-vmmr: virtual memory MTU reassembly (paper 002)
//!
//! A message that arrives in page-sized pieces scattered over memory (pooled receive buffers,
//! DMA pages) is handed to the application as one contiguous buffer by moving its pages into a
//! free run of a reserved virtual range, instead of copying them.
//!
//! - [`cycle`]: what a remapped message costs over its whole life (moved in, and back out when
//!   freed), for a policy that weighs that against a copy.
//! - [`pool`]: virtual page pools behind one trait: the paper's free-page bitmap with its
//!   word-at-a-time first-fit search, the size-class bitmaps of §4.3, and a buddy allocator.
//! - [`producer`]: real producers: a file read with `O_DIRECT` into scattered store slots, and
//!   sockets received through an io_uring provided-buffer ring of store slots.
//! - [`reassemble`]: the reassembler: a pool's free run of a remap space filled by moving the
//!   message's pages there (`zcio_vm::remap`), and moved back when the message is freed.
//!
//! The paper's measurements (§2.2–§2.5, §4) are the `vmmr` experiment of the `zcio` command
//! (`zcio bench vmmr`, `zcio report`), not part of this library.
#![forbid(unsafe_code)]

pub mod cycle;
pub mod pool;
pub mod producer;
pub mod reassemble;
