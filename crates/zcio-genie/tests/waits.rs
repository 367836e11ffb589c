//! Waits on the memory network that end other than in what they wait for ([`Waits`]): after
//! a time, or at a signal where the endpoint asks for that. Such an end takes nothing: the next
//! call on the same endpoint gets the message, or the completion, whole.

mod common;

use common::{fill, forced_pair};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;
use zcio_genie::Waits;
use zcio_genie::stream::{self, ModuleKind};
use zcio_genie::{GenieError, InputBuffering, Semantics};

const SHORT: Duration = Duration::from_millis(50);

#[test]
fn a_wait_for_a_message_times_out_and_the_next_receive_gets_it() {
    let (mut tx, mut rx) = forced_pair();
    rx.set_waits(Waits {
        timeout: Some(SHORT),
        interruptible: false,
    });
    let mut buf = vec![0u8; 64 * 1024];
    for e in [
        rx.recv(
            Semantics::EmulatedCopy,
            &mut buf,
            InputBuffering::EarlyDemux,
        )
        .unwrap_err(),
        rx.peek_len().unwrap_err(),
    ] {
        assert!(
            matches!(e, GenieError::TimedOut { after, .. } if after == SHORT),
            "{e}"
        );
        assert!(e.to_string().contains("waiting for a message"), "{e}");
    }
    let mut data = vec![0u8; 64 * 1024];
    fill(&mut data, 3);
    let (t, _) = tx.send(Semantics::EmulatedCopy, &data).unwrap();
    rx.recv(
        Semantics::EmulatedCopy,
        &mut buf,
        InputBuffering::EarlyDemux,
    )
    .unwrap();
    assert!(buf == data);
    tx.wait(t).unwrap();
}

#[test]
fn a_wait_for_a_completion_times_out_and_the_next_wait_gets_it() {
    let (mut tx, mut rx) = forced_pair();
    tx.set_waits(Waits {
        timeout: Some(SHORT),
        interruptible: false,
    });
    let mut data = vec![0u8; 16 * 1024];
    fill(&mut data, 5);
    let (t, _) = tx.send(Semantics::EmulatedCopy, &data).unwrap();
    let e = tx.wait(t).unwrap_err();
    assert!(matches!(e, GenieError::TimedOut { .. }), "{e}");
    let e = tx.flush().unwrap_err();
    assert!(matches!(e, GenieError::TimedOut { .. }), "{e}");
    let mut buf = vec![0u8; data.len()];
    rx.recv(
        Semantics::EmulatedCopy,
        &mut buf,
        InputBuffering::EarlyDemux,
    )
    .unwrap();
    assert!(buf == data);
    tx.wait(t).unwrap();
    tx.flush().unwrap();
}

extern "C" fn on_usr1(_: libc::c_int) {}

/// Run `wait` on a thread of its own while another sends it SIGUSR1 every 20 ms until it
/// returns; its result.
fn under_signals<T: Send + 'static>(wait: impl FnOnce() -> T + Send + 'static) -> T {
    // SAFETY: a handler that does nothing, installed without SA_RESTART (poll returns EINTR
    // either way); SIGUSR1 is not otherwise used by the test binary.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_usr1 as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR1, &sa, std::ptr::null_mut()), 0);
    }
    let (tid_tx, tid_rx) = mpsc::channel();
    let done = Arc::new(AtomicBool::new(false));
    let d = done.clone();
    let waiter = std::thread::spawn(move || {
        // SAFETY: pthread_self has no preconditions.
        tid_tx.send(unsafe { libc::pthread_self() }).unwrap();
        let r = wait();
        d.store(true, Ordering::SeqCst);
        r
    });
    let tid = tid_rx.recv().unwrap();
    while !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
        if !done.load(Ordering::SeqCst) {
            // SAFETY: the thread is alive until `done` is set and joined below; the signal
            // has a handler.
            unsafe { libc::pthread_kill(tid, libc::SIGUSR1) };
        }
    }
    waiter.join().unwrap()
}

/// Receive into a buffer of `len` bytes with `recv` under signals ([`under_signals`]): the
/// error the receive ended with, and the endpoint back.
fn failed_recv_under_signals<R: Send + 'static>(
    mut rx: R,
    len: usize,
    recv: fn(&mut R, &mut [u8]) -> Result<(), GenieError>,
) -> (GenieError, R) {
    under_signals(move || {
        let mut buf = vec![0u8; len];
        let e = recv(&mut rx, &mut buf).unwrap_err();
        (e, rx)
    })
}

