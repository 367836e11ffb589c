//! Aggregate objects (paper 001, §3.1 Figure 2 and §3.2.3): x-kernel messages stored in fbufs.
//!
//! A message is a DAG of 32-byte nodes in the fbuf region:
//!
//! | kind | word 1 | word 2 | word 3 |
//! |---|---|---|---|
//! | leaf | data address | length | - |
//! | join | left node | right node | length |
//! | slice | child node | offset into the child | length |
//!
//! Word 0 is a tag (magic and kind). Addresses are absolute: the region sits at the same address
//! in every process, so no pointer is translated (integrated buffer management: a send passes
//! the root reference alone). [`Builder`] makes messages on the originator's side with the
//! x-kernel operations (join, split, clip, header prepend), never copying data.
//!
//! The receiver cannot trust any of it: a volatile fbuf's originator may rewrite nodes while the
//! receiver walks them, and a malicious one may plant cycles, references outside the region or
//! absurd lengths. [`walk`] therefore reads every word through [`RegionRead`] (bounds-checked,
//! word-atomic), treats whatever it cannot read or make sense of as *no data* (the paper's answer
//! to a reference the receiver may not access), cuts cycles, and bounds its work by [`Limits`]:
//! it always ends, never reads outside what this process may read, and reports what it found
//! wrong in [`Anomalies`].
//!
//! [`Units`] then reads application data units (fixed-size records or delimited lines) across
//! fragment boundaries, returning a unit in place when it lies within one fragment and copying
//! only the units that straddle fragments (§5.2).

use crate::region::{RegionRead, RegionWrite, Span};
use std::sync::atomic::Ordering;

/// Size of a node in bytes.
pub const NODE_BYTES: u64 = 32;
const MAGIC: u64 = 0x7a63_6167_0000_0000; // "zcag"
const MAGIC_MASK: u64 = 0xffff_ffff_0000_0000;
const LEAF: u64 = 1;
const JOIN: u64 = 2;
const SLICE: u64 = 3;

/// A message: its root node and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Msg {
    /// Address of the root node.
    pub root: u64,
    /// Length in bytes.
    pub len: u64,
}

/// Why the originator could not build a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AggregateError {
    /// The node allocator has no room left.
    #[error("no room for another aggregate node (the path's fbufs for nodes are exhausted)")]
    NoNodeSpace,
    /// A node could not be written (the address is not writable here).
    #[error("cannot write an aggregate node at {addr:#x}: not in a writable fbuf of this process")]
    NotWritable {
        /// The node's address.
        addr: u64,
    },
    /// Leaf data outside what this process can read.
    #[error("leaf data [{addr:#x}, +{len}) is not in the fbuf region")]
    DataOutsideRegion {
        /// Start.
        addr: u64,
        /// Length.
        len: u64,
    },
    /// A split, clip or slice beyond the message's end.
    #[error("{op} at {at} is beyond the message's {len} bytes")]
    OutOfRange {
        /// The operation.
        op: &'static str,
        /// Where it was asked for.
        at: u64,
        /// The message's length.
        len: u64,
    },
}

/// Where new nodes go: 32-byte, 8-aligned slots in the originator's own (writable) fbufs.
pub trait NodeAlloc {
    /// A fresh slot, or `None` when there is no room.
    fn alloc_node(&mut self) -> Option<u64>;
}

/// Node slots handed out one after another from `[next, end)`.
#[derive(Debug, Clone)]
pub struct BumpNodes {
    next: u64,
    end: u64,
}

impl BumpNodes {
    /// Slots in `[start, start + len)`; `start` must be 8-aligned.
    pub fn new(start: u64, len: u64) -> BumpNodes {
        assert_eq!(start % 8, 0, "node space must be 8-aligned");
        BumpNodes {
            next: start,
            end: start.saturating_add(len),
        }
    }
}

impl NodeAlloc for BumpNodes {
    fn alloc_node(&mut self) -> Option<u64> {
        let n = self.next;
        if n.checked_add(NODE_BYTES)? > self.end {
            return None;
        }
        self.next += NODE_BYTES;
        Some(n)
    }
}

