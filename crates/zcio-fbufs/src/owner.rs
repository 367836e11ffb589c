//! The fbuf region's owner (paper 001, §3.3, the kernel's role): the process that creates the
//! data paths' memory, grants each path's allocator fixed-size chunks against the path's quota
//! and a budget for the whole region, lets receivers join a path, and takes a path's chunks back
//! when every process of the path is gone.
//!
//! - The owner places each path in the region and keeps its geometry
//!   ([`OwnerClient::create_path`], [`OwnerClient::join_path`]). A path's memory is its
//!   chunks, memory files its originator makes as its allocator needs them (and gives back
//!   under its budget, [`crate::path`]): no path's originator can reach another path's memory,
//!   and receivers get read-only descriptors of the chunks from the originator's link.
//! - An allocator made with [`Originator::granted_by_owner`] carves fbufs only from chunks it
//!   was granted; [`OwnerClient::alloc`] asks for more when it runs out. A grant beyond the
//!   path's quota or the region's budget is refused with a clear error, and the other paths are
//!   unaffected.
//! - Every process of a path keeps its connection to the owner while it maps the path. The owner
//!   watches each (its socket, and a pidfd of the process where one can be had): a path's chunks
//!   stay while any process of it is left (an originator that exits or is killed leaves them to
//!   its receivers, which go on reading in place) and return to the budget when the last is gone.
//!
//! What differs from the paper: a grant is accounting, not page-table entries the owner maps
//! into each process. The originator makes and maps its chunks itself (sparse, populated
//! lazily) and the grant limits the chunks its allocator carves from; a chunk it retires under
//! its budget stays granted. An originator that ignores its grant can only make memory files
//! of its own; the kernel charges their pages to it.

use crate::link::{
    FRAME, Frames, LinkError, Next, OriginatorEnd, accept_path, frame, offer_path_now, parse,
    peer_pidfd, poll_ends, send_now,
};
use crate::path::{Fbuf, FbufError, FbufRef, Originator, PathInfo, PathMemory, Variant};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::Duration;

const CREATE: u64 = 16;
const JOIN: u64 = 17;
const GRANT: u64 = 18;
const STATS: u64 = 19;
const OK: u64 = 20;
const REFUSED: u64 = 21;

// Why a request was refused (the first word of a REFUSED frame's reference).
const NO_PATH: u64 = 1;
const OVER_QUOTA: u64 = 2;
const OVER_BUDGET: u64 = 3;
const NOT_ORIGINATOR: u64 = 4;
const ALREADY_MEMBER: u64 = 5;
const CREATE_FAILED: u64 = 6;

struct OwnedPath {
    mem: PathMemory,
    granted: usize,
    members: usize,
    originator: Option<usize>,
}

struct Client {
    sock: UnixStream,
    frames: Frames,
    pidfd: Option<OwnedFd>,
    path: Option<u64>,
    alive: bool,
}

/// The owner: serves [`OwnerClient`]s on a Unix socket.
pub struct Owner {
    listener: UnixListener,
    chunk_bytes: usize,
    budget_chunks: usize,
    paths: HashMap<u64, OwnedPath>,
    clients: Vec<Client>,
}

impl Owner {
    /// An owner listening at `sock_path`, granting chunks of `chunk_bytes` (rounded up to
    /// pages), at most `budget_chunks` of them over all paths.
    pub fn bind(
        sock_path: &Path,
        chunk_bytes: usize,
        budget_chunks: usize,
    ) -> Result<Owner, LinkError> {
        let listener = UnixListener::bind(sock_path)?;
        listener.set_nonblocking(true)?;
        let ps = zcio_vm::page_size();
        Ok(Owner {
            listener,
            chunk_bytes: chunk_bytes.max(1).div_ceil(ps) * ps,
            budget_chunks,
            paths: HashMap::new(),
            clients: Vec::new(),
        })
    }

    /// Chunks granted over all paths.
    pub fn chunks_in_use(&self) -> usize {
        self.paths.values().map(|p| p.granted).sum()
    }

    /// Paths alive (with at least one process).
    pub fn paths(&self) -> usize {
        self.paths.len()
    }

    /// Serve until `done` says so (asked after every event, and at least every `tick`).
    pub fn serve(
        &mut self,
        tick: Duration,
        mut done: impl FnMut(&Owner) -> bool,
    ) -> Result<(), LinkError> {
        while !done(self) {
            self.step(Some(tick))?;
        }
        Ok(())
    }

