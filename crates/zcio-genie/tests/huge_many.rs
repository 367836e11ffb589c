//! 100 000 emulated-copy transfers of a huge-page buffer over the memory network: every one
//! takes the 2 MiB paths (TCOW on the PMD, huge staging and a PMD swap), and what the process
//! holds stays bounded: its mappings, its huge pages, its resident memory. Alone in its own
//! process, so that the counts are this test's.

use std::time::{Duration, Instant};
use zcio_genie::{AppBuffer, Granule, InputBuffering, Semantics, granule_of};

mod common;
use common::forced_pair;

const H: usize = 2 << 20;

/// A field of `/proc/self/smaps_rollup` in kB.
fn rollup_kb(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Message `i`'s stamp in every 4 KiB page: the message number and the page number.
fn stamp(buf: &mut [u8], i: u64) {
    for (pg, chunk) in buf.chunks_mut(4096).enumerate() {
        chunk[..8].copy_from_slice(&i.to_le_bytes());
        chunk[8..16].copy_from_slice(&(pg as u64).to_le_bytes());
    }
}

fn stamped(buf: &[u8], i: u64) -> bool {
    buf.chunks(4096)
        .enumerate()
        .all(|(pg, c)| c[..8] == i.to_le_bytes() && c[8..16] == (pg as u64).to_le_bytes())
}

#[test]
fn a_hundred_thousand_huge_transfers_stay_bounded() {
    if let Some(why) = zcio_vm::huge::unavailable_reason() {
        zcio_vm::skip::skip(zcio_vm::skip::Capability::HugePages, &why);
        return;
    }
    const N: u64 = 100_000;
    let (mut tx, mut rx) = forced_pair();
    let mut src = AppBuffer::huge(H).unwrap();
    let mut dst = AppBuffer::huge(H).unwrap();
    src.fill(0x11);
    let t0 = Instant::now();
    let (vma_base, huge_base, rss_base) = std::thread::scope(|s| {
        let receiver = s.spawn(move || {
            let mut bases = (0, 0, 0);
            for i in 0..N {
                let (n, acc) = rx
                    .recv(
                        Semantics::EmulatedCopy,
                        &mut dst,
                        InputBuffering::EarlyDemux,
                    )
                    .unwrap();
                assert_eq!(n, H);
                assert_eq!(
                    acc.granule,
                    Some(Granule::Huge),
                    "message {i}: {}",
                    acc.path
                );
                assert_eq!(acc.swapped_bytes, H as u64, "message {i}: {}", acc.path);
                // The stamp of every page of every message; the whole of one in 1 000.
                if !stamped(&dst, i) {
                    panic!("message {i} arrived with another message's pages");
                }
                if i % 1000 == 999 {
                    assert!(
                        dst.chunks(4096).all(|c| c[16..].iter().all(|&b| b == 0x11)),
                        "message {i}: bytes other than the stamps changed"
                    );
                }
                if i == 1000 {
                    bases = (
                        zcio_vm::mapping::vma_count(),
                        rollup_kb("AnonHugePages:"),
                        rollup_kb("Rss:"),
                    );
                }
            }
            assert_eq!(granule_of(&dst), Granule::Huge, "the receiver's buffer");
            bases
        });
        for i in 0..N {
            stamp(&mut src, i);
            let (t, acc) = tx.send(Semantics::EmulatedCopy, &src).unwrap();
            assert_eq!(
                acc.granule,
                Some(Granule::Huge),
                "message {i}: {}",
                acc.path
            );
            assert_eq!(acc.cpu_copied_bytes, 0, "message {i}: {}", acc.path);
            tx.wait(t).unwrap();
            assert!(
                t0.elapsed() < Duration::from_secs(600),
                "100 000 transfers took more than 10 minutes (at message {i})"
            );
        }
        receiver.join().unwrap()
    });
    let (vma, huge, rss) = (
        zcio_vm::mapping::vma_count(),
        rollup_kb("AnonHugePages:"),
        rollup_kb("Rss:"),
    );
    eprintln!(
        "{N} transfers of 2 MiB in {:?}: mappings {vma_base} -> {vma}, AnonHugePages {huge_base} -> {huge} kB, Rss {rss_base} -> {rss} kB",
        t0.elapsed()
    );
    assert!(vma <= vma_base + 4, "mappings grew: {vma_base} -> {vma}");
    assert!(
        huge <= huge_base + 4 * 2048,
        "huge pages grew: {huge_base} -> {huge} kB"
    );
    assert!(
        rss <= rss_base + 16 * 1024,
        "resident memory grew: {rss_base} -> {rss} kB"
    );
    assert_eq!(granule_of(&src), Granule::Huge, "the sender's buffer");
}
