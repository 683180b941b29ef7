//! SOL-ExecBench `Trace`: one evaluated (definition, solution, workload) record.
//!
//! Fields beyond upstream (timing method, spread, device identity, clocks) are additive and
//! optional, so upstream readers ignore them and we read upstream traces.

use std::path::Path;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::{ContractError, Location};
use crate::io::load_jsonl;
use crate::workload::Workload;

/// The outcome of evaluating one workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// Correct in every round, and timed.
    Passed,
    /// An output had the wrong shape.
    IncorrectShape,
    /// Values outside tolerance (or NaN/Inf where the reference has none).
    IncorrectNumerical,
    /// An output had the wrong dtype.
    IncorrectDtype,
    /// The candidate raised, crashed or lost its device context.
    RuntimeError,
    /// The candidate failed to build or import.
    CompileError,
    /// The candidate exceeded its time limit.
    Timeout,
    /// The candidate tampered with the harness or gamed timing.
    RewardHack,
    /// The reference itself is unusable (raises, NaN everywhere, ignores its inputs).
    InvalidReference,
}

impl Status {
    /// Every status, in upstream order.
    pub const ALL: [Status; 9] = [
        Status::Passed,
        Status::IncorrectShape,
        Status::IncorrectNumerical,
        Status::IncorrectDtype,
        Status::RuntimeError,
        Status::CompileError,
        Status::Timeout,
        Status::RewardHack,
        Status::InvalidReference,
    ];

    /// The upstream spelling, e.g. `INCORRECT_SHAPE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Passed => "PASSED",
            Status::IncorrectShape => "INCORRECT_SHAPE",
            Status::IncorrectNumerical => "INCORRECT_NUMERICAL",
            Status::IncorrectDtype => "INCORRECT_DTYPE",
            Status::RuntimeError => "RUNTIME_ERROR",
            Status::CompileError => "COMPILE_ERROR",
            Status::Timeout => "TIMEOUT",
            Status::RewardHack => "REWARD_HACK",
            Status::InvalidReference => "INVALID_REFERENCE",
        }
    }

    /// Whether an evaluation with this status must carry `correctness` (PASSED and
    /// INCORRECT_NUMERICAL); every other status must not.
    pub fn has_correctness(self) -> bool {
        matches!(self, Status::Passed | Status::IncorrectNumerical)
    }

    /// Whether an evaluation with this status must carry `performance` (PASSED only).
    pub fn has_performance(self) -> bool {
        self == Status::Passed
    }

    /// Parses the upstream spelling.
    pub fn parse(s: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a latency was measured. Every latency we report carries one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TimingMethod {
    /// Host wall clock around synchronous CPU calls (`time.perf_counter`). Not GPU evidence.
    CpuWall,
    /// Device events bracketed by a device-wide synchronisation, fresh L2 and input pointers per iteration.
    DeviceEventSync,
    /// CUPTI kernel activity span over all of the candidate's kernels.
    Cupti,
    /// Replay of a captured CUDA graph; per-launch time. For launch-bound kernels only.
    CudaGraph,
}

/// Correctness summary (present for PASSED and INCORRECT_NUMERICAL).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Correctness {
    /// Largest `|o-r| / max(|r|, atol)` over all rounds (upstream default 0).
    #[serde(default)]
    pub max_relative_error: f64,
    /// Largest `|o-r|` over all rounds (upstream default 0).
    #[serde(default)]
    pub max_absolute_error: f64,
    /// NaN in output or reference.
    #[serde(default)]
    pub has_nan: bool,
    /// Inf (and no NaN) in output or reference.
    #[serde(default)]
    pub has_inf: bool,
    /// Free-form extra metrics (upstream `extra`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<IndexMap<String, serde_json::Value>>,
    /// Smallest matched-element ratio over rounds (kernelgate addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_matched_ratio: Option<f64>,
    /// Correctness rounds run, each with fresh inputs (kernelgate addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rounds: Option<u32>,
    /// A v2 workload's checks, in its order: which ran, on which outputs, with their worst
    /// figures over the rounds (kernelgate addition; absent for v1 workloads).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<Vec<CheckResult>>,
}

