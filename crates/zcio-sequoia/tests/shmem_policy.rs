//! Sealed containers under another shared memory policy, set for a while
//! (`zcio_vm::shmem::PolicyOverride`): under `within_size` a pool's files get large folios
//! (the kernel's counters of them grow by several a file) and still arrive byte for byte; one
//! override at a time; the policy found comes back when the override ends, when a termination
//! signal ends its process, and, where its process died otherwise, at the next override.
//!
//! The policy holds for the whole machine, so this binary holds one test, which runs alone.

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use zcio_sequoia::container::Domain;
use zcio_sequoia::pool::Pool;
use zcio_vm::shmem::{PolicyOverride, ShmemPolicy, large_folio_allocs};
use zcio_vm::skip::{Capability, skip};

const TEST: &str =
    "an_override_gives_pool_files_large_folios_and_the_policy_comes_back_even_after_a_death";
const CHILD: &str = "ZCIO_TEST_SHMEM_POLICY_CHILD";

/// The paper's frame: 640×480 bytes.
const FRAME: usize = 640 * 480;

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(7) as u8 ^ salt)
        .collect()
}

/// `n` frames from a pool of the paper's frame, filled from bytes, through a socket; each
/// compared byte for byte at the receiver.
fn frames_through_a_socket(n: usize) {
    let pool = Pool::new(FRAME, 2).unwrap();
    let (tx, rx) = UnixStream::pair().unwrap();
    let (mut a, mut b) = (Domain::new(), Domain::new());
    for k in 0..n {
        let want = pattern(FRAME, k as u8);
        let id = a.alloc_filled(&pool, &want).unwrap();
        a.write(tx.as_fd(), id).unwrap();
        let got = b.read(rx.as_fd(), 0, true).unwrap();
        let seen = b.map_read(got).unwrap();
        if let Some(i) = seen.iter().zip(&want).position(|(x, y)| x != y) {
            panic!("frame {k}: byte {i} differs at the receiver");
        }
        b.free(got).unwrap();
    }
}

#[test]
fn an_override_gives_pool_files_large_folios_and_the_policy_comes_back_even_after_a_death() {
    if let Some(how) = std::env::var_os(CHILD) {
        // The holder that dies: it sets the policy and exits without dropping the override, or
        // waits for the signal that ends it.
        let over = PolicyOverride::set(ShmemPolicy::WithinSize).unwrap();
        println!("child holds: {} (found {})", over.policy(), over.found());
        if how == "signal" {
            std::io::Write::flush(&mut std::io::stdout()).unwrap();
            std::thread::sleep(std::time::Duration::from_secs(60));
        }
        std::process::exit(0);
    }
    // The probe's own judgement (`zcio probe`, `shmem-policy`).
    if let Some(why) = zcio_vm::shmem::unavailable_reason() {
        skip(Capability::ShmemPolicy, &why);
        return;
    }
    let found = ShmemPolicy::current().unwrap();
    let _machine = PutBack(found);
    // Under `never` the same frames go by 4 KiB pages: the control.
    let never = PolicyOverride::set(ShmemPolicy::Never).unwrap();
    let before = large_folio_allocs().expect("the per-size counters");
    frames_through_a_socket(4);
    let grown = large_folio_allocs().unwrap() - before;
    assert!(
        grown < 3 * 4,
        "under never, 4 files got {grown} large folios"
    );
    drop(never);
    assert_eq!(ShmemPolicy::current().unwrap(), found);

    let over = PolicyOverride::set(ShmemPolicy::WithinSize).unwrap();
    assert_eq!(ShmemPolicy::current().unwrap(), ShmemPolicy::WithinSize);
    assert_eq!(over.found(), found);
    let second = PolicyOverride::set(ShmemPolicy::Always).unwrap_err();
    assert!(
        second.to_string().contains("holds an override"),
        "a second override is refused by name: {second}"
    );
    let before = large_folio_allocs().expect("the per-size counters");
    frames_through_a_socket(8);
    let grown = large_folio_allocs().unwrap() - before;
    // 300 KiB fits 256 + 32 + 8 + 4 KiB: three large folios a file, and the pool made at
    // least 8 files (it may have made 2 more ahead).
    assert!(
        grown >= 3 * 8,
        "8 files of 300 KiB got {grown} large folios under within_size"
    );
    drop(over);
    assert_eq!(
        ShmemPolicy::current().unwrap(),
        found,
        "the policy comes back"
    );

    // A holder that dies leaves the policy set; the next override puts the one it found back,
    // and so does `restore_left`.
    let out = zcio_testkit::child::rerun(TEST, &[(CHILD, "exit")]);
    assert!(out.finished("child holds"), "{}{}", out.stdout, out.stderr);
    assert_eq!(ShmemPolicy::current().unwrap(), ShmemPolicy::WithinSize);
    let next = PolicyOverride::set(ShmemPolicy::Never).unwrap();
    assert_eq!(
        next.recovered(),
        Some(found),
        "the dead holder's policy found"
    );
    assert_eq!(next.found(), found);
    drop(next);
    assert_eq!(ShmemPolicy::current().unwrap(), found);
    let out = zcio_testkit::child::rerun(TEST, &[(CHILD, "exit")]);
    assert!(out.finished("child holds"), "{}{}", out.stdout, out.stderr);
    assert_eq!(ShmemPolicy::current().unwrap(), ShmemPolicy::WithinSize);
    assert_eq!(zcio_vm::shmem::restore_left(), Some(found));
    assert_eq!(ShmemPolicy::current().unwrap(), found);
    assert_eq!(
        zcio_vm::shmem::restore_left(),
        None,
        "nothing left to put back"
    );

    // A holder ended by SIGTERM puts the policy back itself, and ends as the signal would.
    ended_by_a_signal(found);
}

/// The machine's policy as the test found it, put back however the test ends (a failed check
/// may leave a dead child's override behind).
struct PutBack(ShmemPolicy);

impl Drop for PutBack {
    fn drop(&mut self) {
        let _ = zcio_vm::shmem::restore_left();
        if ShmemPolicy::current().ok() != Some(self.0) {
            let _ = std::fs::write(zcio_vm::shmem::SHMEM_ENABLED, self.0.name());
        }
    }
}

/// A child holding an override, ended by `SIGTERM`: the policy it found is back, its record
/// cleared, and it died of the signal.
fn ended_by_a_signal(found: ShmemPolicy) {
    use std::io::BufRead;
    use std::os::unix::process::ExitStatusExt;
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "signal")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let holding = lines.find(|l| l.as_ref().is_ok_and(|l| l.contains("child holds")));
    assert!(holding.is_some(), "the child said it holds the override");
    assert_eq!(ShmemPolicy::current().unwrap(), ShmemPolicy::WithinSize);
    let term = rustix::process::Signal::TERM;
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), term).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(term.as_raw()), "{status:?}");
    assert_eq!(
        ShmemPolicy::current().unwrap(),
        found,
        "the handler put it back"
    );
    let record = std::fs::read_to_string(zcio_vm::shmem::OVERRIDE_RECORD).unwrap();
    assert!(
        record.trim().is_empty(),
        "the record is cleared: {record:?}"
    );
    assert_eq!(zcio_vm::shmem::restore_left(), None);
}
