//! The PR validation report (`validation_report.json`), compatible with validate-kernel-pr's
//! report: the same top-level fields, stage names, statuses, finding severities and verdicts.
//! kernelgate's additions (`schema_version`, `device`, `gpu_claim`, per-run records bound by
//! SHA-256, perf confidence intervals) are extra fields that the seed's readers ignore.
//!
//! Written by kg-validate; the verdict rule lives there, the shape of the evidence lives here.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::claim::GpuClaim;

/// Schema version of [`ValidationReport`]. 2: `gpu_claim.gfx_activity_before_pct` (was
/// `activity_before_pct`, still read), tolerance references, context rows, grid-cell traces.
pub const REPORT_SCHEMA_VERSION: u32 = 2;

/// The key kg-gpu writes for the peak busy % before a claim, and the seed's name for it.
const ACTIVITY_KEY: (&str, &str) = ("activity_before_pct", "gfx_activity_before_pct");

/// kg-gpu's claim evidence as the report carries it: the same fields, except that the peak busy
/// % before the run is `gfx_activity_before_pct`, the seed's name (NVIDIA's utilisation goes in
/// the same field; `null` still means unknown). Reports that spell it `activity_before_pct`
/// still read.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportGpuClaim(pub GpuClaim);

impl std::ops::Deref for ReportGpuClaim {
    type Target = GpuClaim;
    fn deref(&self) -> &GpuClaim {
        &self.0
    }
}

impl From<GpuClaim> for ReportGpuClaim {
    fn from(c: GpuClaim) -> ReportGpuClaim {
        ReportGpuClaim(c)
    }
}

/// `map` with the key `from` renamed to `to`, in place (field order kept).
fn rename_key(
    map: serde_json::Map<String, serde_json::Value>,
    from: &str,
    to: &str,
) -> serde_json::Map<String, serde_json::Value> {
    // A map that already has `to` keeps it: the new name wins over the old.
    let has_to = map.contains_key(to);
    map.into_iter()
        .filter_map(|(k, v)| match k.as_str() {
            k2 if k2 == from && has_to => None,
            k2 if k2 == from => Some((to.to_string(), v)),
            _ => Some((k, v)),
        })
        .collect()
}

