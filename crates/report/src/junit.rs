//! JUnit XML for CI systems (GitLab, Jenkins, GitHub test reporters): a `testsuite` per
//! evaluated problem/solution pair with a `testcase` per workload ([`suite_of_traces`]), or a
//! `testsuite` for a kg-validate-pr report with a `testcase` per stage and one for the verdict
//! ([`suite_of_validation`]). The elements and attributes are the common subset those tools
//! read, as `docs/schemas/junit.xsd` describes them.
//!
//! A candidate's verdict other than PASSED is a `failure` (its `type` the status); a problem
//! whose reference is invalid, or a pair that could not run, is an `error`; a pair refused
//! before it ran is `skipped`. The first lines of the trace's log go into the element's text.

use std::fmt::Write;

use kg_contract::{Status, Trace, ValidationReport, Verdict};

use crate::model::first_line;

/// How many lines of a log a failure carries.
const LOG_LINES: usize = 30;

/// What became of one test case.
#[derive(Debug, Clone, PartialEq)]
pub enum CaseOutcome {
    /// It passed.
    Passed,
    /// The code under test is wrong (a status other than PASSED, a failed stage).
    Failure {
        /// A short, machine-readable kind (`INCORRECT_NUMERICAL`, `stage_fail`).
        kind: String,
        /// One line.
        message: String,
        /// More, e.g. the first lines of the log.
        text: String,
    },
    /// The test could not judge the code (an invalid reference, a pair that did not run).
    Error {
        /// A short, machine-readable kind.
        kind: String,
        /// One line.
        message: String,
        /// More.
        text: String,
    },
    /// Not run, and why.
    Skipped(String),
}

/// One `testcase`.
#[derive(Debug, Clone, PartialEq)]
pub struct Case {
    /// Its name (a workload's uuid and axes, a stage name).
    pub name: String,
    /// Its class (`kernelgate.<problem>.<solution>`, `kg-validate-pr.<label>`).
    pub classname: String,
    /// Seconds it took.
    pub time_s: f64,
    /// What became of it.
    pub outcome: CaseOutcome,
    /// What it measured, for people (`system-out`).
    pub out: Option<String>,
}

/// One `testsuite`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Suite {
    /// Its name (`<problem> / <solution>`).
    pub name: String,
    /// RFC 3339 time of its first case, where known.
    pub timestamp: Option<String>,
    /// `property` elements.
    pub properties: Vec<(String, String)>,
    /// Its cases.
    pub cases: Vec<Case>,
}

impl Suite {
    fn count(&self, f: impl Fn(&CaseOutcome) -> bool) -> usize {
        self.cases.iter().filter(|c| f(&c.outcome)).count()
    }
    fn time_s(&self) -> f64 {
        self.cases.iter().map(|c| c.time_s).sum()
    }
}

fn is_failure(o: &CaseOutcome) -> bool {
    matches!(o, CaseOutcome::Failure { .. })
}
fn is_error(o: &CaseOutcome) -> bool {
    matches!(o, CaseOutcome::Error { .. })
}
fn is_skipped(o: &CaseOutcome) -> bool {
    matches!(o, CaseOutcome::Skipped(_))
}

/// The class name of a pair's cases: dots between the parts, none inside a part's path.
fn classname(key: &str, solution: &str) -> String {
    format!(
        "kernelgate.{}.{}",
        key.replace(['/', '.'], "_"),
        solution.replace('.', "_")
    )
}

/// The first `n` lines of `log`.
fn head(log: &str, n: usize) -> String {
    log.lines().take(n).collect::<Vec<_>>().join("\n")
}

/// A pair's suite: a case per trace, in order.
pub fn suite_of_traces(key: &str, solution: &str, traces: &[Trace]) -> Suite {
    let class = classname(key, solution);
    let mut suite = Suite {
        name: format!("{key} / {solution}"),
        ..Default::default()
    };
    for t in traces {
        let axes: Vec<String> = t
            .workload
            .axes
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let name = if axes.is_empty() {
            t.workload.uuid.clone()
        } else {
            format!("{} ({})", t.workload.uuid, axes.join(", "))
        };
        let Some(e) = &t.evaluation else {
            suite.cases.push(Case {
                name,
                classname: class.clone(),
                time_s: 0.0,
                outcome: CaseOutcome::Error {
                    kind: "NOT_EVALUATED".into(),
                    message: "the trace has no evaluation".into(),
                    text: String::new(),
                },
                out: None,
            });
            continue;
        };
        if suite.timestamp.is_none() && !e.timestamp.is_empty() {
            suite.timestamp = Some(e.timestamp.clone());
        }
        if suite.properties.is_empty() {
            let env = &e.environment;
            suite
                .properties
                .push(("hardware".into(), env.hardware.clone()));
            if let Some(v) = &env.kernelgate_version {
                suite
                    .properties
                    .push(("kernelgate_version".into(), v.clone()));
            }
        }
        let mut retried = String::new();
        if let Some(r) = &e.retried {
            retried = format!(" (evaluated again: {})", r.reason.as_str());
        }
        let outcome = match e.status {
            Status::Passed => CaseOutcome::Passed,
            Status::InvalidReference => CaseOutcome::Error {
                kind: e.status.as_str().into(),
                message: format!("{}: {}{retried}", e.status.as_str(), first_line(&e.log)),
                text: head(&e.log, LOG_LINES),
            },
            s => CaseOutcome::Failure {
                kind: s.as_str().into(),
                message: format!("{}: {}{retried}", s.as_str(), first_line(&e.log)),
                text: head(&e.log, LOG_LINES),
            },
        };
        let out = e.performance.as_ref().map(|p| {
            let method = p.timing_method.map_or("unknown", crate::model::timing_str);
            format!(
                "latency {:.6} ms, reference {:.6} ms, speedup {:.3}x ({method})",
                p.latency_ms, p.reference_latency_ms, p.speedup_factor
            )
        });
        suite.cases.push(Case {
            name,
            classname: class.clone(),
            time_s: e.wall_s.unwrap_or(0.0),
            outcome,
            out,
        });
    }
    suite
}

