//! `zcio bench splice` end to end, tiny: both variants on every pair, with positive
//! throughputs, latencies and availabilities (every run's data was checked once its clock had
//! stopped), and the mechanism each pair got; every contender made to deliver a wrong byte
//! (`--fault`) fails the run with an error naming it, its run and the byte; the check itself
//! finds any changed byte. Speeds are never compared: the machine decides them.

mod common;

use common::{bench_json, zcio};

#[test]
fn bench_splice_json_has_both_variants_on_every_pair() {
    let v = bench_json(
        "splice",
        &["--mib", "2", "--rounds", "1", "--seconds", "0.05"],
    );
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 6);
    for r in rows {
        for k in [
            "gbps",
            "latency_us",
            "pace_gbps",
            "paced_gbps",
            "cpu_availability",
        ] {
            let x = r[k].as_f64().unwrap();
            assert!(x.is_finite() && x > 0.0, "{k} in {r}");
        }
        let want = match (r["pair"].as_str().unwrap(), r["variant"].as_str().unwrap()) {
            (_, "read_write") => vec!["read/write"],
            ("file_to_socket", _) => vec!["sendfile"],
            ("file_to_file", _) => vec!["copy_file_range", "sendfile"],
            _ => vec!["splice"],
        };
        assert!(want.contains(&r["mechanism"].as_str().unwrap()), "{r}");
    }
    assert_eq!(v["verdicts"].as_array().unwrap().len(), 3);
    // The file system the files lived on is named.
    assert!(!v["files_fs"].as_str().unwrap().is_empty(), "{v}");
}

/// `zcio bench splice --fault FAULT`: its stderr, having checked that the run failed.
fn failed_run(fault: &str) -> String {
    let out = zcio()
        .args(["bench", "splice", "--json", "--mib", "2", "--rounds", "1"])
        .args(["--seconds", "0.05", "--fault", fault])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{fault}: the run succeeded: {err}");
    err
}

#[test]
fn every_contender_that_delivers_a_wrong_byte_fails_the_run_by_name() {
    let bytes = 2usize << 20;
    let data = zcio_cli::lab::sequoia::splice::measure::data(bytes);
    for pair in ["file_to_socket", "file_to_file", "socket_to_file"] {
        // A socket source's writer repeats the data's first MiB.
        let period = if pair == "socket_to_file" {
            1 << 20
        } else {
            bytes
        };
        for variant in ["splice", "read_write"] {
            for run in ["throughput", "paced"] {
                let fault = match run {
                    "paced" => format!("{pair}:{variant}:paced"),
                    _ => format!("{pair}:{variant}"),
                };
                let err = failed_run(&fault);
                let line = err.lines().last().unwrap_or_default();
                let head = format!("zcio: {pair} by {variant}, {run} run: byte ");
                let rest = line
                    .strip_prefix(&head)
                    .unwrap_or_else(|| panic!("{fault}: {err}"));
                // "N of the data differs at the sink: read 0xRR, expected 0xEE"
                let (n, rest) = rest.split_once(' ').unwrap();
                let n: usize = n.parse().unwrap();
                let expected = data[n % period];
                assert_eq!(
                    rest,
                    format!(
                        "of the data differs at the sink: read {:#04x}, expected {expected:#04x}",
                        expected ^ 0xff
                    ),
                    "{fault}: {line}"
                );
                // Spoiled midway through a throughput run, after four steps of a paced one.
                let around = match run {
                    "throughput" => bytes / 2 - 1..bytes,
                    _ => 1..5 * (64 << 10),
                };
                assert!(around.contains(&n), "{fault}: byte {n}: {line}");
            }
        }
    }
}

#[test]
fn the_check_finds_any_changed_byte_and_names_the_contender() {
    use std::sync::Arc;
    use zcio_cli::lab::sequoia::splice::measure::{
        ContentError, STAMP_EVERY, Stream, Wrong, check, data,
    };
    let len = 3 * STAMP_EVERY + 100;
    let sent = data(len);
    // Every 4 KiB starts with a stamp of its offset.
    for p in 0..len.div_ceil(STAMP_EVERY) {
        let at = p * STAMP_EVERY;
        let stamp = (0x5a5a_5a5a_0000_0000u64 ^ at as u64).to_le_bytes();
        let n = (len - at).min(8);
        assert_eq!(sent[at..at + n], stamp[..n], "stamp {p}");
    }
    let stream = Stream::new(Arc::from(sent.clone()), len);
    check("file_to_file", "splice", "throughput", &stream, &sent, 0).unwrap();
    for at in 0..len {
        let mut got = sent.clone();
        got[at] ^= 0x10;
        let e = check("file_to_file", "splice", "throughput", &stream, &got, 0).unwrap_err();
        assert_eq!(
            e,
            ContentError {
                pair: "file_to_file",
                variant: "splice",
                run: "throughput",
                wrong: Wrong::Byte {
                    offset: at as u64,
                    read: sent[at] ^ 0x10,
                    expected: sent[at],
                },
            }
        );
    }
    // A paced run's stream goes round the source: what arrives across the end of one lap and
    // the start of the next, checked from where it was read.
    let at = 2 * len as u64 - 50;
    let mut got: Vec<u8> = (0..100).map(|k| stream.byte(at + k)).collect();
    assert_eq!(got[..50], sent[len - 50..]);
    assert_eq!(got[50..], sent[..50]);
    check("file_to_socket", "read_write", "paced", &stream, &got, at).unwrap();
    got[60] ^= 1;
    let e = check("file_to_socket", "read_write", "paced", &stream, &got, at).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "file_to_socket by read_write, paced run: byte {} of the data differs at the sink: read {:#04x}, expected {:#04x}",
            at + 60,
            sent[10] ^ 1,
            sent[10]
        )
    );
    // A range shifted by one byte (one lost) is found at its first byte.
    let shifted = [&sent[..1000], &sent[1001..]].concat();
    let e = check(
        "socket_to_file",
        "splice",
        "throughput",
        &stream,
        &shifted,
        0,
    )
    .unwrap_err();
    assert!(
        matches!(e.wrong, Wrong::Byte { offset: o, .. } if (1000..1010).contains(&o)),
        "{e}"
    );
}
