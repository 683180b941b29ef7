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

/// A definition name that several problem directories define.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DuplicateName {
    /// The definition name.
    pub name: String,
    /// The directories defining it, in corpus order.
    pub dirs: Vec<PathBuf>,
    /// Whether every one of their definitions is the same (axes, tensors, reference).
    pub identical: bool,
}

/// What a `--filter` term looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FilterField {
    /// The problem key, the definition name or the solution name.
    Any,
    Problem,
    Definition,
    Solution,
    Language,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FilterTerm {
    negate: bool,
    field: FilterField,
    pattern: String,
}

/// One `--filter` expression: terms joined by `&`, all of which must match. A term is
/// `[!][FIELD:]PATTERN`; FIELD is `problem` (the problem key), `definition`, `solution` or
/// `language`; without a field the pattern may match the problem key, the definition name or
/// the solution name. A pattern with `*` or `?` is a glob over the whole value; without, a
/// substring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    expr: String,
    terms: Vec<FilterTerm>,
}

/// What a filter is matched against: one (problem, solution) pair.
#[derive(Debug, Clone, Copy)]
pub struct PairRef<'a> {
    /// The problem key ([`problem_key`]).
    pub key: &'a str,
    /// The definition name.
    pub definition: &'a str,
    /// The solution.
    pub solution: &'a Solution,
}

impl std::str::FromStr for Filter {
    type Err = CorpusError;
    fn from_str(expr: &str) -> Result<Filter, CorpusError> {
        let err = |why: String| CorpusError::Filter {
            expr: expr.to_string(),
            why,
        };
        let mut terms = Vec::new();
        for raw in expr.split('&') {
            let mut t = raw.trim();
            let negate = t.starts_with('!');
            if negate {
                t = t[1..].trim_start();
            }
            let (field, pattern) = match t.split_once(':') {
                Some((f, p)) => {
                    let field = match f.trim() {
                        "problem" => FilterField::Problem,
                        "definition" => FilterField::Definition,
                        "solution" => FilterField::Solution,
                        "language" => FilterField::Language,
                        other => {
                            return Err(err(format!(
                                "unknown field `{other}` (use problem, definition, solution or language)"
                            )));
                        }
                    };
                    (field, p.trim())
                }
                None => (FilterField::Any, t),
            };
            if pattern.is_empty() {
                return Err(err(format!("empty pattern in term `{}`", raw.trim())));
            }
            terms.push(FilterTerm {
                negate,
                field,
                pattern: pattern.to_string(),
            });
        }
        Ok(Filter {
            expr: expr.to_string(),
            terms,
        })
    }
}

impl Filter {
    /// The expression as given.
    pub fn as_str(&self) -> &str {
        &self.expr
    }

    /// Whether every term matches `pair`.
    pub fn matches(&self, pair: &PairRef<'_>) -> bool {
        self.terms.iter().all(|t| {
            let hit = |v: &str| pattern_matches(&t.pattern, v);
            let m = match t.field {
                FilterField::Any => {
                    hit(pair.key) || hit(pair.definition) || hit(&pair.solution.name)
                }
                FilterField::Problem => hit(pair.key),
                FilterField::Definition => hit(pair.definition),
                FilterField::Solution => hit(&pair.solution.name),
                FilterField::Language => pair.solution.spec.languages.iter().any(|l| hit(l)),
            };
            m != t.negate
        })
    }
}

/// Whether any of `filters` matches `pair` (no filters: every pair).
pub fn selected(filters: &[Filter], pair: &PairRef<'_>) -> bool {
    filters.is_empty() || filters.iter().any(|f| f.matches(pair))
}

