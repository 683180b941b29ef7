//! kg-score: the SOL score, aggregation and release bundles.
//!
//! Not built yet: this crate is a placeholder in the workspace layout and exports nothing.
