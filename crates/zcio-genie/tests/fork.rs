//! Input-disabled COW (paper 000, §3.3): a process that forks while an input into its buffer is
//! pending must not let the child see the input. Alone in its own process (fork with threads).

use std::os::fd::AsRawFd;
use zcio_genie::{InputBuffering, Semantics};
use zcio_vm::{MapOptions, Mapping, page_size};

mod common;
use common::forced_pair;

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
