//! Paper 003's peer-to-peer I/O: splice against a read/write loop.

use crate::lab::Experiment;
use crate::report::doc::Block;
use crate::report::preset::Preset;
use crate::report::results::Results;
use crate::transfer::Res;

/// Paper 003's peer-to-peer I/O.
pub struct Splice;

impl Experiment for Splice {
    const ID: &'static str = "splice";
    const PAPER: &'static str = "003";
    const TITLE: &'static str = "Peer-to-peer I/O: splice against a read/write loop, file to socket, file to file, socket to file: throughput, latency, CPU availability";
    type Plan = crate::splice_bench::SpliceArgs;
    type Section = crate::splice_bench::SpliceSection;

    fn plan(preset: Preset) -> Self::Plan {
        match preset {
            Preset::Smoke => crate::splice_bench::SpliceArgs {
                mib: Some(2),
                rounds: Some(1),
                seconds: Some(0.05),
                ..Default::default()
            },
            Preset::Quick => crate::splice_bench::SpliceArgs::default(),
            Preset::Full => crate::splice_bench::SpliceArgs {
                mib: Some(256),
                rounds: Some(9),
                seconds: Some(2.0),
                ..Default::default()
            },
        }
    }

    fn units(_plan: &Self::Plan) -> u64 {
        3
    }

    fn measure(plan: &Self::Plan, bar: &indicatif::ProgressBar) -> Res<Self::Section> {
        crate::splice_bench::measure(plan, &mut |m| {
            bar.set_message(m);
            bar.inc(1);
        })
    }

    fn store(results: &mut Results, section: Self::Section) {
        results.splice = Some(section);
    }

    fn findings(results: &Results) -> Vec<String> {
        crate::report::splice_doc::splice_findings(results)
    }

    fn render(results: &Results) -> Vec<Block> {
        crate::report::splice_doc::splice_blocks(results)
    }
}
