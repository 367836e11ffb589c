//! Paper 000's curves as every Genie figure draws them: one per semantics, in the paper's
//! colours, with the runs' spread as a band.

use crate::lab::genie::measure::{Point, Thresholds};
use crate::report::plot::{Chart, Scale, Series, Style};
use zcio_genie::Semantics;

/// Latency (or CPU) curves of `points`, one per semantics (and thresholds), in µs.
pub fn curves(points: &[&Point], cpu: bool, label_thresholds: bool) -> Vec<Series> {
    let mut keys: Vec<(Semantics, Thresholds)> = Vec::new();
    for pt in points {
        if !keys.contains(&(pt.semantics, pt.thresholds)) {
            keys.push((pt.semantics, pt.thresholds));
        }
    }
    keys.iter()
        .map(|&(s, t)| {
            let mut pts: Vec<&&Point> = points
                .iter()
                .filter(|x| x.semantics == s && x.thresholds == t)
                .collect();
            pts.sort_by_key(|x| x.bytes);
            let y = |x: &Point| if cpu { x.cpu_ns } else { x.latency_ns };
            let sp = |x: &Point| {
                if cpu {
                    x.cpu_spread_ns
                } else {
                    x.latency_spread_ns
                }
            };
            Series {
                color: Some(sem_color(s)),
                name: if label_thresholds && t == Thresholds::Calibrated {
                    format!("{s} (calibrated)")
                } else {
                    s.to_string()
                },
                points: pts.iter().map(|x| (x.bytes as f64, y(x) / 1e3)).collect(),
                style: if t == Thresholds::Calibrated && label_thresholds {
                    Style::Dashed
                } else {
                    Style::Line
                },
                band: Some(
                    pts.iter()
                        .map(|x| (x.bytes as f64, sp(x)[0] / 1e3, sp(x)[1] / 1e3))
                        .collect(),
                ),
            }
        })
        .collect()
}

/// The colour of a semantics in every chart: its position in the paper's order.
pub fn sem_color(s: Semantics) -> usize {
    Semantics::ALL.iter().position(|x| *x == s).unwrap_or(0)
}

/// A chart against message length, as Figures 3 to 7 plot: both axes on `scale`.
pub fn against_length(title: String, y_label: &str, scale: Scale, series: Vec<Series>) -> Chart {
    Chart {
        title,
        x_label: "message length (bytes)".into(),
        y_label: y_label.into(),
        x_scale: scale,
        y_scale: scale,
        series,
    }
}

/// The distinct message lengths of `points`, shortest first: the columns of a figure's table.
pub fn distinct_lengths<'a>(points: impl IntoIterator<Item = &'a Point>) -> Vec<usize> {
    let mut v: Vec<usize> = points.into_iter().map(|p| p.bytes).collect();
    v.sort_unstable();
    v.dedup();
    v
}
