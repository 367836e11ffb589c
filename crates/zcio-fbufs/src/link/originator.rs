//! The originator's end of a link ([`OriginatorEnd`]).

use super::*;

/// The originator's end: its path and the receivers it sends to.
pub struct OriginatorEnd {
    /// The path's allocator and memory.
    pub originator: Originator,
    peers: Vec<Peer>,
    /// References released for receivers that went away.
    pub released_for_dead: usize,
    /// Receivers dropped for breaking the protocol or for not reading their socket, and why
    /// (their references are released).
    pub misbehaved: Vec<String>,
    /// How long a blocking [`OriginatorEnd::poll`] keeps looking before it sleeps.
    pub spin: Duration,
    /// Slots of each ring of the links made from now on.
    pub ring_slots: usize,
    /// Most frames that may wait for a receiver whose socket is full before it is dropped as
    /// failed, for the links made from now on ([`DEFAULT_BACKLOG_FRAMES`]).
    pub backlog_frames: usize,
    /// Aggregate messages out, by root node: the fbufs holding their nodes and data, and how
    /// many receivers still hold each.
    msgs: HashMap<u64, SentMsg>,
    /// What forwarding receivers held when they went without a goodbye, kept from reuse until
    /// every process they forwarded to has ended (those may still be reading it).
    quarantine: Vec<Quarantined>,
}

/// Fbufs a dead forwarder held, and the processes downstream of it that may still read them.
struct Quarantined {
    downstream: Vec<OwnedFd>,
    refs: Vec<FbufRef>,
}

/// Whether the process behind `pidfd` has ended (a pidfd turns readable then).
fn ended(pidfd: &OwnedFd) -> bool {
    use rustix::event::{PollFd, PollFlags};
    let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(n) if n > 0)
}

struct SentMsg {
    root: FbufRef,
    parts: Vec<FbufRef>,
    holders: usize,
}

/// How long an end keeps looking for frames before it sleeps, unless told otherwise.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(SPIN_US);
const SPIN_US: u64 = 50;

/// From this length on, an allocation first takes in the notices that came back.
const LARGE: usize = 64 << 10;

impl OriginatorEnd {
    /// An end for `originator`'s path, with no receiver yet.
    pub fn new(originator: Originator) -> OriginatorEnd {
        OriginatorEnd {
            originator,
            peers: Vec::new(),
            released_for_dead: 0,
            misbehaved: Vec::new(),
            spin: DEFAULT_SPIN,
            ring_slots: crate::ring::DEFAULT_SLOTS,
            backlog_frames: DEFAULT_BACKLOG_FRAMES,
            msgs: HashMap::new(),
            quarantine: Vec::new(),
        }
    }

    /// Fbufs held back from reuse because a forwarding receiver died holding them and a
    /// process it forwarded to may still be reading them.
    pub fn quarantined(&self) -> usize {
        self.quarantine.iter().map(|q| q.refs.len()).sum()
    }

    /// Release the quarantined fbufs whose downstream processes have all ended.
    fn release_quarantined(&mut self) -> Result<(), LinkError> {
        let mut k = 0;
        while k < self.quarantine.len() {
            if self.quarantine[k].downstream.iter().all(ended) {
                let q = self.quarantine.swap_remove(k);
                for r in q.refs {
                    self.release(r)?;
                    self.released_for_dead += 1;
                }
            } else {
                k += 1;
            }
        }
        Ok(())
    }

    /// Offer the path to a receiver connected on `sock` (its geometry and the link's rings,
    /// then the chunks made so far); returns its index.
    pub fn add_receiver(&mut self, sock: UnixStream) -> Result<usize, LinkError> {
        let p = Peer::offer(
            sock,
            self.originator.info(),
            self.ring_slots,
            self.backlog_frames,
        )?;
        self.peers.push(p);
        let i = self.peers.len() - 1;
        self.sync_chunks(i)?;
        if !self.peers[i].alive {
            return Err(LinkError::PeerGone {
                during: "announcing the path's chunks",
            });
        }
        Ok(i)
    }

    /// [`Originator::set_cache_budget`], and the receivers told at once of the chunks retired.
    pub fn set_cache_budget(&mut self, bytes: usize) -> Result<(), LinkError> {
        self.originator.set_cache_budget(bytes)?;
        self.sync_all()
    }

