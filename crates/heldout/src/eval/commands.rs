//! A side's commands: a phase (compile, correctness) and the performance commands, each run
//! through the [`runner`] with the evaluation's interpreter and environment.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::perf::{self, PerfCase};
use crate::runner::{self, CommandOutcome, CommandSpec};
use crate::summary::SideFailure;
use crate::task::TaskConfig;

use super::{DEFAULT_PHASE_TIMEOUT_S, EvalOptions};

/// One side of a task (`orig` or `opt`): where its commands run and where their logs go.
pub(super) struct Side<'a> {
    pub(super) name: &'static str,
    pub(super) dir: PathBuf,
    pub(super) logs: &'a Path,
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
pub(super) struct PhaseOutcome {
    pub(super) passed: bool,
    /// Why it failed, for `error`.
    pub(super) message: Option<String>,
    /// How it failed, typed.
    pub(super) failure: Option<SideFailure>,
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
pub(super) fn phase(
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
pub(super) struct PerfRun {
    /// The cases of the first command that gave any.
    pub(super) cases: Vec<PerfCase>,
    /// Their `benchmark_method` values.
    pub(super) methods: Vec<String>,
    /// How each command ended when none gave a case.
    tried: Vec<String>,
    /// The last command that did not exit 0 (for torch2hip's baseline).
    pub(super) failure: Option<SideFailure>,
    /// The logs of the commands that ran, relative to the task's output directory.
    pub(super) logs: Vec<String>,
}

impl PerfRun {
    /// Why the side has no valid case (when it has none).
    pub(super) fn note(&self) -> String {
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

pub(super) fn performance(
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
