//! `zcio report`: every experiment the project has, run on this machine, with the papers'
//! numbers beside this machine's, written as HTML, Markdown, JSON and plots.

pub mod doc;
pub mod plot;