impl Serialize for ReportGpuClaim {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match serde_json::to_value(&self.0).map_err(serde::ser::Error::custom)? {
            serde_json::Value::Object(m) => {
                rename_key(m, ACTIVITY_KEY.0, ACTIVITY_KEY.1).serialize(s)
            }
            other => other.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for ReportGpuClaim {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ReportGpuClaim, D::Error> {
        let value = match serde_json::Value::deserialize(d)? {
            serde_json::Value::Object(m) => {
                serde_json::Value::Object(rename_key(m, ACTIVITY_KEY.1, ACTIVITY_KEY.0))
            }
            other => other,
        };
        serde_json::from_value(value)
            .map(ReportGpuClaim)
            .map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for ReportGpuClaim {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ReportGpuClaim".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let mut schema = <GpuClaim as JsonSchema>::json_schema(generator);
        if let Some(serde_json::Value::Object(props)) = schema.get_mut("properties") {
            let renamed = rename_key(std::mem::take(props), ACTIVITY_KEY.0, ACTIVITY_KEY.1);
            *props = renamed;
        }
        if let Some(serde_json::Value::Array(req)) = schema.get_mut("required") {
            for r in req.iter_mut() {
                if r.as_str() == Some(ACTIVITY_KEY.0) {
                    *r = ACTIVITY_KEY.1.into();
                }
            }
        }
        schema.insert(
            "description".into(),
            "kg-gpu's claim evidence under the seed's field names: `gfx_activity_before_pct` is the peak busy % before the run (any vendor); `null` means unknown.".into(),
        );
        schema
    }
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Finding {
    /// How serious.
    pub severity: Severity,
    /// The stage that produced it.
    pub stage: StageName,
    /// What was found, naming the file, line or row.
    pub detail: String,
}

/// How the target ran in isolation from the caller's environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Isolation {
    /// `env-allowlist+private-home` (kernelgate never claims a container it did not start).
    pub level: String,
    /// Container image, when one was used; `null` otherwise.
    pub container: Option<String>,
    /// Why this level.
    pub reason: String,
    /// Names of the environment variables passed to targets (values are not recorded).
    pub target_environment: Vec<String>,
}

/// The repository under validation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RepoInfo {
    /// The worktree that was validated (handed back unchanged).
    pub worktree: String,
    /// Base commit OID (the worktree's HEAD).
    pub base: Option<String>,
    /// The caller-supplied PR head OID; `null` without `--head-sha` (local evidence only).
    pub head: Option<String>,
    /// `aiter`, `flydsl` or `unknown`.
    pub kind: String,
    /// SHA-256 of the patch bytes; `null` without `--patch`.
    pub patch_sha256: Option<String>,
    /// Files the patch touches (new paths), in patch order.
    #[serde(default)]
    pub patch_files: Vec<String>,
    /// Whether the worktree was verified byte-identical to how it was received, at exit.
    pub restored: Option<bool>,
}

/// A native library loaded by the runtime probe.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NativeArtifact {
    /// Absolute path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the file.
    pub sha256: String,
}

/// What the runtime probe imported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuntimeIdentity {
    /// The package imported.
    pub module: String,
    /// Where it was imported from; `null` when the import failed.
    pub module_path: Option<String>,
    /// Its `__version__`, when it has one.
    pub module_version: Option<String>,
    /// `sys.executable`.
    pub python_executable: String,
    /// Python version.
    pub python_version: String,
    /// Base commit the checkout was at.
    pub source_sha: Option<String>,
    /// torch version, when importable.
    #[serde(default)]
    pub torch_version: Option<String>,
    /// triton version, when importable.
    #[serde(default)]
    pub triton_version: Option<String>,
    /// Native extension modules loaded from the checkout or `PYLIB`.
    pub native_artifacts: Vec<NativeArtifact>,
}

/// One requested `--axis`, whatever became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AxisRecord {
    /// Axis name.
    pub name: String,
    /// The target's CLI flag.
    pub flag: String,
    /// Requested values.
    pub values: Vec<String>,
    /// `not-evaluated`, `hook-not-found`, `hook-not-consumed`, `unusable` or `proven`.
    pub hook_proof: String,
    /// `adds-coverage`, `duplicates-target-defaults` or `unknown`.
    pub independence: String,
    /// The flag's declared default, as source text, when literal.
    pub declared_default: Option<Vec<String>>,
}

/// How the target was selected and what the grid established.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TestSelection {
    /// `--target`.
    pub target: String,
    /// `pytest`, `script` or `none`.
    pub runner: String,
    /// Why that runner.
    pub runner_reason: String,
    /// What structural selection said when `--runner` forced another choice.
    pub runner_selected: Option<String>,
    /// A structural risk with the chosen runner (e.g. test functions plus module-level argv
    /// parsing); `null` when none.
    pub runner_risk: Option<String>,
    /// `--shape-env`.
    pub shape_env: Option<String>,
    /// `--shape-arg`.
    pub shape_arg: Option<String>,
    /// `--shape-argnames`.
    pub shape_argnames: Option<Vec<String>>,
    /// `--grid` cells.
    pub grid: Vec<String>,
    /// `env`, `cli`, `pytest`, or `null` when no channel was established.
    pub grid_channel: Option<String>,
    /// Each channel tried and what was found in the target.
    pub grid_channel_reason: String,
    /// `adds-coverage`, `duplicates-target-defaults` or `unknown`.
    pub grid_independence: String,
    /// Which comparison applied (or why none could).
    pub grid_independence_reason: String,
    /// Every requested axis.
    pub axes: Vec<AxisRecord>,
    /// `none`, `unusable`, `hook-not-found`, `hook-not-consumed` or `proven`.
    pub axis_state: String,
    /// `--expected-route`.
    pub expected_route: Option<String>,
    /// `--shape-vars`.
    pub shape_vars: Vec<String>,
    /// `not-required` (passed with no visible device, ≥ 1 test executed), `required`
    /// (failed or executed nothing without a device), `not-evaluated` (a GPU was claimed, or
    /// the run without a device failed on a missing dependency: see [`RunRecord::cause`]).
    pub gpu_requirement: GpuRequirement,
}

