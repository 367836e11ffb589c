//! `zcio calibrate`: measure the primitives on this machine and write the profile the library
//! loads.

use super::args::CalibrateArgs;
use zcio_cli::Res;
use zcio_cli::error::Context;
use zcio_genie::profile::Profile;

/// Calibrate under a progress bar, write the profile and print it.
pub fn run(a: CalibrateArgs) -> Res<()> {
    let bar = indicatif::ProgressBar::new(100);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{msg:>12} [{bar:40}] {percent}%")
            .expect("template"),
    );
    let p = Profile::calibrate(a.quick, |step, frac| {
        bar.set_message(step.to_string());
        bar.set_position((frac * 100.0) as u64);
    })
    .context("calibrate")?;
    bar.finish_and_clear();
    let path = a.out.unwrap_or_else(Profile::default_path);
    p.save(&path)
        .with_context(|| format!("calibrate: write the profile to {}", path.display()))?;
    eprintln!("profile written to {}", path.display());
    println!("{}", serde_json::to_string_pretty(&p)?);
    Ok(())
}
