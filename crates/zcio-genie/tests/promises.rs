//! Each semantics keeps its promise, and the copies counted are the copies made.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use zcio_genie::profile::Profile;
use zcio_genie::stream::StreamEnd;
use zcio_genie::{GenieError, InputBuffering, Region, Semantics};
use zcio_vm::{MapOptions, Mapping, page_size};

/// A profile that takes the VM paths from one page up (the calibrated one may say copy wins).
mod common;
use common::{bounded, fill, filled, forced_pair, recv_copy};

fn zero_copy_profile() -> std::sync::Arc<Profile> {
    Profile::zero_copy()
}

#[test]
fn strong_integrity_survives_a_concurrent_overwriter() {
    let (mut tx, mut rx) = forced_pair();
    let len = 256 * 1024;
    let writes = AtomicU64::new(0);
    for sem in [Semantics::Copy, Semantics::EmulatedCopy] {
        for off in [0, 100] {
            let mut m = Mapping::anonymous(len + 2 * page_size(), MapOptions::default()).unwrap();
            let mut got = vec![0u8; len];
            for round in 0..40u8 {
                let buf = &mut m.as_mut_slice()[off..off + len];
                fill(buf, round);
                let want = buf.to_vec();
                let (t, _) = tx.send(sem, buf).unwrap();
                let stop = AtomicBool::new(false);
                std::thread::scope(|s| {
                    s.spawn(|| {
                        // Right after the call returns and throughout the transfer.
                        let mut k = 0u8;
                        while !stop.load(Ordering::Relaxed) {
                            k = k.wrapping_add(1);
                            buf.fill(k);
                            writes.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                    // Give the overwriter a head start before the receiver reads.
                    std::thread::sleep(std::time::Duration::from_micros(200));
                    rx.recv(sem, &mut got, InputBuffering::EarlyDemux).unwrap();
                    tx.wait(t).unwrap();
                    stop.store(true, Ordering::Relaxed);
                });
                assert!(
                    got == want,
                    "{sem} offset {off} round {round}: receiver saw writes made after the call"
                );
            }
        }
    }
    assert!(
        writes.load(Ordering::Relaxed) > 1000,
        "the overwriter ran {} times",
        writes.load(Ordering::Relaxed)
    );
}

#[test]
fn share_is_weak_the_receiver_sees_later_writes() {
    let (mut tx, mut rx) = forced_pair();
    let len = 64 * 1024;
    let mut m = Mapping::anonymous(len, MapOptions::default()).unwrap();
    m.as_mut_slice().fill(1);
    let (t, _) = tx.send(Semantics::EmulatedShare, m.as_slice()).unwrap();
    m.as_mut_slice().fill(2); // after the call, before the receiver reads
    let mut got = vec![0u8; len];
    rx.recv(
        Semantics::EmulatedShare,
        &mut got,
        InputBuffering::EarlyDemux,
    )
    .unwrap();
    tx.wait(t).unwrap();
    assert!(
        got.iter().all(|&b| b == 2),
        "share passes the buffer in place: later writes show"
    );
}

#[test]
fn truncated_input_leaves_the_buffer_untouched() {
    for sem in [Semantics::Copy, Semantics::EmulatedCopy] {
        for input in InputBuffering::ALL {
            let (mut tx, mut rx) = forced_pair();
            let half = vec![0x5Au8; 64 * 1024];
            tx.send_truncated(&half, 128 * 1024).unwrap();
            drop(tx); // the sender dies mid-transfer
            let mut m = Mapping::anonymous(128 * 1024, MapOptions::default()).unwrap();
            m.as_mut_slice().fill(0xAB);
            let e = rx.recv(sem, m.as_mut_slice(), input).unwrap_err();
            assert!(
                matches!(e, GenieError::PeerGone { .. }),
                "{sem} {input}: {e}"
            );
            assert!(
                m.as_slice().iter().all(|&b| b == 0xAB),
                "{sem} {input}: buffer was touched"
            );
            // The wire stopped partway through the message: every later input is refused,
            // naming the failure, rather than reading what follows as a message.
            let e = rx.recv(sem, m.as_mut_slice(), input).unwrap_err();
            assert!(
                matches!(&e, GenieError::Broken { direction: "input", cause } if cause.contains("peer disappeared")),
                "{sem} {input}: {e}"
            );
        }
    }
}

#[test]
fn short_file_leaves_the_buffer_untouched() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for sem in [Semantics::Copy, Semantics::EmulatedCopy] {
        let mut f = StreamEnd::file(&dir.path().join("short")).unwrap();
        f.set_profile(zero_copy_profile());
        f.send(Semantics::Copy, &[7u8; 100]).unwrap();
        let mut m = Mapping::anonymous(8192, MapOptions::default()).unwrap();
        m.as_mut_slice().fill(0xAB);
        let e = f
            .recv(sem, m.as_mut_slice(), InputBuffering::EarlyDemux)
            .unwrap_err();
        assert!(
            matches!(
                e,
                GenieError::Truncated {
                    expected: 8192,
                    got: 100
                }
            ),
            "{e}"
        );
        assert!(m.as_slice().iter().all(|&b| b == 0xAB));
        // A failed input of a file consumes nothing: once the rest is written, the same input
        // reads the whole message from where the failed one began.
        f.send(Semantics::Copy, &[8u8; 8092]).unwrap();
        f.recv(sem, m.as_mut_slice(), InputBuffering::EarlyDemux)
            .unwrap();
        assert!(m.as_slice()[..100].iter().all(|&b| b == 7), "{sem}");
        assert!(m.as_slice()[100..].iter().all(|&b| b == 8), "{sem}");
    }
}

#[test]
fn copies_counted_on_the_memory_network() {
    let (mut tx, mut rx) = forced_pair();
    let len = 1 << 20;
    let mut m = Mapping::anonymous(len, MapOptions::default()).unwrap();
    fill(m.as_mut_slice(), 3);
    let mut got = Mapping::anonymous(len, MapOptions::default()).unwrap();
    for (sem, want_cpu) in [
        (Semantics::EmulatedCopy, 0),
        (Semantics::Copy, 2 * len as u64),
    ] {
        let mut cpu = 0;
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                let (t, acc) = tx.send(sem, m.as_slice()).unwrap();
                tx.wait(t).unwrap();
                acc
            });
            let (_, racc) = rx
                .recv(sem, got.as_mut_slice(), InputBuffering::EarlyDemux)
                .unwrap();
            let sacc = h.join().unwrap();
            cpu = sacc.cpu_copied_bytes + racc.cpu_copied_bytes;
            if sem == Semantics::EmulatedCopy && zcio_vm::VmRuntime::get().capabilities().swap {
                assert_eq!(racc.swapped_bytes, len as u64, "{}", racc.path);
            }
        });
        assert_eq!(got.as_slice(), m.as_slice());
        if sem == Semantics::EmulatedCopy && !zcio_vm::VmRuntime::get().capabilities().swap {
            zcio_vm::skip::skip(
                zcio_vm::skip::Capability::UffdMove,
                "the copy count for emulated copy: no UFFDIO_MOVE here",
            );
            continue;
        }
        assert_eq!(cpu, want_cpu, "{sem}");
    }
}

