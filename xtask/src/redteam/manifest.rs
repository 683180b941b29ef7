//! The red-team manifest: `fixtures/adversarial/manifest.json` read into cases, and checked
//! against the sources `gen.py` builds the solutions from.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use kg_contract::Status;
use serde_json::Value;

pub(super) const MANIFEST: &str = "fixtures/adversarial/manifest.json";

const SOURCES: &str = "fixtures/adversarial/src";

/// One manifest entry.
#[derive(Debug, Clone)]
pub(super) struct Case {
    pub(super) case: String,
    pub(super) pattern: String,
    pub(super) problem: PathBuf,
    pub(super) solution: PathBuf,
    pub(super) expected: String,
    pub(super) gpu_only: bool,
    pub(super) defence: String,
    pub(super) max_speedup: Option<f64>,
    pub(super) timeout_s: Option<u64>,
    pub(super) max_workloads: Option<u64>,
    pub(super) workloads: Option<PathBuf>,
    /// A pattern the engine is known not to stop yet, and why (reported, not a failure).
    pub(super) known_gap: Option<String>,
    /// Wall-time bound on kg-bench (default: timeout x workloads + 30 s).
    pub(super) max_wall_s: Option<u64>,
    /// Bound on kg-bench's own peak RSS in MiB (default 2048).
    pub(super) max_rss_mib: Option<u64>,
    /// A kg-bench feature the case needs (`memory-limit`); skipped, visibly, without it.
    pub(super) requires: Option<String>,
    /// Passed as `--memory-limit VALUE` where kg-bench supports it.
    pub(super) memory_limit: Option<String>,
    /// Text some trace log must contain for the case to count as stopped (a limit the
    /// candidate reports hitting, e.g. `process creation failed`).
    pub(super) log_has: Option<String>,
    /// Text no trace log may contain (a candidate reporting that it got past a limit).
    pub(super) log_lacks: Option<String>,
    /// Passed as `--timing VALUE` (a case against one timing method, e.g. `events`).
    pub(super) timing: Option<String>,
}

impl Case {
    pub(super) fn honest(&self) -> bool {
        self.expected == "PASSED" && self.pattern.starts_with("honest")
    }
}

pub(super) fn load_manifest(root: &Path) -> Result<Vec<Case>> {
    let path = root.join(MANIFEST);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("failed to read `{}`", path.display()))?;
    let v: Value = serde_json::from_str(&text)
        .with_context(|| format!("failed to parse `{}` as JSON", path.display()))?;
    let arr = v
        .as_array()
        .with_context(|| format!("`{}`: expected a JSON array of cases", path.display()))?;
    let valid = |e: &str| {
        matches!(e, "not_passed" | "REWARD_HACK" | "PASSED") || Status::parse(e).is_some()
    };
    let mut out = Vec::new();
    for (i, e) in arr.iter().enumerate() {
        let s = |k: &str| -> Result<String> {
            e.get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .with_context(|| {
                    format!(
                        "`{}`: entry {i}: missing string field `{k}`",
                        path.display()
                    )
                })
        };
        let case = s("case")?;
        let expected = s("expected")?;
        if !valid(&expected) {
            bail!(
                "`{}`: case `{case}`: `expected` is `{expected}`; use not_passed, REWARD_HACK, PASSED or a status",
                path.display()
            );
        }
        let device = s("device")?;
        if device != "any" && device != "gpu" {
            bail!(
                "`{}`: case `{case}`: `device` is `{device}`; use any or gpu",
                path.display()
            );
        }
        out.push(Case {
            pattern: s("pattern")?,
            problem: root.join(s("problem")?),
            solution: root.join(s("solution")?),
            expected,
            gpu_only: device == "gpu",
            defence: s("defence")?,
            max_speedup: e.get("max_speedup").and_then(Value::as_f64),
            timeout_s: e.get("timeout_s").and_then(Value::as_u64),
            max_workloads: e.get("max_workloads").and_then(Value::as_u64),
            workloads: e
                .get("workloads")
                .and_then(Value::as_str)
                .map(|p| root.join(p)),
            known_gap: e
                .get("known_gap")
                .and_then(Value::as_str)
                .map(str::to_string),
            max_wall_s: e.get("max_wall_s").and_then(Value::as_u64),
            max_rss_mib: e.get("max_rss_mib").and_then(Value::as_u64),
            requires: e
                .get("requires")
                .and_then(Value::as_str)
                .map(str::to_string),
            memory_limit: e
                .get("memory_limit")
                .and_then(Value::as_str)
                .map(str::to_string),
            log_has: e.get("log_has").and_then(Value::as_str).map(str::to_string),
            log_lacks: e
                .get("log_lacks")
                .and_then(Value::as_str)
                .map(str::to_string),
            timing: e.get("timing").and_then(Value::as_str).map(str::to_string),
            case,
        });
    }
    Ok(out)
}

/// The source `gen.py` would put into the solution: the file minus its `# key: value` header.
pub(super) fn source_body(text: &str) -> String {
    let mut rest = text;
    while let Some(line_end) = rest.find('\n') {
        let line = &rest[..line_end];
        if line.starts_with("# ") && line.contains(':') {
            rest = &rest[line_end + 1..];
        } else {
            break;
        }
    }
    rest.trim_start_matches('\n').to_string()
}

/// Fails when a solution JSON no longer matches its `src/<case>.py` (run `gen.py`).
pub(super) fn check_fresh(root: &Path, cases: &[Case]) -> Result<()> {
    let mut stale = Vec::new();
    for c in cases {
        let src = root.join(SOURCES).join(format!("{}.py", c.case));
        if !src.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&src)
            .with_context(|| format!("failed to read `{}`", src.display()))?;
        let (sol, _) = kg_contract::load_solution(&c.solution)
            .with_context(|| format!("case `{}`", c.case))?;
        let same = sol
            .sources
            .first()
            .is_some_and(|f| f.content == source_body(&text));
        if !same {
            stale.push(c.case.clone());
        }
    }
    if !stale.is_empty() {
        bail!(
            "solution JSON out of date with fixtures/adversarial/src for: {}\nhint: run `python3 fixtures/adversarial/gen.py`",
            stale.join(", ")
        );
    }
    Ok(())
}
