//! A real producer (paper 002, §1: a device that DMAs a message into discontiguous pages): a
//! file read with `O_DIRECT`, granule by granule, straight into slots of a [`PageStore`],
//! wherever the store hands them out. The device writes the pages; no byte passes through the
//! CPU on the way in, and [`crate::reassemble`] then makes them contiguous without a copy.
//!
//! Where the file system refuses `O_DIRECT` (tmpfs, some overlays), the file is read through
//! the page cache instead, and [`FileProducer::direct`] says so with the reason.

use std::os::fd::OwnedFd;
use std::path::Path;
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
    /// The store refused (a slot of another store).
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
                for s in slots {
                    store.put(s)?;
                }
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
