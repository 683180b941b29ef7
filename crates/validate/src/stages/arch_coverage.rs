//! `arch_coverage` (no stage of its own): only a passing `gpu_claim` credits an architecture,
//! and only as `runtime` when the head repo run passed with the route observed (or none named).

use kg_contract::report::StageStatus;

use super::{Ctx, State};
use crate::error::ValidateError;

/// Records the claimed architecture's coverage and what it rests on.
pub(crate) fn run(st: &mut State<'_>, _ctx: &Ctx<'_>) -> Result<(), ValidateError> {
    let Some(c) = &st.claim else {
        st.report.arch_coverage_basis = "no GPU claimed (degraded_mode NO_GPU): only a passing gpu_claim credits an architecture".into();
        return Ok(());
    };
    let arch = c
        .evidence()
        .arch
        .clone()
        .unwrap_or_else(|| c.evidence().name.clone());
    let repo_stage = &st.report.stages.correctness_repo_tests;
    let observed = repo_stage.stats.as_ref().and_then(|s| s.observed_work);
    let runtime = repo_stage.status == StageStatus::Pass && observed != Some(0);
    let executed = repo_stage.stats.as_ref().map(|s| s.executed).unwrap_or(0);
    let basis = match (runtime, observed) {
        (true, Some(n)) => format!(
            "gpu_claim pass on {arch}; head-repo passed with {executed} executed; observed_work {n} route call(s) in that run's own receipt"
        ),
        (true, None) => format!(
            "gpu_claim pass on {arch}; head-repo passed with {executed} executed; no route named, so no work was observed (observed_work null)"
        ),
        (false, Some(0)) => format!(
            "gpu_claim pass on {arch}, but the watched route was called 0 times: nothing reached the device"
        ),
        (false, _) => format!(
            "gpu_claim pass on {arch}, but correctness_repo_tests is {}",
            repo_stage.status.as_str()
        ),
    };
    st.report
        .arch_coverage
        .insert(arch, if runtime { "runtime" } else { "not-covered" }.into());
    st.report.arch_coverage_basis = basis;
    Ok(())
}
