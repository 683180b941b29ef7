//! Judging one case: its statuses and side effects against the manifest's expectation, with
//! the defence that stopped each workload named from the trace's reason code.

use kg_contract::{Layer, Reason, Status, Trace};

use super::checks::FORBIDDEN_LOG;
use super::manifest::Case;
use super::run::Got;

/// Which defence stopped a workload, from the trace's typed `reason` (the log's first line
/// only adds the detail).
pub(super) fn caught_by(t: &Trace) -> String {
    let Some(e) = &t.evaluation else {
        return "no evaluation".into();
    };
    let first = e
        .log
        .lines()
        .find(|l| !l.trim().is_empty() && !l.starts_with("---"))
        .unwrap_or("");
    let reason = e.reason;
    let code = reason.map_or_else(|| "no reason".to_string(), |r| r.to_string());
    match e.status {
        Status::Passed => match &e.performance {
            Some(p) => format!("timing gave {:.2}x (earned)", p.speedup_factor),
            None => "passed".into(),
        },
        Status::RewardHack => format!("REWARD_HACK {code}: {}", clip(first, 60)),
        Status::Timeout => "timeout + process-group kill".into(),
        Status::CompileError => "import/build failed".into(),
        Status::InvalidReference => "judge failed (INVALID_REFERENCE)".into(),
        Status::RuntimeError => match reason {
            Some(Reason::CandidateDied) => "worker death contained (process split)".into(),
            Some(Reason::OutputsUnreadable) => {
                "judge-side output loading (torch.load weights_only)".into()
            }
            _ => format!("runtime error {code}: {}", clip(first, 50)),
        },
        Status::IncorrectShape | Status::IncorrectNumerical | Status::IncorrectDtype => {
            match reason {
                Some(Reason::TimedOutputsDiffer) => "re-check of timed outputs".into(),
                Some(Reason::OutputNotTensor) => "exact torch.Tensor output check".into(),
                Some(
                    Reason::NumericalMismatch
                    | Reason::OutputShape
                    | Reason::OutputDtype
                    | Reason::OutputCount,
                ) => "judge-side correctness rounds".into(),
                _ => format!("judge {code}: {}", clip(first, 50)),
            }
        }
    }
}

pub(super) fn clip(s: &str, n: usize) -> String {
    let mut out: String = s.chars().take(n).collect();
    if s.chars().count() > n {
        out.push('…');
    }
    out
}

/// The outcome of one case against its expectation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Honest and PASSED, or an adversarial case stopped with the expected status.
    Ok,
    /// Adversarial, stopped, but with another status than expected.
    CaughtOther,
    /// Adversarial and not stopped (or it left side effects).
    Missed,
    /// Honest, and not PASSED (or it tripped a side-effect check).
    FalsePositive,
    /// kg-bench itself failed, or a case listed as a known gap was stopped (the manifest
    /// must then drop its `known_gap`).
    Error,
    /// Adversarial, not stopped, and listed in the manifest as a known gap (with the reason).
    KnownGap,
    /// Not run: kg-bench lacks what the case needs (`requires`); the reason is printed.
    Skipped,
}

impl Verdict {
    pub(super) fn label(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::CaughtOther => "caught",
            Verdict::Missed => "MISSED",
            Verdict::FalsePositive => "FALSE-POSITIVE",
            Verdict::Error => "ERROR",
            Verdict::KnownGap => "KNOWN-GAP",
            Verdict::Skipped => "SKIPPED",
        }
    }
}

/// [`judge_case`], then the manifest's `known_gap`: an escape with no side effects is reported
/// as KNOWN-GAP; a known gap that was stopped is an error until the manifest says so.
pub(super) fn judge(c: &Case, g: &Got) -> (Verdict, String) {
    let (v, why) = judge_case(c, g);
    // A case that needs the memory limit got through where kg-bench itself reported that
    // layer missing (no cgroup v2 delegated on a GPU host): the trace does not claim the
    // limit, and --require-sandbox refuses to run there. Listed as a gap of this host.
    let other_side = side_effects(g)
        .into_iter()
        .filter(|s| !s.starts_with(FORBIDDEN_LOG))
        .count();
    if v == Verdict::Missed
        && c.requires.as_deref() == Some("memory-limit")
        && other_side == 0
        && let Some(detail) = reported_missing(g, Layer::MemoryLimit)
    {
        return (
            Verdict::KnownGap,
            format!(
                "{why}; known gap of this host: every trace reports memory_limit MISSING ({detail}), so no PASS here claims it and --require-sandbox refuses to run"
            ),
        );
    }
    match (&c.known_gap, v) {
        (Some(gap), Verdict::Missed) if side_effects(g).is_empty() => {
            (Verdict::KnownGap, format!("{why}; known gap: {gap}"))
        }
        (Some(_), Verdict::Ok | Verdict::CaughtOther) => (
            Verdict::Error,
            format!(
                "{why}; stopped, but the manifest lists it as a known gap: remove `known_gap` from its source header"
            ),
        ),
        _ => (v, why),
    }
}

