//! The evaluation engine: one judge per device lane, one candidate process per solution.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use kg_contract::{
    CandidateLaunch, CandidateStart, ClockState, Correctness, Environment, Evaluation,
    LoadedWorkload, Performance, Problem, Retry, RetryReason, Solution, SourceFile, Status,
    TimingMethod, Trace,
};
use serde_json::{Value, json};

use crate::device::DeviceChoice;
use crate::integrity;
use crate::process::{CancelToken, Worker, WorkerError, WorkerSpec, tail};
use crate::protocol::{Aside, AsideReply, Bounds};
use crate::python::Interpreter;
use crate::sandbox::Sandbox;
use crate::scripts;

mod builder;
pub use builder::{BuildOutcome, Built};

/// Languages a solution may declare.
pub const SUPPORTED_LANGUAGES: [&str; 5] = ["pytorch", "python", "triton", "cuda_cpp", "hip_cpp"];

/// Which timing method to use on a GPU (`--timing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimingChoice {
    /// `cupti` on a GPU (`device_event_sync` where CUPTI is unusable), `cpu_wall` on the CPU.
    #[default]
    Default,
    /// `device_event_sync` on a GPU.
    Events,
    /// CUDA-graph replay (GPU only), for launch-bound kernels.
    CudaGraph,
}

/// Settings of an evaluation.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// The device.
    pub device: DeviceChoice,
    /// Time limit per workload, for the candidate's calls (and the reference's).
    pub timeout: Duration,
    /// Time limit for starting a candidate and importing/building the solution.
    pub compile_timeout: Duration,
    /// Warm-up calls before timing.
    pub warmup: u32,
    /// Timed iterations (on the CPU, an upper bound: see `cpu_time_budget`).
    pub iterations: u32,
    /// Correctness rounds, each with fresh inputs.
    pub rounds: u32,
    /// Fixed seed instead of a secret random one (for reproducing a failure).
    pub seed: Option<u64>,
    /// Timing method choice.
    pub timing: TimingChoice,
    /// On the CPU, stop timing after this many seconds (at least 3 iterations); warm-up stops
    /// after a quarter of it.
    pub cpu_time_budget: Option<Duration>,
    /// Where C++/CUDA builds are cached.
    pub cache_dir: PathBuf,
    /// Extra environment for every worker (device visibility of a kg-gpu claim).
    pub worker_env: Vec<(String, String)>,
    /// Confine the candidate (`crate::sandbox`: limits, no network, read-only problem and
    /// script directories, private HOME/TMPDIR). Off only to measure its cost or on a host
    /// where namespaces break the device runtime; traces then say `isolation: none`.
    pub sandbox: bool,
    /// Refuse to evaluate when any sandbox layer did not hold on the candidate
    /// ([`ExecError::SandboxIncomplete`]), instead of recording the missing layer in the trace.
    pub require_sandbox: bool,
    /// The candidate's memory limit, bytes: a cgroup v2 `memory.max` where one is delegated,
    /// else RLIMIT_DATA per process (`crate::sandbox`).
    pub memory_bytes: u64,
    /// Speed-of-light floor: T_SOL (ms) per (definition, workload uuid), and where it came
    /// from; a PASSED latency below it becomes REWARD_HACK (`kg-bench evaluate --sol`).
    pub sol_floor: Option<SolFloor>,
    /// The claim holding the device, recorded in every trace's environment.
    pub gpu_claim: Option<kg_contract::GpuClaim>,
    /// Whether the candidate processes of the evaluations due next start while the current
    /// one is evaluated ([`Session::prestart_next`]).
    pub prestart: Prestart,
}

/// Whether candidate processes start while an earlier evaluation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Prestart {
    /// On, except on a CPU device (the cores it would use run the timed workload).
    #[default]
    Auto,
    /// On, also on a CPU device.
    On,
    /// Never: each candidate process starts when its evaluation begins.
    Off,
}

impl EvalOptions {
    /// The defaults of `kg-bench evaluate` for a device.
    pub fn new(device: DeviceChoice) -> Self {
        EvalOptions {
            device,
            timeout: Duration::from_secs(600),
            compile_timeout: Duration::from_secs(120),
            warmup: 10,
            iterations: 50,
            rounds: 10,
            seed: None,
            timing: TimingChoice::Default,
            cpu_time_budget: Some(Duration::from_millis(500)),
            cache_dir: default_cache_dir(),
            worker_env: Vec::new(),
            sandbox: true,
            require_sandbox: false,
            memory_bytes: crate::sandbox::default_memory_bytes(),
            sol_floor: None,
            gpu_claim: None,
            prestart: Prestart::Auto,
        }
    }

    /// The timing method these options produce.
    pub fn timing_method(&self) -> TimingMethod {
        match (&self.device, self.timing) {
            (DeviceChoice::Cpu, _) => TimingMethod::CpuWall,
            (_, TimingChoice::CudaGraph) => TimingMethod::CudaGraph,
            // CUPTI is NVIDIA's; on ROCm the default is HIP events (unverified on AMD hardware).
            (DeviceChoice::Rocm(_), TimingChoice::Default) => TimingMethod::DeviceEventSync,
            (_, TimingChoice::Default) => TimingMethod::Cupti,
            (_, TimingChoice::Events) => TimingMethod::DeviceEventSync,
        }
    }
}

/// Speed-of-light bounds an evaluation checks latencies against.
#[derive(Debug, Clone, Default)]
pub struct SolFloor {
    /// T_SOL in ms, keyed by (definition name, workload uuid).
    pub t_sol_ms: IndexMap<(String, String), f64>,
    /// Where the bounds came from (a path), for the log.
    pub source: String,
}

impl SolFloor {
    /// REWARD_HACK when `outcome` PASSED with a latency below the bound for this workload:
    /// faster than the hardware allows means the timing was fooled (or the bound is wrong,
    /// which a reviewer must see either way, never a score).
    fn check(&self, definition: &str, workload: &str, outcome: Outcome) -> Outcome {
        let key = (definition.to_string(), workload.to_string());
        let (Some(t_sol), Some(p)) = (self.t_sol_ms.get(&key), outcome.performance.as_ref()) else {
            return outcome;
        };
        if outcome.status != Status::Passed {
            return outcome;
        }
        if p.latency_ms >= *t_sol {
            let mut outcome = outcome;
            outcome.log.push_str(&format!(
                "harness: speed-of-light floor: T_SOL = {t_sol:.6} ms (from `{}`), latency above it\n",
                self.source
            ));
            return outcome;
        }
        let msg = format!(
            "speed-of-light floor: latency {:.6} ms is below T_SOL = {t_sol:.6} ms for this workload (from `{}`); faster than the hardware allows, so the timing was fooled or the bound is wrong\n{}",
            p.latency_ms, self.source, outcome.log
        );
        Outcome::fail(Status::RewardHack, msg)
    }
}

/// `$KG_CACHE_DIR`, else `$XDG_CACHE_HOME/kernelgate`, else `~/.cache/kernelgate`, else a temp dir.
pub fn default_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("KG_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("kernelgate");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("kernelgate");
    }
    std::env::temp_dir().join("kernelgate-cache")
}

/// Something that happened during an evaluation, for reporters.
#[derive(Debug, Clone)]
pub enum Event {
    /// A workload is about to be evaluated.
    WorkloadStarted {
        /// Definition name.
        definition: String,
        /// Solution name.
        solution: String,
        /// Workload uuid.
        uuid: String,
        /// 0-based position.
        index: usize,
        /// Number of workloads in this evaluation.
        total: usize,
    },
    /// A workload finished; its trace.
    WorkloadFinished(Box<Trace>),
    /// Something the user should know (e.g. a worker restarted).
    Notice(String),
}

/// What [`Session::evaluate_sealed`] returns, once the candidate is gone.
#[derive(Debug)]
pub struct Evaluated {
    /// One trace per workload finished, in order (all of them unless `error` is set).
    pub traces: Vec<Trace>,
    /// The problem directory's tree hash before the candidate started ([`kg_contract::tree`]):
    /// what the traces were judged against.
    pub problem_tree_sha256: String,
    /// Why the evaluation stopped before its last workload (cancelled, the judge lost).
    pub error: Option<ExecError>,
}

/// Errors that stop an evaluation (as opposed to statuses recorded in traces).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The solution declares a language we do not run.
    #[error("solution `{solution}` declares language(s) {languages:?}; supported: {supported}")]
    UnsupportedLanguage {
        /// Solution name.
        solution: String,
        /// Its languages.
        languages: Vec<String>,
        /// The supported list.
        supported: String,
    },
    /// The solution is for another definition.
    #[error(
        "solution `{solution}` is for definition `{for_def}`, but the problem is `{def}`; pass the matching `--solution`"
    )]
    WrongDefinition {
        /// Solution name.
        solution: String,
        /// Its definition.
        for_def: String,
        /// The problem's definition.
        def: String,
    },
    /// The judge could not be started or set up (environment problem).
    #[error("failed to start the judge worker with `{python}`: {message}")]
    Judge {
        /// Interpreter.
        python: PathBuf,
        /// What went wrong (with its stderr tail).
        message: String,
    },
    /// Local I/O (temp dirs, scripts).
    #[error("failed to {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// Cancelled (Ctrl-C / SIGTERM); workers were killed.
    #[error("cancelled")]
    Cancelled,
    /// The problem directory could not be hashed before the candidate started (a file that
    /// cannot be read, too many entries): its traces would record no tree hash.
    #[error("{0}")]
    ProblemTree(kg_contract::tree::TreeError),
    /// The problem directory no longer matches the tree it was loaded from (a candidate of an
    /// earlier evaluation, or someone else, changed it).
    #[error(
        "the problem directory `{}` changed since it was loaded ({files}); refusing to evaluate on it",
        dir.display()
    )]
    ProblemChanged {
        /// The problem directory.
        dir: PathBuf,
        /// What differs.
        files: String,
    },
    /// `--require-sandbox` and a layer did not hold on the candidate; it was killed.
    #[error(
        "the candidate sandbox is incomplete on this host: {missing}; nothing was evaluated (run without --require-sandbox to record the missing layers in the traces instead)"
    )]
    SandboxIncomplete {
        /// The missing layers with what was seen.
        missing: String,
    },
    /// The session directory could not be made.
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    /// What a sandboxed worker needs of the interpreter could not be found.
    #[error("failed to read the interpreter's import path for the workers: {0}")]
    SandboxPaths(#[from] crate::python::PythonError),
    /// A fault of the harness's own plumbing (its transfer directory vanished) in both
    /// attempts at a workload: the evaluation stops there, and that workload gets no status.
    #[error(
        "harness fault (not the candidate's) at workload `{workload}` of `{definition}`: {detail}; the evaluation stopped there (the workloads before it are recorded); rerun it, and report this if it repeats"
    )]
    HarnessFault {
        /// The definition.
        definition: String,
        /// The workload's uuid.
        workload: String,
        /// What happened in each attempt.
        detail: String,
    },
    /// The solution's language cannot be built or run on this host or device; nothing ran.
    #[error(
        "solution `{solution}` ({language}) cannot run here: missing {missing}; {fix}. Nothing was evaluated"
    )]
    ToolchainMissing {
        /// Solution name.
        solution: String,
        /// The language that needs it.
        language: String,
        /// What is missing.
        missing: String,
        /// What to do about it.
        fix: String,
    },
}

/// Checks that `sol`'s language can be built and run on `device` with the interpreter
/// `python`, before anything runs ([`crate::toolchain::missing_for`] with kg-bench's
/// environment).
pub fn toolchain_check(
    sol: &Solution,
    device: &crate::device::DeviceChoice,
    python: &Path,
) -> Result<(), ExecError> {
    match crate::toolchain::missing_for(sol, device, python, &|k| std::env::var_os(k)) {
        None => Ok(()),
        Some(m) => Err(ExecError::ToolchainMissing {
            solution: sol.name.clone(),
            language: m.language,
            missing: m.missing,
            fix: m.fix,
        }),
    }
}

/// The code paths an evaluation of `sol` on `device` takes that have never run on the hardware
/// they target (recorded in each trace's `environment.unverified`).
pub fn unverified_paths(device: &DeviceChoice, sol: &Solution) -> Vec<kg_contract::Unverified> {
    let mut v = Vec::new();
    if matches!(device, DeviceChoice::Rocm(_)) {
        v.push(kg_contract::Unverified::HipEventTiming);
        if sol
            .spec
            .languages
            .iter()
            .any(|l| l.eq_ignore_ascii_case("hip_cpp"))
        {
            v.push(kg_contract::Unverified::HipBuild);
        }
    }
    v
}

/// Checks a solution's languages before anything runs.
pub fn check_languages(sol: &Solution) -> Result<(), ExecError> {
    let bad = sol
        .spec
        .languages
        .iter()
        .any(|l| !SUPPORTED_LANGUAGES.contains(&l.to_lowercase().as_str()));
    let binding_ok = !sol
        .spec
        .languages
        .iter()
        .any(|l| l.eq_ignore_ascii_case("cuda_cpp") || l.eq_ignore_ascii_case("hip_cpp"))
        || matches!(sol.spec.binding.as_deref(), None | Some("torch"));
    if bad || !binding_ok {
        return Err(ExecError::UnsupportedLanguage {
            solution: sol.name.clone(),
            languages: sol.spec.languages.clone(),
            supported: format!(
                "{} (cuda_cpp and hip_cpp with binding `torch`)",
                SUPPORTED_LANGUAGES.join(", ")
            ),
        });
    }
    Ok(())
}

/// Picks the samples both sides are judged on: CUPTI device spans when `method` is CUPTI and
/// both workers delivered one per timed call, else the event times (the method then recorded
/// is `device_event_sync`, with the reason). A candidate's CUPTI spans are its own report, so
/// spans far shorter than its events (stream events where measured, else brackets; the
/// parent's dual clock bounds the brackets) are refused.
fn choose_times(
    method: TimingMethod,
    cand: &Value,
    reference: &Value,
    cand_events: Vec<f64>,
    ref_events: Vec<f64>,
) -> (TimingMethod, Vec<f64>, Vec<f64>, Option<String>) {
    if method != TimingMethod::Cupti {
        return (method, cand_events, ref_events, None);
    }
    let spans = |v: &Value| -> Result<Vec<f64>, String> {
        let notes = v.get("notes");
        if let Some(a) = notes
            .and_then(|n| n.get("cupti_ms"))
            .and_then(Value::as_array)
        {
            return Ok(a.iter().filter_map(Value::as_f64).collect());
        }
        Err(notes
            .and_then(|n| n.get("cupti_fallback"))
            .and_then(Value::as_str)
            .unwrap_or("no CUPTI spans reported")
            .to_string())
    };
    let fallback = |why: String| {
        (
            TimingMethod::DeviceEventSync,
            cand_events.clone(),
            ref_events.clone(),
            Some(format!(
                "CUPTI timing not used ({why}); both sides timed by device_event_sync"
            )),
        )
    };
    let (c, r) = match (spans(cand), spans(reference)) {
        (Ok(c), Ok(r)) => (c, r),
        (Err(w), _) => return fallback(format!("candidate: {w}")),
        (_, Err(w)) => return fallback(format!("reference: {w}")),
    };
    if c.len() != cand_events.len() || r.len() != ref_events.len() {
        return fallback("span count differs from the timed call count".into());
    }
    let median = |v: &[f64]| integrity::spread_from_times(v).map(|s| s.median_ms);
    let resolved = |spans: f64, events: f64| spans >= CUPTI_MIN_RATIO * events - CUPTI_SLACK_MS;
    // The spans are checked against the stream-event times where the worker measured them (an
    // end event recorded as the call returns, no closing sync), else against the brackets.
    let stream = |v: &Value| {
        v.get("notes")
            .and_then(|n| n.get("stream_event_median_ms"))
            .and_then(Value::as_f64)
    };
    let (Some(mc), Some(me), Some(mr), Some(mre)) = (
        median(&c),
        stream(cand).or_else(|| median(&cand_events)),
        median(&r),
        stream(reference).or_else(|| median(&ref_events)),
    ) else {
        return fallback("no valid CUPTI samples".into());
    };
    if resolved(mc, me) {
        return (TimingMethod::Cupti, c, r, None);
    }
    // The events cannot check spans of a kernel far shorter than their own unexplained time.
    // When the trusted reference's spans sit as far below its events, that is the workload, not
    // a forgery: the candidate's spans are believed if they claim no more speed over the
    // reference than its events show.
    if !resolved(mr, mre) && mc > 0.0 && me > 0.0 && mr / mc <= CUPTI_SPEEDUP_SLACK * (mre / me) {
        let note = format!(
            "CUPTI spans checked against the reference's: events ({me:.4} ms candidate, {mre:.4} ms reference) cannot resolve kernels of {mc:.4} / {mr:.4} ms, and the spans claim no more speed-up than the events show"
        );
        return (TimingMethod::Cupti, c, r, Some(note));
    }
    fallback(format!(
        "the candidate's CUPTI median {mc:.4} ms is far below its event median {me:.4} ms"
    ))
}

