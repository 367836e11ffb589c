//! Aggregate objects in the region: the x-kernel operations against a plain byte model, and a
//! receiver that survives whatever an originator writes.

use proptest::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use zcio_fbufs::aggregate::{
    Anomalies, Builder, BumpNodes, Limits, Msg, NODE_BYTES, Separator, Unit, Units, Walk, walk,
    walk_into,
};
use zcio_fbufs::region::{LocalRegion, RegionRead, RegionWrite};

const BASE: u64 = 0x7f00_0000_0000;
const DATA: u64 = BASE;
const DATA_LEN: u64 = 64 * 1024;
const NODES: u64 = BASE + DATA_LEN;
const NODES_LEN: u64 = 64 * 1024;

fn region() -> LocalRegion {
    let r = LocalRegion::new(BASE, (DATA_LEN + NODES_LEN) as usize);
    let data: Vec<u8> = (0..DATA_LEN).map(|i| (i * 7 + i / 251) as u8).collect();
    assert!(r.write_bytes(DATA, &data));
    r
}

fn bytes(r: &LocalRegion, addr: u64, len: u64) -> Vec<u8> {
    let mut v = vec![0u8; len as usize];
    assert!(r.read_bytes(addr, &mut v));
    v
}

#[derive(Debug, Clone)]
enum Op {
    Leaf(u64, u64),
    Join(usize, usize),
    Split(usize, u64, bool),
    ClipFront(usize, u64),
    ClipBack(usize, u64),
    Prepend(u64, u64, usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0..DATA_LEN, 0..4096u64).prop_map(|(a, l)| Op::Leaf(a, l)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Op::Join(a, b)),
        (any::<usize>(), any::<u64>(), any::<bool>()).prop_map(|(m, at, s)| Op::Split(m, at, s)),
        (any::<usize>(), any::<u64>()).prop_map(|(m, n)| Op::ClipFront(m, n)),
        (any::<usize>(), any::<u64>()).prop_map(|(m, n)| Op::ClipBack(m, n)),
        (0..DATA_LEN, 0..64u64, any::<usize>()).prop_map(|(a, l, m)| Op::Prepend(a, l, m)),
    ]
}

