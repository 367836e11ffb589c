//! A path's cached memory given back under its budget (paper 001, §3.3: "the amount of
//! physical memory allocated to a particular data path's fbufs is determined by its recent
//! traffic"): after a burst, a small budget retires the chunks that hold no live fbuf, every
//! process unmaps them and closes their memfds, and the kernel frees their pages (measured by
//! the kernel's own count of shared memory pages, and by the resident pages of the path's range
//! in each process), while the fbufs still held stay intact. Chunks made again after they were
//! retired are announced again, and every byte arrives as sent, directly and through a
//! forwarder; a reference into a retired chunk is refused by name.

mod peer;

use peer::peer;
use std::io::{BufRead, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use zcio_fbufs::link::{LinkError, OriginatorEnd, Received, ReceiverEnd, offer_path};
use zcio_fbufs::path::{FbufError, FbufRef, PathInfo, PathMemory, Variant};
use zcio_fbufs::pattern;
use zcio_fbufs::region::RegionRead;
use zcio_fbufs::ring::{Dir, Rings};

const MIB: usize = 1 << 20;

/// Bytes of shared memory pages (memfds') the kernel holds, as it counts them for this
/// process's memory cgroup (`memory.stat`, v2 or v1), or else for the whole machine
/// (`/proc/meminfo`); and which of the two.
fn shmem_bytes() -> (u64, &'static str) {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next(), parts.next());
        let stat = match (controllers, path) {
            (Some(""), Some(p)) => format!("/sys/fs/cgroup{p}/memory.stat"),
            (Some(c), Some(p)) if c.split(',').any(|c| c == "memory") => {
                format!("/sys/fs/cgroup/memory{p}/memory.stat")
            }
            _ => continue,
        };
        let field = std::fs::read_to_string(stat).ok().and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("shmem ").map(|v| v.trim().parse().ok()))
                .flatten()
        });
        if let Some(b) = field {
            return (b, "the memory cgroup's shmem");
        }
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("Shmem:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("Shmem in /proc/meminfo");
    (kib * 1024, "/proc/meminfo's Shmem")
}

/// Resident bytes of the mappings of process `pid` inside `info`'s range (`smaps` Rss).
fn rss_in_path(pid: u32, info: PathInfo) -> u64 {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let (lo, hi) = (info.addr as u64, (info.addr + info.len()) as u64);
    let mut inside = false;
    let mut kib = 0;
    for l in smaps.lines() {
        if let Some((range, _)) = l.split_once(' ')
            && let Some((a, b)) = range.split_once('-')
            && let (Ok(a), Ok(b)) = (u64::from_str_radix(a, 16), u64::from_str_radix(b, 16))
        {
            inside = a >= lo && b <= hi;
        } else if inside && let Some(v) = l.strip_prefix("Rss:") {
            kib += v
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap();
        }
    }
    kib * 1024
}

