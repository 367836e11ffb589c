//! The wire: a pipe whose buffer holds *references to pages*, not copies of them.
//!
//! `vmsplice` without `SPLICE_F_GIFT` makes the kernel take a reference on each page of the
//! sender's buffer and queue it in the pipe: this is Genie's *reference pages* operation (paper 000,
//! Table 2). The reference outlives the sender's mapping, so a buffer the application unmaps or
//! frees while its output is pending keeps its physical pages until the receiver has read them:
//! *I/O-deferred deallocation* done by the kernel. The receiver's `read` is the one copy the
//! transfer makes, the counterpart of the adapter's DMA in the paper; it is reported as a kernel
//! copy by the layers above.

use crate::arena::SharedArena;
use crate::error::{Result, VmError};
use rustix::pipe::{IoSliceRaw, PipeFlags, SpliceFlags};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Most bytes one pipe holds on this machine (`/proc/sys/fs/pipe-max-size`), 64 KiB if unknown.
pub fn pipe_max_size() -> usize {
    std::fs::read_to_string("/proc/sys/fs/pipe-max-size")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(64 * 1024)
}

/// Both ends of a pipe, with its capacity.
#[derive(Debug)]
pub struct Pipe {
    /// Read end.
    pub rx: OwnedFd,
    /// Write end.
    pub tx: OwnedFd,
    /// Capacity in bytes after resizing.
    pub capacity: usize,
}

impl Pipe {
    /// A close-on-exec pipe whose capacity is `want` bytes, or the largest this machine allows.
    pub fn new(want: usize) -> Result<Pipe> {
        let (rx, tx) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC)
            .map_err(|e| VmError::sys("pipe2", e.into()))?;
        let capacity = set_capacity(tx.as_fd(), want)?;
        Ok(Pipe { rx, tx, capacity })
    }
}

/// Resize a pipe to `want` bytes, clamped to the machine's maximum. Returns the new capacity.
pub fn set_capacity(fd: BorrowedFd<'_>, want: usize) -> Result<usize> {
    let want = want.clamp(4096, pipe_max_size());
    match rustix::pipe::fcntl_setpipe_size(fd, want) {
        Ok(n) => Ok(n),
        // Over the per-user pipe budget: keep the default capacity.
        Err(rustix::io::Errno::PERM) => {
            rustix::pipe::fcntl_getpipe_size(fd).map_err(|e| VmError::sys("F_GETPIPE_SZ", e.into()))
        }
        Err(e) => Err(VmError::sys("F_SETPIPE_SZ", e.into())),
    }
}

/// Queue references to the pages of `bufs` in the pipe `fd` (blocking until all are queued).
/// Returns the bytes queued, which is the sum of the lengths unless the reader went away
/// (then an `EPIPE` error).
///
/// The pipe sees later writes to those pages until the reader has read them: callers that
/// promise copy semantics write-protect the pages first (TCOW, [`crate::VmRuntime::reference_output`]).
pub fn vmsplice_all(fd: BorrowedFd<'_>, bufs: &[&[u8]]) -> Result<usize> {
    let mut total = 0;
    for buf in bufs {
        each_part(
            "vmsplice",
            buf.len(),
            std::io::ErrorKind::WriteZero,
            |off| {
                let slice = [IoSliceRaw::from_slice(&buf[off..])];
                // SAFETY: the slice is valid for reads for its whole length for the duration of the
                // call (borrowed); vmsplice without GIFT only takes page references and never writes.
                unsafe { rustix::pipe::vmsplice(fd, &slice, SpliceFlags::empty()) }
            },
        )?;
        total += buf.len();
    }
    Ok(total)
}

/// Call `step` with the offset reached until `len` bytes are done, again after `EINTR`: a call
/// that moves no byte fails with `short` (the other end went away), an error with `op` named.
fn each_part(
    op: &'static str,
    len: usize,
    short: std::io::ErrorKind,
    mut step: impl FnMut(usize) -> rustix::io::Result<usize>,
) -> Result<()> {
    let mut off = 0;
    while off < len {
        match step(off) {
            Ok(0) => return Err(VmError::sys(op, short.into())),
            Ok(n) => off += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(VmError::sys(op, e.into())),
        }
    }
    Ok(())
}

