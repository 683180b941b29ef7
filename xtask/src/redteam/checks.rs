//! Checks on what one case's kg-bench produced beyond its statuses (Integrity II): leaked
//! secrets, a `-o` trace file that disagrees with stdout or fails `kg-bench verify`, broken
//! wall-time and memory bounds, stopped workloads without a reason code, and the log texts a
//! case must (or must not) make a trace say.

use std::path::Path;
use std::process::{Command, Stdio};

use kg_contract::{Reason, Status, Trace};
use serde_json::Value;

use super::verdict::clip;

/// kg-bench's own peak RSS allowed by default (`max_rss_mib`).
pub(super) const DEFAULT_MAX_RSS_MIB: u64 = 2048;

/// Wall time allowed beyond the case's total timeout by default (`max_wall_s`).
pub(super) const WALL_SLACK_S: u64 = 30;

/// `VAR in WHERE` for every planted secret value found in one of the texts.
pub(super) fn leaked_secrets(secrets: &[(String, String)], texts: &[(&str, &[u8])]) -> Vec<String> {
    let mut out = Vec::new();
    for (var, value) in secrets {
        for (where_, text) in texts {
            if !value.is_empty() && text.windows(value.len()).any(|w| w == value.as_bytes()) {
                out.push(format!("{var} in {where_}"));
            }
        }
    }
    out
}

/// How the `-o` file's traces differ from kg-bench's `--json` stdout (workload, status and
/// speedup of each line, in order); empty when they agree.
pub(super) fn trace_file_disagreements(stdout: &[Value], file: Option<&str>) -> Vec<String> {
    let Some(text) = file else {
        return if stdout.is_empty() {
            vec![]
        } else {
            vec!["-o trace file missing".into()]
        };
    };
    let mut lines = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(l) {
            Ok(v) => lines.push(v),
            Err(_) => return vec![format!("-o file line {} is not JSON", i + 1)],
        }
    }
    let key = |t: &Value| {
        let e = t.get("evaluation");
        (
            t.pointer("/workload/uuid")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string(),
            e.and_then(|e| e.get("status"))
                .and_then(Value::as_str)
                .unwrap_or("-")
                .to_string(),
            e.and_then(|e| e.pointer("/performance/speedup_factor"))
                .and_then(Value::as_f64)
                .map(|s| format!("{s:.6}")),
        )
    };
    let mut out = Vec::new();
    if lines.len() != stdout.len() {
        out.push(format!(
            "-o file has {} trace(s), --json stdout {}",
            lines.len(),
            stdout.len()
        ));
    }
    for (f, s) in lines.iter().zip(stdout) {
        let (fk, sk) = (key(f), key(s));
        if fk != sk {
            out.push(format!(
                "-o file says {} {}{} where stdout says {}{}",
                fk.0,
                fk.1,
                fk.2.map(|x| format!(" at {x}x")).unwrap_or_default(),
                sk.1,
                sk.2.map(|x| format!(" at {x}x")).unwrap_or_default()
            ));
        }
    }
    out
}

/// `kg-bench verify FILE --problem DIR`; the failure, if it did not exit 0.
pub(super) fn verify_traces(kg_bench: &Path, file: &Path, problem: &Path) -> Option<String> {
    match Command::new(kg_bench)
        .arg("verify")
        .arg(file)
        .arg("--problem")
        .arg(problem)
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "kg-bench verify failed ({}): {}",
            o.status,
            clip(
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or(""),
                120
            )
        )),
        Err(e) => Some(format!("kg-bench verify could not start: {e}")),
    }
}

/// Resource bounds kg-bench itself broke: its wall time and its own peak RSS.
pub(super) fn limit_breaches(
    wall_s: f64,
    rss_mib: Option<u64>,
    max_wall_s: u64,
    max_rss_mib: u64,
) -> Vec<String> {
    let mut out = Vec::new();
    if wall_s > max_wall_s as f64 {
        out.push(format!(
            "kg-bench took {wall_s:.1} s (bound {max_wall_s} s)"
        ));
    }
    if let Some(r) = rss_mib
        && r > max_rss_mib
    {
        out.push(format!(
            "kg-bench peak RSS {r} MiB (bound {max_rss_mib} MiB)"
        ));
    }
    out
}

/// Traces that did not pass and name no specific `reason` code: no tool could tell which
/// defence stopped them.
pub(super) fn unreasoned(traces: &[Trace]) -> Vec<String> {
    traces
        .iter()
        .filter_map(|t| t.evaluation.as_ref().map(|e| (&t.workload.uuid, e)))
        .filter(|(_, e)| {
            e.status != Status::Passed && matches!(e.reason, None | Some(Reason::OtherRewardHack))
        })
        .map(|(uuid, e)| {
            let code = e
                .reason
                .map_or_else(|| "none".to_string(), |r| r.to_string());
            format!(
                "workload {uuid}: {} with reason code `{code}`",
                e.status.as_str()
            )
        })
        .collect()
}

/// The case's `log_has` text when no trace log contains it (the limit it reports did not hold).
pub(super) fn missing_log(want: Option<&str>, traces: &[Trace]) -> Option<String> {
    let want = want?;
    let found = traces
        .iter()
        .any(|t| t.evaluation.as_ref().is_some_and(|e| e.log.contains(want)));
    (!found).then(|| format!("no trace log says `{want}` (the limit it tests did not hold)"))
}

/// How a `log_lacks` breach starts.
pub(super) const FORBIDDEN_LOG: &str = "a trace log says:";

/// The case's `log_lacks` text when a trace log contains it (the candidate got past a limit).
pub(super) fn forbidden_log(text: Option<&str>, traces: &[Trace]) -> Option<String> {
    let text = text?;
    traces
        .iter()
        .filter_map(|t| t.evaluation.as_ref())
        .find_map(|e| e.log.lines().find(|l| l.contains(text)))
        .map(|l| format!("{FORBIDDEN_LOG} {}", clip(l.trim(), 160)))
}
