//! What `zcio bench vmmr` measured, as `results.json` holds it: the plan that ran, the rows
//! with medians and spreads, the random maps, and what is derived from them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The plan the bench ran.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct PlanRecord {
    /// Message sizes with 4 KiB granules (pages).
    pub sizes_4k: Vec<usize>,
    /// Message sizes with 2 MiB granules (granules).
    pub sizes_2m: Vec<usize>,
    /// Layouts of the messages in the store: `scattered` (no two granules adjacent, one move
    /// call each) and `adjacent` (one call for the message).
    pub layouts: Vec<String>,
    /// Timed reassemblies per case and size, warm caches.
    pub iterations: usize,
    /// Timed reassemblies per case and size, cold caches (0: not run).
    pub cold_iterations: usize,
    /// Bytes read before each cold-cache reassembly (twice the last-level cache).
    pub eviction_bytes: usize,
    /// Pool capacity with 4 KiB granules (the paper's 65 536: a 256 MB segment).
    pub capacity_4k: usize,
    /// Pool capacity with 2 MiB granules (virtual space only).
    pub capacity_2m: usize,
    /// Message sizes of the random tests (pages).
    pub random_sizes: Vec<usize>,
    /// The random tests' regimes: maps in each, random granules freed per map.
    pub regimes: Vec<RegimeRecord>,
    /// Pools of the random tests.
    pub random_pools: Vec<String>,
    /// Timed reassemblies per random map at most.
    pub random_iterations: usize,
    /// Pages reassembled per random map at most (larger messages get fewer iterations).
    pub random_page_budget: usize,
    /// Seed of layouts, maps and search starts.
    pub seed: u64,
    /// Whether pages move (`UFFDIO_MOVE`); without it every "move" is a copy.
    pub move_available: bool,
    /// What reading the clock costs (ns): part of every timing.
    pub timer_overhead_ns: f64,
    /// The costs the adaptive case chose by, per granule.
    pub calibration: Vec<CalibrationRecord>,
}

/// What moving and copying cost, as the adaptive reassembler was told.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CalibrationRecord {
    /// Granule: `4k` or `2m`.
    pub granule: String,
    /// A move call, beyond its granules (ns).
    pub move_call_ns: f64,
    /// Each granule moved within a call (ns).
    pub move_granule_ns: f64,
    /// Copying granules into a contiguous range: `[bytes, ns per byte]` by length.
    pub copy_by_size: Vec<(usize, f64)>,
    /// Where it came from: `profile` (the calibration profile in force) or `measured` (now,
    /// the profile having none for this granule).
    pub source: String,
    /// A remapped message's whole cycle (the search, the move in, the move back out when it is
    /// freed, the free), per run of adjacent granules beyond its granules (ns), measured now;
    /// the adaptive case chose on it where present.
    #[serde(default)]
    pub cycle_call_ns: Option<f64>,
    /// The whole cycle per granule (ns).
    #[serde(default)]
    pub cycle_granule_ns: Option<f64>,
}

impl CalibrationRecord {
    /// Granule size in bytes.
    pub fn granule_bytes(&self) -> usize {
        if self.granule == "2m" { 2 << 20 } else { 4096 }
    }

    /// Predicted move-in of `n` granules in `calls` calls (ns).
    pub fn move_in_ns(&self, n: usize, calls: usize) -> f64 {
        calls as f64 * self.move_call_ns + n as f64 * self.move_granule_ns
    }

    /// Predicted whole cycle of `n` granules in `calls` runs (ns), if measured.
    pub fn cycle_ns(&self, n: usize, calls: usize) -> Option<f64> {
        Some(calls as f64 * self.cycle_call_ns? + n as f64 * self.cycle_granule_ns?)
    }

    /// Predicted copy of `n` granules (ns).
    pub fn copy_ns(&self, n: usize) -> f64 {
        zcio_vm::remap::copy_ns_by_size(&self.copy_by_size, n.saturating_mul(self.granule_bytes()))
    }
}

/// One regime of random maps.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RegimeRecord {
    /// Random granules freed from one map to the next.
    pub frees_per_map: usize,
    /// Maps.
    pub maps: usize,
}

