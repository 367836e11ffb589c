//! The whole report as one document: the machine in a sentence, the table of the papers'
//! claims with their verdicts, each experiment's sections (in the registry's order,
//! [`crate::lab::LABS`]), and the list of experiments that ran.

use crate::report::doc::{Block, Doc};
use crate::report::results::Results;
use crate::report::text::{h, p, table_of};

/// Build the whole document.
pub fn document(r: &Results) -> Doc {
    let mut b = Vec::new();
    let m = &r.machine;
    b.push(h(1, "zcio reproduction report"));
    b.push(p(format!(
        "Measured on {} ({} CPUs, {:.0} GiB, kernel {}) with the {:?} preset in {:.0} s. Latency is wall time; CPU time is the processes' CPU clocks. Every point is the median over rounds of the per-run median, with the lowest and highest run as its spread; contenders alternate round by round. Every message of every run was checked byte for byte at the receiver.",
        m.cpu_model,
        m.logical_cpus,
        m.memory_bytes as f64 / (1u64 << 30) as f64,
        m.kernel.split_whitespace().next().unwrap_or(""),
        r.preset,
        r.duration_s
    )));
    let claims = crate::lab::claims(r);
    b.extend(crate::report::claims::blocks(&claims));
    b.extend(crate::lab::render(r));
    tail(&mut b, r);
    let mut doc = Doc {
        title: "zcio reproduction report".into(),
        blocks: b,
    };
    crate::report::claims::link(&mut doc, &claims);
    doc
}

/// The list of experiments that ran, and where the raw samples are.
fn tail(b: &mut Vec<Block>, r: &Results) {
    b.push(h(2, "Experiments run"));
    b.push(table_of(
        "Each experiment's id (for `zcio report --only`) and wall time",
        &["id", "paper", "what", "seconds"],
        &r.experiments,
        |e| {
            vec![
                e.id.clone(),
                e.paper.clone(),
                match &e.error {
                    None => e.title.clone(),
                    Some(w) => format!("{} — FAILED: {w}", e.title),
                },
                match &e.error {
                    None => format!("{:.1}", e.duration_s),
                    Some(_) => "failed".into(),
                },
            ]
        },
    ));
    b.push(p("Raw samples (every run's per-message latencies, CPU times, and the primitive operations recorded), the fitted models and the machine are in results.json, described by schema/results.schema.json."));
}
