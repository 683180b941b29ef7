//! What a corpus run tells its caller: [`RunEvent`]s for a [`Reporter`], and the
//! [`RunnerError`]s that stop it.

use std::path::PathBuf;

use indexmap::IndexMap;
use kg_contract::chain::ChainError;
use kg_contract::{ContractError, Trace};

use crate::DeviceChoice;
use crate::corpus::{
    CorpusError, CpuEstimate, DuplicateName, RunSummary, SolCoverage, SolutionLayout,
};
use crate::engine::ExecError;

/// Errors that stop a corpus run (as opposed to statuses recorded in traces and problems
/// listed in the summary's `errors`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunnerError {
    /// Discovery, a solution file, a filter or a trace-path clash.
    #[error(transparent)]
    Corpus(#[from] CorpusError),
    /// The solution source is a directory that does not exist.
    #[error(
        "--solutions `{}` is neither `reference`, `bundled` nor a directory",
        .0.display()
    )]
    SolutionsNotADirectory(PathBuf),
    /// Filters were given and selected no pair.
    #[error(
        "--filter {} matched no problem/solution pair of `{}`",
        filters.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", "),
        corpus.display()
    )]
    FilterMatchedNothing {
        /// The filter expressions.
        filters: Vec<String>,
        /// The corpus.
        corpus: PathBuf,
    },
    /// Every selected pair was refused on this device.
    #[error("every selected solution was refused on {device}: nothing can be evaluated here")]
    AllRefused {
        /// The device.
        device: DeviceChoice,
    },
    /// A stale trace file could not be removed before its pair was evaluated again.
    #[error("failed to remove stale `{}`: {error}", path.display())]
    RemoveStale {
        /// The trace file.
        path: PathBuf,
        /// The OS error (in the message, not a source, so it is not said twice).
        error: std::io::Error,
    },
    /// Hashing a solution, or serialising or writing `summary.json`.
    #[error(transparent)]
    Contract(#[from] ContractError),
    /// Writing a trace file or sealing the run.
    #[error(transparent)]
    Chain(#[from] ChainError),
    /// The engine stopped: cancelled, a harness fault, the judge lost, an unusable
    /// environment.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// A runner was given no lane.
    #[error("a corpus run needs at least one lane")]
    NoLanes,
    /// Several lanes were asked for without the candidate sandbox.
    #[error(
        "{lanes} lanes run candidates side by side, which needs the candidate sandbox (its own PID namespace and read-only view); drop --no-sandbox, or use one lane"
    )]
    LanesNeedSandbox {
        /// Lanes asked for.
        lanes: usize,
    },
    /// Lanes of a several-lane run stopped; the other lanes' traces are written, and no
    /// summary is.
    #[error(
        "{} of {lanes} lanes stopped: {}; the pairs they did not finish have no complete traces and no summary was written (run again: finished pairs are kept)",
        failures.len(),
        failures.iter().map(LaneFailure::to_string).collect::<Vec<_>>().join("; ")
    )]
    LanesFailed {
        /// Lanes in the run.
        lanes: usize,
        /// Each stopped lane.
        failures: Vec<LaneFailure>,
    },
}

/// A lane that stopped, and the pair it was evaluating.
#[derive(Debug, thiserror::Error)]
#[error("lane {lane} ({label}) at {key} / {solution}: {error}")]
pub struct LaneFailure {
    /// The lane index.
    pub lane: usize,
    /// Its label.
    pub label: String,
    /// The problem key.
    pub key: String,
    /// The solution name.
    pub solution: String,
    /// Why it stopped.
    pub error: Box<RunnerError>,
}

/// Why a pair was not evaluated again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// Its complete earlier traces all PASSED.
    AllPassed,
    /// Its complete earlier traces stand, and this many workloads did not pass.
    NotPassed(usize),
}

