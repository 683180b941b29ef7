//! `eval`: a completed run, its held-out shapes and the canonical tasks in; a sibling
//! `RUN<suffix>/` directory out, with per task `orig/` (the original kernel restored from the
//! tasks directory) and `opt/` (the optimised workspace), the same injections in both, the
//! task's commands run in each, `heldout_task_result.yaml`, and `heldout_summary.yaml`.
//! The run directory is only read.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kg_exec::python::Interpreter;
use serde::{Deserialize, Serialize};

use crate::error::{HeldoutError, io_err};
use crate::perf::{self, PerfCase};
use crate::runner::{self, CommandOutcome, CommandSpec};
use crate::shapes_file::{self, HeldOutShapes};
use crate::speedup;
use crate::summary::{
    self, DeviceInfo, DeviceMode, ERROR_STATUS, ErrorKind, HeldoutSummary, HeldoutTaskResult,
    PerfRunRecord, PerfSide, SideFailure, SpeedupStatus,
};
use crate::task::TaskConfig;

/// AKA's default per-phase timeout, seconds.
pub const DEFAULT_PHASE_TIMEOUT_S: u64 = 3600;

/// Options of an evaluation.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// The completed run directory.
    pub run_dir: PathBuf,
    /// `held_out_tests/`.
    pub heldout_dir: PathBuf,
    /// The canonical tasks directory.
    pub tasks_dir: PathBuf,
    /// Appended to the run directory's name for the output directory.
    pub output_suffix: String,
    /// Only these task ids (all when empty); the summary then merges with earlier entries.
    pub tasks: Vec<String>,
    /// Overrides every command's timeout.
    pub timeout: Option<Duration>,
    /// The interpreter for `python`/`python3`/`pytest` commands and the device probe.
    pub python: Interpreter,
    /// Extra environment for every command.
    pub env: Vec<(String, String)>,
    /// GPU (probed before and during the run) or CPU (tasks known to run there; not probed).
    pub device: DeviceMode,
    /// Runs of each side's performance commands, interleaved orig, opt, orig, opt, …
    /// ([`speedup::MIN_REPEATS`]..=[`speedup::MAX_REPEATS`]).
    pub perf_repeats: usize,
    /// Confidence of the speedup interval, in (0.5, 1).
    pub perf_confidence: f64,
}

/// What an evaluation produced.
#[derive(Debug, Clone, Serialize)]
pub struct EvalOutcome {
    /// The output directory.
    pub output_dir: PathBuf,
    /// Per-task results of this evaluation, in evaluation order.
    pub results: Vec<HeldoutTaskResult>,
    /// The summary (also written to `heldout_summary.yaml`), including carried-over entries.
    pub summary: HeldoutSummary,
    /// Set when the device became unusable during the run: why (later tasks were not run).
    pub device_lost: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct RunTaskResult {
    task_name: Option<String>,
    pass_correctness: Option<bool>,
    speedup_ratio: Option<f64>,
    score: Option<f64>,
}

/// The output directory for a run: a sibling named `<run><suffix>`.
pub fn output_dir_for(run_dir: &Path, suffix: &str) -> Result<PathBuf, HeldoutError> {
    if suffix.is_empty()
        || !suffix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(HeldoutError::Usage(format!(
            "--output-suffix `{suffix}` must be non-empty and use only letters, digits, `.`, `_` and `-`"
        )));
    }
    let name = run_dir.file_name().ok_or_else(|| {
        HeldoutError::Usage(format!(
            "--run-dir `{}` has no directory name",
            run_dir.display()
        ))
    })?;
    let mut out = name.to_os_string();
    out.push(suffix);
    Ok(run_dir.with_file_name(out))
}

/// AKA's task id for a run workspace: `task_name` of its `task_result.yaml` when it has a
/// `/`, else the directory name without its `_YYYYMMDD_HHMMSS` tail, with the first two `_`
/// (three for rocmbench) turned into `/`.
pub fn resolve_task_id(workspace: &Path) -> Option<String> {
    if let Ok(r) = crate::yaml::load::<RunTaskResult>(&workspace.join("task_result.yaml"))
        && let Some(n) = r.task_name.filter(|n| n.contains('/'))
    {
        return Some(n);
    }
    let name = workspace.file_name()?.to_str()?;
    let mut parts: Vec<&str> = name.rsplitn(3, '_').collect();
    if parts.len() < 3 {
        return None;
    }
    parts.reverse();
    let slug = parts[0];
    let n = if slug.starts_with("triton2triton_rocmbench_") {
        3
    } else {
        2
    };
    Some(slug.replacen('_', "/", n))
}

struct EvalLog {
    file: Option<std::fs::File>,
}

impl EvalLog {
    fn line(&mut self, msg: &str) {
        tracing::info!("{msg}");
        if let Some(f) = &mut self.file {
            let _ = writeln!(f, "{msg}");
        }
    }
}

