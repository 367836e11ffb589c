//! `zcio bench containers` end to end, tiny: every variant ran through real relay and display
//! processes, on pipelines of one and two relays, every frame's number was checked at the
//! display and the last frame whole, and every process said its CPU time. Speeds are never
//! compared: the machine decides them.

mod common;

use common::{bench_json, strings};

#[test]
fn bench_containers_json_has_every_variant() {
    let v = bench_json(
        "containers",
        &["--frames", "20", "--rounds", "1", "--relays", "1,2"],
    );
    let rows = v["rows"].as_array().unwrap();
    let names = strings(&v["rows"], "variant");
    let variants = [
        "read_write",
        "containers",
        "containers_unmapped",
        "containers_pooled",
        "containers_pooled_copy",
        "containers_pooled_copy_unmapped",
        "volatile",
        "volatile_unmapped",
    ];
    assert_eq!(names, [variants, variants].concat());
    assert_eq!(v["in_flight"], 8);
    for (k, r) in rows.iter().enumerate() {
        assert_eq!(r["frames"], 20);
        assert_eq!(r["relays"], 1 + k / variants.len());
        let cpu = r["cpu_us_per_frame"].as_f64().unwrap();
        assert!(cpu.is_finite() && cpu > 0.0, "{r}");
        let fps = r["fps"].as_f64().unwrap();
        assert!(fps.is_finite() && fps > 0.0, "{r}");
        assert!((r["animations"].as_f64().unwrap() - fps / 30.0).abs() < 1e-9);
        // One round: the processes' parts are the whole; only a pooled sender has a pool.
        let part = |k: &str| r["cpu_parts_us"][k].as_f64().unwrap();
        let sum = part("sender") + part("pool") + part("relays") + part("display");
        assert!((sum - cpu).abs() < 1e-6 * cpu, "{r}");
        let pooled = r["variant"]
            .as_str()
            .unwrap()
            .starts_with("containers_pooled");
        assert_eq!(part("pool") > 0.0, pooled, "{r}");
    }
}
