//! The stack in one protection domain (the baseline of the paper's Figure 4), and the
//! aggregate operations alone, timed one by one.

use super::Stream;
use super::agg::{Scratch, build, receive, space};
use super::proto::{Fragments, PAGE, Record, Touch, write};
use crate::transfer::Res;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::hint::black_box;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;
use zcio_fbufs::aggregate::{Builder, BumpNodes, Limits, NODE_BYTES, walk};
use zcio_fbufs::region::{LocalRegion, RegionWrite};

/// The single-domain contender's name.
pub const SINGLE: &str = "single-domain";

/// Where the local region claims to sit (any 8-aligned address will do: nothing maps it).
const BASE: u64 = 1 << 40;

/// One domain's region: a datagram's data at [`BASE`], its headers and nodes after it.
struct Local {
    region: LocalRegion,
    nodes_at: u64,
    frags: Fragments,
}

impl Local {
    fn new(len: usize, mtu: usize) -> Local {
        let frags = Fragments::new(len, mtu);
        let data = len.next_multiple_of(PAGE) as u64;
        Local {
            region: LocalRegion::new(BASE, data as usize + space(frags)),
            nodes_at: BASE + data,
            frags,
        }
    }
}

/// The whole stack in this process: per datagram, the application writes the data, UDP and IP
/// build the fragments' aggregate, and the receiving side walks, reassembles and touches it,
/// with no domain crossing. The time per timed datagram (ns); the record checked after.
pub fn single_domain(s: &Stream) -> Res<f64> {
    let l = Local::new(s.len, s.mtu);
    let words = l
        .region
        .words_mut(BASE, s.len.next_multiple_of(8) as u64)
        .ok_or("the local region has no room for the data")?;
    let mut rec = Record::new(SINGLE, s.touch, s.len, s.mtu, s.datagrams());
    let mut scratch = Scratch::default();
    let t0 = s.send(
        || Ok(()),
        |i| {
            write(s.touch, i as u64, s.len, |w, v| words[w].store(v, Relaxed));
            if s.spoils(i) {
                words[s.spoiled_word()].fetch_xor(1, Relaxed);
            }
            let m = build(&l.region, l.nodes_at, BASE, l.frags, i as u32)?;
            let id = rec.received() as u32;
            receive(&l.region, m, id, &mut rec, &mut scratch)
                .map_err(|e| format!("{SINGLE}: {e}").into())
        },
    )?;
    let ns = t0.elapsed().as_nanos() as f64 / s.count as f64;
    rec.check()?;
    Ok(ns)
}

/// One aggregate operation, timed alone.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct OpRow {
    /// The operation: `join`, `split`, `prepend-header`, `fragment-datagram` (UDP's prepend
    /// and IP's fragments, headers written, for a whole datagram) or `walk-reassemble` (the
    /// receiving side's walk, reassembly and one word touched per page, for a whole datagram).
    pub op: String,
    /// Datagram size the operation worked on (bytes).
    pub bytes: usize,
    /// Fragments of that datagram.
    pub fragments: usize,
    /// Median over rounds of the time per operation (ns).
    pub ns_per_op: f64,
    /// Lowest and highest round (ns).
    pub spread_ns: [f64; 2],
}

/// Time `op` `iters` times per round over `rounds` rounds: the median and spread (ns per op).
fn timed(rounds: usize, iters: usize, mut op: impl FnMut(usize)) -> (f64, [f64; 2]) {
    let mut v: Vec<f64> = (0..rounds)
        .map(|_| {
            let t = Instant::now();
            for i in 0..iters {
                op(i);
            }
            t.elapsed().as_nanos() as f64 / iters as f64
        })
        .collect();
    v.sort_by(f64::total_cmp);
    (
        crate::report::fit::median(&v).unwrap_or(f64::NAN),
        crate::report::fit::spread(&v),
    )
}

/// The aggregate operations on a datagram of `len` bytes at `mtu`, `iters` times a round:
/// join, split and header prepend one at a time, then a whole datagram's fragmenting and its
/// walk and reassembly.
pub fn aggregate_ops(len: usize, mtu: usize, rounds: usize, iters: usize) -> Res<Vec<OpRow>> {
    let l = Local::new(len, mtu);
    let r = &l.region;
    // The single operations' nodes go after a datagram's data, a batch of 4096 operations
    // (three nodes at most each) at a time.
    let batch = 4096u64;
    let batch_bytes = batch * 3 * NODE_BYTES;
    let node_area = LocalRegion::new(BASE, len.next_multiple_of(PAGE) + batch_bytes as usize);
    let mut rows = Vec::new();
    let mut row = |op: &str, (ns, spread): (f64, [f64; 2])| {
        rows.push(OpRow {
            op: op.into(),
            bytes: len,
            fragments: l.frags.count(),
            ns_per_op: ns,
            spread_ns: spread,
        })
    };
    let nodes_at = BASE + len.next_multiple_of(PAGE) as u64;
    let fresh = || Builder::new(&node_area, BumpNodes::new(nodes_at, batch_bytes));
    let hdr = [0x45u8; 20];
    let one = |f: &dyn Fn(&mut Builder<'_, LocalRegion, BumpNodes>) -> Option<u64>| {
        let mut b = fresh();
        timed(rounds, iters, |i| {
            if i as u64 % batch == 0 {
                b = fresh();
            }
            black_box(f(&mut b));
        })
    };
    let leaf = |b: &mut Builder<'_, LocalRegion, BumpNodes>| b.leaf(BASE, len as u64).ok();
    row(
        "join",
        one(&|b| {
            let (x, y) = (leaf(b)?, leaf(b)?);
            b.join(x, y).ok().map(|m| m.root)
        }),
    );
    row(
        "split",
        one(&|b| {
            let x = leaf(b)?;
            b.split(x, len as u64 / 2).ok().map(|m| m.1.root)
        }),
    );
    row(
        "prepend-header",
        one(&|b| {
            let x = leaf(b)?;
            node_area.write_bytes(BASE, &hdr).then_some(())?;
            let h = b.leaf(BASE, hdr.len() as u64).ok()?;
            b.prepend(h, x).ok().map(|m| m.root)
        }),
    );
    let m = build(r, l.nodes_at, BASE, l.frags, 0)?;
    row(
        "fragment-datagram",
        timed(rounds, iters, |_| {
            black_box(build(r, l.nodes_at, BASE, l.frags, 0).ok());
        }),
    );
    let mut rec = Record::new("aggregate-ops", Touch::Word, len, mtu, 1);
    let mut scratch = Scratch::default();
    // The message reassembles (the timed calls below do the same work).
    receive(r, m, 0, &mut rec, &mut scratch)?;
    row(
        "walk-reassemble",
        timed(rounds, iters, |_| {
            black_box(receive(r, m, 0, &mut rec, &mut scratch).is_ok());
        }),
    );
    row(
        "walk",
        timed(rounds, iters, |_| {
            black_box(walk(r, m.root, m.len, Limits::default()).fragments.len());
        }),
    );
    Ok(rows)
}
