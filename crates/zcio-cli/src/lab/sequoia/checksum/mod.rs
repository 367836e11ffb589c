//! Paper 003's Internet checksum: kernels against memory bandwidth and crates.io peers, and checksums end to end.

pub mod claims;
pub mod measure;
pub mod render;

use crate::lab::{Experiment, ReportParts};
use crate::report::preset::Preset;
use crate::transfer::Res;

/// Figures 6-7 of paper 003.
pub struct Checksum;

impl Experiment for Checksum {
    const ID: &'static str = "checksum";
    const PAPER: &'static str = "003";
    const TITLE: &'static str = "Figures 6-7: Internet checksum kernels against memory bandwidth and crates.io peers; naive, optimized and elided checksums end to end";
    const ABOUT: &'static str =
        "Paper 003's checksum, when its experiment ran: what `zcio bench checksum --json` prints.";
    type Plan = crate::lab::sequoia::checksum::measure::ChecksumArgs;
    type Section = crate::lab::sequoia::checksum::measure::ChecksumSection;

    fn plan(preset: Preset) -> Self::Plan {
        match preset {
            Preset::Smoke => crate::lab::sequoia::checksum::measure::ChecksumArgs {
                sizes: vec![64, 4096, 1 << 20],
                rounds: Some(2),
                millis: Some(2),
                datagram_sizes: vec![1472],
                json: false,
            },
            Preset::Quick => crate::lab::sequoia::checksum::measure::ChecksumArgs::default(),
            Preset::Full => crate::lab::sequoia::checksum::measure::ChecksumArgs {
                rounds: Some(15),
                millis: Some(50),
                ..Default::default()
            },
        }
    }

    fn units(plan: &Self::Plan) -> u64 {
        crate::lab::sequoia::checksum::measure::units(plan) as u64
    }

    fn measure(plan: &Self::Plan, bar: &indicatif::ProgressBar) -> Res<Self::Section> {
        crate::lab::sequoia::checksum::measure::measure(plan, &mut crate::progress(bar))
    }

    const REPORT: ReportParts = ReportParts {
        findings: render::findings,
        claims: claims::claims,
        render: render::blocks,
    };
}
