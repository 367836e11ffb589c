//! The semantics on buffers in transparent huge pages (2 MiB): byte-exact delivery at every
//! offset, TCOW at 2 MiB, unmapping during a pending output, split huge pages, and many
//! transfers staying bounded.
//!
//! Every test skips (and says why) only where huge pages cannot be had here at all
//! (`zcio_vm::huge::unavailable_reason`). Checks that need TCOW at 2 MiB (`huge_tcow`) are made
//! where the machine has it and reported as skipped otherwise. The tests take a process-wide
//! lock, so that the runtime's counters and the mapping count are not disturbed by each other,
//! and each runs under a time limit.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};
use zcio_genie::memnet::MemnetEndpoint;
use zcio_genie::profile::Profile;
use zcio_genie::{Accounting, AppBuffer, DataPath, Granule, InputBuffering, Semantics, granule_of};
use zcio_vm::huge::whole_pmds;
use zcio_vm::runtime::TcowMode;
use zcio_vm::{MapOptions, Mapping, RawRange, VmRuntime};

mod common;
use common::{bounded, forced_pair};

/// One huge page (a PMD).
const H: usize = 2 << 20;
/// Longest a test may take before it counts as hung.
const LIMIT: Duration = Duration::from_secs(60);
/// How long the split-page test lets its overwriter make a first pass before waiting.
const GRACE: Duration = Duration::from_millis(500);

/// Run `f` as a test on huge pages ([`huge_alone`]), failing it if `f` takes longer than
/// `limit` ([`bounded`]).
fn on_huge_pages<F: FnOnce() + Send + 'static>(what: &str, limit: Duration, f: F) {
    if let Some(_g) = huge_alone() {
        bounded(what, limit, f);
    }
}

