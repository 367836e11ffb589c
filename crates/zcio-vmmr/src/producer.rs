//! Real producers (paper 002, §1: a device that DMAs a message into discontiguous pages):
//!
//! - [`FileProducer`]: a file read with `O_DIRECT`, granule by granule, straight into slots of
//!   a [`PageStore`], wherever the store hands them out. The device writes the pages; no byte
//!   passes through the CPU on the way in, and [`crate::reassemble`] then makes them
//!   contiguous without a copy. Where the file system refuses `O_DIRECT` (tmpfs, some
//!   overlays), the file is read through the page cache instead, and
//!   [`FileProducer::direct`] says so with the reason.
//! - [`SocketProducer`]: sockets received through an io_uring provided-buffer ring whose
//!   buffers are store slots ([`zcio_vm::bufring`]): the kernel picks the next free slot for
//!   each receive, so messages arriving on several connections at once end up interleaved
//!   over the store, granule by granule, as pooled receive buffers are.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::Path;
use zcio_vm::bufring::{ProvidedRing, Received};
use zcio_vm::remap::{PageStore, Slot};

/// What went wrong reading a message.
#[derive(Debug, thiserror::Error)]
pub enum ProducerError {
    /// Opening or reading the file failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: String,
        /// The system's error.
        source: std::io::Error,
    },
    /// The store has too few free slots for the message.
    #[error("a message of {len} bytes needs {needed} slots of the store; {free} are free")]
    NoSlots {
        /// The message's length.
        len: usize,
        /// Slots it needs.
        needed: usize,
        /// Slots free.
        free: usize,
    },
    /// The file ended before the message did.
    #[error("{path} ends before byte {end} of the message at offset {offset}")]
    ShortFile {
        /// The file.
        path: String,
        /// Where the message starts.
        offset: u64,
        /// Where it was to end.
        end: u64,
    },
    /// An offset the device cannot read from directly.
    #[error("offset {offset} is not a multiple of the granule ({granule} bytes)")]
    Misaligned {
        /// The offset asked for.
        offset: u64,
        /// The granule.
        granule: usize,
    },
    /// A connection closed before its message was whole.
    #[error("connection {connection} closed after {received} of the message's {len} bytes")]
    ShortMessage {
        /// Which connection (index into the request).
        connection: usize,
        /// Bytes that came.
        received: usize,
        /// The message's length.
        len: usize,
    },
    /// The store or the ring refused (a slot of another store, no provided-buffer rings here,
    /// a receive that failed).
    #[error(transparent)]
    Vm(#[from] zcio_vm::VmError),
}

/// A file read into store slots.
#[derive(Debug)]
pub struct FileProducer {
    fd: OwnedFd,
    path: String,
    why_not_direct: Option<String>,
}

impl FileProducer {
    /// Open `path` for direct reads, or for cached reads where direct ones are refused.
    pub fn open(path: &Path) -> Result<FileProducer, ProducerError> {
        use rustix::fs::{Mode, OFlags, open};
        let name = path.display().to_string();
        let flags = OFlags::RDONLY | OFlags::CLOEXEC;
        let io = |op, e: rustix::io::Errno| ProducerError::Io {
            op,
            path: name.clone(),
            source: e.into(),
        };
        match open(path, flags | OFlags::DIRECT, Mode::empty()) {
            Ok(fd) => Ok(FileProducer {
                fd,
                path: name.clone(),
                why_not_direct: None,
            }),
            Err(e) if e == rustix::io::Errno::INVAL => Ok(FileProducer {
                fd: open(path, flags, Mode::empty()).map_err(|e| io("open", e))?,
                path: name.clone(),
                why_not_direct: Some(format!(
                    "the file system of {name} refuses O_DIRECT (EINVAL); reading through the page cache"
                )),
            }),
            Err(e) => Err(io("open (O_DIRECT)", e)),
        }
    }

    /// Whether reads go straight from the device into the slots; otherwise, why not.
    pub fn direct(&self) -> Result<(), &str> {
        match &self.why_not_direct {
            None => Ok(()),
            Some(why) => Err(why),
        }
    }

    /// Read the `len` bytes at `offset` (a multiple of the granule) into slots taken from
    /// `store`, in the order the store hands them out: the message, scattered. On an error the
    /// slots taken go back to the store.
    pub fn read_message(
        &mut self,
        store: &mut PageStore,
        offset: u64,
        len: usize,
    ) -> Result<Vec<Slot>, ProducerError> {
        let g = store.granule().bytes();
        if offset % g as u64 != 0 {
            return Err(ProducerError::Misaligned { offset, granule: g });
        }
        let needed = len.div_ceil(g);
        if needed > store.free() {
            return Err(ProducerError::NoSlots {
                len,
                needed,
                free: store.free(),
            });
        }
        let slots: Vec<Slot> = (0..needed).filter_map(|_| store.take()).collect();
        match self.fill(store, &slots, offset, len) {
            Ok(()) => Ok(slots),
            Err(e) => {
                store.put_all(slots)?;
                Err(e)
            }
        }
    }