    /// [`Originator::trim_cache`], and the receivers told at once of the chunks retired.
    pub fn trim_cache(&mut self, bytes: usize) -> Result<(), LinkError> {
        self.originator.trim_cache(bytes)?;
        self.sync_all()
    }

    /// Tell receiver `i` of the chunks made and retired since it was last told: for each
    /// chunk changed, the retirement of what it knows there, then the chunk made there now.
    /// Before any reference goes to it, so that none reaches a chunk it was not told of. A
    /// receiver whose socket fails meanwhile is dropped.
    fn sync_chunks(&mut self, i: usize) -> Result<(), LinkError> {
        let epoch = self.originator.chunk_epoch();
        let info = self.originator.info();
        let p = &mut self.peers[i];
        if !p.alive || p.chunk_epoch == epoch {
            return Ok(());
        }
        let mut ok = true;
        for k in self.originator.chunks_changed_since(p.chunk_epoch) {
            let now = self.originator.chunk_now(k);
            let known = p.chunks.get(&k).copied();
            if known.is_some() && known != now.map(|(g, _)| g) {
                ok = p.post_chunk(RETIRE, info.chunk_ref(k), None);
                p.chunks.remove(&k);
            }
            if let Some((g, fd)) = now
                && ok
                && known != Some(g)
            {
                ok = p.post_chunk(CHUNK, info.chunk_ref(k), Some(fd));
                p.chunks.insert(k, g);
            }
            if !ok {
                break;
            }
        }
        p.chunk_epoch = epoch;
        if !ok {
            self.fail_peer(i)?;
        }
        Ok(())
    }

    /// [`OriginatorEnd::sync_chunks`] for every receiver.
    fn sync_all(&mut self) -> Result<(), LinkError> {
        for i in 0..self.peers.len() {
            self.sync_chunks(i)?;
        }
        Ok(())
    }

    /// Whether receiver `i`'s process is watched through a pidfd (otherwise its end is seen
    /// only when its socket closes).
    pub fn watches_process(&self, i: usize) -> bool {
        self.peers.get(i).is_some_and(|p| p.pidfd.is_some())
    }

    /// Receivers still connected.
    pub fn receivers_alive(&self) -> usize {
        self.peers.iter().filter(|p| p.alive).count()
    }

    /// Bytes of frames waiting for receiver `i` that its socket has not taken yet (it is not
    /// reading, or not as fast as this end sends).
    pub fn backlog_bytes(&self, i: usize) -> usize {
        self.peers.get(i).map_or(0, |p| p.ch.out.len())
    }

    /// Close every link in order: each receiver still connected gets a goodbye (its
    /// [`ReceiverEnd::recv`] then ends with `None` once it has taken what was sent) and is let
    /// go, what it held released. Dropping the end says goodbye too.
    pub fn close(&mut self) -> Result<(), LinkError> {
        for i in 0..self.peers.len() {
            if self.peers[i].alive {
                self.peers[i].farewell();
                self.drop_peer(i)?;
            }
        }
        Ok(())
    }

    /// Why none of the receivers `to` can be sent to (they are all gone), if so.
    fn all_gone(&self, to: &[usize]) -> Option<LinkError> {
        if to.is_empty()
            || to
                .iter()
                .any(|i| self.peers.get(*i).is_some_and(|p| p.alive))
        {
            return None;
        }
        // Sends to receivers this end cut off itself go nowhere, as before: why they were cut
        // off is in `misbehaved`.
        let named: Vec<&Peer> = to.iter().filter_map(|i| self.peers.get(*i)).collect();
        if !named.is_empty() && named.iter().all(|p| p.cut_off) {
            return None;
        }
        let died = named.iter().any(|p| !p.bye && !p.cut_off);
        Some(LinkError::PeerGone {
            during: if died {
                "without a goodbye (killed, crashed or failed) before this send"
            } else {
                "before this send: no receiver named is connected"
            },
        })
    }

    /// The receivers of `to` still alive.
    fn live(&self, to: &[usize]) -> Vec<usize> {
        to.iter()
            .copied()
            .filter(|i| self.peers.get(*i).is_some_and(|p| p.alive))
            .collect()
    }

