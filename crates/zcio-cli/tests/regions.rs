//! `zcio transfer --no-recycle`: the move family's regions made anew and unmapped per message
//! instead of circulating through the region caches; every byte still arrives.

mod common;

use common::{json_of, zcio};

/// The input phase's region operations one transfer's breakdown counted, by name.
fn input_ops(semantics: &str, no_recycle: bool) -> (serde_json::Value, Vec<String>) {
    let mut cmd = zcio();
    cmd.args([
        "transfer",
        "--semantics",
        semantics,
        "--bytes",
        "65536",
        "--count",
        "12",
        "--breakdown",
        "--json",
    ]);
    if no_recycle {
        cmd.arg("--no-recycle");
    }
    let v = json_of(&cmd.output().unwrap());
    let ops = v["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["phase"] == "input" && o["share_of_messages"] == 1.0)
        .map(|o| o["op"].as_str().unwrap().to_string())
        .collect();
    (v, ops)
}

#[test]
fn without_recycling_every_input_region_is_made_anew_and_every_byte_arrives() {
    for sem in ["emulated-move", "emulated-weak-move", "weak-move"] {
        let (v, ops) = input_ops(sem, false);
        assert_eq!(v["verified"], true, "{sem}: {v}");
        assert!(
            ops.iter().any(|o| o == "region-check") && !ops.iter().any(|o| o == "region-create"),
            "{sem}, recycled: every input region from the cache: {ops:?}"
        );
        let (v, ops) = input_ops(sem, true);
        assert_eq!(v["verified"], true, "{sem}: {v}");
        assert!(
            ops.iter().any(|o| o == "region-create") && !ops.iter().any(|o| o == "region-check"),
            "{sem}, made anew: every input region created: {ops:?}"
        );
    }
}
