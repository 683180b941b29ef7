//! Run statements: each problem's implementation and trace, and the paper timing protocol.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;

use super::corpus::Denominator;
use super::files::{Verifier, bad};
use super::{MAX_STATEMENT_BYTES, MAX_TRACE_BYTES, PAPER_TIMING_PROTOCOL, RunStatement};
use crate::ScoreError;

// The subset of a SOL ExecBench trace the verifier reads; other fields are the trace's own.
#[derive(Debug, Deserialize)]
struct Trace {
    definition: String,
    workload: TraceWorkload,
    #[serde(default)]
    solution: Option<String>,
    #[serde(default)]
    evaluation: Option<Evaluation>,
}

#[derive(Debug, Deserialize)]
struct TraceWorkload {
    uuid: String,
}

#[derive(Debug, Deserialize)]
struct Evaluation {
    status: String,
    environment: Environment,
    #[serde(default)]
    performance: Option<Performance>,
}

#[derive(Debug, Deserialize)]
struct Environment {
    hardware: String,
    #[serde(default)]
    libs: BTreeMap<String, String>,
    #[serde(default)]
    execution_isolation: Option<String>,
    #[serde(default)]
    clocks_locked: Option<bool>,
    #[serde(default)]
    timing_protocol: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Performance {
    latency_ms: f64,
    #[serde(default)]
    warmup_runs: u64,
    #[serde(default)]
    timed_iterations: u64,
    #[serde(default)]
    timed_iterations_per_trial: Vec<u64>,
    #[serde(default)]
    trials: u64,
    #[serde(default)]
    statistic: String,
    #[serde(default)]
    timed_outputs_validated: bool,
    #[serde(default)]
    cache_clear: Option<CacheClear>,
}

#[derive(Debug, Deserialize)]
struct CacheClear {
    #[serde(default)]
    detected_l2_bytes: Option<u64>,
    clear_buffer_bytes: u64,
    source: String,
    #[serde(default)]
    fallback_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Solution {
    name: String,
    definition: String,
    #[serde(default)]
    spec: Option<SolutionSpec>,
}

#[derive(Debug, Deserialize)]
struct SolutionSpec {
    #[serde(default)]
    target_hardware: Vec<String>,
}

/// What one run statement's traces say.
pub(super) struct Run {
    /// (problem, workload) -> (passed, latency ms).
    pub(super) workloads: BTreeMap<(String, String), (bool, Option<f64>)>,
    /// problem -> definition name.
    pub(super) definitions: BTreeMap<String, String>,
    /// (hardware, libs) of every trace.
    identities: BTreeSet<(String, BTreeMap<String, String>)>,
}

/// Verifies one run statement's problems against the corpus and reads its traces.
pub(super) fn run(
    v: &mut Verifier,
    s: &RunStatement,
    name: &str,
    denominator: &Denominator,
    is_baseline: bool,
) -> Result<Run, ScoreError> {
    let (scored, pinned) = (&denominator.scored, &denominator.pinned);
    let problems: BTreeSet<&str> = s.problems.iter().map(|p| p.problem_path.as_str()).collect();
    if problems.len() != s.problems.len() {
        return Err(bad(name, "lists a problem twice"));
    }
    let expected: BTreeSet<&str> = scored.keys().map(String::as_str).collect();
    if problems != expected {
        return Err(bad(
            name,
            format!(
                "covers {} problems, the corpus scores {}; the denominators must be equal",
                problems.len(),
                expected.len()
            ),
        ));
    }
    let root = v.root.clone();
    let mut out = Run {
        workloads: BTreeMap::new(),
        definitions: BTreeMap::new(),
        identities: BTreeSet::new(),
    };
    for p in &s.problems {
        if pinned.get(p.problem_path.as_str())
            != Some(&(p.definition_sha256.as_str(), p.workload_sha256.as_str()))
        {
            return Err(bad(
                name,
                format!(
                    "problem `{}` does not match the corpus's pinned hashes",
                    p.problem_path
                ),
            ));
        }
        let sol: Solution = v.json(&p.implementation, "implementation", MAX_STATEMENT_BYTES)?;
        if p.trace.size_bytes > MAX_TRACE_BYTES {
            return Err(bad(&p.trace.path, "trace exceeds 16 MiB"));
        }
        let tp = v.file(&root, &p.trace, "trace")?;
        let text = kg_contract::io::read_to_string(&tp)?;
        let mut seen = BTreeSet::new();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let at = format!("{}:{}", p.trace.path, i + 1);
            let t: Trace =
                serde_json::from_str(line).map_err(|e| bad(&at, format!("invalid trace: {e}")))?;
            if t.definition != sol.definition || t.solution.as_deref() != Some(sol.name.as_str()) {
                return Err(bad(
                    &at,
                    "definition or solution differs from the implementation",
                ));
            }
            if !seen.insert(t.workload.uuid.clone()) {
                return Err(bad(&at, format!("workload `{}` twice", t.workload.uuid)));
            }
            let ev = t.evaluation.ok_or_else(|| bad(&at, "has no evaluation"))?;
            let env = &ev.environment;
            if env.execution_isolation.as_deref() != Some("container") {
                return Err(bad(&at, "did not run in the release container"));
            }
            if let Some(spec) = &sol.spec
                && !spec.target_hardware.contains(&env.hardware)
            {
                return Err(bad(
                    &at,
                    format!(
                        "ran on `{}`, which the implementation does not target",
                        env.hardware
                    ),
                ));
            }
            out.identities
                .insert((env.hardware.clone(), env.libs.clone()));
            let passed = ev.status == "PASSED";
            if is_baseline && !passed {
                return Err(bad(
                    &at,
                    format!("baseline workload is {}, every one must pass", ev.status),
                ));
            }
            let latency = if passed {
                Some(paper_latency(&ev).map_err(|m| bad(&at, m))?)
            } else {
                None
            };
            out.workloads
                .insert((p.problem_path.clone(), t.workload.uuid), (passed, latency));
        }
        let want = &scored[&p.problem_path];
        if seen.is_empty() || &seen != want {
            return Err(bad(
                &p.trace.path,
                format!(
                    "covers {} workloads, the corpus lists {} for `{}`",
                    seen.len(),
                    want.len(),
                    p.problem_path
                ),
            ));
        }
        out.definitions
            .insert(p.problem_path.clone(), sol.definition.clone());
    }
    Ok(out)
}

/// Both runs must report one runtime identity (hardware and libraries).
pub(super) fn check_one_identity(b: &Run, c: &Run) -> Result<(), ScoreError> {
    let ids: BTreeSet<_> = b.identities.union(&c.identities).collect();
    if ids.len() != 1 {
        return Err(bad(
            "environment",
            format!(
                "the two runs report {} runtime identities (hardware, libraries); they must share one",
                ids.len()
            ),
        ));
    }
    Ok(())
}

/// The latency of a passing trace, if it was timed under the paper protocol.
fn paper_latency(ev: &Evaluation) -> Result<f64, String> {
    let env = &ev.environment;
    if env.clocks_locked != Some(true)
        || env.timing_protocol.as_deref() != Some(PAPER_TIMING_PROTOCOL)
    {
        return Err("passing trace lacks locked clocks or the paper timing protocol".into());
    }
    let p = ev
        .performance
        .as_ref()
        .ok_or("passing trace has no performance")?;
    let protocol = p.latency_ms.is_finite()
        && p.latency_ms > 0.0
        && p.warmup_runs == 10
        && p.timed_iterations == 50
        && p.timed_iterations_per_trial == [50, 50, 50]
        && p.trials == 3
        && p.statistic == "mean"
        && p.timed_outputs_validated;
    if !protocol {
        return Err("trace does not satisfy the paper timing protocol (10 warmup, 3 x 50 timed, mean, validated outputs)".into());
    }
    let cache = p
        .cache_clear
        .as_ref()
        .ok_or("trace has no cache-clear evidence")?;
    let derived = cache
        .detected_l2_bytes
        .is_some_and(|l2| cache.clear_buffer_bytes == 2 * l2)
        && cache.source == "torch_device_properties"
        && cache.fallback_reason.is_none();
    if !derived {
        return Err("cache-clear evidence is not twice the detected L2".into());
    }
    Ok(p.latency_ms)
}