/// What one check of a v2 workload found, over every evaluation of it (kernelgate addition).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CheckResult {
    /// Its index in the workload's `checks`.
    pub index: u32,
    /// The outputs it judged.
    pub outputs: Vec<String>,
    /// Whether it passed every time it ran.
    pub passed: bool,
    /// How many times it ran (correctness rounds, and a failed check of the timed calls).
    pub rounds: u32,
    /// Its worst figures, by check type.
    #[serde(flatten)]
    pub figures: CheckFigures,
}

/// The figures of one check type (the ROCm port's per-check result fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CheckFigures {
    /// A numeric check.
    Numeric {
        /// Elementwise or normalized-max.
        mode: crate::workload::NumericMode,
        /// Largest `|o - r|`.
        max_absolute_error: f64,
        /// Largest relative error (the normalized error in `normalized_max` mode).
        max_relative_error: f64,
        /// Smallest fraction of elements within bounds.
        matched_ratio: f64,
        /// NaN seen where it fails the check.
        has_nan: bool,
        /// Inf (and no NaN) seen where it fails the check.
        has_inf: bool,
    },
    /// An exact check.
    Exact {
        /// Most elements that differed in one evaluation.
        mismatched_elements: u64,
        /// Elements compared per evaluation.
        total_elements: u64,
    },
    /// A code-distance check.
    CodeDistance {
        /// Largest code distance seen.
        max_distance: u64,
        /// Smallest fraction of codes within `max_distance`.
        matched_ratio: f64,
    },
    /// A top-k routing check.
    TopkRouting {
        /// Largest fraction of tokens routed differently (beyond ties).
        genuine_mismatch_ratio: f64,
        /// Largest weight error of an expert both sides chose.
        max_matched_weight_error: f64,
    },
}

impl CheckResult {
    /// Folds a later evaluation of the same check into this one: it passed only if both did,
    /// and every figure is the worse of the two (results of different checks: not passed).
    pub fn merge(&mut self, later: &CheckResult) {
        use CheckFigures as F;
        self.rounds += later.rounds;
        self.passed &= later.passed;
        let same = self.index == later.index && self.outputs == later.outputs;
        match (&mut self.figures, &later.figures) {
            (
                F::Numeric {
                    mode,
                    max_absolute_error: a,
                    max_relative_error: r,
                    matched_ratio: m,
                    has_nan: n,
                    has_inf: i,
                },
                F::Numeric {
                    mode: mode2,
                    max_absolute_error: a2,
                    max_relative_error: r2,
                    matched_ratio: m2,
                    has_nan: n2,
                    has_inf: i2,
                },
            ) if same && mode == mode2 => {
                *a = a.max(*a2);
                *r = r.max(*r2);
                *m = m.min(*m2);
                *n |= *n2;
                *i |= *i2;
            }
            (
                F::Exact {
                    mismatched_elements: e,
                    total_elements: t,
                },
                F::Exact {
                    mismatched_elements: e2,
                    total_elements: t2,
                },
            ) if same => {
                *e = (*e).max(*e2);
                *t = (*t).max(*t2);
            }
            (
                F::CodeDistance {
                    max_distance: d,
                    matched_ratio: m,
                },
                F::CodeDistance {
                    max_distance: d2,
                    matched_ratio: m2,
                },
            ) if same => {
                *d = (*d).max(*d2);
                *m = m.min(*m2);
            }
            (
                F::TopkRouting {
                    genuine_mismatch_ratio: g,
                    max_matched_weight_error: w,
                },
                F::TopkRouting {
                    genuine_mismatch_ratio: g2,
                    max_matched_weight_error: w2,
                },
            ) if same => {
                *g = g.max(*g2);
                *w = w.max(*w2);
            }
            _ => self.passed = false,
        }
    }
}

