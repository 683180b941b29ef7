//! Stage 10, `perf` (not required for PASS): the repository's benchmark timed base and head,
//! interleaved, in the same worktree with the patch reversed and re-applied; per-column
//! median ratios with bootstrap intervals ([`crate::perf`]).

use kg_contract::report::{PerfSummary, Severity, Stage, StageName, StageStatus};

use super::{Ctx, State};
use crate::error::ValidateError;
use crate::perf::{self, Compared};
use crate::runner::{Invocation, Phase, RunSpec};

/// Base and head benchmark output, scraped per repetition, and the order the runs happened in.
struct Timings {
    base_runs: Vec<perf::Cells>,
    head_runs: Vec<perf::Cells>,
    order: Vec<String>,
}

/// Times base against head and classifies the comparison.
pub(crate) fn run(st: &mut State<'_>, ctx: &Ctx<'_>) -> Result<(), ValidateError> {
    let opts = ctx.opts;
    if opts.no_perf {
        st.report.stages.perf = Stage::skip("--no-perf");
        return Ok(());
    }
    if st.wt.patch().is_none() {
        st.report.stages.perf = Stage::skip("no --patch: no base to time against");
        return Ok(());
    }
    if let Some(why) = &st.blocked {
        st.report.stages.perf = Stage::skip(why.clone());
        return Ok(());
    }
    let args: Vec<String> = if let Some(a) = &opts.perf_args {
        a.clone()
    } else {
        let text = ctx.head_text.as_deref().unwrap_or("");
        let target_file = ctx.target_file();
        if text.contains("--scenario") && text.contains("bench") {
            vec![target_file.to_string(), "--scenario".into(), "bench".into()]
        } else if text.contains("perftest") || text.contains("@benchmark") {
            vec![target_file.to_string()]
        } else {
            st.report.stages.perf = Stage::skip(
                "no benchmark harness detected in the target; pass --perf-args to name one",
            );
            return Ok(());
        }
    };
    let Some(timings) = time(st, ctx, &args)? else {
        return Ok(());
    };
    compare(st, ctx, timings);
    Ok(())
}

/// Re-applies the patch after a base run; a conflict now is a git failure, not a finding.
fn reapply(st: &mut State<'_>) -> Result<(), ValidateError> {
    st.wt.apply()?.map_err(|m| ValidateError::Git {
        action: "re-apply the patch".into(),
        repo: st.wt.root().to_path_buf(),
        message: m,
    })
}

/// `PERF_REPEAT` rounds of base then head. `None` when the stage ended early (recorded as a
/// skip); the patch is applied again either way.
fn time(
    st: &mut State<'_>,
    ctx: &Ctx<'_>,
    args: &[String],
) -> Result<Option<Timings>, ValidateError> {
    let opts = ctx.opts;
    let mut t = Timings {
        base_runs: Vec::new(),
        head_runs: Vec::new(),
        order: Vec::new(),
    };
    for i in 1..=opts.host.perf_repeat {
        for phase in [Phase::Base, Phase::Head] {
            if phase == Phase::Base {
                st.wt.restore()?;
                if let Err(why) = st.wt.verify()? {
                    st.report.stages.perf = Stage::skip(format!(
                        "reversing the patch for a base timing left the worktree dirty: {why}"
                    ));
                    reapply(st)?;
                    return Ok(None);
                }
            } else if let Err(m) = st.wt.apply()? {
                st.report.stages.perf = Stage::skip(format!(
                    "re-applying the patch for a head timing failed: {m}"
                ));
                return Ok(None);
            }
            let out = st.run(
                ctx,
                &RunSpec {
                    name: format!("perf-{}-{i}", phase.as_str()),
                    phase,
                    invocation: Invocation::Plain {
                        args: args.to_vec(),
                    },
                    extra_env: vec![],
                    timeout: opts.host.perf_timeout,
                    watch_route: false,
                },
            )?;
            t.order.push(phase.as_str().to_string());
            if !out.success {
                st.report.stages.perf = Stage::skip(format!(
                    "perf run {} {}: no comparison",
                    out.record.name, out.record.status_text
                ));
                if phase == Phase::Base {
                    reapply(st)?;
                }
                return Ok(None);
            }
            let cells = perf::scrape(&out.output);
            if phase == Phase::Base {
                t.base_runs.push(cells)
            } else {
                t.head_runs.push(cells)
            }
        }
    }
    Ok(Some(t))
}

