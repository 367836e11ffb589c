//! `zcio transfer --huge`: huge-page buffers at both ends take the 2 MiB paths and say so, and
//! where huge pages cannot be had the 4 KiB paths carry the same bytes and say why.

mod common;

use common::{json_of, zcio};

fn transfer(env: Option<(&str, &str)>, sem: &str, extra: &[&str]) -> serde_json::Value {
    let mut c = zcio();
    c.args([
        "transfer",
        "--semantics",
        sem,
        "--bytes",
        "4194304",
        "--count",
        "20",
        "--huge",
        "--force-zero-copy",
        "--json",
    ])
    .args(extra);
    if let Some((k, v)) = env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    json_of(&out)
}

#[test]
fn huge_buffers_take_the_2mib_paths_and_say_so() {
    if let Some(why) = zcio_vm::huge::unavailable_reason() {
        zcio_vm::skip::skip(zcio_vm::skip::Capability::HugePages, &why);
        return;
    }
    for sem in ["emulated-copy", "emulated-share", "emulated-move"] {
        let v = transfer(None, sem, &[]);
        assert_eq!(v["verified"], true, "{v}");
        assert_eq!(v["huge"], true);
        assert_eq!(v["granule"], "2m", "{sem}: {}", v["path"]);
        assert!(v["path"].as_str().unwrap().contains("[2m"), "{}", v["path"]);
        assert_eq!(v["cpu_copied_bytes"], 0, "{sem}: {}", v["path"]);
    }
    // Overwritten from another thread during every output: TCOW at 2 MiB, its copies counted.
    let v = transfer(None, "emulated-copy", &["--overwrite-during-output"]);
    assert_eq!(v["verified"], true, "{v}");
    // The per-message figure is the total over 20, rounded down.
    let (per, tcow) = (
        v["cpu_copied_bytes"].as_u64().unwrap(),
        v["tcow_copied_bytes"].as_u64().unwrap(),
    );
    assert!(tcow > 0, "{v}");
    assert_eq!(per, tcow / 20, "{v}");
}

#[test]
fn where_huge_pages_are_off_the_4k_paths_carry_the_data_and_say_why() {
    for sem in ["emulated-copy", "emulated-share", "emulated-move"] {
        let v = transfer(Some(("ZCIO_VM_DISABLE", "huge")), sem, &[]);
        assert_eq!(v["verified"], true, "{v}");
        assert_ne!(v["granule"], "2m", "{sem}: {}", v["path"]);
        if sem == "emulated-copy" {
            assert!(
                v["path"]
                    .as_str()
                    .unwrap()
                    .contains("huge pages disabled by ZCIO_VM_DISABLE"),
                "{}",
                v["path"]
            );
        }
    }
}

#[test]
fn a_receiver_reading_into_buffers_in_turn_gets_every_message_in_its_buffer() {
    if let Some(why) = zcio_vm::huge::unavailable_reason() {
        zcio_vm::skip::skip(zcio_vm::skip::Capability::HugePages, &why);
        return;
    }
    // Twenty messages into three buffers in turn: every buffer is swapped into (emulated
    // copy) or read in place (emulated share) several times, and each message is checked in
    // the buffer it arrived in.
    for sem in ["emulated-copy", "emulated-share"] {
        let v = transfer(None, sem, &["--receiver-buffers", "3"]);
        assert_eq!(v["verified"], true, "{sem}: {v}");
        assert_eq!(v["granule"], "2m", "{sem}: {}", v["path"]);
        assert_eq!(v["cpu_copied_bytes"], 0, "{sem}: {}", v["path"]);
    }
    let out = common::zcio()
        .args(["transfer", "--semantics", "copy", "--bytes", "4096"])
        .args(["--receiver-buffers", "17"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`--receiver-buffers`: 17"), "{err}");
}
