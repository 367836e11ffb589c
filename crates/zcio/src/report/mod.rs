//! `zcio report`: every experiment the project has, run on this machine, with the papers'
//! numbers beside this machine's, written as HTML, Markdown, JSON and plots.
//!
//! Experiments are listed in [`EXPERIMENTS`] (the registry: later papers add theirs there);
//! each has an id that `--only` selects, a paper, and a size in progress units. The results
//! of one run are one [`Results`] value, written as `results.json` under the JSON schema
//! `schema/results.schema.json` (generated from these types: `zcio report --schema`).

pub mod checksum_doc;
pub mod doc;
pub mod document;
pub mod fbufs_doc;
pub mod fit;
pub mod genie;
pub mod genie_chart;
pub mod genie_doc;
pub mod genie_huge;
pub mod machine;
pub mod model;
pub mod plot;
pub mod preset;
pub mod results;
pub mod splice_doc;
pub mod text;
pub mod uio_doc;
pub mod vmmr_doc;

pub use document::document;
pub use results::*;

use crate::report::genie::Progress;
use crate::transfer::Res;
use std::path::PathBuf;
use std::time::Instant;

/// One entry of the registry.
#[derive(Debug, Clone, Copy)]
pub struct Experiment {
    /// Id for `--only`.
    pub id: &'static str,
    /// Paper number (`000` … `004`).
    pub paper: &'static str,
    /// What it reproduces.
    pub title: &'static str,
    /// Experiments whose results it needs (run with it when `--only` selects it).
    pub needs: &'static [&'static str],
}

/// Every experiment, in the order they run.
pub const EXPERIMENTS: &[Experiment] = &[
    Experiment {
        id: "genie-latency",
        paper: "000",
        title: "Figures 3, 6, 7: end-to-end latency against length, eight semantics, three input schemes (instrumented: Tables 6, 9)",
        needs: &[],
    },
    Experiment {
        id: "genie-short",
        paper: "000",
        title: "Figure 5: short messages with the calibrated thresholds",
        needs: &[],
    },
    Experiment {
        id: "genie-cpu",
        paper: "000",
        title: "Figure 4: I/O processing time (CPU time per transfer)",
        needs: &[],
    },
    Experiment {
        id: "genie-modules",
        paper: "000",
        title: "The file (O_DIRECT) and kernel-socket modules: which path and why",
        needs: &[],
    },
    Experiment {
        id: "genie-bandwidth",
        paper: "000",
        title: "Table 10: copy bandwidths and the wire's rate, measured independently",
        needs: &[],
    },
    Experiment {
        id: "genie-huge",
        paper: "000",
        title: "Figures 3 and 4 and Table 6 at 2 MiB: every semantics with huge-page buffers, beside 4 KiB pages",
        needs: &["genie-latency"],
    },
    Experiment {
        id: "genie-throughput",
        paper: "000",
        title: "§8.2: system throughput against application work, model and measurement",
        needs: &["genie-cpu", "genie-bandwidth"],
    },
    Experiment {
        id: "fbufs-table1",
        paper: "001",
        title: "Table 1 and Figure 3: fbuf variants against page remapping and copies, two processes",
        needs: &[],
    },
    Experiment {
        id: "vmmr",
        paper: "002",
        title: "Figures 4-10: reassembly by moving pages against memcpy, bitmap searches, random maps, size classes and buddy, 4 KiB and 2 MiB",
        needs: &[],
    },
    Experiment {
        id: "checksum",
        paper: "003",
        title: "Figures 6-7: Internet checksum kernels against memory bandwidth and crates.io peers; naive, optimized and elided checksums end to end",
        needs: &[],
    },
    Experiment {
        id: "containers",
        paper: "003",
        title: "Figure 4: 640x480 frames through pipelines of relay processes to a display process, by sealed and volatile containers and by read/write",
        needs: &[],
    },
    Experiment {
        id: "splice",
        paper: "003",
        title: "Peer-to-peer I/O: splice against a read/write loop, file to socket, file to file, socket to file: throughput, latency, CPU availability",
        needs: &[],
    },
    Experiment {
        id: "uio",
        paper: "004",
        title: "Figures 5-9: N concurrent SQLite scans of Wisconsin tables by kernel I/O and by user-level I/O (ring or system-call initiation, registered or per-request buffers), warm and cold; the kernel's CPU split; fio beside the layer",
        needs: &[],
    },
];

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

