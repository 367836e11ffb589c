//! Loans: messages that move between processes without a byte copied, shipped as memory
//! files (paper 003's container shipping, carried by the memory network).
//!
//! - The sender takes a [`Loan`]: a memory file mapped for it, its pages allocated (in 2 MiB
//!   pages from 2 MiB where the kernel gives them). It fills the loan in place, as it would
//!   any buffer.
//! - [`MemnetEndpoint::send_loan`] gives the loan up; its file travels on the link's file
//!   socket (`SCM_RIGHTS`), and a descriptor announces it in order with the link's other
//!   messages. Nothing waits for the receiver.
//! - [`MemnetEndpoint::recv_loan`] maps the file: a [`Received`] the receiver may read and
//!   write.
//!
//! A loan comes in one of two kinds, after fbufs' (paper 001) secured and volatile buffers:
//!
//! - **Sealed** (the default; in Genie's terms a move). The sender's mapping goes, the file is
//!   sealed against every change for good, and the receiver maps it privately: a page it
//!   writes becomes its own copy, and nobody, its sender included, can change what it was
//!   sent (the seal is checked on arrival: a file its sender could still write is refused).
//!   A sealed file is never written again, so every loan is fresh memory, and making it costs
//!   the kernel's allocating and zeroing its pages: about what writing the bytes once costs in
//!   2 MiB pages, more than copying them in 4 KiB pages.
//! - **Volatile**, between ends that both say they trust each other
//!   ([`MemnetEndpoint::set_volatile_loans`]; Genie's weak move with region caching). The
//!   sender's files are reused: a loan is lent, the receiver maps the file shared, in place,
//!   and when it drops the [`Received`] the file goes back to the sender for a later loan.
//!   Both ends keep their mappings from one use to the next, so after a file's first trip a
//!   loan costs no page-table work and no fresh page at either end, in 4 KiB pages as in
//!   2 MiB ones. The promise rests on the protocol, not on the kernel: the sender's
//!   application cannot reach a loan it sent (it gave the [`Loan`] up), and the sender's
//!   library writes a file again only once the receiver gave it back; but the sender's
//!   process could write it meanwhile, which is why both ends must opt in. A volatile loan
//!   that reaches an end that did not opt in is copied out there (once, by the kernel) and
//!   given back at once: its receiver gets correct bytes of its own, at the price of a copy.
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
use std::collections::{HashMap, HashSet, VecDeque};
use std::ops::{Deref, DerefMut};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};
use zcio_vm::huge::Granule;
use zcio_vm::page::HUGE_PAGE_SIZE;
use zcio_vm::sealed::{BlankFile, ExclusiveFile, PrivateView, SealedFile, Unsealed, VolatileFile};

const FILE_MAGIC: u64 = 0x7a63_696f_4c4f_414e; // "zcioLOAN"
/// A record on the file socket: magic, kind, ticket, length, file id.
const RECORD: usize = 40;
/// A sealed loan, its file attached.
const KIND_SEALED: u64 = 1;
/// A volatile loan whose file the peer has not held, its file attached.
const KIND_LENT_NEW: u64 = 2;
/// A volatile loan whose file the peer holds from an earlier trip, no file attached.
const KIND_LENT_AGAIN: u64 = 3;
/// The peer's volatile file, given back (its id).
const KIND_RETURN: u64 = 4;
/// This end's volatile file, which the peer may close: it will not be lent again (its id).
const KIND_FORGET: u64 = 5;
/// How long a receiver waits for a file its descriptor announced: the sender sends the file
/// before it announces it, so it is there at once unless the sender broke the protocol.
const FILE_PATIENCE_MS: u16 = 10;
/// The most volatile files an end keeps for its loans (lent, given back, or being filled).
/// Beyond them a loan is sealed. A receiver refuses a peer that keeps more than twice as many.
pub const LENT_FILES: usize = 256;
/// The most bytes of volatile files given back and waiting for reuse an end keeps.
const FREE_BYTES: usize = 1 << 30;

/// A buffer to fill and send without a copy ([`MemnetEndpoint::send_loan`], or
/// `Channel::send_loan`): a memory file mapped for this process until it is sent.
///
/// A sealed loan is fresh memory every time, its bytes zeroed. A volatile loan
/// ([`MemnetEndpoint::set_volatile_loans`]) may be a file lent before: its bytes are then
/// those of its last trip, the receiver's writes included, so write every byte you send.
/// [`Loan::new`] and [`Loan::with_granule`] make sealed ones; [`Loan::from_blank`] takes a
/// file made ahead, on another thread.
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
    /// A volatile file of an endpoint's.
    Lent(LentOut),
    /// A loan sent under emulated copy ([`MemnetEndpoint::send_loan_copy`]) or kept without a
    /// send ([`Loan::keep`]): its file sealed and gone, its pages mapped privately here, the
    /// sender's own memory.
    Kept(PrivateView),
    /// Only for the moment `Loan::seal_keeping` holds the file (never seen outside it).
    Taken,
}

/// A volatile file taken for a loan: from its endpoint's `home`, under `id`; `fresh` if the
/// peer has not held it. Dropped unsent, it goes back to its home.
#[derive(Debug)]
struct LentOut {
    file: Option<VolatileFile>,
    id: u64,
    granule: Granule,
    fresh: bool,
    home: Arc<LentHome>,
}

impl Drop for LentOut {
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            let mut st = self.home.state();
            if self.fresh {
                st.made -= 1;
            } else {
                st.free.push_back(Free {
                    id: self.id,
                    file,
                    granule: self.granule,
                });
            }
        }
    }
}

impl Loan {
    /// A sealed loan of `len` bytes: in 2 MiB pages from 2 MiB where the kernel gives them
    /// ([`Loan::granule`] says which it got), else in 4 KiB pages.
    pub fn new(len: usize) -> Result<Loan> {
        Loan::with_granule(len, granule_for(len))
    }

    /// A sealed loan of `len` bytes in pages of `granule` ([`Granule::Huge`]: 2 MiB pages
    /// where the kernel gives them, the length rounded up to whole 2 MiB pages behind the
    /// scenes).
    pub fn with_granule(len: usize, granule: Granule) -> Result<Loan> {
        MemnetEndpoint::check_len(len)?;
        let blank = blank(len, granule)?;
        let granule = blank.granule();
        Ok(Loan {
            pages: LoanPages::File(blank.map()?),
            len,
            granule,
        })
    }

    /// A sealed loan of `len` bytes in a blank memory file made ahead (for example by a pool
    /// that makes them on a thread of its own, `zcio::sequoia::pool::Pool::take`), so that
    /// the kernel's work on fresh pages is off the sender's path. The file must hold `len`
    /// bytes.
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

    /// Whether it is volatile: a file reused from loan to loan, lent to the receiver
    /// ([`MemnetEndpoint::set_volatile_loans`]), not sealed.
    pub fn is_volatile(&self) -> bool {
        matches!(self.pages, LoanPages::Lent(_))
    }

    /// Whether it was sent under emulated copy and kept ([`MemnetEndpoint::send_loan_copy`]),
    /// or kept without a send ([`Loan::keep`]): its bytes are then this process's private
    /// memory, and a later send copies them.
    pub fn is_kept(&self) -> bool {
        matches!(self.pages, LoanPages::Kept(_))
    }