/// This test alone in the process (the counters and the mapping count are process-wide), on
/// huge pages: `None`, the test skipping, where huge pages cannot be had here (says why).
fn huge_alone() -> Option<MutexGuard<'static, ()>> {
    if let Some(why) = zcio_vm::huge::unavailable_reason() {
        zcio_vm::skip::skip(zcio_vm::skip::Capability::HugePages, &why);
        return None;
    }
    static LOCK: Mutex<()> = Mutex::new(());
    Some(LOCK.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Seeded bytes, different for every seed.
fn fill_pattern(buf: &mut [u8], seed: u64) {
    zcio_testkit::data::Xorshift::new(seed).fill(buf);
}

/// Fail unless `got == want`, naming the first differing byte and how many differ.
fn check_bytes(got: &[u8], want: &[u8], ctx: &str) {
    assert_eq!(got.len(), want.len(), "{ctx}: lengths differ");
    if got == want {
        return;
    }
    let first = got.iter().zip(want).position(|(a, b)| a != b).unwrap();
    let differ = got.iter().zip(want).filter(|(a, b)| a != b).count();
    panic!(
        "{ctx}: {differ} of {} bytes differ; first at {first} (PMD {}, page {} in it): got {:#04x}, want {:#04x}",
        got.len(),
        first / H,
        (first % H) / 4096,
        got[first],
        want[first]
    );
}

/// A huge buffer of at least `len` bytes that the kernel did give huge pages.
fn huge_buffer(len: usize) -> AppBuffer {
    let b = AppBuffer::huge(len).unwrap();
    assert_eq!(b.as_ptr() as usize % H, 0, "a huge buffer starts on 2 MiB");
    assert_eq!(
        granule_of(&b),
        Granule::Huge,
        "AppBuffer::huge({len}) is not in huge pages although they are available here"
    );
    b
}

/// Send `src` from a thread while receiving into `dst` here; returns the sender's accounting,
/// the length received and the receiver's accounting.
fn transfer(
    tx: &mut MemnetEndpoint,
    rx: &mut MemnetEndpoint,
    sem: Semantics,
    src: &[u8],
    dst: &mut [u8],
    input: InputBuffering,
) -> (Accounting, usize, Accounting) {
    std::thread::scope(|s| {
        let h = s.spawn(move || {
            let (t, acc) = tx.send(sem, src).unwrap();
            tx.wait(t).unwrap();
            acc
        });
        let (n, racc) = rx.recv(sem, dst, input).unwrap();
        (h.join().unwrap(), n, racc)
    })
}

fn note_no_huge_tcow(what: &str) {
    zcio_vm::skip::skip(
        zcio_vm::skip::Capability::HugePages,
        &format!(
            "{what}: the 2 MiB accounting checks: no TCOW at 2 MiB here ({:?})",
            VmRuntime::get().capabilities()
        ),
    );
}

const SIZES: [usize; 2] = [H, 3 * H + 100];
const OFFSETS: [usize; 5] = [0, 100, 4096, H - 1, H + 4096];
const SEMANTICS: [Semantics; 4] = [
    Semantics::Copy,
    Semantics::EmulatedCopy,
    Semantics::Share,
    Semantics::EmulatedShare,
];
const BUFFERINGS: [InputBuffering; 3] = [
    InputBuffering::EarlyDemux,
    InputBuffering::PooledAligned,
    InputBuffering::Outboard,
];
const GUARD: u8 = 0xA5;

#[test]
fn huge_buffers_every_semantics_buffering_size_and_offset() {
    on_huge_pages("matrix", LIMIT, || {
        let huge_tcow = VmRuntime::get().huge_tcow();
        if !huge_tcow {
            note_no_huge_tcow("matrix");
        }
        let (mut tx, mut rx) = forced_pair();
        let mut seed = 0u64;
        for (zero_copy, profile) in [(true, Profile::zero_copy()), (false, Profile::current())] {
            tx.set_profile(profile.clone());
            rx.set_profile(profile);
            for size in SIZES {
                for off in OFFSETS {
                    let total = size + off + (4 << 20);
                    let mut sb = huge_buffer(total);
                    let mut rb = huge_buffer(total);
                    for sem in SEMANTICS {
                        for input in BUFFERINGS {
                            seed += 1;
                            let ctx = format!(
                                "{sem} {input} size {size} offset {off} ({} profile)",
                                if zero_copy { "zero-copy" } else { "calibrated" }
                            );
                            let src = &mut sb[off..off + size];
                            fill_pattern(src, seed);
                            let want = src.to_vec();
                            rb.fill(GUARD);
                            let whole = whole_pmds(RawRange::of(&sb[off..off + size])).len;
                            let (sacc, n, racc) = transfer(
                                &mut tx,
                                &mut rx,
                                sem,
                                &sb[off..off + size],
                                &mut rb[off..off + size],
                                input,
                            );
                            assert_eq!(n, size, "{ctx}: length received");
                            check_bytes(&rb[off..off + size], &want, &ctx);
                            assert!(
                                rb[..off].iter().all(|&b| b == GUARD),
                                "{ctx}: bytes before the receive buffer were written"
                            );
                            assert!(
                                rb[off + size..].iter().all(|&b| b == GUARD),
                                "{ctx}: bytes after the receive buffer were written"
                            );
                            check_bytes(
                                &sb[off..off + size],
                                &want,
                                &format!("{ctx}: the sender's buffer after the output"),
                            );
                            if zero_copy {
                                check_accounting(
                                    &ctx, sem, input, size, off, whole, huge_tcow, &sacc, &racc,
                                );
                            }
                        }
                    }
                }
            }
        }
    });
}

/// What the copies counted must be under the zero-copy profile.
#[allow(clippy::too_many_arguments)]
fn check_accounting(
    ctx: &str,
    sem: Semantics,
    input: InputBuffering,
    size: usize,
    off: usize,
    whole: usize,
    huge_tcow: bool,
    sacc: &Accounting,
    racc: &Accounting,
) {
    let (size, whole) = (size as u64, whole as u64);
    let paths = format!("sender: {} / receiver: {}", sacc.path, racc.path);
    match sem {
        Semantics::Copy => {
            assert_eq!(sacc.cpu_copied_bytes, size, "{ctx}: {paths}");
            assert_eq!(racc.cpu_copied_bytes, size, "{ctx}: {paths}");
            assert_eq!(sacc.swapped_bytes + racc.swapped_bytes, 0, "{ctx}: {paths}");
        }
        Semantics::EmulatedCopy if racc.path == DataPath::OutboardDirect => {
            // The whole message was in the wire: read straight into the application buffer
            // (Genie's emulated copy with outboard buffering, much as emulated share).
            assert_eq!(input, InputBuffering::Outboard, "{ctx}: {paths}");
            assert_eq!(
                racc.cpu_copied_bytes + racc.swapped_bytes,
                0,
                "{ctx}: {paths}"
            );
            assert_eq!(racc.kernel_copied_bytes, Some(size), "{ctx}: {paths}");
        }
        Semantics::EmulatedCopy => {
            // Every byte is swapped or copied; reverse copyout also copies the application's
            // own bytes completing a head or tail page (less than a page each).
            let accounted = racc.cpu_copied_bytes + racc.swapped_bytes;
            assert!(
                (size..size + 2 * 4096).contains(&accounted),
                "{ctx}: the receiver's copied + swapped bytes ({accounted}) do not account for the message of {size}: {paths}"
            );
            if huge_tcow && whole > 0 {
                assert_eq!(
                    sacc.granule,
                    Some(Granule::Huge),
                    "{ctx}: sender granule: {paths}"
                );
                assert!(sacc.path.is_2m(), "{ctx}: sender path: {paths}");
                assert_eq!(
                    sacc.cpu_copied_bytes,
                    size - whole,
                    "{ctx}: the sender copies only the bytes around the whole PMDs: {paths}"
                );
                assert_eq!(
                    racc.granule,
                    Some(Granule::Huge),
                    "{ctx}: receiver granule: {paths}"
                );
                // Pooled buffers start on 2 MiB: the whole PMDs of a buffer off that boundary
                // do not line up with them and are copied.
                let swapped = if input == InputBuffering::PooledAligned && off % H != 0 {
                    0
                } else {
                    whole
                };
                assert_eq!(
                    racc.swapped_bytes, swapped,
                    "{ctx}: the receiver swaps the whole PMDs: {paths}"
                );
            }
            if off == 0 && size % H as u64 == 0 && huge_tcow {
                assert_eq!(sacc.cpu_copied_bytes, 0, "{ctx}: {paths}");
                assert_eq!(sacc.granule, Some(Granule::Huge), "{ctx}: {paths}");
                assert_eq!(racc.swapped_bytes, size, "{ctx}: {paths}");
                assert_eq!(racc.cpu_copied_bytes, 0, "{ctx}: {paths}");
            }
        }
        Semantics::Share | Semantics::EmulatedShare => {
            assert_eq!(sacc.cpu_copied_bytes, 0, "{ctx}: {paths}");
            if whole > 0 {
                assert_eq!(
                    sacc.granule,
                    Some(Granule::Huge),
                    "{ctx}: shared in place at 2 MiB: {paths}"
                );
            }
            match input {
                InputBuffering::PooledAligned => assert_eq!(
                    racc.cpu_copied_bytes + racc.swapped_bytes,
                    size,
                    "{ctx}: {paths}"
                ),
                _ => assert_eq!(
                    racc.cpu_copied_bytes + racc.swapped_bytes,
                    0,
                    "{ctx}: read in place: {paths}"
                ),
            }
        }
        _ => unreachable!("application-buffer semantics only"),
    }
}

/// Emulated copy of a 16 MiB huge buffer; right after `send` returns, the sending thread
/// changes the buffer with `mutate`, then waits. The receiver (slow to start) must get the
/// bytes of the call; the sender its own writes; TCOW must have copied at 2 MiB, never waited.
fn tcow_from_the_sending_thread(what: &'static str, mutate: fn(&mut [u8])) {
    on_huge_pages(what, LIMIT, move || {
        let rt = VmRuntime::get();
        let len = 16 << 20;
        let mut sb = huge_buffer(len);
        fill_pattern(&mut sb, 0x7C0);
        let want = sb.to_vec();
        let mut after = want.clone();
        mutate(&mut after);
        assert_ne!(after, want, "{what}: the mutation changes something");
        let mut rb = huge_buffer(len);
        let (mut tx, mut rx) = forced_pair();
        let before = rt.stats();
        let (sacc, n, racc) = std::thread::scope(|s| {
            let r = s.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                rx.recv(Semantics::EmulatedCopy, &mut rb, InputBuffering::EarlyDemux)
                    .unwrap()
            });
            let (t, sacc) = tx.send(Semantics::EmulatedCopy, &sb).unwrap();
            mutate(&mut sb); // the sending thread, before the output completes
            tx.wait(t).unwrap();
            let (n, racc) = r.join().unwrap();
            (sacc, n, racc)
        });
        let st = rt.stats();
        assert_eq!(n, len);
        check_bytes(
            &rb,
            &want,
            &format!("{what}: the receiver (sender path {})", sacc.path),
        );
        check_bytes(&sb, &after, &format!("{what}: the sender's own writes"));
        let huge_copies = st.tcow_huge_copies - before.tcow_huge_copies;
        let copies = st.tcow_copies - before.tcow_copies;
        let slept = st.sleep_on_write - before.sleep_on_write;
        let copied = st.tcow_copied_bytes - before.tcow_copied_bytes;
        eprintln!(
            "{what}: tcow_huge_copies +{huge_copies}, tcow_copies +{copies}, tcow_copied_bytes +{copied}, sleep_on_write +{slept}; sender {}, receiver {}",
            sacc.path, racc.path
        );
        if !rt.huge_tcow() {
            note_no_huge_tcow(what);
            return;
        }
        assert_eq!(sacc.granule, Some(Granule::Huge), "{what}: {}", sacc.path);
        assert_eq!(sacc.cpu_copied_bytes, 0, "{what}: {}", sacc.path);
        assert!(
            huge_copies >= 1,
            "{what}: tcow_huge_copies grew by {huge_copies} (tcow_copies +{copies}, sleep_on_write +{slept})"
        );
        assert_eq!(
            slept, 0,
            "{what}: a write waited for the output (sleep_on_write +{slept})"
        );
        assert_eq!(
            granule_of(&sb),
            Granule::Huge,
            "{what}: TCOW at 2 MiB must leave the sender's buffer in huge pages"
        );
    });
}

