//! The verdict rule (the seed's `report.py`) and the report's validation against its JSON
//! Schema before it is written.

use kg_contract::report::{Severity, StageName, StageStatus, Stages, ValidationReport, Verdict};

/// What settled a verdict: the first stage, in pipeline order, that decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecidedBy {
    /// A blocker (BLOCK) or should-fix (NEEDS_WORK) finding.
    Finding {
        /// The stage that produced it.
        stage: StageName,
        /// Its severity.
        severity: Severity,
        /// Its detail.
        detail: String,
    },
    /// A required stage that is not `pass` (`info` for the index scan): INCONCLUSIVE.
    Stage {
        /// The stage.
        stage: StageName,
        /// Its status.
        status: StageStatus,
        /// Its note.
        note: String,
        /// The other incomplete required stages, in order.
        also: Vec<(StageName, StageStatus)>,
    },
    /// Every stage passed but no claimed architecture was covered at runtime.
    ArchCoverage {
        /// `arch_coverage_basis`.
        basis: String,
    },
    /// The worktree could not be verified as restored, so the run cannot be PASS.
    NotRestored,
    /// The report failed its own schema or PASS-condition check.
    ReportCheck {
        /// The problems found.
        problems: Vec<String>,
    },
    /// PASS: every required stage passed on a claimed GPU with no finding.
    AllPassed,
}

/// A verdict, the report's `verdict_reason`, and what decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// The verdict.
    pub verdict: Verdict,
    /// `verdict_reason`.
    pub reason: String,
    /// The first stage (or check) that decided it.
    pub decided_by: DecidedBy,
}

impl Decision {
    /// One line for people: `decided by STAGE (STATUS): NOTE`, or what passed.
    pub fn summary(&self) -> String {
        let one_line = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        match &self.decided_by {
            DecidedBy::Finding {
                stage,
                severity,
                detail,
            } => format!(
                "decided by {stage} ({}): {}",
                severity_str(*severity),
                one_line(detail)
            ),
            DecidedBy::Stage {
                stage,
                status,
                note,
                also,
            } => {
                let mut s = format!(
                    "decided by {stage} ({}): {}",
                    status.as_str(),
                    one_line(note)
                );
                if !also.is_empty() {
                    s.push_str(&format!(
                        "; also incomplete: {}",
                        also.iter()
                            .map(|(n, st)| format!("{n}={}", st.as_str()))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ));
                }
                s
            }
            DecidedBy::ArchCoverage { basis } => {
                format!("decided by arch_coverage: {}", one_line(basis))
            }
            DecidedBy::NotRestored => {
                "decided by the worktree restore: the worktree could not be verified as restored"
                    .into()
            }
            DecidedBy::ReportCheck { problems } => format!(
                "decided by the report check: {}",
                one_line(&problems.join("; "))
            ),
            DecidedBy::AllPassed => {
                "every required stage passed on a claimed GPU with no finding".into()
            }
        }
    }
}

fn severity_str(s: Severity) -> &'static str {
    match s {
        Severity::Blocker => "blocker",
        Severity::ShouldFix => "should-fix",
        Severity::Note => "note",
    }
}

/// Decides the verdict: any blocker → BLOCK; any should-fix → NEEDS_WORK; incomplete evidence
/// → INCONCLUSIVE; else PASS, which also needs `gpu_claim: pass` and a `runtime` architecture.
/// Where several findings or stages qualify, the earliest stage in pipeline order decides.
pub fn decide(report: &ValidationReport) -> Decision {
    for (severity, verdict, word) in [
        (Severity::Blocker, Verdict::Block, "blocker"),
        (Severity::ShouldFix, Verdict::NeedsWork, "should-fix"),
    ] {
        // `StageName` orders as the pipeline runs; `min_by_key` keeps the first of equals:
        // push order breaks ties within a stage.
        if let Some(f) = report
            .findings
            .iter()
            .filter(|f| f.severity == severity)
            .min_by_key(|f| f.stage)
        {
            return Decision {
                verdict,
                reason: format!("{word} from {}: {}", f.stage, f.detail),
                decided_by: DecidedBy::Finding {
                    stage: f.stage,
                    severity,
                    detail: f.detail.clone(),
                },
            };
        }
    }
    let incomplete = incomplete_stages(&report.stages);
    let mut missing: Vec<String> = incomplete.iter().map(|(n, s)| format!("{n}={s}")).collect();
    let no_module_path = report
        .runtime_identity
        .as_ref()
        .and_then(|r| r.module_path.as_ref())
        .is_none();
    if no_module_path {
        missing.push("runtime_identity.module_path=null".into());
    }
    if !missing.is_empty() {
        let first = incomplete
            .first()
            .map(|(n, _)| *n)
            // Only the identity is missing: it is runtime_compat's evidence.
            .unwrap_or(StageName::RuntimeCompat);
        let stage = report
            .stages
            .iter()
            .into_iter()
            .find(|(n, _)| *n == first)
            .map(|(_, st)| st);
        let also = incomplete
            .iter()
            .skip(1)
            .filter_map(|(n, _)| {
                report
                    .stages
                    .iter()
                    .into_iter()
                    .find(|(m, _)| m == n)
                    .map(|(m, st)| (m, st.status))
            })
            .collect();
        return Decision {
            verdict: Verdict::Inconclusive,
            reason: format!("incomplete evidence: {}", missing.join(", ")),
            decided_by: DecidedBy::Stage {
                stage: first,
                status: stage.map(|s| s.status).unwrap_or(StageStatus::Skip),
                note: match stage {
                    Some(s) if incomplete.is_empty() => {
                        format!("{} (but runtime_identity.module_path is null)", s.note)
                    }
                    Some(s) => s.note.clone(),
                    None => String::new(),
                },
                also,
            },
        };
    }
    if report.stages.gpu_claim.status != StageStatus::Pass
        || !report.arch_coverage.values().any(|v| v == "runtime")
    {
        return Decision {
            verdict: Verdict::Inconclusive,
            reason: "no GPU architecture was covered at runtime".into(),
            decided_by: DecidedBy::ArchCoverage {
                basis: report.arch_coverage_basis.clone(),
            },
        };
    }
    Decision {
        verdict: Verdict::Pass,
        reason: "every required stage passed on a claimed GPU with no finding".into(),
        decided_by: DecidedBy::AllPassed,
    }
}

/// Required stages that are not `pass` (`info` for the index scan), with their status.
pub fn incomplete_stages(stages: &Stages) -> Vec<(StageName, &'static str)> {
    stages
        .iter()
        .into_iter()
        .filter(|(name, _)| Stages::REQUIRED.contains(name))
        .filter(|(name, st)| {
            let want = if *name == StageName::IndexWidthScan {
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
                StageName::CorrectnessRepoTests,
                &report.stages.correctness_repo_tests,
            ),
            (
                StageName::CorrectnessS1Grid,
                &report.stages.correctness_s1_grid,
            ),
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
