//! Stage 5, `baseline_control`: the patch reversed in the same worktree, the base verified
//! clean, the target (and, where base has the same channel, the grid) run on base, and the
//! patch re-applied. Failing to get back to head aborts the head runs.

use kg_contract::report::{BaseState, Stage, StageStatus};
use kg_inject::PySource;

use super::{Ctx, State, conftests, grid_channel};
use crate::error::ValidateError;
use crate::grid::Channel;
use crate::runner::{Phase, RunSpec};

/// Runs base and records what it found ([`State::base_state`], the base runs).
pub(crate) fn run(st: &mut State<'_>, ctx: &Ctx<'_>) -> Result<(), ValidateError> {
    if let Some(why) = &st.blocked {
        st.report.stages.baseline_control = Stage::skip(why.clone());
        return Ok(());
    }
    if st.wt.patch().is_none() {
        st.report.stages.baseline_control =
            Stage::skip("no --patch: there is no base to compare with");
        return Ok(());
    }
    st.wt.restore()?;
    if let Err(why) = st.wt.verify()? {
        st.report.stages.baseline_control = Stage::skip(format!(
            "reversing the patch did not leave a clean base: {why}"
        ));
        abort_head_runs(st);
        return Ok(());
    }
    let notes = base_runs(st, ctx)?;
    match st.wt.apply()? {
        Ok(()) => {
            let mut stage = Stage::new(
                StageStatus::Pass,
                format!(
                    "patch reversed (new files removed), base verified clean, {}; patch re-applied",
                    notes.join("; ")
                ),
            );
            stage.base_state = Some(st.base_state);
            if let Some(b) = &st.base_repo {
                stage.log = b.record.log.clone();
                stage.exit_code = b.record.exit_code;
                stage.stats = Some(b.record.stats.clone());
            }
            st.report.stages.baseline_control = stage;
        }
        Err(msg) => {
            st.report.stages.baseline_control =
                Stage::skip(format!("re-applying the patch failed: {msg}"));
            abort_head_runs(st);
        }
    }
    Ok(())
}

/// Head runs would run in a worktree that is not head: none do.
fn abort_head_runs(st: &mut State<'_>) {
    st.blocked = Some("baseline control failed; head runs aborted".into());
}

/// The runs on base, with the patch reversed; returns a note per run for the stage.
fn base_runs(st: &mut State<'_>, ctx: &Ctx<'_>) -> Result<Vec<String>, ValidateError> {
    let mut notes = Vec::new();
    if !ctx.target_abs().is_file() {
        st.base_state = BaseState::TargetNotPresent;
        notes.push(format!(
            "`{}` does not exist on base (added by the PR)",
            ctx.target_file()
        ));
        return Ok(notes);
    }
    let out = st.run(
        ctx,
        &RunSpec {
            name: "base-repo".into(),
            phase: Phase::Base,
            invocation: ctx.invoke(vec![]),
            extra_env: vec![],
            timeout: ctx.opts.host.timeout,
            watch_route: false,
        },
    )?;
    st.base_state = if out.record.stats.executed == 0 && out.success {
        BaseState::AllSkipped
    } else {
        BaseState::Ran
    };
    let cause = st.cause(ctx, &out);
    notes.push(format!(
        "base-repo {} ({} executed{})",
        out.record.status_text,
        out.record.stats.executed,
        cause.map(|c| format!("; {c}")).unwrap_or_default()
    ));
    st.base_repo = Some(out);
    // The base grid, only where the base file has the same channel.
    if let Some(ch) = st.search.channel.clone()
        && !ctx.opts.grid.is_empty()
    {
        notes.push(base_grid(st, ctx, &ch)?);
    }
    Ok(notes)
}

/// The grid on base through `ch`, when the base target has that channel too.
fn base_grid(st: &mut State<'_>, ctx: &Ctx<'_>, ch: &Channel) -> Result<String, ValidateError> {
    let target_abs = ctx.target_abs();
    let base_sources: Vec<PySource> = std::fs::read_to_string(&target_abs)
        .ok()
        .and_then(|t| PySource::parse(&target_abs, t).ok())
        .into_iter()
        .chain(conftests(ctx.repo_root, ctx.target_file()))
        .collect();
    let base_search = grid_channel::find(ctx, &base_sources);
    if base_search.channel.as_ref().map(Channel::as_str) != Some(ch.as_str()) {
        return Ok("base target lacks the grid channel: no base grid".into());
    }
    let (env, args) = ch.hand_over(&ctx.opts.grid);
    let out = st.run(
        ctx,
        &RunSpec {
            name: "base-grid".into(),
            phase: Phase::Base,
            invocation: ctx.invoke(args),
            extra_env: env,
            timeout: ctx.opts.host.timeout,
            watch_route: false,
        },
    )?;
    let note = format!("base-grid {}", out.record.status_text);
    st.base_grid = Some(out);
    Ok(note)
}
