//! The input access check (`zcio_vm::protect::check_writable`): a buffer is accepted only where
//! every byte lies in memory the process may write and whose pages a write gets; anything else
//! is refused by name, without a fault and without changing a byte. Checked with the mapping
//! lookup (`PROCMAP_QUERY`) where the kernel answers it, and again, in a child process, with
//! the page-populating check it replaces (`ZCIO_VM_DISABLE=procmap`).

use zcio_vm::protect::{WritableCheck, check_writable, writable_check};
use zcio_vm::{MapOptions, Mapping, VmError, page_size};

/// Map `pages` fresh private anonymous pages, filled with 0x5A. The test takes the mapping
/// over: it protects, unmaps and replaces its pages itself, and unmaps it with [`unmap`].
fn anon(pages: usize) -> (*mut u8, usize) {
    let len = pages * page_size();
    let m = Mapping::anonymous(len, MapOptions::default()).expect("an anonymous mapping");
    let p = m.as_ptr();
    std::mem::forget(m);
    // SAFETY: the mapping just made, writable, `len` bytes.
    unsafe { std::ptr::write_bytes(p, 0x5A, len) };
    (p, len)
}

fn unmap(p: *mut u8, len: usize) {
    // SAFETY: a mapping this test made; nothing refers to it any more.
    unsafe { libc::munmap(p.cast(), len) };
}

/// The check on `len` bytes at `p`, in memory the caller mapped.
fn check(p: *mut u8, len: usize) -> Result<(), VmError> {
    // SAFETY: the memory is the test's own mapping; the check neither reads nor writes it
    // through this slice (it hands the address range to the kernel).
    let buf = unsafe { std::slice::from_raw_parts_mut(p, len) };
    check_writable(buf)
}

fn refused(r: Result<(), VmError>, addr: *mut u8, len: usize, case: &str) {
    match r {
        Err(VmError::NotWritable { addr: a, len: l }) => {
            assert_eq!((a, l), (addr as usize, len), "{case}: names the buffer");
        }
        other => panic!("{case}: want NotWritable, got {other:?}"),
    }
}

fn protect(p: *mut u8, len: usize, prot: libc::c_int) {
    // SAFETY: part of a mapping this test made; it is not touched from Rust while protected.
    assert_eq!(unsafe { libc::mprotect(p.cast(), len, prot) }, 0);
}

/// Every case, with whatever check this process makes.
fn matrix() {
    let ps = page_size();
    // Writable, off the page boundary, across pages: accepted, and no byte changes.
    let (p, len) = anon(3);
    // SAFETY: inside the mapping.
    let at = unsafe { p.add(100) };
    check(at, 2 * ps).expect("a writable buffer");
    check(at, 0).expect("an empty buffer");
    // SAFETY: the whole mapping, readable.
    let bytes = unsafe { std::slice::from_raw_parts(p, len) };
    assert!(bytes.iter().all(|&b| b == 0x5A), "the check wrote");
    // Pages never touched: accepted, and there afterwards (the input paths expect them).
    let untouched = Mapping::anonymous(2 * ps, MapOptions::default()).expect("a mapping");
    let (fresh, r) = (untouched.as_ptr(), untouched.range());
    if zcio_vm::huge::all_present(r).is_some() {
        assert_eq!(zcio_vm::huge::all_present(r), Some(false), "untouched");
        check(fresh, 2 * ps).expect("untouched writable pages");
        assert_eq!(zcio_vm::huge::all_present(r), Some(true), "populated");
    }
    drop(untouched);
    // A page in the middle read-only, then inaccessible: refused, naming the buffer.
    for (prot, case) in [
        (libc::PROT_READ, "read-only page"),
        (libc::PROT_NONE, "no-access page"),
    ] {
        // SAFETY: the middle page of the mapping.
        protect(unsafe { p.add(ps) }, ps, prot);
        refused(check(at, 2 * ps), at, 2 * ps, case);
        // SAFETY: as above.
        protect(unsafe { p.add(ps) }, ps, libc::PROT_READ | libc::PROT_WRITE);
        check(at, 2 * ps).unwrap_or_else(|e| panic!("{case} given back its access: {e}"));
    }
    // A hole in the middle: refused.
    // SAFETY: the middle page of the mapping.
    unsafe { libc::munmap(p.add(ps).cast(), ps) };
    refused(check(at, 2 * ps), at, 2 * ps, "a hole");
    // Only the first page, before the hole: accepted.
    check(p, ps).expect("the page before the hole");
    unmap(p, len);

    // Two writable mappings side by side, private and shared anonymous: accepted.
    let (p, len) = anon(2);
    // SAFETY: replaces the second page of our own mapping with shared anonymous memory.
    let q = unsafe {
        libc::mmap(
            p.add(ps).cast(),
            ps,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    assert_ne!(q, libc::MAP_FAILED);
    check(p, len).expect("private and shared writable mappings side by side");
    unmap(p, len);

    // A file mapped beyond its end (the file shrunk after the mapping was made): writable
    // mapping, but a write there would raise SIGBUS. Refused, without a signal.
    let fd = rustix::fs::memfd_create("zcio-access-check", rustix::fs::MemfdFlags::CLOEXEC)
        .expect("memfd");
    rustix::fs::ftruncate(&fd, 2 * ps as u64).unwrap();
    // SAFETY: a fresh shared mapping of our own memfd.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * ps,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            0,
        )
    }
    .cast::<u8>();
    assert_ne!(p.cast(), libc::MAP_FAILED);
    rustix::fs::ftruncate(&fd, ps as u64).unwrap();
    check(p, ps).expect("the page the file still has");
    refused(check(p, 2 * ps), p, 2 * ps, "a file mapped beyond its end");
    unmap(p, 2 * ps);
}

