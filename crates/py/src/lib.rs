//! `import kernelgate`: kernelgate for the Python loops that drive kernel optimisation.
//!
//! Problems load and validate as kg-bench loads them, trace files read and verify as
//! `kg-bench verify` verifies them, SOL bounds come from kg-solar and scores from kg-score, and
//! [`evaluate`] runs a solution through kg-exec's engine, the same judge and sandboxed
//! candidate process as `kg-bench evaluate`. Nothing is reimplemented here: every function is a
//! call into the crates the CLIs use. The CLIs never link libpython; this crate is the only one
//! that does, as an extension module (abi3, Python 3.10 and later).
//!
//! Errors are Python exceptions under `kernelgate.KernelgateError`, each naming the input:
//! `ProblemError` (a problem or solution that does not load), `TraceError` (a trace file that
//! does not read), `EvaluateError` (no interpreter, device or verdict), `SolarError`,
//! `ScoreError`.

#![allow(clippy::useless_conversion)] // pyo3's generated wrappers convert PyErr into PyErr.

use std::path::PathBuf;

use kg_contract::chain::{self, VerifyOptions};
use kg_contract::{Problem as KgProblem, Trace as KgTrace};
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    kernelgate,
    KernelgateError,
    PyException,
    "Every kernelgate error."
);
create_exception!(
    kernelgate,
    ProblemError,
    KernelgateError,
    "A problem or solution that does not load."
);
create_exception!(
    kernelgate,
    TraceError,
    KernelgateError,
    "A trace file that cannot be read."
);
create_exception!(
    kernelgate,
    EvaluateError,
    KernelgateError,
    "An evaluation that gave no verdict."
);
create_exception!(
    kernelgate,
    SolarError,
    KernelgateError,
    "A speed-of-light analysis that failed."
);
create_exception!(
    kernelgate,
    ScoreError,
    KernelgateError,
    "A score that could not be computed."
);

fn err<E: std::fmt::Display>(kind: fn(String) -> PyErr) -> impl Fn(E) -> PyErr {
    move |e| kind(e.to_string())
}

fn problem_error(s: String) -> PyErr {
    ProblemError::new_err(s)
}
fn trace_error(s: String) -> PyErr {
    TraceError::new_err(s)
}
fn solar_error(s: String) -> PyErr {
    SolarError::new_err(s)
}
fn score_error(s: String) -> PyErr {
    ScoreError::new_err(s)
}

/// A problem: a definition with its reference, and its workloads.
#[pyclass(frozen, get_all, module = "kernelgate")]
#[derive(Clone)]
pub struct Problem {
    /// The definition's name.
    name: String,
    /// The problem directory.
    dir: String,
    /// The operator type, when the definition names one.
    op_type: Option<String>,
    /// The workloads' uuids, in file order.
    workloads: Vec<String>,
    /// SHA-256 of the problem's tree, as every trace of it records.
    tree_sha256: String,
    /// What loading it warned about.
    warnings: Vec<String>,
}

#[pymethods]
impl Problem {
    fn __repr__(&self) -> String {
        format!(
            "Problem(name={:?}, dir={:?}, workloads={})",
            self.name,
            self.dir,
            self.workloads.len()
        )
    }
}

/// Loads and validates a problem directory (`definition.json`, `workload.jsonl`, the
/// reference) as kg-bench does; raises `ProblemError` naming the file and field at fault.
#[pyfunction]
fn load_problem(path: PathBuf) -> PyResult<Problem> {
    let p = KgProblem::load(&path).map_err(err(problem_error))?;
    let tree_sha256 = kg_contract::tree::tree_sha256(&p.dir)
        .map_err(|e| ProblemError::new_err(format!("`{}`: {e}", p.dir.display())))?;
    Ok(Problem {
        name: p.definition.name.clone(),
        dir: p.dir.display().to_string(),
        op_type: p.definition.op_type.clone(),
        workloads: p
            .workloads
            .iter()
            .map(|w| w.workload.uuid.clone())
            .collect(),
        tree_sha256,
        warnings: p.warnings.clone(),
    })
}

