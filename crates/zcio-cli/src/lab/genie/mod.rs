//! Paper 000 (Genie): the experiments on the data-passing semantics, sharing one section of
//! `results.json` (`genie`) and one runner, since each feeds the same fitted model.

pub mod bandwidth;
pub mod bench;
pub mod c;
pub mod channel;
pub mod chart;
pub mod claims;
pub mod huge;
pub mod measure;
pub mod model;
pub mod python;
pub mod regions;
pub mod render;
pub mod render_model;

use self::{huge as genie_huge, measure as genie, render as genie_doc};
use crate::lab::genie::measure::Progress as _;
use crate::lab::{Lab, Run, finished};
use crate::report::results::{ExperimentRecord, GenieSection, Results, SectionKind};
use crate::transfer::Res;
use std::time::Instant;

/// Figures 3, 6, 7 (and Tables 6, 9 instrumented); measures the whole group.
pub const LATENCY: Lab = Lab {
    id: "genie-latency",
    paper: "000",
    title: "Figures 3, 6, 7: end-to-end latency against length, eight semantics, three input schemes (instrumented: Tables 6, 9)",
    needs: &[],
    run: Some(run),
    section: Some(SECTION),
    findings: Some(genie_doc::findings),
    claims: Some(claims::claims),
    render: Some(render_all),
};

/// The group's section of `results.json`.
pub const SECTION: SectionKind = SectionKind::of::<GenieSection>(
    "genie",
    "Paper 000 (Genie), when any of its experiments ran.",
);

/// Figure 5.
pub const SHORT: Lab = part(
    "genie-short",
    "Figure 5: short messages with the calibrated thresholds",
    &[],
);

/// Figure 4.
pub const CPU: Lab = part(
    "genie-cpu",
    "Figure 4: I/O processing time (CPU time per transfer)",
    &[],
);

/// The file and kernel-socket modules.
pub const MODULES: Lab = part(
    "genie-modules",
    "The file (O_DIRECT) and kernel-socket modules: which path and why",
    &[],
);

/// Table 10.
pub const BANDWIDTH: Lab = part(
    "genie-bandwidth",
    "Table 10: copy bandwidths and the wire's rate, measured independently",
    &[],
);

/// Figures 3, 4 and Table 6 at 2 MiB.
pub const HUGE: Lab = part(
    "genie-huge",
    "Figures 3 and 4 and Table 6 at 2 MiB: every semantics with huge-page buffers, beside 4 KiB pages",
    &["genie-latency"],
);

/// §5: region caching, measured on the move family.
pub const REGIONS: Lab = part(
    "genie-regions",
    "§5 region caching: the move family with regions recycled and made anew",
    &[],
);

/// Channels between two processes, against iceoryx2 and a Unix socket.
pub const CHANNEL: Lab = part(
    "genie-channel",
    "Channels between two processes: zcio's Channel against iceoryx2 and a Unix socket, latency, throughput, send time",
    &[],
);

/// A numpy array between two Python processes, zcio's module against the standard library's
/// ways and iceoryx2's.
pub const PYTHON: Lab = part(
    "genie-python",
    "From Python: a numpy array between two processes, zcio against multiprocessing, shared_memory and iceoryx2",
    &[],
);

/// A channel's throughput from C (zcio's C interface) against the Rust API's.
pub const C: Lab = part(
    "genie-c",
    "From C: a channel's throughput through libzcio_c against the Rust API's",
    &[],
);

/// §8.2.
pub const THROUGHPUT: Lab = part(
    "genie-throughput",
    "§8.2: system throughput against application work, model and measurement",
    &["genie-cpu", "genie-bandwidth"],
);

/// A Genie experiment measured and rendered with [`LATENCY`]'s group.
const fn part(id: &'static str, title: &'static str, needs: &'static [&'static str]) -> Lab {
    Lab {
        id,
        paper: "000",
        title,
        needs,
        run: None,
        section: None,
        findings: None,
        claims: None,
        render: None,
    }
}

