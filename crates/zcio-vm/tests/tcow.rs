//! TCOW and page swapping against the real kernel.

mod common;

use common::{swapping, tcow_at_2mib};
use std::os::fd::AsFd;
use zcio_vm::runtime::TcowMode;
use zcio_vm::wire::{Pipe, read_exact, vmsplice_all};
use zcio_vm::{MapOptions, Mapping, RawRange, VmRuntime, page_size};

fn pattern(buf: &mut [u8], seed: u8) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(seed);
    }
}

/// `n` pages of fresh anonymous memory filled with the pattern of `seed`, what they hold, and
/// a pipe with room for all of them.
fn patterned_pages(n: usize, seed: u8) -> (Mapping, Vec<u8>, Pipe) {
    let len = n * page_size();
    let mut m = Mapping::anonymous(len, MapOptions::default()).unwrap();
    pattern(m.as_mut_slice(), seed);
    let expect = m.as_slice().to_vec();
    (m, expect, Pipe::new(len).unwrap())
}

/// While an output of all of `m` waits in `p`, `write` writes to `m` from another thread; then
/// the output is read, all of it, and `release`d. What it delivered. Where TCOW moves pages the
/// writer is done before the read (it never waits); under a sleep-on-write fallback it waits
/// for the release.
fn write_during_output(
    m: &mut Mapping,
    p: &Pipe,
    write: impl FnOnce(&mut [u8]) + Send,
    release: impl FnOnce(),
) -> Vec<u8> {
    let mut got = vec![0u8; m.len()];
    let buf = m.as_mut_slice();
    let tcow = VmRuntime::get().capabilities().tcow;
    std::thread::scope(|s| {
        let w = s.spawn(|| write(buf));
        if tcow == TcowMode::UffdMove {
            w.join().unwrap(); // TCOW never blocks the writer
        }
        read_exact(p.rx.as_fd(), &mut got).unwrap();
        release();
    });
    got
}

#[test]
fn tcow_keeps_the_original_for_the_output_and_gives_the_writer_a_copy() {
    let rt = VmRuntime::get();
    let ps = page_size();
    let n = 16;
    let (mut m, expect, p) = patterned_pages(n, 7);
    let before = rt.stats();
    let out = rt.reference_output(m.range(), true).unwrap();
    vmsplice_all(p.tx.as_fd(), &[m.as_slice()]).unwrap();
    // Overwrite every other page during the pending output, from another thread (under a
    // sleep-on-write fallback the writer waits for the release).
    let overwrite = |buf: &mut [u8]| {
        for pg in (0..n).step_by(2) {
            buf[pg * ps..(pg + 1) * ps].fill(0xEE);
        }
    };
    let got = write_during_output(&mut m, &p, overwrite, || out.release());
    assert_eq!(
        got, expect,
        "the output must deliver the data as of the call"
    );
    for pg in 0..n {
        let page = &m.as_slice()[pg * ps..(pg + 1) * ps];
        if pg % 2 == 0 {
            assert!(
                page.iter().all(|&b| b == 0xEE),
                "the writer sees its own write"
            );
        } else {
            assert_eq!(page, &expect[pg * ps..(pg + 1) * ps]);
        }
    }
    // After completion, writes proceed without faults into the output's business.
    m.as_mut_slice().fill(1);
    let after = rt.stats();
    match rt.capabilities().tcow {
        TcowMode::UffdMove => assert!(after.tcow_copies - before.tcow_copies >= (n / 2) as u64),
        other => eprintln!("TCOW mode here is {other:?}; copies not counted"),
    }
}