/// The raw per-call times (ms) a worker's timing reply carries.
fn times_of(v: &Value) -> Vec<f64> {
    v.get("times_ms")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

/// A candidate's CUPTI median may not fall below this share of its event median (less a
/// slack for the launch gap the events include, ~1.5 µs on an H200), or its spans are not
/// believed. The slack bounds how much a forged span can gain on a kernel of a few µs.
const CUPTI_MIN_RATIO: f64 = 0.5;
/// See `CUPTI_MIN_RATIO` (ms).
const CUPTI_SLACK_MS: f64 = 0.002;
/// Where the events cannot resolve the spans (`choose_times`), the candidate's span speed-up
/// over the reference may exceed its event speed-up by at most this factor: the most a forged
/// span can gain there.
const CUPTI_SPEEDUP_SLACK: f64 = 1.25;

/// The spin kernel queued before each timed GPU call keeps the GPU busy while the host records
/// the start event and launches the call, so that launch is not timed; when the launch takes
/// longer than the spin, the wait counts (CUPTI spans run from the one-cycle start marker
/// queued after the start event, so a late first kernel is counted from there).
/// Its length is this many times the reference's host launch time (measured by the judge before
/// timing, trusted) within [`SPIN_MIN_US`, `SPIN_MAX_US`]; the same length for both sides. On
/// an H200 (session 6) the host launch inside the timed bracket took up to 4x the judge's
/// probe, and a 50 µs spin made a 4096³ matmul read 238-240 µs instead of 178.5 (its first
/// kernel started late in 28-30 of 30 calls) and bmm kernels of 2-4 µs read up to 40. A longer
/// spin also hides host work done inside a call before its first kernel, hence the cap. With a
/// 300 µs cap (session 7), multi-kernel references whose probe read 180-220 µs (gelu_tanh,
/// silu_and_mul: 250-290 µs inside the bracket) filled the spin, and their CUPTI spans were
/// refused in a release run (session 8); the window stays at most 4x what the trusted
/// reference's own host launch needs. With a 150 µs floor (sessions 8-12), single-kernel
/// references whose launch inside the brackets took 60-116 µs (gemm down_proj, embedding)
/// started 1-25 of their 50 timed calls late (session 13), and one gemm's 25 late calls got
/// its CUPTI spans refused; hence 250 µs.
const SPIN_HOST_FACTOR: f64 = 4.0;
/// See [`SPIN_HOST_FACTOR`] (µs).
const SPIN_MIN_US: f64 = 250.0;
/// See [`SPIN_HOST_FACTOR`] (µs).
const SPIN_MAX_US: f64 = 600.0;

/// The spin length (µs) for a reference whose host launch took `ref_host_ms`.
fn spin_us_for(ref_host_ms: Option<f64>) -> f64 {
    match ref_host_ms {
        Some(h) if h.is_finite() && h > 0.0 => {
            (SPIN_HOST_FACTOR * h * 1e3).clamp(SPIN_MIN_US, SPIN_MAX_US)
        }
        _ => SPIN_MIN_US,
    }
}

/// The trace line for a reference whose host launch (`ref_host_ms`) needs a longer spin than
/// [`SPIN_MAX_US`]: its calls, and a candidate's like them, are timed with their host launch
/// gaps in the span, so their latencies move between processes. None otherwise.
fn host_bound_note(ref_host_ms: Option<f64>) -> Option<String> {
    let h = ref_host_ms.filter(|h| h.is_finite())?;
    (SPIN_HOST_FACTOR * h * 1e3 > SPIN_MAX_US).then(|| {
        format!(
            "harness: host-bound: the reference's host launch ({:.0} us) needs a spin longer than the {SPIN_MAX_US} us cap, so launch gaps fall inside both sides' spans and the latencies move between processes (identical code read 0.4x-2.7x itself on an H200); `--timing cuda-graph` times launch-bound kernels\n",
            h * 1e3
        )
    })
}

/// Fixed glibc malloc thresholds for CPU workers: blocks up to 32 MiB (glibc's maximum mmap
/// threshold) come from the heap, and freed heap memory is kept rather than returned.
const GLIBC_MALLOC_ENV: [(&str, &str); 2] = [
    ("MALLOC_MMAP_THRESHOLD_", "33554432"),
    ("MALLOC_TRIM_THRESHOLD_", "4294967296"),
];

/// The problem's own reference as a solution (value-returning `run`, language pytorch).
pub fn reference_solution(problem: &Problem) -> Solution {
    Solution {
        name: "reference".into(),
        definition: problem.definition.name.clone(),
        author: "definition reference".into(),
        description: Some("the definition's own PyTorch reference".into()),
        spec: kg_contract::BuildSpec {
            languages: vec!["pytorch".into()],
            target_hardware: vec![],
            entry_point: "reference.py::run".into(),
            destination_passing_style: false,
            binding: None,
            dependencies: None,
            compile_options: None,
        },
        sources: vec![SourceFile {
            path: "reference.py".into(),
            content: problem.definition.reference.clone(),
        }],
    }
}

/// One device lane: a private temp dir with the worker scripts, and a long-lived judge.
pub struct Session {
    python: Interpreter,
    opts: EvalOptions,
    cancel: CancelToken,
    dir: tempfile::TempDir,
    judge: Option<Worker>,
    judge_env: Option<Environment>,
    judge_setup_for: Option<String>,
    counter: u64,
    /// Faults injected so far (`KG_TEST_FAULT`, test builds only).
    faults_injected: u32,
    /// The candidate output pool the judge has open: (judge's tag, candidate's tag, number).
    pool_opened: Option<(String, String, u64)>,
    /// The candidate (its tag) whose outputs go as files since its pool failed, and why.
    pool_off: Option<(String, String)>,
    /// How the current workload's outputs were handed over (logged in its trace).
    outputs_via: String,
    /// What a sandboxed candidate must see of the interpreter (asked once).
    interpreter_paths: Option<crate::python::InterpreterPaths>,
    /// The running candidate's scratch directory (its output transfer directories go below
    /// it).
    candidate_root: Option<PathBuf>,
    /// Where the judge writes the running candidate's inputs (read-only in its view).
    candidate_inputs: Option<PathBuf>,
    /// Candidate processes started ahead of time ([`Session::prestart_next`]), oldest first.
    prestarted: Vec<Prestarted>,
    /// The evaluations due after the next one (solution, workload count), in order, as last
    /// named by [`Session::prestart_next`] and not yet acted on.
    next: Option<Vec<(Solution, usize)>>,
    /// Why candidates are no longer started ahead of time in this session.
    prestart_off: Option<String>,
    /// Builds of compiled solutions made elsewhere ([`Session::provide_build`]), by solution,
    /// with the time waited for them.
    builds: std::collections::HashMap<String, (BuildOutcome, Duration)>,
}

/// A candidate process started before it was asked for: it runs only kernelgate's worker
/// script (the interpreter start and `import torch`) until [`Session::start_candidate`] takes
/// it and sends it the solution.
struct Prestarted {
    /// Which evaluation it is for ([`prestart_key`]).
    key: String,
    /// When it was started.
    during: CandidateLaunch,
    /// Its scratch directory.
    root: PathBuf,
    /// Where the judge writes its inputs.
    inputs: PathBuf,
    launching: crate::process::Launching,
}

/// A candidate process ready with its solution loaded, and what its start cost.
struct StartedCandidate {
    worker: Worker,
    start: CandidateStart,
    /// How its compiled module was built (compiled solutions only).
    build: Option<kg_contract::BuildRecord>,
}

/// What a started candidate process is for: the solution as a whole (every byte of its JSON)
/// and the number of workloads its limits were sized for.
fn prestart_key(sol: &Solution, workloads: usize) -> String {
    let json = serde_json::to_vec(sol).unwrap_or_default();
    format!("{}:{workloads}", kg_contract::io::sha256_hex(&json))
}

/// At most this many candidate processes are started ahead of time: one for each pair whose
/// evaluation fits into a candidate's start (1-4 s on an H200 host against 0.5-1.5 s for a
/// reference pair of 2 workloads).
const MAX_PRESTARTED: usize = 5;

/// How many candidate processes start ahead of time: [`MAX_PRESTARTED`], fewer on a host of
/// under 16 cores (a quarter of them, at least one).
fn prestart_depth() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    (cores / 4).clamp(1, MAX_PRESTARTED)
}

/// The layers without which a candidate could reach another candidate process running beside
/// it (see it, signal or trace it, change the scripts it imports).
const PRESTART_NEEDS: [kg_contract::Layer; 2] = [
    kg_contract::Layer::PidNamespace,
    kg_contract::Layer::ReadOnlyFilesystem,
];

/// The layers of [`PRESTART_NEEDS`] that `report` shows missing, joined for a message (`None`
/// when candidates may run side by side).
pub(crate) fn missing_beside(report: &kg_contract::IsolationReport) -> Option<String> {
    let missing: Vec<&str> = report
        .missing()
        .into_iter()
        .filter(|l| PRESTART_NEEDS.contains(l))
        .map(|l| l.as_str())
        .collect();
    (!missing.is_empty()).then(|| missing.join(", "))
}

/// One workload's transfer directories.
struct Transfer {
    /// Written by the judge, read by the candidate.
    inputs: PathBuf,
    /// Written by the candidate, read by the judge.
    outputs: PathBuf,
}

/// How long the parent waits for a pool descriptor the candidate says it sent (it sends it
/// before replying, so it is there at once unless the candidate lied).
const FD_WAIT: Duration = Duration::from_secs(5);

struct Outcome {
    status: Status,
    log: String,
    correctness: Option<Correctness>,
    performance: Option<Performance>,
    /// Set when this outcome may be the harness's doing rather than the candidate's: the
    /// workload is evaluated once more before anything is recorded.
    retry: Option<RetryReason>,
}

impl Outcome {
    fn fail(status: Status, log: impl Into<String>) -> Self {
        Outcome {
            status,
            log: log.into(),
            correctness: None,
            performance: None,
            retry: None,
        }
    }

    /// This outcome, marked as one to evaluate again ([`Outcome::retry`]).
    fn retry_for(mut self, reason: RetryReason) -> Self {
        self.retry = Some(reason);
        self
    }
}

