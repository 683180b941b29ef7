//! kg-score: the SOL score, its aggregation, and verifiable release bundles.
//!
//! - [`compute`]: per workload `S = 1 / (1 + (T_k - T_SOL) / (T_b - T_SOL))` from candidate and
//!   baseline traces (same device and timing method, else an error naming both) and a
//!   [`SolTable`]; mean per problem, then an equal-weight mean over problems. A workload that
//!   is not PASSED scores 0; `T_b <= T_SOL` is an error; `T_k < T_SOL` scores 0 and is flagged
//!   `faster_than_sol` (faster than light means the measurement or the kernel is wrong).
//! - [`bundle`]: the release bundle that binds corpus, traces, SOL manifests, tool version and
//!   device by SHA-256, and [`bundle::verify`], which re-hashes everything and recomputes the
//!   score; caller-written numbers are never accepted in place of the bound artifacts.
//! - [`port`]: the SOL ExecBench ROCm port's published bundle (`sol_execbench.release_bundle.v2`)
//!   and [`port::verify`], which checks every SHA-256/size binding down to the SOLAR artifacts,
//!   the corpus pins, denominators and timing protocol, fail-closed, and computes its score.
//!
//! Not for: running kernels or deriving T_SOL (kg-solar does that).

pub mod bundle;
pub mod port;

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use kg_contract::{Status, Trace};
use serde::{Deserialize, Serialize};

/// Version of the score report and bundle formats.
pub const SCHEMA_VERSION: u32 = 1;

/// The scoring policy, printed by `score status` and recorded in every report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// The per-workload formula.
    pub formula: String,
    /// How workload scores combine.
    pub aggregation: String,
    /// What each flag means.
    pub flags: IndexMap<String, String>,
    /// Conditions that make scoring fail.
    pub errors: Vec<String>,
}

/// The policy this version implements.
pub fn policy() -> Policy {
    let mut flags = IndexMap::new();
    flags.insert(
        "faster_than_sol".into(),
        "T_k < T_SOL: not credited (score 0); the measurement or the kernel is wrong".into(),
    );
    flags.insert(
        "not_passed".into(),
        "the candidate's status is not PASSED (or it has no trace): score 0".into(),
    );
    Policy {
        formula:
            "S = 1 / (1 + (T_k - T_SOL) / (T_b - T_SOL)); T_k = T_b gives 0.5, T_k = T_SOL gives 1"
                .into(),
        aggregation: "mean over a problem's workloads, then equal-weight mean over problems".into(),
        flags,
        errors: vec![
            "T_b <= T_SOL for any workload (the bound or the baseline is wrong)".into(),
            "candidate and baseline measured on different devices or with different timing methods"
                .into(),
            "a baseline workload that is not PASSED, or has no T_SOL".into(),
        ],
    }
}

/// T_SOL per (definition, workload uuid), in ms.
pub type SolTable = IndexMap<(String, String), f64>;