/// Pipes a [`Striped`] wire uses in turn.
pub const STRIPES: usize = 2;

/// A wire of [`STRIPES`] pipes used in turn, `chunk` bytes each, every message starting on the
/// first: while the reader copies one pipe's chunk, the writer, woken by the reader's first
/// read of the other, refills that one. With one pipe the two take turns (the writer waits for
/// the reader to empty the pipe, the reader for the writer to be woken and refill it), and a
/// large message moves at about half the speed of the copy (measured here: 16 MiB in 2.8-3.2
/// ms through one 1 MiB pipe, 1.5-1.7 ms through two).
///
/// Both ends must agree on the pipes' order and on `chunk`, and read each message's bytes in
/// order from its start ([`Striped::reader`]).
#[derive(Debug, Clone, Copy)]
pub struct Striped<'a> {
    pipes: [BorrowedFd<'a>; STRIPES],
    chunk: usize,
    pace: Option<Pace<'a>>,
    /// Whether the writer sleeps until a chunk fits ([`Pace`]) instead of entering the pipe.
    sleep: bool,
}

impl<'a> Striped<'a> {
    /// The wire of these pipes, `chunk` bytes to a pipe at a time (at least a page).
    pub fn new(pipes: [BorrowedFd<'a>; STRIPES], chunk: usize) -> Striped<'a> {
        Striped {
            pipes,
            chunk: chunk.max(crate::page_size()),
            pace: None,
            sleep: false,
        }
    }

    /// This wire with its two ends' shared progress `pace`: the reader reports every chunk it
    /// reads, and the writer, when `sleep` is set, sleeps until its next chunk fits the pipe
    /// instead of spinning in the kernel ([`Pace`]).
    pub fn paced(self, pace: Pace<'a>, sleep: bool) -> Striped<'a> {
        Striped {
            pace: Some(pace),
            sleep,
            ..self
        }
    }

    /// Bytes of a message each pipe takes in turn.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// The pipe a message's byte at `pos` travels in, and how many bytes from `pos` on travel
    /// in the same chunk.
    fn at(&self, pos: usize) -> (usize, BorrowedFd<'a>, usize) {
        let k = (pos / self.chunk) % STRIPES;
        (k, self.pipes[k], self.chunk - pos % self.chunk)
    }

    /// Queue a whole message, the concatenation of `bufs`, by page reference ([`vmsplice_all`]
    /// chunk by chunk). Returns the bytes queued.
    pub fn vmsplice_message(&self, bufs: &[&[u8]]) -> Result<usize> {
        let mut pos = 0;
        for buf in bufs {
            let mut off = 0;
            while off < buf.len() {
                let (k, fd, room) = self.at(pos);
                let n = room.min(buf.len() - off);
                if let Some(p) = self.pace {
                    if self.sleep {
                        p.wait_room(k, n, self.chunk);
                    }
                    p.queued(k, n);
                }
                vmsplice_all(fd, &[&buf[off..off + n]])?;
                off += n;
                pos += n;
            }
        }
        Ok(pos)
    }

    /// A reader of one message, from its first byte.
    pub fn reader(&self) -> StripedReader<'a> {
        StripedReader {
            wire: *self,
            pos: 0,
        }
    }
}

/// A [`Striped`] wire's progress, shared by its two ends: the bytes the writer has queued in
/// each pipe and the bytes the reader has read from it.
///
/// It exists for the writer's waits. A writer faster than its reader (page references are
/// queued far faster than the reader copies them out) finds the pipe full; entering it then
/// means spinning on the pipe's lock for as long as the reader holds it to copy a whole chunk,
/// a CPU burnt for nothing (for long messages, most of the sender's CPU time). With the
/// counters, the writer sleeps on a futex until its chunk fits, and the reader wakes it after
/// each chunk it reads while the writer waits.
///
/// The counters live in memory both processes write, so they are advice, never trusted: a
/// counter that is wrong (or a reader that stops reading) only ends the writer's sleep, after
/// [`PACE_STALL`] without the reader's progress, and the writer enters the pipe as it would
/// without them, where the kernel makes it wait.
#[derive(Clone, Copy)]
pub struct Pace<'a> {
    /// Bytes queued in each pipe, then bytes read from each pipe.
    words: &'a [AtomicU64],
    /// Bumped by the reader after each chunk: the futex the writer sleeps on.
    seq: &'a AtomicU32,
    /// Set while the writer sleeps, so that the reader wakes it.
    waiting: &'a AtomicU32,
    /// How many times the writer went to sleep.
    sleeps: &'a AtomicU64,
}

impl std::fmt::Debug for Pace<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pace")
            .field("queued", &[self.written(0), self.written(1)])
            .field("read", &[self.consumed(0), self.consumed(1)])
            .field("sleeps", &self.sleeps())
            .finish()
    }
}

