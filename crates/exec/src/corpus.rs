//! Corpus-level work: discovering problems, choosing solutions, `run` bookkeeping (skip
//! finished problems, summary), and `dataset validate`.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use kg_contract::{LoadedWorkload, Problem, Solution, Status, Trace, load_solution};
use serde::{Deserialize, Serialize};

use crate::engine::reference_solution;

/// Where `kg-bench run` takes its solutions from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SolutionSource {
    /// Each problem's own reference (the default).
    Reference,
    /// Each problem's `solutions/*.json` (the literal `bundled`).
    Bundled,
    /// `DIR/<problem name>/*.json`.
    Dir(PathBuf),
}

impl SolutionSource {
    /// Parses `--solutions`: `reference`, `bundled`, or a directory.
    pub fn parse(s: &str) -> SolutionSource {
        match s {
            "reference" => SolutionSource::Reference,
            "bundled" => SolutionSource::Bundled,
            d => SolutionSource::Dir(PathBuf::from(d)),
        }
    }
}

/// Errors of corpus handling.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// The corpus directory could not be read.
    #[error("failed to read corpus directory `{path}`: {source}")]
    Io {
        /// Directory.
        path: PathBuf,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// No problems found.
    #[error(
        "`{0}` holds no problems (directories with `definition.json`); expected e.g. `problems/core`"
    )]
    Empty(PathBuf),
    /// A solution file failed to load.
    #[error(transparent)]
    Contract(#[from] kg_contract::ContractError),
}

/// Problem directories under `root` (itself, or any depth below), sorted.
pub fn discover(root: &Path) -> Result<Vec<PathBuf>, CorpusError> {
    let mut out = Vec::new();
    fn walk(d: &Path, out: &mut Vec<PathBuf>, depth: usize) -> Result<(), CorpusError> {
        if d.join(kg_contract::problem::DEFINITION_FILE).is_file() {
            out.push(d.to_path_buf());
            return Ok(());
        }
        if depth > 4 {
            return Ok(());
        }
        let rd = std::fs::read_dir(d).map_err(|source| CorpusError::Io {
            path: d.to_path_buf(),
            source,
        })?;
        let mut dirs: Vec<PathBuf> = rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .filter(|p| {
                !p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.'))
            })
            .collect();
        dirs.sort();
        for sub in dirs {
            walk(&sub, out, depth + 1)?;
        }
        Ok(())
    }
    walk(root, &mut out, 0)?;
    if out.is_empty() {
        return Err(CorpusError::Empty(root.to_path_buf()));
    }
    Ok(out)
}

/// The solutions to run for a problem.
pub fn solutions_for(
    problem: &Problem,
    source: &SolutionSource,
) -> Result<Vec<Solution>, CorpusError> {
    let dir = match source {
        SolutionSource::Reference => return Ok(vec![reference_solution(problem)]),
        SolutionSource::Bundled => problem.dir.join("solutions"),
        SolutionSource::Dir(d) => d.join(&problem.definition.name),
    };
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => return Err(CorpusError::Io { path: dir, source }),
    };
    files.sort();
    let mut out = Vec::new();
    for f in files {
        let (s, _) = load_solution(&f)?;
        out.push(s);
    }
    Ok(out)
}

/// The workloads to evaluate: all, or those named, capped at `max`.
pub fn select_workloads<'a>(
    problem: &'a Problem,
    uuids: Option<&[String]>,
    max: Option<usize>,
) -> Vec<&'a LoadedWorkload> {
    let mut v: Vec<&LoadedWorkload> = problem
        .workloads
        .iter()
        .filter(|w| uuids.is_none_or(|u| u.contains(&w.workload.uuid)))
        .collect();
    if let Some(m) = max {
        v.truncate(m);
    }
    v
}

/// Total input elements of a workload (for picking the smallest).
pub fn input_elements(w: &LoadedWorkload) -> i64 {
    w.resolved
        .inputs
        .values()
        .map(|s| s.as_ref().map_or(1, |d| d.iter().product::<i64>()))
        .sum()
}

