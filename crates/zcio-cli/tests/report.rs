//! `zcio report` end to end (a smoke-sized run: every experiment at a few points), its JSON
//! schema, `zcio bench genie`, and the command line's help and errors.

mod common;

use common::{FBUFS_TWO_SIZES, failure, json_of, read_json, run, strings, succeeded, zcio};
use std::path::Path;
use std::process::Output;

fn schema_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/results.schema.json")
}

/// `zcio report --from <from> --out <out>` run to its end.
fn report_from(from: &Path, out: &Path) -> Output {
    zcio()
        .args(["report", "--from"])
        .arg(from)
        .arg("--out")
        .arg(out)
        .output()
        .unwrap()
}

/// A smoke-sized `zcio report` of genie-short alone into `out`, run to its end with the machine's
/// profile at `profile`.
fn genie_short_with_profile(profile: &Path, out: &Path) -> Output {
    zcio()
        .env("ZCIO_PROFILE", profile)
        .args(["report", "--smoke", "--only", "genie-short", "--out"])
        .arg(out)
        .output()
        .unwrap()
}

#[test]
fn the_committed_schema_is_the_one_the_code_writes() {
    let out = zcio().args(["report", "--schema"]).output().unwrap();
    assert!(out.status.success());
    let generated: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let committed: serde_json::Value = read_json(&schema_path());
    assert_eq!(
        generated, committed,
        "schema/results.schema.json is stale: regenerate it with `zcio report --schema`"
    );
}