/// How long a pacing writer sleeps without any progress of its reader before it stops pacing
/// that chunk and enters the pipe.
pub const PACE_STALL: std::time::Duration = std::time::Duration::from_millis(2);

impl<'a> Pace<'a> {
    /// Bytes of shared memory one wire's [`Pace`] takes.
    pub const FOOTPRINT: usize = 64;

    /// The progress block at `offset` (8-aligned, [`Pace::FOOTPRINT`] bytes) of `arena`, zero
    /// when the arena is new.
    pub fn new(arena: &'a SharedArena, offset: usize) -> Pace<'a> {
        Pace {
            words: arena.atomic_u64s(offset, 2 * STRIPES * 8),
            seq: arena.atomic_u32(offset + 2 * STRIPES * 8),
            waiting: arena.atomic_u32(offset + 2 * STRIPES * 8 + 4),
            sleeps: arena.atomic_u64(offset + 2 * STRIPES * 8 + 8),
        }
    }

    /// How many times the writer has slept waiting for room, so far.
    pub fn sleeps(&self) -> u64 {
        self.sleeps.load(Ordering::Relaxed)
    }

    /// Per pipe, the bytes queued and the bytes read so far, as the counters say.
    pub fn progress(&self) -> ([u64; STRIPES], [u64; STRIPES]) {
        (
            std::array::from_fn(|k| self.written(k)),
            std::array::from_fn(|k| self.consumed(k)),
        )
    }

    fn written(&self, k: usize) -> u64 {
        self.words[k].load(Ordering::SeqCst)
    }

    fn consumed(&self, k: usize) -> u64 {
        self.words[STRIPES + k].load(Ordering::SeqCst)
    }

    /// Whether `n` more bytes fit pipe `k` of `capacity` bytes, by the counters.
    fn fits(&self, k: usize, n: usize, capacity: usize) -> bool {
        let held = self.written(k).wrapping_sub(self.consumed(k));
        held.saturating_add(n as u64) <= capacity as u64
    }

    /// The writer: sleep until `n` bytes fit pipe `k`, or until the reader has made no progress
    /// for [`PACE_STALL`].
    fn wait_room(&self, k: usize, n: usize, capacity: usize) {
        let stall = rustix::time::Timespec {
            tv_sec: 0,
            tv_nsec: PACE_STALL.as_nanos() as _,
        };
        loop {
            let seq = self.seq.load(Ordering::SeqCst);
            if self.fits(k, n, capacity) {
                return;
            }
            self.waiting.store(1, Ordering::SeqCst);
            // Checked again after announcing the sleep: a read that ended in between either
            // shows here or sees the flag and wakes us (the futex returns at once when `seq`
            // moved).
            if self.fits(k, n, capacity) {
                self.waiting.store(0, Ordering::SeqCst);
                return;
            }
            self.sleeps.fetch_add(1, Ordering::Relaxed);
            let r = rustix::thread::futex::wait(
                self.seq,
                rustix::thread::futex::Flags::empty(),
                seq,
                Some(&stall),
            );
            self.waiting.store(0, Ordering::SeqCst);
            match r {
                Ok(()) | Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => {}
                // No progress (or no futex): the kernel's own wait takes over.
                Err(_) => return,
            }
        }
    }

    /// The writer queued `n` bytes in pipe `k`.
    fn queued(&self, k: usize, n: usize) {
        self.words[k].fetch_add(n as u64, Ordering::SeqCst);
    }

    /// The reader read `n` bytes from pipe `k`: count them, and wake the writer if it sleeps.
    fn read(&self, k: usize, n: usize) {
        self.words[STRIPES + k].fetch_add(n as u64, Ordering::SeqCst);
        self.seq.fetch_add(1, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) != 0 {
            // A failed wake leaves the writer to its stall timeout: nothing is lost.
            let _ = rustix::thread::futex::wake(self.seq, rustix::thread::futex::Flags::empty(), 1);
        }
    }
}

/// Reads one message of a [`Striped`] wire in order.
#[derive(Debug)]
pub struct StripedReader<'a> {
    wire: Striped<'a>,
    pos: usize,
}

