//! Release bundles: `release-bundle.json` binds by SHA-256 the corpus files, the baseline and
//! candidate traces, the SOL manifests (which bind their own files), the tool version and the
//! device identity. [`verify`] re-hashes every referenced artifact and recomputes the score.

use std::path::{Component, Path, PathBuf};

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::{Policy, ScoreError, ScoreReport, SolTable};

/// File name of a bundle.
pub const BUNDLE_FILE: &str = "release-bundle.json";

/// A file bound by hash, with its path relative to the bundle's directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    /// Relative path (no `..`, not absolute).
    pub path: String,
    /// SHA-256 of its content.
    pub sha256: String,
}

/// Traces of one side (baseline or candidate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceSet {
    /// Solution name(s) the traces were produced by.
    pub solution: String,
    /// The trace files.
    pub traces: Vec<FileRef>,
}

/// The recorded score (checked against the recomputation, never trusted).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedScore {
    /// Overall score.
    pub overall: f64,
    /// Per problem.
    pub problems: IndexMap<String, f64>,
    /// Workloads scored.
    pub workloads: usize,
}

/// `release-bundle.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBundle {
    /// Format version.
    pub schema_version: u32,
    /// `kernelgate`.
    pub tool: String,
    /// Version of the tool that assembled the bundle.
    pub tool_version: String,
    /// When it was assembled (RFC 3339), informational.
    pub created: String,
    /// Hardware spec name used for T_SOL.
    pub hardware: String,
    /// SHA-256 of that spec's YAML.
    pub hardware_sha256: String,
    /// SOL extraction backend.
    pub backend: String,
    /// Device identity both runs used (`kind:name`), as in the traces.
    pub device: String,
    /// Full device record from the baseline traces (UUID, PCI bus), informational.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_detail: Option<kg_contract::DeviceIdentity>,
    /// Timing method both runs used.
    pub timing_method: String,
    /// Every corpus file (definitions, workloads, references, data).
    pub corpus: Vec<FileRef>,
    /// The baseline (reference) run.
    pub baseline: TraceSet,
    /// The candidate run.
    pub candidate: TraceSet,
    /// Every SOL analysis manifest.
    pub solar_manifests: Vec<FileRef>,
    /// The policy the score was computed under.
    pub policy: Policy,
    /// The score as assembled.
    pub score: RecordedScore,
}

/// Resolves a bundle-relative path, refusing absolute paths and `..`.
pub fn resolve(root: &Path, rel: &str) -> Result<PathBuf, ScoreError> {
    let p = Path::new(rel);
    if p.is_absolute()
        || p.components()
            .any(|c| !matches!(c, Component::Normal(_) | Component::CurDir))
    {
        return Err(ScoreError::Bundle {
            artifact: rel.to_string(),
            message: "path must be relative to the bundle and stay inside it".into(),
        });
    }
    Ok(root.join(p))
}

/// Hashes a file into a [`FileRef`] relative to `root`.
pub fn file_ref(root: &Path, path: &Path) -> Result<FileRef, ScoreError> {
    let rel = path.strip_prefix(root).map_err(|_| ScoreError::Bundle {
        artifact: path.display().to_string(),
        message: format!("is outside the bundle directory `{}`", root.display()),
    })?;
    Ok(FileRef {
        path: rel.to_string_lossy().into_owned(),
        sha256: kg_contract::io::sha256_file(path)?,
    })
}

fn check(root: &Path, r: &FileRef) -> Result<PathBuf, ScoreError> {
    let p = resolve(root, &r.path)?;
    if !p.is_file() {
        return Err(ScoreError::Bundle {
            artifact: r.path.clone(),
            message: "is missing".into(),
        });
    }
    let got = kg_contract::io::sha256_file(&p)?;
    if got != r.sha256 {
        return Err(ScoreError::Bundle {
            artifact: r.path.clone(),
            message: format!("SHA-256 is {got}, the bundle binds {}", r.sha256),
        });
    }
    Ok(p)
}

