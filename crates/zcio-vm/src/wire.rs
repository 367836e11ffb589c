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

/// Pipes a [`Striped`] wire has at the least: while the reader copies one pipe's chunk, the
/// writer refills the other.
pub const MIN_STRIPES: usize = 2;

/// Pages of a pipe a chunk leaves free: a chunk off the page boundary, or made of pieces from
/// different buffers (a copied head and tail around the pages referenced in place), spans a
/// few pages more than its length in pages, and must still fit an empty pipe.
const CHUNK_SLACK_PAGES: usize = 4;

/// The chunk of a [`Striped`] wire whose pipes hold `capacity` bytes: `capacity` less a few
/// pages, at least a page.
pub fn chunk_for(capacity: usize) -> usize {
    let ps = crate::page_size();
    (capacity / ps).saturating_sub(CHUNK_SLACK_PAGES).max(1) * ps
}

/// A wire of pipes used as a ring, one chunk to a pipe: a message's chunks go to consecutive
/// pipes, the next message's first chunk to the pipe after its last, and a chunk is queued
/// only in a pipe its reader has drained. A chunk is a little shorter than a pipe, so that it
/// fits an empty pipe at any page offset ([`Striped::new`]). So a writer whose next pipes are
/// drained queues a whole message without waiting, however busy the reader, up to the
/// pipes' total (the *window*, [`Striped::window`]), and the page references the kernel holds
/// for the pipes keep the data of the moment of the call (I/O-deferred deallocation).
///
/// With two pipes, while the reader copies one pipe's chunk the writer refills the other;
/// with one, the two take turns and a large message moves at about half the speed of the copy
/// (measured here: 16 MiB in 2.8-3.2 ms through one 1 MiB pipe, 1.5-1.7 ms through two).
///
/// Both ends must agree on the pipes' order, on the chunk, and on each message's first chunk
/// ([`Striped::at_chunk`], advanced by [`Striped::chunks`] per message), and read each
/// message's bytes in order from its start ([`Striped::reader`]).
#[derive(Debug, Clone, Copy)]
pub struct Striped<'a> {
    pipes: &'a [OwnedFd],
    chunk: usize,
    /// The ring index of the message's first chunk (its pipe: `first % pipes.len()`).
    first: u64,
    pace: Option<Pace<'a>>,
}

/// Where a writer waiting for a pipe to drain stands ([`Striped::wait_drained`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Room {
    /// The pipe is empty: a chunk fits it whole.
    Drained,
    /// Not yet (the wait ended after its time).
    Waiting,
    /// A signal ended the wait.
    Interrupted,
}

impl<'a> Striped<'a> {
    /// The wire of `pipes` (at least one), each of `capacity` bytes (the smallest pipe's):
    /// its chunk is `capacity` less a few pages (at least a page).
    pub fn new(pipes: &'a [OwnedFd], capacity: usize) -> Striped<'a> {
        assert!(!pipes.is_empty(), "a wire has a pipe");
        Striped {
            pipes,
            chunk: chunk_for(capacity),
            first: 0,
            pace: None,
        }
    }

    /// This wire with its two ends' shared progress `pace`: the reader reports every chunk it
    /// reads and wakes a writer waiting for a pipe to drain ([`Pace`]).
    pub fn paced(self, pace: Pace<'a>) -> Striped<'a> {
        Striped {
            pace: Some(pace),
            ..self
        }
    }

    /// This wire for a message whose first chunk has ring index `first`.
    pub fn at_chunk(self, first: u64) -> Striped<'a> {
        Striped { first, ..self }
    }

    /// Bytes of a message each pipe takes in turn.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// The wire's pipes.
    pub fn pipes(&self) -> usize {
        self.pipes.len()
    }

    /// The longest message a writer queues without waiting when the pipes are drained.
    pub fn window(&self) -> usize {
        self.pipes.len() * self.chunk
    }

    /// The chunks, and so the ring positions, a message of `len` bytes takes.
    pub fn chunks(&self, len: usize) -> u64 {
        len.div_ceil(self.chunk) as u64
    }

    /// The pipe of this message's chunk `i` (from its first, round the ring).
    pub fn pipe_at(&self, i: u64) -> BorrowedFd<'a> {
        self.pipes[self.pipe(self.first + i)].as_fd()
    }

    /// The pipe of ring position `i`.
    fn pipe(&self, i: u64) -> usize {
        (i % self.pipes.len() as u64) as usize
    }