/// Run paper 002's experiment if selected.
pub fn run_vmmr(
    preset: Preset,
    selected: &[Experiment],
    bar: &indicatif::ProgressBar,
) -> Res<(Option<VmmrSection>, Vec<ExperimentRecord>)> {
    let Some(e) = selected.iter().find(|e| e.id == "vmmr") else {
        return Ok((None, Vec::new()));
    };
    let plan = match preset {
        Preset::Smoke => zcio_vmmr::bench::Plan::smoke(),
        Preset::Quick => zcio_vmmr::bench::Plan::quick(),
        Preset::Full => zcio_vmmr::bench::Plan::full(),
    };
    let t0 = Instant::now();
    let section = crate::vmmr_bench::measure(&plan, bar)?;
    Ok((Some(section), vec![finished(e, t0, bar)]))
}

/// Run paper 003's checksum experiment if selected.
pub fn run_checksum(
    preset: Preset,
    selected: &[Experiment],
    bar: &indicatif::ProgressBar,
) -> Res<(
    Option<crate::checksum_bench::ChecksumSection>,
    Vec<ExperimentRecord>,
)> {
    let Some(e) = selected.iter().find(|e| e.id == "checksum") else {
        return Ok((None, Vec::new()));
    };
    let args = match preset {
        Preset::Smoke => crate::checksum_bench::ChecksumArgs {
            sizes: vec![64, 4096, 1 << 20],
            rounds: Some(2),
            millis: Some(2),
            datagram_sizes: vec![1472],
            json: false,
        },
        Preset::Quick => crate::checksum_bench::ChecksumArgs::default(),
        Preset::Full => crate::checksum_bench::ChecksumArgs {
            rounds: Some(15),
            millis: Some(50),
            ..Default::default()
        },
    };
    let t0 = Instant::now();
    bar.inc_length(crate::checksum_bench::units(&args) as u64);
    let section = crate::checksum_bench::measure(&args, &mut |m| {
        bar.set_message(m);
        bar.inc(1);
    })?;
    Ok((Some(section), vec![finished(e, t0, bar)]))
}

/// Run paper 003's frame experiment if selected.
pub fn run_frames(
    preset: Preset,
    selected: &[Experiment],
    bar: &indicatif::ProgressBar,
) -> Res<(
    Option<crate::frames_bench::FramesSection>,
    Vec<ExperimentRecord>,
)> {
    let Some(e) = selected.iter().find(|e| e.id == "containers") else {
        return Ok((None, Vec::new()));
    };
    let args = match preset {
        Preset::Smoke => crate::frames_bench::FramesArgs {
            frames: Some(20),
            rounds: Some(1),
            relays: Some(vec![1, 2]),
            json: false,
        },
        Preset::Quick => crate::frames_bench::FramesArgs::default(),
        Preset::Full => crate::frames_bench::FramesArgs {
            frames: Some(3000),
            rounds: Some(7),
            relays: Some(vec![1, 2, 3]),
            json: false,
        },
    };
    let t0 = Instant::now();
    bar.inc_length(args.runs() as u64);
    let section = crate::frames_bench::measure(&args, &mut |m| {
        bar.set_message(m);
        bar.inc(1);
    })?;
    Ok((Some(section), vec![finished(e, t0, bar)]))
}