/// What the runner tells its [`Reporter`], in the order it happens.
#[derive(Debug)]
#[non_exhaustive]
pub enum RunEvent {
    /// A problem failed to load or hash; it is in the summary's `errors` and is not run.
    ProblemFailed {
        /// The problem key.
        key: String,
        /// Why.
        error: String,
    },
    /// Several problems share a definition name; each is evaluated on its own, keyed by path.
    DuplicateDefinition(DuplicateName),
    /// A problem has no solutions from the source; it is skipped.
    NoSolutions {
        /// The problem key.
        key: String,
        /// What was searched, as patterns.
        searched: Vec<String>,
    },
    /// How many problems had solutions in each layout (not sent for
    /// [`crate::corpus::SolutionSource::Reference`]).
    SolutionLayouts(IndexMap<SolutionLayout, usize>),
    /// A pair refused before anything runs: not evaluated, in the summary's `refused`.
    PairRefused {
        /// The problem key.
        key: String,
        /// The solution name.
        solution: String,
        /// Its languages.
        languages: Vec<String>,
        /// Why.
        error: ExecError,
    },
    /// After the refusals, when any pair was refused.
    RefusedTotal {
        /// Pairs refused.
        refused: usize,
        /// Pairs selected.
        selected: usize,
    },
    /// The speed-of-light floor does not bound every selected workload.
    SolCoverage(SolCoverage),
    /// A pair whose earlier traces stand is not evaluated.
    PairSkipped {
        /// The problem key.
        key: String,
        /// The solution name.
        solution: String,
        /// Its trace file.
        path: PathBuf,
        /// Why it is skipped.
        reason: SkipReason,
    },
    /// On the CPU, the estimate of everything about to run.
    CpuEstimate(CpuEstimate),
    /// The session is up and evaluation starts.
    RunStarted {
        /// Problem/solution pairs to evaluate.
        pairs: usize,
        /// Workloads to evaluate.
        workloads: usize,
        /// Their CPU estimate in seconds (0 off the CPU).
        estimated_s: f64,
    },
    /// Evaluation is spread over these lanes (sent once, before the first pair starts).
    LanesStarted {
        /// Each lane's label ([`crate::lanes::Lane::label`]), by lane index.
        labels: Vec<String>,
        /// Why fewer lanes than asked for are used (candidates would run side by side
        /// without the layers that keep them apart).
        reduced: Option<String>,
    },
    /// The build pool starts building (or looking up) a compiled solution.
    BuildStarted {
        /// The solution name.
        solution: String,
    },
    /// The build pool finished with a compiled solution.
    BuildFinished {
        /// The solution name.
        solution: String,
        /// How it ended.
        outcome: BuildEnd,
        /// Seconds it took.
        seconds: f64,
    },
    /// A pair is about to be evaluated.
    PairStarted {
        /// The lane evaluating it.
        lane: usize,
        /// The problem key.
        key: String,
        /// The solution name.
        solution: String,
        /// CPU estimates per workload uuid (empty off the CPU).
        estimates: IndexMap<String, f64>,
    },
    /// A workload of a lane's current pair is about to be evaluated.
    WorkloadStarted {
        /// The lane.
        lane: usize,
        /// The workload uuid.
        uuid: String,
        /// 0-based position in the pair.
        index: usize,
        /// Workloads of the pair.
        total: usize,
    },
    /// A workload of a lane's current pair finished: its trace (not yet chained).
    WorkloadFinished {
        /// The lane.
        lane: usize,
        /// The trace.
        trace: Box<Trace>,
    },
    /// Something the user should know (e.g. a worker restarted).
    Notice(String),
    /// A problem changed during an evaluation: its later pairs are not run; it is in the
    /// summary's `errors`.
    ProblemChanged {
        /// The problem key.
        key: String,
        /// Why.
        error: ExecError,
    },
    /// A pair's traces are written.
    PairFinished {
        /// The lane that evaluated it.
        lane: usize,
        /// The problem key.
        key: String,
        /// The solution name.
        solution: String,
        /// The trace file.
        file: PathBuf,
    },
    /// A lane stopped (the judge lost, a harness fault, a failed write): its pair's finished
    /// traces are written, the rest of that pair is not evaluated, and the other lanes go on
    /// with the pairs still waiting.
    LaneFailed {
        /// The lane.
        lane: usize,
        /// Its label.
        label: String,
        /// The problem key of the pair it was evaluating.
        key: String,
        /// The solution name.
        solution: String,
        /// Why.
        error: String,
    },
    /// `summary.json` is written.
    RunFinished {
        /// The summary.
        summary: Box<RunSummary>,
        /// Where it was written.
        path: PathBuf,
    },
}

/// How a build of the build pool ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuildEnd {
    /// Built now and cached.
    Built,
    /// Found in the build cache.
    Cached,
    /// The build failed: the solution's workloads are COMPILE_ERROR with its log.
    Failed,
    /// The pool could not build it (cancelled, its session failed): the lane builds it.
    LeftToLane,
}

/// Receives a run's [`RunEvent`]s (a closure taking `&RunEvent` is one).
pub trait Reporter {
    /// One event.
    fn report(&mut self, event: &RunEvent);
}

impl<F: FnMut(&RunEvent)> Reporter for F {
    fn report(&mut self, event: &RunEvent) {
        self(event);
    }
}
