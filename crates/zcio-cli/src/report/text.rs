//! The document's building blocks as the experiments' prose uses them: headings, paragraphs,
//! tables and figures, and the numbers' formats (µs, sizes).

use crate::report::doc::{Block, Figure, Table};
use crate::report::plot::Chart;

/// A heading of `level` (1 is the title).
pub fn h(level: u8, text: impl Into<String>) -> Block {
    Block::Heading {
        level,
        text: text.into(),
        id: None,
    }
}

/// A paragraph.
pub fn p(text: impl Into<String>) -> Block {
    Block::Para(text.into())
}

/// A table with a caption.
pub fn table(caption: &str, header: &[&str], rows: Vec<Vec<String>>) -> Block {
    Block::Table(Table {
        caption: Some(caption.into()),
        header: header.iter().map(|s| s.to_string()).collect(),
        rows,
        links: Vec::new(),
    })
}

/// A table with a caption and a row of `cells` for each of `items`.
pub fn table_of<T>(
    caption: &str,
    header: &[&str],
    items: &[T],
    cells: impl Fn(&T) -> Vec<String>,
) -> Block {
    table(caption, header, items.iter().map(cells).collect())
}

/// Nanoseconds as microseconds, with as many decimals as the magnitude deserves.
pub fn us(ns: f64) -> String {
    if ns.abs() >= 100_000.0 {
        format!("{:.0}", ns / 1e3)
    } else if ns.abs() >= 1_000.0 {
        format!("{:.1}", ns / 1e3)
    } else {
        format!("{:.2}", ns / 1e3)
    }
}

/// A byte count in B, KiB or MiB (whole units only).
pub fn size(b: usize) -> String {
    if b >= 1 << 20 && b % (1 << 20) == 0 {
        format!("{} MiB", b >> 20)
    } else if b >= 1024 && b % 1024 == 0 {
        format!("{} KiB", b >> 10)
    } else {
        format!("{b} B")
    }
}

/// A figure: its file stem (for `plots/`), caption and chart.
pub fn figure(stem: &str, caption: String, chart: Chart) -> Block {
    Block::Figure(Figure {
        file_stem: stem.into(),
        caption,
        chart,
    })
}
