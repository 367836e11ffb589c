//! The report as a document: headings, paragraphs, tables and figures, rendered to one
//! self-contained HTML page and to Markdown.

use crate::report::plot::Chart;
use std::path::Path;

/// A block of the document.
#[derive(Debug, Clone)]
pub enum Block {
    /// A heading; `id` is the anchor for links.
    Heading {
        /// 1 (the title) to 4.
        level: u8,
        /// Text.
        text: String,
        /// Anchor.
        id: Option<String>,
    },
    /// A paragraph of plain text.
    Para(String),
    /// A bulleted list of plain-text items.
    List(Vec<String>),
    /// A table.
    Table(Table),
    /// A figure: a chart written as `plots/<file_stem>.svg` and shown inline.
    Figure(Figure),
    /// Preformatted text.
    Code(String),
}

/// A table of text cells.
#[derive(Debug, Clone)]
pub struct Table {
    /// Shown above the table.
    pub caption: Option<String>,
    /// Column names.
    pub header: Vec<String>,
    /// Rows, each as long as `header`.
    pub rows: Vec<Vec<String>>,
}

/// A chart with its caption.
#[derive(Debug, Clone)]
pub struct Figure {
    /// File name without extension, unique in the document.
    pub file_stem: String,
    /// Caption shown under the chart.
    pub caption: String,
    /// The chart.
    pub chart: Chart,
}

/// The whole report.
#[derive(Debug, Clone, Default)]
pub struct Doc {
    /// Page title.
    pub title: String,
    /// Blocks in order.
    pub blocks: Vec<Block>,
}

/// Write `doc` into `dir`: `index.html`, `REPORT.md` and `plots/*.svg` (+ `.png`).
pub fn write_all(doc: &Doc, dir: &Path) -> std::io::Result<()> {
    let _ = (doc, dir);
    todo!("helper")
}