/// Builds messages in the region (the originator's side). Data is never copied: leaves refer to
/// bytes already in fbufs, and every operation makes new nodes over the old ones (messages are
/// immutable, as x-kernel messages are).
pub struct Builder<'r, R: RegionWrite, A: NodeAlloc> {
    region: &'r R,
    alloc: A,
}

impl<'r, R: RegionWrite, A: NodeAlloc> Builder<'r, R, A> {
    /// A builder writing nodes into `region` at the slots `alloc` gives.
    pub fn new(region: &'r R, alloc: A) -> Self {
        Builder { region, alloc }
    }

    fn node(&mut self, kind: u64, w1: u64, w2: u64, w3: u64) -> Result<u64, AggregateError> {
        let at = self.alloc.alloc_node().ok_or(AggregateError::NoNodeSpace)?;
        if !self.region.write_words(at, &[MAGIC | kind, w1, w2, w3]) {
            return Err(AggregateError::NotWritable { addr: at });
        }
        Ok(at)
    }

    /// A message holding the `len` bytes at `data` (already in an fbuf).
    pub fn leaf(&mut self, data: u64, len: u64) -> Result<Msg, AggregateError> {
        if !self.region.readable(data, len) {
            return Err(AggregateError::DataOutsideRegion { addr: data, len });
        }
        Ok(Msg {
            root: self.node(LEAF, data, len, 0)?,
            len,
        })
    }

    /// `a` followed by `b`.
    pub fn join(&mut self, a: Msg, b: Msg) -> Result<Msg, AggregateError> {
        let len = a.len.checked_add(b.len).ok_or(AggregateError::OutOfRange {
            op: "join",
            at: b.len,
            len: a.len,
        })?;
        Ok(Msg {
            root: self.node(JOIN, a.root, b.root, len)?,
            len,
        })
    }

    /// The `len` bytes of `m` from `offset`.
    pub fn slice(&mut self, m: Msg, offset: u64, len: u64) -> Result<Msg, AggregateError> {
        if offset.checked_add(len).is_none_or(|e| e > m.len) {
            return Err(AggregateError::OutOfRange {
                op: "slice",
                at: offset.saturating_add(len),
                len: m.len,
            });
        }
        Ok(Msg {
            root: self.node(SLICE, m.root, offset, len)?,
            len,
        })
    }

    /// The first `at` bytes of `m` and the rest (the x-kernel's split).
    pub fn split(&mut self, m: Msg, at: u64) -> Result<(Msg, Msg), AggregateError> {
        within(m, "split", at)?;
        Ok((self.slice(m, 0, at)?, self.slice(m, at, m.len - at)?))
    }

    /// `m` without its first `n` bytes (a protocol stripping its header).
    pub fn clip_front(&mut self, m: Msg, n: u64) -> Result<Msg, AggregateError> {
        within(m, "clip", n)?;
        self.slice(m, n, m.len - n)
    }

    /// `m` without its last `n` bytes (a trailer or padding).
    pub fn clip_back(&mut self, m: Msg, n: u64) -> Result<Msg, AggregateError> {
        within(m, "clip", n)?;
        self.slice(m, 0, m.len - n)
    }

    /// `header` (already in an fbuf) in front of `m` (a protocol adding its header).
    pub fn prepend(&mut self, header: Msg, m: Msg) -> Result<Msg, AggregateError> {
        self.join(header, m)
    }
}

/// `at` lies within `m` (at its end at most), or [`AggregateError::OutOfRange`] for `op`.
fn within(m: Msg, op: &'static str, at: u64) -> Result<(), AggregateError> {
    if at > m.len {
        return Err(AggregateError::OutOfRange { op, at, len: m.len });
    }
    Ok(())
}