/// One workspace to evaluate.
struct Queued {
    ws: PathBuf,
    name: OsString,
    id: String,
    yaml: PathBuf,
}

/// Runs the evaluation. Nothing is written before the inputs, the `--tasks` ids, the entries a
/// `--tasks` re-run keeps and (GPU mode) the device have been checked.
pub fn evaluate(opts: &EvalOptions) -> Result<EvalOutcome, HeldoutError> {
    let run_dir = std::fs::canonicalize(&opts.run_dir).map_err(io_err(&opts.run_dir))?;
    let heldout_dir =
        std::fs::canonicalize(&opts.heldout_dir).map_err(io_err(&opts.heldout_dir))?;
    let tasks_dir = std::fs::canonicalize(&opts.tasks_dir).map_err(io_err(&opts.tasks_dir))?;
    let output_dir = output_dir_for(&run_dir, &opts.output_suffix)?;
    if !(speedup::MIN_REPEATS..=speedup::MAX_REPEATS).contains(&opts.perf_repeats) {
        return Err(HeldoutError::Usage(format!(
            "--perf-repeats {} must be from {} to {}: fewer than {} runs a side give no interval worth calling",
            opts.perf_repeats,
            speedup::MIN_REPEATS,
            speedup::MAX_REPEATS,
            speedup::MIN_REPEATS
        )));
    }
    if !(opts.perf_confidence > 0.5 && opts.perf_confidence < 1.0) {
        return Err(HeldoutError::Usage(format!(
            "--perf-confidence {} must be above 0.5 and below 1",
            opts.perf_confidence
        )));
    }
    if output_dir == run_dir {
        return Err(HeldoutError::Usage(
            "the output directory must differ from --run-dir".into(),
        ));
    }
    let mut notes = Vec::new();
    let mut workspaces: Vec<PathBuf> = std::fs::read_dir(&run_dir)
        .map_err(io_err(&run_dir))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.join("task_result.yaml").is_file())
        .collect();
    workspaces.sort();
    notes.push(format!(
        "found {} completed task workspaces",
        workspaces.len()
    ));

    let mut queue = Vec::new();
    let mut others = Vec::new();
    let mut matched: Vec<&str> = Vec::new();
    for ws in workspaces {
        let Some(name) = ws.file_name().map(|n| n.to_os_string()) else {
            continue;
        };
        let Some(id) = resolve_task_id(&ws) else {
            notes.push(format!(
                "warning: cannot resolve the task id of {}; skipped",
                ws.display()
            ));
            continue;
        };
        if !opts.tasks.is_empty() && !opts.tasks.contains(&id) {
            others.push(name);
            continue;
        }
        let yaml = heldout_dir.join(&id).join("held_out_shapes.yaml");
        if !yaml.is_file() {
            if let Some(t) = opts.tasks.iter().find(|t| **t == id) {
                return Err(HeldoutError::Usage(format!(
                    "--tasks: `{t}` has no held-out file `{}`",
                    yaml.display()
                )));
            }
            tracing::debug!("no held-out config for {id}; skipped");
            continue;
        }
        if let Some(t) = opts.tasks.iter().find(|t| **t == id) {
            matched.push(t);
        }
        queue.push(Queued { ws, name, id, yaml });
    }
    if let Some(t) = opts.tasks.iter().find(|t| !matched.contains(&t.as_str())) {
        return Err(HeldoutError::Usage(format!(
            "--tasks: `{t}` is not a task of a workspace in `{}`",
            run_dir.display()
        )));
    }
    // A `--tasks` re-run keeps the other workspaces' earlier entries; read them all before
    // anything is written, so an unreadable one stops the run with nothing lost.
    let mut kept: Vec<(OsString, HeldoutTaskResult)> = Vec::new();
    if !opts.tasks.is_empty() {
        for name in others {
            let p = output_dir.join(&name).join("heldout_task_result.yaml");
            if p.is_file() {
                kept.push((name, crate::yaml::load(&p)?));
            }
        }
    }
    let device = match opts.device {
        DeviceMode::Cpu => DeviceInfo {
            mode: DeviceMode::Cpu,
            name: None,
            torch: None,
        },
        DeviceMode::Gpu => crate::device::probe(&opts.python)
            .map_err(|problem| HeldoutError::DeviceUnusable { problem })?,
    };

    std::fs::create_dir_all(&output_dir).map_err(io_err(&output_dir))?;
    let log_path = output_dir.join("heldout_eval.log");
    let mut log = EvalLog {
        file: std::fs::File::create(&log_path).ok(),
    };
    log.line(&format!("run directory: {}", run_dir.display()));
    log.line(&format!("held-out data: {}", heldout_dir.display()));
    log.line(&format!("tasks directory: {}", tasks_dir.display()));
    log.line(&format!("output directory: {}", output_dir.display()));
    log.line(&format!("python: {}", opts.python.path.display()));
    log.line(&format!("device: {}", describe_device(&device)));
    for n in &notes {
        log.line(n);
    }
    log.line(&format!("tasks to evaluate: {}", queue.len()));
    if !kept.is_empty() {
        log.line(&format!(
            "entries kept from an earlier evaluation: {}",
            kept.len()
        ));
    }

    let mut results: Vec<(OsString, HeldoutTaskResult)> = Vec::new();
    let mut device_lost: Option<String> = None;
    let total = queue.len();
    for (i, q) in queue.into_iter().enumerate() {
        log.line(&format!("task {}/{total}: {}", i + 1, q.id));
        let out_ws = output_dir.join(&q.name);
        let r = match &device_lost {
            Some(why) => not_run(&q, &out_ws, why),
            None => {
                let mut r = evaluate_task(opts, &q, &out_ws, &tasks_dir.join(&q.id), &device);
                if opts.device == DeviceMode::Gpu
                    && needs_device_recheck(&r)
                    && let Err(problem) = crate::device::probe(&opts.python)
                {
                    let why = problem.to_string();
                    mark_device_unusable(&mut r, &why);
                    device_lost = Some(why);
                }
                r
            }
        };
        log.line(&format!(
            "task {}/{total} done: {}: {} ({}){}",
            i + 1,
            q.id,
            r.generalization_status,
            speedup_text(&r),
            r.error
                .as_deref()
                .map(|e| format!(" — {}", first_line(e)))
                .unwrap_or_default()
        ));
        if let Err(e) = crate::yaml::write(
            &out_ws.join("heldout_task_result.yaml"),
            &r,
            "heldout_task_result.yaml",
        ) {
            log.line(&format!("error: {e}"));
        }
        results.push((q.name, r));
    }
    let carried_over: Vec<String> = kept.iter().map(|(_, r)| r.task_name.clone()).collect();
    let mut all: Vec<(OsString, HeldoutTaskResult)> = kept;
    all.extend(results.iter().cloned());
    all.sort_by(|a, b| a.0.cmp(&b.0));
    // Left by an earlier evaluation and in neither this run nor the kept entries: say so, so
    // a directory on disk is never mistaken for part of this summary.
    if let Ok(entries) = std::fs::read_dir(&output_dir) {
        let mut stale: Vec<String> = entries
            .flatten()
            .filter(|e| e.path().join("heldout_task_result.yaml").is_file())
            .map(|e| e.file_name())
            .filter(|n| !all.iter().any(|(name, _)| name == n))
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        stale.sort();
        for n in stale {
            log.line(&format!(
                "warning: `{n}` holds a result of an earlier evaluation that is not in this summary"
            ));
        }
    }
    let merged: Vec<HeldoutTaskResult> = all.into_iter().map(|(_, r)| r).collect();
    let mut summary = summary::summarize(&merged);
    summary.carried_over = carried_over;
    crate::yaml::write(
        &output_dir.join("heldout_summary.yaml"),
        &summary,
        "heldout_summary.yaml",
    )?;
    let c = &summary.conditional_correctness;
    log.line(&format!(
        "quadrants: {:?}; errored: {}; conditional correctness {}/{} = {:.1}%; speedup mean delta {:+.4}x",
        summary.quadrant_counts, summary.errored_tasks, c.opt_also_correct_count, c.orig_correct_count, c.rate_pct,
        summary.generalization_gap.speedup_mean_delta
    ));
    if let Some(why) = &device_lost {
        log.line(&format!(
            "error: the device became unusable during the run ({why}); the tasks after it were not run"
        ));
    }
    Ok(EvalOutcome {
        output_dir,
        results: results.into_iter().map(|(_, r)| r).collect(),
        summary,
        device_lost,
    })
}

