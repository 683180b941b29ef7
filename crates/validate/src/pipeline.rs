//! The pipeline: stages in order, each writing its own status; findings; verdict; report.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use indexmap::IndexMap;
use kg_contract::report::{
    AxisRecord, ExecutionReceipt, Finding, Isolation, PerfSummary, REPORT_SCHEMA_VERSION, RepoInfo,
    RunRecord, Severity, Stage, StageStatus, Stages, TestSelection, ValidationReport, Verdict,
};
use kg_inject::PySource;

use crate::error::ValidateError;
use crate::gpu::{self, GpuState};
use crate::grid::{self, Channel};
use crate::options::{Options, RunnerChoice, resolve_python};
use crate::runner::{Invocation, Phase, RunContext, RunOutcome, RunSpec};
use crate::shapes::normalize_cell;
use crate::verdict::{DecidedBy, Decision};
use crate::worktree::Worktree;
use crate::{index_scan, perf, policy, pyscan, receipt, runtime, target, verdict};

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

struct State<'a> {
    opts: &'a Options,
    report: ValidationReport,
}

impl State<'_> {
    fn finding(&mut self, severity: Severity, stage: &str, detail: impl Into<String>) {
        self.report.findings.push(Finding {
            severity,
            stage: stage.into(),
            detail: detail.into(),
        });
    }

    fn record(&mut self, out: &RunOutcome) {
        self.report.runs.push(out.record.clone());
    }

    /// Records the typed `cause` on the last recorded run named `name`.
    fn record_cause(&mut self, name: &str, cause: Option<&kg_contract::report::RunCause>) {
        if let Some(r) = self.report.runs.iter_mut().rev().find(|r| r.name == name) {
            r.cause = cause.cloned();
        }
    }
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
            gpu_requirement: "not-evaluated".into(),
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

fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        std::env::current_dir()
            .map(|c| c.join(p))
            .unwrap_or_else(|_| p.to_path_buf())
    }
}

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
    let mut st = State {
        opts,
        report: skeleton(opts),
    };
    st.report.repo.worktree = repo_root.to_string_lossy().to_string();

    // 1. merge_sim
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
    st.report.repo.base = Some(wt.base().to_string());
    st.report.repo.kind = runtime::repo_kind(&repo_root).to_string();
    st.report.repo.patch_sha256 = wt.patch().map(kg_contract::io::sha256_hex);
    st.report.repo.patch_files = wt.files().all.clone();
    if let Some(d) = wt.dirty()? {
        st.report.stages.merge_sim = Stage::skip(format!(
            "the supplied worktree is not clean ({}); pass a clean base checkout",
            d.0.iter().take(10).cloned().collect::<Vec<_>>().join(", ")
        ));
        st.report.repo.restored = Some(true);
        return finish(st, None, None);
    }
    let outside = wt.outside_sparse_checkout();
    if !outside.is_empty() {
        st.report.stages.merge_sim = Stage::skip(format!(
            "the patch touches {} path(s) outside the sparse checkout ({}), which are not in the working directory to patch; widen it (`git sparse-checkout add DIR`) or validate in a full checkout",
            outside.len(),
            outside
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
        st.report.repo.restored = Some(true);
        return finish(st, None, None);
    }
    if wt.patch().is_some() {
        match wt.apply()? {
            Ok(()) => {
                st.report.stages.merge_sim = Stage::new(
                    StageStatus::Pass,
                    format!(
                        "patch ({} file(s)) applies cleanly on base {}",
                        wt.files().all.len(),
                        wt.base()
                    ),
                );
            }
            Err(msg) => {
                st.report.stages.merge_sim = Stage::new(
                    StageStatus::Fail,
                    format!("the patch does not apply on base {}: {msg}", wt.base()),
                );
                st.finding(
                    Severity::Blocker,
                    "merge_sim",
                    format!(
                        "merge conflict: the patch does not apply on base {}: {msg}",
                        wt.base()
                    ),
                );
                let restored = restore_and_verify(&mut wt);
                st.report.repo.restored = Some(restored.is_ok());
                return finish(st, None, None);
            }
        }
    } else {
        st.report.stages.merge_sim = Stage::skip(
            "no --patch: a direct head checkout runs diagnostics but cannot prove mergeability or base attribution",
        );
    }
    let result = stages_after_merge(&mut st, &mut wt, &repo_root, &python, cancel);
    let restored = restore_and_verify(&mut wt);
    st.report.repo.restored = Some(restored.is_ok());
    if let Err(why) = &restored {
        st.finding(
            Severity::Note,
            "merge_sim",
            format!("the worktree could not be verified as restored: {why}"),
        );
    }
    let (claim, scratch) = result?;
    finish(st, claim, Some(scratch))
}

fn restore_and_verify(wt: &mut Worktree) -> Result<(), String> {
    wt.restore().map_err(|e| e.to_string())?;
    wt.verify().map_err(|e| e.to_string())?
}

type AfterMerge = (Option<Box<kg_gpu::Claim>>, tempfile::TempDir);

#[allow(clippy::too_many_lines)]
fn stages_after_merge(
    st: &mut State<'_>,
    wt: &mut Worktree,
    repo_root: &Path,
    python: &Path,
    cancel: Arc<AtomicBool>,
) -> Result<AfterMerge, ValidateError> {
    let opts = st.opts;
    let has_patch = wt.patch().is_some();
    wt.mark_touched();

    // 2. gpu_claim
    let argv: Vec<String> = std::env::args().collect();
    let state = gpu::claim(&opts.host, argv);
    let (claim, device_env) = match state {
        GpuState::Claimed(c) => {
            let ev = c.evidence().clone();
            st.report.stages.gpu_claim = Stage::new(
                StageStatus::Pass,
                format!(
                    "claimed {} {} ({}), idleness basis {}, lock `{}`",
                    ev.name,
                    ev.uuid,
                    ev.arch.clone().unwrap_or_else(|| "arch unknown".into()),
                    ev.idleness_basis.as_str(),
                    ev.locks.l1
                ),
            );
            st.report.device = "gpu".into();
            st.report.gpu_claim = Some(ev.into());
            let env = c.child_env();
            (Some(c), env)
        }
        GpuState::NoGpu { reason, .. } => {
            st.report.stages.gpu_claim = Stage::skip(reason);
            st.report.degraded_mode = Some("NO_GPU".into());
            (
                None,
                vec![
                    ("CUDA_VISIBLE_DEVICES".to_string(), String::new()),
                    ("HIP_VISIBLE_DEVICES".to_string(), String::new()),
                    ("ROCR_VISIBLE_DEVICES".to_string(), String::new()),
                ],
            )
        }
    };

    let scratch = tempfile::Builder::new()
        .prefix("kg-validate-")
        .tempdir()
        .map_err(ValidateError::io(
            "create a scratch directory",
            std::env::temp_dir(),
        ))?;
    let (logs_dir, logs_rel) = logs_location(&absolute(&opts.out));
    let ctx = RunContext {
        python: python.to_path_buf(),
        repo: repo_root.to_path_buf(),
        scratch: scratch.path().to_path_buf(),
        logs_dir,
        logs_rel,
        pylib: opts.host.pylib.clone(),
        device_env,
        cancel,
        route: opts.expected_route.clone(),
        shape_vars: opts.shape_vars.clone(),
        grid_cells: opts.grid.iter().map(|c| normalize_cell(c)).collect(),
    };
    ctx.install_scripts()?;
    st.report.isolation.target_environment = ctx
        .base_env(Phase::Head)?
        .into_iter()
        .map(|(k, _)| k)
        .chain(
            [
                "KG_VALIDATE_RECEIPT",
                "KG_VALIDATE_ROUTE",
                "KG_VALIDATE_SHAPE_VARS",
            ]
            .map(String::from),
        )
        .collect();

    // Target selection (head state).
    let target_file = opts.target_file().to_string();
    let target_abs = repo_root.join(&target_file);
    let head_text = std::fs::read_to_string(&target_abs).ok();
    let facts = head_text.as_deref().and_then(pyscan::scan);
    let sel = pyscan::select(&opts.target, opts.target_is_node(), facts.as_ref());
    let runner: &str = match opts.runner {
        RunnerChoice::Auto => sel.runner,
        RunnerChoice::Pytest => "pytest",
        RunnerChoice::Script => "script",
        RunnerChoice::None => "none",
    };
    {
        let ts = &mut st.report.test_selection;
        ts.runner = runner.into();
        if opts.runner == RunnerChoice::Auto {
            ts.runner_reason = sel.reason.clone();
        } else {
            ts.runner_reason = format!("forced by --runner {runner}");
            ts.runner_selected = Some(format!("{}: {}", sel.runner, sel.reason));
        }
        ts.runner_risk = sel.risk.clone();
    }
    let invocation = |args: Vec<String>| -> Option<Invocation> {
        match runner {
            "pytest" => Some(Invocation::Pytest {
                target: opts.target.clone(),
            }),
            "script" => Some(Invocation::Script {
                target: target_file.clone(),
                args,
            }),
            _ => None,
        }
    };

    // 3. runtime_compat
    let kind = st.report.repo.kind.clone();
    let imports = facts
        .as_ref()
        .map(|f| f.imports.clone())
        .unwrap_or_default();
    let mut runtime_ok = false;
    // A prebuilt FlyDSL runtime (PYLIB) cannot stand for runtime sources the patch changes.
    let prebuilt_stale = if kind == "flydsl" && ctx.pylib.is_some() {
        runtime::flydsl_runtime_inputs(&wt.files().all)
    } else {
        Vec::new()
    };
    match runtime::choose_module(
        repo_root,
        &kind,
        opts.runtime_module.as_deref(),
        &imports,
        &target_file,
    ) {
        None => {
            st.report.stages.runtime_compat = Stage::skip(match (&head_text, &facts) {
                (None, _) => format!(
                    "no repository package to probe: the target `{target_file}` does not exist on head, so it has no imports to choose from; pass --runtime-module"
                ),
                (Some(_), None) => format!(
                    "no repository package to probe: the target `{target_file}` does not parse as Python; pass --runtime-module"
                ),
                (Some(_), Some(_)) => {
                    "no repository package to probe: the target imports nothing the checkout provides; pass --runtime-module".to_string()
                }
            });
        }
        Some(_) if !prebuilt_stale.is_empty() => {
            st.report.stages.runtime_compat = Stage::skip(format!(
                "runtime mismatch (an environment fact, not attributed to the PR): the patch changes FlyDSL runtime sources ({}), and a prebuilt PYLIB cannot stand for them (no trusted build provenance); rebuild the runtime from this tree and validate without PYLIB",
                prebuilt_stale
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Some((module, why)) => {
            let r = runtime::probe(&ctx, &module, &kind, wt.base())?;
            st.report.runtime_identity = Some(r.identity);
            match r.verdict {
                Ok(note) => {
                    runtime_ok = true;
                    st.report.stages.runtime_compat = Stage::new(
                        StageStatus::Pass,
                        format!("{note} (module chosen by {why})"),
                    );
                }
                Err(why_not) => {
                    st.report.stages.runtime_compat = Stage::skip(format!(
                        "runtime mismatch (an environment fact, not attributed to the PR): {why_not}"
                    ));
                }
            }
        }
    }

    // 4. test_policy (static, before any test runs)
    let changed: Vec<(String, Option<String>, Option<String>)> = wt
        .files()
        .all
        .iter()
        .map(|p| {
            (
                p.clone(),
                wt.base_text(p),
                std::fs::read_to_string(repo_root.join(p)).ok(),
            )
        })
        .collect();
    if has_patch {
        let pol = policy::check(&changed, &opts.tol_table);
        let status = if !pol.unparsed.is_empty() {
            StageStatus::Skip
        } else if pol.findings.is_empty() {
            StageStatus::Pass
        } else {
            StageStatus::Fail
        };
        let note = if !pol.unparsed.is_empty() {
            format!("test files do not parse: {}", pol.unparsed.join("; "))
        } else if pol.examined.is_empty() {
            "no test file changed; nothing to loosen".into()
        } else {
            format!(
                "examined {} test file(s) head vs base: {} tolerance literal(s), {} widened, {} shape row(s) newly commented out",
                pol.examined.len(),
                pol.tolerances.len(),
                pol.tolerances.iter().filter(|t| t.widened).count(),
                pol.new_commented_rows.len()
            )
        };
        let mut stage = Stage::new(status, note);
        stage.tolerances = pol.tolerances;
        stage.new_commented_rows = pol.new_commented_rows;
        stage.existing_commented_rows = pol.existing_commented_rows;
        // The target's own disabled rows are context even when the PR leaves the file alone.
        let target = opts.target_file();
        if !wt.files().all.iter().any(|p| p == target)
            && let Ok(text) = std::fs::read_to_string(repo_root.join(target))
        {
            stage
                .existing_commented_rows
                .extend(policy::context_rows(target, &text));
        }
        stage.tol_table = opts.tol_table.iter().cloned().collect();
        st.report.stages.test_policy = stage;
        st.report.findings.extend(pol.findings);
    } else {
        st.report.stages.test_policy = Stage::skip("no --patch: nothing to compare head against");
    }

    // 9. index_width_scan (static; recorded now, shown in order)
    {
        let mut products = IndexMap::new();
        for (path, lines) in &wt.files().added_lines {
            if !index_scan::is_kernel_source(path) {
                continue;
            }
            let n: u64 = lines.iter().map(|l| index_scan::products_in_line(l)).sum();
            if n > 0 {
                products.insert(path.clone(), n);
            }
        }
        let total: u64 = products.values().sum();
        let mut stage = Stage::new(
            StageStatus::Info,
            if has_patch {
                format!(
                    "{total} index × stride product(s) without int64 widening in lines the change adds to kernel sources"
                )
            } else {
                "no --patch: no added lines to scan".into()
            },
        );
        stage.index_products = products;
        st.report.stages.index_width_scan = stage;
    }

    let present_head = target_abs.is_file();
    let mut blocked_reason: Option<String> = None;
    if !runtime_ok {
        blocked_reason =
            Some("runtime_compat did not pass; correctness is not attributed to the PR".into());
    } else if invocation(vec![]).is_none() {
        blocked_reason = Some(format!(
            "no runner for the target: {}",
            st.report.test_selection.runner_reason
        ));
    } else if !present_head {
        blocked_reason = Some(format!("the target `{target_file}` does not exist on head"));
    }

    // 2b. NO_GPU: does the target need a GPU? Run it once with no visible device; that run is
    // also the head repo run (the same command in the same state).
    let mut head_repo: Option<RunOutcome> = None;
    if claim.is_none() && blocked_reason.is_none() {
        let Some(inv) = invocation(vec![]) else {
            unreachable_none()
        };
        let out = ctx.run(&RunSpec {
            name: "head-repo".into(),
            phase: Phase::Head,
            invocation: inv,
            extra_env: vec![],
            timeout: opts.host.timeout,
            watch_route: true,
        })?;
        st.record(&out);
        let ok = out.success && out.record.stats.executed >= 1;
        let cause = out.cause(repo_root, |top| provides(repo_root, &ctx, wt, &out, top));
        st.record_cause(&out.record.name, cause.as_ref());
        match &cause {
            _ if ok => st.report.test_selection.gpu_requirement = "not-required".into(),
            // A package the environment lacks says nothing about the device: not evaluated.
            Some(c) if c.is_environment() => {
                st.report.test_selection.gpu_requirement = "not-evaluated".into();
                blocked_reason = Some(format!(
                    "{c} (interpreter `{}`); with no GPU claimed, whether the target needs one was not evaluated",
                    python.display()
                ));
            }
            _ => {
                st.report.test_selection.gpu_requirement = "required".into();
                blocked_reason = Some(format!(
                    "no GPU claimed and the target did not pass with no visible device ({}, {} executed{}): gpu_requirement is `required`",
                    out.record.status_text,
                    out.record.stats.executed,
                    cause.as_ref().map(|c| format!("; {c}")).unwrap_or_default()
                ));
            }
        }
        head_repo = Some(out);
    }

    // Grid channel (structural, head file and its conftest.py files).
    let mut sources: Vec<PySource> = Vec::new();
    if let Some(t) = &head_text
        && let Ok(s) = PySource::parse(&target_abs, t.as_str())
    {
        sources.push(s);
    }
    sources.extend(conftests(repo_root, &target_file));
    let search = grid::find(
        &sources,
        runner,
        opts.shape_env.as_deref(),
        opts.shape_arg.as_deref(),
        opts.shape_argnames.as_deref(),
    );
    st.report.test_selection.grid_channel_reason = search.reason.clone();

    // 5. baseline_control
    let mut base_state = "not-run".to_string();
    let mut base_repo: Option<RunOutcome> = None;
    let mut base_grid: Option<RunOutcome> = None;
    let mut head_ok_to_run = blocked_reason.is_none();
    if let Some(why) = &blocked_reason {
        st.report.stages.baseline_control = Stage::skip(why.clone());
    } else if !has_patch {
        st.report.stages.baseline_control =
            Stage::skip("no --patch: there is no base to compare with");
    } else {
        wt.restore()?;
        match wt.verify()? {
            Err(why) => {
                st.report.stages.baseline_control = Stage::skip(format!(
                    "reversing the patch did not leave a clean base: {why}"
                ));
                head_ok_to_run = false;
            }
            Ok(()) => {
                let present_base = repo_root.join(&target_file).is_file();
                let mut notes = Vec::new();
                if present_base {
                    let Some(inv) = invocation(vec![]) else {
                        unreachable_none()
                    };
                    let out = ctx.run(&RunSpec {
                        name: "base-repo".into(),
                        phase: Phase::Base,
                        invocation: inv,
                        extra_env: vec![],
                        timeout: opts.host.timeout,
                        watch_route: false,
                    })?;
                    st.record(&out);
                    base_state = if out.record.stats.executed == 0 && out.success {
                        "all-skipped"
                    } else {
                        "ran"
                    }
                    .into();
                    let cause =
                        out.cause(repo_root, |top| provides(repo_root, &ctx, wt, &out, top));
                    st.record_cause(&out.record.name, cause.as_ref());
                    notes.push(format!(
                        "base-repo {} ({} executed{})",
                        out.record.status_text,
                        out.record.stats.executed,
                        cause.map(|c| format!("; {c}")).unwrap_or_default()
                    ));
                    base_repo = Some(out);
                    // The base grid, only where the base file has the same channel.
                    if let Some(ch) = &search.channel
                        && !opts.grid.is_empty()
                    {
                        let base_sources: Vec<PySource> =
                            std::fs::read_to_string(repo_root.join(&target_file))
                                .ok()
                                .and_then(|t| PySource::parse(repo_root.join(&target_file), t).ok())
                                .into_iter()
                                .chain(conftests(repo_root, &target_file))
                                .collect();
                        let base_search = grid::find(
                            &base_sources,
                            runner,
                            opts.shape_env.as_deref(),
                            opts.shape_arg.as_deref(),
                            opts.shape_argnames.as_deref(),
                        );
                        if base_search.channel.as_ref().map(Channel::as_str) == Some(ch.as_str()) {
                            let (env, args) = ch.hand_over(&opts.grid);
                            let Some(inv) = invocation(args) else {
                                unreachable_none()
                            };
                            let out = ctx.run(&RunSpec {
                                name: "base-grid".into(),
                                phase: Phase::Base,
                                invocation: inv,
                                extra_env: env,
                                timeout: opts.host.timeout,
                                watch_route: false,
                            })?;
                            st.record(&out);
                            notes.push(format!("base-grid {}", out.record.status_text));
                            base_grid = Some(out);
                        } else {
                            notes.push("base target lacks the grid channel: no base grid".into());
                        }
                    }
                } else {
                    base_state = "target-not-present".into();
                    notes.push(format!(
                        "`{target_file}` does not exist on base (added by the PR)"
                    ));
                }
                match wt.apply()? {
                    Ok(()) => {
                        let mut stage = Stage::new(
                            StageStatus::Pass,
                            format!(
                                "patch reversed (new files removed), base verified clean, {}; patch re-applied",
                                notes.join("; ")
                            ),
                        );
                        stage.base_state = Some(base_state.clone());
                        if let Some(b) = &base_repo {
                            stage.log = b.record.log.clone();
                            stage.exit_code = b.record.exit_code;
                            stage.stats = Some(b.record.stats.clone());
                        }
                        st.report.stages.baseline_control = stage;
                    }
                    Err(msg) => {
                        st.report.stages.baseline_control =
                            Stage::skip(format!("re-applying the patch failed: {msg}"));
                        head_ok_to_run = false;
                    }
                }
            }
        }
    }
    if !head_ok_to_run && blocked_reason.is_none() {
        blocked_reason = Some("baseline control failed; head runs aborted".into());
    }

    // 6. correctness_repo_tests
    if let Some(why) = &blocked_reason {
        st.report.stages.correctness_repo_tests = Stage::skip(why.clone());
    } else {
        let out = match head_repo.take() {
            Some(o) => o,
            None => {
                let Some(inv) = invocation(vec![]) else {
                    unreachable_none()
                };
                let o = ctx.run(&RunSpec {
                    name: "head-repo".into(),
                    phase: Phase::Head,
                    invocation: inv,
                    extra_env: vec![],
                    timeout: opts.host.timeout,
                    watch_route: true,
                })?;
                st.record(&o);
                o
            }
        };
        let s = &out.record.stats;
        let cause = out.cause(repo_root, |top| provides(repo_root, &ctx, wt, &out, top));
        st.record_cause(&out.record.name, cause.as_ref());
        let (status, note) = if let Some(c) = cause.as_ref().filter(|c| c.is_environment()) {
            (
                StageStatus::Skip,
                format!(
                    "{c} (interpreter `{}`); head {}: an environment fact, not attributed to the PR",
                    python.display(),
                    out.record.status_text
                ),
            )
        } else if !out.success {
            (
                StageStatus::Fail,
                format!(
                    "head {} ({} failures, {} errors, {} executed){}",
                    out.record.status_text,
                    s.failures,
                    s.errors,
                    s.executed,
                    cause.as_ref().map(|c| format!(": {c}")).unwrap_or_default()
                ),
            )
        } else if s.executed > 0 {
            (
                StageStatus::Pass,
                format!(
                    "head passed: {} executed, {} skipped",
                    s.executed, s.skipped
                ),
            )
        } else {
            (
                StageStatus::Skip,
                format!(
                    "head exited 0 but executed no test{}",
                    st.report
                        .test_selection
                        .runner_risk
                        .as_ref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                ),
            )
        };
        let mut stage = Stage::new(status, note);
        stage.log = out.record.log.clone();
        stage.exit_code = out.record.exit_code;
        stage.stats = Some(out.record.stats.clone());
        st.report.stages.correctness_repo_tests = stage;
        if let Some(c) = cause.as_ref().filter(|c| c.is_environment()) {
            if base_repo.as_ref().is_some_and(|b| b.success) {
                st.finding(
                    Severity::Note,
                    "correctness_repo_tests",
                    format!(
                        "base passed without it; on head, {c}. If the PR means to add this dependency, the environment needs it before the change can be validated"
                    ),
                );
            }
            blocked_reason = Some(format!(
                "correctness_repo_tests could not run the target: {c}"
            ));
        }
        if status == StageStatus::Fail {
            attribute_failure(
                st,
                "correctness_repo_tests",
                "the repository target",
                &base_state,
                base_repo.as_ref(),
            );
        }
        head_repo = Some(out);
    }

    // 7. correctness_s1_grid (+ axes)
    let mut head_grid: Option<RunOutcome> = None;
    grid_stage(
        st,
        &ctx,
        &search,
        &blocked_reason,
        &invocation,
        &base_state,
        base_grid.as_ref(),
        &mut head_grid,
    )?;

    // 8. execution_receipt
    receipt_stage(st, head_repo.as_ref(), head_grid.as_ref(), &blocked_reason);

    // arch coverage
    if let Some(c) = &claim {
        let arch = c
            .evidence()
            .arch
            .clone()
            .unwrap_or_else(|| c.evidence().name.clone());
        let repo_stage = &st.report.stages.correctness_repo_tests;
        let observed = repo_stage.stats.as_ref().and_then(|s| s.observed_work);
        let runtime = repo_stage.status == StageStatus::Pass && observed != Some(0);
        st.report.arch_coverage.insert(
            arch.clone(),
            if runtime { "runtime" } else { "not-covered" }.into(),
        );
        st.report.arch_coverage_basis = match (runtime, observed) {
            (true, Some(n)) => format!(
                "gpu_claim pass on {arch}; head-repo passed with {} executed; observed_work {n} route call(s) in that run's own receipt",
                repo_stage.stats.as_ref().map(|s| s.executed).unwrap_or(0)
            ),
            (true, None) => format!(
                "gpu_claim pass on {arch}; head-repo passed with {} executed; no route named, so no work was observed (observed_work null)",
                repo_stage.stats.as_ref().map(|s| s.executed).unwrap_or(0)
            ),
            (false, Some(0)) => format!(
                "gpu_claim pass on {arch}, but the watched route was called 0 times: nothing reached the device"
            ),
            (false, _) => format!(
                "gpu_claim pass on {arch}, but correctness_repo_tests is {}",
                repo_stage.status.as_str()
            ),
        };
    } else {
        st.report.arch_coverage_basis = "no GPU claimed (degraded_mode NO_GPU): only a passing gpu_claim credits an architecture".into();
    }

    // 10. perf
    perf_stage(
        st,
        wt,
        &ctx,
        &blocked_reason,
        &target_file,
        head_text.as_deref(),
        claim.is_some(),
    )?;
    Ok((claim, scratch))
}

fn unreachable_none() -> ! {
    // `invocation` is `None` only for runner `none`, which sets `blocked_reason` first.
    panic!("invariant: a runner exists whenever targets run")
}

fn conftests(root: &Path, target_file: &str) -> Vec<PySource> {
    let mut out = Vec::new();
    let mut dir = root.join(target_file);
    while let Some(parent) = dir.parent() {
        if !parent.starts_with(root) {
            break;
        }
        let c = parent.join("conftest.py");
        if let Ok(t) = std::fs::read_to_string(&c)
            && let Ok(s) = PySource::parse(&c, t)
        {
            out.push(s);
        }
        dir = parent.to_path_buf();
    }
    out
}

fn attribute_failure(
    st: &mut State<'_>,
    stage: &str,
    what: &str,
    base_state: &str,
    base: Option<&RunOutcome>,
) {
    match (base_state, base.map(|b| b.success)) {
        ("target-not-present", _) => st.finding(
            Severity::Blocker,
            stage,
            format!("{what} is added by the PR and fails on head"),
        ),
        (_, Some(true)) => st.finding(
            Severity::Blocker,
            stage,
            format!("{what} passes on base and fails on head"),
        ),
        (_, Some(false)) => st.finding(
            Severity::Note,
            stage,
            format!("{what} fails on base too: a pre-existing failure, not attributed to the PR"),
        ),
        (_, None) => st.finding(
            Severity::Note,
            stage,
            format!("{what} fails on head; there was no base run to attribute it"),
        ),
    }
}

#[allow(clippy::too_many_arguments)]
fn grid_stage(
    st: &mut State<'_>,
    ctx: &RunContext,
    search: &grid::ChannelSearch,
    blocked: &Option<String>,
    invocation: &dyn Fn(Vec<String>) -> Option<Invocation>,
    base_state: &str,
    base_grid: Option<&RunOutcome>,
    head_grid: &mut Option<RunOutcome>,
) -> Result<(), ValidateError> {
    let opts = st.opts;
    if let Some(why) = blocked {
        st.report.stages.correctness_s1_grid = Stage::skip(why.clone());
        return Ok(());
    }
    if opts.grid.is_empty() {
        st.report.stages.correctness_s1_grid = Stage::skip(
            "no --grid: the target was run only with its own defaults (repo-default-only)",
        );
        st.report.test_selection.grid_independence_reason = "no grid".into();
        return Ok(());
    }
    let Some(ch) = search.channel.clone() else {
        st.report.stages.correctness_s1_grid =
            Stage::skip(format!("no grid channel established: {}", search.reason));
        st.report.test_selection.grid_independence_reason = "no channel was established".into();
        return Ok(());
    };
    // Dynamic proof: an unusable grid must make the target fail.
    let (env, args) = ch.hand_over_invalid();
    let Some(inv) = invocation(args) else {
        unreachable_none()
    };
    let invalid = ctx.run(&RunSpec {
        name: "head-invalid-grid".into(),
        phase: Phase::Head,
        invocation: inv,
        extra_env: env,
        timeout: opts.host.timeout,
        watch_route: false,
    })?;
    st.record(&invalid);
    let consumed =
        !invalid.success && (!matches!(ch, Channel::Pytest(_)) || invalid.grid_replacements > 0);
    if !consumed {
        st.report.test_selection.grid_channel_reason = format!(
            "{}; but the target {} with `{}` on the {} channel: it does not consume the grid",
            search.reason,
            if invalid.success {
                "passed"
            } else {
                "did not take the rows"
            },
            grid::INVALID_GRID,
            ch.as_str()
        );
        st.report.test_selection.grid_independence_reason = "the channel was not proven".into();
        st.report.stages.correctness_s1_grid = Stage::skip(format!(
            "the target ignores its grid: it {} with an invalid grid on the {} channel",
            invalid.record.status_text,
            ch.as_str()
        ));
        evaluate_axes(st, ctx, invocation, false)?;
        return Ok(());
    }
    st.report.test_selection.grid_channel = Some(ch.as_str().into());
    st.report.test_selection.grid_channel_reason = format!(
        "{}; proven: the invalid grid {}",
        search.reason, invalid.record.status_text
    );
    let axis_args = evaluate_axes(st, ctx, invocation, true)?;
    let mut indep = grid::independence(&opts.grid, search.defaults.as_deref());
    let axes_add = st
        .report
        .test_selection
        .axes
        .iter()
        .any(|a| a.hook_proof == "proven" && a.independence == "adds-coverage");
    if indep != "adds-coverage" && axes_add {
        indep = "adds-coverage";
    }
    let mut reason = if axes_add {
        format!(
            "{}; a proven axis asks for values outside its default",
            search.defaults_reason
        )
    } else {
        search.defaults_reason.clone()
    };
    if let Some(why) = opts
        .grid_novelty
        .as_deref()
        .filter(|w| !w.trim().is_empty())
    {
        match indep {
            "unknown" => {
                indep = "adds-coverage";
                reason = format!("{reason}; asserted by --grid-novelty: {why}");
            }
            "duplicates-target-defaults" => {
                reason = format!(
                    "{reason}; --grid-novelty (`{why}`) ignored: every cell is a declared default"
                );
            }
            _ => reason = format!("{reason}; --grid-novelty: {why}"),
        }
    }
    st.report.test_selection.grid_independence = indep.into();
    st.report.test_selection.grid_independence_reason = reason;
    let (env, mut args) = ch.hand_over(&opts.grid);
    args.extend(axis_args);
    let Some(inv) = invocation(args) else {
        unreachable_none()
    };
    let out = ctx.run(&RunSpec {
        name: "head-grid".into(),
        phase: Phase::Head,
        invocation: inv,
        extra_env: env,
        timeout: opts.host.timeout,
        watch_route: true,
    })?;
    st.record(&out);
    let s = out.record.stats.clone();
    let (status, note) = if !out.success {
        (
            StageStatus::Fail,
            format!(
                "grid {} on head ({} failures, {} errors)",
                out.record.status_text, s.failures, s.errors
            ),
        )
    } else if s.executed == 0 {
        (
            StageStatus::Skip,
            "the grid run executed nothing".to_string(),
        )
    } else if indep == "duplicates-target-defaults" {
        (
            StageStatus::Skip,
            "the grid passed, but every cell is already one of the target's own defaults: it proves only what correctness_repo_tests said".to_string(),
        )
    } else {
        (
            StageStatus::Pass,
            format!(
                "grid of {} cell(s) passed on head via {} ({}, {} executed)",
                opts.grid.len(),
                ch.as_str(),
                indep,
                s.executed
            ),
        )
    };
    let mut stage = Stage::new(status, note);
    stage.log = out.record.log.clone();
    stage.exit_code = out.record.exit_code;
    stage.stats = Some(s);
    st.report.stages.correctness_s1_grid = stage;
    if status == StageStatus::Fail {
        let base_state = if base_grid.is_none() && base_state == "ran" {
            "no-base-grid"
        } else {
            base_state
        };
        attribute_failure(
            st,
            "correctness_s1_grid",
            "the validator's grid",
            base_state,
            base_grid,
        );
        // A grid failure with no base grid to compare (the base lacks the channel) is still a
        // defect of head on shapes the validator chose.
        if base_grid.is_none()
            && base_state != "target-not-present"
            && let Some(f) = st.report.findings.last_mut()
            && f.stage == "correctness_s1_grid"
        {
            f.severity = Severity::Blocker;
            f.detail = "the validator's grid fails on head (the base target has no such channel to compare)".into();
        }
    }
    *head_grid = Some(out);
    Ok(())
}

/// Evaluates `--axis` requests; returns argv for proven axes.
fn evaluate_axes(
    st: &mut State<'_>,
    ctx: &RunContext,
    invocation: &dyn Fn(Vec<String>) -> Option<Invocation>,
    channel_proven: bool,
) -> Result<Vec<String>, ValidateError> {
    let opts = st.opts;
    if opts.axes.is_empty() {
        return Ok(vec![]);
    }
    if st.report.test_selection.runner != "script" {
        for a in &mut st.report.test_selection.axes {
            a.hook_proof = "unusable".into();
        }
        st.report.test_selection.axis_state = "unusable".into();
        return Ok(vec![]);
    }
    if !channel_proven {
        st.report.test_selection.axis_state = "not-evaluated".into();
        return Ok(vec![]);
    }
    let target = opts.target_file();
    let src = std::fs::read_to_string(ctx.repo.join(target))
        .ok()
        .and_then(|t| PySource::parse(ctx.repo.join(target), t).ok());
    let decls = src.as_ref().map(|s| s.arg_defaults()).unwrap_or_default();
    let mut args = Vec::new();
    let mut states = Vec::new();
    for (i, axis) in opts.axes.iter().enumerate() {
        let decl = decls.iter().find(|d| d.flags.contains(&axis.flag));
        let Some(decl) = decl else {
            st.report.test_selection.axes[i].hook_proof = "hook-not-found".into();
            states.push("hook-not-found");
            continue;
        };
        let defaults = decl.default.as_ref().and_then(crate::shapes::default_cells);
        st.report.test_selection.axes[i].declared_default = defaults.clone();
        let Some(inv) = invocation(vec![axis.flag.clone(), grid::INVALID_AXIS.to_string()]) else {
            unreachable_none()
        };
        let out = ctx.run(&RunSpec {
            name: format!("head-invalid-axis-{}", axis.name),
            phase: Phase::Head,
            invocation: inv,
            extra_env: vec![],
            timeout: opts.host.timeout,
            watch_route: false,
        })?;
        st.record(&out);
        if out.success {
            st.report.test_selection.axes[i].hook_proof = "hook-not-consumed".into();
            states.push("hook-not-consumed");
            st.finding(
                Severity::Note,
                "correctness_s1_grid",
                format!(
                    "axis `{}` dropped: `{}` accepted `{}`",
                    axis.name,
                    axis.flag,
                    grid::INVALID_AXIS
                ),
            );
            continue;
        }
        st.report.test_selection.axes[i].hook_proof = "proven".into();
        st.report.test_selection.axes[i].independence = match &defaults {
            None => "unknown",
            Some(d) => {
                if axis.values.iter().any(|v| !d.contains(&normalize_cell(v))) {
                    "adds-coverage"
                } else {
                    "duplicates-target-defaults"
                }
            }
        }
        .into();
        states.push("proven");
        args.push(axis.flag.clone());
        args.extend(axis.values.iter().cloned());
    }
    st.report.test_selection.axis_state = if states.contains(&"hook-not-found") {
        "hook-not-found"
    } else if states.contains(&"hook-not-consumed") {
        "hook-not-consumed"
    } else {
        "proven"
    }
    .into();
    Ok(args)
}

fn receipt_stage(
    st: &mut State<'_>,
    head_repo: Option<&RunOutcome>,
    head_grid: Option<&RunOutcome>,
    blocked: &Option<String>,
) {
    let opts = st.opts;
    let Some(route) = &opts.expected_route else {
        st.report.stages.execution_receipt =
            Stage::skip("no --expected-route: nothing was watched, so no work can be credited");
        return;
    };
    if let Some(why) = blocked {
        st.report.stages.execution_receipt = Stage::skip(why.clone());
        return;
    }
    let mut problems = Vec::new();
    let mut receipts: Vec<ExecutionReceipt> = Vec::new();
    let mut inferred: Option<Vec<String>> = None;
    let mut grid_checked = false;
    for (name, run) in [("head-repo", head_repo), ("head-grid", head_grid)] {
        let Some(run) = run else { continue };
        let Some(r) = &run.record.receipt else {
            problems.push(format!("{name}: no receipt was written"));
            continue;
        };
        let mut r = r.clone();
        if r.route != *route {
            problems.push(format!(
                "{name}: receipt route `{}` is not `{route}`",
                r.route
            ));
        }
        if r.kernel_symbols.is_empty() || r.calls == 0 {
            problems.push(format!("{name}: `{route}` was never called"));
        }
        // Only the grid run is held to the grid; every cell is checked, with or without
        // --shape-vars (the seed's PASS needs "every shape named by --grid").
        if name == "head-grid" && !opts.grid.is_empty() {
            grid_checked = true;
            let given = !opts.shape_vars.is_empty();
            let traces: Vec<_> = opts
                .grid
                .iter()
                .map(|c| receipt::trace_cell(c, &r.executed_shapes, &run.grid_locals, given))
                .collect();
            let truncated = if run.grid_locals_truncated {
                " (the probe stopped recording locals after 256 distinct calls)"
            } else {
                ""
            };
            if given {
                let missing: Vec<_> = traces.iter().filter(|t| !t.in_executed_shapes).collect();
                if !missing.is_empty() {
                    let saw = if r.executed_shapes.is_empty() {
                        "nothing".to_string()
                    } else {
                        r.executed_shapes
                            .iter()
                            .take(8)
                            .cloned()
                            .collect::<Vec<_>>()
                            .join("; ")
                    };
                    problems.push(format!(
                        "{name}: grid shape(s) not executed through the route: {}; the route saw `--shape-vars {}` = {saw}; {}{truncated}",
                        missing.iter().map(|t| t.cell.as_str()).collect::<Vec<_>>().join("; "),
                        opts.shape_vars.join(","),
                        missing.iter().map(|t| receipt::held_note(t)).collect::<Vec<_>>().join("; "),
                    ));
                }
            } else {
                let unheld: Vec<_> = traces.iter().filter(|t| t.held_by.is_empty()).collect();
                if !unheld.is_empty() {
                    problems.push(format!(
                        "{name}: no --shape-vars, so the grid cells were looked for in the route's locals, and no local held {} at any call{truncated}: the route did not run them, or holds them in a form the probe does not read; name the locals with --shape-vars",
                        unheld.iter().map(|t| t.cell.as_str()).collect::<Vec<_>>().join("; ")
                    ));
                } else {
                    match receipt::consistent_locals(&traces) {
                        Some(l) => inferred = Some(l),
                        None => problems.push(format!(
                            "{name}: no --shape-vars, and no one set of route locals holds every grid cell ({}); name the locals with --shape-vars",
                            traces.iter().map(receipt::held_note).collect::<Vec<_>>().join("; ")
                        )),
                    }
                }
            }
            r.grid_cells = traces;
        }
        receipts.push(r);
    }
    let mut stage = if receipts.is_empty() && problems.is_empty() {
        Stage::skip("no watched run happened")
    } else if problems.is_empty() {
        Stage::new(
            StageStatus::Pass,
            format!(
                "route `{route}` observed in {} run(s){}",
                receipts.len(),
                match &inferred {
                    _ if !grid_checked => String::new(),
                    Some(l) => format!(
                        ", every grid shape executed (no --shape-vars: read from route local(s) `{}`)",
                        l.join(",")
                    ),
                    None => format!(
                        ", every grid shape executed (`--shape-vars {}`)",
                        opts.shape_vars.join(",")
                    ),
                }
            ),
        )
    } else {
        Stage::new(StageStatus::Fail, problems.join("; "))
    };
    stage.inferred_shape_vars = inferred;
    if stage.status == StageStatus::Fail {
        st.finding(
            Severity::Note,
            "execution_receipt",
            format!("the receipt does not back the claimed work: {}", stage.note),
        );
    }
    stage.receipts = receipts;
    st.report.stages.execution_receipt = stage;
}

fn perf_stage(
    st: &mut State<'_>,
    wt: &mut Worktree,
    ctx: &RunContext,
    blocked: &Option<String>,
    target_file: &str,
    head_text: Option<&str>,
    on_gpu: bool,
) -> Result<(), ValidateError> {
    let opts = st.opts;
    if opts.no_perf {
        st.report.stages.perf = Stage::skip("--no-perf");
        return Ok(());
    }
    if wt.patch().is_none() {
        st.report.stages.perf = Stage::skip("no --patch: no base to time against");
        return Ok(());
    }
    if let Some(why) = blocked {
        st.report.stages.perf = Stage::skip(why.clone());
        return Ok(());
    }
    let args: Vec<String> = if let Some(a) = &opts.perf_args {
        a.clone()
    } else {
        let text = head_text.unwrap_or("");
        if text.contains("--scenario") && text.contains("bench") {
            vec![target_file.to_string(), "--scenario".into(), "bench".into()]
        } else if text.contains("perftest") || text.contains("@benchmark") {
            vec![target_file.to_string()]
        } else {
            st.report.stages.perf = Stage::skip(
                "no benchmark harness detected in the target; pass --perf-args to name one",
            );
            return Ok(());
        }
    };
    let mut base_runs = Vec::new();
    let mut head_runs = Vec::new();
    let mut order = Vec::new();
    for i in 1..=opts.host.perf_repeat {
        for phase in [Phase::Base, Phase::Head] {
            if phase == Phase::Base {
                wt.restore()?;
                if let Err(why) = wt.verify()? {
                    st.report.stages.perf = Stage::skip(format!(
                        "reversing the patch for a base timing left the worktree dirty: {why}"
                    ));
                    wt.apply()?.map_err(|m| ValidateError::Git {
                        action: "re-apply the patch".into(),
                        repo: wt.root().to_path_buf(),
                        message: m,
                    })?;
                    return Ok(());
                }
            } else if let Err(m) = wt.apply()? {
                st.report.stages.perf = Stage::skip(format!(
                    "re-applying the patch for a head timing failed: {m}"
                ));
                return Ok(());
            }
            let out = ctx.run(&RunSpec {
                name: format!("perf-{}-{i}", phase.as_str()),
                phase,
                invocation: Invocation::Plain { args: args.clone() },
                extra_env: vec![],
                timeout: opts.host.perf_timeout,
                watch_route: false,
            })?;
            st.record(&out);
            order.push(phase.as_str().to_string());
            if !out.success {
                st.report.stages.perf = Stage::skip(format!(
                    "perf run {} {}: no comparison",
                    out.record.name, out.record.status_text
                ));
                if phase == Phase::Base {
                    wt.apply()?.map_err(|m| ValidateError::Git {
                        action: "re-apply the patch".into(),
                        repo: wt.root().to_path_buf(),
                        message: m,
                    })?;
                }
                return Ok(());
            }
            let cells = perf::scrape(&out.output);
            if phase == Phase::Base {
                base_runs.push(cells)
            } else {
                head_runs.push(cells)
            }
        }
    }
    let base = perf::best(&base_runs);
    let head = perf::best(&head_runs);
    let compared = perf::compare(&base, &head, opts.host.perf_min_rows);
    let thr = opts.host.perf_threshold;
    let eligible: Vec<&perf::Compared> = compared.iter().filter(|c| c.column.eligible).collect();
    let control = opts.perf_control_column.as_ref().map(|name| {
        (
            name.clone(),
            compared
                .iter()
                .find(|c| c.column.column == *name)
                .map(|c| c.column.median_ratio),
        )
    });
    let mut summary = PerfSummary {
        baseline_method: "patch-reversed-same-worktree".into(),
        order,
        repeat: opts.host.perf_repeat,
        threshold: thr,
        min_rows: opts.host.perf_min_rows,
        device: if on_gpu { "gpu".into() } else { "cpu".into() },
        columns: compared.iter().map(|c| c.column.clone()).collect(),
        median_ratio: eligible
            .iter()
            .map(|c| c.column.median_ratio)
            .reduce(f64::min),
        classification: "insufficient-data".into(),
        regressed_rows: Vec::new(),
        control_column: control.as_ref().map(|c| c.0.clone()),
        control_ratio: control.as_ref().and_then(|c| c.1),
    };
    let timing_label = if on_gpu {
        ""
    } else {
        " (CPU wall-clock timings, not GPU evidence)"
    };
    let (status, note) = if eligible.is_empty() {
        (
            StageStatus::Skip,
            format!(
                "no column had ≥ {} matched rows (base {} cells, head {} cells)",
                opts.host.perf_min_rows,
                base.len(),
                head.len()
            ),
        )
    } else if let Some((name, ratio)) = &control
        && ratio.is_none_or(|r| (r - 1.0).abs() > opts.host.perf_control_tol)
    {
        (
            StageStatus::Skip,
            format!(
                "control column `{name}` moved ({}) beyond PERF_CONTROL_TOL {}: timings are not comparable",
                ratio
                    .map(|r| format!("{r:.3}"))
                    .unwrap_or_else(|| "absent".into()),
                opts.host.perf_control_tol
            ),
        )
    } else {
        let worst = eligible
            .iter()
            .min_by(|a, b| a.column.median_ratio.total_cmp(&b.column.median_ratio))
            .copied();
        let regression = eligible
            .iter()
            .filter(|c| c.column.ci_high < thr)
            .min_by(|a, b| a.column.median_ratio.total_cmp(&b.column.median_ratio));
        match (regression, worst) {
            (Some(c), _) => {
                summary.classification = "regression".into();
                summary.regressed_rows = c
                    .rows
                    .iter()
                    .filter(|r| r.ratio < thr)
                    .take(5)
                    .cloned()
                    .collect();
                (
                    StageStatus::Fail,
                    format!(
                        "column `{}`: median head/base ratio {:.3}, 95% CI [{:.3}, {:.3}] entirely below {thr}{timing_label}",
                        c.column.column, c.column.median_ratio, c.column.ci_low, c.column.ci_high
                    ),
                )
            }
            (None, Some(w)) if w.column.median_ratio < thr => {
                summary.classification = "ambiguous".into();
                (
                    StageStatus::Info,
                    format!(
                        "ambiguous: column `{}` median ratio {:.3} is below {thr} but its 95% CI [{:.3}, {:.3}] crosses it; no regression claimed{timing_label}",
                        w.column.column, w.column.median_ratio, w.column.ci_low, w.column.ci_high
                    ),
                )
            }
            (None, w) => {
                summary.classification = "no-regression".into();
                (
                    StageStatus::Pass,
                    format!(
                        "min median ratio {:.3} over {} eligible column(s) ≥ {thr}{timing_label}",
                        w.map(|c| c.column.median_ratio).unwrap_or(f64::NAN),
                        eligible.len()
                    ),
                )
            }
        }
    };
    if status == StageStatus::Fail {
        let rows: Vec<String> = summary
            .regressed_rows
            .iter()
            .map(|r| {
                format!(
                    "{} {}: base {} head {} (×{:.3})",
                    r.key, r.column, r.base, r.head, r.ratio
                )
            })
            .collect();
        st.finding(
            Severity::ShouldFix,
            "perf",
            format!("{note}; worst rows: {}", rows.join("; ")),
        );
    }
    let mut stage = Stage::new(status, note);
    stage.perf = Some(summary);
    st.report.stages.perf = stage;
    Ok(())
}

fn finish(
    mut st: State<'_>,
    claim: Option<Box<kg_gpu::Claim>>,
    scratch: Option<tempfile::TempDir>,
) -> Result<Validation, ValidateError> {
    if let Some(c) = claim {
        st.report.gpu_claim = Some(c.finish().into());
    }
    drop(scratch);
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

/// Whether the checkout provides (or, in the base commit or the patch, provided) the top-level
/// Python package or module `top`: under the root, `src/`, `PYLIB`, or the importing file's
/// directory (pytest puts a test file's directory on `sys.path`).
fn provides(root: &Path, ctx: &RunContext, wt: &Worktree, out: &RunOutcome, top: &str) -> bool {
    let importer_dirs: Vec<String> = out
        .import_errors
        .iter()
        .filter_map(|f| {
            let p = Path::new(f.path.split("::").next().unwrap_or(&f.path));
            let rel = p.strip_prefix(root).unwrap_or(p);
            rel.parent().map(|d| d.to_string_lossy().to_string())
        })
        .collect();
    let mut rel_dirs: Vec<String> = vec![String::new(), "src".into()];
    rel_dirs.extend(importer_dirs.into_iter().filter(|d| !d.is_empty()));
    let on_disk = |base: &Path| base.join(top).exists() || base.join(format!("{top}.py")).is_file();
    if rel_dirs.iter().any(|d| on_disk(&root.join(d))) || ctx.pylib.as_deref().is_some_and(on_disk)
    {
        return true;
    }
    let prefixes: Vec<(String, String)> = rel_dirs
        .iter()
        .map(|d| {
            let d = if d.is_empty() {
                String::new()
            } else {
                format!("{d}/")
            };
            (format!("{d}{top}/"), format!("{d}{top}.py"))
        })
        .collect();
    let known = |path: &str| {
        prefixes
            .iter()
            .any(|(dir, file)| path.starts_with(dir.as_str()) || path == file)
    };
    wt.files().all.iter().any(|p| known(p))
        || wt
            .tracked_files()
            .is_ok_and(|files| files.iter().any(|p| known(p)))
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
    use super::*;
    use crate::options::HostSettings;

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

    fn finding(severity: Severity, stage: &str, detail: &str) -> Finding {
        Finding {
            severity,
            stage: stage.into(),
            detail: detail.into(),
        }
    }

    #[test]
    fn the_earliest_stage_decides_not_the_first_pushed() {
        let mut r = skeleton(&options());
        // Pushed out of pipeline order, as the restore note and late stages can be.
        r.findings = vec![
            finding(Severity::Note, "merge_sim", "restore note"),
            finding(Severity::Blocker, "correctness_s1_grid", "grid fails"),
            finding(
                Severity::ShouldFix,
                "merge_sim",
                "never decides over a blocker",
            ),
            finding(Severity::Blocker, "test_policy", "widened"),
            finding(Severity::Blocker, "test_policy", "second"),
        ];
        let d = verdict::decide(&r);
        assert_eq!(d.verdict, Verdict::Block);
        assert_eq!(
            d.decided_by,
            DecidedBy::Finding {
                stage: "test_policy".into(),
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
