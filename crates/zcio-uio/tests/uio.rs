//! The user-level I/O layer: the record's layout is pinned and round-trips; data arrives
//! byte-exact for every initiation and translation; malformed records complete with a clear
//! error and never reach the device; handlers run exactly once, with their argument, on the
//! issuing thread, under many submitters and a full ring; and a buffer cannot be freed while
//! its request is in flight. (Records flagged ASYNC, handled on a handler thread:
//! `handler_thread.rs`; the fuzz target here serves them too.)

use proptest::prelude::*;
use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use zcio_uio::request::{PENDING, RECORD};
use zcio_uio::{
    HandlerId, Initiation, NotQueued, Opcode, Request, Target, Translation, Uio, UioError,
};

mod common;
use common::*;

/// A chunk's number and bytes, as a handler got them.
type Chunk = (u64, Vec<u8>);

/// A handler that keeps each completion's argument and bytes (failing on an error), and what
/// it kept.
fn collecting(uio: &Uio) -> (HandlerId, Arc<Mutex<Vec<Chunk>>>) {
    let got: Arc<Mutex<Vec<Chunk>>> = Arc::default();
    let g = got.clone();
    let h = uio.handler(move |c| {
        assert!(c.error.is_none(), "{:?}", c.error);
        g.lock()
            .unwrap()
            .push((c.record.argument, c.data().to_vec()));
    });
    (h, got)
}

