//! The stack's messages as x-kernel aggregates (paper 001, §3.2.3): UDP prepends its header to
//! the datagram, IP cuts the result into fragments (slices) and prepends a header to each, and
//! the fragments travel joined as one message; the receiving side walks the aggregate and
//! reassembles the datagram fragment by fragment. No byte of data is copied: the headers are
//! written into the protocol domain's own fbufs, and the nodes refer to the application's.

use super::proto::{Fragments, IP_HDR, IpHdr, Reassembly, Record, UDP_HDR, parse_udp, udp_header};
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use zcio_fbufs::aggregate::{
    AggregateError, Builder, BumpNodes, Fragment, Limits, Msg, NODE_BYTES, NodeAlloc, Walk,
    walk_into,
};
use zcio_fbufs::region::{LastSpan, RegionRead, RegionWrite, Span};

/// Two regions seen as one: `own`, written here (the protocol domain's fbufs, holding the
/// headers and the nodes), and `other`, only read (the application's data path).
pub struct Both<'a, W, R> {
    /// Written and read.
    pub own: &'a W,
    /// Read.
    pub other: &'a R,
}

impl<W: RegionRead, R: RegionRead> RegionRead for Both<'_, W, R> {
    fn words(&self, addr: u64, len: u64) -> Option<&[AtomicU64]> {
        self.own
            .words(addr, len)
            .or_else(|| self.other.words(addr, len))
    }
    fn readable(&self, addr: u64, len: u64) -> bool {
        self.own.readable(addr, len) || self.other.readable(addr, len)
    }
    fn span(&self, addr: u64) -> Option<Span<'_>> {
        self.own.span(addr).or_else(|| self.other.span(addr))
    }
}

impl<W: RegionWrite, R: RegionRead> RegionWrite for Both<'_, W, R> {
    fn words_mut(&self, addr: u64, len: u64) -> Option<&[AtomicU64]> {
        self.own.words_mut(addr, len)
    }
}

/// Nodes a datagram's aggregate takes: the UDP header's leaf, the data's leaf and their join;
/// per fragment a slice, a header leaf and their join; the joins of the fragments, one fewer.
fn nodes(frags: Fragments) -> usize {
    2 + 4 * frags.count()
}

/// Bytes of a protocol domain's fbuf for one datagram's headers and nodes: the UDP header,
/// an IP header per fragment (in 24-byte slots) and the nodes.
pub fn space(frags: Fragments) -> usize {
    UDP_HDR + 24 * frags.count() + NODE_BYTES as usize * nodes(frags)
}

/// Where [`build`] puts the message's root for a datagram fragmented as `frags` when it
/// builds at `at`: the last node it makes.
pub fn root_at(at: u64, frags: Fragments) -> u64 {
    at + (UDP_HDR + 24 * frags.count()) as u64 + NODE_BYTES * (nodes(frags) as u64 - 1)
}

/// One fbuf's words, looked up once: where a datagram's headers and nodes are written. Writes
/// land inside it or are refused; reads inside it are checked against it alone, reads
/// elsewhere (the data) go to the region.
struct Window<'a, R> {
    span: Span<'a>,
    region: &'a R,
}

impl<R: RegionRead> RegionRead for Window<'_, R> {
    fn words(&self, addr: u64, len: u64) -> Option<&[AtomicU64]> {
        self.span
            .words(addr, len)
            .or_else(|| self.region.words(addr, len))
    }
    fn readable(&self, addr: u64, len: u64) -> bool {
        self.span.holds(addr, len) || self.region.readable(addr, len)
    }
    fn span(&self, addr: u64) -> Option<Span<'_>> {
        self.region.span(addr)
    }
}

impl<R: RegionRead> RegionWrite for Window<'_, R> {
    fn words_mut(&self, addr: u64, len: u64) -> Option<&[AtomicU64]> {
        self.span.words(addr, len)
    }
}

