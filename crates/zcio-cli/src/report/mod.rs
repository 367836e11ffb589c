//! `zcio report`: every experiment the project has, run on this machine, with the papers'
//! numbers beside this machine's, written as HTML, Markdown, JSON and plots.
//!
//! Experiments are listed in [`crate::lab::LABS`] (the registry: later papers add theirs
//! there); each has an id that `--only` selects and a paper. The results
//! of one run are one [`Results`] value, written as `results.json` under the JSON schema
//! `schema/results.schema.json` (generated from these types: `zcio report --schema`).

pub mod claims;
pub mod doc;
pub mod document;
pub mod fit;
pub mod machine;
pub mod plot;
pub mod preset;
pub mod results;
pub mod sections;
pub mod text;

pub use document::document;
pub use results::*;

use crate::transfer::Res;
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `zcio report`.
#[derive(clap::Args, Debug, Clone)]
pub struct ReportArgs {
    /// Directory to write index.html, REPORT.md, results.json and plots/ into.
    #[arg(long, default_value = "zcio-report")]
    pub out: PathBuf,
    /// Every experiment at fewer lengths and rounds (the default; minutes).
    #[arg(long, conflicts_with = "full")]
    pub quick: bool,
    /// The papers' full sweeps (much longer).
    #[arg(long)]
    pub full: bool,
    /// A few points of everything (seconds): checks the pipeline, not the machine.
    #[arg(long, hide = true, conflicts_with_all = ["quick", "full"])]
    pub smoke: bool,
    /// Run only these experiments (ids, or a prefix such as `genie`); see `--list`.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    pub only: Vec<String>,
    /// List the experiments and exit.
    #[arg(long)]
    pub list: bool,
    /// Print the JSON schema of results.json and exit.
    #[arg(long)]
    pub schema: bool,
    /// Directory for the file module's experiments (default: the output directory).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Measure nothing: refit the models to the raw samples of an earlier results.json and
    /// write the report from them.
    #[arg(long, value_name = "RESULTS_JSON", conflicts_with_all = ["quick", "full", "smoke", "only"])]
    pub from: Option<PathBuf>,
}

impl ReportArgs {
    /// The preset the flags ask for.
    pub fn preset(&self) -> Preset {
        if self.smoke {
            Preset::Smoke
        } else if self.full {
            Preset::Full
        } else {
            Preset::Quick
        }
    }
}

/// The JSON schema of [`Results`].
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Results)).expect("schema serializes")
}

/// `zcio report`.
pub fn run(a: ReportArgs) -> Res<()> {
    if a.schema {
        println!("{}", serde_json::to_string_pretty(&schema())?);
        return Ok(());
    }
    if a.list {
        for e in crate::lab::LABS {
            println!("{:<18} paper {}  {}", e.id, e.paper, e.title);
        }
        return Ok(());
    }
    if let Some(f) = &a.from {
        let bad = |e: String| format!("invalid argument `--from {}`: {e}", f.display());
        let text = std::fs::read_to_string(f).map_err(|e| bad(e.to_string()))?;
        let results = load(&text).map_err(|e| bad(e.to_string()))?;
        write(&results, &a.out)?;
        eprintln!(
            "report rewritten from {} into {}",
            f.display(),
            a.out.display()
        );
        return Ok(());
    }
    let selected = crate::lab::select(&a.only)?;
    std::fs::create_dir_all(&a.out)
        .map_err(|e| format!("invalid argument `--out {}`: {e}", a.out.display()))?;
    let dir = a.dir.clone().unwrap_or_else(|| a.out.clone());
    let t0 = Instant::now();
    let started_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let profile = ensure_profile(&a.out)?;
    let machine = machine::Machine::this(&dir);
    let bar = indicatif::ProgressBar::new(0);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} (eta {eta}) {msg}",
        )
        .expect("template"),
    );
    let mut results = Results::new(a.preset(), started_unix_s, machine);
    let machine = results.machine.clone();
    let run = crate::lab::Run {
        preset: a.preset(),
        selected: &selected,
        dir: &dir,
        machine: &machine,
        bar: &bar,
    };
    for lab in crate::lab::LABS {
        if let Some(measure) = lab.run {
            let records = measure(&run, &mut results)?;
            results.experiments.extend(records);
        }
    }
    if let Some(g) = results.genie_mut() {
        g.profile = Some(ProfileUsed {
            path: profile.display().to_string(),
            profile: serde_json::to_value(&*zcio_genie::profile::Profile::current())?,
        });
    }
    bar.finish_and_clear();
    results.duration_s = t0.elapsed().as_secs_f64();
    write(&results, &a.out)?;
    eprintln!(
        "report written to {} (index.html, REPORT.md, results.json, plots/) in {:.0} s",
        a.out.display(),
        results.duration_s
    );
    let failed: Vec<String> = results
        .experiments
        .iter()
        .filter_map(|e| e.error.as_ref().map(|w| format!("{}: {w}", e.id)))
        .collect();
    if !failed.is_empty() {
        return Err(format!(
            "the report was written, but these experiments failed (their sections are missing): {}",
            failed.join("; ")
        )
        .into());
    }
    Ok(())
}

