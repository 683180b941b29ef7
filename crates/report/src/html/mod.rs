//! The self-contained HTML page: inline CSS, SVG drawn here, one small inline script.
//!
//! Charts are SVG written by hand (no plotting crate): log-scaled axes, lines, circles and
//! rectangles are all a roofline and a histogram need, the markup is deterministic (the
//! browser test reads it back), and the page shows every chart with scripting off. The
//! script only sorts and filters the table, and reports its own errors into the DOM.

mod assets;
mod format;
mod header;
mod roofline;
mod speedups;
mod table;
#[cfg(test)]
mod tests;

use std::fmt::Write as _;

use crate::model::Report;
use assets::{GUARD_JS, STYLE, TABLE_JS};
pub use format::{esc, si, sig};

/// The page's Content-Security-Policy: nothing may be fetched; inline style, script and
/// `data:` images only.
pub const CSP: &str =
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:";

/// Renders the whole page.
pub fn render(r: &Report) -> String {
    let mut h = String::new();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{CSP}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>kernelgate report</title>\n<style>{STYLE}</style>\n<script>{GUARD_JS}</script>\n</head>\n<body>\n"
    );
    h.push_str("<div id=\"kg-js-status\" data-state=\"not-run\">script not run (the table is not sortable)</div>\n<ul id=\"kg-js-errors\"></ul>\n");
    header::header(&mut h, r);
    roofline::roofline_section(&mut h, r);
    table::table_section(&mut h, r);
    speedups::speedup_section(&mut h, r);
    let _ = write!(h, "<script>{TABLE_JS}</script>\n</body></html>\n");
    h
}
