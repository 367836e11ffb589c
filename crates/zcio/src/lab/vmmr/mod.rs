//! Paper 002 (VMMR): reassembly by moving pages against copying.

pub mod measure;
pub mod render;

use crate::lab::Experiment;
use crate::report::doc::Block;
use crate::report::preset::Preset;
use crate::report::results::Results;
use crate::transfer::Res;

/// Figures 4-10 of paper 002.
pub struct Vmmr;

impl Experiment for Vmmr {
    const ID: &'static str = "vmmr";
    const PAPER: &'static str = "002";
    const TITLE: &'static str = "Figures 4-10: reassembly by moving pages against memcpy, bitmap searches, random maps, size classes and buddy, 4 KiB and 2 MiB";
    type Plan = zcio_vmmr::bench::Plan;
    type Section = crate::lab::vmmr::measure::VmmrSection;

    fn plan(preset: Preset) -> Self::Plan {
        match preset {
            Preset::Smoke => zcio_vmmr::bench::Plan::smoke(),
            Preset::Quick => zcio_vmmr::bench::Plan::quick(),
            Preset::Full => zcio_vmmr::bench::Plan::full(),
        }
    }

    fn measure(plan: &Self::Plan, bar: &indicatif::ProgressBar) -> Res<Self::Section> {
        crate::lab::vmmr::measure::measure(plan, bar)
    }

    fn store(results: &mut Results, section: Self::Section) {
        results.vmmr = Some(section);
    }

    fn findings(results: &Results) -> Vec<String> {
        crate::lab::vmmr::render::findings(results)
    }

    fn render(results: &Results) -> Vec<Block> {
        crate::lab::vmmr::render::blocks(results)
    }
}
