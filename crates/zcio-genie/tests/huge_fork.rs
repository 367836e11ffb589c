//! A fork during a pending emulated-copy output of a huge-page buffer: the child shares the
//! huge pages copy-on-write, so TCOW at 2 MiB cannot move them (the kernel refuses to move a
//! shared page) and TCOW copies the written pages instead. The output must still deliver the
//! data of the moment of the call, the child must see the buffer as it was at the fork, and the
//! writer must get through.
//! Alone in its own process (fork with threads).

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
use zcio_genie::{AppBuffer, Granule, InputBuffering, Semantics, granule_of};

mod common;
use common::forced_pair;

const H: usize = 2 << 20;

fn pattern(buf: &mut [u8], seed: u8) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 12) as u8;
    }
}

/// In the child: wait for the parent's word, then report whether its view of the buffer is the
/// one of the fork (1) or not (0), and leave at once. Only system calls and memory reads.
fn child(view: &[u8], expect: &[u8], go: i32, verdict: i32) -> ! {
    let mut b = [0u8; 1];
    // SAFETY: a read into a local byte from a descriptor inherited from the parent.
    unsafe { libc::read(go, b.as_mut_ptr().cast(), 1) };
    let same = (view == expect) as u8;
    // SAFETY: writes one local byte; _exit skips the parent's atexit handlers and destructors.
    unsafe {
        libc::write(verdict, (&same as *const u8).cast(), 1);
        libc::_exit(0);
    }
}

#[test]
fn a_fork_during_a_pending_huge_output_keeps_every_promise() {
    if let Some(why) = zcio_vm::huge::unavailable_reason() {
        zcio_vm::skip::skip(zcio_vm::skip::Capability::HugePages, &why);
        return;
    }
    let len = 4 * H;
    let mut buf = AppBuffer::huge(len).unwrap();
    assert_eq!(granule_of(&buf), Granule::Huge);
    pattern(&mut buf, 3);
    let original = buf.to_vec();
    let (mut tx, mut rx) = forced_pair();
    let go = zcio_vm::wire::Pipe::new(4096).unwrap();
    let verdict = zcio_vm::wire::Pipe::new(4096).unwrap();
    let addr = buf.as_ptr() as usize;
    let before = zcio_vm::VmRuntime::get().stats();
    let t0 = Instant::now();
    let got = std::thread::scope(|s| {
        let receiver = s.spawn(move || {
            // The output is pending (its pages referenced) while the fork and the writes come.
            std::thread::sleep(Duration::from_millis(50));
            let mut dst = AppBuffer::huge(len).unwrap();
            rx.recv(
                Semantics::EmulatedCopy,
                &mut dst,
                InputBuffering::EarlyDemux,
            )
            .unwrap();
            dst.to_vec()
        });
        let (t, acc) = tx.send(Semantics::EmulatedCopy, &buf).unwrap();
        assert_eq!(acc.granule, Some(Granule::Huge), "{}", acc.path);
        // SAFETY: the child runs only `child`, which makes system calls and reads memory.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            // SAFETY: the child's copy of the buffer, which nothing in the child writes.
            let view = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
            child(view, &original, go.rx.as_raw_fd(), verdict.tx.as_raw_fd());
        }
        // A writer in another thread overwrites every page while the output is pending.
        let data: &mut [u8] = &mut buf;
        let writer = s.spawn(move || {
            for pg in (0..len).step_by(4096) {
                data[pg] = 0xEE;
            }
        });
        tx.wait(t).unwrap();
        writer.join().unwrap();
        let mut v = [9u8; 1];
        // SAFETY: one byte to the child, one byte back, then reap it.
        unsafe {
            libc::write(go.tx.as_raw_fd(), [1u8].as_ptr().cast(), 1);
            libc::read(verdict.rx.as_raw_fd(), v.as_mut_ptr().cast(), 1);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        assert_eq!(v[0], 1, "the child saw the buffer change after the fork");
        receiver.join().unwrap()
    });
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "the transfer took {:?}",
        t0.elapsed()
    );
    assert!(
        got == original,
        "the output did not deliver the data of the moment of the call"
    );
    for pg in (0..len).step_by(4096) {
        assert_eq!(buf[pg], 0xEE, "the writer's write at {pg} was lost");
        assert_eq!(buf[pg + 1], original[pg + 1]);
    }
    let after = zcio_vm::VmRuntime::get().stats();
    eprintln!(
        "TCOW at 2 MiB: {}, 4 KiB: {}, writes that waited for the output: {}",
        after.tcow_huge_copies - before.tcow_huge_copies,
        after.tcow_copies - before.tcow_copies,
        after.sleep_on_write - before.sleep_on_write
    );
}
