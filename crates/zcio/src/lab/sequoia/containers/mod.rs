//! Paper 003's frame experiment: frames through relay processes to a display, by sealed and volatile containers and by read/write.

use crate::lab::Experiment;
use crate::report::doc::Block;
use crate::report::preset::Preset;
use crate::report::results::Results;
use crate::transfer::Res;

/// Figure 4 of paper 003.
pub struct Containers;

impl Experiment for Containers {
    const ID: &'static str = "containers";
    const PAPER: &'static str = "003";
    const TITLE: &'static str = "Figure 4: 640x480 frames through pipelines of relay processes to a display process, by sealed and volatile containers and by read/write";
    type Plan = crate::frames_bench::FramesArgs;
    type Section = crate::frames_bench::FramesSection;

    fn plan(preset: Preset) -> Self::Plan {
        match preset {
            Preset::Smoke => crate::frames_bench::FramesArgs {
                frames: Some(20),
                rounds: Some(1),
                relays: Some(vec![1, 2]),
                json: false,
            },
            Preset::Quick => crate::frames_bench::FramesArgs::default(),
            Preset::Full => crate::frames_bench::FramesArgs {
                frames: Some(3000),
                rounds: Some(7),
                relays: Some(vec![1, 2, 3]),
                json: false,
            },
        }
    }

    fn units(plan: &Self::Plan) -> u64 {
        plan.runs() as u64
    }

    fn measure(plan: &Self::Plan, bar: &indicatif::ProgressBar) -> Res<Self::Section> {
        crate::frames_bench::measure(plan, &mut |m| {
            bar.set_message(m);
            bar.inc(1);
        })
    }

    fn store(results: &mut Results, section: Self::Section) {
        results.frames = Some(section);
    }

    fn findings(results: &Results) -> Vec<String> {
        crate::report::splice_doc::frames_findings(results)
    }

    fn render(results: &Results) -> Vec<Block> {
        crate::report::splice_doc::frames_blocks(results)
    }
}
