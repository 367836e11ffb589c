//! Container shipping (paper 003): a container is one or more pages holding a block of data,
//! owned by one domain at a time. Writing a container to an I/O path gives it up; reading one
//! from a path gains it; mapping is optional, so a process can pass containers on without ever
//! touching their bytes. The paper's six calls are [`Domain::alloc`] / [`Domain::free`],
//! [`Domain::read`] / [`Domain::write`] and [`Domain::map`] / [`Domain::unmap`].
//!
//! On Linux a container is a memory file (memfd). Shipped to another process over a Unix
//! socket, its descriptor moves (`SCM_RIGHTS`) and the sender's handle is gone. It travels
//! sealed against writes ([`zcio_vm::sealed`]): the receiver refuses one its sender still has
//! mapped for writing, so no one but its owner can change what the owner sees. The receiver's
//! map is private: it can change the bytes, and the pages it changes become its own copies
//! (so a container that was only read is forwarded as it came, and one that was changed is
//! written out from the owner's pages, a copy of those pages).
//!
//! Written to a file, a container's bytes go there inside the kernel (`sendfile`). Read
//! from a file, a container's pages are filled by the file system: by DMA where the file was
//! opened with `O_DIRECT`, else copied from the page cache by the kernel (as `read` would).
//! Memory that is not a container (the stack, the heap) cannot be written
//! ([`Domain::write_bytes`]). A sealed container's file can be made ahead by a
//! [`Pool`], its pages allocated in bulk off the data's path.
//!
//! **Volatile containers** ([`Domain::alloc_volatile`]) trade that integrity for reuse, the way
//! a compositor's clients reuse the buffers it releases: the memfd is sealed against size
//! changes only, every domain that holds it maps the same pages shared, and a container can
//! travel back to where it came from to be filled again. A domain that gives one up hides its
//! mapping (`PROT_NONE`) and keeps it: when the container comes back, the mapping is shown
//! again, with no new mapping and no page faults (Genie's region hiding and caching); one
//! [`Domain::keeping_shown`] does not even hide it, saving the two protection changes. A
//! process that once held a volatile container can still write its pages, so their bytes are
//! reached only word by word ([`Domain::map_words`]), and a domain takes volatile containers
//! only if it says so ([`Domain::accepting_volatile`]).

use crate::pool::Pool;
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicU64;
use zcio_vm::VmError;
use zcio_vm::sealed::{ExclusiveFile, PrivateView, SealedFile, VolatileFile};

