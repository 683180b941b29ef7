//! Corpus-level work: discovering problems, choosing solutions, `run` bookkeeping (problem
//! keys, trace paths, `--filter`, resume and `--rerun-failed`, CPU time estimates, summary),
//! and `dataset validate`'s duplicate-name check.
//!
//! A problem is keyed by its directory relative to the corpus ([`problem_key`]), never by
//! its definition name alone: two problems may share a name, and keying by name once made a
//! second one read the first one's traces as its own.

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
    /// Each problem's bundled solutions (the literal `bundled`): `solutions/*.json`
    /// (kernelgate's layout) and `solution.json`/`solution_*.json` beside `definition.json`
    /// (SOL-ExecBench's `examples/`).
    Bundled,
    /// `DIR/<problem key>/*.json`, else `DIR/<definition name>/*.json`.
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

/// Where a problem's solutions were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SolutionLayout {
    /// The problem's own reference.
    Reference,
    /// `solutions/*.json` in the problem directory (kernelgate's layout).
    SolutionsDir,
    /// `solution.json` / `solution_*.json` beside `definition.json` (SOL-ExecBench's layout).
    BesideDefinition,
    /// `--solutions DIR`: `DIR/<problem key>/*.json` or `DIR/<definition name>/*.json`.
    SourceDir,
}

impl std::fmt::Display for SolutionLayout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SolutionLayout::Reference => "the problem's reference",
            SolutionLayout::SolutionsDir => "`solutions/*.json`",
            SolutionLayout::BesideDefinition => {
                "`solution_*.json` beside `definition.json` (SOL-ExecBench layout)"
            }
            SolutionLayout::SourceDir => "`--solutions DIR`",
        })
    }
}

/// One solution to run, and the file it came from (`None`: the reference).
#[derive(Debug, Clone)]
pub struct FoundSolution {
    /// The solution.
    pub solution: Solution,
    /// Its file.
    pub file: Option<PathBuf>,
}

/// A problem's solutions from one source, and where they were looked for.
#[derive(Debug, Clone)]
pub struct FoundSolutions {
    /// The solutions, in file order (sorted by path).
    pub solutions: Vec<FoundSolution>,
    /// The layouts that held at least one solution.
    pub layouts: Vec<SolutionLayout>,
    /// What was searched, as patterns (for "no solutions" messages).
    pub searched: Vec<String>,
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
    /// Two evaluations would write one trace file.
    #[error(
        "`{first}` and `{second}` would both write `{path}` (same problem key and solution name); rename one solution"
    )]
    TracePathClash {
        /// The trace file.
        path: PathBuf,
        /// The first problem/solution (problem key / solution file).
        first: String,
        /// The second.
        second: String,
    },
    /// A `--filter` expression did not parse.
    #[error("failed to parse --filter `{expr}`: {why}")]
    Filter {
        /// The expression.
        expr: String,
        /// What is wrong.
        why: String,
    },
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

/// A problem's key in a run: its directory relative to the corpus root, `/`-separated
/// (`triton/rmsnorm`); the directory's own name when the corpus root is the problem. Keys,
/// not definition names, name trace files and summary entries: two problems may share a
/// definition name (SOL-ExecBench's `examples/` has two such pairs).
pub fn problem_key(root: &Path, dir: &Path) -> String {
    let rel: Vec<String> = dir
        .strip_prefix(root)
        .unwrap_or(dir)
        .components()
        .filter_map(|c| match c {
            std::path::Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            _ => None,
        })
        .collect();
    if !rel.is_empty() {
        return rel.join("/");
    }
    // The root itself: its name, canonicalised so `.` still has one.
    std::fs::canonicalize(dir)
        .ok()
        .as_deref()
        .unwrap_or(dir)
        .file_name()
        .map_or_else(
            || "problem".to_string(),
            |n| n.to_string_lossy().into_owned(),
        )
}

/// The solutions to run for a problem (see [`find_solutions`]; the problem key is its
/// directory's name).
pub fn solutions_for(
    problem: &Problem,
    source: &SolutionSource,
) -> Result<Vec<Solution>, CorpusError> {
    let key = problem
        .dir
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    Ok(find_solutions(problem, &key, source)?
        .solutions
        .into_iter()
        .map(|f| f.solution)
        .collect())
}

