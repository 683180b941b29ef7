//! What [`evaluate`](super::evaluate) checks before it writes anything: the inputs, the
//! workspaces to evaluate and the `--tasks` ids, the entries a `--tasks` re-run keeps, and
//! (GPU mode) the device.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::{HeldoutError, io_err};
use crate::speedup;
use crate::summary::{DeviceInfo, DeviceMode, HeldoutTaskResult};

use super::{EvalOptions, NamedResult, output_dir_for, resolve_task_id};

/// The evaluation's directories, canonical, with the output directory checked.
pub(super) struct Dirs {
    /// The completed run directory (only read).
    pub(super) run: PathBuf,
    /// `held_out_tests/`.
    pub(super) heldout: PathBuf,
    /// The canonical tasks directory.
    pub(super) tasks: PathBuf,
    /// The sibling output directory.
    pub(super) output: PathBuf,
}

impl Dirs {
    /// Canonical directories, once the options have been checked.
    pub(super) fn checked(opts: &EvalOptions) -> Result<Self, HeldoutError> {
        let run = std::fs::canonicalize(&opts.run_dir).map_err(io_err(&opts.run_dir))?;
        let heldout =
            std::fs::canonicalize(&opts.heldout_dir).map_err(io_err(&opts.heldout_dir))?;
        let tasks = std::fs::canonicalize(&opts.tasks_dir).map_err(io_err(&opts.tasks_dir))?;
        let output = output_dir_for(&run, &opts.output_suffix)?;
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
        if output == run {
            return Err(HeldoutError::Usage(
                "the output directory must differ from --run-dir".into(),
            ));
        }
        Ok(Dirs {
            run,
            heldout,
            tasks,
            output,
        })
    }
}

/// One workspace to evaluate.
pub(super) struct Queued {
    pub(super) ws: PathBuf,
    pub(super) name: OsString,
    pub(super) id: String,
    pub(super) yaml: PathBuf,
}

/// The run's workspaces with a `task_result.yaml`, sorted; their count goes to `notes`.
pub(super) fn completed_workspaces(
    run_dir: &Path,
    notes: &mut Vec<String>,
) -> Result<Vec<PathBuf>, HeldoutError> {
    let mut workspaces: Vec<PathBuf> = std::fs::read_dir(run_dir)
        .map_err(io_err(run_dir))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && p.join("task_result.yaml").is_file())
        .collect();
    workspaces.sort();
    notes.push(format!(
        "found {} completed task workspaces",
        workspaces.len()
    ));
    Ok(workspaces)
}

/// The workspaces to evaluate, and the names of those `--tasks` leaves out. Every `--tasks`
/// id must name a workspace with a held-out file.
pub(super) fn queue_tasks(
    opts: &EvalOptions,
    dirs: &Dirs,
    workspaces: Vec<PathBuf>,
    notes: &mut Vec<String>,
) -> Result<(Vec<Queued>, Vec<OsString>), HeldoutError> {
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
        let yaml = dirs.heldout.join(&id).join("held_out_shapes.yaml");
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
            dirs.run.display()
        )));
    }
    Ok((queue, others))
}

/// A `--tasks` re-run keeps the other workspaces' earlier entries; they are all read before
/// anything is written, so an unreadable one stops the run with nothing lost.
pub(super) fn kept_entries(
    opts: &EvalOptions,
    output_dir: &Path,
    others: Vec<OsString>,
) -> Result<Vec<NamedResult>, HeldoutError> {
    let mut kept: Vec<(OsString, HeldoutTaskResult)> = Vec::new();
    if !opts.tasks.is_empty() {
        for name in others {
            let p = output_dir.join(&name).join("heldout_task_result.yaml");
            if p.is_file() {
                kept.push((name, crate::yaml::load(&p)?));
            }
        }
    }
    Ok(kept)
}

/// The device the tasks run on: probed in GPU mode (unusable stops the run), not in CPU mode.
pub(super) fn device_for(opts: &EvalOptions) -> Result<DeviceInfo, HeldoutError> {
    Ok(match opts.device {
        DeviceMode::Cpu => DeviceInfo {
            mode: DeviceMode::Cpu,
            name: None,
            torch: None,
        },
        DeviceMode::Gpu => crate::gpu_probe::probe(&opts.python)
            .map_err(|problem| HeldoutError::DeviceUnusable { problem })?,
    })
}