    /// Wait up to `timeout` (forever with `None`) for requests, new clients and ends, and serve
    /// what came.
    pub fn step(&mut self, timeout: Option<Duration>) -> Result<(), LinkError> {
        let live: Vec<usize> = (0..self.clients.len())
            .filter(|i| self.clients[*i].alive)
            .collect();
        let ends: Vec<_> = live
            .iter()
            .map(|i| {
                let c = &self.clients[*i];
                (&c.sock, c.pidfd.as_ref(), false)
            })
            .collect();
        let polled = poll_ends(&[self.listener.as_fd()], &ends, timeout)?;
        let accept = polled.extra[0];
        let ready: Vec<usize> = polled.readable.iter().map(|k| live[*k]).collect();
        let ended: Vec<usize> = polled.ended.iter().map(|k| live[*k]).collect();
        if accept {
            self.accept()?;
        }
        for i in ready.iter().chain(&ended) {
            self.serve_client(*i)?;
        }
        for i in ended {
            self.gone(i);
        }
        Ok(())
    }

    fn accept(&mut self) -> Result<(), LinkError> {
        loop {
            match self.listener.accept() {
                Ok((sock, _)) => {
                    sock.set_nonblocking(false)?;
                    let pidfd = peer_pidfd(&sock);
                    self.clients.push(Client {
                        sock,
                        frames: Frames::new(),
                        pidfd,
                        path: None,
                        alive: true,
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Every request client `i` has queued.
    fn serve_client(&mut self, i: usize) -> Result<(), LinkError> {
        while self.clients[i].alive {
            let c = &mut self.clients[i];
            match c.frames.next(&c.sock, false) {
                Ok(Next::Empty) => break,
                Ok(Next::Frame(kind, r)) => {
                    if !self.request(i, kind, r.addr, r.len)? {
                        self.gone(i);
                    }
                }
                Ok(Next::Closed) | Err(_) => self.gone(i),
            }
        }
        Ok(())
    }

    /// Answer client `i`, never waiting for it: an honest client has at most one answer
    /// outstanding, so its socket always takes it; one that does not read its answers is cut
    /// off (`false`) rather than allowed to stall every path the owner serves.
    fn reply(&mut self, i: usize, kind: u64, a: u64, b: u64) -> bool {
        let f = frame(kind, FbufRef { addr: a, len: b });
        matches!(send_now(&self.clients[i].sock, &f), Ok(n) if n == FRAME)
    }

    /// Serve one request; `false` ends the client (it broke the protocol or is gone).
    fn request(&mut self, i: usize, kind: u64, a: u64, b: u64) -> Result<bool, LinkError> {
        let mine = self.clients[i].path;
        Ok(match kind {
            CREATE if mine.is_some() => self.reply(i, REFUSED, ALREADY_MEMBER, 0),
            CREATE => {
                match PathMemory::create(self.chunk_bytes, a as usize, Variant::from_bits(b)) {
                    Ok(mem) => {
                        let info = mem.info();
                        let sent = self.reply(i, OK, info.addr as u64, 0)
                            && offer_path_now(&self.clients[i].sock, info).is_ok();
                        self.paths.insert(
                            info.addr as u64,
                            OwnedPath {
                                mem,
                                granted: 0,
                                members: 1,
                                originator: Some(i),
                            },
                        );
                        self.clients[i].path = Some(info.addr as u64);
                        sent
                    }
                    Err(_) => self.reply(i, REFUSED, CREATE_FAILED, a),
                }
            }
            JOIN if mine.is_some() => self.reply(i, REFUSED, ALREADY_MEMBER, 0),
            JOIN => match self.paths.get_mut(&a) {
                None => self.reply(i, REFUSED, NO_PATH, a),
                Some(p) => {
                    let info = p.mem.info();
                    p.members += 1;
                    self.clients[i].path = Some(a);
                    self.reply(i, OK, a, 0) && offer_path_now(&self.clients[i].sock, info).is_ok()
                }
            },
            GRANT => {
                let in_use = self.chunks_in_use();
                let budget = self.budget_chunks;
                match self.paths.get_mut(&a) {
                    Some(p) if mine == Some(a) && p.originator == Some(i) => {
                        let quota = p.mem.info().quota_chunks;
                        let n = b as usize;
                        if p.granted.saturating_add(n) > quota {
                            self.reply(i, REFUSED, OVER_QUOTA, quota as u64)
                        } else if in_use.saturating_add(n) > budget {
                            self.reply(i, REFUSED, OVER_BUDGET, (budget - in_use) as u64)
                        } else {
                            p.granted += n;
                            let total = p.granted as u64;
                            self.reply(i, OK, total, 0)
                        }
                    }
                    _ => self.reply(i, REFUSED, NOT_ORIGINATOR, a),
                }
            }
            STATS => {
                let (c, p) = (self.chunks_in_use() as u64, self.paths() as u64);
                self.reply(i, OK, c, p)
            }
            _ => false,
        })
    }

    /// Client `i` is gone: its path loses a member, and a path with none left is freed.
    fn gone(&mut self, i: usize) {
        let c = &mut self.clients[i];
        if !c.alive {
            return;
        }
        c.alive = false;
        c.pidfd = None;
        let _ = c.sock.shutdown(std::net::Shutdown::Both);
        if let Some(addr) = c.path.take()
            && let Some(p) = self.paths.get_mut(&addr)
        {
            p.members -= 1;
            if p.originator == Some(i) {
                p.originator = None;
            }
            if p.members == 0 {
                self.paths.remove(&addr);
            }
        }
    }
}

/// A process's connection to the [`Owner`]; keep it while mapping the path it created or
/// joined (closing it, or exiting, gives up this process's hold on the path).
pub struct OwnerClient {
    sock: UnixStream,
}

impl OwnerClient {
    /// Connect to the owner at `sock_path`.
    pub fn connect(sock_path: &Path) -> Result<OwnerClient, LinkError> {
        Ok(OwnerClient {
            sock: UnixStream::connect(sock_path)?,
        })
    }

    fn ask(&mut self, kind: u64, a: u64, b: u64) -> Result<(u64, u64), LinkError> {
        self.sock
            .write_all(&frame(kind, FbufRef { addr: a, len: b }))
            .map_err(|_| LinkError::PeerGone {
                during: "asking the fbuf owner",
            })?;
        // Exactly one frame: a path offer (with its descriptor) may follow it.
        let mut f = [0u8; FRAME];
        self.sock
            .read_exact(&mut f)
            .map_err(|_| LinkError::PeerGone {
                during: "waiting for the fbuf owner",
            })?;
        let (kind, FbufRef { addr: a, len: b }) = parse(&f);
        match kind {
            OK => Ok((a, b)),
            REFUSED => Err(FbufError::Refused(match (a, b) {
                (NO_PATH, x) => format!("there is no path at {x:#x}"),
                (OVER_QUOTA, q) => format!("the grant would pass the path's quota of {q} chunks"),
                (OVER_BUDGET, left) => format!(
                    "the region has {left} chunks left for all paths; free fbufs or wait for other paths to end"
                ),
                (NOT_ORIGINATOR, x) => {
                    format!("only the originator of the path at {x:#x}, on its own connection, is granted chunks")
                }
                (ALREADY_MEMBER, _) => "this connection already belongs to a path".into(),
                (CREATE_FAILED, q) => format!("could not create a path of {q} chunks"),
                (c, x) => format!("reason {c} ({x})"),
            })
            .into()),
            k => Err(LinkError::Protocol(format!("owner answered with frame kind {k}"))),
        }
    }

    /// Create a path of at most `quota_chunks` chunks; this process is its originator. Returns
    /// its geometry, for [`Originator::granted_by_owner`].
    pub fn create_path(
        &mut self,
        quota_chunks: usize,
        variant: Variant,
    ) -> Result<PathInfo, LinkError> {
        self.ask(CREATE, quota_chunks as u64, variant.bits())?;
        Ok(accept_path(&self.sock)?.0)
    }

    /// Join the path at `addr` as a receiver: its geometry (its chunks come from its
    /// originator's link).
    pub fn join_path(&mut self, addr: u64) -> Result<PathInfo, LinkError> {
        self.ask(JOIN, addr, 0)?;
        Ok(accept_path(&self.sock)?.0)
    }

    /// Ask for `n` more chunks for the path at `addr` (created on this connection); the total
    /// granted.
    pub fn grant(&mut self, addr: u64, n: usize) -> Result<usize, LinkError> {
        Ok(self.ask(GRANT, addr, n as u64)?.0 as usize)
    }

    /// Chunks granted over all paths, and paths alive.
    pub fn stats(&mut self) -> Result<(usize, usize), LinkError> {
        let (c, p) = self.ask(STATS, 0, 0)?;
        Ok((c as usize, p as usize))
    }

    /// [`OriginatorEnd::alloc_waiting`] on a path this owner grants: asks for the chunks the
    /// allocator lacks, and where the region's budget is spent, waits for this path's own fbufs
    /// to come back.
    pub fn alloc_waiting(
        &mut self,
        end: &mut OriginatorEnd,
        len: usize,
    ) -> Result<Fbuf, LinkError> {
        loop {
            match end.alloc_waiting(len) {
                Err(LinkError::Fbuf(FbufError::NeedChunks { needed, granted })) => {
                    match self.grant(end.originator.info().addr as u64, needed - granted) {
                        Ok(total) => end.originator.set_granted(total),
                        Err(_) if end.originator.outstanding() > 0 && end.receivers_alive() > 0 => {
                            end.poll(true)?;
                        }
                        Err(e) => return Err(e),
                    }
                }
                r => return r,
            }
        }
    }

    /// An fbuf of `len` bytes from `o`, asking the owner for the chunks it lacks.
    pub fn alloc(&mut self, o: &mut Originator, len: usize) -> Result<Fbuf, LinkError> {
        loop {
            match o.alloc(len) {
                Err(FbufError::NeedChunks { needed, granted }) => {
                    let total = self.grant(o.info().addr as u64, needed - granted)?;
                    o.set_granted(total);
                }
                r => return Ok(r?),
            }
        }
    }
}