#[test]
fn copies_counted_over_o_direct_files() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut f = StreamEnd::file(&dir.path().join("direct")).unwrap();
    if let Some(r) = f.direct_unavailable() {
        zcio_vm::skip::skip(
            zcio_vm::skip::Capability::ODirect,
            &format!("O_DIRECT unavailable here: {r}"),
        );
        return;
    }
    f.set_profile(zero_copy_profile());
    let len = 1 << 20;
    let mut m = Mapping::anonymous(len, MapOptions::default()).unwrap();
    fill(m.as_mut_slice(), 9);
    let s = f.send(Semantics::EmulatedCopy, m.as_slice()).unwrap();
    let mut got = Mapping::anonymous(len, MapOptions::default()).unwrap();
    let r = f
        .recv(
            Semantics::EmulatedCopy,
            got.as_mut_slice(),
            InputBuffering::EarlyDemux,
        )
        .unwrap();
    assert_eq!(got.as_slice(), m.as_slice());
    if zcio_vm::VmRuntime::get().capabilities().swap {
        assert_eq!(
            s.cpu_copied_bytes + r.cpu_copied_bytes,
            0,
            "{} / {}",
            s.path,
            r.path
        );
    } else {
        zcio_vm::skip::skip(
            zcio_vm::skip::Capability::UffdMove,
            "the copy count: no UFFDIO_MOVE here, swaps are copies",
        );
    }
    assert_eq!(s.kernel_copied_bytes, Some(0), "O_DIRECT: {}", s.path);
    // Partial pages only are copied at an unaligned offset.
    let mut m2 = Mapping::anonymous(len + page_size(), MapOptions::default()).unwrap();
    let buf = &mut m2.as_mut_slice()[100..100 + len];
    let r = f.recv(Semantics::EmulatedCopy, buf, InputBuffering::EarlyDemux);
    assert!(
        matches!(r, Err(GenieError::Truncated { .. })),
        "nothing more in the file"
    );
}

