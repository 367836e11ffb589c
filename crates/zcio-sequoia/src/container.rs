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
//! ([`Domain::write_bytes`]).

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};
use zcio_vm::VmError;
use zcio_vm::sealed::{ExclusiveFile, PrivateView, SealedFile};

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
    /// The path ended (the peer closed it) before a container came.
    #[error("the path ended before a container came")]
    End,
    /// The peer sent something that is not a container.
    #[error("the peer sent a malformed container: {0}")]
    Malformed(String),
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
}

struct Container {
    pages: Pages,
    /// Bytes of data, from the first page's start.
    len: usize,
}

/// A protection domain's containers: what this process owns.
#[derive(Default)]
pub struct Domain {
    next: u64,
    owned: HashMap<Cid, Container>,
}

impl std::fmt::Debug for Domain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Domain")
            .field("containers", &self.owned.len())
            .finish()
    }
}

/// The header shipped with a container: its data length.
const HEADER: usize = 8;

impl Domain {
    /// A domain owning nothing.
    pub fn new() -> Domain {
        Domain::default()
    }

    /// Containers owned.
    pub fn owned(&self) -> usize {
        self.owned.len()
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
        if len == 0 {
            return Err(ContainerError::BadLength {
                len,
                why: "a container holds at least one byte",
            });
        }
        let f = ExclusiveFile::new("zcio-container", len)?;
        Ok(self.insert(Container {
            pages: Pages::Filling(f),
            len,
        }))
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
        }
    }

    /// `cs_unmap`: stop reaching the data (a changed container keeps its changes).
    pub fn unmap(&mut self, id: Cid) -> Result<(), ContainerError> {
        let c = self.get(id)?;
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
        })
    }

    /// `cs_write`: give the container to the I/O path `path`. To a Unix socket, its pages move
    /// to the domain at the other end; to a file, its bytes go there inside the kernel. Either
    /// way this domain loses it: a second write, or a map, is refused.
    pub fn write(&mut self, path: BorrowedFd<'_>, id: Cid) -> Result<(), ContainerError> {
        let c = self.owned.remove(&id).ok_or(ContainerError::NotOwned(id))?;
        let (file, len) = Self::sealed(c)?;
        let io = |op, e: rustix::io::Errno| ContainerError::Io {
            op,
            source: e.into(),
        };
        let st = rustix::fs::fstat(path).map_err(|e| io("fstat(path)", e))?;
        if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Socket {
            zcio_vm::wire::send_with_fds(path, &(len as u64).to_le_bytes(), &[file.fd()])?;
            return Ok(());
        }
        let mut off = 0u64;
        while (off as usize) < len {
            let want = len - off as usize;
            match rustix::fs::sendfile(path, file.fd(), Some(&mut off), want) {
                Ok(0) => return Err(io("sendfile(container → path)", rustix::io::Errno::IO)),
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(io("sendfile(container → path)", e)),
            }
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
                Pages::Sealed { view: None, .. } => return None,
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
        let io = |op, e: rustix::io::Errno| ContainerError::Io {
            op,
            source: e.into(),
        };
        let st = rustix::fs::fstat(path).map_err(|e| io("fstat(path)", e))?;
        let (file, len) =
            if rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Socket {
                let mut head = [0u8; HEADER];
                let (n, mut fds) = zcio_vm::wire::recv_with_fds(path, &mut head)?;
                if n == 0 && fds.is_empty() {
                    return Err(ContainerError::End);
                }
                if n != HEADER || fds.len() != 1 {
                    return Err(ContainerError::Malformed(format!(
                        "{n} header bytes and {} descriptors, {HEADER} and 1 expected",
                        fds.len()
                    )));
                }
                let file = SealedFile::adopt(fds.pop().expect("one")).map_err(|(e, _)| e)?;
                let len = u64::from_le_bytes(head) as usize;
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
            self.owned.insert(
                id,
                Container {
                    pages: Pages::Sealed {
                        file,
                        view: None,
                        changed: false,
                    },
                    len,
                },
            );
        }
        Ok(id)
    }
}

/// Anything with a descriptor is an I/O path.
pub fn path<T: AsFd>(t: &T) -> BorrowedFd<'_> {
    t.as_fd()
}
