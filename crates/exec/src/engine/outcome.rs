//! A workload's outcome as it is built: statuses, figures, failures and the judge's replies.

use super::*;

pub(super) struct Outcome {
    pub(super) status: Status,
    /// Why it did not pass (None for PASSED).
    pub(super) reason: Option<Reason>,
    pub(super) log: String,
    pub(super) correctness: Option<Correctness>,
    pub(super) performance: Option<Performance>,
    /// Set when this outcome may be the harness's doing rather than the candidate's: the
    /// workload is evaluated once more before anything is recorded.
    pub(super) retry: Option<RetryReason>,
}

impl Outcome {
    pub(super) fn fail(status: Status, reason: Reason, log: impl Into<String>) -> Self {
        Outcome {
            status,
            reason: Some(reason),
            log: log.into(),
            correctness: None,
            performance: None,
            retry: None,
        }
    }

    /// This outcome, marked as one to evaluate again ([`Outcome::retry`]).
    pub(super) fn retry_for(mut self, reason: RetryReason) -> Self {
        self.retry = Some(reason);
        self
    }
}

/// The per-round replies (or results) a batch request's reply carries under `key`.
pub(super) fn replies_of(v: &Value, key: &str) -> Vec<Value> {
    v.get(key)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// The outcome for a batch request answered for `got` of its `want` rounds (`who_did`: "the
/// judge prepared"), or None when every round was answered.
pub(super) fn short_batch(
    (status, reason): (Status, Reason),
    who_did: &str,
    got: usize,
    want: usize,
) -> Option<Outcome> {
    (got != want).then(|| {
        Outcome::fail(
            status,
            reason,
            format!("{who_did} {got} of {want} round(s)"),
        )
    })
}

/// A reference that failed to answer: INVALID_REFERENCE.
pub(super) const REFERENCE_FAILED: (Status, Reason) =
    (Status::InvalidReference, Reason::ReferenceFailed);
/// A judge that failed at its own work (not the reference's): RUNTIME_ERROR.
pub(super) const JUDGE_FAILED: (Status, Reason) = (Status::RuntimeError, Reason::JudgeFailed);

/// The judge's reply `r` when it succeeded; else the outcome `(status, reason)` with the
/// reply's message (a failed request's own words after `prefix`); a cancellation as such.
pub(super) fn judge_ok(
    r: Result<Value, JudgeFail>,
    (status, reason): (Status, Reason),
    prefix: &str,
) -> Result<Result<Value, Outcome>, ExecError> {
    match r {
        Ok(r) if reply_ok(&r) => Ok(Ok(r)),
        Ok(r) => Ok(Err(Outcome::fail(status, reason, reply_message(&r)))),
        Err(JudgeFail::Cancelled) => Err(ExecError::Cancelled),
        Err(JudgeFail::Other(m)) => Ok(Err(Outcome::fail(status, reason, format!("{prefix}{m}")))),
    }
}

/// The reason of a reward hack a worker's reply `v` reports (`reward_hack_reason`).
pub(super) fn hack_reason(v: &Value) -> Reason {
    v.get("reward_hack_reason")
        .and_then(Value::as_str)
        .and_then(Reason::parse)
        .unwrap_or(Reason::OtherRewardHack)
}

/// The reason of the judge's check result `res` with `status` (its `reason`, else the one
/// the status implies).
pub(super) fn check_reason(res: &Value, status: Status) -> Reason {
    if let Some(r) = res
        .get("reason")
        .and_then(Value::as_str)
        .and_then(Reason::parse)
    {
        return r;
    }
    match status {
        Status::IncorrectShape => Reason::OutputShape,
        Status::IncorrectDtype => Reason::OutputDtype,
        Status::IncorrectNumerical => Reason::NumericalMismatch,
        Status::RewardHack => Reason::OtherRewardHack,
        Status::CompileError => Reason::BuildFailed,
        Status::Timeout => Reason::Timeout,
        Status::InvalidReference => Reason::ReferenceFailed,
        Status::RuntimeError | Status::Passed => Reason::JudgeFailed,
    }
}

/// Byte budget of one batch of correctness rounds: each round counts its inputs and twice its
/// outputs (the judge keeps the reference's while the candidate hands over its own).
pub(super) const ROUND_BATCH_BYTES: u64 = 256 << 20;

/// How many correctness rounds go in one batch: as many as fit [`ROUND_BATCH_BYTES`], at least one.
pub(super) fn rounds_per_batch(problem: &Problem, w: &LoadedWorkload) -> u32 {
    let tensor_bytes = |specs: &IndexMap<String, kg_contract::definition::TensorSpec>,
                        shapes: &kg_contract::shape::Shapes| {
        specs
            .iter()
            .map(|(name, spec)| {
                let numel = shapes
                    .get(name)
                    .cloned()
                    .flatten()
                    .map_or(1, |s| s.iter().map(|&d| d.max(0) as u64).product::<u64>());
                spec.dtype.bytes_for(numel)
            })
            .sum::<u64>()
    };
    let d = &problem.definition;
    rounds_fitting(
        tensor_bytes(&d.inputs, &w.resolved.inputs)
            + 2 * tensor_bytes(&d.outputs, &w.resolved.outputs),
    )
}

/// Rounds of `round_bytes` each that fit [`ROUND_BATCH_BYTES`], at least one.
pub(super) fn rounds_fitting(round_bytes: u64) -> u32 {
    u32::try_from(ROUND_BATCH_BYTES / round_bytes.max(1))
        .unwrap_or(u32::MAX)
        .max(1)
}

pub(super) fn reply_ok(v: &Value) -> bool {
    v.get("result").and_then(Value::as_str) == Some("ok")
}

pub(super) fn reply_kind(v: &Value) -> &str {
    v.get("kind").and_then(Value::as_str).unwrap_or("unknown")
}

pub(super) fn reply_message(v: &Value) -> String {
    let mut s = v
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("no message")
        .to_string();
    if let Some(tb) = v.get("traceback").and_then(Value::as_str) {
        s.push('\n');
        s.push_str(tail(tb, 8000));
    }
    s
}

/// The correctness figures of a workload, merged over every check of its outputs.
pub(super) struct Figures {
    pub(super) max_abs: f64,
    pub(super) max_rel: f64,
    pub(super) min_ratio: f64,
    pub(super) has_nan: bool,
    pub(super) has_inf: bool,
    /// A v2 workload's per-check results, merged over the rounds (in check order).
    pub(super) checks: Vec<kg_contract::CheckResult>,
}

impl Figures {
    pub(super) fn new() -> Self {
        Figures {
            max_abs: 0.0,
            max_rel: 0.0,
            min_ratio: 1.0,
            has_nan: false,
            has_inf: false,
            checks: Vec::new(),
        }
    }

    /// Merges a result's per-check entries (`checks`, v2 workloads) into [`Figures::checks`].
    pub(super) fn merge_checks(&mut self, r: &Value) {
        for c in replies_of(r, "checks") {
            match serde_json::from_value::<kg_contract::CheckResult>(c) {
                Ok(c) => match self.checks.iter_mut().find(|k| k.index == c.index) {
                    Some(k) => k.merge(&c),
                    None => self.checks.push(c),
                },
                // The verdict is the judge's status; a figure it could not type is lost, said.
                Err(e) => tracing::warn!("a check result of the judge's does not parse: {e}"),
            }
        }
        self.checks.sort_by_key(|c| c.index);
    }

    /// Merges one check result's figures (`max_abs`, `max_rel`, `matched_ratio`, `has_nan`,
    /// `has_inf`, each where present).
    pub(super) fn merge(&mut self, r: &Value) {
        let f = |k: &str| r.get(k).and_then(Value::as_f64);
        if let Some(v) = f("max_abs") {
            self.max_abs = self.max_abs.max(v);
        }
        if let Some(v) = f("max_rel") {
            self.max_rel = self.max_rel.max(v);
        }
        if let Some(v) = f("matched_ratio") {
            self.min_ratio = self.min_ratio.min(v);
        }
        self.has_nan |= r.get("has_nan").and_then(Value::as_bool).unwrap_or(false);
        self.has_inf |= r.get("has_inf").and_then(Value::as_bool).unwrap_or(false);
        self.merge_checks(r);
    }

    pub(super) fn correctness(&self, rounds: u32) -> Correctness {
        let mut c = correctness(
            self.max_abs,
            self.max_rel,
            self.has_nan,
            self.has_inf,
            self.min_ratio,
            rounds,
        );
        c.checks = (!self.checks.is_empty()).then(|| self.checks.clone());
        c
    }
}

/// The judge's check of the last correctness batch, sent while the candidate loads and warms
/// up for timing.
pub(super) struct PendingCheck {
    pub(super) batch: Vec<u32>,
    pub(super) req: Value,
}

/// A failed timed phase: the outcome, and the judge's check reply when there was one.
pub(super) struct TimedFail {
    pub(super) outcome: Outcome,
    pub(super) check: Option<Value>,
}

pub(super) enum Timed {
    Ok(Value),
    Fail(Box<TimedFail>),
}

impl Timed {
    pub(super) fn fail(status: Status, reason: Reason, log: impl Into<String>) -> Self {
        Self::failed(Outcome::fail(status, reason, log))
    }

    /// A failed timed phase with `outcome` and no check reply.
    pub(super) fn failed(outcome: Outcome) -> Self {
        Timed::Fail(Box::new(TimedFail {
            outcome,
            check: None,
        }))
    }
}

/// What the candidate changed in the problem directory since `before`, as one log line
/// (`when`, then the files it added, which are removed here, and those under `changed_label`),
/// or None when nothing changed.
pub(super) fn problem_dir_tampering(
    dir: &Path,
    before: &integrity::DirSnapshot,
    when: &str,
    changed_label: &str,
) -> Option<String> {
    let (added, changed) = integrity::dir_changes(before, dir);
    if added.is_empty() && changed.is_empty() {
        return None;
    }
    integrity::remove_added(dir, &added);
    let list = |v: &[PathBuf]| {
        v.iter()
            .take(10)
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut msg = format!(
        "the candidate wrote into the problem directory `{}`",
        dir.display()
    );
    if !when.is_empty() {
        msg.push(' ');
        msg.push_str(when);
    }
    if !added.is_empty() {
        msg.push_str(&format!("; added (now removed): {}", list(&added)));
    }
    if !changed.is_empty() {
        msg.push_str(&format!("; {changed_label}: {}", list(&changed)));
    }
    Some(msg)
}

/// REWARD_HACK when the candidate wrote into the problem directory (what it added is removed).
pub(super) fn guard_problem_dir(
    dir: &Path,
    before: &integrity::DirSnapshot,
    outcome: Outcome,
) -> Outcome {
    let Some(mut msg) = problem_dir_tampering(dir, before, "", "changed or removed") else {
        return outcome;
    };
    msg.push('\n');
    msg.push_str(&outcome.log);
    Outcome::fail(Status::RewardHack, Reason::ProblemDirChanged, msg)
}

pub(super) enum JudgeFail {
    Cancelled,
    Other(String),
}

/// A judge reply and how long the judge took over it.
pub(super) type JudgeTook = (Result<Value, JudgeFail>, Duration);

pub(super) fn correctness(
    max_abs: f64,
    max_rel: f64,
    has_nan: bool,
    has_inf: bool,
    ratio: f64,
    rounds: u32,
) -> Correctness {
    Correctness {
        max_relative_error: max_rel,
        max_absolute_error: max_abs,
        has_nan,
        has_inf: has_inf && !has_nan,
        extra: None,
        min_matched_ratio: Some(ratio),
        rounds: Some(rounds),
        checks: None,
    }
}

/// Keeps a trace log under the capture limit (head and tail).
pub(super) fn bounded_log(s: String) -> String {
    const LIMIT: usize = 2 * crate::process::LOG_LIMIT;
    if s.len() <= LIMIT {
        return s;
    }
    let mut head_end = LIMIT / 2;
    while !s.is_char_boundary(head_end) {
        head_end -= 1;
    }
    format!(
        "{}\n[... {} bytes dropped ...]\n{}",
        &s[..head_end],
        s.len() - LIMIT,
        tail(&s, LIMIT / 2)
    )
}
