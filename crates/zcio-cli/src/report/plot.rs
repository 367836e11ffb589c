//! Line charts for the report, rendered with `plotters` to SVG.
//!
//! A chart is drawn on a fixed 760 × 460 canvas: the title on top, the plot on the left and the
//! legend in its own column on the right, so that it never hides a curve. The legend lists the
//! series in the order of their curves at the right edge (highest last point first), as the
//! papers' figures do. Series take their colour from their position in [`Chart::series`], so the
//! same position has the same colour in every chart.
//!
//! Axis ticks are chosen here rather than by `plotters`: decades (and, over short spans, the 2 and
//! 5 multiples) on logarithmic axes, 1-2-5 steps on linear ones, labelled shortly (`1k`, `10M`).

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;

/// An axis scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Scale {
    /// Linear.
    Linear,
    /// Base-10 logarithmic (every value must be positive).
    Log,
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Style {
    /// Solid line through the points, with markers.
    Line,
    /// Dashed line (models, estimates), no markers.
    Dashed,
    /// Markers only.
    Points,
}

/// One curve.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// (x, y) points, in x order.
    pub points: Vec<(f64, f64)>,
    /// Drawing style.
    pub style: Style,
    /// Spread per point: (x, low, high), drawn as a vertical bar.
    pub band: Option<Vec<(f64, f64, f64)>>,
    /// Palette index (`None`: the series' position), so that one quantity keeps its colour
    /// across curves and charts (a model and its measurement, a semantics in every figure).
    pub color: Option<usize>,
}

/// A chart: axes with units, and curves.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Chart {
    /// Title drawn above the plot.
    pub title: String,
    /// X axis label, with its unit, e.g. "message length (bytes)".
    pub x_label: String,
    /// Y axis label, with its unit, e.g. "latency (µs)".
    pub y_label: String,
    /// X scale.
    pub x_scale: Scale,
    /// Y scale.
    pub y_scale: Scale,
    /// Curves. The legend lists them in the order of their curves at the right edge (highest
    /// first), as the paper's figures do.
    pub series: Vec<Series>,
}

/// Canvas width of every chart, in pixels.
pub const WIDTH: u32 = 760;
/// Canvas height of every chart, in pixels.
pub const HEIGHT: u32 = 460;

/// Series colours, by series position (wrapping around): matplotlib's "tab10", then black, a
/// dark navy and a dark gold. Neighbours differ in hue, so that the 8 semantics of a chart stay
/// apart.
const PALETTE: [RGBColor; 13] = [
    RGBColor(0x1f, 0x77, 0xb4), // blue
    RGBColor(0xff, 0x7f, 0x0e), // orange
    RGBColor(0x2c, 0xa0, 0x2c), // green
    RGBColor(0xd6, 0x27, 0x28), // red
    RGBColor(0x94, 0x67, 0xbd), // purple
    RGBColor(0x8c, 0x56, 0x4b), // brown
    RGBColor(0xe3, 0x77, 0xc2), // pink
    RGBColor(0x7f, 0x7f, 0x7f), // grey
    RGBColor(0xbc, 0xbd, 0x22), // olive
    RGBColor(0x17, 0xbe, 0xcf), // cyan
    RGBColor(0x00, 0x00, 0x00), // black
    RGBColor(0x39, 0x3b, 0x79), // navy
    RGBColor(0xb8, 0x86, 0x0b), // dark gold
];

/// The colour of the series at `index` in a chart, as `(r, g, b)`.
pub fn series_color(index: usize) -> (u8, u8, u8) {
    let RGBColor(r, g, b) = PALETTE[index % PALETTE.len()];
    (r, g, b)
}

const FONT: &str = "sans-serif";
const TITLE_SIZE: u32 = 22;
const LABEL_SIZE: u32 = 15;
const DESC_SIZE: u32 = 17;
const LEGEND_SIZE: u32 = 16;
/// Longest legend label, in characters; longer ones are cut with an ellipsis.
const LEGEND_MAX_CHARS: usize = 30;

