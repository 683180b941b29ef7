//! Performance reports as AgentKernelArena reads them: the first existing report file
//! (`build/performance_report.json`, `performance_report.json`, `build/perf_report.json`,
//! `perf_report.json`, `perf/benchmark_results.json`), else stdout patterns; device-time keys
//! in priority order, host/wall keys rejected; cases matched by `params`, then `shape`, then an
//! explicit `test_case_id` (by index only when both sides have one case); speedup is the mean
//! of per-case `base/opt`, and 0 unless every case matches and every time is > 0.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// Report files, in the order they are tried.
pub const REPORT_CANDIDATES: [&str; 5] = [
    "build/performance_report.json",
    "performance_report.json",
    "build/perf_report.json",
    "perf_report.json",
    "perf/benchmark_results.json",
];

const DEVICE_KEYS: [&str; 6] = [
    "device_time_ms",
    "gpu_time_ms",
    "kernel_time_ms",
    "cuda_event_time_ms",
    "cuda_graph_time_ms",
    "execution_time_ms",
];
const HOST_KEYS: [&str; 5] = [
    "host_time_ms",
    "wall_time_ms",
    "elapsed_time_ms",
    "total_time_ms",
    "end_to_end_time_ms",
];

/// One measured case.
#[derive(Debug, Clone, PartialEq)]
pub struct PerfCase {
    /// `test_case_id`, or a synthetic `test_case_<i>`.
    pub id: String,
    /// Whether the id was in the report (only explicit ids are matched on).
    pub explicit_id: bool,
    /// The `shape` field.
    pub shape: Option<Value>,
    /// The `params` field.
    pub params: Option<Value>,
    /// Time in ms (≤ 0 means the case failed).
    pub time_ms: f64,
    /// `benchmark_method`, if given.
    pub method: Option<String>,
}

/// Removes stale report files before a performance command runs.
pub fn clear_reports(workspace: &Path) {
    for c in REPORT_CANDIDATES {
        let p = workspace.join(c);
        if p.is_file() {
            let _ = std::fs::remove_file(&p);
        }
    }
}