/// Errors of scoring and bundle verification.
#[derive(Debug, thiserror::Error)]
pub enum ScoreError {
    /// A contract file could not be read.
    #[error(transparent)]
    Contract(#[from] kg_contract::ContractError),
    /// A SOL analysis could not be read or verified.
    #[error(transparent)]
    Solar(#[from] kg_solar::SolarError),
    /// Reading a file or directory.
    #[error("failed to read `{path}`: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line of a SOL JSONL file is malformed.
    #[error(
        "`{path}` line {line}: {message}; expected {{\"definition\", \"workload\", \"t_sol_ms\"}}"
    )]
    SolLine {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The baseline is at or below the speed of light.
    #[error(
        "workload `{workload}` of `{definition}`: baseline T_b = {t_b_ms} ms <= T_SOL = {t_sol_ms} ms; the bound or the baseline is wrong"
    )]
    BaselineBelowSol {
        /// Definition.
        definition: String,
        /// Workload.
        workload: String,
        /// Baseline latency.
        t_b_ms: f64,
        /// Bound.
        t_sol_ms: f64,
    },
    /// Candidate and baseline come from different devices or timing methods.
    #[error(
        "candidate and baseline differ in {what}: candidate `{candidate}` (workload `{workload}`), baseline `{baseline}`; measure both the same way"
    )]
    Mismatch {
        /// `device` or `timing method`.
        what: &'static str,
        /// Candidate's value.
        candidate: String,
        /// Baseline's value.
        baseline: String,
        /// Workload where it was seen.
        workload: String,
    },
    /// A baseline trace measured on another device or by another timing method than the
    /// first baseline trace.
    #[error(
        "baseline for workload `{workload}` of `{definition}`: {what} `{value}` differs from other baseline traces (`{first}`)"
    )]
    BaselineMixed {
        /// Definition.
        definition: String,
        /// Workload.
        workload: String,
        /// `device` or `timing method`.
        what: &'static str,
        /// This trace's value.
        value: String,
        /// The first baseline trace's value.
        first: String,
    },
    /// A baseline workload cannot serve as T_b.
    #[error("baseline for workload `{workload}` of `{definition}`: {message}")]
    Baseline {
        /// Definition.
        definition: String,
        /// Workload.
        workload: String,
        /// What is wrong.
        message: String,
    },
    /// No T_SOL for a baseline workload.
    #[error(
        "no T_SOL for workload `{workload}` of `{definition}`; run `kg-bench solar analyze` for it"
    )]
    MissingSol {
        /// Definition.
        definition: String,
        /// Workload.
        workload: String,
    },
    /// Nothing to score.
    #[error("the baseline holds no traces")]
    Empty,
    /// A bundle artifact is missing, altered or inconsistent.
    #[error("bundle artifact `{artifact}`: {message}")]
    Bundle {
        /// The artifact (path relative to the bundle, or a field).
        artifact: String,
        /// What is wrong.
        message: String,
    },
}

impl ScoreError {
    /// Whether two traces that must share a timing method did not (between candidate and
    /// baseline, or within the baseline).
    pub fn is_timing_method_mismatch(&self) -> bool {
        matches!(
            self,
            ScoreError::Mismatch {
                what: "timing method",
                ..
            } | ScoreError::BaselineMixed {
                what: "timing method",
                ..
            }
        )
    }
}

/// Why a workload scored what it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Flag {
    /// T_k < T_SOL: not credited.
    FasterThanSol,
    /// The candidate did not pass (or has no trace).
    NotPassed,
}

/// One workload's score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkloadScore {
    /// Definition.
    pub definition: String,
    /// Workload uuid.
    pub workload: String,
    /// Candidate status (`MISSING` when it has no trace).
    pub status: String,
    /// Candidate latency (ms), when PASSED.
    pub t_k_ms: Option<f64>,
    /// Baseline latency (ms).
    pub t_b_ms: f64,
    /// Bound (ms).
    pub t_sol_ms: f64,
    /// The score in [0, 1].
    pub score: f64,
    /// Flags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<Flag>,
}

/// One problem's score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProblemScore {
    /// Definition.
    pub definition: String,
    /// Mean of its workload scores.
    pub score: f64,
    /// Workloads scored.
    pub workloads: usize,
    /// Of which PASSED.
    pub passed: usize,
    /// Of which flagged `faster_than_sol`.
    pub faster_than_sol: usize,
}

/// The score report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScoreReport {
    /// Report version.
    pub schema_version: u32,
    /// The policy applied.
    pub policy: Policy,
    /// Equal-weight mean over problems.
    pub overall: f64,
    /// Per problem, sorted by name.
    pub problems: Vec<ProblemScore>,
    /// Per workload.
    pub workloads: Vec<WorkloadScore>,
    /// Device both sides ran on.
    pub device: String,
    /// Timing method both sides used.
    pub timing_method: String,
}

/// The per-workload formula (no flags; callers apply the policy).
pub fn sol_score(t_k: f64, t_b: f64, t_sol: f64) -> f64 {
    1.0 / (1.0 + (t_k - t_sol) / (t_b - t_sol))
}

