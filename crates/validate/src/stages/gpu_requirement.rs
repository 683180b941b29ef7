//! `test_selection.gpu_requirement` (part of stage 2 when no GPU was claimed): does the target
//! need one? It runs once with no visible device; that run is also the head repo run that
//! `correctness_repo_tests` reads (the same command in the same state).

use kg_contract::report::GpuRequirement;

use super::{Ctx, State};
use crate::error::ValidateError;
use crate::runner::{Phase, RunSpec};

/// With no claim and nothing blocking, runs the target without a device and records whether
/// it needs one.
pub(crate) fn run(st: &mut State<'_>, ctx: &Ctx<'_>) -> Result<(), ValidateError> {
    if st.claim.is_some() || st.blocked.is_some() {
        return Ok(());
    }
    let out = st.run(
        ctx,
        &RunSpec {
            name: "head-repo".into(),
            phase: Phase::Head,
            invocation: ctx.invoke(vec![]),
            extra_env: vec![],
            timeout: ctx.opts.host.timeout,
            watch_route: true,
        },
    )?;
    let ok = out.success && out.record.stats.executed >= 1;
    let cause = st.cause(ctx, &out);
    match &cause {
        _ if ok => st.report.test_selection.gpu_requirement = GpuRequirement::NotRequired,
        // A package the environment lacks says nothing about the device: not evaluated.
        Some(c) if c.is_environment() => {
            st.report.test_selection.gpu_requirement = GpuRequirement::NotEvaluated;
            st.blocked = Some(format!(
                "{c} (interpreter `{}`); with no GPU claimed, whether the target needs one was not evaluated",
                ctx.python.display()
            ));
        }
        _ => {
            st.report.test_selection.gpu_requirement = GpuRequirement::Required;
            st.blocked = Some(format!(
                "no GPU claimed and the target did not pass with no visible device ({}, {} executed{}): gpu_requirement is `required`",
                out.record.status_text,
                out.record.stats.executed,
                cause.as_ref().map(|c| format!("; {c}")).unwrap_or_default()
            ));
        }
    }
    st.head_repo = Some(out);
    Ok(())
}
