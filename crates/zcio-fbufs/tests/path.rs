//! A data path's fbufs: quota, LIFO reuse, lazy memory, and protection enforced by the kernel
//! between real processes.

mod peer;

use peer::peer;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use zcio_fbufs::path::{FbufError, FbufRef, Originator, PathInfo, PathMemory, Receiver, Variant};
use zcio_fbufs::region::{LastSpan, RegionRead};

fn perms(addr: u64) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    for l in maps.lines() {
        let (range, rest) = l.split_once(' ').unwrap();
        let (a, b) = range.split_once('-').unwrap();
        let (a, b) = (
            u64::from_str_radix(a, 16).unwrap(),
            u64::from_str_radix(b, 16).unwrap(),
        );
        if (a..b).contains(&addr) {
            return rest[..4].to_string();
        }
    }
    panic!("{addr:#x} not mapped");
}

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap()
        .parse()
        .unwrap()
}

/// A path of `chunks` chunks of 1 MiB.
fn path(chunks: usize, variant: Variant) -> PathMemory {
    PathMemory::create(1 << 20, chunks, variant).unwrap()
}

/// A receiver process in `mode` (`receive`, `receive-then-write`, `receive-then-reopen-rw`)
/// given the fbuf `r` of `o`'s path, whose chunk it opens through `o`'s read-only descriptor:
/// how it ended and what it said.
fn receiver(mode: &str, o: &Originator, r: FbufRef) -> std::process::Output {
    let info = o.info();
    let chunk = o
        .chunk_fd((r.addr as usize - info.addr) / info.chunk_bytes)
        .expect("the fbuf's chunk is made");
    peer()
        .arg(mode)
        .args([
            format!("/proc/{}/fd/{}", std::process::id(), chunk.as_raw_fd()),
            info.addr.to_string(),
            info.chunk_bytes.to_string(),
            info.quota_chunks.to_string(),
            info.variant.cached.to_string(),
            info.variant.volatile.to_string(),
            r.addr.to_string(),
            r.len.to_string(),
        ])
        .output()
        .unwrap()
}

/// A stand-in for a chunk of the path of `info` as an originator in another process would
/// announce it: a memory file of a chunk's length holding `bytes` at its start, sealed.
fn chunk_file(info: PathInfo, bytes: &[u8]) -> OwnedFd {
    use std::os::fd::AsFd;
    let fd = zcio_vm::mapping::memfd("fbuf-test-chunk", info.chunk_bytes).unwrap();
    rustix::io::pwrite(&fd, bytes, 0).unwrap();
    zcio_vm::mapping::seal_future_writes(fd.as_fd()).unwrap();
    fd
}

/// A path variant: cached or not, volatile or not.
fn variant(cached: bool, volatile: bool) -> Variant {
    Variant { cached, volatile }
}

#[test]
fn the_quota_stops_one_path_and_not_another() {
    let a = PathMemory::create(64 * 1024, 2, Variant::CACHED_VOLATILE).unwrap();
    let b = PathMemory::create(64 * 1024, 2, Variant::CACHED_VOLATILE).unwrap();
    let mut oa = a.originator().unwrap();
    let mut ob = b.originator().unwrap();
    let mut held = Vec::new();
    let err = loop {
        match oa.alloc(10_000) {
            Ok(f) => held.push(f),
            Err(e) => break e,
        }
    };
    assert_eq!(held.len(), 2 * 64 * 1024 / 12_288); // 3-page fbufs in 2 chunks of 16 pages
    assert!(matches!(err, FbufError::Quota { quota: 2, .. }), "{err}");
    assert!(err.to_string().contains("quota"), "{err}");
    assert_eq!(oa.chunks_used(), 2);
    // The other path is untouched, and freeing makes room again on the first.
    assert!(ob.alloc(64 * 1024).is_ok());
    oa.free(held.pop().unwrap()).unwrap();
    assert!(oa.alloc(10_000).is_ok());
    assert!(matches!(oa.alloc(0), Err(FbufError::Empty)));
}

#[test]
fn freed_fbufs_come_back_last_in_first_out_and_uncleared_when_cached() {
    for cached in [true, false] {
        let p = path(4, variant(cached, true));
        let mut o = p.originator().unwrap();
        let f: Vec<_> = (0..3).map(|_| o.alloc(5000).unwrap()).collect();
        let addrs: Vec<u64> = f.iter().map(|x| x.addr()).collect();
        for (i, x) in f.iter().enumerate() {
            o.write(x, 0, &[i as u8 + 1; 5000]).unwrap();
        }
        let refs: Vec<FbufRef> = f.into_iter().map(|x| o.send(x, 1).unwrap()).collect();
        assert_eq!(o.outstanding(), 3);
        o.freed(refs[0]).unwrap();
        o.freed(refs[2]).unwrap();
        assert!(o.freed(refs[2]).is_err(), "a double free must be refused");
        // LIFO: the most recently freed first; the fresh chunk space is not touched.
        let g = o.alloc(4097).unwrap();
        assert_eq!(g.addr(), addrs[2]);
        let h = o.alloc(8000).unwrap();
        assert_eq!(h.addr(), addrs[0]);
        // Cached fbufs keep their contents (no clearing); uncached ones were cleared.
        let mut b = [0u8; 4];
        assert!(o.read_bytes(g.addr(), &mut b));
        assert_eq!(b, if cached { [3; 4] } else { [0; 4] });
        assert_eq!(o.cached(), 0);
    }
}

