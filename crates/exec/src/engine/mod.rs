//! The evaluation engine: one judge per device lane, one candidate process per solution.
//!
//! [`Session`] is defined here with its lifecycle; its work is split by job:
//! `judge` (the judge process and its requests), `candidate` (candidate processes, prestart,
//! the isolation probe), `evaluate` (one solution over its workloads, retries), `workload`
//! (correctness rounds and hand-over checks), `timed` (the timed calls), `timing` (method
//! choice, spin, timing notes), `outcome` (a workload's outcome as it is built), `builder`
//! (compiled solutions), and `options`, `checks`, `error`.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use kg_contract::{
    CandidateLaunch, CandidateStart, ClockState, Correctness, Environment, Evaluation,
    LoadedWorkload, Performance, Phases, Problem, Reason, ReferenceReuse, Retry, RetryReason,
    Solution, SourceFile, Status, TimingMethod, Trace,
};
use kg_proc::now_utc as now_iso;
use serde_json::{Value, json};

use crate::integrity;
use crate::placement::DeviceChoice;
use crate::process::{CancelToken, Worker, WorkerError, WorkerSpec, tail};
use crate::protocol::{Aside, AsideReply, Bounds};
use crate::python::Interpreter;
use crate::sandbox::Sandbox;
use crate::scripts;

mod builder;
mod candidate;
mod checks;
mod error;
mod evaluate;
mod judge;
mod options;
mod outcome;
mod precompile;
mod rounds;
mod timed;
mod timing;
mod workload;

pub use builder::{BuildOutcome, Built};
pub use candidate::Due;
pub(crate) use candidate::missing_beside;
use candidate::*;
pub use checks::{check_languages, toolchain_check, unverified_paths};
pub use error::ExecError;
pub use options::{EvalOptions, Prestart, SolFloor, TimingChoice, default_cache_dir};
use outcome::*;
use timing::*;

/// Languages a solution may declare.
pub const SUPPORTED_LANGUAGES: [&str; 5] = ["pytorch", "python", "triton", "cuda_cpp", "hip_cpp"];

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
    /// The evaluations due after the next one (solution, workload count, precompiler
    /// calls), in order, as last
    /// named by [`Session::prestart_next`] and not yet acted on.
    next: Option<Vec<(Solution, usize, Vec<Value>)>>,
    /// Why candidates are no longer started ahead of time in this session.
    prestart_off: Option<String>,
    /// Whether a candidate of this session was observed confined to its own PID namespace
    /// and read-only view (so a precompiler's view, GPU device nodes covered, holds too).
    confined_seen: bool,
    /// Builds of compiled solutions made elsewhere ([`Session::provide_build`]), by solution,
    /// with the time waited for them.
    builds: std::collections::HashMap<String, (BuildOutcome, Duration)>,
    /// The solution being evaluated (named by reused reference timings).
    evaluating: String,
    /// Reference timings kept for later candidates (`EvalOptions::reference_reuse`), by
    /// [`workload::ReferenceKey`].
    kept_references: std::collections::HashMap<String, workload::KeptReference>,
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
            confined_seen: false,
            builds: std::collections::HashMap::new(),
            evaluating: String::new(),
            kept_references: std::collections::HashMap::new(),
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

    /// Whether `sol`'s language can be built and run on this session's device and host
    /// ([`crate::toolchain::missing_for`]); [`ExecError::ToolchainMissing`] names what is not.
    pub fn check_toolchain(&self, sol: &Solution) -> Result<(), ExecError> {
        toolchain_check(sol, &self.opts.device, &self.python.path)
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
mod tests;
