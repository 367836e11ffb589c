//! # zcio-genie: Genie's data-passing semantics over real I/O modules
//!
//! An application passes data to and from an I/O module with the semantics of its choice
//! ([`Semantics`], paper 000), each keeping the promise the paper gives it:
//!
//! | semantics | buffers | output integrity | how (this machine) |
//! |---|---|---|---|
//! | copy | application | strong | bounce copy |
//! | emulated copy | application | strong | TCOW on output, aligned staging + page swap on input |
//! | share | application | weak | in place, wired |
//! | emulated share | application | weak | in place, referenced |
//! | move | system regions | strong | region given away, unmapped |
//! | emulated move | system regions | strong | region hidden and cached |
//! | weak move | system regions | weak | region kept mapped and wired, cached |
//! | emulated weak move | system regions | weak | region kept mapped, cached |
//!
//! Two programs find each other by a name and pass messages through a [`channel::Channel`]: on
//! this host over the memory network, to another host over TCP (`tcp://host:port`), with the
//! same calls.
//!
//! Modules: the memory network between two processes ([`memnet`]), files buffered and
//! `O_DIRECT`, pipes and kernel sockets ([`stream`]). Thresholds come from a calibration
//! [`profile::Profile`]. Kernel features are probed at start ([`probe`]).
#![forbid(unsafe_code)]

pub mod breakdown;
pub mod buffer;
pub mod channel;
pub mod datagram;
pub mod error;
pub mod memnet;
mod passing;
pub mod path;
pub mod probe;
pub mod profile;
pub mod region;
pub mod semantics;
pub mod stream;
pub mod waits;
pub mod zerocopy;

pub use buffer::{AppBuffer, granule_of};
pub use error::{ErrorKind, GenieError, Result};
pub use path::DataPath;
pub use region::{Region, RegionCache, RegionState};
pub use semantics::{Accounting, Fallback, InputBuffering, Integrity, Semantics};
pub use waits::Waits;
pub use zcio_vm::huge::Granule;