/// Run the selected experiments of the Genie paper into its section; the records.
pub fn run(r: &Run, results: &mut Results) -> Res<Vec<ExperimentRecord>> {
    let plan = genie::Plan::of(r.preset);
    let units = plan.units();
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
        if r.on(id) {
            total += units[i];
        }
    }
    if r.on("genie-bandwidth") {
        total += 1;
    }
    if r.on("genie-regions") {
        total += regions::units(&plan);
    }
    if r.on("genie-huge") {
        total += genie_huge::units(&plan);
    }
    let channel_plan = channel::Plan::of(r.preset);
    if r.on("genie-channel") {
        total += channel_plan.units();
    }
    let python_plan = python::Plan::of(r.preset);
    if r.on("genie-python") {
        total += python_plan.units();
    }
    let c_plan = c::Plan::of(r.preset);
    if r.on("genie-c") {
        total += c_plan.units();
    }
    if total == 0 {
        return Ok(Vec::new());
    }
    r.bar.inc_length(total);
    let p = r.bar.clone();
    p.what("warming up".into());
    genie::warm_up()?;
    let mut g = genie::GenieResults::default();
    let mut records = Vec::new();
    for e in r.selected.iter().filter(|e| e.paper == "000") {
        let t0 = Instant::now();
        match e.id {
            "genie-latency" => g.latency = genie::latency(&plan, &p)?,
            "genie-short" => g.short = genie::short(&plan, &p)?,
            "genie-cpu" => g.cpu = genie::cpu(&plan, &p)?,
            "genie-modules" => g.modules = genie::modules(&plan, r.dir, &p)?,
            "genie-bandwidth" => {
                p.what("bandwidth: memcpy and the wire".into());
                g.bandwidths = Some(bandwidth::bandwidths(
                    r.preset != crate::report::preset::Preset::Full,
                    r.machine,
                )?);
                p.inc(1);
            }
            "genie-throughput" => g.throughput = genie::throughput(&plan, &p)?,
            "genie-huge" => genie_huge::measure(&plan, &mut g, &p)?,
            "genie-regions" => regions::measure(&plan, &mut g, &p)?,
            "genie-channel" => g.channel = Some(channel::measure(&channel_plan, &p)?),
            "genie-python" => g.python = Some(python::measure(&python_plan, &p)?),
            "genie-c" => g.c = Some(c::measure(&c_plan, &p)?),
            other => return Err(format!("experiment {other} has no runner").into()),
        }
        records.push(finished(e, t0, r.bar));
    }
    let mut section = GenieSection {
        plan,
        results: g,
        model: Default::default(),
        conclusions: Vec::new(),
        profile: None,
    };
    refit(&mut section, r.machine.logical_cpus);
    results.sections.put(SECTION.key, section);
    Ok(records)
}

/// Make the fits, the model and the conclusions anew from the raw samples.
pub fn refit(g: &mut GenieSection, logical_cpus: usize) {
    g.results.fits = genie::fits(&g.results.latency, &g.results.cpu);
    g.model = model::fit_model(&g.results, logical_cpus);
    g.conclusions = model::conclusions(&g.results, &g.model);
    g.conclusions.extend(genie_huge::conclusions(&g.results));
}

/// Paper 000's sections: the figures and tables, then the fitted models.
fn render_all(r: &Results) -> Vec<crate::report::doc::Block> {
    let mut b = genie_doc::blocks(r);
    render_model::model_sections(&mut b, r);
    b
}

/// A library this build made beside the running executable: in its `deps`, its own directory,
/// or the one above (`target/<profile>/`), where cargo leaves a dependency's cdylib.
pub fn built_beside_exe(file: &str) -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join("deps"),
        dir.to_path_buf(),
        dir.parent()?.to_path_buf(),
    ]
    .into_iter()
    .map(|d| d.join(file))
    .find(|p| p.exists())
}
