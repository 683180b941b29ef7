//! Tables and summary lines for people.

use comfy_table::{Table, presets::UTF8_FULL_CONDENSED};
use kg_contract::{Status, Trace};
use kg_exec::corpus::RunSummary;
use kg_exec::runner::{PairOutcome, PairState};
use serde::Serialize;

/// One row of `dataset validate`.
#[derive(Debug, Serialize)]
pub struct Finding {
    /// Problem name (or directory when it failed to load).
    pub problem: String,
    /// Number of workloads.
    pub workloads: usize,
    /// Whether the problem is usable.
    pub ok: bool,
    /// What was found.
    pub messages: Vec<String>,
}

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.3}")
    } else {
        format!("{v:.4}")
    }
}

/// A workload's wall time (the engine's `evaluation.wall_s`), `-` when it has none.
fn wall(w: Option<f64>) -> String {
    w.map_or_else(|| "-".into(), |s| format!("{s:.1}"))
}

fn short(uuid: &str) -> String {
    uuid.chars().take(13).collect()
}

/// The first line of a log that says something (for notes), at most 90 characters.
pub fn first_line(s: &str) -> String {
    let l = s
        .lines()
        .find(|l| !l.trim().is_empty() && !l.starts_with("---"))
        .unwrap_or("");
    let mut out: String = l.chars().take(90).collect();
    if l.chars().count() > 90 {
        out.push('…');
    }
    out
}