proptest! {
    /// Every message the builder makes reads back, fragment by fragment, as the same bytes as
    /// the same operations on a plain Vec<u8>, and its walk is clean.
    #[test]
    fn operations_match_a_byte_model(ops in prop::collection::vec(op(), 1..40)) {
        let r = region();
        let mut b = Builder::new(&r, BumpNodes::new(NODES, NODES_LEN));
        let mut msgs: Vec<(Msg, Vec<u8>)> = Vec::new();
        for o in ops {
            let pick = |i: usize| i % msgs.len().max(1);
            let made = match o {
                Op::Leaf(a, l) => {
                    let l = l.min(DATA_LEN - a);
                    Some((b.leaf(DATA + a, l).unwrap(), bytes(&r, DATA + a, l)))
                }
                _ if msgs.is_empty() => None,
                Op::Join(i, j) => {
                    let (x, y) = (msgs[pick(i)].clone(), msgs[pick(j)].clone());
                    let mut v = x.1.clone();
                    v.extend(&y.1);
                    Some((b.join(x.0, y.0).unwrap(), v))
                }
                Op::Split(i, at, second) => {
                    let x = msgs[pick(i)].clone();
                    let at = at % (x.0.len + 1);
                    let (p, q) = b.split(x.0, at).unwrap();
                    Some(if second { (q, x.1[at as usize..].to_vec()) } else { (p, x.1[..at as usize].to_vec()) })
                }
                Op::ClipFront(i, n) => {
                    let x = msgs[pick(i)].clone();
                    let n = n % (x.0.len + 1);
                    Some((b.clip_front(x.0, n).unwrap(), x.1[n as usize..].to_vec()))
                }
                Op::ClipBack(i, n) => {
                    let x = msgs[pick(i)].clone();
                    let n = n % (x.0.len + 1);
                    Some((b.clip_back(x.0, n).unwrap(), x.1[..(x.0.len - n) as usize].to_vec()))
                }
                Op::Prepend(a, l, i) => {
                    let x = msgs[pick(i)].clone();
                    let l = l.min(DATA_LEN - a);
                    let h = b.leaf(DATA + a, l).unwrap();
                    let mut v = bytes(&r, DATA + a, l);
                    v.extend(&x.1);
                    Some((b.prepend(h, x.0).unwrap(), v))
                }
            };
            if let Some((m, v)) = made {
                prop_assert_eq!(m.len, v.len() as u64);
                let w = walk(&r, m.root, m.len, Limits::default());
                prop_assert!(w.anomalies.is_clean(), "{:?}", w.anomalies);
                prop_assert_eq!(&w.to_vec(&r), &v);
                msgs.push((m, v));
            }
        }
    }

    /// Records and lines come out whole across fragment boundaries; only the units that
    /// straddle fragments are copied.
    #[test]
    fn units_cross_fragments_and_copy_only_when_they_straddle(
        cuts in prop::collection::vec(1u64..300, 1..12),
        record in 1u64..200,
        line_every in 5u64..90,
    ) {
        let r = region();
        // Text with a newline every `line_every` bytes.
        let text: Vec<u8> = (0..DATA_LEN).map(|i| if i % line_every == line_every - 1 { b'\n' } else { b'a' + (i % 26) as u8 }).collect();
        assert!(r.write_bytes(DATA, &text));
        let mut b = Builder::new(&r, BumpNodes::new(NODES, NODES_LEN));
        // A message of fragments of the given sizes, each from a different place.
        let mut at = 0;
        let mut msg: Option<Msg> = None;
        let mut model = Vec::new();
        for c in &cuts {
            let leaf = b.leaf(DATA + at, *c).unwrap();
            model.extend_from_slice(&text[at as usize..(at + c) as usize]);
            msg = Some(match msg { None => leaf, Some(m) => b.join(m, leaf).unwrap() });
            at += c + 13;
        }
        let m = msg.unwrap();
        let w = walk(&r, m.root, m.len, Limits::default());
        for sep in [Separator::Fixed(record), Separator::Byte(b'\n')] {
            let mut units = Units::new(&r, &w, sep).unwrap();
            let mut got = Vec::new();
            let mut straddled = 0u64;
            let mut all: Vec<u8> = Vec::new();
            for u in &mut units {
                let v = u.to_vec(&r);
                match (&u, sep) {
                    (Unit::Copied(_), _) => straddled += v.len() as u64,
                    (Unit::InPlace(f), _) => prop_assert!(w.fragments.iter().any(|g| f.addr >= g.addr && f.addr + f.len <= g.addr + g.len)),
                }
                match sep {
                    Separator::Fixed(k) => prop_assert!(v.len() as u64 == k || all.len() + v.len() == model.len()),
                    Separator::Byte(c) => prop_assert!(v.last() == Some(&c) || all.len() + v.len() == model.len()),
                }
                all.extend(&v);
                got.push(v);
            }
            prop_assert_eq!(&all, &model);
            prop_assert_eq!(units.copied_bytes, straddled);
        }
    }
}

fn node(r: &LocalRegion, at: u64, kind: u64, w: [u64; 3]) {
    for (i, x) in [0x7a63_6167_0000_0000 | kind, w[0], w[1], w[2]]
        .into_iter()
        .enumerate()
    {
        assert!(r.write_u64(at + 8 * i as u64, x));
    }
}