/// A glob (`*`, `?`) over the whole of `value`, or, without wildcards, a substring of it.
fn pattern_matches(pattern: &str, value: &str) -> bool {
    if !pattern.contains(['*', '?']) {
        return value.contains(pattern);
    }
    let p: Vec<char> = pattern.chars().collect();
    let v: Vec<char> = value.chars().collect();
    // Iterative glob with backtracking to the last `*`.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < v.len() {
        if i < p.len() && (p[i] == '?' || p[i] == v[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
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

/// Rough per-element costs of one call on the CPU, measured on kernelgate's dev host (x86-64,
/// torch 2.11, one torch thread per worker) with SOL-ExecBench's examples: the Triton
/// interpreter ran their RMSNorm kernels at 330–540 ns per input element per call, eager
/// PyTorch 0.7–2.5 ns; drawing and digesting one input set took about 15 ns per element.
const CPU_TRITON_INTERPRETER_NS: f64 = 400.0;
const CPU_TORCH_NS: f64 = 2.0;
const CPU_INPUT_SET_NS: f64 = 15.0;
/// Harness time per workload beyond the calls (messages, files, process bookkeeping).
const CPU_WORKLOAD_FIXED_S: f64 = 1.0;
/// Starting a candidate process and importing torch and the solution.
pub const CPU_PAIR_FIXED_S: f64 = 3.0;
/// Each side's warm-up and timing budget on the CPU (a quarter of 0.5 s, then 0.5 s).
const CPU_TIMING_BUDGET_S: f64 = 0.625;

/// A rough estimate, in seconds, of evaluating `sol` on workload `w` on the CPU with
/// `rounds` correctness rounds: each side's rounds and at least 4 warm-up/timed calls (or the
/// timing budget), the input sets drawn, and a fixed harness cost; a Triton solution is
/// costed as interpreted. Accurate to a factor of about 2; for warning before long runs and
/// for an ETA, never a measurement.
pub fn estimate_cpu_s(w: &LoadedWorkload, sol: &Solution, rounds: u32) -> f64 {
    let e = input_elements(w).max(1) as f64;
    let interpreted = is_triton(sol);
    let per_call = |ns: f64| e * ns * 1e-9;
    let side = |t: f64| f64::from(rounds) * t + (4.0 * t).max(CPU_TIMING_BUDGET_S);
    let candidate = per_call(if interpreted {
        CPU_TRITON_INTERPRETER_NS
    } else {
        CPU_TORCH_NS
    });
    let reference = per_call(CPU_TORCH_NS);
    // Each round and at least 3 timed sets are drawn on both sides.
    let sets = 2.0 * (f64::from(rounds) + 3.0) * per_call(CPU_INPUT_SET_NS);
    CPU_WORKLOAD_FIXED_S + side(candidate) + side(reference) + sets
}

/// Whether `sol` declares Triton (on the CPU it runs through the Triton interpreter).
pub fn is_triton(sol: &Solution) -> bool {
    sol.spec
        .languages
        .iter()
        .any(|l| l.eq_ignore_ascii_case("triton"))
}

/// Per-workload CPU estimates ([`estimate_cpu_s`]) of `sol` on `workloads`, keyed by uuid.
pub fn cpu_estimates(
    workloads: &[&LoadedWorkload],
    sol: &Solution,
    rounds: u32,
) -> IndexMap<String, f64> {
    workloads
        .iter()
        .map(|w| (w.workload.uuid.clone(), estimate_cpu_s(w, sol, rounds)))
        .collect()
}

/// A CPU run's estimate before it starts, for warning about long runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CpuEstimate {
    /// Estimated seconds for everything about to run.
    pub estimated_s: f64,
    /// Estimated seconds with `--max-workloads 1 --rounds 2`.
    pub short_s: f64,
    /// Whether a Triton solution is among them (interpreted on the CPU).
    pub interpreted: bool,
}

/// How many of the selected workloads a speed-of-light floor bounds, when not all of them
/// (a wrong file would otherwise check nothing, silently).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SolCoverage {
    /// Where the bounds came from ([`crate::SolFloor::source`]).
    pub source: String,
    /// Selected workloads with a bound.
    pub bounded: usize,
    /// Selected workloads.
    pub total: usize,
}

/// The [`SolCoverage`] of `floor` over `selected` (definition name, workload uuid) pairs;
/// `None` when it bounds every one.
pub fn sol_coverage<'a>(
    floor: &crate::SolFloor,
    selected: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<SolCoverage> {
    let (mut total, mut bounded) = (0, 0);
    for (d, u) in selected {
        total += 1;
        if floor.t_sol_ms.contains_key(&(d.to_string(), u.to_string())) {
            bounded += 1;
        }
    }
    (bounded < total).then(|| SolCoverage {
        source: floor.source.clone(),
        bounded,
        total,
    })
}

/// One trace file of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceFile {
    /// The problem key ([`problem_key`]).
    pub key: String,
    /// The solution name.
    pub solution: String,
    /// The file.
    pub path: PathBuf,
}

/// What `summary.json` records about one problem besides its counts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProblemInfo {
    /// Its definition name (several problems may share one).
    pub definition: String,
    /// The problem directory.
    pub dir: String,
    /// Where its solutions were found.
    pub solutions_from: Vec<SolutionLayout>,
}

