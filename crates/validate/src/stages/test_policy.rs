//! Stage 4, `test_policy`: head vs base tolerances and commented-out shape rows in the test
//! files the patch changes ([`crate::policy`]). Static, before any test runs.

use kg_contract::report::{Stage, StageStatus};

use super::{Ctx, State};
use crate::error::ValidateError;
use crate::policy;

/// Compares the changed test files head vs base and records their findings.
pub(crate) fn run(st: &mut State<'_>, ctx: &Ctx<'_>) -> Result<(), ValidateError> {
    let opts = ctx.opts;
    let changed: Vec<(String, Option<String>, Option<String>)> = st
        .wt
        .files()
        .all
        .iter()
        .map(|p| {
            (
                p.clone(),
                st.wt.base_text(p),
                std::fs::read_to_string(ctx.repo_root.join(p)).ok(),
            )
        })
        .collect();
    if st.wt.patch().is_none() {
        st.report.stages.test_policy = Stage::skip("no --patch: nothing to compare head against");
        return Ok(());
    }
    let pol = policy::check(&changed, &opts.tol_table);
    let status = if !pol.unparsed.is_empty() {
        StageStatus::Skip
    } else if pol.findings.is_empty() {
        StageStatus::Pass
    } else {
        StageStatus::Fail
    };
    let note = if !pol.unparsed.is_empty() {
        format!("test files do not parse: {}", pol.unparsed.join("; "))
    } else if pol.examined.is_empty() {
        "no test file changed; nothing to loosen".into()
    } else {
        format!(
            "examined {} test file(s) head vs base: {} tolerance literal(s), {} widened, {} shape row(s) newly commented out",
            pol.examined.len(),
            pol.tolerances.len(),
            pol.tolerances.iter().filter(|t| t.widened).count(),
            pol.new_commented_rows.len()
        )
    };
    let mut stage = Stage::new(status, note);
    stage.tolerances = pol.tolerances;
    stage.new_commented_rows = pol.new_commented_rows;
    stage.existing_commented_rows = pol.existing_commented_rows;
    // The target's own disabled rows are context even when the PR leaves the file alone.
    let target = opts.target_file();
    if !st.wt.files().all.iter().any(|p| p == target)
        && let Ok(text) = std::fs::read_to_string(ctx.repo_root.join(target))
    {
        stage
            .existing_commented_rows
            .extend(policy::context_rows(target, &text));
    }
    stage.tol_table = opts.tol_table.iter().cloned().collect();
    st.report.stages.test_policy = stage;
    st.report.findings.extend(pol.findings);
    Ok(())
}