/// A series reduced to what is drawn: finite points, in the series' position.
struct Curve<'a> {
    index: usize,
    series: &'a Series,
    points: Vec<(f64, f64)>,
    band: Vec<(f64, f64, f64)>,
}

impl Curve<'_> {
    /// The y value the legend sorts by: the last point's, else the middle of the last bar's.
    fn last_y(&self) -> f64 {
        match (self.points.last(), self.band.last()) {
            (Some(&(_, y)), _) => y,
            (None, Some(&(_, lo, hi))) => (lo + hi) / 2.0,
            (None, None) => f64::NEG_INFINITY,
        }
    }
}

/// One axis: its range and its ticks (labelled `bold`, grid-only `light`).
struct Axis {
    lo: f64,
    hi: f64,
    bold: Vec<f64>,
    light: Vec<f64>,
    scale: Scale,
    /// Linear axes: the tick step, which sets the label precision.
    step: f64,
}

/// Render `chart` as a standalone SVG document (760 × 460, with a `viewBox`).
///
/// Non-finite points are skipped. Errors: a chart with nothing to draw, and a non-positive value
/// on a logarithmic axis (the message names the series).
pub fn svg(chart: &Chart) -> Result<String, String> {
    let curves = curves(chart)?;
    let (xs, ys) = extents(&curves);
    let x = axis(xs, chart.x_scale);
    let y = axis(ys, chart.y_scale);
    match (chart.x_scale, chart.y_scale) {
        (Scale::Linear, Scale::Linear) => render(chart, &curves, linear(&x), linear(&y), &x, &y),
        (Scale::Linear, Scale::Log) => render(chart, &curves, linear(&x), log(&y), &x, &y),
        (Scale::Log, Scale::Linear) => render(chart, &curves, log(&x), linear(&y), &x, &y),
        (Scale::Log, Scale::Log) => render(chart, &curves, log(&x), log(&y), &x, &y),
    }
}

/// The legend order: positions into `curves`, highest last y first (stable for ties).
fn legend_order(curves: &[Curve<'_>]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..curves.len()).collect();
    order.sort_by(|&a, &b| curves[b].last_y().total_cmp(&curves[a].last_y()));
    order
}

/// Keep the finite points of every series, and check them against the scales.
fn curves(chart: &Chart) -> Result<Vec<Curve<'_>>, String> {
    let check = |series: &Series, axis: &str, scale: Scale, v: f64| {
        if scale == Scale::Log && v <= 0.0 {
            Err(format!(
                "chart {:?}, series {:?}: {axis} value {v} is not positive, but the {axis} axis is \
                 logarithmic",
                chart.title, series.name
            ))
        } else {
            Ok(())
        }
    };
    let mut out = Vec::new();
    for (index, series) in chart.series.iter().enumerate() {
        let points: Vec<(f64, f64)> = series
            .points
            .iter()
            .copied()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        let band: Vec<(f64, f64, f64)> = series
            .band
            .iter()
            .flatten()
            .copied()
            .filter(|(x, lo, hi)| x.is_finite() && lo.is_finite() && hi.is_finite())
            .collect();
        for &(x, y) in &points {
            check(series, "x", chart.x_scale, x)?;
            check(series, "y", chart.y_scale, y)?;
        }
        for &(x, lo, hi) in &band {
            check(series, "x", chart.x_scale, x)?;
            check(series, "y", chart.y_scale, lo)?;
            check(series, "y", chart.y_scale, hi)?;
        }
        if !points.is_empty() || !band.is_empty() {
            out.push(Curve {
                index: series.color.unwrap_or(index),
                series,
                points,
                band,
            });
        }
    }
    if out.is_empty() {
        return Err(format!(
            "chart {:?} has nothing to draw: {} series, none with a finite point",
            chart.title,
            chart.series.len()
        ));
    }
    Ok(out)
}

