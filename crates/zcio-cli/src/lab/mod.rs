//! The experiments, one per folder: what each measures, how much per preset, and what the
//! report says about it.
//!
//! Every experiment but Genie's implements [`Experiment`]; [`run`] is the one runner they
//! share, and [`LABS`] the registry `zcio report` runs, renders and lists from. Genie's seven
//! experiments share one section and one runner of their own ([`genie`]).

pub mod claim;
pub mod fbufs;
pub mod genie;
pub mod sequoia;
pub mod uio;
pub mod vmmr;

use sequoia::{checksum, containers, splice};

pub use claim::{Claim, Shown, Verdict};

use crate::report::doc::Block;
use crate::report::preset::Preset;
use crate::report::results::{ExperimentRecord, Results, SectionData, SectionKind};
use crate::transfer::Res;
use std::time::Instant;

/// One experiment: its name, how much it measures at each preset, the measurement, its section
/// of `results.json`, and the report's prose about it.
pub trait Experiment {
    /// The experiment's one name: its folder, its id for `zcio report --only` and its
    /// `zcio bench` verb.
    const ID: &'static str;
    /// Its section's key in `results.json`: its id but for `fbufs` and the containers'
    /// `frames`, kept for the files already written.
    const KEY: &'static str = Self::ID;
    /// What the schema of `results.json` says of its section.
    const ABOUT: &'static str;
    /// The paper it reproduces (`000` … `004`).
    const PAPER: &'static str;
    /// What it reproduces.
    const TITLE: &'static str;
    /// What a preset stands for: the measurement's arguments.
    type Plan;
    /// What it measured: its section of `results.json`, what `zcio bench <id> --json` prints.
    type Section: SectionData;
    /// The plan of `preset`.
    fn plan(preset: Preset) -> Self::Plan;
    /// Progress steps `measure` reports that it does not add to the bar's length itself.
    fn units(_plan: &Self::Plan) -> u64 {
        0
    }
    /// Measure, reporting progress on `bar`.
    fn measure(plan: &Self::Plan, bar: &indicatif::ProgressBar) -> Res<Self::Section>;
    /// What the report says about it.
    const REPORT: ReportParts;
}

/// What the report says about an experiment: the functions of its folder that write each part.
#[derive(Debug, Clone, Copy)]
pub struct ReportParts {
    /// What the report says about it in a few sentences, at the head of its sections (nothing
    /// when it did not run).
    pub findings: fn(&Results) -> Vec<String>,
    /// The papers' claims it measures, for the table that opens the report (nothing when it
    /// did not run).
    pub claims: fn(&Results) -> Vec<Claim>,
    /// Its sections of the report (nothing when it did not run).
    pub render: fn(&Results) -> Vec<Block>,
}

/// What a run of the report shares with every experiment.
pub struct Run<'a> {
    /// The preset.
    pub preset: Preset,
    /// The experiments `--only` selected (and those they need).
    pub selected: &'a [&'static Lab],
    /// Where the file module's experiments write.
    pub dir: &'a std::path::Path,
    /// The machine.
    pub machine: &'a crate::report::machine::Machine,
    /// The progress bar.
    pub bar: &'a indicatif::ProgressBar,
}

impl Run<'_> {
    /// Whether the experiment `id` is selected.
    pub fn on(&self, id: &str) -> bool {
        self.selected.iter().any(|e| e.id == id)
    }
}

/// How a registry entry measures: into the results, giving the records of what ran.
pub type Measure = fn(&Run, &mut Results) -> Res<Vec<ExperimentRecord>>;

/// One entry of the registry: an experiment as `zcio report` knows it.
#[derive(Debug, Clone, Copy)]
pub struct Lab {
    /// Id for `--only`.
    pub id: &'static str,
    /// Paper number (`000` … `004`).
    pub paper: &'static str,
    /// What it reproduces.
    pub title: &'static str,
    /// Experiments whose results it needs (run with it when `--only` selects it).
    pub needs: &'static [&'static str],
    /// Measure it (when selected) into the results; the records of what ran. `None`: it
    /// is measured by the first entry of its group (Genie's).
    pub run: Option<Measure>,
    /// Its section of `results.json`; `None` for all but the first of a group.
    pub section: Option<SectionKind>,
    /// The report's findings about it, at the head of its sections; `None` for all but the
    /// first of a group.
    pub findings: Option<fn(&Results) -> Vec<String>>,
    /// The papers' claims it measures; `None` for all but the first of a group.
    pub claims: Option<fn(&Results) -> Vec<Claim>>,
    /// The report's sections about it; `None` for all but the first of a group.
    pub render: Option<fn(&Results) -> Vec<Block>>,
}

