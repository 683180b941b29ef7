//! The pipeline's stages, one module each, and what they share: [`State`] (the report and the
//! results later stages read) and [`Ctx`] (fixed once the GPU is claimed and the target
//! selected). [`crate::pipeline`] runs them in order.
//!
//! `merge_sim` and `gpu_claim` run before targets can, so they take the smaller [`Input`];
//! [`setup::run`] then builds the [`Ctx`] every later stage takes.

pub(crate) mod arch_coverage;
pub(crate) mod axes;
pub(crate) mod baseline_control;
pub(crate) mod correctness_repo_tests;
pub(crate) mod correctness_s1_grid;
pub(crate) mod execution_receipt;
pub(crate) mod gate;
pub(crate) mod gpu_claim;
pub(crate) mod gpu_requirement;
pub(crate) mod grid_channel;
pub(crate) mod index_width_scan;
pub(crate) mod merge_sim;
pub(crate) mod perf;
pub(crate) mod runtime_compat;
pub(crate) mod setup;
pub(crate) mod test_policy;

use std::path::{Path, PathBuf};

use kg_contract::report::{BaseState, Finding, RunCause, Severity, StageName, ValidationReport};
use kg_inject::PySource;

use crate::error::ValidateError;
use crate::grid::ChannelSearch;
use crate::options::Options;
use crate::pyscan::FileFacts;
use crate::runner::{Invocation, RunContext, RunOutcome, RunSpec};
use crate::worktree::Worktree;

/// The fixed inputs of a run, known before the worktree is touched.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Input<'a> {
    /// The caller's options.
    pub(crate) opts: &'a Options,
    /// The worktree, canonicalised.
    pub(crate) repo_root: &'a Path,
    /// The interpreter targets run with.
    pub(crate) python: &'a Path,
}

/// What every stage after `gpu_claim` runs with; built once by [`setup::run`].
pub(crate) struct Ctx<'a> {
    /// The caller's options.
    pub(crate) opts: &'a Options,
    /// The worktree, canonicalised.
    pub(crate) repo_root: &'a Path,
    /// The interpreter targets run with.
    pub(crate) python: &'a Path,
    /// Runs targets: scratch, logs, the claimed device's environment, cancellation.
    pub(crate) runs: RunContext,
    /// `pytest`, `script` or `none`: how the target runs.
    pub(crate) runner: &'static str,
    /// The target's text on head, read once before any target ran.
    pub(crate) head_text: Option<String>,
    /// What a syntax scan of `head_text` found; `None` when it is absent or does not parse.
    pub(crate) facts: Option<FileFacts>,
}

impl Ctx<'_> {
    /// The file part of `--target`, relative to the worktree.
    pub(crate) fn target_file(&self) -> &str {
        self.opts.target_file()
    }

    /// The target file's absolute path.
    pub(crate) fn target_abs(&self) -> PathBuf {
        self.repo_root.join(self.target_file())
    }

    /// How to run the target with `args` (script runner only); `None` for runner `none`.
    pub(crate) fn invocation(&self, args: Vec<String>) -> Option<Invocation> {
        match self.runner {
            "pytest" => Some(Invocation::Pytest {
                target: self.opts.target.clone(),
            }),
            "script" => Some(Invocation::Script {
                target: self.target_file().to_string(),
                args,
            }),
            _ => None,
        }
    }

    /// [`Ctx::invocation`] where a target is about to run, so a runner exists.
    pub(crate) fn invoke(&self, args: Vec<String>) -> Invocation {
        let Some(inv) = self.invocation(args) else {
            unreachable_none()
        };
        inv
    }
}

fn unreachable_none() -> ! {
    // `invocation` is `None` only for runner `none`, which sets `blocked` first.
    panic!("invariant: a runner exists whenever targets run")
}