/// Distribution of per-iteration latencies.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Spread {
    /// Fastest iteration.
    pub min_ms: f64,
    /// 25th percentile.
    pub p25_ms: f64,
    /// Median.
    pub median_ms: f64,
    /// 75th percentile.
    pub p75_ms: f64,
    /// Slowest iteration.
    pub max_ms: f64,
    /// Mean.
    pub mean_ms: f64,
}

/// Performance summary (present for PASSED).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Performance {
    /// Median candidate latency per call (upstream default 0).
    #[serde(default)]
    pub latency_ms: f64,
    /// Median reference latency per call, same method and device (upstream default 0).
    #[serde(default)]
    pub reference_latency_ms: f64,
    /// `reference_latency_ms / latency_ms` (upstream default 0).
    #[serde(default)]
    pub speedup_factor: f64,
    /// How both latencies were measured (kernelgate addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing_method: Option<TimingMethod>,
    /// Warm-up calls before timing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<u32>,
    /// Timed iterations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u32>,
    /// Candidate latency distribution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<Spread>,
    /// Reference latency distribution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_spread: Option<Spread>,
    /// Where the workload's harness time went, by phase (kernelgate addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<Phases>,
    /// Set when the reference latency and spread were timed with an earlier candidate of the
    /// same workload on the same device and reused (`--reference-reuse`); absent when the
    /// reference was timed with this candidate (kernelgate addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference_reused: Option<ReferenceReuse>,
}

/// A reference timing reused from an earlier candidate's evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReferenceReuse {
    /// The solution whose evaluation timed the reference.
    pub timed_with: String,
    /// Seconds from that timing to this candidate's timed batch.
    pub age_s: f64,
    /// How many candidates, this one included, have used that timing so far.
    pub uses: u32,
}

/// Seconds a workload's evaluation spent in each phase, as the harness measured them: what
/// tools read to see where time goes (the log says the same in words).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Phases {
    /// The correctness rounds (both sides' calls, the judge's checks).
    pub correctness_rounds_s: f64,
    /// Preparing the timed input sets.
    pub timed_inputs_s: f64,
    /// The candidate's load and warm-up before its timed batch.
    pub candidate_load_warmup_s: f64,
    /// The candidate's timed batch.
    pub timed_batch_s: f64,
    /// Re-checking sampled timed calls' outputs.
    pub sampled_checks_s: f64,
    /// Timing the reference.
    pub reference_timing_s: f64,
}

/// Which device produced a result, exactly enough for a reviewer to tell.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DeviceIdentity {
    /// `cpu`, `cuda` or `rocm`.
    pub kind: String,
    /// Runtime index (CUDA ordinal / HIP index) as the worker saw it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// Marketing name, e.g. `NVIDIA H200`, or the CPU model.
    pub name: String,
    /// Device UUID where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// PCI bus id where known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// Architecture, e.g. `sm_90`, `gfx942`, `x86_64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<String>,
    /// Total device memory in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_total_bytes: Option<u64>,
}

/// Clock state during a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClockState {
    /// SM / shader clock in MHz when sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_mhz: Option<u32>,
    /// Memory clock in MHz when sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_mhz: Option<u32>,
    /// Whether clocks were locked for the run.
    pub locked: bool,
    /// Why clocks were not locked, when they were asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Hardware and software the trace came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Environment {
    /// Hardware name, e.g. `NVIDIA_H200` or `CPU`.
    pub hardware: String,
    /// Library versions by name.
    #[serde(default)]
    pub libs: IndexMap<String, String>,
    /// Device identity (kernelgate addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceIdentity>,
    /// Clocks (kernelgate addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clocks: Option<ClockState>,
    /// Host name (kernelgate addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// kernelgate version that wrote the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernelgate_version: Option<String>,
    /// The kg-gpu claim that held the device for the run (kernelgate addition); absent when the
    /// device was used unclaimed (CPU, or an explicit `--device cuda:N`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_claim: Option<crate::claim::GpuClaim>,
    /// The candidate's confinement layers as observed from outside it (kernelgate addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<crate::isolation::IsolationReport>,
    /// Code paths this result went through that have never run on the hardware they target
    /// (kernelgate addition; empty for every NVIDIA and CPU result).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unverified: Vec<Unverified>,
}