/// Scores agree when the workload count and problem names are equal and every figure agrees
/// to 1e-12 relative: a bundle written by a build whose JSON float parsing was not exact
/// (before `float_roundtrip`) differs from a recomputation in the last bit, and such a
/// difference says nothing about the traces.
fn same_score(a: &RecordedScore, b: &RecordedScore) -> bool {
    let close = |x: f64, y: f64| (x - y).abs() <= SCORE_REL_TOL * x.abs().max(y.abs()).max(1e-300);
    a.workloads == b.workloads
        && close(a.overall, b.overall)
        && a.problems.len() == b.problems.len()
        && a.problems
            .iter()
            .all(|(k, v)| b.problems.get(k).is_some_and(|w| close(*v, *w)))
}

/// See `same_score`.
const SCORE_REL_TOL: f64 = 1e-12;

fn recorded(report: &ScoreReport) -> RecordedScore {
    RecordedScore {
        overall: report.overall,
        problems: report
            .problems
            .iter()
            .map(|p| (p.definition.clone(), p.score))
            .collect(),
        workloads: report.workloads.len(),
    }
}

/// Everything needed to assemble a bundle; all paths inside `root`.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The bundle directory.
    pub root: PathBuf,
    /// Corpus files.
    pub corpus_files: Vec<PathBuf>,
    /// Baseline solution name and trace files.
    pub baseline: (String, Vec<PathBuf>),
    /// Candidate solution name and trace files.
    pub candidate: (String, Vec<PathBuf>),
    /// Analysis directories.
    pub solar_dirs: Vec<PathBuf>,
    /// Hardware spec name and hash.
    pub hardware: (String, String),
    /// The SOLAR extraction path the analyses used (`aten` or `fx`).
    pub backend: String,
    /// Timestamp.
    pub created: String,
}

/// Scores and writes `root/release-bundle.json` atomically; returns the bundle and report.
pub fn assemble(inp: &Inputs) -> Result<(ReleaseBundle, ScoreReport), ScoreError> {
    let refs = |files: &[PathBuf]| -> Result<Vec<FileRef>, ScoreError> {
        files.iter().map(|f| file_ref(&inp.root, f)).collect()
    };
    let bundle = ReleaseBundle {
        schema_version: crate::SCHEMA_VERSION,
        tool: "kernelgate".into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        created: inp.created.clone(),
        hardware: inp.hardware.0.clone(),
        hardware_sha256: inp.hardware.1.clone(),
        backend: inp.backend.clone(),
        device: String::new(),
        device_detail: None,
        timing_method: String::new(),
        corpus: refs(&inp.corpus_files)?,
        baseline: TraceSet {
            solution: inp.baseline.0.clone(),
            traces: refs(&inp.baseline.1)?,
        },
        candidate: TraceSet {
            solution: inp.candidate.0.clone(),
            traces: refs(&inp.candidate.1)?,
        },
        solar_manifests: inp
            .solar_dirs
            .iter()
            .map(|d| file_ref(&inp.root, &d.join(kg_solar::analysis::MANIFEST_FILE)))
            .collect::<Result<_, _>>()?,
        policy: crate::policy(),
        score: RecordedScore {
            overall: 0.0,
            problems: IndexMap::new(),
            workloads: 0,
        },
    };
    let (report, detail) = recompute(&inp.root, &bundle)?;
    let bundle = ReleaseBundle {
        device: report.device.clone(),
        device_detail: detail,
        timing_method: report.timing_method.clone(),
        score: recorded(&report),
        ..bundle
    };
    let text = kg_contract::io::to_json_pretty(&bundle, BUNDLE_FILE)?;
    kg_contract::io::write_atomic(&inp.root.join(BUNDLE_FILE), text.as_bytes())?;
    Ok((bundle, report))
}

