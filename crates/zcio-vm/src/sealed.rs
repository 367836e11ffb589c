//! Memory files whose contents nobody can change any more: the pages of paper 003's containers.
//!
//! - [`ExclusiveFile`]: a fresh memfd, mapped for its creator alone to fill. Its descriptor is
//!   never handed out while the mapping lives, so the bytes can be offered as slices.
//! - [`BlankFile`]: a fresh memfd made ahead, its pages allocated in bulk (`fallocate`, or in
//!   2 MiB pages by `MADV_COLLAPSE`) and never mapped for writing: filled by a write
//!   ([`BlankFile::fill`]) and sealed at once, or mapped to be filled in place
//!   ([`BlankFile::map`]). Its descriptor never leaves it before sealing.
//! - [`SealedFile`]: a memfd sealed against writes and size changes (`F_SEAL_WRITE`,
//!   `F_SEAL_SHRINK`, `F_SEAL_GROW`). The kernel refuses to add the write seal while anyone
//!   holds a writable shared mapping, so once sealed nobody, in any process, can change the
//!   bytes: the file can be passed to other processes (`SCM_RIGHTS`) and read in place.
//!   [`SealedFile::adopt`] seals a descriptor received from elsewhere, refusing one its sender
//!   still has mapped for writing.
//! - [`PrivateView`]: a sealed file mapped privately: readable and writable by this process,
//!   each page written becoming a private copy (the file never changes).
//! - [`VolatileFile`]: a memfd sealed against size changes only, mapped shared: the pages of a
//!   volatile container, which the processes that hold it in turn reach in place (and may
//!   reuse). Its bytes are reached only word by word (`AtomicU64`), because any process that
//!   once had it may still write it; its mapping can be hidden (`PROT_NONE`) while another
//!   process owns it, and shown again when it comes back.

use crate::error::{Result, VmError};
use crate::huge::Granule;
use crate::mapping::Mapping;
use crate::page::{HUGE_PAGE_SIZE, page_size};
use rustix::fs::SealFlags;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

/// The length of the memory file `fd`, which must be a whole number of pages.
fn whole_pages(fd: &OwnedFd) -> Result<usize> {
    let st = rustix::fs::fstat(fd).map_err(|e| VmError::sys("fstat", e.into()))?;
    let len = st.st_size as usize;
    if len == 0 || len % page_size() != 0 {
        return Err(VmError::Misuse {
            what: "a memory file that is not a whole number of pages",
        });
    }
    Ok(len)
}

/// The seals that make a file's contents final.
fn final_seals() -> SealFlags {
    SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW
}

/// A zeroed memory file of `len` bytes rounded up to whole pages: its descriptor and length.
fn fresh_memfd(name: &str, len: usize) -> Result<(OwnedFd, usize)> {
    let pages = crate::mapping::page_rounded(len, "a container")?;
    Ok((crate::mapping::memfd(name, pages)?, pages))
}

/// A fresh memory file mapped for its creator alone.
#[derive(Debug)]
pub struct ExclusiveFile {
    map: Mapping,
    fd: OwnedFd,
    len: usize,
}

