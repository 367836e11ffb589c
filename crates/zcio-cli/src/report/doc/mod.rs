//! The report as a document: headings, paragraphs, tables and figures, rendered to one
//! self-contained HTML page and to Markdown.
//!
//! The HTML page loads nothing: the style sheet is inline, every figure is an SVG in a `data:`
//! URI, and a content security policy (`default-src 'none'`) forbids anything else, scripts
//! included. [`browser_check`] opens the page in headless Chromium and reports images that did not
//! render and errors the page raised.

use crate::report::plot::{self, Chart};
use base64::Engine as _;
use std::collections::{HashMap, HashSet};
use std::io;
use std::path::Path;

mod browser;
pub use browser::{BrowserCheck, BrowserCheckError, browser_check};

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
    /// Per row, the anchor (a heading's id, or `fig-<file_stem>`) its first cell links to;
    /// rows past the end link nowhere.
    pub links: Vec<Option<String>>,
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

/// Write `doc` into `dir`: `index.html`, `REPORT.md` and `plots/<file_stem>.svg`.
///
/// `dir` and `dir/plots` are created if missing; existing files of the same names are replaced.
/// Errors: an invalid or repeated figure file stem (`InvalidInput`), a chart that cannot be
/// drawn (`InvalidData`, naming the figure), and the file system's errors.
pub fn write_all(doc: &Doc, dir: &Path) -> io::Result<()> {
    let svgs = render_figures(doc).map_err(|(kind, msg)| {
        io::Error::new(kind, format!("report in {}: {msg}", dir.display()))
    })?;
    let plots = dir.join("plots");
    std::fs::create_dir_all(&plots)?;
    for fig in figures(doc) {
        let path = plots.join(format!("{}.svg", fig.file_stem));
        std::fs::write(&path, &svgs[fig.file_stem.as_str()])
            .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", path.display())))?;
    }
    let md = dir.join("REPORT.md");
    std::fs::write(&md, to_markdown(doc))
        .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", md.display())))?;
    let html = dir.join("index.html");
    std::fs::write(&html, html_page(doc, &svgs))
        .map_err(|e| io::Error::new(e.kind(), format!("writing {}: {e}", html.display())))?;
    Ok(())
}

fn figures(doc: &Doc) -> impl Iterator<Item = &Figure> {
    doc.blocks.iter().filter_map(|b| match b {
        Block::Figure(f) => Some(f),
        _ => None,
    })
}