fn num(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn time_of(obj: &serde_json::Map<String, Value>, baseline: bool, torch2hip: bool) -> Option<f64> {
    if torch2hip {
        let key = if baseline { "ori_time" } else { "opt_time" };
        if let Some(t) = obj.get(key).and_then(num) {
            return Some(t);
        }
    }
    for k in DEVICE_KEYS {
        if let Some(t) = obj.get(k).and_then(num) {
            return Some(t);
        }
    }
    for k in ["execution_time", "time_ms", "time"] {
        if let Some(t) = obj.get(k).and_then(num) {
            return Some(if k == "time_ms" || t < 1000.0 {
                t
            } else {
                t * 1000.0
            });
        }
    }
    if HOST_KEYS.iter().any(|k| obj.contains_key(*k)) {
        return None;
    }
    if let Some(Value::Object(t)) = obj.get("timing_ms") {
        for k in ["mean", "median", "min"] {
            if let Some(v) = t.get(k).and_then(num) {
                return Some(v);
            }
        }
    }
    None
}

fn case_of(v: &Value, i: usize, baseline: bool, torch2hip: bool) -> Option<PerfCase> {
    let obj = v.as_object()?;
    let time_ms = time_of(obj, baseline, torch2hip)?;
    let explicit = obj.get("test_case_id").and_then(Value::as_str);
    Some(PerfCase {
        id: explicit.map_or_else(|| format!("test_case_{i}"), str::to_string),
        explicit_id: explicit.is_some(),
        shape: obj
            .get("shape")
            .or_else(|| obj.get("shapes"))
            .cloned()
            .filter(|s| !s.is_null()),
        params: obj.get("params").cloned().filter(Value::is_object),
        time_ms,
        method: obj
            .get("benchmark_method")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// Parses a JSON report (a list, `{test_cases: [...]}` or one object).
pub fn parse_report(text: &str, baseline: bool, torch2hip: bool) -> Vec<PerfCase> {
    let Ok(v) = serde_json::from_str::<Value>(text) else {
        return Vec::new();
    };
    let list = match &v {
        Value::Array(a) => a.clone(),
        Value::Object(o) => match o.get("test_cases") {
            Some(Value::Array(a)) => a.clone(),
            _ => vec![v.clone()],
        },
        _ => return Vec::new(),
    };
    list.iter()
        .enumerate()
        .filter_map(|(i, c)| case_of(c, i, baseline, torch2hip))
        .collect()
}

/// Parses stdout: `Test case N: X ms`, else `Performance: X ms` lines, else
/// `GEAK_RESULT_LATENCY_MS=X`.
pub fn parse_stdout(text: &str) -> Vec<PerfCase> {
    let mut out = Vec::new();
    let case = |id: String, t: f64| PerfCase {
        id,
        explicit_id: false,
        shape: None,
        params: None,
        time_ms: t,
        method: None,
    };
    for line in text.lines() {
        let l = line.trim();
        let lower = l.to_ascii_lowercase();
        if let Some(rest) = lower.strip_prefix("test case ")
            && let Some((n, t)) = rest.split_once(':')
            && let Some(ms) = t
                .trim()
                .strip_suffix("ms")
                .and_then(|x| x.trim().parse::<f64>().ok())
        {
            out.push(case(format!("test_case_{}", n.trim()), ms));
        }
    }
    if out.is_empty() {
        for line in text.lines() {
            if let Some(rest) = line.trim().strip_prefix("Performance:")
                && let Some(ms) = rest
                    .trim()
                    .strip_suffix("ms")
                    .and_then(|x| x.trim().parse::<f64>().ok())
            {
                out.push(case(format!("perf_{}", out.len()), ms));
            }
        }
    }
    if out.is_empty()
        && let Some(i) = text.find("GEAK_RESULT_LATENCY_MS=")
    {
        let rest = &text[i + "GEAK_RESULT_LATENCY_MS=".len()..];
        let n: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        if let Ok(ms) = n.parse::<f64>() {
            out.push(case("test_case_0".into(), ms));
        }
    }
    out
}

/// Reads the first report file that has cases, else parses `output`. Returns the cases and
/// the file they came from (`None` for stdout).
pub fn collect(
    workspace: &Path,
    output: &str,
    baseline: bool,
    torch2hip: bool,
) -> (Vec<PerfCase>, Option<PathBuf>) {
    for c in REPORT_CANDIDATES {
        let p = workspace.join(c);
        if let Ok(text) = std::fs::read_to_string(&p) {
            let cases = parse_report(&text, baseline, torch2hip);
            if !cases.is_empty() {
                return (cases, Some(p));
            }
        }
    }
    (parse_stdout(output), None)
}

/// Cases with a positive time.
pub fn valid(cases: &[PerfCase]) -> Vec<PerfCase> {
    cases.iter().filter(|c| c.time_ms > 0.0).cloned().collect()
}

/// Mean of the times.
pub fn mean_time(cases: &[PerfCase]) -> f64 {
    if cases.is_empty() {
        0.0
    } else {
        cases.iter().map(|c| c.time_ms).sum::<f64>() / cases.len() as f64
    }
}

/// Mean per-case speedup `base/opt` over a complete match, else 0.
pub fn speedup(base: &[PerfCase], opt: &[PerfCase]) -> f64 {
    if base.is_empty() || opt.is_empty() {
        return 0.0;
    }
    let mut used_b = vec![false; base.len()];
    let mut used_o = vec![false; opt.len()];
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    type Key = fn(&PerfCase) -> Option<String>;
    let keys: [Key; 3] = [
        |c| c.params.as_ref().map(canonical),
        |c| c.shape.as_ref().map(canonical),
        |c| c.explicit_id.then(|| c.id.clone()),
    ];
    for key in keys {
        for (i, b) in base.iter().enumerate() {
            if used_b[i] {
                continue;
            }
            let Some(kb) = key(b) else { continue };
            if let Some(j) =
                (0..opt.len()).find(|&j| !used_o[j] && key(&opt[j]).as_ref() == Some(&kb))
            {
                used_b[i] = true;
                used_o[j] = true;
                pairs.push((i, j));
            }
        }
    }
    if base.len() == 1 && opt.len() == 1 && pairs.is_empty() {
        pairs.push((0, 0));
    }
    if pairs.len() != base.len() || pairs.len() != opt.len() {
        return 0.0;
    }
    let mut s = 0.0;
    for (i, j) in &pairs {
        let (b, o) = (base[*i].time_ms, opt[*j].time_ms);
        if b <= 0.0 || o <= 0.0 {
            return 0.0;
        }
        s += b / o;
    }
    s / pairs.len() as f64
}

/// JSON with object keys sorted, so `params` compare regardless of key order.
fn canonical(v: &Value) -> String {
    match v {
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .iter()
                .map(|k| format!("{k:?}:{}", canonical(&o[*k])))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_keys_win_and_host_keys_are_rejected() {
        let r = r#"[{"test_case_id":"a","execution_time_ms":2.0,"wall_time_ms":9,"params":{"n":1}},
                    {"test_case_id":"b","wall_time_ms":1.0},
                    {"test_case_id":"c","gpu_time_ms":"0.5","execution_time_ms":3}]"#;
        let c = parse_report(r, false, false);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].time_ms, 2.0);
        assert_eq!(c[1].time_ms, 0.5);
        let t = parse_report(r#"{"ori_time": 4.0, "opt_time": 1.0}"#, true, true);
        assert_eq!(t[0].time_ms, 4.0);
    }

    #[test]
    fn speedup_needs_a_complete_match() {
        let mk = |id: &str, n: i64, t: f64| PerfCase {
            id: id.into(),
            explicit_id: true,
            shape: None,
            params: Some(serde_json::json!({"n": n, "m": 1})),
            time_ms: t,
            method: None,
        };
        let base = vec![mk("x", 1, 2.0), mk("y", 2, 9.0)];
        let opt = vec![mk("q", 2, 3.0), mk("p", 1, 1.0)];
        assert!((speedup(&base, &opt) - 2.5).abs() < 1e-12);
        assert_eq!(speedup(&base, &opt[..1]), 0.0);
        let bad = vec![mk("q", 2, 3.0), mk("p", 1, -1.0)];
        assert_eq!(speedup(&base, &bad), 0.0);
    }

    #[test]
    fn stdout_fallbacks() {
        assert_eq!(
            parse_stdout("Test case 0: 1.5 ms\nTest case 1: 2 ms").len(),
            2
        );
        assert_eq!(parse_stdout("Performance: 3.25 ms")[0].time_ms, 3.25);
        assert_eq!(
            parse_stdout("x GEAK_RESULT_LATENCY_MS=0.146\n")[0].time_ms,
            0.146
        );
        assert!(parse_stdout("nothing").is_empty());
    }
}