    /// Make the loan this process's private memory now, as a send under emulated copy leaves
    /// it, without sending it ([`Loan::is_kept`] from then on): its mapping becomes a private
    /// one of the same file at the same addresses (pointers into the loan stay good and read
    /// the same bytes), the file is sealed, and its descriptor is closed. Nothing is copied
    /// now; each page written afterwards becomes a copy of the writer's, made by the kernel at
    /// the write's fault.
    ///
    /// This is what a loan needs before the process forks. Unsent, a loan is a memory file
    /// mapped shared, and a child made by fork inherits that shared mapping: the two processes
    /// would write each other's bytes. Kept, the child inherits a private mapping of a file
    /// nobody can change: each process's writes are its own, and both read the bytes of the
    /// moment of the fork until they write. The price is the first send's: a kept loan is sent
    /// by copying it once into a fresh sealed file ([`MemnetEndpoint::send_loan_copy`]), where
    /// an unsent one would have been shipped without a copy.
    ///
    /// A loan already kept, or in private memory (for a channel that sends by copy), is left
    /// as it is: it is private already. A volatile loan
    /// ([`MemnetEndpoint::set_volatile_loans`]) is left as it is too: its file is the
    /// endpoint's, shared by design with a peer trusted like this process (and so with a child
    /// made by fork as well), and goes back to the endpoint when the loan is dropped; making it
    /// private would take a copy of the whole loan at another address.
    ///
    /// On an error nothing is lost: if the private mapping could not be made, the loan is as
    /// it was (shared, unsent, usable) and the error says what the kernel refused; if the
    /// kernel refused the seal, the loan is kept all the same (private, its bytes there, its
    /// descriptor closed), and the error says so: the file is unsealed, so a process that
    /// still maps it shared (a child made by an earlier fork, say) could change the pages this
    /// process has not written.
    pub fn keep(&mut self) -> Result<()> {
        if !matches!(self.pages, LoanPages::File(_)) {
            return Ok(());
        }
        self.seal_keeping().map(drop)
    }

    /// Make a loan of a file `Kept`: its mapping private, its file sealed (and
    /// returned). On failure the loan is usable still: as it was (the private mapping could
    /// not be made) or kept (the seal was refused; its file is then gone). A loan of another
    /// kind is refused.
    fn seal_keeping(&mut self) -> Result<SealedFile> {
        let f = match std::mem::replace(&mut self.pages, LoanPages::Taken) {
            LoanPages::File(f) => f,
            other => {
                self.pages = other;
                return Err(GenieError::arg("loan", "a loan that is not an unsent file"));
            }
        };
        match f.seal_keeping() {
            Ok((sealed, view)) => {
                self.pages = LoanPages::Kept(view);
                Ok(sealed)
            }
            Err((e, Unsealed::File(f))) => {
                self.pages = LoanPages::File(f);
                Err(e.into())
            }
            Err((e, Unsealed::View(v))) => {
                self.pages = LoanPages::Kept(v);
                Err(e.into())
            }
        }
    }
}

/// The granule [`Loan::new`] takes for `len` bytes.
fn granule_for(len: usize) -> Granule {
    if len >= HUGE_PAGE_SIZE {
        Granule::Huge
    } else {
        Granule::Base
    }
}

fn blank(len: usize, granule: Granule) -> Result<BlankFile> {
    Ok(match granule {
        Granule::Huge => BlankFile::new_huge("zcio-loan", len)?,
        _ => BlankFile::new("zcio-loan", len)?,
    })
}

impl Deref for Loan {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.pages {
            LoanPages::File(f) => &f.bytes()[..self.len],
            LoanPages::Owned(b) => &b[..self.len],
            LoanPages::Lent(l) => lent_bytes(l.file.as_ref(), self.len),
            LoanPages::Kept(v) => &v.bytes()[..self.len],
            LoanPages::Taken => &[],
        }
    }
}

impl DerefMut for Loan {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.pages {
            LoanPages::File(f) => &mut f.bytes_mut()[..self.len],
            LoanPages::Owned(b) => &mut b[..self.len],
            LoanPages::Lent(l) => lent_bytes_mut(l.file.as_mut(), self.len),
            LoanPages::Kept(v) => &mut v.bytes_mut()[..self.len],
            LoanPages::Taken => &mut [],
        }
    }
}

/// The first `len` bytes of a volatile file, mapped wherever one is handed out (so never
/// empty in practice: an unmapped one gives no bytes rather than a panic).
fn lent_bytes(f: Option<&VolatileFile>, len: usize) -> &[u8] {
    f.and_then(|f| f.trusted_bytes())
        .map_or(&[][..], |b| &b[..len])
}

fn lent_bytes_mut(f: Option<&mut VolatileFile>, len: usize) -> &mut [u8] {
    match f.and_then(|f| f.trusted_bytes_mut()) {
        Some(b) => &mut b[..len],
        None => &mut [],
    }
}

/// A message received by [`MemnetEndpoint::recv_loan`]: the receiver's own bytes, to read and
/// write, until it is dropped. A sealed loan's pages are its file's, mapped privately (a page
/// written becomes a copy of this process's); a volatile loan's are its file's, mapped shared
/// and given back to the sender when this is dropped (writes stay in the file: the sender's
/// next loan of it starts with them); an ordinary message's are a buffer made for it.
#[derive(Debug)]
pub struct Received {
    pages: ReceivedPages,
    /// Where the message starts in its pages (a sealed file may carry it at an offset).
    at: usize,
    len: usize,
}

#[derive(Debug)]
enum ReceivedPages {
    File(PrivateView),
    Owned(AppBuffer),
    Lent(LentIn),
}

/// A peer's volatile file held by the application: given back to `home` when dropped.
#[derive(Debug)]
struct LentIn {
    file: Option<VolatileFile>,
    id: u64,
    home: Arc<LentHome>,
}

impl Drop for LentIn {
    fn drop(&mut self) {
        if let Some(f) = self.file.take() {
            self.home.give_back(self.id, f);
        }
    }
}

impl Received {
    /// Whether the bytes are a shipped file's pages mapped here (no copy), else a buffer
    /// they were received into.
    pub fn is_mapped(&self) -> bool {
        !matches!(self.pages, ReceivedPages::Owned(_))
    }

    /// Whether the bytes are a volatile loan's, shared with its sender's file until this is
    /// dropped ([`MemnetEndpoint::set_volatile_loans`]).
    pub fn is_volatile(&self) -> bool {
        matches!(self.pages, ReceivedPages::Lent(_))
    }

    pub(crate) fn owned(buf: AppBuffer) -> Received {
        let len = buf.len();
        Received {
            pages: ReceivedPages::Owned(buf),
            at: 0,
            len,
        }
    }
}

impl Deref for Received {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.pages {
            ReceivedPages::File(v) => &v.bytes()[self.at..self.at + self.len],
            ReceivedPages::Owned(b) => &b[..self.len],
            ReceivedPages::Lent(l) => lent_bytes(l.file.as_ref(), self.len),
        }
    }
}

impl DerefMut for Received {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.pages {
            ReceivedPages::File(v) => &mut v.bytes_mut()[self.at..self.at + self.len],
            ReceivedPages::Owned(b) => &mut b[..self.len],
            ReceivedPages::Lent(l) => lent_bytes_mut(l.file.as_mut(), self.len),
        }
    }
}

/// A record read off the file socket.
#[derive(Debug)]
struct Record {
    kind: u64,
    ticket: u64,
    len: usize,
    id: u64,
    fd: Option<OwnedFd>,
}

/// What an end shares with the loans and messages it handed out: the file socket (a
/// [`Received`] dropped anywhere gives its file back on it) and the volatile files at rest.
#[derive(Debug)]
struct LentHome {
    sock: OwnedFd,
    state: Mutex<LentState>,
}

