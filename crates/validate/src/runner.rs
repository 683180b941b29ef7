//! Running targets: pytest or the validator's runpy runner, in their own process group, under
//! an allow-listed environment with a private HOME and fresh caches per phase, with a timeout
//! and cancellation (SIGTERM/SIGINT to the validator kill the target's whole group).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use indexmap::IndexMap;
use kg_contract::report::{ExecutionReceipt, RunRecord, RunStats};
use rustix::process::{Pid, Signal, kill_process_group};
use serde::Deserialize;

use crate::cause::{ImportFailure, RunCause, classify};
use crate::env;
use crate::error::ValidateError;

/// The probe plugin (pytest `-p kg_validation_probe`).
pub const PROBE_PY: &str = include_str!("../py/kg_validation_probe.py");
/// The script runner.
pub const RUN_PY: &str = include_str!("../py/kg_validation_run.py");
/// The runtime import probe.
pub const RUNTIME_PY: &str = include_str!("../py/kg_runtime_probe.py");

/// Grace period between SIGTERM and SIGKILL of a target's group.
pub const GRACE: Duration = Duration::from_secs(3);

/// Base (patch reversed) or head (patch applied). Each has its own caches and HOME. It lives
/// in kg-contract because run records carry it.
pub use kg_contract::report::Phase;

/// How to run a target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Invocation {
    /// `python -m pytest ... TARGET`.
    Pytest {
        /// File or node id.
        target: String,
    },
    /// `python kg_validation_run.py FILE ARGS...`.
    Script {
        /// File.
        target: String,
        /// The target's own arguments.
        args: Vec<String>,
    },
    /// `python ARGS...` with no probe (perf harnesses).
    Plain {
        /// Arguments after the interpreter.
        args: Vec<String>,
    },
}

impl Invocation {
    /// `pytest`, `script` or `plain`.
    pub fn runner(&self) -> &'static str {
        match self {
            Invocation::Pytest { .. } => "pytest",
            Invocation::Script { .. } => "script",
            Invocation::Plain { .. } => "plain",
        }
    }
}

/// One run to make.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// Record name (`head-repo`, `base-grid`, ...).
    pub name: String,
    /// Phase (selects caches).
    pub phase: Phase,
    /// What to run.
    pub invocation: Invocation,
    /// Extra environment (grid channel variables).
    pub extra_env: Vec<(String, String)>,
    /// Time limit.
    pub timeout: Duration,
    /// Whether to watch the route and write a receipt.
    pub watch_route: bool,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The record for the report.
    pub record: RunRecord,
    /// Exit 0 (and not timed out).
    pub success: bool,
    /// The log text (stdout then stderr, interleaved as written).
    pub output: String,
    /// Parametrize decorators the probe replaced (`--shape-argnames` channel).
    pub grid_replacements: u64,
    /// Imports that failed in the run, as the probe recorded them (empty when none, or when no
    /// receipt was written).
    pub import_errors: Vec<ImportFailure>,
    /// Per distinct route call, the locals whose values are made of grid coordinates
    /// (`name` or `name.shape` → comma-joined value); empty without a grid.
    pub grid_locals: Vec<IndexMap<String, String>>,
    /// Whether the probe stopped recording `grid_locals` at its cap.
    pub grid_locals_truncated: bool,
}

impl RunOutcome {
    /// The typed cause of a failed run, from its first failed import; `provides(top)` says
    /// whether the checkout provides the top-level package `top`. `None` for a run that passed.
    pub fn cause(&self, root: &Path, provides: impl Fn(&str) -> bool) -> Option<RunCause> {
        if self.success {
            return None;
        }
        self.import_errors
            .first()
            .map(|f| classify(f, root, provides))
    }
}

#[derive(Debug, Deserialize)]
struct ProbeReceipt {
    schema_version: u32,
    producer: String,
    route: String,
    kernel_symbols: Vec<String>,
    executed_shapes: Vec<String>,
    calls: u64,
    #[serde(default)]
    grid_replacements: u64,
    // Parsed entry by entry, so one odd entry cannot cost the route evidence of the receipt.
    #[serde(default)]
    import_errors: Vec<serde_json::Value>,
    #[serde(default)]
    grid_locals: Vec<IndexMap<String, String>>,
    #[serde(default)]
    grid_locals_truncated: bool,
}

