//! A page move the kernel refuses, injected at each step of the input paths
//! (`VmRuntime::inject_move_failure`, the `EINVAL` of mappings it finds incompatible): the input
//! still returns `Ok` with exactly the message, the bytes around the buffer untouched, and the
//! next input on the same endpoint is exact too. Each case checks that its injection was
//! reached, so that none passes by not taking the path.
//!
//! Injections are process-wide: this file holds one test, which runs the cases in turn.

use zcio_genie::memnet;
use zcio_genie::profile::Profile;
use zcio_genie::stream::StreamEnd;
use zcio_genie::{AppBuffer, InputBuffering, Semantics};
use zcio_vm::runtime::MoveStep;
use zcio_vm::{VmRuntime, page_size};

const GUARD_BYTE: u8 = 0x5A;

/// Message `i`'s bytes.
fn message(len: usize, i: u8) -> Vec<u8> {
    (0..len)
        .map(|k| (k as u8).wrapping_mul(31).wrapping_add(i))
        .collect()
}

/// Whether the injection at `step` was taken (disarming it if not).
fn taken(step: MoveStep) -> bool {
    !VmRuntime::get().inject_move_failure(step, None)
}

/// A file endpoint holding two messages of `len` bytes, read into `buf[offset..offset + len]`
/// under emulated copy with early demultiplexing: the first with `step` refused after `after`
/// pages, the second with nothing injected.
fn through_file(step: MoveStep, after: usize, len: usize, offset: usize, huge: bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut f = StreamEnd::file(&dir.path().join("m")).unwrap();
    f.set_profile(Profile::zero_copy());
    let msgs = [message(len, 1), message(len, 2)];
    for m in &msgs {
        f.send(Semantics::Copy, m).unwrap();
    }
    let room = offset + len + 2 * page_size();
    let mut buf = match huge {
        true => AppBuffer::huge(room.next_multiple_of(2 << 20)).unwrap(),
        false => AppBuffer::new(room).unwrap(),
    };
    buf.fill(GUARD_BYTE);
    let case = format!("{step:?} after {after} pages, {len} bytes at offset {offset}");
    for (i, want) in msgs.iter().enumerate() {
        if i == 0 {
            VmRuntime::get().inject_move_failure(step, Some(after));
        }
        let window = &mut buf[offset..offset + len];
        let acc = f
            .recv(Semantics::EmulatedCopy, window, InputBuffering::EarlyDemux)
            .unwrap_or_else(|e| panic!("{case}: message {i}: {e}"));
        assert!(
            &buf[offset..offset + len] == want,
            "{case}: message {i} ({})",
            acc.path
        );
        assert!(
            buf[..offset].iter().all(|&b| b == GUARD_BYTE)
                && buf[offset + len..].iter().all(|&b| b == GUARD_BYTE),
            "{case}: message {i} wrote outside its window ({})",
            acc.path
        );
        if i == 0 {
            assert!(
                taken(step),
                "{case}: the path did not reach the step ({})",
                acc.path
            );
        }
        buf[offset..offset + len].fill(GUARD_BYTE);
    }
}

/// Move input at 2 MiB over the memory network: two regions of `len` bytes, the first with
/// `step` (`RegionIn`, its receive, or `TakeBack`, its pages given back to the staging)
/// refused after `after` pages, the second with nothing injected.
fn through_regions(step: MoveStep, after: usize, len: usize) {
    let (mut tx, mut rx) = memnet::pair().unwrap();
    tx.set_profile(Profile::zero_copy());
    rx.set_profile(Profile::zero_copy());
    let msgs = [message(len, 3), message(len, 4)];
    let sent = msgs.clone();
    let sender = std::thread::spawn(move || {
        for m in &sent {
            let mut r = tx.alloc_region(m.len(), Semantics::Move).unwrap();
            r.as_mut_slice().copy_from_slice(m);
            tx.send_region(Semantics::Move, r).unwrap();
        }
        tx.flush().unwrap();
    });
    for (i, want) in msgs.iter().enumerate() {
        let case = format!("{step:?} after {after} pages, region {i}");
        if i == 0 && step == MoveStep::RegionIn {
            VmRuntime::get().inject_move_failure(step, Some(after));
        }
        let (region, acc) = rx
            .recv_region(Semantics::Move, InputBuffering::EarlyDemux)
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        assert!(region.as_slice() == &want[..], "{case} ({})", acc.path);
        if i == 0 && step == MoveStep::TakeBack {
            VmRuntime::get().inject_move_failure(step, Some(after));
        }
        rx.recycle(region, Semantics::Move);
        if i == 0 {
            assert!(
                taken(step),
                "{case}: the step was not reached ({})",
                acc.path
            );
        }
    }
    sender.join().unwrap();
}

#[test]
fn a_refused_move_at_any_step_of_an_input_still_delivers_exactly() {
    let rt = VmRuntime::get();
    if !rt.capabilities().swap {
        // Without UFFDIO_MOVE every input copies: no step to refuse.
        let why = rt.capabilities().reasons.join("; ");
        zcio_vm::skip::skip(zcio_vm::skip::Capability::UffdMove, &why);
        return;
    }
    let ps = page_size();
    let refused0 = rt.stats().refused_moves;
    // 4 KiB pages: 20 full pages, a head of 200 bytes (copied) or of all but 100 (reverse
    // copyout), a tail of the rest.
    for (step, afters) in [
        (MoveStep::SwapOut, &[0, 1, 5][..]),
        (MoveStep::SwapIn, &[0, 3][..]),
    ] {
        for &after in afters {
            through_file(step, after, 20 * ps + 300, ps - 200, false);
        }
    }
    for step in [MoveStep::ReverseOut, MoveStep::ReverseIn] {
        through_file(step, 0, 20 * ps + 300, 100, false);
    }
    assert!(
        rt.stats().refused_moves > refused0,
        "the refusals were not counted"
    );
    // 2 MiB pages: two whole PMDs and three pages after them.
    let len = (4 << 20) + 3 * ps;
    if let Some(why) = zcio_vm::huge::unavailable_reason() {
        zcio_vm::skip::skip(zcio_vm::skip::Capability::HugePages, &why);
        return;
    }
    for (step, after) in [
        (MoveStep::SwapOut, 0),
        (MoveStep::SwapOut, 512),
        (MoveStep::SwapIn, 0),
    ] {
        through_file(step, after, len, 0, true);
    }
    for after in [0, 512] {
        through_regions(MoveStep::RegionIn, after, len);
        // Pages are taken back where the staging they came from is empty: whole PMDs.
        through_regions(MoveStep::TakeBack, after, 4 << 20);
    }
}
