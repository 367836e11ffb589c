//! Fuzzing the receiver's aggregate walker (`arbtest`): an originator may write any words into
//! the nodes of a message and announce any root and length; the walk must end, never panic,
//! take at most the announced length, and hand out only fragments readable in the region.
//!
//! `ZCIO_FUZZ_MS` sets the time budget (default 1000 ms; a longer run: `ZCIO_FUZZ_MS=600000
//! cargo test --release -p zcio-fbufs --test fuzz_aggregate`). A failure prints the seed to
//! replay with `ZCIO_FUZZ_SEED`. Arbtest keeps no corpus: the seeds in `REGRESSIONS` are
//! replayed first, every run.

use zcio_fbufs::aggregate::{Limits, NODE_BYTES, walk};
use zcio_fbufs::region::{LocalRegion, RegionRead, RegionWrite};
use zcio_testkit::fuzz::{Result, Unstructured, fuzz};

/// Seeds replayed before the timed search: all-zero input and a few sizes.
const REGRESSIONS: &[u64] = &[
    0x0000_0000_0000_1000,
    0x9e37_79b9_0000_0400,
    0x2545_f491_0000_4000,
];

const BASE: u64 = 0x7f00_0000_0000;
const DATA_LEN: u64 = 16 * 1024;
const NODES: u64 = BASE + DATA_LEN;
const NODES_LEN: u64 = 4 * 1024;

#[test]
fn any_nodes_and_any_root_walk_to_an_end_within_the_region() {
    let r = LocalRegion::new(BASE, (DATA_LEN + NODES_LEN) as usize);
    let limits = Limits {
        max_visits: 4096,
        max_depth: 64,
    };
    let property = |u: &mut Unstructured<'_>| -> Result<()> {
        // The node area: words that mostly point back into the region, sometimes anywhere.
        let mut words = Vec::with_capacity((NODES_LEN / 8) as usize);
        for _ in 0..NODES_LEN / 8 {
            let w: u64 = match u.int_in_range(0..=3)? {
                0 => u.arbitrary()?,
                1 => NODES + u.int_in_range(0..=NODES_LEN / NODE_BYTES)? * NODE_BYTES,
                2 => BASE + u.int_in_range(0..=DATA_LEN)?,
                _ => u.int_in_range(0..=4096)?,
            };
            words.extend_from_slice(&w.to_le_bytes());
        }
        assert!(r.write_bytes(NODES, &words));
        let root = if u.arbitrary()? {
            NODES + u.int_in_range(0..=NODES_LEN / NODE_BYTES)? * NODE_BYTES
        } else {
            u.arbitrary()?
        };
        let len: u64 = if u.arbitrary()? {
            u64::MAX
        } else {
            u.int_in_range(0..=4 * DATA_LEN)?
        };
        let w = walk(&r, root, len, limits);
        assert!(w.len() <= len, "took {} bytes of {len} announced", w.len());
        for f in &w.fragments {
            assert!(
                r.readable(f.addr, f.len),
                "fragment {:#x}+{} is not readable in the region",
                f.addr,
                f.len
            );
        }
        Ok(())
    };
    fuzz(REGRESSIONS, property);
}
