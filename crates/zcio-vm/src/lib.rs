//! # zcio-vm: the VM layer of zcio
//!
//! The only crate of zcio with `unsafe` code (besides nothing: the layers above forbid it). It
//! offers, as safe interfaces, the page-level primitives that Genie (paper 000) builds its data
//! passing semantics from:
//!
//! | Genie primitive | here |
//! |---|---|
//! | page-aligned buffers, regions | [`page::RawRange`], [`mapping::Mapping`] |
//! | read only / invalidate / reinstate | [`protect::set_access`] (batched `mprotect`) |
//! | wire / unwire | [`protect::wire`], [`protect::unwire`] |
//! | reference / unreference pages, I/O-deferred deallocation | [`runtime::VmRuntime::reference_output`], [`wire::vmsplice_all`] (the kernel holds page references in a pipe) |
//! | TCOW | [`runtime`] (userfaultfd write-protect + `UFFDIO_MOVE`), [`fallback`] (mprotect + SIGSEGV) |
//! | swap pages | [`runtime::VmRuntime::swap`], [`runtime::VmRuntime::move_range`] |
//! | region check | [`runtime::VmRuntime::watch`], [`runtime::VmRuntime::watch_gone`] |
//! | the memory network's shared memory | [`arena::SharedArena`], [`arena::SharedRing`] |
//!
//! and, for reading in place what a device put in memory, a prefetch into the CPU's cache that
//! gives back what a copy brought with it ([`prefetch`]);
//! and, for VMMR (paper 002), page stores and the range messages are reassembled in by moving
//! pages ([`remap`]), with the costs a reassembler chooses by ([`remap::Calibration`]), and a
//! receive path into pooled page buffers: an io_uring provided-buffer ring ([`bufring`]); and,
//! for paper 003's containers, memory files sealed against change ([`sealed`]) and the kernel's policy for their pages
//! ([`shmem`]) and word stores at
//! `memcpy`'s speed into volatile ones ([`words`]); and, for paper
//! 001's fbufs, the region of address space every process reserves for shared paths
//! ([`reserve`]) and a path's chunks, memory files of their own stitched into its range, each
//! mapped and given back on its own ([`stitched`]).
//!
//! Kernel features are probed at run time ([`VmRuntime::capabilities`]); a missing one selects a fallback and
//! is reported, never a crash.
#![cfg_attr(not(target_os = "linux"), allow(unused))]

#[cfg(not(target_os = "linux"))]
compile_error!("zcio runs on Linux only: it is built on userfaultfd, memfd, vmsplice and O_DIRECT");

pub mod arena;
pub mod bufring;
pub mod config;
pub mod direct;
pub mod error;
pub mod fallback;
pub mod huge;
pub mod mapping;
pub mod page;
pub mod prefetch;
mod procself;
pub mod protect;
pub mod remap;
pub mod rendezvous;
pub mod reserve;
pub mod resources;
pub mod runtime;
pub mod sealed;
pub mod shared;
pub mod shmem;
pub mod skip;
pub mod sockzc;
pub mod staging;
pub mod stitched;
pub mod uffd;
pub mod wire;
pub mod words;

/// `Display` for each type named that has a `name(self) -> &'static str`: the name, as the
/// command line and the JSON say it.
#[macro_export]
macro_rules! display_by_name {
    ($($t:ty),+ $(,)?) => {$(
        impl ::std::fmt::Display for $t {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.name())
            }
        }
    )+};
}

/// `Debug` for a type shown as a summary rather than field by field (its buffers, maps and
/// descriptors are not worth printing): the type's name, then each value named, an expression
/// of `self` bound as the `|s|` says; a trailing `..` ends the summary as
/// [`finish_non_exhaustive`](std::fmt::DebugStruct::finish_non_exhaustive) does.
///
/// ```
/// struct Buf {
///     addr: usize,
///     bytes: Vec<u8>,
/// }
/// zcio_vm::debug_summary!(Buf, |b| addr: format_args!("{:#x}", b.addr), len: b.bytes.len());
/// let b = Buf { addr: 0x1000, bytes: vec![0; 3] };
/// assert_eq!(format!("{b:?}"), "Buf { addr: 0x1000, len: 3 }");
/// ```
#[macro_export]
macro_rules! debug_summary {
    ($t:ident, |$this:ident| $($name:ident: $value:expr),+ $(,)?) => {
        $crate::debug_summary!(@impl $t, $this, finish, $($name: $value),+);
    };
    ($t:ident, |$this:ident| $($name:ident: $value:expr),+, ..) => {
        $crate::debug_summary!(@impl $t, $this, finish_non_exhaustive, $($name: $value),+);
    };
    (@impl $t:ident, $this:ident, $finish:ident, $($name:ident: $value:expr),+) => {
        impl ::std::fmt::Debug for $t {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                let $this = self;
                f.debug_struct(stringify!($t))
                    $(.field(stringify!($name), &$value))+
                    .$finish()
            }
        }
    };
}

pub use error::{Result, VmError};
pub use mapping::{MapOptions, Mapping};
pub use page::{RawRange, page_size};
pub use runtime::VmRuntime;
