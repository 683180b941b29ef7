//! Before any target runs (no stage of its own): whether one can. Without a passing
//! `runtime_compat`, a runner, or the target on head, every stage that runs targets skips
//! with the reason set here ([`State::blocked`]).

use super::{Ctx, State};
use crate::error::ValidateError;

/// Sets [`State::blocked`] when targets cannot run.
pub(crate) fn run(st: &mut State<'_>, ctx: &Ctx<'_>) -> Result<(), ValidateError> {
    let present_head = ctx.target_abs().is_file();
    if !st.runtime_ok {
        st.blocked =
            Some("runtime_compat did not pass; correctness is not attributed to the PR".into());
    } else if ctx.invocation(vec![]).is_none() {
        st.blocked = Some(format!(
            "no runner for the target: {}",
            st.report.test_selection.runner_reason
        ));
    } else if !present_head {
        st.blocked = Some(format!(
            "the target `{}` does not exist on head",
            ctx.target_file()
        ));
    }
    Ok(())
}