/// Bounds on a receiver's walk, so that no message, however malformed, makes it run long.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Node visits at most (a DAG that shares nodes may be exponentially larger as a tree).
    pub max_visits: usize,
    /// Nesting depth at most.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_visits: 1 << 16,
            max_depth: 256,
        }
    }
}

/// What a walk found wrong (all of it read as "no data").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Anomalies {
    /// References this process cannot read, or that are misaligned or lack a node's tag.
    pub invalid_refs: u64,
    /// Leaf data this process cannot read.
    pub bad_data: u64,
    /// References back to a node on the current path (cycles), cut.
    pub cycles: u64,
    /// Depth beyond [`Limits::max_depth`], cut.
    pub too_deep: u64,
    /// The walk stopped at [`Limits::max_visits`].
    pub truncated: bool,
}

impl Anomalies {
    /// Whether the message was well formed.
    pub fn is_clean(&self) -> bool {
        *self == Anomalies::default()
    }
}

/// A contiguous piece of a message's data in the region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment {
    /// Start address.
    pub addr: u64,
    /// Length.
    pub len: u64,
}

/// A receiver's view of a message: its fragments in order, and what was wrong with it.
#[derive(Debug, Clone, Default)]
pub struct Walk {
    /// The data, in order; every fragment was readable when the walk checked it.
    pub fragments: Vec<Fragment>,
    /// What the walk found wrong.
    pub anomalies: Anomalies,
}

impl Walk {
    /// Total length of the fragments.
    pub fn len(&self) -> u64 {
        self.fragments.iter().map(|f| f.len).sum()
    }

    /// Whether the message holds no data.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The message's bytes, copied out (fragments that became unreadable meanwhile are skipped).
    pub fn to_vec(&self, region: &impl RegionRead) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len().min(1 << 30) as usize);
        for f in &self.fragments {
            let start = v.len();
            v.resize(start + f.len as usize, 0);
            if !region.read_bytes(f.addr, &mut v[start..]) {
                v.truncate(start);
            }
        }
        v
    }
}

struct Walker<'r, R: RegionRead> {
    region: &'r R,
    /// The mapping the last node read lies in: the nodes of a message, written in one fbuf,
    /// are each checked against it alone, not looked up anew.
    span: Option<Span<'r>>,
    limits: Limits,
    visits: usize,
    path: Vec<u64>,
    out: Walk,
}

/// A node as read (one snapshot of its words).
#[derive(Clone, Copy)]
struct Node {
    kind: u64,
    w: [u64; 3],
}

impl Node {
    /// The length the node claims.
    fn len(&self) -> u64 {
        match self.kind {
            LEAF => self.w[1],
            _ => self.w[2],
        }
    }
}

