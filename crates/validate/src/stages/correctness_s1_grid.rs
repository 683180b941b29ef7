//! Stage 7, `correctness_s1_grid`: the validator's `--grid` on head through the channel found
//! structurally, once an invalid grid has proven the target consumes it; `--axis` requests
//! ride along ([`super::axes`]). Failures are attributed against the base grid.

use kg_contract::report::{BaseState, Severity, Stage, StageName, StageStatus};

use super::{Ctx, State, attribute_failure, axes};
use crate::error::ValidateError;
use crate::grid::{self, Channel};
use crate::runner::{Phase, RunOutcome, RunSpec};

/// Proves the channel, runs the grid on head and judges it.
pub(crate) fn run(st: &mut State<'_>, ctx: &Ctx<'_>) -> Result<(), ValidateError> {
    let opts = ctx.opts;
    if let Some(why) = &st.blocked {
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
    let Some(ch) = st.search.channel.clone() else {
        st.report.stages.correctness_s1_grid =
            Stage::skip(format!("no grid channel established: {}", st.search.reason));
        st.report.test_selection.grid_independence_reason = "no channel was established".into();
        return Ok(());
    };
    if !prove_channel(st, ctx, &ch)? {
        return Ok(());
    }
    let axis_args = axes::evaluate(st, ctx, true)?;
    let indep = independence(st, ctx);
    let (env, mut args) = ch.hand_over(&opts.grid);
    args.extend(axis_args);
    let out = st.run(
        ctx,
        &RunSpec {
            name: "head-grid".into(),
            phase: Phase::Head,
            invocation: ctx.invoke(args),
            extra_env: env,
            timeout: opts.host.timeout,
            watch_route: true,
        },
    )?;
    let (status, note) = judge(ctx, &out, &ch, indep);
    let mut stage = Stage::new(status, note);
    stage.log = out.record.log.clone();
    stage.exit_code = out.record.exit_code;
    stage.stats = Some(out.record.stats.clone());
    st.report.stages.correctness_s1_grid = stage;
    if status == StageStatus::Fail {
        attribute(st);
    }
    st.head_grid = Some(out);
    Ok(())
}

/// Dynamic proof: an unusable grid must make the target fail. Returns whether it did; if not,
/// records why the grid is not used (and what that leaves of the axes).
fn prove_channel(st: &mut State<'_>, ctx: &Ctx<'_>, ch: &Channel) -> Result<bool, ValidateError> {
    let (env, args) = ch.hand_over_invalid();
    let invalid = st.run(
        ctx,
        &RunSpec {
            name: "head-invalid-grid".into(),
            phase: Phase::Head,
            invocation: ctx.invoke(args),
            extra_env: env,
            timeout: ctx.opts.host.timeout,
            watch_route: false,
        },
    )?;
    let consumed =
        !invalid.success && (!matches!(ch, Channel::Pytest(_)) || invalid.grid_replacements > 0);
    if !consumed {
        st.report.test_selection.grid_channel_reason = format!(
            "{}; but the target {} with `{}` on the {} channel: it does not consume the grid",
            st.search.reason,
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
        axes::evaluate(st, ctx, false)?;
        return Ok(false);
    }
    st.report.test_selection.grid_channel = Some(ch.as_str().into());
    st.report.test_selection.grid_channel_reason = format!(
        "{}; proven: the invalid grid {}",
        st.search.reason, invalid.record.status_text
    );
    Ok(true)
}

/// Whether the grid (with the proven axes) adds coverage beyond the target's own defaults;
/// records it with its reason and returns it.
fn independence(st: &mut State<'_>, ctx: &Ctx<'_>) -> &'static str {
    let opts = ctx.opts;
    let mut indep = grid::independence(&opts.grid, st.search.defaults.as_deref());
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
            st.search.defaults_reason
        )
    } else {
        st.search.defaults_reason.clone()
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
    indep
}

/// The stage's status and note for the head grid run.
fn judge(ctx: &Ctx<'_>, out: &RunOutcome, ch: &Channel, indep: &str) -> (StageStatus, String) {
    let s = &out.record.stats;
    if !out.success {
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
                ctx.opts.grid.len(),
                ch.as_str(),
                indep,
                s.executed
            ),
        )
    }
}

/// Attributes a failed head grid against the base grid.
fn attribute(st: &mut State<'_>) {
    let base_state = st.base_state;
    let base_grid = st.base_grid.as_ref().map(|b| b.success);
    attribute_failure(
        st,
        StageName::CorrectnessS1Grid,
        "the validator's grid",
        base_state,
        base_grid,
    );
    // A grid failure with no base grid to compare (the base lacks the channel) is still a
    // defect of head on shapes the validator chose.
    if base_grid.is_none()
        && base_state != BaseState::TargetNotPresent
        && let Some(f) = st.report.findings.last_mut()
        && f.stage == StageName::CorrectnessS1Grid
    {
        f.severity = Severity::Blocker;
        f.detail =
            "the validator's grid fails on head (the base target has no such channel to compare)"
                .into();
    }
}
