//! `zcio bench fbufs` checks what it times: for every contender (the fbuf variants, the server
//! path, page remapping, the copies and iceoryx2) and both touch patterns, a run whose sender
//! spoils one word of one message (`--fault corrupt:K`) fails with the receiver's account of
//! it: the contender, the message, the page, and the stamp or sum read against the one
//! written. (Clean runs of every contender: `report.rs`,
//! `bench_fbufs_prints_per_page_costs_and_throughput_per_variant_and_size`.)

use std::process::Command;
use zcio::lab::fbufs::measure::Entrant;
use zcio_fbufs::bench::{Contender, Mismatch, PAGE, fill, messages, page_sum, stamp};

fn zcio() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zcio"))
}

const BYTES: usize = 65536;

#[test]
fn every_contender_fails_a_run_with_a_spoiled_message_naming_it() {
    let count = 16; // --volume 1 MiB of 64 KiB messages
    let last = BYTES / PAGE - 1;
    for e in Entrant::all() {
        // The fbuf and iceoryx2 receivers count the warm-up too (128 messages of 64 KiB).
        let message = 2 + match e {
            Entrant::Fbufs(c) => messages(c, BYTES, count) - count as u64,
            Entrant::Iceoryx2 => zcio::lab::fbufs::iceoryx::in_flight(BYTES) as u64,
        };
        assert_eq!(
            message,
            match e {
                Entrant::Fbufs(Contender::Remap | Contender::UnixSocket | Contender::Pipe) => 2,
                _ => 130,
            }
        );
        for touch in ["word-per-page", "every-byte"] {
            let out = zcio()
                .args(["bench", "fbufs", "--contenders", e.name(), "--touch", touch])
                .args(["--sizes", "65536", "--rounds", "1", "--volume", "1048576"])
                .args(["--fault", "corrupt:2"])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success(),
                "{} {touch}: the run succeeded",
                e.name()
            );
            let want = match touch {
                "word-per-page" => Mismatch::Stamp {
                    contender: e.name(),
                    message,
                    page: last,
                    read: stamp(message, last) ^ 1,
                    expected: stamp(message, last),
                },
                _ => Mismatch::Data {
                    contender: e.name(),
                    message,
                    page: last,
                    sum: page_sum(message, PAGE / 8)
                        .wrapping_sub(fill(message))
                        .wrapping_add(fill(message) ^ 1),
                    expected: page_sum(message, PAGE / 8),
                },
            };
            let line = err.lines().last().unwrap_or_default();
            assert!(
                line.starts_with(&format!("zcio: {} ({touch}) at 65536 bytes: ", e.name()))
                    && line.contains("ended")
                    && line.contains(&want.to_string()),
                "{} {touch}: expected {want}, got {err}",
                e.name()
            );
        }
    }
}
