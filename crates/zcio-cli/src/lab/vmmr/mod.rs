//! Paper 002 (VMMR): reassembly by moving pages against copying.

pub mod claims;
pub mod measure;
pub mod producers;
pub mod render;
pub mod render_maps;
pub mod render_producers;
pub mod rig;
pub mod section;

use crate::lab::{Experiment, ReportParts};
use crate::report::doc::Block;
use crate::report::preset::Preset;
use crate::report::results::Results;
use crate::report::text::{h, p};
use crate::transfer::Res;

/// Figures 4-10 of paper 002.
pub struct Vmmr;

impl Experiment for Vmmr {
    const ID: &'static str = "vmmr";
    const PAPER: &'static str = "002";
    const TITLE: &'static str = "Figures 4-10: reassembly by moving pages against memcpy, bitmap searches, random maps, size classes and buddy, 4 KiB and 2 MiB";
    const ABOUT: &'static str = "Paper 002 (VMMR), when its experiment ran.";
    type Plan = crate::lab::vmmr::rig::Plan;
    type Section = crate::lab::vmmr::measure::VmmrSection;

    fn plan(preset: Preset) -> Self::Plan {
        match preset {
            Preset::Smoke => crate::lab::vmmr::rig::Plan::smoke(),
            Preset::Quick => crate::lab::vmmr::rig::Plan::quick(),
            Preset::Full => crate::lab::vmmr::rig::Plan::full(),
        }
    }

    fn measure(plan: &Self::Plan, bar: &indicatif::ProgressBar) -> Res<Self::Section> {
        crate::lab::vmmr::measure::measure(plan, bar)
    }

    const REPORT: ReportParts = ReportParts {
        findings: render::findings,
        claims: claims::claims,
        render: blocks,
    };
}

/// The section.
fn blocks(r: &Results) -> Vec<Block> {
    let Some(v) = r.section::<Vmmr>() else {
        return Vec::new();
    };
    let mut b = vec![
        h(
            2,
            "Paper 002 — VMMR: reassembling a message by remapping its pages",
        ),
        p(render::method(v)),
    ];
    if let Some(t) = render::rebuilds_text(v) {
        b.push(p(t));
    }
    b.extend(render::figure4(v));
    b.extend(render::figure5(v));
    b.extend(render::huge(v));
    b.extend(render_maps::random_figures(v));
    b.extend(render_maps::optimized(v));
    b.extend(render_maps::adaptive(v));
    b.extend(render_producers::cycle(v));
    b.extend(render_producers::producers(v));
    b.extend(render_maps::against_paper(v));
    b
}