#[test]
fn tcow_at_2m_every_page_and_a_whole_pmd_overwritten_by_the_sender() {
    // From the end backwards: the last pages of the message are still queued in the link (it
    // holds 1 MiB) when `send` returns, so the first writes race with the receiver's reads.
    tcow_from_the_sending_thread("the last PMD and every 4096th byte", |b| {
        let last = b.len() - H;
        b[last..].fill(0x5A);
        for i in (0..b.len()).step_by(4096).rev() {
            b[i] = !b[i];
        }
    });
}

#[test]
fn tcow_at_2m_one_byte_overwritten_by_the_sender() {
    // In the last page: still queued in the link when `send` returns.
    tcow_from_the_sending_thread("one byte", |b| {
        let i = b.len() - 4096 + 7;
        b[i] = !b[i];
    });
}

#[test]
fn freeing_a_huge_buffer_during_a_pending_output_still_delivers_the_original() {
    on_huge_pages("free during output", LIMIT, || {
        let (mut tx, mut rx) = forced_pair();
        let mut seed = 0x0F0;
        for sem in [
            Semantics::EmulatedCopy,
            Semantics::EmulatedShare,
            Semantics::Share,
        ] {
            for (size, off) in [(8 << 20, 0), (3 * H + 100, 100)] {
                seed += 1;
                let ctx = format!("{sem} size {size} offset {off}");
                let total = size + off + (4 << 20);
                let mut sb = huge_buffer(total);
                fill_pattern(&mut sb[off..off + size], seed);
                let want = sb[off..off + size].to_vec();
                let old = sb.as_ptr() as usize;
                let mut rb = huge_buffer(total);
                let (new, n, reused) = std::thread::scope(|s| {
                    let r = s.spawn(|| {
                        std::thread::sleep(Duration::from_millis(20));
                        rx.recv(sem, &mut rb[off..off + size], InputBuffering::EarlyDemux)
                            .unwrap()
                    });
                    let (t, _) = tx.send(sem, &sb[off..off + size]).unwrap();
                    drop(sb); // munmap while the output is pending
                    // New memory, likely at the same address, written before the output completes.
                    let mut new = AppBuffer::huge(total).unwrap();
                    let reused = new.as_ptr() as usize == old;
                    new.fill(0xCC);
                    tx.wait(t).unwrap();
                    let (n, _) = r.join().unwrap();
                    (new, n, reused)
                });
                eprintln!("{ctx}: the new buffer reused the address: {reused}");
                assert_eq!(n, size, "{ctx}");
                check_bytes(
                    &rb[off..off + size],
                    &want,
                    &format!("{ctx}: the output after the buffer was unmapped"),
                );
                assert!(
                    new.iter().all(|&b| b == 0xCC),
                    "{ctx}: the memory mapped after the unmap was changed"
                );
            }
        }
    });
}