/// Counts of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunStats {
    /// Test cases (JUnit `tests`; 1 for a script).
    pub tests: u64,
    /// Failures.
    pub failures: u64,
    /// Errors.
    pub errors: u64,
    /// Skipped.
    pub skipped: u64,
    /// `tests - skipped` (a script's 1 is liveness only).
    pub executed: u64,
    /// Calls of `--expected-route` in this run's own receipt; `null` when no route was named.
    pub observed_work: Option<u64>,
}

/// The validator-owned execution receipt of one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecutionReceipt {
    /// Receipt format version (1).
    pub schema_version: u32,
    /// Who wrote it: `kernelgate.validation_probe`.
    pub producer: String,
    /// The watched route.
    pub route: String,
    /// Route symbols observed to be called.
    pub kernel_symbols: Vec<String>,
    /// Distinct `--shape-vars` tuples seen at route calls, comma-joined.
    pub executed_shapes: Vec<String>,
    /// Number of route calls.
    pub calls: u64,
    /// Per `--grid` cell, whether the route ran it and which route locals held it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub grid_cells: Vec<GridCellTrace>,
}

/// How one `--grid` cell showed up at the watched route's calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GridCellTrace {
    /// The cell, as `--grid` gave it.
    pub cell: String,
    /// Whether the `--shape-vars` tuples (`executed_shapes`) include it; `false` without
    /// `--shape-vars`.
    pub in_executed_shapes: bool,
    /// Route locals that held the cell at some call, one list per way, in coordinate order:
    /// one name when a single local holds the whole cell (`shape`, `x.shape`), else one name
    /// per coordinate. Empty when no call's locals held it.
    pub held_by: Vec<Vec<String>>,
}

/// One process run by the validator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRecord {
    /// `head-repo`, `base-repo`, `base-invalid-grid`, `head-grid`, `perf-base-1`, ...
    pub name: String,
    /// `base` or `head`.
    pub phase: Phase,
    /// `pytest` or `script`.
    pub runner: String,
    /// The argument vector (interpreter first).
    pub argv: Vec<String>,
    /// Exit code; `null` when killed or timed out.
    pub exit_code: Option<i32>,
    /// How it ended.
    pub status_text: String,
    /// Wall time seen by the validator, seconds.
    pub wall_s: f64,
    /// Counts (pytest from JUnit XML).
    pub stats: RunStats,
    /// Log file (stdout then stderr), relative to the report's directory.
    pub log: Option<String>,
    /// SHA-256 of the log file.
    pub log_sha256: Option<String>,
    /// The run's own receipt, when a route was watched and a receipt was written.
    pub receipt: Option<ExecutionReceipt>,
    /// Why a failed run failed, when the probe could tell (a failed import); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<RunCause>,
}

/// When the failed import happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ImportDuring {
    /// pytest importing a test module (or a conftest found while collecting).
    Collection,
    /// pytest importing its initial conftest files, before collection.
    Conftest,
    /// The script target, run as `__main__`.
    Script,
}

impl ImportDuring {
    /// `at collection`, `while loading conftest files` or `while running the script`.
    pub fn phrase(self) -> &'static str {
        match self {
            ImportDuring::Collection => "at collection",
            ImportDuring::Conftest => "while loading its conftest files",
            ImportDuring::Script => "while running the script",
        }
    }
}