    /// Send `fbuf` to the receivers `to`. If every one of them is gone (and `to` names one),
    /// the fbuf goes back to the free lists and the error says how they went.
    pub fn send(&mut self, fbuf: Fbuf, to: &[usize]) -> Result<FbufRef, LinkError> {
        if let Some(e) = self.all_gone(to) {
            self.originator.free(fbuf)?;
            return Err(e);
        }
        let live = self.live(to);
        let r = self.originator.send(fbuf, live.len())?;
        for i in live {
            self.sync_chunks(i)?;
            if self.peers[i].alive && self.peers[i].post(SEND, r) {
                self.peers[i].held.add(r);
            } else {
                // Gone meanwhile, or failed: it will never free this one.
                self.originator.freed(r)?;
                self.fail_peer(i)?;
            }
        }
        Ok(r)
    }

    /// Send the aggregate message `msg` to the receivers `to` as one reference, its root
    /// (integrated buffer management, §3.2.3). `parts` are the fbufs of this path that hold its
    /// nodes and its data, every one of them: they are sent with it (on a non-volatile path they
    /// turn read-only) and come back together when every receiver has freed the message.
    /// Receivers read the message in place, so the path must be cached (mapped whole).
    pub fn send_msg(
        &mut self,
        msg: Msg,
        parts: Vec<Fbuf>,
        to: &[usize],
    ) -> Result<FbufRef, LinkError> {
        let info = self.originator.info();
        let root = FbufRef {
            addr: msg.root,
            len: msg.len,
        };
        // A refused message gives its fbufs back to the free lists: nothing is lost.
        let fail = |end: &mut OriginatorEnd, parts: Vec<Fbuf>, why: &str| {
            for f in parts {
                end.originator.free(f)?;
            }
            Err(LinkError::Fbuf(FbufError::BadRef {
                what: "send an aggregate",
                addr: msg.root,
                len: msg.len,
                expected: match why {
                    "cached" => "a cached path (receivers read aggregates in place)",
                    "root" => "a root node inside one of the parts",
                    _ => "a root not already out in another message",
                },
            }))
        };
        if !info.variant.cached {
            return fail(self, parts, "cached");
        }
        if !parts
            .iter()
            .any(|f| msg.root >= f.addr() && msg.root + NODE_BYTES <= f.addr() + f.len())
        {
            return fail(self, parts, "root");
        }
        if self.msgs.contains_key(&msg.root) {
            return fail(self, parts, "busy");
        }
        if let Some(e) = self.all_gone(to) {
            for f in parts {
                self.originator.free(f)?;
            }
            return Err(e);
        }
        let live = self.live(to);
        let mut refs = Vec::with_capacity(parts.len());
        for f in parts {
            refs.push(self.originator.send(f, live.len())?);
        }
        if live.is_empty() {
            return Ok(root);
        }
        self.msgs.insert(
            msg.root,
            SentMsg {
                root,
                parts: refs,
                holders: live.len(),
            },
        );
        for i in live {
            self.sync_chunks(i)?;
            if self.peers[i].alive && self.peers[i].post(MSG, root) {
                self.peers[i].held.add(root);
            } else {
                self.release(root)?;
                self.fail_peer(i)?;
            }
        }
        Ok(root)
    }

    /// One holder gave `r` back: an fbuf, or an aggregate message with all its parts.
    fn release(&mut self, r: FbufRef) -> Result<(), LinkError> {
        match self.msgs.get_mut(&r.addr) {
            Some(m) if m.root == r => {
                for p in &m.parts {
                    self.originator.freed(*p)?;
                }
                m.holders -= 1;
                if m.holders == 0 {
                    self.msgs.remove(&r.addr);
                }
            }
            _ => self.originator.freed(r)?,
        }
        Ok(())
    }

    /// Aggregate messages sent and not yet freed by all their receivers.
    pub fn msgs_outstanding(&self) -> usize {
        self.msgs.len()
    }

    fn drop_peer(&mut self, i: usize) -> Result<(), LinkError> {
        let p = &mut self.peers[i];
        if !p.alive {
            return Ok(());
        }
        p.cut();
        let downstream = std::mem::take(&mut p.downstream);
        if !p.bye && !downstream.is_empty() {
            // A forwarder gone without a goodbye: what it held may be mapped downstream, in
            // processes this end has no link to. Reused now, a receiver there could read
            // another message's bytes in an fbuf it still holds.
            let refs = p.held.drain();
            self.quarantine.push(Quarantined { downstream, refs });
            return self.release_quarantined();
        }
        for r in p.held.drain() {
            self.release(r)?;
            self.released_for_dead += 1;
        }
        Ok(())
    }

