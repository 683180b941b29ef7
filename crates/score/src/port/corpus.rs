//! The corpus manifest: official scoring, the architecture pin and the scored denominator.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::PortBundle;
use super::files::bad;
use crate::ScoreError;

// The parts of the corpus manifest the verifier needs.
#[derive(Debug, Deserialize)]
pub(super) struct Corpus {
    #[serde(default)]
    pub(super) official_scoring: OfficialScoring,
    #[serde(default)]
    pub(super) formal_analysis: FormalAnalysis,
    #[serde(default)]
    materialized_problems: Vec<Materialized>,
    #[serde(default)]
    entries: Vec<CorpusEntry>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct OfficialScoring {
    #[serde(default)]
    pub(super) status: Option<String>,
    #[serde(default)]
    pub(super) baseline_id: Option<String>,
    #[serde(default)]
    pub(super) release_policy: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub(super) struct FormalAnalysis {
    #[serde(default)]
    pub(super) architecture_profile_sha256: Option<String>,
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

/// What both runs must cover: the corpus's scored problems and the hashes it pins for them.
pub(super) struct Denominator<'a> {
    /// Scored problem (`<suite>/<problem>`) -> its workload uuids.
    pub(super) scored: BTreeMap<String, BTreeSet<String>>,
    /// Problem path -> (definition SHA-256, workload SHA-256).
    pub(super) pinned: BTreeMap<&'a str, (&'a str, &'a str)>,
}

impl<'a> Denominator<'a> {
    /// The corpus's scored denominator; a corpus that scores nothing is an error.
    pub(super) fn of(corpus: &'a Corpus, bundle: &PortBundle) -> Result<Self, ScoreError> {
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
        Ok(Denominator { scored, pinned })
    }
}