/// A pair that produced no traces: one case saying why, skipped (`refused`) or an error.
pub fn suite_without_traces(key: &str, solution: &str, why: &str, refused: bool) -> Suite {
    let outcome = if refused {
        CaseOutcome::Skipped(why.to_string())
    } else {
        CaseOutcome::Error {
            kind: "NOT_RUN".into(),
            message: why.to_string(),
            text: String::new(),
        }
    };
    Suite {
        name: format!("{key} / {solution}"),
        cases: vec![Case {
            name: solution.to_string(),
            classname: classname(key, solution),
            time_s: 0.0,
            outcome,
            out: None,
        }],
        ..Default::default()
    }
}

/// A kg-validate-pr report: a case per stage (a failed stage with its findings; a skipped one
/// with why), and a `verdict` case that fails unless the verdict is PASS.
pub fn suite_of_validation(r: &ValidationReport) -> Suite {
    let class = format!("kg-validate-pr.{}", r.label.replace('.', "_"));
    let mut suite = Suite {
        name: format!("kg-validate-pr {}", r.label),
        timestamp: Some(r.started_utc.clone()),
        properties: vec![
            ("verdict".into(), r.verdict.as_str().into()),
            ("device".into(), r.device.clone()),
            ("head".into(), r.repo.head.clone().unwrap_or_default()),
        ],
        cases: Vec::new(),
    };
    for (name, stage) in r.stages.iter() {
        let findings: Vec<String> = r
            .findings
            .iter()
            .filter(|f| f.stage == name)
            .map(|f| {
                let sev = match f.severity {
                    kg_contract::Severity::Blocker => "blocker",
                    kg_contract::Severity::ShouldFix => "should-fix",
                    kg_contract::Severity::Note => "note",
                };
                format!("{sev}: {}", f.detail)
            })
            .collect();
        let outcome = match stage.status {
            kg_contract::StageStatus::Pass | kg_contract::StageStatus::Info => CaseOutcome::Passed,
            kg_contract::StageStatus::Skip => CaseOutcome::Skipped(stage.note.clone()),
            kg_contract::StageStatus::Fail => CaseOutcome::Failure {
                kind: "stage_fail".into(),
                message: first_line(&stage.note),
                text: findings.join("\n"),
            },
        };
        suite.cases.push(Case {
            name: name.to_string(),
            classname: class.clone(),
            time_s: 0.0,
            outcome,
            out: (!stage.note.is_empty()).then(|| stage.note.clone()),
        });
    }
    let verdict = match r.verdict {
        Verdict::Pass => CaseOutcome::Passed,
        v => CaseOutcome::Failure {
            kind: v.as_str().into(),
            message: format!("{}: {}", v.as_str(), first_line(&r.verdict_reason)),
            text: r.verdict_reason.clone(),
        },
    };
    suite.cases.push(Case {
        name: "verdict".into(),
        classname: class,
        time_s: 0.0,
        outcome: verdict,
        out: None,
    });
    suite
}

/// `s` with the five XML special characters escaped and the characters XML 1.0 cannot hold
/// (control characters but tab, newline and carriage return; U+FFFE, U+FFFF) dropped: a log
/// holds whatever a candidate printed.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

