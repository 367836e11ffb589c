//! `results.json`: everything a report run measured, section by section, under a versioned
//! schema.

use crate::lab::Experiment;
use crate::lab::genie::{measure as genie, model};
use crate::report::machine;
pub use crate::report::preset::Preset;
pub use crate::report::sections::{SectionData, SectionKind, Sections};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The `schema` field of `results.json`.
pub const SCHEMA: &str = "zcio-report/1";

/// One experiment as it ran.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ExperimentRecord {
    /// Id.
    pub id: String,
    /// Paper.
    pub paper: String,
    /// Title.
    pub title: String,
    /// Wall time (s).
    pub duration_s: f64,
    /// Why it failed, if it did (the rest of the report stands).
    #[serde(default)]
    pub error: Option<String>,
}

/// The Genie section of the results.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct GenieSection {
    /// Sizes and repetitions used.
    pub plan: genie::Plan,
    /// Measurements.
    pub results: genie::GenieResults,
    /// Fitted models.
    #[serde(default)]
    pub model: model::Model,
    /// The paper's conclusions, tested here.
    #[serde(default)]
    pub conclusions: Vec<model::Conclusion>,
    /// The calibration profile every process used (its file and its contents: the primitive
    /// costs and the thresholds derived from them), when known.
    #[serde(default)]
    pub profile: Option<ProfileUsed>,
}

/// The calibration profile of a run.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ProfileUsed {
    /// Where it was loaded from.
    pub path: String,
    /// The profile as `zcio calibrate` writes it.
    pub profile: serde_json::Value,
}

/// Everything a report run measured: `results.json`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Results {
    /// Format id: `zcio-report/1`.
    pub schema: String,
    /// Preset.
    pub preset: Preset,
    /// Start time (seconds since the Unix epoch).
    pub started_unix_s: u64,
    /// Wall time of the whole run (s).
    pub duration_s: f64,
    /// The machine.
    pub machine: machine::Machine,
    /// The experiments that ran.
    pub experiments: Vec<ExperimentRecord>,
    /// Every experiment's section, by key (`genie`, `fbufs`, …): what it measured, or `null`
    /// when it did not run.
    #[serde(flatten)]
    pub sections: Sections,
}

impl Results {
    /// The results of a run that has measured nothing yet.
    pub fn new(preset: Preset, started_unix_s: u64, machine: machine::Machine) -> Results {
        Results {
            schema: SCHEMA.into(),
            preset,
            started_unix_s,
            duration_s: 0.0,
            machine,
            experiments: Vec::new(),
            sections: Sections::default(),
        }
    }

    /// The section of experiment `E`, if it ran.
    pub fn section<E: Experiment>(&self) -> Option<&E::Section> {
        self.sections.get(E::KEY)
    }

    /// The section of experiment `E`, mutable, if it ran.
    pub fn section_mut<E: Experiment>(&mut self) -> Option<&mut E::Section> {
        self.sections.get_mut(E::KEY)
    }

    /// Store the section of experiment `E`.
    pub fn store<E: Experiment>(&mut self, section: E::Section) {
        self.sections.put(E::KEY, section);
    }

    /// Paper 000's section (its seven experiments share it), if any of them ran.
    pub fn genie(&self) -> Option<&GenieSection> {
        self.sections.get(crate::lab::genie::SECTION.key)
    }

    /// Paper 000's section, mutable.
    pub fn genie_mut(&mut self) -> Option<&mut GenieSection> {
        self.sections.get_mut(crate::lab::genie::SECTION.key)
    }
}

/// The VMMR section of the results: what `zcio bench vmmr --json` prints.
pub type VmmrSection = crate::lab::vmmr::measure::VmmrSection;

/// The section of paper 001's protocol-stack experiment: what `zcio bench fbufs-stack --json`
/// prints.
pub type FbufsStackSection = crate::lab::fbufs::stack::measure::StackSection;

/// The fbufs section of the results.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FbufsSection {
    /// Message sizes (bytes).
    pub sizes: Vec<usize>,
    /// Rounds per point.
    pub rounds: usize,
    /// Bytes per run at most.
    pub volume: usize,
    /// Per contender, touch and size.
    pub rows: Vec<crate::lab::fbufs::measure::Row>,
    /// Per contender and touch: the per-page fit.
    pub fits: Vec<crate::lab::fbufs::measure::Fit>,
}

#[cfg(test)]
mod tests {
    use super::{FbufsSection, Results};
    use crate::lab::fbufs::Fbufs;
    use crate::report::preset::Preset;

    fn results() -> Results {
        let dir = tempfile::tempdir().unwrap();
        let mut r = Results::new(
            Preset::Smoke,
            0,
            crate::report::machine::Machine::this(dir.path()),
        );
        r.store::<Fbufs>(FbufsSection {
            sizes: vec![4096],
            rounds: 1,
            volume: 1 << 20,
            rows: Vec::new(),
            fits: Vec::new(),
        });
        r
    }

    #[test]
    fn every_section_is_written_under_its_key_and_read_back_typed() {
        let v = serde_json::to_value(results()).unwrap();
        assert_eq!(v["fbufs"]["sizes"], serde_json::json!([4096]));
        for key in ["genie", "vmmr", "checksum", "frames", "splice", "uio"] {
            assert!(v.get(key).is_some_and(|s| s.is_null()), "{key}: {v}");
        }
        let back: Results = serde_json::from_value(v).unwrap();
        assert_eq!(back.section::<Fbufs>().unwrap().sizes, [4096]);
        assert!(back.genie().is_none());
    }

    #[test]
    fn missing_sections_are_absent_and_bad_ones_errors_naming_them() {
        let mut v = serde_json::to_value(results()).unwrap();
        let o = v.as_object_mut().unwrap();
        o.remove("uio");
        o.remove("genie");
        let back: Results = serde_json::from_value(v.clone()).unwrap();
        assert!(back.section::<Fbufs>().is_some());
        v["fbufs"] = serde_json::json!({ "sizes": "many" });
        let e = serde_json::from_value::<Results>(v).unwrap_err();
        assert!(e.to_string().contains("fbufs"), "{e}");
    }
}
