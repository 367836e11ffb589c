//! The report's rendering, end to end: a sample document written to disk and opened in headless
//! Chromium. Skips with a reason when there is no Chromium.
//!
//! Set `ZCIO_SAMPLE_OUT=<dir>` to keep the sample report in `<dir>`, with a screenshot of the page
//! in `<dir>/screenshot.png`.

use std::path::{Path, PathBuf};
use zcio_cli::report::doc::{self, Block, BrowserCheckError, Doc, Figure, Table};
use zcio_cli::report::plot::{Chart, Scale, Series, Style};

const SEMANTICS: [&str; 8] = [
    "copy",
    "emulated copy",
    "share",
    "emulated share",
    "move",
    "emulated move",
    "weak move",
    "emulated weak move",
];

/// Latency against length for the eight semantics: fixed cost plus a per-byte cost, with a
/// spread of ±8 %.
fn latency_chart() -> Chart {
    let lengths: Vec<f64> = (0..=10).map(|i| 4f64.powi(i)).collect();
    let series = SEMANTICS
        .iter()
        .enumerate()
        .map(|(k, name)| {
            let fixed = 20.0 + 6.0 * k as f64;
            let per_byte = 0.0004 * (8 - k) as f64 + 0.00005;
            let points: Vec<(f64, f64)> =
                lengths.iter().map(|&l| (l, fixed + per_byte * l)).collect();
            let band = points
                .iter()
                .map(|&(l, y)| (l, y * 0.92, y * 1.08))
                .collect();
            Series {
                name: (*name).to_owned(),
                points,
                style: Style::Line,
                band: Some(band),
                color: None,
            }
        })
        .collect();
    Chart {
        title: "Latency by message length".to_owned(),
        x_label: "message length (bytes)".to_owned(),
        y_label: "latency (µs)".to_owned(),
        x_scale: Scale::Log,
        y_scale: Scale::Log,
        series,
    }
}

/// Throughput, measured and modelled (dashed).
fn throughput_chart() -> Chart {
    let mut series = Vec::new();
    for (k, name) in ["copy", "move", "share"].iter().enumerate() {
        let peak = 400.0 * (k + 1) as f64;
        let measured: Vec<(f64, f64)> = (1..=16)
            .map(|i| {
                let kib = f64::from(i) * 64.0;
                (
                    kib,
                    peak * kib / (kib + 150.0) * (1.0 + 0.03 * (f64::from(i) * 1.7).sin()),
                )
            })
            .collect();
        let model = (1..=16)
            .map(|i| {
                let kib = f64::from(i) * 64.0;
                (kib, peak * kib / (kib + 150.0))
            })
            .collect();
        series.push(Series {
            name: format!("{name} (measured)"),
            points: measured,
            style: Style::Line,
            band: None,
            color: None,
        });
        series.push(Series {
            name: format!("{name} (model)"),
            points: model,
            style: Style::Dashed,
            band: None,
            color: None,
        });
    }
    Chart {
        title: "Throughput by message length".to_owned(),
        x_label: "message length (KiB)".to_owned(),
        y_label: "throughput (MB/s)".to_owned(),
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        series,
    }
}

/// Scattered samples.
fn samples_chart() -> Chart {
    let series = (0..3)
        .map(|k| Series {
            name: format!("run {}", k + 1),
            points: (0..40)
                .map(|i| {
                    let x = f64::from(i) * 0.25;
                    (
                        x,
                        2.0 + f64::from(k) + (x * (1.3 + f64::from(k))).sin() * 0.6,
                    )
                })
                .collect(),
            style: Style::Points,
            band: None,
            color: None,
        })
        .collect();
    Chart {
        title: "Page-fault cost samples".to_owned(),
        x_label: "time (s)".to_owned(),
        y_label: "fault cost (µs)".to_owned(),
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        series,
    }
}