/// `summary.json` of a run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunSummary {
    /// Format version (3: problems keyed by path, `problem_info`, `refused`, `filters`;
    /// 2: `chain` added; 1 and 2 still read).
    pub schema_version: u32,
    /// The corpus evaluated.
    pub corpus: String,
    /// Device the traces came from (as chosen).
    pub device: String,
    /// Totals per status, over every trace file of the run, each counted once.
    pub totals: IndexMap<String, usize>,
    /// Per problem key, per solution, counts per status.
    pub problems: IndexMap<String, IndexMap<String, IndexMap<String, usize>>>,
    /// Per problem key: definition name, directory, where its solutions came from.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub problem_info: IndexMap<String, ProblemInfo>,
    /// Problems that could not be loaded (by key), with the reason.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub errors: IndexMap<String, String>,
    /// Pairs refused before anything ran (language unsupported, or its toolchain missing on
    /// this device): problem key → solution → reason. Not evaluated, not in `totals`.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub refused: IndexMap<String, IndexMap<String, String>>,
    /// The `--filter` expressions that selected the pairs (empty: all).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filters: Vec<String>,
    /// Every trace file's chain head, sealed (signed with `--sign-key`): what
    /// `kg-bench verify --summary` checks the files against (schema version 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<kg_contract::chain::RunChain>,
}

impl RunSummary {
    /// Whether every evaluated workload passed, something was evaluated, and nothing failed
    /// to load. Refused pairs do not count either way.
    pub fn all_passed(&self) -> bool {
        self.errors.is_empty()
            && self
                .totals
                .iter()
                .all(|(s, n)| *n == 0 || s == Status::Passed.as_str())
            && self.totals.values().sum::<usize>() > 0
    }
}

