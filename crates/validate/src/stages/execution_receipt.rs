//! Stage 8, `execution_receipt`: the validator-owned probe's receipts of the watched head runs
//! must show `--expected-route` called, and in the grid run, every grid cell executed through
//! it ([`crate::receipt`]).

use kg_contract::report::{ExecutionReceipt, Severity, Stage, StageName, StageStatus};

use super::{Ctx, State};
use crate::error::ValidateError;
use crate::receipt;
use crate::runner::RunOutcome;

/// Checks the receipts of `head-repo` and `head-grid`.
pub(crate) fn run(st: &mut State<'_>, ctx: &Ctx<'_>) -> Result<(), ValidateError> {
    let opts = ctx.opts;
    let Some(route) = &opts.expected_route else {
        st.report.stages.execution_receipt =
            Stage::skip("no --expected-route: nothing was watched, so no work can be credited");
        return Ok(());
    };
    if let Some(why) = &st.blocked {
        st.report.stages.execution_receipt = Stage::skip(why.clone());
        return Ok(());
    }
    let mut problems = Vec::new();
    let mut receipts: Vec<ExecutionReceipt> = Vec::new();
    let mut inferred: Option<Vec<String>> = None;
    let mut grid_checked = false;
    for (name, run) in [
        ("head-repo", st.head_repo.as_ref()),
        ("head-grid", st.head_grid.as_ref()),
    ] {
        let Some(run) = run else { continue };
        let Some(r) = &run.record.receipt else {
            problems.push(format!("{name}: no receipt was written"));
            continue;
        };
        let mut r = r.clone();
        if r.route != *route {
            problems.push(format!(
                "{name}: receipt route `{}` is not `{route}`",
                r.route
            ));
        }
        if r.kernel_symbols.is_empty() || r.calls == 0 {
            problems.push(format!("{name}: `{route}` was never called"));
        }
        // Only the grid run is held to the grid; every cell is checked, with or without
        // --shape-vars (the seed's PASS needs "every shape named by --grid").
        if name == "head-grid" && !opts.grid.is_empty() {
            grid_checked = true;
            check_grid(ctx, name, run, &mut r, &mut problems, &mut inferred);
        }
        receipts.push(r);
    }
    let mut stage = if receipts.is_empty() && problems.is_empty() {
        Stage::skip("no watched run happened")
    } else if problems.is_empty() {
        Stage::new(
            StageStatus::Pass,
            format!(
                "route `{route}` observed in {} run(s){}",
                receipts.len(),
                match &inferred {
                    _ if !grid_checked => String::new(),
                    Some(l) => format!(
                        ", every grid shape executed (no --shape-vars: read from route local(s) `{}`)",
                        l.join(",")
                    ),
                    None => format!(
                        ", every grid shape executed (`--shape-vars {}`)",
                        opts.shape_vars.join(",")
                    ),
                }
            ),
        )
    } else {
        Stage::new(StageStatus::Fail, problems.join("; "))
    };
    stage.inferred_shape_vars = inferred;
    if stage.status == StageStatus::Fail {
        st.finding(
            Severity::Note,
            StageName::ExecutionReceipt,
            format!("the receipt does not back the claimed work: {}", stage.note),
        );
    }
    stage.receipts = receipts;
    st.report.stages.execution_receipt = stage;
    Ok(())
}

/// Traces every grid cell in the grid run's receipt `r` (recorded on it); adds what is missing
/// to `problems`, and without `--shape-vars` the route locals that held every cell to
/// `inferred`.
fn check_grid(
    ctx: &Ctx<'_>,
    name: &str,
    run: &RunOutcome,
    r: &mut ExecutionReceipt,
    problems: &mut Vec<String>,
    inferred: &mut Option<Vec<String>>,
) {
    let opts = ctx.opts;
    let given = !opts.shape_vars.is_empty();
    let traces: Vec<_> = opts
        .grid
        .iter()
        .map(|c| receipt::trace_cell(c, &r.executed_shapes, &run.grid_locals, given))
        .collect();
    let truncated = if run.grid_locals_truncated {
        " (the probe stopped recording locals after 256 distinct calls)"
    } else {
        ""
    };
    if given {
        let missing: Vec<_> = traces.iter().filter(|t| !t.in_executed_shapes).collect();
        if !missing.is_empty() {
            let saw = if r.executed_shapes.is_empty() {
                "nothing".to_string()
            } else {
                r.executed_shapes
                    .iter()
                    .take(8)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            };
            problems.push(format!(
                "{name}: grid shape(s) not executed through the route: {}; the route saw `--shape-vars {}` = {saw}; {}{truncated}",
                missing.iter().map(|t| t.cell.as_str()).collect::<Vec<_>>().join("; "),
                opts.shape_vars.join(","),
                missing.iter().map(|t| receipt::held_note(t)).collect::<Vec<_>>().join("; "),
            ));
        }
    } else {
        let unheld: Vec<_> = traces.iter().filter(|t| t.held_by.is_empty()).collect();
        if !unheld.is_empty() {
            problems.push(format!(
                "{name}: no --shape-vars, so the grid cells were looked for in the route's locals, and no local held {} at any call{truncated}: the route did not run them, or holds them in a form the probe does not read; name the locals with --shape-vars",
                unheld.iter().map(|t| t.cell.as_str()).collect::<Vec<_>>().join("; ")
            ));
        } else {
            match receipt::consistent_locals(&traces) {
                Some(l) => *inferred = Some(l),
                None => problems.push(format!(
                    "{name}: no --shape-vars, and no one set of route locals holds every grid cell ({}); name the locals with --shape-vars",
                    traces.iter().map(receipt::held_note).collect::<Vec<_>>().join("; ")
                )),
            }
        }
    }
    r.grid_cells = traces;
}