#[test]
fn move_never_exposes_stale_bytes() {
    let (mut a, mut b) = forced_pair();
    for sem in [
        Semantics::EmulatedMove,
        Semantics::WeakMove,
        Semantics::EmulatedWeakMove,
        Semantics::Move,
    ] {
        // A sends a full two-page region: it is cached at A.
        let big = Region::from_slice(&vec![0xEEu8; 2 * page_size()]).unwrap();
        let (t, _) = a.send_region(sem, big).unwrap();
        let (r, _) = b.recv_region(sem, InputBuffering::EarlyDemux).unwrap();
        a.wait(t).unwrap();
        assert!(r.as_slice().iter().all(|&x| x == 0xEE));
        // B sends 4097 bytes back: A's input reuses the cached region; its tail must be zero.
        let (t, _) = b
            .send_region(sem, Region::from_slice(&[0x11u8; 4097]).unwrap())
            .unwrap();
        let cached = a.regions.len();
        let (r, _) = a.recv_region(sem, InputBuffering::EarlyDemux).unwrap();
        b.wait(t).unwrap();
        assert_eq!(r.len(), 4097);
        assert!(r.as_slice().iter().all(|&x| x == 0x11));
        assert!(
            r.page_span()[4097..].iter().all(|&x| x == 0),
            "{sem}: stale bytes after the data"
        );
        let watched = zcio_vm::VmRuntime::get().capabilities().tcow
            != zcio_vm::runtime::TcowMode::MprotectSleepOnWrite;
        if sem != Semantics::Move && watched {
            assert!(cached >= 1, "{sem}: the region sent was cached");
            assert_eq!(
                a.regions.len(),
                cached - 1,
                "{sem}: the cached region was reused"
            );
        }
    }
}

#[test]
fn region_check_gives_a_new_region_when_the_application_removed_it() {
    let (mut a, mut b) = forced_pair();
    let region = Region::from_slice(&vec![1u8; page_size()]).unwrap();
    let addr = region.range();
    let (t, _) = a.send_region(Semantics::EmulatedMove, region).unwrap();
    b.recv_region(Semantics::EmulatedMove, InputBuffering::EarlyDemux)
        .unwrap();
    a.wait(t).unwrap();
    if zcio_vm::VmRuntime::get().capabilities().tcow
        == zcio_vm::runtime::TcowMode::MprotectSleepOnWrite
    {
        assert_eq!(
            a.regions.len(),
            0,
            "no region is cached without an unmap watch"
        );
        zcio_vm::skip::skip(
            zcio_vm::skip::Capability::UffdWp,
            "without userfaultfd regions are not cached (no region check)",
        );
        return;
    }
    assert_eq!(a.regions.len(), 1);
    // The application removes the hidden region behind zcio's back.
    // SAFETY: the range is a hidden zcio region nobody references; the test plays a C
    // application calling munmap on it.
    let rc = unsafe { libc::munmap(addr.addr as *mut libc::c_void, addr.len) };
    assert_eq!(rc, 0);
    // No waiting: munmap returns once the runtime has read the unmap event, and the region
    // check waits for the handling of events already read.
    let (t, _) = b
        .send_region(
            Semantics::EmulatedMove,
            Region::from_slice(&vec![2u8; page_size()]).unwrap(),
        )
        .unwrap();
    let (r, _) = a
        .recv_region(Semantics::EmulatedMove, InputBuffering::EarlyDemux)
        .unwrap();
    b.wait(t).unwrap();
    assert!(r.as_slice().iter().all(|&x| x == 2));
    assert_eq!(a.regions.removed_by_application, 1);
}

