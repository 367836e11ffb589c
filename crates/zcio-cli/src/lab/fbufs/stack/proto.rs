//! The stack's protocols and what the receiving application checks: a UDP-like and an IP-like
//! header, how IP fragments a datagram and reassembles it, the datagrams' contents, and the
//! record the receiving application keeps of what it touched, checked once the clock has
//! stopped.
//!
//! The headers are IPv4's and UDP's with their length and offset fields widened to 32 bits, as
//! the paper's UDP and IP were "slightly modified to support messages larger than 64KBytes";
//! their checksums are left out (the experiment measures buffer handling, not checksumming).

/// Bytes of the IP-like header.
pub const IP_HDR: usize = 20;
/// Bytes of the UDP-like header.
pub const UDP_HDR: usize = 8;
/// The page the paper's touch reads one word of.
pub const PAGE: usize = 4096;
/// IP's protocol number for UDP.
const PROTO_UDP: u8 = 17;
/// More fragments follow.
const MORE: u8 = 1;

/// An IP-like header: one fragment of a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpHdr {
    /// Bytes of the fragment, header included.
    pub total: u32,
    /// The datagram's identification (its number in the stream).
    pub id: u32,
    /// Where the fragment's payload sits in the datagram's IP payload (bytes, a multiple of 8).
    pub offset: u32,
    /// More fragments follow.
    pub more: bool,
}

impl IpHdr {
    /// The header's bytes.
    pub fn bytes(self) -> [u8; IP_HDR] {
        let mut b = [0u8; IP_HDR];
        b[0] = 0x45;
        b[2..6].copy_from_slice(&self.total.to_be_bytes());
        b[6..10].copy_from_slice(&self.id.to_be_bytes());
        b[10..14].copy_from_slice(&self.offset.to_be_bytes());
        b[14] = if self.more { MORE } else { 0 };
        b[15] = 64;
        b[16] = PROTO_UDP;
        b
    }

    /// The header in `b`, or what is wrong with it.
    pub fn parse(b: &[u8; IP_HDR]) -> Result<IpHdr, String> {
        if b[0] != 0x45 || b[16] != PROTO_UDP || b[14] & !MORE != 0 {
            return Err(format!("not an IP-like header of a UDP fragment: {b:02x?}"));
        }
        let word = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let h = IpHdr {
            total: word(2),
            id: word(6),
            offset: word(10),
            more: b[14] == MORE,
        };
        if (h.total as usize) <= IP_HDR || h.offset % 8 != 0 {
            return Err(format!(
                "IP-like header with length {} at offset {}",
                h.total, h.offset
            ));
        }
        Ok(h)
    }
}

/// A UDP-like header's bytes: ports and the datagram's length with its header.
pub fn udp_header(len: usize) -> [u8; UDP_HDR] {
    let mut b = [0u8; UDP_HDR];
    b[0..2].copy_from_slice(&7001u16.to_be_bytes());
    b[2..4].copy_from_slice(&7002u16.to_be_bytes());
    b[4..8].copy_from_slice(&((len + UDP_HDR) as u32).to_be_bytes());
    b
}

/// The datagram length a UDP-like header gives, or what is wrong with it.
pub fn parse_udp(b: &[u8; UDP_HDR]) -> Result<usize, String> {
    let len = u32::from_be_bytes([b[4], b[5], b[6], b[7]]) as usize;
    if b[0..4] != udp_header(0)[0..4] || len < UDP_HDR {
        return Err(format!("not a UDP-like header: {b:02x?}"));
    }
    Ok(len - UDP_HDR)
}

/// How IP fragments a datagram of `len` bytes for an MTU of `mtu` bytes: each fragment carries
/// at most [`Fragments::per`] bytes of the IP payload (the UDP header and the data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragments {
    /// IP payload bytes per fragment (the last carries the rest): the MTU less the IP header,
    /// rounded down to 8 (fragment offsets are multiples of 8).
    pub per: usize,
    /// The IP payload: the UDP header and the data.
    pub payload: usize,
}

impl Fragments {
    /// The fragmentation of `len` data bytes at `mtu` (at least [`IP_HDR`] + 8 + 8).
    pub fn new(len: usize, mtu: usize) -> Fragments {
        Fragments {
            per: (mtu.max(IP_HDR + 16) - IP_HDR) / 8 * 8,
            payload: len + UDP_HDR,
        }
    }

    /// How many fragments.
    pub fn count(self) -> usize {
        self.payload.div_ceil(self.per)
    }

