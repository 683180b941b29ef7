//! Stage 1, `merge_sim`: the patch applied to the clean base worktree (libgit2), or why it was
//! not; a worktree that cannot be validated ends the run here ([`State::stopped`]).

use kg_contract::report::{Severity, Stage, StageName, StageStatus};

use super::{Input, State, restore_and_verify};
use crate::error::ValidateError;
use crate::runtime;

/// Records the repository, then applies the patch (or says why not).
pub(crate) fn run(st: &mut State<'_>, input: &Input<'_>) -> Result<(), ValidateError> {
    st.report.repo.base = Some(st.wt.base().to_string());
    st.report.repo.kind = runtime::repo_kind(input.repo_root).to_string();
    st.report.repo.patch_sha256 = st.wt.patch().map(kg_contract::io::sha256_hex);
    st.report.repo.patch_files = st.wt.files().all.clone();
    if let Some(d) = st.wt.dirty()? {
        st.report.stages.merge_sim = Stage::skip(format!(
            "the supplied worktree is not clean ({}); pass a clean base checkout",
            d.0.iter().take(10).cloned().collect::<Vec<_>>().join(", ")
        ));
        st.report.repo.restored = Some(true);
        st.stopped = true;
        return Ok(());
    }
    let outside = st.wt.outside_sparse_checkout();
    if !outside.is_empty() {
        st.report.stages.merge_sim = Stage::skip(format!(
            "the patch touches {} path(s) outside the sparse checkout ({}), which are not in the working directory to patch; widen it (`git sparse-checkout add DIR`) or validate in a full checkout",
            outside.len(),
            outside
                .iter()
                .take(10)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
        st.report.repo.restored = Some(true);
        st.stopped = true;
        return Ok(());
    }
    if st.wt.patch().is_some() {
        match st.wt.apply()? {
            Ok(()) => {
                st.report.stages.merge_sim = Stage::new(
                    StageStatus::Pass,
                    format!(
                        "patch ({} file(s)) applies cleanly on base {}",
                        st.wt.files().all.len(),
                        st.wt.base()
                    ),
                );
            }
            Err(msg) => {
                st.report.stages.merge_sim = Stage::new(
                    StageStatus::Fail,
                    format!("the patch does not apply on base {}: {msg}", st.wt.base()),
                );
                let detail = format!(
                    "merge conflict: the patch does not apply on base {}: {msg}",
                    st.wt.base()
                );
                st.finding(Severity::Blocker, StageName::MergeSim, detail);
                let restored = restore_and_verify(st.wt);
                st.report.repo.restored = Some(restored.is_ok());
                st.stopped = true;
            }
        }
    } else {
        st.report.stages.merge_sim = Stage::skip(
            "no --patch: a direct head checkout runs diagnostics but cannot prove mergeability or base attribution",
        );
    }
    Ok(())
}