/// Run paper 004's experiment if selected.
pub fn run_uio(
    preset: Preset,
    selected: &[Experiment],
    bar: &indicatif::ProgressBar,
) -> Res<(Option<crate::uio_bench::UioSection>, Vec<ExperimentRecord>)> {
    let Some(e) = selected.iter().find(|e| e.id == "uio") else {
        return Ok((None, Vec::new()));
    };
    let args = match preset {
        Preset::Smoke => crate::uio_bench::UioArgs {
            rows: Some(10_001),
            queries: Some(vec![1, 2]),
            rounds: Some(1),
            cache: Some(vec!["warm".into()]),
            ..Default::default()
        },
        Preset::Quick => crate::uio_bench::UioArgs::default(),
        Preset::Full => crate::uio_bench::UioArgs {
            rows: Some(500_000),
            rounds: Some(5),
            ..Default::default()
        },
    };
    let t0 = Instant::now();
    bar.inc_length(args.steps() as u64 + 16);
    let section = crate::uio_bench::measure(&args, &mut |m| {
        bar.set_message(m);
        bar.inc(1);
    })?;
    Ok((Some(section), vec![finished(e, t0, bar)]))
}

/// Run paper 003's splice experiment if selected.
pub fn run_splice(
    preset: Preset,
    selected: &[Experiment],
    bar: &indicatif::ProgressBar,
) -> Res<(
    Option<crate::splice_bench::SpliceSection>,
    Vec<ExperimentRecord>,
)> {
    let Some(e) = selected.iter().find(|e| e.id == "splice") else {
        return Ok((None, Vec::new()));
    };
    let args = match preset {
        Preset::Smoke => crate::splice_bench::SpliceArgs {
            mib: Some(2),
            rounds: Some(1),
            seconds: Some(0.05),
            ..Default::default()
        },
        Preset::Quick => crate::splice_bench::SpliceArgs::default(),
        Preset::Full => crate::splice_bench::SpliceArgs {
            mib: Some(256),
            rounds: Some(9),
            seconds: Some(2.0),
            ..Default::default()
        },
    };
    let t0 = Instant::now();
    bar.inc_length(3);
    let section = crate::splice_bench::measure(&args, &mut |m| {
        bar.set_message(m);
        bar.inc(1);
    })?;
    Ok((Some(section), vec![finished(e, t0, bar)]))
}

/// Run paper 001's experiment if selected.
pub fn run_fbufs(
    preset: Preset,
    selected: &[Experiment],
    bar: &indicatif::ProgressBar,
) -> Res<(Option<FbufsSection>, Vec<ExperimentRecord>)> {
    let Some(e) = selected.iter().find(|e| e.id == "fbufs-table1") else {
        return Ok((None, Vec::new()));
    };
    // 4 KiB to 64 MiB, by fours.
    let sweep: Vec<usize> = (0..8).map(|k| 4096 << (2 * k)).collect();
    let (sizes, rounds, volume) = match preset {
        Preset::Smoke => (vec![4096, 65536], 1, 1 << 20),
        Preset::Quick => (sweep, 2, 128 << 20),
        Preset::Full => (sweep, 5, 512 << 20),
    };
    let args = crate::fbufs_bench::FbufsArgs {
        sizes: sizes.clone(),
        contenders: Vec::new(),
        touch: vec!["word-per-page".into(), "every-byte".into()],
        rounds,
        volume,
        json: true,
        fault: None,
    };
    let t0 = Instant::now();
    let (rows, fits) = crate::fbufs_bench::measure(&args, bar)?;
    Ok((
        Some(FbufsSection {
            sizes,
            rounds,
            volume,
            rows,
            fits,
        }),
        vec![finished(e, t0, bar)],
    ))
}

/// Record an experiment that ran since `t0`, and say so (above the progress bar, or on stderr
/// when there is no terminal to draw it on).
fn finished(e: &Experiment, t0: Instant, bar: &indicatif::ProgressBar) -> ExperimentRecord {
    let d = t0.elapsed().as_secs_f64();
    let line = format!("{:<18} {:>7.1} s  {}", e.id, d, e.title);
    if bar.is_hidden() {
        eprintln!("{line}");
    } else {
        bar.println(line);
    }
    ExperimentRecord {
        id: e.id.into(),
        paper: e.paper.into(),
        title: e.title.into(),
        duration_s: d,
        error: None,
    }
}