    /// Fragment `k`'s part of the IP payload: its offset and length.
    pub fn part(self, k: usize) -> (usize, usize) {
        let at = k * self.per;
        (at, self.per.min(self.payload - at))
    }

    /// Fragment `k`'s part of the data (without the UDP header): its offset and length.
    pub fn data(self, k: usize) -> (usize, usize) {
        let (at, n) = self.part(k);
        let start = at.max(UDP_HDR);
        (start - UDP_HDR, at + n - start)
    }

    /// Fragment `k`'s IP header for datagram `id`.
    pub fn header(self, k: usize, id: u32) -> IpHdr {
        let (at, n) = self.part(k);
        IpHdr {
            total: (IP_HDR + n) as u32,
            id,
            offset: at as u32,
            more: k + 1 < self.count(),
        }
    }
}

/// IP's reassembly of one datagram, fragment by fragment, in order: each fragment must be the
/// next one of the datagram expected.
#[derive(Debug, Clone, Copy)]
pub struct Reassembly {
    id: u32,
    next: usize,
    k: usize,
}

impl Reassembly {
    /// Waiting for the first fragment of datagram `id`.
    pub fn new(id: u32) -> Reassembly {
        Reassembly { id, next: 0, k: 0 }
    }

    /// Take fragment `h`: the fragment's index, and whether it completed the datagram; an
    /// error naming the datagram and the fragment if it is not the one expected.
    pub fn take(&mut self, h: &IpHdr) -> Result<(usize, bool), String> {
        if h.id != self.id || h.offset as usize != self.next {
            return Err(format!(
                "datagram {}, fragment {}: got a fragment of datagram {} at offset {}, expected offset {}",
                self.id, self.k, h.id, h.offset, self.next
            ));
        }
        self.next += h.total as usize - IP_HDR;
        self.k += 1;
        Ok((self.k - 1, !h.more))
    }

    /// IP payload bytes reassembled so far.
    pub fn len(&self) -> usize {
        self.next
    }

    /// Whether nothing has been reassembled yet.
    pub fn is_empty(&self) -> bool {
        self.next == 0
    }
}

/// What the receiving application touches of each datagram, and how it is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Touch {
    /// The sender writes, and the receiver reads, the first word of every page of the data
    /// (the paper's test and dummy protocols); the record keeps them, folded per fragment.
    Word,
    /// The sender writes every byte; the receiver reads every byte and keeps each fragment's
    /// wrapping sum of words.
    All,
    /// As [`Touch::All`], but the receiver compares every byte with what was sent as it reads
    /// it (for the tests: the first wrong byte, by its offset, is kept).
    Exact,
}

impl Touch {
    /// Every touch, by name.
    pub const ALL: [Touch; 3] = [Touch::Word, Touch::All, Touch::Exact];

    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Touch::Word => "word-per-page",
            Touch::All => "every-byte",
            Touch::Exact => "every-byte-exact",
        }
    }

    /// The touch of a name.
    pub fn parse(s: &str) -> Option<Touch> {
        Touch::ALL.into_iter().find(|t| t.name() == s)
    }
}

/// Word `i` of datagram `seq`'s data (little-endian: byte `j` is byte `j % 8` of word `j / 8`).
pub fn word(seq: u64, i: usize) -> u64 {
    (seq << 40) ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5a5a_0f0f_a5a5_f0f0
}

/// `w` keeping only its first `n` bytes (`n` ≥ 8: all of them).
fn keep(w: u64, n: usize) -> u64 {
    if n >= 8 {
        w
    } else {
        w & ((1u64 << (8 * n)) - 1)
    }
}

/// Write datagram `seq`'s data of `len` bytes the `touch` way through `store(word index,
/// word)`: every word, or the first of every page (the last word keeps only the bytes that
/// are in the datagram, the rest zero).
pub fn write(touch: Touch, seq: u64, len: usize, mut store: impl FnMut(usize, u64)) {
    let words = len.div_ceil(8);
    let step = if touch == Touch::Word { PAGE / 8 } else { 1 };
    for i in (0..words).step_by(step) {
        store(i, keep(word(seq, i), len - 8 * i));
    }
}