#[test]
fn large_fbufs_of_varying_sizes_cost_memory_only_where_touched() {
    let p = path(64, Variant::CACHED_VOLATILE);
    let mut o = p.originator().unwrap();
    let before = rss_kib();
    let sizes = [9 << 20, 12 << 20, 3000, (8 << 20) + 1];
    let fs: Vec<_> = sizes.iter().map(|s| o.alloc(*s).unwrap()).collect();
    for (f, s) in fs.iter().zip(sizes) {
        assert_eq!(f.len(), s as u64);
        o.write(f, 0, b"first").unwrap();
        o.write(f, s as u64 - 4, b"last").unwrap();
        let mut b = [0u8; 4];
        assert!(o.read_bytes(f.addr() + s as u64 - 4, &mut b));
        assert_eq!(&b, b"last");
    }
    // 29 MiB allocated, a few pages touched.
    let grew = rss_kib().saturating_sub(before);
    assert!(grew < 4 * 1024, "RSS grew by {grew} KiB");
    assert!(o.chunks_used() >= 29);
}

#[test]
fn non_volatile_sends_take_write_access_until_every_receiver_has_freed() {
    let p = path(2, variant(true, false));
    let mut o = p.originator().unwrap();
    let f = o.alloc(8192).unwrap();
    let addr = f.addr();
    assert_eq!(perms(addr), "rw-s");
    let r = o.send(f, 2).unwrap();
    assert_eq!(perms(addr), "r--s");
    o.freed(r).unwrap();
    assert_eq!(perms(addr), "r--s", "one receiver still holds it");
    o.freed(r).unwrap();
    assert_eq!(perms(addr), "rw-s");

    // A volatile path keeps write access, until a receiver asks to secure the fbuf.
    let v = path(2, Variant::CACHED_VOLATILE);
    let mut ov = v.originator().unwrap();
    let f = ov.alloc(100).unwrap();
    let a = f.addr();
    let r = ov.send(f, 1).unwrap();
    assert_eq!(perms(a), "rw-s");
    ov.secure(r).unwrap();
    assert_eq!(perms(a), "r--s");
    ov.freed(r).unwrap();
    assert_eq!(perms(a), "rw-s");
    assert!(
        ov.secure(r).is_err(),
        "securing a freed fbuf must be refused"
    );
}

#[test]
fn a_receiver_process_reads_in_place_at_the_same_address_and_cannot_write() {
    for cached in [true, false] {
        let p = path(4, variant(cached, false));
        let info = p.info();
        let mut o = Originator::new(info).unwrap();
        let f = o.alloc(300).unwrap();
        let data: Vec<u8> = (0..300u32).map(|i| (i * 31 % 251) as u8).collect();
        o.write(&f, 0, &data).unwrap();
        let r = o.send(f, 1).unwrap();
        let out = receiver("receive", &o, r);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let hex: String = data.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), hex);

        let out = receiver("receive-then-write", &o, r);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("writable mapping refused"), "{stdout}");
        assert!(
            stdout.contains("storing") && !stdout.contains("store went through"),
            "{stdout}"
        );
        assert_faulted(&out);
        // The data is as the originator wrote it.
        let mut back = vec![0u8; 300];
        assert!(o.read_bytes(r.addr, &mut back));
        assert_eq!(back, data);
    }
}