/// The per-round replies (or results) a batch request's reply carries under `key`.
fn replies_of(v: &Value, key: &str) -> Vec<Value> {
    v.get(key)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The outcome for a batch request answered for `got` of its `want` rounds (`who_did`: "the
/// judge prepared"), or None when every round was answered.
fn short_batch(status: Status, who_did: &str, got: usize, want: usize) -> Option<Outcome> {
    (got != want).then(|| Outcome::fail(status, format!("{who_did} {got} of {want} round(s)")))
}

/// Byte budget of one batch of correctness rounds: each round counts its inputs and twice its
/// outputs (the judge keeps the reference's while the candidate hands over its own).
const ROUND_BATCH_BYTES: u64 = 256 << 20;

/// How many correctness rounds go in one batch: as many as fit [`ROUND_BATCH_BYTES`], at least one.
fn rounds_per_batch(problem: &Problem, w: &LoadedWorkload) -> u32 {
    let tensor_bytes = |specs: &IndexMap<String, kg_contract::definition::TensorSpec>,
                        shapes: &kg_contract::shape::Shapes| {
        specs
            .iter()
            .map(|(name, spec)| {
                let numel = shapes
                    .get(name)
                    .cloned()
                    .flatten()
                    .map_or(1, |s| s.iter().map(|&d| d.max(0) as u64).product::<u64>());
                spec.dtype.bytes_for(numel)
            })
            .sum::<u64>()
    };
    let d = &problem.definition;
    rounds_fitting(
        tensor_bytes(&d.inputs, &w.resolved.inputs)
            + 2 * tensor_bytes(&d.outputs, &w.resolved.outputs),
    )
}

/// Rounds of `round_bytes` each that fit [`ROUND_BATCH_BYTES`], at least one.
fn rounds_fitting(round_bytes: u64) -> u32 {
    u32::try_from(ROUND_BATCH_BYTES / round_bytes.max(1))
        .unwrap_or(u32::MAX)
        .max(1)
}

fn reply_ok(v: &Value) -> bool {
    v.get("result").and_then(Value::as_str) == Some("ok")
}

fn reply_kind(v: &Value) -> &str {
    v.get("kind").and_then(Value::as_str).unwrap_or("unknown")
}

fn reply_message(v: &Value) -> String {
    let mut s = v
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("no message")
        .to_string();
    if let Some(tb) = v.get("traceback").and_then(Value::as_str) {
        s.push('\n');
        s.push_str(tail(tb, 8000));
    }
    s
}

fn now_iso() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

fn host_name() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

fn shapes_json(shapes: &kg_contract::shape::Shapes) -> Value {
    let mut m = serde_json::Map::new();
    for (k, v) in shapes {
        m.insert(k.clone(), json!(v));
    }
    Value::Object(m)
}

impl Session {
    /// Creates a lane. The judge starts on first use.
    pub fn new(
        python: Interpreter,
        opts: EvalOptions,
        cancel: CancelToken,
    ) -> Result<Session, ExecError> {
        let dir = crate::runtime::session_dir()?;
        // Processes a candidate detaches are re-parented to us, not to init, so the
        // end-of-candidate sweep (process::Worker::kill) can still find and reap them.
        if !crate::process::become_child_subreaper() {
            tracing::warn!(
                "failed to become a child subreaper: processes a candidate detaches are found by their environment tag only"
            );
        }
        Ok(Session {
            python,
            opts,
            cancel,
            dir,
            judge: None,
            judge_env: None,
            judge_setup_for: None,
            counter: 0,
            faults_injected: 0,
            pool_opened: None,
            pool_off: None,
            outputs_via: String::new(),
            interpreter_paths: None,
            candidate_root: None,
            candidate_inputs: None,
            prestarted: Vec::new(),
            next: None,
            prestart_off: None,
            builds: std::collections::HashMap::new(),
        })
    }

    /// The options in effect.
    pub fn options(&self) -> &EvalOptions {
        &self.opts
    }

    /// The judge's view of the device and libraries (after the judge started).
    pub fn environment(&self) -> Option<&Environment> {
        self.judge_env.as_ref()
    }

    fn worker_env(&self) -> Vec<(String, String)> {
        let mut env = self.opts.worker_env.clone();
        if self.opts.device.is_cpu() {
            env.push(("TRITON_INTERPRET".to_string(), "1".to_string()));
            // glibc adapts its mmap and trim thresholds to a process's history, so the
            // long-lived judge reused warm heap memory for outputs while a fresh candidate
            // faulted in new pages on every call (reference-vs-itself speedups of 0.2-0.5x).
            // Fixed thresholds make both processes allocate alike from the first call.
            for (k, v) in GLIBC_MALLOC_ENV {
                env.push((k.to_string(), v.to_string()));
            }
        }
        env
    }

    /// How workers start this interpreter (asked once per session).
    fn interpreter_paths(&mut self) -> Result<crate::python::InterpreterPaths, ExecError> {
        if let Some(p) = &self.interpreter_paths {
            return Ok(p.clone());
        }
        let p = crate::python::sandbox_paths(&self.python.path)?;
        for f in &p.startup_code {
            tracing::info!(file = %f.display(), "start-up code in the interpreter's site directories is not run in kernelgate's workers (-S)");
        }
        self.interpreter_paths = Some(p.clone());
        Ok(p)
    }

    /// A fresh directory of worker scripts for one worker (`scripts::install`).
    fn fresh_scripts(&mut self, what: &str) -> Result<PathBuf, ExecError> {
        self.counter += 1;
        let d = self.dir.path().join(format!("{what}-{}", self.counter));
        scripts::install(&d).map_err(|source| ExecError::Io {
            what: format!("write the worker scripts into `{}`", d.display()),
            source,
        })?;
        Ok(d)
    }

    fn spec(
        &self,
        paths: &crate::python::InterpreterPaths,
        label: &str,
        script: &Path,
        cwd: &Path,
    ) -> WorkerSpec {
        WorkerSpec {
            allow_listed_env: label == "candidate",
            python: paths.executable.clone(),
            sys_path: Some(paths.sys_path.clone()),
            script: script.to_path_buf(),
            cwd: cwd.to_path_buf(),
            env: self.worker_env(),
            // The candidate's replies grow with the timed calls and rounds asked for; the
            // judge is trusted (no candidate reaches its channel) and gets the safety net.
            bounds: if label == "candidate" {
                Bounds::for_run(self.opts.iterations, self.opts.rounds)
            } else {
                Bounds::TRUSTED
            },
            label: label.to_string(),
            sandbox: None,
        }
    }

    fn judge_error(&self, message: String) -> ExecError {
        ExecError::Judge {
            python: self.python.path.clone(),
            message,
        }
    }

    /// Starts the judge if it is not running, and loads `problem`'s reference into it.
    fn ensure_judge(&mut self, problem: &Problem) -> Result<Result<(), String>, ExecError> {
        if self.judge.as_ref().is_some_and(Worker::is_dead) {
            if let Some(j) = self.judge.take() {
                j.shutdown();
            }
            self.judge_setup_for = None;
        }
        if self.judge.is_none() {
            // Scripts written for this judge alone: a candidate that ran before (and, without a
            // mount namespace, could write) never touched them.
            let scripts = self.fresh_scripts("judge-py")?;
            let paths = self.interpreter_paths()?;
            let spec = self.spec(&paths, "judge", &scripts.join("judge.py"), self.dir.path());
            let mut w = match Worker::spawn(&spec, Duration::from_secs(300), &self.cancel) {
                Ok(w) => w,
                Err(WorkerError::Cancelled) => return Err(ExecError::Cancelled),
                Err(e) => return Err(self.judge_error(e.to_string())),
            };
            let deadline = Instant::now() + Duration::from_secs(300);
            let hello = json!({"op": "hello", "device": self.opts.device.worker_name(), "seed": self.opts.seed,
                "cupti": self.opts.timing_method() == TimingMethod::Cupti});
            let r = match w.request(&hello, deadline, &self.cancel) {
                Ok(r) => r,
                Err(WorkerError::Cancelled) => return Err(ExecError::Cancelled),
                Err(e) => {
                    let log = w.take_log();
                    return Err(self.judge_error(format!("{e}\n{}", tail(&log, 4000))));
                }
            };
            if !reply_ok(&r) {
                return Err(self.judge_error(reply_message(&r)));
            }
            let mut env: Environment = r
                .get("environment")
                .cloned()
                .and_then(|v| serde_json::from_value(v).ok())
                .unwrap_or_default();
            env.host = host_name();
            env.kernelgate_version = Some(env!("CARGO_PKG_VERSION").to_string());
            self.judge_env = Some(env);
            self.judge = Some(w);
            self.judge_setup_for = None;
        }
        let key = format!(
            "{}\0{}",
            problem.definition_path.display(),
            kg_contract::io::sha256_hex(problem.definition.reference.as_bytes())
        );
        if self.judge_setup_for.as_deref() == Some(key.as_str()) {
            return Ok(Ok(()));
        }
        let def = serde_json::to_value(&problem.definition).unwrap_or(Value::Null);
        let dir = problem.dir.canonicalize().unwrap_or(problem.dir.clone());
        let req = json!({"op": "setup", "definition": def, "work_dir": self.dir.path(), "problem_dir": dir});
        let deadline = Instant::now() + self.opts.compile_timeout;
        let Some(j) = self.judge.as_mut() else {
            return Err(self.judge_error("judge not running".into()));
        };
        match j.request(&req, deadline, &self.cancel) {
            Ok(r) if reply_ok(&r) => {
                self.judge_setup_for = Some(key);
                Ok(Ok(()))
            }
            Ok(r) => Ok(Err(reply_message(&r))),
            Err(WorkerError::Cancelled) => Err(ExecError::Cancelled),
            Err(e) => {
                let log = j.take_log();
                Ok(Err(format!(
                    "the judge failed while loading the reference: {e}\n{log}"
                )))
            }
        }
    }

    fn judge_request(&mut self, req: &Value, deadline: Instant) -> Result<Value, JudgeFail> {
        let Some(j) = self.judge.as_mut() else {
            return Err(JudgeFail::Other("judge not running".into()));
        };
        let r = Self::ask_judge(j, req, deadline, &self.cancel);
        self.judge_reply(r)
    }

    /// [`Session::judge_request`] for the reference's timing: also returns how many timed-set
    /// asides the judge made (one per sealed set it opened, in order), or why they were out of
    /// order.
    fn judge_timing_request(
        &mut self,
        req: &Value,
        deadline: Instant,
    ) -> (Result<Value, JudgeFail>, Result<usize, String>) {
        let Some(j) = self.judge.as_mut() else {
            return (Err(JudgeFail::Other("judge not running".into())), Ok(0));
        };
        let mut served = 0usize;
        let mut order = None;
        let mut count = |a: &Aside| {
            let Aside::TimedKey { index } = *a;
            if index != served as u64 {
                order.get_or_insert(format!(
                    "the judge opened timed set {index} when set {served} was due"
                ));
            }
            served += 1;
            AsideReply::Ack
        };
        let r = j.request_with(req, deadline, &self.cancel, &mut count);
        let keys = order.map_or(Ok(served), Err);
        (self.judge_reply(r), keys)
    }

    /// [`Session::judge_request`] on another thread while `other` runs on this one (the
    /// candidate's half of a correctness batch), so the two workers' untimed work overlaps.
    /// Returns the judge's reply, how long the judge took, and what `other` returned.
    fn judge_request_during<T>(
        &mut self,
        req: &Value,
        deadline: Instant,
        other: impl FnOnce(&Self) -> T,
    ) -> (Result<Value, JudgeFail>, Duration, T) {
        let (mut rs, t) = self.judge_requests_during(std::slice::from_ref(req), deadline, other);
        let (r, took) = rs.pop().unwrap_or((
            Err(JudgeFail::Other("the judge was not asked".into())),
            Duration::ZERO,
        ));
        (r, took, t)
    }

    /// [`Session::judge_request_during`] for several requests, asked in order; each reply
    /// comes with how long the judge took over it. After a reply that is not a reply (the
    /// judge failed), the later requests are not asked and get the same failure.
    fn judge_requests_during<T>(
        &mut self,
        reqs: &[Value],
        deadline: Instant,
        other: impl FnOnce(&Self) -> T,
    ) -> (Vec<JudgeTook>, T) {
        let Some(mut j) = self.judge.take() else {
            let t = other(self);
            let none = || {
                (
                    Err(JudgeFail::Other("judge not running".into())),
                    Duration::ZERO,
                )
            };
            return (reqs.iter().map(|_| none()).collect(), t);
        };
        let cancel = self.cancel.clone();
        let (rs, t) = std::thread::scope(|s| {
            let h = s.spawn(|| {
                let mut out = Vec::new();
                for req in reqs {
                    let t0 = Instant::now();
                    let r = Self::ask_judge(&mut j, req, deadline, &cancel);
                    let failed = r.is_err();
                    out.push((r, t0.elapsed()));
                    if failed {
                        break;
                    }
                }
                out
            });
            let t = other(self);
            (h.join().ok(), t)
        });
        self.judge = Some(j);
        let mut out = Vec::new();
        let mut failure = JudgeFail::Other("the thread waiting on the judge panicked".into());
        for (r, took) in rs.unwrap_or_default() {
            let r = self.judge_reply(r);
            match &r {
                Err(JudgeFail::Other(m)) => failure = JudgeFail::Other(m.clone()),
                Err(JudgeFail::Cancelled) => failure = JudgeFail::Cancelled,
                Ok(_) => {}
            }
            out.push((r, took));
        }
        while out.len() < reqs.len() {
            let f = match &failure {
                JudgeFail::Other(m) => JudgeFail::Other(m.clone()),
                JudgeFail::Cancelled => JudgeFail::Cancelled,
            };
            out.push((Err(f), Duration::ZERO));
        }
        (out, t)
    }

    fn ask_judge(
        j: &mut Worker,
        req: &Value,
        deadline: Instant,
        cancel: &CancelToken,
    ) -> Result<Value, WorkerError> {
        // The judge's only aside: the reference's timed calls make the same per-call round trip
        // to us as the candidate's key requests, so both sides are timed alike.
        let mut echo = |_: &Aside| AsideReply::Ack;
        j.request_with(req, deadline, cancel, &mut echo)
    }

    fn judge_reply(&mut self, r: Result<Value, WorkerError>) -> Result<Value, JudgeFail> {
        match r {
            Ok(v) => Ok(v),
            Err(WorkerError::Cancelled) => Err(JudgeFail::Cancelled),
            Err(e) => {
                let log = self
                    .judge
                    .as_ref()
                    .map(Worker::take_log)
                    .unwrap_or_default();
                self.judge_setup_for = None;
                Err(JudgeFail::Other(format!("judge worker: {e}\n{log}")))
            }
        }
    }

    fn environment_now(&mut self) -> Environment {
        let mut env = self.judge_env.clone().unwrap_or_default();
        if !self.opts.device.is_cpu() {
            let deadline = Instant::now() + Duration::from_secs(10);
            if let Ok(r) = self.judge_request(&json!({"op": "clocks"}), deadline)
                && let Some(c) = r.get("clocks").cloned()
                && let Ok(c) = serde_json::from_value::<ClockState>(c)
            {
                env.clocks = Some(c);
            }
        }
        if let Some(claim) = &self.opts.gpu_claim {
            // The claim, not the worker, knows whether clocks were locked for the run.
            let clocks = env.clocks.get_or_insert_with(ClockState::default);
            clocks.locked = claim.clocks.locked;
            clocks.reason.clone_from(&claim.clocks.reason);
            env.gpu_claim = Some(claim.clone());
        }
        env
    }

    /// Runs the reference of `problem` on one workload (round 0, with the constant-output
    /// check) and reports what is wrong with it, if anything.
    pub fn check_reference(
        &mut self,
        problem: &Problem,
        w: &LoadedWorkload,
    ) -> Result<Option<String>, ExecError> {
        if let Err(msg) = self.ensure_judge(problem)? {
            return Ok(Some(msg));
        }
        let _l2 =
            crate::l2::hold_for_workload(&self.opts, &problem.definition.name, &w.workload.uuid)?;
        let xfer = self.fresh_dir("validate")?;
        let req = self.prepare_request(problem, w, 0, &xfer.join("in_0.pt"));
        let deadline = Instant::now() + self.opts.timeout;
        let r = match self.judge_request(&req, deadline) {
            Ok(r) => r,
            Err(JudgeFail::Cancelled) => return Err(ExecError::Cancelled),
            Err(JudgeFail::Other(m)) => return Ok(Some(m)),
        };
        let _ = std::fs::remove_dir_all(&xfer);
        Ok((!reply_ok(&r)).then(|| reply_message(&r)))
    }

    /// Fresh transfer directories for one workload: the judge writes inputs into one the
    /// candidate can only read (never into a directory it controls, where a planted symlink
    /// would redirect the root judge's write), and the candidate writes outputs into one in
    /// its own scratch, handed to its uid.
    fn transfer_dir(&mut self, cand: &Worker) -> Result<Transfer, ExecError> {
        self.counter += 1;
        let name = format!("xfer-{}", self.counter);
        let base = self.dir.path().to_path_buf();
        let inputs = self
            .candidate_inputs
            .clone()
            .unwrap_or_else(|| base.clone())
            .join(&name);
        let outputs = self.candidate_root.clone().unwrap_or(base).join(&name);
        for d in [&inputs, &outputs] {
            std::fs::create_dir_all(d).map_err(|source| ExecError::Io {
                what: format!("create `{}`", d.display()),
                source,
            })?;
        }
        if let Some((uid, gid)) = cand.sandbox_uid {
            std::os::unix::fs::chown(&outputs, Some(uid), Some(gid)).map_err(|source| {
                ExecError::Io {
                    what: format!("hand `{}` to the sandbox uid {uid}", outputs.display()),
                    source,
                }
            })?;
        }
        Ok(Transfer { inputs, outputs })
    }

    fn fresh_dir(&mut self, what: &str) -> Result<PathBuf, ExecError> {
        self.counter += 1;
        let d = self.dir.path().join(format!("{what}-{}", self.counter));
        std::fs::create_dir_all(&d).map_err(|source| ExecError::Io {
            what: format!("create `{}`", d.display()),
            source,
        })?;
        Ok(d)
    }

    fn prepare_request(
        &self,
        problem: &Problem,
        w: &LoadedWorkload,
        round: u32,
        path: &Path,
    ) -> Value {
        let dir = problem.dir.canonicalize().unwrap_or(problem.dir.clone());
        json!({
            "op": "prepare",
            "workload": w.workload,
            "round": round,
            "path": path,
            "input_shapes": shapes_json(&w.resolved.inputs),
            "output_shapes": shapes_json(&w.resolved.outputs),
            "axes": w.resolved.axes,
            "problem_dir": dir,
            "check_constant": round == 0,
        })
    }

    /// What the candidate draws each of the workload's `rounds` correctness rounds from, as the
    /// judge announces it (None when an input travels as a file, or the judge could not say:
    /// the rounds then go as files, one batch after the other).
    fn round_draws(
        &mut self,
        w: &LoadedWorkload,
        rounds: u32,
        deadline: Instant,
    ) -> Result<Option<Vec<Value>>, ExecError> {
        let req = json!({"op": "draws", "workload": w.workload,
                         "input_shapes": shapes_json(&w.resolved.inputs), "axes": w.resolved.axes,
                         "rounds": (0..rounds).collect::<Vec<u32>>()});
        match self.judge_request(&req, deadline) {
            Ok(r) => Ok(r
                .get("draws")
                .and_then(Value::as_array)
                .filter(|d| d.len() == rounds as usize)
                .cloned()),
            Err(JudgeFail::Cancelled) => Err(ExecError::Cancelled),
            Err(JudgeFail::Other(_)) => Ok(None),
        }
    }

    fn output_specs(problem: &Problem, w: &LoadedWorkload) -> Value {
        let v: Vec<Value> = problem
            .definition
            .outputs
            .iter()
            .map(|(n, spec)| {
                json!({
                    "name": n,
                    "dtype": spec.dtype.name(),
                    "shape": w.resolved.outputs.get(n).cloned().flatten(),
                })
            })
            .collect();
        Value::Array(v)
    }

    /// `sol`'s own Triton and C++-extension cache directories: a candidate cannot plant
    /// compiled kernels or extensions another solution would load.
    fn solution_caches(&self, sol: &Solution) -> (PathBuf, PathBuf) {
        let key = serde_json::to_vec(sol).unwrap_or_default();
        let key = &kg_contract::io::sha256_hex(&key)[..16];
        (
            self.opts.cache_dir.join("triton").join(key),
            self.opts.cache_dir.join("torch-extensions-v1").join(key),
        )
    }

    /// The candidate's confinement: its filesystem view (the interpreter and worker scripts
    /// readable, `root` and its own caches writable, everything else read-only, a private
    /// `/tmp`), private HOME, and limits.
    fn candidate_spec(
        &mut self,
        sol: &Solution,
        workloads: usize,
        root: &Path,
        inputs: &Path,
    ) -> Result<WorkerSpec, ExecError> {
        let paths = self.interpreter_paths()?;
        let scripts = self.fresh_scripts("cand-py")?;
        let mut spec = self.spec(&paths, "candidate", &scripts.join("candidate.py"), root);
        let home = root.join("home");
        std::fs::create_dir_all(&home).map_err(|source| ExecError::Io {
            what: format!("create `{}`", home.display()),
            source,
        })?;
        spec.env.push(("HOME".into(), home.display().to_string()));
        // A build (ninja, the compiler) finds the interpreter's own tools, as in an activated
        // venv.
        let path = crate::toolchain::build_path(&self.python.path, std::env::var_os("PATH"));
        spec.env
            .push(("PATH".into(), path.to_string_lossy().into_owned()));
        let (triton, ext) = self.solution_caches(sol);
        for d in [&triton, &ext] {
            std::fs::create_dir_all(d).map_err(|source| ExecError::Io {
                what: format!("create `{}`", d.display()),
                source,
            })?;
        }
        spec.env
            .push(("TRITON_CACHE_DIR".into(), triton.display().to_string()));
        if !self.opts.sandbox {
            spec.env
                .push(("TMPDIR".into(), root.join("tmp").display().to_string()));
            std::fs::create_dir_all(root.join("tmp")).map_err(|source| ExecError::Io {
                what: format!("create `{}`", root.join("tmp").display()),
                source,
            })?;
            return Ok(spec);
        }
        spec.env.push(("TMPDIR".into(), "/tmp".into()));
        // A uid with no account: libraries that ask who we are read these first.
        for k in ["USER", "LOGNAME"] {
            spec.env.push((k.into(), "kg-candidate".into()));
        }
        let mut read = paths.read;
        read.push(scripts);
        read.push(inputs.to_path_buf());
        let budget = self.opts.compile_timeout.as_secs()
            + self.opts.timeout.as_secs().saturating_mul(workloads as u64);
        let view = crate::sandbox::View {
            read,
            write: vec![root.to_path_buf(), triton, ext],
            cwd: Some(root.to_path_buf()),
            ..Default::default()
        };
        let mut sb = Sandbox::candidate(view, budget, self.opts.memory_bytes);
        // No GPU runtime in a CPU worker: nothing legitimate there needs shared anonymous
        // memory, so RLIMIT_DATA becomes a real bound.
        sb.refuse_shared_memory = self.opts.device.is_cpu();
        spec.sandbox = Some(sb);
        Ok(spec)
    }

    /// Starts a candidate process for `sol` in fresh scratch and input directories, without
    /// waiting for it.
    fn launch_candidate(
        &mut self,
        sol: &Solution,
        workloads: usize,
        during: CandidateLaunch,
    ) -> Result<Result<Prestarted, WorkerError>, ExecError> {
        let root = self.fresh_dir("cand")?;
        // The judge's side of the transfer: readable, never writable, by the candidate.
        let inputs = self.fresh_dir("cand-in")?;
        let src = root.join("src");
        std::fs::create_dir_all(&src).map_err(|source| ExecError::Io {
            what: format!("create `{}`", src.display()),
            source,
        })?;
        let spec = self.candidate_spec(sol, workloads, &root, &inputs)?;
        Ok(Worker::launch(&spec).map(|launching| Prestarted {
            key: prestart_key(sol, workloads),
            during,
            root,
            inputs,
            launching,
        }))
    }

    /// Starts a candidate process for `sol` now, kept for when it is asked for (a failure to
    /// start is reported by [`Session::start_candidate`], which then tries again).
    fn prestart(
        &mut self,
        sol: &Solution,
        workloads: usize,
        during: CandidateLaunch,
    ) -> Result<(), ExecError> {
        match self.launch_candidate(sol, workloads, during)? {
            Ok(p) => self.prestarted.push(p),
            Err(e) => {
                tracing::debug!(solution = %sol.name, "no candidate started ahead of time: {e}")
            }
        }
        Ok(())
    }

    /// Names the evaluations due after the next one, in order (solution and number of
    /// workloads), so that the first few of them (up to 5, fewer on a small host) get their
    /// candidate process started (interpreter and `import torch`, none of their code) while
    /// the next one is evaluated, and are ready when asked for. Only where each candidate is confined to its
    /// own PID namespace and a read-only view (so the running one cannot reach a starting
    /// one), and not on a CPU device unless [`Prestart::On`]. A guess that turns out wrong
    /// costs a killed process, never a verdict.
    pub fn prestart_next(&mut self, upcoming: &[(&Solution, usize)]) {
        self.next = Some(
            upcoming
                .iter()
                .take(prestart_depth())
                .map(|(s, n)| ((*s).clone(), *n))
                .collect(),
        );
    }

    /// Why no candidate may start beside `current` (None: one may).
    fn prestart_refusal(&self, current: &Worker) -> Option<String> {
        if let Some(why) = &self.prestart_off {
            return Some(why.clone());
        }
        if self.opts.prestart == Prestart::Off {
            return Some("--prestart off".into());
        }
        if !self.opts.sandbox {
            return Some("candidates run without the sandbox (--no-sandbox)".into());
        }
        if self.opts.device.is_cpu() && self.opts.prestart == Prestart::Auto {
            return Some(
                "a CPU device's cores run the timed workload (--prestart on starts them anyway)"
                    .into(),
            );
        }
        let report = current.isolation.clone().unwrap_or_default();
        missing_beside(&report).map(|missing| {
            format!(
                "a candidate ran without {missing}: it could reach a candidate process started beside it"
            )
        })
    }

    /// Once `current` is ready: makes the processes started ahead of time those named by
    /// [`Session::prestart_next`] (killing any no longer due, starting any missing), or, where
    /// that is refused, ends every one.
    fn launch_next(&mut self, current: &Worker) -> Result<(), ExecError> {
        if let Some(why) = self.prestart_refusal(current) {
            self.next = None;
            if !self.prestarted.is_empty() || self.prestart_off.is_none() {
                tracing::info!("candidates are not started ahead of time: {why}");
            }
            self.prestarted.clear();
            self.prestart_off = Some(why);
            return Ok(());
        }
        let Some(wanted) = self.next.take() else {
            return Ok(());
        };
        let mut have = std::mem::take(&mut self.prestarted);
        let mut missing = Vec::new();
        for (sol, n) in wanted {
            let key = prestart_key(&sol, n);
            match have.iter().position(|p| p.key == key) {
                Some(i) => self.prestarted.push(have.remove(i)),
                None => missing.push((sol, n)),
            }
        }
        // Started for evaluations no longer due: killed with their process groups.
        drop(have);
        for (sol, n) in missing {
            self.prestart(&sol, n, CandidateLaunch::EarlierEvaluation)?;
        }
        Ok(())
    }

    /// A ready candidate process with `sol` loaded: the one started ahead of time for it if
    /// there is one, else a fresh one; with what its start cost.
    fn start_candidate(
        &mut self,
        sol: &Solution,
        workloads: usize,
    ) -> Result<Result<StartedCandidate, (Status, String)>, ExecError> {
        let asked = Instant::now();
        // A compiled solution's module comes from kernelgate's builder; its failure is the
        // solution's compile error, and no candidate process is needed for it.
        let build = if crate::toolchain::is_compiled(sol) {
            match self.take_build(sol)? {
                (Ok(b), waited) => Some((b, waited)),
                (Err(f), _) => return Ok(Err(f)),
            }
        } else {
            None
        };
        let key = prestart_key(sol, workloads);
        let taken = self
            .prestarted
            .iter()
            .position(|p| p.key == key)
            .map(|i| self.prestarted.remove(i));
        let p = match taken {
            Some(p) => p,
            None => match self.launch_candidate(sol, workloads, CandidateLaunch::WhenAsked)? {
                Ok(p) => p,
                Err(e) => {
                    return Ok(Err((
                        Status::RuntimeError,
                        format!("failed to start the candidate worker: {e}"),
                    )));
                }
            },
        };
        let Prestarted {
            root,
            inputs,
            launching,
            during,
            ..
        } = p;
        let src = root.join("src");
        let placed = match &build {
            Some((b, waited)) => match self.place_module(b, *waited, &root)? {
                Ok(p) => Some(p),
                Err(why) => return Ok(Err((Status::CompileError, why))),
            },
            None => None,
        };
        self.candidate_root = Some(root);
        self.candidate_inputs = Some(inputs);
        let launched = launching.started();
        let mut w = match launching.ready(self.opts.compile_timeout, &self.cancel) {
            Ok(w) => w,
            Err(WorkerError::Cancelled) => return Err(ExecError::Cancelled),
            Err(e) => {
                return Ok(Err((
                    Status::RuntimeError,
                    format!("failed to start the candidate worker: {e}"),
                )));
            }
        };
        let ready = Instant::now();
        self.launch_next(&w)?;
        let deadline = asked + self.opts.compile_timeout;
        let hello = json!({"op": "hello", "device": self.opts.device.worker_name(),
            "cupti": self.opts.timing_method() == TimingMethod::Cupti});
        let mut load = json!({
            "op": "load",
            "solution": sol,
            "source_dir": src,
            "cache_dir": self.solution_caches(sol).1,
        });
        if let Some((path, _)) = &placed {
            load["prebuilt"] = json!({"path": path, "name": build.as_ref().map(|(b, _)| b.hit.entry.name.clone())});
        }
        for req in [hello, load] {
            match w.request(&req, deadline, &self.cancel) {
                Ok(r) if reply_ok(&r) => {}
                Ok(r) => {
                    let log = w.take_log();
                    w.kill();
                    return Ok(Err((
                        Status::CompileError,
                        format!("{}\n{log}", reply_message(&r)),
                    )));
                }
                Err(WorkerError::Cancelled) => return Err(ExecError::Cancelled),
                Err(e) => {
                    let log = w.take_log();
                    let what = match e {
                        WorkerError::Timeout { .. } => format!(
                            "building/importing the solution exceeded --compile-timeout ({:.0} s)",
                            self.opts.compile_timeout.as_secs_f64()
                        ),
                        other => format!("the candidate worker failed while importing: {other}"),
                    };
                    w.kill();
                    return Ok(Err((Status::CompileError, format!("{what}\n{log}"))));
                }
            }
        }
        let start = CandidateStart {
            ready_s: ready.duration_since(asked).as_secs_f64(),
            process_s: ready.duration_since(launched).as_secs_f64(),
            load_s: ready.elapsed().as_secs_f64(),
            started: during,
        };
        Ok(Ok(StartedCandidate {
            worker: w,
            start,
            build: placed.map(|(_, r)| r),
        }))
    }

    /// What the sandbox holds on a candidate process here: starts one for `sol` that runs only
    /// kernelgate's worker script (the interpreter and `import torch`, none of the solution's
    /// code), reads its layers from outside, and ends it. Several lanes run candidates side by
    /// side only where this shows each is confined to its own PID namespace and read-only view.
    pub fn probe_isolation(
        &mut self,
        sol: &Solution,
    ) -> Result<kg_contract::IsolationReport, ExecError> {
        let p = match self.launch_candidate(sol, 1, CandidateLaunch::WhenAsked)? {
            Ok(p) => p,
            Err(e) => {
                return Err(ExecError::Io {
                    what: "start a candidate process to check its sandbox".into(),
                    source: std::io::Error::other(e.to_string()),
                });
            }
        };
        let mut worker = match p.launching.ready(self.opts.compile_timeout, &self.cancel) {
            Ok(w) => w,
            Err(WorkerError::Cancelled) => return Err(ExecError::Cancelled),
            Err(e) => {
                return Err(ExecError::Io {
                    what: "start a candidate process to check its sandbox".into(),
                    source: std::io::Error::other(e.to_string()),
                });
            }
        };
        let report = worker.isolation.clone().unwrap_or_default();
        worker.kill();
        Ok(report)
    }

    /// Whether `sol`'s language can be built and run on this session's device and host
    /// ([`crate::toolchain::missing_for`]); [`ExecError::ToolchainMissing`] names what is not.
    pub fn check_toolchain(&self, sol: &Solution) -> Result<(), ExecError> {
        toolchain_check(sol, &self.opts.device, &self.python.path)
    }

    /// Evaluates `sol` on the given workloads of `problem`, calling `on_event` as it goes.
    /// See [`Session::evaluate_sealed`] for the traces to write down and the problem's hash.
    pub fn evaluate(
        &mut self,
        problem: &Problem,
        sol: &Solution,
        workloads: &[&LoadedWorkload],
        on_event: &mut dyn FnMut(Event),
    ) -> Result<Vec<Trace>, ExecError> {
        let e = self.evaluate_sealed(problem, None, sol, workloads, on_event)?;
        match e.error {
            Some(err) => Err(err),
            None => Ok(e.traces),
        }
    }

    /// Evaluates `sol` like [`Session::evaluate`] and returns only once the candidate is gone
    /// (shut down, or killed with its process group when the evaluation stopped early) and the
    /// problem directory was hashed again after it: these traces are what to write down.
    ///
    /// The problem directory is hashed (content, [`kg_contract::tree`]) before the candidate
    /// starts, after each workload (a change is that workload's REWARD_HACK) and after the
    /// candidate is gone (a change then, e.g. from an exit handler, makes every trace of this
    /// evaluation REWARD_HACK, naming the files). `pinned`: the tree the caller loaded the
    /// problem from; a directory that no longer matches it is [`ExecError::ProblemChanged`]
    /// before anything runs. `Err` only when nothing ran; an evaluation stopped part way
    /// (cancelled, the judge lost) returns the traces it finished with the reason in
    /// [`Evaluated::error`].
    pub fn evaluate_sealed(
        &mut self,
        problem: &Problem,
        pinned: Option<&integrity::DirSnapshot>,
        sol: &Solution,
        workloads: &[&LoadedWorkload],
        on_event: &mut dyn FnMut(Event),
    ) -> Result<Evaluated, ExecError> {
        check_languages(sol)?;
        self.check_toolchain(sol)?;
        if sol.definition != problem.definition.name {
            return Err(ExecError::WrongDefinition {
                solution: sol.name.clone(),
                for_def: sol.definition.clone(),
                def: problem.definition.name.clone(),
            });
        }
        let before = integrity::snapshot_dir(&problem.dir);
        let problem_tree_sha256 = before.sha256().map_err(ExecError::ProblemTree)?;
        if let Some(p) = pinned {
            let c = p.changes(&before);
            if !c.is_empty() {
                let mut files: Vec<String> = c
                    .changed
                    .iter()
                    .chain(&c.added)
                    .map(|f| f.display().to_string())
                    .collect();
                files.extend(c.incomplete);
                return Err(ExecError::ProblemChanged {
                    dir: problem.dir.clone(),
                    files: files.join(", "),
                });
            }
        }
        let mut finished = Vec::new();
        let result = self.evaluate_in(problem, &before, sol, workloads, &mut |e| {
            if let Event::WorkloadFinished(t) = &e {
                finished.push((**t).clone());
            }
            on_event(e);
        });
        // A process started for this evaluation and never taken (the reference failed to load).
        let own = prestart_key(sol, workloads.len());
        self.prestarted
            .retain(|p| p.key != own || p.during != CandidateLaunch::EvaluationStart);
        // `evaluate_in` has returned: its candidate was shut down, or dropped on the way out
        // (which kills its process group and every descendant found), so nothing it ran can
        // still write; what it left in the problem directory is checked now.
        let (mut traces, error) = match result {
            Ok(t) => (t, None),
            Err(e) => (finished, Some(e)),
        };
        if let Some(msg) = problem_dir_tampering(
            &problem.dir,
            &before,
            "after its last workload was judged (e.g. from an exit handler or a thread)",
            "changed or removed (NOT restored)",
        ) {
            tracing::error!(dir = %problem.dir.display(), "{msg}");
            for t in &mut traces {
                if let Some(ev) = t.evaluation.as_mut() {
                    ev.log = bounded_log(format!("{msg}\n{}", ev.log));
                    ev.status = Status::RewardHack;
                    ev.correctness = None;
                    ev.performance = None;
                }
            }
        }
        Ok(Evaluated {
            traces,
            problem_tree_sha256,
            error,
        })
    }

    /// The evaluation loop of [`Session::evaluate_sealed`], against the snapshot `before`.
    fn evaluate_in(
        &mut self,
        problem: &Problem,
        before: &integrity::DirSnapshot,
        sol: &Solution,
        workloads: &[&LoadedWorkload],
        on_event: &mut dyn FnMut(Event),
    ) -> Result<Vec<Trace>, ExecError> {
        check_languages(sol)?;
        if sol.definition != problem.definition.name {
            return Err(ExecError::WrongDefinition {
                solution: sol.name.clone(),
                for_def: sol.definition.clone(),
                def: problem.definition.name.clone(),
            });
        }
        let mut traces = Vec::new();
        // The candidate must not write the problem directory (planted modules, changed data).
        let problem_snapshot = before;
        let mut candidate: Option<Worker> = None;
        let mut started: Option<CandidateStart> = None;
        let mut built: Option<kg_contract::BuildRecord> = None;
        let mut compile_failure: Option<(Status, String)> = None;
        let total = workloads.len();
        // The candidate's interpreter starts while the judge starts or loads the reference
        // (nothing is timed before the first workload; nothing of the candidate's runs before
        // its `load`).
        let own = prestart_key(sol, total);
        if total > 0 && !self.prestarted.iter().any(|p| p.key == own) {
            self.prestart(sol, total, CandidateLaunch::EvaluationStart)?;
        }
        for (index, w) in workloads.iter().enumerate() {
            if self.cancel.is_cancelled() {
                return Err(ExecError::Cancelled);
            }
            on_event(Event::WorkloadStarted {
                definition: problem.definition.name.clone(),
                solution: sol.name.clone(),
                uuid: w.workload.uuid.clone(),
                index,
                total,
            });
            let mut wall_s = None;
            let mut retried = None;
            let mut candidate_start = None;
            let mut build = None;
            let outcome = match self.ensure_judge(problem)? {
                Err(msg) => Outcome::fail(
                    Status::InvalidReference,
                    format!("the reference could not be loaded: {msg}"),
                ),
                Ok(()) => {
                    if let Some((st, log)) = &compile_failure {
                        Outcome::fail(*st, log.clone())
                    } else {
                        if candidate.as_ref().is_none_or(Worker::is_dead) {
                            if let Some(c) = candidate.take() {
                                c.shutdown();
                                on_event(Event::Notice(format!(
                                    "{}: starting a fresh candidate process for `{}`",
                                    problem.definition.name, sol.name
                                )));
                            }
                            match self.start_candidate(sol, total - index)? {
                                Ok(StartedCandidate {
                                    worker: mut c,
                                    start,
                                    build: b,
                                }) => {
                                    built = b;
                                    if self.opts.require_sandbox {
                                        let report = c.isolation.clone().unwrap_or_default();
                                        if !report.missing().is_empty() {
                                            c.kill();
                                            return Err(ExecError::SandboxIncomplete {
                                                missing: report.missing_detail(),
                                            });
                                        }
                                    }
                                    started = Some(start);
                                    candidate = Some(c);
                                }
                                Err(f) => compile_failure = Some(f),
                            }
                        }
                        match (&mut candidate, &compile_failure) {
                            (Some(c), None) => {
                                let t = Instant::now();
                                let mut o =
                                    self.run_workload_retrying(problem, w, c, &mut retried)?;
                                let wall = t.elapsed().as_secs_f64();
                                wall_s = Some(wall);
                                if !o.log.is_empty() && !o.log.ends_with('\n') {
                                    o.log.push('\n');
                                }
                                o.log
                                    .push_str(&format!("harness: workload wall {wall:.3} s\n"));
                                let i = c.isolation.clone().unwrap_or_default();
                                o.log
                                    .push_str(&format!("harness: candidate {}\n", i.summary()));
                                if let Some(st) = started.take() {
                                    o.log.push_str(&format!(
                                        "harness: candidate ready {:.3} s after it was asked for ({}; its process found ready {:.3} s after it started), solution loaded in {:.3} s; first workload evaluated {:.3} s after the candidate process started\n",
                                        st.ready_s,
                                        match st.started {
                                            CandidateLaunch::WhenAsked => "started when asked for",
                                            CandidateLaunch::EvaluationStart =>
                                                "started as its evaluation began",
                                            CandidateLaunch::EarlierEvaluation =>
                                                "started while an earlier evaluation ran",
                                        },
                                        st.process_s,
                                        st.load_s,
                                        c.started.elapsed().as_secs_f64()
                                    ));
                                    candidate_start = Some(st);
                                    build = built.take();
                                }
                                o
                            }
                            (_, Some((st, log))) => Outcome::fail(*st, log.clone()),
                            (None, None) => Outcome::fail(
                                Status::RuntimeError,
                                "no candidate process".to_string(),
                            ),
                        }
                    }
                }
            };
            let outcome = guard_problem_dir(&problem.dir, problem_snapshot, outcome);
            let outcome = match &self.opts.sol_floor {
                Some(f) => f.check(&problem.definition.name, &w.workload.uuid, outcome),
                None => outcome,
            };
            let mut env = self.environment_now();
            env.isolation = candidate
                .as_ref()
                .map(|c| c.isolation.clone().unwrap_or_default());
            env.unverified = unverified_paths(&self.opts.device, sol);
            let trace = Trace {
                definition: problem.definition.name.clone(),
                solution: Some(sol.name.clone()),
                workload: w.workload.clone(),
                evaluation: Some(Evaluation {
                    status: outcome.status,
                    log: bounded_log(outcome.log),
                    correctness: outcome.correctness,
                    performance: outcome.performance,
                    environment: env,
                    timestamp: now_iso(),
                    wall_s,
                    retried,
                    candidate_start,
                    build,
                }),
                // Chained and sealed by the writer, once the candidate is gone.
                kernelgate_chain: None,
            };
            on_event(Event::WorkloadFinished(Box::new(trace.clone())));
            traces.push(trace);
        }
        if let Some(c) = candidate.take() {
            c.shutdown();
        }
        // The directory is checked again by `evaluate_sealed`, now that the candidate is gone.
        Ok(traces)
    }

    /// Whether the fault `kind` is to be injected now: test builds read `KG_TEST_FAULT`
    /// (`KIND` every time, `KIND-once` the first time, either with `@UUID` only in the session
    /// whose claimed GPU that is), so tests can show how a fault of the harness's own plumbing
    /// is reported; release builds never inject.
    fn inject(&mut self, kind: &str) -> bool {
        if !cfg!(debug_assertions) {
            return false;
        }
        let Ok(mut v) = std::env::var("KG_TEST_FAULT") else {
            return false;
        };
        if let Some((fault, uuid)) = v.split_once('@') {
            if self.opts.gpu_claim.as_ref().is_none_or(|c| c.uuid != uuid) {
                return false;
            }
            v = fault.to_string();
        }
        let hit = v == kind || (v == format!("{kind}-once") && self.faults_injected == 0);
        if hit {
            self.faults_injected += 1;
            tracing::warn!("KG_TEST_FAULT: injecting `{kind}`");
        }
        hit
    }

    /// [`Session::run_workload`], once more when the outcome may be the harness's doing
    /// ([`Outcome::retry`]): the second attempt is what is recorded, the first one's status in
    /// `retried`. A second loss of the harness's own state stops the evaluation
    /// ([`ExecError::HarnessFault`]), so no candidate status is given for a fault of ours.
    fn run_workload_retrying(
        &mut self,
        problem: &Problem,
        w: &LoadedWorkload,
        cand: &mut Worker,
        retried: &mut Option<Retry>,
    ) -> Result<Outcome, ExecError> {
        let first = self.run_workload(problem, w, cand)?;
        let Some(reason) = first.retry else {
            return Ok(first);
        };
        let head: String = first.log.chars().take(600).collect();
        let first_attempt = format!("{}: {}", first.status.as_str(), head.trim_end());
        let fault = |detail: String| ExecError::HarnessFault {
            definition: problem.definition.name.clone(),
            workload: w.workload.uuid.clone(),
            detail,
        };
        if cand.is_dead() {
            return match reason {
                RetryReason::HarnessStateLost => Err(fault(first_attempt)),
                RetryReason::DualClock => Ok(first),
            };
        }
        tracing::warn!(
            workload = %w.workload.uuid,
            reason = reason.as_str(),
            "evaluating the workload once more: {first_attempt}"
        );
        let second = self.run_workload(problem, w, cand)?;
        if second.retry == Some(RetryReason::HarnessStateLost) {
            return Err(fault(format!(
                "twice; first attempt {first_attempt}; second {}",
                second.status.as_str()
            )));
        }
        *retried = Some(Retry {
            reason,
            first_attempt,
        });
        Ok(second)
    }

    fn run_workload(
        &mut self,
        problem: &Problem,
        w: &LoadedWorkload,
        cand: &mut Worker,
    ) -> Result<Outcome, ExecError> {
        // The claim's L2 execution lock, held by us for the whole workload (crate::l2 says why).
        let l2 =
            crate::l2::hold_for_workload(&self.opts, &problem.definition.name, &w.workload.uuid)?;
        let xfer = self.transfer_dir(cand)?;
        if self.inject("lose-transfer") {
            let _ = std::fs::remove_dir_all(&xfer.inputs);
        }
        let result = self.run_workload_in(problem, w, cand, &xfer);
        // The judge's input directory and the session directory are the harness's own (the
        // sandboxed candidate cannot write either): a failure after they vanished is no
        // verdict on the candidate.
        let lost = [&xfer.inputs, &self.dir.path().to_path_buf()]
            .into_iter()
            .find(|d| !d.is_dir())
            .map(|d| d.display().to_string());
        let _ = std::fs::remove_dir_all(&xfer.inputs);
        let _ = std::fs::remove_dir_all(&xfer.outputs);
        let mut outcome = result?;
        if let Some(d) = lost
            && outcome.status != Status::Passed
        {
            tracing::warn!(dir = %d, "a transfer directory of the harness vanished during a workload");
            outcome.log = format!(
                "harness: its transfer directory `{d}` vanished during the workload\n{}",
                outcome.log
            );
            outcome.retry = Some(RetryReason::HarnessStateLost);
        }
        let log = cand.take_log();
        if !log.is_empty() {
            if !outcome.log.is_empty() && !outcome.log.ends_with('\n') {
                outcome.log.push('\n');
            }
            outcome.log.push_str(&log);
        }
        outcome.log = crate::l2::with_note(&l2, std::mem::take(&mut outcome.log));
        Ok(outcome)
    }

    fn candidate_call(
        &self,
        cand: &mut Worker,
        req: &Value,
        deadline: Instant,
    ) -> Result<Result<Value, Outcome>, ExecError> {
        self.candidate_call_with(cand, req, deadline, &mut crate::process::no_asides)
    }

    /// [`Session::candidate_call`], answering the candidate's asides with `on_aside`.
    fn candidate_call_with(
        &self,
        cand: &mut Worker,
        req: &Value,
        deadline: Instant,
        on_aside: &mut dyn FnMut(&Aside) -> AsideReply,
    ) -> Result<Result<Value, Outcome>, ExecError> {
        match cand.request_with(req, deadline, &self.cancel, on_aside) {
            Ok(r) if reply_ok(&r) => Ok(Ok(r)),
            Ok(r) => {
                let status = match reply_kind(&r) {
                    "runtime" | "exception" => Status::RuntimeError,
                    "compile" => Status::CompileError,
                    _ => Status::RuntimeError,
                };
                Ok(Err(Outcome::fail(status, reply_message(&r))))
            }
            Err(WorkerError::Cancelled) => Err(ExecError::Cancelled),
            Err(WorkerError::Timeout { seconds }) => Ok(Err(Outcome::fail(
                Status::Timeout,
                format!(
                    "the candidate did not finish within --timeout ({:.0} s for the workload; waited {seconds:.1} s in this call); its process group was killed",
                    self.opts.timeout.as_secs_f64()
                ),
            ))),
            Err(WorkerError::Died { how }) => Ok(Err(Outcome::fail(
                Status::RuntimeError,
                format!("the candidate process {how}"),
            ))),
            Err(e) => Ok(Err(Outcome::fail(
                Status::RuntimeError,
                format!("candidate worker: {e}"),
            ))),
        }
    }

    fn run_workload_in(
        &mut self,
        problem: &Problem,
        w: &LoadedWorkload,
        cand: &mut Worker,
        xfer: &Transfer,
    ) -> Result<Outcome, ExecError> {
        let t_workload = Instant::now();
        let deadline = t_workload + self.opts.timeout;
        self.outputs_via = match &self.pool_off {
            _ if self.opts.device.is_cpu() => "files (a CPU run)".into(),
            Some((tag, why)) if tag == cand.tag() => {
                format!("files (the candidate's output pool failed earlier: {why})")
            }
            _ => "files".into(),
        };
        // v1: the tolerance; v2: the workload's checks (never the v1 defaults).
        let tol_json = w.workload.judge_policy();
        let outputs = Self::output_specs(problem, w);
        let rounds = self.opts.rounds.max(1);
        let mut figs = Figures::new();
        let mut pending = None;
        let mut last_in = Value::Null;
        let mut costs = RoundCosts::default();
        // Round inputs that are random, scalar or custom (the problem's own generator) are drawn
        // by the candidate from the round's seed (no bytes move): the judge announces the draws
        // first, and each batch then runs in the candidate while the judge prepares it (neither
        // is timed). Round 0's bytes are compared on both sides; when they differ, or the
        // candidate could not draw them, the rounds restart with inputs as files, written by
        // the judge before each batch runs.
        let mut round_inputs = "files (an input is read from a file)";
        let mut draws = self.round_draws(w, rounds, deadline)?;
        let method = self.opts.timing_method();
        let method_name = serde_json::to_value(method)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        // The judge's preparation of the timed sets, asked right after the last batch's rounds
        // while the candidate still runs that batch (the judge waits on it otherwise).
        let mut early_timed = None;
        let per_batch = rounds_per_batch(problem, w);
        let mut batches = 0u32;
        let mut overlapped = 0u32;
        let mut next = 0u32;
        while next < rounds {
            let batch: Vec<u32> = (next..rounds.min(next + per_batch)).collect();
            batches += 1;
            let out = xfer.outputs.join(format!("out_{}.bin", batch[0]));
            let ins: Vec<PathBuf> = batch
                .iter()
                .map(|r| xfer.inputs.join(format!("in_{r}.pt")))
                .collect();
            let generate = draws.is_some();
            let device_out = self.device_out(cand);
            let reqs: Vec<Value> = batch
                .iter()
                .zip(&ins)
                .map(|(&round, inp)| {
                    let mut req = self.prepare_request(problem, w, round, inp);
                    req["generate"] = json!(generate);
                    req["digest"] = json!(generate && round == 0);
                    req
                })
                .collect();
            let req = json!({"op": "prepare_rounds", "rounds": reqs});
            let run_of = |inputs: &[Value]| {
                let runs: Vec<Value> = batch
                    .iter()
                    .zip(inputs)
                    .map(|(&round, input)| {
                        json!({"round": round, "in": input, "outputs": outputs,
                               "digest": generate && round == 0})
                    })
                    .collect();
                json!({"op": "run_rounds", "runs": runs, "out": out, "device_out": device_out})
            };
            let drawn: Option<Vec<Value>> = draws.as_ref().map(|d| {
                batch
                    .iter()
                    .filter_map(|&r| d.get(r as usize).cloned())
                    .collect()
            });
            let (r, judge_took, early_run) = match &drawn {
                Some(inputs) => {
                    let run = run_of(inputs);
                    let mut jreqs = vec![req];
                    if next + batch.len() as u32 >= rounds {
                        jreqs.push(self.prepare_timed_request(w, xfer, &method_name, true));
                    }
                    let (rs, c) = self.judge_requests_during(&jreqs, deadline, |s| {
                        let t = Instant::now();
                        (s.candidate_call(cand, &run, deadline), t.elapsed())
                    });
                    let mut rs = rs.into_iter();
                    let (r, took) = rs.next().unwrap_or((
                        Err(JudgeFail::Other("the judge was not asked".into())),
                        Duration::ZERO,
                    ));
                    early_timed = rs.next().map(|(t, _)| t);
                    overlapped += 1;
                    (r, took, Some(c))
                }
                None => {
                    let t = Instant::now();
                    let r = self.judge_request(&req, deadline);
                    (r, t.elapsed(), None)
                }
            };
            let r = match r {
                Ok(r) if reply_ok(&r) => r,
                Ok(r) => {
                    return Ok(Outcome::fail(Status::InvalidReference, reply_message(&r)));
                }
                Err(JudgeFail::Cancelled) => return Err(ExecError::Cancelled),
                Err(JudgeFail::Other(m)) => {
                    return Ok(Outcome::fail(
                        Status::InvalidReference,
                        format!("the reference failed: {m}"),
                    ));
                }
            };
            let replies = replies_of(&r, "replies");
            costs.add_ms("judge prepare", judge_took.as_secs_f64() * 1e3, &replies);
            if let Some(bad) = replies.iter().find(|r| !reply_ok(r)) {
                return Ok(Outcome::fail(Status::InvalidReference, reply_message(bad)));
            }
            if let Some(o) = short_batch(
                Status::InvalidReference,
                "the judge prepared",
                replies.len(),
                batch.len(),
            ) {
                return Ok(o);
            }
            let mut inputs: Vec<Value> = replies
                .iter()
                .zip(&ins)
                .map(|(r, inp)| {
                    r.get("input")
                        .filter(|v| v.is_object())
                        .cloned()
                        .unwrap_or_else(|| json!(inp))
                })
                .collect();
            let (cr, run_ms) = match early_run {
                Some((cr, took)) => {
                    if drawn.as_deref() != Some(&inputs[..]) {
                        return Ok(Outcome::fail(
                            Status::RuntimeError,
                            "the judge's round inputs differ from the draws it announced",
                        ));
                    }
                    (cr, took.as_secs_f64() * 1e3)
                }
                None => {
                    let t = Instant::now();
                    let cr = self.candidate_call(cand, &run_of(&inputs), deadline);
                    (cr, t.elapsed().as_secs_f64() * 1e3)
                }
            };
            let cr = match cr? {
                Err(o) => return Ok(o),
                Ok(cr) => cr,
            };
            let creplies = replies_of(&cr, "replies");
            costs.add_ms(
                "candidate run",
                run_ms,
                creplies.iter().chain(std::iter::once(&cr)),
            );
            if generate
                && batch[0] == 0
                && let Some(m) = cr.get("draw_failed").and_then(Value::as_str)
            {
                tracing::debug!("the candidate could not draw round 0: {m}");
                draws = None;
                early_timed = None;
                round_inputs = "files (the candidate could not run the input generator)";
                continue;
            }
            for (round, c) in batch.iter().zip(&creplies) {
                if let Some(m) = c.get("reward_hack").and_then(Value::as_str) {
                    return Ok(Outcome::fail(
                        Status::RewardHack,
                        format!("round {round}: {m}"),
                    ));
                }
            }
            if let Some(o) = short_batch(
                Status::RuntimeError,
                "the candidate answered",
                creplies.len(),
                batch.len(),
            ) {
                return Ok(o);
            }
            if generate && batch[0] == 0 {
                if creplies[0].get("digest").and_then(Value::as_str)
                    != replies[0].get("digest").and_then(Value::as_str)
                {
                    draws = None;
                    early_timed = None;
                    round_inputs =
                        "files (the candidate's generator did not reproduce round 0's inputs)";
                    continue;
                }
                round_inputs = "drawn in the candidate from each round's seed";
            }
            next += batch.len() as u32;
            let check =
                json!({"op": "check_rounds", "rounds": batch, "path": out, "tolerance": tol_json});
            let check = match self.handed_check(cand, &cr, check, deadline)? {
                Ok(c) => c,
                Err(o) => return Ok(o),
            };
            last_in = inputs.pop().unwrap_or(Value::Null);
            if next >= rounds {
                // The last batch is checked while the candidate loads and warms up for timing.
                pending = Some(PendingCheck { batch, req: check });
                break;
            }
            let t_op = Instant::now();
            let r = self.judge_request(&check, deadline);
            let r = match self.settle_check(cand, r, &check, deadline)? {
                Ok(r) => r,
                Err(o) => return Ok(o),
            };
            costs.add("judge check", t_op, r.as_ref().ok());
            if let Some(o) = Self::round_check_outcome(r, &batch, &mut figs)? {
                return Ok(o);
            }
            let _ = std::fs::remove_file(&out);
            for (inp, &round) in ins.iter().zip(&batch) {
                if round + 1 < rounds {
                    let _ = std::fs::remove_file(inp);
                }
            }
        }
        // Timing, on the last round's inputs; the outputs of the timed calls are checked again.
        let budget = if self.opts.device.is_cpu() {
            self.opts.cpu_time_budget.map(|d| d.as_secs_f64())
        } else {
            None
        };
        let clones = if self.opts.device.is_cpu() { 1 } else { 4 };
        let rounds_s = t_workload.elapsed().as_secs_f64();
        let tr = match self.timed_calls(
            problem,
            w,
            cand,
            xfer,
            &last_in,
            &method_name,
            budget,
            deadline,
            (pending, early_timed, &mut figs, &mut costs),
        )? {
            Timed::Fail(mut o) => {
                if let Some(r) = &o.check
                    && o.outcome.status.has_correctness()
                {
                    figs.merge(r);
                    o.outcome.correctness = Some(figs.correctness(rounds));
                }
                return Ok(o.outcome);
            }
            Timed::Ok(r) => r,
        };
        let cand_events = times_of(&tr);
        let iterations = cand_events.len() as u32;
        // The reference makes as many timed calls as the candidate did, on the same sets.
        let rreq = json!({
            "op": "time_reference", "warmup": self.opts.warmup,
            "iterations": iterations.max(1), "method": method_name,
            "budget_s": budget, "clones": clones, "spin_us": tr.get("spin_us"),
        });
        let t_ref = Instant::now();
        let (rr, ref_keys) = self.judge_timing_request(&rreq, deadline);
        let rr = match rr {
            Ok(r) if reply_ok(&r) => r,
            Ok(r) => return Ok(Outcome::fail(Status::InvalidReference, reply_message(&r))),
            Err(JudgeFail::Cancelled) => return Err(ExecError::Cancelled),
            Err(JudgeFail::Other(m)) => return Ok(Outcome::fail(Status::InvalidReference, m)),
        };
        let ref_s = t_ref.elapsed().as_secs_f64();
        // The trusted judge's samples are held to the same binding (cheap, and a harness bug
        // would otherwise skew every speedup): one per set it opened, or per clone call.
        let ref_rule = match ref_keys {
            Err(why) => Err(why),
            Ok(served) if method_name == "cuda_graph" => Ok(integrity::SampleRule::GraphReplays {
                calls: iterations.max(1) as usize,
                served,
            }),
            Ok(0) => Ok(integrity::SampleRule::Unsealed {
                calls: iterations.max(1) as usize,
                sets: clones,
            }),
            Ok(served) => Ok(integrity::SampleRule::OnePerKey { served }),
        };
        let ref_events = match ref_rule.and_then(|rule| integrity::bound_samples(&rr, rule)) {
            Ok(t) => t,
            Err(why) => {
                return Ok(Outcome::fail(
                    Status::InvalidReference,
                    format!(
                        "harness: the judge's reference timing is not bound to its timed calls: {why}"
                    ),
                ));
            }
        };
        // What each worker reported, for the log (before CUPTI spans may replace them).
        let (cand_sum_ms, ref_sum_ms) = (
            cand_events.iter().sum::<f64>(),
            ref_events.iter().sum::<f64>(),
        );
        if let Some(why) =
            dual_clock_after_reference(&tr, &rr, ref_sum_ms, !self.opts.device.is_cpu())
        {
            return Ok(Outcome::fail(Status::RewardHack, why).retry_for(RetryReason::DualClock));
        }
        // CUPTI spans when both sides have them (and they are plausible), else the event times,
        // so candidate and reference are always measured by the same method.
        let (method, cand_times, ref_times, cupti_note) =
            choose_times(method, &tr, &rr, cand_events, ref_events);
        // Statistics are computed here from the raw samples, never taken from a worker.
        let (Some(cs), Some(rs)) = (
            integrity::spread_from_times(&cand_times),
            integrity::spread_from_times(&ref_times),
        ) else {
            return Ok(Outcome::fail(
                Status::RuntimeError,
                "timing produced no samples",
            ));
        };
        // The candidate's median, unless its mean says the work was concentrated in a few calls.
        // The reference keeps its median: raising a noisy reference's latency would inflate
        // the candidate's speedup, the one direction a bound must never move.
        let (c_lat, c_raised) = integrity::robust_latency(&cs);
        let r_lat = rs.median_ms;
        let speedup = if c_lat > 0.0 { r_lat / c_lat } else { 0.0 };
        let mut log = format!(
            "harness: timed iterations: candidate {:.3} s, reference {:.3} s; correctness rounds {rounds}\n",
            cand_sum_ms / 1e3,
            ref_sum_ms / 1e3
        );
        if let Some(wall) = tr.get("outside_ms").and_then(Value::as_f64) {
            log.push_str(&format!(
                "harness: dual clock: candidate reported {cand_sum_ms:.3} ms over {iterations} timed call(s) with distinct inputs; parent wall time {wall:.3} ms\n"
            ));
        }
        if let Some(p) = tr.get("phases_s") {
            let f = |k: &str| p.get(k).and_then(Value::as_f64).unwrap_or(0.0);
            log.push_str(&format!(
                "harness: phases: correctness rounds {rounds_s:.3} s; timed inputs prepared {:.3} s; candidate load + warm-up {:.3} s; timed batch {:.3} s; sampled re-checks {:.3} s; reference timing {:.3} s\n",
                f("prepare"),
                f("load"),
                f("batch"),
                f("checks"),
                ref_s
            ));
        }
        log.push_str(&format!("harness: round inputs: {round_inputs}\n"));
        log.push_str(&format!(
            "harness: outputs handed over: {}\n",
            self.outputs_via
        ));
        log.push_str(&format!(
            "harness: correctness round costs (ms, summed over {rounds} rounds in {batches} batch(es), {overlapped} of them run in the candidate while the judge prepared them; the last batch checked while the candidate warmed up for timing): {}\n",
            costs.line()
        ));
        if let Some(h) = tr.get("handover").and_then(Value::as_str) {
            log.push_str(&format!("harness: timed input sets: {h}\n"));
        }
        if let Some(us) = tr.get("spin_us").and_then(Value::as_f64)
            && !self.opts.device.is_cpu()
        {
            let why = match tr.get("ref_host_ms").and_then(Value::as_f64) {
                Some(h) => format!(
                    "{SPIN_HOST_FACTOR}x the reference's host launch time {:.1} us, within {SPIN_MIN_US}-{SPIN_MAX_US} us",
                    h * 1e3
                ),
                None => "the reference's host launch time was not measured".into(),
            };
            log.push_str(&format!(
                "harness: spin kernel before each timed call: {us:.0} us ({why})\n"
            ));
            if let Some(note) = host_bound_note(tr.get("ref_host_ms").and_then(Value::as_f64)) {
                log.push_str(&note);
            }
        }
        if c_raised {
            log.push_str(&format!(
                "harness: candidate latency is mean / {} = {:.6} ms, not the median {:.6} ms: its timed calls' time is concentrated in a few of them\n",
                integrity::CONCENTRATION_RATIO,
                cs.mean_ms / integrity::CONCENTRATION_RATIO,
                cs.median_ms
            ));
        }
        if let Some(n) = cupti_note {
            log.push_str(&format!("harness: {n}\n"));
        }
        let wall_ms = t_workload.elapsed().as_secs_f64() * 1e3;
        log.push_str(&overhead_line(
            wall_ms,
            (&tr, cand_sum_ms),
            (&rr, ref_sum_ms),
        ));
        log.push_str(&asked_calls_line(
            wall_ms,
            (&tr, cand_sum_ms),
            (&rr, ref_sum_ms),
            &costs,
        ));
        for (who, v) in [("candidate", &tr), ("reference", &rr)] {
            let mut notes = v.get("notes").cloned().unwrap_or(Value::Null);
            if let Some(o) = notes.as_object_mut() {
                o.remove("cupti_ms");
                o.remove("timed_index");
                if !o.is_empty() {
                    log.push_str(&format!("timing notes ({who}): {notes}\n"));
                }
            }
        }
        Ok(Outcome {
            status: Status::Passed,
            log,
            correctness: Some(figs.correctness(rounds)),
            performance: Some(Performance {
                latency_ms: c_lat,
                reference_latency_ms: r_lat,
                speedup_factor: speedup,
                timing_method: Some(method),
                warmup: Some(self.opts.warmup),
                iterations: Some(iterations),
                spread: Some(cs),
                reference_spread: Some(rs),
            }),
            retry: None,
        })
    }

    /// Whether the candidate is asked to hand its outputs over on the device (`device_out`):
    /// on a GPU, unless its output pool already failed.
    fn device_out(&self, cand: &Worker) -> bool {
        !self.opts.device.is_cpu() && self.pool_off.as_ref().is_none_or(|(t, _)| t != cand.tag())
    }

    /// The check request `req` (it names the file the outputs would be in, `path`) for the
    /// candidate's reply `cr`: with `device`, the description of the outputs in the
    /// candidate's device pool, when `cr` handed them over there; the pool's descriptor goes
    /// to the judge first when the judge has not opened that pool. When that relay fails, the
    /// candidate writes the outputs to the file instead.
    fn handed_check(
        &mut self,
        cand: &mut Worker,
        cr: &Value,
        mut req: Value,
        deadline: Instant,
    ) -> Result<Result<Value, Outcome>, ExecError> {
        if let Some(why) = cr.get("pool_off").and_then(Value::as_str) {
            self.outputs_via = format!("files (the candidate's output pool failed: {why})");
        }
        let Some(desc) = cr.get("device").filter(|d| d.is_object()) else {
            return Ok(Ok(req));
        };
        let Some(judge) = self.judge.as_mut() else {
            return Ok(Ok(req));
        };
        let key = (
            judge.tag().to_string(),
            cand.tag().to_string(),
            desc.get("pool").and_then(Value::as_u64).unwrap_or(0),
        );
        let import = self.pool_opened.as_ref() != Some(&key);
        if import {
            let relayed = cand
                .recv_fd(deadline.min(Instant::now() + FD_WAIT))
                .and_then(|fd| judge.send_fd(fd.as_fd()));
            if let Err(e) = relayed {
                return self.resend(
                    cand,
                    req,
                    &format!("relaying its descriptor failed: {e}"),
                    deadline,
                );
            }
            self.pool_opened = Some(key);
        }
        let mut d = desc.clone();
        d["import"] = json!(import);
        req["device"] = d;
        if self.outputs_via == "files" {
            self.outputs_via = "on the device (the candidate's shared memory pool)".into();
        }
        Ok(Ok(req))
    }

    /// Asks the candidate to write the outputs it handed over on the device to the file the
    /// check request `req` names (`path`), and returns `req` without `device`; every later
    /// hand-over of this candidate goes as a file.
    fn resend(
        &mut self,
        cand: &mut Worker,
        mut req: Value,
        why: &str,
        deadline: Instant,
    ) -> Result<Result<Value, Outcome>, ExecError> {
        tracing::warn!("the candidate's output pool failed ({why}); its outputs go as files");
        self.pool_off = Some((cand.tag().to_string(), why.to_string()));
        self.outputs_via = format!("files (the candidate's output pool failed: {why})");
        let resend = json!({"op": "resend", "out": req.get("path"), "why": why});
        if let Err(o) = self.candidate_call(cand, &resend, deadline)? {
            return Ok(Err(o));
        }
        if let Some(o) = req.as_object_mut() {
            o.remove("device");
        }
        Ok(Ok(req))
    }

    /// The judge's reply `r` to the check request `req`, asked again from the file after the
    /// candidate wrote it when the judge could not read the candidate's pool
    /// (`handover_failed`).
    fn settle_check(
        &mut self,
        cand: &mut Worker,
        r: Result<Value, JudgeFail>,
        req: &Value,
        deadline: Instant,
    ) -> Result<Result<Result<Value, JudgeFail>, Outcome>, ExecError> {
        let why = match &r {
            Ok(v) => match v.get("handover_failed").and_then(Value::as_str) {
                Some(why) => format!("the judge could not read it: {why}"),
                None => return Ok(Ok(r)),
            },
            Err(_) => return Ok(Ok(r)),
        };
        match self.resend(cand, req.clone(), &why, deadline)? {
            Ok(req) => Ok(Ok(self.judge_request(&req, deadline))),
            Err(o) => Ok(Err(o)),
        }
    }

    /// The outcome of the judge's `check_rounds` reply `r` for `batch`: the first round that
    /// did not pass (its figures merged into `figs` up to it), or None when every round passed.
    fn round_check_outcome(
        r: Result<Value, JudgeFail>,
        batch: &[u32],
        figs: &mut Figures,
    ) -> Result<Option<Outcome>, ExecError> {
        let r = match r {
            Ok(r) => r,
            Err(JudgeFail::Cancelled) => return Err(ExecError::Cancelled),
            Err(JudgeFail::Other(m)) => {
                return Ok(Some(Outcome::fail(
                    Status::RuntimeError,
                    format!("the judge failed while checking outputs: {m}"),
                )));
            }
        };
        if !reply_ok(&r) {
            return Ok(Some(Outcome::fail(Status::RuntimeError, reply_message(&r))));
        }
        let results = replies_of(&r, "results");
        if results.is_empty() {
            return Ok(Some(Outcome::fail(
                Status::RuntimeError,
                "the judge returned no check results",
            )));
        }
        for (&round, res) in batch.iter().zip(&results) {
            figs.merge(res);
            let status = res
                .get("status")
                .and_then(Value::as_str)
                .and_then(Status::parse)
                .unwrap_or(Status::RuntimeError);
            if status != Status::Passed {
                let msg = format!(
                    "round {round}: {}",
                    res.get("message").and_then(Value::as_str).unwrap_or("")
                );
                let mut o = Outcome::fail(status, msg);
                if status.has_correctness() {
                    o.correctness = Some(figs.correctness(round + 1));
                }
                return Ok(Some(o));
            }
        }
        Ok(short_batch(
            Status::RuntimeError,
            "the judge checked",
            results.len(),
            batch.len(),
        ))
    }

    /// Where the judge writes sealed timed input sets for the candidate.
    fn timed_inputs_path(xfer: &Transfer) -> PathBuf {
        xfer.inputs.join("in_timed.pt")
    }

    /// The judge's `prepare_timed` request: the timed input sets drawn from per-set seeds
    /// (`generate`) or sealed into a file, and the reference's host launch time.
    fn prepare_timed_request(
        &self,
        w: &LoadedWorkload,
        xfer: &Transfer,
        method_name: &str,
        generate: bool,
    ) -> Value {
        let budget_bytes = if self.opts.device.is_cpu() {
            integrity::TIMED_INPUT_BUDGET_CPU
        } else {
            integrity::TIMED_INPUT_BUDGET_GPU
        };
        json!({
            "op": "prepare_timed", "workload": w.workload, "path": Self::timed_inputs_path(xfer),
            "input_shapes": shapes_json(&w.resolved.inputs), "axes": w.resolved.axes,
            "iterations": self.opts.iterations.max(1), "generate": generate,
            "cupti": method_name == "cupti", "budget_bytes": budget_bytes,
        })
    }

    /// The timed calls: the judge writes distinct input sets (one per timed iteration), the
    /// candidate warms up on the last correctness round's inputs and times one call per set;
    /// the parent measures the wall time around the timed batch (dual clock); after timing the
    /// judge picks which timed outputs to check and checks them against its reference.
    /// `pending`, the last correctness batch's check, runs in the judge while the candidate
    /// loads and warms up (its figures merged into `figs`, its cost into `costs`); a batch
    /// that failed it ends the workload with that outcome. `early_timed`, the judge's
    /// `prepare_timed` reply when it was asked with the last batch's rounds.
    #[allow(clippy::too_many_arguments)]
    fn timed_calls(
        &mut self,
        problem: &Problem,
        w: &LoadedWorkload,
        cand: &mut Worker,
        xfer: &Transfer,
        last_in: &Value,
        method_name: &str,
        budget: Option<f64>,
        deadline: Instant,
        (mut pending, early_timed, figs, costs): (
            Option<PendingCheck>,
            Option<Result<Value, JudgeFail>>,
            &mut Figures,
            &mut RoundCosts,
        ),
    ) -> Result<Timed, ExecError> {
        let outputs = Self::output_specs(problem, w);
        let tol_json = w.workload.judge_policy();
        let timed_in = Self::timed_inputs_path(xfer);
        let mut prep_s = 0.0;
        let mut handover = "sealed files (an input is read from a file)";
        // The candidate warms up on the last round's inputs (none of the timed sets) while the
        // judge checks the last correctness batch (and prepares the timed input sets, unless it
        // did so with the last batch's rounds).
        let t_load = Instant::now();
        let lreq = json!({
            "op": "time_load", "in": last_in, "outputs": outputs,
            "warmup": self.opts.warmup, "budget_s": budget,
        });
        let mut jreqs = Vec::new();
        let checked = pending.take().map(|p| {
            jreqs.push(p.req);
            p.batch
        });
        let pending_req = jreqs.first().cloned();
        if early_timed.is_none() {
            jreqs.push(self.prepare_timed_request(w, xfer, method_name, true));
        }
        let (replies, lr) = self.judge_requests_during(&jreqs, deadline, |s| {
            s.candidate_call(cand, &lreq, deadline)
        });
        let load_s = t_load.elapsed().as_secs_f64();
        let mut replies = replies.into_iter();
        // The candidate's outputs are judged first, then the reference's timed inputs, then
        // the candidate's warm-up.
        if let Some(batch) = checked {
            let Some((cr, took)) = replies.next() else {
                return Ok(Timed::fail(
                    Status::RuntimeError,
                    "the judge did not check the last batch",
                ));
            };
            let cr = match pending_req {
                Some(req) if lr.as_ref().is_ok_and(Result::is_ok) => {
                    match self.settle_check(cand, cr, &req, deadline)? {
                        Ok(cr) => cr,
                        Err(o) => return Ok(Timed::failed(o)),
                    }
                }
                _ => cr,
            };
            costs.add_ms("judge check", took.as_secs_f64() * 1e3, cr.as_ref().ok());
            if let Some(o) = Self::round_check_outcome(cr, &batch, figs)? {
                return Ok(Timed::failed(o));
            }
        }
        let mut prepared = early_timed.or_else(|| replies.next().map(|(r, _)| r));
        let lr = match lr? {
            Ok(lr) => lr,
            Err(o) => {
                if let Some(Ok(r)) = &prepared
                    && !reply_ok(r)
                {
                    return Ok(Timed::fail(Status::InvalidReference, reply_message(r)));
                }
                return Ok(Timed::failed(o));
            }
        };
        let warmup_ms = lr.get("warmup_ms").and_then(Value::as_f64).unwrap_or(0.0);
        let mut keys = integrity::TimedKeys::new(Vec::new(), Vec::new());
        let mut ref_host_ms = None;
        // First choice: the timed sets are drawn in the candidate from per-set seeds (the
        // keys), so no bytes move; files when an input is from safetensors, or when the
        // candidate's generator does not reproduce the judge's probe set.
        for generate in [true, false] {
            let t_prep = Instant::now();
            let r = match prepared.take() {
                Some(r) => r,
                None => self.judge_request(
                    &self.prepare_timed_request(w, xfer, method_name, generate),
                    deadline,
                ),
            };
            let r = match r {
                Ok(r) if reply_ok(&r) => r,
                Ok(r) => return Ok(Timed::fail(Status::InvalidReference, reply_message(&r))),
                Err(JudgeFail::Cancelled) => return Err(ExecError::Cancelled),
                Err(JudgeFail::Other(m)) => return Ok(Timed::fail(Status::InvalidReference, m)),
            };
            let strs = |k: &str| -> Vec<String> {
                r.get(k)
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let seal_ms = r
                .get("seal_ms")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_f64).collect())
                .unwrap_or_default();
            keys = integrity::TimedKeys::new(strs("keys"), seal_ms);
            ref_host_ms = r.get("ref_host_ms").and_then(Value::as_f64);
            let generated = r.get("generate").filter(|g| g.is_object()).cloned();
            let probe = r
                .get("probe_digest")
                .and_then(Value::as_str)
                .map(str::to_string);
            let sreq = json!({
                "op": "time_sets", "timed_in": timed_in, "outputs": outputs, "generate": generated,
            });
            let sr = match self.candidate_call(cand, &sreq, deadline)? {
                Ok(sr) => sr,
                Err(o) => return Ok(Timed::failed(o)),
            };
            prep_s += t_prep.elapsed().as_secs_f64();
            if generated.is_none() {
                break;
            }
            if sr.get("probe_digest").and_then(Value::as_str) == probe.as_deref() {
                handover =
                    "drawn in the candidate from per-set seeds handed out as each call starts";
                break;
            }
            handover =
                "sealed files (the candidate's generator did not reproduce the judge's probe set)";
        }
        let _ = std::fs::remove_file(&timed_in);
        let spin_us = spin_us_for(ref_host_ms);
        let treq = json!({
            "op": "time", "iterations": self.opts.iterations.max(1),
            "method": method_name, "budget_s": budget, "spin_us": spin_us,
        });
        let t0 = Instant::now();
        let tr = self.candidate_call_with(cand, &treq, deadline, &mut |a| keys.answer(a))?;
        let mut outside_ms = t0.elapsed().as_secs_f64() * 1e3;
        if self.inject("dual-clock") {
            outside_ms += 60_000.0;
        }
        // A key asked out of turn is the attack the sealing exists for, whatever happened next.
        if let Some(why) = keys.violation.take() {
            return Ok(Timed::fail(Status::RewardHack, why));
        }
        let tr = match tr {
            Ok(r) => r,
            Err(o) => {
                return Ok(Timed::failed(o));
            }
        };
        let t_checks = Instant::now();
        if let Some(m) = tr.get("reward_hack").and_then(Value::as_str) {
            return Ok(Timed::fail(Status::RewardHack, m.to_string()));
        }
        let graph = method_name == "cuda_graph";
        // One sample per timed call we handed a key out for, each naming its set: samples a
        // candidate adds to the harness's list from inside a call are caught here.
        let rule = if graph {
            integrity::SampleRule::GraphReplays {
                calls: (self.opts.iterations.max(1) as usize).min(keys.len()),
                served: keys.served(),
            }
        } else {
            integrity::SampleRule::OnePerKey {
                served: keys.served(),
            }
        };
        let times = match integrity::bound_samples(&tr, rule) {
            Ok(t) => t,
            Err(why) => {
                return Ok(Timed::fail(
                    Status::RewardHack,
                    format!("timing samples not bound to the timed calls: {why}"),
                ));
            }
        };
        if times.is_empty() {
            return Ok(Timed::fail(
                Status::RuntimeError,
                "timing produced no samples",
            ));
        }
        // A CUDA graph replays `graph_unroll` launches (our harness: 10) per reported sample.
        let reported_ms: f64 = times.iter().sum::<f64>() * if graph { 10.0 } else { 1.0 };
        // The dual clock is decided once the reference has been timed: its own unexplained
        // batch time widens the allowance (`dual_clock_after_reference`).
        let dual = json!({"reported_ms": reported_ms, "calls": times.len(),
                          "extra_ms": 2.0 * keys.seal_ms_served()});
        // CUDA-graph timing replays the first input set only.
        let ran = if graph { 1 } else { times.len() };
        let sreq = json!({"op": "sample_timed", "ran": ran, "samples": integrity::TIMED_SAMPLES});
        let indices = match self.judge_request(&sreq, deadline) {
            Ok(r) if reply_ok(&r) => r.get("indices").cloned().unwrap_or(Value::Null),
            Ok(r) => return Ok(Timed::fail(Status::RuntimeError, reply_message(&r))),
            Err(JudgeFail::Cancelled) => return Err(ExecError::Cancelled),
            Err(JudgeFail::Other(m)) => return Ok(Timed::fail(Status::RuntimeError, m)),
        };
        let timed_out = xfer.outputs.join("out_timed.bin");
        let save = json!({"op": "time_save", "indices": indices, "out": timed_out,
                          "device_out": self.device_out(cand)});
        // The judge runs its reference on the sampled sets while the candidate saves them.
        let (refs, _, saved) =
            self.judge_request_during(&json!({"op": "timed_refs"}), deadline, |s| {
                s.candidate_call(cand, &save, deadline)
            });
        let saved = match saved? {
            Err(o) => return Ok(Timed::failed(o)),
            Ok(r) => {
                if let Some(m) = r.get("reward_hack").and_then(Value::as_str) {
                    return Ok(Timed::fail(Status::RewardHack, m.to_string()));
                }
                r
            }
        };
        match refs {
            Ok(r) if reply_ok(&r) => {}
            Ok(r) => return Ok(Timed::fail(Status::InvalidReference, reply_message(&r))),
            Err(JudgeFail::Cancelled) => return Err(ExecError::Cancelled),
            Err(JudgeFail::Other(m)) => return Ok(Timed::fail(Status::RuntimeError, m)),
        }
        let check = json!({"op": "check_timed", "path": timed_out, "tolerance": tol_json});
        let check = match self.handed_check(cand, &saved, check, deadline)? {
            Ok(c) => c,
            Err(o) => return Ok(Timed::failed(o)),
        };
        let r = self.judge_request(&check, deadline);
        let r = match self.settle_check(cand, r, &check, deadline)? {
            Ok(r) => r,
            Err(o) => return Ok(Timed::failed(o)),
        };
        match r {
            Ok(r) if reply_ok(&r) => {
                let st = r.get("status").and_then(Value::as_str).unwrap_or("");
                if st != "PASSED" {
                    let msg = format!(
                        "outputs of the timed calls (distinct inputs, sampled after timing) differ from the reference although the untimed calls matched: {}",
                        r.get("message").and_then(Value::as_str).unwrap_or(st)
                    );
                    let status = Status::parse(st).unwrap_or(Status::IncorrectNumerical);
                    return Ok(Timed::Fail(Box::new(TimedFail {
                        outcome: Outcome::fail(status, msg),
                        check: Some(r),
                    })));
                }
            }
            Ok(r) => return Ok(Timed::fail(Status::RuntimeError, reply_message(&r))),
            Err(JudgeFail::Cancelled) => return Err(ExecError::Cancelled),
            Err(JudgeFail::Other(m)) => return Ok(Timed::fail(Status::RuntimeError, m)),
        }
        let mut tr = tr;
        if let Some(o) = tr.as_object_mut() {
            o.insert("outside_ms".into(), json!(outside_ms));
            o.insert("dual_clock".into(), dual);
            o.insert("handover".into(), json!(handover));
            o.insert("spin_us".into(), json!(spin_us));
            o.insert("ref_host_ms".into(), json!(ref_host_ms));
            o.insert("warmup_ms".into(), json!(warmup_ms));
            o.insert(
                "phases_s".into(),
                json!({"prepare": prep_s, "load": load_s, "batch": outside_ms / 1e3,
                       "checks": t_checks.elapsed().as_secs_f64()}),
            );
        }
        Ok(Timed::Ok(tr))
    }

    /// Stops the judge (and with it every worker of this lane).
    pub fn shutdown(mut self) {
        // Candidates started ahead of time for evaluations that never came.
        self.prestarted.clear();
        if let Some(j) = self.judge.take() {
            j.shutdown();
        }
    }
}

/// Where the correctness rounds' time goes, for the trace log: the parent's wall time of each
/// kind of request, and inside it the parts the worker reported in its reply's `ms` (workers'
/// figures are diagnostics only; nothing is decided on them).
#[derive(Debug, Default)]
struct RoundCosts {
    ops: IndexMap<&'static str, (f64, IndexMap<String, f64>)>,
}

impl RoundCosts {
    /// One request of kind `op`, started at `started`, with the `ms` parts of its reply (and of
    /// the per-round replies inside it, for a batch).
    fn add<'a>(
        &mut self,
        op: &'static str,
        started: Instant,
        replies: impl IntoIterator<Item = &'a Value>,
    ) {
        self.add_ms(op, started.elapsed().as_secs_f64() * 1e3, replies);
    }

    /// [`RoundCosts::add`] for a request that took `wall_ms`.
    fn add_ms<'a>(
        &mut self,
        op: &'static str,
        wall_ms: f64,
        replies: impl IntoIterator<Item = &'a Value>,
    ) {
        let e = self.ops.entry(op).or_default();
        e.0 += wall_ms;
        for parts in replies
            .into_iter()
            .filter_map(|r| r.get("ms").and_then(Value::as_object))
        {
            for (k, v) in parts {
                if let Some(ms) = v.as_f64() {
                    *e.1.entry(k.clone()).or_default() += ms;
                }
            }
        }
    }

    /// The summed `key` part of every request of kind `op` (0 when none reported it).
    fn part(&self, op: &str, key: &str) -> f64 {
        self.ops
            .get(op)
            .and_then(|(_, parts)| parts.get(key))
            .copied()
            .unwrap_or(0.0)
    }

    fn line(&self) -> String {
        let mut out = Vec::new();
        for (op, (wall, parts)) in &self.ops {
            let inner: Vec<String> = parts.iter().map(|(k, v)| format!("{k} {v:.1}")).collect();
            if inner.is_empty() {
                out.push(format!("{op} {wall:.1}"));
            } else {
                out.push(format!("{op} {wall:.1} ({})", inner.join(", ")));
            }
        }
        out.join("; ")
    }
}

