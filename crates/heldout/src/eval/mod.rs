//! `eval`: a completed run, its held-out shapes and the canonical tasks in; a sibling
//! `RUN<suffix>/` directory out, with per task `orig/` (the original kernel restored from the
//! tasks directory) and `opt/` (the optimised workspace), the same injections in both, the
//! task's commands run in each, `heldout_task_result.yaml`, and `heldout_summary.yaml`.
//! The run directory is only read.
//!
//! [`evaluate`] is defined here with the run over the queue and the summary; its work is
//! split by job: `prepare` (the checks made before anything is written, the queue),
//! `task` (one task: its `orig/` and `opt/`, correctness of each side), `commands` (a
//! phase's or a performance run's commands), `timing` (the interleaved performance runs and
//! the speedup call), `result` (building and marking a task's result), `files` (restoring
//! the original kernel, copying trees) and `text` (the log and one-line descriptions).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kg_python::Interpreter;
use serde::{Deserialize, Serialize};

use crate::error::HeldoutError;
use crate::summary::{self, DeviceInfo, DeviceMode, HeldoutSummary, HeldoutTaskResult};

mod commands;
mod files;
mod prepare;
mod result;
mod task;
mod text;
mod timing;

pub use files::copy_tree;
pub use text::{retention_text, speedup_text};

use prepare::{Dirs, Queued};
use text::{EvalLog, describe_device, first_line};

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
    /// ([`speedup::MIN_REPEATS`](crate::speedup::MIN_REPEATS)..=[`speedup::MAX_REPEATS`](crate::speedup::MAX_REPEATS)).
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

/// A workspace's directory name with its result.
type NamedResult = (OsString, HeldoutTaskResult);

/// Runs the evaluation. Nothing is written before the inputs, the `--tasks` ids, the entries a
/// `--tasks` re-run keeps and (GPU mode) the device have been checked.
pub fn evaluate(opts: &EvalOptions) -> Result<EvalOutcome, HeldoutError> {
    let dirs = Dirs::checked(opts)?;
    let mut notes = Vec::new();
    let workspaces = prepare::completed_workspaces(&dirs.run, &mut notes)?;
    let (queue, others) = prepare::queue_tasks(opts, &dirs, workspaces, &mut notes)?;
    let kept = prepare::kept_entries(opts, &dirs.output, others)?;
    let device = prepare::device_for(opts)?;

    let mut log = open_log(opts, &dirs, &device, &notes, queue.len(), kept.len())?;
    let (results, device_lost) = run_queue(opts, &dirs, &device, queue, &mut log);
    let summary = write_summary(&dirs.output, kept, &results, &mut log)?;
    if let Some(why) = &device_lost {
        log.line(&format!(
            "error: the device became unusable during the run ({why}); the tasks after it were not run"
        ));
    }
    Ok(EvalOutcome {
        output_dir: dirs.output,
        results: results.into_iter().map(|(_, r)| r).collect(),
        summary,
        device_lost,
    })
}

/// Creates the output directory and `heldout_eval.log`, and logs what the run is about to do.
fn open_log(
    opts: &EvalOptions,
    dirs: &Dirs,
    device: &DeviceInfo,
    notes: &[String],
    queued: usize,
    kept: usize,
) -> Result<EvalLog, HeldoutError> {
    std::fs::create_dir_all(&dirs.output).map_err(crate::error::io_err(&dirs.output))?;
    let log_path = dirs.output.join("heldout_eval.log");
    let mut log = EvalLog {
        file: std::fs::File::create(&log_path).ok(),
    };
    log.line(&format!("run directory: {}", dirs.run.display()));
    log.line(&format!("held-out data: {}", dirs.heldout.display()));
    log.line(&format!("tasks directory: {}", dirs.tasks.display()));
    log.line(&format!("output directory: {}", dirs.output.display()));
    log.line(&format!("python: {}", opts.python.path.display()));
    log.line(&format!("device: {}", describe_device(device)));
    for n in notes {
        log.line(n);
    }
    log.line(&format!("tasks to evaluate: {queued}"));
    if kept > 0 {
        log.line(&format!("entries kept from an earlier evaluation: {kept}"));
    }
    Ok(log)
}

/// Evaluates the queued tasks in order, each result written as it is done. Once the device
/// is lost, the remaining tasks are not run; returns why it was lost.
fn run_queue(
    opts: &EvalOptions,
    dirs: &Dirs,
    device: &DeviceInfo,
    queue: Vec<Queued>,
    log: &mut EvalLog,
) -> (Vec<NamedResult>, Option<String>) {
    let mut results: Vec<NamedResult> = Vec::new();
    let mut device_lost: Option<String> = None;
    let total = queue.len();
    for (i, q) in queue.into_iter().enumerate() {
        log.line(&format!("task {}/{total}: {}", i + 1, q.id));
        let out_ws = dirs.output.join(&q.name);
        let r = match &device_lost {
            Some(why) => result::not_run(&q, &out_ws, why),
            None => {
                let task_dir = dirs.tasks.join(&q.id);
                let mut r = task::evaluate_task(opts, &q, &out_ws, &task_dir, device);
                if opts.device == DeviceMode::Gpu
                    && result::needs_device_recheck(&r)
                    && let Err(problem) = crate::gpu_probe::probe(&opts.python)
                {
                    let why = problem.to_string();
                    result::mark_device_unusable(&mut r, &why);
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
    (results, device_lost)
}

/// Merges this run's results with the kept entries, writes `heldout_summary.yaml` and logs
/// its headline numbers.
fn write_summary(
    output_dir: &Path,
    kept: Vec<NamedResult>,
    results: &[NamedResult],
    log: &mut EvalLog,
) -> Result<HeldoutSummary, HeldoutError> {
    let carried_over: Vec<String> = kept.iter().map(|(_, r)| r.task_name.clone()).collect();
    let mut all: Vec<NamedResult> = kept;
    all.extend(results.iter().cloned());
    all.sort_by(|a, b| a.0.cmp(&b.0));
    warn_stale(output_dir, &all, log);
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
    Ok(summary)
}

/// Left by an earlier evaluation and in neither this run nor the kept entries: say so, so a
/// directory on disk is never mistaken for part of this summary.
fn warn_stale(output_dir: &Path, all: &[NamedResult], log: &mut EvalLog) {
    if let Ok(entries) = std::fs::read_dir(output_dir) {
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
}

#[cfg(test)]
mod tests;
