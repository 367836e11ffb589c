//! Paper 003's peer-to-peer I/O: splice against a read/write loop.

pub mod claims;
pub mod ends;
pub mod measure;
mod paced;
pub mod render;
pub mod stream;

use crate::lab::{Experiment, ReportParts};
use crate::report::preset::Preset;
use crate::transfer::Res;

/// Paper 003's peer-to-peer I/O.
pub struct Splice;

impl Experiment for Splice {
    const ID: &'static str = "splice";
    const PAPER: &'static str = "003";
    const TITLE: &'static str = "Peer-to-peer I/O: splice against a read/write loop, file to socket, file to file, socket to file: throughput, latency, CPU availability";
    const ABOUT: &'static str = "Paper 003's peer-to-peer I/O, when its experiment ran: what `zcio bench splice --json`\nprints.";
    type Plan = crate::lab::sequoia::splice::measure::SpliceArgs;
    type Section = crate::lab::sequoia::splice::measure::SpliceSection;

    fn plan(preset: Preset) -> Self::Plan {
        match preset {
            Preset::Smoke => crate::lab::sequoia::splice::measure::SpliceArgs {
                mib: Some(2),
                rounds: Some(1),
                seconds: Some(0.05),
                ..Default::default()
            },
            Preset::Quick => crate::lab::sequoia::splice::measure::SpliceArgs::default(),
            Preset::Full => crate::lab::sequoia::splice::measure::SpliceArgs {
                mib: Some(256),
                rounds: Some(9),
                seconds: Some(2.0),
                ..Default::default()
            },
        }
    }

    fn units(plan: &Self::Plan) -> u64 {
        plan.steps()
    }

    fn measure(plan: &Self::Plan, bar: &indicatif::ProgressBar) -> Res<Self::Section> {
        crate::lab::sequoia::splice::measure::measure(plan, &mut crate::progress(bar))
    }

    const REPORT: ReportParts = ReportParts {
        findings: render::splice_findings,
        claims: claims::claims,
        render: render::splice_blocks,
    };
}