impl<R: RegionRead> Walker<'_, R> {
    /// The node at `at`, its four words read with one check of the whole node (none where any
    /// of it cannot be read here, or it lacks a node's tag).
    #[inline(always)]
    fn read_node(&mut self, at: u64) -> Option<Node> {
        if at % 8 != 0 {
            return None;
        }
        let ws = match self.span.and_then(|s| s.array::<4>(at)) {
            Some(ws) => ws,
            None => {
                // Another mapping than the last node's, or none: look it up, else ask the
                // region for these words alone.
                self.span = self.region.span(at);
                match self.span.and_then(|s| s.array::<4>(at)) {
                    Some(ws) => ws,
                    None => self.region.words(at, NODE_BYTES)?.first_chunk::<4>()?,
                }
            }
        };
        let [tag, w1, w2, w3] = ws.each_ref().map(|w| w.load(Ordering::Relaxed));
        if tag & MAGIC_MASK != MAGIC {
            return None;
        }
        let kind = tag & !MAGIC_MASK;
        if !(LEAF..=SLICE).contains(&kind) {
            return None;
        }
        Some(Node {
            kind,
            w: [w1, w2, w3],
        })
    }

    /// Emit bytes `[skip, skip + take)` of the node at `at`.
    fn visit(&mut self, at: u64, skip: u64, take: u64) {
        self.visit_read(at, None, skip, take)
    }

    /// As [`Walker::visit`], with the node's snapshot when the caller has read it already (a
    /// join reads its left child for its length): the split and the walk below then see the
    /// same words, and the node is read once.
    fn visit_read(&mut self, at: u64, read: Option<Node>, skip: u64, take: u64) {
        if take == 0 || self.out.anomalies.truncated {
            return;
        }
        if self.visits >= self.limits.max_visits {
            self.out.anomalies.truncated = true;
            return;
        }
        self.visits += 1;
        if self.path.contains(&at) {
            self.out.anomalies.cycles += 1;
            return;
        }
        if self.path.len() >= self.limits.max_depth {
            self.out.anomalies.too_deep += 1;
            return;
        }
        let Some(node) = read.or_else(|| self.read_node(at)) else {
            self.out.anomalies.invalid_refs += 1;
            return;
        };
        self.path.push(at);
        match node.kind {
            LEAF => {
                let [data, len, _] = node.w;
                let n = take.min(len.saturating_sub(skip));
                if n > 0 {
                    match data.checked_add(skip) {
                        Some(a) if self.region.readable(a, n) => {
                            self.out.fragments.push(Fragment { addr: a, len: n })
                        }
                        _ => self.out.anomalies.bad_data += 1,
                    }
                }
            }
            JOIN => {
                let [left, right, _] = node.w;
                let l = self.read_node(left);
                let left_len = match l {
                    Some(n) => n.len(),
                    None => {
                        // Counted here: with no length, the left side is never visited.
                        self.out.anomalies.invalid_refs += 1;
                        0
                    }
                };
                if skip < left_len {
                    let n = take.min(left_len - skip);
                    self.visit_read(left, l, skip, n);
                    self.visit(right, 0, take - n);
                } else {
                    self.visit(right, skip - left_len, take);
                }
            }
            _ => {
                let [child, offset, len] = node.w;
                let n = take.min(len.saturating_sub(skip));
                if let Some(s) = offset.checked_add(skip) {
                    self.visit(child, s, n);
                } else {
                    self.out.anomalies.invalid_refs += 1;
                }
            }
        }
        self.path.pop();
    }
}

/// Walk the message rooted at `root` as a receiver: its fragments, checked, in order.
///
/// At most `len` bytes are taken (the length the sender announced; `u64::MAX` to trust the
/// root's own claim), whatever the nodes say.
pub fn walk(region: &impl RegionRead, root: u64, len: u64, limits: Limits) -> Walk {
    let mut out = Walk::default();
    walk_into(region, root, len, limits, &mut out);
    out
}

/// [`walk`] into `out`, whose fragment list is cleared and reused (a receiver walking message
/// after message allocates nothing once it has walked the largest).
///
/// Nodes are read through the last mapping found ([`RegionRead::span`]): the nodes of a
/// message, written in one fbuf, are each checked against that mapping alone, not looked up
/// anew.
pub fn walk_into(region: &impl RegionRead, root: u64, len: u64, limits: Limits, out: &mut Walk) {
    let mut fragments = std::mem::take(&mut out.fragments);
    fragments.clear();
    let mut w = Walker {
        region,
        span: None,
        limits,
        visits: 0,
        path: Vec::with_capacity(limits.max_depth.min(32)),
        out: Walk {
            fragments,
            anomalies: Anomalies::default(),
        },
    };
    let node = w.read_node(root);
    let claimed = node.map_or(0, |n| n.len());
    w.visit_read(root, node, 0, len.min(claimed));
    if node.is_none() {
        w.out.anomalies.invalid_refs += 1;
    }
    *out = w.out;
}

/// How application data units are delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Separator {
    /// Records of this many bytes (the last may be shorter).
    Fixed(u64),
    /// Units ending with this byte, included (lines: `b'\n'`); the last may lack it.
    Byte(u8),
}

/// One application data unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unit {
    /// Lies within one fragment: returned in place, not copied.
    InPlace(Fragment),
    /// Straddles fragments: its bytes gathered into a buffer (the only copy the reader makes).
    Copied(Vec<u8>),
}