/// What the receiving application keeps of the `len` data bytes at offset `off` (a multiple of
/// 8) of datagram `seq`, reading word `k` of them through `load(k)` (the last word's bytes past
/// `len` are ignored): the words it reads folded ([`Touch::Word`]), their wrapping sum
/// ([`Touch::All`]), or 0 if every byte is the one sent and else one more than the first wrong
/// byte's offset in the datagram ([`Touch::Exact`]).
pub fn digest(touch: Touch, seq: u64, off: usize, len: usize, load: impl Fn(usize) -> u64) -> u64 {
    let first = off / 8;
    let words = len.div_ceil(8);
    let mut acc = 0u64;
    match touch {
        Touch::Word => {
            let k0 = (first.next_multiple_of(PAGE / 8)) - first;
            for k in (k0..words).step_by(PAGE / 8) {
                acc = acc.rotate_left(13) ^ keep(load(k), len - 8 * k);
            }
        }
        Touch::All => {
            for k in 0..words {
                acc = acc.wrapping_add(keep(load(k), len - 8 * k));
            }
        }
        Touch::Exact => {
            for k in 0..words {
                let n = len - 8 * k;
                let (got, want) = (keep(load(k), n), keep(word(seq, first + k), n));
                if got != want {
                    let byte = ((got ^ want).trailing_zeros() / 8) as usize;
                    return (off + 8 * k + byte) as u64 + 1;
                }
            }
        }
    }
    acc
}

/// What [`digest`] gives for the data as it was sent.
pub fn expected(touch: Touch, seq: u64, off: usize, len: usize) -> u64 {
    match touch {
        Touch::Exact => 0,
        _ => digest(touch, seq, off, len, |k| word(seq, off / 8 + k)),
    }
}

/// A datagram that did not arrive as it was sent, found by the receiving application's check.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{contender}: datagram {datagram} (of {len} bytes), fragment {fragment}: the receiving application read {got:#018x}, the sender wrote {want:#018x} ({touch})"
)]
pub struct Mismatch {
    /// The contender.
    pub contender: String,
    /// The datagram's number in the stream (the warm-up's first).
    pub datagram: u64,
    /// Its length.
    pub len: usize,
    /// The fragment.
    pub fragment: usize,
    /// What the record holds.
    pub got: u64,
    /// What the sender's data gives.
    pub want: u64,
    /// The touch.
    pub touch: &'static str,
}

/// What the receiving application keeps of every datagram: one [`digest`] per fragment,
/// allocated before the stream, and checked with [`Record::check`] once the clock has stopped.
#[derive(Debug, Clone)]
pub struct Record {
    contender: String,
    touch: Touch,
    frags: Fragments,
    digests: Vec<u64>,
    received: u64,
    expected: u64,
}

impl Record {
    /// A record for `datagrams` datagrams of `len` bytes at `mtu`.
    pub fn new(contender: &str, touch: Touch, len: usize, mtu: usize, datagrams: u64) -> Record {
        let frags = Fragments::new(len, mtu);
        Record {
            contender: contender.into(),
            touch,
            frags,
            // Written once, so that keeping costs no page fault in the stream.
            digests: vec![u64::MAX; frags.count() * datagrams as usize],
            received: 0,
            expected: datagrams,
        }
    }

    /// The fragmentation of the datagrams.
    pub fn fragments(&self) -> Fragments {
        self.frags
    }

    /// The touch.
    pub fn touch(&self) -> Touch {
        self.touch
    }

    /// Datagrams taken so far.
    pub fn received(&self) -> u64 {
        self.received
    }

    /// Datagrams expected.
    pub fn expected(&self) -> u64 {
        self.expected
    }

    /// Keep fragment `k`'s digest of the datagram being taken (the next one): `load` reads
    /// word `i` of the fragment's data. Fragments past the record's end are not kept.
    pub fn keep(&mut self, k: usize, load: impl Fn(usize) -> u64) {
        let (off, len) = self.frags.data(k);
        let d = digest(self.touch, self.received, off, len, load);
        if let Some(slot) = self
            .digests
            .get_mut(self.received as usize * self.frags.count() + k)
        {
            *slot = d;
        }
    }

    /// The datagram being taken is complete.
    pub fn next(&mut self) {
        self.received += 1;
    }