/// The (min, max) of x and of y over all points and bars.
fn extents(curves: &[Curve<'_>]) -> ((f64, f64), (f64, f64)) {
    let mut x = (f64::INFINITY, f64::NEG_INFINITY);
    let mut y = (f64::INFINITY, f64::NEG_INFINITY);
    let add = |v: f64, r: &mut (f64, f64)| {
        r.0 = r.0.min(v);
        r.1 = r.1.max(v);
    };
    for c in curves {
        for &(px, py) in &c.points {
            add(px, &mut x);
            add(py, &mut y);
        }
        for &(bx, lo, hi) in &c.band {
            add(bx, &mut x);
            add(lo.min(hi), &mut y);
            add(lo.max(hi), &mut y);
        }
    }
    (x, y)
}

/// Choose the range and ticks of an axis holding values in `min..=max`.
fn axis((min, max): (f64, f64), scale: Scale) -> Axis {
    match scale {
        Scale::Log => log_axis(min, max),
        Scale::Linear => linear_axis(min, max),
    }
}

/// The data range, out to the nearest decades when they are within a factor of 2 (else 10 %
/// wider). Labels on decades (every few decades over spans wider than ten), also on the 2 and 5
/// multiples over spans up to 3.2 decades, and on every multiple under one decade; grid lines on
/// the other multiples over spans up to 6 decades.
fn log_axis(min: f64, max: f64) -> Axis {
    let (lmin, lmax) = (min.log10(), max.log10());
    let mut lo = if lmin - lmin.floor() <= 0.302 {
        lmin.floor()
    } else {
        lmin - 0.04
    };
    let mut hi = if lmax.ceil() - lmax <= 0.302 {
        lmax.ceil()
    } else {
        lmax + 0.04
    };
    if hi - lo < 0.1 {
        lo -= 0.5;
        hi += 0.5;
    }
    let span = hi - lo;
    let labelled: &[u32] = if span > 3.2 {
        &[1]
    } else if span > 0.9 {
        &[1, 2, 5]
    } else {
        &[1, 2, 3, 4, 5, 6, 7, 8, 9]
    };
    let stride = (span / 10.0).ceil().max(1.0) as i32;
    let (first, last) = (lo.floor() as i32, hi.ceil() as i32);
    let mut bold = Vec::new();
    let mut light = Vec::new();
    for d in first..=last {
        for k in 1..=9u32 {
            let v = f64::from(k) * 10f64.powi(d);
            let lv = v.log10();
            if lv < lo - 1e-9 || lv > hi + 1e-9 {
                continue;
            }
            if labelled.contains(&k) && (k != 1 || (d - first) % stride == 0) {
                bold.push(v);
            } else if span <= 6.0 {
                light.push(v);
            }
        }
    }
    Axis {
        lo: 10f64.powf(lo),
        hi: 10f64.powf(hi),
        bold,
        light,
        scale: Scale::Log,
        step: 0.0,
    }
}

/// A 1-2-5 step giving about `target` intervals over `span`.
fn nice_step(span: f64, target: f64) -> f64 {
    let raw = span / target;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let k = if norm < 1.5 {
        1.0
    } else if norm < 3.0 {
        2.0
    } else if norm < 7.0 {
        5.0
    } else {
        10.0
    };
    k * mag
}

/// The data range, widened a little and out to whole steps, taking in 0 when it is near.
fn linear_axis(min: f64, max: f64) -> Axis {
    let (mut lo, mut hi) = (min, max);
    if lo == hi {
        let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        lo -= d;
        hi += d;
    }
    if lo >= 0.0 && lo <= 0.25 * hi {
        lo = 0.0;
    }
    let pad = (hi - lo) * 0.01;
    if lo != 0.0 {
        lo -= pad;
    }
    hi += pad;
    let step = nice_step(hi - lo, 6.0);
    let (a, b) = ((lo / step).floor() * step, (hi / step).ceil() * step);
    let n = ((b - a) / step).round();
    if !(step > 0.0 && a.is_finite() && b.is_finite() && (0.0..=100.0).contains(&n)) {
        // A span at the ends of what a double holds (one that overflows, or so small next to
        // its values that whole steps cannot be counted): the axis keeps its ends and draws
        // no ticks between them.
        return Axis {
            lo,
            hi,
            bold: [lo, hi].into_iter().filter(|x| x.is_finite()).collect(),
            light: Vec::new(),
            scale: Scale::Linear,
            step: 0.0,
        };
    }
    (lo, hi) = (a, b);
    let n = n as i64;
    let bold: Vec<f64> = (0..=n).map(|i| lo + i as f64 * step).collect();
    let light: Vec<f64> = (0..n).map(|i| lo + (i as f64 + 0.5) * step).collect();
    Axis {
        lo,
        hi,
        bold,
        light,
        scale: Scale::Linear,
        step,
    }
}

/// A coordinate (`plotters`' linear or logarithmic one) with the ticks chosen by [`axis`]:
/// labels and bold grid lines at `bold`, light grid lines at `light`.
struct Ticked<R> {
    inner: R,
    bold: Vec<f64>,
    light: Vec<f64>,
}

impl<R: Ranged<ValueType = f64>> Ranged for Ticked<R> {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        self.inner.map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.light.clone()
        } else {
            self.bold.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.inner.range()
    }
}

