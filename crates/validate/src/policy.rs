//! `test_policy`: before any test runs, compare the test files the change touches head vs base
//! through kg-inject's syntax trees: widened tolerances and shape rows newly commented out are
//! findings; `--tol-table` references and rows already commented out in base are recorded as
//! context, as the seed records them, and never decide a verdict.

use kg_contract::report::{Finding, Severity, StageName, ToleranceChange};
use kg_inject::{PySource, PyValue, Span, ToleranceKind};

use crate::shapes::normalize_token;

/// Whether a path is test code (a test file, a `tests/` directory, `conftest.py`).
pub fn is_test_path(path: &str) -> bool {
    let file = path.rsplit('/').next().unwrap_or(path);
    path.split('/')
        .any(|c| c == "tests" || c == "test" || c == "op_tests")
        || file.starts_with("test_")
        || file.ends_with("_test.py")
        || file == "conftest.py"
}

/// Whether a path is code that can change a kernel's behaviour (not docs, not tests).
pub fn is_kernel_path(path: &str) -> bool {
    if is_test_path(path) {
        return false;
    }
    let ext = path.rsplit('.').next().unwrap_or("");
    matches!(
        ext,
        "py" | "cu"
            | "cuh"
            | "cpp"
            | "cc"
            | "c"
            | "h"
            | "hpp"
            | "hip"
            | "cl"
            | "mlir"
            | "td"
            | "csv"
            | "json"
            | "toml"
            | "txt"
            | "cmake"
    ) && !path.ends_with("README.txt")
}

/// The policy result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyResult {
    /// Tolerance literals compared.
    pub tolerances: Vec<ToleranceChange>,
    /// Commented-out shape rows new in head (`file:line: text`).
    pub new_commented_rows: Vec<String>,
    /// Commented-out shape rows already in base (`file:line: text`, head line): context only.
    pub existing_commented_rows: Vec<String>,
    /// Findings.
    pub findings: Vec<Finding>,
    /// Files that could not be parsed (`file: error`).
    pub unparsed: Vec<String>,
    /// Test files examined.
    pub examined: Vec<String>,
}

