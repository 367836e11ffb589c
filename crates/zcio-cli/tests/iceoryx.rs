//! iceoryx2 as a contender of `zcio bench fbufs`, end to end: it measures beside the fbufs in
//! the same run, its receiver fails loudly on a corrupted or lost message, and a receiver or
//! publisher killed mid-run ends the run with an error instead of a hang.

mod common;

use common::{FBUFS_TWO_SIZES, json_of, run, succeeded, zcio};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Whether process `pid` has ended (gone, or a zombie nobody reaps).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// The first child process of `pid`, waiting up to 10 s for one.
fn child_of(pid: u32) -> u32 {
    let t0 = Instant::now();
    loop {
        let kids =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(k) = kids.split_whitespace().next() {
            return k.parse().unwrap();
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no child process");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn kill(pid: u32) {
    let pid = rustix::process::Pid::from_raw(pid as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
}

/// Wait for `c` at most `limit`, then its output (killing it and failing the test if it is
/// still running).
fn finish_within(mut c: Child, limit: Duration) -> Output {
    let t0 = Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > limit {
            let _ = c.kill();
            let _ = c.wait();
            panic!("still running after {limit:?}: a hang");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

#[test]
fn iceoryx2_measures_beside_the_fbufs_at_each_size_and_touch() {
    let out = run(&[
        &[
            "bench",
            "fbufs",
            "--contenders",
            "iceoryx2,fbufs-cached-volatile",
        ],
        FBUFS_TWO_SIZES,
        &["--touch", "word-per-page,every-byte", "--json"],
    ]
    .concat());
    let v = json_of(&out);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2 * 2 * 2);
    let positive = |x: &serde_json::Value| x.as_f64().is_some_and(|x| x.is_finite() && x > 0.0);
    for touch in ["word-per-page", "every-byte"] {
        for bytes in [4096, 65536] {
            let r = rows
                .iter()
                .find(|r| r["variant"] == "iceoryx2" && r["touch"] == touch && r["bytes"] == bytes)
                .unwrap_or_else(|| panic!("no iceoryx2 row for {touch} at {bytes}"));
            for k in ["ns_per_message", "throughput_gbps"] {
                assert!(positive(&r[k]), "{k}: {r}");
            }
            // A slope fitted over two sizes in one short round: there, but its sign is the
            // machine's noise, not something to assert.
            assert!(
                r["per_page_ns"].as_f64().is_some_and(f64::is_finite),
                "per_page_ns: {r}"
            );
            for s in r["spread_ns"].as_array().unwrap() {
                assert!(positive(s), "spread: {r}");
            }
            let ns = r["ns_per_message"].as_f64().unwrap();
            let gbps = r["throughput_gbps"].as_f64().unwrap();
            assert!(
                (bytes as f64 / ns - gbps).abs() < 1e-9 * gbps.max(1.0),
                "{r}"
            );
        }
        assert!(
            v["fits"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["variant"] == "iceoryx2" && f["touch"] == touch),
            "no iceoryx2 fit for {touch}"
        );
    }
}

#[test]
fn the_iceoryx2_receiver_fails_on_a_corrupted_or_lost_message() {
    // Timed message 3 spoiled (a stamp when one word per page is read, a word past the stamps
    // when every byte is) or missing, and the last one missing (the receiver can only learn of
    // that from the publisher's "everything sent").
    for (fault, touch, says) in [
        ("corrupt:3", "word-per-page", "read stamp"),
        ("corrupt:3", "every-byte", "corrupted data"),
        ("skip:3", "word-per-page", "read stamp"),
        ("skip:3", "every-byte", "read stamp"),
        ("skip:15", "word-per-page", "lost messages"),
        ("skip:15", "every-byte", "lost messages"),
    ] {
        let c = zcio()
            .args(["bench", "fbufs", "--contenders", "iceoryx2"])
            .args(["--sizes", "65536", "--rounds", "1", "--volume", "1048576"])
            .args(["--touch", touch, "--iceoryx2-fault", fault, "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = finish_within(c, Duration::from_secs(20));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{fault} {touch}: the run succeeded");
        assert!(
            err.contains("iceoryx2 receiver: ") && err.contains(says),
            "{fault} {touch}: {err}"
        );
        // The bench reports the receiver's failure; stdout carries only its own error.
        assert!(
            err.contains("receiver process ended: exit status: 1"),
            "{err}"
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(stdout.lines().count(), 1, "{stdout}");
    }
}

/// An iceoryx2 run long enough to kill one of its processes in the middle.
fn long_iceoryx2_run() -> Command {
    let mut c = zcio();
    c.args([
        "bench",
        "fbufs",
        "--contenders",
        "iceoryx2",
        "--sizes",
        "4194304",
        "--rounds",
        "3",
        "--volume",
        "8388608000",
        "--touch",
        "every-byte",
    ]);
    c
}

/// A long iceoryx2 run under way, its output piped (else dropped), and its receiver process,
/// given 300 ms to get going.
fn long_iceoryx2_run_under_way(piped: bool) -> (Child, u32) {
    let output = || if piped { Stdio::piped() } else { Stdio::null() };
    let c = long_iceoryx2_run()
        .stdout(output())
        .stderr(output())
        .spawn()
        .unwrap();
    let sink = child_of(c.id());
    std::thread::sleep(Duration::from_millis(300));
    (c, sink)
}

#[test]
fn a_killed_iceoryx2_receiver_fails_the_run_and_the_next_run_works() {
    let (c, sink) = long_iceoryx2_run_under_way(true);
    kill(sink);
    let out = finish_within(c, Duration::from_secs(20));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("SIGKILL"), "{err}");

    succeeded(&run(&[
        "bench",
        "fbufs",
        "--contenders",
        "iceoryx2",
        "--sizes",
        "65536",
        "--rounds",
        "1",
        "--volume",
        "1048576",
    ]));
}

#[test]
fn the_iceoryx2_receiver_ends_when_the_publisher_is_killed() {
    let (mut c, sink) = long_iceoryx2_run_under_way(false);
    c.kill().unwrap();
    c.wait().unwrap();
    let t0 = Instant::now();
    while !ended(sink) {
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "the receiver outlived its publisher"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