#[test]
fn a_split_huge_page_under_emulated_copy_with_a_concurrent_overwriter() {
    on_huge_pages("split huge page", LIMIT, || {
        let rt = VmRuntime::get();
        let len = 4 * H;
        let mut m = Mapping::anonymous(len, MapOptions::POPULATED_2M).unwrap();
        assert_eq!(granule_of(m.as_slice()), Granule::Huge);
        // Split PMD 2, and PMD 3 near its end (still queued in the link, which holds 1 MiB,
        // when `send` returns): drop one 4 KiB page in each; the pattern below rewrites them.
        for page in [2 * H + 4096, 4 * H - 3 * 4096] {
            m.advise_range(
                RawRange {
                    addr: m.addr() + page,
                    len: 4096,
                },
                libc::MADV_DONTNEED,
                "split",
            )
            .unwrap();
        }
        let mut rb = huge_buffer(len);
        let (mut tx, mut rx) = forced_pair();
        let before = rt.stats();
        let mut slept_rounds = 0;
        for round in 0..4u64 {
            let round_before = rt.stats();
            let buf = m.as_mut_slice();
            fill_pattern(buf, 0x5_0000 + round);
            let want = buf.to_vec();
            assert_eq!(
                granule_of(buf),
                Granule::Mixed,
                "round {round}: the split PMDs are mapped by 4 KiB pages, the others huge"
            );
            let stop = AtomicBool::new(false);
            let writes = AtomicU64::new(0);
            let (sacc, n, pass_done) = std::thread::scope(|s| {
                let r = s.spawn(|| {
                    rx.recv(Semantics::EmulatedCopy, &mut rb, InputBuffering::EarlyDemux)
                        .unwrap()
                });
                let (t, sacc) = tx.send(Semantics::EmulatedCopy, buf).unwrap();
                let (stop, writes) = (&stop, &writes);
                s.spawn(move || {
                    // Right after the call returns and until the output has completed; from
                    // the end backwards, where the bytes still queued in the link are.
                    let mut k = 0u8;
                    while !stop.load(Ordering::Relaxed) {
                        k = k.wrapping_add(1);
                        for page in buf.rchunks_mut(4096) {
                            page.fill(k);
                        }
                        writes.fetch_add(1, Ordering::Relaxed);
                    }
                });
                // Give the overwriter one whole pass over the buffer while it is still under
                // output (every PMD takes a TCOW fault), but not forever: a write that sleeps on
                // write is woken only by `wait` (see the ignored tests below).
                let t0 = Instant::now();
                while writes.load(Ordering::Relaxed) == 0 && t0.elapsed() < GRACE {
                    std::thread::yield_now();
                }
                let pass_done = writes.load(Ordering::Relaxed) > 0;
                tx.wait(t).unwrap();
                let (n, _) = r.join().unwrap();
                stop.store(true, Ordering::Relaxed);
                (sacc, n, pass_done)
            });
            assert_eq!(n, len);
            check_bytes(
                &rb,
                &want,
                &format!(
                    "round {round}: the receiver saw writes made after the call ({} writes; sender path {})",
                    writes.load(Ordering::Relaxed),
                    sacc.path
                ),
            );
            let st = rt.stats();
            let huge = st.tcow_huge_copies - round_before.tcow_huge_copies;
            let copies = st.tcow_copies - round_before.tcow_copies;
            let slept = st.sleep_on_write - round_before.sleep_on_write;
            if !rt.huge_tcow() {
                continue;
            }
            assert!(sacc.path.is_2m(), "round {round}: {}", sacc.path);
            if slept > 0 {
                // The first write met a page of a split huge page still queued in the link:
                // the 4 KiB TCOW could not move it and the write slept until `wait` lifted the
                // protection (the ignored tests below pin this down).
                slept_rounds += 1;
            } else if pass_done {
                // A whole pass under output without sleeping: every page was copied by TCOW,
                // the huge PMDs at 2 MiB and the split ones at 4 KiB.
                assert_eq!(
                    (huge, copies),
                    (2, 2 * 512),
                    "round {round}: (tcow_huge_copies, tcow_copies) grew by ({huge}, {copies}), want 2 huge PMDs and 2 split PMDs of 512 pages"
                );
            }
        }
        let st = rt.stats();
        eprintln!(
            "split: tcow_huge_copies +{}, tcow_copies +{}, sleep_on_write +{}; rounds whose first write slept until wait: {slept_rounds} of 4",
            st.tcow_huge_copies - before.tcow_huge_copies,
            st.tcow_copies - before.tcow_copies,
            st.sleep_on_write - before.sleep_on_write
        );
        if !rt.huge_tcow() {
            note_no_huge_tcow("split");
        }
    });
}