/// `(besides README.md: no kernel code changed)` when files other than tests changed, so a
/// reader sees why the change still counts as test-only.
fn others_note(changed: &[(String, Option<String>, Option<String>)]) -> String {
    let others: Vec<&str> = changed
        .iter()
        .map(|(p, _, _)| p.as_str())
        .filter(|p| !is_test_path(p))
        .collect();
    if others.is_empty() {
        String::new()
    } else {
        format!(
            " (besides {}: no kernel code changed)",
            others
                .iter()
                .take(5)
                .copied()
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

fn key_of(k: &ToleranceKind) -> String {
    match k {
        ToleranceKind::Keyword(s) | ToleranceKind::Name(s) => s.clone(),
        ToleranceKind::DtypeEntry(s) => normalize_token(s),
    }
}

fn magnitude(v: &PyValue) -> Option<f64> {
    match v {
        PyValue::Tuple(items) | PyValue::List(items) => {
            items.iter().filter_map(PyValue::as_f64).reduce(f64::max)
        }
        other => other.as_f64(),
    }
}

fn src_text(v: &PyValue) -> String {
    v.render()
}

fn shape_spans(src: &PySource) -> Vec<Span> {
    let mut spans = Vec::new();
    for p in src.parametrizes() {
        spans.push(p.argvalues);
        let name = src.slice(p.argvalues).trim().to_string();
        if name.chars().all(|c| c.is_alphanumeric() || c == '_')
            && let Some(l) = src.named_list(&name)
        {
            spans.push(l.value);
        }
    }
    if let Some(l) = src.test_shapes() {
        spans.push(l.value);
    }
    if let Some(g) = src.get_inputs()
        && let Some(c) = g.configs
    {
        spans.push(c.value);
    }
    spans.sort();
    spans.dedup();
    spans
}

fn commented(src: &PySource) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for span in shape_spans(src) {
        for row in src.commented_rows(span) {
            out.push((
                row.text.split_whitespace().collect::<String>(),
                row.location.line,
            ));
        }
    }
    out
}

/// Commented-out shape rows of a test file the change does not touch (`file:line: text`): the
/// target's own disabled rows are coverage context even when the PR leaves them alone.
pub fn context_rows(path: &str, text: &str) -> Vec<String> {
    if !path.ends_with(".py") || !is_test_path(path) {
        return Vec::new();
    }
    PySource::parse(path, text)
        .map(|src| {
            commented(&src)
                .into_iter()
                .map(|(t, line)| format!("{path}:{line}: {t}"))
                .collect()
        })
        .unwrap_or_default()
}

/// Runs the policy over `(path, base text, head text)` for every changed file.
pub fn check(
    changed: &[(String, Option<String>, Option<String>)],
    tol_table: &[(String, f64)],
) -> PolicyResult {
    let mut r = PolicyResult::default();
    // "Test-only" is about what can change the kernel's behaviour: a README or other
    // documentation beside the widened test does not make the widening justifiable.
    let kernel_changed = changed.iter().any(|(p, _, _)| is_kernel_path(p));
    let table_max = tol_table.iter().map(|(_, v)| *v).reduce(f64::max);
    for (path, base, head) in changed {
        if !path.ends_with(".py") || !is_test_path(path) {
            continue;
        }
        let Some(head) = head else { continue };
        let head_src = match PySource::parse(path.as_str(), head.as_str()) {
            Ok(s) => s,
            Err(e) => {
                r.unparsed.push(format!("{path}: {e}"));
                continue;
            }
        };
        let base_src = base
            .as_ref()
            .and_then(|b| PySource::parse(path.as_str(), b.as_str()).ok());
        r.examined.push(path.clone());
        let head_tols = head_src.tolerances();
        let base_tols = base_src
            .as_ref()
            .map(|b| b.tolerances())
            .unwrap_or_default();
        let mut seen: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
        for t in &head_tols {
            let key = key_of(&t.kind);
            let i = seen.entry(key.clone()).or_insert(0);
            let base_match = base_tols.iter().filter(|b| key_of(&b.kind) == key).nth(*i);
            *i += 1;
            let (hv, bv) = (
                magnitude(&t.value),
                base_match.and_then(|b| magnitude(&b.value)),
            );
            let widened = matches!((hv, bv), (Some(h), Some(b)) if h > b * (1.0 + 1e-9));
            // The reference table is context beside the head-vs-base comparison (the seed:
            // "recorded alongside"): the dtype's own entry when the key names a dtype, else
            // the table's loosest entry.
            let reference = tol_table
                .iter()
                .find(|(d, _)| *d == key)
                .map(|(_, v)| *v)
                .or(table_max);
            r.tolerances.push(ToleranceChange {
                file: path.clone(),
                key: key.clone(),
                base: base_match.map(|b| src_text(&b.value)),
                head: src_text(&t.value),
                line: t.location.line as u64,
                widened,
                reference,
                above_reference: match (hv, reference) {
                    (Some(h), Some(lim)) => Some(h > lim * (1.0 + 1e-9)),
                    _ => None,
                },
            });
            if widened {
                let detail = format!(
                    "{path}:{}: tolerance `{key}` widened from {} to {} by this change",
                    t.location.line,
                    base_match.map(|b| src_text(&b.value)).unwrap_or_default(),
                    src_text(&t.value)
                );
                if !kernel_changed {
                    r.findings.push(Finding {
                        severity: Severity::Blocker,
                        stage: StageName::TestPolicy,
                        detail: format!(
                            "{detail} in a test-only change{}: the suite can no longer catch what it caught before",
                            others_note(changed)
                        ),
                    });
                } else {
                    r.findings.push(Finding {
                        severity: Severity::ShouldFix,
                        stage: StageName::TestPolicy,
                        detail: format!(
                            "{detail} while kernel code also changed; justify the looser bound numerically or restore it"
                        ),
                    });
                }
            }
        }
        let head_rows = commented(&head_src);
        let mut base_rows: Vec<String> = base_src
            .as_ref()
            .map(commented)
            .unwrap_or_default()
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        let mut new_rows = Vec::new();
        for (text, line) in head_rows {
            if let Some(i) = base_rows.iter().position(|b| *b == text) {
                base_rows.remove(i);
                r.existing_commented_rows
                    .push(format!("{path}:{line}: {text}"));
            } else {
                new_rows.push(format!("{path}:{line}: {text}"));
            }
        }
        if !new_rows.is_empty() {
            r.findings.push(Finding {
                severity: Severity::ShouldFix,
                stage: StageName::TestPolicy,
                detail: format!(
                    "{} shape row(s) newly commented out: {}; re-enable them or explain why these shapes cannot run",
                    new_rows.len(),
                    new_rows.join("; ")
                ),
            });
            r.new_commented_rows.extend(new_rows);
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "import pytest\n@pytest.mark.parametrize('M,N', [\n    (4, 8),\n    (5, 7),\n])\ndef test_k(M, N):\n    assert_close(a, b, atol=1e-5, rtol=1e-5)\n";

    fn changed(head: &str, extra: Option<&str>) -> Vec<(String, Option<String>, Option<String>)> {
        let mut v = vec![(
            "tests/test_k.py".to_string(),
            Some(BASE.to_string()),
            Some(head.to_string()),
        )];
        if let Some(p) = extra {
            v.push((p.to_string(), Some(String::new()), Some("x = 1\n".into())));
        }
        v
    }

    #[test]
    fn test_only_widening_blocks_and_kernel_change_downgrades() {
        let head = BASE.replace("atol=1e-5", "atol=1e-1");
        let r = check(&changed(&head, None), &[]);
        assert_eq!(r.findings.len(), 1);
        assert_eq!(r.findings[0].severity, Severity::Blocker);
        let r = check(&changed(&head, Some("kern/k.py")), &[]);
        assert_eq!(r.findings[0].severity, Severity::ShouldFix);
        // Documentation beside the widening does not make it a kernel change.
        let r = check(&changed(&head, Some("README.md")), &[]);
        assert_eq!(r.findings[0].severity, Severity::Blocker, "{r:?}");
        assert!(r.findings[0].detail.contains("besides README.md"), "{r:?}");
        // Tightening is not a finding.
        let r = check(&changed(&BASE.replace("atol=1e-5", "atol=1e-6"), None), &[]);
        assert!(r.findings.is_empty());
    }

    #[test]
    fn new_commented_rows_and_table_are_should_fix() {
        let head = BASE.replace("    (5, 7),\n", "    # (5, 7),\n");
        let r = check(&changed(&head, Some("kern/k.py")), &[]);
        assert_eq!(r.new_commented_rows.len(), 1, "{r:?}");
        assert_eq!(r.findings[0].severity, Severity::ShouldFix);
        // Already commented out in base: context, not a finding.
        let base = BASE.replace("    (5, 7),\n", "    # (5, 7),\n");
        let v = vec![(
            "tests/test_k.py".to_string(),
            Some(base.clone()),
            Some(base),
        )];
        let r = check(&v, &[]);
        assert!(r.findings.is_empty(), "{r:?}");
        assert_eq!(r.existing_commented_rows, vec!["tests/test_k.py:4: (5,7),"]);
        // The reference table is recorded beside each literal, never a finding.
        let r = check(&changed(BASE, None), &[("float32".into(), 1e-6)]);
        assert!(r.findings.is_empty(), "{r:?}");
        assert!(
            r.tolerances
                .iter()
                .all(|t| t.reference == Some(1e-6) && t.above_reference == Some(true)),
            "{r:?}"
        );
        assert!(
            is_test_path("tests/x.py") && is_test_path("a/test_b.py") && !is_test_path("kern/b.py")
        );
        assert!(is_kernel_path("kern/b.py") && !is_kernel_path("README.md"));
    }
}