/// This end's volatile file, given back and waiting for reuse.
#[derive(Debug)]
struct Free {
    id: u64,
    file: VolatileFile,
    granule: Granule,
}

#[derive(Debug, Default)]
struct LentState {
    /// As a sender: this end's volatile files given back (or loans of them dropped unsent),
    /// oldest first, mapped.
    free: VecDeque<Free>,
    /// As a sender: this end's volatile files (lent, free, or in a loan being filled).
    made: usize,
    /// As a receiver: the peer's volatile files the application gave back, by id, mapped or
    /// not, until the peer lends them again.
    idle: HashMap<u64, VolatileFile>,
    /// As a receiver: the peer's files it forgot while the application held them.
    forgotten: HashSet<u64>,
    /// Give-backs the socket could not take at once, sent at the end's next use.
    unsent: Vec<u64>,
}

fn record_bytes(kind: u64, ticket: u64, len: usize, id: u64) -> [u8; RECORD] {
    let mut b = [0u8; RECORD];
    for (i, w) in [FILE_MAGIC, kind, ticket, len as u64, id]
        .iter()
        .enumerate()
    {
        b[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
    }
    b
}

impl LentHome {
    fn state(&self) -> MutexGuard<'_, LentState> {
        // Nothing done under the lock panics; a poisoned lock still holds consistent state.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tell the peer, without waiting, that its file `id` is free again; false if the socket
    /// could not take it now.
    fn send_return(&self, id: u64) -> bool {
        let r = record_bytes(KIND_RETURN, 0, 0, id);
        match zcio_vm::wire::send_with_fds_now(self.sock.as_fd(), &r, &[]) {
            Ok(()) => true,
            // The peer is gone: nobody to give it to, nothing to keep.
            Err(e) => GenieError::from_wire(e, "").kind() == crate::ErrorKind::PeerGone,
        }
    }

    /// The application is done with the peer's file `id`: keep it (mapped) for the peer's
    /// next loan of it, and tell the peer.
    fn give_back(&self, id: u64, file: VolatileFile) {
        let mut st = self.state();
        if st.forgotten.remove(&id) {
            return;
        }
        st.idle.insert(id, file);
        st.unsent.push(id);
        self.flush(&mut st);
    }

    fn flush(&self, st: &mut LentState) {
        while let Some(&id) = st.unsent.first() {
            if !self.send_return(id) {
                break;
            }
            st.unsent.remove(0);
        }
    }
}

/// The file of a loan taken off the file socket, waiting for its message's delivery.
#[derive(Debug)]
enum InFile {
    /// A sealed file, the message at this offset in it.
    Sealed(SealedFile, usize),
    /// A peer's volatile file, by id.
    Lent(u64, VolatileFile),
}

impl InFile {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            InFile::Sealed(f, _) => f.fd(),
            InFile::Lent(_, f) => f.fd(),
        }
    }
}

/// One end's loans: the file socket and what it shares ([`LentHome`]), the loan records read
/// ahead of their descriptors, the files received whose messages are not yet delivered (with
/// their tickets, in order), and the volatile files lent and the peer's held.
#[derive(Debug)]
pub(super) struct LoanEnd {
    home: Arc<LentHome>,
    ahead: VecDeque<Record>,
    files_in: VecDeque<(u64, InFile)>,
    /// Whether this end trusts its peer with volatile loans.
    volatile: bool,
    next_id: u64,
    /// This end's volatile files lent and not given back, by id (mapped: region caching).
    out: HashMap<u64, (VolatileFile, Granule)>,
    /// The peer's volatile files this end holds (idle, with the application, or waiting for
    /// delivery), by id.
    known: HashSet<u64>,
}

impl LoanEnd {
    pub(super) fn new(sock: OwnedFd) -> LoanEnd {
        LoanEnd {
            home: Arc::new(LentHome {
                sock,
                state: Mutex::new(LentState::default()),
            }),
            ahead: VecDeque::new(),
            files_in: VecDeque::new(),
            volatile: false,
            next_id: 1,
            out: HashMap::new(),
            known: HashSet::new(),
        }
    }

