//! `results.json`: everything a report run measured, section by section, under a versioned
//! schema.

use crate::lab::genie::{measure as genie, model};
use crate::report::machine;
pub use crate::report::preset::Preset;
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
    /// Paper 000 (Genie), when any of its experiments ran.
    pub genie: Option<GenieSection>,
    /// Paper 001 (fbufs), when its experiment ran.
    #[serde(default)]
    pub fbufs: Option<FbufsSection>,
    /// Paper 002 (VMMR), when its experiment ran.
    #[serde(default)]
    pub vmmr: Option<VmmrSection>,
    /// Paper 003's checksum, when its experiment ran: what `zcio bench checksum --json` prints.
    #[serde(default)]
    pub checksum: Option<crate::lab::sequoia::checksum::measure::ChecksumSection>,
    /// Paper 003's frame experiment, when it ran: what `zcio bench containers --json` prints.
    #[serde(default)]
    pub frames: Option<crate::lab::sequoia::containers::measure::FramesSection>,
    /// Paper 003's peer-to-peer I/O, when its experiment ran: what `zcio bench splice --json`
    /// prints.
    #[serde(default)]
    pub splice: Option<crate::lab::sequoia::splice::measure::SpliceSection>,
    /// Paper 004's experiment, when it ran: what `zcio bench uio --json` prints.
    #[serde(default)]
    pub uio: Option<crate::lab::uio::measure::UioSection>,
}

/// The VMMR section of the results: what `zcio bench vmmr --json` prints.
pub type VmmrSection = crate::lab::vmmr::measure::VmmrSection;

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