/// The typed cause of a failed run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum RunCause {
    /// `module` is found nowhere: not installed, not in the checkout. An environment fact.
    MissingDependency {
        /// The module (dotted) Python could not find.
        module: String,
        /// The file that imports it, relative to the worktree where possible.
        importer: String,
        /// When.
        during: ImportDuring,
    },
    /// `module` belongs to a package the checkout provides, and is not there.
    MissingCheckoutModule {
        /// The module (dotted).
        module: String,
        /// The file that imports it.
        importer: String,
        /// When.
        during: ImportDuring,
    },
    /// Any other failed import (an extension that does not load, a name a module lacks).
    ImportFailed {
        /// The exception class.
        exception: String,
        /// The module, when Python named it.
        module: Option<String>,
        /// The file that imports it.
        importer: String,
        /// When.
        during: ImportDuring,
    },
}

impl RunCause {
    /// Whether this is an environment fact rather than a result of the code under review.
    pub fn is_environment(&self) -> bool {
        matches!(self, RunCause::MissingDependency { .. })
    }
}

impl std::fmt::Display for RunCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunCause::MissingDependency {
                module,
                importer,
                during,
            } => write!(
                f,
                "missing dependency `{module}`: `{importer}` imports it {} and the interpreter cannot find it (ModuleNotFoundError); nothing in the checkout provides it, so install it in the interpreter's environment (or fix the import if it is misspelt)",
                during.phrase()
            ),
            RunCause::MissingCheckoutModule {
                module,
                importer,
                during,
            } => write!(
                f,
                "`{importer}` cannot import `{module}` {} (ModuleNotFoundError), a module of a package the checkout provides",
                during.phrase()
            ),
            RunCause::ImportFailed {
                exception,
                module,
                importer,
                during,
            } => write!(
                f,
                "`{importer}` failed to import {} {} ({exception})",
                module
                    .as_ref()
                    .map(|m| format!("`{m}`"))
                    .unwrap_or_else(|| "a module".into()),
                during.phrase()
            ),
        }
    }
}

/// Per-column perf comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PerfColumn {
    /// Column name.
    pub column: String,
    /// `latency` or `throughput`.
    pub kind: String,
    /// Matched rows.
    pub rows: u64,
    /// Median of per-row ratios (> 1 means head is faster).
    pub median_ratio: f64,
    /// 95 % bootstrap confidence interval of the median ratio, low end.
    pub ci_low: f64,
    /// 95 % bootstrap confidence interval of the median ratio, high end.
    pub ci_high: f64,
    /// Whether it had at least `PERF_MIN_ROWS` rows.
    pub eligible: bool,
}

/// One regressed row.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PerfRow {
    /// The row key (key columns joined).
    pub key: String,
    /// The column.
    pub column: String,
    /// Best base value.
    pub base: f64,
    /// Best head value.
    pub head: f64,
    /// Ratio (> 1 means head is faster).
    pub ratio: f64,
}

/// The perf stage's numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PerfSummary {
    /// `patch-reversed-same-worktree`.
    pub baseline_method: String,
    /// Order the runs happened in (`base`, `head`, ...): interleaved.
    pub order: Vec<String>,
    /// `PERF_REPEAT`.
    pub repeat: u32,
    /// `PERF_THRESHOLD`.
    pub threshold: f64,
    /// `PERF_MIN_ROWS`.
    pub min_rows: u32,
    /// `gpu` or `cpu` (CPU timings are never GPU evidence).
    pub device: String,
    /// Per-column results.
    pub columns: Vec<PerfColumn>,
    /// Minimum median ratio over eligible columns.
    pub median_ratio: Option<f64>,
    /// `regression` (whole interval below threshold), `ambiguous` (median below, interval
    /// crosses), `no-regression`, or `insufficient-data`.
    pub classification: String,
    /// The worst rows (at most 5) of the limiting column.
    pub regressed_rows: Vec<PerfRow>,
    /// `--perf-control-column`, and its median ratio.
    pub control_column: Option<String>,
    /// Median ratio of the control column.
    pub control_ratio: Option<f64>,
}