/// `speedup 1.234x (96.8% interval 1.100–1.300: gain)`, `no valid timing`, or
/// `no speedup compared`.
pub fn speedup_text(r: &HeldoutTaskResult) -> String {
    match r.speedup_status {
        Some(SpeedupStatus::Measured) => match (&r.speedup_interval, r.speedup_call) {
            (Some(i), Some(c)) => format!(
                "speedup {:.3}x ({:.1}% interval {:.3}–{:.3}: {})",
                r.speedup_ratio,
                100.0 * i.confidence,
                i.low,
                i.high,
                match c {
                    speedup::SpeedupCall::Gain => "gain",
                    speedup::SpeedupCall::Loss => "loss",
                    speedup::SpeedupCall::NotCalled => "not called, contains 1",
                }
            ),
            // An entry of an older version: one run a side, no interval.
            _ => format!("speedup {:.3}x (no interval)", r.speedup_ratio),
        },
        Some(SpeedupStatus::NoValidTiming) => "no valid timing".into(),
        Some(SpeedupStatus::NotApplicable) | None => "no speedup compared".into(),
    }
}

/// `retention 0.667x (interval 0.600–0.700: lower)`, or `None` without a retention interval.
pub fn retention_text(r: &HeldoutTaskResult) -> Option<String> {
    let (i, c) = (r.retention_interval.as_ref()?, r.retention_call?);
    Some(format!(
        "retention {:.3}x (interval {:.3}–{:.3}: {})",
        r.speedup_retention.unwrap_or(0.0),
        i.low,
        i.high,
        match c {
            speedup::RetentionCall::Lower => "lower than the original run's",
            speedup::RetentionCall::Higher => "higher than the original run's",
            speedup::RetentionCall::NotCalled => "not called, contains 1",
        }
    ))
}