/// An experiment's outcome, or, if it failed, no section and a record naming the failure: one
/// failing experiment does not take the others' results with it.
fn survive<T>(
    id: &str,
    outcome: Res<(Option<T>, Vec<ExperimentRecord>)>,
    bar: &indicatif::ProgressBar,
) -> (Option<T>, Vec<ExperimentRecord>) {
    match outcome {
        Ok(x) => x,
        Err(e) => {
            let line = format!("{id} failed: {e}");
            if bar.is_hidden() {
                eprintln!("{line}");
            } else {
                bar.println(line);
            }
            let ex = EXPERIMENTS.iter().find(|x| x.id == id);
            (
                None,
                vec![ExperimentRecord {
                    id: id.into(),
                    paper: ex.map_or("", |x| x.paper).into(),
                    title: ex.map_or("", |x| x.title).into(),
                    duration_s: 0.0,
                    error: Some(e.to_string()),
                }],
            )
        }
    }
}

/// The JSON schema of [`Results`].
pub fn schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(Results)).expect("schema serializes")
}

/// Which experiments `only` selects (all when empty); an unknown id is an error naming it.
pub fn select(only: &[String]) -> Res<Vec<Experiment>> {
    for o in only {
        if !EXPERIMENTS.iter().any(|e| e.id.starts_with(o.as_str())) {
            let ids: Vec<_> = EXPERIMENTS.iter().map(|e| e.id).collect();
            return Err(format!(
                "invalid argument `--only {o}`: no such experiment (known: {})",
                ids.join(", ")
            )
            .into());
        }
    }
    let mut wanted: Vec<&str> = EXPERIMENTS
        .iter()
        .filter(|e| only.is_empty() || only.iter().any(|o| e.id.starts_with(o.as_str())))
        .map(|e| e.id)
        .collect();
    for e in EXPERIMENTS {
        if wanted.contains(&e.id) {
            wanted.extend(e.needs.iter().copied());
        }
    }
    // In registry order, so that what an experiment needs runs before it.
    Ok(EXPERIMENTS
        .iter()
        .filter(|e| wanted.contains(&e.id))
        .copied()
        .collect())
}

/// Run the selected experiments of the Genie paper; returns its section and the records.
pub fn run_genie(
    preset: Preset,
    selected: &[Experiment],
    dir: &std::path::Path,
    machine: &machine::Machine,
    bar: &indicatif::ProgressBar,
) -> Res<(Option<GenieSection>, Vec<ExperimentRecord>)> {
    let plan = genie::Plan::of(preset);
    let units = plan.units();
    let on = |id: &str| selected.iter().any(|e| e.id == id);
    let mut total = 0;
    for (i, id) in [
        "genie-latency",
        "genie-short",
        "genie-cpu",
        "genie-modules",
        "genie-throughput",
    ]
    .iter()
    .enumerate()
    {
        if on(id) {
            total += units[i];
        }
    }
    if on("genie-bandwidth") {
        total += 1;
    }
    if on("genie-huge") {
        total += genie_huge::units(&plan);
    }
    if total == 0 {
        return Ok((None, Vec::new()));
    }
    bar.inc_length(total);
    let p = bar.clone();
    p.what("warming up".into());
    genie::warm_up()?;
    let mut g = genie::GenieResults::default();
    let mut records = Vec::new();
    for e in selected.iter().filter(|e| e.paper == "000") {
        let t0 = Instant::now();
        match e.id {
            "genie-latency" => g.latency = genie::latency(&plan, &p)?,
            "genie-short" => g.short = genie::short(&plan, &p)?,
            "genie-cpu" => g.cpu = genie::cpu(&plan, &p)?,
            "genie-modules" => g.modules = genie::modules(&plan, dir, &p)?,
            "genie-bandwidth" => {
                p.what("bandwidth: memcpy and the wire".into());
                g.bandwidths = Some(genie::bandwidths(preset != Preset::Full, machine)?);
                p.inc(1);
            }
            "genie-throughput" => g.throughput = genie::throughput(&plan, &p)?,
            "genie-huge" => genie_huge::measure(&plan, &mut g, &p)?,
            other => return Err(format!("experiment {other} has no runner").into()),
        }
        records.push(finished(e, t0, bar));
    }
    g.fits = genie::fits(&g.latency, &g.cpu);
    let model = model::fit_model(&g, machine.logical_cpus);
    let mut conclusions = model::conclusions(&g, &model);
    conclusions.extend(genie_huge::conclusions(&g));
    Ok((
        Some(GenieSection {
            plan,
            results: g,
            model,
            conclusions,
            profile: None,
        }),
        records,
    ))
}

