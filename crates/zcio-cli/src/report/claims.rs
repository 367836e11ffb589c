//! The table that opens the report: every claim of the papers that zcio measures, the paper's
//! number beside this run's, and the verdict, each row linking to where the report shows it.

use crate::lab::{Claim, Shown};
use crate::report::doc::{Block, Doc, Table, heading_ids};
use crate::report::text::{h, p};

/// The heading and the table of `claims` (links not yet resolved: see [`link`]); nothing
/// without claims.
pub fn blocks(claims: &[Claim]) -> Vec<Block> {
    if claims.is_empty() {
        return Vec::new();
    }
    vec![
        h(2, "Claims and verdicts"),
        p(
            "Each claim of the papers that zcio measures, the paper's number beside this run's, and whether they agree; a claim links to the section or figure that shows it. Where a paper makes no such claim, the row tests zcio's target instead.",
        ),
        Block::Table(Table {
            caption: Some("The papers' claims, measured".into()),
            header: [
                "claim",
                "paper",
                "the paper's number",
                "this run",
                "verdict",
                "why",
            ]
            .map(String::from)
            .to_vec(),
            rows: claims
                .iter()
                .map(|c| {
                    vec![
                        c.claim.clone(),
                        c.paper.to_string(),
                        c.paper_value.clone(),
                        c.measured.clone(),
                        c.verdict.word().to_string(),
                        c.why.clone(),
                    ]
                })
                .collect(),
            links: Vec::new(),
        }),
    ]
}

/// Point the claims table of `doc` (the first table captioned as [`blocks`] makes it) at the
/// anchors where `claims` are shown: a heading starting with the given text, or a figure.
pub fn link(doc: &mut Doc, claims: &[Claim]) {
    let ids = heading_ids(doc);
    let anchor = |shown: &Shown| -> Option<String> {
        doc.blocks
            .iter()
            .enumerate()
            .find_map(|(i, b)| match (shown, b) {
                (Shown::Heading(start), Block::Heading { text, .. }) if text.starts_with(start) => {
                    ids.get(&i).cloned()
                }
                (Shown::Figure(stem), Block::Figure(f)) if f.file_stem == *stem => {
                    Some(format!("fig-{stem}"))
                }
                _ => None,
            })
    };
    let links: Vec<Option<String>> = claims.iter().map(|c| anchor(&c.shown)).collect();
    let table = doc.blocks.iter_mut().find_map(|b| match b {
        Block::Table(t) if t.caption.as_deref() == Some("The papers' claims, measured") => Some(t),
        _ => None,
    });
    if let Some(t) = table {
        t.links = links;
    }
}