    /// Receiver `i` failed a send (or a flush of its backlog): it is dropped like a receiver
    /// that died, and where that was its doing (it stopped reading, spoiled its ring) the
    /// reason is kept in [`OriginatorEnd::misbehaved`].
    fn fail_peer(&mut self, i: usize) -> Result<(), LinkError> {
        if let Some(why) = self.peers[i].failed.take() {
            self.misbehaved.push(format!("receiver {i}: {why}"));
            self.peers[i].cut_off = true;
        }
        self.drop_peer(i)
    }

    /// Send what waits for each receiver as far as its socket takes it now.
    fn flush_all(&mut self) -> Result<(), LinkError> {
        for i in 0..self.peers.len() {
            if self.peers[i].alive && !self.peers[i].flush() {
                self.fail_peer(i)?;
            }
        }
        Ok(())
    }

    /// Take in what receiver `i` sent back (from the socket too, with `socket`); how much.
    fn collect(&mut self, i: usize, socket: bool) -> Result<usize, LinkError> {
        let mut got = Vec::new();
        self.peers[i].collect(socket, &mut got);
        let n = got.len();
        for next in got {
            if !self.peers[i].alive {
                break;
            }
            self.handle(i, next)?;
        }
        Ok(n)
    }

    /// Process what the receivers sent (deallocation notices, requests to secure), and notice
    /// receivers that are gone. With `block`, wait until at least one thing happened. Notices
    /// come from the rings without a system call; the socket is read when a receiver posted
    /// there, or when this end slept on it.
    pub fn poll(&mut self, block: bool) -> Result<usize, LinkError> {
        let mut done = 0;
        let mut spun = None;
        loop {
            if !self.quarantine.is_empty() {
                self.release_quarantined()?;
            }
            self.flush_all()?;
            for i in 0..self.peers.len() {
                if self.peers[i].alive {
                    done += self.collect(i, false)?;
                }
            }
            if done > 0 || !block || self.receivers_alive() == 0 {
                // Notices may have retired chunks (past the budget): the receivers hear of it now.
                self.sync_all()?;
                return Ok(done);
            }
            // Look again for a while before sleeping: a wake-up costs more than a few looks
            // when the receiver is about to answer.
            if spun.is_none_or(|t: Instant| t.elapsed() < self.spin) {
                spun.get_or_insert_with(Instant::now);
                while !self.peers.iter().any(|p| p.alive && p.pending())
                    && spun.is_some_and(|t| t.elapsed() < self.spin)
                {
                    std::thread::yield_now();
                }
                continue;
            }
            done += self.wait()?;
        }
    }

