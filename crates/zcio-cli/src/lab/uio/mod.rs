//! Paper 004 (UIO): concurrent SQLite scans by kernel I/O and by user-level I/O.

pub mod claims;
pub mod devices;
pub mod discussion;
pub mod measure;
pub mod per_device;
mod print;
pub mod raw;
pub mod render;
pub mod shell;

use crate::lab::{Experiment, ReportParts};
use crate::report::preset::Preset;
use crate::transfer::Res;

/// Figures 5-9 of paper 004.
pub struct Uio;

/// A section of `rows` (as `results.json` holds them), its other fields fixed: what the
/// section's unit tests render and judge.
#[cfg(test)]
pub(crate) fn section_of(rows: Vec<serde_json::Value>) -> measure::UioSection {
    serde_json::from_value(serde_json::json!({
        "rows_per_table": 60000, "table_bytes": 1, "rounds": 1, "chunk": 131072,
        "depth": 4, "direct": true, "direct_refused": null, "table_devices": 1,
        "table_fs": "ext4", "result_rows": 6, "rows": rows, "breakdown": [],
        "primitives": {"copy_ns_per_kib": 1.0, "pread_ns": 1.0}, "raw": [],
        "fio_skipped": null,
    }))
    .expect("a section")
}

impl Experiment for Uio {
    const ID: &'static str = "uio";
    const PAPER: &'static str = "004";
    const TITLE: &'static str = "Figures 5-9: N concurrent SQLite scans of Wisconsin tables by kernel I/O and by user-level I/O (ring or system-call initiation, registered or per-request buffers, the engine's own buffer pool on the layer), warm and cold; the kernel's CPU split; fio beside the layer";
    const ABOUT: &'static str =
        "Paper 004's experiment, when it ran: what `zcio bench uio --json` prints.";
    type Plan = crate::lab::uio::measure::UioArgs;
    type Section = crate::lab::uio::measure::UioSection;

    fn plan(preset: Preset) -> Self::Plan {
        match preset {
            Preset::Smoke => crate::lab::uio::measure::UioArgs {
                rows: Some(10_001),
                queries: Some(vec![1, 2]),
                rounds: Some(1),
                cache: Some(vec!["warm".into()]),
                ..Default::default()
            },
            Preset::Quick => crate::lab::uio::measure::UioArgs::default(),
            Preset::Full => crate::lab::uio::measure::UioArgs {
                rows: Some(500_000),
                rounds: Some(5),
                ..Default::default()
            },
        }
    }

    fn units(plan: &Self::Plan) -> u64 {
        plan.steps() as u64 + 16
    }

    fn measure(plan: &Self::Plan, bar: &indicatif::ProgressBar) -> Res<Self::Section> {
        crate::lab::uio::measure::measure(plan, &mut crate::progress(bar))
    }

    const REPORT: ReportParts = ReportParts {
        findings: render::findings,
        claims: claims::claims,
        render: render::blocks,
    };
}