/// The trace's account of the harness's own time for one workload (benchmark criterion (c)):
/// the workload's wall time less each side's timed loop (`bracket_ms.calls` of its timing notes:
/// every timed call with its flush, spin and syncs; the summed call times where a worker has no
/// such note, as on the CPU), and less the calls' own reported times only.
fn overhead_line(wall_ms: f64, cand: (&Value, f64), reference: (&Value, f64)) -> String {
    let (cl, rl) = (timed_loop_ms(cand), timed_loop_ms(reference));
    format!(
        "harness: overhead: workload {wall_ms:.1} ms; timed loops: candidate {cl:.1} ms, reference {rl:.1} ms; beyond the timed loops {:.1} ms; beyond the timed calls' own time {:.1} ms\n",
        wall_ms - cl - rl,
        wall_ms - cand.1 - reference.1
    )
}

/// A side's timed loop (`bracket_ms.calls` of its timing notes), else its summed call times.
fn timed_loop_ms((v, sum): (&Value, f64)) -> f64 {
    v.pointer("/notes/bracket_ms/calls")
        .and_then(Value::as_f64)
        .unwrap_or(sum)
}

/// The trace's account of the harness's time beyond the kernel calls the run asked for: each
/// side's timed loop and warm-up (`warmup_ms` of the timing replies), and the correctness
/// rounds' calls (the candidate's `call` and the judge's `reference` parts of the round costs;
/// the two sides run a batch at once, so only the longer counts).
fn asked_calls_line(
    wall_ms: f64,
    cand: (&Value, f64),
    reference: (&Value, f64),
    costs: &RoundCosts,
) -> String {
    let (cl, rl) = (timed_loop_ms(cand), timed_loop_ms(reference));
    let warm = |v: &Value| v.get("warmup_ms").and_then(Value::as_f64).unwrap_or(0.0);
    let (cw, rw) = (warm(cand.0), warm(reference.0));
    let (cc, rc) = (
        costs.part("candidate run", "call"),
        costs.part("judge prepare", "reference"),
    );
    format!(
        "harness: kernel calls asked for: warm-up candidate {cw:.1} ms, reference {rw:.1} ms; correctness rounds' calls candidate {cc:.1} ms, reference {rc:.1} ms; beyond these and the timed loops {:.1} ms\n",
        wall_ms - cl - rl - cw - rw - cc.max(rc)
    )
}

