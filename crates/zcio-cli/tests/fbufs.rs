//! `zcio bench fbufs` checks what it times.
//!
//! The checks of the fbuf experiment ([`zcio_cli::lab::fbufs::bench`]): the record a receiver keeps
//! and checks after the clock stops finds every kind of wrong message (a changed stamp, a
//! changed byte anywhere when every byte is touched, lost, repeated, reordered, stale and short
//! messages) and names the contender, the message and the page; and end to end, every
//! contender's receiver process (`zcio fbuf-sink`) passes a clean run and fails a run whose
//! originator spoils or leaves out a message, with the exact mismatch.
//!
//! And through the command: for every contender (the fbuf variants, the server
//! path, page remapping, the copies and iceoryx2) and both touch patterns, a run whose sender
//! spoils one word of one message (`--fault corrupt:K`) fails with the receiver's account of
//! it: the contender, the message, the page, and the stamp or sum read against the one
//! written. (Clean runs of every contender: `report.rs`,
//! `bench_fbufs_prints_per_page_costs_and_throughput_per_variant_and_size`.)

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use zcio_cli::lab::fbufs::bench::{
    BenchError, Contender, Fault, Mismatch, PAGE, Record, Touch, fill, messages, page_sum, run,
    stamp, write_bytes, write_words,
};
use zcio_cli::lab::fbufs::measure::Entrant;

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
            Entrant::Iceoryx2 => zcio_cli::lab::fbufs::iceoryx::in_flight(BYTES) as u64,
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

const TOUCHES: [Touch; 2] = [Touch::Word, Touch::All];

/// Message `m` of `bytes`, as a copy's sender writes it.
fn msg(bytes: usize, touch: Touch, m: u64) -> Vec<u8> {
    let mut b = vec![0u8; bytes];
    write_bytes(&mut b, touch, m);
    b
}

/// Feed `msgs` to a record expecting `expected` messages, and check it.
fn check(touch: Touch, bytes: usize, expected: u64, msgs: &[Vec<u8>]) -> Result<(), Mismatch> {
    let mut rec = Record::new("copy-pipe", touch, bytes, expected);
    for m in msgs {
        rec.bytes(m);
    }
    assert_eq!(rec.received(), msgs.len() as u64);
    rec.check()
}

#[test]
fn what_the_sender_writes_is_the_stamp_in_every_page_and_the_fill_elsewhere() {
    for touch in TOUCHES {
        let b = msg(3 * PAGE, touch, 7);
        for (p, page) in b.chunks(PAGE).enumerate() {
            let w = |k: usize| u64::from_ne_bytes(page[8 * k..8 * k + 8].try_into().unwrap());
            assert_eq!(w(0), stamp(7, p), "{touch:?} page {p}");
            for k in 1..PAGE / 8 {
                let want = if touch == Touch::All { fill(7) } else { 0 };
                assert_eq!(w(k), want, "{touch:?} page {p} word {k}");
            }
        }
        // The same message written in shared memory, word by word.
        let words: Vec<AtomicU64> = (0..3 * PAGE / 8).map(|_| AtomicU64::new(0)).collect();
        write_words(&words, touch, 7);
        let back: Vec<u8> = words
            .iter()
            .flat_map(|w| w.load(Relaxed).to_ne_bytes())
            .collect();
        assert_eq!(back, b, "{touch:?}");
    }
    // Stamps differ between messages and pages; a page's sum is what its words add up to.
    assert_ne!(stamp(1, 0), stamp(0, 1));
    assert_ne!(stamp(0, 0), stamp(256, 0));
    let words = PAGE / 8;
    assert_eq!(
        page_sum(3, words),
        (1..words).fold(0u64, |a, _| a.wrapping_add(fill(3)))
    );
}

#[test]
fn clean_streams_pass_in_every_memory_kind() {
    for touch in TOUCHES {
        let bytes = 4 * PAGE;
        let n = 5u64;
        let msgs: Vec<Vec<u8>> = (0..n).map(|m| msg(bytes, touch, m)).collect();
        check(touch, bytes, n, &msgs).unwrap();

        let mut shared = Record::new("fbufs", touch, bytes, n);
        let mut plain = Record::new("iceoryx2", touch, bytes, n);
        for m in 0..n {
            let words: Vec<AtomicU64> = (0..bytes / 8).map(|_| AtomicU64::new(0)).collect();
            write_words(&words, touch, m);
            shared.words(&words);
            let p: Vec<u64> = words.iter().map(|w| w.load(Relaxed)).collect();
            plain.plain_words(&p);
        }
        shared.check().unwrap();
        plain.check().unwrap();
    }
    // Stamps read one per page by the caller (iceoryx2's word-per-page pages).
    let mut rec = Record::new("iceoryx2", Touch::Word, 2 * PAGE, 3);
    for m in 0..3 {
        rec.stamps((0..2).map(|p| stamp(m, p)));
    }
    rec.check().unwrap();
}

