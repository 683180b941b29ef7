//! Two runs side by side: per workload, head latency / base latency with a confidence interval
//! from the recorded spreads.
//!
//! The interval: each median's standard error is estimated from its spread as
//! `1.2533 · σ / √n` with `σ = IQR / 1.349` (the normal-theory standard error of a median, σ
//! from the interquartile range so one slow outlier does not widen it), `n` the timed
//! iterations. On the log scale the ratio's error is `√((se_b/m_b)² + (se_h/m_h)²)` and the
//! interval is `exp(ln r ± z·that)`, z = 1.96 (95 %). This is within-run noise only: run-to-run
//! drift (another process, thermal state) is what `--threshold` is for.
//!
//! A workload is `slower` when the whole interval lies above `1 + threshold`, `faster` when it
//! lies below `1 / (1 + threshold)`, `same` otherwise; `incomparable` (with every reason) when
//! the device, the clock state or the timing method differ, or a side did not pass or is
//! missing. A traced latency without a spread (upstream traces) has no interval: its point
//! ratio decides.

use std::path::PathBuf;

use indexmap::IndexMap;
use kg_contract::{ClockState, Performance, Status, Trace};
use serde::Serialize;

use crate::ReportError;
use crate::load::{Loaded, load_inputs};
use crate::model::timing_str;

/// z for a two-sided 95 % interval.
pub const Z95: f64 = 1.959_964;

/// Which run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// The baseline run.
    Base,
    /// The run under review.
    Head,
}

impl Side {
    /// `base` or `head`.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Base => "base",
            Side::Head => "head",
        }
    }
}

/// The verdict on one workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mark {
    /// Head is faster beyond the threshold, with confidence.
    Faster,
    /// Head is slower beyond the threshold, with confidence: a regression.
    Slower,
    /// No change beyond the threshold that the spreads support.
    Same,
    /// The two latencies cannot be compared (see [`Why`]).
    Incomparable,
}

impl Mark {
    /// The snake_case spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Mark::Faster => "faster",
            Mark::Slower => "slower",
            Mark::Same => "same",
            Mark::Incomparable => "incomparable",
        }
    }
}

/// Why two latencies are incomparable.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Why {
    /// Different devices (`kind:name`).
    Device {
        /// Base device.
        base: String,
        /// Head device.
        head: String,
    },
    /// Different clock states (locked or not, or locked at different clocks).
    Clocks {
        /// Base clocks.
        base: String,
        /// Head clocks.
        head: String,
    },
    /// Different timing methods.
    TimingMethod {
        /// Base method.
        base: String,
        /// Head method.
        head: String,
    },
    /// One side did not pass.
    NotPassed {
        /// Which side.
        side: Side,
        /// Its status.
        status: Status,
    },
    /// One side has no trace of the workload.
    Missing {
        /// Which side lacks it.
        side: Side,
    },
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::Device { base, head } => write!(f, "device differs: base {base}, head {head}"),
            Why::Clocks { base, head } => write!(f, "clocks differ: base {base}, head {head}"),
            Why::TimingMethod { base, head } => {
                write!(f, "timing method differs: base {base}, head {head}")
            }
            Why::NotPassed { side, status } => write!(f, "{} is {status}", side.as_str()),
            Why::Missing { side } => write!(f, "not in {}", side.as_str()),
        }
    }
}

/// One workload compared.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkloadComparison {
    /// Problem key.
    pub problem: String,
    /// Solution.
    pub solution: String,
    /// Workload uuid.
    pub workload: String,
    /// Base median latency (ms).
    pub base_ms: Option<f64>,
    /// Head median latency (ms).
    pub head_ms: Option<f64>,
    /// `head_ms / base_ms`: above 1 is slower.
    pub ratio: Option<f64>,
    /// 95 % interval of the ratio, when both sides recorded spreads.
    pub ci: Option<[f64; 2]>,
    /// The verdict.
    pub mark: Mark,
    /// Why it is incomparable (empty otherwise).
    pub why: Vec<Why>,
}

