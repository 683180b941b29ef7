//! The bundle file and the documents it binds: their schemas, roles, identities and pins.

use std::collections::BTreeSet;
use std::path::Path;

use super::corpus::Corpus;
use super::files::{Verifier, bad, is_revision};
use super::{
    BUNDLE_SCHEMA, COMPONENT_SCHEMA, MAX_STATEMENT_BYTES, PINNED_CORPUS_MANIFEST_SHA256,
    PortBundle, RELEASE_POLICY, RunStatement, SolarIndex, VerifyOptions,
};
use crate::ScoreError;

/// Reads `release-bundle.json` and checks its schema, its distinct statement paths and that it
/// binds the pinned corpus manifest.
pub(super) fn read_bundle(path: &Path, opts: &VerifyOptions) -> Result<PortBundle, ScoreError> {
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
    Ok(bundle)
}

/// The corpus manifest and the three statements the bundle binds.
pub(super) struct Statements {
    /// The corpus manifest.
    pub(super) corpus: Corpus,
    /// The baseline run statement.
    pub(super) baseline: RunStatement,
    /// The candidate run statement.
    pub(super) candidate: RunStatement,
    /// The SOLAR index statement.
    pub(super) solar: SolarIndex,
}

impl Statements {
    /// Reads the corpus manifest and the three statements, each checked as bound.
    pub(super) fn read(v: &mut Verifier, bundle: &PortBundle) -> Result<Statements, ScoreError> {
        let root = v.root.clone();
        let corpus_path = v.file(&root, &bundle.corpus_manifest, "corpus manifest")?;
        let corpus: Corpus = serde_saphyr::from_str(&kg_contract::io::read_to_string(
            &corpus_path,
        )?)
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
        Ok(Statements {
            corpus,
            baseline,
            candidate,
            solar,
        })
    }

    /// Checks each statement's schema, role and id, that the corpus authorises official
    /// scoring of this baseline, and the one source revision; returns the baseline id.
    pub(super) fn check_pins(&self, bundle: &PortBundle) -> Result<String, ScoreError> {
        let Statements {
            corpus,
            baseline,
            candidate,
            solar,
        } = self;
        for (s, role, r) in [
            (baseline, "baseline", &bundle.baseline),
            (candidate, "candidate", &bundle.candidate),
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
        Ok(baseline_id)
    }

    /// Checks that every statement binds the bundle's corpus manifest, and that file.
    pub(super) fn check_corpus_bindings(
        &self,
        v: &mut Verifier,
        bundle: &PortBundle,
    ) -> Result<(), ScoreError> {
        let root = v.root.clone();
        for (r, name) in [
            (&self.baseline.corpus_manifest, &bundle.baseline.path),
            (&self.candidate.corpus_manifest, &bundle.candidate.path),
            (&self.solar.corpus_manifest, &bundle.solar.path),
        ] {
            if r.sha256 != bundle.corpus_manifest.sha256 {
                return Err(bad(
                    name,
                    "binds a different corpus manifest than the bundle",
                ));
            }
            v.file(&root, r, "corpus manifest")?;
        }
        Ok(())
    }
}