impl ExclusiveFile {
    /// A zeroed file of `len` bytes (rounded up to pages), its pages allocated in one call
    /// (`fallocate`, which costs less than faulting them in one by one, and gets large folios
    /// where the shared memory policy gives them: [`crate::shmem`]), mapped.
    pub fn new(name: &str, len: usize) -> Result<ExclusiveFile> {
        let (fd, pages) = fresh_memfd(name, len)?;
        allocate(&fd, pages)?;
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
    ///
    /// The kernel refuses the write seal (`EBUSY`) while any of the file's pages holds a
    /// reference it cannot account for, and waits only about 150 ms for them to go. For a
    /// fresh file such a reference is transient (a page on its way through reclaim, migration,
    /// or a per-CPU batch of the CPU that allocated it): the seal is tried again, with growing
    /// pauses, for about a second before the refusal is given up on.
    pub fn seal(self) -> Result<SealedFile> {
        let ExclusiveFile { map, fd, len } = self;
        drop(map);
        seal_fresh(&fd)?;
        Ok(SealedFile { fd, len })
    }
}

impl ExclusiveFile {
    /// Seal it while its creator keeps its bytes where they are: Genie's emulated copy of a
    /// whole file, its copy-on-write done by the kernel. The mapping becomes a private one of
    /// the same file at the same addresses (pointers into it stay good and read the same
    /// bytes), then the file is sealed: the [`SealedFile`] may go to another process, which
    /// reads the bytes of this moment whatever happens here afterwards, and the
    /// [`PrivateView`] stays this process's, each page it writes becoming its own copy at the
    /// write's fault. Nothing is copied now: the page tables of one mapping are replaced.
    ///
    /// On failure nothing left: the error, with the file as it was (the private mapping could
    /// not be made) or the private view (the kernel refused the seal; the bytes are there).
    pub fn seal_keeping(
        self,
    ) -> std::result::Result<(SealedFile, PrivateView), (VmError, Unsealed)> {
        let ExclusiveFile { mut map, fd, len } = self;
        if let Err(e) = map.remap_private(fd.as_fd()) {
            return Err((e, Unsealed::File(ExclusiveFile { map, fd, len })));
        }
        let view = PrivateView {
            ptr: NonNull::new(map.as_ptr()).expect("a mapping is never at null"),
            len,
            map: Some(map),
        };
        match seal_fresh(&fd) {
            Ok(()) => Ok((SealedFile { fd, len }, view)),
            Err(e) => Err((e, Unsealed::View(view))),
        }
    }
}

/// What [`ExclusiveFile::seal_keeping`] leaves when it fails.
#[derive(Debug)]
pub enum Unsealed {
    /// The file as it was, mapped shared: the private mapping could not be made.
    File(ExclusiveFile),
    /// The private view made before the kernel refused the seal: the bytes, this process's.
    View(PrivateView),
}

/// Seal a fresh file whose descriptor never left this process, and which nobody maps for
/// writing any more, for good, trying again while the kernel holds its pages for a moment
/// (see [`ExclusiveFile::seal`]).
fn seal_fresh(fd: &OwnedFd) -> Result<()> {
    let mut pause = std::time::Duration::from_millis(1);
    for _ in 0..10 {
        match rustix::fs::fcntl_add_seals(fd, final_seals()) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::BUSY) => {
                std::thread::sleep(pause);
                pause *= 2;
            }
            Err(e) => return Err(VmError::sys("fcntl(F_ADD_SEALS)", e.into())),
        }
    }
    Err(VmError::sys(
        "fcntl(F_ADD_SEALS): the kernel kept pages of a fresh container in use (EBUSY) through 10 tries",
        rustix::io::Errno::BUSY.into(),
    ))
}

/// A fresh memory file made ahead of its use: its pages allocated in bulk, zeroed, never
/// mapped for writing, and its descriptor never handed out. Allocating a file's pages with
/// `fallocate` costs a fraction of faulting them in one by one, and can be done before the
/// bytes exist (by another thread): what is left for the moment of the send is filling them.
/// Held in 2 MiB pages ([`BlankFile::new_huge`]), a file costs a fraction again, to make, to
/// fill in place and to free.
#[derive(Debug)]
pub struct BlankFile {
    fd: OwnedFd,
    len: usize,
    granule: Granule,
    refused: Option<String>,
}

impl BlankFile {
    /// A file of `len` bytes (rounded up to pages), its pages allocated, 4 KiB each.
    pub fn new(name: &str, len: usize) -> Result<BlankFile> {
        let (fd, pages) = fresh_memfd(name, len)?;
        allocate(&fd, pages)?;
        Ok(BlankFile {
            fd,
            len: pages,
            granule: Granule::Base,
            refused: None,
        })
    }

