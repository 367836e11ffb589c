//! # zcio-checksum: the Internet checksum at memory speed (paper 003)
//!
//! Paper 003 found the UDP/TCP checksum to be the largest cost on the path of large packets
//! once copies were gone, and answered twice: compute it faster ("32-bit rather than 16-bit
//! words, loop unrolling, and reordering of instructions"), and do not compute it at all where
//! a link's own CRC already protects the packet. Both are here:
//!
//! - [`Kernel`]: ways of computing the RFC 1071 sum: the RFC's own loop
//!   ([`Kernel::Reference`]), the paper's optimization on today's words ([`Kernel::Unrolled`]:
//!   64-bit loads, four independent accumulators), and SIMD kernels chosen at run time
//!   ([`Kernel::Avx2`], [`Kernel::Avx512`]: 16-bit lanes widened into 32-bit accumulators).
//!   [`Kernel::best`] is the fastest this CPU has.
//! - [`checksum`], [`Checksum`] (a message in pieces), [`update`] (RFC 1624: one 16-bit word
//!   changed), [`copy_and_checksum`] (the copy and the sum in one pass over the data).
//! - [`Elision`]: the paper's policy, explicit: skip the software checksum only on a path
//!   that stays on one host or crosses one CRC-protected link; [`PathKind::of_socket`] tells
//!   which path a connected socket's packets take, from its peer and this host's interfaces.
//!
//! All sums are of big-endian 16-bit words, an odd last byte padded with zero (RFC 1071); a
//! checksum is the complement of the folded sum.
#![forbid(unsafe_code)]

use multiversion::multiversion;

/// A way of computing the one's-complement sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kernel {
    /// RFC 1071's loop: one 16-bit word at a time into a 32-bit accumulator.
    Reference,
    /// The paper's optimization: wider words (64-bit loads, each added as two 32-bit halves
    /// into 64-bit accumulators, so carries are never lost), unrolled over four independent
    /// accumulators so the additions pipeline.
    Unrolled,
    /// AVX2: 32-byte vectors of 16-bit words widened into 32-bit lanes.
    Avx2,
    /// AVX-512 (F, BW, VL): 64-byte vectors of 16-bit words widened into 32-bit lanes.
    Avx512,
}