fn describe_device(d: &DeviceInfo) -> String {
    match d.mode {
        DeviceMode::Cpu => "cpu (--device cpu: not probed; the tasks' own timings)".into(),
        DeviceMode::Gpu => format!(
            "gpu: {} (torch {})",
            d.name.as_deref().unwrap_or("unnamed"),
            d.torch.as_deref().unwrap_or("unknown")
        ),
    }
}

/// A side failed or no timing was valid: the device may be why, so it is asked again.
fn needs_device_recheck(r: &HeldoutTaskResult) -> bool {
    r.error_kind.is_none()
        && (r.orig_failure.is_some()
            || r.opt_failure.is_some()
            || r.speedup_status == Some(SpeedupStatus::NoValidTiming))
}

/// The task ran on a device that was unusable afterwards: no quadrant, no score.
fn mark_device_unusable(r: &mut HeldoutTaskResult, why: &str) {
    let was = r.generalization_status.clone();
    r.generalization_status = ERROR_STATUS.into();
    r.error_kind = Some(ErrorKind::DeviceUnusable);
    r.speedup_status = Some(SpeedupStatus::NotApplicable);
    r.speedup_ratio = 0.0;
    r.speedup_retention = None;
    clear_calls(r);
    r.score = 0.0;
    r.error = Some(format!(
        "the device was unusable after this task ran ({why}); its `{was}` outcome is not evidence about the kernel{}",
        r.error
            .as_deref()
            .map(|e| format!("\n{e}"))
            .unwrap_or_default()
    ));
}

/// No interval and no call for a task that has no speedup.
fn clear_calls(r: &mut HeldoutTaskResult) {
    r.speedup_interval = None;
    r.speedup_call = None;
    r.retention_interval = None;
    r.retention_call = None;
}

/// A task after the device was lost: its directory holds only this result.
fn not_run(q: &Queued, out_ws: &Path, why: &str) -> HeldoutTaskResult {
    let run: RunTaskResult = crate::yaml::load(&q.ws.join("task_result.yaml")).unwrap_or_default();
    let mut r = new_result(&q.id, &run);
    r.error_kind = Some(ErrorKind::NotRun);
    r.error = Some(format!(
        "not run: the device became unusable during an earlier task ({why})"
    ));
    if out_ws.exists()
        && let Err(e) = std::fs::remove_dir_all(out_ws)
    {
        tracing::warn!("cannot clear {}: {e}", out_ws.display());
    }
    if let Err(e) = std::fs::create_dir_all(out_ws) {
        tracing::warn!("cannot create {}: {e}", out_ws.display());
    }
    r
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

fn new_result(id: &str, run: &RunTaskResult) -> HeldoutTaskResult {
    HeldoutTaskResult {
        task_name: id.to_string(),
        heldout: true,
        opt_pass_compilation: false,
        opt_pass_correctness: false,
        opt_execution_time: 0.0,
        orig_heldout_pass_compilation: false,
        orig_heldout_pass_correctness: false,
        orig_heldout_execution_time: 0.0,
        generalization_status: ERROR_STATUS.into(),
        speedup_ratio: 0.0,
        score: 0.0,
        original_run_pass_correctness: run.pass_correctness.unwrap_or(false),
        original_run_speedup_ratio: run.speedup_ratio.unwrap_or(0.0),
        original_run_score: run.score.unwrap_or(0.0),
        error: None,
        speedup_retention: None,
        orig_benchmark_methods: vec![],
        opt_benchmark_methods: vec![],
        error_kind: None,
        speedup_status: Some(SpeedupStatus::NotApplicable),
        orig_failure: None,
        opt_failure: None,
        device: None,
        perf_repeats: None,
        perf_runs: vec![],
        speedup_interval: None,
        speedup_call: None,
        retention_interval: None,
        retention_call: None,
    }
}

/// Evaluates one task; problems become an `error` result, never a panic or an `Err`.
fn evaluate_task(
    opts: &EvalOptions,
    q: &Queued,
    out_ws: &Path,
    task_dir: &Path,
    device: &DeviceInfo,
) -> HeldoutTaskResult {
    let run: RunTaskResult = crate::yaml::load(&q.ws.join("task_result.yaml")).unwrap_or_default();
    let mut r = new_result(&q.id, &run);
    match evaluate_into(opts, &q.ws, out_ws, &q.yaml, task_dir, &mut r) {
        Ok(()) => r.device = Some(device.clone()),
        Err(e) => {
            r.generalization_status = ERROR_STATUS.into();
            r.error_kind = Some(ErrorKind::Setup);
            r.speedup_status = Some(SpeedupStatus::NotApplicable);
            r.speedup_ratio = 0.0;
            clear_calls(&mut r);
            r.score = 0.0;
            r.error = Some(e);
        }
    }
    r.speedup_retention = summary::retention(r.speedup_ratio, r.original_run_speedup_ratio);
    r
}

struct Side<'a> {
    name: &'static str,
    dir: PathBuf,
    logs: &'a Path,
}