#[test]
fn many_huge_transfers_stay_bounded() {
    on_huge_pages("many transfers", LIMIT, || {
        let huge_tcow = VmRuntime::get().huge_tcow();
        let len = 4 << 20;
        let mut sb = huge_buffer(len);
        let mut rb = huge_buffer(len);
        fill_pattern(&mut sb, 0xB0B);
        let (mut tx, mut rx) = forced_pair();
        let mut vmas = 0;
        let t0 = Instant::now();
        for i in 0..300u64 {
            // A different message every time: a stamp in every page.
            for p in (0..len).step_by(4096) {
                sb[p..p + 8].copy_from_slice(&(i ^ p as u64).to_le_bytes());
            }
            let check = i % 50 == 0;
            if check {
                rb.fill(GUARD);
            }
            let want = check.then(|| sb.to_vec());
            let (sacc, n, racc) = transfer(
                &mut tx,
                &mut rx,
                Semantics::EmulatedCopy,
                &sb,
                &mut rb,
                InputBuffering::EarlyDemux,
            );
            assert_eq!(n, len);
            if let Some(want) = want {
                check_bytes(&rb, &want, &format!("message {i}"));
            }
            assert_eq!(
                racc.cpu_copied_bytes + racc.swapped_bytes,
                len as u64,
                "message {i}: {}",
                racc.path
            );
            if huge_tcow {
                assert_eq!(sacc.cpu_copied_bytes, 0, "message {i}: {}", sacc.path);
                assert_eq!(racc.swapped_bytes, len as u64, "message {i}: {}", racc.path);
            }
            if i == 9 {
                vmas = zcio_vm::mapping::vma_count();
            }
        }
        let end = zcio_vm::mapping::vma_count();
        eprintln!(
            "300 transfers of 4 MiB in {:?}; mappings after 10: {vmas}, after 300: {end}",
            t0.elapsed()
        );
        assert!(
            end <= vmas + 4,
            "mappings grew from {vmas} after 10 transfers to {end} after 300"
        );
        if huge_tcow {
            assert_eq!(granule_of(&sb), Granule::Huge, "the sender's buffer");
            assert_eq!(granule_of(&rb), Granule::Huge, "the receiver's buffer");
        } else {
            note_no_huge_tcow("many transfers");
        }
    });
}