/// Check every figure's file stem and draw its chart: stem → SVG.
fn render_figures(doc: &Doc) -> Result<HashMap<&str, String>, (io::ErrorKind, String)> {
    let mut out = HashMap::new();
    for fig in figures(doc) {
        let stem = fig.file_stem.as_str();
        let valid = !stem.is_empty()
            && !stem.starts_with('.')
            && stem
                .chars()
                .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            return Err((
                io::ErrorKind::InvalidInput,
                format!(
                    "figure file stem {stem:?}: must be non-empty, not start with '.', and hold \
                     only letters, digits, '-', '_' and '.'"
                ),
            ));
        }
        let svg = plot::svg(&fig.chart)
            .map_err(|e| (io::ErrorKind::InvalidData, format!("figure {stem:?}: {e}")))?;
        if out.insert(stem, svg).is_some() {
            return Err((
                io::ErrorKind::InvalidInput,
                format!("figure file stem {stem:?}: used twice, must be unique in the document"),
            ));
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------------------------
// Markdown

/// Escape Markdown's inline syntax in plain text, and the block syntax at line starts.
fn md_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (n, line) in text.split('\n').enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let body = line.trim_start();
        out.push_str(&line[..line.len() - body.len()]);
        // Block markers: headings, list bullets and setext underlines, then ordered lists
        // (`1.` becomes `1\.`: a backslash only escapes punctuation).
        if body.starts_with(['#', '-', '+', '=']) {
            out.push('\\');
        }
        let digits = body.chars().take_while(char::is_ascii_digit).count();
        let list_number = digits > 0
            && body[digits..].starts_with(['.', ')'])
            && body[digits + 1..]
                .chars()
                .next()
                .is_none_or(char::is_whitespace);
        for (i, c) in body.chars().enumerate() {
            if matches!(c, '\\' | '`' | '*' | '_' | '[' | ']' | '<' | '>' | '|')
                || (list_number && i == digits)
            {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out
}

/// Whether a cell reads as a number (possibly with a unit or suffix): right-aligned.
fn is_numeric(cell: &str) -> bool {
    let first = cell.split_whitespace().next().unwrap_or("");
    let core: String = first
        .trim_end_matches(['%', '×', 'x'])
        .chars()
        .filter(|&c| c != ',')
        .collect();
    !core.is_empty() && core.parse::<f64>().is_ok()
}

/// Per column: whether every non-empty cell is numeric (and at least one is).
fn numeric_columns(table: &Table, columns: usize) -> Vec<bool> {
    (0..columns)
        .map(|c| {
            let mut cells = table
                .rows
                .iter()
                .filter_map(|r| r.get(c))
                .filter(|s| !s.trim().is_empty())
                .peekable();
            cells.peek().is_some() && cells.all(|s| is_numeric(s))
        })
        .collect()
}

fn columns(table: &Table) -> usize {
    table
        .rows
        .iter()
        .map(Vec::len)
        .chain([table.header.len()])
        .max()
        .unwrap_or(0)
}

/// Whether the first block is a level-1 heading, which then stands for the title.
fn titled_by_first_block(doc: &Doc) -> bool {
    matches!(doc.blocks.first(), Some(Block::Heading { level: 1, .. }))
}

/// Render `doc` as GitHub-flavoured Markdown; figures refer to `plots/<file_stem>.svg`.
///
/// Headings and figures that a table links to are preceded by an HTML anchor of the page's id,
/// so that the links work whatever ids the Markdown viewer gives headings.
pub fn to_markdown(doc: &Doc) -> String {
    let mut out = String::new();
    if !titled_by_first_block(doc) && !doc.title.is_empty() {
        out.push_str(&format!("# {}\n\n", md_escape(&one_line(&doc.title))));
    }
    let linked = linked(doc);
    let ids = heading_ids(doc);
    for (i, block) in doc.blocks.iter().enumerate() {
        let id = match block {
            Block::Heading { .. } => ids.get(&i).cloned(),
            Block::Figure(f) => Some(format!("fig-{}", f.file_stem)),
            _ => None,
        };
        if let Some(id) = id.filter(|id| linked.contains(id)) {
            out.push_str(&format!("<a id=\"{}\"></a>\n\n", esc(&id)));
        }
        match block {
            Block::Heading { level, text, .. } => {
                let hashes = "#".repeat(usize::from((*level).clamp(1, 6)));
                out.push_str(&format!("{hashes} {}\n\n", md_escape(&one_line(text))));
            }
            Block::Para(text) => out.push_str(&format!("{}\n\n", md_escape(text))),
            Block::List(items) => {
                for item in items {
                    out.push_str(&format!("- {}\n", md_escape(item).replace('\n', "\n  ")));
                }
                out.push('\n');
            }
            Block::Table(table) => md_table(&mut out, table),
            Block::Figure(fig) => {
                let caption = one_line(&fig.caption);
                out.push_str(&format!(
                    "![{}](plots/{}.svg)\n\n*{}*\n\n",
                    md_escape(&caption),
                    fig.file_stem,
                    md_escape(&caption)
                ));
            }
            Block::Code(code) => {
                let longest = longest_run(code, '`');
                let fence = "`".repeat(longest.max(2) + 1);
                let nl = if code.ends_with('\n') { "" } else { "\n" };
                out.push_str(&format!("{fence}\n{code}{nl}{fence}\n\n"));
            }
        }
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

/// Every anchor a table of `doc` links to.
fn linked(doc: &Doc) -> HashSet<String> {
    doc.blocks
        .iter()
        .filter_map(|b| match b {
            Block::Table(t) => Some(t.links.iter().flatten().cloned()),
            _ => None,
        })
        .flatten()
        .collect()
}

/// The anchor the first cell of row `r` of `table` links to, if any.
fn link_of(table: &Table, r: usize) -> Option<&str> {
    table.links.get(r).and_then(|l| l.as_deref())
}

fn md_table(out: &mut String, table: &Table) {
    let n = columns(table);
    if n == 0 {
        return;
    }
    if let Some(caption) = &table.caption {
        out.push_str(&format!("**{}**\n\n", md_escape(&one_line(caption))));
    }
    let numeric = numeric_columns(table, n);
    let row = |cells: &[String], link: Option<&str>| {
        let mut line = String::from("|");
        for c in 0..n {
            let cell = md_escape(&one_line(cells.get(c).map(String::as_str).unwrap_or("")));
            match link.filter(|_| c == 0) {
                Some(a) => line.push_str(&format!(" [{cell}](#{a}) |")),
                None => line.push_str(&format!(" {cell} |")),
            }
        }
        line.push('\n');
        line
    };
    out.push_str(&row(&table.header, None));
    out.push('|');
    for &num in &numeric {
        out.push_str(if num { " ---: |" } else { " --- |" });
    }
    out.push('\n');
    for (i, r) in table.rows.iter().enumerate() {
        out.push_str(&row(r, link_of(table, i)));
    }
    out.push('\n');
}

/// Newlines (and the spaces around them) as single spaces: for headings, cells and captions.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn longest_run(text: &str, c: char) -> usize {
    let (mut best, mut run) = (0, 0);
    for ch in text.chars() {
        run = if ch == c { run + 1 } else { 0 };
        best = best.max(run);
    }
    best
}

// ---------------------------------------------------------------------------------------------
// HTML

/// Escape text for HTML element content and attribute values.
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

/// An anchor from heading text: lower case, words joined by `-`.
fn slug(text: &str) -> String {
    let mut s = String::new();
    for c in text.chars().flat_map(char::to_lowercase) {
        if c.is_alphanumeric() {
            s.push(c);
        } else if (c.is_whitespace() || matches!(c, '-' | '_' | '.' | '/')) && !s.ends_with('-') {
            s.push('-');
        }
    }
    let s = s.trim_matches('-');
    if s.is_empty() {
        "section".to_owned()
    } else {
        s.to_owned()
    }
}

/// The anchor of every heading, by block position: the given `id`, else one made from the text
/// that differs from every other anchor.
pub fn heading_ids(doc: &Doc) -> HashMap<usize, String> {
    let mut taken: HashSet<String> = doc
        .blocks
        .iter()
        .filter_map(|b| match b {
            Block::Heading { id: Some(id), .. } => Some(id.clone()),
            _ => None,
        })
        .collect();
    let mut ids = HashMap::new();
    for (i, b) in doc.blocks.iter().enumerate() {
        if let Block::Heading { text, id, .. } = b {
            let id = match id {
                Some(id) => id.clone(),
                None => {
                    let base = slug(text);
                    let mut id = base.clone();
                    let mut n = 2;
                    while taken.contains(&id) {
                        id = format!("{base}-{n}");
                        n += 1;
                    }
                    taken.insert(id.clone());
                    id
                }
            };
            ids.insert(i, id);
        }
    }
    ids
}

const CSS: &str = r#"
:root { color-scheme: light; }
* { box-sizing: border-box; }
body { margin: 0; background: #eef0f4; color: #1d2330;
  font: 16px/1.6 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1100px; margin: 0 auto; padding: 28px 40px 72px; background: #fff;
  min-height: 100vh; box-shadow: 0 0 12px rgba(0, 0, 0, .06); }
h1, h2, h3, h4 { line-height: 1.25; color: #111827; }
h1 { font-size: 2rem; margin: .3em 0 .7em; padding-bottom: .3em; border-bottom: 2px solid #e3e6ec; }
h2 { font-size: 1.5rem; margin: 2.2em 0 .6em; padding-bottom: .2em; border-bottom: 1px solid #e3e6ec; }
h3 { font-size: 1.2rem; margin: 1.8em 0 .5em; }
h4 { font-size: 1.05rem; margin: 1.5em 0 .4em; }
p, ul { margin: .7em 0; }
li { margin: .2em 0; }
a { color: #1f5fbf; text-decoration: none; }
a:hover { text-decoration: underline; }
nav.toc { background: #f5f7fa; border: 1px solid #e1e5ec; border-radius: 6px; padding: 12px 22px;
  margin: 1em 0 2em; }
nav.toc h2 { font-size: 1rem; margin: 0 0 .4em; padding: 0; border: 0; text-transform: uppercase;
  letter-spacing: .05em; color: #4a5263; }
nav.toc ul { list-style: none; margin: 0; padding: 0; }
nav.toc li { margin: .15em 0; }
nav.toc li.l1, nav.toc li.l2 { font-weight: 600; }
nav.toc li.l3 { padding-left: 1.2em; }
nav.toc li.l4 { padding-left: 2.4em; font-size: .95em; }
.table-wrap { overflow-x: auto; margin: 1.2em 0; }
table { border-collapse: collapse; font-size: .92rem; }
caption { caption-side: top; text-align: left; font-weight: 600; padding: 0 0 .4em; }
th, td { border: 1px solid #d5dae3; padding: .35em .75em; text-align: left; vertical-align: top; }
th { background: #e9edf3; }
tbody tr:nth-child(even) { background: #f7f8fb; }
tbody tr:hover { background: #eef3fb; }
.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
figure { margin: 2em auto; text-align: center; }
figure img { display: block; margin: 0 auto; width: 100%; max-width: 960px; height: auto;
  border: 1px solid #e3e6ec; border-radius: 4px; background: #fff; }
figcaption { max-width: 960px; margin: .6em auto 0; font-size: .93rem; color: #4a5263;
  text-align: left; }
pre { background: #f5f7fa; border: 1px solid #e1e5ec; border-radius: 4px; padding: 12px 14px;
  overflow-x: auto; font: 13px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
"#;

/// Render `doc` as one self-contained HTML page (charts drawn here, inlined as `data:` URIs).
///
/// Errors: a figure whose chart cannot be drawn, or whose file stem is invalid or repeated.
pub fn to_html(doc: &Doc) -> Result<String, String> {
    let svgs = render_figures(doc).map_err(|(_, msg)| msg)?;
    Ok(html_page(doc, &svgs))
}

fn html_page(doc: &Doc, svgs: &HashMap<&str, String>) -> String {
    let ids = heading_ids(doc);
    let titled = titled_by_first_block(doc);
    let mut out = String::new();
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str(
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; img-src data:; \
         style-src 'unsafe-inline'\">\n",
    );
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    out.push_str("<meta name=\"generator\" content=\"zcio report\">\n");
    let title = match (&doc.blocks.first(), titled) {
        (Some(Block::Heading { text, .. }), true) if doc.title.is_empty() => text.as_str(),
        _ => doc.title.as_str(),
    };
    out.push_str(&format!("<title>{}</title>\n", esc(&one_line(title))));
    out.push_str(&format!("<style>{CSS}</style>\n</head>\n<body>\n<main>\n"));

    // The title, then the contents: every heading but the title.
    let mut rest = doc.blocks.iter().enumerate();
    if titled {
        if let Some((i, Block::Heading { text, .. })) = rest.next() {
            out.push_str(&format!(
                "<h1 id=\"{}\">{}</h1>\n",
                esc(&ids[&i]),
                esc(text)
            ));
        }
    } else if !doc.title.is_empty() {
        out.push_str(&format!("<h1>{}</h1>\n", esc(&doc.title)));
    }
    let skip = usize::from(titled);
    let toc: Vec<String> = doc
        .blocks
        .iter()
        .enumerate()
        .skip(skip)
        .filter_map(|(i, b)| match b {
            Block::Heading { level, text, .. } => Some(format!(
                "<li class=\"l{}\"><a href=\"#{}\">{}</a></li>\n",
                (*level).clamp(1, 4),
                esc(&ids[&i]),
                esc(text)
            )),
            _ => None,
        })
        .collect();
    if !toc.is_empty() {
        out.push_str("<nav class=\"toc\" aria-label=\"Contents\">\n<h2>Contents</h2>\n<ul>\n");
        out.extend(toc);
        out.push_str("</ul>\n</nav>\n");
    }

    for (i, block) in rest {
        match block {
            Block::Heading { level, text, .. } => {
                let l = (*level).clamp(1, 6);
                out.push_str(&format!(
                    "<h{l} id=\"{}\">{}</h{l}>\n",
                    esc(&ids[&i]),
                    esc(text)
                ));
            }
            Block::Para(text) => out.push_str(&format!("<p>{}</p>\n", esc(text))),
            Block::List(items) => {
                out.push_str("<ul>\n");
                for item in items {
                    out.push_str(&format!("<li>{}</li>\n", esc(item)));
                }
                out.push_str("</ul>\n");
            }
            Block::Table(table) => html_table(&mut out, table),
            Block::Figure(fig) => {
                let data = base64::engine::general_purpose::STANDARD
                    .encode(svgs[fig.file_stem.as_str()].as_bytes());
                out.push_str(&format!(
                    "<figure id=\"fig-{stem}\">\n<img src=\"data:image/svg+xml;base64,{data}\" \
                     alt=\"{alt}\" width=\"{w}\" height=\"{h}\">\n<figcaption>{cap}</figcaption>\n\
                     </figure>\n",
                    stem = esc(&fig.file_stem),
                    alt = esc(&one_line(&fig.caption)),
                    w = plot::WIDTH,
                    h = plot::HEIGHT,
                    cap = esc(&fig.caption),
                ));
            }
            Block::Code(code) => out.push_str(&format!("<pre><code>{}</code></pre>\n", esc(code))),
        }
    }
    out.push_str("</main>\n</body>\n</html>\n");
    out
}

fn html_table(out: &mut String, table: &Table) {
    let n = columns(table);
    if n == 0 {
        return;
    }
    let numeric = numeric_columns(table, n);
    let class = |c: usize| if numeric[c] { " class=\"num\"" } else { "" };
    out.push_str("<div class=\"table-wrap\">\n<table>\n");
    if let Some(caption) = &table.caption {
        out.push_str(&format!("<caption>{}</caption>\n", esc(caption)));
    }
    out.push_str("<thead><tr>");
    for c in 0..n {
        let cell = table.header.get(c).map(String::as_str).unwrap_or("");
        out.push_str(&format!("<th{}>{}</th>", class(c), esc(cell)));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for (i, row) in table.rows.iter().enumerate() {
        out.push_str("<tr>");
        for c in 0..n {
            let cell = esc(row.get(c).map(String::as_str).unwrap_or(""));
            match link_of(table, i).filter(|_| c == 0) {
                Some(a) => out.push_str(&format!(
                    "<td{}><a href=\"#{}\">{cell}</a></td>",
                    class(c),
                    esc(a)
                )),
                None => out.push_str(&format!("<td{}>{cell}</td>", class(c))),
            }
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n</div>\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::plot::{Scale, Series, Style};

    fn chart() -> Chart {
        Chart {
            title: "t".to_owned(),
            x_label: "x (bytes)".to_owned(),
            y_label: "y (µs)".to_owned(),
            x_scale: Scale::Linear,
            y_scale: Scale::Linear,
            series: vec![Series {
                name: "s".to_owned(),
                points: vec![(1.0, 2.0), (2.0, 3.0)],
                style: Style::Line,
                band: None,
                color: None,
            }],
        }
    }

    fn doc() -> Doc {
        Doc {
            title: "Report <1>".to_owned(),
            blocks: vec![
                Block::Heading {
                    level: 2,
                    text: "Results & notes".to_owned(),
                    id: None,
                },
                Block::Para("a < b and \"c\" 'd' *e*".to_owned()),
                Block::List(vec!["one".to_owned(), "two_three".to_owned()]),
                Block::Table(Table {
                    caption: Some("Costs".to_owned()),
                    header: vec!["name".to_owned(), "µs".to_owned()],
                    rows: vec![
                        vec!["a|b".to_owned(), "1.5".to_owned()],
                        vec!["c".to_owned(), "20".to_owned()],
                    ],
                    links: Vec::new(),
                }),
                Block::Heading {
                    level: 3,
                    text: "Results & notes".to_owned(),
                    id: None,
                },
                Block::Figure(Figure {
                    file_stem: "latency".to_owned(),
                    caption: "Latency by length".to_owned(),
                    chart: chart(),
                }),
                Block::Code("```\nfenced\n```".to_owned()),
            ],
        }
    }

    #[test]
    fn markdown_blocks() {
        let md = to_markdown(&doc());
        assert!(
            md.starts_with("# Report \\<1\\>\n\n## Results & notes\n"),
            "{md}"
        );
        assert!(md.contains("a \\< b and \"c\" 'd' \\*e\\*"), "{md}");
        assert!(md.contains("- one\n- two\\_three\n"), "{md}");
        assert!(
            md.contains("**Costs**\n\n| name | µs |\n| --- | ---: |\n| a\\|b | 1.5 |\n"),
            "{md}"
        );
        assert!(
            md.contains("![Latency by length](plots/latency.svg)\n\n*Latency by length*"),
            "{md}"
        );
        assert!(md.contains("````\n```\nfenced\n```\n````"), "{md}");
    }

    #[test]
    fn linked_rows_point_at_anchors_both_pages_have() {
        let mut d = doc();
        if let Some(Block::Table(t)) = d.blocks.get_mut(3) {
            t.links = vec![None, Some("fig-latency".to_owned())];
        }
        let md = to_markdown(&d);
        assert!(md.contains("| [c](#fig-latency) | 20 |"), "{md}");
        assert!(
            md.contains("<a id=\"fig-latency\"></a>\n\n![Latency"),
            "{md}"
        );
        assert!(!md.contains("<a id=\"results-notes\">"), "{md}");
        let html = to_html(&d).unwrap();
        assert!(
            html.contains("<td><a href=\"#fig-latency\">c</a></td>"),
            "{html}"
        );
        assert!(html.contains("<figure id=\"fig-latency\">"));
    }

    #[test]
    fn markdown_escapes_block_starts() {
        assert_eq!(
            md_escape("# no\n- no\n12. no\nok 1.5"),
            "\\# no\n\\- no\n12\\. no\nok 1.5"
        );
        assert_eq!(md_escape("1.5 µs"), "1.5 µs");
    }

    #[test]
    fn html_is_escaped_self_contained_and_linked() {
        let html = to_html(&doc()).unwrap();
        assert!(html.contains("<title>Report &lt;1&gt;</title>"));
        assert!(html.contains("<p>a &lt; b and &quot;c&quot; &#39;d&#39; *e*</p>"));
        // Unique anchors, linked from the contents.
        assert!(html.contains("<h2 id=\"results-notes\">Results &amp; notes</h2>"));
        assert!(html.contains("<h3 id=\"results-notes-2\">"));
        assert!(
            html.contains("href=\"#results-notes\"") && html.contains("href=\"#results-notes-2\"")
        );
        assert!(html.contains("<td>a|b</td><td class=\"num\">1.5</td>"));
        assert!(html.contains("<img src=\"data:image/svg+xml;base64,"));
        assert!(html.contains("alt=\"Latency by length\""));
        assert!(html.contains("<figcaption>Latency by length</figcaption>"));
        // Nothing from elsewhere, no scripts.
        for bad in ["http:", "https:", "<script", "<link", "src=\"plots/"] {
            assert!(!html.contains(bad), "page holds {bad:?}");
        }
        // The figure decodes to the chart's SVG.
        let start = html.find("base64,").unwrap() + "base64,".len();
        let end = start + html[start..].find('"').unwrap();
        let svg = base64::engine::general_purpose::STANDARD
            .decode(&html[start..end])
            .unwrap();
        assert_eq!(
            String::from_utf8(svg).unwrap(),
            plot::svg(&chart()).unwrap()
        );
    }

    #[test]
    fn bad_figures_are_errors_naming_the_figure() {
        let mut d = doc();
        if let Some(Block::Figure(f)) = d.blocks.get_mut(5) {
            f.chart.series.clear();
        }
        let e = to_html(&d).unwrap_err();
        assert!(
            e.contains("\"latency\"") && e.contains("nothing to draw"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let e = write_all(&d, dir.path()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("latency"), "{e}");

        let mut d = doc();
        d.blocks.push(d.blocks[5].clone());
        assert!(to_html(&d).unwrap_err().contains("used twice"));
        if let Some(Block::Figure(f)) = d.blocks.get_mut(5) {
            f.file_stem = "../up".to_owned();
        }
        let e = write_all(&d, dir.path()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