fn evaluate_into(
    opts: &EvalOptions,
    ws: &Path,
    out_ws: &Path,
    yaml: &Path,
    task_dir: &Path,
    r: &mut HeldoutTaskResult,
) -> Result<(), String> {
    let shapes = HeldOutShapes::load(yaml).map_err(|e| e.to_string())?;
    if !task_dir.is_dir() {
        return Err(format!(
            "canonical task directory `{}` not found",
            task_dir.display()
        ));
    }
    if out_ws.exists() {
        std::fs::remove_dir_all(out_ws)
            .map_err(|e| format!("cannot clear {}: {e}", out_ws.display()))?;
    }
    let opt_dir = out_ws.join("opt");
    let orig_dir = out_ws.join("orig");
    let logs = out_ws.join("logs");
    for d in [&opt_dir, &orig_dir, &logs] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    copy_tree(ws, &opt_dir, true).map_err(|e| format!("cannot copy the workspace to opt/: {e}"))?;
    copy_tree(ws, &orig_dir, true)
        .map_err(|e| format!("cannot copy the workspace to orig/: {e}"))?;
    let cfg =
        TaskConfig::load(&opt_dir.join("config.yaml")).map_err(|e| format!("config.yaml: {e}"))?;
    restore_original(&orig_dir, task_dir, &cfg)?;
    for (label, dir) in [("opt", &opt_dir), ("orig", &orig_dir)] {
        shapes_file::apply_all(dir, &shapes)
            .map_err(|e| format!("injection failed in {label}/: {e}"))?;
    }
    let opt = Side {
        name: "opt",
        dir: opt_dir.clone(),
        logs: &logs,
    };
    let orig = Side {
        name: "orig",
        dir: orig_dir.clone(),
        logs: &logs,
    };
    let torch2hip = cfg.task_type == "torch2hip";

    // Original kernel. torch2hip's is the PyTorch baseline: correct when its timed run gives
    // a valid case (this run decides correctness only; the timing comes from the repeats).
    let orig_correct = if torch2hip {
        r.orig_heldout_pass_compilation = true;
        let run = performance(opts, &opt, &cfg, true, true, "orig_baseline")?;
        let baseline_cases = perf::valid(&run.cases);
        let baseline_note = run.note();
        r.orig_benchmark_methods = run.methods;
        let ok = !baseline_cases.is_empty();
        r.orig_heldout_pass_correctness = ok;
        r.orig_heldout_execution_time = perf::mean_time(&baseline_cases);
        if !ok {
            r.orig_failure = Some(run.failure.unwrap_or_else(|| SideFailure {
                phase: "baseline".into(),
                command: cfg.performance_command.join("; "),
                exit_code: Some(0),
                signal: None,
                signal_name: None,
                timed_out: false,
                reported_failure: false,
            }));
            r.error = Some(format!(
                "PyTorch baseline failed on held-out shapes: {baseline_note}"
            ));
        }
        ok
    } else {
        let comp = phase(
            opts,
            &orig,
            &cfg.compile_command,
            cfg.compile_timeout,
            "compile",
            false,
        )?;
        r.orig_heldout_pass_compilation = comp.passed;
        let ok = if comp.passed {
            let corr = phase(
                opts,
                &orig,
                &cfg.correctness_command,
                cfg.correctness_timeout,
                "correctness",
                true,
            )?;
            r.orig_failure = corr.failure;
            corr.passed
        } else {
            r.orig_failure = comp.failure;
            false
        };
        r.orig_heldout_pass_correctness = ok;
        ok
    };

    // Optimised kernel.
    let comp = phase(
        opts,
        &opt,
        &cfg.compile_command,
        cfg.compile_timeout,
        "compile",
        false,
    )?;
    r.opt_pass_compilation = comp.passed;
    let opt_correct = if comp.passed {
        let corr = phase(
            opts,
            &opt,
            &cfg.correctness_command,
            cfg.correctness_timeout,
            "correctness",
            true,
        )?;
        if !corr.passed {
            r.error = corr.message;
            r.opt_failure = corr.failure;
        }
        corr.passed
    } else {
        r.error = comp.message;
        r.opt_failure = comp.failure;
        false
    };
    r.opt_pass_correctness = opt_correct;
    r.generalization_status = match (orig_correct, opt_correct) {
        (true, true) => "both_pass",
        (true, false) => "opt_regression",
        (false, false) => "both_fail",
        (false, true) => "opt_improvement",
    }
    .into();

    // Performance, only on correct sides, interleaved orig, opt, orig, opt, … so that drift
    // (clocks, temperature, other tenants) falls on both sides alike; every run is recorded
    // in the order it ran.
    let mut runs = SideRuns::default();
    let mut gap: Vec<String> = Vec::new();
    // A side whose counterpart failed is compared with nothing: one run gives its time.
    let repeats = if orig_correct && opt_correct {
        opts.perf_repeats
    } else {
        1
    };
    if orig_correct || opt_correct {
        r.perf_repeats = Some(repeats);
    }
    for rep in 1..=repeats {
        for (which, correct) in [(PerfSide::Orig, orig_correct), (PerfSide::Opt, opt_correct)] {
            if !correct {
                continue;
            }
            let (side, label) = match which {
                // torch2hip's original is the PyTorch module, timed in opt/ (AKA's flow).
                PerfSide::Orig if torch2hip => (&opt, format!("orig_baseline_rep{rep}")),
                PerfSide::Orig => (&orig, format!("orig_performance_rep{rep}")),
                PerfSide::Opt => (&opt, format!("opt_performance_rep{rep}")),
            };
            let run = performance(opts, side, &cfg, which == PerfSide::Orig, torch2hip, &label)?;
            let cases = perf::valid(&run.cases);
            let note = cases.is_empty().then(|| run.note());
            if let Some(n) = &note {
                gap.push(format!(
                    "the {} side has no valid performance case in run {rep} of {repeats} ({n})",
                    side_word(which),
                ));
            }
            r.perf_runs.push(PerfRunRecord {
                side: which,
                repeat: rep,
                valid_cases: cases.len(),
                mean_time_ms: perf::mean_time(&cases),
                logs: run.logs.clone(),
                note,
            });
            runs.add(which, cases, run.methods);
        }
        // Fail closed: a run without a valid case leaves no complete set to compare, and
        // more runs would only spend device time.
        if !gap.is_empty() {
            break;
        }
    }
    if orig_correct {
        if !runs.orig.is_empty() {
            r.orig_heldout_execution_time = runs.median_time(PerfSide::Orig);
        }
        r.orig_benchmark_methods = merged(&r.orig_benchmark_methods, &runs.orig_methods);
    }
    if opt_correct {
        r.opt_execution_time = runs.median_time(PerfSide::Opt);
        r.opt_benchmark_methods = runs.opt_methods.clone();
    }
    if r.generalization_status == "both_pass" {
        let estimate = if gap.is_empty() {
            speedup::estimate(&runs.orig, &runs.opt, opts.perf_confidence)
                .map_err(|e| e.to_string())
        } else {
            Err(gap.join("; "))
        };
        match estimate {
            Ok(e) => {
                r.speedup_ratio = e.speedup;
                r.speedup_status = Some(SpeedupStatus::Measured);
                if let Some((interval, call)) =
                    speedup::retention(&e.interval, r.original_run_speedup_ratio)
                {
                    r.retention_interval = Some(interval);
                    r.retention_call = Some(call);
                }
                r.speedup_interval = Some(e.interval);
                r.speedup_call = Some(e.call);
            }
            Err(why) => {
                r.speedup_ratio = 0.0;
                r.speedup_status = Some(SpeedupStatus::NoValidTiming);
                r.error = Some(format!("no valid timing: {why}"));
            }
        }
    }
    r.score = summary::score(
        r.opt_pass_compilation,
        r.opt_pass_correctness,
        r.speedup_ratio,
        r.orig_heldout_execution_time,
        r.opt_execution_time,
    );
    Ok(())
}