/// One trace: a workload's verdict.
#[pyclass(frozen, get_all, module = "kernelgate")]
#[derive(Clone)]
pub struct Trace {
    /// The definition evaluated.
    definition: String,
    /// The solution's name.
    solution: Option<String>,
    /// The workload's uuid.
    workload: String,
    /// `PASSED`, `INCORRECT_NUMERICAL`, `REWARD_HACK`, ...
    status: Option<String>,
    /// The reason code of a status other than PASSED (`tolerance_exceeded`, ...).
    reason: Option<String>,
    /// The candidate's latency (ms), when timed.
    latency_ms: Option<f64>,
    /// The reference's latency (ms), when timed.
    reference_latency_ms: Option<f64>,
    /// Reference latency over candidate latency.
    speedup: Option<f64>,
    /// Where it ran, as the trace says.
    hardware: Option<String>,
    /// The evaluation's log.
    log: Option<String>,
    /// The whole trace line, as JSON (every field of the format).
    json: String,
}

#[pymethods]
impl Trace {
    fn __repr__(&self) -> String {
        format!(
            "Trace(definition={:?}, workload={:?}, status={}, speedup={})",
            self.definition,
            self.workload,
            self.status
                .as_deref()
                .map_or("None".into(), |s| format!("{s:?}")),
            self.speedup.map_or("None".into(), |s| format!("{s:.3}"))
        )
    }
}

impl Trace {
    fn of(t: &KgTrace) -> PyResult<Trace> {
        let e = t.evaluation.as_ref();
        let perf = e.and_then(|e| e.performance.as_ref());
        Ok(Trace {
            definition: t.definition.clone(),
            solution: t.solution.clone(),
            workload: t.workload.uuid.clone(),
            status: e.map(|e| e.status.as_str().to_string()),
            reason: e
                .and_then(|e| e.reason)
                .and_then(|r| serde_json::to_value(r).ok())
                .and_then(|v| v.as_str().map(str::to_string)),
            latency_ms: perf.map(|p| p.latency_ms),
            reference_latency_ms: perf.map(|p| p.reference_latency_ms),
            speedup: perf.map(|p| p.speedup_factor),
            hardware: e.map(|e| e.environment.hardware.clone()),
            log: e.map(|e| e.log.clone()),
            json: serde_json::to_string(t).map_err(err(trace_error))?,
        })
    }
}

/// Reads a trace file (JSONL, as `kg-bench evaluate -o` and `run` write it); raises
/// `TraceError` naming the file and line that does not parse. Reading is not verifying: see
/// `verify_traces`.
#[pyfunction]
fn read_traces(path: PathBuf) -> PyResult<Vec<Trace>> {
    let rows = kg_contract::io::load_jsonl::<KgTrace>(&path).map_err(err(trace_error))?;
    rows.iter().map(|(_, t, _)| Trace::of(t)).collect()
}

/// The verdict on a trace file or a run.
#[pyclass(frozen, get_all, module = "kernelgate")]
#[derive(Clone)]
pub struct Verification {
    /// Whether everything verified.
    ok: bool,
    /// The file (a trace file, or a run's summary.json).
    path: String,
    /// Trace files checked.
    files: usize,
    /// Trace lines checked.
    lines: usize,
    /// Everything wrong, as `FILE:LINE: message` (empty when `ok`).
    findings: Vec<String>,
}

#[pymethods]
impl Verification {
    fn __bool__(&self) -> bool {
        self.ok
    }
    fn __repr__(&self) -> String {
        format!(
            "Verification(ok={}, files={}, lines={}, findings={})",
            if self.ok { "True" } else { "False" },
            self.files,
            self.lines,
            self.findings.len()
        )
    }
}

fn options(pubkey: Option<PathBuf>) -> PyResult<VerifyOptions> {
    let mut o = VerifyOptions::default();
    if let Some(k) = pubkey {
        o.trusted_key = Some(chain::load_public_key(&k).map_err(err(trace_error))?);
    }
    Ok(o)
}

