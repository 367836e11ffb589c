//! Loans (`zcio_genie::memnet::loan`): messages whose pages move between processes, shipped
//! as sealed memory files. A process started on its own (this test binary run again) sends
//! loans by name and exits; the receiver's bytes are the loans' bytes, its own to write, and
//! stay so after the sender is gone. Loans and ordinary messages keep their order whichever
//! call receives them; what each path copied is counted; the same program runs over TCP.

mod common;

use common::{fill_message as fill, message_byte as byte, unique};
use std::process::Command;
use std::time::Duration;
use zcio_genie::channel::Channel;
use zcio_genie::memnet::{Waits, pair};
use zcio_genie::{AppBuffer, DataPath, ErrorKind, Granule, InputBuffering, Semantics};

const TEST: &str =
    "a_process_started_on_its_own_sends_loans_by_name_and_their_pages_stay_after_it_exits";
const SENDER_ENV: &str = "ZCIO_LOAN_TEST_SENDER";
/// The loans the other process sends: 4 KiB pages, 2 MiB pages, odd lengths.
const LOANS: [(usize, Granule); 4] = [
    (64 << 20, Granule::Huge),
    ((16 << 20) + 5, Granule::Base),
    (4096, Granule::Base),
    (1, Granule::Huge),
];

fn check(got: &[u8], i: usize, len: usize, path: &DataPath) {
    assert_eq!(got.len(), len, "message {i}: its length ({path})");
    if let Some(k) = got.iter().enumerate().position(|(k, &b)| b != byte(i, k)) {
        panic!(
            "message {i}: byte {k} is {:#x}, not {:#x} ({path})",
            got[k],
            byte(i, k)
        );
    }
}

/// The sender, in the child: connect by name, send every loan, and exit without waiting.
fn sender(name: &str) {
    let mut tx = Channel::connect(name, Duration::from_secs(30)).unwrap();
    for (i, &(len, g)) in LOANS.iter().enumerate() {
        let mut loan = zcio_genie::memnet::loan::Loan::with_granule(len, g).unwrap();
        fill(&mut loan, i);
        let (_, acc) = tx.send_loan(loan).unwrap();
        assert_eq!(acc.cpu_copied_bytes, 0, "{}", acc.path);
        assert_eq!(acc.kernel_copied_bytes, Some(0), "{}", acc.path);
    }
    println!("sender done");
}

#[test]
fn a_process_started_on_its_own_sends_loans_by_name_and_their_pages_stay_after_it_exits() {
    if let Ok(name) = std::env::var(SENDER_ENV) {
        sender(&name);
        return;
    }
    let name = unique("loans");
    let listener = Channel::listen(&name).unwrap();
    let child = Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(SENDER_ENV, &name)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut rx = listener.accept(Some(Duration::from_secs(60))).unwrap();
    rx.set_waits(Waits {
        timeout: Some(Duration::from_secs(60)),
        interruptible: false,
    });
    // The sender is gone before anything is received.
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("sender done"),
        "the sender: {stdout}"
    );
    let mut got = Vec::new();
    for (i, &(len, _)) in LOANS.iter().enumerate() {
        let (mut m, acc) = rx.recv_loan().unwrap();
        assert!(m.is_mapped(), "message {i}: {}", acc.path);
        assert_eq!(
            acc.path,
            DataPath::Shipped {
                out: false,
                mapped: true
            }
        );
        assert_eq!(acc.cpu_copied_bytes + acc.kernel_copied_bytes.unwrap(), 0);
        check(&m, i, len, &acc.path);
        // The receiver's own: it writes them, and what it wrote stays.
        m[0] = !byte(i, 0);
        m[len - 1] = !byte(i, len - 1);
        assert_eq!((m[0], m[len - 1]), (!byte(i, 0), !byte(i, len - 1)));
        got.push(m);
    }
    let e = rx.recv_loan().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PeerGone, "{e}");
    // And the others did not move.
    for (i, m) in got.iter().enumerate() {
        let len = LOANS[i].0;
        if let Some(k) = (1..len.saturating_sub(1)).find(|&k| m[k] != byte(i, k)) {
            panic!("message {i}: byte {k} changed after the others were received");
        }
    }
}

