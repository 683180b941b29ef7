//! `--axis` requests, part of stage 7 (`correctness_s1_grid`): each axis's CLI flag must be
//! declared by the script target and must reject an invalid value before its values are
//! handed over; what became of each is in `test_selection.axes`.

use kg_contract::report::{Severity, StageName};
use kg_inject::PySource;

use super::{Ctx, State};
use crate::error::ValidateError;
use crate::grid;
use crate::runner::{Phase, RunSpec};
use crate::shapes::normalize_cell;

/// Evaluates `--axis` requests; returns argv for proven axes.
pub(crate) fn evaluate(
    st: &mut State<'_>,
    ctx: &Ctx<'_>,
    channel_proven: bool,
) -> Result<Vec<String>, ValidateError> {
    let opts = ctx.opts;
    if opts.axes.is_empty() {
        return Ok(vec![]);
    }
    if st.report.test_selection.runner != "script" {
        for a in &mut st.report.test_selection.axes {
            a.hook_proof = "unusable".into();
        }
        st.report.test_selection.axis_state = "unusable".into();
        return Ok(vec![]);
    }
    if !channel_proven {
        st.report.test_selection.axis_state = "not-evaluated".into();
        return Ok(vec![]);
    }
    let target = opts.target_file();
    let src = std::fs::read_to_string(ctx.runs.repo.join(target))
        .ok()
        .and_then(|t| PySource::parse(ctx.runs.repo.join(target), t).ok());
    let decls = src.as_ref().map(|s| s.arg_defaults()).unwrap_or_default();
    let mut args = Vec::new();
    let mut states = Vec::new();
    for (i, axis) in opts.axes.iter().enumerate() {
        let decl = decls.iter().find(|d| d.flags.contains(&axis.flag));
        let Some(decl) = decl else {
            st.report.test_selection.axes[i].hook_proof = "hook-not-found".into();
            states.push("hook-not-found");
            continue;
        };
        let defaults = decl.default.as_ref().and_then(crate::shapes::default_cells);
        st.report.test_selection.axes[i].declared_default = defaults.clone();
        let out = st.run(
            ctx,
            &RunSpec {
                name: format!("head-invalid-axis-{}", axis.name),
                phase: Phase::Head,
                invocation: ctx.invoke(vec![axis.flag.clone(), grid::INVALID_AXIS.to_string()]),
                extra_env: vec![],
                timeout: opts.host.timeout,
                watch_route: false,
            },
        )?;
        if out.success {
            st.report.test_selection.axes[i].hook_proof = "hook-not-consumed".into();
            states.push("hook-not-consumed");
            st.finding(
                Severity::Note,
                StageName::CorrectnessS1Grid,
                format!(
                    "axis `{}` dropped: `{}` accepted `{}`",
                    axis.name,
                    axis.flag,
                    grid::INVALID_AXIS
                ),
            );
            continue;
        }
        st.report.test_selection.axes[i].hook_proof = "proven".into();
        st.report.test_selection.axes[i].independence = match &defaults {
            None => "unknown",
            Some(d) => {
                if axis.values.iter().any(|v| !d.contains(&normalize_cell(v))) {
                    "adds-coverage"
                } else {
                    "duplicates-target-defaults"
                }
            }
        }
        .into();
        states.push("proven");
        args.push(axis.flag.clone());
        args.extend(axis.values.iter().cloned());
    }
    st.report.test_selection.axis_state = if states.contains(&"hook-not-found") {
        "hook-not-found"
    } else if states.contains(&"hook-not-consumed") {
        "hook-not-consumed"
    } else {
        "proven"
    }
    .into();
    Ok(args)
}