fn linear(a: &Axis) -> Ticked<RangedCoordf64> {
    Ticked {
        inner: (a.lo..a.hi).into(),
        bold: a.bold.clone(),
        light: a.light.clone(),
    }
}

fn log(a: &Axis) -> Ticked<LogCoord<f64>> {
    Ticked {
        inner: (a.lo..a.hi).log_scale().into(),
        bold: a.bold.clone(),
        light: a.light.clone(),
    }
}

/// A tick label: short, with an SI suffix for large values (`1k`, `10M`).
fn tick_label(v: f64, a: &Axis) -> String {
    // Values that are zero up to rounding.
    if v.abs() < 1e-12 * (a.hi.abs() + a.lo.abs()).max(f64::MIN_POSITIVE) {
        return "0".to_owned();
    }
    let magnitude = match a.scale {
        Scale::Log => v.abs(),
        Scale::Linear => a.lo.abs().max(a.hi.abs()),
    };
    let (div, suffix) = if magnitude >= 1e12 {
        (1e12, "T")
    } else if magnitude >= 1e9 {
        (1e9, "G")
    } else if magnitude >= 1e6 {
        (1e6, "M")
    } else if magnitude >= 1e4 || (a.scale == Scale::Log && magnitude >= 1e3) {
        (1e3, "k")
    } else {
        (1.0, "")
    };
    if magnitude < 1e-3 {
        return format!("{v:e}");
    }
    let scaled = v / div;
    let decimals = match a.scale {
        // 3 significant digits.
        Scale::Log => (2 - scaled.abs().log10().floor() as i32).max(0),
        // As many as the step needs.
        Scale::Linear if a.step > 0.0 => (-(a.step / div).log10().floor() as i32).clamp(0, 12),
        // An axis without ticks between its ends: its ends to 3 significant digits.
        Scale::Linear => (2 - scaled.abs().log10().floor() as i32).clamp(0, 12),
    }
    .min(9) as usize;
    let mut s = format!("{scaled:.decimals$}");
    if s.contains('.') {
        s.truncate(s.trim_end_matches('0').trim_end_matches('.').len());
    }
    s.push_str(suffix);
    s
}

/// A legend label, cut to [`LEGEND_MAX_CHARS`].
fn legend_label(name: &str) -> String {
    if name.chars().count() <= LEGEND_MAX_CHARS {
        name.to_owned()
    } else {
        let mut s: String = name.chars().take(LEGEND_MAX_CHARS - 1).collect();
        s.push('…');
        s
    }
}

