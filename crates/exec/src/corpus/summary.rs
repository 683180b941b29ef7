//! What a run costs and what it found: CPU time estimates, speed-of-light coverage, and
//! `summary.json`.

use super::*;

/// Rough per-element costs of one call on the CPU, measured on kernelgate's dev host (x86-64,
/// torch 2.11, one torch thread per worker) with SOL-ExecBench's examples: the Triton
/// interpreter ran their RMSNorm kernels at 330–540 ns per input element per call, eager
/// PyTorch 0.7–2.5 ns; drawing and digesting one input set took about 15 ns per element.
pub(crate) const CPU_TRITON_INTERPRETER_NS: f64 = 400.0;
pub(crate) const CPU_TORCH_NS: f64 = 2.0;
pub(crate) const CPU_INPUT_SET_NS: f64 = 15.0;
/// Harness time per workload beyond the calls (messages, files, process bookkeeping).
pub(crate) const CPU_WORKLOAD_FIXED_S: f64 = 1.0;
/// Starting a candidate process and importing torch and the solution.
pub const CPU_PAIR_FIXED_S: f64 = 3.0;
/// Each side's warm-up and timing budget on the CPU (a quarter of 0.5 s, then 0.5 s).
pub(crate) const CPU_TIMING_BUDGET_S: f64 = 0.625;

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
    /// The shards this run was merged from (`kg-bench merge`), in shard order; empty for a
    /// run on one host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub merged_from: Vec<crate::shard::MergedShard>,
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
        merged_from: Vec::new(),
    }
}