/// The JUnit XML document of `suites` under one `testsuites` element named `name`.
pub fn render(name: &str, suites: &[Suite]) -> String {
    let total = |f: fn(&CaseOutcome) -> bool| suites.iter().map(|s| s.count(f)).sum::<usize>();
    let tests: usize = suites.iter().map(|s| s.cases.len()).sum();
    let time: f64 = suites.iter().map(Suite::time_s).sum();
    let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    // `write!` into a String cannot fail.
    let _ = writeln!(
        x,
        "<testsuites name=\"{}\" tests=\"{tests}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{time:.3}\">",
        escape(name),
        total(is_failure),
        total(is_error),
        total(is_skipped),
    );
    for (id, s) in suites.iter().enumerate() {
        let _ = write!(
            x,
            "  <testsuite name=\"{}\" id=\"{id}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{:.3}\"",
            escape(&s.name),
            s.cases.len(),
            s.count(is_failure),
            s.count(is_error),
            s.count(is_skipped),
            s.time_s(),
        );
        if let Some(t) = &s.timestamp {
            let _ = write!(x, " timestamp=\"{}\"", escape(t));
        }
        x.push_str(">\n");
        if !s.properties.is_empty() {
            x.push_str("    <properties>\n");
            for (k, v) in &s.properties {
                let _ = writeln!(
                    x,
                    "      <property name=\"{}\" value=\"{}\"/>",
                    escape(k),
                    escape(v)
                );
            }
            x.push_str("    </properties>\n");
        }
        for c in &s.cases {
            let _ = write!(
                x,
                "    <testcase name=\"{}\" classname=\"{}\" time=\"{:.3}\">",
                escape(&c.name),
                escape(&c.classname),
                c.time_s
            );
            match &c.outcome {
                CaseOutcome::Passed => {}
                CaseOutcome::Failure {
                    kind,
                    message,
                    text,
                } => {
                    let _ = write!(
                        x,
                        "\n      <failure type=\"{}\" message=\"{}\">{}</failure>",
                        escape(kind),
                        escape(message),
                        escape(text)
                    );
                }
                CaseOutcome::Error {
                    kind,
                    message,
                    text,
                } => {
                    let _ = write!(
                        x,
                        "\n      <error type=\"{}\" message=\"{}\">{}</error>",
                        escape(kind),
                        escape(message),
                        escape(text)
                    );
                }
                CaseOutcome::Skipped(why) => {
                    let _ = write!(x, "\n      <skipped message=\"{}\"/>", escape(why));
                }
            }
            if let Some(o) = &c.out {
                let _ = write!(x, "\n      <system-out>{}</system-out>", escape(o));
            }
            if c.outcome != CaseOutcome::Passed || c.out.is_some() {
                x.push_str("\n    ");
            }
            x.push_str("</testcase>\n");
        }
        x.push_str("  </testsuite>\n");
    }
    x.push_str("</testsuites>\n");
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(status: &str, log: &str, uuid: &str) -> Trace {
        let perf = if status == "PASSED" {
            serde_json::json!({"latency_ms": 0.5, "reference_latency_ms": 1.0, "speedup_factor": 2.0,
                               "timing_method": "cupti"})
        } else {
            serde_json::Value::Null
        };
        let corr = if status == "PASSED" || status == "INCORRECT_NUMERICAL" {
            serde_json::json!({"max_absolute_error": 0.1, "max_relative_error": 0.1})
        } else {
            serde_json::Value::Null
        };
        serde_json::from_value(serde_json::json!({
            "definition": "rmsnorm",
            "solution": "mine",
            "workload": {"uuid": uuid, "axes": {"rows": 7}, "inputs": {}},
            "evaluation": {"status": status, "log": log, "correctness": corr, "performance": perf,
                           "environment": {"hardware": "NVIDIA H200", "libs": {}},
                           "timestamp": "2026-12-04T00:00:00Z", "wall_s": 0.25}
        }))
        .unwrap()
    }

    #[test]
    fn statuses_map_to_failures_errors_and_counts_add_up() {
        let traces = [
            trace("PASSED", "", "w1"),
            trace(
                "INCORRECT_NUMERICAL",
                "3 of 7 elements <differ> & \u{1}more",
                "w2",
            ),
            trace("INVALID_REFERENCE", "constant reference", "w3"),
        ];
        let s = suite_of_traces("triton/rmsnorm", "mine", &traces);
        let refused = suite_without_traces("cuda/x", "k", "cuda_cpp needs nvcc", true);
        let xml = render("kernelgate", &[s, refused]);
        assert!(
            xml.contains(
                "<testsuites name=\"kernelgate\" tests=\"4\" failures=\"1\" errors=\"1\" skipped=\"1\""
            ),
            "{xml}"
        );
        assert!(
            xml.contains("classname=\"kernelgate.triton_rmsnorm.mine\""),
            "{xml}"
        );
        assert!(xml.contains("name=\"w2 (rows=7)\""), "{xml}");
        assert!(
            xml.contains("<failure type=\"INCORRECT_NUMERICAL\" message=\"INCORRECT_NUMERICAL: 3 of 7 elements &lt;differ&gt; &amp; more\">"),
            "{xml}"
        );
        assert!(xml.contains("<error type=\"INVALID_REFERENCE\""), "{xml}");
        assert!(
            xml.contains("<skipped message=\"cuda_cpp needs nvcc\"/>"),
            "{xml}"
        );
        assert!(
            xml.contains("<system-out>latency 0.500000 ms, reference 1.000000 ms, speedup 2.000x (cupti)</system-out>"),
            "{xml}"
        );
        assert!(!xml.contains('\u{1}'));
    }

    #[test]
    fn escape_drops_what_xml_cannot_hold() {
        assert_eq!(escape("a\u{0}b\u{7}\tc\"'"), "ab\tc&quot;&apos;");
        assert_eq!(escape("\u{FFFE}ok"), "ok");
    }
}