#[test]
fn smoke_report_writes_every_output_and_validates() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let r = zcio()
        .args(["report", "--smoke", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    succeeded(&r);
    for f in ["index.html", "REPORT.md", "results.json"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    // results.json against its schema.
    let results: serde_json::Value = read_json(&out.join("results.json"));
    let schema: serde_json::Value = read_json(&schema_path());
    let v = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = v.iter_errors(&results).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "results.json does not validate: {errors:?}"
    );
    // A document the schema rejects: the check can fail.
    let mut broken = results.clone();
    broken["machine"]["logical_cpus"] = "two".into();
    assert!(!v.is_valid(&broken));

    // Every experiment ran and measured something real.
    assert_eq!(results["schema"], "zcio-report/1");
    let ids: Vec<&str> = strings(&results["experiments"], "id");
    for id in [
        "genie-latency",
        "genie-short",
        "genie-cpu",
        "genie-modules",
        "genie-bandwidth",
        "genie-throughput",
        "genie-huge",
        "genie-regions",
        "fbufs-table1",
        "vmmr",
    ] {
        assert!(ids.contains(&id), "{id} did not run: {ids:?}");
    }
    // Paper 002: every series measured, every time positive.
    let vm = &results["vmmr"];
    assert!(!vm["rows"].as_array().unwrap().is_empty());
    for r in vm["rows"].as_array().unwrap() {
        for case in ["no_search", "minimal_search", "worst_case_search"] {
            assert!(r["vmmr_ns"][case].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    assert!(!vm["random"].as_array().unwrap().is_empty());
    // Paper 001: 10 contenders (the device-originated pair among them) and iceoryx2 × 2
    // touch patterns × 2 sizes, and a per-page fit for each.
    assert_eq!(
        results["fbufs"]["rows"].as_array().unwrap().len(),
        11 * 2 * 2
    );
    assert_eq!(results["fbufs"]["fits"].as_array().unwrap().len(), 11 * 2);
    let g = &results["genie"];
    let r = &g["results"];
    // 8 semantics × 3 input schemes + emulated copy calibrated, at each of 2 lengths.
    assert_eq!(r["latency"].as_array().unwrap().len(), 25 * 2);
    for key in ["latency", "short", "cpu", "modules"] {
        for p in r[key].as_array().unwrap() {
            assert_eq!(p["verified"], true, "{key}: {p}");
            assert!(p["latency_ns"].as_f64().unwrap() > 0.0);
            for run in p["runs"].as_array().unwrap() {
                assert!(!run["latencies_ns"].as_array().unwrap().is_empty());
            }
        }
    }
    // The move family with regions recycled and made anew: four semantics each, every byte.
    for half in ["recycled", "fresh"] {
        let pts = r["regions"][half].as_array().unwrap();
        assert_eq!(pts.len(), 4, "{half}");
        for p in pts {
            assert_eq!(p["verified"], true, "{half}: {p}");
        }
    }
    // Copy semantics copies each byte once at each end; emulated share never in user space.
    let at = |sem: &str, input: &str| {
        r["latency"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["semantics"] == sem && p["input"] == input && p["bytes"] == 16384)
            .unwrap()
            .clone()
    };
    assert_eq!(at("copy", "early-demux")["cpu_copied_bytes"], 2 * 16384);
    assert_eq!(at("emulated-share", "early-demux")["cpu_copied_bytes"], 0);
    // Emulated copy swaps the pages in where the kernel can move pages, else copies them out.
    let ec = at("emulated-copy", "early-demux");
    if results["machine"]["features"]["vm"]["swap"] == true {
        assert_eq!(ec["swapped_bytes"], 16384, "{ec}");
    } else {
        assert_eq!(ec["swapped_bytes"], 0, "{ec}");
        assert!(ec["cpu_copied_bytes"].as_u64().unwrap() >= 16384, "{ec}");
    }
    // The instrumented runs recorded the primitives the model is fitted on.
    let prims: Vec<&str> = strings(&g["model"]["primitives"], "op");
    for op in [
        "copyin",
        "copyout",
        "reference",
        "read-only",
        "region-create",
        "region-fill",
    ] {
        assert!(prims.contains(&op), "{op} not fitted: {prims:?}");
    }
    // Swapping is recorded exactly where the kernel can move pages.
    let swaps = results["machine"]["features"]["vm"]["swap"] == true;
    assert_eq!(prims.contains(&"swap"), swaps, "{prims:?}");
    assert!(g["model"]["base"].is_object());
    assert_eq!(g["model"]["estimates"].as_array().unwrap().len(), 24);
    assert!(!g["model"]["classification"].as_array().unwrap().is_empty());
    assert!(!g["model"]["projections"].as_array().unwrap().is_empty());
    assert_eq!(g["model"]["throughput"].as_array().unwrap().len(), 3);
    // The paper's three conclusions, and the same three at 2 MiB where huge pages can be had.
    let conclusions: Vec<&str> = strings(&g["conclusions"], "id");
    match r["huge_unavailable"].as_str() {
        None => {
            assert_eq!(conclusions.len(), 6, "{conclusions:?}");
            for id in [
                "copy-inferior-2m",
                "non-copy-cluster-2m",
                "emulated-copy-near-share-2m",
            ] {
                assert!(conclusions.contains(&id), "{id}: {conclusions:?}");
            }
            // 8 semantics + emulated copy calibrated at 2 MiB, every one on huge pages, every
            // message checked; and the CPU-time series.
            let huge = r["huge"].as_array().unwrap();
            assert_eq!(
                huge.len(),
                9 + 2 * 8,
                "Figure 3 and Figures 6 and 7 at 2 MiB"
            );
            for pt in huge {
                assert_eq!(pt["verified"], true, "{pt}");
                assert_eq!(pt["bytes"], 2 << 20);
                // With the VM paths forced, every semantics but copy works on the huge pages.
                if pt["thresholds"] == "zero-copy"
                    && pt["semantics"] != "copy"
                    && pt["input"] != "pooled-unaligned"
                {
                    assert_eq!(pt["granule"], "2m", "{}: {}", pt["semantics"], pt["path"]);
                }
            }
            assert_eq!(r["huge_cpu"].as_array().unwrap().len(), 8);
        }
        Some(why) => {
            eprintln!("the 2 MiB series was not measured: {why}");
            assert_eq!(conclusions.len(), 3, "{conclusions:?}");
        }
    }
    assert!(r["bandwidths"]["wire_gbps"].as_f64().unwrap() > 0.0);

    // Every plot the Markdown names exists and is an SVG; the HTML holds them inline.
    let md = std::fs::read_to_string(out.join("REPORT.md")).unwrap();
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    let mut plots = 0;
    for entry in std::fs::read_dir(out.join("plots")).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().to_string();
        assert!(
            md.contains(&format!("plots/{name}")),
            "{name} not in REPORT.md"
        );
        assert!(std::fs::read_to_string(&p).unwrap().contains("<svg"));
        plots += 1;
    }
    assert!(plots >= 6, "{plots} plots");
    for stem in [
        "vmmr-fig4-scattered",
        "vmmr-2m",
        "vmmr-fig8",
        "vmmr-fig9",
        "vmmr-fig10",
        "vmmr-adaptive",
        "checksum-kernels",
        "frames",
        "uio-scaling-warm",
    ] {
        assert!(
            md.contains(&format!("plots/{stem}.svg")),
            "{stem} not in REPORT.md"
        );
    }
    // Paper 004's per-device series: its figure, or why it is missing in the section's text.
    let devices = &results["uio"]["devices"];
    match devices["missing"].as_str() {
        None => {
            assert_eq!(devices["placement"], "loop-memory", "{devices}");
            assert!(
                md.contains("plots/uio-devices-warm.svg"),
                "no per-device figure"
            );
            assert!(
                md.contains("in the per-device series each is on an ext4 file system of its own")
            );
        }
        Some(why) => {
            assert!(md.contains("the per-device series (each table on a memory-backed loop device of its own) is missing: "));
            zcio_vm::skip::skip(
                zcio_vm::skip::Capability::LoopDevices,
                &format!("paper 004's per-device figure: {why}"),
            );
        }
    }
    assert_eq!(html.matches("data:image/svg+xml;base64,").count(), plots);
    for s in [
        "Claims and verdicts",
        "Table 6",
        "Table 9",
        "Table 10",
        "§8.2",
        "Paper 001",
        "Table 1:",
        "Paper 002",
        "Figure 4: reassembly time",
        "Figure 8",
        "Figures 9 and 10",
    ] {
        assert!(md.contains(s) && html.contains(s), "{s} missing");
    }
    assert!(md.find("Claims and verdicts") < md.find("Figure 3"));
    // The claims table opens the report: every row has a verdict and links to the section or
    // figure that shows it, whose anchor the page has.
    let rows: Vec<&str> = md
        .lines()
        .skip_while(|l| !l.starts_with("| claim |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert!(rows.len() >= 10, "{} claims", rows.len());
    for row in &rows {
        assert!(
            ["| agrees |", "| differs |", "| not measurable here |"]
                .iter()
                .any(|v| row.contains(v)),
            "{row}"
        );
        let anchor = &row[row.find("](#").expect(row) + 3..];
        let anchor = &anchor[..anchor.find(')').unwrap()];
        assert!(html.contains(&format!("id=\"{anchor}\"")), "{anchor}");
        assert!(md.contains(&format!("<a id=\"{anchor}\"></a>")), "{anchor}");
    }

    // Refitting from the raw samples alone reproduces the same models and documents.
    let again = dir.path().join("again");
    let r = report_from(&out.join("results.json"), &again);
    succeeded(&r);
    let refit: serde_json::Value = read_json(&again.join("results.json"));
    assert_eq!(refit["genie"]["model"], results["genie"]["model"]);
    assert_eq!(
        refit["genie"]["conclusions"],
        results["genie"]["conclusions"]
    );
    assert!(again.join("index.html").is_file());
    let r = report_from(&out.join("REPORT.md"), &again);
    assert!(!r.status.success());
    assert!(String::from_utf8_lossy(&r.stderr).contains("--from"));

    // The page in a real browser: every image loads, no script error.
    match zcio_cli::report::doc::browser_check(&out.join("index.html"), None) {
        Ok(c) => assert!(c.is_ok() && c.images == plots, "{c:?}"),
        Err(zcio_cli::report::doc::BrowserCheckError::NoBrowser { .. }) => zcio_vm::skip::skip(
            zcio_vm::skip::Capability::Chromium,
            "the browser check: no Chromium on this machine (install chromium)",
        ),
        Err(e) => panic!("browser check failed: {e}"),
    }
}

#[test]
fn a_machine_without_a_profile_is_calibrated_once_for_the_whole_run() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("fresh/profile.json");
    let out = dir.path().join("report");
    let r = genie_short_with_profile(&profile, &out);
    succeeded(&r);
    assert!(String::from_utf8_lossy(&r.stderr).contains("calibrating this machine"));
    assert!(profile.is_file(), "the calibration was not saved");
    let results: serde_json::Value = read_json(&out.join("results.json"));
    let used = &results["genie"]["profile"];
    assert_eq!(used["path"], profile.display().to_string());
    let saved: serde_json::Value = read_json(&profile);
    assert_eq!(used["profile"], saved);
    // The short-message runs (the ones the calibrated thresholds steer) all ran and verified.
    let short = results["genie"]["results"]["short"].as_array().unwrap();
    assert_eq!(short.len(), 8 * 3);
    for p in short {
        assert_eq!(p["verified"], true);
    }
    // A second run finds the profile and does not calibrate again.
    let r = genie_short_with_profile(&profile, &out);
    assert!(r.status.success());
    assert!(!String::from_utf8_lossy(&r.stderr).contains("calibrating this machine"));
}

#[test]
fn bench_genie_prints_fitted_lines_and_points() {
    let v = json_of(&run(&["bench", "genie", "--smoke", "--json"]));
    let cs = v["contenders"].as_array().unwrap();
    assert_eq!(cs.len(), 25);
    for c in cs {
        assert!(c["slope_ns_per_byte"].is_number(), "{c}");
        assert!(c["intercept_ns"].is_number(), "{c}");
        let pts = c["points"].as_array().unwrap();
        assert_eq!(pts.len(), 2);
        // The line is the least-squares line through its two points: it passes through both.
        for p in pts {
            let b = p["bytes"].as_f64().unwrap();
            let y =
                c["slope_ns_per_byte"].as_f64().unwrap() * b + c["intercept_ns"].as_f64().unwrap();
            let m = p["latency_ns"].as_f64().unwrap();
            assert!((y - m).abs() <= 1e-6 * m.max(1.0), "{c}");
            assert_eq!(p["verified"], true);
        }
    }
}

#[test]
fn help_is_complete_and_errors_name_the_argument() {
    let out = zcio().arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for sub in ["transfer", "report", "bench", "calibrate", "probe"] {
        assert!(help.contains(sub), "--help lacks {sub}: {help}");
    }
    let out = zcio().args(["report", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["--out", "--quick", "--full", "--only", "--list", "--schema"] {
        assert!(help.contains(flag), "report --help lacks {flag}");
    }
    let out = zcio().args(["bench", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("genie") && help.contains("memnet") && help.contains("vmmr"));

    let out = zcio()
        .args(["report", "--only", "no-such-experiment", "--out"])
        .arg(tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--only no-such-experiment") && err.contains("genie-latency"),
        "{err}"
    );

    assert!(failure(&run(&["report", "--quick", "--full"])).contains("--full"));

    assert!(
        failure(&run(&["transfer", "--semantics", "copy", "--bytes", "0"])).contains("--bytes")
    );

    // A length no mapping can hold is refused before any process starts, once, on stderr
    // (JSON on stdout only with --json).
    for json in [false, true] {
        let mut c = zcio();
        c.args(["transfer", "--semantics", "copy", "--bytes", "99999999999"]);
        if json {
            c.arg("--json");
        }
        let out = c.output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--bytes") && err.contains("99999999999") && !err.contains("pipe"),
            "{err}"
        );
        assert_eq!(err.lines().count(), 1, "{err}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        if json {
            let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
            assert!(v["error"].as_str().unwrap().contains("99999999999"), "{v}");
        } else {
            assert!(stdout.is_empty(), "{stdout}");
        }
    }

    assert!(
        failure(&run(&[
            "transfer",
            "--semantics",
            "teleport",
            "--bytes",
            "1"
        ]))
        .contains("teleport")
    );

    // An experiment selected alone brings what its model needs.
    let dir = tempfile::tempdir().unwrap();
    let out = zcio()
        .args(["report", "--smoke", "--only", "genie-throughput", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    succeeded(&out);
    let r: serde_json::Value = read_json(&dir.path().join("results.json"));
    let ids: Vec<&str> = strings(&r["experiments"], "id");
    assert_eq!(ids, ["genie-cpu", "genie-bandwidth", "genie-throughput"]);
    assert_eq!(
        r["genie"]["model"]["throughput"].as_array().unwrap().len(),
        3
    );

    let out = zcio().args(["report", "--list"]).output().unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("genie-throughput"));
}

#[test]
fn bench_fbufs_prints_per_page_costs_and_throughput_per_variant_and_size() {
    let v = json_of(&run(
        &[&["bench", "fbufs"], FBUFS_TWO_SIZES, &["--json"]].concat()
    ));
    let rows = v["rows"].as_array().unwrap();
    // 10 contenders (the device-originated pair among them) and iceoryx2 × 2 sizes × 2 touch
    // patterns.
    assert_eq!(rows.len(), 11 * 2 * 2);
    for r in rows {
        assert!(r["throughput_gbps"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["per_page_ns"].is_number(), "{r}");
        assert!(["word-per-page", "every-byte"].contains(&r["touch"].as_str().unwrap()));
    }
    let names: std::collections::BTreeSet<&str> =
        strings(&v["rows"], "variant").into_iter().collect();
    for n in [
        "fbufs-cached-volatile",
        "fbufs-volatile",
        "fbufs-cached",
        "fbufs",
        "fbufs-cached-volatile-via-server",
        "page-remap-memfd",
        "copy-unix-socket",
        "copy-pipe",
        "fbufs-from-socket",
        "socket-copied-into-fbufs",
        "iceoryx2",
    ] {
        assert!(names.contains(n), "{n} missing");
    }
    assert_eq!(v["fits"].as_array().unwrap().len(), 11 * 2);
    assert!(
        failure(&run(&["bench", "fbufs", "--contenders", "carrier-pigeon"]))
            .contains("carrier-pigeon")
    );
}
