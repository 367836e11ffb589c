//! Asynchronous notification: records flagged ASYNC complete on a handler thread
//! ([`Uio::serve_handlers`]) as the device finishes them, the submitting thread neither polling nor
//! waiting, even after it has ended; byte-exact, each once, errors by name.

mod common;

use common::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use zcio_uio::{HandlerId, Initiation, NotQueued, Opcode, Request, Translation, Uio};

/// What a handler thread's handler saw of one completion: the argument, the thread it ran on,
/// whether the bytes were the file's at the record's offset, and the error, if any.
type Seen = (u64, std::thread::ThreadId, bool, Option<String>);

/// A handler that reports each completion (checked against `data`) on a channel.
fn reporting(uio: &Uio, data: Arc<Vec<u8>>) -> (HandlerId, std::sync::mpsc::Receiver<Seen>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = Mutex::new(tx);
    let h = uio.handler(move |c| {
        let at = c.record.offset as usize;
        let good = c.error.is_none() && c.data() == &data[at..at + c.record.length as usize];
        let _ = tx.lock().unwrap().send((
            c.record.argument,
            std::thread::current().id(),
            good,
            c.error.map(|e| e.to_string()),
        ));
    });
    (h, rx)
}

fn seen(rx: &std::sync::mpsc::Receiver<Seen>) -> Seen {
    rx.recv_timeout(std::time::Duration::from_secs(20))
        .expect("a handler ran within 20 s")
}

#[test]
fn async_records_complete_on_the_handler_thread_while_the_submitter_never_polls() {
    let Some(uio) = layer(Initiation::Syscall, Translation::Registered, 8) else {
        return;
    };
    let (_d, path, data) = data_file(2 << 20);
    let target = uio.open(&path, false).unwrap();
    let free = uio.buffers_free();
    let (h, rx) = reporting(&uio, Arc::new(data));
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let server = scope.spawn(|| (std::thread::current().id(), uio.serve_handlers(&stop)));
        let _stop = StopOnDrop(&stop);
        // More records than the ring has entries: a full ring waits for the handler thread.
        let mut sent = 0u64;
        while sent < 64 {
            let Some(buf) = uio.buffer() else {
                std::thread::sleep(std::time::Duration::from_micros(100));
                continue;
            };
            let rec = Request::new(
                Opcode::Read,
                target,
                sent * 16384,
                buf.addr(),
                16384,
                h,
                sent,
            )
            .asynchronous();
            match uio.submit(rec, buf) {
                Ok(()) => sent += 1,
                Err(NotQueued::Full { .. }) => {
                    std::thread::sleep(std::time::Duration::from_micros(100))
                }
                Err(e) => panic!("{e}"),
            }
        }
        let mut args: Vec<u64> = Vec::new();
        let mut threads = std::collections::HashSet::new();
        for _ in 0..64 {
            let (arg, thread, good, err) = seen(&rx);
            assert!(good, "record {arg}: wrong bytes or {err:?}");
            args.push(arg);
            threads.insert(thread);
        }
        stop.store(true, Ordering::Release);
        let (server_id, ran) = server.join().unwrap();
        assert_eq!(ran.unwrap(), 64, "the handler thread ran every handler");
        assert_eq!(
            threads.into_iter().collect::<Vec<_>>(),
            vec![server_id],
            "every handler ran on the handler thread"
        );
        args.sort_unstable();
        assert_eq!(args, (0..64).collect::<Vec<_>>(), "each record once");
    });
    // The submitting thread never polled: nothing of its own waits for it.
    assert_eq!(uio.poll(), 0);
    assert_eq!(uio.handler_queue_len(), 0);
    assert_eq!(uio.buffers_free(), free, "every buffer came back");
    assert_eq!(uio.stats().orphaned, 0);
}

#[test]
fn an_async_record_that_fails_its_checks_reaches_the_handler_thread_with_its_error() {
    let Some((_d, uio, target)) = opened(256 << 10, Translation::Registered, 8) else {
        return;
    };
    let (h, rx) = reporting(&uio, Arc::new(vec![0; 256 << 10]));
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let server = scope.spawn(|| uio.serve_handlers(&stop));
        let _stop = StopOnDrop(&stop);
        let buf = uio.buffer().unwrap();
        // Past the end of the file: refused before the device, whatever the file system.
        let rec =
            Request::new(Opcode::Read, target, 252 << 10, buf.addr(), 8192, h, 7).asynchronous();
        uio.submit(rec, buf).unwrap();
        let (arg, thread, good, err) = seen(&rx);
        assert_eq!(arg, 7);
        assert!(!good);
        assert!(
            err.as_deref()
                .unwrap_or("")
                .contains("past the end of the file"),
            "{err:?}"
        );
        assert_ne!(thread, std::thread::current().id());
        // A flag zcio does not define is refused by name, on the submitting thread's own queue.
        let buf = uio.buffer().unwrap();
        let mut rec = Request::new(Opcode::Read, target, 0, buf.addr(), 4096, h, 8);
        rec.flags = 0x82;
        uio.submit(rec, buf).unwrap();
        uio.wait().unwrap();
        let (arg, thread, _, err) = seen(&rx);
        assert_eq!(arg, 8);
        assert_eq!(thread, std::thread::current().id());
        assert!(
            err.as_deref().unwrap_or("").contains("flags 0x82"),
            "{err:?}"
        );
        stop.store(true, Ordering::Release);
        assert_eq!(server.join().unwrap().unwrap(), 1);
    });
}

#[test]
fn async_completions_of_a_thread_that_ended_still_run_and_nothing_is_orphaned() {
    let Some(uio) = layer(Initiation::Syscall, Translation::Registered, 8) else {
        return;
    };
    let (_d, path, data) = data_file(1 << 20);
    let target = uio.open(&path, false).unwrap();
    let free = uio.buffers_free();
    let (h, rx) = reporting(&uio, Arc::new(data));
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        // The submitting thread submits and ends at once, before any handler thread serves.
        scope
            .spawn(|| {
                for k in 0..8u64 {
                    let buf = uio.buffer().unwrap();
                    let rec =
                        Request::new(Opcode::Read, target, k * 65536, buf.addr(), 65536, h, k)
                            .asynchronous();
                    uio.submit(rec, buf).unwrap();
                }
            })
            .join()
            .unwrap();
        let server = scope.spawn(|| uio.serve_handlers(&stop));
        let _stop = StopOnDrop(&stop);
        let mut args: Vec<u64> = (0..8)
            .map(|_| {
                let (arg, _, good, err) = seen(&rx);
                assert!(good, "record {arg}: {err:?}");
                arg
            })
            .collect();
        args.sort_unstable();
        assert_eq!(args, (0..8).collect::<Vec<_>>());
        stop.store(true, Ordering::Release);
        assert_eq!(server.join().unwrap().unwrap(), 8);
    });
    assert_eq!(
        uio.stats().orphaned,
        0,
        "an ASYNC completion needs no submitting thread"
    );
    assert_eq!(uio.buffers_free(), free);
}