/// Compares the best base and head cells per column and records the stage.
fn compare(st: &mut State<'_>, ctx: &Ctx<'_>, t: Timings) {
    let opts = ctx.opts;
    let on_gpu = st.claim.is_some();
    let base = perf::best(&t.base_runs);
    let head = perf::best(&t.head_runs);
    let compared = perf::compare(&base, &head, opts.host.perf_min_rows);
    let thr = opts.host.perf_threshold;
    let eligible: Vec<&Compared> = compared.iter().filter(|c| c.column.eligible).collect();
    let control = opts.perf_control_column.as_ref().map(|name| {
        (
            name.clone(),
            compared
                .iter()
                .find(|c| c.column.column == *name)
                .map(|c| c.column.median_ratio),
        )
    });
    let mut summary = PerfSummary {
        baseline_method: "patch-reversed-same-worktree".into(),
        order: t.order,
        repeat: opts.host.perf_repeat,
        threshold: thr,
        min_rows: opts.host.perf_min_rows,
        device: if on_gpu { "gpu".into() } else { "cpu".into() },
        columns: compared.iter().map(|c| c.column.clone()).collect(),
        median_ratio: eligible
            .iter()
            .map(|c| c.column.median_ratio)
            .reduce(f64::min),
        classification: "insufficient-data".into(),
        regressed_rows: Vec::new(),
        control_column: control.as_ref().map(|c| c.0.clone()),
        control_ratio: control.as_ref().and_then(|c| c.1),
    };
    let (status, note) = if eligible.is_empty() {
        (
            StageStatus::Skip,
            format!(
                "no column had ≥ {} matched rows (base {} cells, head {} cells)",
                opts.host.perf_min_rows,
                base.len(),
                head.len()
            ),
        )
    } else if let Some((name, ratio)) = &control
        && ratio.is_none_or(|r| (r - 1.0).abs() > opts.host.perf_control_tol)
    {
        (
            StageStatus::Skip,
            format!(
                "control column `{name}` moved ({}) beyond PERF_CONTROL_TOL {}: timings are not comparable",
                ratio
                    .map(|r| format!("{r:.3}"))
                    .unwrap_or_else(|| "absent".into()),
                opts.host.perf_control_tol
            ),
        )
    } else {
        classify(&eligible, thr, on_gpu, &mut summary)
    };
    if status == StageStatus::Fail {
        let rows: Vec<String> = summary
            .regressed_rows
            .iter()
            .map(|r| {
                format!(
                    "{} {}: base {} head {} (×{:.3})",
                    r.key, r.column, r.base, r.head, r.ratio
                )
            })
            .collect();
        st.finding(
            Severity::ShouldFix,
            StageName::Perf,
            format!("{note}; worst rows: {}", rows.join("; ")),
        );
    }
    let mut stage = Stage::new(status, note);
    stage.perf = Some(summary);
    st.report.stages.perf = stage;
}

/// Regression (the whole interval below the threshold), ambiguous (the median below, the
/// interval across) or no regression, from the eligible columns; fills in `summary`.
fn classify(
    eligible: &[&Compared],
    thr: f64,
    on_gpu: bool,
    summary: &mut PerfSummary,
) -> (StageStatus, String) {
    let timing_label = if on_gpu {
        ""
    } else {
        " (CPU wall-clock timings, not GPU evidence)"
    };
    let worst = eligible
        .iter()
        .min_by(|a, b| a.column.median_ratio.total_cmp(&b.column.median_ratio))
        .copied();
    let regression = eligible
        .iter()
        .filter(|c| c.column.ci_high < thr)
        .min_by(|a, b| a.column.median_ratio.total_cmp(&b.column.median_ratio));
    match (regression, worst) {
        (Some(c), _) => {
            summary.classification = "regression".into();
            summary.regressed_rows = c
                .rows
                .iter()
                .filter(|r| r.ratio < thr)
                .take(5)
                .cloned()
                .collect();
            (
                StageStatus::Fail,
                format!(
                    "column `{}`: median head/base ratio {:.3}, 95% CI [{:.3}, {:.3}] entirely below {thr}{timing_label}",
                    c.column.column, c.column.median_ratio, c.column.ci_low, c.column.ci_high
                ),
            )
        }
        (None, Some(w)) if w.column.median_ratio < thr => {
            summary.classification = "ambiguous".into();
            (
                StageStatus::Info,
                format!(
                    "ambiguous: column `{}` median ratio {:.3} is below {thr} but its 95% CI [{:.3}, {:.3}] crosses it; no regression claimed{timing_label}",
                    w.column.column, w.column.median_ratio, w.column.ci_low, w.column.ci_high
                ),
            )
        }
        (None, w) => {
            summary.classification = "no-regression".into();
            (
                StageStatus::Pass,
                format!(
                    "min median ratio {:.3} over {} eligible column(s) ≥ {thr}{timing_label}",
                    w.map(|c| c.column.median_ratio).unwrap_or(f64::NAN),
                    eligible.len()
                ),
            )
        }
    }
}