#[test]
fn a_changed_stamp_names_the_contender_message_and_page() {
    for touch in TOUCHES {
        let mut msgs: Vec<Vec<u8>> = (0..4).map(|m| msg(3 * PAGE, touch, m)).collect();
        msgs[2][PAGE + 3] ^= 0x40; // message 2, page 1, in its stamp
        let e = check(touch, 3 * PAGE, 4, &msgs).unwrap_err();
        let expected = stamp(2, 1);
        let read = expected ^ (0x40 << 24);
        assert_eq!(
            e,
            Mismatch::Stamp {
                contender: "copy-pipe",
                message: 2,
                page: 1,
                read,
                expected
            },
            "{touch:?}"
        );
        assert_eq!(e.contender(), "copy-pipe");
        assert_eq!(
            e.to_string(),
            format!(
                "copy-pipe: message 2, page 1: read stamp {read:#x}, expected {expected:#x} (a lost, repeated, reordered or corrupted message)"
            )
        );
    }
}

#[test]
fn touching_every_byte_finds_any_changed_byte_and_one_word_per_page_only_the_stamps() {
    let bytes = 2 * PAGE;
    let clean: Vec<Vec<u8>> = (0..3).map(|m| msg(bytes, Touch::All, m)).collect();
    for at in 0..bytes {
        let mut msgs = clean.clone();
        msgs[1][at] ^= 1 << (at % 8);
        let e = check(Touch::All, bytes, 3, &msgs).unwrap_err();
        let page = at / PAGE;
        if at % PAGE < 8 {
            assert!(
                matches!(e, Mismatch::Stamp { message: 1, page: p, .. } if p == page),
                "byte {at}: {e}"
            );
        } else {
            let Mismatch::Data {
                contender,
                message,
                page: p,
                sum,
                expected,
            } = e
            else {
                panic!("byte {at}: {e}");
            };
            assert_eq!((contender, message, p), ("copy-pipe", 1, page), "byte {at}");
            assert_eq!(expected, page_sum(1, PAGE / 8));
            // The sum read is the sum of the words as they arrived.
            let words = msgs[1][page * PAGE + 8..(page + 1) * PAGE]
                .chunks_exact(8)
                .fold(0u64, |a, w| {
                    a.wrapping_add(u64::from_ne_bytes(w.try_into().unwrap()))
                });
            assert_eq!(sum, words, "byte {at}");
            assert!(e.to_string().contains(&format!(
                "copy-pipe: message 1, page {page}: the words after the stamp sum to"
            )));
        }
    }
    // One word per page: a changed byte past the stamp is not what is touched, so not what is
    // checked; the stamps are.
    let mut msgs: Vec<Vec<u8>> = (0..3).map(|m| msg(bytes, Touch::Word, m)).collect();
    msgs[1][PAGE + 100] ^= 1;
    check(Touch::Word, bytes, 3, &msgs).unwrap();
    msgs[1][PAGE] ^= 1;
    assert!(matches!(
        check(Touch::Word, bytes, 3, &msgs),
        Err(Mismatch::Stamp {
            message: 1,
            page: 1,
            ..
        })
    ));
}

#[test]
fn lost_repeated_reordered_stale_misplaced_and_short_messages_are_found() {
    for touch in TOUCHES {
        let bytes = 2 * PAGE;
        let m = |k: u64| msg(bytes, touch, k);
        let stamp_at = |r: Result<(), Mismatch>| match r {
            Err(Mismatch::Stamp {
                message,
                page,
                read,
                expected,
                ..
            }) => (message, page, read, expected),
            other => panic!("{touch:?}: {other:?}"),
        };
        // Lost in the middle: message 2's place holds message 3.
        assert_eq!(
            stamp_at(check(touch, bytes, 4, &[m(0), m(1), m(3)])),
            (2, 0, stamp(3, 0), stamp(2, 0))
        );
        // Repeated.
        assert_eq!(
            stamp_at(check(touch, bytes, 4, &[m(0), m(1), m(1), m(2)])),
            (2, 0, stamp(1, 0), stamp(2, 0))
        );
        // Reordered.
        assert_eq!(
            stamp_at(check(touch, bytes, 3, &[m(0), m(2), m(1)])),
            (1, 0, stamp(2, 0), stamp(1, 0))
        );
        // Stale: what a reused buffer held 256 messages before.
        assert_eq!(
            stamp_at(check(touch, bytes, 2, &[m(0), m(257)])),
            (1, 0, stamp(257, 0), stamp(1, 0))
        );
        // Two pages of a message swapped.
        let mut swapped = m(1);
        swapped.rotate_left(PAGE);
        assert_eq!(
            stamp_at(check(touch, bytes, 2, &[m(0), swapped])),
            (1, 0, stamp(1, 1), stamp(1, 0))
        );
        // Lost at the end.
        let e = check(touch, bytes, 3, &[m(0), m(1)]).unwrap_err();
        assert_eq!(
            e,
            Mismatch::Count {
                contender: "copy-pipe",
                received: 2,
                expected: 3
            }
        );
        assert_eq!(
            e.to_string(),
            "copy-pipe: 2 messages arrived of 3 (lost messages)"
        );
        // Short.
        let mut short = m(1);
        short.truncate(PAGE);
        assert_eq!(
            check(touch, bytes, 3, &[m(0), short, m(2)]),
            Err(Mismatch::Length {
                contender: "copy-pipe",
                message: 1,
                len: PAGE,
                expected: bytes
            })
        );
    }
}