#[test]
fn an_output_protected_after_it_was_queued_still_keeps_the_data_of_the_call() {
    // The order the memory network uses: reference, queue, then write-protect (the receiver
    // reads meanwhile). Writes after `protect` must not reach the output.
    let rt = VmRuntime::get();
    let n = 8;
    let (mut m, expect, p) = patterned_pages(n, 11);
    let before = rt.stats();
    let mut out = rt.reference_output(m.range(), false).unwrap();
    assert!(!out.is_protected());
    vmsplice_all(p.tx.as_fd(), &[m.as_slice()]).unwrap();
    out.protect().unwrap();
    out.protect().unwrap(); // once is enough; again changes nothing
    assert!(out.is_protected());
    let got = write_during_output(&mut m, &p, |buf| buf.fill(0x5A), || out.release());
    assert_eq!(got, expect, "the output delivers the data as of the call");
    assert!(
        m.as_slice().iter().all(|&b| b == 0x5A),
        "the writer sees its write"
    );
    if rt.capabilities().tcow == TcowMode::UffdMove {
        assert!(rt.stats().tcow_copies - before.tcow_copies >= n as u64);
    }
}

#[test]
fn swap_exchanges_pages_without_copying() {
    let Some(rt) = swapping() else {
        return;
    };
    let ps = page_size();
    let n = 64;
    let mut app = Mapping::anonymous(n * ps, MapOptions::default()).unwrap();
    pattern(app.as_mut_slice(), 1);
    let mut staging = rt
        .registered_mapping(n * ps, MapOptions::default())
        .unwrap();
    pattern(staging.as_mut_slice(), 99);
    let want = staging.as_slice().to_vec();
    let scratch = rt
        .registered_mapping(n * ps, MapOptions::default())
        .unwrap();
    let reg = rt.register_app(app.range()).unwrap();
    assert_eq!(reg, app.range());
    // SAFETY: all three mappings are ours, scratch is empty.
    let copied = unsafe {
        rt.swap(app.range(), staging.range(), scratch.range())
            .unwrap()
    };
    assert_eq!(copied, 0);
    assert_eq!(app.as_slice(), &want[..]);
    // Staging is empty now: reading it gives zeros (fresh pages).
    assert!(staging.as_slice().iter().all(|&b| b == 0));
    let _ = RawRange::of(app.as_slice());
}

/// AnonHugePages (in KiB) of the mapping that contains `addr`, from /proc/self/smaps.
fn anon_huge_kib(addr: usize) -> Option<usize> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ') {
            if let Some((a, b)) = range.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = a <= addr && addr < b;
                    continue;
                }
            }
        }
        if inside {
            if let Some(v) = line.strip_prefix("AnonHugePages:") {
                return v.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
    }
    None
}

#[test]
fn aligned_huge_pages_move_whole() {
    let Some(rt) = swapping() else {
        return;
    };
    if let Some(why) = zcio_vm::huge::unavailable_reason() {
        zcio_vm::skip::skip(zcio_vm::skip::Capability::HugePages, &why);
        return;
    }
    let len = 4 << 20;
    let huge = MapOptions::HUGE;
    let mut src = rt.registered_mapping(len, huge).unwrap();
    pattern(src.as_mut_slice(), 42);
    let want = src.as_slice().to_vec();
    if anon_huge_kib(src.addr()).unwrap_or(0) < 2048 {
        zcio_vm::skip::skip(
            zcio_vm::skip::Capability::HugePages,
            "the kernel gave no huge page to the source (memory fragmented?)",
        );
        return;
    }
    let dst = rt.registered_mapping(len, huge).unwrap();
    // SAFETY: both mappings are ours; dst is empty, src is left empty.
    let copied = unsafe {
        rt.move_range(
            zcio_vm::runtime::MoveStep::RegionIn,
            dst.range(),
            src.range(),
        )
    }
    .unwrap();
    assert_eq!(copied, 0);
    assert_eq!(dst.as_slice(), &want[..]);
    let moved = anon_huge_kib(dst.addr()).unwrap_or(0);
    assert!(
        moved >= 2048,
        "the huge pages arrived split: AnonHugePages {moved} kB at the destination"
    );
}

