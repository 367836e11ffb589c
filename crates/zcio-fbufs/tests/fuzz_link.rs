//! Fuzzing what a link decodes from its peer (`arbtest`): the path offer (four geometry words
//! and its descriptors), the 24-byte frames on the socket with the descriptors that come with
//! them, and the entries of the shared rings, in both directions. A hostile originator may
//! offer any geometry and send any frame or ring entry: chunks announced anywhere, twice, with
//! no descriptor, several or the wrong one, and retired while fbufs in them are held; a hostile
//! receiver may send back any notice or request (descriptors too) while its originator trims
//! its path, and either may scribble on the rings. The other end must answer with a delivery, nothing, or an error: never panic,
//! read outside what it mapped (a fault), or wait for ever; and an originator whose receiver
//! misbehaved or left has every fbuf back.
//!
//! `ZCIO_FUZZ_MS` sets the time budget of each target (default 1000 ms; a longer run:
//! `ZCIO_FUZZ_MS=600000 cargo test --release -p zcio-fbufs --test fuzz_link`). A failure
//! prints the seed to replay with `ZCIO_FUZZ_SEED`. Arbtest keeps no corpus: the seeds in
//! `*_REGRESSIONS` (among them those that once found a bug) are replayed first, every run.

use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use zcio_fbufs::aggregate::{Limits, Msg, NODE_BYTES, walk};
use zcio_fbufs::link::{OriginatorEnd, Received, ReceiverEnd, accept_path, offer_path};
use zcio_fbufs::path::{FbufRef, PathMemory, Variant};
use zcio_fbufs::region::RegionRead;
use zcio_fbufs::ring::{Dir, Rings};
use zcio_testkit::fuzz::{Result, Unstructured, fuzz};
use zcio_vm::protect::Access;
use zcio_vm::shared::SharedWords;

/// Seeds replayed before the timed search of a hostile originator: all-zero input, a few
/// sizes, and those that found a bug.
const ORIGINATOR_REGRESSIONS: &[u64] = &[
    0x0000_0000_0000_1000,
    0x9e37_79b9_0000_0400,
    0x2545_f491_0000_4000,
    // A path offered with a chunk size times chunk count that overflows.
    0x91c3_5f65_0001_0000,
    // A path offered longer than its memory: a read past the file's end faulted (SIGBUS).
    0xcc62_3a9b_0001_0000,
    // A path offered at address 0, which a privileged process can map: a null pointer.
    0x24b1_8c89_0001_0000,
    // Notices held back whose bytes overflow (an aggregate message of `u64::MAX` bytes).
    0xe741_292b_0001_0000,
];

/// Seeds replayed before the timed search of a hostile receiver.
const RECEIVER_REGRESSIONS: &[u64] = &[
    0x0000_0000_0000_1000,
    0x9e37_79b9_0000_0400,
    0x2545_f491_0000_4000,
];

const CHUNK: usize = 64 * 1024;
const CHUNKS: usize = 4;
const PATH: u64 = (CHUNK * CHUNKS) as u64;
/// The link's frame kinds (send, freed, secure, secured, aggregate message, wake-up, goodbye,
/// downstream process, chunk made, chunk retired) and two that are none of them.
const KINDS: [u64; 12] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12];
const DOWNSTREAM: u64 = 9;
const CHUNK_FRAME: u64 = 10;
const RETIRE: u64 = 11;
const SEND: u64 = 1;
const FREED: u64 = 2;
const SECURE: u64 = 3;
const SECURED: u64 = 4;
const MSG: u64 = 5;

/// Words at the edges of arithmetic.
const EDGES: [u64; 8] = [
    0,
    1,
    u64::MAX,
    u64::MAX - 4095,
    1 << 63,
    (1 << 63) - 1,
    u32::MAX as u64,
    1 << 47,
];

fn page() -> u64 {
    zcio_vm::page_size() as u64
}

/// `make()`, tried again while it fails: paths and rings are mapped at random addresses,
/// which may be taken already in this busy process.
fn placed<T, E: std::fmt::Display>(mut make: impl FnMut() -> std::result::Result<T, E>) -> T {
    let mut last = String::new();
    for _ in 0..8 {
        match make() {
            Ok(t) => return t,
            Err(e) => last = e.to_string(),
        }
    }
    panic!("no free address in eight tries: {last}");
}

fn frame(kind: u64, r: FbufRef) -> [u8; 24] {
    let mut b = [0u8; 24];
    b[..8].copy_from_slice(&kind.to_le_bytes());
    b[8..16].copy_from_slice(&r.addr.to_le_bytes());
    b[16..].copy_from_slice(&r.len.to_le_bytes());
    b
}