/// A code path of kernelgate's that has not been run on the hardware it targets: kernelgate is
/// developed on NVIDIA GPUs and CPUs, with no AMD GPU to test on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Unverified {
    /// A `hip_cpp` solution built by torch's ROCm extension build with `hipcc`: tested only
    /// with a stand-in `hipcc` on a CPU build of torch.
    HipBuild,
    /// Timing on an AMD GPU by HIP events between device-wide syncs (`torch.cuda.Event` on
    /// ROCm): the same code as the NVIDIA event path, never run on an AMD device.
    HipEventTiming,
}

/// The result of one benchmark run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Evaluation {
    /// Final status.
    pub status: Status,
    /// Captured candidate output and the reason for a failure (bounded).
    #[serde(default)]
    pub log: String,
    /// Present for PASSED and INCORRECT_NUMERICAL.
    #[serde(default)]
    pub correctness: Option<Correctness>,
    /// Present for PASSED.
    #[serde(default)]
    pub performance: Option<Performance>,
    /// Where it ran.
    #[serde(default)]
    pub environment: Environment,
    /// ISO 8601 time of the result.
    #[serde(default)]
    pub timestamp: String,
    /// Wall-clock seconds the harness spent on this workload, from its first request to its
    /// verdict (kernelgate addition; absent in upstream traces and for workloads that never
    /// reached the candidate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_s: Option<f64>,
    /// Present when the harness discarded a first attempt at this workload and evaluated it
    /// again (kernelgate addition): this evaluation is the second attempt's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retried: Option<Retry>,
    /// How the candidate process this workload ran in was started (kernelgate addition;
    /// on the first workload each candidate process evaluated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_start: Option<CandidateStart>,
    /// How a compiled solution's module was built (kernelgate addition; `cuda_cpp`/`hip_cpp`,
    /// on the first workload each candidate process evaluated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildRecord>,
    /// Why the workload did not pass, as a code tools match on (kernelgate addition; on every
    /// status but PASSED in traces kernelgate writes). The log says the same in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Reason>,
}

/// Why a workload did not pass: one code per check that can fail it. Tools (the red-team
/// table, reports) read this, never the log's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    // The solution did not build or run.
    /// The solution's module did not build or import (COMPILE_ERROR).
    BuildFailed,
    /// The solution raised an exception.
    CandidateRaised,
    /// The candidate process died (a signal, an exit, a crash); the harness lived on.
    CandidateDied,
    /// The candidate did not finish within `--timeout`; its process group was killed.
    Timeout,
    /// The candidate process broke the worker protocol.
    WorkerProtocol,
    /// No candidate process could be had for the workload.
    NoCandidate,
    /// The candidate answered fewer rounds than it was asked.
    ShortReply,
    // The outputs.
    /// Fewer or more outputs than the definition declares.
    OutputCount,
    /// An output is not a tensor.
    OutputNotTensor,
    /// An output's shape differs from the reference's.
    OutputShape,
    /// An output's dtype differs from the reference's.
    OutputDtype,
    /// An output's values are outside the tolerance (or the workload's checks).
    NumericalMismatch,
    /// The candidate's handed-over outputs could not be read.
    OutputsUnreadable,
    /// Outputs the judge asked for were not handed over.
    OutputsMissing,
    /// The outputs of the timed calls, sampled after timing, differ from the reference
    /// although the untimed rounds matched.
    TimedOutputsDiffer,
    // Reward hacks.
    /// An output is a torch.Tensor subclass.
    OutputSubclass,
    /// An output shares storage with an input.
    OutputAliasesInput,
    /// The solution changed the harness (its timer, its functions, its state).
    HarnessTampered,
    /// The solution started threads during the timed calls (work moved off the timed path).
    TimedThreads,
    /// The solution asked for a timed input set out of turn.
    SealedKeyOrder,
    /// The timing samples are not one per timed call handed out.
    SamplesUnbound,
    /// The candidate's reported time falls short of the parent's wall clock (twice).
    DualClock,
    /// A PASSED latency below the workload's speed-of-light bound.
    FasterThanSol,
    /// The candidate changed the problem directory.
    ProblemDirChanged,
    /// The candidate reported a reward hack in a form this harness version does not name.
    OtherRewardHack,
    // The harness and the reference.
    /// The reference failed to load or run (INVALID_REFERENCE).
    ReferenceFailed,
    /// The judge's reference timing is not bound to its timed calls.
    ReferenceTimingUnbound,
    /// The judge failed while checking outputs.
    JudgeFailed,
    /// The judge's round inputs differ from the draws it announced.
    DrawsMismatch,
    /// Timing produced no samples.
    NoSamples,
}