#[test]
fn a_receiver_that_reopens_a_chunk_read_write_is_refused_every_write_by_the_kernel() {
    let p = path(2, Variant::CACHED_VOLATILE);
    let info = p.info();
    let mut o = Originator::new(info).unwrap();
    assert!(
        o.chunk_fd(0).is_none(),
        "no chunk before the allocator needs one"
    );
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 253) as u8).collect();
    let f = o.alloc(data.len()).unwrap();
    assert!(
        zcio_vm::mapping::is_sealed_for_writes(o.chunk_fd(0).unwrap()),
        "the originator's mapping seals the chunk"
    );
    o.write(&f, 0, &data).unwrap();
    let r = o.send(f, 1).unwrap();
    let out = receiver("receive-then-reopen-rw", &o, r);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Reopening succeeds (the memfd's mode allows it); nothing written through it does.
    assert!(stdout.contains("reopen read-write GRANTED"), "{stdout}");
    for attempt in [
        "writable mapping",
        "write",
        "shrink",
        "punch hole",
        "mprotect writable",
    ] {
        assert!(
            stdout.contains(&format!("{attempt} refused")),
            "{attempt} was not refused:\n{stdout}"
        );
    }
    // The fbuf is as the originator wrote it, and the originator still writes its path.
    let mut back = vec![0u8; data.len()];
    assert!(o.read_bytes(r.addr, &mut back));
    assert_eq!(back, data);
    o.freed(r).unwrap();
    let g = o.alloc(64).unwrap();
    o.write(&g, 0, &[9; 64]).unwrap();
    // A second originator of the path in this process is refused, by name: the range is
    // this one's.
    let e = Originator::new(info).unwrap_err().to_string();
    assert!(e.contains("overlaps"), "{e}");
}