fn render<X, Y>(
    chart: &Chart,
    curves: &[Curve<'_>],
    x_coord: X,
    y_coord: Y,
    x: &Axis,
    y: &Axis,
) -> Result<String, String>
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let err =
        |what: &str, e: &dyn std::fmt::Display| format!("chart {:?}: {what}: {e}", chart.title);
    let order = legend_order(curves);
    let labels: Vec<String> = order
        .iter()
        .map(|&i| legend_label(&curves[i].series.name))
        .collect();
    // Width of the legend column: a line sample, a gap, the longest label (≈ 0.56 em a glyph).
    let longest = labels.iter().map(|l| l.chars().count()).max().unwrap_or(0);
    let legend_width =
        (48 + (longest as f64 * f64::from(LEGEND_SIZE) * 0.56) as u32).clamp(120, 290);

    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err("background", &e))?;
        let body = root
            .titled(
                &chart.title,
                (FONT, TITLE_SIZE).into_font().style(FontStyle::Bold),
            )
            .map_err(|e| err("title", &e))?;
        let (plot_area, legend_area) = body.split_horizontally(WIDTH - legend_width);

        let mut ctx = ChartBuilder::on(&plot_area)
            .margin_top(8)
            .margin_left(8)
            .margin_right(14)
            .margin_bottom(6)
            .x_label_area_size(48)
            .y_label_area_size(68)
            .build_cartesian_2d(x_coord, y_coord)
            .map_err(|e| err("axes", &e))?;
        let x_fmt = |v: &f64| tick_label(*v, x);
        let y_fmt = |v: &f64| tick_label(*v, y);
        ctx.configure_mesh()
            .x_desc(chart.x_label.as_str())
            .y_desc(chart.y_label.as_str())
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .label_style((FONT, LABEL_SIZE))
            .axis_desc_style((FONT, DESC_SIZE))
            .bold_line_style(RGBColor(0xd0, 0xd0, 0xd0))
            .light_line_style(RGBColor(0xee, 0xee, 0xee))
            .axis_style(RGBColor(0x40, 0x40, 0x40))
            .draw()
            .map_err(|e| err("mesh", &e))?;

        for c in curves {
            let color = PALETTE[c.index % PALETTE.len()];
            let line = color.stroke_width(2);
            if !c.band.is_empty() {
                let bar = color.mix(0.85).stroke_width(1);
                let cap = |at: (f64, f64)| {
                    EmptyElement::at(at) + PathElement::new(vec![(-4, 0), (4, 0)], bar)
                };
                ctx.draw_series(
                    c.band
                        .iter()
                        .map(|&(bx, lo, hi)| PathElement::new(vec![(bx, lo), (bx, hi)], bar)),
                )
                .map_err(|e| err("error bars", &e))?;
                ctx.draw_series(c.band.iter().map(|&(bx, lo, _)| cap((bx, lo))))
                    .map_err(|e| err("error bars", &e))?;
                ctx.draw_series(c.band.iter().map(|&(bx, _, hi)| cap((bx, hi))))
                    .map_err(|e| err("error bars", &e))?;
            }
            match c.series.style {
                Style::Line => {
                    ctx.draw_series(LineSeries::new(c.points.iter().copied(), line))
                        .map_err(|e| err("line", &e))?;
                    ctx.draw_series(c.points.iter().map(|&p| Circle::new(p, 3, color.filled())))
                        .map_err(|e| err("markers", &e))?;
                }
                Style::Dashed => {
                    ctx.draw_series(DashedLineSeries::new(c.points.iter().copied(), 8, 5, line))
                        .map_err(|e| err("dashed line", &e))?;
                }
                Style::Points => {
                    ctx.draw_series(c.points.iter().map(|&p| Circle::new(p, 4, color.filled())))
                        .map_err(|e| err("markers", &e))?;
                }
            }
        }

        draw_legend(&legend_area, curves, &order, &labels).map_err(|e| err("legend", &e))?;
        root.present().map_err(|e| err("output", &e))?;
    }
    Ok(out)
}