    /// The pipe a message's byte at `pos` travels in, and how many bytes from `pos` on travel
    /// in the same chunk.
    fn at(&self, pos: usize) -> (usize, BorrowedFd<'a>, usize) {
        let k = self.pipe(self.first + (pos / self.chunk) as u64);
        (k, self.pipes[k].as_fd(), self.chunk - pos % self.chunk)
    }

    /// Whether the pipes of a message of `len` bytes from this wire's first chunk are all
    /// drained now, so that it is queued without waiting (never for a message longer than
    /// the window).
    pub fn has_room(&self, len: usize) -> Result<bool> {
        Ok(len <= self.window() && self.first_undrained(len)?.is_none())
    }

    /// The bytes the pipes of this message's chunks, of `len` bytes, hold now (the whole
    /// message once it has all been queued, where it fits the window: each pipe then holds
    /// one chunk of it at most).
    pub fn queued_bytes(&self, len: usize) -> Result<usize> {
        let mut q = 0;
        for i in 0..self.chunks(len).min(self.pipes.len() as u64) {
            q += queued(self.pipe_at(i))?;
        }
        Ok(q)
    }

    /// The pipe of the first chunk of this message, of `len` bytes, that is not drained yet
    /// (`None`: all are; for a message longer than the window, those of its first round).
    pub fn first_undrained(&self, len: usize) -> Result<Option<usize>> {
        for i in 0..self.chunks(len).min(self.pipes.len() as u64) {
            let k = self.pipe(self.first + i);
            if queued(self.pipes[k].as_fd())? != 0 {
                return Ok(Some(k));
            }
        }
        Ok(None)
    }