/// Builds the summary from the trace files of this run; a file listed twice is counted
/// once.
pub fn summarize(
    corpus: &Path,
    device: &str,
    files: &[TraceFile],
    errors: IndexMap<String, String>,
) -> RunSummary {
    let mut totals: IndexMap<String, usize> = Status::ALL
        .iter()
        .map(|s| (s.as_str().to_string(), 0))
        .collect();
    let mut problems: IndexMap<String, IndexMap<String, IndexMap<String, usize>>> = IndexMap::new();
    let mut counted: Vec<&Path> = Vec::new();
    for f in files {
        if counted.contains(&f.path.as_path()) {
            continue;
        }
        counted.push(&f.path);
        let rows = kg_contract::io::load_jsonl::<Trace>(&f.path).unwrap_or_default();
        let counts = problems
            .entry(f.key.clone())
            .or_default()
            .entry(f.solution.clone())
            .or_default();
        for (_, t, _) in rows {
            if let Some(e) = t.evaluation {
                *counts.entry(e.status.as_str().to_string()).or_insert(0) += 1;
                *totals.entry(e.status.as_str().to_string()).or_insert(0) += 1;
            }
        }
    }
    RunSummary {
        schema_version: 3,
        corpus: corpus.display().to_string(),
        device: device.to_string(),
        totals,
        problems,
        problem_info: IndexMap::new(),
        errors,
        refused: IndexMap::new(),
        filters: Vec::new(),
        chain: None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keys_are_paths_relative_to_the_corpus() {
        let root = Path::new("/c/examples");
        assert_eq!(
            problem_key(root, Path::new("/c/examples/triton/rmsnorm")),
            "triton/rmsnorm"
        );
        assert_eq!(problem_key(root, root), "examples");
        let out = Path::new("/o");
        assert_eq!(
            trace_path(out, "triton/rmsnorm", "my sol"),
            Path::new("/o/triton/rmsnorm/my_sol.jsonl")
        );
        // No component climbs out of the output directory.
        assert_eq!(trace_path(out, "../x", ".."), Path::new("/o/__/x/__.jsonl"));
    }

    #[test]
    fn one_trace_file_for_two_pairs_is_refused_naming_both() {
        let (a, b) = (PathBuf::from("/o/p/s.jsonl"), PathBuf::from("/o/q/s.jsonl"));
        assert!(
            check_trace_paths([("p / 1".into(), a.as_path()), ("q / 1".into(), b.as_path())])
                .is_ok()
        );
        let e = check_trace_paths([
            ("p / s1.json".into(), a.as_path()),
            ("p / s2.json".into(), a.as_path()),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("p / s1.json") && e.contains("p / s2.json"),
            "{e}"
        );
    }

    fn solution(name: &str, lang: &str) -> Solution {
        serde_json::from_value(serde_json::json!({
            "name": name, "definition": "d", "author": "t",
            "spec": {"languages": [lang], "target_hardware": ["LOCAL"], "entry_point": "k.py::run"},
            "sources": [{"path": "k.py", "content": ""}]
        }))
        .unwrap()
    }

    #[test]
    fn filters_match_fields_globs_and_negation() {
        let sol = solution("my_rmsnorm_triton", "triton");
        let pair = PairRef {
            key: "triton/rmsnorm",
            definition: "rmsnorm_h4096",
            solution: &sol,
        };
        let m = |e: &str| e.parse::<Filter>().unwrap().matches(&pair);
        assert!(m("rmsnorm"));
        assert!(m("h4096"));
        assert!(m("problem:triton/*"));
        assert!(!m("problem:cuda*"));
        assert!(m("language:triton & !problem:cuda*"));
        assert!(!m("language:triton & problem:cuda*"));
        // Without wildcards a pattern is a substring.
        assert!(m("language:trit"));
        assert!(!m("language:cuda"));
        assert!(m("definition:rmsnorm_h????"));
        assert!(!m("definition:rmsnorm_h???"));
        assert!(m("solution:*triton"));
        assert!(!m("!rmsnorm"));
        assert!("size:8".parse::<Filter>().is_err());
        assert!("problem:".parse::<Filter>().is_err());
        let f: Vec<Filter> = vec!["cuda".parse().unwrap(), "triton".parse().unwrap()];
        assert!(selected(&f, &pair));
        assert!(selected(&[], &pair));
        assert!(!selected(&f[..1], &pair));
    }

    #[test]
    fn globs_backtrack() {
        assert!(pattern_matches("a*b*c", "axxbyybc"));
        assert!(!pattern_matches("a*b*c", "axxbyyb"));
        assert!(pattern_matches("*", ""));
        assert!(pattern_matches("?x", "yx"));
        assert!(!pattern_matches("?x", "x"));
    }

    #[test]
    fn resume_modes_pick_what_runs_again() {
        use PriorState::*;
        for s in [Unfinished, Passed, NotPassed(1)] {
            assert!(Resume::All.evaluates(s));
        }
        assert!(Resume::SkipFinished.evaluates(Unfinished));
        assert!(!Resume::SkipFinished.evaluates(Passed));
        assert!(!Resume::SkipFinished.evaluates(NotPassed(2)));
        assert!(Resume::Failed.evaluates(Unfinished));
        assert!(!Resume::Failed.evaluates(Passed));
        assert!(Resume::Failed.evaluates(NotPassed(2)));
        assert_eq!(
            prior_state(Path::new("/nonexistent/t.jsonl"), &[], "a", "b"),
            Unfinished
        );
    }

    #[test]
    fn cpu_estimates_cost_the_interpreter_and_scale_with_sizes_and_rounds() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus/add");
        let p = Problem::load(&dir).unwrap();
        let w = &p.workloads[1];
        let triton = solution("t", "triton");
        let torch = solution("p", "pytorch");
        let (t10, t2) = (
            estimate_cpu_s(w, &triton, 10),
            estimate_cpu_s(w, &triton, 2),
        );
        assert!(t10 > t2, "{t10} {t2}");
        assert!(estimate_cpu_s(w, &triton, 10) > estimate_cpu_s(w, &torch, 10));
        assert!(estimate_cpu_s(w, &torch, 10) > estimate_cpu_s(&p.workloads[0], &torch, 10));
        // A tiny workload costs about the fixed harness time and both timing budgets.
        let tiny = estimate_cpu_s(&p.workloads[0], &torch, 2);
        assert!((2.0..3.0).contains(&tiny), "{tiny}");
    }

    #[test]
    fn duplicate_names_are_found_with_whether_they_are_identical() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus");
        let a = Problem::load(&root.join("add")).unwrap();
        let mut b_def = a.definition.clone();
        let c = Problem::load(&root.join("nan_reference")).unwrap();
        let (pa, pb, pc) = (Path::new("/a"), Path::new("/b"), Path::new("/c"));
        let d = duplicate_definitions([(pa, &a.definition), (pb, &b_def), (pc, &c.definition)]);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].dirs, [PathBuf::from("/a"), PathBuf::from("/b")]);
        assert!(d[0].identical);
        b_def.description = Some("changed".into());
        let d = duplicate_definitions([(pa, &a.definition), (pb, &b_def)]);
        assert!(!d[0].identical);
    }
}
