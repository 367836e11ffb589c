//! `zcio probe`: the kernel features zcio uses, as JSON; with `--check-skips`, the skips the
//! tests recorded held against them.

use super::args::ProbeArgs;
use std::path::Path;
use zcio_cli::Res;
use zcio_cli::error::Context;
use zcio_genie::probe::Probe;

/// Probe, print, and check the skip log if asked.
pub fn run(a: ProbeArgs) -> Res<()> {
    let p = zcio_genie::probe::probe(&a.dir);
    println!(
        "{}",
        serde_json::to_string_pretty(&p).expect("probe serializes")
    );
    match a.check_skips {
        Some(log) => check_skips_against(&p, &log),
        None => Ok(()),
    }
}

/// `zcio probe --check-skips`: every recorded skip must be for a capability the probe finds
/// absent.
fn check_skips_against(p: &Probe, log: &Path) -> Res<()> {
    let text = match std::fs::read_to_string(log) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(), // nothing skipped
        Err(e) => {
            return Err(e).with_context(|| format!("cannot read the skip log {}", log.display()));
        }
    };
    let skips = zcio_vm::skip::read_log(&text)
        .with_context(|| format!("the skip log {}", log.display()))?;
    let (ok, failures) = p.check_skips(&skips);
    for l in &ok {
        eprintln!("{l}");
    }
    for l in &failures {
        eprintln!("SKIP FAILED: {l}");
    }
    eprintln!(
        "{} test skip(s): {} for capabilities absent here, {} failing",
        skips.len(),
        ok.len(),
        failures.len()
    );
    if !failures.is_empty() {
        return Err(format!(
            "{} test(s) skipped for capabilities this machine has",
            failures.len()
        )
        .into());
    }
    Ok(())
}