/// A reference as a hostile peer makes one: mostly pages of the path at `base`, sometimes any
/// address or length.
fn any_ref(u: &mut Unstructured<'_>, base: u64) -> Result<FbufRef> {
    let ps = page();
    let addr = match u.int_in_range(0..=4)? {
        0 | 1 => base + u.int_in_range(0..=PATH / ps)? * ps,
        2 => base + u.int_in_range(0..=PATH)?,
        3 => *u.choose(&EDGES)?,
        _ => u.arbitrary()?,
    };
    let len = match u.int_in_range(0..=4)? {
        0 | 1 => u.int_in_range(1..=2 * ps)?,
        2 => u.int_in_range(0..=PATH)?,
        3 => *u.choose(&EDGES)?,
        _ => u.arbitrary()?,
    };
    Ok(FbufRef { addr, len })
}

/// The kind of a frame from an originator: mostly a delivery (an fbuf or an aggregate
/// message), sometimes any kind.
fn delivery(u: &mut Unstructured<'_>) -> Result<u64> {
    Ok(match u.int_in_range(0..=3)? {
        0 => SEND,
        1 => MSG,
        _ => *u.choose(&KINDS)?,
    })
}

/// One of `sent` (the honest references), or any reference.
fn some_ref(u: &mut Unstructured<'_>, sent: &[FbufRef], base: u64) -> Result<FbufRef> {
    if !sent.is_empty() && u.ratio(2, 3)? {
        Ok(sent[u.choose_index(sent.len())?])
    } else {
        any_ref(u, base)
    }
}

/// A word a hostile peer stores into a ring: a position near `near`, or anything.
fn any_word(u: &mut Unstructured<'_>, near: u64) -> Result<u64> {
    Ok(match u.int_in_range(0..=3)? {
        0 => near.wrapping_add(u.int_in_range(0..=20)?).wrapping_sub(10),
        1 => u.int_in_range(0..=16)?,
        2 => *u.choose(&EDGES)?,
        _ => u.arbitrary()?,
    })
}

/// The rings of a link mapped once more, for the hostile peer to store any word anywhere.
fn scribbler(fd: BorrowedFd<'_>) -> Option<SharedWords> {
    let len = rustix::fs::fstat(fd).ok()?.st_size as usize;
    let addr = zcio_vm::arena::random_address(len);
    SharedWords::map(fd, 0, len, addr, Access::ReadWrite).ok()
}

fn scribble(u: &mut Unstructured<'_>, w: &SharedWords, near: u64) -> Result<()> {
    let at = u.choose_index(w.len() / 8)? * 8;
    w.store(at, any_word(u, near)?);
    Ok(())
}

/// Drain what the other end wrote on `sock` without waiting (its answers and wake-ups).
fn drain(sock: &UnixStream) {
    let mut b = [0u8; 4096];
    while let Ok((_, n)) = rustix::net::recv(sock, &mut b, rustix::net::RecvFlags::DONTWAIT) {
        if n == 0 {
            break;
        }
    }
}

/// A chunk's memory as an originator makes it: a memory file of a chunk's length, sealed.
fn chunk_file() -> OwnedFd {
    let fd = zcio_vm::mapping::memfd("fuzz-chunk", CHUNK).unwrap();
    zcio_vm::mapping::seal_future_writes(fd.as_fd()).unwrap();
    fd
}

/// A chunk frame as a hostile originator sends it: mostly an announcement of one of the path's
/// chunks with its memory, sometimes anywhere, and with no descriptor, two, or the wrong one
/// (too short, not sealed, the rings, a socket); or a retirement of anything. On the socket,
/// or on the ring.
fn chunk_hostile(
    u: &mut Unstructured<'_>,
    sock: &UnixStream,
    files: &[OwnedFd],
    rings: &Rings,
    tx: &mut u64,
    base: u64,
) -> Result<()> {
    let k = u.choose_index(files.len())?;
    let chunk = FbufRef {
        addr: base + (k * CHUNK) as u64,
        len: CHUNK as u64,
    };
    let r = if u.ratio(3, 4)? {
        chunk
    } else {
        any_ref(u, base)?
    };
    let kind = if u.ratio(2, 3)? { CHUNK_FRAME } else { RETIRE };
    if u.ratio(1, 8)? {
        let _ = rings.push(Dir::Sends, tx, [kind, r.addr, r.len]);
        return Ok(());
    }
    let short = zcio_vm::mapping::memfd("fuzz-short", 4096).unwrap();
    let unsealed = zcio_vm::mapping::memfd("fuzz-unsealed", CHUNK).unwrap();
    let (a, _b) = UnixStream::pair().unwrap();
    let fds: Vec<BorrowedFd<'_>> = match (kind, u.int_in_range(0..=7)?) {
        (_, 0) => vec![],
        (_, 1) => vec![files[k].as_fd(), files[0].as_fd()],
        (_, 2) => vec![short.as_fd()],
        (_, 3) => vec![unsealed.as_fd()],
        (_, 4) => vec![rings.fd()],
        (_, 5) => vec![a.as_fd()],
        (RETIRE, _) => vec![],
        _ => vec![files[k].as_fd()],
    };
    zcio_vm::wire::send_with_fds(sock.as_fd(), &frame(kind, r), &fds).unwrap();
    if u.ratio(3, 4)? {
        rings.post_mail(Dir::Sends);
    }
    Ok(())
}