    /// Act on what receiver `i` sent. A receiver that breaks the protocol is cut off and its
    /// references released: it cannot free what it does not hold, nor stop the others.
    fn handle(&mut self, i: usize, next: Result<Next, LinkError>) -> Result<(), LinkError> {
        let bad = match next {
            Ok(Next::Frame(FREED, r)) if self.peers[i].held.take(r) => {
                self.release(r)?;
                None
            }
            Ok(Next::Frame(FREED, r)) => Some(format!(
                "freed [{:#x}, +{}), which it does not hold",
                r.addr, r.len
            )),
            Ok(Next::Frame(SECURE, r)) if self.peers[i].held.holds(r) => {
                // An aggregate message is secured whole: every fbuf of its nodes and data.
                match self.msgs.get(&r.addr).filter(|m| m.root == r) {
                    Some(m) => {
                        for part in &m.parts {
                            self.originator.secure(*part)?;
                        }
                    }
                    None => self.originator.secure(r)?,
                }
                if !self.peers[i].mail(&frame(SECURED, r)) {
                    return self.fail_peer(i);
                }
                None
            }
            Ok(Next::Frame(SECURE, r)) => Some(format!(
                "asked to secure [{:#x}, +{}), which it does not hold",
                r.addr, r.len
            )),
            Ok(Next::Frame(WAKE, _)) | Ok(Next::Empty) => None,
            Ok(Next::Frame(DOWNSTREAM, r)) if self.peers[i].downstream.len() < MAX_DOWNSTREAM => {
                // A process that has already ended (or never was) reads nothing: no pidfd.
                // Nor does this process count: it owns the memory.
                let pid = i32::try_from(r.addr)
                    .ok()
                    .and_then(rustix::process::Pid::from_raw)
                    .filter(|pid| *pid != rustix::process::getpid());
                if let Some(fd) = pid.and_then(|pid| {
                    rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty()).ok()
                }) {
                    self.peers[i].downstream.push(fd);
                }
                None
            }
            Ok(Next::Frame(DOWNSTREAM, _)) => Some(format!(
                "announced more than {MAX_DOWNSTREAM} processes downstream"
            )),
            Ok(Next::Frame(BYE, _)) => {
                // Closed in order: what it still held is released as for a receiver gone.
                self.peers[i].bye = true;
                self.drop_peer(i)?;
                None
            }
            Ok(Next::Frame(k, _)) => Some(format!("sent frame kind {k}")),
            Ok(Next::Closed) | Err(LinkError::Io(_)) => {
                self.drop_peer(i)?;
                None
            }
            Err(e) => Some(e.to_string()),
        };
        if let Some(why) = bad {
            self.misbehaved.push(format!("receiver {i}: {why}"));
            self.peers[i].cut_off = true;
            self.drop_peer(i)?;
        }
        Ok(())
    }

    /// Sleep until a receiver sends something or its process ends, or the socket of one with a
    /// backlog takes more (then it gets it); what was taken in.
    fn wait(&mut self) -> Result<usize, LinkError> {
        let live: Vec<usize> = (0..self.peers.len())
            .filter(|i| self.peers[*i].alive)
            .collect();
        for i in &live {
            self.peers[*i].ch.rings.announce_sleep(Dir::Frees);
        }
        let awake = |end: &mut OriginatorEnd| {
            for i in &live {
                end.peers[*i].ch.rings.awake(Dir::Frees);
            }
        };
        // What came while announcing is taken without sleeping.
        if live.iter().any(|i| self.peers[*i].pending()) {
            awake(self);
            return Ok(0);
        }
        let ends: Vec<_> = live
            .iter()
            .map(|i| {
                let p = &self.peers[*i];
                (&p.ch.sock, p.pidfd.as_ref(), !p.ch.out.is_empty())
            })
            .collect();
        let polled = poll_ends(&[], &ends, None)?;
        let readable: Vec<usize> = polled.readable.iter().map(|k| live[*k]).collect();
        let writable: Vec<usize> = polled.writable.iter().map(|k| live[*k]).collect();
        let ended: Vec<usize> = polled.ended.iter().map(|k| live[*k]).collect();
        awake(self);
        for &i in &writable {
            if self.peers[i].alive && !self.peers[i].flush() {
                self.fail_peer(i)?;
            }
        }
        let mut done = 0;
        for &i in &readable {
            if self.peers[i].alive {
                done += self.collect(i, true)?;
            }
        }
        for &i in &ended {
            // What it sent before it ended still counts (its last notices).
            if self.peers[i].alive {
                self.collect(i, true)?;
            }
            self.drop_peer(i)?;
            done += 1;
        }
        Ok(done)
    }

    /// An fbuf of `len` bytes, waiting for deallocation notices while the path's quota is used
    /// up (fails if it stays so with no receiver left to free anything).
    pub fn alloc_waiting(&mut self, len: usize) -> Result<Fbuf, LinkError> {
        self.flush_all()?;
        // Notices that came back refill the free lists (LIFO): take them in first, so that the
        // fbufs used last, warm in the caches and TLBs of both sides, are used again. For a
        // small fbuf, whose reuse saves little, only when none is free; for a large one always.
        if (len >= LARGE || !self.originator.has_free(len)) && self.originator.outstanding() > 0 {
            self.poll(false)?;
        }
        loop {
            match self.originator.alloc(len) {
                Ok(f) => return Ok(f),
                Err(FbufError::Quota { .. })
                    if self.originator.outstanding() > 0 && self.receivers_alive() > 0 =>
                {
                    self.poll(true)?;
                }
                Err(FbufError::Quota { .. }) if self.quarantined() > 0 => {
                    return Err(LinkError::PeerGone {
                        during: "(a forwarder, without a goodbye): what it held waits, unused, until the processes it forwarded to end",
                    });
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// The links close in order (a goodbye to each receiver still connected), unless the end goes
/// in a panic: that is no orderly close, and the receivers say so.
impl Drop for OriginatorEnd {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            for p in &mut self.peers {
                p.farewell();
            }
        }
    }
}
