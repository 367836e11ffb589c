//! Paper 001 (fbufs): fbuf variants against page remapping and copies, two processes.

pub mod bench;
pub mod claims;
pub mod iceoryx;
pub mod measure;
pub mod render;
pub mod stack;

use crate::lab::{Experiment, ReportParts};
use crate::report::preset::Preset;
use crate::report::results::FbufsSection;
use crate::transfer::Res;

/// Table 1 and Figure 3 of paper 001.
pub struct Fbufs;

impl Experiment for Fbufs {
    const ID: &'static str = "fbufs-table1";
    const PAPER: &'static str = "001";
    const TITLE: &'static str =
        "Table 1 and Figure 3: fbuf variants against page remapping and copies, two processes";
    const KEY: &'static str = "fbufs";
    const ABOUT: &'static str = "Paper 001 (fbufs), when its experiment ran.";
    type Plan = crate::lab::fbufs::measure::FbufsArgs;
    type Section = FbufsSection;

    fn plan(preset: Preset) -> Self::Plan {
        // 4 KiB to 64 MiB, by fours.
        let sweep: Vec<usize> = (0..8).map(|k| 4096 << (2 * k)).collect();
        let (sizes, rounds, volume) = match preset {
            Preset::Smoke => (vec![4096, 65536], 1, 1 << 20),
            Preset::Quick => (sweep, 2, 128 << 20),
            Preset::Full => (sweep, 5, 512 << 20),
        };
        crate::lab::fbufs::measure::FbufsArgs {
            sizes,
            contenders: Vec::new(),
            touch: vec!["word-per-page".into(), "every-byte".into()],
            rounds,
            volume,
            json: true,
            fault: None,
        }
    }

    fn measure(plan: &Self::Plan, bar: &indicatif::ProgressBar) -> Res<Self::Section> {
        let (rows, fits) = crate::lab::fbufs::measure::measure(plan, bar)?;
        Ok(FbufsSection {
            sizes: plan.sizes.clone(),
            rounds: plan.rounds,
            volume: plan.volume,
            rows,
            fits,
        })
    }

    const REPORT: ReportParts = ReportParts {
        findings: render::findings,
        claims: claims::claims,
        render: render::blocks,
    };
}