fn timeout_for(opts: &EvalOptions, cfg_timeout: Option<u64>) -> Duration {
    opts.timeout
        .unwrap_or_else(|| Duration::from_secs(cfg_timeout.unwrap_or(DEFAULT_PHASE_TIMEOUT_S)))
}

fn env_for(opts: &EvalOptions) -> Vec<(String, String)> {
    let mut env = opts.env.clone();
    env.push((
        "PYTHON_BIN".into(),
        opts.python.path.to_string_lossy().into_owned(),
    ));
    if let Some(bin) = opts
        .python
        .path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
    {
        let path = std::env::var("PATH").unwrap_or_default();
        env.push(("PATH".into(), format!("{}:{path}", bin.display())));
    }
    env
}

/// How a phase ended.
struct PhaseOutcome {
    passed: bool,
    /// Why it failed, for `error`.
    message: Option<String>,
    /// How it failed, typed.
    failure: Option<SideFailure>,
}

fn side_failure(phase: &str, cmd: &str, out: &CommandOutcome, reported: bool) -> SideFailure {
    SideFailure {
        phase: phase.into(),
        command: cmd.into(),
        exit_code: out.exit_code,
        signal: out.signal,
        signal_name: out.signal.and_then(runner::signal_name).map(str::to_string),
        timed_out: out.timed_out,
        reported_failure: reported,
    }
}