impl StripedReader<'_> {
    /// Read exactly `buf.len()` more bytes of the message ([`read_exact`] chunk by chunk).
    pub fn read_exact(&mut self, buf: &mut [u8]) -> Result<()> {
        let mut off = 0;
        while off < buf.len() {
            let (k, fd, room) = self.wire.at(self.pos);
            let n = room.min(buf.len() - off);
            read_exact(fd, &mut buf[off..off + n])?;
            if let Some(p) = self.wire.pace {
                p.read(k, n);
            }
            off += n;
            self.pos += n;
        }
        Ok(())
    }

    /// Bytes of the message read so far.
    pub fn position(&self) -> usize {
        self.pos
    }
}

/// Bytes queued in a pipe or socket and not yet read (`FIONREAD`).
pub fn queued(fd: BorrowedFd<'_>) -> Result<usize> {
    rustix::io::ioctl_fionread(fd)
        .map(|n| n as usize)
        .map_err(|e| VmError::sys("FIONREAD", e.into()))
}

/// Read exactly `buf.len()` bytes from `fd`. End of file before that is an `UnexpectedEof` error
/// (the writer died or closed); the bytes read so far are in `buf` and their count in the error
/// is not reported: callers that must keep an application buffer untouched read into staging.
pub fn read_exact(fd: BorrowedFd<'_>, buf: &mut [u8]) -> Result<()> {
    let eof = std::io::ErrorKind::UnexpectedEof;
    each_part("read", buf.len(), eof, |off| {
        rustix::io::read(fd, &mut buf[off..])
    })
}

/// Write all of `buf` to `fd` with `write` (the kernel copies).
pub fn write_all(fd: BorrowedFd<'_>, buf: &[u8]) -> Result<()> {
    let short = std::io::ErrorKind::WriteZero;
    each_part("write", buf.len(), short, |off| {
        rustix::io::write(fd, &buf[off..])
    })
}

/// Anything with a descriptor can be a wire end.
pub fn fd_of<T: AsFd>(t: &T) -> BorrowedFd<'_> {
    t.as_fd()
}

/// Most descriptors [`send_with_fds`] and [`recv_with_fds`] carry in one message.
pub const MAX_FDS: usize = 8;