/// Shared state of every run in one validation.
#[derive(Debug)]
pub struct RunContext {
    /// Interpreter.
    pub python: PathBuf,
    /// Repository root (the cwd of every run).
    pub repo: PathBuf,
    /// Private scratch directory (probe scripts, caches, receipts, JUnit files).
    pub scratch: PathBuf,
    /// Where logs go, and their prefix relative to the report's directory.
    pub logs_dir: PathBuf,
    /// `logs_dir` as written in the report.
    pub logs_rel: String,
    /// `PYLIB`.
    pub pylib: Option<PathBuf>,
    /// Device visibility for targets (claim child env, or empty visibility for NO_GPU).
    pub device_env: Vec<(String, String)>,
    /// Set by the signal handler.
    pub cancel: Arc<AtomicBool>,
    /// `--expected-route`.
    pub route: Option<String>,
    /// `--shape-vars`.
    pub shape_vars: Vec<String>,
    /// `--grid` cells, normalised (handed to the probe of watched runs).
    pub grid_cells: Vec<String>,
}

impl RunContext {
    /// Writes the embedded probe scripts into the scratch directory.
    pub fn install_scripts(&self) -> Result<(), ValidateError> {
        let dir = self.probe_dir();
        std::fs::create_dir_all(&dir).map_err(ValidateError::io("create", &dir))?;
        for (name, text) in [
            ("kg_validation_probe.py", PROBE_PY),
            ("kg_validation_run.py", RUN_PY),
            ("kg_runtime_probe.py", RUNTIME_PY),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, text).map_err(ValidateError::io("write", &p))?;
        }
        std::fs::create_dir_all(&self.logs_dir)
            .map_err(ValidateError::io("create", &self.logs_dir))?;
        Ok(())
    }

    /// Directory holding the probe scripts.
    pub fn probe_dir(&self) -> PathBuf {
        self.scratch.join("probe")
    }

    /// The environment every target gets: the allowlist, private HOME and caches for `phase`.
    pub fn base_env(&self, phase: Phase) -> Result<Vec<(String, String)>, ValidateError> {
        let pdir = self.scratch.join(format!("phase-{}", phase.as_str()));
        let mut env: Vec<(String, String)> = Vec::new();
        for k in env::PASS_THROUGH {
            if let Ok(v) = std::env::var(k) {
                env.push(((*k).to_string(), v));
            }
        }
        for (k, sub) in [
            ("HOME", "home"),
            ("TMPDIR", "tmp"),
            ("TRITON_CACHE_DIR", "triton-cache"),
            ("TORCH_EXTENSIONS_DIR", "torch-extensions"),
            ("AITER_JIT_DIR", "aiter-jit"),
            ("XDG_CACHE_HOME", "xdg-cache"),
        ] {
            let d = pdir.join(sub);
            std::fs::create_dir_all(&d).map_err(ValidateError::io("create", &d))?;
            env.push((k.to_string(), d.to_string_lossy().to_string()));
        }
        env.push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
        env.push(("PYTHONNOUSERSITE".into(), "1".into()));
        let mut pp = vec![self.probe_dir(), self.repo.clone()];
        // src layout: the package lives in `<repo>/src/<pkg>`.
        if self.repo.join("src").is_dir() {
            pp.push(self.repo.join("src"));
        }
        if let Some(p) = &self.pylib {
            pp.insert(1, p.clone());
        }
        env.push((
            "PYTHONPATH".into(),
            pp.iter()
                .map(|p| p.to_string_lossy().to_string())
                .collect::<Vec<_>>()
                .join(":"),
        ));
        env.extend(self.device_env.iter().cloned());
        Ok(env)
    }

    /// Runs one target. `Err` only for cancellation or a failure to start the interpreter.
    pub fn run(&self, spec: &RunSpec) -> Result<RunOutcome, ValidateError> {
        if self.cancel.load(Ordering::SeqCst) {
            return Err(ValidateError::Interrupted);
        }
        let mut env = self.base_env(spec.phase)?;
        let receipt_path = self.scratch.join(format!("receipt-{}.json", spec.name));
        let junit = self.scratch.join(format!("junit-{}.xml", spec.name));
        let _ = std::fs::remove_file(&receipt_path);
        let _ = std::fs::remove_file(&junit);
        let probe = !matches!(spec.invocation, Invocation::Plain { .. });
        if probe {
            self.probe_env(spec, &receipt_path, &mut env);
        }
        env.extend(spec.extra_env.iter().cloned());
        let args = self.args(&spec.invocation, &junit);
        let log_name = format!("{}.log", spec.name);
        let log_path = self.logs_dir.join(&log_name);
        let log = std::fs::File::create(&log_path)
            .map_err(ValidateError::io("create the log", &log_path))?;
        let log2 = log
            .try_clone()
            .map_err(ValidateError::io("duplicate the log handle", &log_path))?;
        let mut cmd = Command::new(&self.python);
        cmd.args(&args)
            .current_dir(&self.repo)
            .env_clear()
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2));
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        tracing::info!(run = %spec.name, phase = spec.phase.as_str(), "running {}", args.join(" "));
        let start = Instant::now();
        let mut child = cmd
            .spawn()
            .map_err(ValidateError::io("start the interpreter", &self.python))?;
        let (exit_code, status_text) = self.wait(&mut child, start, spec.timeout)?;
        let wall_s = start.elapsed().as_secs_f64();
        let output =
            String::from_utf8_lossy(&std::fs::read(&log_path).unwrap_or_default()).to_string();
        let log_sha256 = kg_contract::io::sha256_file(&log_path).ok();
        let success = exit_code == Some(0);
        let mut stats = match &spec.invocation {
            Invocation::Pytest { .. } => parse_junit(&junit),
            _ => RunStats {
                tests: 1,
                failures: u64::from(!success),
                errors: 0,
                skipped: 0,
                executed: 1,
                observed_work: None,
            },
        };
        let probed = if probe {
            self.read_probe(spec, &receipt_path, &mut stats)
        } else {
            Probed::default()
        };
        if spec.watch_route && self.route.is_some() && probed.receipt.is_none() {
            // A watched run that wrote no receipt observed nothing we can credit.
            stats.observed_work = Some(0);
        }
        let mut argv = vec![self.python.to_string_lossy().to_string()];
        argv.extend(args);
        Ok(RunOutcome {
            record: RunRecord {
                name: spec.name.clone(),
                phase: spec.phase,
                runner: spec.invocation.runner().to_string(),
                argv,
                exit_code,
                status_text,
                wall_s,
                stats,
                log: Some(format!("{}/{}", self.logs_rel, log_name)),
                log_sha256,
                receipt: probed.receipt,
                cause: None,
            },
            success,
            output,
            grid_replacements: probed.grid_replacements,
            import_errors: probed.import_errors,
            grid_locals: probed.grid_locals,
            grid_locals_truncated: probed.grid_locals_truncated,
        })
    }

    /// What the probe needs in a run's environment: where to write the receipt and, for a
    /// watched run, the route, the shape variables and the grid cells.
    fn probe_env(&self, spec: &RunSpec, receipt_path: &Path, env: &mut Vec<(String, String)>) {
        env.push((
            env::KG_VALIDATE_RECEIPT.into(),
            receipt_path.to_string_lossy().to_string(),
        ));
        if spec.watch_route
            && let Some(r) = &self.route
        {
            env.push((env::KG_VALIDATE_ROUTE.into(), r.clone()));
            env.push((
                env::KG_VALIDATE_SHAPE_VARS.into(),
                self.shape_vars.join(","),
            ));
            if !self.grid_cells.is_empty() {
                env.push((
                    env::KG_VALIDATE_GRID_CELLS.into(),
                    serde_json::Value::from(self.grid_cells.clone()).to_string(),
                ));
            }
        }
    }

    /// The interpreter's arguments for `invocation` (pytest writes JUnit XML to `junit`).
    fn args(&self, invocation: &Invocation, junit: &Path) -> Vec<String> {
        let mut args: Vec<String> = Vec::new();
        match invocation {
            Invocation::Pytest { target } => {
                args.extend(
                    [
                        "-B",
                        "-m",
                        "pytest",
                        "-x",
                        "-q",
                        "-p",
                        "no:cacheprovider",
                        "-p",
                        "kg_validation_probe",
                    ]
                    .map(String::from),
                );
                args.push(format!("--junitxml={}", junit.display()));
                args.push(target.clone());
            }
            Invocation::Script { target, args: a } => {
                args.push("-B".into());
                args.push(
                    self.probe_dir()
                        .join("kg_validation_run.py")
                        .to_string_lossy()
                        .to_string(),
                );
                args.push(target.clone());
                args.extend(a.iter().cloned());
            }
            Invocation::Plain { args: a } => {
                args.push("-B".into());
                args.extend(a.iter().cloned());
            }
        }
        args
    }

    /// Waits for `child` until it ends, `timeout` after `start` passes (its group is killed),
    /// or the cancel flag is set (`Err`). Returns the exit code and how the run ended.
    fn wait(
        &self,
        child: &mut std::process::Child,
        start: Instant,
        timeout: Duration,
    ) -> Result<(Option<i32>, String), ValidateError> {
        let deadline = start + timeout;
        loop {
            match child.try_wait() {
                Ok(Some(st)) => {
                    // Helpers left in the group (compilers, workers) do not outlive the run.
                    kill_group(child.id(), Signal::KILL);
                    let text = match (
                        st.code(),
                        std::os::unix::process::ExitStatusExt::signal(&st),
                    ) {
                        (Some(c), _) => format!("exited with status {c}"),
                        (None, Some(s)) => format!("killed by signal {s}"),
                        _ => "ended".to_string(),
                    };
                    return Ok((st.code(), text));
                }
                Ok(None) => {}
                Err(e) => return Err(ValidateError::io("wait for the target", &self.python)(e)),
            }
            if self.cancel.load(Ordering::SeqCst) {
                terminate(child);
                return Err(ValidateError::Interrupted);
            }
            if Instant::now() >= deadline {
                terminate(child);
                return Ok((
                    None,
                    format!("timed out after {:.0} s", timeout.as_secs_f64()),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Reads the probe's receipt at `path`, if it wrote one; a watched run's route calls go in
    /// `stats.observed_work`.
    fn read_probe(&self, spec: &RunSpec, path: &Path, stats: &mut RunStats) -> Probed {
        let mut probed = Probed::default();
        let Ok(text) = std::fs::read_to_string(path) else {
            return probed;
        };
        match serde_json::from_str::<ProbeReceipt>(&text) {
            Ok(r) => {
                probed.grid_replacements = r.grid_replacements;
                probed.grid_locals = r.grid_locals;
                probed.grid_locals_truncated = r.grid_locals_truncated;
                for v in r.import_errors {
                    match serde_json::from_value::<ImportFailure>(v) {
                        Ok(f) => probed.import_errors.push(f),
                        Err(e) => {
                            tracing::warn!(run = %spec.name, error = %e, "unreadable import error in the receipt")
                        }
                    }
                }
                if spec.watch_route && self.route.is_some() {
                    stats.observed_work = Some(r.calls);
                    probed.receipt = Some(ExecutionReceipt {
                        schema_version: r.schema_version,
                        producer: r.producer,
                        route: r.route,
                        kernel_symbols: r.kernel_symbols,
                        executed_shapes: r.executed_shapes,
                        calls: r.calls,
                        grid_cells: Vec::new(),
                    });
                }
            }
            Err(e) => tracing::warn!(run = %spec.name, error = %e, "unreadable receipt"),
        }
        probed
    }
}

/// What a run's probe receipt said, beyond the receipt itself.
#[derive(Debug, Default)]
struct Probed {
    receipt: Option<ExecutionReceipt>,
    grid_replacements: u64,
    import_errors: Vec<ImportFailure>,
    grid_locals: Vec<IndexMap<String, String>>,
    grid_locals_truncated: bool,
}

fn kill_group(pid: u32, sig: Signal) {
    if let Some(p) = i32::try_from(pid).ok().and_then(Pid::from_raw) {
        let _ = kill_process_group(p, sig);
    }
}

fn terminate(child: &mut std::process::Child) {
    kill_group(child.id(), Signal::TERM);
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    kill_group(child.id(), Signal::KILL);
    let _ = child.wait();
}

/// Sums the `<testsuite>` counters of a pytest JUnit XML file; zeros when it is missing
/// (pytest died before writing it: nothing executed that we can count).
pub fn parse_junit(path: &Path) -> RunStats {
    let Ok(text) = std::fs::read_to_string(path) else {
        return RunStats::default();
    };
    parse_junit_text(&text)
}

/// As [`parse_junit`], from text.
pub fn parse_junit_text(text: &str) -> RunStats {
    let mut s = RunStats::default();
    let mut rest = text;
    while let Some(i) = rest.find("<testsuite") {
        let after = &rest[i + "<testsuite".len()..];
        // `<testsuites` is the wrapper: skip it.
        if after.starts_with('s') {
            rest = after;
            continue;
        }
        let end = after.find('>').unwrap_or(after.len());
        let tag = &after[..end];
        let attr = |name: &str| -> u64 {
            let key = format!(" {name}=\"");
            tag.find(&key)
                .and_then(|j| {
                    let v = &tag[j + key.len()..];
                    v.split('"').next()?.parse().ok()
                })
                .unwrap_or(0)
        };
        s.tests += attr("tests");
        s.failures += attr("failures");
        s.errors += attr("errors");
        s.skipped += attr("skipped");
        rest = &after[end..];
    }
    s.executed = s.tests.saturating_sub(s.skipped);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn junit_counts_sum_suites_and_skip_the_wrapper() {
        let xml = r#"<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="pytest" errors="1" failures="2" skipped="3" tests="10" time="0.1"><testcase/></testsuite></testsuites>"#;
        let s = parse_junit_text(xml);
        assert_eq!(
            (s.tests, s.failures, s.errors, s.skipped, s.executed),
            (10, 2, 1, 3, 7)
        );
        let all_skipped =
            r#"<testsuite name="pytest" errors="0" failures="0" skipped="4" tests="4">"#;
        assert_eq!(parse_junit_text(all_skipped).executed, 0);
        assert_eq!(parse_junit_text("garbage").tests, 0);
    }
}