impl Unit {
    /// Its length.
    pub fn len(&self) -> u64 {
        match self {
            Unit::InPlace(f) => f.len,
            Unit::Copied(v) => v.len() as u64,
        }
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes.
    pub fn to_vec(&self, region: &impl RegionRead) -> Vec<u8> {
        match self {
            Unit::InPlace(f) => {
                let mut v = vec![0u8; f.len as usize];
                if !region.read_bytes(f.addr, &mut v) {
                    v.clear();
                }
                v
            }
            Unit::Copied(v) => v.clone(),
        }
    }
}

/// A generator of application data units over a walked message (paper 001, §5.2).
pub struct Units<'r, R: RegionRead> {
    region: &'r R,
    frags: Vec<Fragment>,
    idx: usize,
    off: u64,
    sep: Separator,
    /// Bytes copied so far (those of units that straddle fragments).
    pub copied_bytes: u64,
}

impl<'r, R: RegionRead> Units<'r, R> {
    /// Units of `walk`'s data delimited by `sep`. A zero-length fixed record is refused.
    pub fn new(region: &'r R, walk: &Walk, sep: Separator) -> Option<Self> {
        if sep == Separator::Fixed(0) {
            return None;
        }
        Some(Units {
            region,
            frags: walk
                .fragments
                .iter()
                .copied()
                .filter(|f| f.len > 0)
                .collect(),
            idx: 0,
            off: 0,
            sep,
            copied_bytes: 0,
        })
    }

    /// Where the unit starting at the cursor ends within the current fragment, and whether it
    /// is complete there.
    fn end_in_fragment(&self, f: Fragment) -> (u64, bool) {
        let rest = f.len - self.off;
        match self.sep {
            Separator::Fixed(n) => (rest.min(n), rest >= n),
            Separator::Byte(b) => {
                let mut buf = [0u8; 256];
                let mut pos = 0;
                while pos < rest {
                    let n = (rest - pos).min(buf.len() as u64) as usize;
                    if !self
                        .region
                        .read_bytes(f.addr + self.off + pos, &mut buf[..n])
                    {
                        return (rest, false);
                    }
                    if let Some(i) = buf[..n].iter().position(|x| *x == b) {
                        return (pos + i as u64 + 1, true);
                    }
                    pos += n as u64;
                }
                (rest, false)
            }
        }
    }
}

impl<R: RegionRead> Iterator for Units<'_, R> {
    type Item = Unit;

    fn next(&mut self) -> Option<Unit> {
        let f = *self.frags.get(self.idx)?;
        let (n, complete) = self.end_in_fragment(f);
        let start = Fragment {
            addr: f.addr + self.off,
            len: n,
        };
        self.off += n;
        if self.off == f.len {
            self.idx += 1;
            self.off = 0;
        }
        if complete || self.idx >= self.frags.len() {
            return Some(Unit::InPlace(start));
        }
        // The unit goes on into the next fragments: gather it.
        let mut v = vec![0u8; n as usize];
        if !self.region.read_bytes(start.addr, &mut v) {
            v.clear();
        }
        while let Some(&g) = self.frags.get(self.idx) {
            let (m, done) = self.end_in_fragment(g);
            let piece = match self.sep {
                Separator::Fixed(k) => m.min(k - v.len() as u64),
                Separator::Byte(_) => m,
            };
            let at = v.len();
            v.resize(at + piece as usize, 0);
            if !self.region.read_bytes(g.addr + self.off, &mut v[at..]) {
                v.truncate(at);
            }
            self.off += piece;
            if self.off == g.len {
                self.idx += 1;
                self.off = 0;
            }
            let full = match self.sep {
                Separator::Fixed(k) => v.len() as u64 == k,
                Separator::Byte(_) => done,
            };
            if full {
                break;
            }
        }
        self.copied_bytes += v.len() as u64;
        Some(Unit::Copied(v))
    }
}
