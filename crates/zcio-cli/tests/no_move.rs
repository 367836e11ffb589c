//! Where the kernel has userfaultfd write-protect but no `UFFDIO_MOVE` (Linux 5.7 to 6.7,
//! imitated with `ZCIO_VM_DISABLE=move`), emulated copy still keeps its promise with TCOW by
//! copy: a write during the output gets a copy of its page at once, never waits for the output,
//! and the copies are counted.

mod common;

use common::{json_of, zcio};

#[test]
fn without_uffdio_move_tcow_copies_and_no_write_waits() {
    let out = zcio()
        .args([
            "transfer",
            "--semantics",
            "emulated-copy",
            "--bytes",
            "1048576",
            "--count",
            "20",
            "--force-zero-copy",
            "--overwrite-during-output",
            "--json",
        ])
        .env("ZCIO_VM_DISABLE", "move")
        .output()
        .unwrap();
    let v = json_of(&out);
    assert_eq!(v["verified"], true, "{v}");
    assert_eq!(v["vm"]["tcow"], "UffdCopy", "{v}");
    let path = v["path"].as_str().unwrap();
    assert!(path.contains("copy: no UFFDIO_MOVE"), "{path}");
    assert!(v["tcow_copied_bytes"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["sleep_on_write"], 0, "a write waited for the output: {v}");
}
