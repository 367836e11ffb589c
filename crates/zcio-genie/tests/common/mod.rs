//! Helpers shared by the integration tests.

use std::sync::mpsc;
use std::time::Duration;
use zcio_genie::memnet::{self, MemnetEndpoint};
use zcio_genie::profile::Profile;

/// A memory-network link whose ends take the VM paths from the first page up (the calibrated
/// profile may say copying wins everywhere on this machine).
#[allow(dead_code)] // not every test file uses it
pub fn forced_pair() -> (MemnetEndpoint, MemnetEndpoint) {
    let (mut a, mut b) = memnet::pair().unwrap();
    a.set_profile(Profile::zero_copy());
    b.set_profile(Profile::zero_copy());
    (a, b)
}

/// Run `f` in its own thread and fail if it has not finished within `limit` (a hang).
#[allow(dead_code)] // not every test file has a time limit
pub fn bounded<F: FnOnce() + Send + 'static>(what: &str, limit: Duration, f: F) {
    let (done_tx, done_rx) = mpsc::channel();
    let h = std::thread::Builder::new()
        .name(what.to_string())
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = done_tx.send(r);
        })
        .unwrap();
    match done_rx.recv_timeout(limit) {
        Ok(Ok(())) => h.join().unwrap(),
        Ok(Err(panic)) => std::panic::resume_unwind(panic),
        Err(_) => panic!("{what}: not finished after {limit:?}: hung"),
    }
}

/// A recognizable pattern: byte `i` is `13 i + seed` (mod 256).
#[allow(dead_code)] // not every test file fills buffers this way
pub fn fill(buf: &mut [u8], seed: u8) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(13).wrapping_add(seed);
    }
}

/// `len` bytes of fresh anonymous memory filled with [`fill`]'s pattern, and a copy of them.
#[allow(dead_code)] // not every test file fills buffers this way
pub fn filled(len: usize, seed: u8) -> (zcio_vm::Mapping, Vec<u8>) {
    let mut m = zcio_vm::Mapping::anonymous(len, zcio_vm::MapOptions::default()).unwrap();
    fill(m.as_mut_slice(), seed);
    let want = m.as_slice().to_vec();
    (m, want)
}

/// Receive one emulated-copy message of `len` bytes (early demultiplexing) into a new buffer.
#[allow(dead_code)] // not every test file receives this way
pub fn recv_copy(rx: &mut MemnetEndpoint, len: usize) -> Vec<u8> {
    let mut got = vec![0u8; len];
    rx.recv(
        zcio_genie::Semantics::EmulatedCopy,
        &mut got,
        zcio_genie::InputBuffering::EarlyDemux,
    )
    .unwrap();
    got
}

/// Byte `k` of message `i`: a pattern that differs by message and from page to page.
#[allow(dead_code)] // not every test file uses it
pub fn message_byte(i: usize, k: usize) -> u8 {
    (k as u8)
        .wrapping_mul(31)
        .wrapping_add(i as u8)
        .wrapping_add((k >> 12) as u8)
}

/// Write message `i` ([`message_byte`]) into `buf`.
#[allow(dead_code)] // not every test file uses it
pub fn fill_message(buf: &mut [u8], i: usize) {
    for (k, b) in buf.iter_mut().enumerate() {
        *b = message_byte(i, k);
    }
}

/// A name no other test (or run) uses: `what`, this process and the time.
#[allow(dead_code)] // not every test file uses it
pub fn unique(what: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("test-{what}-{}-{t}", std::process::id())
}
