//! Input-disabled COW (paper 000, §3.3): a process that forks while an input into its buffer is
//! pending must not let the child see the input. Alone in its own process (fork with threads).

use std::os::fd::AsRawFd;
use zcio_genie::{InputBuffering, Semantics};
use zcio_vm::{MapOptions, Mapping, page_size};

mod common;
use common::{bounded, forced_pair, recv_copy};

/// In the child: wait for the parent's word that its input completed, then report (one byte:
/// 1 = the buffer still holds the old bytes, 0 = it shows the input) and leave at once. Only
/// system calls and plain memory reads: the child of a threaded process may not allocate.
fn child(buf: &[u8], old: u8, go: i32, verdict: i32) -> ! {
    let mut b = [0u8; 1];
    // SAFETY: a read into a local byte from a descriptor inherited from the parent.
    unsafe { libc::read(go, b.as_mut_ptr().cast(), 1) };
    let untouched = buf.iter().all(|&x| x == old) as u8;
    // SAFETY: writes one local byte; _exit skips the parent's atexit handlers and destructors.
    unsafe {
        libc::write(verdict, (&untouched as *const u8).cast(), 1);
        libc::_exit(0);
    }
}

#[test]
fn a_child_forked_during_pending_input_does_not_see_the_input() {
    let len = 64 * page_size();
    for sem in [
        Semantics::Copy,
        Semantics::EmulatedCopy,
        Semantics::Share,
        Semantics::EmulatedShare,
    ] {
        for input in [InputBuffering::EarlyDemux, InputBuffering::PooledAligned] {
            let (mut tx, mut rx) = forced_pair();
            let mut m = Mapping::anonymous(len, MapOptions::default()).unwrap();
            m.as_mut_slice().fill(0x01);
            let addr = m.addr();
            let go = zcio_vm::wire::Pipe::new(4096).unwrap();
            let verdict = zcio_vm::wire::Pipe::new(4096).unwrap();
            let data = vec![0x77u8; len];
            std::thread::scope(|s| {
                let buf = m.as_mut_slice();
                // The input is pending (the receiver waits for the message) when the fork comes.
                let receiver = s.spawn(move || {
                    rx.recv(sem, buf, input).unwrap();
                    buf.iter().all(|&x| x == 0x77)
                });
                std::thread::sleep(std::time::Duration::from_millis(20));
                // SAFETY: the child runs only `child`, which makes system calls and reads memory.
                let pid = unsafe { libc::fork() };
                assert!(pid >= 0, "fork failed");
                if pid == 0 {
                    // SAFETY: the child's copy of the buffer; the receiving thread that borrows
                    // it in the parent does not exist in the child.
                    let view = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
                    child(view, 0x01, go.rx.as_raw_fd(), verdict.tx.as_raw_fd());
                }
                let (t, _) = tx.send(sem, &data).unwrap();
                let parent_sees = receiver.join().unwrap();
                tx.wait(t).unwrap();
                let mut v = [9u8; 1];
                // SAFETY: one byte to the child, one byte back, then reap it.
                unsafe {
                    libc::write(go.tx.as_raw_fd(), [1u8].as_ptr().cast(), 1);
                    libc::read(verdict.rx.as_raw_fd(), v.as_mut_ptr().cast(), 1);
                    libc::waitpid(pid, std::ptr::null_mut(), 0);
                }
                assert!(parent_sees, "{sem} {input}: the parent got its input");
                assert_eq!(v[0], 1, "{sem} {input}: the child saw the parent's input");
            });
        }
    }
}