/// `zcio report`.
pub fn run(a: ReportArgs) -> Res<()> {
    if a.schema {
        println!("{}", serde_json::to_string_pretty(&schema())?);
        return Ok(());
    }
    if a.list {
        for e in EXPERIMENTS {
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
    let selected = select(&a.only)?;
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
    let (mut genie, mut records) = run_genie(a.preset(), &selected, &dir, &machine, &bar)?;
    let (fbufs, more) = survive("fbufs-table1", run_fbufs(a.preset(), &selected, &bar), &bar);
    records.extend(more);
    let (vmmr, more) = survive("vmmr", run_vmmr(a.preset(), &selected, &bar), &bar);
    records.extend(more);
    let (checksum, more) = survive("checksum", run_checksum(a.preset(), &selected, &bar), &bar);
    records.extend(more);
    let (frames, more) = survive("containers", run_frames(a.preset(), &selected, &bar), &bar);
    records.extend(more);
    let (splice, more) = survive("splice", run_splice(a.preset(), &selected, &bar), &bar);
    records.extend(more);
    let (uio, more) = survive("uio", run_uio(a.preset(), &selected, &bar), &bar);
    records.extend(more);
    if let Some(g) = &mut genie {
        g.profile = Some(ProfileUsed {
            path: profile.display().to_string(),
            profile: serde_json::to_value(zcio_genie::profile::Profile::current())?,
        });
    }
    bar.finish_and_clear();
    let results = Results {
        schema: SCHEMA.into(),
        preset: a.preset(),
        started_unix_s,
        duration_s: t0.elapsed().as_secs_f64(),
        machine,
        experiments: records,
        genie,
        fbufs,
        vmmr,
        checksum,
        frames,
        splice,
        uio,
    };
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
        let empty = serde_json::to_value(crate::vmmr_bench::Derived::default())?;
        v.insert("derived".into(), empty);
    }
    let mut results: Results =
        serde_json::from_value(raw).map_err(|e| format!("not a zcio results.json: {e}"))?;
    if results.schema != SCHEMA {
        return Err(format!("schema {:?}, this zcio reads {SCHEMA:?}", results.schema).into());
    }
    if let Some(v) = &mut results.vmmr {
        v.derived = crate::vmmr_bench::derive(&v.rows);
    }
    if let Some(g) = &mut results.genie {
        g.results.fits = genie::fits(&g.results.latency, &g.results.cpu);
        g.model = model::fit_model(&g.results, results.machine.logical_cpus);
        g.conclusions = model::conclusions(&g.results, &g.model);
        g.conclusions.extend(genie_huge::conclusions(&g.results));
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

#[cfg(test)]
mod survive_tests {
    use super::*;

    #[test]
    fn a_failing_experiment_leaves_a_record_naming_the_failure() {
        let bar = indicatif::ProgressBar::hidden();
        let (section, records): (Option<u32>, _) =
            survive("containers", Err("fcntl(F_ADD_SEALS) failed".into()), &bar);
        assert!(section.is_none());
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].id, "containers");
        assert_eq!(records[0].paper, "003");
        assert_eq!(
            records[0].error.as_deref(),
            Some("fcntl(F_ADD_SEALS) failed")
        );
        let (section, records) = survive("uio", Ok((Some(7u32), Vec::new())), &bar);
        assert_eq!((section, records.len()), (Some(7), 0));
    }
}
