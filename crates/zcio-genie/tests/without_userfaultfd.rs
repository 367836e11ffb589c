//! Emulated copy where the kernel offers no userfaultfd (imitated with
//! `ZCIO_VM_DISABLE=uffd`): outputs are write-protected with `mprotect`, and a write into one
//! is served by the `SIGSEGV` handler. Private memory gets a copy at once (TCOW by copy), so a
//! single-threaded application that overwrites its buffer before it waits never hangs; shared
//! memory (a memfd mapping) sleeps on write until the output completes and stays the file's.
//!
//! The runtime reads `ZCIO_VM_DISABLE` once, when it starts: each test runs its scenario in a
//! child process (this test binary, run again for that one test with the variable set).

use std::time::Duration;
use zcio_genie::Semantics;
use zcio_vm::VmRuntime;
use zcio_vm::runtime::TcowMode;

mod common;
use common::{bounded, fill, filled, forced_pair, recv_copy};

/// What a child prints when its scenario ran to the end.
const DONE: &str = "scenario finished without userfaultfd";

/// Run `scenario` in a child without userfaultfd (when this is the parent), or run it there,
/// failing if it has not finished within `limit` (when this is that child).
fn without_userfaultfd(
    test: &'static str,
    limit: Duration,
    scenario: impl FnOnce() + Send + 'static,
) {
    if std::env::var("ZCIO_VM_DISABLE").is_ok_and(|v| v.split(',').any(|s| s == "uffd")) {
        assert_eq!(
            VmRuntime::get().capabilities().tcow,
            TcowMode::MprotectSleepOnWrite,
            "the runtime still uses userfaultfd"
        );
        bounded(test, limit, scenario);
        println!("{DONE}");
        return;
    }
    let out = zcio_testkit::child::rerun(test, &[("ZCIO_VM_DISABLE", "uffd")]);
    assert!(
        out.finished(DONE),
        "the scenario without userfaultfd failed ({}):\n{}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
}

/// The sending thread overwrites all of a 40 MiB emulated-copy output before it waits, and
/// nobody else can reap the output's completion: the first write copies the range, every write
/// goes on at once, and the receiver sees the data of the call.
#[test]
fn a_single_threaded_overwrite_gets_a_copy_and_never_waits() {
    without_userfaultfd(
        "a_single_threaded_overwrite_gets_a_copy_and_never_waits",
        Duration::from_secs(120),
        || {
            let rt = VmRuntime::get();
            let len = 40 << 20;
            let (mut tx, mut rx) = forced_pair();
            let (mut m, want) = filled(len, 7);
            let buf = m.as_mut_slice();
            let before = rt.stats();
            let receiver = std::thread::spawn(move || recv_copy(&mut rx, len));
            let (t, acc) = tx.send(Semantics::EmulatedCopy, buf).unwrap();
            assert!(
                acc.path.to_string().contains("mprotect"),
                "the output was not write-protected in place: {}",
                acc.path
            );
            buf.fill(0xEE);
            let st = rt.stats();
            tx.wait(t).unwrap();
            let got = receiver.join().unwrap();
            let first = got.iter().zip(&want).position(|(a, b)| a != b);
            assert!(
                first.is_none(),
                "the receiver saw a write made after the call, first at byte {first:?}"
            );
            assert!(buf.iter().all(|&b| b == 0xEE), "the sender's own writes");
            assert_eq!(
                st.sleep_on_write, before.sleep_on_write,
                "a write waited for the output"
            );
            assert_eq!(
                st.tcow_copied_bytes - before.tcow_copied_bytes,
                len as u64,
                "the first write copies the whole protected range, once"
            );
            assert_eq!(
                (st.tcow_copies - before.tcow_copies) * zcio_vm::page_size() as u64,
                len as u64,
                "TCOW page copies against bytes"
            );
        },
    );
}

/// A buffer in a shared memfd mapping cannot be replaced by a copy (its writes must reach the
/// file): a write from another thread sleeps until the output completes, the receiver sees the
/// data of the call, and the file gets the write.
#[test]
fn a_write_into_shared_memory_sleeps_until_the_output_completes() {
    without_userfaultfd(
        "a_write_into_shared_memory_sleeps_until_the_output_completes",
        Duration::from_secs(60),
        || {
            let rt = VmRuntime::get();
            let len = 1 << 20;
            let fd = zcio_vm::mapping::memfd("zcio-test-shared", len).unwrap();
            // SAFETY: a fresh shared mapping of our memfd, unmapped at the end.
            let at = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    std::os::fd::AsRawFd::as_raw_fd(&fd),
                    0,
                )
            };
            assert_ne!(at, libc::MAP_FAILED);
            let at = at as usize;
            // SAFETY: the mapping above, `len` bytes, used only through this slice
            // here and by the writer thread's one write, joined before the unmap.
            let buf = unsafe { std::slice::from_raw_parts_mut(at as *mut u8, len) };
            fill(buf, 3);
            let want = buf.to_vec();
            let (mut tx, mut rx) = forced_pair();
            let before = rt.stats();
            let (t, _) = tx.send(Semantics::EmulatedCopy, buf).unwrap();
            let writer = std::thread::spawn(move || {
                // SAFETY: the mapping outlives this thread (joined below) and the main
                // thread does not touch it meanwhile; the write is the test's point.
                unsafe { std::ptr::write_volatile(at as *mut u8, 0xAB) };
            });
            // The writer is asleep in the handler before the output completes.
            let t0 = std::time::Instant::now();
            while rt.stats().sleep_on_write == before.sleep_on_write {
                assert!(
                    t0.elapsed() < Duration::from_secs(20),
                    "the write never faulted"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            let got = recv_copy(&mut rx, len);
            tx.wait(t).unwrap();
            writer.join().unwrap();
            assert_eq!(got, want, "the receiver saw a write made after the call");
            let st = rt.stats();
            assert!(
                st.sleep_on_write > before.sleep_on_write,
                "the write did not wait for the output"
            );
            assert_eq!(
                st.tcow_copied_bytes, before.tcow_copied_bytes,
                "shared memory was replaced by a copy"
            );
            let mut first = [0u8; 1];
            rustix::io::pread(&fd, &mut first, 0).unwrap();
            assert_eq!(first[0], 0xAB, "the write did not reach the file");
            // SAFETY: the mapping made above; nothing uses it any more.
            unsafe { libc::munmap(at as *mut libc::c_void, len) };
        },
    );
}

/// The permissions `/proc/self/maps` gives the mapping at `addr` (`rw-p`, `r--s`, ...).
fn perms_at(addr: usize) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (span, perms) = (f.next().unwrap(), f.next().unwrap());
        let (a, b) = span.split_once('-').unwrap();
        let (a, b) = (
            usize::from_str_radix(a, 16).unwrap(),
            usize::from_str_radix(b, 16).unwrap(),
        );
        if a <= addr && addr < b {
            return perms.to_string();
        }
    }
    panic!("nothing is mapped at {addr:#x}")
}