/// Verifies a trace file: every line's hash chain and seal, and with `pubkey` (a
/// `kg-bench keygen` public key file) its signature. Tampering is a `Verification` with
/// findings; a file that cannot be read raises `TraceError`.
#[pyfunction]
#[pyo3(signature = (path, pubkey=None))]
fn verify_traces(path: PathBuf, pubkey: Option<PathBuf>) -> PyResult<Verification> {
    let r = chain::verify_file(&path, &options(pubkey)?).map_err(err(trace_error))?;
    Ok(Verification {
        ok: r.ok(),
        path: path.display().to_string(),
        files: 1,
        lines: r.lines,
        findings: r.located().collect(),
    })
}

/// Verifies a run (`kg-bench run`'s or `merge`'s summary.json): its sealed chain record,
/// and every trace file it lists against the head it records.
#[pyfunction]
#[pyo3(signature = (summary, pubkey=None))]
fn verify_run(summary: PathBuf, pubkey: Option<PathBuf>) -> PyResult<Verification> {
    let r = chain::verify_run(&summary, &options(pubkey)?).map_err(err(trace_error))?;
    let mut all: Vec<String> = r
        .findings
        .iter()
        .map(|f| format!("{}: {}", summary.display(), f.message))
        .collect();
    for f in &r.files {
        all.extend(f.located());
    }
    Ok(Verification {
        ok: r.ok(),
        path: summary.display().to_string(),
        files: r.files.len(),
        lines: r.files.iter().map(|f| f.lines).sum(),
        findings: all,
    })
}

/// A workload's speed-of-light bound on one device.
#[pyclass(frozen, get_all, module = "kernelgate")]
#[derive(Clone)]
pub struct SolBound {
    /// The definition.
    definition: String,
    /// The workload's uuid.
    workload: String,
    /// The hardware spec it is for.
    hardware: String,
    /// The bound: no kernel can take less time (ms).
    t_sol_ms: f64,
    /// Its compute part and its memory part (fused), ms.
    t_compute_ms: f64,
    t_memory_ms: f64,
    /// `compute` or `memory`.
    bound: String,
    /// FLOPs per byte moved.
    arithmetic_intensity: f64,
}

#[pymethods]
impl SolBound {
    fn __repr__(&self) -> String {
        format!(
            "SolBound(workload={:?}, t_sol_ms={}, bound={:?})",
            self.workload, self.t_sol_ms, self.bound
        )
    }
}

fn python_or_current(py: Python<'_>, python: Option<PathBuf>) -> PyResult<PathBuf> {
    match python {
        Some(p) => Ok(p),
        None => Ok(PathBuf::from(
            py.import("sys")?
                .getattr("executable")?
                .extract::<String>()?,
        )),
    }
}

/// Speed-of-light bounds of every workload of a problem on `hardware` (a built-in spec name
/// such as `h200`, or a spec file), from its reference's operator graph (kg-solar's ATen
/// backend), traced with `python` (default: this interpreter).
#[pyfunction]
#[pyo3(signature = (problem, hardware="h200", python=None))]
fn sol_bounds(
    py: Python<'_>,
    problem: PathBuf,
    hardware: &str,
    python: Option<PathBuf>,
) -> PyResult<Vec<SolBound>> {
    let python = python_or_current(py, python)?;
    let hw = kg_solar::hardware::load(hardware).map_err(err(solar_error))?;
    let p = KgProblem::load(&problem).map_err(err(problem_error))?;
    let items: Vec<(&KgProblem, usize, kg_solar::ExtractionPath)> = (0..p.workloads.len())
        .map(|i| (&p, i, kg_solar::ExtractionPath::Aten))
        .collect();
    let results = py
        .detach(|| kg_solar::analysis::analyze_batch(&items, &python, &hw))
        .map_err(err(solar_error))?;
    results
        .into_iter()
        .map(|r| {
            let a = r.map_err(err(solar_error))?;
            let r = a.record;
            Ok(SolBound {
                definition: r.definition,
                workload: r.workload,
                hardware: r.hardware,
                t_sol_ms: r.t_sol_ms,
                t_compute_ms: r.t_compute_ms,
                t_memory_ms: r.t_memory_fused_ms,
                bound: serde_json::to_value(r.bound)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                arithmetic_intensity: r.arithmetic_intensity,
            })
        })
        .collect()
}

