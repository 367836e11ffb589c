//! Fuzzing the decoding of a container shipped over a socket (`arbtest`): the 16-byte header
//! a peer sends (the data length and the kind, sealed or volatile) and the descriptors that
//! come with it. A hostile peer may send any header, cut short or too long, with no
//! descriptor, several, or the wrong ones: memory files of any size, sealed or not, still
//! mapped writable by the peer, opened read-only, not sealable; pipes, plain files, the
//! socket itself; even a volatile container of the receiving domain's own, sent back with a
//! lie about its length. The receiving domain must take a container whose length its pages
//! hold, readable to the last byte, or refuse it with an error: never panic or fault.
//!
//! `ZCIO_FUZZ_MS` sets the time budget (default 1000 ms; a longer run: `ZCIO_FUZZ_MS=600000
//! cargo test --release -p zcio-sequoia --test fuzz_container`). A failure prints the seed to
//! replay with `ZCIO_FUZZ_SEED`. Arbtest keeps no corpus: the seeds in `REGRESSIONS` are
//! replayed first, every run.

use rustix::fs::SealFlags;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use zcio_sequoia::container::Domain;
use zcio_testkit::fuzz::{Result, Unstructured, fuzz};
use zcio_vm::mapping::Mapping;

/// Seeds replayed before the timed search: all-zero input and a few sizes.
const REGRESSIONS: &[u64] = &[
    0x0000_0000_0000_1000,
    0x9e37_79b9_0000_0400,
    0x2545_f491_0000_4000,
];

/// Words at the edges of arithmetic.
const EDGES: [u64; 7] = [0, 1, 4095, 4096, u64::MAX, 1 << 63, u32::MAX as u64];

/// A descriptor a hostile peer may send, with whatever keeps it in that state (a writable
/// mapping of its own).
struct Sent {
    fd: OwnedFd,
    /// The file's size, where it is a file.
    size: Option<u64>,
    _map: Option<Mapping>,
}

fn memfd(u: &mut Unstructured<'_>) -> Result<Sent> {
    let size = match u.int_in_range(0..=3)? {
        0 => u.int_in_range(0..=3 * 4096)?,
        _ => u.int_in_range(1..=4)? * 4096,
    };
    let fd = if u.ratio(1, 8)? {
        // Not sealable at all.
        let fd =
            rustix::fs::memfd_create("fuzz-unsealable", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, size).unwrap();
        fd
    } else {
        zcio_vm::mapping::memfd("fuzz-container", size as usize).unwrap()
    };
    let seals = match u.int_in_range(0..=5)? {
        0 => SealFlags::WRITE | SealFlags::SHRINK | SealFlags::GROW,
        1 => SealFlags::SHRINK | SealFlags::GROW,
        2 => SealFlags::SEAL,
        3 => SealFlags::FUTURE_WRITE,
        _ => SealFlags::empty(),
    };
    let _ = rustix::fs::fcntl_add_seals(&fd, seals);
    // Still mapped writable by the sender, perhaps: such a file cannot be sealed.
    let map = if size > 0 && u.ratio(1, 4)? {
        Mapping::shared_fd(fd.as_fd(), 0, size as usize, None).ok()
    } else {
        None
    };
    let fd = if u.ratio(1, 8)? {
        zcio_vm::mapping::reopen_read_only(fd.as_fd()).unwrap()
    } else {
        fd
    };
    Ok(Sent {
        fd,
        size: Some(size),
        _map: map,
    })
}

/// A descriptor that is no memory file: a pipe end, a plain file, a socket.
fn other(u: &mut Unstructured<'_>, sock: &UnixStream) -> Result<Sent> {
    let fd = match u.int_in_range(0..=2)? {
        0 => rustix::pipe::pipe().unwrap().0,
        1 => {
            let f = tempfile::tempfile().unwrap();
            f.set_len(u.int_in_range(0..=8192)?).unwrap();
            f.into()
        }
        _ => sock.as_fd().try_clone_to_owned().unwrap(),
    };
    let size = rustix::fs::fstat(&fd).ok().map(|s| s.st_size as u64);
    Ok(Sent {
        fd,
        size,
        _map: None,
    })
}

