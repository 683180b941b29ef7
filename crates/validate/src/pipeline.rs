//! The pipeline: checks of the inputs, then the stages in order (each a module of `stages/`,
//! writing its own status and findings), the worktree restore, the verdict and the report.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use indexmap::IndexMap;
use kg_contract::report::{
    AxisRecord, GpuRequirement, Isolation, REPORT_SCHEMA_VERSION, RepoInfo, RunRecord, Severity,
    StageName, Stages, TestSelection, ValidationReport, Verdict,
};

use crate::error::ValidateError;
use crate::options::{Options, resolve_python};
use crate::stages::{self, Ctx, Input, State, restore_and_verify};
use crate::target;
use crate::verdict::{self, DecidedBy, Decision};
use crate::worktree::Worktree;

/// A finished validation: the report and what decided its verdict.
#[derive(Debug, Clone)]
pub struct Validation {
    /// The report (already validated against its schema).
    pub report: ValidationReport,
    /// The verdict, its reason and the first stage that decided it.
    pub decision: Decision,
}

fn now_utc() -> String {
    kg_gpu::sys::now_utc()
}

fn skeleton(opts: &Options) -> ValidationReport {
    ValidationReport {
        schema_version: REPORT_SCHEMA_VERSION,
        producer: format!("kg-validate-pr {}", env!("CARGO_PKG_VERSION")),
        label: opts.label.clone(),
        started_utc: now_utc(),
        finished_utc: String::new(),
        isolation: Isolation {
            level: "env-allowlist+private-home".into(),
            container: None,
            reason: "targets run in their own process group under an allow-listed environment with a private HOME and fresh per-phase caches; no container was started".into(),
            target_environment: Vec::new(),
        },
        device: "cpu".into(),
        arch_coverage: IndexMap::new(),
        arch_coverage_basis: "no GPU claimed".into(),
        degraded_mode: None,
        repo: RepoInfo {
            worktree: opts.repo.to_string_lossy().to_string(),
            base: None,
            head: opts.head_sha.clone(),
            kind: "unknown".into(),
            patch_sha256: None,
            patch_files: Vec::new(),
            restored: None,
        },
        runtime_identity: None,
        gpu_claim: None,
        test_selection: TestSelection {
            target: opts.target.clone(),
            runner: "none".into(),
            runner_reason: "not evaluated".into(),
            runner_selected: None,
            runner_risk: None,
            shape_env: opts.shape_env.clone(),
            shape_arg: opts.shape_arg.clone(),
            shape_argnames: opts.shape_argnames.clone(),
            grid: opts.grid.clone(),
            grid_channel: None,
            grid_channel_reason: "not evaluated".into(),
            grid_independence: "unknown".into(),
            grid_independence_reason: "not evaluated".into(),
            axes: opts
                .axes
                .iter()
                .map(|a| AxisRecord {
                    name: a.name.clone(),
                    flag: a.flag.clone(),
                    values: a.values.clone(),
                    hook_proof: "not-evaluated".into(),
                    independence: "unknown".into(),
                    declared_default: None,
                })
                .collect(),
            axis_state: if opts.axes.is_empty() { "none".into() } else { "not-evaluated".into() },
            expected_route: opts.expected_route.clone(),
            shape_vars: opts.shape_vars.clone(),
            gpu_requirement: GpuRequirement::NotEvaluated,
        },
        stages: Stages::not_run("not reached"),
        runs: Vec::new(),
        findings: Vec::new(),
        verdict: Verdict::Inconclusive,
        verdict_reason: String::new(),
        process_exit_code: 2,
    }
}

/// Where logs go for a report at `out`: `<dir>/<stem>.logs`, and that name relative to `<dir>`.
pub fn logs_location(out: &Path) -> (PathBuf, String) {
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let stem = out
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_else(|| "validation_report".into());
    let rel = format!("{stem}.logs");
    (dir.join(&rel), rel)
}

/// `p`, made absolute against the current directory.
pub(crate) fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|c| c.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

/// A stage that runs with the [`Ctx`]; `Err` ends the pipeline.
type StageFn = fn(&mut State<'_>, &Ctx<'_>) -> Result<(), ValidateError>;