/// Emulated copy of `msg` (a part of a buffer in huge pages); right after `send` returns, the
/// sending thread writes the byte at `at` (a page still queued in the link, which holds 1 MiB)
/// and then waits. The write must not wait for the output's completion: nobody else can reap
/// it. With `unmovable`, the page cannot be moved while the link references it (a 4 KiB page of
/// a split huge page): TCOW must copy it instead.
fn write_from_the_sending_thread(what: &str, msg: &mut [u8], at: usize, unmovable: bool) {
    let rt = VmRuntime::get();
    let want = msg.to_vec();
    let mut got = AppBuffer::new(msg.len()).unwrap();
    let (mut tx, mut rx) = forced_pair();
    let before = rt.stats();
    let sacc = std::thread::scope(|s| {
        let r = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            rx.recv(
                Semantics::EmulatedCopy,
                &mut got,
                InputBuffering::EarlyDemux,
            )
            .unwrap()
        });
        let (t, sacc) = tx.send(Semantics::EmulatedCopy, msg).unwrap();
        msg[at] = !msg[at]; // the sending thread, before `wait`
        tx.wait(t).unwrap();
        r.join().unwrap();
        sacc
    });
    let st = rt.stats();
    eprintln!(
        "{what}: sender path {}; tcow_copies +{} (discards +{}), tcow_huge_copies +{}, sleep_on_write +{}",
        sacc.path,
        st.tcow_copies - before.tcow_copies,
        st.tcow_discards - before.tcow_discards,
        st.tcow_huge_copies - before.tcow_huge_copies,
        st.sleep_on_write - before.sleep_on_write
    );
    check_bytes(&got, &want, &format!("{what}: the receiver"));
    assert_eq!(msg[at], !want[at], "{what}: the sender's own write");
    if rt.capabilities().tcow == TcowMode::UffdMove {
        assert_eq!(
            st.sleep_on_write, before.sleep_on_write,
            "{what}: a write waited for the output"
        );
        if unmovable {
            assert!(
                st.tcow_discards > before.tcow_discards,
                "{what}: the page that cannot be moved was not copied (tcow_discards)"
            );
        }
    }
}