/// The path offer as a hostile originator sends it: the honest words and descriptor, each
/// perhaps replaced, cut short, extended by a frame, or missing; then, mostly, every chunk
/// announced with its memory.
fn offer_hostile(
    u: &mut Unstructured<'_>,
    sock: &UnixStream,
    p: &PathMemory,
    files: &[OwnedFd],
    rings: BorrowedFd<'_>,
) -> Result<()> {
    let info = p.info();
    if u.ratio(1, 2)? {
        offer_path(sock, info, Some(rings)).unwrap();
        if u.ratio(4, 5)? {
            for (k, f) in files.iter().enumerate() {
                let f = [f.as_fd()];
                let announce = frame(CHUNK_FRAME, info.chunk_ref(k));
                zcio_vm::wire::send_with_fds(sock.as_fd(), &announce, &f).unwrap();
            }
        }
        return Ok(());
    }
    let mut words = [
        info.addr as u64,
        info.chunk_bytes as u64,
        info.quota_chunks as u64,
        info.variant.cached as u64 | (info.variant.volatile as u64) << 1,
    ];
    for w in &mut words {
        if u.ratio(1, 4)? {
            *w = match u.int_in_range(0..=5)? {
                0 => u.arbitrary()?,
                1 => *u.choose(&EDGES)?,
                2 => *w ^ 1 << u.int_in_range(0..=63)?,
                3 => w.wrapping_mul(u.int_in_range(2..=1 << 20)?),
                4 => w.wrapping_add(page() * u.int_in_range(1..=8)?),
                _ => w.wrapping_sub(page() * u.int_in_range(1..=8)?),
            };
        }
    }
    let mut bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    match u.int_in_range(0..=7)? {
        0 => bytes.truncate(u.int_in_range(1..=31)?),
        // A frame right behind the offer, in the same message.
        1 => bytes.extend(frame(*u.choose(&KINDS)?, any_ref(u, info.addr as u64)?)),
        _ => {}
    }
    // Descriptors: the honest one, or none, too many, or the wrong ones.
    let small = zcio_vm::mapping::memfd("fuzz-not-rings", u.int_in_range(1..=3)? * 4096).unwrap();
    let chunk = files[0].as_fd();
    let fds: Vec<BorrowedFd<'_>> = match u.int_in_range(0..=5)? {
        0 => vec![],
        1 => vec![rings, chunk],
        2 => vec![small.as_fd()],
        3 => vec![chunk],
        4 => vec![small.as_fd(), rings],
        _ => vec![rings],
    };
    zcio_vm::wire::send_with_fds(sock.as_fd(), &bytes, &fds).unwrap();
    Ok(())
}

/// What a receiver handed out lies in its path and reads without a fault (first and last
/// byte of an fbuf; an aggregate message walked to its end within its announced length).
fn check(end: &ReceiverEnd, got: Received, fbufs: &mut Vec<FbufRef>, msgs: &mut Vec<Msg>) {
    let info = end.info();
    match got {
        Received::Fbuf(r) => {
            assert!(r.len > 0 && r.addr % page() == 0, "{r:?} delivered");
            assert!(info.contains(r.addr, r.len), "{r:?} outside {info:?}");
            let mut b = [0u8; 1];
            assert!(end.receiver.read_bytes(r.addr, &mut b), "{r:?} unreadable");
            assert!(
                end.receiver.read_bytes(r.addr + r.len - 1, &mut b),
                "{r:?} unreadable"
            );
            fbufs.push(r);
        }
        Received::Msg(m) => {
            assert!(
                m.root % 8 == 0 && info.contains(m.root, NODE_BYTES),
                "{m:?} delivered"
            );
            let limits = Limits {
                max_visits: 256,
                max_depth: 16,
            };
            let w = walk(&end.receiver, m.root, m.len, limits);
            assert!(w.len() <= m.len, "walked {} of {m:?}", w.len());
            msgs.push(m);
        }
        Received::NotYet | Received::Closed => {}
    }
}