/// Re-hashes the artifacts of `bundle` and recomputes the score from them.
fn recompute(
    root: &Path,
    bundle: &ReleaseBundle,
) -> Result<(ScoreReport, Option<kg_contract::DeviceIdentity>), ScoreError> {
    let mut corpus_hashes = std::collections::HashSet::new();
    for r in &bundle.corpus {
        check(root, r)?;
        corpus_hashes.insert(r.sha256.clone());
    }
    let mut sol = SolTable::new();
    for r in &bundle.solar_manifests {
        let p = check(root, r)?;
        let dir = p.parent().unwrap_or(root);
        let (m, rec) = kg_solar::analysis::read_verified(dir).map_err(|e| ScoreError::Bundle {
            artifact: r.path.clone(),
            message: e.to_string(),
        })?;
        let bad = |message: String| ScoreError::Bundle {
            artifact: r.path.clone(),
            message,
        };
        if m.hardware_sha256 != bundle.hardware_sha256 || m.hardware != bundle.hardware {
            return Err(bad(format!(
                "was computed for hardware `{}` ({}), the bundle says `{}` ({})",
                m.hardware, m.hardware_sha256, bundle.hardware, bundle.hardware_sha256
            )));
        }
        if m.backend.as_str() != bundle.backend {
            return Err(bad(format!(
                "backend `{}`, the bundle says `{}`",
                m.backend, bundle.backend
            )));
        }
        if !corpus_hashes.contains(&m.definition_sha256) {
            return Err(bad(format!(
                "analyses definition `{}` with SHA-256 {}, which is not a bound corpus file",
                m.definition, m.definition_sha256
            )));
        }
        sol.insert((rec.definition, rec.workload), rec.t_sol_ms);
    }
    let load = |set: &TraceSet| -> Result<Vec<kg_contract::Trace>, ScoreError> {
        let mut all = Vec::new();
        for r in &set.traces {
            let p = check(root, r)?;
            all.extend(crate::load_traces(&p)?);
        }
        Ok(all)
    };
    let baseline = load(&bundle.baseline)?;
    let candidate = load(&bundle.candidate)?;
    let detail = baseline
        .first()
        .and_then(|t| t.evaluation.as_ref())
        .and_then(|e| e.environment.device.clone());
    let report = crate::compute(&candidate, &baseline, &sol)?;
    Ok((report, detail))
}

/// `score official`: loads a bundle, re-hashes every artifact, recomputes the score and checks
/// it, the device and the timing method against what the bundle records.
pub fn verify(path: &Path) -> Result<(ReleaseBundle, ScoreReport), ScoreError> {
    let (bundle, _): (ReleaseBundle, _) = kg_contract::io::load_json(path)?;
    let root = path.parent().unwrap_or(Path::new("."));
    let (report, _) = recompute(root, &bundle)?;
    let mismatch = |artifact: &str, message: String| ScoreError::Bundle {
        artifact: artifact.to_string(),
        message,
    };
    if report.device != bundle.device {
        return Err(mismatch(
            "device",
            format!(
                "traces say `{}`, the bundle records `{}`",
                report.device, bundle.device
            ),
        ));
    }
    if report.timing_method != bundle.timing_method {
        return Err(mismatch(
            "timing_method",
            format!(
                "traces say `{}`, the bundle records `{}`",
                report.timing_method, bundle.timing_method
            ),
        ));
    }
    if bundle.policy != crate::policy() {
        return Err(mismatch(
            "policy",
            "differs from the policy this version implements".into(),
        ));
    }
    let got = recorded(&report);
    if !same_score(&got, &bundle.score) {
        return Err(mismatch(
            "score",
            format!(
                "recomputed overall {} over {} workloads, the bundle records {} over {}",
                got.overall, got.workloads, bundle.score.overall, bundle.score.workloads
            ),
        ));
    }
    Ok((bundle, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn score(overall: f64, p: f64) -> RecordedScore {
        RecordedScore {
            overall,
            problems: [("a".to_string(), p)].into_iter().collect(),
            workloads: 3,
        }
    }

    #[test]
    fn last_bit_differences_agree_real_ones_do_not() {
        // The H200 release of 2026-11-30: written with inexact float parsing, recomputed exactly.
        let a = score(0.433_561_775_189_592_27, 0.5);
        let b = score(0.433_561_775_189_592_4, 0.5);
        assert!(same_score(&a, &b));
        assert!(!same_score(&a, &score(0.433_562, 0.5)));
        assert!(!same_score(&a, &score(0.433_561_775_189_592_27, 0.500_001)));
        let mut fewer = a.clone();
        fewer.workloads = 2;
        assert!(!same_score(&a, &fewer));
        let mut renamed = a.clone();
        renamed.problems = [("b".to_string(), 0.5)].into_iter().collect();
        assert!(!same_score(&a, &renamed));
    }
}