/// Tolerance literal compared head vs base.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ToleranceChange {
    /// File, relative to the repository.
    pub file: String,
    /// `atol`, `rtol`, a name, or a dtype key.
    pub key: String,
    /// Base value (source text).
    pub base: Option<String>,
    /// Head value (source text).
    pub head: String,
    /// Head line.
    pub line: u64,
    /// Whether head is looser than base.
    pub widened: bool,
    /// The `--tol-table` entry this literal is read against (the key's dtype entry, else the
    /// table's loosest); recorded beside the head-vs-base comparison, never a finding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<f64>,
    /// Whether the head value is looser than `reference`; `null` without a table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub above_reference: Option<bool>,
}

/// One stage's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Stage {
    /// Status.
    pub status: StageStatus,
    /// Why (always set for skip).
    pub note: String,
    /// Log file of the stage's main run, relative to the report's directory.
    #[serde(default)]
    pub log: Option<String>,
    /// Counts of the stage's main run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<RunStats>,
    /// Exit code of the stage's main run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// `baseline_control`: `ran`, `all-skipped`, `target-not-present` or `not-run`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_state: Option<BaseState>,
    /// `execution_receipt`: the receipts checked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub receipts: Vec<ExecutionReceipt>,
    /// `test_policy`: tolerance literals compared.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerances: Vec<ToleranceChange>,
    /// `test_policy`: commented-out shape rows newly added by the change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub new_commented_rows: Vec<String>,
    /// `test_policy`: commented-out shape rows already in base (`file:line: text`), coverage
    /// context and never a finding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub existing_commented_rows: Vec<String>,
    /// `test_policy`: the `--tol-table` reference tolerances, dtype → value, as given.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub tol_table: IndexMap<String, f64>,
    /// `execution_receipt`: route locals the grid check read the cells from when no
    /// `--shape-vars` was given (the same names for every cell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inferred_shape_vars: Option<Vec<String>>,
    /// `index_width_scan`: unwidened index × stride products per file.
    #[serde(default, skip_serializing_if = "IndexMap::is_empty")]
    pub index_products: IndexMap<String, u64>,
    /// `perf`: the comparison.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perf: Option<PerfSummary>,
}

impl Stage {
    /// A stage with a status and a note.
    pub fn new(status: StageStatus, note: impl Into<String>) -> Stage {
        Stage {
            status,
            note: note.into(),
            log: None,
            stats: None,
            exit_code: None,
            base_state: None,
            receipts: Vec::new(),
            tolerances: Vec::new(),
            new_commented_rows: Vec::new(),
            existing_commented_rows: Vec::new(),
            tol_table: IndexMap::new(),
            inferred_shape_vars: None,
            index_products: IndexMap::new(),
            perf: None,
        }
    }

    /// A `skip` with its reason.
    pub fn skip(note: impl Into<String>) -> Stage {
        Stage::new(StageStatus::Skip, note)
    }
}

/// The ten stages, in pipeline order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Stages {
    /// Patch applied to a clean base.
    pub merge_sim: Stage,
    /// GPU claimed (or `NO_GPU`).
    pub gpu_claim: Stage,
    /// The repository's package imports against the installed runtime.
    pub runtime_compat: Stage,
    /// Tolerance and commented-row policy, head vs base.
    pub test_policy: Stage,
    /// Base run with the patch reversed.
    pub baseline_control: Stage,
    /// The repository's target on head.
    pub correctness_repo_tests: Stage,
    /// The validator's grid on head.
    pub correctness_s1_grid: Stage,
    /// The validator-owned route receipt.
    pub execution_receipt: Stage,
    /// Index × stride products without int64 widening (info).
    pub index_width_scan: Stage,
    /// Base vs head timing (not required).
    pub perf: Stage,
}