/// The geomean ratio of one (problem, solution) over its comparable workloads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProblemComparison {
    /// Problem key.
    pub problem: String,
    /// Solution.
    pub solution: String,
    /// Workloads compared (not incomparable).
    pub compared: usize,
    /// Workloads in either run.
    pub workloads: usize,
    /// Geometric mean of the ratios compared.
    pub geomean_ratio: Option<f64>,
    /// Workloads per mark.
    pub marks: IndexMap<Mark, usize>,
}

/// A whole comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The base input(s).
    pub base: Vec<String>,
    /// The head input(s).
    pub head: Vec<String>,
    /// Relative change below which nothing is faster or slower (0.05: 5 %).
    pub threshold: f64,
    /// Confidence of the intervals.
    pub confidence: f64,
    /// Every workload, base order first, then those only in head.
    pub workloads: Vec<WorkloadComparison>,
    /// Per (problem, solution).
    pub problems: Vec<ProblemComparison>,
    /// Workloads marked slower.
    pub regressions: usize,
}

impl Comparison {
    /// Whether any workload is a significant regression beyond the threshold.
    pub fn has_regression(&self) -> bool {
        self.regressions > 0
    }
}

type Key = (String, String, String);

fn index(loaded: Loaded) -> IndexMap<Key, Trace> {
    let mut m = IndexMap::new();
    for e in loaded.entries {
        let k = (
            e.key,
            e.trace.solution.clone().unwrap_or_default(),
            e.trace.workload.uuid.clone(),
        );
        // A later trace of the same workload (a rerun appended) supersedes an earlier one.
        m.insert(k, e.trace);
    }
    m
}

/// The median's standard error from its spread (module docs), when there is one.
fn median_se(p: &Performance) -> Option<f64> {
    let s = p.spread.as_ref()?;
    let n = f64::from(p.iterations?);
    if n < 1.0 {
        return None;
    }
    let iqr = (s.p75_ms - s.p25_ms).max(0.0);
    Some(1.2533 * (iqr / 1.349) / n.sqrt())
}

fn device_of(t: &Trace) -> String {
    t.evaluation
        .as_ref()
        .and_then(|e| e.environment.device.as_ref())
        .map_or_else(|| "unknown".into(), |d| format!("{}:{}", d.kind, d.name))
}

fn clocks_of(c: Option<&ClockState>) -> String {
    match c {
        None => "not recorded".into(),
        Some(c) if !c.locked => "not locked".into(),
        Some(c) => {
            let mhz = |m: Option<u32>| m.map_or_else(|| "?".into(), |m| m.to_string());
            format!(
                "locked SM {} / memory {} MHz",
                mhz(c.sm_mhz),
                mhz(c.mem_mhz)
            )
        }
    }
}

/// Whether two clock states make latencies incomparable: locked against unlocked, or locked at
/// different known clocks. Two unlocked states compare (boost varies within a run too).
fn clocks_differ(a: Option<&ClockState>, b: Option<&ClockState>) -> bool {
    let locked = |c: Option<&ClockState>| c.is_some_and(|c| c.locked);
    if locked(a) != locked(b) {
        return true;
    }
    match (a, b) {
        (Some(a), Some(b)) if a.locked => {
            let differ =
                |x: Option<u32>, y: Option<u32>| matches!((x, y), (Some(x), Some(y)) if x != y);
            differ(a.sm_mhz, b.sm_mhz) || differ(a.mem_mhz, b.mem_mhz)
        }
        _ => false,
    }
}