    /// A file of `len` bytes rounded up to whole 2 MiB, held in 2 MiB pages where the kernel
    /// gives them, else in 4 KiB pages as [`BlankFile::new`] makes them
    /// ([`BlankFile::granule`] says which, [`BlankFile::refused`] why not).
    ///
    /// A memory file's pages are 4 KiB each unless the system lets shared memory have huge
    /// pages (`shmem_enabled`); `MADV_COLLAPSE` asks for them on this file alone, and the
    /// kernel grants it unless huge pages are denied to shared memory, missing, or not free
    /// in one piece. Each 2 MiB then costs one allocation, one page-cache entry and one
    /// freeing instead of 512, and a mapping of the file ([`BlankFile::map`]) is aligned so
    /// that filling it faults once per 2 MiB. What it costs is memory: a file of a few
    /// hundred KiB holds a whole 2 MiB page.
    pub fn new_huge(name: &str, len: usize) -> Result<BlankFile> {
        let pages = crate::mapping::page_rounded(len, "a container").and_then(|p| {
            p.checked_next_multiple_of(HUGE_PAGE_SIZE)
                .ok_or(VmError::TooLarge {
                    what: "a container in 2 MiB pages",
                    value: len,
                    limit: usize::MAX - HUGE_PAGE_SIZE,
                })
        })?;
        let fd = crate::mapping::memfd(name, pages)?;
        let refused = if crate::huge::disabled_by_config() {
            Some(format!(
                "huge pages disabled by {}",
                crate::config::said_by()
            ))
        } else {
            collapse(&fd, pages).err()
        };
        let granule = if refused.is_some() {
            allocate(&fd, pages)?;
            Granule::Base
        } else {
            Granule::Huge
        };
        Ok(BlankFile {
            fd,
            len: pages,
            granule,
            refused,
        })
    }

    /// Whether its pages are 2 MiB ([`Granule::Huge`]) or 4 KiB ([`Granule::Base`]).
    pub fn granule(&self) -> Granule {
        self.granule
    }

    /// Why a file asked for in 2 MiB pages has 4 KiB ones: what the kernel said, or the
    /// setting that turned huge pages off for zcio.
    pub fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// Its length (whole pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty (never).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Write `bytes` at its start (the rest stays zero) and seal it: a copy of `bytes` as
    /// they are now, which nobody can change any more. No writable mapping of the file ever
    /// existed, so the seal is refused only while the kernel still holds its pages for a
    /// moment (tried again as [`ExclusiveFile::seal`] does).
    pub fn fill(self, bytes: &[u8]) -> Result<SealedFile> {
        if bytes.len() > self.len {
            return Err(VmError::TooLarge {
                what: "bytes to fill a blank memory file with",
                value: bytes.len(),
                limit: self.len,
            });
        }
        let mut done = 0;
        while done < bytes.len() {
            match rustix::io::pwrite(&self.fd, &bytes[done..], done as u64) {
                Ok(0) => {
                    return Err(VmError::sys(
                        "pwrite(memfd)",
                        std::io::Error::from(std::io::ErrorKind::WriteZero),
                    ));
                }
                Ok(n) => done += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(VmError::sys("pwrite(memfd)", e.into())),
            }
        }
        seal_fresh(&self.fd)?;
        Ok(SealedFile {
            fd: self.fd,
            len: self.len,
        })
    }

    /// Make it a volatile file ([`VolatileFile`]): sealed against size changes, its pages
    /// (2 MiB ones included) kept, unmapped.
    pub fn into_volatile(self) -> Result<VolatileFile> {
        rustix::fs::fcntl_add_seals(&self.fd, size_seals())
            .map_err(|e| VmError::sys("fcntl(F_ADD_SEALS)", e.into()))?;
        Ok(VolatileFile {
            fd: self.fd,
            len: self.len,
            map: None,
            hidden: false,
        })
    }

    /// Map it for its owner alone to fill in place (its pages are there: touching them
    /// allocates nothing; in 2 MiB pages, the mapping is aligned to them).
    pub fn map(self) -> Result<ExclusiveFile> {
        let map = match self.granule {
            Granule::Huge => Mapping::shared_fd_huge_aligned(
                self.fd.as_fd(),
                self.len,
                crate::protect::Access::ReadWrite,
            )?,
            _ => Mapping::shared_fd(self.fd.as_fd(), 0, self.len, None)?,
        };
        Ok(ExclusiveFile {
            map,
            fd: self.fd,
            len: self.len,
        })
    }
}