/// Build datagram `id`'s message at `at` (8-aligned, [`space`] bytes writable in `region`):
/// the `frags.payload - 8` data bytes at `data` with the UDP header prepended, cut into
/// fragments each with its IP header prepended, joined in a balanced tree (so that the walk's
/// depth grows with the logarithm of the fragment count). The [`space`] bytes are looked up
/// once, and every header and node written is checked against them alone.
pub fn build<R: RegionWrite>(
    region: &R,
    at: u64,
    data: u64,
    frags: Fragments,
    id: u32,
) -> Result<Msg, AggregateError> {
    let n = frags.count();
    let unwritable = AggregateError::NotWritable { addr: at };
    let Some(words) = region.words_mut(at, space(frags) as u64) else {
        return Err(unwritable);
    };
    let region = &Window {
        span: Span::new(at, words),
        region,
    };
    if !region.write_bytes(at, &udp_header(frags.payload - UDP_HDR)) {
        return Err(unwritable);
    }
    for k in 0..n {
        if !region.write_bytes(at + 8 + 24 * k as u64, &frags.header(k, id).bytes()) {
            return Err(unwritable);
        }
    }
    let nodes_at = at + 8 + 24 * n as u64;
    let alloc = BumpNodes::new(nodes_at, NODE_BYTES * nodes(frags) as u64);
    let mut b = Builder::new(region, alloc);
    let udp = b.leaf(at, UDP_HDR as u64)?;
    let d = b.leaf(data, (frags.payload - UDP_HDR) as u64)?;
    let payload = b.prepend(udp, d)?;
    tree(&mut b, 0, n, &|b, k| {
        let (off, len) = frags.part(k);
        let s = b.slice(payload, off as u64, len as u64)?;
        let h = b.leaf(at + 8 + 24 * k as u64, IP_HDR as u64)?;
        b.prepend(h, s)
    })
}

type Frag<'f, R, A> = dyn Fn(&mut Builder<'_, R, A>, usize) -> Result<Msg, AggregateError> + 'f;

/// Fragments `lo..hi` made by `frag`, joined in a balanced tree.
fn tree<R: RegionWrite, A: NodeAlloc>(
    b: &mut Builder<'_, R, A>,
    lo: usize,
    hi: usize,
    frag: &Frag<'_, R, A>,
) -> Result<Msg, AggregateError> {
    if hi - lo == 1 {
        return frag(b, lo);
    }
    let mid = lo + (hi - lo) / 2;
    let l = tree(b, lo, mid, frag)?;
    let r = tree(b, mid, hi, frag)?;
    b.join(l, r)
}

/// A reader over a walk's pieces, in order.
struct Cursor<'w> {
    pieces: &'w [Fragment],
    i: usize,
    at: u64,
}

impl Cursor<'_> {
    /// The next `n` bytes as one range, if they lie in one piece.
    fn span(&mut self, n: usize) -> Option<u64> {
        let p = self.pieces.get(self.i)?;
        (p.len - self.at >= n as u64).then(|| {
            let a = p.addr + self.at;
            self.advance(n);
            a
        })
    }

    fn advance(&mut self, mut n: usize) {
        while n > 0 && self.i < self.pieces.len() {
            let left = self.pieces[self.i].len - self.at;
            let k = left.min(n as u64);
            self.at += k;
            n -= k as usize;
            if self.at == self.pieces[self.i].len {
                self.i += 1;
                self.at = 0;
            }
        }
    }

    /// Copy the next `out.len()` bytes, across pieces; `false` if there are fewer or one
    /// cannot be read.
    fn copy(&mut self, region: &impl RegionRead, out: &mut [u8]) -> bool {
        let mut pos = 0;
        while pos < out.len() {
            let Some(p) = self.pieces.get(self.i) else {
                return false;
            };
            let k = ((p.len - self.at) as usize).min(out.len() - pos);
            if !region.read_bytes(p.addr + self.at, &mut out[pos..pos + k]) {
                return false;
            }
            pos += k;
            self.advance(k);
        }
        true
    }

    fn done(&self) -> bool {
        self.i == self.pieces.len()
    }
}

/// What the receiving side keeps from one message to the next, so that it allocates nothing
/// per message: the walk's fragment list, and the bytes of data that straddle pieces.
#[derive(Debug, Default)]
pub struct Scratch {
    walk: Walk,
    /// Data that straddled pieces, copied out to be touched (the last such fragment's).
    pub bytes: Vec<u8>,
}