/// The dual clock with its allowance widened by the reference's own unexplained batch time:
/// the judge (trusted) times the reference through the same harness steps on the same sets, so
/// what its batch spends outside its reported calls (key round trips, opening sets, flushes,
/// copies, and whatever slows the machine right now) is what an honest candidate's batch may
/// spend too, up to `integrity::DUAL_CLOCK_REFERENCE_FACTOR` times.
fn dual_clock_after_reference(
    tr: &Value,
    rr: &Value,
    ref_reported_ms: f64,
    gpu: bool,
) -> Option<String> {
    let d = tr.get("dual_clock")?;
    let f = |k: &str| d.get(k).and_then(Value::as_f64);
    let (reported, extra) = (f("reported_ms")?, f("extra_ms")?);
    let outside = tr.get("outside_ms").and_then(Value::as_f64)?;
    let calls = d.get("calls").and_then(Value::as_u64)? as usize;
    let ref_unexplained = rr
        .get("batch_wall_ms")
        .and_then(Value::as_f64)
        .map(|w| (w - ref_reported_ms).max(0.0))
        .unwrap_or(0.0);
    integrity::dual_clock_violation(
        reported,
        outside,
        calls,
        gpu,
        extra + integrity::DUAL_CLOCK_REFERENCE_FACTOR * ref_unexplained,
    )
}