#[test]
fn malformed_messages_read_as_no_data_and_end() {
    let r = region();
    let n = |i: u64| NODES + i * NODE_BYTES;
    // A leaf, then a join that refers to itself on the right: the cycle is cut.
    node(&r, n(0), 1, [DATA, 10, 0]);
    node(&r, n(1), 2, [n(0), n(1), 20]);
    let w = walk(&r, n(1), u64::MAX, Limits::default());
    assert_eq!(w.to_vec(&r), bytes(&r, DATA, 10));
    assert_eq!(w.anomalies.cycles, 1);

    // References outside the region, misaligned, without a tag: no data.
    node(&r, n(2), 2, [0x10, n(0) + 4, 30]);
    let w = walk(&r, n(2), u64::MAX, Limits::default());
    assert!(w.is_empty());
    assert_eq!(w.anomalies.invalid_refs, 2);
    // A join whose left side holds no node tag: that side is no data, the right side stands.
    node(&r, n(3), 2, [DATA, n(0), 20]);
    let w = walk(&r, n(3), u64::MAX, Limits::default());
    assert_eq!(w.to_vec(&r), bytes(&r, DATA, 10));
    assert_eq!(w.anomalies.invalid_refs, 1);

    // Leaf data beyond the region, or overflowing: no data, never read.
    node(&r, n(4), 1, [NODES + NODES_LEN - 4, 100, 0]);
    node(&r, n(5), 1, [u64::MAX - 8, 100, 0]);
    node(&r, n(6), 2, [n(4), n(5), 200]);
    let w = walk(&r, n(6), u64::MAX, Limits::default());
    assert!(w.is_empty());
    assert_eq!(w.anomalies.bad_data, 2);

    // Absurd lengths and offsets are clamped to what the leaves hold.
    node(&r, n(7), 3, [n(0), u64::MAX - 1, u64::MAX]);
    assert!(walk(&r, n(7), u64::MAX, Limits::default()).is_empty());
    node(&r, n(8), 3, [n(0), 3, u64::MAX]);
    assert_eq!(
        walk(&r, n(8), u64::MAX, Limits::default()).to_vec(&r),
        bytes(&r, DATA + 3, 7)
    );

    // A root that is not a node at all.
    let w = walk(&r, 0xdead_beef, 100, Limits::default());
    assert!(w.is_empty() && w.anomalies.invalid_refs == 1);

    // The receiver takes no more than the sender announced.
    assert_eq!(walk(&r, n(0), 4, Limits::default()).len(), 4);
}

#[test]
fn a_node_that_runs_off_the_region_is_no_node_and_a_reused_walk_starts_afresh() {
    let r = region();
    let n = |i: u64| NODES + i * NODE_BYTES;
    node(&r, n(0), 1, [DATA, 10, 0]);
    // The last 16 bytes of the region hold a node's tag and first word; the rest would lie
    // past the end. Read as a whole node, it is refused, as the root and as a join's child.
    let edge = NODES + NODES_LEN - 16;
    assert!(r.write_u64(edge, r.read_u64(n(0)).unwrap()));
    assert!(r.write_u64(edge + 8, DATA));
    let w = walk(&r, edge, u64::MAX, Limits::default());
    assert!(w.is_empty() && w.anomalies.invalid_refs == 1, "{w:?}");
    node(&r, n(1), 2, [edge, n(0), 20]);
    let mut reused = Walk::default();
    walk_into(&r, n(1), u64::MAX, Limits::default(), &mut reused);
    assert_eq!(reused.to_vec(&r), bytes(&r, DATA, 10));
    assert_eq!(reused.anomalies.invalid_refs, 1);
    // The same walk again, into the same list: nothing is left over from the first.
    node(&r, n(2), 2, [n(0), n(0), 20]);
    walk_into(&r, n(2), u64::MAX, Limits::default(), &mut reused);
    assert!(reused.anomalies.is_clean());
    assert_eq!(
        reused.fragments,
        walk(&r, n(2), u64::MAX, Limits::default()).fragments
    );
    assert_eq!(reused.len(), 20);
}

#[test]
fn a_dag_that_explodes_as_a_tree_is_cut_off() {
    // Each join refers twice to the previous one: 2^60 leaves as a tree, 61 nodes as a DAG.
    let r = region();
    node(&r, NODES, 1, [DATA, 1, 0]);
    let mut len = 1u64;
    for i in 1..=60u64 {
        let prev = NODES + (i - 1) * NODE_BYTES;
        len = len.saturating_mul(2);
        node(&r, NODES + i * NODE_BYTES, 2, [prev, prev, len]);
    }
    let limits = Limits {
        max_visits: 10_000,
        max_depth: 256,
    };
    let t = std::time::Instant::now();
    let w = walk(&r, NODES + 60 * NODE_BYTES, u64::MAX, limits);
    assert!(w.anomalies.truncated);
    assert!(w.fragments.len() <= limits.max_visits);
    assert!(t.elapsed() < std::time::Duration::from_secs(5));
    // Depth is bounded too.
    let deep = walk(
        &r,
        NODES + 60 * NODE_BYTES,
        u64::MAX,
        Limits {
            max_visits: 1 << 20,
            max_depth: 8,
        },
    );
    assert!(deep.anomalies.too_deep > 0);
}

