//! The command line's failures: a length no module carries (or none at all) is refused before
//! any process starts, with one line naming the argument; an error is printed once, on stderr,
//! and with `--json` also as the one JSON object on stdout; a value clap refuses is named.

mod common;

use std::path::Path;
use std::process::Output;

/// `zcio ARGS` with its temporary files in `tmp`: a transfer to a second process makes its
/// control socket there before the process starts, so an empty `tmp` after the run shows that
/// none started.
fn zcio(tmp: &Path, args: &[&str]) -> Output {
    common::zcio()
        .args(args)
        .env("TMPDIR", tmp)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The run failed with one line on stderr saying `what`, and `--json` runs with one JSON object
/// on stdout whose `error` says it too (nothing on stdout otherwise).
fn failed_once(out: &Output, json: bool, what: &[&str]) -> String {
    let (err, stdout) = (text(&out.stderr), text(&out.stdout));
    assert!(!out.status.success(), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    for w in what {
        assert!(err.contains(w), "`{w}` not in: {err}");
    }
    if json {
        assert_eq!(stdout.lines().count(), 1, "{stdout}");
        let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let msg = v["error"].as_str().unwrap();
        for w in what {
            assert!(msg.contains(w), "`{w}` not in: {v}");
        }
        assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
    } else {
        assert!(stdout.is_empty(), "{stdout}");
    }
    err
}

#[test]
fn a_length_no_module_carries_is_refused_before_any_process_starts() {
    let modules = ["memnet", "unix", "tcp", "udp", "pipe", "file"];
    let semantics = ["copy", "emulated-copy", "move", "emulated-share"];
    for bytes in ["0", "1073741825", "99999999999"] {
        for (k, module) in modules.iter().enumerate() {
            let tmp = tempfile::tempdir().unwrap();
            let dir = tempfile::tempdir().unwrap();
            let sem = semantics[k % semantics.len()];
            let json = k % 2 == 0;
            let mut args = vec!["transfer", "--semantics", sem, "--module", module];
            args.extend(["--bytes", bytes, "--dir"]);
            args.push(dir.path().to_str().unwrap());
            if json {
                args.push("--json");
            }
            let out = zcio(tmp.path(), &args);
            let err = failed_once(&out, json, &["--bytes", bytes, "1073741824"]);
            assert!(!err.to_lowercase().contains("pipe"), "{err}");
            assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0, "{err}");
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "{err}");
        }
    }
}

#[test]
fn other_invalid_transfers_are_refused_naming_the_argument() {
    let tmp = tempfile::tempdir().unwrap();
    for (extra, what) in [
        (&["--bytes", "4096", "--count", "0"][..], "--count"),
        (
            &["--bytes", "4096", "--offset", "99999999999"][..],
            "--offset",
        ),
    ] {
        let mut args = vec!["transfer", "--semantics", "copy"];
        args.extend(extra);
        failed_once(&zcio(tmp.path(), &args), false, &[what]);
        args.push("--json");
        failed_once(&zcio(tmp.path(), &args), true, &[what]);
    }
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn bench_memnet_refuses_a_length_before_any_round() {
    let tmp = tempfile::tempdir().unwrap();
    for bytes in ["4096,0", "1,99999999999"] {
        for json in [false, true] {
            let mut args = vec!["bench", "memnet", "--bytes", bytes, "--rounds", "1"];
            if json {
                args.push("--json");
            }
            let bad = bytes.split(',').nth(1).unwrap();
            failed_once(
                &zcio(tmp.path(), &args),
                json,
                &["bench memnet", "--bytes", bad],
            );
        }
    }
    let out = zcio(tmp.path(), &["bench", "memnet", "--rounds", "0", "--json"]);
    failed_once(&out, true, &["--rounds"]);
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn soak_refuses_a_longest_message_no_module_carries() {
    let tmp = tempfile::tempdir().unwrap();
    for max in ["0", "2147483648"] {
        let out = zcio(tmp.path(), &["soak", "--max-bytes", max, "--json"]);
        failed_once(&out, true, &["--max-bytes", max]);
    }
    let out = zcio(tmp.path(), &["soak", "--minutes", "0"]);
    failed_once(&out, false, &["--minutes"]);
}

#[test]
fn an_unknown_semantics_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    for json in [false, true] {
        let mut args = vec!["transfer", "--semantics", "teleport", "--bytes", "1"];
        if json {
            args.push("--json");
        }
        let out = zcio(tmp.path(), &args);
        let err = text(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains("teleport") && err.contains("emulated-copy"),
            "{err}"
        );
        let stdout = text(&out.stdout);
        if json {
            assert_eq!(stdout.lines().count(), 1, "{stdout}");
            let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            assert!(v["error"].as_str().unwrap().contains("teleport"), "{v}");
        } else {
            assert!(stdout.is_empty(), "{stdout}");
        }
    }
    // Help is not an error: it goes to stdout, alone.
    let out = zcio(tmp.path(), &["transfer", "--help", "--json"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).contains("--semantics") && !text(&out.stdout).contains("\"error\""));
}

#[test]
fn a_transfer_that_succeeds_prints_its_result_once() {
    let tmp = tempfile::tempdir().unwrap();
    let args = [
        "transfer",
        "--semantics",
        "copy",
        "--bytes",
        "8192",
        "--count",
        "2",
    ];
    let out = zcio(tmp.path(), &[&args[..], &["--json"]].concat());
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["verified"], true, "{v}");
    assert!(v.get("error").is_none(), "{v}");
}
