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

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ScoreError;

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
    /// [`BUNDLE_SCHEMA`].
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
    /// [`COMPONENT_SCHEMA`].
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
    /// [`COMPONENT_SCHEMA`].
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SolarReference {
    #[allow(dead_code)]
    name: String,
    #[allow(dead_code)]
    sha256: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct AnalysisContract {
    ir_path: String,
    extraction_kind: String,
    precision: String,
    ir_kind: String,
    trace_seed: i64,
    verification_seeds: Vec<i64>,
    atol: f64,
    rtol: f64,
    required_matched_ratio: f64,
    #[serde(default)]
    max_error_cap: Option<f64>,
    allow_negative_inf: bool,
    preserved_input_indices: Vec<i64>,
    require_orojenesis: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SolarArtifact {
    path: String,
    sha256: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SolarBound {
    seconds: f64,
    kind: String,
    #[allow(dead_code)]
    limiting_resource: Option<String>,
}

/// A formal SOLAR request manifest (YAML).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SolarManifest {
    schema_version: u32,
    analysis_id: String,
    architecture_sha256: String,
    #[allow(dead_code)]
    reference: SolarReference,
    analysis_contract: AnalysisContract,
    #[allow(dead_code)]
    sol_score_eligible: bool,
    publication_eligible: bool,
    artifacts: Vec<SolarArtifact>,
    bound: SolarBound,
}

// The subset of a SOL ExecBench trace the verifier reads; other fields are the trace's own.
#[derive(Debug, Deserialize)]
struct Trace {
    definition: String,
    workload: TraceWorkload,
    #[serde(default)]
    solution: Option<String>,
    #[serde(default)]
    evaluation: Option<Evaluation>,
}

#[derive(Debug, Deserialize)]
struct TraceWorkload {
    uuid: String,
}

#[derive(Debug, Deserialize)]
struct Evaluation {
    status: String,
    environment: Environment,
    #[serde(default)]
    performance: Option<Performance>,
}

#[derive(Debug, Deserialize)]
struct Environment {
    hardware: String,
    #[serde(default)]
    libs: BTreeMap<String, String>,
    #[serde(default)]
    execution_isolation: Option<String>,
    #[serde(default)]
    clocks_locked: Option<bool>,
    #[serde(default)]
    timing_protocol: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Performance {
    latency_ms: f64,
    #[serde(default)]
    warmup_runs: u64,
    #[serde(default)]
    timed_iterations: u64,
    #[serde(default)]
    timed_iterations_per_trial: Vec<u64>,
    #[serde(default)]
    trials: u64,
    #[serde(default)]
    statistic: String,
    #[serde(default)]
    timed_outputs_validated: bool,
    #[serde(default)]
    cache_clear: Option<CacheClear>,
}

#[derive(Debug, Deserialize)]
struct CacheClear {
    #[serde(default)]
    detected_l2_bytes: Option<u64>,
    clear_buffer_bytes: u64,
    source: String,
    #[serde(default)]
    fallback_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Solution {
    name: String,
    definition: String,
    #[serde(default)]
    spec: Option<SolutionSpec>,
}

#[derive(Debug, Deserialize)]
struct SolutionSpec {
    #[serde(default)]
    target_hardware: Vec<String>,
}

// The parts of the corpus manifest the verifier needs.
#[derive(Debug, Deserialize)]
struct Corpus {
    #[serde(default)]
    official_scoring: OfficialScoring,
    #[serde(default)]
    formal_analysis: FormalAnalysis,
    #[serde(default)]
    materialized_problems: Vec<Materialized>,
    #[serde(default)]
    entries: Vec<CorpusEntry>,
}

#[derive(Debug, Default, Deserialize)]
struct OfficialScoring {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    baseline_id: Option<String>,
    #[serde(default)]
    release_policy: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct FormalAnalysis {
    #[serde(default)]
    architecture_profile_sha256: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Materialized {
    path: String,
    definition_sha256: String,
    workload_sha256: String,
}

#[derive(Debug, Deserialize)]
struct CorpusEntry {
    suite: String,
    problem_name: String,
    role: String,
    #[serde(default)]
    workload_uuids: Vec<String>,
}

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

fn bad(artifact: impl Into<String>, message: impl Into<String>) -> ScoreError {
    ScoreError::Bundle {
        artifact: artifact.into(),
        message: message.into(),
    }
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
}

fn is_revision(s: &str) -> bool {
    s.len() == 40 && s.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
}

/// A relative path that stays where it is put: no root, no `..`, no backslash, not empty.
fn safe_relative(p: &str) -> bool {
    !p.is_empty()
        && !p.contains('\\')
        && !Path::new(p).is_absolute()
        && Path::new(p)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

/// Whether the bundle at `path` is the port's format (its `schema_version` is a string).
pub fn is_port_bundle(path: &Path) -> Result<bool, ScoreError> {
    let text = kg_contract::io::read_to_string(path)?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| bad(path.display().to_string(), format!("is not JSON: {e}")))?;
    Ok(v.get("schema_version").is_some_and(|s| s.is_string()))
}

struct Verifier {
    root: PathBuf,
    checked: usize,
}

impl Verifier {
    /// Resolves and checks one bound file: regular, not a symlink, inside the bundle, size and
    /// SHA-256 as bound.
    fn file(&mut self, base: &Path, r: &ArtifactRef, what: &str) -> Result<PathBuf, ScoreError> {
        if !safe_relative(&r.path) {
            return Err(bad(
                &r.path,
                format!("{what}: path must be relative and stay inside the bundle"),
            ));
        }
        if !is_sha256(&r.sha256) {
            return Err(bad(
                &r.path,
                format!("{what}: `{}` is not a lower-case SHA-256", r.sha256),
            ));
        }
        let p = base.join(&r.path);
        let meta = std::fs::symlink_metadata(&p)
            .map_err(|_| bad(&r.path, format!("{what} is missing")))?;
        if meta.file_type().is_symlink() || !meta.is_file() {
            return Err(bad(&r.path, format!("{what} is not a regular file")));
        }
        let root = self.root.canonicalize().map_err(|source| ScoreError::Io {
            path: self.root.clone(),
            source,
        })?;
        let real = p.canonicalize().map_err(|source| ScoreError::Io {
            path: p.clone(),
            source,
        })?;
        if !real.starts_with(&root) {
            return Err(bad(&r.path, format!("{what} escapes the bundle directory")));
        }
        if meta.len() != r.size_bytes {
            return Err(bad(
                &r.path,
                format!(
                    "{what} is {} bytes, the bundle binds {}",
                    meta.len(),
                    r.size_bytes
                ),
            ));
        }
        let got = kg_contract::io::sha256_file(&p)?;
        if got != r.sha256 {
            return Err(bad(
                &r.path,
                format!("{what}: SHA-256 is {got}, the bundle binds {}", r.sha256),
            ));
        }
        self.checked += 1;
        Ok(p)
    }

    fn json<T: serde::de::DeserializeOwned>(
        &mut self,
        r: &ArtifactRef,
        what: &str,
        limit: u64,
    ) -> Result<T, ScoreError> {
        if r.size_bytes > limit {
            return Err(bad(&r.path, format!("{what} exceeds {limit} bytes")));
        }
        let root = self.root.clone();
        let p = self.file(&root, r, what)?;
        let text = kg_contract::io::read_to_string(&p)?;
        serde_json::from_str(&text).map_err(|e| bad(&r.path, format!("invalid {what}: {e}")))
    }
}

/// Options of [`verify`].
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// Score over this corpus manifest (SHA-256) instead of [`PINNED_CORPUS_MANIFEST_SHA256`];
    /// the report then says the corpus is not the port's pinned one.
    pub corpus_sha256: Option<String>,
}

struct Run {
    /// (problem, workload) -> (passed, latency ms).
    workloads: BTreeMap<(String, String), (bool, Option<f64>)>,
    /// problem -> definition name.
    definitions: BTreeMap<String, String>,
    /// (hardware, libs) of every trace.
    identities: BTreeSet<(String, BTreeMap<String, String>)>,
}

/// Verifies the port's release bundle at `path` and computes its official score; any failed
/// check is an error naming the artifact.
pub fn verify(path: &Path, opts: &VerifyOptions) -> Result<PortScore, ScoreError> {
    let root = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .to_path_buf();
    let text = kg_contract::io::read_to_string(path)?;
    let bundle: PortBundle = serde_json::from_str(&text).map_err(|e| {
        bad(
            "release-bundle.json",
            format!("invalid release bundle: {e}"),
        )
    })?;
    if bundle.schema_version != BUNDLE_SCHEMA {
        return Err(bad(
            "schema_version",
            format!("is `{}`, expected `{BUNDLE_SCHEMA}`", bundle.schema_version),
        ));
    }
    let paths: BTreeSet<&str> = [&bundle.baseline, &bundle.candidate, &bundle.solar]
        .iter()
        .map(|r| r.path.as_str())
        .collect();
    if paths.len() != 3 {
        return Err(bad(
            "release-bundle.json",
            "statements must use distinct paths",
        ));
    }
    let pin = opts
        .corpus_sha256
        .clone()
        .unwrap_or_else(|| PINNED_CORPUS_MANIFEST_SHA256.to_string());
    if bundle.corpus_manifest.sha256 != pin {
        return Err(bad(
            &bundle.corpus_manifest.path,
            format!(
                "binds corpus manifest {}, not the pinned {pin}",
                bundle.corpus_manifest.sha256
            ),
        ));
    }
    let mut v = Verifier {
        root: root.clone(),
        checked: 0,
    };
    let corpus_path = v.file(&root, &bundle.corpus_manifest, "corpus manifest")?;
    let corpus: Corpus = serde_saphyr::from_str(&kg_contract::io::read_to_string(&corpus_path)?)
        .map_err(|e| {
            bad(
                &bundle.corpus_manifest.path,
                format!("invalid corpus manifest: {e}"),
            )
        })?;
    let baseline: RunStatement =
        v.json(&bundle.baseline, "baseline statement", MAX_STATEMENT_BYTES)?;
    let candidate: RunStatement = v.json(
        &bundle.candidate,
        "candidate statement",
        MAX_STATEMENT_BYTES,
    )?;
    let solar: SolarIndex = v.json(&bundle.solar, "SOLAR statement", MAX_STATEMENT_BYTES)?;

    // Statement identities and pins.
    for (s, role, r) in [
        (&baseline, "baseline", &bundle.baseline),
        (&candidate, "candidate", &bundle.candidate),
    ] {
        let (id_ok, other) = match role {
            "baseline" => (
                s.baseline_id.as_deref().is_some_and(|i| !i.is_empty()),
                &s.candidate_id,
            ),
            _ => (
                s.candidate_id.as_deref().is_some_and(|i| !i.is_empty()),
                &s.baseline_id,
            ),
        };
        if s.schema_version != COMPONENT_SCHEMA
            || s.artifact_kind != "run_statement"
            || s.role != role
            || !id_ok
            || other.is_some()
        {
            return Err(bad(
                &r.path,
                format!("is not a {COMPONENT_SCHEMA} {role} run statement with a {role}_id"),
            ));
        }
    }
    if solar.schema_version != COMPONENT_SCHEMA || solar.artifact_kind != "solar_index" {
        return Err(bad(&bundle.solar.path, "is not a SOLAR index statement"));
    }
    let scoring = &corpus.official_scoring;
    if scoring.status.as_deref() != Some("available") {
        return Err(bad(
            &bundle.corpus_manifest.path,
            "does not authorise official scoring",
        ));
    }
    if scoring.release_policy.as_deref() != Some(RELEASE_POLICY) {
        return Err(bad(
            &bundle.corpus_manifest.path,
            format!("release policy is not {RELEASE_POLICY}"),
        ));
    }
    let baseline_id = baseline.baseline_id.clone().unwrap_or_default();
    if scoring.baseline_id.as_deref() != Some(baseline_id.as_str()) {
        return Err(bad(
            &bundle.baseline.path,
            format!(
                "baseline_id `{baseline_id}` is not the corpus-pinned `{}`",
                scoring.baseline_id.as_deref().unwrap_or("none")
            ),
        ));
    }
    let rev = &baseline.source_revision;
    if !is_revision(rev) || candidate.source_revision != *rev || solar.source_revision != *rev {
        return Err(bad(
            "source_revision",
            format!(
                "baseline {rev}, candidate {}, SOLAR {}: they must be one Git SHA-1",
                candidate.source_revision, solar.source_revision
            ),
        ));
    }
    for (r, name) in [
        (&baseline.corpus_manifest, &bundle.baseline.path),
        (&candidate.corpus_manifest, &bundle.candidate.path),
        (&solar.corpus_manifest, &bundle.solar.path),
    ] {
        if r.sha256 != bundle.corpus_manifest.sha256 {
            return Err(bad(
                name,
                "binds a different corpus manifest than the bundle",
            ));
        }
        v.file(&root, r, "corpus manifest")?;
    }

    // The corpus's scored denominator.
    let scored: BTreeMap<String, BTreeSet<String>> = corpus
        .entries
        .iter()
        .filter(|e| e.role == "scored")
        .map(|e| {
            (
                format!("{}/{}", e.suite, e.problem_name),
                e.workload_uuids.iter().cloned().collect(),
            )
        })
        .collect();
    if scored.is_empty() {
        return Err(bad(&bundle.corpus_manifest.path, "has no scored problems"));
    }
    let pinned: BTreeMap<&str, (&str, &str)> = corpus
        .materialized_problems
        .iter()
        .map(|m| {
            (
                m.path.as_str(),
                (m.definition_sha256.as_str(), m.workload_sha256.as_str()),
            )
        })
        .collect();

    let b = run(
        &mut v,
        &baseline,
        &bundle.baseline.path,
        &scored,
        &pinned,
        true,
    )?;
    let c = run(
        &mut v,
        &candidate,
        &bundle.candidate.path,
        &scored,
        &pinned,
        false,
    )?;
    let ids: BTreeSet<_> = b.identities.union(&c.identities).collect();
    if ids.len() != 1 {
        return Err(bad(
            "environment",
            format!(
                "the two runs report {} runtime identities (hardware, libraries); they must share one",
                ids.len()
            ),
        ));
    }
    for r in [&baseline.environment, &candidate.environment] {
        v.file(&root, r, "run environment")?;
    }

    // SOLAR.
    let arch = corpus
        .formal_analysis
        .architecture_profile_sha256
        .clone()
        .ok_or_else(|| bad(&bundle.corpus_manifest.path, "pins no architecture profile"))?;
    let (required, auxiliary, extraction, ir_kind) = match solar.ir_path.as_str() {
        "torchview_extended_einsum" => (
            "einsum_graph.yaml",
            &["af_einsum_graph.yaml", "einsum_graph_renamed.yaml"][..],
            "torchview_v1",
            "extended_einsum",
        ),
        "make_fx_aten" => ("aten_graph.yaml", &[][..], "make_fx_reference_v1", "aten"),
        other => {
            return Err(bad(
                &bundle.solar.path,
                format!("unknown ir_path `{other}`"),
            ));
        }
    };
    let mut bounds: BTreeMap<(String, String), f64> = BTreeMap::new();
    for e in &solar.entries {
        let key = (e.problem_path.clone(), e.workload_uuid.clone());
        if bounds.contains_key(&key) {
            return Err(bad(
                &bundle.solar.path,
                format!("lists {}:{} twice", key.0, key.1),
            ));
        }
        if e.manifest.size_bytes > MAX_SOLAR_MANIFEST_BYTES {
            return Err(bad(&e.manifest.path, "SOLAR manifest exceeds 1 MiB"));
        }
        let p = v.file(&root, &e.manifest, "SOLAR manifest")?;
        let m: SolarManifest = serde_saphyr::from_str(&kg_contract::io::read_to_string(&p)?)
            .map_err(|err| bad(&e.manifest.path, format!("invalid SOLAR manifest: {err}")))?;
        let definition = b
            .definitions
            .get(&e.problem_path)
            .cloned()
            .unwrap_or_default();
        let c = &m.analysis_contract;
        if m.schema_version != SOLAR_MANIFEST_SCHEMA
            || m.analysis_id != format!("{definition}:{}", e.workload_uuid)
            || m.architecture_sha256 != arch
            || c.ir_path != solar.ir_path
            || c.extraction_kind != extraction
            || c.ir_kind != ir_kind
            || !c.require_orojenesis
            || !m.publication_eligible
            || m.bound.kind != FORMAL_BOUND_KIND
            || !m.bound.seconds.is_finite()
            || m.bound.seconds <= 0.0
        {
            return Err(bad(
                &e.manifest.path,
                "is not a publication-eligible formal bound of this workload, path and architecture",
            ));
        }
        let dir = p.parent().unwrap_or(&root).to_path_buf();
        let mut seen = BTreeSet::new();
        for a in &m.artifacts {
            if !seen.insert(a.path.clone()) {
                return Err(bad(&e.manifest.path, format!("lists `{}` twice", a.path)));
            }
            let size = std::fs::symlink_metadata(dir.join(&a.path))
                .map(|m| m.len())
                .unwrap_or(u64::MAX);
            let r = ArtifactRef {
                path: a.path.clone(),
                sha256: a.sha256.clone(),
                size_bytes: size,
            };
            v.file(&dir, &r, "SOLAR artifact")?;
        }
        for need in [
            "operator_graph.yaml",
            required,
            "conversion-attestation.yaml",
            "solar-analysis.yaml",
        ] {
            if !seen.contains(need) {
                return Err(bad(
                    &e.manifest.path,
                    format!("lacks the published artifact `{need}`"),
                ));
            }
        }
        let reviewed = [
            "operator_graph.yaml",
            required,
            "conversion-attestation.yaml",
            "solar-analysis.yaml",
        ];
        if let Some(x) = seen.iter().find(|p| {
            !reviewed.contains(&p.as_str())
                && !auxiliary.contains(&p.as_str())
                && (!p.starts_with("orojenesis/") || Path::new(p.as_str()).components().count() < 2)
        }) {
            return Err(bad(
                &e.manifest.path,
                format!("lists the unreviewed artifact `{x}`"),
            ));
        }
        bounds.insert(key, m.bound.seconds * 1000.0);
    }

    // Denominators, then the score.
    let b_keys: BTreeSet<_> = b.workloads.keys().collect();
    let c_keys: BTreeSet<_> = c.workloads.keys().collect();
    let s_keys: BTreeSet<_> = bounds.keys().collect();
    if b_keys != c_keys || b_keys != s_keys {
        return Err(bad(
            "denominator",
            format!(
                "baseline has {} workloads, candidate {}, SOLAR {}; they must be the same set",
                b_keys.len(),
                c_keys.len(),
                s_keys.len()
            ),
        ));
    }
    let mut per_problem: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (key, t_sol) in &bounds {
        let (_, t_b) = b.workloads[key];
        let (passed, t_k) = c.workloads[key];
        let who = format!("{}:{}", key.0, key.1);
        let t_b = t_b.ok_or_else(|| bad(&who, "baseline has no latency"))?;
        let s = if !passed {
            0.0
        } else {
            let t_k = t_k.ok_or_else(|| bad(&who, "passing candidate has no latency"))?;
            if t_b <= *t_sol {
                return Err(bad(
                    &who,
                    format!("baseline {t_b} ms is not slower than T_SOL {t_sol} ms"),
                ));
            }
            if t_k < *t_sol {
                return Err(bad(
                    &who,
                    format!(
                        "candidate {t_k} ms is faster than T_SOL {t_sol} ms: the bound or the candidate needs review"
                    ),
                ));
            }
            1.0 / (1.0 + (t_k - t_sol) / (t_b - t_sol))
        };
        per_problem.entry(key.0.clone()).or_default().push(s);
    }
    let problem_scores: BTreeMap<String, f64> = per_problem
        .iter()
        .map(|(p, s)| (p.clone(), s.iter().sum::<f64>() / s.len() as f64))
        .collect();
    let score = problem_scores.values().sum::<f64>() / problem_scores.len() as f64;
    Ok(PortScore {
        status: "official".into(),
        candidate_id: candidate.candidate_id.clone().unwrap_or_default(),
        baseline_id,
        source_revision: rev.clone(),
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

/// Verifies one run statement's problems against the corpus and reads its traces.
fn run(
    v: &mut Verifier,
    s: &RunStatement,
    name: &str,
    scored: &BTreeMap<String, BTreeSet<String>>,
    pinned: &BTreeMap<&str, (&str, &str)>,
    is_baseline: bool,
) -> Result<Run, ScoreError> {
    let problems: BTreeSet<&str> = s.problems.iter().map(|p| p.problem_path.as_str()).collect();
    if problems.len() != s.problems.len() {
        return Err(bad(name, "lists a problem twice"));
    }
    let expected: BTreeSet<&str> = scored.keys().map(String::as_str).collect();
    if problems != expected {
        return Err(bad(
            name,
            format!(
                "covers {} problems, the corpus scores {}; the denominators must be equal",
                problems.len(),
                expected.len()
            ),
        ));
    }
    let root = v.root.clone();
    let mut out = Run {
        workloads: BTreeMap::new(),
        definitions: BTreeMap::new(),
        identities: BTreeSet::new(),
    };
    for p in &s.problems {
        if pinned.get(p.problem_path.as_str())
            != Some(&(p.definition_sha256.as_str(), p.workload_sha256.as_str()))
        {
            return Err(bad(
                name,
                format!(
                    "problem `{}` does not match the corpus's pinned hashes",
                    p.problem_path
                ),
            ));
        }
        let sol: Solution = v.json(&p.implementation, "implementation", MAX_STATEMENT_BYTES)?;
        if p.trace.size_bytes > MAX_TRACE_BYTES {
            return Err(bad(&p.trace.path, "trace exceeds 16 MiB"));
        }
        let tp = v.file(&root, &p.trace, "trace")?;
        let text = kg_contract::io::read_to_string(&tp)?;
        let mut seen = BTreeSet::new();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let at = format!("{}:{}", p.trace.path, i + 1);
            let t: Trace =
                serde_json::from_str(line).map_err(|e| bad(&at, format!("invalid trace: {e}")))?;
            if t.definition != sol.definition || t.solution.as_deref() != Some(sol.name.as_str()) {
                return Err(bad(
                    &at,
                    "definition or solution differs from the implementation",
                ));
            }
            if !seen.insert(t.workload.uuid.clone()) {
                return Err(bad(&at, format!("workload `{}` twice", t.workload.uuid)));
            }
            let ev = t.evaluation.ok_or_else(|| bad(&at, "has no evaluation"))?;
            let env = &ev.environment;
            if env.execution_isolation.as_deref() != Some("container") {
                return Err(bad(&at, "did not run in the release container"));
            }
            if let Some(spec) = &sol.spec
                && !spec.target_hardware.contains(&env.hardware)
            {
                return Err(bad(
                    &at,
                    format!(
                        "ran on `{}`, which the implementation does not target",
                        env.hardware
                    ),
                ));
            }
            out.identities
                .insert((env.hardware.clone(), env.libs.clone()));
            let passed = ev.status == "PASSED";
            if is_baseline && !passed {
                return Err(bad(
                    &at,
                    format!("baseline workload is {}, every one must pass", ev.status),
                ));
            }
            let latency = if passed {
                Some(paper_latency(&ev).map_err(|m| bad(&at, m))?)
            } else {
                None
            };
            out.workloads
                .insert((p.problem_path.clone(), t.workload.uuid), (passed, latency));
        }
        let want = &scored[&p.problem_path];
        if seen.is_empty() || &seen != want {
            return Err(bad(
                &p.trace.path,
                format!(
                    "covers {} workloads, the corpus lists {} for `{}`",
                    seen.len(),
                    want.len(),
                    p.problem_path
                ),
            ));
        }
        out.definitions
            .insert(p.problem_path.clone(), sol.definition.clone());
    }
    Ok(out)
}

/// The latency of a passing trace, if it was timed under the paper protocol.
fn paper_latency(ev: &Evaluation) -> Result<f64, String> {
    let env = &ev.environment;
    if env.clocks_locked != Some(true)
        || env.timing_protocol.as_deref() != Some(PAPER_TIMING_PROTOCOL)
    {
        return Err("passing trace lacks locked clocks or the paper timing protocol".into());
    }
    let p = ev
        .performance
        .as_ref()
        .ok_or("passing trace has no performance")?;
    let protocol = p.latency_ms.is_finite()
        && p.latency_ms > 0.0
        && p.warmup_runs == 10
        && p.timed_iterations == 50
        && p.timed_iterations_per_trial == [50, 50, 50]
        && p.trials == 3
        && p.statistic == "mean"
        && p.timed_outputs_validated;
    if !protocol {
        return Err("trace does not satisfy the paper timing protocol (10 warmup, 3 x 50 timed, mean, validated outputs)".into());
    }
    let cache = p
        .cache_clear
        .as_ref()
        .ok_or("trace has no cache-clear evidence")?;
    let derived = cache
        .detected_l2_bytes
        .is_some_and(|l2| cache.clear_buffer_bytes == 2 * l2)
        && cache.source == "torch_device_properties"
        && cache.fallback_reason.is_none();
    if !derived {
        return Err("cache-clear evidence is not twice the detected L2".into());
    }
    Ok(p.latency_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_stay_inside() {
        assert!(safe_relative("statements/baseline.json"));
        for p in ["", "/etc/passwd", "../x", "a/../../x", "a\\b", "./a"] {
            assert!(!safe_relative(p), "{p}");
        }
        assert!(is_sha256(PINNED_CORPUS_MANIFEST_SHA256));
        assert!(!is_sha256(&PINNED_CORPUS_MANIFEST_SHA256.to_uppercase()));
    }
}