impl Kernel {
    /// Every kernel, slowest first.
    pub const ALL: [Kernel; 4] = [
        Kernel::Reference,
        Kernel::Unrolled,
        Kernel::Avx2,
        Kernel::Avx512,
    ];

    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Reference => "reference",
            Kernel::Unrolled => "unrolled",
            Kernel::Avx2 => "avx2",
            Kernel::Avx512 => "avx512",
        }
    }

    /// Whether this CPU can run it.
    pub fn available(self) -> bool {
        match self {
            Kernel::Reference | Kernel::Unrolled => true,
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx2 => std::arch::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Kernel::Avx512 => {
                std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512vl")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The kernels this CPU can run.
    pub fn available_all() -> Vec<Kernel> {
        Kernel::ALL.into_iter().filter(|k| k.available()).collect()
    }

    /// The fastest kernel this CPU can run.
    pub fn best() -> Kernel {
        *Kernel::available_all()
            .last()
            .expect("the scalar kernels are always available")
    }

    /// The folded one's-complement sum of `data` (not complemented). A kernel this CPU cannot
    /// run computes the same sum without its instructions (see [`Kernel::available`]).
    pub fn sum(self, data: &[u8]) -> u16 {
        match self {
            Kernel::Reference => reference(data),
            Kernel::Unrolled => fold_native(unrolled(data)),
            Kernel::Avx2 => fold_native(wide_avx2(data)),
            Kernel::Avx512 => fold_native(wide_avx512(data)),
        }
    }
}

/// RFC 1071, as written there.
fn reference(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut pairs = data.chunks_exact(2);
    for w in &mut pairs {
        sum += u16::from_be_bytes([w[0], w[1]]) as u32;
        // Fold as we go, so that any length fits.
        if sum > 0xFFFF_0000 {
            sum = (sum & 0xFFFF) + (sum >> 16);
        }
    }
    if let [last] = pairs.remainder() {
        sum += (*last as u32) << 8;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

/// A sum of native-endian 16-bit words (any width) folded to 16 bits, in big-endian terms
/// (RFC 1071 §2(B): the sum is byte-order independent up to a final swap).
fn fold_native(mut sum: u64) -> u16 {
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    let s = sum as u16;
    if cfg!(target_endian = "little") {
        s.swap_bytes()
    } else {
        s
    }
}

/// The trailing bytes (fewer than a word) as native 16-bit words, an odd byte padded with zero
/// after it (in memory order).
fn tail_native(rest: &[u8]) -> u64 {
    let mut sum = 0u64;
    let mut pairs = rest.chunks_exact(2);
    for w in &mut pairs {
        sum += u16::from_ne_bytes([w[0], w[1]]) as u64;
    }
    if let [last] = pairs.remainder() {
        sum += u16::from_ne_bytes([*last, 0]) as u64;
    }
    sum
}

/// The paper's kernel: 64-bit words as two 32-bit halves into four 64-bit accumulators.
fn unrolled(data: &[u8]) -> u64 {
    let mut acc = [0u64; 4];
    let mut blocks = data.chunks_exact(32);
    for b in &mut blocks {
        for (i, a) in acc.iter_mut().enumerate() {
            let w = u64::from_ne_bytes(b[8 * i..8 * i + 8].try_into().expect("8 bytes"));
            *a += (w & 0xFFFF_FFFF) + (w >> 32);
        }
    }
    let mut sum: u64 = acc.iter().map(|a| (a & 0xFFFF_FFFF) + (a >> 32)).sum();
    let rest = blocks.remainder();
    let mut words = rest.chunks_exact(4);
    for w in &mut words {
        sum += u32::from_ne_bytes(w.try_into().expect("4 bytes")) as u64;
    }
    sum + tail_native(words.remainder())
}

/// 64-byte blocks, each 16-bit word widened into its own 32-bit lane; the lanes are emptied
/// into a 64-bit total before they can overflow. Written for the vectorizer: compiled with
/// AVX2 or AVX-512 enabled, each block is a handful of vector instructions.
#[inline(always)]
fn wide(data: &[u8]) -> u64 {
    // 65 535 additions of at most 0xFFFF fit a u32 lane.
    const FLUSH: usize = 65_535;
    let mut total = 0u64;
    let mut blocks = data.chunks_exact(64);
    loop {
        let mut lanes = [0u32; 32];
        let mut n = 0;
        for b in blocks.by_ref().take(FLUSH) {
            for (i, lane) in lanes.iter_mut().enumerate() {
                *lane += u16::from_ne_bytes([b[2 * i], b[2 * i + 1]]) as u32;
            }
            n += 1;
        }
        total += lanes.iter().map(|l| *l as u64).sum::<u64>();
        if n < FLUSH {
            break;
        }
    }
    total + tail_native(blocks.remainder())
}

#[multiversion(targets("x86_64+avx2"))]
fn wide_avx2(data: &[u8]) -> u64 {
    wide(data)
}

#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx2"))]
fn wide_avx512(data: &[u8]) -> u64 {
    wide(data)
}

/// Copy `src` into `dst` and sum it, in one pass: 64-byte blocks copied and summed while they
/// are in registers.
#[inline(always)]
fn copy_wide(src: &[u8], dst: &mut [u8]) -> u64 {
    const FLUSH: usize = 65_535;
    let mut total = 0u64;
    let mut s = src.chunks_exact(64);
    let mut d = dst.chunks_exact_mut(64);
    loop {
        let mut lanes = [0u32; 32];
        let mut n = 0;
        for (b, o) in s.by_ref().zip(d.by_ref()).take(FLUSH) {
            o.copy_from_slice(b);
            for (i, lane) in lanes.iter_mut().enumerate() {
                *lane += u16::from_ne_bytes([b[2 * i], b[2 * i + 1]]) as u32;
            }
            n += 1;
        }
        total += lanes.iter().map(|l| *l as u64).sum::<u64>();
        if n < FLUSH {
            break;
        }
    }
    let rest = s.remainder();
    d.into_remainder().copy_from_slice(rest);
    total + tail_native(rest)
}

#[multiversion(targets("x86_64+avx512f+avx512bw+avx512vl+avx2", "x86_64+avx2"))]
fn copy_wide_best(src: &[u8], dst: &mut [u8]) -> u64 {
    copy_wide(src, dst)
}

/// The Internet checksum of `data` (the complement of its sum), with the best kernel.
///
/// # Examples
///
/// ```
/// // The example of RFC 1071, section 3: these eight bytes sum to 0xddf2.
/// let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
/// let c = zcio_checksum::checksum(&data);
/// assert_eq!(c, !0xddf2);
/// // A receiver sums the data with the checksum appended, and finds zero.
/// let mut packet = data.to_vec();
/// packet.extend_from_slice(&c.to_be_bytes());
/// assert_eq!(zcio_checksum::checksum(&packet), 0);
/// ```
pub fn checksum(data: &[u8]) -> u16 {
    !Kernel::best().sum(data)
}

/// Copy `src` into `dst` (of the same length) and return the checksum of the bytes, touching
/// them once: the fused copy-and-checksum of protocol stacks that must copy anyway.
///
/// # Panics
/// If the lengths differ.
pub fn copy_and_checksum(src: &[u8], dst: &mut [u8]) -> u16 {
    assert_eq!(
        src.len(),
        dst.len(),
        "copy_and_checksum: source and destination lengths differ"
    );
    !fold_native(copy_wide_best(src, dst))
}

/// RFC 1624 (eqn. 3): the checksum after one 16-bit word of the data changes from `old` to
/// `new`, from the old checksum alone: `HC' = ~(~HC + ~m + m')`.
pub fn update(checksum: u16, old: u16, new: u16) -> u16 {
    let mut sum = (!checksum) as u32 + (!old) as u32 + new as u32;
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// A checksum over data that comes in pieces of any length (an odd piece shifts the bytes
/// after it by one position within their words: handled).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checksum {
    sum: u32,
    odd: bool,
}

impl Checksum {
    /// Nothing summed yet.
    pub fn new() -> Checksum {
        Checksum::default()
    }

    /// Add the next piece.
    pub fn add(&mut self, data: &[u8]) {
        let s = Kernel::best().sum(data) as u32;
        // After an odd number of bytes, this piece's words straddle: its sum is the
        // byte-swapped one (RFC 1071 §2(B)).
        let s = if self.odd {
            (s as u16).swap_bytes() as u32
        } else {
            s
        };
        self.sum += s;
        self.sum = (self.sum & 0xFFFF) + (self.sum >> 16);
        self.odd ^= data.len() % 2 == 1;
    }

    /// The checksum of everything added.
    pub fn finish(&self) -> u16 {
        let mut s = self.sum;
        while s > 0xFFFF {
            s = (s & 0xFFFF) + (s >> 16);
        }
        !(s as u16)
    }
}

/// Where a packet travels, as far as corruption goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathKind {
    /// It never leaves this host (loopback, IPC): no wire to corrupt it.
    SameHost,
    /// Directly across one link with its own CRC (Ethernet, FDDI): the paper's case.
    SingleCrcLink,
    /// Through routers, or over any link without a CRC: the CRC protects only between two
    /// interfaces, and a gateway's memory is not covered.
    Routed,
}

/// The paper's checksum elision policy, as an explicit choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Elision {
    /// Always compute the software checksum (what the IETF recommends, RFC 1122).
    #[default]
    Never,
    /// Skip it only where the path stays on one host or crosses one CRC-protected link (the
    /// paper: 74 % more UDP throughput); a routed path always gets it.
    SameHostOrCrcLink,
}

impl PathKind {
    /// Where a packet to `peer` travels, given this host's interface addresses with their
    /// prefix lengths (`local`): to this host itself (a loopback address, or one of the
    /// host's own), across one attached link (inside the subnet of one of its interfaces,
    /// no router between: the policy takes the link's CRC for granted, as the paper's FDDI
    /// had one), or through routers.
    pub fn of_peer(peer: std::net::IpAddr, local: &[(std::net::IpAddr, u8)]) -> PathKind {
        use std::net::IpAddr;
        let peer = match peer {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        if peer.is_loopback() || local.iter().any(|(a, _)| *a == peer) {
            return PathKind::SameHost;
        }
        let within = |a: IpAddr, prefix: u8| match (a, peer) {
            (IpAddr::V4(a), IpAddr::V4(p)) => {
                let bits = u32::from(prefix.min(32));
                let mask = u32::MAX.checked_shl(32 - bits).unwrap_or(0);
                bits > 0 && u32::from(a) & mask == u32::from(p) & mask
            }
            (IpAddr::V6(a), IpAddr::V6(p)) => {
                let bits = u32::from(prefix.min(128));
                let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                bits > 0 && u128::from(a) & mask == u128::from(p) & mask
            }
            _ => false,
        };
        if local.iter().any(|(a, prefix)| within(*a, *prefix)) {
            PathKind::SingleCrcLink
        } else {
            PathKind::Routed
        }
    }

    /// Where the packets of the connected socket `fd` travel: a Unix socket never leaves this
    /// host; an IP socket's peer is placed against this host's interfaces now
    /// ([`PathKind::of_peer`]). A socket with no peer is an error.
    pub fn of_socket(fd: std::os::fd::BorrowedFd<'_>) -> std::io::Result<PathKind> {
        let peer = rustix::net::getpeername(fd)?.ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::NotConnected, "the socket has no peer")
        })?;
        if peer.address_family() == rustix::net::AddressFamily::UNIX {
            return Ok(PathKind::SameHost);
        }
        let ip = std::net::SocketAddr::try_from(peer)
            .map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "a peer neither Unix nor IP",
                )
            })?
            .ip();
        let local: Vec<(std::net::IpAddr, u8)> = if_addrs::get_if_addrs()?
            .into_iter()
            .map(|i| {
                let prefix = match &i.addr {
                    if_addrs::IfAddr::V4(a) => a.prefixlen,
                    if_addrs::IfAddr::V6(a) => a.prefixlen,
                };
                (i.ip(), prefix)
            })
            .collect();
        Ok(PathKind::of_peer(ip, &local))
    }
}