#[test]
fn an_originator_that_writes_a_non_volatile_fbuf_after_sending_it_faults() {
    let out = peer()
        .args(["originator-writes-after-send", "false"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("sent") && !stdout.contains("returned"),
        "{stdout}"
    );
    assert_faulted(&out);
    // A volatile one may be written.
    let out = peer()
        .args(["originator-writes-after-send", "true"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("write after send returned true"));
}

#[test]
fn references_outside_the_path_or_its_chunks_are_refused() {
    let p = PathMemory::create(1 << 16, 2, Variant::CACHED_VOLATILE).unwrap();
    let info = p.info();
    let mut rx = Receiver::new(info).unwrap();
    let base = info.addr as u64;
    // Before its chunk is announced, an fbuf of the path is refused by name.
    let first = FbufRef {
        addr: base,
        len: 10,
    };
    let e = rx.receive(first).unwrap_err();
    assert!(matches!(e, FbufError::NoChunk { chunk: 0, .. }), "{e}");
    assert!(e.to_string().contains("chunk 0"), "{e}");
    rx.add_chunk(info.chunk_ref(0), chunk_file(info, b""))
        .unwrap();
    rx.add_chunk(info.chunk_ref(1), chunk_file(info, b""))
        .unwrap();
    for bad in [
        FbufRef {
            addr: base - 4096,
            len: 10,
        },
        FbufRef {
            addr: base + 1,
            len: 10,
        },
        FbufRef {
            addr: base + (1 << 17) - 4096,
            len: 8192,
        },
        FbufRef { addr: base, len: 0 },
        FbufRef {
            addr: u64::MAX - 4095,
            len: 4096,
        },
    ] {
        let e = rx.receive(bad).unwrap_err();
        assert!(
            e.to_string()
                .contains("not a page-aligned fbuf in this path"),
            "{e}"
        );
    }
    let ok = FbufRef {
        addr: base,
        len: 10,
    };
    rx.receive(ok).unwrap();
    assert!(rx.receive(ok).is_err(), "the same fbuf twice");
    rx.free(ok).unwrap();
    assert!(rx.free(ok).is_err(), "freed twice");
    assert_eq!(rx.held(), 0);
    // Retired, its chunk is read no more, and what lay in it is refused by name.
    rx.retire_chunk(info.chunk_ref(0)).unwrap();
    assert!(rx.read_u64(base).is_none());
    assert!(matches!(rx.receive(ok), Err(FbufError::NoChunk { .. })));
}

#[test]
fn chunk_announcements_and_retirements_that_cannot_be_are_refused_by_name() {
    let p = PathMemory::create(1 << 16, 4, Variant::CACHED_VOLATILE).unwrap();
    let info = p.info();
    let mut rx = Receiver::new(info).unwrap();
    let base = info.addr as u64;
    let cb = info.chunk_bytes as u64;
    let at = |addr: u64, len: u64| FbufRef { addr, len };
    for bad in [
        at(base + 4096, cb),
        at(base, cb - 4096),
        at(base + 4 * cb, cb),
        at(base - cb, cb),
        at(u64::MAX - cb + 1, cb),
    ] {
        let e = rx.add_chunk(bad, chunk_file(info, b"")).unwrap_err();
        assert!(e.to_string().contains("one chunk of this path"), "{e}");
    }
    rx.add_chunk(info.chunk_ref(1), chunk_file(info, b"one"))
        .unwrap();
    // Twice (overlapping chunks), short memory, memory that may shrink: refused.
    let e = rx
        .add_chunk(info.chunk_ref(1), chunk_file(info, b""))
        .unwrap_err();
    assert!(e.to_string().contains("overlapping"), "{e}");
    let short = zcio_vm::mapping::memfd("short", 4096).unwrap();
    let e = rx.add_chunk(info.chunk_ref(2), short).unwrap_err();
    assert!(e.to_string().contains("sealed against shrinking"), "{e}");
    let unsealed = zcio_vm::mapping::memfd("unsealed", info.chunk_bytes).unwrap();
    let e = rx.add_chunk(info.chunk_ref(2), unsealed).unwrap_err();
    assert!(e.to_string().contains("sealed against shrinking"), "{e}");
    // A chunk not known, or holding an fbuf held here, is not retired; the fbuf stays readable.
    let e = rx.retire_chunk(info.chunk_ref(3)).unwrap_err();
    assert!(
        e.to_string().contains("announced here and not retired"),
        "{e}"
    );
    let r = at(base + cb, 3);
    rx.receive(r).unwrap();
    let e = rx.retire_chunk(info.chunk_ref(1)).unwrap_err();
    assert!(e.to_string().contains("holding no fbuf"), "{e}");
    let mut b = [0u8; 3];
    assert!(rx.read_bytes(r.addr, &mut b));
    assert_eq!(&b, b"one");
    rx.free(r).unwrap();
    rx.retire_chunk(info.chunk_ref(1)).unwrap();
    assert!(!rx.read_bytes(r.addr, &mut b));
}

#[test]
fn a_range_read_is_refused_unless_one_mapping_holds_all_of_it() {
    // Uncached: each fbuf received is a mapping of its own, here two side by side.
    let p = path(1, variant(false, false));
    let mut rx = Receiver::new(p.info()).unwrap();
    rx.add_chunk(p.info().chunk_ref(0), chunk_file(p.info(), b""))
        .unwrap();
    let base = p.info().addr as u64;
    let (a, b) = (
        FbufRef {
            addr: base,
            len: 4096,
        },
        FbufRef {
            addr: base + 4096,
            len: 4096,
        },
    );
    rx.receive(a).unwrap();
    rx.receive(b).unwrap();
    assert_eq!(rx.read_words::<2>(base + 4080), Some([0, 0]));
    assert_eq!(rx.read_words::<2>(base + 4096), Some([0, 0]));
    // Straddling the two mappings, though both are readable word by word.
    assert!(rx.read_u64(base + 4088).is_some() && rx.read_u64(base + 4096).is_some());
    assert_eq!(rx.read_words::<2>(base + 4088), None);
    assert!(rx.words(base + 4088, 16).is_none());
    // Each mapping is a span of its own; read through the spans found, the same refusals.
    let (sa, sb) = (rx.span(base + 8).unwrap(), rx.span(base + 4096).unwrap());
    assert_eq!(
        (sa.base(), sa.len(), sb.base(), sb.len()),
        (base, 4096, base + 4096, 4096)
    );
    let c = LastSpan::new(&rx);
    assert_eq!(c.read_words::<1>(base + 4088), Some([0]));
    assert_eq!(c.read_words::<1>(base + 4096), Some([0]));
    assert_eq!(c.read_words::<2>(base + 4088), None);
    assert!(!c.readable(base + 4088, 16) && c.readable(base + 4096, 4096));
    assert!(!c.readable(base + 4096, 4097));
    // Ending past the last one, starting before the first, unaligned.
    assert_eq!(rx.read_words::<2>(base + 8184), None);
    assert_eq!(rx.read_words::<1>(base - 8), None);
    assert_eq!(rx.read_words::<1>(base + 4), None);
    // Once freed, an fbuf is read no more.
    rx.free(b).unwrap();
    assert_eq!(rx.read_words::<1>(base + 4096), None);
    // Cached: the path is one mapping; a range that ends past it is refused.
    let p = path(1, Variant::CACHED_VOLATILE);
    let mut rx = Receiver::new(p.info()).unwrap();
    rx.add_chunk(p.info().chunk_ref(0), chunk_file(p.info(), b""))
        .unwrap();
    let (base, end) = (
        p.info().addr as u64,
        (p.info().addr + p.info().len()) as u64,
    );
    assert_eq!(rx.read_words::<4>(base), Some([0; 4]));
    assert_eq!(rx.read_words::<1>(end - 8), Some([0]));
    assert_eq!(rx.read_words::<2>(end - 8), None);
    assert_eq!(rx.read_words::<1>(end), None);
    assert!(rx.span(end).is_none() && rx.span(base - 1).is_none());
    assert_eq!(rx.span(end - 1).map(|s| s.len()), Some(end - base));
}

/// The peer died of a segmentation fault (SIGSEGV).
fn assert_faulted(out: &std::process::Output) {
    assert_eq!(
        out.status.signal(),
        Some(libc_sigsegv()),
        "{:?}",
        out.status
    );
}

fn libc_sigsegv() -> i32 {
    11
}