#[test]
fn any_header_and_descriptors_give_a_whole_container_or_an_error() {
    fuzz(REGRESSIONS, |u| {
        let (peer, ours) = UnixStream::pair().unwrap();
        let mut dom = if u.arbitrary()? {
            Domain::accepting_volatile()
        } else {
            Domain::new()
        };
        // Descriptors the peer may send: the domain's own volatile containers, given to the
        // peer honestly first, and files of every kind.
        let mut pool: Vec<Sent> = Vec::new();
        for _ in 0..u.int_in_range(0..=2)? {
            let id = dom.alloc_volatile(u.int_in_range(1..=3 * 4096)?).unwrap();
            dom.write(ours.as_fd(), id).unwrap();
            let mut head = [0u8; 16];
            let (n, mut fds) = zcio_vm::wire::recv_with_fds(peer.as_fd(), &mut head).unwrap();
            assert_eq!((n, fds.len()), (16, 1));
            let fd = fds.pop().unwrap();
            let size = rustix::fs::fstat(&fd).unwrap().st_size as u64;
            pool.push(Sent {
                fd,
                size: Some(size),
                _map: None,
            });
        }
        for _ in 0..u.int_in_range(1..=3)? {
            pool.push(if u.ratio(3, 4)? {
                memfd(u)?
            } else {
                other(u, &peer)?
            });
        }
        // The message: a header, and up to three of the descriptors.
        let mut fds: Vec<BorrowedFd<'_>> = Vec::new();
        let mut size = None;
        for _ in 0..*u.choose(&[0, 1, 1, 1, 1, 2, 3])? {
            let s = &pool[u.choose_index(pool.len())?];
            fds.push(s.fd.as_fd());
            size = s.size;
        }
        let len = match u.int_in_range(0..=3)? {
            0 | 1 => u.int_in_range(1..=size.unwrap_or(4096).max(1))?,
            2 => *u.choose(&EDGES)?,
            _ => u.arbitrary()?,
        };
        let kind: u64 = match u.int_in_range(0..=4)? {
            0 | 1 => 0,
            2 | 3 => 1,
            _ => u.arbitrary()?,
        };
        let mut head: Vec<u8> = len
            .to_le_bytes()
            .into_iter()
            .chain(kind.to_le_bytes())
            .collect();
        match u.int_in_range(0..=7)? {
            0 => head.truncate(u.int_in_range(1..=15)?),
            1 => head.extend(std::iter::repeat_n(0, u.int_in_range(1..=16)?)),
            _ => {}
        }
        zcio_vm::wire::send_with_fds(peer.as_fd(), &head, &fds).unwrap();
        let map = u.arbitrary()?;
        let id = match dom.read(ours.as_fd(), 0, map) {
            Ok(id) => id,
            Err(e) => {
                assert!(!e.to_string().is_empty());
                return Ok(());
            }
        };
        // Taken: the length announced, held by its pages, readable to the last byte.
        let got = dom.len(id).unwrap();
        assert_eq!(got as u64, len, "length taken");
        assert!(got >= 1 && got as u64 <= size.unwrap_or(0), "{got} bytes");
        if dom.is_volatile(id).unwrap() {
            assert_eq!(kind, 1);
            let words = dom.map_words(id).unwrap();
            assert!(
                words.len() * 8 >= got,
                "{got} bytes in {} words",
                words.len()
            );
            words[(got - 1) / 8].load(Ordering::Relaxed);
        } else {
            assert_eq!(kind, 0);
            let bytes = dom.map_read(id).unwrap();
            assert_eq!(bytes.len(), got);
            let _ = (bytes[0], bytes[got - 1]);
        }
        dom.free(id).unwrap();
        Ok(())
    });
}