/// `*.json` files of `dir` whose name `keep` accepts, sorted; none when `dir` does not exist.
fn json_files(dir: &Path, keep: impl Fn(&str) -> bool) -> Result<Vec<PathBuf>, CorpusError> {
    let mut files: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.ends_with(".json") && keep(n))
            })
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(source) => {
            return Err(CorpusError::Io {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    files.sort();
    Ok(files)
}

/// The solutions to run for the problem keyed `key`, with the layouts they came from.
/// `bundled` takes both layouts: `solutions/*.json` and `solution.json`/`solution_*.json`
/// beside `definition.json`.
pub fn find_solutions(
    problem: &Problem,
    key: &str,
    source: &SolutionSource,
) -> Result<FoundSolutions, CorpusError> {
    let mut groups: Vec<(SolutionLayout, Vec<PathBuf>)> = Vec::new();
    let mut searched = Vec::new();
    match source {
        SolutionSource::Reference => {
            return Ok(FoundSolutions {
                solutions: vec![FoundSolution {
                    solution: reference_solution(problem),
                    file: None,
                }],
                layouts: vec![SolutionLayout::Reference],
                searched: vec!["the problem's reference".into()],
            });
        }
        SolutionSource::Bundled => {
            let sub = problem.dir.join("solutions");
            searched.push(format!("`{}/*.json`", sub.display()));
            groups.push((SolutionLayout::SolutionsDir, json_files(&sub, |_| true)?));
            searched.push(format!(
                "`{}/solution_*.json` beside `definition.json`",
                problem.dir.display()
            ));
            let beside = json_files(&problem.dir, |n| {
                n == "solution.json" || n.starts_with("solution_")
            })?;
            groups.push((SolutionLayout::BesideDefinition, beside));
        }
        SolutionSource::Dir(d) => {
            // The key first: two problems of one definition name can get their own.
            let by_key = d.join(key);
            let dir = if by_key.is_dir() {
                by_key
            } else {
                d.join(&problem.definition.name)
            };
            searched.push(format!("`{}/*.json`", dir.display()));
            groups.push((SolutionLayout::SourceDir, json_files(&dir, |_| true)?));
        }
    }
    let mut out = FoundSolutions {
        solutions: Vec::new(),
        layouts: Vec::new(),
        searched,
    };
    for (layout, files) in groups {
        if files.is_empty() {
            continue;
        }
        out.layouts.push(layout);
        for f in files {
            let (s, _) = load_solution(&f)?;
            out.solutions.push(FoundSolution {
                solution: s,
                file: Some(f),
            });
        }
    }
    Ok(out)
}

/// Definition names that more than one problem directory defines, each with those
/// directories, and whether their definitions are identical. `problems` pairs a directory
/// with its definition.
pub fn duplicate_definitions<'a>(
    problems: impl IntoIterator<Item = (&'a Path, &'a kg_contract::Definition)>,
) -> Vec<DuplicateName> {
    let mut by_name: IndexMap<&str, Vec<(&Path, &kg_contract::Definition)>> = IndexMap::new();
    for (dir, def) in problems {
        by_name
            .entry(def.name.as_str())
            .or_default()
            .push((dir, def));
    }
    by_name
        .into_iter()
        .filter(|(_, v)| v.len() > 1)
        .map(|(name, v)| DuplicateName {
            name: name.to_string(),
            identical: v.iter().all(|(_, d)| *d == v[0].1),
            dirs: v.into_iter().map(|(p, _)| p.to_path_buf()).collect(),
        })
        .collect()
}

/// Total input elements of a workload (for picking the smallest).
pub fn input_elements(w: &LoadedWorkload) -> i64 {
    w.resolved
        .inputs
        .values()
        .map(|s| s.as_ref().map_or(1, |d| d.iter().product::<i64>()))
        .sum()
}

/// Replaces what is not `[A-Za-z0-9._-]` with `_` (`..` too, so no component climbs out).
fn safe_component(s: &str) -> String {
    let c: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if c.chars().all(|ch| ch == '.') {
        c.replace('.', "_")
    } else {
        c
    }
}

/// `OUTDIR/<problem key>/<solution>.jsonl`: each `/`-separated part of the key ([`problem_key`])
/// becomes a directory.
pub fn trace_path(out_dir: &Path, problem_key: &str, solution: &str) -> PathBuf {
    let mut p = out_dir.to_path_buf();
    for part in problem_key.split('/').filter(|s| !s.is_empty()) {
        p.push(safe_component(part));
    }
    p.join(format!("{}.jsonl", safe_component(solution)))
}

/// Refuses two pairs that would write one trace file (two solutions of one problem with
/// one name, or names that differ only in characters a file name cannot hold). `pairs`:
/// (what to call it in the message, its trace file).
pub fn check_trace_paths<'a>(
    pairs: impl IntoIterator<Item = (String, &'a Path)>,
) -> Result<(), CorpusError> {
    let mut seen: IndexMap<&Path, String> = IndexMap::new();
    for (what, path) in pairs {
        if let Some(first) = seen.get(path) {
            return Err(CorpusError::TracePathClash {
                path: path.to_path_buf(),
                first: first.clone(),
                second: what,
            });
        }
        seen.insert(path, what);
    }
    Ok(())
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
    prior_state(path, expected, problem_tree_sha256, solution_sha256) != PriorState::Unfinished
}

/// What an earlier run left for one problem and solution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriorState {
    /// No trace file, or one that is incomplete, does not verify, or was written for another
    /// version of the problem or solution ([`is_finished`]).
    Unfinished,
    /// Complete, and every expected workload's trace PASSED.
    Passed,
    /// Complete, and this many expected workloads' traces did not pass.
    NotPassed(usize),
}