    fn fill(
        &mut self,
        store: &mut PageStore,
        slots: &[Slot],
        offset: u64,
        len: usize,
    ) -> Result<(), ProducerError> {
        let g = store.granule().bytes();
        for (k, s) in slots.iter().enumerate() {
            let at = offset + (k * g) as u64;
            let want = g.min(len - k * g);
            // A whole granule is read (direct reads need whole blocks); the file may end
            // within it, past the message's last byte.
            let buf = store.bytes_mut(s)?;
            let mut got = 0;
            while got < want {
                match rustix::io::pread(&self.fd, &mut buf[got..], at + got as u64) {
                    Ok(0) => {
                        return Err(ProducerError::ShortFile {
                            path: self.path.clone(),
                            offset,
                            end: offset + len as u64,
                        });
                    }
                    Ok(n) => got += n,
                    Err(rustix::io::Errno::INTR) => {}
                    Err(e) => {
                        return Err(ProducerError::Io {
                            op: "read",
                            path: self.path.clone(),
                            source: e.into(),
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

/// Sockets received into store slots through an io_uring provided-buffer ring. The slots it
/// holds go back to the store with [`SocketProducer::close`]; dropped without it, they stay out
/// of the store's free list (their memory goes with the store).
#[derive(Debug)]
pub struct SocketProducer {
    ring: ProvidedRing,
}

impl SocketProducer {
    /// A ring holding `buffers` slots taken from `store` (all of them if it has fewer free).
    /// Where the kernel has no provided-buffer rings, the error says so.
    pub fn new(store: &mut PageStore, buffers: usize) -> Result<SocketProducer, ProducerError> {
        let mut ring = ProvidedRing::new(store, buffers)?;
        for _ in 0..buffers.min(ring.capacity()) {
            let Some(s) = store.take() else { break };
            if let Err((e, s)) = ring.provide(store, s) {
                store.put(s)?;
                return Err(e.into());
            }
        }
        Ok(SocketProducer { ring })
    }

    /// Slots the ring holds, ready for the kernel.
    pub fn buffers(&self) -> usize {
        self.ring.held()
    }

    /// Receive one message of `lens[i]` bytes from each connection `fds[i]`, a granule from
    /// each in turn (a server with several connections, its receive buffers from one pool):
    /// the slots of each message, in order. If a connection closes early or a receive fails,
    /// every slot received so far goes back to the ring and the error names the connection.
    pub fn receive(
        &mut self,
        store: &mut PageStore,
        fds: &[BorrowedFd<'_>],
        lens: &[usize],
    ) -> Result<Vec<Vec<Slot>>, ProducerError> {
        let g = store.granule().bytes();
        let needed: usize = lens.iter().map(|l| l.div_ceil(g)).sum();
        if fds.len() != lens.len() || needed > self.ring.held() {
            return Err(ProducerError::NoSlots {
                len: lens.iter().sum(),
                needed,
                free: self.ring.held(),
            });
        }
        let mut got: Vec<Vec<Slot>> = lens.iter().map(|_| Vec::new()).collect();
        let mut bytes = vec![0usize; lens.len()];
        let mut failure = None;
        'rounds: loop {
            let mut more = false;
            for (i, fd) in fds.iter().enumerate() {
                let want = g.min(lens[i] - bytes[i]);
                if want == 0 {
                    continue;
                }
                more = true;
                match self.ring.recv(store, *fd, want) {
                    Ok(Received::Data { slot, bytes: n }) => {
                        got[i].push(slot);
                        bytes[i] += n;
                        if n < want {
                            failure = Some(ProducerError::ShortMessage {
                                connection: i,
                                received: bytes[i],
                                len: lens[i],
                            });
                            break 'rounds;
                        }
                    }
                    Ok(Received::End) => {
                        failure = Some(ProducerError::ShortMessage {
                            connection: i,
                            received: bytes[i],
                            len: lens[i],
                        });
                        break 'rounds;
                    }
                    Err(e) => {
                        failure = Some(e.into());
                        break 'rounds;
                    }
                }
            }
            if !more {
                break;
            }
        }
        match failure {
            None => Ok(got),
            Some(e) => {
                for s in got.into_iter().flatten() {
                    self.give_back(store, vec![s])?;
                }
                Err(e)
            }
        }
    }

    /// Hand slots back to the ring (a message's, once it is freed), for the next receives.
    pub fn give_back(&mut self, store: &PageStore, slots: Vec<Slot>) -> Result<(), ProducerError> {
        for s in slots {
            self.ring.provide(store, s).map_err(|(e, _)| e)?;
        }
        Ok(())
    }

    /// Take every slot back from the ring into the store.
    pub fn close(mut self, store: &mut PageStore) -> Result<(), ProducerError> {
        store.put_all(self.ring.take_back())?;
        Ok(())
    }
}
