//! # zcio: copy-avoiding I/O for Linux
//!
//! Two processes, started on their own, find each other by a name and pass a buffer under
//! emulated copy: the sender may write into its buffer as soon as `send` returns, and the
//! receiver still gets the bytes of the moment of the call.
//!
//! ```no_run
//! use std::time::Duration;
//! use zcio::{Channel, InputBuffering, Semantics};
//!
//! // In the receiving process:
//! let listener = Channel::listen("frames")?; // this host, this user only
//! let mut rx = listener.accept(None)?;
//! let (buf, _path) = rx.recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux)?;
//!
//! // In the sending process, started on its own:
//! let mut tx = Channel::connect("frames", Duration::from_secs(5))?;
//! let mut data = vec![7u8; 64 << 20];
//! let (ticket, _path) = tx.send(Semantics::EmulatedCopy, &data)?;
//! data.fill(0); // the receiver still gets the 7s
//! tx.wait(ticket)?;
//! # Ok::<(), zcio::GenieError>(())
//! ```
//!
//! `send` returns once the pages are protected and queued, without waiting for the receiver,
//! while the message fits the link's window ([`LinkOptions`], 16 MiB each way unless the
//! listener says otherwise). With `tcp://host:port` for a name the same program runs between
//! hosts, over TCP. Each call's [`Accounting::path`] says which mechanism carried the data, or
//! which fallback and why; errors match by [`GenieError::kind`]; every wait can end after a
//! time or at a signal ([`Waits`]), and a channel is a descriptor for `poll`, `epoll` or an
//! async runtime (the example `tokio_channel`). The program whole, with its checks, is the
//! example `memnet_emulated_copy` (`cargo run -p zcio --example memnet_emulated_copy`); the
//! crate's other examples show one paper's interface each.
//!
//! Where the sender can write its data straight into a buffer the channel gives it, a
//! [`Loan`] moves without a byte copied: a memory file mapped for the sender alone, sealed
//! and passed by [`Channel::send_loan`], mapped privately by [`Channel::recv_loan`] as the
//! receiver's own bytes ([`Received`]), which nobody else can change.
//!
//! ```no_run
//! # use std::time::Duration;
//! # use zcio::Channel;
//! # let mut tx = Channel::connect("frames", Duration::from_secs(5))?;
//! # let mut rx = Channel::connect("frames", Duration::from_secs(5))?;
//! let mut loan = tx.loan(64 << 20)?;
//! loan.fill(7);
//! tx.send_loan(loan)?;
//! let (frame, _path) = rx.recv_loan()?;
//! assert!(frame.iter().all(|&b| b == 7));
//! # Ok::<(), zcio::GenieError>(())
//! ```
//!
//! Between two ends that trust each other, `set_volatile_loans(true)` at both makes loans
//! volatile: memory files reused from message to message, lent to the receiver, mapped there
//! in place and given back when it drops the message, so that after a file's first trip a loan
//! costs no fresh page and no page-table work ([`genie::memnet::loan`] says what is given up).
//!
//! ## Where each mechanism lives
//!
//! - [`genie`] (paper 000, Genie): the eight data-passing semantics over the memory network,
//!   files, pipes and sockets, and the channels by name over them; errors are [`GenieError`],
//!   matched by [`ErrorKind`].
//! - [`fbufs`] (paper 001, fbufs): fast buffers along a path of processes, offered and joined
//!   by name ([`fbufs::link::PathName`]); errors are
//!   [`fbufs::path::FbufError`], [`fbufs::link::LinkError`],
//!   [`fbufs::aggregate::AggregateError`] and [`fbufs::ring::RingError`].
//! - [`vmmr`] (paper 002, VM MTU reassembly): messages made contiguous by moving their pages;
//!   errors are [`vmmr::reassemble::VmmrError`] (inside a [`vmmr::reassemble::Refused`] that
//!   hands back what was given), [`vmmr::pool::PoolError`] and
//!   [`vmmr::producer::ProducerError`].
//! - [`sequoia`] (paper 003, Sequoia 2000): container shipping and splices; errors are
//!   [`sequoia::container::ContainerError`] and [`sequoia::ppio::SpliceError`].
//! - [`checksum`] (paper 003): the Internet checksum at memory speed, and when to skip it; it
//!   has no error type of its own (a socket's path kind is a [`std::io::Result`]).
//! - [`uio`] (paper 004, user-level I/O): 64-byte request records through io_uring to
//!   handlers in user space; errors are [`uio::UioError`], [`uio::NotQueued`] and
//!   [`uio::memdisk::DiskError`].
//! - [`vm`]: the page-level layer beneath them all (protection, TCOW, page moves, shared
//!   memory), the names processes meet by ([`vm::rendezvous`]) and the mechanisms a program
//!   turns off ([`vm::config`]); errors are [`vm::VmError`], and [`vm::uffd::MoveError`],
//!   [`vm::arena::RingCorrupt`], [`vm::direct::PushError`] and
//!   [`vm::rendezvous::RendezvousError`] where a call says so.
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub use zcio_checksum as checksum;
pub use zcio_fbufs as fbufs;
pub use zcio_genie as genie;
pub use zcio_sequoia as sequoia;
pub use zcio_uio as uio;
pub use zcio_vm as vm;
pub use zcio_vmmr as vmmr;

pub use zcio_genie::channel::{Channel, ChannelListener};
pub use zcio_genie::memnet::loan::{Loan, Received};
pub use zcio_genie::memnet::{LinkOptions, MemnetEndpoint, Ticket, WindowFull};
pub use zcio_genie::{
    Accounting, AppBuffer, ErrorKind, Fallback, GenieError, Granule, InputBuffering, Semantics,
    Waits,
};