impl Lab {
    /// The registry entry of an [`Experiment`].
    pub const fn of<E: Experiment>() -> Lab {
        Lab {
            id: E::ID,
            paper: E::PAPER,
            title: E::TITLE,
            needs: &[],
            run: Some(run::<E>),
            section: Some(SectionKind::of::<E::Section>(E::KEY, E::ABOUT)),
            findings: Some(E::REPORT.findings),
            claims: Some(E::REPORT.claims),
            render: Some(E::REPORT.render),
        }
    }
}

/// Every experiment, in the order they run and the report shows them.
pub const LABS: &[Lab] = &[
    genie::LATENCY,
    genie::SHORT,
    genie::CPU,
    genie::MODULES,
    genie::BANDWIDTH,
    genie::HUGE,
    genie::REGIONS,
    genie::CHANNEL,
    genie::PYTHON,
    genie::C,
    genie::THROUGHPUT,
    Lab::of::<fbufs::Fbufs>(),
    Lab::of::<fbufs::stack::FbufsStack>(),
    Lab::of::<vmmr::Vmmr>(),
    Lab::of::<checksum::Checksum>(),
    Lab::of::<containers::Containers>(),
    Lab::of::<splice::Splice>(),
    Lab::of::<uio::Uio>(),
];

/// The runner every [`Experiment`] shares: measure it if selected, store its section and
/// record it; if it fails, no section and a record naming the failure (one failing
/// experiment does not take the others' results with it).
pub fn run<E: Experiment>(run: &Run, results: &mut Results) -> Res<Vec<ExperimentRecord>> {
    let Some(lab) = run.selected.iter().find(|e| e.id == E::ID) else {
        return Ok(Vec::new());
    };
    let plan = E::plan(run.preset);
    let t0 = Instant::now();
    run.bar.inc_length(E::units(&plan));
    match E::measure(&plan, run.bar) {
        Ok(section) => {
            results.store::<E>(section);
            Ok(vec![finished(lab, t0, run.bar)])
        }
        Err(e) => Ok(vec![failed(lab, &e.to_string(), run.bar)]),
    }
}

/// Say something above the progress bar, or on stderr when there is no terminal to draw it on.
fn say(bar: &indicatif::ProgressBar, line: String) {
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
}

/// Record an experiment that ran since `t0`, and say so.
pub fn finished(e: &Lab, t0: Instant, bar: &indicatif::ProgressBar) -> ExperimentRecord {
    let d = t0.elapsed().as_secs_f64();
    say(bar, format!("{:<18} {:>7.1} s  {}", e.id, d, e.title));
    ExperimentRecord {
        id: e.id.into(),
        paper: e.paper.into(),
        title: e.title.into(),
        duration_s: d,
        error: None,
    }
}

/// Record an experiment that failed with `error`, and say so.
pub fn failed(e: &Lab, error: &str, bar: &indicatif::ProgressBar) -> ExperimentRecord {
    say(bar, format!("{} failed: {error}", e.id));
    ExperimentRecord {
        id: e.id.into(),
        paper: e.paper.into(),
        title: e.title.into(),
        duration_s: 0.0,
        error: Some(error.into()),
    }
}

/// The claims of every experiment that ran, in the registry's order.
pub fn claims(results: &Results) -> Vec<Claim> {
    LABS.iter()
        .filter_map(|l| l.claims)
        .flat_map(|f| f(results))
        .collect()
}

/// `blocks` with `findings`, one paragraph each, after the first level-2 heading naming a
/// paper (else the first heading) and the paragraph right after it, if any.
pub fn lead(mut blocks: Vec<Block>, findings: Vec<String>) -> Vec<Block> {
    let heading = |b: &Block| matches!(b, Block::Heading { level: 2, text, .. } if text.starts_with("Paper "));
    let at = blocks
        .iter()
        .position(heading)
        .or_else(|| {
            blocks
                .iter()
                .position(|b| matches!(b, Block::Heading { .. }))
        })
        .map_or(0, |i| {
            i + 1 + usize::from(matches!(blocks.get(i + 1), Some(Block::Para(_))))
        });
    let tail = blocks.split_off(at);
    blocks.extend(findings.into_iter().map(Block::Para));
    blocks.extend(tail);
    blocks
}