fn compare_one(
    key: &Key,
    base: Option<&Trace>,
    head: Option<&Trace>,
    threshold: f64,
) -> WorkloadComparison {
    let mut why = Vec::new();
    let perf = |t: Option<&Trace>, side: Side, why: &mut Vec<Why>| -> Option<Performance> {
        let Some(t) = t else {
            why.push(Why::Missing { side });
            return None;
        };
        let e = t.evaluation.as_ref();
        match e.map(|e| e.status) {
            Some(Status::Passed) => e
                .and_then(|e| e.performance.clone())
                .filter(|p| p.latency_ms > 0.0),
            status => {
                why.push(Why::NotPassed {
                    side,
                    status: status.unwrap_or(Status::RuntimeError),
                });
                None
            }
        }
    };
    let bp = perf(base, Side::Base, &mut why);
    let hp = perf(head, Side::Head, &mut why);
    if let (Some(b), Some(h)) = (base, head) {
        let (db, dh) = (device_of(b), device_of(h));
        if db != dh {
            why.push(Why::Device { base: db, head: dh });
        }
        let cb = b
            .evaluation
            .as_ref()
            .and_then(|e| e.environment.clocks.as_ref());
        let ch = h
            .evaluation
            .as_ref()
            .and_then(|e| e.environment.clocks.as_ref());
        if clocks_differ(cb, ch) {
            why.push(Why::Clocks {
                base: clocks_of(cb),
                head: clocks_of(ch),
            });
        }
    }
    if let (Some(b), Some(h)) = (&bp, &hp) {
        let m = |p: &Performance| {
            p.timing_method
                .map_or("not recorded", timing_str)
                .to_string()
        };
        if b.timing_method != h.timing_method {
            why.push(Why::TimingMethod {
                base: m(b),
                head: m(h),
            });
        }
    }
    let base_ms = bp.as_ref().map(|p| p.latency_ms);
    let head_ms = hp.as_ref().map(|p| p.latency_ms);
    let ratio = match (base_ms, head_ms) {
        (Some(b), Some(h)) => Some(h / b),
        _ => None,
    };
    let ci = match (&bp, &hp, ratio) {
        (Some(b), Some(h), Some(r)) => match (median_se(b), median_se(h)) {
            (Some(sb), Some(sh)) => {
                let e = ((sb / b.latency_ms).powi(2) + (sh / h.latency_ms).powi(2)).sqrt();
                Some([r * (-Z95 * e).exp(), r * (Z95 * e).exp()])
            }
            _ => None,
        },
        _ => None,
    };
    let mark = match (why.is_empty(), ratio) {
        (true, Some(r)) => {
            let [lo, hi] = ci.unwrap_or([r, r]);
            if lo > 1.0 + threshold {
                Mark::Slower
            } else if hi < 1.0 / (1.0 + threshold) {
                Mark::Faster
            } else {
                Mark::Same
            }
        }
        _ => Mark::Incomparable,
    };
    WorkloadComparison {
        problem: key.0.clone(),
        solution: key.1.clone(),
        workload: key.2.clone(),
        base_ms,
        head_ms,
        ratio,
        ci,
        mark,
        why,
    }
}

/// Compares two sets of traces already loaded.
pub fn compare_loaded(
    base: Loaded,
    head: Loaded,
    threshold: f64,
) -> (Vec<WorkloadComparison>, Vec<ProblemComparison>) {
    let b = index(base);
    let h = index(head);
    let mut keys: Vec<&Key> = b.keys().collect();
    keys.extend(h.keys().filter(|k| !b.contains_key(*k)));
    let workloads: Vec<WorkloadComparison> = keys
        .into_iter()
        .map(|k| compare_one(k, b.get(k), h.get(k), threshold))
        .collect();
    let mut groups: IndexMap<(String, String), Vec<&WorkloadComparison>> = IndexMap::new();
    for w in &workloads {
        groups
            .entry((w.problem.clone(), w.solution.clone()))
            .or_default()
            .push(w);
    }
    let problems = groups
        .into_iter()
        .map(|((problem, solution), ws)| {
            let ratios: Vec<f64> = ws
                .iter()
                .filter(|w| w.mark != Mark::Incomparable)
                .filter_map(|w| w.ratio)
                .collect();
            let mut marks = IndexMap::new();
            for m in [Mark::Faster, Mark::Slower, Mark::Same, Mark::Incomparable] {
                marks.insert(m, ws.iter().filter(|w| w.mark == m).count());
            }
            ProblemComparison {
                problem,
                solution,
                compared: ratios.len(),
                workloads: ws.len(),
                geomean_ratio: crate::model::geomean_of(&ratios),
                marks,
            }
        })
        .collect();
    (workloads, problems)
}