/// The legend column: one row per curve in `order`, a sample of its line and its label.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    curves: &[Curve<'_>],
    order: &[usize],
    labels: &[String],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (w, h) = area.dim_in_pixel();
    let (w, h) = (w as i32, h as i32);
    let top = 8;
    let avail = h - top - 60;
    let row = (avail / order.len().max(1) as i32).clamp(12, 26);
    let box_h = row * order.len() as i32 + 10;
    area.draw(&Rectangle::new(
        [(2, top), (w - 6, top + box_h)],
        RGBColor(0xbb, 0xbb, 0xbb).stroke_width(1),
    ))?;
    let font = (FONT, LEGEND_SIZE)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (slot, (&i, label)) in order.iter().zip(labels).enumerate() {
        let c = &curves[i];
        let color = PALETTE[c.index % PALETTE.len()];
        let y = top + 5 + row * slot as i32 + row / 2;
        let (x0, x1) = (10, 38);
        match c.series.style {
            Style::Line => {
                area.draw(&PathElement::new(
                    vec![(x0, y), (x1, y)],
                    color.stroke_width(2),
                ))?;
                area.draw(&Circle::new(((x0 + x1) / 2, y), 3, color.filled()))?;
            }
            Style::Dashed => {
                area.draw(&DashedPathElement::new(
                    vec![(x0, y), (x1, y)],
                    8,
                    5,
                    color.stroke_width(2),
                ))?;
            }
            Style::Points => {
                area.draw(&Circle::new(((x0 + x1) / 2, y), 4, color.filled()))?;
            }
        }
        area.draw(&Text::new(label.clone(), (x1 + 8, y), font.clone()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, points: &[(f64, f64)], style: Style) -> Series {
        Series {
            name: name.to_owned(),
            points: points.to_vec(),
            style,
            band: None,
            color: None,
        }
    }

    fn chart(x_scale: Scale, y_scale: Scale, series: Vec<Series>) -> Chart {
        Chart {
            title: "Latency by length".to_owned(),
            x_label: "message length (bytes)".to_owned(),
            y_label: "latency (µs)".to_owned(),
            x_scale,
            y_scale,
            series,
        }
    }

    #[test]
    fn svg_has_title_axes_and_every_series() {
        let mut copy = series(
            "copy",
            &[(1.0, 10.0), (1000.0, 50.0), (1e6, 900.0)],
            Style::Line,
        );
        copy.band = Some(vec![(1.0, 9.0, 11.0), (1000.0, 45.0, 55.0)]);
        let c = chart(
            Scale::Log,
            Scale::Log,
            vec![
                copy,
                series("model", &[(1.0, 8.0), (1e6, 800.0)], Style::Dashed),
                series("move", &[(1.0, 5.0), (1e6, 20.0)], Style::Points),
            ],
        );
        let s = svg(&c).unwrap();
        assert!(s.starts_with("<svg"), "{}", &s[..40]);
        assert!(s.trim_end().ends_with("</svg>"));
        assert!(s.contains("viewBox=\"0 0 760 460\""));
        for text in [
            "Latency by length",
            "message length (bytes)",
            "latency (µs)",
            "copy",
            "model",
            "move",
        ] {
            assert!(s.contains(text), "missing {text:?}");
        }
        // Decade labels on the log x axis.
        for label in ["1", "1k", "1M"] {
            assert!(
                s.contains(&format!(">\n{label}\n<")),
                "missing tick {label}"
            );
        }
    }

    #[test]
    fn log_axis_rejects_zero_naming_the_series() {
        let c = chart(
            Scale::Log,
            Scale::Log,
            vec![
                series("fine", &[(1.0, 1.0)], Style::Line),
                series("zeroed", &[(1.0, 0.0), (2.0, 1.0)], Style::Line),
            ],
        );
        let e = svg(&c).unwrap_err();
        assert!(e.contains("zeroed") && e.contains("not positive"), "{e}");
        // The same values are fine on a linear axis.
        let c = chart(Scale::Log, Scale::Linear, c.series);
        svg(&c).unwrap();
    }

    #[test]
    fn legend_follows_last_point_height() {
        let c = chart(
            Scale::Linear,
            Scale::Linear,
            vec![
                series("low", &[(0.0, 5.0), (10.0, 1.0)], Style::Line),
                series(
                    "high",
                    &[(0.0, 0.0), (10.0, 9.0), (11.0, f64::NAN)],
                    Style::Line,
                ),
                series("middle", &[(0.0, 9.0), (10.0, 4.0)], Style::Dashed),
            ],
        );
        let s = svg(&c).unwrap();
        let at = |n: &str| {
            s.find(&format!(">\n{n}\n<"))
                .unwrap_or_else(|| panic!("{n} not in legend"))
        };
        assert!(at("high") < at("middle") && at("middle") < at("low"));
    }

    #[test]
    fn empty_charts_are_errors() {
        let e = svg(&chart(Scale::Linear, Scale::Linear, vec![])).unwrap_err();
        assert!(e.contains("nothing to draw"), "{e}");
        let only_nan = series("nan", &[(f64::NAN, 1.0), (1.0, f64::INFINITY)], Style::Line);
        let e = svg(&chart(Scale::Linear, Scale::Linear, vec![only_nan])).unwrap_err();
        assert!(e.contains("nothing to draw"), "{e}");
    }

    #[test]
    fn tick_labels_are_short() {
        let a = log_axis(1.0, 1e6);
        let labels: Vec<String> = a.bold.iter().map(|&v| tick_label(v, &a)).collect();
        assert_eq!(labels, ["1", "10", "100", "1k", "10k", "100k", "1M"]);
        let a = linear_axis(0.0, 0.9);
        let labels: Vec<String> = a.bold.iter().map(|&v| tick_label(v, &a)).collect();
        assert_eq!(labels, ["0", "0.2", "0.4", "0.6", "0.8", "1"]);
        let a = linear_axis(0.0, 45_000.0);
        let labels: Vec<String> = a.bold.iter().map(|&v| tick_label(v, &a)).collect();
        assert_eq!(labels, ["0", "10k", "20k", "30k", "40k", "50k"]);
    }

    #[test]
    fn narrow_log_ranges_still_get_ticks() {
        let a = log_axis(3.0, 8.0);
        assert!(a.bold.len() >= 3, "{:?}", a.bold);
        let a = log_axis(5.0, 5.0);
        assert!(a.lo < 5.0 && a.hi > 5.0);
        let a = log_axis(100.0, 100.0);
        assert!(
            a.lo < 100.0 && a.hi > 100.0 && a.bold.contains(&100.0),
            "{:?}",
            a.bold
        );
        // Ends far from a decade are not pushed out to it.
        let a = log_axis(1.0, 1_048_576.0);
        assert!(
            a.hi < 1.5e6 && a.bold.last() == Some(&1e6),
            "{} {:?}",
            a.hi,
            a.bold
        );
    }

    #[test]
    fn a_given_colour_overrides_the_position() {
        let hex = |i: usize| {
            let (r, g, b) = series_color(i);
            format!("#{r:02X}{g:02X}{b:02X}")
        };
        let mut a = series("model", &[(1.0, 1.0), (2.0, 2.0)], Style::Dashed);
        let mut b = series("measured", &[(1.0, 1.5), (2.0, 2.5)], Style::Points);
        a.color = Some(5);
        b.color = Some(5);
        let chart = Chart {
            title: "colours".into(),
            x_label: "x (bytes)".into(),
            y_label: "y (µs)".into(),
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: vec![a, b],
        };
        let svg = svg(&chart).unwrap();
        assert!(svg.contains(&hex(5)), "palette colour 5 missing");
        assert!(
            !svg.contains(&hex(0)) && !svg.contains(&hex(1)),
            "positional colours used"
        );
    }
}
