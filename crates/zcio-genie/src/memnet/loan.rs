//! Loans: messages that move between processes without a byte copied, shipped as sealed
//! memory files (paper 003's container shipping, carried by the memory network; in Genie's
//! terms a move: the sender gives its buffer up, the receiver gets pages the system chose).
//!
//! - The sender takes a [`Loan`]: a fresh memory file mapped for it alone, its pages allocated
//!   (in 2 MiB pages from 2 MiB where the kernel gives them). It fills the loan in place, as it
//!   would any buffer.
//! - [`MemnetEndpoint::send_loan`] gives the loan up: the mapping goes, the file is sealed
//!   against every change for good, its descriptor travels on the link's file socket
//!   (`SCM_RIGHTS`), and a descriptor announces it in order with the link's other messages.
//!   The sender's time is the unmapping and the seal, whatever the length; nothing waits for
//!   the receiver.
//! - [`MemnetEndpoint::recv_loan`] maps the file privately: a [`Received`] the receiver may
//!   read and write. A page it writes becomes its own copy; the file, and so what it was
//!   sent, never changes, whatever the sender does (the seal is checked on arrival: a file
//!   its sender could still write is refused).
//!
//! Loans and ordinary messages mix on one link, in order: [`MemnetEndpoint::recv`] (or
//! `recv_alloc`) of a loan copies it out once, and `recv_loan` of an ordinary message
//! receives it into a buffer made for it ([`Received::is_mapped`] says which).

use super::{Descriptor, MemnetEndpoint, Ticket, output::Segment};
use crate::AppBuffer;
use crate::breakdown::{Op, time};
use crate::error::{GenieError, Result};
use crate::path::DataPath;
use crate::semantics::{Accounting, InputBuffering, Semantics};
use std::collections::VecDeque;
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsFd, OwnedFd};
use zcio_vm::huge::Granule;
use zcio_vm::page::HUGE_PAGE_SIZE;
use zcio_vm::sealed::{BlankFile, ExclusiveFile, PrivateView, SealedFile};

const FILE_MAGIC: u64 = 0x7a63_696f_4c4f_414e; // "zcioLOAN"
/// A shipped file's header on the file socket: magic, ticket, length.
const HEADER: usize = 24;
/// How long a receiver waits for a file its descriptor announced: the sender sends the file
/// before it announces it, so it is there at once unless the sender broke the protocol.
const FILE_PATIENCE_MS: u16 = 10;

/// A buffer to fill and send without a copy ([`MemnetEndpoint::send_loan`], or
/// `Channel::send_loan`): a memory file mapped for this process alone until it is sent. Its
/// bytes start zeroed.
///
/// A loan is fresh memory every time (a sealed file is never written again, so its pages are
/// never reused): making one costs the kernel's allocating and zeroing its pages. In 2 MiB
/// pages that is about what writing the bytes once costs; in 4 KiB pages the kernel's work per
/// page costs more than copying them, which is why [`Loan::new`] takes 2 MiB pages from
/// 2 MiB. [`Loan::from_blank`] takes a file made ahead, on another thread.
#[derive(Debug)]
pub struct Loan {
    pages: LoanPages,
    len: usize,
    granule: Granule,
}

#[derive(Debug)]
enum LoanPages {
    File(ExclusiveFile),
    /// Private memory: a loan for a channel that cannot ship files (TCP), sent by copy.
    Owned(AppBuffer),
}

impl Loan {
    /// A loan of `len` bytes: in 2 MiB pages from 2 MiB where the kernel gives them
    /// ([`Loan::granule`] says which it got), else in 4 KiB pages.
    pub fn new(len: usize) -> Result<Loan> {
        let g = if len >= HUGE_PAGE_SIZE {
            Granule::Huge
        } else {
            Granule::Base
        };
        Loan::with_granule(len, g)
    }