/// Loads two runs (directories or trace files) and compares them.
pub fn compare(
    base: &[PathBuf],
    head: &[PathBuf],
    threshold: f64,
) -> Result<Comparison, ReportError> {
    let (workloads, problems) = compare_loaded(load_inputs(base)?, load_inputs(head)?, threshold);
    let regressions = workloads.iter().filter(|w| w.mark == Mark::Slower).count();
    let names = |ps: &[PathBuf]| ps.iter().map(|p| p.display().to_string()).collect();
    Ok(Comparison {
        base: names(base),
        head: names(head),
        threshold,
        confidence: 0.95,
        workloads,
        problems,
        regressions,
    })
}

fn ms(x: Option<f64>) -> String {
    x.map_or_else(|| "–".into(), crate::html::sig)
}

fn ratio_text(w: &WorkloadComparison) -> String {
    match (w.ratio, w.ci) {
        (Some(r), Some([lo, hi])) => format!(
            "{}x [{}, {}]",
            crate::html::sig(r),
            crate::html::sig(lo),
            crate::html::sig(hi)
        ),
        (Some(r), None) => format!("{}x (no spread)", crate::html::sig(r)),
        _ => "–".into(),
    }
}

fn note(w: &WorkloadComparison) -> String {
    w.why
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A fraction as a percentage without trailing zeros: 0.05 → `5`.
fn pct(x: f64) -> String {
    format!("{}", (x * 1e5).round() / 1e3)
}

/// A Markdown table cell: pipes and line breaks would end the cell or the row.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', " ")
}

fn short(uuid: &str) -> String {
    uuid.chars().take(13).collect()
}

impl Comparison {
    fn headline(&self) -> String {
        let count = |m: Mark| self.workloads.iter().filter(|w| w.mark == m).count();
        format!(
            "{} workload(s): {} slower, {} faster, {} same, {} incomparable (threshold {}%, {}% intervals from the recorded spreads)",
            self.workloads.len(),
            count(Mark::Slower),
            count(Mark::Faster),
            count(Mark::Same),
            count(Mark::Incomparable),
            pct(self.threshold),
            pct(self.confidence)
        )
    }

    /// A Markdown comment for a pull request: the headline, every workload that is not
    /// `same` (all of them when every one is), and the geomean per problem.
    pub fn to_markdown(&self) -> String {
        let mut s = String::new();
        let verdict = if self.has_regression() {
            format!("**{} significant regression(s)**", self.regressions)
        } else {
            "no significant regression".to_string()
        };
        s.push_str(&format!(
            "### kernelgate compare: {verdict}\n\n{}.\n\nbase: `{}`; head: `{}`\n\n",
            self.headline(),
            self.base.join("`, `"),
            self.head.join("`, `")
        ));
        let notable: Vec<&WorkloadComparison> = self
            .workloads
            .iter()
            .filter(|w| w.mark != Mark::Same)
            .collect();
        if !notable.is_empty() {
            s.push_str("| problem | solution | workload | base ms | head ms | head/base [95% CI] | mark | note |\n|---|---|---|---:|---:|---|---|---|\n");
            for w in notable {
                s.push_str(&format!(
                    "| {} | {} | `{}` | {} | {} | {} | {} | {} |\n",
                    cell(&w.problem),
                    cell(&w.solution),
                    short(&w.workload),
                    ms(w.base_ms),
                    ms(w.head_ms),
                    ratio_text(w),
                    if w.mark == Mark::Slower {
                        "**slower**"
                    } else {
                        w.mark.as_str()
                    },
                    cell(&note(w))
                ));
            }
            s.push('\n');
        }
        s.push_str("| problem | solution | compared | geomean head/base |\n|---|---|---:|---:|\n");
        for p in &self.problems {
            s.push_str(&format!(
                "| {} | {} | {}/{} | {} |\n",
                cell(&p.problem),
                cell(&p.solution),
                p.compared,
                p.workloads,
                p.geomean_ratio
                    .map_or_else(|| "–".into(), |g| format!("{}x", crate::html::sig(g)))
            ));
        }
        s
    }