/// An originator rewrites a volatile message's nodes at random while a receiver walks it: no
/// crash, no endless walk, no fragment outside the region.
#[test]
fn concurrent_rewriting_never_breaks_the_receiver() {
    let r = region();
    let mut b = Builder::new(&r, BumpNodes::new(NODES, NODES_LEN));
    let mut m = b.leaf(DATA, 100).unwrap();
    for i in 1..200u64 {
        let l = b.leaf(DATA + i * 97, 50 + i).unwrap();
        m = if i % 3 == 0 {
            b.prepend(l, m).unwrap()
        } else {
            b.join(m, l).unwrap()
        };
        if i % 7 == 0 {
            m = b.clip_front(m, 3).unwrap();
        }
    }
    // The node words as built (about 430 nodes), to restore between rounds of spoiling.
    let used = 600 * NODE_BYTES;
    let snapshot: Vec<u64> = (0..used / 8)
        .map(|i| r.read_u64(NODES + 8 * i).unwrap())
        .collect();
    let stop = AtomicBool::new(false);
    let writes = AtomicU64::new(0);
    let limits = Limits {
        max_visits: 20_000,
        max_depth: 512,
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            let mut g = zcio_testkit::data::Xorshift::new(1);
            let mut next = || g.next_u64();
            while !stop.load(Ordering::Relaxed) {
                // Put the message back as it was, then spoil a few of its words, so that the
                // receiver walks every mixture of good and bad nodes.
                for (i, w) in snapshot.iter().enumerate() {
                    r.write_u64(NODES + 8 * i as u64, *w);
                }
                for _ in 0..1 + next() % 8 {
                    let y = next();
                    // Garbage, a plausible but wrong node address, an address just below the
                    // region, or a small number (a length, an offset).
                    let slot = NODES + (y % (used / 8)) * 8;
                    let value = match y % 4 {
                        0 => next(),
                        1 => NODES + ((next() % used) & !7),
                        2 => BASE.wrapping_sub(next() % 4096),
                        _ => next() % 5000,
                    };
                    r.write_u64(slot, value);
                    writes.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let mut anomalies = Anomalies::default();
        let (mut walks, mut fragments) = (0usize, 0usize);
        // At least 2000 walks, and on until the originator has spoiled many words.
        while walks < 2000 || writes.load(Ordering::Relaxed) < 50_000 {
            walks += 1;
            let w = walk(&r, m.root, u64::MAX, limits);
            assert!(w.fragments.len() <= limits.max_visits);
            for f in &w.fragments {
                assert!(f.addr >= BASE && f.addr + f.len <= BASE + r.len(), "{f:?}");
            }
            fragments += w.fragments.len();
            let _ = w.to_vec(&r);
            anomalies.invalid_refs += w.anomalies.invalid_refs;
            anomalies.cycles += w.anomalies.cycles;
            anomalies.bad_data += w.anomalies.bad_data;
        }
        stop.store(true, Ordering::Relaxed);
        // The spoiled words were met, and the walks still found data around them.
        assert!(
            anomalies.invalid_refs + anomalies.cycles + anomalies.bad_data > 0,
            "{anomalies:?}"
        );
        assert!(
            fragments > walks,
            "the walks found hardly any data: {fragments} fragments in {walks} walks"
        );
    });
}

#[test]
fn builder_errors_name_the_problem() {
    let r = region();
    let mut b = Builder::new(&r, BumpNodes::new(NODES, 2 * NODE_BYTES));
    let m = b.leaf(DATA, 10).unwrap();
    assert!(b.split(m, 11).is_err());
    assert!(b.clip_front(m, 11).is_err());
    let e = b.leaf(BASE + DATA_LEN + NODES_LEN - 4, 8).unwrap_err();
    assert!(e.to_string().contains("not in the fbuf region"), "{e}");
    let _ = b.leaf(DATA, 1).unwrap();
    let e = b.leaf(DATA, 1).unwrap_err();
    assert!(e.to_string().contains("no room"), "{e}");
    assert!(
        Units::new(
            &r,
            &walk(&r, m.root, m.len, Limits::default()),
            Separator::Fixed(0)
        )
        .is_none()
    );
}