/// The correctness figures of a workload, merged over every check of its outputs.
struct Figures {
    max_abs: f64,
    max_rel: f64,
    min_ratio: f64,
    has_nan: bool,
    has_inf: bool,
    /// A v2 workload's per-check results, merged over the rounds (in check order).
    checks: Vec<kg_contract::CheckResult>,
}

impl Figures {
    fn new() -> Self {
        Figures {
            max_abs: 0.0,
            max_rel: 0.0,
            min_ratio: 1.0,
            has_nan: false,
            has_inf: false,
            checks: Vec::new(),
        }
    }

    /// Merges a result's per-check entries (`checks`, v2 workloads) into [`Figures::checks`].
    fn merge_checks(&mut self, r: &Value) {
        for c in replies_of(r, "checks") {
            match serde_json::from_value::<kg_contract::CheckResult>(c) {
                Ok(c) => match self.checks.iter_mut().find(|k| k.index == c.index) {
                    Some(k) => k.merge(&c),
                    None => self.checks.push(c),
                },
                // The verdict is the judge's status; a figure it could not type is lost, said.
                Err(e) => tracing::warn!("a check result of the judge's does not parse: {e}"),
            }
        }
        self.checks.sort_by_key(|c| c.index);
    }

    /// Merges one check result's figures (`max_abs`, `max_rel`, `matched_ratio`, `has_nan`,
    /// `has_inf`, each where present).
    fn merge(&mut self, r: &Value) {
        let f = |k: &str| r.get(k).and_then(Value::as_f64);
        if let Some(v) = f("max_abs") {
            self.max_abs = self.max_abs.max(v);
        }
        if let Some(v) = f("max_rel") {
            self.max_rel = self.max_rel.max(v);
        }
        if let Some(v) = f("matched_ratio") {
            self.min_ratio = self.min_ratio.min(v);
        }
        self.has_nan |= r.get("has_nan").and_then(Value::as_bool).unwrap_or(false);
        self.has_inf |= r.get("has_inf").and_then(Value::as_bool).unwrap_or(false);
        self.merge_checks(r);
    }

