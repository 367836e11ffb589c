//! A loan across a fork ([`Loan::keep`]). Unsent, a loan is a memory file mapped shared, so a
//! child made by fork would share its pages with the parent; kept, each process has its own
//! copy from the moment of the fork: the child reads the bytes of that moment, and neither
//! process's writes reach the other. Alone in its own process (fork, and descriptor counts).

use std::os::fd::{AsRawFd, RawFd};
use zcio_genie::memnet::loan::Loan;
use zcio_genie::memnet::pair;
use zcio_genie::{Granule, InputBuffering, Semantics};
use zcio_vm::page::HUGE_PAGE_SIZE;

const PAGE: usize = 4096;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 12) as u8)
        .collect()
}

/// One byte to `fd`.
fn say(fd: RawFd, b: u8) {
    // SAFETY: writes one byte of a local to a pipe's descriptor this process holds.
    let n = unsafe { libc::write(fd, (&b as *const u8).cast(), 1) };
    assert_eq!(n, 1, "a pipe write");
}

/// One byte from `fd` (waiting for it); 0xFF if none came.
fn hear(fd: RawFd) -> u8 {
    let mut b = [0xFFu8; 1];
    // SAFETY: reads one byte into a local from a pipe's descriptor this process holds.
    unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) };
    b[0]
}

/// Fork; the child runs `child` (only memory reads and writes and the pipes' system calls:
/// the child of a threaded process may not allocate) and leaves with `_exit(0)`. The parent
/// gets the child's pid.
fn fork_with(child: impl FnOnce()) -> libc::pid_t {
    // SAFETY: the child runs only `child`, which touches memory and pipes, then `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        child();
        // SAFETY: leaves the child at once, without the parent's destructors or handlers.
        unsafe { libc::_exit(0) };
    }
    pid
}

/// Wait for the child `pid`; whether it exited with 0.
fn reaped(pid: libc::pid_t) -> bool {
    let mut status = 0;
    // SAFETY: waits for this process's own child, into a local.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    r == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}

#[test]
fn a_kept_loan_is_each_processs_own_after_a_fork() {
    let huge = zcio_vm::huge::unavailable_reason().is_none();
    let mut kept = Vec::new();
    for (len, granule) in [
        (5 * PAGE + 17, Granule::Base),
        (2 * HUGE_PAGE_SIZE + 5, Granule::Huge),
    ] {
        let what = format!("{len} bytes in {granule:?} pages");
        let mut loan = Loan::with_granule(len, granule).unwrap();
        if huge && granule == Granule::Huge {
            assert_eq!(loan.granule(), Granule::Huge, "{what}");
        }
        let want = pattern(len, len as u8);
        loan.copy_from_slice(&want);

        // Unsent, the loan is shared with a child: what `keep` is for.
        let written = zcio_vm::wire::Pipe::new(4096).unwrap();
        let (tx_w, rx_w) = (written.tx.as_raw_fd(), written.rx.as_raw_fd());
        let pid = fork_with(|| {
            for pg in (0..len).step_by(PAGE) {
                loan[pg] = !want[pg];
            }
            say(tx_w, 1);
        });
        assert_eq!(hear(rx_w), 1);
        assert!(reaped(pid));
        assert_eq!(
            loan[PAGE], !want[PAGE],
            "{what}: unsent, the child's writes are ours"
        );
        loan.copy_from_slice(&want);

        let (at, open) = (loan.as_ptr(), open_fds());
        loan.keep().unwrap();
        assert!(loan.is_kept(), "{what}");
        assert_eq!(
            open_fds(),
            open - 1,
            "{what}: the loan's file descriptor closed"
        );
        assert_eq!(loan.as_ptr(), at, "{what}: the bytes stay where they were");

        // The child reads the bytes of the fork, writes every page, and reads its own writes
        // after the parent wrote every page too.
        let written = zcio_vm::wire::Pipe::new(4096).unwrap();
        let go = zcio_vm::wire::Pipe::new(4096).unwrap();
        let (tx_w, rx_w) = (written.tx.as_raw_fd(), written.rx.as_raw_fd());
        let (tx_go, rx_go) = (go.tx.as_raw_fd(), go.rx.as_raw_fd());
        let pid = fork_with(|| {
            let of_the_fork = loan[..] == want[..];
            loan.fill(0xC1);
            say(tx_w, u8::from(of_the_fork));
            hear(rx_go);
            say(tx_w, u8::from(loan.iter().all(|&b| b == 0xC1)));
        });
        assert_eq!(
            hear(rx_w),
            1,
            "{what}: the child read the bytes of the fork"
        );
        assert!(
            loan[..] == want[..],
            "{what}: the child's writes reached the parent"
        );
        loan.fill(0x9A);
        say(tx_go, 1);
        assert_eq!(
            hear(rx_w),
            1,
            "{what}: the parent's writes reached the child"
        );
        assert!(reaped(pid), "{what}: the child failed");
        assert!(loan.iter().all(|&b| b == 0x9A), "{what}");

        // Sent after the fork: a copy of the parent's bytes of now.
        let (mut tx, mut rx) = pair().unwrap();
        let (_, acc) = tx.send_loan_copy(&mut loan, 0..len).unwrap();
        assert_eq!(acc.cpu_copied_bytes, len as u64, "{what}: {}", acc.path);
        loan.fill(0x33);
        let mut out = vec![0u8; len];
        rx.recv(Semantics::Copy, &mut out, InputBuffering::EarlyDemux)
            .unwrap();
        assert!(
            out.iter().all(|&b| b == 0x9A),
            "{what}: the bytes of the send"
        );
        kept.push(loan);
    }
    // The kept loans hold no descriptor, however often the process forks.
    let after = open_fds();
    for _ in 0..20 {
        for loan in &mut kept {
            loan.keep().unwrap();
        }
        let pid = fork_with(|| {});
        assert!(reaped(pid));
    }
    assert_eq!(open_fds(), after, "descriptors left open across forks");
}