/// The results of an earlier run from the text of its `results.json` (`zcio report --from`):
/// only the raw samples are read, and the fits, models and conclusions are made anew (so a
/// file written by an older zcio, whose models had other fields, still serves). Any text gives
/// the results or an error saying what is wrong with it: not JSON, not a results file (the
/// field at fault), or another schema.
pub fn load(text: &str) -> Res<Results> {
    let mut raw: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    if let Some(g) = raw.get_mut("genie").and_then(|g| g.as_object_mut()) {
        g.remove("model");
        g.remove("conclusions");
        if let Some(r) = g.get_mut("results").and_then(|r| r.as_object_mut()) {
            r.remove("fits");
        }
    }
    // Likewise what is derived from the VMMR rows: as written, it may hold values JSON cannot
    // (a fit to samples that do not fit, written as `null`), and it is made anew below.
    if let Some(v) = raw.get_mut("vmmr").and_then(|v| v.as_object_mut()) {
        let empty = serde_json::to_value(crate::lab::vmmr::measure::Derived::default())?;
        v.insert("derived".into(), empty);
    }
    let mut results: Results =
        serde_json::from_value(raw).map_err(|e| format!("not a zcio results.json: {e}"))?;
    if results.schema != SCHEMA {
        return Err(format!("schema {:?}, this zcio reads {SCHEMA:?}", results.schema).into());
    }
    if let Some(v) = results.section_mut::<crate::lab::vmmr::Vmmr>() {
        v.derived = crate::lab::vmmr::measure::derive(&v.rows);
    }
    let cpus = results.machine.logical_cpus;
    if let Some(g) = results.genie_mut() {
        crate::lab::genie::refit(g, cpus);
    }
    Ok(results)
}

/// Write `results.json` and the documents for `results` into `out`.
pub fn write(results: &Results, out: &std::path::Path) -> Res<()> {
    std::fs::create_dir_all(out)?;
    std::fs::write(
        out.join("results.json"),
        serde_json::to_string_pretty(results)?,
    )?;
    let d = document::document(results);
    doc::write_all(&d, out)?;
    Ok(())
}

/// Make sure every process of a run uses one calibration profile: the default file when it
/// loads; else calibrate this machine now (as `zcio calibrate` does) and save the profile to
/// the default path, or, where that cannot be written, into `out` and hand it to the child
/// processes through `$ZCIO_PROFILE`. Without this, every process would calibrate on its own
/// (slower, and with thresholds that differ from process to process).
pub fn ensure_profile(out: &std::path::Path) -> Res<PathBuf> {
    use zcio_genie::profile::Profile;
    let path = Profile::default_path();
    if Profile::load(&path).is_ok() {
        return Ok(path);
    }
    eprintln!(
        "no calibration profile at {}: calibrating this machine first (zcio calibrate)",
        path.display()
    );
    let p = Profile::calibrate(false, |_, _| {})?;
    let saved = match p.save(&path) {
        Ok(()) => path,
        Err(e) => {
            let alt = out.join("profile.json");
            eprintln!(
                "cannot write {} ({e}); using {} for this run",
                path.display(),
                alt.display()
            );
            p.save(&alt)?;
            let _ = crate::transfer::CHILD_PROFILE.set(alt.clone());
            alt
        }
    };
    Profile::install(p);
    Ok(saved)
}
