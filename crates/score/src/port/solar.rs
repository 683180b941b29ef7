//! SOLAR: each workload's formal manifest, its contract and its published artifacts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::corpus::Corpus;
use super::files::{Verifier, bad};
use super::{
    ArtifactRef, FORMAL_BOUND_KIND, MAX_SOLAR_MANIFEST_BYTES, PortBundle, SOLAR_MANIFEST_SCHEMA,
    SolarEntry, SolarIndex,
};
use crate::ScoreError;

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

/// What one SOLAR path (`ir_path`) publishes and how its analyses are made.
struct IrPath {
    /// The path's own graph artifact.
    required: &'static str,
    /// Artifacts it may publish besides the reviewed ones.
    auxiliary: &'static [&'static str],
    /// The analysis contract's `extraction_kind`.
    extraction: &'static str,
    /// The analysis contract's `ir_kind`.
    ir_kind: &'static str,
}

/// What every manifest of the SOLAR index is checked against.
struct Expected<'a> {
    /// The SOLAR index statement.
    solar: &'a SolarIndex,
    /// The architecture profile the corpus pins.
    arch: String,
    /// The index's one SOLAR path.
    path: IrPath,
    /// Problem -> definition name, from the baseline run.
    definitions: &'a BTreeMap<String, String>,
}

/// T_SOL in ms per (problem, workload), from the SOLAR index's formal manifests, each checked
/// with its artifacts.
pub(super) fn bounds(
    v: &mut Verifier,
    bundle: &PortBundle,
    corpus: &Corpus,
    solar: &SolarIndex,
    definitions: &BTreeMap<String, String>,
) -> Result<BTreeMap<(String, String), f64>, ScoreError> {
    let arch = corpus
        .formal_analysis
        .architecture_profile_sha256
        .clone()
        .ok_or_else(|| bad(&bundle.corpus_manifest.path, "pins no architecture profile"))?;
    let path = match solar.ir_path.as_str() {
        "torchview_extended_einsum" => IrPath {
            required: "einsum_graph.yaml",
            auxiliary: &["af_einsum_graph.yaml", "einsum_graph_renamed.yaml"][..],
            extraction: "torchview_v1",
            ir_kind: "extended_einsum",
        },
        "make_fx_aten" => IrPath {
            required: "aten_graph.yaml",
            auxiliary: &[][..],
            extraction: "make_fx_reference_v1",
            ir_kind: "aten",
        },
        other => {
            return Err(bad(
                &bundle.solar.path,
                format!("unknown ir_path `{other}`"),
            ));
        }
    };
    let expected = Expected {
        solar,
        arch,
        path,
        definitions,
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
        let (p, m) = expected.manifest(v, e)?;
        expected.artifacts(v, e, &p, &m)?;
        bounds.insert(key, m.bound.seconds * 1000.0);
    }
    Ok(bounds)
}

impl Expected<'_> {
    /// Reads one entry's manifest, checked as bound, and checks it is a publication-eligible
    /// formal bound of this workload, path and architecture.
    fn manifest(
        &self,
        v: &mut Verifier,
        e: &SolarEntry,
    ) -> Result<(PathBuf, SolarManifest), ScoreError> {
        if e.manifest.size_bytes > MAX_SOLAR_MANIFEST_BYTES {
            return Err(bad(&e.manifest.path, "SOLAR manifest exceeds 1 MiB"));
        }
        let root = v.root.clone();
        let p = v.file(&root, &e.manifest, "SOLAR manifest")?;
        let m: SolarManifest = serde_saphyr::from_str(&kg_contract::io::read_to_string(&p)?)
            .map_err(|err| bad(&e.manifest.path, format!("invalid SOLAR manifest: {err}")))?;
        let definition = self
            .definitions
            .get(&e.problem_path)
            .cloned()
            .unwrap_or_default();
        let c = &m.analysis_contract;
        if m.schema_version != SOLAR_MANIFEST_SCHEMA
            || m.analysis_id != format!("{definition}:{}", e.workload_uuid)
            || m.architecture_sha256 != self.arch
            || c.ir_path != self.solar.ir_path
            || c.extraction_kind != self.path.extraction
            || c.ir_kind != self.path.ir_kind
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
        Ok((p, m))
    }

    /// Checks every artifact the manifest `m` (at `p`) lists, beside it, and that they are
    /// the path's complete, reviewed set.
    fn artifacts(
        &self,
        v: &mut Verifier,
        e: &SolarEntry,
        p: &Path,
        m: &SolarManifest,
    ) -> Result<(), ScoreError> {
        let root = v.root.clone();
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
        let (required, auxiliary) = (self.path.required, self.path.auxiliary);
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
        Ok(())
    }
}