/// An output from a buffer the application made read-only: the receiver gets its bytes, and
/// after the output the buffer is read-only still (the release gives back what the pages
/// allowed before, not write access).
#[test]
fn a_read_only_buffer_stays_read_only_after_its_output() {
    without_userfaultfd(
        "a_read_only_buffer_stays_read_only_after_its_output",
        Duration::from_secs(60),
        || {
            let len = 1 << 20;
            let (m, want) = filled(len, 5);
            let at = m.addr();
            // SAFETY: the mapping made above; read-only from here on, as the test wants.
            let rc = unsafe { libc::mprotect(at as *mut libc::c_void, len, libc::PROT_READ) };
            assert_eq!(rc, 0);
            assert_eq!(perms_at(at), "r--p");
            let buf = m.as_slice();
            let (mut tx, mut rx) = forced_pair();
            let receiver = std::thread::spawn(move || recv_copy(&mut rx, len));
            let (t, acc) = tx.send(Semantics::EmulatedCopy, buf).unwrap();
            assert!(acc.path.to_string().contains("mprotect"), "{}", acc.path);
            tx.wait(t).unwrap();
            assert!(receiver.join().unwrap() == want, "the receiver's bytes");
            assert_eq!(
                perms_at(at),
                "r--p",
                "the output's release made a read-only buffer writable"
            );
        },
    );
}