/// Device identity of a trace: `kind:name` from the device record, else the hardware string.
pub fn device_key(t: &Trace) -> String {
    match t.evaluation.as_ref() {
        Some(e) => match &e.environment.device {
            Some(d) => format!("{}:{}", d.kind, d.name),
            None => e.environment.hardware.clone(),
        },
        None => String::new(),
    }
}

/// Timing method of a trace (`unknown` when the trace does not say).
pub fn method_key(t: &Trace) -> String {
    t.evaluation
        .as_ref()
        .and_then(|e| e.performance.as_ref())
        .and_then(|p| p.timing_method)
        .and_then(|m| serde_json::to_value(m).ok())
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

fn passed_latency(t: &Trace) -> Option<f64> {
    let e = t.evaluation.as_ref()?;
    if e.status != Status::Passed {
        return None;
    }
    e.performance.as_ref().map(|p| p.latency_ms)
}

/// Scores candidate traces against baseline traces and bounds.
pub fn compute(
    candidate: &[Trace],
    baseline: &[Trace],
    sol: &SolTable,
) -> Result<ScoreReport, ScoreError> {
    if baseline.is_empty() {
        return Err(ScoreError::Empty);
    }
    let mut cand: IndexMap<(String, String), &Trace> = IndexMap::new();
    for t in candidate {
        cand.insert((t.definition.clone(), t.workload.uuid.clone()), t);
    }
    let (device, method) = (device_key(&baseline[0]), method_key(&baseline[0]));
    let mut workloads = Vec::new();
    for b in baseline {
        let key = (b.definition.clone(), b.workload.uuid.clone());
        let bl = |message: String| ScoreError::Baseline {
            definition: key.0.clone(),
            workload: key.1.clone(),
            message,
        };
        let t_b = passed_latency(b).ok_or_else(|| {
            bl(format!(
                "status {} has no latency; the baseline must pass",
                b.evaluation
                    .as_ref()
                    .map(|e| e.status.as_str())
                    .unwrap_or("none")
            ))
        })?;
        if !(t_b.is_finite() && t_b > 0.0) {
            return Err(bl(format!("latency {t_b} ms is not a positive number")));
        }
        for (what, mine, first) in [
            ("device", device_key(b), &device),
            ("timing method", method_key(b), &method),
        ] {
            if &mine != first {
                return Err(ScoreError::BaselineMixed {
                    definition: key.0.clone(),
                    workload: key.1.clone(),
                    what,
                    value: mine,
                    first: first.clone(),
                });
            }
        }
        let t_sol = *sol.get(&key).ok_or_else(|| ScoreError::MissingSol {
            definition: key.0.clone(),
            workload: key.1.clone(),
        })?;
        if t_b <= t_sol {
            return Err(ScoreError::BaselineBelowSol {
                definition: key.0.clone(),
                workload: key.1.clone(),
                t_b_ms: t_b,
                t_sol_ms: t_sol,
            });
        }
        let c = cand.get(&key);
        let status = c
            .and_then(|c| c.evaluation.as_ref())
            .map(|e| e.status.as_str().to_string())
            .unwrap_or_else(|| "MISSING".into());
        let t_k = c.and_then(|c| passed_latency(c));
        let (score, flags) = match (c, t_k) {
            (Some(c), Some(t_k)) => {
                for (what, theirs, ours) in [
                    ("device", device_key(c), &device),
                    ("timing method", method_key(c), &method),
                ] {
                    if &theirs != ours {
                        return Err(ScoreError::Mismatch {
                            what,
                            candidate: theirs,
                            baseline: ours.clone(),
                            workload: key.1.clone(),
                        });
                    }
                }
                if t_k < t_sol {
                    (0.0, vec![Flag::FasterThanSol])
                } else {
                    (sol_score(t_k, t_b, t_sol), vec![])
                }
            }
            _ => (0.0, vec![Flag::NotPassed]),
        };
        workloads.push(WorkloadScore {
            definition: key.0,
            workload: key.1,
            status,
            t_k_ms: t_k,
            t_b_ms: t_b,
            t_sol_ms: t_sol,
            score,
            flags,
        });
    }
    let mut by_problem: IndexMap<String, Vec<&WorkloadScore>> = IndexMap::new();
    for w in &workloads {
        by_problem.entry(w.definition.clone()).or_default().push(w);
    }
    by_problem.sort_keys();
    let problems: Vec<ProblemScore> = by_problem
        .iter()
        .map(|(d, ws)| ProblemScore {
            definition: d.clone(),
            score: ws.iter().map(|w| w.score).sum::<f64>() / ws.len() as f64,
            workloads: ws.len(),
            passed: ws.iter().filter(|w| w.t_k_ms.is_some()).count(),
            faster_than_sol: ws
                .iter()
                .filter(|w| w.flags.contains(&Flag::FasterThanSol))
                .count(),
        })
        .collect();
    let overall = problems.iter().map(|p| p.score).sum::<f64>() / problems.len() as f64;
    Ok(ScoreReport {
        schema_version: SCHEMA_VERSION,
        policy: policy(),
        overall,
        problems,
        workloads,
        device,
        timing_method: method,
    })
}

fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, ScoreError> {
    let rd = std::fs::read_dir(dir).map_err(|source| ScoreError::Io {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut out = Vec::new();
    for e in rd {
        let e = e.map_err(|source| ScoreError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        out.push(e.path());
    }
    out.sort();
    Ok(out)
}

/// Trace files under `path`: the file itself, or every `*.jsonl` below a directory.
pub fn trace_files(path: &Path) -> Result<Vec<PathBuf>, ScoreError> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut out = Vec::new();
    for p in read_dir_sorted(path)? {
        if p.is_dir() {
            out.extend(trace_files(&p)?);
        } else if p.extension().is_some_and(|e| e == "jsonl") {
            out.push(p);
        }
    }
    Ok(out)
}

/// Loads every trace from a JSONL file or a directory of them.
pub fn load_traces(path: &Path) -> Result<Vec<Trace>, ScoreError> {
    let mut all = Vec::new();
    for f in trace_files(path)? {
        for (_, t, _) in kg_contract::io::load_jsonl::<Trace>(&f)? {
            all.push(t);
        }
    }
    Ok(all)
}

/// Analysis directories (holding `manifest.yaml`) below `root`.
pub fn analysis_dirs(root: &Path) -> Result<Vec<PathBuf>, ScoreError> {
    let mut out = Vec::new();
    if root.join(kg_solar::analysis::MANIFEST_FILE).is_file() {
        out.push(root.to_path_buf());
        return Ok(out);
    }
    for p in read_dir_sorted(root)? {
        if p.is_dir() {
            out.extend(analysis_dirs(&p)?);
        }
    }
    Ok(out)
}

/// Loads T_SOL from a directory of analyses (each re-hashed against its manifest) or from a
/// JSONL file of `{"definition", "workload", "t_sol_ms"}` lines.
pub fn load_sol(path: &Path) -> Result<SolTable, ScoreError> {
    let mut table = SolTable::new();
    if path.is_dir() {
        for d in analysis_dirs(path)? {
            let (_, rec) = kg_solar::analysis::read_verified(&d)?;
            table.insert((rec.definition, rec.workload), rec.t_sol_ms);
        }
        return Ok(table);
    }
    #[derive(Deserialize)]
    struct Line {
        definition: String,
        workload: String,
        t_sol_ms: f64,
    }
    for (line, l, _) in kg_contract::io::load_jsonl::<Line>(path)? {
        if !(l.t_sol_ms.is_finite() && l.t_sol_ms > 0.0) {
            return Err(ScoreError::SolLine {
                path: path.to_path_buf(),
                line,
                message: format!("t_sol_ms is {}; expected a positive number", l.t_sol_ms),
            });
        }
        table.insert((l.definition, l.workload), l.t_sol_ms);
    }
    Ok(table)
}