/// A container's name in its domain (the paper's container identifiers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cid(u64);

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    /// A container this domain does not own (never had, freed, or written away).
    #[error("container {0:?} is not owned by this domain (freed, written away, or never had)")]
    NotOwned(Cid),
    /// Bytes that are not a container's (the stack, the heap, part of a container).
    #[error(
        "{len} bytes at {addr:#x} are not a container: only a mapped container can be written (allocate one with alloc)"
    )]
    NotAContainer {
        /// Where they are.
        addr: usize,
        /// How many.
        len: usize,
    },
    /// A container of more bytes than its pages hold, or none.
    #[error("a container of {len} bytes: {why}")]
    BadLength {
        /// The length.
        len: usize,
        /// Why.
        why: &'static str,
    },
    /// The path ended before a container came: the file has no more bytes, or the writer at
    /// the other end of the socket said it was done ([`Domain::finish`]).
    #[error("the path ended before a container came")]
    End,
    /// The socket closed without the writer saying it was done ([`Domain::finish`]): the
    /// writer died, or dropped its end mid-stream. Containers may have been lost.
    #[error("the path closed without its end ({during}): the writer died or dropped it")]
    PeerGone {
        /// What this domain was doing.
        during: &'static str,
    },
    /// The peer sent something that is not a container.
    #[error("the peer sent a malformed container: {0}")]
    Malformed(String),
    /// The call does not fit the container's kind.
    #[error("container {id:?}: {why}")]
    Kind {
        /// The container.
        id: Cid,
        /// Why.
        why: &'static str,
    },
    /// A volatile container came to a domain that does not take them.
    #[error(
        "the peer sent a volatile container (its pages stay writable by every process that held it); this domain takes only sealed ones (see Domain::accepting_volatile)"
    )]
    VolatileRefused,
    /// The VM layer refused (a container still mapped for writing by its sender, ...).
    #[error(transparent)]
    Vm(#[from] VmError),
    /// The I/O path failed.
    #[error("{op}: {source}")]
    Io {
        /// What was done.
        op: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
}

enum Pages {
    /// Fresh, mapped for this domain alone to fill.
    Filling(ExclusiveFile),
    /// Sealed; mapped privately or not.
    Sealed {
        file: SealedFile,
        view: Option<PrivateView>,
        /// Whether the view was handed out for writing (its pages may differ from the file's).
        changed: bool,
    },
    /// Volatile: shared in place, mapped (shown or hidden) or not; with the file's identity,
    /// its key in the region cache.
    Volatile(VolatileFile, FileKey),
}

struct Container {
    pages: Pages,
    /// Bytes of data, from the first page's start.
    len: usize,
}

impl Container {
    /// A sealed container of `len` bytes in `file`, not mapped.
    fn sealed(file: SealedFile, len: usize) -> Container {
        Container {
            pages: Pages::Sealed {
                file,
                view: None,
                changed: false,
            },
            len,
        }
    }
}

/// A memory file's identity while a descriptor of it is held: (device, inode).
type FileKey = (u64, u64);

/// Volatile containers given up (their mappings hidden), kept for their return.
const REGION_CACHE: usize = 64;

/// A protection domain's containers: what this process owns.
///
/// # Examples
///
/// Two domains of one process, for brevity (each is usually a process holding one end of the
/// socket):
///
/// ```
/// use std::os::fd::AsFd;
/// use std::os::unix::net::UnixStream;
/// use zcio_sequoia::container::Domain;
///
/// let (a_end, b_end) = UnixStream::pair()?;
/// let (mut a, mut b) = (Domain::new(), Domain::new());
///
/// let id = a.alloc(10_000)?;
/// a.map(id)?.fill(42);
/// a.write(a_end.as_fd(), id)?; // given away: `a` can map it no more
/// assert!(a.map(id).is_err());
///
/// let got = b.read(b_end.as_fd(), 0, true)?; // the next container on the socket, mapped
/// assert!(b.map_read(got)?.iter().all(|&x| x == 42));
/// b.free(got)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Default)]
pub struct Domain {
    next: u64,
    owned: HashMap<Cid, Container>,
    accept_volatile: bool,
    /// Whether volatile containers given up keep their mappings shown ([`Domain::keeping_shown`]).
    keep_shown: bool,
    /// Volatile containers this domain gave up, their mappings hidden (or never made), by
    /// file; oldest first in `cache_order`. One that comes back needs no checking again: its
    /// size seals cannot be taken off, and the descriptor kept is this domain's own.
    cache: HashMap<FileKey, VolatileFile>,
    cache_order: VecDeque<FileKey>,
}

zcio_vm::debug_summary!(Domain, |s| containers: s.owned.len());

/// The header shipped with a container: its data length, and its kind.
const HEADER: usize = 16;
const KIND_SEALED: u64 = 0;
const KIND_VOLATILE: u64 = 1;
/// No container: the writer is done with the path ([`Domain::finish`]).
const KIND_END: u64 = 2;

fn not_empty(len: usize) -> Result<(), ContainerError> {
    if len == 0 {
        return Err(ContainerError::BadLength {
            len,
            why: "a container holds at least one byte",
        });
    }
    Ok(())
}

fn fits_pool(pool: &Pool, len: usize) -> Result<(), ContainerError> {
    not_empty(len)?;
    if len > pool.len() {
        return Err(ContainerError::BadLength {
            len,
            why: "more bytes than the pool's files hold",
        });
    }
    Ok(())
}

fn file_key(fd: BorrowedFd<'_>) -> Result<FileKey, ContainerError> {
    let st = rustix::fs::fstat(fd).map_err(|e| ContainerError::Io {
        op: "fstat(container)",
        source: e.into(),
    })?;
    Ok((st.st_dev as u64, st.st_ino as u64))
}

impl Domain {
    /// A domain owning nothing.
    pub fn new() -> Domain {
        Domain::default()
    }

    /// A domain that also takes volatile containers ([`Domain::alloc_volatile`]), trusting
    /// the domains it shares them with not to change them while it owns them (nothing stops
    /// them: the bytes are reached word by word, so a change is seen, never undefined).
    pub fn accepting_volatile() -> Domain {
        Domain {
            accept_volatile: true,
            ..Domain::default()
        }
    }

    /// This domain, keeping the mappings of the volatile containers it gives up shown instead
    /// of hiding them: no protection change per transfer, as fbufs' volatile buffers among
    /// trusted domains. A mapping kept is named by no container of this domain, so nothing
    /// here reaches it until the container comes back; but it is not protected, so a stray
    /// pointer into it is not caught.
    pub fn keeping_shown(self) -> Domain {
        Domain {
            keep_shown: true,
            ..self
        }
    }

    /// Containers owned.
    pub fn owned(&self) -> usize {
        self.owned.len()
    }

    /// Volatile containers given up over a socket, their mappings hidden (or never made),
    /// kept for their return.
    pub fn cached(&self) -> usize {
        self.cache.len()
    }

    fn cache_put(&mut self, key: FileKey, f: VolatileFile) {
        if self.cache.insert(key, f).is_none() {
            self.cache_order.push_back(key);
        }
        while self.cache.len() > REGION_CACHE {
            let old = self.cache_order.pop_front().expect("ordered as cached");
            self.cache.remove(&old);
        }
    }

    fn cache_take(&mut self, key: FileKey) -> Option<VolatileFile> {
        let f = self.cache.remove(&key)?;
        self.cache_order.retain(|k| *k != key);
        Some(f)
    }

    fn insert(&mut self, c: Container) -> Cid {
        self.next += 1;
        let id = Cid(self.next);
        self.owned.insert(id, c);
        id
    }

    fn get(&mut self, id: Cid) -> Result<&mut Container, ContainerError> {
        self.owned.get_mut(&id).ok_or(ContainerError::NotOwned(id))
    }

    /// `cs_alloc`: a container of `len` bytes (its pages zeroed), mapped for filling.
    pub fn alloc(&mut self, len: usize) -> Result<Cid, ContainerError> {
        not_empty(len)?;
        let f = ExclusiveFile::new("zcio-container", len)?;
        Ok(self.insert(Container {
            pages: Pages::Filling(f),
            len,
        }))
    }

    /// `cs_alloc` from a [`Pool`]: a container of `len` bytes (at most the pool's length) in
    /// a fresh file the pool made ahead (its pages zeroed and allocated), mapped for filling.
    pub fn alloc_pooled(&mut self, pool: &Pool, len: usize) -> Result<Cid, ContainerError> {
        fits_pool(pool, len)?;
        let f = pool.take()?.map()?;
        Ok(self.insert(Container {
            pages: Pages::Filling(f),
            len,
        }))
    }

    /// A sealed container holding a copy of `bytes` (at most the pool's length), written into
    /// a fresh file the pool made ahead and sealed at once: its bytes are `bytes` as they are
    /// now, whatever becomes of them. Filling a file by a write costs a copy where filling it
    /// in place costs a fault per page; which is cheaper is the machine's to say.
    pub fn alloc_filled(&mut self, pool: &Pool, bytes: &[u8]) -> Result<Cid, ContainerError> {
        fits_pool(pool, bytes.len())?;
        let file = pool.take()?.fill(bytes)?;
        Ok(self.insert(Container::sealed(file, bytes.len())))
    }

    /// A volatile container of `len` bytes (its pages zeroed), mapped: see the module's
    /// documentation. Its bytes are reached with [`Domain::map_words`].
    pub fn alloc_volatile(&mut self, len: usize) -> Result<Cid, ContainerError> {
        not_empty(len)?;
        let f = VolatileFile::new("zcio-container", len)?;
        let key = file_key(f.fd())?;
        Ok(self.insert(Container {
            pages: Pages::Volatile(f, key),
            len,
        }))
    }

    /// Whether the container is volatile.
    pub fn is_volatile(&self, id: Cid) -> Result<bool, ContainerError> {
        let c = self.owned.get(&id).ok_or(ContainerError::NotOwned(id))?;
        Ok(matches!(c.pages, Pages::Volatile(..)))
    }

    /// `cs_map` of a volatile container: its pages' words (the data is the first
    /// [`Domain::len`] bytes; the words run on to the end of the last page). Mapped here,
    /// or shown again if this domain had it before.
    pub fn map_words(&mut self, id: Cid) -> Result<&[AtomicU64], ContainerError> {
        let c = self.get(id)?;
        match &mut c.pages {
            Pages::Volatile(f, _) => Ok(f.map()?),
            _ => Err(ContainerError::Kind {
                id,
                why: "a sealed container is reached as bytes (map, map_read), not words",
            }),
        }
    }

    /// `cs_free`: give the container's pages back.
    pub fn free(&mut self, id: Cid) -> Result<(), ContainerError> {
        self.owned
            .remove(&id)
            .map(drop)
            .ok_or(ContainerError::NotOwned(id))
    }

    /// The data length of a container.
    pub fn len(&self, id: Cid) -> Result<usize, ContainerError> {
        self.owned
            .get(&id)
            .map(|c| c.len)
            .ok_or(ContainerError::NotOwned(id))
    }

    /// Whether this domain owns no container.
    pub fn is_empty(&self) -> bool {
        self.owned.is_empty()
    }

    /// `cs_map`: the container's data, to read and change.
    pub fn map(&mut self, id: Cid) -> Result<&mut [u8], ContainerError> {
        let c = self.get(id)?;
        let len = c.len;
        match &mut c.pages {
            Pages::Filling(f) => Ok(&mut f.bytes_mut()[..len]),
            Pages::Sealed {
                file,
                view,
                changed,
            } => {
                if view.is_none() {
                    *view = Some(file.view()?);
                }
                *changed = true;
                Ok(&mut view.as_mut().expect("made above").bytes_mut()[..len])
            }
            Pages::Volatile(..) => Err(ContainerError::Kind {
                id,
                why: VOLATILE_BYTES,
            }),
        }
    }

    /// `cs_map` for reading only: the data, without marking the container changed (so it is
    /// forwarded as it came).
    pub fn map_read(&mut self, id: Cid) -> Result<&[u8], ContainerError> {
        let c = self.get(id)?;
        let len = c.len;
        match &mut c.pages {
            Pages::Filling(f) => Ok(&f.bytes()[..len]),
            Pages::Sealed { file, view, .. } => {
                if view.is_none() {
                    *view = Some(file.view()?);
                }
                Ok(&view.as_ref().expect("made above").bytes()[..len])
            }
            Pages::Volatile(..) => Err(ContainerError::Kind {
                id,
                why: VOLATILE_BYTES,
            }),
        }
    }

    /// Copy the data at `offset` into `buf` without mapping it (as much as fits, the count
    /// returned): a sealed container's file cannot change, so these are its bytes as they
    /// came (or as this domain changed them).
    pub fn peek(&self, id: Cid, offset: usize, buf: &mut [u8]) -> Result<usize, ContainerError> {
        let c = self.owned.get(&id).ok_or(ContainerError::NotOwned(id))?;
        let want = buf.len().min(c.len.saturating_sub(offset));
        if want == 0 {
            return Ok(0);
        }
        let buf = &mut buf[..want];
        match &c.pages {
            Pages::Filling(f) => buf.copy_from_slice(&f.bytes()[offset..offset + want]),
            Pages::Sealed { view: Some(v), .. } => {
                buf.copy_from_slice(&v.bytes()[offset..offset + want])
            }
            Pages::Sealed { file, .. } => {
                let mut got = 0;
                while got < want {
                    let at = (offset + got) as u64;
                    match rustix::io::pread(file.fd(), &mut buf[got..], at) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(rustix::io::Errno::INTR) => {}
                        Err(e) => {
                            return Err(ContainerError::Io {
                                op: "pread(container)",
                                source: e.into(),
                            });
                        }
                    }
                }
                return Ok(got);
            }
            Pages::Volatile(..) => {
                return Err(ContainerError::Kind {
                    id,
                    why: VOLATILE_BYTES,
                });
            }
        }
        Ok(want)
    }

    /// `cs_unmap`: stop reaching the data (a changed container keeps its changes; a volatile
    /// one's mapping is hidden, to be shown again by the next map).
    pub fn unmap(&mut self, id: Cid) -> Result<(), ContainerError> {
        let c = self.get(id)?;
        if let Pages::Volatile(f, _) = &mut c.pages {
            f.hide()?;
            return Ok(());
        }
        if let Pages::Sealed {
            view: Some(_),
            changed: false,
            ..
        } = &c.pages
        {
            if let Pages::Sealed { view, .. } = &mut c.pages {
                *view = None;
            }
        }
        Ok(())
    }

    /// Whether the container is mapped.
    pub fn is_mapped(&self, id: Cid) -> Result<bool, ContainerError> {
        let c = self.owned.get(&id).ok_or(ContainerError::NotOwned(id))?;
        Ok(match &c.pages {
            Pages::Filling(_) => true,
            Pages::Sealed { view, .. } => view.is_some(),
            Pages::Volatile(f, _) => f.words().is_some(),
        })
    }

    /// The container's pages as a sealed file to ship: as they are, or, if this domain
    /// changed them, a new file made from its pages.
    fn sealed(c: Container) -> Result<(SealedFile, usize), ContainerError> {
        let len = c.len;
        Ok(match c.pages {
            Pages::Filling(f) => (f.seal()?, len),
            Pages::Sealed {
                file,
                changed: false,
                ..
            } => (file, len),
            Pages::Sealed {
                view: Some(v),
                changed: true,
                ..
            } => {
                let mut f = ExclusiveFile::new("zcio-container", len)?;
                f.bytes_mut()[..len].copy_from_slice(&v.bytes()[..len]);
                (f.seal()?, len)
            }
            Pages::Sealed { file, .. } => (file, len),
            Pages::Volatile(..) => unreachable!("volatile containers are written as they are"),
        })
    }

    /// Say that no more containers come on the I/O path `path`: the reader's next
    /// [`Domain::read`] on a socket returns [`ContainerError::End`]. A socket that closes
    /// without it reads as [`ContainerError::PeerGone`], since a writer killed mid-stream
    /// closes its sockets too. On a file, the end of its bytes is the end: nothing is written.
    pub fn finish(&mut self, path: BorrowedFd<'_>) -> Result<(), ContainerError> {
        let st = rustix::fs::fstat(path).map_err(|e| ContainerError::Io {
            op: "fstat(path)",
            source: e.into(),
        })?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Socket {
            zcio_vm::wire::send_with_fds(path, &header(0, KIND_END), &[])?;
        }
        Ok(())
    }

    /// `cs_write`: give the container to the I/O path `path`. To a Unix socket, its pages move
    /// to the domain at the other end; to a file, its bytes go there inside the kernel. Either
    /// way this domain loses it: a second write, or a map, is refused.
    ///
    /// A volatile container's mapping is hidden before it goes (kept shown by a domain
    /// [`Domain::keeping_shown`]), and kept with its descriptor (up to 64 of them) for the
    /// container's return from a socket.
    pub fn write(&mut self, path: BorrowedFd<'_>, id: Cid) -> Result<(), ContainerError> {
        let c = self.owned.remove(&id).ok_or(ContainerError::NotOwned(id))?;
        let len = c.len;
        if let Pages::Volatile(mut f, key) = c.pages {
            if !self.keep_shown {
                f.hide()?;
            }
            match ship(path, KIND_VOLATILE, f.fd(), len) {
                Ok(true) => self.cache_put(key, f),
                // Written to a file: nothing comes back, the mapping goes.
                Ok(false) => {}
                Err(e) => {
                    // Not given up: it stays this domain's, under its name.
                    self.owned.insert(
                        id,
                        Container {
                            pages: Pages::Volatile(f, key),
                            len,
                        },
                    );
                    return Err(e);
                }
            }
            return Ok(());
        }
        let (file, len) = Self::sealed(c)?;
        if let Err(e) = ship(path, KIND_SEALED, file.fd(), len) {
            // Not given up: it stays this domain's, sealed now, under its name.
            self.owned.insert(id, Container::sealed(file, len));
            return Err(e);
        }
        Ok(())
    }

    /// `cs_write` of bytes: refused unless they are exactly a mapped container's data (the
    /// stack or the heap cannot be given away).
    pub fn write_bytes(
        &mut self,
        path: BorrowedFd<'_>,
        bytes: &[u8],
    ) -> Result<(), ContainerError> {
        let (addr, len) = (bytes.as_ptr() as usize, bytes.len());
        let found = self.owned.iter().find_map(|(id, c)| {
            let start = match &c.pages {
                Pages::Filling(f) => f.bytes().as_ptr() as usize,
                Pages::Sealed { view: Some(v), .. } => v.bytes().as_ptr() as usize,
                Pages::Sealed { view: None, .. } | Pages::Volatile(..) => return None,
            };
            (start == addr && c.len == len).then_some(*id)
        });
        match found {
            Some(id) => self.write(path, id),
            None => Err(ContainerError::NotAContainer { addr, len }),
        }
    }

    /// `cs_read`: gain a container from the I/O path `path`: the next one shipped on a Unix
    /// socket, or the next `len` bytes of a file. Mapped at once if `map`.
    pub fn read(
        &mut self,
        path: BorrowedFd<'_>,
        len: usize,
        map: bool,
    ) -> Result<Cid, ContainerError> {
        let mut head = [0u8; HEADER];
        // A socket, or else (`ENOTSOCK`) a file: asked by receiving, not by an fstat first.
        let got = match zcio_vm::wire::recv_with_fds(path, &mut head) {
            Err(e) if e.errno() == Some(enotsock()) => None,
            got => Some(got?),
        };
        let (file, len) = if let Some((n, mut fds)) = got {
            if n == 0 && fds.is_empty() {
                return Err(ContainerError::PeerGone {
                    during: "reading a container",
                });
            }
            if n == HEADER
                && fds.is_empty()
                && u64::from_le_bytes(head[8..].try_into().expect("8 bytes")) == KIND_END
            {
                return Err(ContainerError::End);
            }
            if n != HEADER || fds.len() != 1 {
                return Err(ContainerError::Malformed(format!(
                    "{n} header bytes and {} descriptors, {HEADER} and 1 expected",
                    fds.len()
                )));
            }
            let fd = fds.pop().expect("one");
            let len = u64::from_le_bytes(head[..8].try_into().expect("8 bytes")) as usize;
            match u64::from_le_bytes(head[8..].try_into().expect("8 bytes")) {
                KIND_SEALED => {}
                KIND_VOLATILE => return self.read_volatile(fd, len, map),
                k => {
                    return Err(ContainerError::Malformed(format!(
                        "a container of kind {k} (0, sealed, or 1, volatile, expected)"
                    )));
                }
            }
            let file = SealedFile::adopt(fd).map_err(|(e, _)| e)?;
            if len == 0 || len > file.len() {
                return Err(ContainerError::Malformed(format!(
                    "{len} bytes of data in {} bytes of pages",
                    file.len()
                )));
            }
            (file, len)
        } else {
            if len == 0 {
                return Err(ContainerError::BadLength {
                    len,
                    why: "a read from a file names at least one byte",
                });
            }
            return self.read_file(path, len, map);
        };
        let view = if map { Some(file.view()?) } else { None };
        Ok(self.insert(Container {
            pages: Pages::Sealed {
                file,
                view,
                changed: false,
            },
            len,
        }))
    }

    fn read_volatile(&mut self, fd: OwnedFd, len: usize, map: bool) -> Result<Cid, ContainerError> {
        // A container this domain held before comes back to its hidden mapping (even to a
        // domain that takes no volatile container from others: this one it shared itself); the
        // new descriptor is for the same file, and goes.
        let key = file_key(fd.as_fd())?;
        let mut f = match self.cache_take(key) {
            Some(f) => f,
            None if !self.accept_volatile => return Err(ContainerError::VolatileRefused),
            None => VolatileFile::adopt(fd).map_err(|(e, _)| e)?,
        };
        if len == 0 || len > f.len() {
            return Err(ContainerError::Malformed(format!(
                "{len} bytes of data in {} bytes of pages",
                f.len()
            )));
        }
        if map {
            f.map()?;
        }
        Ok(self.insert(Container {
            pages: Pages::Volatile(f, key),
            len,
        }))
    }

    fn read_file(
        &mut self,
        path: BorrowedFd<'_>,
        len: usize,
        map: bool,
    ) -> Result<Cid, ContainerError> {
        let mut f = ExclusiveFile::new("zcio-container", len)?;
        let mut got = 0;
        while got < len {
            match rustix::io::read(path, &mut f.bytes_mut()[got..len]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    return Err(ContainerError::Io {
                        op: "read(path → container)",
                        source: e.into(),
                    });
                }
            }
        }
        if got == 0 {
            return Err(ContainerError::End);
        }
        let id = self.insert(Container {
            pages: Pages::Filling(f),
            len: got,
        });
        if !map {
            let c = self.owned.remove(&id).expect("just inserted");
            let (file, len) = Self::sealed(c)?;
            self.owned.insert(id, Container::sealed(file, len));
        }
        Ok(id)
    }
}