#[test]
fn unmapping_during_pending_output_still_delivers_the_original() {
    let (mut tx, mut rx) = forced_pair();
    let len = 512 * 1024;
    for sem in [
        Semantics::EmulatedCopy,
        Semantics::EmulatedShare,
        Semantics::Share,
    ] {
        let mut m = Mapping::anonymous(len, MapOptions::default()).unwrap();
        fill(m.as_mut_slice(), 5);
        let want = m.as_slice().to_vec();
        let (t, _) = tx.send(sem, m.as_slice()).unwrap();
        drop(m); // munmap while the output is pending
        // New memory of the same size (likely at the same address) must not leak into the output.
        let mut n = Mapping::anonymous(len, MapOptions::default()).unwrap();
        n.as_mut_slice().fill(0xCC);
        let mut got = vec![0u8; len];
        rx.recv(sem, &mut got, InputBuffering::EarlyDemux).unwrap();
        tx.wait(t).unwrap();
        assert!(
            got == want,
            "{sem}: the output changed after the buffer was unmapped"
        );
        assert!(n.as_slice().iter().all(|&b| b == 0xCC));
    }
}

#[test]
fn the_caller_chooses_between_an_explicit_fallback_and_a_clear_failure() {
    use zcio_genie::Fallback;
    use zcio_genie::stream::ModuleKind;
    // A pipe: the kernel copies whatever the semantics, so emulated copy either says so or fails.
    let (mut a, mut b) = zcio_genie::stream::pair(ModuleKind::Pipe).unwrap();
    a.set_fallback(Fallback::Refuse);
    let data = vec![0x42u8; 3 * page_size()];
    let e = a.send(Semantics::EmulatedCopy, &data).unwrap_err();
    assert!(
        matches!(
            e,
            GenieError::Unsupported {
                semantics: Semantics::EmulatedCopy,
                module: "pipe",
                ..
            }
        ),
        "{e}"
    );
    a.send(Semantics::Copy, &data).unwrap(); // copy is never refused
    a.set_fallback(Fallback::Allow);
    let acc = a.send(Semantics::EmulatedCopy, &data).unwrap();
    assert!(acc.path.kernel_copies(), "{}", acc.path);
    let mut got = vec![0u8; data.len()];
    b.recv(Semantics::Copy, &mut got, InputBuffering::EarlyDemux)
        .unwrap();
    b.recv(Semantics::Copy, &mut got, InputBuffering::EarlyDemux)
        .unwrap();
    assert_eq!(got, data);

    // The memory network: pooled input into a buffer off the page boundary copies out.
    let (mut tx, mut rx) = forced_pair();
    rx.set_fallback(Fallback::Refuse);
    let (t, _) = tx.send(Semantics::EmulatedCopy, &data).unwrap();
    let mut m = Mapping::anonymous(data.len() + page_size(), MapOptions::default()).unwrap();
    let e = rx
        .recv(
            Semantics::EmulatedCopy,
            &mut m.as_mut_slice()[512..512 + data.len()],
            InputBuffering::PooledUnaligned,
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            GenieError::Unsupported {
                module: "memnet",
                ..
            }
        ) && e.to_string().contains("page offset 512"),
        "{e}"
    );
    if !zcio_vm::VmRuntime::get().capabilities().swap {
        // Without page moves even the aligned buffer would be copied out: refused too.
        let e = rx
            .recv(
                Semantics::EmulatedCopy,
                &mut m.as_mut_slice()[..data.len()],
                InputBuffering::PooledAligned,
            )
            .unwrap_err();
        assert!(e.to_string().contains("UFFDIO_MOVE"), "{e}");
        rx.set_fallback(Fallback::Allow);
    }
    // Nothing was lost: the message is still there for an aligned buffer.
    let (n, acc) = rx
        .recv(
            Semantics::EmulatedCopy,
            &mut m.as_mut_slice()[..data.len()],
            InputBuffering::PooledAligned,
        )
        .unwrap();
    tx.wait(t).unwrap();
    assert_eq!(n, data.len());
    assert_eq!(&m.as_slice()[..data.len()], &data[..]);
    if zcio_vm::VmRuntime::get().capabilities().swap {
        assert_eq!(acc.cpu_copied_bytes, 0, "{}", acc.path);
    }
}

