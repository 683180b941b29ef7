//! The closed vocabularies of a validation report (stage status and name, run phase, GPU
//! requirement, base state, verdict, finding severity), serialised to the seed's strings.

use super::*;

/// Status of one stage. A stage that did not run is `skip` with its reason, never `pass`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum StageStatus {
    /// The stage ran and its evidence holds.
    Pass,
    /// The stage ran and found a defect.
    Fail,
    /// The stage did not run, or ran without producing evidence; `note` says why.
    Skip,
    /// Informational only (the index-width scan).
    Info,
}

impl StageStatus {
    /// The serialised spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StageStatus::Pass => "pass",
            StageStatus::Fail => "fail",
            StageStatus::Skip => "skip",
            StageStatus::Info => "info",
        }
    }
}

/// The ten stages, in pipeline order (which `Ord` follows). Serialised as the `stages` key and
/// as a finding's `stage`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum StageName {
    /// Patch applied to a clean base.
    MergeSim,
    /// GPU claimed (or `NO_GPU`).
    GpuClaim,
    /// The repository's package imports against the installed runtime.
    RuntimeCompat,
    /// Tolerance and commented-row policy, head vs base.
    TestPolicy,
    /// Base run with the patch reversed.
    BaselineControl,
    /// The repository's target on head.
    CorrectnessRepoTests,
    /// The validator's grid on head.
    CorrectnessS1Grid,
    /// The validator-owned route receipt.
    ExecutionReceipt,
    /// Index × stride products without int64 widening (info).
    IndexWidthScan,
    /// Base vs head timing (not required).
    Perf,
}

impl StageName {
    /// Every stage, in pipeline order.
    pub const ALL: [StageName; 10] = [
        StageName::MergeSim,
        StageName::GpuClaim,
        StageName::RuntimeCompat,
        StageName::TestPolicy,
        StageName::BaselineControl,
        StageName::CorrectnessRepoTests,
        StageName::CorrectnessS1Grid,
        StageName::ExecutionReceipt,
        StageName::IndexWidthScan,
        StageName::Perf,
    ];

    /// The serialised spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            StageName::MergeSim => "merge_sim",
            StageName::GpuClaim => "gpu_claim",
            StageName::RuntimeCompat => "runtime_compat",
            StageName::TestPolicy => "test_policy",
            StageName::BaselineControl => "baseline_control",
            StageName::CorrectnessRepoTests => "correctness_repo_tests",
            StageName::CorrectnessS1Grid => "correctness_s1_grid",
            StageName::ExecutionReceipt => "execution_receipt",
            StageName::IndexWidthScan => "index_width_scan",
            StageName::Perf => "perf",
        }
    }
}

impl std::fmt::Display for StageName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, not `write_str`: widths and alignment behave as they did for the `&str` names.
        f.pad(self.as_str())
    }
}

/// Which tree a run saw. Each phase has its own caches and HOME.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Patch reversed.
    Base,
    /// Patch applied.
    Head,
}

impl Phase {
    /// The serialised spelling: `base` or `head`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Base => "base",
            Phase::Head => "head",
        }
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Whether the target needs a GPU, as far as a run with no visible device could tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum GpuRequirement {
    /// Passed with no visible device, ≥ 1 test executed.
    NotRequired,
    /// Failed or executed nothing without a device.
    Required,
    /// A GPU was claimed, or the run without a device failed on a missing dependency (see
    /// [`RunRecord::cause`]), or no such run happened.
    NotEvaluated,
}

impl GpuRequirement {
    /// The serialised spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            GpuRequirement::NotRequired => "not-required",
            GpuRequirement::Required => "required",
            GpuRequirement::NotEvaluated => "not-evaluated",
        }
    }
}

impl std::fmt::Display for GpuRequirement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// What the base run of `baseline_control` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BaseState {
    /// The target ran on base.
    Ran,
    /// The target exited 0 on base with every test skipped.
    AllSkipped,
    /// The target does not exist on base (the PR adds it).
    TargetNotPresent,
    /// No base run happened.
    NotRun,
}

impl BaseState {
    /// The serialised spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            BaseState::Ran => "ran",
            BaseState::AllSkipped => "all-skipped",
            BaseState::TargetNotPresent => "target-not-present",
            BaseState::NotRun => "not-run",
        }
    }
}

impl std::fmt::Display for BaseState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// The verdict of a report (the seed's `report.py` rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Verdict {
    /// Complete evidence, no findings, a claimed GPU.
    #[serde(rename = "PASS")]
    Pass,
    /// At least one blocker finding.
    #[serde(rename = "BLOCK")]
    Block,
    /// At least one should-fix finding and no blocker.
    #[serde(rename = "NEEDS_WORK")]
    NeedsWork,
    /// No finding, but evidence is missing.
    #[serde(rename = "INCONCLUSIVE")]
    Inconclusive,
}

impl Verdict {
    /// The serialised spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Block => "BLOCK",
            Verdict::NeedsWork => "NEEDS_WORK",
            Verdict::Inconclusive => "INCONCLUSIVE",
        }
    }

    /// Process exit code: PASS 0, BLOCK or NEEDS_WORK 1, INCONCLUSIVE 2.
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Pass => 0,
            Verdict::Block | Verdict::NeedsWork => 1,
            Verdict::Inconclusive => 2,
        }
    }
}

/// Severity of a finding.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum Severity {
    /// Deterministic defect: the verdict is BLOCK.
    #[serde(rename = "blocker")]
    Blocker,
    /// Needs the author's attention: the verdict is at least NEEDS_WORK.
    #[serde(rename = "should-fix")]
    ShouldFix,
    /// Context for the reader; does not change the verdict.
    #[serde(rename = "note")]
    Note,
}