/// The child of a process with an emulated-copy output pending: 0 when it could use zcio on its
/// own (a runtime that is not the parent's, the inherited one refusing with a clear error, a
/// byte-exact transfer with an overwrite during output), else the number of the first failure.
fn child_uses_zcio(parent_runtime: usize, buf: zcio_vm::RawRange) -> i32 {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> i32 {
        let rt = zcio_vm::VmRuntime::get();
        if std::ptr::from_ref(rt) as usize == parent_runtime {
            return 1; // the parent's runtime, whose userfaultfd acts on the parent
        }
        // SAFETY: the parent's runtime, inherited as memory and never freed.
        let inherited = unsafe { &*(parent_runtime as *const zcio_vm::VmRuntime) };
        match inherited.register_app(buf) {
            Err(e) if e.to_string().contains("fork") => {}
            _ => return 6, // the inherited runtime acted, or failed without saying why
        }
        let (mut tx, mut rx) = forced_pair();
        let len = 16 * page_size();
        let mut m = Mapping::anonymous(len, MapOptions::default()).unwrap();
        m.as_mut_slice().fill(0x5A);
        let (t, acc) = tx.send(Semantics::EmulatedCopy, m.as_slice()).unwrap();
        if !acc.path.is_uffd_tcow() {
            return 2; // the child did not get the VM path
        }
        m.as_mut_slice().fill(0xA5); // overwrite during output: TCOW in the child
        let got = recv_copy(&mut rx, len);
        tx.wait(t).unwrap();
        if got.iter().any(|&b| b != 0x5A) {
            return 3; // the receiver saw the overwrite
        }
        if m.as_slice().iter().any(|&b| b != 0xA5) {
            return 4; // the child's own write was lost
        }
        0
    }));
    r.unwrap_or(5)
}

/// A process forks while an emulated-copy output of its own is pending. The child uses zcio
/// (its own runtime, never the parent's userfaultfd); the parent's write to the buffer under
/// output, from the sending thread, neither hangs nor reaches the receiver.
#[test]
fn a_fork_during_pending_output_gives_the_child_its_own_runtime() {
    bounded(
        "fork during pending output",
        std::time::Duration::from_secs(60),
        || {
            let rt = zcio_vm::VmRuntime::get();
            let (mut tx, mut rx) = forced_pair();
            let len = 64 * page_size();
            let mut m = Mapping::anonymous(len, MapOptions::default()).unwrap();
            m.as_mut_slice().fill(0x11);
            let (t, acc) = tx.send(Semantics::EmulatedCopy, m.as_slice()).unwrap();
            assert!(acc.path.is_uffd_tcow(), "path {}", acc.path);
            let parent_runtime = std::ptr::from_ref(rt) as usize;
            // SAFETY: the child runs `child_uses_zcio` and leaves with _exit (no destructors of
            // the parent's state, no atexit handlers).
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                let code = child_uses_zcio(parent_runtime, zcio_vm::RawRange::of(m.as_slice()));
                // SAFETY: leave the child at once.
                unsafe { libc::_exit(code) };
            }
            // The sending thread writes the pages under output (shared with the child for now),
            // while a receiver takes the message.
            let mut got = vec![0u8; len];
            let before = rt.stats();
            std::thread::scope(|s| {
                let r = s.spawn(|| {
                    rx.recv(
                        Semantics::EmulatedCopy,
                        &mut got,
                        InputBuffering::EarlyDemux,
                    )
                    .unwrap()
                });
                m.as_mut_slice().fill(0x22);
                r.join().unwrap();
            });
            let after = rt.stats();
            tx.wait(t).unwrap();
            let mut status = 0;
            // SAFETY: reap our child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "the child could not use zcio after the fork (status {status:#x}; exit code 1: \
                 the parent's runtime, 2: no VM path, 3: integrity, 4: own write lost, 5: panic, \
                 6: the inherited runtime acted)"
            );
            assert!(
                got.iter().all(|&b| b == 0x11),
                "the receiver saw the parent's write"
            );
            assert!(
                m.as_slice().iter().all(|&b| b == 0x22),
                "the parent's own write"
            );
            // Pages shared with the child since the fork cannot be moved: TCOW copied them, and
            // no write waited for the output (only this thread could have completed it).
            if rt.capabilities().tcow == zcio_vm::runtime::TcowMode::UffdMove {
                assert_eq!(
                    after.sleep_on_write, before.sleep_on_write,
                    "a write waited"
                );
                assert!(
                    after.tcow_copies > before.tcow_copies,
                    "no TCOW copy for the parent's write ({after:?})"
                );
            }
        },
    );
}