impl Reason {
    /// The code spelled `s` (a worker's reply), if it is one.
    pub fn parse(s: &str) -> Option<Reason> {
        serde_json::from_value(serde_json::Value::String(s.to_string())).ok()
    }
}

impl std::fmt::Display for Reason {
    /// The snake_case spelling used in traces.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::String(s)) => f.write_str(&s),
            _ => write!(f, "{self:?}"),
        }
    }
}

/// A compiled solution's module, as kernelgate's builder made it (never the candidate): built
/// now or taken from the build cache, bound by its hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BuildRecord {
    /// Whether the module came from the build cache (its hash checked) instead of a build.
    pub cached: bool,
    /// The cache key: SHA-256 of the sources, compile options, languages and toolchain.
    pub key: String,
    /// SHA-256 of the module the candidate loaded.
    pub module_sha256: String,
    /// Seconds the build took (for a cached module, the build that made it).
    pub build_s: f64,
    /// Seconds this evaluation waited for the module (0 when it was ready).
    pub waited_s: f64,
}

/// How long a candidate process took to be ready, and when it was started.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CandidateStart {
    /// Seconds from the harness asking for the candidate to its worker being ready (before
    /// the solution is loaded): what the candidate's start cost this evaluation.
    pub ready_s: f64,
    /// Seconds from its process being started to the harness finding it ready (interpreter
    /// start and `import torch`, and for a process started ahead of time the wait until it
    /// was asked for).
    pub process_s: f64,
    /// Seconds the solution's load (build and import) took once the worker was ready.
    pub load_s: f64,
    /// When its process was started.
    pub started: CandidateLaunch,
    /// The Triton kernels of its first calls compiled ahead into its own cache, while an
    /// earlier evaluation ran (`kg-bench run --precompile`); absent where none was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub precompiled: Option<Precompiled>,
}

/// What the precompiler of a Triton solution left in the solution's own Triton cache: it ran
/// the solution's calls on meta tensors (no data) of each workload's shapes, with no GPU it
/// could open, every Triton launch turned into a compile. Nothing it computed is read back.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Precompiled {
    /// Distinct kernels compiled (an autotuned kernel counts each configuration).
    pub kernels: u32,
    /// Their launchers (C modules) built.
    pub launchers: u32,
    /// Calls or launcher builds that raised (compiled by the candidate itself instead).
    pub failed: u32,
    /// Seconds its calls and builds took.
    pub seconds: f64,
    /// Seconds the harness waited for it to finish when the candidate was asked for.
    pub waited_s: f64,
}

/// When a candidate process was started. A process started ahead of time runs only
/// kernelgate's worker script (the interpreter and `import torch`) until it is asked for; the
/// solution is sent to it only then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CandidateLaunch {
    /// When the harness asked for it (a restart after the candidate process died, or where
    /// starting it ahead of time failed).
    WhenAsked,
    /// As its evaluation began, while the judge started or loaded the reference.
    EvaluationStart,
    /// While an earlier evaluation ran (`kg-bench run --prestart`).
    EarlierEvaluation,
}

/// Why a workload was evaluated a second time, and what the discarded attempt said.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Retry {
    /// The reason, typed.
    pub reason: RetryReason,
    /// The first attempt's status and the start of its log (bounded).
    pub first_attempt: String,
}

