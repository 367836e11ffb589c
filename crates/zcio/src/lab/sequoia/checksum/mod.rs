//! Paper 003's Internet checksum: kernels against memory bandwidth and crates.io peers, and checksums end to end.

use crate::lab::Experiment;
use crate::report::doc::Block;
use crate::report::preset::Preset;
use crate::report::results::Results;
use crate::transfer::Res;

/// Figures 6-7 of paper 003.
pub struct Checksum;

impl Experiment for Checksum {
    const ID: &'static str = "checksum";
    const PAPER: &'static str = "003";
    const TITLE: &'static str = "Figures 6-7: Internet checksum kernels against memory bandwidth and crates.io peers; naive, optimized and elided checksums end to end";
    type Plan = crate::checksum_bench::ChecksumArgs;
    type Section = crate::checksum_bench::ChecksumSection;

    fn plan(preset: Preset) -> Self::Plan {
        match preset {
            Preset::Smoke => crate::checksum_bench::ChecksumArgs {
                sizes: vec![64, 4096, 1 << 20],
                rounds: Some(2),
                millis: Some(2),
                datagram_sizes: vec![1472],
                json: false,
            },
            Preset::Quick => crate::checksum_bench::ChecksumArgs::default(),
            Preset::Full => crate::checksum_bench::ChecksumArgs {
                rounds: Some(15),
                millis: Some(50),
                ..Default::default()
            },
        }
    }

    fn units(plan: &Self::Plan) -> u64 {
        crate::checksum_bench::units(plan) as u64
    }

    fn measure(plan: &Self::Plan, bar: &indicatif::ProgressBar) -> Res<Self::Section> {
        crate::checksum_bench::measure(plan, &mut |m| {
            bar.set_message(m);
            bar.inc(1);
        })
    }

    fn store(results: &mut Results, section: Self::Section) {
        results.checksum = Some(section);
    }

    fn findings(results: &Results) -> Vec<String> {
        crate::report::checksum_doc::findings(results)
    }

    fn render(results: &Results) -> Vec<Block> {
        crate::report::checksum_doc::blocks(results)
    }
}
