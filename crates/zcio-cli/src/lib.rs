//! The `zcio` command's library: transfers between processes, benchmarks side by side, and the
//! reproduction report (`zcio report`) with its experiments, fitted models, plots and documents.

pub mod drill;
pub mod error;
pub mod lab;
pub mod memnet;
pub mod report;
pub mod soak;
pub mod transfer;

pub use error::Res;

/// A progress bar for a `zcio bench` run of `len` steps: elapsed time, the bar, steps done,
/// what is being measured.
pub fn bench_bar(len: u64) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(len);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} (eta {eta}) {msg}",
        )
        .expect("template"),
    );
    bar
}

/// Progress reported on `bar` by a `measure` that says what it does step by step: each step's
/// message shown, and the step counted done.
pub fn progress(bar: &indicatif::ProgressBar) -> impl FnMut(String) + '_ {
    move |m| {
        bar.set_message(m);
        bar.inc(1);
    }
}

/// Run a bench's `measure` under a progress bar of `steps` (each message `measure` reports
/// is one step). With `json`, print the results as JSON ([`print_bench_json`]) and return
/// `None`; otherwise return them for the bench to print as a table.
pub fn run_bench<S: serde::Serialize>(
    name: &str,
    steps: u64,
    json: bool,
    measure: impl FnOnce(&mut dyn FnMut(String)) -> Res<S>,
) -> Res<Option<S>> {
    let bar = bench_bar(steps);
    let s = measure(&mut progress(&bar))?;
    bar.finish_and_clear();
    if json {
        print_bench_json(name, &s)?;
        return Ok(None);
    }
    Ok(Some(s))
}

/// A bench's results as JSON, with `"bench": name` added.
fn bench_json(name: &str, section: &impl serde::Serialize) -> Res<serde_json::Value> {
    let mut v = serde_json::to_value(section)?;
    if let Some(o) = v.as_object_mut() {
        o.insert("bench".into(), name.into());
    }
    Ok(v)
}

/// Print a bench's results as JSON, with `"bench": name` added.
pub fn print_bench_json(name: &str, section: &impl serde::Serialize) -> Res<()> {
    println!(
        "{}",
        serde_json::to_string_pretty(&bench_json(name, section)?)?
    );
    Ok(())
}

/// The end of a bench whose rows are checked: its results as JSON ([`print_bench_json`]) or
/// `table()`, then, if some of its `rows` rows failed, a failure that says `"bench {name}: {n}
/// of {rows} rows {what}: {failures}"`. With JSON, the results travel in the error
/// ([`error::FailedWith`]), printed all the same.
pub fn finish_checked_bench(
    name: &str,
    section: &impl serde::Serialize,
    rows: usize,
    what: &str,
    failures: &[String],
    json: bool,
    table: impl FnOnce() -> String,
) -> Res<()> {
    let reason = || {
        format!(
            "bench {name}: {} of {rows} rows {what}: {}",
            failures.len(),
            failures.join("; ")
        )
    };
    if json {
        let v = bench_json(name, section)?;
        if !failures.is_empty() {
            return Err(error::Error::new(error::FailedWith {
                result: v,
                reason: reason(),
            }));
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print!("{}", table());
    if !failures.is_empty() {
        return Err(reason().into());
    }
    Ok(())
}