/// One message size of one series: granule, layout and cache state.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Row {
    /// Granule: `4k` or `2m`.
    pub granule: String,
    /// Layout in the store: `scattered` or `adjacent`.
    pub layout: String,
    /// Caches before each timed reassembly: `warm` or `cold`.
    pub caches: String,
    /// Granules in the message.
    pub granules: usize,
    /// 4 KiB pages in the message (granules × granule / 4096).
    pub pages: usize,
    /// Bytes in the message.
    pub bytes: usize,
    /// Timed reassemblies per case.
    pub iterations: usize,
    /// Copying the message into a contiguous, pre-faulted destination: median (ns).
    pub memcpy_ns: f64,
    /// Fastest and slowest copy (ns).
    pub memcpy_spread_ns: [f64; 2],
    /// Reassembly by moving pages, median (ns), by case: `no_search` (the run known, moves
    /// only), `minimal_search` (empty bitmap), `worst_case_search` (the paper's worst-case
    /// bitmap), `size_class_worst_case` (a one-class bitmap full but its last block, messages
    /// of at most 256 granules), `buddy` (an empty buddy pool); and, not moving, `copy` (a
    /// reassembler copying every message into an owned buffer) and `adaptive` (choosing per
    /// message from the calibration; warm caches).
    pub vmmr_ns: BTreeMap<String, f64>,
    /// Fastest and slowest reassembly (ns), by case.
    pub vmmr_spread_ns: BTreeMap<String, [f64; 2]>,
    /// The pool's part alone, median (ns), by moving case: `alloc` timed without the moves
    /// (the search and the marking). Warm caches only.
    pub pool_ns: BTreeMap<String, f64>,
    /// memcpy / minimal-search VMMR.
    pub speedup: f64,
    /// Move calls per reassembly.
    pub move_calls: usize,
    /// Bytes copied instead of moved, over every reassembly of the row (pages the kernel would
    /// not move at that moment, or no `UFFDIO_MOVE` here).
    pub copied_bytes: usize,
    /// 2 MiB granules: whether they were transparent huge pages when written.
    pub huge_pages: Option<bool>,
    /// Times the remap space and the message were rebuilt and the row measured again, after the
    /// VM layer failed or copied pages the kernel would not move (the copied pages' sources
    /// stay in place, so the space cannot be reused).
    pub rebuilds: usize,
    /// The first such failure.
    pub rebuild_reason: Option<String>,
    /// The path the adaptive reassembler took most often for this message (`remap` or
    /// `copy`), if it ran (warm caches).
    pub adaptive_path: Option<String>,
    /// Timed adaptive reassemblies that moved pages (the rest copied).
    pub adaptive_remapped: usize,
}

impl Row {
    /// The adaptive case's paths: `remap`, `copy`, or `remap 28 of 32` where it took both.
    pub fn adaptive_chose(&self) -> String {
        match self.adaptive_path.as_deref() {
            None => "-".into(),
            Some(_) if self.adaptive_remapped == 0 => "copy".into(),
            Some(_) if self.adaptive_remapped == self.iterations => "remap".into(),
            Some(_) => format!("remap {} of {}", self.adaptive_remapped, self.iterations),
        }
    }

    /// The median of a case (memcpy included).
    pub fn case_ns(&self, case: &str) -> Option<f64> {
        if case == "memcpy" {
            Some(self.memcpy_ns)
        } else {
            self.vmmr_ns.get(case).copied()
        }
    }

    /// The spread of a case (memcpy included).
    pub fn case_spread(&self, case: &str) -> Option<[f64; 2]> {
        if case == "memcpy" {
            Some(self.memcpy_spread_ns)
        } else {
            self.vmmr_spread_ns.get(case).copied()
        }
    }

    /// Whether it belongs to a series.
    pub fn is(&self, granule: &str, layout: &str, caches: &str) -> bool {
        self.granule == granule && self.layout == layout && self.caches == caches
    }
}

