//! The port bundle's published format: `release-bundle.json` and the statements it binds.

use serde::{Deserialize, Serialize};

/// One file bound by path, SHA-256 and size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactRef {
    /// Path relative to the bundle directory.
    pub path: String,
    /// Lower-case hex SHA-256.
    pub sha256: String,
    /// Size in bytes.
    pub size_bytes: u64,
}

/// `release-bundle.json` of the port.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortBundle {
    /// [`BUNDLE_SCHEMA`](super::BUNDLE_SCHEMA).
    pub schema_version: String,
    /// The corpus manifest.
    pub corpus_manifest: ArtifactRef,
    /// The baseline run statement.
    pub baseline: ArtifactRef,
    /// The candidate run statement.
    pub candidate: ArtifactRef,
    /// The SOLAR index statement.
    pub solar: ArtifactRef,
}

/// One problem's evidence in a run statement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProblemRun {
    /// Corpus-relative problem directory (`<suite>/<problem>`).
    pub problem_path: String,
    /// SHA-256 of its definition.
    pub definition_sha256: String,
    /// SHA-256 of its workload file.
    pub workload_sha256: String,
    /// The solution JSON that ran.
    pub implementation: ArtifactRef,
    /// Its canonical multi-workload trace (JSONL).
    pub trace: ArtifactRef,
}

/// A baseline or candidate run statement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunStatement {
    /// [`COMPONENT_SCHEMA`](super::COMPONENT_SCHEMA).
    pub schema_version: String,
    /// `run_statement`.
    pub artifact_kind: String,
    /// UTC time it was generated.
    pub generated_at: String,
    /// Git SHA-1 of the source that ran.
    pub source_revision: String,
    /// The corpus manifest it ran.
    pub corpus_manifest: ArtifactRef,
    /// The run's environment record.
    pub environment: ArtifactRef,
    /// Every problem.
    pub problems: Vec<ProblemRun>,
    /// `baseline` or `candidate`.
    pub role: String,
    /// The baseline's identity (baseline statements only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline_id: Option<String>,
    /// The candidate's identity (candidate statements only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_id: Option<String>,
}

/// One workload's formal SOLAR manifest in the index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SolarEntry {
    /// Problem directory.
    pub problem_path: String,
    /// Workload uuid.
    pub workload_uuid: String,
    /// The manifest.
    pub manifest: ArtifactRef,
}

fn default_ir_path() -> String {
    "torchview_extended_einsum".into()
}

/// The SOLAR index statement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SolarIndex {
    /// [`COMPONENT_SCHEMA`](super::COMPONENT_SCHEMA).
    pub schema_version: String,
    /// `solar_index`.
    pub artifact_kind: String,
    /// UTC time it was generated.
    pub generated_at: String,
    /// Git SHA-1.
    pub source_revision: String,
    /// The one SOLAR path used for the whole denominator.
    #[serde(default = "default_ir_path")]
    pub ir_path: String,
    /// The corpus manifest.
    pub corpus_manifest: ArtifactRef,
    /// Every scored workload.
    pub entries: Vec<SolarEntry>,
}
