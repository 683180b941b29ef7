//! The verdict rule (the seed's `report.py`) and the report's validation against its JSON
//! Schema before it is written.

use kg_contract::report::{Severity, StageStatus, Stages, ValidationReport, Verdict};

/// Decides the verdict: any blocker → BLOCK; any should-fix → NEEDS_WORK; incomplete evidence
/// → INCONCLUSIVE; else PASS, which also needs `gpu_claim: pass` and a `runtime` architecture.
pub fn decide(report: &ValidationReport) -> (Verdict, String) {
    if let Some(f) = report
        .findings
        .iter()
        .find(|f| f.severity == Severity::Blocker)
    {
        return (
            Verdict::Block,
            format!("blocker from {}: {}", f.stage, f.detail),
        );
    }
    if let Some(f) = report
        .findings
        .iter()
        .find(|f| f.severity == Severity::ShouldFix)
    {
        return (
            Verdict::NeedsWork,
            format!("should-fix from {}: {}", f.stage, f.detail),
        );
    }
    let incomplete = incomplete_stages(&report.stages);
    let mut missing: Vec<String> = incomplete.iter().map(|(n, s)| format!("{n}={s}")).collect();
    if report
        .runtime_identity
        .as_ref()
        .and_then(|r| r.module_path.as_ref())
        .is_none()
    {
        missing.push("runtime_identity.module_path=null".into());
    }
    if !missing.is_empty() {
        return (
            Verdict::Inconclusive,
            format!("incomplete evidence: {}", missing.join(", ")),
        );
    }
    if report.stages.gpu_claim.status != StageStatus::Pass
        || !report.arch_coverage.values().any(|v| v == "runtime")
    {
        return (
            Verdict::Inconclusive,
            "no GPU architecture was covered at runtime".into(),
        );
    }
    (
        Verdict::Pass,
        "every required stage passed on a claimed GPU with no finding".into(),
    )
}

/// Required stages that are not `pass` (`info` for the index scan), with their status.
pub fn incomplete_stages(stages: &Stages) -> Vec<(&'static str, &'static str)> {
    stages
        .iter()
        .into_iter()
        .filter(|(name, _)| Stages::REQUIRED.contains(name))
        .filter(|(name, st)| {
            let want = if *name == "index_width_scan" {
                StageStatus::Info
            } else {
                StageStatus::Pass
            };
            st.status != want
        })
        .map(|(n, st)| (n, st.status.as_str()))
        .collect()
}

/// Validates a report against `docs/schemas/validation-report.schema.json` (the same schema
/// kg-contract exports) plus the seed's PASS conditions. Returns the problems found.
pub fn validate(report: &ValidationReport) -> Vec<String> {
    let mut problems = Vec::new();
    let value = match serde_json::to_value(report) {
        Ok(v) => v,
        Err(e) => return vec![format!("failed to serialise the report: {e}")],
    };
    let schema_text = kg_contract::schema::all()
        .into_iter()
        .find(|(n, _)| *n == "validation-report.schema.json")
        .map(|(_, s)| s);
    match schema_text.and_then(|s| serde_json::from_str::<serde_json::Value>(&s).ok()) {
        Some(schema) => match jsonschema::validator_for(&schema) {
            Ok(v) => problems.extend(
                v.iter_errors(&value)
                    .map(|e| format!("{} at `{}`", e, e.instance_path())),
            ),
            Err(e) => problems.push(format!("the report schema does not compile: {e}")),
        },
        None => problems.push("the report schema is missing from kg-contract".into()),
    }
    if report.verdict == Verdict::Pass {
        if report.arch_coverage.is_empty() {
            problems.push("PASS with empty arch_coverage".into());
        }
        for (name, st) in [
            (
                "correctness_repo_tests",
                &report.stages.correctness_repo_tests,
            ),
            ("correctness_s1_grid", &report.stages.correctness_s1_grid),
        ] {
            let ok = st.exit_code == Some(0)
                && st
                    .stats
                    .as_ref()
                    .is_some_and(|s| s.failures == 0 && s.errors == 0 && s.executed >= 1);
            if !ok {
                problems.push(format!(
                    "PASS needs {name} with exit 0, no failures and ≥ 1 executed"
                ));
            }
        }
    }
    problems
}
