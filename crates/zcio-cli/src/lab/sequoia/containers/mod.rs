//! Paper 003's frame experiment: frames through relay processes to a display, by sealed and volatile containers and by read/write.

pub mod claims;
pub mod frame;
pub mod measure;
pub mod render;

use crate::lab::{Experiment, ReportParts};
use crate::report::preset::Preset;
use crate::transfer::Res;

/// Figure 4 of paper 003.
pub struct Containers;

impl Experiment for Containers {
    const ID: &'static str = "containers";
    const PAPER: &'static str = "003";
    const TITLE: &'static str = "Figure 4: 640x480 (and 1920x1080x4) frames through pipelines of relay processes to a display process, by sealed and volatile containers and by read/write";
    const KEY: &'static str = "frames";
    const ABOUT: &'static str =
        "Paper 003's frame experiment, when it ran: what `zcio bench containers --json` prints.";
    type Plan = crate::lab::sequoia::containers::measure::FramesArgs;
    type Section = crate::lab::sequoia::containers::measure::FramesSection;

    fn plan(preset: Preset) -> Self::Plan {
        match preset {
            Preset::Smoke => crate::lab::sequoia::containers::measure::FramesArgs {
                frames: Some(20),
                rounds: Some(1),
                relays: Some(vec![1, 2]),
                frame_sizes: None,
                shmem_policy: None,
                json: false,
            },
            // The sealed variants in 4 KiB pages are also measured with large folios for memory files, where
            // zcio may set the policy (root) for their runs.
            Preset::Quick => crate::lab::sequoia::containers::measure::FramesArgs {
                shmem_policy: Some(zcio_vm::shmem::ShmemPolicy::WithinSize),
                ..Default::default()
            },
            Preset::Full => crate::lab::sequoia::containers::measure::FramesArgs {
                frames: Some(3000),
                rounds: Some(7),
                relays: Some(vec![1, 2, 3]),
                frame_sizes: None,
                shmem_policy: Some(zcio_vm::shmem::ShmemPolicy::WithinSize),
                json: false,
            },
        }
    }

    fn units(plan: &Self::Plan) -> u64 {
        plan.runs() as u64
    }

    fn measure(plan: &Self::Plan, bar: &indicatif::ProgressBar) -> Res<Self::Section> {
        crate::lab::sequoia::containers::measure::measure(plan, &mut crate::progress(bar))
    }

    const REPORT: ReportParts = ReportParts {
        findings: render::frames_findings,
        claims: claims::claims,
        render: render::frames_blocks,
    };
}
