//! Between `gpu_claim` and the first stage that runs a target (no stage of its own): the scratch
//! directory, the run context (after the claim, since targets see only the claimed device) and
//! the runner selection for the head target. Together they make the [`Ctx`].

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use super::{Ctx, Input, State};
use crate::error::ValidateError;
use crate::options::RunnerChoice;
use crate::pipeline::{absolute, logs_location};
use crate::pyscan;
use crate::runner::{Phase, RunContext};
use crate::shapes::normalize_cell;

/// Builds the [`Ctx`]: the scratch directory (kept in `st` until the report is finished), the
/// run context with the probe scripts installed, and the target's runner.
pub(crate) fn run<'a>(
    st: &mut State<'_>,
    input: &Input<'a>,
    cancel: Arc<AtomicBool>,
) -> Result<Ctx<'a>, ValidateError> {
    let opts = input.opts;
    let scratch = tempfile::Builder::new()
        .prefix("kg-validate-")
        .tempdir()
        .map_err(ValidateError::io(
            "create a scratch directory",
            std::env::temp_dir(),
        ))?;
    let (logs_dir, logs_rel) = logs_location(&absolute(&opts.out));
    let runs = RunContext {
        python: input.python.to_path_buf(),
        repo: input.repo_root.to_path_buf(),
        scratch: scratch.path().to_path_buf(),
        logs_dir,
        logs_rel,
        pylib: opts.host.pylib.clone(),
        device_env: std::mem::take(&mut st.device_env),
        cancel,
        route: opts.expected_route.clone(),
        shape_vars: opts.shape_vars.clone(),
        grid_cells: opts.grid.iter().map(|c| normalize_cell(c)).collect(),
    };
    st.scratch = Some(scratch);
    runs.install_scripts()?;
    st.report.isolation.target_environment = runs
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
    Ok(select(st, input, runs))
}

/// Target selection, from the head state: which runner, why, and at what risk.
fn select<'a>(st: &mut State<'_>, input: &Input<'a>, runs: RunContext) -> Ctx<'a> {
    let opts = input.opts;
    let head_text = std::fs::read_to_string(input.repo_root.join(opts.target_file())).ok();
    let facts = head_text.as_deref().and_then(pyscan::scan);
    let sel = pyscan::select(&opts.target, opts.target_is_node(), facts.as_ref());
    let runner: &'static str = match opts.runner {
        RunnerChoice::Auto => sel.runner,
        RunnerChoice::Pytest => "pytest",
        RunnerChoice::Script => "script",
        RunnerChoice::None => "none",
    };
    let ts = &mut st.report.test_selection;
    ts.runner = runner.into();
    if opts.runner == RunnerChoice::Auto {
        ts.runner_reason = sel.reason.clone();
    } else {
        ts.runner_reason = format!("forced by --runner {runner}");
        ts.runner_selected = Some(format!("{}: {}", sel.runner, sel.reason));
    }
    ts.runner_risk = sel.risk.clone();
    Ctx {
        opts,
        repo_root: input.repo_root,
        python: input.python,
        runs,
        runner,
        head_text,
        facts,
    }
}