/// Wait (up to 20 s) until `f` holds, polling `end` meanwhile; `what` names it if it never does.
fn wait_until(end: &mut OriginatorEnd, what: &str, mut f: impl FnMut(&OriginatorEnd) -> bool) {
    let t = Instant::now();
    while !f(end) {
        assert!(t.elapsed() < Duration::from_secs(20), "never: {what}");
        end.poll(false).unwrap();
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// An originator of a path of `chunks` chunks of 1 MiB, listening on a fresh socket.
fn origin(chunks: usize, v: Variant) -> (tempfile::TempDir, UnixListener, OriginatorEnd) {
    let dir = tempfile::tempdir().unwrap();
    let l = UnixListener::bind(dir.path().join("up")).unwrap();
    let p = PathMemory::create(MIB, chunks, v).unwrap();
    (dir, l, OriginatorEnd::new(p.originator().unwrap()))
}

/// A receiver process in mode `hold-every` (holding every `k`-th fbuf) joined to `end`.
fn receiver(dir: &tempfile::TempDir, l: &UnixListener, end: &mut OriginatorEnd, k: u64) -> Child {
    let child = peer()
        .arg("hold-every")
        .arg(dir.path().join("up"))
        .arg(k.to_string())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (s, _) = l.accept().unwrap();
    end.add_receiver(s).unwrap();
    child
}

/// A burst: fbufs `from..to` of `len` bytes each, all allocated before any is sent, the
/// pattern of their number in every byte.
fn send_burst(end: &mut OriginatorEnd, from: u64, to: u64, len: usize) -> Vec<FbufRef> {
    let fbufs: Vec<_> = (from..to)
        .map(|i| {
            let f = end.originator.alloc(len).unwrap();
            end.originator.write(&f, 0, &pattern(i, len)).unwrap();
            f
        })
        .collect();
    fbufs
        .into_iter()
        .map(|f| end.send(f, &[0]).unwrap())
        .collect()
}

/// The first line `child` prints once it is done.
fn said(child: &mut Child) -> String {
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(child.wait().unwrap().success(), "{line}");
    line
}

#[test]
fn a_small_budget_after_a_burst_gives_the_pages_back_and_held_fbufs_stay_intact() {
    // 40 fbufs of 768 KiB (straddling the 1 MiB chunks), every byte written: 30 chunks. The
    // receiver holds every 10th (4 of them, pinning their chunks) and frees the rest.
    let (dir, l, mut end) = origin(64, Variant::CACHED_VOLATILE);
    let info = end.originator.info();
    let (before, source) = shmem_bytes();
    let mut rx = receiver(&dir, &l, &mut end, 10);
    let len = 768 << 10;
    let sent = send_burst(&mut end, 0, 40, len);
    wait_until(&mut end, "all but the held fbufs back", |e| {
        e.originator.outstanding() == 4
    });
    let made = end.originator.chunks_used();
    assert_eq!(made, 30);
    let (burst, _) = shmem_bytes();
    let rx_rss = rss_in_path(rx.id(), info);
    assert!(
        burst >= before + 28 * MIB as u64 && rx_rss >= 28 * MIB as u64,
        "the burst took {} MiB of {source} and {} MiB resident in the receiver",
        (burst.saturating_sub(before)) >> 20,
        rx_rss >> 20
    );
    // A budget of 2 MiB: every chunk without a held fbuf goes, coldest first, until what is
    // cached fits or only the pinned chunks are left.
    end.set_cache_budget(2 * MIB).unwrap();
    let kept = end.originator.chunks_used();
    let (_, retired) = end.originator.chunks_made_retired();
    assert_eq!(kept as u64 + retired, made as u64);
    assert!(kept <= 10, "{kept} chunks kept");
    assert!(end.originator.cached_bytes() <= kept * MIB);
    // The receiver unmaps them and closes their memfds as it takes the retirements; the
    // kernel frees the pages then.
    let freed_at_least = (made - kept) as u64 * MIB as u64 * 9 / 10;
    let t = Instant::now();
    let (after, rx_after) = loop {
        let (now, _) = shmem_bytes();
        let rss = rss_in_path(rx.id(), info);
        if burst.saturating_sub(now) >= freed_at_least && rss <= (kept * MIB) as u64 {
            // What the kernel still has to free of it, a moment later, for the account below.
            std::thread::sleep(Duration::from_millis(200));
            break (shmem_bytes().0.min(now), rss_in_path(rx.id(), info));
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{retired} chunks retired, but {source} went from {} to {} MiB and the receiver \
             keeps {} MiB of the path resident",
            burst >> 20,
            now >> 20,
            rss >> 20
        );
        std::thread::sleep(Duration::from_millis(5));
    };
    let own = rss_in_path(std::process::id(), info);
    assert!(own <= (kept * MIB) as u64, "{own} bytes resident here");
    println!(
        "burst: {} chunks, {source} +{} KiB; budget 2 MiB: {retired} retired, {kept} kept; \
         {source} -{} KiB, receiver's path resident {} -> {} KiB, originator's {} KiB",
        made,
        (burst - before) >> 10,
        (burst - after) >> 10,
        rx_rss >> 10,
        rx_after >> 10,
        own >> 10
    );
    // The held fbufs are intact here, and (read again at the close) in the receiver; a second
    // burst makes chunks again, announced again, and arrives byte for byte.
    for (i, r) in sent.iter().enumerate().step_by(10) {
        let mut b = vec![0u8; len];
        assert!(end.originator.read_bytes(r.addr, &mut b));
        assert!(b == pattern(i as u64, len), "held fbuf {i} changed");
    }
    send_burst(&mut end, 40, 80, len);
    wait_until(&mut end, "the second burst back", |e| {
        e.originator.outstanding() == 8
    });
    assert!(end.originator.chunks_made_retired().0 > made as u64);
    drop(end);
    let line = said(&mut rx);
    assert_eq!(line.trim(), "ok 80 held 8 intact 8");
}

/// A stream through `forwarded` or not, on a path whose budget is nothing: every chunk whose
/// fbufs are all back is retired at once, and made again (announced again) for the next.
fn churn(forwarded: bool, v: Variant) {
    let (dir, l, mut end) = origin(8, v);
    end.set_cache_budget(0).unwrap();
    let down = dir.path().join("down");
    let mut server = None;
    let mut rx = if forwarded {
        let mut s = peer()
            .arg("forward")
            .arg(dir.path().join("up"))
            .arg(&down)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (sock, _) = l.accept().unwrap();
        end.add_receiver(sock).unwrap();
        let mut out = std::io::BufReader::new(s.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "listening");
        server = Some((s, out));
        peer()
            .arg("hold-every")
            .arg(&down)
            .arg("0")
            .stdout(Stdio::piped())
            .spawn()
            .unwrap()
    } else {
        receiver(&dir, &l, &mut end, 0)
    };
    // Sizes that straddle chunks and sizes that fill them, one at a time in flight so that
    // each comes back to an idle chunk.
    for i in 0..60u64 {
        let len = [MIB, 3 * MIB / 2, 5000, 2 * MIB, MIB / 2][i as usize % 5];
        let f = end.alloc_waiting(len).unwrap();
        end.originator.write(&f, 0, &pattern(i, len)).unwrap();
        end.send(f, &[0]).unwrap();
        wait_until(&mut end, "the fbuf back", |e| {
            e.originator.outstanding() == 0
        });
        assert_eq!(
            end.originator.chunks_used(),
            0,
            "fbuf {i} back, a chunk kept"
        );
    }
    let (made, retired) = end.originator.chunks_made_retired();
    assert!(
        made >= 60 && retired == made,
        "{made} made, {retired} retired"
    );
    drop(end);
    assert_eq!(said(&mut rx).trim(), "ok 60 held 0 intact 0");
    if let Some((mut s, mut out)) = server {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "forwarded 60");
        assert!(s.wait().unwrap().success());
    }
}

#[test]
fn chunks_retired_and_made_again_carry_every_byte_to_a_receiver() {
    churn(false, Variant::CACHED_VOLATILE);
}

#[test]
fn chunks_retired_and_made_again_carry_every_byte_through_a_forwarder() {
    churn(true, Variant::CACHED_VOLATILE);
}

#[test]
fn an_uncached_path_with_a_budget_of_nothing_gives_its_pages_back_on_every_free() {
    churn(false, Variant::UNCACHED);
    churn(true, Variant::VOLATILE);
}

/// A receiver end joined to a path the test plays the originator of: the offer, and chunk 0
/// announced and taken.
fn fake_originator() -> (PathInfo, Rings, UnixStream, ReceiverEnd, OwnedFd) {
    let p = PathMemory::create(64 << 10, 4, Variant::CACHED).unwrap();
    let info = p.info();
    let rings = Rings::create(8).unwrap();
    let (ours, theirs) = UnixStream::pair().unwrap();
    offer_path(&ours, info, Some(rings.fd())).unwrap();
    let chunk = zcio_vm::mapping::memfd("fake-chunk", 64 << 10).unwrap();
    rustix::io::pwrite(&chunk, b"chunk zero", 0).unwrap();
    zcio_vm::mapping::seal_future_writes(chunk.as_fd()).unwrap();
    send(&ours, &rings, CHUNK, info.chunk_ref(0), Some(&chunk));
    let mut rx = ReceiverEnd::connect(theirs).unwrap();
    rx.spin = Duration::ZERO;
    assert_eq!(rx.try_recv().unwrap(), Received::NotYet);
    (info, rings, ours, rx, chunk)
}

const SEND: u64 = 1;
const MSG: u64 = 5;
const CHUNK: u64 = 10;
const RETIRE: u64 = 11;

/// Frame `kind` of `r` on `sock` (with `fd`), announced on the sends ring.
fn send(sock: &UnixStream, rings: &Rings, kind: u64, r: FbufRef, fd: Option<&OwnedFd>) {
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&kind.to_le_bytes());
    b[8..16].copy_from_slice(&r.addr.to_le_bytes());
    b[16..].copy_from_slice(&r.len.to_le_bytes());
    let fds: Vec<_> = fd.iter().map(|f| f.as_fd()).collect();
    zcio_vm::wire::send_with_fds(sock.as_fd(), &b, &fds).unwrap();
    rings.post_mail(Dir::Sends);
}