/// Start `zcio fbuf-sink` for a run of contender `c`.
fn spawn(
    c: Contender,
    touch: Touch,
    bytes: usize,
    count: usize,
) -> impl Fn(&std::path::Path) -> std::io::Result<Child> {
    move |sock| {
        zcio()
            .args(["fbuf-sink", "--connect"])
            .arg(sock)
            .args(["--contender", c.name(), "--touch", touch.name()])
            .args(["--bytes", &bytes.to_string(), "--count", &count.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
    }
}

#[test]
fn every_contender_passes_a_clean_run_and_fails_a_spoiled_one_by_name() {
    let bytes = 4 * PAGE;
    let count = 8;
    for c in Contender::ALL {
        // The receiver counts from the first message of the stream, warm-up included.
        let total = messages(c, bytes, count);
        let first = total - count as u64;
        for touch in TOUCHES {
            let spawn = spawn(c, touch, bytes, count);
            let r = run(c, bytes, count, touch, None, &spawn)
                .unwrap_or_else(|e| panic!("{} {touch:?}: {e}", c.name()));
            assert!(r.ns_per_message > 0.0 && r.ns_per_message.is_finite());

            let last = (bytes / 8 - 1) / (PAGE / 8);
            let spoiled = first + 3;
            let want = [
                (
                    Fault::Corrupt(3),
                    match touch {
                        Touch::Word => Mismatch::Stamp {
                            contender: c.name(),
                            message: spoiled,
                            page: last,
                            read: stamp(spoiled, last) ^ 1,
                            expected: stamp(spoiled, last),
                        },
                        Touch::All => Mismatch::Data {
                            contender: c.name(),
                            message: spoiled,
                            page: last,
                            sum: page_sum(spoiled, PAGE / 8)
                                .wrapping_sub(fill(spoiled))
                                .wrapping_add(fill(spoiled) ^ 1),
                            expected: page_sum(spoiled, PAGE / 8),
                        },
                    },
                ),
                (
                    Fault::Skip(3),
                    Mismatch::Stamp {
                        contender: c.name(),
                        message: spoiled,
                        page: 0,
                        read: stamp(spoiled + 1, 0),
                        expected: stamp(spoiled, 0),
                    },
                ),
                (
                    Fault::Skip(count as u64 - 1),
                    Mismatch::Count {
                        contender: c.name(),
                        received: total - 1,
                        expected: total,
                    },
                ),
            ];
            for (fault, mismatch) in want {
                let e = run(c, bytes, count, touch, Some(fault), &spawn).unwrap_err();
                let BenchError::Receiver { who, status, said } = &e else {
                    panic!("{} {touch:?} {fault:?}: {e}", c.name());
                };
                assert_eq!(status, "exit status: 1", "{e}");
                if c == Contender::Forwarded {
                    assert_eq!(*who, "the forwarding server process");
                    assert!(
                        said.contains("the receiver behind the forwarding server ended"),
                        "{e}"
                    );
                }
                assert!(
                    said.ends_with(&mismatch.to_string()),
                    "{} {touch:?} {fault:?}: expected {mismatch}, got {e}",
                    c.name()
                );
            }
        }
    }
}

#[test]
fn sizes_that_are_not_whole_pages_are_refused() {
    let spawn = spawn(Contender::Pipe, Touch::Word, 100, 1);
    for (bytes, count) in [(100, 1), (0, 1), (PAGE, 0)] {
        let e = run(Contender::Pipe, bytes, count, Touch::Word, None, &spawn).unwrap_err();
        assert!(
            matches!(e, BenchError::Argument(_)) && e.to_string().contains("multiple of 4096"),
            "{e}"
        );
    }
}