    /// The writer: wait up to `max` for pipe `k` to drain, asleep until its reader reports a
    /// read ([`Pace`]; without one, on the pipe). Fails with `EPIPE` when the reader is gone.
    pub fn wait_drained(&self, k: usize, max: std::time::Duration) -> Result<Room> {
        let fd = self.pipes[k].as_fd();
        if queued(fd)? == 0 {
            return Ok(Room::Drained);
        }
        let mut p = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::OUT,
        )];
        let _ = rustix::event::poll(&mut p, Some(&rustix::time::Timespec::default()));
        if p[0]
            .revents()
            .intersects(rustix::event::PollFlags::ERR | rustix::event::PollFlags::HUP)
        {
            return Err(VmError::sys("vmsplice", rustix::io::Errno::PIPE.into()));
        }
        let ts = rustix::time::Timespec {
            tv_sec: max.as_secs() as _,
            tv_nsec: max.subsec_nanos() as _,
        };
        let slept = match self.pace {
            Some(pace) => pace.sleep(&ts, || queued(fd).map_or(true, |q| q == 0)),
            None => match rustix::event::poll(&mut p, Some(&ts)) {
                Err(rustix::io::Errno::INTR) => Err(rustix::io::Errno::INTR),
                _ => Ok(()),
            },
        };
        if slept == Err(rustix::io::Errno::INTR) {
            return Ok(Room::Interrupted);
        }
        Ok(if queued(fd)? == 0 {
            Room::Drained
        } else {
            Room::Waiting
        })
    }

    /// Queue a whole message, the concatenation of `bufs`, by page reference ([`vmsplice_all`]
    /// chunk by chunk), each chunk once its pipe has drained (waiting as long as the reader
    /// lives). Returns the bytes queued.
    pub fn vmsplice_message(&self, bufs: &[&[u8]]) -> Result<usize> {
        let mut pos = 0;
        for buf in bufs {
            let mut off = 0;
            while off < buf.len() {
                let (k, fd, room) = self.at(pos);
                let n = room.min(buf.len() - off);
                if room == self.chunk {
                    // A chunk's first bytes: its pipe must be empty.
                    while self.wait_drained(k, PACE_STALL)? != Room::Drained {}
                }
                if let Some(p) = self.pace {
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
/// each pipe and the bytes the reader has read from it, and the futex on which a writer
/// waiting for a pipe to drain sleeps, woken by the reader after each chunk it reads.
///
/// The counters live in memory both processes write, so they are advice, never trusted: what
/// a pipe holds is asked of the kernel (`FIONREAD`), and a reader that lies or stops reporting
/// only lets the writer's sleep run to its end ([`PACE_STALL`]), after which it asks again.
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
        let (q, r) = self.progress();
        f.debug_struct("Pace")
            .field("queued", &q)
            .field("read", &r)
            .field("sleeps", &self.sleeps())
            .finish()
    }
}

/// How long a writer waiting for a pipe to drain sleeps at most before it asks the kernel
/// again.
pub const PACE_STALL: std::time::Duration = std::time::Duration::from_millis(2);

impl<'a> Pace<'a> {
    /// Bytes of shared memory the [`Pace`] of a wire of `pipes` pipes takes (a multiple of 64).
    pub fn footprint(pipes: usize) -> usize {
        (2 * pipes * 8 + 16).div_ceil(64) * 64
    }

    /// The progress block of a wire of `pipes` pipes at `offset` (8-aligned,
    /// [`Pace::footprint`] bytes) of `arena`, zero when the arena is new.
    pub fn new(arena: &'a SharedArena, offset: usize, pipes: usize) -> Pace<'a> {
        let words = 2 * pipes * 8;
        Pace {
            words: arena.atomic_u64s(offset, words),
            seq: arena.atomic_u32(offset + words),
            waiting: arena.atomic_u32(offset + words + 4),
            sleeps: arena.atomic_u64(offset + words + 8),
        }
    }

    fn pipes(&self) -> usize {
        self.words.len() / 2
    }

    /// How many times the writer has slept waiting for a pipe to drain, so far.
    pub fn sleeps(&self) -> u64 {
        self.sleeps.load(Ordering::Relaxed)
    }

    /// Per pipe, the bytes queued and the bytes read so far, as the counters say.
    pub fn progress(&self) -> (Vec<u64>, Vec<u64>) {
        let n = self.pipes();
        (
            self.words[..n]
                .iter()
                .map(|w| w.load(Ordering::SeqCst))
                .collect(),
            self.words[n..]
                .iter()
                .map(|w| w.load(Ordering::SeqCst))
                .collect(),
        )
    }

    /// The writer: sleep up to `max` unless `ready` says so after the sleep is announced (a
    /// read that ended in between either shows there or sees the flag and wakes us). `EINTR`
    /// when a signal ended the sleep.
    fn sleep(
        &self,
        max: &rustix::time::Timespec,
        ready: impl Fn() -> bool,
    ) -> std::result::Result<(), rustix::io::Errno> {
        let seq = self.seq.load(Ordering::SeqCst);
        self.waiting.store(1, Ordering::SeqCst);
        if ready() {
            self.waiting.store(0, Ordering::SeqCst);
            return Ok(());
        }
        self.sleeps.fetch_add(1, Ordering::Relaxed);
        let r = rustix::thread::futex::wait(
            self.seq,
            rustix::thread::futex::Flags::empty(),
            seq,
            Some(max),
        );
        self.waiting.store(0, Ordering::SeqCst);
        match r {
            Err(rustix::io::Errno::INTR) => Err(rustix::io::Errno::INTR),
            _ => Ok(()),
        }
    }

    /// The writer queued `n` bytes in pipe `k`.
    fn queued(&self, k: usize, n: usize) {
        self.words[k].fetch_add(n as u64, Ordering::SeqCst);
    }

    /// The reader read `n` bytes from pipe `k`: count them, and wake the writer if it sleeps.
    fn read(&self, k: usize, n: usize) {
        self.words[self.pipes() + k].fetch_add(n as u64, Ordering::SeqCst);
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

    /// `n` pipes of `pages` pages each: the write ends, the read ends, the capacity.
    fn pipes(n: usize, pages: usize) -> (Vec<OwnedFd>, Vec<OwnedFd>, usize) {
        let ps = crate::page_size();
        let (mut tx, mut rx, mut cap) = (Vec::new(), Vec::new(), usize::MAX);
        for _ in 0..n {
            let p = Pipe::new(pages * ps).unwrap();
            cap = cap.min(p.capacity);
            tx.push(p.tx);
            rx.push(p.rx);
        }
        (tx, rx, cap)
    }

    /// A message of `len` bytes, different for each `k`.
    fn message(len: usize, k: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + k * 13) as u8).collect()
    }

    /// Send `lens` through a ring of `n` pipes of 16 pages, the reader pausing `pause` before
    /// each message; each message starts at the ring position after the last one's. Checks
    /// every byte; returns the writer's wire for the caller's checks.
    fn ring_run(n: usize, lens: &[usize], pace: Option<Pace<'_>>, pause: std::time::Duration) {
        let (tx, rx, cap) = pipes(n, 16);
        let (mut wtx, mut wrx) = (Striped::new(&tx, cap), Striped::new(&rx, cap));
        if let Some(p) = pace {
            (wtx, wrx) = (wtx.paced(p), wrx.paced(p));
        }
        let msgs: Vec<Vec<u8>> = lens
            .iter()
            .enumerate()
            .map(|(k, &n)| message(n, k))
            .collect();
        std::thread::scope(|s| {
            let msgs = &msgs;
            s.spawn(move || {
                let mut first = 0;
                for m in msgs {
                    let w = wtx.at_chunk(first);
                    let cut = m.len() / 3;
                    assert_eq!(
                        w.vmsplice_message(&[&m[..cut], &m[cut..]]).unwrap(),
                        m.len()
                    );
                    first += w.chunks(m.len());
                }
            });
            let mut first = 0;
            for m in msgs {
                std::thread::sleep(pause);
                let w = wrx.at_chunk(first);
                let mut r = w.reader();
                let mut got = vec![0u8; m.len()];
                let half = got.len() / 2;
                r.read_exact(&mut got[..half]).unwrap();
                r.read_exact(&mut got[half..]).unwrap();
                assert_eq!(r.position(), m.len());
                assert!(&got == m, "message of {} bytes", m.len());
                first += w.chunks(m.len());
            }
        });
    }

    #[test]
    fn a_ring_of_pipes_delivers_messages_in_order() {
        let ps = crate::page_size();
        // Chunks are 12 pages (16 less the slack): messages that end inside a chunk, on a
        // chunk boundary, and go round the ring more than once, in pieces that cross chunks.
        for n in [1, 2, 3] {
            let lens = [100, 12 * ps, 12 * ps + 1, 70 * ps + 123, 1, 5];
            ring_run(n, &lens, None, std::time::Duration::ZERO);
        }
    }

    #[test]
    fn a_message_within_the_window_is_queued_without_its_reader() {
        let ps = crate::page_size();
        let (tx, rx, cap) = pipes(4, 16);
        let w = Striped::new(&tx, cap);
        assert_eq!(w.window(), 4 * 12 * ps);
        // At a page offset, as an application's heap buffer is: still one chunk to a pipe.
        let m = message(w.window() + 7, 1);
        let body = &m[7..];
        assert!(w.has_room(body.len()).unwrap());
        assert_eq!(w.vmsplice_message(&[body]).unwrap(), body.len());
        // The next message's pipes are taken until the reader drains them.
        let next = w.at_chunk(w.chunks(body.len()));
        assert!(!next.has_room(1).unwrap());
        assert_eq!(
            next.wait_drained(0, std::time::Duration::from_millis(1))
                .unwrap(),
            Room::Waiting
        );
        let mut got = vec![0u8; body.len()];
        Striped::new(&rx, cap)
            .reader()
            .read_exact(&mut got)
            .unwrap();
        assert!(got == body);
        assert!(next.has_room(1).unwrap());
        // A message longer than the window never has room.
        assert!(!w.has_room(w.window() + 1).unwrap());
    }

    #[test]
    fn a_writer_waiting_for_a_pipe_sleeps_and_the_counters_match_the_bytes() {
        let ps = crate::page_size();
        let arena = SharedArena::create("zcio-pace-test", 4 * ps).unwrap();
        let pace = Pace::new(&arena, SharedArena::user_offset(), 2);
        // Messages that fill both pipes several times over, end mid-chunk, and are tiny.
        let lens = [100 * ps + 17, 40 * ps, 1, 33 * ps];
        ring_run(2, &lens, Some(pace), std::time::Duration::from_millis(3));
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
    fn a_reader_that_never_reports_or_lies_only_ends_the_writers_sleep() {
        let ps = crate::page_size();
        let arena = SharedArena::create("zcio-pace-test", 4 * ps).unwrap();
        let off = SharedArena::user_offset();
        let pace = Pace::new(&arena, off, 2);
        for w in arena.atomic_u64s(off, 2 * 2 * 8) {
            w.store(u64::MAX - 3, Ordering::SeqCst);
        }
        // The writer's side reports, the reader's not: every byte still arrives.
        let (tx, rx, cap) = pipes(2, 16);
        let wtx = Striped::new(&tx, cap).paced(pace);
        let m = message(50 * ps, 3);
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(wtx.vmsplice_message(&[&m]).unwrap(), m.len()));
            std::thread::sleep(std::time::Duration::from_millis(5));
            let mut got = vec![0u8; m.len()];
            Striped::new(&rx, cap)
                .reader()
                .read_exact(&mut got)
                .unwrap();
            assert!(got == m);
        });
    }

    #[test]
    fn a_writer_whose_reader_is_gone_fails() {
        let (tx, rx, cap) = pipes(2, 16);
        let w = Striped::new(&tx, cap);
        w.vmsplice_message(&[&message(100, 1)]).unwrap();
        drop(rx);
        let e = w
            .at_chunk(2)
            .vmsplice_message(&[&message(100, 2)])
            .unwrap_err();
        assert!(e.to_string().contains("vmsplice"), "{e}");
        assert!(
            w.wait_drained(0, std::time::Duration::from_millis(1))
                .is_err()
        );
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
