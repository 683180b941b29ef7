//! kg-report: what a run's traces say, for people and for CI.
//!
//! - [`load::load_inputs`] reads traces from run directories (`kg-bench run -o DIR`, problem
//!   keys from the paths) or trace files, with the run's `summary.json` where there is one.
//! - [`model::Report`] turns them into rows (one per trace), device groups (identity, clocks,
//!   timing methods, hashes, sandbox layers) and per-problem geomeans; FLOPs and bytes come from
//!   kg-solar analyses ([`model::SolTable`]), roofs from kg-solar's hardware specs.
//! - [`html::render`] writes one self-contained HTML page: inline CSS, inline SVG drawn here
//!   (roofline, speedup histogram, geomeans) and a small inline script for sorting and
//!   filtering the table; a CSP forbids every fetch.
//! - [`compare::compare`] sets two runs side by side: a latency ratio per workload with a
//!   confidence interval from the recorded spreads, faster / slower / same / incomparable.
//!
//! Not for: running anything, verifying chains (kg-contract) or scoring (kg-score). Only the
//! binaries print.

pub mod compare;
pub mod html;
pub mod junit;
pub mod load;
pub mod model;

use std::path::PathBuf;

/// Everything that can go wrong while building a report or a comparison.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// A directory or file could not be read.
    #[error("failed to read `{path}`: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A trace file (or other contract file) does not load.
    #[error(transparent)]
    Contract(Box<kg_contract::ContractError>),
    /// A kg-solar analysis or hardware spec does not load.
    #[error(transparent)]
    Solar(Box<kg_solar::SolarError>),
    /// A `summary.json` that does not parse.
    #[error("failed to parse `{path}`: {message}")]
    Summary {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// An input holds no trace at all.
    #[error("`{0}` holds no trace (no `*.jsonl` file with a line)")]
    NoTraces(PathBuf),
    /// An input that is neither a directory nor a file.
    #[error("`{0}` is neither a run directory nor a trace file")]
    NotFound(PathBuf),
}

impl From<kg_contract::ContractError> for ReportError {
    fn from(e: kg_contract::ContractError) -> Self {
        ReportError::Contract(Box::new(e))
    }
}

impl From<kg_solar::SolarError> for ReportError {
    fn from(e: kg_solar::SolarError) -> Self {
        ReportError::Solar(Box::new(e))
    }
}
