//! Stage 3, `runtime_compat`: import the repository's package the target uses against the
//! installed runtime ([`crate::runtime`]). A mismatch is an environment fact, never the PR's.

use kg_contract::report::{Stage, StageStatus};

use super::{Ctx, State};
use crate::error::ValidateError;
use crate::runtime;

/// Chooses the module to probe, probes it, and records the runtime identity.
pub(crate) fn run(st: &mut State<'_>, ctx: &Ctx<'_>) -> Result<(), ValidateError> {
    let opts = ctx.opts;
    let target_file = ctx.target_file();
    let kind = st.report.repo.kind.clone();
    let imports = ctx
        .facts
        .as_ref()
        .map(|f| f.imports.clone())
        .unwrap_or_default();
    // A prebuilt FlyDSL runtime (PYLIB) cannot stand for runtime sources the patch changes.
    let prebuilt_stale = if kind == "flydsl" && ctx.runs.pylib.is_some() {
        runtime::flydsl_runtime_inputs(&st.wt.files().all)
    } else {
        Vec::new()
    };
    match runtime::choose_module(
        ctx.repo_root,
        &kind,
        opts.runtime_module.as_deref(),
        &imports,
        target_file,
    ) {
        None => {
            st.report.stages.runtime_compat = Stage::skip(match (&ctx.head_text, &ctx.facts) {
                (None, _) => format!(
                    "no repository package to probe: the target `{target_file}` does not exist on head, so it has no imports to choose from; pass --runtime-module"
                ),
                (Some(_), None) => format!(
                    "no repository package to probe: the target `{target_file}` does not parse as Python; pass --runtime-module"
                ),
                (Some(_), Some(_)) => {
                    "no repository package to probe: the target imports nothing the checkout provides; pass --runtime-module".to_string()
                }
            });
        }
        Some(_) if !prebuilt_stale.is_empty() => {
            st.report.stages.runtime_compat = Stage::skip(format!(
                "runtime mismatch (an environment fact, not attributed to the PR): the patch changes FlyDSL runtime sources ({}), and a prebuilt PYLIB cannot stand for them (no trusted build provenance); rebuild the runtime from this tree and validate without PYLIB",
                prebuilt_stale
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        Some((module, why)) => {
            let r = runtime::probe(&ctx.runs, &module, &kind, st.wt.base())?;
            st.report.runtime_identity = Some(r.identity);
            match r.verdict {
                Ok(note) => {
                    st.runtime_ok = true;
                    st.report.stages.runtime_compat = Stage::new(
                        StageStatus::Pass,
                        format!("{note} (module chosen by {why})"),
                    );
                }
                Err(why_not) => {
                    st.report.stages.runtime_compat = Stage::skip(format!(
                        "runtime mismatch (an environment fact, not attributed to the PR): {why_not}"
                    ));
                }
            }
        }
    }
    Ok(())
}
