//! `zcio bench genie`: Genie's Figures 3, 6 and 7 alone, fitted, as a table or JSON.

use crate::lab::genie::measure as genie;
use crate::report::preset::Preset;
use crate::transfer::Res;

/// Arguments of `zcio bench genie`.
#[derive(clap::Args, Debug, Clone)]
pub struct GenieArgs {
    /// The papers' full sweep instead of the quick one.
    #[arg(long)]
    pub full: bool,
    /// A few points only (checks the pipeline).
    #[arg(long, hide = true, conflicts_with = "full")]
    pub smoke: bool,
    /// Print JSON (the default prints a table).
    #[arg(long)]
    pub json: bool,
}

/// `zcio bench genie`: Figures 3, 6, 7 alone, fitted.
pub fn run(b: GenieArgs) -> Res<()> {
    let preset = if b.smoke {
        Preset::Smoke
    } else if b.full {
        Preset::Full
    } else {
        Preset::Quick
    };
    let plan = genie::Plan::of(preset);
    crate::report::ensure_profile(&std::env::temp_dir())?;
    let bar = crate::bench_bar(plan.units()[0]);
    let points = genie::latency(&plan, &bar)?;
    bar.finish_and_clear();
    let fits = genie::fits(&points, &[]);
    let contenders: Vec<serde_json::Value> = fits
        .iter()
        .map(|f| {
            let pts: Vec<serde_json::Value> = points
                .iter()
                .filter(|p| {
                    (p.semantics, p.input, p.thresholds) == (f.semantics, f.input, f.thresholds)
                })
                .map(|p| {
                    serde_json::json!({
                        "bytes": p.bytes,
                        "latency_ns": p.latency_ns,
                        "latency_spread_ns": p.latency_spread_ns,
                        "cpu_ns": p.cpu_ns,
                        "cpu_copied_bytes": p.cpu_copied_bytes,
                        "path": p.path,
                        "verified": p.verified,
                    })
                })
                .collect();
            serde_json::json!({
                "figure": f.figure,
                "semantics": f.semantics,
                "input": f.input,
                "thresholds": f.thresholds,
                "slope_ns_per_byte": f.line.slope_ns_per_byte,
                "intercept_ns": f.line.intercept_ns,
                "r2": f.line.r2,
                "points": pts,
            })
        })
        .collect();
    if b.json {
        let out = serde_json::json!({
            "bench": "genie",
            "preset": preset,
            "plan": plan,
            "vm": zcio_vm::VmRuntime::get().capabilities(),
            "contenders": contenders,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    println!(
        "{:<6} {:<20} {:<18} {:>12} {:>10} {:>7}",
        "figure", "semantics", "input", "ns/byte", "ns", "R²"
    );
    for f in &fits {
        println!(
            "{:<6} {:<20} {:<18} {:>12.5} {:>10.0} {:>7}",
            f.figure,
            f.semantics.name(),
            f.input.name(),
            f.line.slope_ns_per_byte,
            f.line.intercept_ns,
            f.line.r2.map_or("-".into(), |r| format!("{r:.3}"))
        );
    }
    Ok(())
}
