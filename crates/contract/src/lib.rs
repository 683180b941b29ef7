//! kg-contract: the data contracts every kernelgate crate shares.
//!
//! - SOL-ExecBench / FlashInfer-Bench formats: [`Definition`], [`Workload`], [`Solution`],
//!   [`Trace`] (with the nine [`Status`]es). kernelgate's additions (timing method, spread,
//!   device identity, clocks) are optional fields that upstream readers ignore. Unknown fields
//!   are accepted and returned as warnings (upstream files carry extras), except in the ROCm
//!   port's versioned files (`sol_execbench.workload.v2` with its per-output
//!   [`OutputCheck`]s, `sol_execbench.definition.v1`), which are read as strictly as the port
//!   reads them: there any unknown field is a load error.
//! - [`load_solution`], [`load_traces`] (which applies [`Evaluation::check_nullable`]: the
//!   status decides whether `correctness` / `performance` are present).
//! - [`Problem`]: a problem directory, loaded and validated; errors name the file, the JSONL
//!   line and the field ([`ContractError`], [`Location`]).
//! - [`GpuClaim`]: evidence of which GPU a run held (kg-gpu writes it), and the [`LockOwner`]
//!   record in kg-gpu's lock files.
//! - [`DType`]: the dtype table with storage sizes.
//! - [`shape::resolve`]: a workload's axes bound into concrete shapes.
//! - [`io`]: SHA-256 content addressing and atomic writes, used by every artifact writer.
//! - [`chain`]: tamper-evident trace files (hash chain, manifest, seal or Ed25519 signature,
//!   appends under an exclusive lock) and their verification; [`tree`]: the content hash of a
//!   problem directory.
//! - [`ValidationReport`]: kg-validate-pr's `validation_report.json` (validate-kernel-pr format).
//! - [`schema::all`]: JSON Schema of every artifact type.
//!
//! This crate depends on nothing else in kernelgate and does no process or GPU work.

pub mod chain;
pub mod claim;
pub mod definition;
pub mod dtype;
pub mod error;
pub mod io;
pub mod isolation;
pub mod problem;
pub mod report;
pub mod schema;
pub mod shape;
pub mod solution;
pub mod trace;
pub mod tree;
pub mod workload;

pub use claim::{ClaimClocks, ClaimLocks, GpuClaim, IdlenessBasis, LockOwner};
pub use definition::{Axis, Definition, DefinitionSchema, TensorSpec};
pub use dtype::DType;
pub use error::{ContractError, Location};
pub use isolation::{IsolationReport, Layer, LayerState};
pub use problem::{LoadedWorkload, Problem, load_definition, load_solution};
pub use report::{
    Finding, Severity, Stage, StageName, StageStatus, Stages, ValidationReport, Verdict,
};
pub use solution::{BuildSpec, CompileOptions, Solution, SourceFile};
pub use trace::{
    BuildRecord, CandidateLaunch, CandidateStart, CheckFigures, CheckResult, ClockState,
    Correctness, DeviceIdentity, Environment, Evaluation, NullableError, Performance, Phases,
    Precompiled, Reason, ReferenceReuse, Retry, RetryReason, Spread, Status, TimingMethod, Trace,
    Unverified, load_traces,
};
pub use workload::{
    CodeDistanceMode, Generator, InputSpec, IntBound, MAX_TOLERANCE, NumericMode, OutputCheck,
    ScalarValue, Tolerance, Workload, WorkloadSchema,
};

/// Process exit codes shared by the binaries.
pub mod exit {
    /// Success: every item passed.
    pub const OK: i32 = 0;
    /// The run completed and something did not pass.
    pub const FAILED: i32 = 1;
    /// Bad input or an unusable environment.
    pub const USAGE: i32 = 2;
    /// No verdict could be given: the environment failed mid-run (no usable device) or
    /// kernelgate's own plumbing did (a harness fault, twice); no kernel is blamed.
    pub const NO_VERDICT: i32 = 3;
}