/// Allocate every page of the memory file `fd` of `len` bytes (`fallocate`).
fn allocate(fd: &OwnedFd, len: usize) -> Result<()> {
    rustix::fs::fallocate(fd, rustix::fs::FallocateFlags::empty(), 0, len as u64)
        .map_err(|e| VmError::sys("fallocate(memfd)", e.into()))
}

/// Put the memory file `fd` of `len` bytes (a multiple of 2 MiB) in 2 MiB pages: one zero byte
/// written at the start of each 2 MiB (the kernel collapses only ranges holding a page), then
/// `MADV_COLLAPSE` through a read-only mapping aligned to them, which fills the rest with
/// zeros. On failure, what the kernel said.
fn collapse(fd: &OwnedFd, len: usize) -> std::result::Result<(), String> {
    for at in (0..len).step_by(HUGE_PAGE_SIZE) {
        match rustix::io::pwrite(fd, &[0], at as u64) {
            Ok(1) => {}
            Ok(_) => return Err("pwrite(memfd) wrote nothing".into()),
            Err(e) => return Err(format!("pwrite(memfd): {e}")),
        }
    }
    let map = Mapping::shared_fd_huge_aligned(fd.as_fd(), len, crate::protect::Access::ReadOnly)
        .map_err(|e| e.to_string())?;
    map.advise(libc::MADV_COLLAPSE, "madvise(MADV_COLLAPSE)")
        .map_err(|e| e.to_string())
}

/// The accessors every memory file that travels has, of its `fd` and `len` (whole pages).
macro_rules! file_accessors {
    ($file:ty) => {
        impl $file {
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
        }
    };
}

file_accessors!(SealedFile);
file_accessors!(VolatileFile);

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
        match whole_pages(&fd) {
            Ok(len) => Ok(SealedFile { fd, len }),
            Err(e) => Err((e, fd)),
        }
    }

    /// Map it privately: aligned to 2 MiB where its length is whole 2 MiB, so that a file held
    /// in 2 MiB pages is mapped a page-table entry per 2 MiB (read faults map a whole page).
    pub fn view(&self) -> Result<PrivateView> {
        if self.len % HUGE_PAGE_SIZE == 0 {
            let map = Mapping::private_fd_huge_aligned(
                self.fd.as_fd(),
                self.len,
                crate::protect::Access::ReadWrite,
            )?;
            return Ok(PrivateView {
                ptr: NonNull::new(map.as_ptr()).expect("a mapping is never at null"),
                len: self.len,
                map: Some(map),
            });
        }
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
        crate::protect::layout_changed();
        if p == libc::MAP_FAILED {
            return Err(VmError::last_os("mmap(private, sealed file)"));
        }
        Ok(PrivateView {
            ptr: NonNull::new(p as *mut u8).expect("mmap never returns null"),
            len: self.len,
            map: None,
        })
    }
}

/// A sealed file mapped privately: this process's pages to read and write; the file never
/// changes (a written page becomes a private copy).
#[derive(Debug)]
pub struct PrivateView {
    ptr: NonNull<u8>,
    len: usize,
    /// The mapping, where it was aligned to 2 MiB (it unmaps itself); else `ptr` is unmapped
    /// here.
    map: Option<Mapping>,
}

// SAFETY: the view owns its mapping; nothing else refers to it.
unsafe impl Send for PrivateView {}
// SAFETY: a shared reference hands out only `&[u8]` of pages nobody can change (the file is
// sealed; the private copies are this mapping's alone, changed only through `&mut self`).
unsafe impl Sync for PrivateView {}

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
        if self.map.take().is_some() {
            return;
        }
        // SAFETY: the view's own mapping; no reference into it outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len) };
        crate::protect::layout_changed();
    }
}

