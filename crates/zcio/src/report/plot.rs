//! Line charts for the report, rendered with `plotters` to SVG (and PNG).

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

/// Render `chart` as a standalone SVG document.
pub fn svg(chart: &Chart) -> Result<String, String> {
    let _ = chart;
    todo!("helper")
}