/// Send `bytes` with the descriptors `fds` (at most [`MAX_FDS`]) over a Unix socket
/// (`SCM_RIGHTS`), in one message.
pub fn send_with_fds(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<()> {
    send_with_fds_flags(sock, bytes, fds, rustix::net::SendFlags::NOSIGNAL)
}

/// [`send_with_fds`] without waiting: where the socket cannot take the whole message now, an
/// error (`EAGAIN`, or a message sent in part), never a wait for the reader.
pub fn send_with_fds_now(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> Result<()> {
    send_with_fds_flags(
        sock,
        bytes,
        fds,
        rustix::net::SendFlags::NOSIGNAL | rustix::net::SendFlags::DONTWAIT,
    )
}

fn send_with_fds_flags(
    sock: BorrowedFd<'_>,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
    flags: rustix::net::SendFlags,
) -> Result<()> {
    use std::mem::MaybeUninit;
    if fds.len() > MAX_FDS {
        return Err(VmError::TooLarge {
            what: "descriptors in one message",
            value: fds.len(),
            limit: MAX_FDS,
        });
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut anc = rustix::net::SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        anc.push(rustix::net::SendAncillaryMessage::ScmRights(fds));
    }
    let n = rustix::net::sendmsg(sock, &[std::io::IoSlice::new(bytes)], &mut anc, flags)
        .map_err(|e| VmError::sys("sendmsg(SCM_RIGHTS)", e.into()))?;
    if n != bytes.len() {
        return Err(VmError::sys(
            "sendmsg(SCM_RIGHTS)",
            std::io::Error::new(std::io::ErrorKind::WriteZero, "message sent in part"),
        ));
    }
    Ok(())
}

/// Receive one message sent with [`send_with_fds`]: its length in `buf` and its descriptors
/// (close-on-exec). A length of 0 means the peer has closed the socket.
pub fn recv_with_fds(sock: BorrowedFd<'_>, buf: &mut [u8]) -> Result<(usize, Vec<OwnedFd>)> {
    use std::mem::MaybeUninit;
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut anc = rustix::net::RecvAncillaryBuffer::new(&mut space);
    let r = rustix::net::recvmsg(
        sock,
        &mut [std::io::IoSliceMut::new(buf)],
        &mut anc,
        rustix::net::RecvFlags::CMSG_CLOEXEC,
    )
    .map_err(|e| VmError::sys("recvmsg(SCM_RIGHTS)", e.into()))?;
    let mut fds = Vec::new();
    for m in anc.drain() {
        if let rustix::net::RecvAncillaryMessage::ScmRights(it) = m {
            fds.extend(it);
        }
    }
    Ok((r.bytes, fds))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mapping::{MapOptions, Mapping};

    #[test]
    fn vmsplice_then_unmap_still_delivers() {
        let ps = crate::page_size();
        let p = Pipe::new(16 * ps).unwrap();
        let mut m = Mapping::anonymous(4 * ps, MapOptions::default()).unwrap();
        for (i, b) in m.as_mut_slice().iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let expect = m.as_slice().to_vec();
        vmsplice_all(p.tx.as_fd(), &[m.as_slice()]).unwrap();
        drop(m); // munmap during pending output: the pipe keeps the pages
        assert_eq!(queued(p.rx.as_fd()).unwrap(), 4 * ps);
        let mut got = vec![0u8; 4 * ps];
        read_exact(p.rx.as_fd(), &mut got).unwrap();
        assert_eq!(got, expect);
    }

    #[test]
    fn a_striped_wire_delivers_messages_in_order_across_its_pipes() {
        let ps = crate::page_size();
        let a = Pipe::new(64 * ps).unwrap();
        let b = Pipe::new(64 * ps).unwrap();
        let tx = Striped::new([a.tx.as_fd(), b.tx.as_fd()], 16 * ps);
        let rx = Striped::new([a.rx.as_fd(), b.rx.as_fd()], 16 * ps);
        // Messages that end inside a chunk, on a chunk boundary, and span both pipes twice,
        // in pieces that cross chunks; the reader runs beside the writer.
        let lens = [100, 16 * ps, 16 * ps + 1, 70 * ps + 123, 1];
        let msgs: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(k, &n)| (0..n).map(|i| (i * 7 + k * 13) as u8).collect())
            .collect();
        std::thread::scope(|s| {
            let msgs = &msgs;
            s.spawn(move || {
                for m in msgs {
                    let cut = m.len() / 3;
                    assert_eq!(
                        tx.vmsplice_message(&[&m[..cut], &m[cut..]]).unwrap(),
                        m.len()
                    );
                }
            });
            for m in msgs {
                let mut r = rx.reader();
                let mut got = vec![0u8; m.len()];
                let half = got.len() / 2;
                r.read_exact(&mut got[..half]).unwrap();
                r.read_exact(&mut got[half..]).unwrap();
                assert_eq!(r.position(), m.len());
                assert!(&got == m, "message of {} bytes", m.len());
            }
        });
    }

    /// A message of `len` bytes, different for each `k`.
    fn message(len: usize, k: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + k * 13) as u8).collect()
    }

    /// Send `lens` through a two-pipe wire of `16 * ps` bytes per pipe, the writer paced by
    /// `wpace` (sleeping if `sleep`) and the reader reporting to `rpace`; the reader pauses
    /// before each message so that the writer finds the pipes full. Checks every byte.
    fn paced_run(wpace: Option<Pace<'_>>, rpace: Option<Pace<'_>>, sleep: bool, lens: &[usize]) {
        let ps = crate::page_size();
        let a = Pipe::new(16 * ps).unwrap();
        let b = Pipe::new(16 * ps).unwrap();
        let chunk = a.capacity.min(b.capacity);
        let mut tx = Striped::new([a.tx.as_fd(), b.tx.as_fd()], chunk);
        let mut rx = Striped::new([a.rx.as_fd(), b.rx.as_fd()], chunk);
        if let Some(p) = wpace {
            tx = tx.paced(p, sleep);
        }
        if let Some(p) = rpace {
            rx = rx.paced(p, false);
        }
        let msgs: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(k, &n)| message(n, k))
            .collect();
        std::thread::scope(|s| {
            let msgs = &msgs;
            s.spawn(move || {
                for m in msgs {
                    assert_eq!(tx.vmsplice_message(&[m]).unwrap(), m.len());
                }
            });
            for m in msgs {
                std::thread::sleep(std::time::Duration::from_millis(3));
                let mut r = rx.reader();
                let mut got = vec![0u8; m.len()];
                r.read_exact(&mut got).unwrap();
                assert!(&got == m, "message of {} bytes", m.len());
            }
        });
    }

    #[test]
    fn a_paced_writer_sleeps_while_the_pipes_are_full_and_the_counters_match_the_bytes() {
        let ps = crate::page_size();
        let arena = SharedArena::create("zcio-pace-test", 4 * ps).unwrap();
        let pace = Pace::new(&arena, SharedArena::user_offset());
        // Messages that fill both pipes several times over, end mid-chunk, and are tiny.
        let lens = [100 * ps + 17, 40 * ps, 1, 33 * ps];
        paced_run(Some(pace), Some(pace), true, &lens);
        let (queued, read) = pace.progress();
        assert_eq!(queued, read, "every byte queued was read: {pace:?}");
        assert_eq!(
            queued.iter().sum::<u64>(),
            lens.iter().sum::<usize>() as u64,
            "{pace:?}"
        );
        assert!(pace.sleeps() > 0, "the writer never slept: {pace:?}");
    }

    #[test]
    fn a_writer_that_does_not_sleep_keeps_the_counters_but_never_sleeps() {
        let ps = crate::page_size();
        let arena = SharedArena::create("zcio-pace-test", 4 * ps).unwrap();
        let pace = Pace::new(&arena, SharedArena::user_offset());
        paced_run(Some(pace), Some(pace), false, &[70 * ps]);
        let (queued, read) = pace.progress();
        assert_eq!(queued, read);
        assert_eq!(queued.iter().sum::<u64>(), 70 * ps as u64);
        assert_eq!(pace.sleeps(), 0, "{pace:?}");
    }

    #[test]
    fn a_reader_that_never_reports_or_lies_only_ends_the_writers_sleep() {
        let ps = crate::page_size();
        let arena = SharedArena::create("zcio-pace-test", 4 * ps).unwrap();
        let off = SharedArena::user_offset();
        // A reader that reports nothing: the writer stops pacing after each stall and the
        // kernel makes it wait; every byte still arrives.
        let pace = Pace::new(&arena, off);
        paced_run(Some(pace), None, true, &[70 * ps, 3 * ps + 5]);
        assert!(pace.sleeps() > 0, "{pace:?}");
        // A peer that writes absurd counts: the same.
        let words = arena.atomic_u64s(off, 2 * STRIPES * 8);
        for w in words {
            w.store(u64::MAX - 3, Ordering::SeqCst);
        }
        paced_run(Some(pace), None, true, &[50 * ps]);
    }

    #[test]
    fn read_exact_reports_eof() {
        let p = Pipe::new(4096).unwrap();
        write_all(p.tx.as_fd(), b"abc").unwrap();
        drop(p.tx);
        let mut got = [0u8; 8];
        let e = read_exact(p.rx.as_fd(), &mut got).unwrap_err();
        assert!(e.to_string().contains("read"), "{e}");
    }
}