/// The seals that keep a file's size (its mappings can never fault for want of pages).
fn size_seals() -> SealFlags {
    SealFlags::SHRINK | SealFlags::GROW
}

/// A memory file shared in place by the processes that hold it in turn: sealed against size
/// changes, not against writes. Mapped or not; a mapping can be hidden and shown again.
#[derive(Debug)]
pub struct VolatileFile {
    fd: OwnedFd,
    len: usize,
    map: Option<Mapping>,
    hidden: bool,
}

impl VolatileFile {
    /// A zeroed file of `len` bytes (rounded up to pages), sealed against size changes and
    /// mapped.
    pub fn new(name: &str, len: usize) -> Result<VolatileFile> {
        let (fd, pages) = fresh_memfd(name, len)?;
        rustix::fs::fcntl_add_seals(&fd, size_seals())
            .map_err(|e| VmError::sys("fcntl(F_ADD_SEALS)", e.into()))?;
        let mut f = VolatileFile {
            fd,
            len: pages,
            map: None,
            hidden: false,
        };
        f.map()?;
        Ok(f)
    }

    /// Take a descriptor received from elsewhere, unmapped: it must be a memory file of whole
    /// pages that can be written (one sealed against writes is not volatile) and whose size
    /// is, or can now be, sealed. Refused descriptors are handed back.
    pub fn adopt(fd: OwnedFd) -> std::result::Result<VolatileFile, (VmError, OwnedFd)> {
        let refuse = |what| VmError::Misuse { what };
        let seals = match rustix::fs::fcntl_get_seals(&fd) {
            Ok(s) => s,
            Err(rustix::io::Errno::INVAL) => {
                return Err((
                    refuse("a descriptor that is not a sealable memory file"),
                    fd,
                ));
            }
            Err(e) => return Err((VmError::sys("fcntl(F_GET_SEALS)", e.into()), fd)),
        };
        if seals.intersects(SealFlags::WRITE | SealFlags::FUTURE_WRITE) {
            return Err((
                refuse(
                    "a memory file sealed against writes (a sealed container, not a volatile one)",
                ),
                fd,
            ));
        }
        if !seals.contains(size_seals()) && rustix::fs::fcntl_add_seals(&fd, size_seals()).is_err()
        {
            return Err((refuse("a memory file whose size cannot be sealed"), fd));
        }
        let len = match whole_pages(&fd) {
            Ok(len) => len,
            Err(e) => return Err((e, fd)),
        };
        match rustix::fs::fcntl_getfl(&fd) {
            Ok(fl) if fl & rustix::fs::OFlags::ACCMODE == rustix::fs::OFlags::RDWR => {}
            Ok(_) => {
                return Err((
                    refuse("a memory file not opened for reading and writing"),
                    fd,
                ));
            }
            Err(e) => return Err((VmError::sys("fcntl(F_GETFL)", e.into()), fd)),
        }
        Ok(VolatileFile {
            fd,
            len,
            map: None,
            hidden: false,
        })
    }

    /// Map it (or show a hidden mapping again): its words.
    pub fn map(&mut self) -> Result<&[std::sync::atomic::AtomicU64]> {
        match &self.map {
            None => {
                // Aligned to 2 MiB where it is whole 2 MiB pages: a file held in them is then
                // mapped an entry per 2 MiB.
                self.map = Some(if self.len % HUGE_PAGE_SIZE == 0 {
                    Mapping::shared_fd_huge_aligned(
                        self.fd.as_fd(),
                        self.len,
                        crate::protect::Access::ReadWrite,
                    )?
                } else {
                    Mapping::shared_fd(self.fd.as_fd(), 0, self.len, None)?
                });
            }
            Some(m) if self.hidden => {
                // SAFETY: this file's own mapping; while hidden no reference into it existed
                // (`words` hands none out), and read-write is what it was made with.
                unsafe {
                    crate::protect::set_access(m.range(), crate::protect::Access::ReadWrite)?
                };
                self.hidden = false;
            }
            Some(_) => {}
        }
        Ok(self.words().expect("mapped and shown above"))
    }