    fn correctness(&self, rounds: u32) -> Correctness {
        let mut c = correctness(
            self.max_abs,
            self.max_rel,
            self.has_nan,
            self.has_inf,
            self.min_ratio,
            rounds,
        );
        c.checks = (!self.checks.is_empty()).then(|| self.checks.clone());
        c
    }
}

/// The judge's check of the last correctness batch, sent while the candidate loads and warms
/// up for timing.
struct PendingCheck {
    batch: Vec<u32>,
    req: Value,
}

/// A failed timed phase: the outcome, and the judge's check reply when there was one.
struct TimedFail {
    outcome: Outcome,
    check: Option<Value>,
}

enum Timed {
    Ok(Value),
    Fail(Box<TimedFail>),
}

impl Timed {
    fn fail(status: Status, log: impl Into<String>) -> Self {
        Self::failed(Outcome::fail(status, log))
    }

    /// A failed timed phase with `outcome` and no check reply.
    fn failed(outcome: Outcome) -> Self {
        Timed::Fail(Box::new(TimedFail {
            outcome,
            check: None,
        }))
    }
}

/// What the candidate changed in the problem directory since `before`, as one log line
/// (`when`, then the files it added, which are removed here, and those under `changed_label`),
/// or None when nothing changed.
fn problem_dir_tampering(
    dir: &Path,
    before: &integrity::DirSnapshot,
    when: &str,
    changed_label: &str,
) -> Option<String> {
    let (added, changed) = integrity::dir_changes(before, dir);
    if added.is_empty() && changed.is_empty() {
        return None;
    }
    integrity::remove_added(dir, &added);
    let list = |v: &[PathBuf]| {
        v.iter()
            .take(10)
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut msg = format!(
        "the candidate wrote into the problem directory `{}`",
        dir.display()
    );
    if !when.is_empty() {
        msg.push(' ');
        msg.push_str(when);
    }
    if !added.is_empty() {
        msg.push_str(&format!("; added (now removed): {}", list(&added)));
    }
    if !changed.is_empty() {
        msg.push_str(&format!("; {changed_label}: {}", list(&changed)));
    }
    Some(msg)
}

/// REWARD_HACK when the candidate wrote into the problem directory (what it added is removed).
fn guard_problem_dir(dir: &Path, before: &integrity::DirSnapshot, outcome: Outcome) -> Outcome {
    let Some(mut msg) = problem_dir_tampering(dir, before, "", "changed or removed") else {
        return outcome;
    };
    msg.push('\n');
    msg.push_str(&outcome.log);
    Outcome::fail(Status::RewardHack, msg)
}

enum JudgeFail {
    Cancelled,
    Other(String),
}

/// A judge reply and how long the judge took over it.
type JudgeTook = (Result<Value, JudgeFail>, Duration);

fn correctness(
    max_abs: f64,
    max_rel: f64,
    has_nan: bool,
    has_inf: bool,
    ratio: f64,
    rounds: u32,
) -> Correctness {
    Correctness {
        max_relative_error: max_rel,
        max_absolute_error: max_abs,
        has_nan,
        has_inf: has_inf && !has_nan,
        extra: None,
        min_matched_ratio: Some(ratio),
        rounds: Some(rounds),
        checks: None,
    }
}

/// Keeps a trace log under the capture limit (head and tail).
fn bounded_log(s: String) -> String {
    const LIMIT: usize = 2 * crate::process::LOG_LIMIT;
    if s.len() <= LIMIT {
        return s;
    }
    let mut head_end = LIMIT / 2;
    while !s.is_char_boundary(head_end) {
        head_end -= 1;
    }
    format!(
        "{}\n[... {} bytes dropped ...]\n{}",
        &s[..head_end],
        s.len() - LIMIT,
        tail(&s, LIMIT / 2)
    )
}

/// Counts per status.
pub fn status_counts(traces: &[Trace]) -> IndexMap<String, usize> {
    let mut m = IndexMap::new();
    for t in traces {
        if let Some(e) = &t.evaluation {
            *m.entry(e.status.as_str().to_string()).or_insert(0) += 1;
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_costs_sum_each_kind_of_request_and_the_parts_workers_report() {
        let mut c = RoundCosts::default();
        let t = Instant::now();
        // A batch: the per-round replies' parts and the batch reply's own.
        let rounds = [
            json!({"ms": {"call": 1.5}}),
            json!({"ms": {"call": 0.5, "save": "x"}}),
        ];
        let batch = json!({"ms": {"save": 2.0}});
        c.add(
            "candidate run",
            t,
            rounds.iter().chain(std::iter::once(&batch)),
        );
        c.add("judge check", t, None);
        let line = c.line();
        assert!(line.contains("(call 2.0, save 2.0)"), "{line}");
        assert!(line.starts_with("candidate run "), "{line}");
        assert!(line.contains("; judge check "), "{line}");
        assert!(!line.contains("judge check 0.0 ("), "{line}");
    }

    #[test]
    fn rounds_are_batched_within_the_byte_budget() {
        // A 4096^2 bf16 matmul round: 64 MiB of inputs, twice 32 MiB of output.
        assert_eq!(rounds_fitting(128 << 20), 2);
        assert_eq!(rounds_fitting(ROUND_BATCH_BYTES + 1), 1);
        assert_eq!(rounds_fitting(4096), 65536);
        assert_eq!(
            rounds_fitting(0),
            u32::try_from(ROUND_BATCH_BYTES).unwrap_or(u32::MAX)
        );
    }

    #[test]
    fn overhead_is_counted_beyond_each_sides_timed_loop_or_its_summed_calls() {
        let cand = json!({"notes": {"bracket_ms": {"calls": 30.0}}});
        let reference = json!({"notes": {}});
        let line = overhead_line(100.0, (&cand, 5.0), (&reference, 20.0));
        // 100 - 30 (candidate loop) - 20 (reference: no loop note, its summed calls)
        assert!(line.contains("beyond the timed loops 50.0 ms"), "{line}");
        assert!(
            line.contains("beyond the timed calls' own time 75.0 ms"),
            "{line}"
        );
        assert!(
            line.contains("candidate 30.0 ms, reference 20.0 ms"),
            "{line}"
        );
    }

    #[test]
    fn asked_calls_leave_out_warm_ups_and_the_longer_sides_round_calls() {
        let cand = json!({"notes": {"bracket_ms": {"calls": 5.0}}, "warmup_ms": 4.0});
        let reference = json!({"notes": {"bracket_ms": {"calls": 20.0}}, "warmup_ms": 6.0});
        let mut costs = RoundCosts::default();
        costs.add_ms("candidate run", 12.0, [&json!({"ms": {"call": 3.0}})]);
        costs.add_ms("judge prepare", 11.0, [&json!({"ms": {"reference": 7.0}})]);
        let line = asked_calls_line(100.0, (&cand, 1.0), (&reference, 1.0), &costs);
        // 100 - 5 - 20 (loops) - 4 - 6 (warm-ups) - max(3, 7) (rounds' calls) = 58
        assert!(
            line.ends_with("beyond these and the timed loops 58.0 ms\n"),
            "{line}"
        );
        // no timing notes (the CPU): the summed call times stand for the loops
        let none = RoundCosts::default();
        let line = asked_calls_line(100.0, (&json!({}), 5.0), (&json!({}), 20.0), &none);
        assert!(
            line.ends_with("beyond these and the timed loops 75.0 ms\n"),
            "{line}"
        );
    }

    #[test]
    fn rocm_results_say_what_never_ran_on_amd_hardware() {
        let sol = |lang: &str| -> Solution {
            serde_json::from_value(json!({
                "name": "s", "definition": "d", "author": "t",
                "spec": {"languages": [lang], "target_hardware": ["gfx942"],
                         "entry_point": "k.hip::run"},
                "sources": [{"path": "k.hip", "content": ""}]
            }))
            .unwrap()
        };
        use kg_contract::Unverified::{HipBuild, HipEventTiming};
        let rocm = DeviceChoice::Rocm(0);
        assert_eq!(
            unverified_paths(&rocm, &sol("hip_cpp")),
            vec![HipEventTiming, HipBuild]
        );
        assert_eq!(
            unverified_paths(&rocm, &sol("triton")),
            vec![HipEventTiming]
        );
        assert!(unverified_paths(&DeviceChoice::Cuda(0), &sol("triton")).is_empty());
        assert!(unverified_paths(&DeviceChoice::Cpu, &sol("hip_cpp")).is_empty());
        // CUPTI is NVIDIA's: ROCm's default timing is HIP events.
        assert_eq!(
            EvalOptions::new(rocm).timing_method(),
            TimingMethod::DeviceEventSync
        );
        assert_eq!(
            EvalOptions::new(DeviceChoice::Cuda(0)).timing_method(),
            TimingMethod::Cupti
        );
        assert!(check_languages(&sol("hip_cpp")).is_ok());
    }

    #[test]
    fn dual_clock_allows_a_multiple_of_the_references_unexplained_time() {
        // A batch of 10 CPU calls reported 1 ms in 100 ms of wall time: fixed allowance 25 ms.
        let tr = json!({"outside_ms": 100.0, "dual_clock": {"reported_ms": 1.0, "calls": 10, "extra_ms": 0.0}});
        let quiet_ref = json!({"batch_wall_ms": 12.0});
        let why = dual_clock_after_reference(&tr, &quiet_ref, 10.0, false);
        assert!(
            why.is_some_and(|w| w.contains("dual clock")),
            "the reference explains its batch: a lie"
        );
        // The same batch when the reference's own batch left 30 ms unexplained (a loaded machine).
        let busy_ref = json!({"batch_wall_ms": 40.0});
        assert_eq!(
            dual_clock_after_reference(&tr, &busy_ref, 10.0, false),
            None
        );
        // No reference figure: the fixed allowance alone.
        assert!(dual_clock_after_reference(&tr, &json!({}), 10.0, false).is_some());
        // No dual-clock record (a failed timed phase never gets here): nothing to say.
        assert_eq!(
            dual_clock_after_reference(&json!({}), &busy_ref, 0.0, false),
            None
        );
    }

    #[test]
    fn sol_floor_turns_only_passed_latencies_below_t_sol_into_reward_hack() {
        let mut t = IndexMap::new();
        t.insert(("d".to_string(), "w".to_string()), 0.010);
        let floor = SolFloor {
            t_sol_ms: t,
            source: "sol.jsonl".into(),
        };
        let passed = |latency_ms: f64| Outcome {
            status: Status::Passed,
            log: "timing log\n".into(),
            correctness: None,
            performance: Some(Performance {
                latency_ms,
                reference_latency_ms: 1.0,
                speedup_factor: 1.0 / latency_ms,
                timing_method: None,
                warmup: None,
                iterations: None,
                spread: None,
                reference_spread: None,
            }),
            retry: None,
        };
        let o = floor.check("d", "w", passed(0.004));
        assert_eq!(o.status, Status::RewardHack);
        assert!(o.performance.is_none());
        assert!(o.log.contains("below T_SOL = 0.010000 ms") && o.log.contains("sol.jsonl"));
        assert!(o.log.ends_with("timing log\n"), "the original log is kept");
        let o = floor.check("d", "w", passed(0.010));
        assert_eq!(o.status, Status::Passed);
        assert!(
            o.log.contains("speed-of-light floor: T_SOL = 0.010000 ms"),
            "{}",
            o.log
        );
        assert_eq!(
            floor.check("d", "other", passed(0.004)).status,
            Status::Passed
        );
        assert_eq!(floor.check("e", "w", passed(0.004)).status, Status::Passed);
        let failed = Outcome::fail(Status::IncorrectNumerical, "x");
        assert_eq!(
            floor.check("d", "w", failed).status,
            Status::IncorrectNumerical
        );
    }

    fn reply(cupti: Option<&[f64]>, fallback: Option<&str>) -> Value {
        let mut notes = serde_json::Map::new();
        if let Some(c) = cupti {
            notes.insert("cupti_ms".into(), json!(c));
        }
        if let Some(f) = fallback {
            notes.insert("cupti_fallback".into(), json!(f));
        }
        json!({"notes": notes})
    }

    /// `choose_times` with CUPTI asked for, on these replies and event times.
    fn cupti(
        c: &Value,
        r: &Value,
        ce: &[f64],
        re: &[f64],
    ) -> (TimingMethod, Vec<f64>, Vec<f64>, Option<String>) {
        choose_times(TimingMethod::Cupti, c, r, ce.to_vec(), re.to_vec())
    }

    #[test]
    fn cupti_spans_are_used_only_when_both_sides_have_them() {
        let ev = vec![0.0065, 0.0066, 0.0064];
        let c = reply(Some(&[0.0052, 0.0051, 0.0053]), None);
        let r = reply(Some(&[0.0050, 0.0052, 0.0051]), None);
        let (m, ct, rt, note) = cupti(&c, &r, &ev, &ev);
        assert_eq!(m, TimingMethod::Cupti);
        assert_eq!((ct[0], rt[0]), (0.0052, 0.0050));
        assert!(note.is_none());

        let r_none = reply(None, Some("CUDA activity profiler unavailable: X"));
        let (m, ct, _, note) = cupti(&c, &r_none, &ev, &ev);
        assert_eq!(m, TimingMethod::DeviceEventSync);
        assert_eq!(ct, ev);
        assert!(note.is_some_and(|n| n.contains("reference: CUDA activity profiler unavailable")));
    }

    #[test]
    fn candidate_spans_far_below_its_event_brackets_are_refused() {
        // A candidate that forges tiny CUPTI spans while its bracketed calls take 1 ms.
        let ev = vec![1.0, 1.0, 1.0];
        let c = reply(Some(&[0.001, 0.001, 0.001]), None);
        let r = reply(Some(&[0.9, 0.9, 0.9]), None);
        let (m, ct, _, note) = cupti(&c, &r, &ev, &ev);
        assert_eq!(m, TimingMethod::DeviceEventSync);
        assert_eq!(ct, ev);
        assert!(note.is_some_and(|n| n.contains("far below")));
        // A span count that does not match the timed calls is not used either.
        let short = reply(Some(&[0.9]), None);
        let (m, ..) = cupti(&short, &r, &ev, &ev);
        assert_eq!(m, TimingMethod::DeviceEventSync);
    }

    #[test]
    fn forged_spans_on_a_few_microsecond_kernel_are_refused() {
        // Events 6.5 us (a 5 us add plus the launch gap): honest spans of 5 us pass, spans
        // forged down to 0.1 us do not.
        let ev = vec![0.0065, 0.0066, 0.0064];
        let honest = reply(Some(&[0.0050, 0.0049, 0.0051]), None);
        let forged = reply(Some(&[0.0001, 0.0001, 0.0001]), None);
        let (m, ..) = cupti(&honest, &honest, &ev, &ev);
        assert_eq!(m, TimingMethod::Cupti);
        let (m, ..) = cupti(&forged, &honest, &ev, &ev);
        assert_eq!(m, TimingMethod::DeviceEventSync);
    }

    #[test]
    fn tiny_kernels_are_checked_against_the_references_spans() {
        // H200, a 2 us gemv: both sides' event brackets read ~11 us (session 6's release made
        // such a workload fall back to events in one run and not in the other).
        let ce = vec![0.0112, 0.0113, 0.0111];
        let re = vec![0.0111, 0.0112, 0.0110];
        let honest = reply(Some(&[0.0019, 0.0019, 0.0020]), None);
        let reference = reply(Some(&[0.0019, 0.0020, 0.0019]), None);
        let (m, ct, _, note) = cupti(&honest, &reference, &ce, &re);
        assert_eq!(m, TimingMethod::Cupti);
        assert_eq!(ct, vec![0.0019, 0.0019, 0.0020]);
        assert!(note.is_some_and(|n| n.contains("checked against the reference")));
        // Spans forged to 0.1 us, or to 1.4 us (1.36x over the reference where the events
        // show 1.0x), are not believed.
        for forged in [0.0001, 0.0014] {
            let c = reply(Some(&[forged, forged, forged]), None);
            let (m, ..) = cupti(&c, &reference, &ce, &re);
            assert_eq!(m, TimingMethod::DeviceEventSync, "{forged}");
        }
        // Where the reference's spans are resolved by its events, the candidate's are held to
        // the plain rule.
        let resolved_ref = reply(Some(&[0.0100, 0.0101, 0.0099]), None);
        let (m, ..) = cupti(&honest, &resolved_ref, &ce, &re);
        assert_eq!(m, TimingMethod::DeviceEventSync);
    }

    #[test]
    fn spans_are_checked_against_stream_events_where_measured() {
        // H200, session 7: a 2.1 us embedding gather whose bracket times read 12.8 us (the
        // closing sync's wake-up) while its stream events read about its span.
        let with_stream = |spans: &[f64], stream_ms: f64| {
            let mut v = reply(Some(spans), None);
            v["notes"]["stream_event_median_ms"] = json!(stream_ms);
            v
        };
        let ce = vec![0.0128, 0.0127, 0.0129];
        let re = vec![0.0061, 0.0060, 0.0062];
        let reference = with_stream(&[0.0021, 0.0022, 0.0021], 0.0024);
        let honest = with_stream(&[0.0021, 0.0021, 0.0022], 0.0025);
        let (m, ct, ..) = cupti(&honest, &reference, &ce, &re);
        assert_eq!(m, TimingMethod::Cupti);
        assert_eq!(ct, vec![0.0021, 0.0021, 0.0022]);
        // Without the stream events the same spans are refused, as on the H200.
        let (m, ..) = cupti(
            &reply(Some(&[0.0021, 0.0021, 0.0022]), None),
            &reply(Some(&[0.0021, 0.0022, 0.0021]), None),
            &ce,
            &re,
        );
        assert_eq!(m, TimingMethod::DeviceEventSync);
        // Spans forged to a tenth of a 40 us call the stream events see are refused.
        let forged = with_stream(&[0.004, 0.004, 0.004], 0.040);
        let (m, _, _, note) = cupti(&forged, &reference, &ce, &re);
        assert_eq!(m, TimingMethod::DeviceEventSync);
        assert!(note.is_some_and(|n| n.contains("far below")));
    }

    #[test]
    fn the_spin_follows_the_references_host_launch_within_bounds() {
        assert_eq!(spin_us_for(None), SPIN_MIN_US);
        assert_eq!(spin_us_for(Some(0.010)), SPIN_MIN_US);
        assert_eq!(spin_us_for(Some(0.070)), 280.0);
        assert_eq!(spin_us_for(Some(0.120)), 480.0);
        assert_eq!(spin_us_for(Some(5.0)), SPIN_MAX_US);
        assert_eq!(spin_us_for(Some(f64::NAN)), SPIN_MIN_US);
    }

    #[test]
    fn only_a_reference_whose_launch_outgrows_the_spin_cap_is_called_host_bound() {
        // 4 x 149 us = 596 us fits the cap; 4 x 151 us does not.
        assert_eq!(host_bound_note(Some(0.149)), None);
        let note = host_bound_note(Some(0.151)).unwrap();
        assert!(note.contains("host launch (151 us)"), "{note}");
        assert_eq!(host_bound_note(None), None);
        assert_eq!(host_bound_note(Some(f64::NAN)), None);
    }

    #[test]
    fn other_methods_pass_through() {
        let ev = vec![0.5];
        let c = reply(Some(&[0.1]), None);
        let (m, ct, ..) = choose_times(TimingMethod::CudaGraph, &c, &c, ev.clone(), ev.clone());
        assert_eq!((m, ct), (TimingMethod::CudaGraph, ev));
    }
}