/// One random map.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RandomMapRow {
    /// Regime (index into the plan's regimes).
    pub regime: usize,
    /// Map within the regime.
    pub map: usize,
    /// Allocated granules / capacity.
    pub allocation_level: f64,
    /// Free/allocated transitions between neighbouring bits of the map (blocks for size
    /// classes and buddy).
    pub transitions: usize,
    /// Timed reassemblies.
    pub iterations: usize,
    /// Their mean (ns), as the paper reports per map.
    pub mean_ns: f64,
    /// Their median (ns): the map's time without an interrupted iteration.
    pub median_ns: f64,
    /// Fastest (ns).
    pub min_ns: f64,
    /// Slowest (ns).
    pub max_ns: f64,
    /// The pool's part alone, median (ns): `alloc` timed without the moves.
    pub pool_ns: f64,
    /// Bytes copied instead of moved over the map's reassemblies.
    pub copied_bytes: usize,
    /// Times the map was measured again on a rebuilt remap space (see [`Row::rebuilds`]).
    pub rebuilds: usize,
    /// The first failure that made it so.
    pub rebuild_reason: Option<String>,
}

/// The random test of one pool at one size, with the paper's §4.3 extracts.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RandomRow {
    /// Pool: `bitmap` (search from a random word), `size-classes` (one class, search from
    /// word 0), `buddy`.
    pub pool: String,
    /// Pages in the message (4 KiB granules, scattered).
    pub pages: usize,
    /// Granules per bit or block of the pool's map.
    pub block: usize,
    /// Every map.
    pub maps: Vec<RandomMapRow>,
    /// Fastest reassembly over all maps and iterations (ns).
    pub min_ns: f64,
    /// Slowest reassembly over all maps and iterations (ns): the paper's absolute maximum.
    pub max_ns: f64,
    /// The highest per-map median (ns): the maximum without single interrupted iterations.
    pub max_map_median_ns: f64,
    /// Mean over the maps at 40 % (± 1 %) allocation of their medians (ns), if any map fell
    /// there (the paper averaged each map's mean; a median per map keeps one interrupted
    /// iteration out).
    pub mean_at_40_ns: Option<f64>,
    /// Maps at 40 % (± 1 %).
    pub maps_at_40: usize,
    /// Mean over the maps at 10 % (± 1 %) allocation of their medians (ns).
    pub mean_at_10_ns: Option<f64>,
    /// Maps at 10 % (± 1 %).
    pub maps_at_10: usize,
}

/// Where minimal-search VMMR overtakes memcpy in one series.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Crossover {
    /// Granule.
    pub granule: String,
    /// Layout.
    pub layout: String,
    /// Caches.
    pub caches: String,
    /// The smallest size measured from which minimal-search VMMR is faster than memcpy at
    /// every larger size measured (granules); `None` when it is slower at the largest.
    pub granules: Option<usize>,
    /// The same in 4 KiB pages.
    pub pages: Option<usize>,
    /// Whether it is faster at every size measured.
    pub everywhere: bool,
}

/// memcpy against minimal-search VMMR at a size the paper names.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Speedup {
    /// Granule.
    pub granule: String,
    /// Layout.
    pub layout: String,
    /// Caches.
    pub caches: String,
    /// Granules.
    pub granules: usize,
    /// 4 KiB pages.
    pub pages: usize,
    /// memcpy median (ns).
    pub memcpy_ns: f64,
    /// Minimal-search VMMR median (ns).
    pub vmmr_ns: f64,
    /// memcpy / VMMR.
    pub speedup: f64,
    /// The message over the VMMR time (Gbit/s), the paper's bandwidth.
    pub vmmr_gbits: f64,
    /// The message over the memcpy time (Gbit/s).
    pub memcpy_gbits: f64,
}

/// A case's time fitted as a line in the message's granules.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CostFit {
    /// Granule.
    pub granule: String,
    /// Layout.
    pub layout: String,
    /// Caches.
    pub caches: String,
    /// Case.
    pub case: String,
    /// Per granule (ns).
    pub per_granule_ns: f64,
    /// Per message (ns).
    pub per_message_ns: f64,
    /// R² of the fit.
    pub r2: Option<f64>,
}