    /// A loan of `len` bytes in pages of `granule` ([`Granule::Huge`]: 2 MiB pages where the
    /// kernel gives them, the length rounded up to whole 2 MiB pages behind the scenes).
    pub fn with_granule(len: usize, granule: Granule) -> Result<Loan> {
        MemnetEndpoint::check_len(len)?;
        let blank = match granule {
            Granule::Huge => BlankFile::new_huge("zcio-loan", len)?,
            _ => BlankFile::new("zcio-loan", len)?,
        };
        let granule = blank.granule();
        Ok(Loan {
            pages: LoanPages::File(blank.map()?),
            len,
            granule,
        })
    }

    /// A loan of `len` bytes in a blank memory file made ahead (for example by a pool that
    /// makes them on a thread of its own, `zcio::sequoia::pool::Pool::take`), so that the
    /// kernel's work on fresh pages is off the sender's path. The file must hold `len` bytes.
    pub fn from_blank(blank: BlankFile, len: usize) -> Result<Loan> {
        MemnetEndpoint::check_len(len)?;
        if len > blank.len() {
            return Err(GenieError::arg(
                "len",
                format!(
                    "{len} bytes in a blank file of {}: it must hold them",
                    blank.len()
                ),
            ));
        }
        let granule = blank.granule();
        Ok(Loan {
            pages: LoanPages::File(blank.map()?),
            len,
            granule,
        })
    }

    /// A loan in private memory, for a channel that sends it by copy.
    pub(crate) fn owned(len: usize) -> Result<Loan> {
        MemnetEndpoint::check_len(len)?;
        let buf = AppBuffer::for_message(len)?;
        let granule = buf.granule();
        Ok(Loan {
            pages: LoanPages::Owned(buf),
            len,
            granule,
        })
    }

    /// The pages it is held in.
    pub fn granule(&self) -> Granule {
        self.granule
    }
}

impl Deref for Loan {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.pages {
            LoanPages::File(f) => &f.bytes()[..self.len],
            LoanPages::Owned(b) => &b[..self.len],
        }
    }
}

impl DerefMut for Loan {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.pages {
            LoanPages::File(f) => &mut f.bytes_mut()[..self.len],
            LoanPages::Owned(b) => &mut b[..self.len],
        }
    }
}

/// A message received by [`MemnetEndpoint::recv_loan`]: the receiver's own bytes, to read and
/// write. A loan's pages are the sealed file's, mapped privately (a page written becomes a
/// copy of this process's); an ordinary message's are a buffer made for it. Its memory goes
/// when it is dropped.
#[derive(Debug)]
pub struct Received {
    pages: ReceivedPages,
    len: usize,
}

#[derive(Debug)]
enum ReceivedPages {
    File(PrivateView),
    Owned(AppBuffer),
}

impl Received {
    /// Whether the bytes are a shipped file's pages mapped here (no copy), else a buffer
    /// they were received into.
    pub fn is_mapped(&self) -> bool {
        matches!(self.pages, ReceivedPages::File(_))
    }

    pub(crate) fn owned(buf: AppBuffer) -> Received {
        let len = buf.len();
        Received {
            pages: ReceivedPages::Owned(buf),
            len,
        }
    }
}

impl Deref for Received {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.pages {
            ReceivedPages::File(v) => &v.bytes()[..self.len],
            ReceivedPages::Owned(b) => &b[..self.len],
        }
    }
}

impl DerefMut for Received {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.pages {
            ReceivedPages::File(v) => &mut v.bytes_mut()[..self.len],
            ReceivedPages::Owned(b) => &mut b[..self.len],
        }
    }
}

/// One end's loans: the socket their files travel on, and the files received whose messages
/// are not yet delivered, with their tickets, in order.
#[derive(Debug)]
pub(super) struct LoanEnd {
    sock: OwnedFd,
    files_in: VecDeque<(u64, SealedFile)>,
}

impl LoanEnd {
    pub(super) fn new(sock: OwnedFd) -> LoanEnd {
        LoanEnd {
            sock,
            files_in: VecDeque::new(),
        }
    }
}

