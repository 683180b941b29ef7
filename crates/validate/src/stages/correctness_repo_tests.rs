//! Stage 6, `correctness_repo_tests`: the repository's own target on head (reusing the
//! no-device run when there was one), its failures attributed against the base run.

use kg_contract::report::{Severity, Stage, StageName, StageStatus};

use super::{Ctx, State, attribute_failure};
use crate::error::ValidateError;
use crate::runner::{Phase, RunOutcome, RunSpec};

/// Runs the target on head (unless it already ran) and judges the run.
pub(crate) fn run(st: &mut State<'_>, ctx: &Ctx<'_>) -> Result<(), ValidateError> {
    if let Some(why) = &st.blocked {
        st.report.stages.correctness_repo_tests = Stage::skip(why.clone());
        return Ok(());
    }
    let out = match st.head_repo.take() {
        Some(o) => o,
        None => st.run(
            ctx,
            &RunSpec {
                name: "head-repo".into(),
                phase: Phase::Head,
                invocation: ctx.invoke(vec![]),
                extra_env: vec![],
                timeout: ctx.opts.host.timeout,
                watch_route: true,
            },
        )?,
    };
    let cause = st.cause(ctx, &out);
    let (status, note) = judge(st, ctx, &out, cause.as_ref());
    let mut stage = Stage::new(status, note);
    stage.log = out.record.log.clone();
    stage.exit_code = out.record.exit_code;
    stage.stats = Some(out.record.stats.clone());
    st.report.stages.correctness_repo_tests = stage;
    if let Some(c) = cause.as_ref().filter(|c| c.is_environment()) {
        if st.base_repo.as_ref().is_some_and(|b| b.success) {
            st.finding(
                Severity::Note,
                StageName::CorrectnessRepoTests,
                format!(
                    "base passed without it; on head, {c}. If the PR means to add this dependency, the environment needs it before the change can be validated"
                ),
            );
        }
        st.blocked = Some(format!(
            "correctness_repo_tests could not run the target: {c}"
        ));
    }
    if status == StageStatus::Fail {
        let (base_state, base_success) = (st.base_state, st.base_repo.as_ref().map(|b| b.success));
        attribute_failure(
            st,
            StageName::CorrectnessRepoTests,
            "the repository target",
            base_state,
            base_success,
        );
    }
    st.head_repo = Some(out);
    Ok(())
}

/// The stage's status and note for the head run.
fn judge(
    st: &State<'_>,
    ctx: &Ctx<'_>,
    out: &RunOutcome,
    cause: Option<&kg_contract::report::RunCause>,
) -> (StageStatus, String) {
    let s = &out.record.stats;
    if let Some(c) = cause.filter(|c| c.is_environment()) {
        (
            StageStatus::Skip,
            format!(
                "{c} (interpreter `{}`); head {}: an environment fact, not attributed to the PR",
                ctx.python.display(),
                out.record.status_text
            ),
        )
    } else if !out.success {
        (
            StageStatus::Fail,
            format!(
                "head {} ({} failures, {} errors, {} executed){}",
                out.record.status_text,
                s.failures,
                s.errors,
                s.executed,
                cause.map(|c| format!(": {c}")).unwrap_or_default()
            ),
        )
    } else if s.executed > 0 {
        (
            StageStatus::Pass,
            format!(
                "head passed: {} executed, {} skipped",
                s.executed, s.skipped
            ),
        )
    } else {
        (
            StageStatus::Skip,
            format!(
                "head exited 0 but executed no test{}",
                st.report
                    .test_selection
                    .runner_risk
                    .as_ref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ),
        )
    }
}