    /// A plain-text table for a terminal: every workload, then the geomeans.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for w in &self.workloads {
            s.push_str(&format!(
                "{:<12} {} / {} / {}  base {} ms  head {} ms  {}{}\n",
                w.mark.as_str(),
                w.problem,
                w.solution,
                short(&w.workload),
                ms(w.base_ms),
                ms(w.head_ms),
                ratio_text(w),
                if w.why.is_empty() {
                    String::new()
                } else {
                    format!("  ({})", note(w))
                }
            ));
        }
        for p in &self.problems {
            s.push_str(&format!(
                "geomean {} / {}: {} over {} of {} workload(s)\n",
                p.problem,
                p.solution,
                p.geomean_ratio
                    .map_or_else(|| "–".into(), |g| format!("{}x", crate::html::sig(g))),
                p.compared,
                p.workloads
            ));
        }
        s.push_str(&self.headline());
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::load::Entry;

    /// A PASSED trace with a latency of `ms` and an IQR of ±`rel` around it.
    fn passed(uuid: &str, ms: f64, rel: f64) -> serde_json::Value {
        serde_json::json!({
            "definition": "d",
            "solution": "s",
            "workload": {"uuid": uuid, "axes": {}, "inputs": {}, "tolerance": {"max_atol": 0.01, "max_rtol": 0.01}},
            "evaluation": {
                "status": "PASSED",
                "correctness": {},
                "performance": {
                    "latency_ms": ms, "reference_latency_ms": 1.0, "speedup_factor": 1.0 / ms,
                    "timing_method": "cupti", "iterations": 50,
                    "spread": {"min_ms": ms * (1.0 - 2.0 * rel), "p25_ms": ms * (1.0 - rel), "median_ms": ms,
                               "p75_ms": ms * (1.0 + rel), "max_ms": ms * (1.0 + 2.0 * rel), "mean_ms": ms}
                },
                "environment": {"hardware": "NVIDIA_H200", "device": {"kind": "cuda", "name": "NVIDIA H200"},
                                "clocks": {"locked": true, "sm_mhz": 1980}}
            }
        })
    }

    fn loaded(vals: Vec<serde_json::Value>) -> Loaded {
        Loaded {
            entries: vals
                .into_iter()
                .enumerate()
                .map(|(i, v)| Entry {
                    key: "p".into(),
                    file: "t.jsonl".into(),
                    line: i + 1,
                    trace: serde_json::from_value(v).unwrap(),
                })
                .collect(),
            ..Loaded::default()
        }
    }

    #[test]
    fn a_planted_2x_slowdown_is_the_only_mark_that_is_not_same() {
        let base = loaded(vec![
            passed("a", 1.0, 0.05),
            passed("b", 0.5, 0.05),
            passed("c", 2.0, 0.05),
        ]);
        let head = loaded(vec![
            passed("a", 1.01, 0.05),
            passed("b", 1.0, 0.05),
            passed("c", 1.98, 0.05),
        ]);
        let (ws, ps) = compare_loaded(base, head, 0.05);
        let marks: Vec<Mark> = ws.iter().map(|w| w.mark).collect();
        assert_eq!(marks, [Mark::Same, Mark::Slower, Mark::Same]);
        let [lo, hi] = ws[1].ci.unwrap();
        assert!(lo > 1.05 && lo < 2.0 && hi > 2.0, "{lo} {hi}");
        assert_eq!(ps.len(), 1);
        let g = ps[0].geomean_ratio.unwrap();
        assert!((g - (1.01f64 * 2.0 * 0.99).cbrt()).abs() < 1e-12);
    }

    #[test]
    fn a_wide_spread_keeps_a_large_ratio_from_being_significant() {
        let (ws, _) = compare_loaded(
            loaded(vec![passed("a", 1.0, 0.8)]),
            loaded(vec![passed("a", 1.5, 0.8)]),
            0.05,
        );
        assert_eq!(ws[0].mark, Mark::Same);
        let (ws, _) = compare_loaded(
            loaded(vec![passed("a", 1.0, 0.01)]),
            loaded(vec![passed("a", 0.7, 0.01)]),
            0.05,
        );
        assert_eq!(ws[0].mark, Mark::Faster);
    }

    #[test]
    fn without_a_spread_the_point_ratio_decides() {
        let mut h = passed("a", 1.2, 0.0);
        h["evaluation"]["performance"]["spread"] = serde_json::Value::Null;
        let (ws, _) = compare_loaded(loaded(vec![passed("a", 1.0, 0.01)]), loaded(vec![h]), 0.05);
        assert_eq!((ws[0].mark, ws[0].ci), (Mark::Slower, None));
    }

    #[test]
    fn incomparable_says_which_fact_differs() {
        let mut h = passed("a", 1.0, 0.01);
        h["evaluation"]["environment"]["device"]["name"] = "NVIDIA H100".into();
        h["evaluation"]["environment"]["clocks"] = serde_json::json!({"locked": false});
        h["evaluation"]["performance"]["timing_method"] = "device_event_sync".into();
        let mut failed = passed("b", 1.0, 0.01);
        failed["evaluation"]["status"] = "TIMEOUT".into();
        failed["evaluation"]["performance"] = serde_json::Value::Null;
        failed["evaluation"]["correctness"] = serde_json::Value::Null;
        let base = loaded(vec![
            passed("a", 1.0, 0.01),
            passed("b", 1.0, 0.01),
            passed("c", 1.0, 0.01),
        ]);
        let (ws, _) = compare_loaded(base, loaded(vec![h, failed]), 0.05);
        assert!(ws.iter().all(|w| w.mark == Mark::Incomparable));
        assert_eq!(
            ws[0].why,
            [
                Why::Device {
                    base: "cuda:NVIDIA H200".into(),
                    head: "cuda:NVIDIA H100".into()
                },
                Why::Clocks {
                    base: "locked SM 1980 / memory ? MHz".into(),
                    head: "not locked".into()
                },
                Why::TimingMethod {
                    base: "cupti".into(),
                    head: "device_event_sync".into()
                },
            ]
        );
        assert_eq!(
            ws[1].why,
            [Why::NotPassed {
                side: Side::Head,
                status: Status::Timeout
            }]
        );
        assert_eq!(ws[2].why, [Why::Missing { side: Side::Head }]);
        let j = serde_json::to_value(&ws[1]).unwrap();
        assert_eq!(
            j["why"][0],
            serde_json::json!({"kind": "not_passed", "side": "head", "status": "TIMEOUT"})
        );
    }

    #[test]
    fn markdown_cells_cannot_break_the_table() {
        assert_eq!(cell("a|b\nc"), "a\\|b c");
    }

    #[test]
    fn locked_clocks_at_different_frequencies_do_not_compare() {
        let mut h = passed("a", 1.0, 0.01);
        h["evaluation"]["environment"]["clocks"]["sm_mhz"] = 1500.into();
        let (ws, _) = compare_loaded(loaded(vec![passed("a", 1.0, 0.01)]), loaded(vec![h]), 0.05);
        assert!(
            matches!(ws[0].why[..], [Why::Clocks { .. }]),
            "{:?}",
            ws[0].why
        );
    }
}