/// Runs a phase's commands. `Err` when a command could not start at all (the task then gets
/// an `error` entry, not a failing side).
fn phase(
    opts: &EvalOptions,
    side: &Side<'_>,
    commands: &[String],
    cfg_timeout: Option<u64>,
    phase: &str,
    check_output: bool,
) -> Result<PhaseOutcome, String> {
    if commands.is_empty() {
        return Err(format!("config.yaml has no {phase}_command"));
    }
    for (i, cmd) in commands.iter().enumerate() {
        let spec = CommandSpec {
            command: crate::python::normalize_command(cmd, &opts.python.path),
            cwd: side.dir.clone(),
            env: env_for(opts),
            timeout: timeout_for(opts, cfg_timeout),
            log_path: Some(side.logs.join(format!("{}_{phase}_{i}.log", side.name))),
        };
        let out = runner::run(&spec);
        if let Some(e) = &out.spawn_error {
            return Err(format!("{} {phase} command could not run: {e}", side.name));
        }
        if out.leaked_children {
            tracing::warn!(
                "{} {phase}: child processes outlived `{cmd}` and were killed",
                side.name
            );
        }
        if !out.success() {
            return Ok(PhaseOutcome {
                passed: false,
                message: Some(format!(
                    "{} {phase} failed: `{cmd}`: {}\nstdout: {}\nstderr: {}",
                    side.name,
                    out.describe(),
                    runner::tail(&out.stdout, 800),
                    runner::tail(&out.stderr, 1200)
                )),
                failure: Some(side_failure(phase, cmd, &out, false)),
            });
        }
        if check_output {
            let lower = format!("{}{}", out.stdout, out.stderr).to_lowercase();
            if lower.contains("fail") && !lower.contains("pass") {
                return Ok(PhaseOutcome {
                    passed: false,
                    message: Some(format!(
                        "{} {phase} reported failure: `{cmd}`\nstdout: {}",
                        side.name,
                        runner::tail(&out.stdout, 800)
                    )),
                    failure: Some(side_failure(phase, cmd, &out, true)),
                });
            }
        }
    }
    Ok(PhaseOutcome {
        passed: true,
        message: None,
        failure: None,
    })
}

/// What the performance commands of one side gave.
struct PerfRun {
    /// The cases of the first command that gave any.
    cases: Vec<PerfCase>,
    /// Their `benchmark_method` values.
    methods: Vec<String>,
    /// How each command ended when none gave a case.
    tried: Vec<String>,
    /// The last command that did not exit 0 (for torch2hip's baseline).
    failure: Option<SideFailure>,
    /// The logs of the commands that ran, relative to the task's output directory.
    logs: Vec<String>,
}

impl PerfRun {
    /// Why the side has no valid case (when it has none).
    fn note(&self) -> String {
        if self.cases.is_empty() {
            if self.tried.is_empty() {
                "no performance_command".into()
            } else {
                self.tried.join("; ")
            }
        } else {
            format!("{} case(s), none with a time > 0", self.cases.len())
        }
    }
}

fn performance(
    opts: &EvalOptions,
    side: &Side<'_>,
    cfg: &TaskConfig,
    baseline: bool,
    torch2hip: bool,
    label: &str,
) -> Result<PerfRun, String> {
    let mut run = PerfRun {
        cases: Vec::new(),
        methods: Vec::new(),
        tried: Vec::new(),
        failure: None,
        logs: Vec::new(),
    };
    for (i, cmd) in cfg.performance_command.iter().enumerate() {
        let cmd = if baseline && torch2hip {
            format!("{cmd} --baseline_only")
        } else {
            cmd.clone()
        };
        perf::clear_reports(&side.dir);
        let spec = CommandSpec {
            command: crate::python::normalize_command(&cmd, &opts.python.path),
            cwd: side.dir.clone(),
            env: env_for(opts),
            timeout: timeout_for(opts, cfg.performance_timeout),
            log_path: Some(side.logs.join(format!("{label}_{i}.log"))),
        };
        run.logs.push(format!("logs/{label}_{i}.log"));
        let out = runner::run(&spec);
        if let Some(e) = &out.spawn_error {
            return Err(format!(
                "{} performance command could not run: {e}",
                side.name
            ));
        }
        if out.success() {
            let (cases, _) = perf::collect(
                &side.dir,
                &format!("{}{}", out.stdout, out.stderr),
                baseline,
                torch2hip,
            );
            if !cases.is_empty() {
                let mut methods: Vec<String> =
                    cases.iter().filter_map(|c| c.method.clone()).collect();
                methods.sort();
                methods.dedup();
                run.cases = cases;
                run.methods = methods;
                return Ok(run);
            }
            run.tried.push(format!(
                "`{cmd}` exited 0 with no timed case in a report file or its output"
            ));
        } else {
            run.tried.push(format!("`{cmd}`: {}", out.describe()));
            let phase = if baseline && torch2hip {
                "baseline"
            } else {
                "performance"
            };
            run.failure = Some(side_failure(phase, &cmd, &out, false));
        }
    }
    Ok(run)
}