fn shipped(out: bool, mapped: bool, len: usize, granule: Option<Granule>) -> Accounting {
    Accounting {
        granule,
        cpu_copied_bytes: 0,
        kernel_copied_bytes: Some(if out || mapped { 0 } else { len as u64 }),
        swapped_bytes: 0,
        path: DataPath::Shipped { out, mapped },
    }
}

/// Read the first `out.len()` bytes of `file` into `out` (a kernel copy).
fn read_file(file: &SealedFile, out: &mut [u8]) -> Result<()> {
    let mut k = 0;
    while k < out.len() {
        match rustix::io::pread(file.fd(), &mut out[k..], k as u64) {
            Ok(0) => {
                return Err(GenieError::Protocol(format!(
                    "a loan's memory file ended at {k} of {} bytes",
                    out.len()
                )));
            }
            Ok(n) => k += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(GenieError::io("pread (a loan's memory file)", e)),
        }
    }
    Ok(())
}

impl MemnetEndpoint {
    /// A loan of `len` bytes to fill and send with [`MemnetEndpoint::send_loan`]
    /// ([`Loan::new`]).
    pub fn loan(&self, len: usize) -> Result<Loan> {
        Loan::new(len)
    }

    /// Send a loan without copying it: its pages go to the receiver, sealed, and the loan is
    /// this process's no more ([`super::loan`]). Returns once the file is sealed and on its
    /// way, with a ticket already complete. A loan in private memory (made for a TCP channel)
    /// is sent by copy.
    ///
    /// Should the peer be gone, the loan is lost with the error: there is nobody to give it to.
    pub fn send_loan(&mut self, loan: Loan) -> Result<(Ticket, Accounting)> {
        GenieError::refuse_broken(&self.broken_out, "output")?;
        self.reap_completions()?;
        let (len, granule) = (loan.len, loan.granule);
        let file = match loan.pages {
            LoanPages::File(f) => f,
            LoanPages::Owned(b) => return self.send(Semantics::Copy, &b[..len]),
        };
        let sealed = time(Op::ReadOnly, || file.seal())?;
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let mut head = [0u8; HEADER];
        for (i, w) in [FILE_MAGIC, ticket, len as u64].iter().enumerate() {
            head[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
        }
        zcio_vm::wire::send_with_fds(self.loans.sock.as_fd(), &head, &[sealed.fd()])
            .map_err(|e| GenieError::from_wire(e, "output (a loan's memory file)"))?;
        let wait = self.waits.start();
        // The file is on its way: a descriptor not published would leave the receiver's next
        // loan paired with this file. Nothing more may follow.
        self.publish_at(
            ticket,
            Segment::whole(len, 0),
            Semantics::Move,
            super::PLACE_FILE,
            wait,
        )
        .inspect_err(|e| self.broken_out = Some(e.to_string()))?;
        self.ring_wake();
        Ok((Ticket(ticket), shipped(true, false, len, Some(granule))))
    }

    /// Receive the next message as bytes of this process's own, to read and write: a loan's
    /// pages mapped without a copy, or an ordinary message received into a buffer made for
    /// it (emulated copy, early demultiplexing). Waits within the endpoint's waits.
    pub fn recv_loan(&mut self) -> Result<(Received, Accounting)> {
        GenieError::refuse_broken(&self.broken_in, "input")?;
        let len = self.peek_len()?;
        if !self.next_is_assembled() && self.held.is_some_and(|d| d.file) {
            let d = self.held.take().expect("held above");
            let (_, file) = self
                .loans
                .files_in
                .pop_front()
                .expect("taken with its descriptor");
            return match time(Op::RegionCreate, || file.view()) {
                Ok(view) => Ok((
                    Received {
                        pages: ReceivedPages::File(view),
                        len,
                    },
                    shipped(false, true, len, None),
                )),
                Err(e) => {
                    // Not mapped: the message is the next one still.
                    self.loans.files_in.push_front((d.ticket, file));
                    self.held = Some(d);
                    Err(e.into())
                }
            };
        }
        let (buf, acc) = self.recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux)?;
        Ok((Received::owned(buf), acc))
    }