#[test]
fn loans_and_ordinary_messages_keep_their_order_whichever_call_receives_them() {
    let (mut tx, mut rx) = pair().unwrap();
    let lens = [100usize, 3 << 20, 1 << 20, 8192, 5000, 2 << 20];
    let mut buf = AppBuffer::new(4 << 20).unwrap();
    for (i, &len) in lens.iter().enumerate() {
        if i % 2 == 1 {
            let mut loan = tx.loan(len).unwrap();
            fill(&mut loan, i);
            tx.send_loan(loan).unwrap();
        } else {
            let m = &mut buf[..len];
            fill(m, i);
            let (t, _) = tx.send(Semantics::EmulatedCopy, m).unwrap();
            m.fill(0xEE);
            if i == 2 {
                tx.wait(t).unwrap();
            }
        }
    }
    // 0: ordinary, by recv_loan: received into a buffer made for it.
    let (m, acc) = rx.recv_loan().unwrap();
    assert!(!m.is_mapped());
    check(&m, 0, lens[0], &acc.path);
    // 1: a loan, by recv: copied out of its file once, by the kernel.
    let mut into = AppBuffer::new(4 << 20).unwrap();
    let (n, acc) = rx
        .recv(Semantics::Copy, &mut into, InputBuffering::EarlyDemux)
        .unwrap();
    assert_eq!(
        acc.path,
        DataPath::Shipped {
            out: false,
            mapped: false
        }
    );
    assert_eq!(acc.kernel_copied_bytes, Some(lens[1] as u64));
    check(&into[..n], 1, lens[1], &acc.path);
    // 2: ordinary, by recv_alloc.
    let (m, acc) = rx
        .recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux)
        .unwrap();
    check(&m, 2, lens[2], &acc.path);
    // 3: a loan, into a buffer too small: it stays, and the error names its length.
    let mut small = AppBuffer::new(4096).unwrap();
    let e = rx
        .recv(Semantics::Copy, &mut small, InputBuffering::EarlyDemux)
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TooSmall { needed: lens[3] }, "{e}");
    let (m, acc) = rx.recv_loan().unwrap();
    assert!(m.is_mapped());
    check(&m, 3, lens[3], &acc.path);
    // 4: ordinary, by recv.
    let (n, acc) = rx
        .recv(Semantics::Copy, &mut into, InputBuffering::EarlyDemux)
        .unwrap();
    check(&into[..n], 4, lens[4], &acc.path);
    // 5: a loan, by recv_alloc (copied into the buffer made for it).
    let (m, acc) = rx
        .recv_alloc(Semantics::EmulatedCopy, InputBuffering::EarlyDemux)
        .unwrap();
    check(&m, 5, lens[5], &acc.path);
}

#[test]
fn a_loan_is_refused_at_zero_bytes_and_beyond_the_largest_message() {
    let (mut tx, _rx) = pair().unwrap();
    let e = tx.loan(0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let e = tx.loan((1 << 30) + 1).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
}

#[test]
fn a_loan_in_2_mib_pages_is_mapped_a_page_table_entry_per_2_mib_at_the_receiver() {
    if let Some(why) = zcio_vm::huge::unavailable_reason() {
        zcio_vm::skip::skip(zcio_vm::skip::Capability::HugePages, &why);
        return;
    }
    let (mut tx, mut rx) = pair().unwrap();
    let len = 8 << 20;
    let mut loan = tx.loan(len).unwrap();
    // The probe said huge pages are here: the kernel gives a memory file 2 MiB pages
    // (MADV_COLLAPSE) unless shared memory is denied them.
    assert_eq!(
        loan.granule(),
        Granule::Huge,
        "a loan of 8 MiB with huge pages available (shmem_enabled: {})",
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
            .unwrap_or_default()
            .trim()
    );
    fill(&mut loan, 7);
    tx.send_loan(loan).unwrap();
    let (m, acc) = rx.recv_loan().unwrap();
    check(&m, 7, len, &acc.path);
    let range = zcio_vm::page::RawRange {
        addr: m.as_ptr() as usize,
        len,
    };
    assert_eq!(m.as_ptr() as usize % (2 << 20), 0, "aligned to 2 MiB");
    assert_eq!(zcio_vm::huge::scan(range).granule(), Granule::Huge);
}

#[test]
fn the_same_loans_run_over_tcp_by_copy() {
    let listener = Channel::listen("tcp://127.0.0.1:0").unwrap();
    let name = listener.name().unwrap();
    let receiver = std::thread::spawn(move || {
        let mut rx = listener.accept(Some(Duration::from_secs(10))).unwrap();
        for (i, len) in [1usize, 4097, 3 << 20].into_iter().enumerate() {
            let (m, acc) = rx.recv_loan().unwrap();
            assert!(!m.is_mapped());
            check(&m, i, len, &acc.path);
        }
    });
    let mut tx = Channel::connect(&name, Duration::from_secs(10)).unwrap();
    for (i, len) in [1usize, 4097, 3 << 20].into_iter().enumerate() {
        let mut loan = tx.loan(len).unwrap();
        fill(&mut loan, i);
        tx.send_loan(loan).unwrap();
    }
    receiver.join().unwrap();
}

#[test]
fn a_loan_to_a_receiver_that_is_gone_fails_with_peer_gone_and_so_does_the_next_call() {
    let (mut tx, rx) = pair().unwrap();
    drop(rx);
    for _ in 0..2 {
        let mut loan = tx.loan(4096).unwrap();
        fill(&mut loan, 0);
        let e = tx.send_loan(loan).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::PeerGone | ErrorKind::Refused),
            "{e}"
        );
    }
}