/// `OUTDIR/<problem>/<solution>.jsonl`.
pub fn trace_path(out_dir: &Path, problem: &str, solution: &str) -> PathBuf {
    let safe = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    out_dir
        .join(safe(problem))
        .join(format!("{}.jsonl", safe(solution)))
}

/// Whether a trace file already holds one complete trace for each expected workload, written
/// for this problem and solution as they are now: the file's chain verifies
/// ([`kg_contract::chain`]) and every line's manifest records `problem_tree_sha256` and
/// `solution_sha256`. Traces of an edited problem or solution, unchained (older) traces and
/// traces that do not verify are not finished: they are evaluated again.
pub fn is_finished(
    path: &Path,
    expected: &[&LoadedWorkload],
    problem_tree_sha256: &str,
    solution_sha256: &str,
) -> bool {
    let Ok(report) = kg_contract::chain::verify_file(path, &Default::default()) else {
        return false;
    };
    if !report.ok() {
        return false;
    }
    let Ok(rows) = kg_contract::io::load_jsonl::<Trace>(path) else {
        return false;
    };
    let current = rows.iter().all(|(_, t, _)| {
        t.kernelgate_chain.as_ref().is_some_and(|c| {
            c.manifest.problem_tree_sha256 == problem_tree_sha256
                && c.manifest.solution_sha256 == solution_sha256
        })
    });
    current
        && expected.iter().all(|w| {
            rows.iter()
                .any(|(_, t, _)| t.workload.uuid == w.workload.uuid && t.evaluation.is_some())
        })
}

/// `summary.json` of a run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunSummary {
    /// Format version (2: `chain` added; 1 still reads).
    pub schema_version: u32,
    /// The corpus evaluated.
    pub corpus: String,
    /// Device the traces came from (as chosen).
    pub device: String,
    /// Totals per status.
    pub totals: IndexMap<String, usize>,
    /// Per problem, per solution, counts per status.
    pub problems: IndexMap<String, IndexMap<String, IndexMap<String, usize>>>,
    /// Problems that could not be loaded, with the reason.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub errors: IndexMap<String, String>,
    /// Every trace file's chain head, sealed (signed with `--sign-key`): what
    /// `kg-bench verify --summary` checks the files against (schema version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<kg_contract::chain::RunChain>,
}

impl RunSummary {
    /// Whether every workload of every problem passed and nothing failed to load.
    pub fn all_passed(&self) -> bool {
        self.errors.is_empty()
            && self
                .totals
                .iter()
                .all(|(s, n)| *n == 0 || s == Status::Passed.as_str())
            && self.totals.values().sum::<usize>() > 0
    }
}

/// Builds the summary from the trace files under `out_dir` that belong to this run.
pub fn summarize(
    corpus: &Path,
    device: &str,
    files: &[(String, String, PathBuf)],
    errors: IndexMap<String, String>,
) -> RunSummary {
    let mut totals: IndexMap<String, usize> = Status::ALL
        .iter()
        .map(|s| (s.as_str().to_string(), 0))
        .collect();
    let mut problems: IndexMap<String, IndexMap<String, IndexMap<String, usize>>> = IndexMap::new();
    for (problem, solution, path) in files {
        let rows = kg_contract::io::load_jsonl::<Trace>(path).unwrap_or_default();
        let counts = problems
            .entry(problem.clone())
            .or_default()
            .entry(solution.clone())
            .or_default();
        for (_, t, _) in rows {
            if let Some(e) = t.evaluation {
                *counts.entry(e.status.as_str().to_string()).or_insert(0) += 1;
                *totals.entry(e.status.as_str().to_string()).or_insert(0) += 1;
            }
        }
    }
    RunSummary {
        schema_version: 2,
        corpus: corpus.display().to_string(),
        device: device.to_string(),
        totals,
        problems,
        errors,
        chain: None,
    }
}