/// The receiving side of a message: walk it over `region`, reassemble datagram `id` from its
/// fragments (every header checked, in order), and have the receiving application touch each
/// fragment's data into `rec` ([`Record::keep`]); `scratch` holds what is reused from message
/// to message. Every read is checked against the mapping it lies in, looked up once for the
/// run of reads in it ([`LastSpan`]). An error names the datagram and the fragment when the
/// message is not the datagram expected.
pub fn receive(
    region: &impl RegionRead,
    m: Msg,
    id: u32,
    rec: &mut Record,
    scratch: &mut Scratch,
) -> Result<(), String> {
    let region = &LastSpan::new(region);
    walk_into(region, m.root, m.len, Limits::default(), &mut scratch.walk);
    let w = &scratch.walk;
    if !w.anomalies.is_clean() {
        return Err(format!(
            "datagram {id}: malformed message: {:?}",
            w.anomalies
        ));
    }
    let mut c = Cursor {
        pieces: &w.fragments,
        i: 0,
        at: 0,
    };
    let mut r = Reassembly::new(id);
    let want = rec.fragments();
    loop {
        let mut hb = [0u8; IP_HDR];
        if !c.copy(region, &mut hb) {
            return Err(format!(
                "datagram {id}: message ends inside fragment {}'s header",
                r.len() / want.per
            ));
        }
        let h = IpHdr::parse(&hb).map_err(|e| format!("datagram {id}: {e}"))?;
        let (k, last) = r.take(&h)?;
        let mut n = h.total as usize - IP_HDR;
        if k == 0 {
            let mut ub = [0u8; UDP_HDR];
            let len = if c.copy(region, &mut ub) {
                parse_udp(&ub)
            } else {
                Err("cut short".into())
            };
            if len != Ok(want.payload - UDP_HDR) {
                return Err(format!(
                    "datagram {id}, fragment 0: UDP-like header {len:?}"
                ));
            }
            n -= UDP_HDR;
        }
        if k >= want.count() || n != want.data(k).1 {
            return Err(format!(
                "datagram {id}, fragment {k}: {n} data bytes, not the fragment expected"
            ));
        }
        touch(region, &mut c, k, n, rec, &mut scratch.bytes)?;
        if last {
            break;
        }
    }
    if r.len() != want.payload || !c.done() {
        return Err(format!(
            "datagram {id}: reassembled {} bytes of {}",
            r.len(),
            want.payload
        ));
    }
    rec.next();
    Ok(())
}

/// The receiving application's touch of fragment `k`'s `n` data bytes at the cursor: in place
/// when they lie in one 8-aligned piece, else copied out first.
fn touch(
    region: &impl RegionRead,
    c: &mut Cursor,
    k: usize,
    n: usize,
    rec: &mut Record,
    scratch: &mut Vec<u8>,
) -> Result<(), String> {
    let (save_i, save_at) = (c.i, c.at);
    if let Some(a) = c.span(n).filter(|a| a % 8 == 0)
        && let Some(ws) = region.words(a, n.next_multiple_of(8) as u64)
    {
        rec.keep(k, |i| ws[i].load(Relaxed));
        return Ok(());
    }
    (c.i, c.at) = (save_i, save_at);
    scratch.clear();
    scratch.resize(n.next_multiple_of(8), 0);
    if !c.copy(region, &mut scratch[..n]) {
        return Err(format!("fragment {k}: its data cannot be read"));
    }
    rec.keep(k, |i| word_at(scratch, i));
    Ok(())
}