    /// Every datagram and fragment against what the sender wrote, and the number of datagrams.
    pub fn check(&self) -> Result<(), Mismatch> {
        let n = self.frags.count();
        let len = self.frags.payload - UDP_HDR;
        for s in 0..self.expected {
            for k in 0..n {
                let (off, l) = self.frags.data(k);
                let want = expected(self.touch, s, off, l);
                let got = self.digests[s as usize * n + k];
                if got != want || s >= self.received {
                    return Err(Mismatch {
                        contender: self.contender.clone(),
                        datagram: s,
                        len,
                        fragment: k,
                        got,
                        want,
                        touch: self.touch.name(),
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_cover_the_data_once_in_order_at_multiples_of_eight() {
        for mtu in [PAGE, 16384, 64] {
            for len in [1, 4063, 4064, 4065, 4095, 4096, 4097, 65539, 1 << 20] {
                let f = Fragments::new(len, mtu);
                let (mut data, mut payload) = (0, 0);
                for k in 0..f.count() {
                    let (at, n) = f.part(k);
                    assert_eq!((at, at % 8), (payload, 0), "{len} at {mtu}: fragment {k}");
                    assert!(n <= mtu - IP_HDR && n > 0);
                    let (off, dn) = f.data(k);
                    assert_eq!(off, data);
                    data += dn;
                    payload += n;
                    let h = f.header(k, 7);
                    assert_eq!(IpHdr::parse(&h.bytes()), Ok(h));
                    assert_eq!(h.more, k + 1 < f.count());
                }
                assert_eq!((data, payload), (len, len + UDP_HDR), "{len} at {mtu}");
            }
        }
        assert_eq!(Fragments::new(65539, PAGE).count(), 17);
        assert_eq!(Fragments::new(4064, PAGE).count(), 1);
        assert_eq!(Fragments::new(4065, PAGE).count(), 2);
    }

    #[test]
    fn reassembly_takes_fragments_in_order_and_names_the_wrong_one() {
        let f = Fragments::new(10_000, PAGE);
        let mut r = Reassembly::new(3);
        assert_eq!(r.take(&f.header(0, 3)), Ok((0, false)));
        let e = r.take(&f.header(2, 3)).unwrap_err();
        assert!(
            e.contains("datagram 3, fragment 1") && e.contains("expected offset 4072"),
            "{e}"
        );
        assert!(r.take(&f.header(1, 4)).is_err());
        assert_eq!(r.take(&f.header(1, 3)), Ok((1, false)));
        assert_eq!(r.take(&f.header(2, 3)), Ok((2, true)));
        assert_eq!(r.len(), 10_008);
        let mut bad = f.header(0, 3).bytes();
        bad[16] = 6;
        assert!(IpHdr::parse(&bad).is_err());
        assert_eq!(parse_udp(&udp_header(65539)), Ok(65539));
        assert!(parse_udp(&[0; UDP_HDR]).is_err());
    }

    #[test]
    fn every_touch_catches_a_changed_word_it_reads_and_exact_names_the_byte() {
        let len = 3 * PAGE + 5;
        let mut data = vec![0u64; len.div_ceil(8)];
        for touch in Touch::ALL {
            write(touch, 9, len, |i, w| data[i] = w);
            let load = |d: &Vec<u64>| digest(touch, 9, 0, len, |k| d[k]);
            assert_eq!(load(&data), expected(touch, 9, 0, len), "{touch:?}");
            // The last page's first byte, which every touch reads.
            data[3 * PAGE / 8] ^= 1 << 8;
            assert_ne!(load(&data), expected(touch, 9, 0, len), "{touch:?}");
            if touch == Touch::Exact {
                assert_eq!(load(&data), (3 * PAGE + 1 + 1) as u64);
            }
            // Bytes past the datagram's end are not its own.
            data = vec![0u64; len.div_ceil(8)];
            write(touch, 9, len, |i, w| data[i] = w);
            *data.last_mut().unwrap() |= 0xff << 56;
            assert_eq!(load(&data), expected(touch, 9, 0, len), "{touch:?}");
        }
    }

    #[test]
    fn the_record_names_the_datagram_and_fragment_and_counts_them() {
        let (len, mtu) = (10_000, PAGE);
        let mut rec = Record::new("c", Touch::All, len, mtu, 2);
        let f = rec.fragments();
        for s in 0..2u64 {
            for k in 0..f.count() {
                let (off, _) = f.data(k);
                rec.keep(k, |i| {
                    word(s, off / 8 + i) ^ u64::from(s == 1 && k == 2 && i == 0)
                });
            }
            rec.next();
        }
        let e = rec.check().unwrap_err();
        assert_eq!((e.datagram, e.fragment, e.len), (1, 2, len));
        let short = Record::new("c", Touch::All, len, mtu, 1);
        assert_eq!(short.check().unwrap_err().datagram, 0);
    }
}