/// SOL-ExecBench's per-workload score: `1 / (1 + (t_k - t_sol) / (t_b - t_sol))` for a
/// kernel's latency `t_k`, the baseline's `t_b` and the bound `t_sol` (1.0 at the bound, 0.5
/// at the baseline).
#[pyfunction]
fn sol_score(t_k: f64, t_b: f64, t_sol: f64) -> f64 {
    kg_score::sol_score(t_k, t_b, t_sol)
}

/// A scored run: the equal-weight mean over problems, and each problem's score.
#[pyclass(frozen, get_all, module = "kernelgate")]
#[derive(Clone)]
pub struct Score {
    /// Mean over problems.
    overall: f64,
    /// Per definition: the mean of its workload scores.
    problems: std::collections::BTreeMap<String, f64>,
    /// Device both sides ran on.
    device: String,
    /// Timing method both sides used.
    timing_method: String,
    /// The whole report as JSON (per-workload scores and flags included).
    json: String,
}

/// Scores `candidate` traces against `baseline` traces (a trace file or a run directory each)
/// and SOL bounds (`kg-bench solar analyze`'s output directory, or JSONL), as `kg-bench score
/// compute` does.
#[pyfunction]
fn score(candidate: PathBuf, baseline: PathBuf, sol: PathBuf) -> PyResult<Score> {
    let c = kg_score::load_traces(&candidate).map_err(err(score_error))?;
    let b = kg_score::load_traces(&baseline).map_err(err(score_error))?;
    let s = kg_score::load_sol(&sol).map_err(err(score_error))?;
    let r = kg_score::compute(&c, &b, &s).map_err(err(score_error))?;
    Ok(Score {
        overall: r.overall,
        problems: r
            .problems
            .iter()
            .map(|p| (p.definition.clone(), p.score))
            .collect(),
        device: r.device.clone(),
        timing_method: r.timing_method.clone(),
        json: serde_json::to_string(&r).map_err(err(score_error))?,
    })
}

