//! The SOL ExecBench ROCm port's published release bundle (`RELEASE/release-bundle.json`,
//! `sol_execbench.release_bundle.v2`), verified fail-closed and scored.
//!
//! The bundle binds four files by SHA-256 and size: the corpus manifest and three statements
//! (baseline run, candidate run, SOLAR index); the statements bind, in turn, each problem's
//! implementation, canonical trace and run environment, and each workload's formal SOLAR
//! manifest, which binds its own artifacts. [`verify`] checks every one of those bindings
//! (regular file, no symlink, inside the bundle, size, SHA-256), then what the port's
//! verifier checks that can be checked from the bundle alone:
//!
//! - the corpus manifest is the repository-pinned one ([`PINNED_CORPUS_MANIFEST_SHA256`], or
//!   the caller's explicit pin), authorises official scoring under the content-addressed
//!   publisher policy, and pins the baseline's `baseline_id`;
//! - one source revision (a Git SHA-1) across the three statements;
//! - the problem denominator is the corpus's scored problems, with their pinned definition and
//!   workload hashes, and each trace covers exactly the corpus's workloads of its problem;
//! - every baseline trace passed; passing traces ran in a container with locked clocks, under
//!   the paper timing protocol (10 warmup, 3 × 50 timed, mean, validated outputs, a cache
//!   clear of twice the detected L2) and one runtime identity (hardware and libraries) across
//!   both runs;
//! - SOLAR covers exactly the scored workloads, each by a publication-eligible formal bound of
//!   the pinned architecture profile, with the path's complete artifact set.
//!
//! The score is the paper's: per workload `1 / (1 + (T_k − T_SOL) / (T_b − T_SOL))`, 0 for a
//! candidate that did not pass; `T_b ≤ T_SOL` or `T_k < T_SOL` is an error (the port refuses
//! both rather than clipping); workloads averaged per problem, problems equally.
//!
//! Not checked (it needs the corpus's problem tree, which the bundle does not carry): that a
//! baseline implementation is the canonical reference solution, that trace workload payloads
//! equal the corpus's workload lines, and the SOLAR manifests' reference hashes and preserved
//! input indices. [`PortScore::unchecked`] lists them.

mod corpus;
mod files;
mod format;
mod runs;
mod score;
mod solar;
mod statements;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use crate::ScoreError;
use files::{Verifier, bad};
pub use format::{ArtifactRef, PortBundle, ProblemRun, RunStatement, SolarEntry, SolarIndex};
use statements::Statements;

/// `schema_version` of the port's release bundle.
pub const BUNDLE_SCHEMA: &str = "sol_execbench.release_bundle.v2";
/// `schema_version` of its statements.
pub const COMPONENT_SCHEMA: &str = "sol_execbench.release_component.v1";
/// SHA-256 of the corpus manifest the port's repository pins for official scoring
/// (`problems/AMD_AKA/manifest.yaml`, schema v7).
pub const PINNED_CORPUS_MANIFEST_SHA256: &str =
    "65589033720555a29b25d42a0e4ca3069dad6cf6db5f910578bd0c8aa87ce38e";
/// The only release policy the port's verifier accepts.
pub const RELEASE_POLICY: &str = "content_addressed_publisher_v1";
/// The bound kind of a formal SOLAR manifest.
pub const FORMAL_BOUND_KIND: &str = "capacity_constrained_tile_aware_v1";
/// Timing protocol of a passing publication trace.
pub const PAPER_TIMING_PROTOCOL: &str = "sol_execbench.rocm_event_timing.paper_counts.v4";
/// Schema version of a SOLAR request manifest.
pub const SOLAR_MANIFEST_SCHEMA: u32 = 6;

const MAX_STATEMENT_BYTES: u64 = 8 * 1024 * 1024;
const MAX_TRACE_BYTES: u64 = 16 * 1024 * 1024;
const MAX_SOLAR_MANIFEST_BYTES: u64 = 1024 * 1024;