/// A path variant the fuzzer chooses.
fn any_variant(u: &mut Unstructured<'_>) -> Result<Variant> {
    Ok(Variant {
        cached: u.arbitrary()?,
        volatile: u.arbitrary()?,
    })
}

#[test]
fn a_hostile_originator_never_breaks_a_receiver() {
    fuzz(ORIGINATOR_REGRESSIONS, |u| {
        let variant = any_variant(u)?;
        let p = PathMemory::create(CHUNK, CHUNKS, variant).unwrap();
        let files: Vec<OwnedFd> = (0..CHUNKS).map(|_| chunk_file()).collect();
        let slots = u.int_in_range(1..=3)?;
        let rings = placed(|| Rings::create(slots));
        let scrawl = scribbler(rings.fd());
        let (mut sock, theirs) = UnixStream::pair().unwrap();
        offer_hostile(u, &sock, &p, &files, rings.fd())?;
        let mut end = match ReceiverEnd::connect(theirs) {
            Ok(end) => end,
            Err(e) => {
                assert!(!e.to_string().is_empty());
                return Ok(());
            }
        };
        end.spin = std::time::Duration::ZERO;
        let base = end.info().addr as u64;
        let (mut tx, mut fbufs, mut msgs) = (0u64, Vec::new(), Vec::new());
        let rounds: u8 = u.arbitrary()?;
        for _ in 0..rounds % 64 {
            match u.int_in_range(0..=12)? {
                12 => chunk_hostile(u, &sock, &files, &rings, &mut tx, base)?,
                0 | 1 => {
                    let kind = delivery(u)?;
                    let r = any_ref(u, base)?;
                    let _ = rings.push(Dir::Sends, &mut tx, [kind, r.addr, r.len]);
                }
                2 | 3 => {
                    let f = frame(delivery(u)?, any_ref(u, base)?);
                    sock.write_all(&f).unwrap();
                    if u.ratio(3, 4)? {
                        rings.post_mail(Dir::Sends);
                    }
                }
                4 => {
                    if let Some(w) = &scrawl {
                        scribble(u, w, tx)?;
                    }
                }
                5..=7 => match end.try_recv() {
                    Ok(got) => check(&end, got, &mut fbufs, &mut msgs),
                    Err(e) => assert!(!e.to_string().is_empty()),
                },
                8 | 9 => {
                    if !fbufs.is_empty() && u.ratio(1, 2)? {
                        let r = fbufs.swap_remove(u.choose_index(fbufs.len())?);
                        let _ = end.free(r);
                    } else if !msgs.is_empty() && u.ratio(4, 5)? {
                        let m = msgs.swap_remove(u.choose_index(msgs.len())?);
                        let _ = end.free_msg(m);
                    } else {
                        // One the originator never could have sent.
                        let mut r = any_ref(u, base)?;
                        if end.info().contains(r.addr, 1) {
                            r.addr |= 1;
                        }
                        assert!(end.free(r).is_err(), "freed {r:?}, never received");
                    }
                }
                10 => {
                    let _ = end.flush();
                }
                _ => {
                    // A secure request, answered after a few frames of anything.
                    let r = some_ref(u, &fbufs, base)?;
                    for _ in 0..u.int_in_range(0..=3)? {
                        sock.write_all(&frame(*u.choose(&KINDS)?, any_ref(u, base)?))
                            .unwrap();
                    }
                    sock.write_all(&frame(SECURED, r)).unwrap();
                    let _ = end.secure(r);
                }
            }
            drain(&sock);
        }
        // The originator leaves, perhaps in the middle of a frame: the receiver sees the end.
        if u.ratio(1, 4)? {
            let f = frame(*u.choose(&KINDS)?, any_ref(u, base)?);
            sock.write_all(&f[..u.int_in_range(1..=23)?]).unwrap();
        }
        drop(sock);
        let mut ended = false;
        for _ in 0..10_000 {
            match end.recv_any() {
                Ok(Received::Closed) | Err(_) => {
                    ended = true;
                    break;
                }
                Ok(got) => check(&end, got, &mut fbufs, &mut msgs),
            }
        }
        assert!(ended, "the receiver never saw the originator leave");
        Ok(())
    });
}

