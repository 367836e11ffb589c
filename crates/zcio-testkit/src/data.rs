//! Seeded test data: bytes that differ from seed to seed and from byte to byte, the same for
//! the same seed, so that data placed in the wrong page or at the wrong offset shows.

/// Marsaglia's xorshift64 over a seed spread by the golden ratio: a small generator for test
/// data (not for statistics).
///
/// ```
/// let mut a = zcio_testkit::data::Xorshift::new(7);
/// let mut b = zcio_testkit::data::Xorshift::new(7);
/// assert_eq!(a.next_u64(), b.next_u64());
/// assert_ne!(zcio_testkit::data::bytes(16, 1), zcio_testkit::data::bytes(16, 2));
/// ```
#[derive(Debug, Clone)]
pub struct Xorshift(u64);

impl Xorshift {
    /// The generator for `seed` (any seed: 0 too).
    pub fn new(seed: u64) -> Xorshift {
        Xorshift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next word.
    pub fn next_u64(&mut self) -> u64 {
        let x = &mut self.0;
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// Fill `buf`, a word (little-endian) for every eight bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            chunk.copy_from_slice(&self.next_u64().to_le_bytes()[..chunk.len()]);
        }
    }
}

/// `len` bytes for `seed`, the low byte of a word each.
pub fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut g = Xorshift::new(seed);
    (0..len).map(|_| g.next_u64() as u8).collect()
}