#[test]
fn tcow_from_the_sending_thread_on_the_4k_path_of_a_huge_buffer() {
    on_huge_pages(
        "4 KiB path of a huge buffer",
        Duration::from_secs(20),
        || {
            // 256 KiB at offset 100 of a huge buffer: no whole PMD, so the 4 KiB path; the whole
            // message fits in the link, so every page of it is still queued when `send` returns.
            let mut b = huge_buffer(2 * H);
            fill_pattern(&mut b, 0x4C);
            let len = 256 << 10;
            write_from_the_sending_thread(
                "256 KiB at offset 100 of a huge buffer",
                &mut b[100..100 + len],
                len - 5000,
                false,
            );
        },
    );
}

#[test]
fn tcow_from_the_sending_thread_in_a_split_huge_page() {
    on_huge_pages(
        "split huge page, sending thread",
        Duration::from_secs(20),
        || {
            let mut m = Mapping::anonymous(2 * H, MapOptions::POPULATED_2M).unwrap();
            // Split PMD 1 (drop one page; the pattern rewrites it), then send 256 KiB of it: no
            // whole PMD, so the 4 KiB path, and every page still queued when `send` returns.
            m.advise_range(
                RawRange {
                    addr: m.addr() + H + 4096,
                    len: 4096,
                },
                libc::MADV_DONTNEED,
                "split",
            )
            .unwrap();
            fill_pattern(m.as_mut_slice(), 0x5B);
            assert_eq!(granule_of(m.as_slice()), Granule::Mixed);
            let len = 256 << 10;
            write_from_the_sending_thread(
                "256 KiB inside a split huge page",
                &mut m.as_mut_slice()[H + 8192..H + 8192 + len],
                len - 5000,
                true,
            );
        },
    );
}