#[test]
fn a_loan_from_a_blank_file_made_ahead_arrives_and_one_too_small_is_refused() {
    let (mut tx, mut rx) = pair().unwrap();
    let blank = zcio_vm::sealed::BlankFile::new("zcio-test-blank", 3 * 4096).unwrap();
    let e = zcio_genie::memnet::loan::Loan::from_blank(blank, 4 * 4096).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    let blank = zcio_vm::sealed::BlankFile::new("zcio-test-blank", 3 * 4096).unwrap();
    let mut loan = zcio_genie::memnet::loan::Loan::from_blank(blank, 10_000).unwrap();
    fill(&mut loan, 3);
    tx.send_loan(loan).unwrap();
    let (m, acc) = rx.recv_loan().unwrap();
    assert!(m.is_mapped());
    check(&m, 3, 10_000, &acc.path);
}

const VOLATILE_TEST: &str =
    "volatile_loans_between_processes_started_apart_arrive_whole_and_a_held_one_never_changes";
const VOLATILE_ENV: &str = "ZCIO_VOLATILE_LOAN_TEST_SENDER";
/// The volatile loans' lengths, in turn: 2 MiB pages, 4 KiB pages, an odd length.
const VOLATILE_LENS: [usize; 3] = [3 << 20, 4096, (1 << 20) + 3];
const VOLATILE_MESSAGES: usize = 30;

/// The volatile sender, in the child: each loan sent, then the receiver's 1-byte answer
/// taken (it has given the loan back by then, so the next loan of that length reuses a file).
fn volatile_sender(name: &str) {
    let mut tx = Channel::connect(name, Duration::from_secs(30)).unwrap();
    tx.set_volatile_loans(true);
    let mut answer = [0u8; 1];
    for i in 0..VOLATILE_MESSAGES {
        let len = VOLATILE_LENS[i % 3];
        let mut loan = tx.loan(len).unwrap();
        assert!(loan.is_volatile(), "loan {i}");
        fill(&mut loan, i);
        let (_, acc) = tx.send_loan(loan).unwrap();
        assert_eq!(
            acc.path,
            DataPath::Lent {
                out: true,
                mapped: false
            }
        );
        assert_eq!(
            (acc.cpu_copied_bytes, acc.kernel_copied_bytes),
            (0, Some(0))
        );
        tx.recv(Semantics::Copy, &mut answer, InputBuffering::EarlyDemux)
            .unwrap();
        assert_eq!(answer[0], i as u8);
    }
    println!("volatile sender done");
}

#[test]
fn volatile_loans_between_processes_started_apart_arrive_whole_and_a_held_one_never_changes() {
    if let Ok(name) = std::env::var(VOLATILE_ENV) {
        volatile_sender(&name);
        return;
    }
    let name = unique("volatile-loans");
    let listener = Channel::listen(&name).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([VOLATILE_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(VOLATILE_ENV, &name)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut rx = listener.accept(Some(Duration::from_secs(60))).unwrap();
    rx.set_volatile_loans(true);
    rx.set_waits(Waits {
        timeout: Some(Duration::from_secs(60)),
        interruptible: false,
    });
    let mut held = Vec::new();
    for i in 0..VOLATILE_MESSAGES {
        let len = VOLATILE_LENS[i % 3];
        let (mut m, acc) = rx.recv_loan().unwrap();
        assert!(
            m.is_volatile() && m.is_mapped(),
            "message {i}: {}",
            acc.path
        );
        assert_eq!(acc.kernel_copied_bytes, Some(0));
        check(&m, i, len, &acc.path);
        // The receiver's to write while it holds it.
        m[len - 1] = !byte(i, len - 1);
        m[len - 1] = byte(i, len - 1);
        if i % 10 == 0 {
            held.push((i, m));
        } else {
            drop(m);
        }
        rx.send(Semantics::Copy, &[i as u8]).unwrap();
    }
    let out = child.wait().unwrap();
    assert!(out.success(), "the sender failed");
    // Held while the sender lent files again and exited: each one as it was sent.
    for (i, m) in &held {
        check(
            m,
            *i,
            VOLATILE_LENS[i % 3],
            &DataPath::Lent {
                out: false,
                mapped: true,
            },
        );
    }
    let e = rx.recv_loan().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PeerGone, "{e}");
    drop(held);
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    assert!(stdout.contains("volatile sender done"), "{stdout}");
}

#[test]
fn a_volatile_loan_to_a_receiver_that_is_gone_fails_with_peer_gone_and_is_not_lent_again() {
    let (mut tx, rx) = pair().unwrap();
    tx.set_volatile_loans(true);
    drop(rx);
    for _ in 0..2 {
        let mut loan = tx.loan(4096).unwrap();
        assert!(loan.is_volatile());
        fill(&mut loan, 0);
        let e = tx.send_loan(loan).unwrap_err();
        assert!(
            matches!(e.kind(), ErrorKind::PeerGone | ErrorKind::Refused),
            "{e}"
        );
    }
}