/// The [`PriorState`] of `path` for these workloads and hashes.
pub fn prior_state(
    path: &Path,
    expected: &[&LoadedWorkload],
    problem_tree_sha256: &str,
    solution_sha256: &str,
) -> PriorState {
    let Ok(report) = kg_contract::chain::verify_file(path, &Default::default()) else {
        return PriorState::Unfinished;
    };
    if !report.ok() {
        return PriorState::Unfinished;
    }
    let Ok(rows) = kg_contract::io::load_jsonl::<Trace>(path) else {
        return PriorState::Unfinished;
    };
    let current = rows.iter().all(|(_, t, _)| {
        t.kernelgate_chain.as_ref().is_some_and(|c| {
            c.manifest.problem_tree_sha256 == problem_tree_sha256
                && c.manifest.solution_sha256 == solution_sha256
        })
    });
    if !current {
        return PriorState::Unfinished;
    }
    let mut not_passed = 0;
    for w in expected {
        let status = rows.iter().find_map(|(_, t, _)| {
            (t.workload.uuid == w.workload.uuid)
                .then_some(t.evaluation.as_ref().map(|e| e.status))
                .flatten()
        });
        match status {
            None => return PriorState::Unfinished,
            Some(Status::Passed) => {}
            Some(_) => not_passed += 1,
        }
    }
    if not_passed == 0 {
        PriorState::Passed
    } else {
        PriorState::NotPassed(not_passed)
    }
}

/// Which pairs `run` evaluates again when their trace files are already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Resume {
    /// Skip every pair whose traces are finished ([`is_finished`]), whatever their status.
    #[default]
    SkipFinished,
    /// Evaluate every pair again (`--rerun`).
    All,
    /// Skip only pairs whose finished traces all PASSED (`--rerun-failed`): a pair with a
    /// trace that did not pass, or without finished traces, is evaluated (all its selected
    /// workloads, as one new trace file).
    Failed,
}

impl Resume {
    /// Whether a pair in `state` is evaluated.
    pub fn evaluates(self, state: PriorState) -> bool {
        match (self, state) {
            (Resume::All, _) | (_, PriorState::Unfinished) => true,
            (Resume::SkipFinished, _) => false,
            (Resume::Failed, PriorState::Passed) => false,
            (Resume::Failed, PriorState::NotPassed(_)) => true,
        }
    }
}

mod select;
mod summary;
pub use select::*;
pub use summary::*;

#[cfg(test)]
mod tests;
