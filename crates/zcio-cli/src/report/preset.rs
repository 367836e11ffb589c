//! How much an experiment measures: the presets every experiment scales itself by.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// How much to measure.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// A few points of everything, for tests (seconds).
    Smoke,
    /// The default: every experiment at fewer lengths and rounds (minutes).
    Quick,
    /// The papers' full sweeps.
    Full,
}