/// What the verifier could not check from the bundle alone.
pub const UNCHECKED: [&str; 3] = [
    "baseline implementations equal the canonical reference solution (needs the corpus tree)",
    "trace workload payloads equal the corpus's workload lines (needs the corpus tree)",
    "SOLAR manifests' reference hashes and preserved input indices (need the corpus tree)",
];

/// The verified official score.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PortScore {
    /// `official`.
    pub status: String,
    /// The candidate's identity.
    pub candidate_id: String,
    /// The baseline's identity.
    pub baseline_id: String,
    /// The shared source revision.
    pub source_revision: String,
    /// SHA-256 of the bundle file.
    pub release_bundle_sha256: String,
    /// SHA-256 of the corpus manifest the score is over.
    pub corpus_manifest_sha256: String,
    /// Whether that is [`PINNED_CORPUS_MANIFEST_SHA256`] (false: the caller pinned another).
    pub corpus_is_port_pinned: bool,
    /// The suite score.
    pub score: f64,
    /// Per problem.
    pub problem_scores: BTreeMap<String, f64>,
    /// Workloads scored.
    pub scored_workloads: usize,
    /// Files whose size and SHA-256 were checked.
    pub artifacts_verified: usize,
    /// What could not be checked from the bundle alone.
    pub unchecked: Vec<String>,
}

/// Whether the bundle at `path` is the port's format (its `schema_version` is a string).
pub fn is_port_bundle(path: &Path) -> Result<bool, ScoreError> {
    let text = kg_contract::io::read_to_string(path)?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| bad(path.display().to_string(), format!("is not JSON: {e}")))?;
    Ok(v.get("schema_version").is_some_and(|s| s.is_string()))
}

/// Options of [`verify`].
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// Score over this corpus manifest (SHA-256) instead of [`PINNED_CORPUS_MANIFEST_SHA256`];
    /// the report then says the corpus is not the port's pinned one.
    pub corpus_sha256: Option<String>,
}

/// Verifies the port's release bundle at `path` and computes its official score; any failed
/// check is an error naming the artifact.
pub fn verify(path: &Path, opts: &VerifyOptions) -> Result<PortScore, ScoreError> {
    let root = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let bundle = statements::read_bundle(path, opts)?;
    let mut v = Verifier {
        root: root.clone(),
        checked: 0,
    };
    let docs = Statements::read(&mut v, &bundle)?;
    let baseline_id = docs.check_pins(&bundle)?;
    docs.check_corpus_bindings(&mut v, &bundle)?;
    let denominator = corpus::Denominator::of(&docs.corpus, &bundle)?;
    let b = runs::run(
        &mut v,
        &docs.baseline,
        &bundle.baseline.path,
        &denominator,
        true,
    )?;
    let c = runs::run(
        &mut v,
        &docs.candidate,
        &bundle.candidate.path,
        &denominator,
        false,
    )?;
    runs::check_one_identity(&b, &c)?;
    for r in [&docs.baseline.environment, &docs.candidate.environment] {
        v.file(&root, r, "run environment")?;
    }
    let bounds = solar::bounds(&mut v, &bundle, &docs.corpus, &docs.solar, &b.definitions)?;
    let problem_scores = score::problem_scores(&b, &c, &bounds)?;
    let score = problem_scores.values().sum::<f64>() / problem_scores.len() as f64;
    Ok(PortScore {
        status: "official".into(),
        candidate_id: docs.candidate.candidate_id.clone().unwrap_or_default(),
        baseline_id,
        source_revision: docs.baseline.source_revision.clone(),
        release_bundle_sha256: kg_contract::io::sha256_file(path)?,
        corpus_manifest_sha256: bundle.corpus_manifest.sha256.clone(),
        corpus_is_port_pinned: bundle.corpus_manifest.sha256 == PINNED_CORPUS_MANIFEST_SHA256,
        score,
        problem_scores,
        scored_workloads: bounds.len(),
        artifacts_verified: v.checked,
        unchecked: UNCHECKED.iter().map(|s| s.to_string()).collect(),
    })
}