    /// Its words, if mapped and shown.
    pub fn words(&self) -> Option<&[std::sync::atomic::AtomicU64]> {
        let m = self.map.as_ref().filter(|_| !self.hidden)?;
        // SAFETY: the mapping is `len` bytes (whole pages, so 8-aligned), readable and
        // writable while shown, alive as long as `self` (the slice borrows it, so hiding or
        // unmapping, which take `&mut self`, cannot happen while it lives). AtomicU64 has no
        // invalid bit patterns and is made for concurrent modification, which other processes
        // holding the file may do at any time.
        Some(unsafe {
            std::slice::from_raw_parts(
                m.as_ptr() as *const std::sync::atomic::AtomicU64,
                self.len / 8,
            )
        })
    }

    /// Its bytes, if mapped and shown, for a holder that trusts every other holder of the
    /// file not to write it while it holds it (a volatile loan's sender and receiver, which
    /// take turns by protocol). Nothing enforces that trust: a holder that breaks it makes the
    /// bytes change under this one, as any shared memory would (every bit pattern is a valid
    /// byte, so a change is seen, never an invalid value). Where that trust is missing, use
    /// [`VolatileFile::words`].
    pub fn trusted_bytes(&self) -> Option<&[u8]> {
        let m = self.map.as_ref().filter(|_| !self.hidden)?;
        // SAFETY: the mapping is `len` bytes, readable while shown, alive as long as `self`
        // (the slice borrows it); the other holders do not write it meanwhile (the caller's
        // trust, documented above).
        Some(unsafe { std::slice::from_raw_parts(m.as_ptr(), self.len) })
    }

    /// [`VolatileFile::trusted_bytes`], to write them (the other holders see the writes).
    pub fn trusted_bytes_mut(&mut self) -> Option<&mut [u8]> {
        let m = self.map.as_ref().filter(|_| !self.hidden)?;
        // SAFETY: as `trusted_bytes`, writable while shown; `&mut self` makes this the only
        // slice of the mapping in this process.
        Some(unsafe { std::slice::from_raw_parts_mut(m.as_ptr(), self.len) })
    }

    /// Hide the mapping (`PROT_NONE`): any touch faults until [`VolatileFile::map`] shows it
    /// again. The pages stay mapped, so showing them costs no faults (region hiding).
    pub fn hide(&mut self) -> Result<()> {
        if let Some(m) = &self.map
            && !self.hidden
        {
            // SAFETY: this file's own mapping; `&mut self` means no slice of its words lives.
            unsafe { crate::protect::set_access(m.range(), crate::protect::Access::None)? };
            self.hidden = true;
        }
        Ok(())
    }

    /// Unmap it.
    pub fn unmap(&mut self) {
        self.map = None;
        self.hidden = false;
    }