#[test]
fn a_signal_ends_a_wait_only_where_the_endpoint_asks() {
    let (mut tx, mut rx) = forced_pair();
    rx.set_waits(Waits {
        timeout: None,
        interruptible: true,
    });
    let (e, mut rx) = failed_recv_under_signals(rx, 4096, |rx, b| {
        rx.recv(Semantics::Copy, b, InputBuffering::EarlyDemux)
            .map(|_| ())
    });
    assert!(matches!(e, GenieError::Interrupted { .. }), "{e}");
    // Not asked: signals come and go, and the wait runs to its time.
    rx.set_waits(Waits {
        timeout: Some(Duration::from_millis(300)),
        interruptible: false,
    });
    let (e, mut rx) = failed_recv_under_signals(rx, 4096, |rx, b| {
        rx.recv(Semantics::Copy, b, InputBuffering::EarlyDemux)
            .map(|_| ())
    });
    assert!(matches!(e, GenieError::TimedOut { .. }), "{e}");
    // The endpoint goes on: the next message arrives whole.
    let (t, _) = tx.send(Semantics::Copy, &[9u8; 4096]).unwrap();
    let mut buf = vec![0u8; 4096];
    rx.recv(Semantics::Copy, &mut buf, InputBuffering::EarlyDemux)
        .unwrap();
    assert!(buf.iter().all(|&b| b == 9));
    tx.wait(t).unwrap();
}

/// Whether `fd` is readable within `ms` milliseconds.
fn readable(fd: &impl std::os::fd::AsFd, ms: u64) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [PollFd::new(fd, PollFlags::IN)];
    let t = Timespec::try_from(Duration::from_millis(ms)).unwrap();
    poll(&mut fds, Some(&t)).unwrap() > 0
}

#[test]
fn an_endpoint_is_readable_when_a_message_or_a_completion_is_ready() {
    let (mut tx, mut rx) = forced_pair();
    assert!(!readable(&rx, 0), "nothing sent yet");
    assert!(!readable(&tx, 0), "nothing to complete yet");
    let mut data = vec![0u8; 64 * 1024];
    fill(&mut data, 7);
    let (t, _) = tx.send(Semantics::EmulatedCopy, &data).unwrap();
    assert!(readable(&rx, 1000), "a message waits");
    let mut buf = vec![0u8; data.len()];
    rx.recv(
        Semantics::EmulatedCopy,
        &mut buf,
        InputBuffering::EarlyDemux,
    )
    .unwrap();
    assert!(buf == data);
    assert!(!readable(&rx, 0), "the message was taken");
    assert!(readable(&tx, 1000), "a completion waits");
    assert_eq!(tx.reap().unwrap(), 1);
    assert!(!readable(&tx, 0), "the completion was reaped");
    tx.wait(t).unwrap();
    // A sender gone wakes the receiver, whose next receive says so.
    drop(tx);
    assert!(readable(&rx, 1000), "the sender's end is news");
    let e = rx
        .recv(
            Semantics::EmulatedCopy,
            &mut buf,
            InputBuffering::EarlyDemux,
        )
        .unwrap_err();
    assert!(matches!(e, GenieError::PeerGone { .. }), "{e}");
}

#[test]
fn a_socket_or_pipe_wait_times_out_or_is_interrupted_and_the_next_receive_gets_the_message() {
    for kind in [
        ModuleKind::Pipe,
        ModuleKind::Unix,
        ModuleKind::Tcp,
        ModuleKind::Udp,
    ] {
        let (mut tx, mut rx) = stream::pair(kind).unwrap();
        rx.set_waits(Waits {
            timeout: Some(SHORT),
            interruptible: false,
        });
        let mut buf = vec![0u8; 100_000];
        let e = rx
            .recv(
                Semantics::EmulatedCopy,
                &mut buf,
                InputBuffering::EarlyDemux,
            )
            .unwrap_err();
        assert!(matches!(e, GenieError::TimedOut { .. }), "{kind}: {e}");
        rx.set_waits(Waits {
            timeout: None,
            interruptible: true,
        });
        let (e, mut rx) = failed_recv_under_signals(rx, 100_000, |rx, b| {
            rx.recv(Semantics::Copy, b, InputBuffering::EarlyDemux)
                .map(|_| ())
        });
        assert!(matches!(e, GenieError::Interrupted { .. }), "{kind}: {e}");
        let mut data = vec![0u8; 100_000];
        fill(&mut data, 11);
        tx.send(Semantics::Copy, &data).unwrap();
        rx.recv(
            Semantics::EmulatedCopy,
            &mut buf,
            InputBuffering::EarlyDemux,
        )
        .unwrap();
        assert!(buf == data, "{kind}");
    }
}