fn sample_doc() -> Doc {
    let heading = |level, text: &str| Block::Heading {
        level,
        text: text.to_owned(),
        id: None,
    };
    let figure = |stem: &str, caption: &str, chart| {
        Block::Figure(Figure {
            file_stem: stem.to_owned(),
            caption: caption.to_owned(),
            chart,
        })
    };
    Doc {
        title: "zcio report (sample)".to_owned(),
        blocks: vec![
            heading(1, "zcio report (sample)"),
            Block::Para(
                "A sample of every kind of block, with made-up numbers: <this> & \"that\" are \
                 escaped."
                    .to_owned(),
            ),
            heading(2, "Machine"),
            Block::List(vec![
                "CPU: 2 cores".to_owned(),
                "page size: 4096 bytes".to_owned(),
                "kernel: Linux | 6.x".to_owned(),
            ]),
            Block::Table(Table {
                caption: Some("Fixed costs (µs)".to_owned()),
                header: vec![
                    "semantics".to_owned(),
                    "paper".to_owned(),
                    "here".to_owned(),
                ],
                rows: SEMANTICS
                    .iter()
                    .enumerate()
                    .map(|(k, s)| {
                        vec![
                            (*s).to_owned(),
                            format!("{:.1}", 18.0 + 5.5 * k as f64),
                            format!("{:.1}", 20.0 + 6.0 * k as f64),
                        ]
                    })
                    .collect(),
                links: vec![Some("latency".to_owned())],
            }),
            heading(2, "Latency"),
            figure(
                "latency",
                "Latency of the eight semantics against message length; bars show the spread.",
                latency_chart(),
            ),
            heading(3, "Throughput"),
            figure(
                "throughput",
                "Measured throughput (solid) and the fitted model (dashed).",
                throughput_chart(),
            ),
            heading(3, "Samples"),
            figure("samples", "Individual page-fault samples.", samples_chart()),
            heading(2, "How to reproduce"),
            Block::Code("cargo run --release -- report --out report/\n".to_owned()),
        ],
    }
}

/// Where to write the report: `$ZCIO_SAMPLE_OUT` (kept), else a temporary directory.
fn out_dir() -> (Option<tempfile::TempDir>, PathBuf) {
    match std::env::var_os("ZCIO_SAMPLE_OUT") {
        Some(dir) => (None, PathBuf::from(dir)),
        None => {
            let tmp = tempfile::tempdir().unwrap();
            let path = tmp.path().to_owned();
            (Some(tmp), path)
        }
    }
}

fn skip(e: &BrowserCheckError) -> bool {
    if matches!(e, BrowserCheckError::NoBrowser { .. }) {
        zcio_vm::skip::skip(
            zcio_vm::skip::Capability::Chromium,
            &format!("no Chromium on this machine (install chromium): {e}"),
        );
        true
    } else {
        false
    }
}

#[test]
fn sample_report_renders_in_a_browser() {
    let (_keep, dir) = out_dir();
    let doc = sample_doc();
    doc::write_all(&doc, &dir).unwrap();

    let md = std::fs::read_to_string(dir.join("REPORT.md")).unwrap();
    let html_path = dir.join("index.html");
    assert!(html_path.is_file());
    for stem in ["latency", "throughput", "samples"] {
        let file = format!("plots/{stem}.svg");
        assert!(
            md.contains(&format!("]({file})")),
            "REPORT.md does not show {file}"
        );
        let svg = std::fs::read_to_string(dir.join(&file)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{file}"
        );
    }

    let screenshot = std::env::var_os("ZCIO_SAMPLE_OUT").map(|_| dir.join("screenshot.png"));
    let check = match doc::browser_check(&html_path, screenshot.as_deref()) {
        Ok(check) => check,
        Err(e) if skip(&e) => return,
        Err(e) => panic!("{e}"),
    };
    println!("{check:?}");
    assert_eq!(check.images, 3, "{check:?}");
    assert!(check.broken.is_empty(), "broken images: {:?}", check.broken);
    assert!(check.errors.is_empty(), "page errors: {:?}", check.errors);
    assert!(check.is_ok());
}

#[test]
fn broken_pages_fail_the_check() {
    let tmp = tempfile::tempdir().unwrap();
    let page = tmp.path().join("index.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>bad</title></head><body>\
         <img src=\"data:image/svg+xml;base64,AAAA\" alt=\"the broken one\">\
         <script>throw new Error(\"x\")</script></body></html>",
    )
    .unwrap();
    let check = match doc::browser_check(&page, None) {
        Ok(check) => check,
        Err(e) if skip(&e) => return,
        Err(e) => panic!("{e}"),
    };
    println!("{check:?}");
    assert_eq!(check.images, 1);
    assert_eq!(check.broken, ["the broken one"]);
    assert!(check.errors.iter().any(|e| e.contains('x')), "{check:?}");
    assert!(!check.is_ok());
}

#[test]
fn missing_pages_are_io_errors() {
    let missing = Path::new("/nonexistent/zcio/index.html");
    match doc::browser_check(missing, None) {
        Err(BrowserCheckError::Io { .. }) => {}
        Err(e) if skip(&e) => {}
        other => panic!("{other:?}"),
    }
}