    /// Whether it is mapped (shown or hidden).
    pub fn is_mapped(&self) -> bool {
        self.map.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

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

    #[test]
    fn a_file_sealed_while_kept_reads_the_same_where_it_was_and_writes_go_private() {
        for f in [
            ExclusiveFile::new("k", 3 * page_size()).unwrap(),
            BlankFile::new_huge("k", 2 * HUGE_PAGE_SIZE)
                .unwrap()
                .map()
                .unwrap(),
        ] {
            let mut f = f;
            let len = f.len();
            for (i, b) in f.bytes_mut().iter_mut().enumerate() {
                *b = (i % 251) as u8;
            }
            let at = f.bytes().as_ptr();
            let (sealed, mut kept) = f.seal_keeping().unwrap();
            assert_eq!(kept.bytes().as_ptr(), at, "the bytes stay where they were");
            assert!(
                kept.bytes()
                    .iter()
                    .enumerate()
                    .all(|(i, b)| *b == (i % 251) as u8)
            );
            // The keeper writes every page: its own copies; the file keeps the old bytes.
            for p in (0..len).step_by(page_size()) {
                kept.bytes_mut()[p] ^= 0xFF;
            }
            kept.bytes_mut()[len - 1] = 7;
            let other = sealed.view().unwrap();
            assert!(
                other
                    .bytes()
                    .iter()
                    .enumerate()
                    .all(|(i, b)| *b == (i % 251) as u8),
                "the sealed file never changed"
            );
            assert_eq!(kept.bytes()[0], 0xFF);
            assert!(
                rustix::io::pwrite(sealed.fd(), b"x", 0).is_err(),
                "sealed against write"
            );
            drop(sealed);
            // The view outlives the file's descriptor: the mapping holds the file.
            assert_eq!(kept.bytes()[len - 1], 7);
            assert_eq!(
                kept.bytes()[page_size() + 1],
                ((page_size() + 1) % 251) as u8
            );
        }
    }

    #[test]
    fn a_blank_file_is_zeroed_filled_once_and_sealed() {
        let b = BlankFile::new("b", 5000).unwrap();
        assert_eq!(b.len(), 2 * page_size());
        let mut data = vec![0xA5u8; 5000];
        let s = b.fill(&data).unwrap();
        data[0] = 0; // the caller's bytes change after the fill: the file does not
        let v = s.view().unwrap();
        assert_eq!(v.bytes()[0], 0xA5);
        assert!(v.bytes()[1..5000].iter().all(|&x| x == 0xA5));
        assert!(v.bytes()[5000..].iter().all(|&x| x == 0), "the rest zeroed");
        assert!(rustix::io::pwrite(s.fd(), b"x", 0).is_err(), "sealed");
        assert!(rustix::fs::ftruncate(s.fd(), 0).is_err(), "sealed");
        let e = BlankFile::new("b", 10)
            .unwrap()
            .fill(&[0; 4097])
            .unwrap_err();
        assert!(e.to_string().contains("exceeds"), "{e}");
        // Mapped, it is zeroed, and seals like a fresh file.
        let mut m = BlankFile::new("b", 10).unwrap().map().unwrap();
        assert!(m.bytes().iter().all(|&x| x == 0));
        m.bytes_mut()[0] = 9;
        assert_eq!(m.seal().unwrap().view().unwrap().bytes()[0], 9);
    }

    #[test]
    fn a_volatile_file_is_shared_in_place_hidden_and_shown() {
        let mut a = VolatileFile::new("v", 5000).unwrap();
        assert_eq!(a.len(), 2 * page_size());
        a.map().unwrap()[0].store(0x1234, Ordering::Relaxed);
        // Another holder (a second descriptor, as a receiver would have) sees it in place.
        let dup = a.fd().try_clone_to_owned().unwrap();
        let mut b = VolatileFile::adopt(dup).unwrap();
        assert!(!b.is_mapped());
        assert_eq!(b.map().unwrap()[0].load(Ordering::Relaxed), 0x1234);
        b.words().unwrap()[1].store(7, Ordering::Relaxed);
        a.hide().unwrap();
        assert!(a.words().is_none(), "hidden");
        assert_eq!(
            a.map().unwrap()[1].load(Ordering::Relaxed),
            7,
            "shown again"
        );
        // Its size is sealed.
        assert!(rustix::fs::ftruncate(a.fd(), 0).is_err());
        // A sealed container's file is refused, and so is a read-only descriptor.
        let mut e = ExclusiveFile::new("s", 100).unwrap();
        e.bytes_mut()[0] = 1;
        let s = e.seal().unwrap();
        let (err, _) = VolatileFile::adopt(s.fd().try_clone_to_owned().unwrap()).unwrap_err();
        assert!(err.to_string().contains("sealed against writes"), "{err}");
        let ro = crate::mapping::reopen_read_only(a.fd()).unwrap();
        let (err, _) = VolatileFile::adopt(ro).unwrap_err();
        assert!(
            err.to_string()
                .contains("not opened for reading and writing"),
            "{err}"
        );
        let (err, _) =
            VolatileFile::adopt(std::fs::File::open("/dev/null").unwrap().into()).unwrap_err();
        assert!(
            err.to_string().contains("not a sealable memory file"),
            "{err}"
        );
    }
}