/// Per-workload table of an evaluation.
pub fn trace_table(traces: &[Trace]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "workload",
        "status",
        "wall s",
        "latency ms",
        "ref ms",
        "speedup",
        "method",
        "note",
    ]);
    for tr in traces {
        let Some(e) = &tr.evaluation else { continue };
        let (lat, rl, sp, method) = match &e.performance {
            Some(p) => (
                ms(p.latency_ms),
                ms(p.reference_latency_ms),
                format!("{:.2}x", p.speedup_factor),
                p.timing_method
                    .and_then(|m| serde_json::to_value(m).ok())
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let note = if e.status == Status::Passed {
            String::new()
        } else {
            first_line(&e.log)
        };
        t.add_row(vec![
            short(&tr.workload.uuid),
            e.status.to_string(),
            wall(e.wall_s),
            lat,
            rl,
            sp,
            method,
            note,
        ]);
    }
    t
}

/// `N workloads: P PASSED, ...; geomean speedup over passed: X`.
pub fn totals_line(traces: &[Trace]) -> String {
    let mut counts: Vec<(Status, usize)> = Vec::new();
    let mut logs = 0.0;
    let mut n = 0usize;
    for tr in traces {
        let Some(e) = &tr.evaluation else { continue };
        match counts.iter_mut().find(|(s, _)| *s == e.status) {
            Some((_, c)) => *c += 1,
            None => counts.push((e.status, 1)),
        }
        if let Some(p) = &e.performance
            && p.speedup_factor > 0.0
        {
            logs += p.speedup_factor.ln();
            n += 1;
        }
    }
    let parts: Vec<String> = counts.iter().map(|(s, c)| format!("{c} {s}")).collect();
    let mut line = format!("{} workload(s): {}", traces.len(), parts.join(", "));
    if n > 0 {
        line.push_str(&format!(
            "; geomean speedup over {n} passed: {:.3}x",
            (logs / n as f64).exp()
        ));
    }
    line
}

/// Per problem and solution table of a corpus run.
pub fn run_table(rows: &[PairOutcome]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED);
    t.set_header(vec![
        "problem",
        "solution",
        "workloads",
        "passed",
        "other",
        "wall s",
        "geomean speedup",
        "note",
    ]);
    for row in rows {
        let (traces, note): (Vec<Trace>, String) = match &row.state {
            PairState::Evaluated(t) => (t.clone(), String::new()),
            PairState::Kept(f) => (
                kg_contract::io::load_jsonl::<Trace>(f)
                    .map(|rows| rows.into_iter().map(|(_, t, _)| t).collect())
                    .unwrap_or_default(),
                "earlier run (kept)".into(),
            ),
            PairState::Refused(why) => {
                t.add_row(vec![
                    row.key.clone(),
                    row.solution.clone(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    format!("refused: {}", first_line(why)),
                ]);
                continue;
            }
            PairState::NotRun => (Vec::new(), "not run: its problem changed".into()),
        };
        let mut passed = 0;
        let mut other: Vec<String> = Vec::new();
        let mut logs = 0.0;
        let mut n = 0;
        let mut wall_s = 0.0;
        let mut walls = 0;
        for tr in &traces {
            let Some(e) = &tr.evaluation else { continue };
            if e.status == Status::Passed {
                passed += 1;
            } else {
                other.push(e.status.to_string());
            }
            if let Some(w) = e.wall_s {
                wall_s += w;
                walls += 1;
            }
            if let Some(p) = &e.performance
                && p.speedup_factor > 0.0
            {
                logs += p.speedup_factor.ln();
                n += 1;
            }
        }
        other.sort();
        other.dedup();
        t.add_row(vec![
            row.key.clone(),
            row.solution.clone(),
            traces.len().to_string(),
            passed.to_string(),
            other.join(","),
            if walls > 0 {
                format!("{wall_s:.1}")
            } else {
                "-".into()
            },
            if n > 0 {
                format!("{:.3}x", (logs / n as f64).exp())
            } else {
                "-".into()
            },
            note,
        ]);
    }
    t
}

/// Totals of a corpus run.
pub fn summary_line(s: &RunSummary) -> String {
    let parts: Vec<String> = s
        .totals
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    let mut line = format!(
        "totals: {}",
        if parts.is_empty() {
            "nothing evaluated".into()
        } else {
            parts.join(", ")
        }
    );
    if !s.errors.is_empty() {
        line.push_str(&format!(
            "; {} problem(s) failed to load or changed",
            s.errors.len()
        ));
    }
    let refused: usize = s.refused.values().map(|m| m.len()).sum();
    if refused > 0 {
        line.push_str(&format!(
            "; {refused} problem/solution pair(s) refused up front (not evaluated)"
        ));
    }
    line
}

/// The `dataset validate` table.
pub fn findings_table(findings: &[Finding]) -> Table {
    let mut t = Table::new();
    t.load_style(UTF8_FULL_CONDENSED);
    t.set_header(vec!["problem", "workloads", "result", "findings"]);
    for f in findings {
        t.add_row(vec![
            f.problem.clone(),
            f.workloads.to_string(),
            if f.ok { "ok".into() } else { "BAD".into() },
            f.messages.join("\n"),
        ]);
    }
    t
}

/// `run --junit`'s suites: every selected pair, as the summary counts it (traces evaluated now
/// or kept from an earlier run; a refused pair skipped; a pair not run, or whose kept file no
/// longer loads, an error).
pub fn junit_suites(rows: &[PairOutcome]) -> Vec<kg_report::junit::Suite> {
    use kg_report::junit::{suite_of_traces, suite_without_traces};
    rows.iter()
        .map(|row| match &row.state {
            PairState::Evaluated(t) => suite_of_traces(&row.key, &row.solution, t),
            PairState::Kept(f) => match kg_contract::io::load_jsonl::<Trace>(f) {
                Ok(rows) => {
                    let t: Vec<Trace> = rows.into_iter().map(|(_, t, _)| t).collect();
                    suite_of_traces(&row.key, &row.solution, &t)
                }
                Err(e) => suite_without_traces(
                    &row.key,
                    &row.solution,
                    &format!("the kept trace file does not load: {e}"),
                    false,
                ),
            },
            PairState::Refused(why) => suite_without_traces(&row.key, &row.solution, why, true),
            PairState::NotRun => suite_without_traces(
                &row.key,
                &row.solution,
                "not run: its problem changed before it was due",
                false,
            ),
        })
        .collect()
}