/// The stages after `gpu_claim`, in the order they run. The first `Err` (a git or I/O failure,
/// an interrupt) stops the pipeline: no later stage runs, the worktree is restored and `run`
/// returns the error. Everything else a stage finds goes in the report, and the next stage
/// runs (one that cannot run skips, with [`State::blocked`] as its reason).
const STAGES: [StageFn; 12] = [
    stages::runtime_compat::run,
    // Static, before any test runs.
    stages::test_policy::run,
    // Static too, so recorded now; the report shows it in stage order.
    stages::index_width_scan::run,
    // Whether targets can run at all.
    stages::gate::run,
    // With no GPU claimed: does the target need one?
    stages::gpu_requirement::run,
    stages::grid_channel::run,
    stages::baseline_control::run,
    stages::correctness_repo_tests::run,
    stages::correctness_s1_grid::run,
    stages::execution_receipt::run,
    stages::arch_coverage::run,
    stages::perf::run,
];

/// Runs the whole validation. The worktree is restored and the GPU released before this
/// returns, on every path (an `Err` included); `cancel` (set by a signal handler) makes the
/// current target's process group die and the pipeline unwind with
/// [`ValidateError::Interrupted`].
pub fn run(opts: &Options, cancel: Arc<AtomicBool>) -> Result<Validation, ValidateError> {
    opts.check()?;
    let repo_root = std::fs::canonicalize(&opts.repo)
        .map_err(ValidateError::io("open the repository", &opts.repo))?;
    let out_abs = absolute(&opts.out);
    let out_dir = out_abs.parent().map(Path::to_path_buf).unwrap_or_default();
    let out_dir_real = std::fs::canonicalize(&out_dir).unwrap_or(out_dir.clone());
    // Inside the worktree is allowed where it leaves the worktree's state alone (checked once
    // the repository is open); the seed's default, `./validation_report.json`, often is.
    let out_in_repo = out_dir_real.starts_with(&repo_root).then(|| {
        let name = out_abs
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        let rel_dir = out_dir_real
            .strip_prefix(&repo_root)
            .map(|p| p.to_string_lossy().to_string())
            .unwrap_or_default();
        let join = |n: &str| {
            if rel_dir.is_empty() {
                n.to_string()
            } else {
                format!("{rel_dir}/{n}")
            }
        };
        let (_, logs_rel) = logs_location(&out_abs);
        (join(&name), join(&logs_rel))
    });
    let python = resolve_python(
        opts.python.as_deref(),
        opts.host.python_bin.as_deref(),
        &repo_root,
    )?;
    let mut report = skeleton(opts);
    report.repo.worktree = repo_root.to_string_lossy().to_string();

    let mut wt = Worktree::open(&repo_root, opts.patch.as_deref())?;
    if let Some((out_rel, logs_rel)) = &out_in_repo {
        if let Err(why) = wt.output_location(out_rel, logs_rel) {
            return Err(ValidateError::usage(
                "--out",
                format!(
                    "`{}` is inside the worktree `{}` and cannot be written there: {why}; or write the report outside the worktree",
                    opts.out.display(),
                    repo_root.display()
                ),
            ));
        }
        wt.set_own_output(out_rel, logs_rel);
    }
    // A misspelt target is the caller's input error, refused before any stage runs.
    target::check(&repo_root, opts.target_file(), &wt)?;
    let input = Input {
        opts,
        repo_root: &repo_root,
        python: &python,
    };
    let mut st = State::new(report, &mut wt);

    // 1. merge_sim; a worktree that cannot be validated ends the run here, untouched or
    // already restored.
    stages::merge_sim::run(&mut st, &input)?;
    if st.stopped {
        return finish(st);
    }
    let result = after_merge(&mut st, &input, cancel);
    if result.is_err() {
        // As when these were locals of the stages: the scratch directory goes, then the
        // claim, before the worktree is restored.
        drop(st.scratch.take());
        drop(st.claim.take());
    }
    let restored = restore_and_verify(st.wt);
    st.report.repo.restored = Some(restored.is_ok());
    if let Err(why) = &restored {
        st.finding(
            Severity::Note,
            StageName::MergeSim,
            format!("the worktree could not be verified as restored: {why}"),
        );
    }
    result?;
    finish(st)
}

/// Every stage after `merge_sim`, with the patch applied.
fn after_merge(
    st: &mut State<'_>,
    input: &Input<'_>,
    cancel: Arc<AtomicBool>,
) -> Result<(), ValidateError> {
    st.wt.mark_touched();
    // 2. gpu_claim comes before the run context: targets see only the claimed device.
    stages::gpu_claim::run(st, input)?;
    let ctx = stages::setup::run(st, input, cancel)?;
    for stage in STAGES {
        stage(st, &ctx)?;
    }
    Ok(())
}