/// A malformed record: its argument, how it is spoiled, and what the error must say.
type Case = (u64, Box<dyn Fn(&mut Request)>, &'static str);

const ALL: [(Initiation, Translation); 4] = [
    (Initiation::Syscall, Translation::Registered),
    (Initiation::Syscall, Translation::PerRequest),
    (Initiation::Polled, Translation::Registered),
    (Initiation::Polled, Translation::PerRequest),
];

#[test]
fn the_record_is_64_bytes_in_the_tables_order() {
    assert_eq!(std::mem::size_of::<Request>(), 64);
    assert_eq!(RECORD, 64);
    assert_eq!(std::mem::align_of::<Request>(), 64, "one cache line");
    let at = [
        (offset_of!(Request, opcode), 0),
        (offset_of!(Request, flags), 1),
        (offset_of!(Request, handler), 2),
        (offset_of!(Request, target), 4),
        (offset_of!(Request, offset), 8),
        (offset_of!(Request, buffer), 16),
        (offset_of!(Request, length), 24),
        (offset_of!(Request, status), 28),
        (offset_of!(Request, argument), 32),
        (offset_of!(Request, notify), 40),
        (offset_of!(Request, context), 48),
        (offset_of!(Request, reserved), 52),
    ];
    for (got, want) in at {
        assert_eq!(got, want);
    }
    let r = Request::new(
        Opcode::Write,
        Target(3),
        0x1122_3344_5566_7788,
        0x7f00_0000_1000,
        65536,
        zcio_uio::HandlerId(9),
        42,
    );
    let b = r.to_bytes();
    assert_eq!(b[0], 2);
    assert_eq!(&b[4..8], &3u32.to_le_bytes());
    assert_eq!(&b[8..16], &0x1122_3344_5566_7788u64.to_le_bytes());
    assert_eq!(&b[28..32], &PENDING.to_le_bytes());
    assert_eq!(Request::from_bytes(&b), r);
}

proptest! {
    #[test]
    fn any_64_bytes_round_trip(bytes in proptest::collection::vec(any::<u8>(), 64)) {
        let b: [u8; 64] = bytes.try_into().unwrap();
        prop_assert_eq!(Request::from_bytes(&b).to_bytes(), b);
    }
}

#[test]
fn reads_are_byte_exact_for_every_initiation_and_translation() {
    let (_d, path, data) = data_file(1 << 20);
    for (i, t) in ALL {
        let Some(uio) = layer(i, t, 8) else { continue };
        let target = uio.open(&path, false).unwrap();
        if let Some(why) = uio.buffered_because(target) {
            eprintln!("{why}");
        }
        let (h, got) = collecting(&uio);
        let chunk = 64 << 10;
        let mut sent = 0;
        let n = data.len() / chunk;
        while sent < n {
            let Some(buf) = uio.buffer() else {
                uio.wait().unwrap();
                continue;
            };
            let rec = Request::new(
                Opcode::Read,
                target,
                (sent * chunk) as u64,
                buf.addr(),
                chunk as u32,
                h,
                sent as u64,
            );
            match uio.submit(rec, buf) {
                Ok(()) => sent += 1,
                Err(NotQueued::Full { .. }) => {
                    uio.wait().unwrap();
                }
                Err(e) => panic!("{e}"),
            }
        }
        while got.lock().unwrap().len() < n {
            uio.wait().unwrap();
        }
        let mut got = got.lock().unwrap().clone();
        got.sort();
        for (k, bytes) in &got {
            let k = *k as usize;
            assert!(
                bytes == &data[k * chunk..(k + 1) * chunk],
                "{i:?} {t:?} chunk {k}"
            );
        }
        let s = uio.stats();
        assert_eq!((s.submitted, s.refused), (n as u64, 0));
        if i == Initiation::Syscall {
            assert_eq!(s.submit_enters, n as u64, "one system call per request");
        } else {
            eprintln!(
                "polled: {} kernel entries to submit {} requests",
                s.submit_enters, s.submitted
            );
        }
        // The blocking call, at an offset inside the buffer.
        let buf = uio.buffer().unwrap();
        let c = uio
            .read_blocking(target, 3 * 4096, buf, 4096, 8192)
            .unwrap();
        assert!(c.error.is_none());
        assert_eq!(c.record.status, 8192);
        assert!(c.data() == &data[3 * 4096..5 * 4096]);
        assert!(c.buf.bytes()[4096..4096 + 8192] == data[3 * 4096..5 * 4096]);
    }
}

#[test]
fn malformed_records_complete_with_a_clear_error_and_never_reach_the_device() {
    let Some((_d, uio, target)) = opened(256 << 10, Translation::Registered, 8) else {
        return;
    };
    let direct = uio.buffered_because(target).is_none();
    let errors: Arc<Mutex<Vec<(u64, i32, String)>>> = Arc::default();
    let e2 = errors.clone();
    let h = uio.handler(move |c| {
        e2.lock().unwrap().push((
            c.record.argument,
            c.record.status,
            c.error.map(|e| e.to_string()).unwrap_or_default(),
        ));
    });
    static NOT_YOURS: [u8; 4096] = [0; 4096];
    let mut cases: Vec<Case> = vec![
        (1, Box::new(|r| r.opcode = 7), "bad opcode 7"),
        (2, Box::new(|r| r.flags = 2), "flags 0x2"),
        (3, Box::new(|r| r.target = 40), "no target 40"),
        (4, Box::new(|r| r.length = 0), "zero bytes"),
        (
            5,
            Box::new(|r| r.offset = 252 << 10),
            "past the end of the file",
        ),
        (
            6,
            Box::new(|r| r.buffer = NOT_YOURS.as_ptr() as u64),
            "not inside the buffer handed",
        ),
        (
            7,
            Box::new(|r| r.length = 1 << 20),
            "not inside the buffer handed",
        ),
        (
            8,
            Box::new(|r| r.opcode = Opcode::Write as u8),
            "opened for reading only",
        ),
    ];
    if direct {
        cases.push((9, Box::new(|r| r.buffer += 512), "buffer address"));
        cases.push((10, Box::new(|r| r.offset = 100), "offset"));
        cases.push((11, Box::new(|r| r.length = 4000), "length"));
    } else {
        zcio_vm::skip::skip(
            zcio_vm::skip::Capability::ODirect,
            "the alignment cases: the target is not O_DIRECT here",
        );
    }
    let n = cases.len();
    for (arg, spoil, _) in &cases {
        let buf = uio.buffer().unwrap();
        let mut rec = Request::new(Opcode::Read, target, 0, buf.addr(), 8192, h, *arg);
        spoil(&mut rec);
        // Through the bytes, as a record from elsewhere would come.
        uio.submit_bytes(&rec.to_bytes(), buf).unwrap();
    }
    while errors.lock().unwrap().len() < n {
        assert!(uio.poll() > 0, "refusals are queued at once");
    }
    let errors = errors.lock().unwrap();
    for (arg, _, want) in &cases {
        let (_, status, msg) = errors.iter().find(|e| e.0 == *arg).unwrap();
        assert!(*status < 0, "case {arg}: status {status}");
        assert!(msg.contains(want), "case {arg}: {msg}");
    }
    let s = uio.stats();
    assert_eq!(s.submitted, 0, "nothing reached the device");
    assert_eq!(s.refused, n as u64);
    assert_eq!(uio.buffers_free(), 32, "every buffer came back");
    // A record naming no handler is refused at once, with its buffer.
    let buf = uio.buffer().unwrap();
    let rec = Request::new(
        Opcode::Read,
        target,
        0,
        buf.addr(),
        4096,
        zcio_uio::HandlerId(77),
        0,
    );
    assert!(matches!(
        uio.submit(rec, buf),
        Err(NotQueued::NoHandler { .. })
    ));
    // Waiting with nothing in flight is an error, not a hang.
    assert!(matches!(uio.wait(), Err(UioError::NothingInFlight)));
}

#[test]
fn handlers_run_once_on_their_thread_under_many_submitters_and_a_full_ring() {
    let (_d, path, data) = data_file(1 << 20);
    for (i, t) in ALL {
        // A four-entry ring for eight threads: full most of the time.
        let Some(uio) = layer(i, t, 4) else { continue };
        let uio = Arc::new(uio);
        let target = uio.open(&path, false).unwrap();
        let threads = 8u64;
        let per = 300u64;
        let seen: Arc<Vec<AtomicU64>> =
            Arc::new((0..threads * per).map(|_| AtomicU64::new(0)).collect());
        let wrong_thread = Arc::new(AtomicU64::new(0));
        let fulls = Arc::new(AtomicU64::new(0));
        let (s2, w2) = (seen.clone(), wrong_thread.clone());
        let data2 = Arc::new(data.clone());
        let d2 = data2.clone();
        let h = uio.handler(move |c| {
            let arg = c.record.argument;
            let owner = arg / per;
            let here = std::thread::current()
                .name()
                .and_then(|n| n.parse::<u64>().ok());
            if here != Some(owner) {
                w2.fetch_add(1, Ordering::Relaxed);
            }
            let off = c.record.offset as usize;
            assert!(c.data() == &d2[off..off + 4096], "request {arg}");
            s2[arg as usize].fetch_add(1, Ordering::Relaxed);
        });
        let mut joins = Vec::new();
        for th in 0..threads {
            let (uio, fulls) = (uio.clone(), fulls.clone());
            joins.push(
                std::thread::Builder::new()
                    .name(th.to_string())
                    .spawn(move || {
                        let mut k = 0;
                        while k < per {
                            let arg = th * per + k;
                            let Some(buf) = uio.buffer() else {
                                let _ = uio.wait();
                                std::thread::yield_now();
                                continue;
                            };
                            let off = (arg % 256) * 4096;
                            let rec =
                                Request::new(Opcode::Read, target, off, buf.addr(), 4096, h, arg);
                            match uio.submit(rec, buf) {
                                Ok(()) => k += 1,
                                Err(NotQueued::Full { .. }) => {
                                    fulls.fetch_add(1, Ordering::Relaxed);
                                    let _ = uio.wait();
                                }
                                Err(e) => panic!("{e}"),
                            }
                        }
                        uio.wait_all().unwrap_or_else(|e| panic!("{e}"));
                    })
                    .unwrap(),
            );
        }
        for j in joins {
            j.join().unwrap();
        }
        for (arg, n) in seen.iter().enumerate() {
            assert_eq!(n.load(Ordering::Relaxed), 1, "{i:?} {t:?}: request {arg}");
        }
        assert_eq!(
            wrong_thread.load(Ordering::Relaxed),
            0,
            "handlers ran on their issuers"
        );
        assert!(
            fulls.load(Ordering::Relaxed) > 0,
            "the ring was full at times"
        );
        assert_eq!(uio.stats().submitted, threads * per);
        assert_eq!(uio.buffers_free(), 32);
    }
}

#[test]
fn a_buffer_is_held_until_its_request_completes_even_when_the_layer_goes() {
    let Some((_d, uio, target)) = opened(4 << 20, Translation::PerRequest, 64) else {
        return;
    };
    let h = uio.handler(|_| {});
    for k in 0..32u64 {
        let buf = uio.buffer().unwrap();
        let rec = Request::new(
            Opcode::Read,
            target,
            k * (64 << 10),
            buf.addr(),
            64 << 10,
            h,
            k,
        );
        uio.submit(rec, buf).unwrap();
    }
    // The application no longer has the buffers: they are the layer's until completion.
    assert_eq!(uio.buffers_free(), 0);
    // Dropping the layer with everything in flight waits for the kernel before the memory
    // goes (a crash or a corruption here would be the bug).
    drop(uio);
    let fresh = vec![0u8; 4 << 20];
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(fresh.iter().all(|b| *b == 0), "no late transfer landed");
}

#[test]
fn completions_wait_for_their_thread_and_come_in_the_order_they_were_taken() {
    let Some((_d, uio, target)) = opened(1 << 20, Translation::Registered, 32) else {
        return;
    };
    let order: Arc<Mutex<Vec<(u64, u64)>>> = Arc::default();
    let o2 = order.clone();
    let h = uio.handler(move |c| o2.lock().unwrap().push((c.sequence, c.record.argument)));
    // Requests of one at a time, each waited for in the kernel by another thread's reaping:
    // this thread is "busy" (it neither polls nor waits) until all have completed.
    for k in 0..8u64 {
        let buf = uio.buffer().unwrap();
        let rec = Request::new(Opcode::Read, target, k * 65536, buf.addr(), 65536, h, k);
        uio.submit(rec, buf).unwrap();
    }
    let uio = Arc::new(uio);
    let reaper = {
        let uio = uio.clone();
        std::thread::spawn(move || {
            // Another thread polls: it reaps and routes, but runs none of these handlers.
            let t0 = std::time::Instant::now();
            while uio.stats().delivered == 0 && t0.elapsed() < std::time::Duration::from_secs(2) {
                assert_eq!(uio.poll(), 0, "no completion of this thread");
                std::thread::sleep(std::time::Duration::from_millis(5));
                if t0.elapsed() > std::time::Duration::from_millis(200) {
                    break;
                }
            }
        })
    };
    reaper.join().unwrap();
    assert!(
        order.lock().unwrap().is_empty(),
        "nothing delivered to a busy thread"
    );
    let mut ran = 0;
    while ran < 8 {
        ran += uio.wait().unwrap();
    }
    let got = order.lock().unwrap().clone();
    assert!(
        got.windows(2).all(|w| w[0].0 < w[1].0),
        "handlers ran in the order the completions were taken: {got:?}"
    );
    let mut args: Vec<u64> = got.iter().map(|x| x.1).collect();
    args.sort();
    assert_eq!(args, (0..8).collect::<Vec<_>>(), "each once");
    assert_eq!(uio.stats().delivered, 8);
}

/// Fuzzing the layer's decoding of records (`arbtest`): any 64 bytes submitted with a buffer,
/// biased towards a real handler, target, opcode and buffer so that records reach the checks
/// behind those, are either refused at once (no handler) or complete exactly once, to their
/// handler, with data or an error; the layer stays usable. `ZCIO_FUZZ_MS` sets the budget
/// (default 1000 ms), `ZCIO_FUZZ_SEED` replays a failure's seed. Arbtest keeps no corpus: the
/// seeds in `FUZZ_REGRESSIONS` are replayed first, every run.
#[test]
fn fuzz_any_64_bytes_are_refused_or_complete_once() {
    /// Seeds replayed before the timed search: all-zero input and a few sizes.
    const FUZZ_REGRESSIONS: &[u64] = &[
        0x0000_0000_0000_1000,
        0x9e37_79b9_0000_0400,
        0x2545_f491_0000_4000,
    ];
    let Some(uio) = layer(Initiation::Syscall, Translation::Registered, 8) else {
        return;
    };
    let (_d, path, data) = data_file(1 << 20);
    let target = uio.open(&path, false).unwrap();
    let done = Arc::new(AtomicU64::new(0));
    let d = done.clone();
    let h = uio.handler(move |_c| {
        d.fetch_add(1, Ordering::Relaxed);
    });
    // ASYNC records complete on a handler thread.
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let server = scope.spawn(|| uio.serve_handlers(&stop));
        let _stop = StopOnDrop(&stop);
        let property = |u: &mut zcio_testkit::fuzz::Unstructured<'_>| {
            let mut b: [u8; RECORD] = u.arbitrary()?;
            let Some(buf) = uio.buffer() else {
                panic!("every buffer came back, yet none is free");
            };
            if u.arbitrary()? {
                b[2..4].copy_from_slice(&h.0.to_le_bytes());
            }
            if u.arbitrary()? {
                b[4..8].copy_from_slice(&target.0.to_le_bytes());
            }
            if u.arbitrary()? {
                b[0] = if u.arbitrary()? {
                    Opcode::Read as u8
                } else {
                    Opcode::Write as u8
                };
            }
            if u.arbitrary()? {
                let off: u16 = u.arbitrary()?;
                b[16..24]
                    .copy_from_slice(&(buf.addr() as u64 + u64::from(off % 8192)).to_le_bytes());
            }
            let before = done.load(Ordering::Relaxed);
            match uio.submit_bytes(&b, buf) {
                Ok(()) => {
                    if Request::from_bytes(&b).is_async() {
                        let t0 = std::time::Instant::now();
                        while done.load(Ordering::Relaxed) == before {
                            assert!(
                                t0.elapsed().as_secs() < 20,
                                "an ASYNC record never completed"
                            );
                            std::thread::sleep(std::time::Duration::from_micros(50));
                        }
                    } else {
                        uio.wait().unwrap();
                    }
                    assert_eq!(
                        done.load(Ordering::Relaxed),
                        before + 1,
                        "one completion for one record: {:?}",
                        Request::from_bytes(&b)
                    );
                }
                Err(NotQueued::NoHandler { .. }) => {
                    assert_eq!(
                        done.load(Ordering::Relaxed),
                        before,
                        "a refused record completed"
                    );
                }
                Err(NotQueued::Full { .. }) => panic!("the ring was full with nothing in flight"),
            }
            Ok(())
        };
        zcio_testkit::fuzz::fuzz(FUZZ_REGRESSIONS, property);
        stop.store(true, Ordering::Release);
        server.join().unwrap().unwrap();
    });
    // Still usable: a well-formed read returns the file's bytes.
    let buf = uio.buffer().expect("a buffer");
    let got: Arc<Mutex<Vec<u8>>> = Arc::default();
    let g = got.clone();
    let h2 = uio.handler(move |c| {
        assert!(c.error.is_none(), "{:?}", c.error);
        g.lock().unwrap().extend_from_slice(c.data());
    });
    let rec = Request::new(Opcode::Read, target, 0, buf.addr(), 4096, h2, 0);
    uio.submit(rec, buf).unwrap();
    uio.wait().unwrap();
    assert_eq!(&got.lock().unwrap()[..], &data[..4096]);
}