/// The application unmaps a buffer under output and maps other memory (a read-only view of a
/// memory file) at its address: the receiver still gets the data of the call, and the output's
/// release leaves the new mapping as the application made it.
#[test]
fn a_buffer_replaced_during_its_output_is_left_alone_at_the_release() {
    without_userfaultfd(
        "a_buffer_replaced_during_its_output_is_left_alone_at_the_release",
        Duration::from_secs(60),
        || {
            let len = 1 << 20;
            let (m, want) = filled(len, 9);
            let at = m.addr();
            let buf = m.as_slice();
            let (mut tx, mut rx) = forced_pair();
            let (t, acc) = tx.send(Semantics::EmulatedCopy, buf).unwrap();
            assert!(acc.path.to_string().contains("mprotect"), "{}", acc.path);
            let fd = zcio_vm::mapping::memfd("zcio-test-replacement", len).unwrap();
            // SAFETY: the application's own buffer, unmapped under its output (a misuse the
            // output survives: it holds the pages), and a read-only view of our memory file
            // mapped in its place.
            let again = unsafe {
                libc::munmap(at as *mut libc::c_void, len);
                libc::mmap(
                    at as *mut libc::c_void,
                    len,
                    libc::PROT_READ,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    std::os::fd::AsRawFd::as_raw_fd(&fd),
                    0,
                )
            };
            assert_eq!(again as usize, at);
            assert_eq!(perms_at(at), "r--s");
            let got = recv_copy(&mut rx, len);
            tx.wait(t).unwrap();
            assert!(got == want, "the receiver's bytes");
            assert_eq!(
                perms_at(at),
                "r--s",
                "the output's release changed the memory mapped in the buffer's place"
            );
            // Dropping `m` unmaps the replacement, which lies where the buffer was.
            drop(m);
        },
    );
}

/// Two outputs of one buffer: when the first completes, the second still protects the buffer,
/// so a write then gets a copy and the second output's receiver sees the data of its call; and
/// once both complete, the buffer is writable again.
#[test]
fn a_buffer_under_two_outputs_stays_protected_until_both_complete() {
    without_userfaultfd(
        "a_buffer_under_two_outputs_stays_protected_until_both_complete",
        Duration::from_secs(60),
        || {
            let len = 64 << 10;
            let (mut m, want) = filled(len, 11);
            let at = m.addr();
            let buf = m.as_mut_slice();
            let (mut tx, mut rx) = forced_pair();
            let (t1, _) = tx.send(Semantics::EmulatedCopy, buf).unwrap();
            let (t2, _) = tx.send(Semantics::EmulatedCopy, buf).unwrap();
            assert!(
                recv_copy(&mut rx, len) == want,
                "the first receiver's bytes"
            );
            tx.wait(t1).unwrap();
            assert_eq!(
                perms_at(at),
                "r--p",
                "the second output's protection was lifted"
            );
            buf.fill(0xEE);
            assert!(
                recv_copy(&mut rx, len) == want,
                "the second output's receiver saw a write made after its call"
            );
            tx.wait(t2).unwrap();
            assert!(buf.iter().all(|&b| b == 0xEE), "the writer's own bytes");
            // Again without a write: once both complete, the buffer is writable as before
            // (the second output was protected over the first's protection).
            let want = buf.to_vec();
            let (t1, _) = tx.send(Semantics::EmulatedCopy, buf).unwrap();
            let (t2, _) = tx.send(Semantics::EmulatedCopy, buf).unwrap();
            for t in [t1, t2] {
                assert!(recv_copy(&mut rx, len) == want, "a receiver's bytes");
                tx.wait(t).unwrap();
            }
            assert_eq!(perms_at(at), "rw-p", "the buffer stayed read-only");
            buf.fill(0x11);
        },
    );
}