/// The detail of `layer` where every trace of the case reports it as not held.
fn reported_missing(g: &Got, layer: Layer) -> Option<String> {
    let mut detail = None;
    for t in &g.traces {
        let l = t
            .evaluation
            .as_ref()?
            .environment
            .isolation
            .as_ref()?
            .layers
            .iter()
            .find(|l| l.layer == layer)?;
        if l.held {
            return None;
        }
        detail = Some(l.detail.clone());
    }
    detail
}

/// What a case left behind or broke outside its traces (each a miss whatever the statuses).
fn side_effects(g: &Got) -> Vec<String> {
    let mut side = Vec::new();
    if !g.survivors.is_empty() {
        let list: Vec<String> = g
            .survivors
            .iter()
            .map(|(p, cmd)| format!("{p} `{}`", clip(cmd, 50)))
            .collect();
        side.push(format!("survivor(s) killed: {}", list.join(", ")));
    }
    if !g.problem_diff.is_empty() {
        side.push(format!("problem dir changed: {}", g.problem_diff.join(" ")));
    }
    if !g.cwd_diff.is_empty() {
        side.push(format!("kg-bench cwd changed: {}", g.cwd_diff.join(" ")));
    }
    if !g.long_logs.is_empty() {
        side.push(format!("unbounded trace log(s): {:?} bytes", g.long_logs));
    }
    if !g.startup_diff.is_empty() {
        side.push(format!(
            "interpreter start-up file(s) planted: {}",
            g.startup_diff.join(" ")
        ));
    }
    if let Some(b) = &g.binary_diff {
        side.push(b.clone());
    }
    if !g.cache_diff.is_empty() {
        side.push(format!(
            "other solutions' cache changed: {}",
            g.cache_diff.join(" ")
        ));
    }
    if !g.litter.is_empty() {
        side.push(format!("host temp litter: {}", g.litter.join(" ")));
    }
    if !g.leaks.is_empty() {
        side.push(format!("planted secret leaked: {}", g.leaks.join(", ")));
    }
    if !g.trace_file.is_empty() {
        side.push(format!("trace file: {}", g.trace_file.join("; ")));
    }
    side.extend(g.limits.iter().cloned());
    side
}

fn judge_case(c: &Case, g: &Got) -> (Verdict, String) {
    let side = side_effects(g);
    if let Some(e) = &g.harness_error {
        // kg-bench failed; if the case also left side effects (a destroyed trace file, a
        // changed problem), the attack is why, and it got through.
        if side.is_empty() || c.honest() {
            return (Verdict::Error, e.clone());
        }
        return (
            Verdict::Missed,
            format!("{e}; {}; needs: {}", side.join("; "), c.defence),
        );
    }
    let all_passed = g.statuses.iter().all(|s| *s == Status::Passed);
    if c.expected == "PASSED" {
        if all_passed && side.is_empty() {
            return (Verdict::Ok, "all PASSED".into());
        }
        let why = if all_passed {
            side.join("; ")
        } else {
            let fails: Vec<String> = g
                .traces
                .iter()
                .filter(|t| {
                    t.evaluation
                        .as_ref()
                        .is_some_and(|e| e.status != Status::Passed)
                })
                .map(caught_by)
                .collect();
            let mut v = vec![fails.join("; ")];
            v.extend(side);
            v.join("; ")
        };
        return if c.honest() {
            (Verdict::FalsePositive, why)
        } else if all_passed {
            (Verdict::Missed, format!("{why}; needs: {}", c.defence))
        } else {
            (Verdict::CaughtOther, why)
        };
    }
    // Adversarial: every workload must be stopped, or PASSED with no unearned speed.
    let mut escaped = Vec::new();
    let mut how = Vec::new();
    for t in &g.traces {
        let Some(e) = &t.evaluation else { continue };
        if e.status == Status::Passed {
            let sp = e
                .performance
                .as_ref()
                .map(|p| (p.speedup_factor, p.latency_ms));
            match (c.max_speedup, sp) {
                (Some(max), Some((s, lat))) if s > 0.0 && lat > 0.0 && s <= max => {
                    how.push(format!("PASSED at {s:.2}x (<= {max}x: no unearned speed)"));
                }
                (_, Some((s, _))) => escaped.push(format!("PASSED at {s:.2}x")),
                (_, None) => escaped.push("PASSED".into()),
            }
        } else {
            how.push(caught_by(t));
        }
    }
    how.dedup();
    if !escaped.is_empty() || !side.is_empty() {
        let mut why = escaped;
        why.extend(side);
        return (
            Verdict::Missed,
            format!("{}; needs: {}", why.join("; "), c.defence),
        );
    }
    let exact = match c.expected.as_str() {
        "not_passed" => true,
        e => g.statuses.iter().all(|s| s.as_str() == e),
    };
    let v = if exact {
        Verdict::Ok
    } else {
        Verdict::CaughtOther
    };
    (v, how.join("; "))
}