const VOLATILE_BYTES: &str = "a volatile container's pages may be written by the other processes that held it: reach them word by word (map_words)";

fn header(len: usize, kind: u64) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(&(len as u64).to_le_bytes());
    h[8..].copy_from_slice(&kind.to_le_bytes());
    h
}

/// A container of `kind` onto the I/O path `path`: to a socket, its descriptor after a
/// header (`true`); to anything else (`ENOTSOCK`: the send is the question, with no fstat
/// before it), its `len` bytes (`false`).
fn ship(
    path: BorrowedFd<'_>,
    kind: u64,
    fd: BorrowedFd<'_>,
    len: usize,
) -> Result<bool, ContainerError> {
    match zcio_vm::wire::send_with_fds(path, &header(len, kind), &[fd]) {
        Ok(()) => Ok(true),
        Err(e) if e.errno() == Some(enotsock()) => send_file(path, fd, len).map(|()| false),
        Err(e) => Err(e.into()),
    }
}

/// `ENOTSOCK`: the path is not a socket.
fn enotsock() -> i32 {
    rustix::io::Errno::NOTSOCK.raw_os_error()
}

/// The first `len` bytes of the memory file `from` to the file `path`, inside the kernel.
fn send_file(path: BorrowedFd<'_>, from: BorrowedFd<'_>, len: usize) -> Result<(), ContainerError> {
    let mut off = 0u64;
    while (off as usize) < len {
        let want = len - off as usize;
        match rustix::fs::sendfile(path, from, Some(&mut off), want) {
            Ok(0) => {
                return Err(ContainerError::Io {
                    op: "sendfile(container → path)",
                    source: rustix::io::Errno::IO.into(),
                });
            }
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                return Err(ContainerError::Io {
                    op: "sendfile(container → path)",
                    source: e.into(),
                });
            }
        }
    }
    Ok(())
}

/// Anything with a descriptor is an I/O path.
pub fn path<T: AsFd>(t: &T) -> BorrowedFd<'_> {
    t.as_fd()
}