impl Elision {
    /// Whether a packet on `path` needs the software checksum under this policy.
    pub fn needs_checksum(self, path: PathKind) -> bool {
        match self {
            Elision::Never => true,
            Elision::SameHostOrCrcLink => path == PathKind::Routed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rfc_1071_example_sums_as_the_rfc_says() {
        // RFC 1071 §3: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        for k in Kernel::ALL {
            assert_eq!(k.sum(&data), 0xddf2, "{k:?}");
        }
        assert_eq!(checksum(&data), !0xddf2);
    }

    #[test]
    fn the_lanes_flush_before_they_overflow() {
        // More than 65 535 blocks of all-ones words: a u32 lane would overflow unflushed.
        let data = vec![0xFF; 64 * 70_000 + 3];
        let want = reference(&data);
        for k in Kernel::ALL {
            assert_eq!(k.sum(&data), want, "{k:?}");
        }
    }

    #[test]
    fn a_peer_is_placed_on_this_host_on_an_attached_link_or_beyond_routers() {
        use std::net::IpAddr;
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let local = [
            (ip("10.0.0.5"), 24),
            (ip("fe80::1"), 64),
            (ip("192.168.7.9"), 0),
        ];
        for (peer, want) in [
            ("127.0.0.1", PathKind::SameHost),
            ("::1", PathKind::SameHost),
            ("::ffff:127.0.0.1", PathKind::SameHost),
            ("10.0.0.5", PathKind::SameHost),
            ("::ffff:10.0.0.5", PathKind::SameHost),
            ("10.0.0.77", PathKind::SingleCrcLink),
            ("fe80::2", PathKind::SingleCrcLink),
            ("10.0.1.77", PathKind::Routed),
            ("8.8.8.8", PathKind::Routed),
            ("2001:db8::1", PathKind::Routed),
        ] {
            assert_eq!(PathKind::of_peer(ip(peer), &local), want, "{peer}");
        }
    }

    #[test]
    fn a_sockets_path_is_read_from_its_peer() {
        use std::os::fd::AsFd;
        let (a, _b) = std::os::unix::net::UnixDatagram::pair().unwrap();
        let unix = PathKind::of_socket(a.as_fd()).unwrap();
        assert_eq!(unix, PathKind::SameHost);
        assert!(!Elision::SameHostOrCrcLink.needs_checksum(unix));
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let e = PathKind::of_socket(udp.as_fd()).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotConnected);
        udp.connect("127.0.0.1:9").unwrap();
        assert_eq!(
            PathKind::of_socket(udp.as_fd()).unwrap(),
            PathKind::SameHost
        );
    }

    #[test]
    fn elision_skips_only_unrouted_paths() {
        use PathKind::*;
        assert!(Elision::Never.needs_checksum(SameHost));
        assert!(!Elision::SameHostOrCrcLink.needs_checksum(SameHost));
        assert!(!Elision::SameHostOrCrcLink.needs_checksum(SingleCrcLink));
        assert!(Elision::SameHostOrCrcLink.needs_checksum(Routed));
    }
}
