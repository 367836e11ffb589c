//! Paper 004 (UIO): concurrent SQLite scans by kernel I/O and by user-level I/O.

pub mod claims;
pub mod devices;
pub mod discussion;
pub mod measure;
pub mod per_device;
mod print;
pub mod raw;
pub mod render;

use crate::lab::{Experiment, ReportParts};
use crate::report::preset::Preset;
use crate::transfer::Res;

/// Figures 5-9 of paper 004.
pub struct Uio;

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
