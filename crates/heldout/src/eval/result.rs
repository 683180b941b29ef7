//! A task's result: a fresh one, one for a task that was not run, and the marks a lost
//! device or a setup failure leave on it.

use std::path::Path;

use crate::summary::{ERROR_STATUS, ErrorKind, HeldoutTaskResult, SpeedupStatus};

use super::RunTaskResult;
use super::prepare::Queued;

/// A side failed or no timing was valid: the device may be why, so it is asked again.
pub(super) fn needs_device_recheck(r: &HeldoutTaskResult) -> bool {
    r.error_kind.is_none()
        && (r.orig_failure.is_some()
            || r.opt_failure.is_some()
            || r.speedup_status == Some(SpeedupStatus::NoValidTiming))
}

/// The task ran on a device that was unusable afterwards: no quadrant, no score.
pub(super) fn mark_device_unusable(r: &mut HeldoutTaskResult, why: &str) {
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
pub(super) fn clear_calls(r: &mut HeldoutTaskResult) {
    r.speedup_interval = None;
    r.speedup_call = None;
    r.retention_interval = None;
    r.retention_call = None;
}

/// A task after the device was lost: its directory holds only this result.
pub(super) fn not_run(q: &Queued, out_ws: &Path, why: &str) -> HeldoutTaskResult {
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

/// A result with nothing passed yet, carrying the original run's figures.
pub(super) fn new_result(id: &str, run: &RunTaskResult) -> HeldoutTaskResult {
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