#[test]
fn a_receiver_never_reads_a_retired_chunk_and_keeps_what_it_holds() {
    let (info, rings, ours, mut rx, chunk) = fake_originator();
    let at = |k: u64| FbufRef {
        addr: info.addr as u64 + k * 4096,
        len: 10,
    };
    send(&ours, &rings, SEND, at(0), None);
    assert_eq!(rx.try_recv().unwrap(), Received::Fbuf(at(0)));
    let mut b = [0u8; 10];
    assert!(rx.receiver.read_bytes(at(0).addr, &mut b));
    assert_eq!(&b, b"chunk zero");
    // Retiring the chunk while the fbuf is held: refused by name, the fbuf still readable.
    send(&ours, &rings, RETIRE, info.chunk_ref(0), None);
    let e = rx.try_recv().unwrap_err();
    assert!(e.to_string().contains("holding no fbuf"), "{e}");
    assert!(rx.receiver.read_bytes(at(0).addr, &mut b));
    // Freed, then retired: the chunk is read no more; a reference into it is refused by name.
    rx.free(at(0)).unwrap();
    send(&ours, &rings, RETIRE, info.chunk_ref(0), None);
    assert_eq!(rx.try_recv().unwrap(), Received::NotYet);
    assert!(!rx.receiver.read_bytes(at(0).addr, &mut b));
    send(&ours, &rings, SEND, at(1), None);
    let e = rx.try_recv().unwrap_err();
    assert!(
        matches!(e, LinkError::Fbuf(FbufError::NoChunk { chunk: 0, .. })),
        "{e}"
    );
    // A reference on the ring into it: the same.
    let mut tx = 0;
    rings
        .push(Dir::Sends, &mut tx, [SEND, at(2).addr, 10])
        .unwrap();
    assert!(matches!(
        rx.try_recv(),
        Err(LinkError::Fbuf(FbufError::NoChunk { .. }))
    ));
    // A message whose root lies in a chunk keeps the chunk from being retired.
    send(&ours, &rings, CHUNK, info.chunk_ref(0), Some(&chunk));
    send(&ours, &rings, MSG, at(3), None);
    assert!(matches!(rx.try_recv().unwrap(), Received::Msg(_)));
    send(&ours, &rings, RETIRE, info.chunk_ref(0), None);
    let e = rx.try_recv().unwrap_err();
    assert!(e.to_string().contains("holding no message"), "{e}");
    // Chunk frames on the ring, an announcement without its descriptor or over a chunk known:
    // refused by name.
    rings
        .push(Dir::Sends, &mut tx, [CHUNK, info.chunk_ref(1).addr, 65536])
        .unwrap();
    let e = rx.try_recv().unwrap_err();
    assert!(e.to_string().contains("on the ring"), "{e}");
    send(&ours, &rings, CHUNK, info.chunk_ref(1), None);
    let e = rx.try_recv().unwrap_err();
    assert!(e.to_string().contains("without its descriptor"), "{e}");
    send(&ours, &rings, CHUNK, info.chunk_ref(0), Some(&chunk));
    let e = rx.try_recv().unwrap_err();
    assert!(e.to_string().contains("overlapping"), "{e}");
    let _ = (&ours).flush();
}

