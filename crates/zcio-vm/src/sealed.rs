//! Memory files whose contents nobody can change any more: the pages of paper 003's containers.
//!
//! - [`ExclusiveFile`]: a fresh memfd, mapped for its creator alone to fill. Its descriptor is
//!   never handed out while the mapping lives, so the bytes can be offered as slices.
//! - [`SealedFile`]: a memfd sealed against writes and size changes (`F_SEAL_WRITE`,
//!   `F_SEAL_SHRINK`, `F_SEAL_GROW`). The kernel refuses to add the write seal while anyone
//!   holds a writable shared mapping, so once sealed nobody, in any process, can change the
//!   bytes: the file can be passed to other processes (`SCM_RIGHTS`) and read in place.
//!   [`SealedFile::adopt`] seals a descriptor received from elsewhere, refusing one its sender
//!   still has mapped for writing.
//! - [`PrivateView`]: a sealed file mapped privately: readable and writable by this process,
//!   each page written becoming a private copy (the file never changes).

use crate::error::{Result, VmError};
use crate::mapping::Mapping;
use crate::page::{align_up, page_size};
use rustix::fs::SealFlags;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

/// The seals that make a file's contents final.
fn final_seals() -> SealFlags {
    SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW
}

/// A fresh memory file mapped for its creator alone.
#[derive(Debug)]
pub struct ExclusiveFile {
    map: Mapping,
    fd: OwnedFd,
    len: usize,
}

impl ExclusiveFile {
    /// A zeroed file of `len` bytes (rounded up to pages), mapped.
    pub fn new(name: &str, len: usize) -> Result<ExclusiveFile> {
        if len == 0 {
            return Err(VmError::Empty {
                what: "a container",
            });
        }
        let pages = align_up(len, page_size()).ok_or(VmError::TooLarge {
            what: "a container",
            value: len,
            limit: crate::mapping::MAX_MAPPING,
        })?;
        let fd = crate::mapping::memfd(name, pages)?;
        let map = Mapping::shared_fd(fd.as_fd(), 0, pages, None)?;
        Ok(ExclusiveFile {
            map,
            fd,
            len: pages,
        })
    }

    /// Its length (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the mapping is `len` bytes, readable, alive as long as `self`; the file's
        // descriptor is owned here and has never left this object, so no other mapping or
        // writer of these pages exists anywhere.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr(), self.len) }
    }

    /// The bytes, to fill them.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `self` is borrowed mutably, so this is the only
        // reference.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_ptr(), self.len) }
    }

    /// Unmap it and seal it: from now on nobody can change its bytes.
    pub fn seal(self) -> Result<SealedFile> {
        let ExclusiveFile { map, fd, len } = self;
        drop(map);
        rustix::fs::fcntl_add_seals(&fd, final_seals())
            .map_err(|e| VmError::sys("fcntl(F_ADD_SEALS)", e.into()))?;
        Ok(SealedFile { fd, len })
    }
}

/// A memory file whose bytes nobody can change.
#[derive(Debug)]
pub struct SealedFile {
    fd: OwnedFd,
    len: usize,
}

impl SealedFile {
    /// Take a descriptor received from elsewhere: it must be a memory file that is, or can
    /// now be, sealed; one its sender still has mapped for writing is refused (and handed
    /// back), as is one that cannot be sealed.
    pub fn adopt(fd: OwnedFd) -> std::result::Result<SealedFile, (VmError, OwnedFd)> {
        let seals = match rustix::fs::fcntl_get_seals(&fd) {
            Ok(s) => s,
            Err(e) => {
                return Err((
                    VmError::Misuse {
                        what: if e == rustix::io::Errno::INVAL {
                            "a descriptor that is not a sealable memory file"
                        } else {
                            "a descriptor whose seals cannot be read"
                        },
                    },
                    fd,
                ));
            }
        };
        if !seals.contains(final_seals()) {
            match rustix::fs::fcntl_add_seals(&fd, final_seals()) {
                Ok(()) => {}
                Err(rustix::io::Errno::BUSY) => {
                    return Err((
                        VmError::Misuse {
                            what: "a memory file its sender still has mapped for writing",
                        },
                        fd,
                    ));
                }
                Err(_) => {
                    return Err((
                        VmError::Misuse {
                            what: "a memory file that cannot be sealed against writing",
                        },
                        fd,
                    ));
                }
            }
        }
        let len = match rustix::fs::fstat(&fd) {
            Ok(st) => st.st_size as usize,
            Err(e) => return Err((VmError::sys("fstat", e.into()), fd)),
        };
        if len == 0 || len % page_size() != 0 {
            return Err((
                VmError::Misuse {
                    what: "a memory file that is not a whole number of pages",
                },
                fd,
            ));
        }
        Ok(SealedFile { fd, len })
    }

    /// Its length (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Its descriptor (to send it, or to write it to a file).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Map it privately.
    pub fn view(&self) -> Result<PrivateView> {
        // SAFETY: a new private mapping of a file this object owns, anywhere the kernel
        // chooses; it replaces nothing.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                self.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE,
                self.fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(VmError::last_os("mmap(private, sealed file)"));
        }
        Ok(PrivateView {
            ptr: NonNull::new(p as *mut u8).expect("mmap never returns null"),
            len: self.len,
        })
    }
}

/// A sealed file mapped privately: this process's pages to read and write; the file never
/// changes (a written page becomes a private copy).
#[derive(Debug)]
pub struct PrivateView {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the view owns its mapping; nothing else refers to it.
unsafe impl Send for PrivateView {}

impl PrivateView {
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: a private mapping of `len` bytes of a sealed file: nobody can change the
        // file, and the private pages belong to this mapping alone, alive as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, to change them (privately).
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `self` is borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for PrivateView {
    fn drop(&mut self) {
        // SAFETY: the view's own mapping; no reference into it outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_file_cannot_change_and_a_mapped_one_cannot_be_adopted() {
        let mut f = ExclusiveFile::new("t", 5000).unwrap();
        assert_eq!(f.len(), 2 * page_size());
        f.bytes_mut()[..5].copy_from_slice(b"hello");
        let s = f.seal().unwrap();
        let mut v = s.view().unwrap();
        assert_eq!(&v.bytes()[..5], b"hello");
        v.bytes_mut()[0] = b'J';
        // The file is unchanged: a second view sees the original.
        assert_eq!(&s.view().unwrap().bytes()[..5], b"hello");
        assert!(
            rustix::io::write(s.fd(), b"x").is_err(),
            "sealed against write"
        );
        // A memfd still mapped writable elsewhere is refused.
        let raw = crate::mapping::memfd("w", page_size()).unwrap();
        let keep = Mapping::shared_fd(raw.as_fd(), 0, page_size(), None).unwrap();
        let (e, raw) = SealedFile::adopt(raw).unwrap_err();
        assert!(
            e.to_string().contains("still has mapped for writing"),
            "{e}"
        );
        drop(keep);
        let s2 = SealedFile::adopt(raw).unwrap();
        assert_eq!(s2.len(), page_size());
        // Not a memory file.
        let (e, _) =
            SealedFile::adopt(std::fs::File::open("/dev/null").unwrap().into()).unwrap_err();
        assert!(e.to_string().contains("not a sealable memory file"), "{e}");
    }
}
