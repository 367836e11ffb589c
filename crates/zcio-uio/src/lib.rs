//! # zcio-uio: user-level I/O (paper 004)
//!
//! An I/O layer an application links to. Each request is one self-contained 64-byte record
//! ([`request::Request`], the paper's Table I); the layer keeps no per-connection state. A
//! request is initiated without a system call (io_uring's submission ring, read by a polling
//! kernel thread: the conditional store buffer's role) or with one system call per request (the
//! paper's alternative); its data moves straight between the file and the application's buffer
//! (`O_DIRECT`), in a region registered ahead (pinned once: the device TLB hitting) or
//! translated by the kernel per request (the kernel-handled TLB miss); and its completion calls
//! the handler the record names, with its argument, in user space, on the thread that issued it
//! (queued while that thread is busy, delivered in order when it polls or waits). A blocking
//! per-thread API is built on top ([`Uio::read_blocking`]), the thread library's role.
//!
//! How the paper's hardware maps onto Linux:
//!
//! | paper | here |
//! |---|---|
//! | conditional store buffer (atomic, non-blocking initiation) | an io_uring submission entry written under the layer's lock; with `SQPOLL` no system call; a full ring is [`NotQueued::Full`], never a wait |
//! | initiation by system call | the same ring without `SQPOLL`: one `io_uring_enter` per request |
//! | device TLB with a table-walk engine | a buffer region registered with the ring (`READ_FIXED`) |
//! | TLB misses handled by the kernel | plain `READ`: the kernel looks up and pins the pages per request |
//! | notification queue, user-level handler | completions reaped from the shared completion ring and routed to the issuing thread's queue; the handler runs when that thread polls |
//! | asynchronous notification | a record flagged [`request::ASYNC`]: its handler runs on a handler thread ([`Uio::serve_handlers`]) as soon as the device completes it, the submitting thread neither polling nor waiting; or an eventfd to wait on beside other descriptors ([`Uio::completion_fd`]) |
//! | capability | a slot of the ring's registered file table ([`request::Target`]) |
//!
//! Safety without trusting records: a record may come from anywhere ([`request::Request::from_bytes`]),
//! so everything in it is checked before it reaches the kernel. Its buffer must lie in the
//! [`zcio_vm::direct::IoBuf`] handed with it, which the layer then holds until completion (the
//! application cannot free or reuse it meanwhile); its handler must be registered; its target
//! open; with `O_DIRECT`, offset, length and address aligned. A record that fails completes
//! with a negative errno and a [`UioError`] naming the fault, and never reaches the device.
//!
//! The paper's tables lay on a disk each; [`memdisk`] gives files block devices of their own
//! where a machine has fewer disks than that: ext4 on memory-backed loop devices.
#![forbid(unsafe_code)]

pub mod layer;
pub mod memdisk;
pub mod request;

pub use layer::{Completion, Config, Initiation, NotQueued, Translation, Uio, UioError, UioStats};
pub use request::{HandlerId, Opcode, Request, Target};