/// What makes the harness evaluate a workload once more instead of recording the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RetryReason {
    /// The dual clock found less reported time than the parent's wall time allows, which a
    /// loaded machine can cause as well as a forged timer: a forger fails the second attempt
    /// too (then REWARD_HACK), a burst of load does not.
    DualClock,
    /// A transfer directory the harness made for this workload was gone: a fault of
    /// kernelgate's plumbing, never the candidate's status. A second loss stops the evaluation
    /// with a harness error and no trace for the workload.
    HarnessStateLost,
}

impl RetryReason {
    /// The snake_case spelling used in traces.
    pub fn as_str(self) -> &'static str {
        match self {
            RetryReason::DualClock => "dual_clock",
            RetryReason::HarnessStateLost => "harness_state_lost",
        }
    }
}

/// An evaluation whose `correctness` / `performance` presence contradicts its status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NullableError {
    /// The status requires a table that is null or absent.
    #[error("is null or absent, but status {status} requires it")]
    Missing {
        /// The evaluation's status.
        status: Status,
        /// `correctness` or `performance`.
        field: &'static str,
    },
    /// The status forbids a table that is present.
    #[error(
        "is present, but status {status} must not carry it (correctness: PASSED and INCORRECT_NUMERICAL only; performance: PASSED only)"
    )]
    Unexpected {
        /// The evaluation's status.
        status: Status,
        /// `correctness` or `performance`.
        field: &'static str,
    },
}

impl NullableError {
    /// The offending field, `correctness` or `performance`.
    pub fn field(&self) -> &'static str {
        match self {
            NullableError::Missing { field, .. } | NullableError::Unexpected { field, .. } => field,
        }
    }
}

impl Evaluation {
    /// Checks the upstream nullable rules: PASSED carries correctness and performance,
    /// INCORRECT_NUMERICAL carries correctness and no performance, every other status neither.
    pub fn check_nullable(&self) -> Result<(), NullableError> {
        let status = self.status;
        for (field, want, have) in [
            (
                "correctness",
                status.has_correctness(),
                self.correctness.is_some(),
            ),
            (
                "performance",
                status.has_performance(),
                self.performance.is_some(),
            ),
        ] {
            match (want, have) {
                (true, false) => return Err(NullableError::Missing { status, field }),
                (false, true) => return Err(NullableError::Unexpected { status, field }),
                _ => {}
            }
        }
        Ok(())
    }
}

/// Loads a traces JSONL file and checks every evaluation's nullable rules.
///
/// Returns the traces in file order and warnings (unknown fields, likely typos).
pub fn load_traces(path: &Path) -> Result<(Vec<Trace>, Vec<String>), ContractError> {
    let mut traces = Vec::new();
    let mut warnings = Vec::new();
    for (line, trace, unknown) in load_jsonl::<Trace>(path)? {
        warnings.extend(unknown.into_iter().map(|f| {
            format!(
                "`{}` line {line}: unknown field `{f}` ignored",
                path.display()
            )
        }));
        let at = |field: String, message: String| ContractError::Invalid {
            at: Location {
                path: path.to_path_buf(),
                line: Some(line),
                field,
            },
            message,
        };
        if trace.definition.trim().is_empty() {
            return Err(at(
                "definition".into(),
                "empty; expected the definition's name".into(),
            ));
        }
        if let Some(eval) = &trace.evaluation {
            eval.check_nullable()
                .map_err(|e| at(format!("evaluation.{}", e.field()), e.to_string()))?;
        }
        traces.push(trace);
    }
    Ok((traces, warnings))
}

/// One trace: a JSONL line of a traces file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Trace {
    /// Definition name.
    pub definition: String,
    /// Solution name.
    #[serde(default)]
    pub solution: Option<String>,
    /// The workload evaluated.
    pub workload: Workload,
    /// The result, when evaluated.
    #[serde(default)]
    pub evaluation: Option<Evaluation>,
    /// Hash chain, manifest and seal (kernelgate addition; see [`crate::chain`]). Always the
    /// last member: the seal is cut out of the line byte for byte.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernelgate_chain: Option<crate::chain::ChainRecord>,
}
