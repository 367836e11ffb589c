//! Application buffers the application owns, in 4 KiB pages or in transparent huge pages.
//!
//! Genie's emulated copy pays off where page-table work is cheap next to copying: on this
//! generation of hardware, at 2 MiB and not at 4 KiB (one PMD maps 512 pages; protecting,
//! referencing or swapping it costs microseconds, copying its bytes tens). An [`AppBuffer`] made
//! with [`AppBuffer::huge`] starts on a 2 MiB boundary and is backed by transparent huge pages,
//! faulted in at once, so the semantics take their 2 MiB paths on it. Any other `&[u8]` works
//! too, through the 4 KiB paths; [`granule_of`] says which a buffer would take.
//!
//! ```
//! use zcio_genie::buffer::{AppBuffer, granule_of};
//! let mut b = AppBuffer::huge(4 << 20).unwrap();
//! b[..5].copy_from_slice(b"hello");
//! assert_eq!(&b[..5], b"hello");
//! // "2m" where the kernel gave huge pages, "4k" where THP is off.
//! println!("{}", granule_of(&b));
//! ```

use crate::error::{GenieError, Result};
use std::ops::{Deref, DerefMut};
use zcio_vm::huge::{self, Granule};
use zcio_vm::{MapOptions, Mapping, RawRange};

/// A page-aligned buffer the application owns (unmapped on drop), optionally in huge pages.
#[derive(Debug)]
pub struct AppBuffer {
    map: Mapping,
    len: usize,
}

impl AppBuffer {
    /// `len` bytes in ordinary (4 KiB) pages, zeroed, page-aligned.
    pub fn new(len: usize) -> Result<AppBuffer> {
        Self::make(len, false)
    }

    /// `len` bytes on a 2 MiB boundary in transparent huge pages, zeroed and faulted in now.
    /// Where the kernel gives no huge pages (THP off, memory too fragmented) the buffer is
    /// still made, in 4 KiB pages: [`AppBuffer::granule`] says which it got.
    pub fn huge(len: usize) -> Result<AppBuffer> {
        Self::make(len, true)
    }

    /// A buffer for a message of `len` bytes, as zcio makes one to receive into: in huge
    /// pages where a system buffer of this length would be (from 2 MiB, where huge pages are
    /// to be had), so that the 2 MiB paths run.
    pub fn for_message(len: usize) -> Result<AppBuffer> {
        Self::make(len, crate::passing::system_buffer_options(len).huge)
    }

    fn make(len: usize, huge: bool) -> Result<AppBuffer> {
        if len == 0 {
            return Err(GenieError::arg("len", "a buffer of 0 bytes".to_string()));
        }
        let opts = MapOptions {
            huge,
            populate: huge,
            no_huge: !huge,
        };
        let map = Mapping::anonymous(len, opts)?;
        Ok(AppBuffer { map, len })
    }

    /// The granule the buffer's whole PMDs are mapped at now (pages can be split or collapsed
    /// by the kernel later).
    pub fn granule(&self) -> Granule {
        granule_of(self)
    }
}

impl Deref for AppBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.map.as_slice()[..self.len]
    }
}

impl DerefMut for AppBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.map.as_mut_slice()[..self.len]
    }
}

/// The granule the semantics would handle `buf` at: `2m` when every whole 2 MiB-aligned
/// granule of it is a PMD-mapped huge page, `mixed` when some are, `4k` otherwise (also where
/// the kernel cannot tell). One `PAGEMAP_SCAN` system call.
pub fn granule_of(buf: &[u8]) -> Granule {
    huge::scan(RawRange::of(buf)).granule()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_have_the_granule_asked_for_where_the_kernel_gives_it() {
        let b = AppBuffer::new(8 << 20).unwrap();
        assert_eq!(b.granule(), Granule::Base);
        assert_eq!(b.len(), 8 << 20);
        let h = AppBuffer::huge((4 << 20) + 100).unwrap();
        assert_eq!(h.as_ptr() as usize % (2 << 20), 0);
        assert_eq!(h.len(), (4 << 20) + 100);
        match huge::unavailable_reason() {
            None => assert_eq!(h.granule(), Granule::Huge),
            Some(why) => {
                eprintln!("huge pages unavailable here ({why}): the buffer is in 4 KiB pages");
                assert_eq!(h.granule(), Granule::Base);
            }
        }
        assert!(AppBuffer::huge(0).unwrap_err().to_string().contains("len"));
    }
}