    fn sock(&self) -> BorrowedFd<'_> {
        self.home.sock.as_fd()
    }

    fn send_record(&self, rec: &[u8; RECORD], fd: Option<BorrowedFd<'_>>) -> Result<()> {
        let fds: Vec<BorrowedFd<'_>> = fd.into_iter().collect();
        zcio_vm::wire::send_with_fds(self.sock(), rec, &fds)
            .map_err(|e| GenieError::from_wire(e, "output (a loan's memory file)"))
    }

    /// Read one record, waiting up to `patience_ms` for it (0: not at all); `None` if none
    /// came. A record that breaks the protocol is an error naming it.
    fn read_record(&self, patience_ms: u16) -> Result<Option<Record>> {
        let sock = self.sock();
        let mut fds = [rustix::event::PollFd::new(
            &sock,
            rustix::event::PollFlags::IN,
        )];
        let timeout = rustix::event::Timespec {
            tv_sec: i64::from(patience_ms / 1000),
            tv_nsec: i64::from(patience_ms % 1000) * 1_000_000,
        };
        if !matches!(rustix::event::poll(&mut fds, Some(&timeout)), Ok(n) if n > 0) {
            return Ok(None);
        }
        let mut b = [0u8; RECORD];
        let (n, mut got) = zcio_vm::wire::recv_with_fds(sock, &mut b)
            .map_err(|e| GenieError::from_wire(e, "input (a loan's memory file)"))?;
        if n == 0 && got.is_empty() {
            return Err(GenieError::PeerGone {
                during: "input (a loan's memory file)",
            });
        }
        let w = |i: usize| u64::from_ne_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let kind = w(1);
        let wants_fd = matches!(kind, KIND_SEALED | KIND_LENT_NEW);
        if n != RECORD
            || w(0) != FILE_MAGIC
            || !(KIND_SEALED..=KIND_FORGET).contains(&kind)
            || got.len() != usize::from(wants_fd)
        {
            return Err(GenieError::Protocol(format!(
                "a loan's memory file: a record of {n} bytes, kind {kind}, with {} descriptors \
                 (magic {:#x}); want {RECORD} bytes, kind {KIND_SEALED} to {KIND_FORGET}, one \
                 descriptor with kinds {KIND_SEALED} and {KIND_LENT_NEW} ({FILE_MAGIC:#x})",
                got.len(),
                w(0)
            )));
        }
        Ok(Some(Record {
            kind,
            ticket: w(2),
            len: usize::try_from(w(3)).unwrap_or(usize::MAX),
            id: w(4),
            fd: got.pop(),
        }))
    }

    /// Act on a record that announces no message: a file of this end's given back, or one of
    /// the peer's it will not lend again. Loans are kept, in order, for their descriptors.
    fn dispatch(&mut self, r: Record) {
        match r.kind {
            KIND_RETURN => {
                if let Some((file, granule)) = self.out.remove(&r.id) {
                    self.home.state().free.push_back(Free {
                        id: r.id,
                        file,
                        granule,
                    });
                }
            }
            KIND_FORGET => {
                if self.known.remove(&r.id) {
                    let mut st = self.home.state();
                    if st.idle.remove(&r.id).is_none() {
                        st.forgotten.insert(r.id);
                    }
                }
            }
            _ => self.ahead.push_back(r),
        }
    }

    /// Take in, without waiting, what the peer sent on the file socket: files given back,
    /// files forgotten, loans ahead of their descriptors; and send the give-backs held up.
    fn take_in(&mut self) -> Result<()> {
        {
            let mut st = self.home.state();
            self.home.flush(&mut st);
        }
        while let Some(r) = self.read_record(0)? {
            self.dispatch(r);
        }
        Ok(())
    }

    /// A volatile loan of `len` bytes: a file given back that fits, or a new one while this
    /// end keeps fewer than [`LENT_FILES`]; `None` when every one is lent (a sealed loan
    /// then).
    fn lend(&mut self, len: usize, granule: Granule) -> Result<Option<Loan>> {
        let fits = |f: &Free| {
            f.file.len() >= len
                && f.file.len() <= len.saturating_mul(4).saturating_add(HUGE_PAGE_SIZE)
                && (f.granule == granule || granule == Granule::Base)
        };
        let mut forget = Vec::new();
        let taken = {
            let mut st = self.home.state();
            let best = (0..st.free.len())
                .filter(|&i| fits(&st.free[i]))
                .min_by_key(|&i| st.free[i].file.len());
            let taken = best.and_then(|i| st.free.remove(i));
            // Keep at most FREE_BYTES at rest, and room for a new file where none fits.
            let mut rest: usize = st.free.iter().map(|f| f.file.len()).sum();
            while let Some(old) = st.free.front() {
                let room = taken.is_some() || st.made < LENT_FILES;
                if rest <= FREE_BYTES && room {
                    break;
                }
                rest -= old.file.len();
                let old = st.free.pop_front().expect("looked at above");
                st.made -= 1;
                forget.push(old.id);
            }
            taken
        };
        for id in forget {
            self.send_record(&record_bytes(KIND_FORGET, 0, 0, id), None)?;
        }
        let (id, file, granule, fresh) = match taken {
            Some(f) => (f.id, f.file, f.granule, false),
            None => {
                if self.home.state().made >= LENT_FILES {
                    return Ok(None);
                }
                let b = blank(len, granule)?;
                let granule = b.granule();
                let mut file = b.into_volatile()?;
                file.map()?;
                self.home.state().made += 1;
                self.next_id += 1;
                (self.next_id - 1, file, granule, true)
            }
        };
        Ok(Some(Loan {
            pages: LoanPages::Lent(LentOut {
                file: Some(file),
                id,
                granule,
                fresh,
                home: self.home.clone(),
            }),
            len,
            granule,
        }))
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

fn lent(out: bool, mapped: bool, len: usize, granule: Option<Granule>) -> Accounting {
    Accounting {
        path: DataPath::Lent { out, mapped },
        ..shipped(out, mapped, len, granule)
    }
}

/// Read the first `out.len()` bytes of the file `fd` into `out` (a kernel copy).
fn read_file(fd: BorrowedFd<'_>, out: &mut [u8]) -> Result<()> {
    read_file_at(fd, 0, out)
}

/// Read `out.len()` bytes of the file `fd` from offset `at` into `out` (a kernel copy).
fn read_file_at(fd: BorrowedFd<'_>, at: usize, out: &mut [u8]) -> Result<()> {
    let mut k = 0;
    while k < out.len() {
        match rustix::io::pread(fd, &mut out[k..], (at + k) as u64) {
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
    /// A loan of `len` bytes to fill and send with [`MemnetEndpoint::send_loan`]: sealed
    /// ([`Loan::new`]), or volatile where this end said so
    /// ([`MemnetEndpoint::set_volatile_loans`]) and one of its volatile files is free or can
    /// be made.
    pub fn loan(&mut self, len: usize) -> Result<Loan> {
        self.loan_with_granule(len, granule_for(len))
    }

    /// [`MemnetEndpoint::loan`] in pages of `granule` ([`Loan::with_granule`]).
    pub fn loan_with_granule(&mut self, len: usize, granule: Granule) -> Result<Loan> {
        MemnetEndpoint::check_len(len)?;
        if self.loans.volatile {
            match self.loans.take_in() {
                // A peer gone or out of step on the file socket concerns the next send or
                // input, which say so; the loan itself is this process's memory.
                Ok(()) | Err(GenieError::PeerGone { .. }) => {}
                Err(e @ GenieError::Protocol(_)) => self.broken_in = Some(e.to_string()),
                Err(e) => return Err(e),
            }
            if let Some(l) = self.loans.lend(len, granule)? {
                return Ok(l);
            }
        }
        Loan::with_granule(len, granule)
    }

    /// Trust the peer with volatile loans, or stop ([`super::loan`]): this end's loans are
    /// then files reused from loan to loan, lent to the receiver and given back when it drops
    /// them, and the peer's volatile loans are mapped here in place (else copied out). Both
    /// ends must say so for a loan to pass without a copy and without fresh pages. Neither
    /// end's kernel stops the other from writing a file lent: a peer that breaks the trust
    /// makes bytes change under the holder, so say so only for a peer you trust as you trust
    /// your own process (one of the same user could attach a debugger to it anyway).
    pub fn set_volatile_loans(&mut self, yes: bool) {
        self.loans.volatile = yes;
    }

    /// Send a loan without copying it: its pages go to the receiver, and the loan is this
    /// process's no more ([`super::loan`]). Returns once the file is on its way (a sealed one
    /// sealed first), with a ticket already complete. A loan in private memory (made for a
    /// TCP channel) is sent by copy.
    ///
    /// Should the peer be gone, the loan is lost with the error: there is nobody to give it to.
    pub fn send_loan(&mut self, loan: Loan) -> Result<(Ticket, Accounting)> {
        GenieError::refuse_broken(&self.broken_out, "output")?;
        self.reap_completions()?;
        let (len, granule) = (loan.len, loan.granule);
        let ticket = self.next_ticket;
        let acc = match loan.pages {
            LoanPages::File(f) => {
                let sealed = time(Op::ReadOnly, || f.seal())?;
                self.loans.send_record(
                    &record_bytes(KIND_SEALED, ticket, len, 0),
                    Some(sealed.fd()),
                )?;
                shipped(true, false, len, Some(granule))
            }
            LoanPages::Owned(b) => return self.send(Semantics::Copy, &b[..len]),
            LoanPages::Kept(v) => return self.send_copied(&v.bytes()[..len]),
            LoanPages::Taken => {
                return Err(GenieError::arg("loan", "a loan whose file is on its way"));
            }
            LoanPages::Lent(mut l) => {
                let file = l.file.take().expect("a loan's file is taken only here");
                let (id, fresh) = if Arc::ptr_eq(&l.home, &self.loans.home) {
                    (l.id, l.fresh)
                } else {
                    // Another endpoint's file: this one's from now on. That endpoint's peer
                    // may close it.
                    if !l.fresh {
                        let forget = record_bytes(KIND_FORGET, 0, 0, l.id);
                        let _ = zcio_vm::wire::send_with_fds(l.home.sock.as_fd(), &forget, &[]);
                    }
                    l.home.state().made -= 1;
                    self.loans.home.state().made += 1;
                    self.loans.next_id += 1;
                    (self.loans.next_id - 1, true)
                };
                let (kind, fd) = if fresh {
                    (KIND_LENT_NEW, Some(file.fd()))
                } else {
                    (KIND_LENT_AGAIN, None)
                };
                let sent = self
                    .loans
                    .send_record(&record_bytes(kind, ticket, len, id), fd);
                if let Err(e) = sent {
                    self.loans.home.state().made -= 1;
                    return Err(e);
                }
                self.loans.out.insert(id, (file, granule));
                lent(true, false, len, Some(granule))
            }
        };
        self.next_ticket += 1;
        let wait = self.waits.start();
        // The file is on its way: a descriptor not published would leave the receiver's next
        // loan paired with this file. Nothing more may follow.
        let sem = if acc.path
            == (DataPath::Shipped {
                out: true,
                mapped: false,
            }) {
            Semantics::Move
        } else {
            Semantics::WeakMove
        };
        self.publish_at(ticket, Segment::whole(len, 0), sem, super::PLACE_FILE, wait)
            .inspect_err(|e| self.broken_out = Some(e.to_string()))?;
        self.ring_wake();
        Ok((Ticket(ticket), acc))
    }

    /// Send the bytes `range` of a loan under emulated copy, and keep the loan: the receiver
    /// gets the bytes of this moment, and the sender goes on reading and writing the loan.
    ///
    /// The first time, no byte is copied: the loan's file is sealed and shipped as by
    /// [`MemnetEndpoint::send_loan`] (the receiver maps it privately; nobody can change it
    /// any more), and the sender's mapping becomes a private one of the same file at the
    /// same addresses ([`zcio_vm::sealed::ExclusiveFile::seal_keeping`]): each page the
    /// sender writes afterwards becomes its own copy at the write's fault, made by the
    /// kernel (Genie's TCOW, [`DataPath::Kept`]). The call costs replacing one mapping and
    /// passing one descriptor, whatever the length. From then on the loan is the sender's
    /// private memory ([`Loan::is_kept`]), and a later send of it copies the bytes once into
    /// a fresh sealed file. A volatile loan is copied too (its file is the endpoint's).
    ///
    /// On an error the loan keeps its bytes, and the message was not sent.
    pub fn send_loan_copy(
        &mut self,
        loan: &mut Loan,
        range: std::ops::Range<usize>,
    ) -> Result<(Ticket, Accounting)> {
        if range.start > range.end || range.end > loan.len {
            return Err(GenieError::arg(
                "range",
                format!(
                    "bytes {}..{} of a loan of {} bytes",
                    range.start, range.end, loan.len
                ),
            ));
        }
        MemnetEndpoint::check_len(range.len())?;
        GenieError::refuse_broken(&self.broken_out, "output")?;
        self.reap_completions()?;
        if !matches!(loan.pages, LoanPages::File(_)) {
            return self.send_copied(&loan[range]);
        }
        let sealed = time(Op::ReadOnly, || loan.seal_keeping())?;
        let (ticket, len) = (self.next_ticket, range.len());
        self.loans.send_record(
            &record_bytes(KIND_SEALED, ticket, len, range.start as u64),
            Some(sealed.fd()),
        )?;
        self.next_ticket += 1;
        let wait = self.waits.start();
        // The file is on its way: a descriptor not published would leave the receiver's next
        // loan paired with this file. Nothing more may follow.
        self.publish_at(
            ticket,
            Segment::whole(len, 0),
            Semantics::EmulatedCopy,
            super::PLACE_FILE,
            wait,
        )
        .inspect_err(|e| self.broken_out = Some(e.to_string()))?;
        self.ring_wake();
        Ok((
            Ticket(ticket),
            Accounting {
                path: DataPath::Kept,
                ..shipped(true, false, len, Some(loan.granule))
            },
        ))
    }

    /// Send `bytes` copied once into a fresh sealed loan (what an emulated copy of memory
    /// that cannot be shipped as it is costs: one copy, and the receiver maps the copy).
    fn send_copied(&mut self, bytes: &[u8]) -> Result<(Ticket, Accounting)> {
        let mut copy = Loan::new(bytes.len())?;
        time(Op::Copyin, || copy.copy_from_slice(bytes));
        let (t, mut acc) = self.send_loan(copy)?;
        acc.cpu_copied_bytes = bytes.len() as u64;
        Ok((t, acc))
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
            let mut at = 0;
            let mapped = match file {
                InFile::Sealed(f, off) => match time(Op::RegionCreate, || f.view()) {
                    Ok(view) => {
                        at = off;
                        Ok((ReceivedPages::File(view), shipped(false, true, len, None)))
                    }
                    Err(e) => Err((e.into(), InFile::Sealed(f, off))),
                },
                InFile::Lent(id, f) if !self.loans.volatile => {
                    // Not trusted here: copied out, and given back at once.
                    let got = AppBuffer::for_message(len)
                        .and_then(|mut b| read_file(f.fd(), &mut b[..len]).map(|()| b));
                    match got {
                        Ok(b) => {
                            self.loans.home.give_back(id, f);
                            Ok((ReceivedPages::Owned(b), lent(false, false, len, None)))
                        }
                        Err(e) => Err((e, InFile::Lent(id, f))),
                    }
                }
                InFile::Lent(id, mut f) => match time(Op::RegionCreate, || f.map().map(|_| ())) {
                    Ok(()) => Ok((
                        ReceivedPages::Lent(LentIn {
                            file: Some(f),
                            id,
                            home: self.loans.home.clone(),
                        }),
                        lent(false, true, len, None),
                    )),
                    Err(e) => Err((e.into(), InFile::Lent(id, f))),
                },
            };
            return match mapped {
                Ok((pages, acc)) => Ok((Received { pages, at, len }, acc)),
                Err((e, file)) => {
                    // Not delivered: the message is the next one still.
                    self.loans.files_in.push_front((d.ticket, file));
                    self.held = Some(d);
                    Err(e)
                }
            };
        }
        let (buf, acc) = self.recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux)?;
        Ok((Received::owned(buf), acc))
    }

    /// The descriptor `d` just taken off the ring announces a loan: take its record (and
    /// file) off the file socket, check it, and keep the file for the message's delivery. A
    /// file that cannot be held as its kind says (a sealed one that is not sealed, a volatile
    /// one that is), or is shorter than the message, is refused (the message with it; the
    /// link stays in step). A missing or mismatched record puts the link out of step: inputs
    /// are refused from then on.
    pub(super) fn take_file(&mut self, d: &Descriptor) -> Result<()> {
        let out_of_step = |me: &mut Self, why: String| {
            let e = GenieError::Protocol(format!("a loan's memory file: {why}"));
            me.broken_in = Some(e.to_string());
            Err(e)
        };
        let rec = loop {
            if let Some(r) = self.loans.ahead.pop_front() {
                break r;
            }
            match self.loans.read_record(FILE_PATIENCE_MS) {
                Ok(Some(r)) => self.loans.dispatch(r),
                Ok(None) => {
                    return out_of_step(
                        self,
                        format!("none came within {FILE_PATIENCE_MS} ms of its announcement"),
                    );
                }
                Err(e @ GenieError::Protocol(_)) => {
                    self.broken_in = Some(e.to_string());
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
        };
        if rec.ticket != d.ticket || rec.len != d.len {
            return out_of_step(
                self,
                format!(
                    "the file says ticket {} of {} bytes, its announcement ticket {} of {}",
                    rec.ticket, rec.len, d.ticket, d.len
                ),
            );
        }
        let short = |has: usize| {
            Err(GenieError::Protocol(format!(
                "a loan of {} bytes refused: its memory file holds {has}",
                d.len
            )))
        };
        let file = match (rec.kind, rec.fd) {
            // A sealed file's record carries the message's offset in it where others carry
            // an id.
            (KIND_SEALED, Some(fd)) => match SealedFile::adopt(fd) {
                Ok(f)
                    if (rec.id as usize)
                        .checked_add(d.len)
                        .is_none_or(|e| e > f.len()) =>
                {
                    return Err(GenieError::Protocol(format!(
                        "a loan of {} bytes at offset {} refused: its memory file holds {}",
                        d.len,
                        rec.id,
                        f.len()
                    )));
                }
                Ok(f) => InFile::Sealed(f, rec.id as usize),
                Err((e, _)) => {
                    return Err(GenieError::Protocol(format!(
                        "a loan of {} bytes refused: {e}",
                        d.len
                    )));
                }
            },
            (KIND_LENT_NEW, Some(fd)) => {
                if self.loans.known.contains(&rec.id) || self.loans.known.len() >= 2 * LENT_FILES {
                    return out_of_step(
                        self,
                        format!(
                            "a volatile file announced as new under id {}, with {} of the \
                             peer's held here (at most {})",
                            rec.id,
                            self.loans.known.len(),
                            2 * LENT_FILES
                        ),
                    );
                }
                match VolatileFile::adopt(fd) {
                    Ok(f) => {
                        self.loans.known.insert(rec.id);
                        if f.len() < d.len {
                            let has = f.len();
                            self.loans.home.give_back(rec.id, f);
                            return short(has);
                        }
                        InFile::Lent(rec.id, f)
                    }
                    Err((e, _)) => {
                        return Err(GenieError::Protocol(format!(
                            "a volatile loan of {} bytes refused: {e}",
                            d.len
                        )));
                    }
                }
            }
            (KIND_LENT_AGAIN, None) => {
                let idle = self.loans.home.state().idle.remove(&rec.id);
                match idle {
                    Some(f) if f.len() < d.len => {
                        let has = f.len();
                        self.loans.home.give_back(rec.id, f);
                        return short(has);
                    }
                    Some(f) => InFile::Lent(rec.id, f),
                    None => {
                        return out_of_step(
                            self,
                            format!(
                                "a volatile loan of a file this end does not hold at rest (id {})",
                                rec.id
                            ),
                        );
                    }
                }
            }
            (k, _) => {
                return out_of_step(self, format!("a record of kind {k} where a loan was due"));
            }
        };
        self.loans.files_in.push_back((d.ticket, file));
        Ok(())
    }

    /// The file of loan `d` (its descriptor taken for delivery), copied into `out` (a kernel
    /// copy, no mapping made); a volatile one is given back.
    pub(super) fn file_copy_out(&mut self, d: &Descriptor, out: &mut [u8]) -> Result<Accounting> {
        let (ticket, file) = self
            .loans
            .files_in
            .pop_front()
            .expect("taken with its descriptor");
        debug_assert_eq!(ticket, d.ticket);
        let at = match file {
            InFile::Sealed(_, at) => at,
            InFile::Lent(..) => 0,
        };
        let r = time(Op::Copyout, || read_file_at(file.fd(), at, out));
        let acc = match file {
            InFile::Sealed(..) => shipped(false, false, out.len(), None),
            InFile::Lent(id, f) => {
                self.loans.home.give_back(id, f);
                lent(false, false, out.len(), None)
            }
        };
        r.map(|()| acc)
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

    /// Announce a sealed loan of `len` bytes as `tx` would, its file `file` (none: not
    /// sent) under a record that says `ticket_delta` more than the announcement's ticket.
    fn forge(tx: &mut MemnetEndpoint, file: Option<BorrowedFd<'_>>, len: usize, ticket_delta: u64) {
        let ticket = tx.next_ticket;
        tx.next_ticket += 1;
        if let Some(fd) = file {
            let r = record_bytes(KIND_SEALED, ticket + ticket_delta, len, 0);
            zcio_vm::wire::send_with_fds(tx.loans.sock(), &r, &[fd]).unwrap();
        }
        announce(tx, ticket, len);
    }

    fn announce(tx: &mut MemnetEndpoint, ticket: u64, len: usize) {
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

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    #[test]
    fn a_loan_sent_under_emulated_copy_is_kept_and_its_later_writes_never_reach_the_receiver() {
        let (mut tx, mut rx) = pair().unwrap();
        // 4 KiB pages, then 2 MiB pages (a length that is not whole 2 MiB).
        for len in [5 * 4096 + 17, 3 * HUGE_PAGE_SIZE + 5] {
            let mut loan = tx.loan(len).unwrap();
            let want = pattern(len, len as u8);
            loan.copy_from_slice(&want);
            let at = loan.as_ptr();
            let range = 100..len - 7;
            let (_, acc) = tx.send_loan_copy(&mut loan, range.clone()).unwrap();
            assert_eq!(acc.path, DataPath::Kept);
            assert_eq!(acc.cpu_copied_bytes, 0);
            assert!(loan.is_kept());
            assert_eq!(loan.as_ptr(), at, "the loan's bytes stay where they were");
            assert_eq!(&loan[..], &want[..], "the sender reads what it sent");
            // The sender writes every page of its loan at once.
            loan.fill(0xEE);
            let (m, acc) = rx.recv_loan().unwrap();
            assert_eq!(
                acc.path,
                DataPath::Shipped {
                    out: false,
                    mapped: true
                }
            );
            assert_eq!(
                &m[..],
                &want[range.clone()],
                "the bytes of the moment of the send"
            );
            // Sent again: a copy of the bytes as they are now.
            let (_, acc) = tx.send_loan_copy(&mut loan, 0..len).unwrap();
            assert_eq!(acc.cpu_copied_bytes, len as u64);
            loan.fill(0x11);
            let mut out = vec![0u8; len];
            rx.recv(Semantics::Copy, &mut out, InputBuffering::EarlyDemux)
                .unwrap();
            assert!(out.iter().all(|&b| b == 0xEE));
            // The first message, held all along, never changed.
            assert_eq!(&m[..], &want[range]);
        }
        // A kept loan at an offset, copied out by an ordinary receive.
        let mut loan = tx.loan(3 * 4096).unwrap();
        let want = pattern(3 * 4096, 1);
        loan.copy_from_slice(&want);
        tx.send_loan_copy(&mut loan, 4097..3 * 4096).unwrap();
        loan.fill(0);
        let mut out = vec![0u8; 2 * 4096 - 1];
        rx.recv(Semantics::Copy, &mut out, InputBuffering::EarlyDemux)
            .unwrap();
        assert_eq!(&out[..], &want[4097..]);
    }

    /// The memory file that `bytes` (a loan's) are a mapping of, opened again read-only
    /// through `/proc/self/fd`: the descriptor whose file has the inode `/proc/self/maps`
    /// gives for their first byte.
    fn file_of(bytes: &[u8]) -> OwnedFd {
        let at = bytes.as_ptr() as usize;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let ino: u64 = maps
            .lines()
            .find_map(|l| {
                let mut f = l.split_whitespace();
                let (lo, hi) = f.next()?.split_once('-')?;
                let (lo, hi) = (
                    usize::from_str_radix(lo, 16).ok()?,
                    usize::from_str_radix(hi, 16).ok()?,
                );
                (lo <= at && at < hi).then(|| f.nth(3)?.parse().ok())?
            })
            .expect("the loan's mapping is in /proc/self/maps");
        for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
            let link = std::fs::read_link(e.path()).unwrap_or_default();
            let is_loan = link.to_string_lossy().contains("memfd:zcio-loan");
            let same = std::fs::metadata(e.path()).is_ok_and(|m| {
                use std::os::unix::fs::MetadataExt;
                m.ino() == ino
            });
            if is_loan && same {
                if let Ok(f) = std::fs::File::open(e.path()) {
                    return f.into();
                }
            }
        }
        panic!("no descriptor of this process holds the loan's file (inode {ino})");
    }

    #[test]
    fn a_kept_loan_stays_where_it_was_and_its_writes_never_reach_its_file() {
        for (len, granule) in [
            (5 * 4096 + 17, Granule::Base),
            (2 * HUGE_PAGE_SIZE + 5, Granule::Huge),
        ] {
            let mut loan = Loan::with_granule(len, granule).unwrap();
            let want = pattern(len, 7);
            loan.copy_from_slice(&want);
            // What the file holds: what any other mapping of it shows.
            let file = file_of(&loan);
            let in_file = || {
                let mut b = vec![0u8; len];
                read_file(file.as_fd(), &mut b).unwrap();
                b
            };
            assert_eq!(in_file(), want);
            // Unsent: the loan is the file, and a write through it is a write of the file.
            loan[len - 1] = !want[len - 1];
            assert_eq!(
                in_file()[len - 1],
                !want[len - 1],
                "an unsent loan's writes are its file's"
            );
            loan[len - 1] = want[len - 1];
            let at = loan.as_ptr();
            loan.keep().unwrap();
            assert!(loan.is_kept() && !loan.is_volatile());
            assert_eq!(loan.granule(), granule);
            assert_eq!(loan.as_ptr(), at, "the loan's bytes stay where they were");
            assert_eq!(&loan[..], &want[..], "and read the same");
            // Every page written through the loan: its own copy, the file unchanged.
            loan.fill(0xEE);
            assert!(loan.iter().all(|&b| b == 0xEE));
            assert_eq!(in_file(), want, "a kept loan's writes reached its file");
            let seals = rustix::fs::fcntl_get_seals(&file).unwrap();
            assert!(
                seals.contains(rustix::fs::SealFlags::WRITE),
                "the file is sealed: {seals:?}"
            );
            // Kept already: nothing more to do.
            loan.keep().unwrap();
            assert!(loan.iter().all(|&b| b == 0xEE));
        }
    }

    #[test]
    fn a_kept_loan_is_sent_as_a_copy_of_its_bytes_of_now() {
        let (mut tx, mut rx) = pair().unwrap();
        let len = 3 * 4096 + 1;
        let mut loan = tx.loan(len).unwrap();
        loan.fill(3);
        loan.keep().unwrap();
        loan.fill(4);
        let (_, acc) = tx.send_loan_copy(&mut loan, 0..len).unwrap();
        assert_eq!(acc.cpu_copied_bytes, len as u64, "{}", acc.path);
        assert_ne!(acc.path, DataPath::Kept);
        loan.fill(5);
        let (m, _) = rx.recv_loan().unwrap();
        assert!(m.iter().all(|&b| b == 4), "the bytes of the send");
        tx.send_loan(loan).unwrap();
        let (m, _) = rx.recv_loan().unwrap();
        assert!(m.iter().all(|&b| b == 5));
    }

    #[test]
    fn keep_leaves_a_loan_in_private_memory_and_a_volatile_one_as_they_are() {
        let mut owned = Loan::owned(10_000).unwrap();
        owned.fill(1);
        let at = owned.as_ptr();
        owned.keep().unwrap();
        assert!(!owned.is_kept());
        assert_eq!(owned.as_ptr(), at);
        assert!(owned.iter().all(|&b| b == 1));
        let (mut tx, mut rx) = trusting();
        let mut lent = tx.loan(8192).unwrap();
        assert!(lent.is_volatile());
        lent.fill(2);
        lent.keep().unwrap();
        assert!(
            lent.is_volatile() && !lent.is_kept(),
            "its file is the endpoint's"
        );
        tx.send_loan(lent).unwrap();
        let (m, acc) = rx.recv_loan().unwrap();
        assert!(m.is_volatile(), "{}", acc.path);
        assert!(m.iter().all(|&b| b == 2));
    }

    #[test]
    fn a_range_outside_the_loan_is_refused_and_the_loan_and_link_go_on() {
        let (mut tx, mut rx) = pair().unwrap();
        let mut loan = tx.loan(8192).unwrap();
        loan.fill(4);
        let backwards = std::ops::Range {
            start: 8000,
            end: 100,
        };
        for bad in [0..8193, backwards, 5..5] {
            let e = tx.send_loan_copy(&mut loan, bad.clone()).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{bad:?}: {e}");
        }
        assert!(!loan.is_kept(), "nothing was sent");
        tx.send_loan_copy(&mut loan, 0..8192).unwrap();
        let (m, _) = rx.recv_loan().unwrap();
        assert!(m.iter().all(|&b| b == 4));
    }

    #[test]
    fn a_sealed_file_whose_offset_runs_past_its_end_is_refused_and_the_link_goes_on() {
        let (mut tx, mut rx) = pair().unwrap();
        let fd = memfd_with(8192, 3);
        let ticket = tx.next_ticket;
        tx.next_ticket += 1;
        let r = record_bytes(KIND_SEALED, ticket, 4096, 4097);
        zcio_vm::wire::send_with_fds(tx.loans.sock(), &r, &[fd.as_fd()]).unwrap();
        announce(&mut tx, ticket, 4096);
        let e = rx.recv_loan().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
        assert!(e.to_string().contains("at offset 4097"), "{e}");
        next_arrives(&mut tx, &mut rx);
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

    /// A link whose ends both trust each other with volatile loans.
    fn trusting() -> (MemnetEndpoint, MemnetEndpoint) {
        let (mut tx, mut rx) = pair().unwrap();
        tx.set_volatile_loans(true);
        rx.set_volatile_loans(true);
        (tx, rx)
    }

    fn made(e: &MemnetEndpoint) -> usize {
        e.loans.home.state().made
    }

    #[test]
    fn a_volatile_loan_goes_and_comes_back_and_its_file_is_lent_again_without_a_copy() {
        let (mut tx, mut rx) = trusting();
        for (i, len) in [(3 << 20) + 7, 3 << 20, 5 << 20, 3 << 20]
            .into_iter()
            .enumerate()
        {
            let mut loan = tx.loan(len).unwrap();
            assert!(loan.is_volatile());
            loan.fill(i as u8 + 1);
            let (_, acc) = tx.send_loan(loan).unwrap();
            assert_eq!(
                acc.path,
                DataPath::Lent {
                    out: true,
                    mapped: false
                }
            );
            let (mut m, acc) = rx.recv_loan().unwrap();
            assert!(m.is_volatile() && m.is_mapped(), "{}", acc.path);
            assert_eq!(
                acc.path,
                DataPath::Lent {
                    out: false,
                    mapped: true
                }
            );
            assert_eq!(acc.kernel_copied_bytes, Some(0));
            assert_eq!(m.len(), len);
            assert!(m.iter().all(|&b| b == i as u8 + 1), "message {i}");
            m[0] = 0xFF; // the receiver's own to write while it holds it
            drop(m);
            // The 5 MiB message needed a second file (the first, 4 MiB, is too small); the
            // others reuse the first.
            assert_eq!(made(&tx), if i < 2 { 1 } else { 2 }, "message {i}");
        }
    }

    #[test]
    fn the_sender_never_writes_a_file_the_receiver_still_holds() {
        let (mut tx, mut rx) = trusting();
        let mut held = Vec::new();
        for i in 0..5u8 {
            let mut loan = tx.loan(8192).unwrap();
            loan.fill(i);
            tx.send_loan(loan).unwrap();
            held.push(rx.recv_loan().unwrap().0);
        }
        assert_eq!(made(&tx), 5, "every file is held: each loan a new one");
        drop(held.remove(2));
        let mut loan = tx.loan(8192).unwrap();
        loan.fill(0xAA);
        tx.send_loan(loan).unwrap();
        let (m, _) = rx.recv_loan().unwrap();
        assert!(m.iter().all(|&b| b == 0xAA));
        assert_eq!(made(&tx), 5, "the file given back was lent again");
        for (m, i) in held.iter().zip([0u8, 1, 3, 4]) {
            assert!(
                m.iter().all(|&b| b == i),
                "message {i} changed under its holder"
            );
        }
    }

    #[test]
    fn a_volatile_loan_to_an_end_that_does_not_trust_is_copied_out_and_given_back() {
        let (mut tx, mut rx) = pair().unwrap();
        tx.set_volatile_loans(true);
        for i in 0..3u8 {
            let mut loan = tx.loan(20_000).unwrap();
            loan.fill(i);
            tx.send_loan(loan).unwrap();
            let (m, acc) = rx.recv_loan().unwrap();
            assert!(!m.is_mapped() && !m.is_volatile());
            assert_eq!(
                acc.path,
                DataPath::Lent {
                    out: false,
                    mapped: false
                }
            );
            assert_eq!(acc.kernel_copied_bytes, Some(20_000));
            assert!(m.iter().all(|&b| b == i));
            drop(m);
            // Given back at once: the same file every time, though the copy is still held.
            assert_eq!(made(&tx), 1);
        }
        // And by recv, into a buffer of the caller's.
        let mut loan = tx.loan(100).unwrap();
        loan.fill(9);
        tx.send_loan(loan).unwrap();
        let mut buf = vec![0u8; 100];
        let (n, acc) = rx
            .recv(Semantics::Copy, &mut buf, InputBuffering::EarlyDemux)
            .unwrap();
        assert_eq!(
            (n, acc.path),
            (
                100,
                DataPath::Lent {
                    out: false,
                    mapped: false
                }
            )
        );
        assert!(buf.iter().all(|&b| b == 9));
    }

    #[test]
    fn with_every_volatile_file_held_a_loan_is_sealed_and_a_loan_dropped_unsent_comes_back() {
        let (mut tx, mut rx) = trusting();
        let mut held = Vec::new();
        for i in 0..LENT_FILES {
            let mut loan = tx.loan(4096).unwrap();
            loan.fill(i as u8);
            tx.send_loan(loan).unwrap();
            held.push(rx.recv_loan().unwrap().0);
        }
        let mut loan = tx.loan(4096).unwrap();
        assert!(!loan.is_volatile(), "{LENT_FILES} lent: the next is sealed");
        loan.fill(0x77);
        tx.send_loan(loan).unwrap();
        let (m, acc) = rx.recv_loan().unwrap();
        assert_eq!(
            acc.path,
            DataPath::Shipped {
                out: false,
                mapped: true
            }
        );
        assert!(m.iter().all(|&b| b == 0x77));
        drop(held.pop());
        let loan = tx.loan(4096).unwrap();
        assert!(loan.is_volatile());
        drop(loan);
        assert_eq!(
            tx.loans.home.state().free.len(),
            1,
            "dropped unsent: free again"
        );
        let mut loan = tx.loan(4096).unwrap();
        loan.fill(0x55);
        tx.send_loan(loan).unwrap();
        let (m, _) = rx.recv_loan().unwrap();
        assert!(m.iter().all(|&b| b == 0x55));
        assert_eq!(made(&tx), LENT_FILES);
        for (i, m) in held.iter().enumerate() {
            assert!(m.iter().all(|&b| b == i as u8));
        }
    }

    #[test]
    fn files_at_rest_beyond_the_pool_are_forgotten_at_both_ends() {
        let (mut tx, mut rx) = trusting();
        // LENT_FILES files of 4 KiB, all given back, then a loan none fits: the oldest file
        // at rest goes, at the receiver too.
        let mut held = Vec::new();
        for _ in 0..LENT_FILES {
            let mut loan = tx.loan(4096).unwrap();
            loan.fill(1);
            tx.send_loan(loan).unwrap();
            held.push(rx.recv_loan().unwrap().0);
        }
        drop(held);
        let mut loan = tx.loan(1 << 20).unwrap();
        assert!(loan.is_volatile());
        loan.fill(2);
        tx.send_loan(loan).unwrap();
        let (m, _) = rx.recv_loan().unwrap();
        assert!(m.iter().all(|&b| b == 2));
        assert_eq!(made(&tx), LENT_FILES);
        assert_eq!(
            rx.loans.known.len(),
            LENT_FILES,
            "the forgotten one is closed"
        );
        assert_eq!(rx.loans.home.state().idle.len(), LENT_FILES - 1);
    }

    #[test]
    fn a_message_held_after_both_ends_are_gone_stays_and_goes_quietly() {
        let (mut tx, mut rx) = trusting();
        let mut loan = tx.loan(3 << 20).unwrap();
        loan.fill(4);
        tx.send_loan(loan).unwrap();
        let (m, _) = rx.recv_loan().unwrap();
        drop(tx);
        drop(rx);
        assert!(m.iter().all(|&b| b == 4));
        drop(m);
    }

    /// Send a volatile record of `kind` for `id` with `fd`, announcing it.
    fn forge_lent(
        tx: &mut MemnetEndpoint,
        kind: u64,
        id: u64,
        fd: Option<BorrowedFd<'_>>,
        len: usize,
    ) {
        let ticket = tx.next_ticket;
        tx.next_ticket += 1;
        let r = record_bytes(kind, ticket, len, id);
        let fds: Vec<_> = fd.into_iter().collect();
        zcio_vm::wire::send_with_fds(tx.loans.sock(), &r, &fds).unwrap();
        announce(tx, ticket, len);
    }

    #[test]
    fn a_volatile_loan_of_a_file_never_sent_or_sent_twice_refuses_every_later_input() {
        for twice in [false, true] {
            let (mut tx, mut rx) = trusting();
            let fd = memfd_with(4096, 1);
            if twice {
                forge_lent(&mut tx, KIND_LENT_NEW, 7, Some(fd.as_fd()), 4096);
                let (m, _) = rx.recv_loan().unwrap();
                assert!(m.iter().all(|&b| b == 1));
                forge_lent(&mut tx, KIND_LENT_NEW, 7, Some(fd.as_fd()), 4096);
            } else {
                forge_lent(&mut tx, KIND_LENT_AGAIN, 7, None, 4096);
            }
            let e = rx.recv_loan().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
            assert!(e.to_string().contains("id 7"), "{e}");
            tx.send(Semantics::Copy, &[1u8; 100]).unwrap();
            let e = rx.recv_loan().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Refused, "{e}");
        }
    }

    #[test]
    fn a_volatile_loan_whose_file_is_sealed_or_short_is_refused_and_the_link_goes_on() {
        let (mut tx, mut rx) = trusting();
        let mut f = zcio_vm::sealed::ExclusiveFile::new("zcio-test-sealed", 4096).unwrap();
        f.bytes_mut().fill(3);
        let sealed = f.seal().unwrap();
        forge_lent(&mut tx, KIND_LENT_NEW, 1, Some(sealed.fd()), 4096);
        let e = rx.recv_loan().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
        assert!(e.to_string().contains("sealed against writes"), "{e}");
        next_arrives(&mut tx, &mut rx);
        let fd = memfd_with(4096, 1);
        forge_lent(&mut tx, KIND_LENT_NEW, 2, Some(fd.as_fd()), 8192);
        let e = rx.recv_loan().unwrap_err();
        assert!(e.to_string().contains("holds 4096"), "{e}");
        next_arrives(&mut tx, &mut rx);
    }
}