/// Evaluates `solution` (a solution JSON file, or `"reference"` for the problem's own
/// reference) on `problem` through kernelgate's engine: the judge draws fresh inputs each
/// round and checks the outputs, the candidate runs in its own sandboxed process, and each
/// workload gets a trace. `device` is `cpu`, `auto` (an idle GPU claimed through kg-gpu, else
/// the CPU), `cuda:N` or `rocm:N`; `python` runs the workers (default: this interpreter);
/// `max_workloads` keeps the first N workloads; `output` appends the traces to that file as a
/// sealed chain (as `kg-bench evaluate -o` does; `verify_traces` checks it). The GIL is
/// released while it runs. Raises `ProblemError` for inputs that do not load and
/// `EvaluateError` when there is no verdict.
#[pyfunction]
#[pyo3(signature = (problem, solution="reference", device="cpu", max_workloads=None, rounds=10, warmup=10, iterations=50, timeout=600.0, python=None, output=None))]
#[allow(clippy::too_many_arguments)] // keyword arguments of one Python function
fn evaluate(
    py: Python<'_>,
    problem: PathBuf,
    solution: &str,
    device: &str,
    max_workloads: Option<usize>,
    rounds: u32,
    warmup: u32,
    iterations: u32,
    timeout: f64,
    python: Option<PathBuf>,
    output: Option<PathBuf>,
) -> PyResult<Vec<Trace>> {
    let python = python_or_current(py, python)?;
    let p = KgProblem::load(&problem).map_err(err(problem_error))?;
    let sol = if solution == "reference" && !std::path::Path::new(solution).exists() {
        kg_exec::engine::reference_solution(&p)
    } else {
        kg_contract::load_solution(std::path::Path::new(solution))
            .map_err(err(problem_error))?
            .0
    };
    let request: kg_exec::DeviceRequest = device
        .parse()
        .map_err(|e: String| EvaluateError::new_err(format!("device `{device}`: {e}")))?;
    if !(timeout.is_finite() && timeout > 0.0) {
        return Err(EvaluateError::new_err(format!(
            "timeout must be a positive number of seconds, got {timeout}"
        )));
    }
    let traces = py.detach(move || -> Result<Vec<KgTrace>, String> {
        let cwd = std::env::current_dir().map_err(|e| e.to_string())?;
        let interp = kg_exec::find_python_env(Some(&python), &cwd).map_err(|e| e.to_string())?;
        let (info, _) = kg_exec::probe_cached(&interp, &kg_exec::engine::default_cache_dir())
            .map_err(|e| e.to_string())?;
        let acquired = kg_exec::placement::acquire(
            request,
            &info,
            &kg_exec::placement::AcquireOptions {
                command: vec!["python: kernelgate.evaluate".into()],
                ..kg_exec::placement::AcquireOptions::default()
            },
        )
        .map_err(|e| e.to_string())?;
        let mut opts = acquired.eval_options();
        opts.rounds = rounds.max(1);
        opts.warmup = warmup;
        opts.iterations = iterations.max(1);
        opts.timeout = std::time::Duration::from_secs_f64(timeout);
        let workloads = kg_exec::corpus::select_workloads(&p, None, max_workloads);
        let mut session = kg_exec::Session::new(interp, opts, kg_exec::CancelToken::new())
            .map_err(|e| e.to_string())?;
        let r = session.evaluate_sealed(&p, None, &sol, &workloads, &mut |_| {});
        session.shutdown();
        drop(acquired);
        let evaluated = r.map_err(|e| e.to_string())?;
        let mut traces = evaluated.traces;
        if let Some(path) = &output {
            let run_id = chain::new_run_id().map_err(|e| e.to_string())?;
            let manifest = chain::Manifest::new(
                &run_id,
                &p.definition.name,
                &evaluated.problem_tree_sha256,
                &sol,
            )
            .map_err(|e| e.to_string())?;
            traces = chain::write_traces(path, &traces, &manifest, None, chain::WriteMode::Append)
                .map_err(|e| e.to_string())?
                .traces;
        }
        match evaluated.error {
            Some(e) => Err(e.to_string()),
            None => Ok(traces),
        }
    });
    let traces =
        traces.map_err(|e| EvaluateError::new_err(format!("`{}`: {e}", problem.display())))?;
    traces.iter().map(Trace::of).collect()
}

/// kernelgate for Python.
#[pymodule]
fn kernelgate(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("KernelgateError", py.get_type::<KernelgateError>())?;
    m.add("ProblemError", py.get_type::<ProblemError>())?;
    m.add("TraceError", py.get_type::<TraceError>())?;
    m.add("EvaluateError", py.get_type::<EvaluateError>())?;
    m.add("SolarError", py.get_type::<SolarError>())?;
    m.add("ScoreError", py.get_type::<ScoreError>())?;
    m.add_class::<Problem>()?;
    m.add_class::<Trace>()?;
    m.add_class::<Verification>()?;
    m.add_class::<SolBound>()?;
    m.add_class::<Score>()?;
    m.add_function(wrap_pyfunction!(load_problem, m)?)?;
    m.add_function(wrap_pyfunction!(read_traces, m)?)?;
    m.add_function(wrap_pyfunction!(verify_traces, m)?)?;
    m.add_function(wrap_pyfunction!(verify_run, m)?)?;
    m.add_function(wrap_pyfunction!(sol_bounds, m)?)?;
    m.add_function(wrap_pyfunction!(sol_score, m)?)?;
    m.add_function(wrap_pyfunction!(score, m)?)?;
    m.add_function(wrap_pyfunction!(evaluate, m)?)?;
    Ok(())
}