/// The adaptive reassembler against memcpy over one series.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AdaptiveVerdict {
    /// Granule.
    pub granule: String,
    /// Layout.
    pub layout: String,
    /// Caches.
    pub caches: String,
    /// Sizes measured.
    pub sizes: usize,
    /// Sizes at which it moved pages.
    pub remapped: usize,
    /// The smallest size at which it moved pages (4 KiB pages), if any.
    pub remap_from_pages: Option<usize>,
    /// The largest adaptive / memcpy ratio of medians over the sizes.
    pub worst_ratio: f64,
    /// The size it was at (4 KiB pages).
    pub worst_at_pages: usize,
    /// Sizes at which the adaptive median was more than 5 % above memcpy's.
    pub over_5_percent: Vec<usize>,
    /// Whether it was within 5 % of memcpy (or faster) at every size.
    pub within_5_percent: bool,
    /// The largest adaptive / copy ratio of medians over the sizes (the copy case: the same
    /// copy with the same bookkeeping of an owned buffer, so what remains is the decision and
    /// its mistakes).
    pub worst_ratio_to_copy: Option<f64>,
    /// The size it was at (4 KiB pages).
    pub worst_to_copy_at_pages: Option<usize>,
    /// Sizes at which the adaptive median was more than 5 % above the copy case's.
    pub over_5_percent_of_copy: Vec<usize>,
    /// The smallest size from which the adaptive case is within 5 % of memcpy at every larger
    /// size (4 KiB pages), if it is at the largest.
    pub within_5_percent_from_pages: Option<usize>,
}

/// What is derived from the rows.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct Derived {
    /// Per series where the adaptive case ran, how it did against memcpy.
    #[serde(default)]
    pub adaptive: Vec<AdaptiveVerdict>,
    /// Per series, where VMMR overtakes memcpy.
    pub crossovers: Vec<Crossover>,
    /// Per series, at the smallest size, the paper's largest (6 144 pages; 24 MiB with 2 MiB
    /// granules) and the largest measured.
    pub speedups: Vec<Speedup>,
    /// Per series and case, the time as a line in the granules (least squares on relative
    /// error, every size alike).
    pub costs: Vec<CostFit>,
}

/// Everything `zcio bench vmmr` measured: also the report's paper 002 section.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct VmmrSection {
    /// What ran.
    pub plan: PlanRecord,
    /// Per granule, layout, caches and size.
    pub rows: Vec<Row>,
    /// Per pool and size, the random maps.
    pub random: Vec<RandomRow>,
    /// Crossovers, speed-ups and cost lines.
    pub derived: Derived,
    /// The real producers' series: messages filled by a file read with `O_DIRECT` and by
    /// sockets, then reassembled by each policy.
    #[serde(default)]
    pub producers: Vec<ProducerRow>,
}

/// One message size of a real producer, reassembled by one policy.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ProducerRow {
    /// `file` (read with `O_DIRECT` granule by granule into scattered slots) or `socket`
    /// (received through an io_uring provided-buffer ring of slots).
    pub producer: String,
    /// How the bytes came: the file system and whether reads were direct, or the sockets.
    pub how: String,
    /// Granule: `4k` or `2m`.
    pub granule: String,
    /// `remap`, `copy` or `adaptive` (the experiment's adaptive policy).
    pub policy: String,
    /// Granules in the message.
    pub granules: usize,
    /// 4 KiB pages in the message.
    pub pages: usize,
    /// Bytes in the message.
    pub bytes: usize,
    /// Timed messages.
    pub iterations: usize,
    /// Why there is no number: the producer cannot run here, and says why.
    pub refused: Option<String>,
    /// Reassembly alone, median (ns).
    pub reassemble_ns: Option<f64>,
    /// Fastest and slowest reassembly (ns).
    pub reassemble_spread_ns: Option<[f64; 2]>,
    /// The whole receive (or read) and reassembly of a message, median (ns).
    pub cycle_ns: Option<f64>,
    /// Fastest and slowest receive and reassembly (ns).
    pub cycle_spread_ns: Option<[f64; 2]>,
    /// Runs of adjacent slots the producer left the message in (median): move calls when
    /// remapped.
    pub runs: usize,
    /// Timed messages whose pages were moved (the rest were copied).
    pub remapped: usize,
    /// Bytes checked at the receiver against what was written (every message, untimed).
    pub verified_bytes: usize,
}