/// What a child prints when the matrix ran to the end.
const DONE: &str = "access-check matrix finished";

#[test]
fn buffers_the_process_may_not_write_are_refused_by_name_with_either_check() {
    let disabled = std::env::var("ZCIO_VM_DISABLE").is_ok_and(|v| v.contains("procmap"));
    if disabled {
        // The child: the populating check.
        assert_eq!(writable_check(), WritableCheck::PopulateWrite);
        matrix();
        println!("{DONE}");
        return;
    }
    match writable_check() {
        WritableCheck::ProcmapQuery => matrix(),
        other => zcio_vm::skip::skip(
            zcio_vm::skip::Capability::ProcmapQuery,
            &format!("the kernel does not answer PROCMAP_QUERY (the check is {other})"),
        ),
    }
    let out = zcio_testkit::child::rerun(
        "buffers_the_process_may_not_write_are_refused_by_name_with_either_check",
        &[("ZCIO_VM_DISABLE", "procmap")],
    );
    assert!(
        out.finished(DONE),
        "the populating check: {}\n{}\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
}

/// In a forked child: `body` returns the exit code (0: passed).
fn in_child(body: impl FnOnce() -> i32) -> i32 {
    // SAFETY: the child runs `body` (no locks the parent's other threads could hold: it maps,
    // checks and unmaps) and leaves with _exit.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)).unwrap_or(99);
        // SAFETY: leave the child at once.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: reap our child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert!(libc::WIFEXITED(status), "child status {status:#x}");
    libc::WEXITSTATUS(status)
}

#[test]
fn a_child_checks_its_own_mappings_and_a_closed_lookup_falls_back() {
    if writable_check() != WritableCheck::ProcmapQuery {
        zcio_vm::skip::skip(
            zcio_vm::skip::Capability::ProcmapQuery,
            "the kernel does not answer PROCMAP_QUERY",
        );
        return;
    }
    let ps = page_size();
    // The parent has checked (its lookup is open); the child's mappings differ from the
    // parent's: a page the child maps is writable, a page it unmapped is not.
    let (p, len) = anon(1);
    check(p, len).unwrap();
    let code = in_child(|| {
        unmap(p, len);
        if check(p, len).is_ok() {
            return 1; // judged by the parent's mappings
        }
        let (q, qlen) = anon(1);
        if check(q, qlen).is_err() {
            return 2;
        }
        0
    });
    assert_eq!(
        code, 0,
        "1: an unmapped page passed, 2: a fresh page refused"
    );
    unmap(p, len);
    // A program that closes every descriptor it did not open: the check still answers (by
    // populating), and then looks up again with a descriptor of its own.
    let code = in_child(|| {
        // SAFETY: closes the child's descriptors above the standard ones; the child uses none
        // of them afterwards but the ones the check opens.
        unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
        let (q, qlen) = anon(2);
        if check(q, qlen).is_err() {
            return 1;
        }
        // SAFETY: the second page of the child's own mapping.
        protect(unsafe { q.add(ps) }, ps, libc::PROT_READ);
        for _ in 0..2 {
            if check(q, qlen).is_ok() {
                return 2;
            }
        }
        0
    });
    assert_eq!(
        code, 0,
        "1: a writable buffer refused, 2: a read-only page passed"
    );
}