    /// The descriptor `d` just taken off the ring announces a loan: take its file off the
    /// file socket, check it, and keep it for the message's delivery. A file that is not
    /// sealed, or shorter than the message, is refused (the message with it; the link stays
    /// in step). A missing or mismatched file puts the link out of step: inputs are refused
    /// from then on.
    pub(super) fn take_file(&mut self, d: &Descriptor) -> Result<()> {
        let out_of_step = |me: &mut Self, why: String| {
            let e = GenieError::Protocol(format!("a loan's memory file: {why}"));
            me.broken_in = Some(e.to_string());
            Err(e)
        };
        let sock = self.loans.sock.as_fd();
        let mut fds = [rustix::event::PollFd::new(
            &sock,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec {
            tv_sec: i64::from(FILE_PATIENCE_MS / 1000),
            tv_nsec: i64::from(FILE_PATIENCE_MS % 1000) * 1_000_000,
        };
        if !matches!(rustix::event::poll(&mut fds, Some(&timeout)), Ok(n) if n > 0) {
            return out_of_step(
                self,
                format!("none came within {FILE_PATIENCE_MS} ms of its announcement"),
            );
        }
        let mut head = [0u8; HEADER];
        let (n, mut got) = match zcio_vm::wire::recv_with_fds(sock, &mut head) {
            Ok(r) => r,
            Err(e) => return Err(GenieError::from_wire(e, "input (a loan's memory file)")),
        };
        if n == 0 && got.is_empty() {
            return Err(GenieError::PeerGone {
                during: "input (a loan's memory file)",
            });
        }
        let w = |i: usize| u64::from_ne_bytes(head[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        if n != HEADER || got.len() != 1 || w(0) != FILE_MAGIC {
            return out_of_step(
                self,
                format!(
                    "{n} header bytes and {} descriptors (magic {:#x}), want {HEADER} and 1 ({FILE_MAGIC:#x})",
                    got.len(),
                    w(0)
                ),
            );
        }
        if w(1) != d.ticket || w(2) != d.len as u64 {
            return out_of_step(
                self,
                format!(
                    "the file says ticket {} of {} bytes, its announcement ticket {} of {}",
                    w(1),
                    w(2),
                    d.ticket,
                    d.len
                ),
            );
        }
        let file = match SealedFile::adopt(got.pop().expect("one")) {
            Ok(f) => f,
            Err((e, _)) => {
                return Err(GenieError::Protocol(format!(
                    "a loan of {} bytes refused: {e}",
                    d.len
                )));
            }
        };
        if file.len() < d.len {
            return Err(GenieError::Protocol(format!(
                "a loan of {} bytes refused: its memory file holds {}",
                d.len,
                file.len()
            )));
        }
        self.loans.files_in.push_back((d.ticket, file));
        Ok(())
    }

    /// The file of loan `d` (its descriptor taken for delivery), copied into `out` (a kernel
    /// copy, no mapping made).
    pub(super) fn file_copy_out(&mut self, d: &Descriptor, out: &mut [u8]) -> Result<Accounting> {
        let (ticket, file) = self
            .loans
            .files_in
            .pop_front()
            .expect("taken with its descriptor");
        debug_assert_eq!(ticket, d.ticket);
        time(Op::Copyout, || read_file(&file, out))?;
        Ok(shipped(false, false, out.len(), None))
    }
}

#[cfg(test)]
mod tests {
    //! A hostile sender's loans: files it can still write, files that never come, files that
    //! do not match their announcement. Each is refused with an error that names it, and the
    //! link then either delivers the next message whole or refuses every later input.

    use super::*;
    use crate::ErrorKind;
    use crate::memnet::{PLACE_FILE, pair};
    use std::os::fd::BorrowedFd;

    /// Announce a loan of `len` bytes as `tx` would, its file `file` (none: not sent) under a
    /// header that says `ticket_delta` more than the announcement's ticket.
    fn forge(tx: &mut MemnetEndpoint, file: Option<BorrowedFd<'_>>, len: usize, ticket_delta: u64) {
        let ticket = tx.next_ticket;
        tx.next_ticket += 1;
        if let Some(fd) = file {
            let mut head = [0u8; HEADER];
            for (i, w) in [FILE_MAGIC, ticket + ticket_delta, len as u64]
                .iter()
                .enumerate()
            {
                head[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
            }
            zcio_vm::wire::send_with_fds(tx.loans.sock.as_fd(), &head, &[fd]).unwrap();
        }
        let wait = tx.waits.start();
        tx.publish_at(
            ticket,
            Segment::whole(len, 0),
            Semantics::Move,
            PLACE_FILE,
            wait,
        )
        .unwrap();
    }

    fn memfd_with(len: usize, byte: u8) -> OwnedFd {
        let fd = zcio_vm::mapping::memfd("zcio-test-forged", len).unwrap();
        rustix::io::pwrite(&fd, &vec![byte; len], 0).unwrap();
        fd
    }

    /// An ordinary message after the refusal arrives whole.
    fn next_arrives(tx: &mut MemnetEndpoint, rx: &mut MemnetEndpoint) {
        let out = vec![0x5au8; 10_000];
        tx.send(Semantics::Copy, &out).unwrap();
        let (m, _) = rx.recv_loan().unwrap();
        assert_eq!(&m[..], &out[..]);
    }

    #[test]
    fn a_file_its_sender_still_maps_for_writing_is_refused_and_the_link_goes_on() {
        let (mut tx, mut rx) = pair().unwrap();
        let fd = memfd_with(8192, 3);
        let _writable = zcio_vm::mapping::Mapping::shared_fd(fd.as_fd(), 0, 8192, None).unwrap();
        forge(&mut tx, Some(fd.as_fd()), 8192, 0);
        let e = rx.recv_loan().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
        assert!(e.to_string().contains("mapped for writing"), "{e}");
        next_arrives(&mut tx, &mut rx);
    }

    #[test]
    fn an_unsealed_file_nobody_maps_is_sealed_on_arrival_and_its_sender_can_write_it_no_more() {
        let (mut tx, mut rx) = pair().unwrap();
        let fd = memfd_with(4096, 9);
        forge(&mut tx, Some(fd.as_fd()), 4096, 0);
        let (m, _) = rx.recv_loan().unwrap();
        assert!(m.iter().all(|&b| b == 9));
        let e = rustix::io::pwrite(&fd, &[1], 0).unwrap_err();
        assert_eq!(
            e,
            rustix::io::Errno::PERM,
            "the seal holds against its sender"
        );
        assert!(m.iter().all(|&b| b == 9));
        next_arrives(&mut tx, &mut rx);
    }

    #[test]
    fn a_file_shorter_than_its_announcement_is_refused_and_the_link_goes_on() {
        let (mut tx, mut rx) = pair().unwrap();
        let fd = memfd_with(4096, 1);
        forge(&mut tx, Some(fd.as_fd()), 4096 * 3, 0);
        let e = rx.recv_loan().unwrap_err();
        assert!(e.to_string().contains("holds 4096"), "{e}");
        next_arrives(&mut tx, &mut rx);
    }

    #[test]
    fn a_loan_announced_without_its_file_or_with_another_refuses_every_later_input() {
        for delta in [None, Some(1)] {
            let (mut tx, mut rx) = pair().unwrap();
            let fd = memfd_with(4096, 1);
            forge(&mut tx, delta.map(|_| fd.as_fd()), 4096, delta.unwrap_or(0));
            let e = rx.recv_loan().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
            tx.send(Semantics::Copy, &[1u8; 100]).unwrap();
            let e = rx.recv_loan().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Refused, "{e}");
        }
    }
}
