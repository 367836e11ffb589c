//! The drill ([`zcio_cli::drill`]) on every module that fills application buffers: the semantics
//! in turn on one process, random lengths (to 6 MiB) and offsets, guard bytes, a fresh receive
//! buffer per run. Every message must read back exactly, with `Ok`.
//!
//! `ZCIO_DRILL_MESSAGES` sets the messages per semantics and input buffering (default 8; the
//! soak's drill takes 1000).

use std::time::Duration;
use zcio_cli::drill::{Drill, run};
use zcio_genie::stream::ModuleKind;

fn messages() -> usize {
    std::env::var("ZCIO_DRILL_MESSAGES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8)
}

fn drill(module: ModuleKind, slow: Option<Duration>) {
    let dir = tempfile::tempdir().unwrap();
    let seed = fastrand::u64(..);
    let d = Drill {
        module,
        messages: messages(),
        max_bytes: 6 << 20,
        seed,
        slow,
    };
    let t = run(&d, dir.path(), &mut |_| {});
    let shown: Vec<String> = t
        .failures
        .iter()
        .take(10)
        .map(|f| format!("{f:?}"))
        .collect();
    assert!(
        t.failures.is_empty(),
        "{module} (seed {seed}): {} failures of {} messages checked; the first:\n{}",
        t.failures.len(),
        t.messages,
        shown.join("\n")
    );
    assert_eq!(
        t.messages,
        zcio_cli::drill::SEMANTICS.len() * zcio_genie::InputBuffering::ALL.len() * d.messages
    );
    // The paths under test moved pages (where this machine moves them at all).
    if zcio_vm::VmRuntime::get().capabilities().swap {
        assert!(t.swapped_bytes > 0, "{module}: no page was moved: {t:?}");
    }
}

#[test]
fn file_reads_back_after_mixed_semantics() {
    drill(ModuleKind::File, None);
}

#[test]
fn memnet_reads_back_after_mixed_semantics() {
    drill(ModuleKind::Memnet, None);
}

#[test]
fn pipe_reads_back_after_mixed_semantics() {
    drill(ModuleKind::Pipe, None);
}

#[test]
fn unix_reads_back_after_mixed_semantics() {
    drill(ModuleKind::Unix, None);
}

#[test]
fn tcp_reads_back_after_mixed_semantics() {
    drill(ModuleKind::Tcp, None);
}

#[test]
fn udp_reads_back_after_mixed_semantics_behind_a_late_receiver() {
    drill(ModuleKind::Udp, Some(Duration::from_millis(5)));
}