/// Each side's valid cases per run, and the benchmark methods seen.
#[derive(Default)]
struct SideRuns {
    orig: Vec<Vec<PerfCase>>,
    opt: Vec<Vec<PerfCase>>,
    orig_methods: Vec<String>,
    opt_methods: Vec<String>,
}

impl SideRuns {
    /// Adds a run; one without a valid case adds only its methods.
    fn add(&mut self, side: PerfSide, cases: Vec<PerfCase>, methods: Vec<String>) {
        let (runs, seen) = match side {
            PerfSide::Orig => (&mut self.orig, &mut self.orig_methods),
            PerfSide::Opt => (&mut self.opt, &mut self.opt_methods),
        };
        *seen = merged(seen, &methods);
        if !cases.is_empty() {
            runs.push(cases);
        }
    }

    /// Median over runs of each run's mean time, ms (0 without runs).
    fn median_time(&self, side: PerfSide) -> f64 {
        let runs = match side {
            PerfSide::Orig => &self.orig,
            PerfSide::Opt => &self.opt,
        };
        let mut t: Vec<f64> = runs.iter().map(|c| perf::mean_time(c)).collect();
        if t.is_empty() {
            return 0.0;
        }
        t.sort_by(f64::total_cmp);
        let n = t.len();
        if n % 2 == 1 {
            t[n / 2]
        } else {
            (t[n / 2 - 1] + t[n / 2]) / 2.0
        }
    }
}

/// The sorted union of two method lists.
fn merged(a: &[String], b: &[String]) -> Vec<String> {
    let mut v: Vec<String> = a.iter().chain(b).cloned().collect();
    v.sort();
    v.dedup();
    v
}

fn side_word(side: PerfSide) -> &'static str {
    match side {
        PerfSide::Orig => "original",
        PerfSide::Opt => "optimised",
    }
}

/// AKA's per-type rule: hip2hip copies `target_file_path`; torch2hip removes the agent's HIP
/// file; other types copy every `source_file_path` from the tasks directory.
fn restore_original(orig: &Path, task_dir: &Path, cfg: &TaskConfig) -> Result<(), String> {
    let files: Vec<String> = match cfg.task_type.as_str() {
        "torch2hip" => {
            if let Some(t) = &cfg.target_file_path {
                let p = orig.join(t);
                if p.exists() {
                    std::fs::remove_file(&p)
                        .map_err(|e| format!("cannot remove {}: {e}", p.display()))?;
                }
            }
            return Ok(());
        }
        "hip2hip" => vec![
            cfg.target_file_path
                .clone()
                .ok_or("config.yaml has no target_file_path for a hip2hip task")?,
        ],
        _ => {
            if cfg.source_file_path.is_empty() {
                return Err(format!(
                    "config.yaml has no source_file_path for a {} task",
                    cfg.task_type
                ));
            }
            cfg.source_file_path.clone()
        }
    };
    for rel in files {
        let src = task_dir.join(&rel);
        let dst = orig.join(&rel);
        if !src.is_file() {
            return Err(format!("original kernel `{}` not found", src.display()));
        }
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::copy(&src, &dst).map_err(|e| format!("cannot restore {}: {e}", src.display()))?;
    }
    Ok(())
}

/// Copies a directory tree; symlinks are recreated as symlinks. With `skip_build`, the
/// top-level `build/` (stale reports) is left out.
pub fn copy_tree(from: &Path, to: &Path, skip_build: bool) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let name = e.file_name();
        if skip_build && name == "build" {
            continue;
        }
        let src = e.path();
        let dst = to.join(&name);
        let ft = e.file_type()?;
        if ft.is_symlink() {
            let target = std::fs::read_link(&src)?;
            std::os::unix::fs::symlink(target, &dst)?;
        } else if ft.is_dir() {
            copy_tree(&src, &dst, false)?;
        } else {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_follow_aka() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("hip2hip_gpumode_SiLU_20260417_142639");
        std::fs::create_dir_all(&a).unwrap();
        assert_eq!(resolve_task_id(&a).unwrap(), "hip2hip/gpumode/SiLU");
        let b = d
            .path()
            .join("triton2triton_rocmbench_easy_test_add_kernel_20260417_142639");
        std::fs::create_dir_all(&b).unwrap();
        assert_eq!(
            resolve_task_id(&b).unwrap(),
            "triton2triton/rocmbench/easy/test_add_kernel"
        );
        std::fs::write(b.join("task_result.yaml"), "task_name: x/y/z\n").unwrap();
        assert_eq!(resolve_task_id(&b).unwrap(), "x/y/z");
    }

    #[test]
    fn output_suffix_is_checked() {
        let p = Path::new("/w/run_1");
        assert_eq!(
            output_dir_for(p, "_heldout").unwrap(),
            PathBuf::from("/w/run_1_heldout")
        );
        assert!(output_dir_for(p, "").is_err());
        assert!(output_dir_for(p, "/../x").is_err());
    }
}