/// Releases the claim (its final evidence goes in the report), removes the scratch directory,
/// and decides and checks the verdict.
fn finish(mut st: State<'_>) -> Result<Validation, ValidateError> {
    if let Some(c) = st.claim.take() {
        st.report.gpu_claim = Some(c.finish().into());
    }
    drop(st.scratch.take());
    let mut decision = verdict::decide(&st.report);
    if st.report.repo.restored == Some(false) && decision.verdict == Verdict::Pass {
        decision = Decision {
            verdict: Verdict::Inconclusive,
            reason: "the worktree could not be verified as restored".into(),
            decided_by: DecidedBy::NotRestored,
        };
    }
    st.report.verdict = decision.verdict;
    st.report.verdict_reason = decision.reason.clone();
    st.report.process_exit_code = decision.verdict.exit_code();
    st.report.finished_utc = now_utc();
    let problems = verdict::validate(&st.report);
    if !problems.is_empty() {
        tracing::warn!(problems = ?problems, "the report fails its schema");
        if st.report.verdict == Verdict::Pass {
            st.report.verdict = Verdict::Inconclusive;
            st.report.process_exit_code = Verdict::Inconclusive.exit_code();
            decision.verdict = Verdict::Inconclusive;
            decision.decided_by = DecidedBy::ReportCheck {
                problems: problems.clone(),
            };
        }
        st.report.verdict_reason = format!(
            "{}; report validation failed: {}",
            st.report.verdict_reason,
            problems.join("; ")
        );
        decision.reason = st.report.verdict_reason.clone();
    }
    Ok(Validation {
        report: st.report,
        decision,
    })
}

/// Runs that belong to a report, for summaries.
pub fn runs_named<'a>(report: &'a ValidationReport, prefix: &str) -> Vec<&'a RunRecord> {
    report
        .runs
        .iter()
        .filter(|r| r.name.starts_with(prefix))
        .collect()
}

#[cfg(test)]
mod tests {
    use kg_contract::report::{Finding, Stage, StageStatus};

    use super::*;
    use crate::options::{HostSettings, RunnerChoice};

    fn options() -> Options {
        Options {
            repo: PathBuf::from("/r"),
            target: "tests/t.py".into(),
            patch: None,
            head_sha: None,
            expected_route: None,
            shape_vars: vec![],
            shape_env: None,
            shape_arg: None,
            shape_argnames: None,
            grid: vec![],
            grid_novelty: None,
            axes: vec![],
            runner: RunnerChoice::Auto,
            runtime_module: None,
            perf_control_column: None,
            tol_table: vec![],
            perf_args: None,
            no_perf: true,
            label: "t".into(),
            out: PathBuf::from("/o/r.json"),
            python: None,
            host: HostSettings::from_lookup(|_| None).unwrap(),
        }
    }

    fn finding(severity: Severity, stage: StageName, detail: &str) -> Finding {
        Finding {
            severity,
            stage,
            detail: detail.into(),
        }
    }

    #[test]
    fn the_earliest_stage_decides_not_the_first_pushed() {
        let mut r = skeleton(&options());
        // Pushed out of pipeline order, as the restore note and late stages can be.
        r.findings = vec![
            finding(Severity::Note, StageName::MergeSim, "restore note"),
            finding(
                Severity::Blocker,
                StageName::CorrectnessS1Grid,
                "grid fails",
            ),
            finding(
                Severity::ShouldFix,
                StageName::MergeSim,
                "never decides over a blocker",
            ),
            finding(Severity::Blocker, StageName::TestPolicy, "widened"),
            finding(Severity::Blocker, StageName::TestPolicy, "second"),
        ];
        let d = verdict::decide(&r);
        assert_eq!(d.verdict, Verdict::Block);
        assert_eq!(
            d.decided_by,
            DecidedBy::Finding {
                stage: StageName::TestPolicy,
                severity: Severity::Blocker,
                detail: "widened".into()
            }
        );
        assert_eq!(d.summary(), "decided by test_policy (blocker): widened");
        assert_eq!(d.reason, "blocker from test_policy: widened");

        r.findings.clear();
        r.stages.merge_sim = Stage::new(StageStatus::Pass, "applied");
        r.stages.gpu_claim = Stage::new(StageStatus::Pass, "claimed");
        r.stages.runtime_compat = Stage::skip("runtime mismatch:\n  multi-line");
        let d = verdict::decide(&r);
        assert_eq!(d.verdict, Verdict::Inconclusive);
        let s = d.summary();
        assert!(
            s.starts_with("decided by runtime_compat (skip): runtime mismatch: multi-line; also incomplete: test_policy=skip,"),
            "{s}"
        );
    }
}