/// The sections of every experiment that ran, in the registry's order, each with its findings
/// at its head.
pub fn render(results: &Results) -> Vec<Block> {
    LABS.iter()
        .filter_map(|l| {
            let blocks = l.render?(results);
            Some(lead(
                blocks,
                l.findings.map_or_else(Vec::new, |f| f(results)),
            ))
        })
        .flatten()
        .collect()
}

/// Whether `--only o` picks experiment `id`: an id in full picks that one alone (`genie-c`
/// not `genie-cpu`), anything else every id it begins (`genie`).
fn picks(o: &str, id: &str) -> bool {
    if LABS.iter().any(|e| e.id == o) {
        id == o
    } else {
        id.starts_with(o)
    }
}

/// Which experiments `only` selects (all when empty); an unknown id is an error naming it.
pub fn select(only: &[String]) -> Res<Vec<&'static Lab>> {
    for o in only {
        if !LABS.iter().any(|e| e.id.starts_with(o.as_str())) {
            let ids: Vec<_> = LABS.iter().map(|e| e.id).collect();
            return Err(format!(
                "invalid argument `--only {o}`: no such experiment (known: {})",
                ids.join(", ")
            )
            .into());
        }
    }
    let mut wanted: Vec<&str> = LABS
        .iter()
        .filter(|e| only.is_empty() || only.iter().any(|o| picks(o, e.id)))
        .map(|e| e.id)
        .collect();
    for e in LABS {
        if wanted.contains(&e.id) {
            wanted.extend(e.needs.iter().copied());
        }
    }
    // In registry order, so that what an experiment needs runs before it.
    Ok(LABS.iter().filter(|e| wanted.contains(&e.id)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_in_full_selects_that_experiment_alone_and_a_prefix_every_one_it_begins() {
        let ids = |o: &[&str]| -> Vec<&str> {
            let o: Vec<String> = o.iter().map(|s| s.to_string()).collect();
            select(&o).unwrap().iter().map(|e| e.id).collect()
        };
        assert_eq!(ids(&["genie-c"]), ["genie-c"]);
        let cs = ids(&["genie-c"]);
        assert!(!cs.contains(&"genie-cpu") && !cs.contains(&"genie-channel"));
        let prefix = ids(&["genie-ch"]);
        assert_eq!(prefix, ["genie-channel"]);
        assert!(ids(&["genie"]).len() > 5);
    }

    #[test]
    fn a_failing_experiment_leaves_a_record_naming_the_failure() {
        let bar = indicatif::ProgressBar::hidden();
        let lab = LABS.iter().find(|l| l.id == "containers").unwrap();
        let record = failed(lab, "fcntl(F_ADD_SEALS) failed", &bar);
        assert_eq!(record.id, "containers");
        assert_eq!(record.paper, "003");
        assert_eq!(record.error.as_deref(), Some("fcntl(F_ADD_SEALS) failed"));
    }

    #[test]
    fn findings_follow_the_papers_heading_and_its_first_paragraph() {
        use crate::report::text::{h, p};
        let text = |b: &[Block]| -> Vec<String> {
            b.iter()
                .map(|b| match b {
                    Block::Heading { text, .. } => text.clone(),
                    Block::Para(t) => t.clone(),
                    _ => String::new(),
                })
                .collect()
        };
        let blocks = vec![h(2, "Machine"), h(2, "Paper 000 — x"), p("how"), h(3, "y")];
        let led = lead(blocks, vec!["found".into()]);
        assert_eq!(
            text(&led),
            ["Machine", "Paper 000 — x", "how", "found", "y"]
        );
        let led = lead(vec![h(3, "z")], vec!["found".into()]);
        assert_eq!(text(&led), ["z", "found"]);
    }

    #[test]
    fn every_group_has_one_section_and_its_claims() {
        for l in LABS {
            assert_eq!(l.section.is_some(), l.run.is_some(), "{}", l.id);
            assert_eq!(l.findings.is_some(), l.run.is_some(), "{}", l.id);
            assert_eq!(l.claims.is_some(), l.run.is_some(), "{}", l.id);
        }
    }

    #[test]
    fn ids_are_unique_and_needs_known() {
        for (i, l) in LABS.iter().enumerate() {
            assert!(LABS[..i].iter().all(|m| m.id != l.id), "{} twice", l.id);
            for n in l.needs {
                assert!(LABS[..i].iter().any(|m| m.id == *n), "{} needs {n}", l.id);
            }
        }
    }
}