/// Word `i` of `b` (little-endian; `b` holds whole words).
pub fn word_at(b: &[u8], i: usize) -> u64 {
    let w: [u8; 8] = b[8 * i..8 * i + 8].try_into().expect("whole words");
    u64::from_le_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::super::proto::{PAGE, Touch, word, write};
    use super::*;
    use zcio_fbufs::aggregate::walk;
    use zcio_fbufs::region::LocalRegion;

    const BASE: u64 = 1 << 32;

    /// Datagram `seq` of `len` built at `mtu` in a local region over data written every byte.
    fn built(len: usize, mtu: usize, seq: u64) -> (LocalRegion, Msg, Fragments) {
        let frags = Fragments::new(len, mtu);
        let data = len.next_multiple_of(PAGE);
        let r = LocalRegion::new(BASE, data + space(frags));
        let ws = r.words_mut(BASE, len.next_multiple_of(8) as u64).unwrap();
        write(Touch::All, seq, len, |i, w| ws[i].store(w, Relaxed));
        let m = build(&r, BASE + data as u64, BASE, frags, seq as u32).unwrap();
        (r, m, frags)
    }

    #[test]
    fn the_walked_message_is_every_fragment_with_its_headers_around_the_data_byte_for_byte() {
        for len in [1, 4095, 4096, 4097, 65539] {
            let (r, m, frags) = built(len, PAGE, 5);
            let w = walk(&r, m.root, m.len, Limits::default());
            assert!(w.anomalies.is_clean());
            let bytes = w.to_vec(&r);
            assert_eq!(bytes.len(), len + UDP_HDR + IP_HDR * frags.count());
            // Strip the headers as IP and UDP do: what is left is the data as written.
            let mut data = Vec::new();
            let mut at = 0;
            for k in 0..frags.count() {
                let h = IpHdr::parse(bytes[at..at + IP_HDR].try_into().unwrap()).unwrap();
                assert_eq!(h, frags.header(k, 5));
                let body = &bytes[at + IP_HDR..at + h.total as usize];
                data.extend_from_slice(if k == 0 { &body[UDP_HDR..] } else { body });
                at += h.total as usize;
            }
            let want: Vec<u8> = (0..len)
                .map(|j| word(5, j / 8).to_le_bytes()[j % 8])
                .collect();
            assert_eq!(data, want, "{len}");
            // And the receiving side's reassembly agrees, fragment by fragment.
            let mut rec = Record::new("t", Touch::Exact, len, PAGE, 6);
            for _ in 0..5 {
                rec.next();
            }
            receive(&r, m, 5, &mut rec, &mut Scratch::default()).unwrap();
            assert_eq!(rec.received(), 6);
        }
    }

    #[test]
    fn a_build_whose_headers_and_nodes_would_run_past_the_writable_space_writes_nothing() {
        let frags = Fragments::new(10_000, PAGE);
        let data = 10_000usize.next_multiple_of(PAGE);
        // One word short of the space the headers and nodes take.
        let r = LocalRegion::new(BASE, data + space(frags) - 8);
        let at = BASE + data as u64;
        let e = build(&r, at, BASE, frags, 0).unwrap_err();
        assert_eq!(e, AggregateError::NotWritable { addr: at });
        let mut b = vec![1u8; space(frags) - 8];
        assert!(r.read_bytes(at, &mut b) && b.iter().all(|x| *x == 0));
        // With the space whole, the message is built there.
        let r = LocalRegion::new(BASE, data + space(frags));
        let m = build(&r, at, BASE, frags, 0).unwrap();
        assert_eq!(m.root, root_at(at, frags));
    }

    #[test]
    fn both_regions_are_read_each_through_its_own_span_and_never_across() {
        let (own, other) = (LocalRegion::new(BASE, 64), LocalRegion::new(BASE + 64, 64));
        assert!(own.write_u64(BASE + 56, 1) && other.write_u64(BASE + 64, 2));
        let both = Both {
            own: &own,
            other: &other,
        };
        assert_eq!(both.span(BASE + 63).map(|s| s.base()), Some(BASE));
        assert_eq!(both.span(BASE + 64).map(|s| s.base()), Some(BASE + 64));
        let c = LastSpan::new(&both);
        assert_eq!(c.read_words::<1>(BASE + 56), Some([1]));
        assert_eq!(c.read_words::<1>(BASE + 64), Some([2]));
        assert_eq!(c.read_words::<2>(BASE + 56), None, "across the two");
        assert_eq!(both.read_words::<2>(BASE + 56), None);
        assert!(!c.readable(BASE + 60, 8) && c.readable(BASE + 64, 64));
        assert_eq!(c.read_words::<1>(BASE + 128), None);
    }

    #[test]
    fn a_message_that_is_not_the_datagram_expected_is_refused_by_name() {
        let (r, m, frags) = built(10_000, PAGE, 0);
        let mut rec = Record::new("t", Touch::Word, 10_000, PAGE, 2);
        let e = receive(&r, m, 1, &mut rec, &mut Scratch::default()).unwrap_err();
        assert!(e.contains("datagram 1, fragment 0"), "{e}");
        // A fragment's header spoiled: its offset.
        let at = BASE + 10_000u64.next_multiple_of(PAGE as u64) + 8 + 24 + 10;
        assert!(r.write_bytes(at, &[0xff]));
        let e = receive(&r, m, 0, &mut rec, &mut Scratch::default()).unwrap_err();
        assert!(e.contains("datagram 0, fragment 1"), "{e}");
        // The root is where the receiving domain looks for it.
        assert_eq!(
            m.root,
            root_at(BASE + 10_000u64.next_multiple_of(PAGE as u64), frags)
        );
        // A message cut short.
        let short = Msg {
            root: m.root,
            len: m.len - 1,
        };
        assert!(receive(&r, short, 0, &mut rec, &mut Scratch::default()).is_err());
        assert_eq!((rec.received(), frags.count()), (0, 3));
    }

    #[test]
    fn data_off_the_word_grid_is_touched_through_the_scratch_copy() {
        // The data's leaf starts 4 bytes into a word: every fragment is read through a copy.
        let len = 20_000;
        let frags = Fragments::new(len, 16384);
        let r = LocalRegion::new(BASE, 8 * PAGE + space(frags));
        let bytes: Vec<u8> = (0..len)
            .map(|j| word(0, j / 8).to_le_bytes()[j % 8])
            .collect();
        assert!(r.write_bytes(BASE + 4, &bytes));
        let m = build(&r, BASE + 8 * PAGE as u64, BASE + 4, frags, 0).unwrap();
        let mut rec = Record::new("t", Touch::Exact, len, 16384, 1);
        let mut scratch = Scratch::default();
        receive(&r, m, 0, &mut rec, &mut scratch).unwrap();
        rec.check().unwrap();
        assert!(!scratch.bytes.is_empty());
        // One byte changed is found, by its offset.
        assert!(r.write_bytes(BASE + 4 + 17_000, &[0]));
        let mut rec = Record::new("t", Touch::Exact, len, 16384, 1);
        receive(&r, m, 0, &mut rec, &mut scratch).unwrap();
        assert_eq!(rec.check().unwrap_err().got, 17_001);
    }
}