/// A submission refused with no handler, through `?` into a `Box<dyn Error>`: the error
/// names the handler and holds the buffer, which goes back to the layer when it is dropped.
#[test]
fn a_refused_submission_is_an_error_that_question_mark_carries() {
    let Some(uio) = layer(Initiation::Syscall, Translation::Registered, 8) else {
        return;
    };
    let (_dir, path, _data) = data_file(8192);
    let target = uio.open(&path, false).unwrap();
    let free = uio.buffers_free();
    let submit = || -> Result<(), Box<dyn std::error::Error>> {
        let buf = uio.buffer().ok_or("no buffer")?;
        let rec = Request::new(Opcode::Read, target, 0, buf.addr(), 4096, HandlerId(77), 0);
        uio.submit(rec, buf)?;
        Ok(())
    };
    let e = submit().unwrap_err();
    assert!(e.to_string().contains("no handler 77"), "{e}");
    assert_eq!(uio.buffers_free(), free - 1, "the error holds the buffer");
    drop(e);
    assert_eq!(
        uio.buffers_free(),
        free,
        "the buffer came back with the error's end"
    );
}

/// Asynchronous delivery: the completion descriptor turns readable when the device completes
/// a request (not before), and the handler runs at the next poll after it, with the bytes.
#[test]
fn the_completion_descriptor_turns_readable_when_a_request_completes() {
    let readable = |fd: std::os::fd::BorrowedFd<'_>, ms: i64| {
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let t = rustix::event::Timespec {
            tv_sec: ms / 1000,
            tv_nsec: (ms % 1000) * 1_000_000,
        };
        rustix::event::poll(&mut fds, Some(&t)).unwrap() == 1
    };
    let (_d, path, data) = data_file(1 << 20);
    for (i, t) in ALL {
        let Some(uio) = layer(i, t, 8) else { continue };
        let target = uio.open(&path, false).unwrap();
        let fd = uio.completion_fd().unwrap();
        assert_eq!(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            std::os::fd::AsRawFd::as_raw_fd(&uio.completion_fd().unwrap()),
            "one descriptor per layer"
        );
        assert!(!readable(fd, 0), "{i:?} {t:?}: readable before any request");
        let (h, got) = collecting(&uio);
        let buf = uio.buffer().unwrap();
        let rec = Request::new(Opcode::Read, target, 65536, buf.addr(), 65536, h, 7);
        uio.submit(rec, buf).unwrap();
        assert!(
            readable(fd, 10_000),
            "{i:?} {t:?}: no signal within 10 s of the request"
        );
        assert_eq!(rustix::io::read(fd, &mut [0u8; 8]).unwrap(), 8);
        let mut ran = 0;
        while ran == 0 {
            ran = uio.poll();
        }
        let got = got.lock().unwrap();
        assert_eq!(got.len(), 1, "{i:?} {t:?}");
        assert_eq!(got[0].0, 7);
        assert!(got[0].1 == data[65536..131072], "{i:?} {t:?}: other bytes");
        assert!(
            !readable(fd, 0),
            "{i:?} {t:?}: still readable once acknowledged"
        );
    }
}
