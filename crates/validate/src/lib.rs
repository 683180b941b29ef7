//! kg-validate: validate a kernel pull request on a real GPU, base against head, and produce a
//! head-bound `validation_report.json` (validate-kernel-pr's format and verdicts).
//!
//! [`pipeline::run`] takes [`Options`] (the seed's flags plus [`HostSettings`] from the
//! environment) and returns a [`kg_contract::ValidationReport`]; [`write_report`] validates it
//! against its JSON Schema and writes it atomically. The stages, in order:
//! `merge_sim` ([`worktree`], libgit2), `gpu_claim` ([`gpu`], kg-gpu), `runtime_compat`
//! ([`runtime`]), `test_policy` ([`policy`], kg-inject syntax trees), `baseline_control`,
//! `correctness_repo_tests`, `correctness_s1_grid` ([`grid`]), `execution_receipt` (the
//! validator-owned probe in `py/`, cells checked in [`receipt`]), `index_width_scan` ([`index_scan`]), `perf` ([`perf`]).
//! Each stage is a module of the private `stages/` (`stages/<stage>.rs`, with a `run` over the
//! shared state and context); [`pipeline`] keeps the order they run in and what ends a run.
//! The verdict rule is in [`verdict`].
//!
//! # Ownership
//! - The [`worktree::Worktree`] owns the caller's checkout for the run and hands it back
//!   byte-for-byte: explicitly at the end of [`pipeline::run`], and from `Drop` on any other
//!   exit. Signals are the binary's job: it sets the cancel flag, the current target's process
//!   group is killed, the pipeline unwinds, and restore and GPU release happen on the way out.
//! - The GPU claim (kg-gpu [`kg_gpu::Claim`]) is held from `gpu_claim` until the report is
//!   finished; targets see only the claimed device.
//! - Targets are untrusted: they run in their own process group under an allow-listed
//!   environment ([`env::PASS_THROUGH`]) with a private HOME and fresh caches per phase.
//!
//! Not for: fetching PRs (the caller supplies a clean base worktree and the patch), writing an
//! advisory review, or timing on its own (the perf stage reads the repository's benchmark).
//! Local pieces that other crates lack: [`pyscan`] (test definitions, `__main__` guards,
//! module-level argv, imports) and the Python-interpreter resolution in [`options`].

#![warn(missing_docs)]

pub mod cause;
pub mod env;
pub mod error;
pub mod gpu;
pub mod grid;
pub mod index_scan;
pub mod markdown;
pub mod options;
pub mod perf;
pub mod pipeline;
pub mod policy;
pub mod pyscan;
pub mod receipt;
pub mod runner;
pub mod runtime;
pub mod shapes;
mod stages;
pub mod target;
pub mod verdict;
pub mod worktree;

use std::path::Path;

pub use error::ValidateError;
pub use options::{AxisSpec, HostSettings, Options, RunnerChoice};

/// Writes the report atomically as pretty JSON.
pub fn write_report(
    report: &kg_contract::ValidationReport,
    out: &Path,
) -> Result<(), ValidateError> {
    let text = kg_contract::io::to_json_pretty(report, "validation report")
        .map_err(|e| ValidateError::Report(e.to_string()))?;
    kg_contract::io::write_atomic(out, text.as_bytes())
        .map_err(|e| ValidateError::Report(e.to_string()))
}