#[test]
fn tcow_at_2mib_moves_the_huge_page_out_and_a_copy_in_for_a_single_threaded_writer() {
    let h = zcio_vm::page::HUGE_PAGE_SIZE;
    let pmds = 4;
    let Some((rt, mut m)) = tcow_at_2mib(pmds) else {
        return;
    };
    pattern(m.as_mut_slice(), 3);
    assert_eq!(
        zcio_vm::huge::scan(m.range()).granule(),
        zcio_vm::huge::Granule::Huge,
        "a populated MADV_HUGEPAGE mapping is PMD-mapped here"
    );
    let p = Pipe::new(1 << 20).unwrap();
    for round in 0..3u8 {
        pattern(m.as_mut_slice(), round);
        let expect = m.as_slice().to_vec();
        let before = rt.stats();
        let out = rt.reference_output(m.range(), true).unwrap();
        // The pipe holds 1 MiB of the output (from the middle of one PMD); every page of the
        // buffer is written while it is queued, from this very thread (TCOW never waits for
        // the output), then the output is read.
        let chunk = 1 << 20;
        let at = (round as usize % pmds) * h + h / 4;
        vmsplice_all(p.tx.as_fd(), &[&m.as_slice()[at..at + chunk]]).unwrap();
        let buf = m.as_mut_slice();
        for pg in (0..pmds * h).step_by(page_size()) {
            buf[pg] = 0xA0 ^ round;
        }
        buf[(pmds - 1) * h..].fill(0xEE);
        let mut got = vec![0u8; chunk];
        read_exact(p.rx.as_fd(), &mut got).unwrap();
        out.release();
        assert!(
            got[..] == expect[at..at + chunk],
            "round {round}: the output changed under the writer"
        );
        let after = rt.stats();
        assert_eq!(
            after.tcow_huge_copies - before.tcow_huge_copies,
            pmds as u64,
            "one 2 MiB TCOW per PMD"
        );
        assert_eq!(after.tcow_copies, before.tcow_copies, "no 4 KiB TCOW");
        assert_eq!(
            after.tcow_copied_bytes - before.tcow_copied_bytes,
            (pmds * h) as u64,
            "every copied byte counted"
        );
        // The writer sees its writes over the original bytes, and the buffer is still made
        // of huge pages.
        for (i, (&b, &e)) in m.as_slice().iter().zip(&expect).enumerate() {
            let want = if i >= (pmds - 1) * h {
                0xEE
            } else if i % page_size() == 0 {
                0xA0 ^ round
            } else {
                e
            };
            assert_eq!(b, want, "byte {i}");
        }
        assert_eq!(
            zcio_vm::huge::scan(m.range()).granule(),
            zcio_vm::huge::Granule::Huge,
            "the copies moved in are huge pages"
        );
    }
}

/// A swap whose move of the application's pages out is refused part way (here: a scratch page
/// that should be empty holds data, so the kernel refuses the move there) still delivers: the
/// pages moved out get the staging's pages, the rest get the staging's bytes by copy, and the
/// application sees exactly what the staging held (never a mix with its old bytes).
#[test]
fn a_swap_refused_part_way_still_delivers_the_staging_bytes() {
    let Some(rt) = swapping() else {
        return;
    };
    let ps = page_size();
    let opts = MapOptions::POPULATED_4K;
    let mut m = Mapping::anonymous(8 * ps, opts).unwrap();
    pattern(m.as_mut_slice(), 9);
    rt.register_app(m.range()).unwrap();
    let mut stg = rt.registered_mapping(8 * ps, opts).unwrap();
    pattern(stg.as_mut_slice(), 10);
    let want = stg.as_slice().to_vec();
    let mut scr = rt.registered_mapping(8 * ps, MapOptions::NO_HUGE).unwrap();
    scr.as_mut_slice()[5 * ps] = 1; // page 5 of scratch is not empty: the move stops there
    let refused = rt.stats().refused_moves;
    // SAFETY: `m` is ours and not otherwise in use; staging and scratch are our registered
    // mappings.
    let copied = unsafe { rt.swap(m.range(), stg.range(), scr.range()) }.unwrap();
    assert_eq!(copied, 3 * ps, "pages 5 to 7 copied, the others moved");
    assert_eq!(rt.stats().refused_moves, refused + 1, "the refusal counted");
    assert!(
        m.as_slice() == &want[..],
        "the application does not see the staging's bytes after the refused swap"
    );
}