/// The report as it is filled in, and what one stage leaves for later ones.
pub(crate) struct State<'a> {
    /// The report.
    pub(crate) report: ValidationReport,
    /// The caller's checkout, patched and reversed by the stages; `pipeline::run` owns it.
    pub(crate) wt: &'a mut Worktree,
    /// Set by `merge_sim` when the run ends there (a dirty worktree, paths outside the sparse
    /// checkout, a conflict); the report is then finished with no GPU claimed.
    pub(crate) stopped: bool,
    /// The GPU claim, held until the report is finished.
    pub(crate) claim: Option<Box<kg_gpu::Claim>>,
    /// Device visibility for targets, from `gpu_claim` to [`setup::run`].
    pub(crate) device_env: Vec<(String, String)>,
    /// The scratch directory, removed when the report is finished.
    pub(crate) scratch: Option<tempfile::TempDir>,
    /// Whether `runtime_compat` passed.
    pub(crate) runtime_ok: bool,
    /// Why targets do not run (any more); every later stage that would run one skips with it.
    pub(crate) blocked: Option<String>,
    /// The grid channel found in the head target (none until `grid_channel` runs).
    pub(crate) search: ChannelSearch,
    /// What `baseline_control` found on base.
    pub(crate) base_state: BaseState,
    /// The base run of the target.
    pub(crate) base_repo: Option<RunOutcome>,
    /// The base run with the grid.
    pub(crate) base_grid: Option<RunOutcome>,
    /// The head run of the target (the no-device run when no GPU was claimed).
    pub(crate) head_repo: Option<RunOutcome>,
    /// The head run with the grid.
    pub(crate) head_grid: Option<RunOutcome>,
}

impl<'a> State<'a> {
    /// A state with nothing run yet.
    pub(crate) fn new(report: ValidationReport, wt: &'a mut Worktree) -> State<'a> {
        State {
            report,
            wt,
            stopped: false,
            claim: None,
            device_env: Vec::new(),
            scratch: None,
            runtime_ok: false,
            blocked: None,
            search: ChannelSearch {
                channel: None,
                reason: String::new(),
                defaults: None,
                defaults_reason: String::new(),
            },
            base_state: BaseState::NotRun,
            base_repo: None,
            base_grid: None,
            head_repo: None,
            head_grid: None,
        }
    }
}

impl State<'_> {
    /// Adds a finding.
    pub(crate) fn finding(
        &mut self,
        severity: Severity,
        stage: StageName,
        detail: impl Into<String>,
    ) {
        self.report.findings.push(Finding {
            severity,
            stage,
            detail: detail.into(),
        });
    }

    /// Runs a target and records the run.
    pub(crate) fn run(
        &mut self,
        ctx: &Ctx<'_>,
        spec: &RunSpec,
    ) -> Result<RunOutcome, ValidateError> {
        let out = ctx.runs.run(spec)?;
        self.report.runs.push(out.record.clone());
        Ok(out)
    }

    /// The typed cause of a failed run, also recorded on its run record.
    pub(crate) fn cause(&mut self, ctx: &Ctx<'_>, out: &RunOutcome) -> Option<RunCause> {
        let root = ctx.repo_root;
        let wt: &Worktree = self.wt;
        let cause = out.cause(root, |top| provides(root, &ctx.runs, wt, out, top));
        // The last run of that name is this one.
        if let Some(r) = self
            .report
            .runs
            .iter_mut()
            .rev()
            .find(|r| r.name == out.record.name)
        {
            r.cause = cause.clone();
        }
        cause
    }
}

/// Puts the worktree back and checks it is as received; `Err` says why not.
pub(crate) fn restore_and_verify(wt: &mut Worktree) -> Result<(), String> {
    wt.restore().map_err(|e| e.to_string())?;
    wt.verify().map_err(|e| e.to_string())?
}

/// The `conftest.py` files that apply to `target_file`, nearest first.
pub(crate) fn conftests(root: &Path, target_file: &str) -> Vec<PySource> {
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

/// Records who a head failure of `what` is attributed to, from whether the base run (if any)
/// succeeded.
pub(crate) fn attribute_failure(
    st: &mut State<'_>,
    stage: StageName,
    what: &str,
    base_state: BaseState,
    base_success: Option<bool>,
) {
    match (base_state, base_success) {
        (BaseState::TargetNotPresent, _) => st.finding(
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