#[test]
fn a_hostile_receiver_never_breaks_its_originator() {
    fuzz(RECEIVER_REGRESSIONS, |u| {
        let variant = any_variant(u)?;
        let ring_slots = u.int_in_range(1..=8)?;
        let (mut end, sock) = placed(|| {
            let p = PathMemory::create(CHUNK, CHUNKS, variant)?;
            let mut end = OriginatorEnd::new(p.originator()?);
            end.spin = std::time::Duration::ZERO;
            end.ring_slots = ring_slots;
            let (ours, sock) = UnixStream::pair().unwrap();
            end.add_receiver(ours)?;
            Ok::<_, Box<dyn std::error::Error>>((end, sock))
        });
        // The hostile receiver takes the offer as it came, and maps the rings to scribble on.
        let (info, rings) = accept_path(&sock).unwrap();
        let rings = rings.expect("rings offered");
        let rings = placed(|| Rings::open(rings.try_clone().unwrap()));
        let scrawl = scribbler(rings.fd());
        let base = info.addr as u64;
        let (mut tx, mut sent) = (0u64, Vec::new());
        let rounds: u8 = u.arbitrary()?;
        for _ in 0..rounds % 48 {
            match u.int_in_range(0..=11)? {
                10 => {
                    // The originator trims its path meanwhile: chunks retired and made again.
                    let budget = *u.choose(&[0, CHUNK / 2, CHUNK, usize::MAX])?;
                    end.set_cache_budget(budget).unwrap();
                }
                11 => {
                    // A frame with descriptors riding along (a receiver has none to send).
                    let f = frame(*u.choose(&KINDS)?, some_ref(u, &sent, base)?);
                    let extra = chunk_file();
                    let _ = zcio_vm::wire::send_with_fds(sock.as_fd(), &f, &[extra.as_fd()]);
                    rings.post_mail(Dir::Frees);
                }
                0 | 1 => {
                    let len = u.int_in_range(1..=3 * page() as usize)?;
                    if let Ok(f) = end.originator.alloc(len) {
                        match end.send(f, &[0]) {
                            Ok(r) => sent.push(r),
                            // Refused only for want of a receiver (the fbuf is free again).
                            Err(e) => assert_eq!(end.receivers_alive(), 0, "{e}"),
                        }
                    }
                }
                2 | 3 => {
                    let kind = match u.int_in_range(0..=3)? {
                        0 | 1 => FREED,
                        2 => SECURE,
                        _ => *u.choose(&KINDS)?,
                    };
                    let r = some_ref(u, &sent, base)?;
                    let _ = rings.push(Dir::Frees, &mut tx, [kind, r.addr, r.len]);
                }
                4 => {
                    let kind = if u.ratio(1, 2)? {
                        SECURE
                    } else {
                        *u.choose(&KINDS)?
                    };
                    let f = frame(kind, some_ref(u, &sent, base)?);
                    // The originator may have cut this receiver off already.
                    let _ = (&sock).write_all(&f);
                    if u.ratio(3, 4)? {
                        rings.post_mail(Dir::Frees);
                    }
                }
                5 => {
                    if let Some(w) = &scrawl {
                        scribble(u, w, tx)?;
                    }
                }
                6 => {
                    // A claim to forward to some process: this one, init (which never ends,
                    // so what this receiver holds when it goes stays quarantined), none, or
                    // any word.
                    let me = std::process::id() as u64;
                    let any: u64 = u.arbitrary()?;
                    let pid = *u.choose(&[me, 1, 0, 1 << 31, u64::MAX, any])?;
                    let f = frame(DOWNSTREAM, FbufRef { addr: pid, len: 0 });
                    let _ = (&sock).write_all(&f);
                    rings.post_mail(Dir::Frees);
                }
                _ => {
                    end.poll(false).unwrap();
                }
            }
            drain(&sock);
            if end.receivers_alive() == 0 {
                assert_eq!(
                    end.originator.outstanding(),
                    end.quarantined(),
                    "a receiver gone ({:?}) still holds fbufs not kept for its downstream",
                    end.misbehaved
                );
            }
        }
        // The receiver leaves, perhaps in the middle of a frame: everything comes back.
        if u.ratio(1, 4)? {
            let f = frame(*u.choose(&KINDS)?, some_ref(u, &sent, base)?);
            let _ = (&sock).write_all(&f[..u.int_in_range(1..=23)?]);
        }
        drop(sock);
        let t = std::time::Instant::now();
        while end.receivers_alive() > 0 {
            assert!(
                t.elapsed() < std::time::Duration::from_secs(10),
                "the originator never saw its receiver leave"
            );
            end.poll(true).unwrap();
        }
        assert_eq!(
            end.originator.outstanding(),
            end.quarantined(),
            "{:?}",
            end.misbehaved
        );
        Ok(())
    });
}
