//! What the paper's explanation of its result comes to in this run, computed from the
//! measurements: how much of the kernel variant's CPU is copying, what direct transfer alone
//! gains over the kernel's buffered reads, and how far apart the layer's variants lie.

use crate::lab::uio::measure::UioSection;
use crate::lab::uio::render::{max_n, row};

/// The closing paragraph of paper 004's section.
pub fn closing(u: &UioSection) -> String {
    let n = max_n(u);
    let paper = "The paper's server spent most of its I/O CPU copying from the buffer cache into MySQL's buffers, and its simulated disks delivered data at the rate of the device; the user-level path removed the copy and let 13 queries run where the kernel path saturated at 9.";
    let mut s = vec![paper.to_string()];
    if let Some(b) = u
        .breakdown
        .iter()
        .find(|b| b.cache == "warm" && b.queries == n)
        .filter(|b| b.cpu_s > 0.0)
    {
        let copy = b.copy_s / b.cpu_s;
        s.push(format!(
            "Here, with the tables in the page cache, copying is {:.0} % of the kernel variant's CPU at N = {n} (Figure 6): {} part.",
            100.0 * copy,
            if copy >= 0.5 { "the largest" } else { "a small" }
        ));
    }
    let over = |v: &str| row(u, v, "warm", n).map(|r| r.over_kernel);
    if let Some(d) = over("uio_syscall_per_request") {
        s.push(format!(
            "Direct transfer alone (O_DIRECT reads, which come from the device rather than the page cache) runs at {d:.2}× the kernel's buffered reads with the tables in the page cache: {}.",
            if d < 1.0 {
                "it costs more than the copy it saves"
            } else {
                "it saves more than it costs"
            }
        ));
    }
    let layer: Vec<f64> = [
        "uio",
        "uio_syscall",
        "uio_per_request",
        "uio_syscall_per_request",
    ]
    .into_iter()
    .filter_map(over)
    .collect();
    let lo = layer.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = layer.iter().copied().fold(0.0, f64::max);
    if layer.len() > 1 && lo > 0.0 {
        s.push(format!(
            "The layer's variants (initiation, translation) lie within {:.2}× of each other{}.",
            hi / lo,
            if hi / lo < 1.2 {
                ", small beside that, as the paper found for initiation"
            } else {
                ""
            }
        ));
    }
    s.join(" ")
}