impl Stages {
    /// Every stage as `(name, stage)`, in order.
    pub fn iter(&self) -> [(StageName, &Stage); 10] {
        [
            (StageName::MergeSim, &self.merge_sim),
            (StageName::GpuClaim, &self.gpu_claim),
            (StageName::RuntimeCompat, &self.runtime_compat),
            (StageName::TestPolicy, &self.test_policy),
            (StageName::BaselineControl, &self.baseline_control),
            (
                StageName::CorrectnessRepoTests,
                &self.correctness_repo_tests,
            ),
            (StageName::CorrectnessS1Grid, &self.correctness_s1_grid),
            (StageName::ExecutionReceipt, &self.execution_receipt),
            (StageName::IndexWidthScan, &self.index_width_scan),
            (StageName::Perf, &self.perf),
        ]
    }

    /// Stages whose `pass` (or `info` for the scan) a PASS requires.
    pub const REQUIRED: [StageName; 9] = [
        StageName::MergeSim,
        StageName::GpuClaim,
        StageName::RuntimeCompat,
        StageName::TestPolicy,
        StageName::BaselineControl,
        StageName::CorrectnessRepoTests,
        StageName::CorrectnessS1Grid,
        StageName::ExecutionReceipt,
        StageName::IndexWidthScan,
    ];

    /// All stages `skip` with the same reason (filled in as the pipeline goes).
    pub fn not_run(reason: &str) -> Stages {
        Stages {
            merge_sim: Stage::skip(reason),
            gpu_claim: Stage::skip(reason),
            runtime_compat: Stage::skip(reason),
            test_policy: Stage::skip(reason),
            baseline_control: Stage::skip(reason),
            correctness_repo_tests: Stage::skip(reason),
            correctness_s1_grid: Stage::skip(reason),
            execution_receipt: Stage::skip(reason),
            index_width_scan: Stage::skip(reason),
            perf: Stage::skip(reason),
        }
    }
}

/// `validation_report.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ValidationReport {
    /// [`REPORT_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// `kg-validate-pr <version>`.
    pub producer: String,
    /// `--label`.
    pub label: String,
    /// RFC 3339 UTC.
    pub started_utc: String,
    /// RFC 3339 UTC.
    pub finished_utc: String,
    /// Environment isolation of the target runs.
    pub isolation: Isolation,
    /// `device: cpu` when no GPU was claimed (timings are then CPU timings).
    pub device: String,
    /// Architecture → `runtime` | `compile-only` | `not-covered`; only a passing `gpu_claim`
    /// credits an architecture.
    pub arch_coverage: IndexMap<String, String>,
    /// What the coverage claim rests on.
    pub arch_coverage_basis: String,
    /// `NO_GPU` when no GPU was claimed; `null` otherwise.
    pub degraded_mode: Option<String>,
    /// The repository.
    pub repo: RepoInfo,
    /// The runtime probe's identity; `null` when the probe did not run.
    pub runtime_identity: Option<RuntimeIdentity>,
    /// The claim evidence (kg-gpu, under the seed's field names); `null` when no GPU was
    /// claimed.
    pub gpu_claim: Option<ReportGpuClaim>,
    /// Target selection and grid.
    pub test_selection: TestSelection,
    /// Stages.
    pub stages: Stages,
    /// Every process the validator ran, in order.
    pub runs: Vec<RunRecord>,
    /// Findings.
    pub findings: Vec<Finding>,
    /// The verdict.
    pub verdict: Verdict,
    /// Why this verdict (first rule that applied, and for INCONCLUSIVE the incomplete stages).
    pub verdict_reason: String,
    /// The process exit code that goes with the verdict.
    pub process_exit_code: i32,
}

mod vocab;
pub use vocab::*;

#[cfg(test)]
mod tests;