/// The sending thread overwrites every page of an emulated-copy output larger than the TCOW
/// stash (40 MiB: 10 240 pages against 8 191 slots) before it waits for the output: each write
/// must be served by a copy (through the bounce slot once the stash is full), never wait for a
/// completion that only this thread could reap, and the receiver must see the data of the call.
#[test]
fn the_sending_thread_overwrites_an_output_larger_than_the_stash() {
    use zcio_vm::VmRuntime;
    use zcio_vm::runtime::TcowMode;
    let rt = VmRuntime::get();
    if rt.capabilities().tcow == TcowMode::MprotectSleepOnWrite {
        zcio_vm::skip::skip(
            zcio_vm::skip::Capability::UffdWp,
            "the stash and its bounce slot are userfaultfd's (without it the mprotect fallback copies the range: tests/without_userfaultfd.rs)",
        );
        return;
    }
    // With UFFDIO_MOVE, past the stash the originals go through the bounce slot; without it,
    // every page is copied (discarded and reinstalled).
    bounded(
        "overwrite by the sending thread",
        std::time::Duration::from_secs(120),
        || {
            let len = 40 << 20;
            let (mut tx, mut rx) = forced_pair();
            let (mut m, want) = filled(len, 7);
            let buf = &mut m.as_mut_slice()[..len];
            let before = rt.stats();
            let (done_tx, done_rx) = std::sync::mpsc::channel();
            let receiver = std::thread::spawn(move || {
                done_tx.send(recv_copy(&mut rx, len)).unwrap();
            });
            let (t, _) = tx.send(Semantics::EmulatedCopy, buf).unwrap();
            // This thread writes every page, then waits: nobody else can reap the completion.
            buf.fill(0xEE);
            tx.wait(t).unwrap();
            let got = done_rx
                .recv_timeout(std::time::Duration::from_secs(60))
                .expect("the receiver finished");
            receiver.join().unwrap();
            let st = rt.stats();
            let first = got.iter().zip(&want).position(|(a, b)| a != b);
            assert!(
                first.is_none(),
                "the receiver saw a write made after the call, first at byte {first:?}"
            );
            assert!(buf.iter().all(|&b| b == 0xEE), "the sender's own writes");
            let copies = st.tcow_copies - before.tcow_copies;
            let bounced = st.tcow_bounced - before.tcow_bounced;
            eprintln!(
                "tcow_copies +{copies}, of them bounced +{bounced}, sleep_on_write +{}",
                st.sleep_on_write - before.sleep_on_write
            );
            let discards = st.tcow_discards - before.tcow_discards;
            if rt.capabilities().tcow == TcowMode::UffdMove {
                assert!(
                    bounced > 0,
                    "no write went through the bounce slot (tcow_copies +{copies})"
                );
            } else {
                assert_eq!(
                    discards, copies,
                    "without UFFDIO_MOVE every TCOW copy discards"
                );
            }
            assert_eq!(
                st.sleep_on_write, before.sleep_on_write,
                "a write waited for the output"
            );
            assert_eq!(
                st.tcow_copied_bytes - before.tcow_copied_bytes,
                (copies
                    + (st.tcow_discards - before.tcow_discards)
                    + 512 * (st.tcow_huge_copies - before.tcow_huge_copies))
                    * page_size() as u64,
                "TCOW bytes against TCOW copies"
            );
        },
    );
}

#[test]
fn an_output_longer_than_the_window_sleeps_while_the_receiver_drains_it_and_delivers_every_byte() {
    let (mut tx, mut rx) = forced_pair();
    // The window and three pipes more, ending mid-page: the sender queues the window's worth
    // at once and sleeps until the receiver drains pipes for the rest.
    let len = tx.window() + 3 * zcio_vm::wire::pipe_max_size() + 12345;
    let mut m = Mapping::anonymous(len, MapOptions::default()).unwrap();
    let mut got = vec![0u8; len];
    for (round, sem) in [
        Semantics::Copy,
        Semantics::EmulatedCopy,
        Semantics::Share,
        Semantics::EmulatedShare,
    ]
    .into_iter()
    .enumerate()
    {
        let buf = &mut m.as_mut_slice()[..len];
        fill(buf, round as u8);
        let want = buf.to_vec();
        let before = tx.output_wire_sleeps();
        std::thread::scope(|s| {
            let got = &mut got;
            let rx = &mut rx;
            s.spawn(move || {
                // A receiver late to the message: the sender finds the wire full.
                std::thread::sleep(std::time::Duration::from_millis(5));
                rx.recv(sem, got, InputBuffering::EarlyDemux).unwrap();
            });
            let (t, _) = tx.send(sem, buf).unwrap();
            tx.wait(t).unwrap();
        });
        assert!(got == want, "{sem}: the receiver's bytes differ");
        assert!(
            tx.output_wire_sleeps() > before,
            "{sem}: the sender never slept waiting for room"
        );
    }
}