#[test]
fn a_mirror_follows_the_chunks_and_refuses_what_lies_in_a_retired_one() {
    let (info, rings, ours, mut rx, _chunk) = fake_originator();
    // The mirror in a process of its own (the path's range is this one's here).
    let dir = tempfile::tempdir().unwrap();
    let l = UnixListener::bind(dir.path().join("m")).unwrap();
    let mut m = peer()
        .arg("mirror")
        .arg(dir.path().join("m"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (sock, _) = l.accept().unwrap();
    rx.mirror(&sock).unwrap();
    let mut ask = m.stdin.take().unwrap();
    let mut answers = std::io::BufReader::new(m.stdout.take().unwrap());
    let mut read = |r: FbufRef| {
        writeln!(ask, "{} {}", r.addr, r.len).unwrap();
        let mut line = String::new();
        answers.read_line(&mut line).unwrap();
        line.trim().to_string()
    };
    let r0 = FbufRef {
        addr: info.addr as u64,
        len: 10,
    };
    assert_eq!(read(r0), "chunk zero");
    // A chunk made later is on the feed before anything the mirroring end passes on after it;
    // a retired one is refused by name once the feed is read.
    let one = zcio_vm::mapping::memfd("fake-chunk", 64 << 10).unwrap();
    rustix::io::pwrite(&one, b"chunk one", 0).unwrap();
    zcio_vm::mapping::seal_future_writes(one.as_fd()).unwrap();
    send(&ours, &rings, CHUNK, info.chunk_ref(1), Some(&one));
    send(&ours, &rings, RETIRE, info.chunk_ref(0), None);
    assert_eq!(rx.try_recv().unwrap(), Received::NotYet);
    let r1 = FbufRef {
        addr: info.chunk_ref(1).addr,
        len: 9,
    };
    assert_eq!(read(r1), "chunk one");
    let refused = read(r0);
    assert!(
        refused.starts_with("refused:") && refused.contains("chunk 0"),
        "{refused}"
    );
    drop(ask);
    assert!(m.wait().unwrap().success());
}
