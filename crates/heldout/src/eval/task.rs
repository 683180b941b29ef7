//! One task: `orig/` and `opt/` laid out from the workspace and the tasks directory with the
//! same injections, each side's correctness, the quadrant, then timing and the score.

use std::path::{Path, PathBuf};

use crate::perf;
use crate::shapes_file::{self, HeldOutShapes};
use crate::summary::{
    self, DeviceInfo, ERROR_STATUS, ErrorKind, HeldoutTaskResult, SideFailure, SpeedupStatus,
};
use crate::task::TaskConfig;

use super::commands::{Side, performance, phase};
use super::files::{copy_tree, restore_original};
use super::prepare::Queued;
use super::result::{clear_calls, new_result};
use super::{EvalOptions, RunTaskResult, timing};

/// Evaluates one task; problems become an `error` result, never a panic or an `Err`.
pub(super) fn evaluate_task(
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

/// A task whose sides are laid out, ready for their commands.
pub(super) struct TaskRun<'a> {
    pub(super) opts: &'a EvalOptions,
    pub(super) cfg: TaskConfig,
    pub(super) orig: Side<'a>,
    pub(super) opt: Side<'a>,
    /// torch2hip's original is the PyTorch baseline, run in `opt/` (AKA's flow).
    pub(super) torch2hip: bool,
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
    let logs = out_ws.join("logs");
    let (opt_dir, orig_dir) = lay_out(ws, out_ws, &logs)?;
    let cfg =
        TaskConfig::load(&opt_dir.join("config.yaml")).map_err(|e| format!("config.yaml: {e}"))?;
    restore_original(&orig_dir, task_dir, &cfg)?;
    for (label, dir) in [("opt", &opt_dir), ("orig", &orig_dir)] {
        shapes_file::apply_all(dir, &shapes)
            .map_err(|e| format!("injection failed in {label}/: {e}"))?;
    }
    let torch2hip = cfg.task_type == "torch2hip";
    let t = TaskRun {
        opts,
        cfg,
        orig: Side {
            name: "orig",
            dir: orig_dir,
            logs: &logs,
        },
        opt: Side {
            name: "opt",
            dir: opt_dir,
            logs: &logs,
        },
        torch2hip,
    };

    let orig_correct = t.original_correct(r)?;
    let opt_correct = t.optimised_correct(r)?;
    r.generalization_status = match (orig_correct, opt_correct) {
        (true, true) => "both_pass",
        (true, false) => "opt_regression",
        (false, false) => "both_fail",
        (false, true) => "opt_improvement",
    }
    .into();

    let (runs, gap) = timing::time_sides(&t, orig_correct, opt_correct, r)?;
    timing::record_times(&runs, orig_correct, opt_correct, r);
    if r.generalization_status == "both_pass" {
        timing::call_speedup(&runs, &gap, opts.perf_confidence, r);
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

/// Clears `out_ws` and fills `opt/` and `orig/` with copies of the workspace (without its
/// `build/`), beside an empty `logs/`. Returns `(opt, orig)`.
fn lay_out(ws: &Path, out_ws: &Path, logs: &Path) -> Result<(PathBuf, PathBuf), String> {
    if out_ws.exists() {
        std::fs::remove_dir_all(out_ws)
            .map_err(|e| format!("cannot clear {}: {e}", out_ws.display()))?;
    }
    let opt_dir = out_ws.join("opt");
    let orig_dir = out_ws.join("orig");
    for d in [opt_dir.as_path(), orig_dir.as_path(), logs] {
        std::fs::create_dir_all(d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
    }
    copy_tree(ws, &opt_dir, true).map_err(|e| format!("cannot copy the workspace to opt/: {e}"))?;
    copy_tree(ws, &orig_dir, true)
        .map_err(|e| format!("cannot copy the workspace to orig/: {e}"))?;
    Ok((opt_dir, orig_dir))
}

impl TaskRun<'_> {
    /// Whether the original kernel is correct on the held-out shapes.
    fn original_correct(&self, r: &mut HeldoutTaskResult) -> Result<bool, String> {
        if self.torch2hip {
            self.baseline_correct(r)
        } else {
            self.original_kernel_correct(r)
        }
    }

    /// torch2hip's original is the PyTorch baseline: correct when its timed run gives a
    /// valid case (this run decides correctness only; the timing comes from the repeats).
    fn baseline_correct(&self, r: &mut HeldoutTaskResult) -> Result<bool, String> {
        r.orig_heldout_pass_compilation = true;
        let run = performance(self.opts, &self.opt, &self.cfg, true, true, "orig_baseline")?;
        let baseline_cases = perf::valid(&run.cases);
        let baseline_note = run.note();
        r.orig_benchmark_methods = run.methods;
        let ok = !baseline_cases.is_empty();
        r.orig_heldout_pass_correctness = ok;
        r.orig_heldout_execution_time = perf::mean_time(&baseline_cases);
        if !ok {
            r.orig_failure = Some(run.failure.unwrap_or_else(|| SideFailure {
                phase: "baseline".into(),
                command: self.cfg.performance_command.join("; "),
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
        Ok(ok)
    }

    /// The original kernel restored in `orig/`: compile, then correctness.
    fn original_kernel_correct(&self, r: &mut HeldoutTaskResult) -> Result<bool, String> {
        let (opts, cfg) = (self.opts, &self.cfg);
        let comp = phase(
            opts,
            &self.orig,
            &cfg.compile_command,
            cfg.compile_timeout,
            "compile",
            false,
        )?;
        r.orig_heldout_pass_compilation = comp.passed;
        let ok = if comp.passed {
            let corr = phase(
                opts,
                &self.orig,
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
        Ok(ok)
    }

    /// The optimised kernel in `opt/`: compile, then correctness; its failure is the task's
    /// `error`.
    fn optimised_correct(&self, r: &mut HeldoutTaskResult) -> Result<bool, String> {
        let (opts, cfg) = (self.opts, &self.cfg);
        let comp = phase(
            opts,
            &self.opt,
            &cfg.compile_command,
            cfg.compile_timeout,
            "compile",
            false,
        )?;
        r.opt_pass_compilation = comp.passed;
        let opt_correct = if comp.passed {
            let corr = phase(
                opts,
                &self.opt,
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
        Ok(opt_correct)
    }
}
