//! `heldout_task_result.yaml` and `heldout_summary.yaml`: AgentKernelArena's fields, plus
//! kernelgate's additions (an `error` status kept out of the quadrants, a speedup retention
//! ratio, a 95 % Wilson interval for conditional correctness, the benchmark methods).

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::speedup::{RatioInterval, RetentionCall, SpeedupCall, SpeedupInterval};

/// The four generalization quadrants, in AKA's order.
pub const QUADRANTS: [&str; 4] = [
    "both_pass",
    "opt_regression",
    "both_fail",
    "opt_improvement",
];

/// Status of a task that could not be evaluated (injection failed, a command could not start).
pub const ERROR_STATUS: &str = "error";

/// Why a task has status `error` (kernelgate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The task could not be set up or started: its held-out file, canonical directory,
    /// configuration or injection, or a command that could not start.
    Setup,
    /// The device was unusable after the task ran, so its failures say nothing about the kernel.
    DeviceUnusable,
    /// Not run: the device had become unusable during an earlier task.
    NotRun,
}

/// Whether a held-out speedup was measured (kernelgate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpeedupStatus {
    /// `both_pass` and every case of the two sides matched with a time > 0.
    Measured,
    /// `both_pass`, but no valid case-by-case timing (`speedup_ratio` 0 is not a measurement).
    NoValidTiming,
    /// Not `both_pass`: no speedup is compared.
    NotApplicable,
}

/// How one side's command failed (kernelgate).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SideFailure {
    /// `compile`, `correctness` or `baseline` (torch2hip's PyTorch baseline).
    pub phase: String,
    /// The command as configured.
    pub command: String,
    /// Its exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// That signal's name (`SIGSEGV`).
    pub signal_name: Option<String>,
    /// Whether the timeout ended it.
    pub timed_out: bool,
    /// Exit 0, but its output reported a failure (`fail` without `pass`).
    pub reported_failure: bool,
}

/// Which kernel a performance run timed (kernelgate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PerfSide {
    /// The original kernel (torch2hip: the PyTorch baseline).
    Orig,
    /// The optimised kernel.
    Opt,
}

/// One run of a side's performance commands, in the order the runs happened (kernelgate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerfRunRecord {
    /// Which side.
    pub side: PerfSide,
    /// 1-based repeat of that side.
    pub repeat: usize,
    /// Cases with a time > 0.
    pub valid_cases: usize,
    /// Mean time over those cases, ms (0 when none).
    pub mean_time_ms: f64,
    /// The command logs of this run, relative to the task's output directory.
    pub logs: Vec<String>,
    /// Why the run has no valid case (null when it has one).
    pub note: Option<String>,
}

/// Where the tasks were run (kernelgate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceMode {
    /// The interpreter's torch saw a CUDA/HIP device (checked before and, after failures,
    /// again).
    Gpu,
    /// `--device cpu`: tasks known to run on the CPU; no device was checked.
    Cpu,
}

/// The device a task ran on (kernelgate).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// GPU or CPU.
    pub mode: DeviceMode,
    /// Device 0 as the interpreter's torch names it (GPU only).
    pub name: Option<String>,
    /// The interpreter's torch version (GPU only).
    pub torch: Option<String>,
}

/// One task's held-out result (`heldout_task_result.yaml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldoutTaskResult {
    /// Task id, e.g. `triton2triton/vllm/triton_add`.
    pub task_name: String,
    /// Always true.
    pub heldout: bool,
    /// Optimised kernel compiled on the held-out shapes.
    pub opt_pass_compilation: bool,
    /// Optimised kernel correct on the held-out shapes.
    pub opt_pass_correctness: bool,
    /// Mean optimised time over valid cases, ms (0 when not measured).
    pub opt_execution_time: f64,
    /// Original kernel compiled on the held-out shapes.
    pub orig_heldout_pass_compilation: bool,
    /// Original kernel correct on the held-out shapes.
    pub orig_heldout_pass_correctness: bool,
    /// Mean original time over valid cases, ms (0 when not measured).
    pub orig_heldout_execution_time: f64,
    /// `both_pass`, `opt_regression`, `both_fail`, `opt_improvement`, or `error`.
    pub generalization_status: String,
    /// Mean per-case orig/opt speedup on held-out shapes (both_pass only; 0 otherwise).
    pub speedup_ratio: f64,
    /// AKA's score: 0 compile fail, 20 correctness fail, else 120 + 100 × speedup.
    pub score: f64,
    /// From the run's `task_result.yaml`.
    pub original_run_pass_correctness: bool,
    /// From the run's `task_result.yaml`.
    pub original_run_speedup_ratio: f64,
    /// From the run's `task_result.yaml`.
    pub original_run_score: f64,
    /// Why a side failed or why the task could not be evaluated.
    pub error: Option<String>,
    /// kernelgate: `speedup_ratio / original_run_speedup_ratio` (null when either is ≤ 0).
    #[serde(default)]
    pub speedup_retention: Option<f64>,
    /// kernelgate: `benchmark_method` values seen in the original side's performance report.
    #[serde(default)]
    pub orig_benchmark_methods: Vec<String>,
    /// kernelgate: `benchmark_method` values seen in the optimised side's performance report.
    #[serde(default)]
    pub opt_benchmark_methods: Vec<String>,
    /// kernelgate: why the status is `error` (null otherwise).
    #[serde(default)]
    pub error_kind: Option<ErrorKind>,
    /// kernelgate: whether `speedup_ratio` is a measurement (null in files of older versions).
    #[serde(default)]
    pub speedup_status: Option<SpeedupStatus>,
    /// kernelgate: how the original side's compile, correctness or baseline command failed.
    #[serde(default)]
    pub orig_failure: Option<SideFailure>,
    /// kernelgate: how the optimised side's compile or correctness command failed.
    #[serde(default)]
    pub opt_failure: Option<SideFailure>,
    /// kernelgate: where the task ran (null when it did not run).
    #[serde(default)]
    pub device: Option<DeviceInfo>,
    /// kernelgate: runs per side that were asked for (null when no performance ran).
    #[serde(default)]
    pub perf_repeats: Option<usize>,
    /// kernelgate: every performance run in the order it ran (orig, opt, orig, opt, …).
    #[serde(default)]
    pub perf_runs: Vec<PerfRunRecord>,
    /// kernelgate: the interval of `speedup_ratio` over the repeats (null unless measured).
    #[serde(default)]
    pub speedup_interval: Option<SpeedupInterval>,
    /// kernelgate: `gain`, `loss`, or `not_called` when the interval contains 1.0.
    #[serde(default)]
    pub speedup_call: Option<SpeedupCall>,
    /// kernelgate: `speedup_interval` ÷ `original_run_speedup_ratio`.
    #[serde(default)]
    pub retention_interval: Option<RatioInterval>,
    /// kernelgate: `lower`, `higher`, or `not_called` when `retention_interval` contains 1.0.
    #[serde(default)]
    pub retention_call: Option<RetentionCall>,
}

/// `{description, count, mean, median, std}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    /// What the numbers are.
    pub description: String,
    /// How many values.
    pub count: usize,
    /// Mean (0 when empty), rounded to 4 places.
    pub mean: f64,
    /// Median, rounded to 4 places.
    pub median: f64,
    /// Sample standard deviation (0 for fewer than 2), rounded to 4 places.
    pub std: f64,
}

/// A confidence interval in percent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// How it was computed.
    pub method: String,
    /// Lower bound, %.
    pub low_pct: f64,
    /// Upper bound, %.
    pub high_pct: f64,
}

/// P(opt correct | orig correct).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConditionalCorrectness {
    /// What the rate is.
    pub description: String,
    /// Tasks whose original kernel passed on held-out shapes.
    pub orig_correct_count: usize,
    /// Of those, tasks whose optimised kernel passed too.
    pub opt_also_correct_count: usize,
    /// `round(100 × opt_also / orig_correct, 1)`, 0 when no original passed.
    pub rate_pct: f64,
    /// kernelgate: 95 % Wilson score interval of the rate (null when no original passed).
    pub ci95: Option<Interval>,
}

/// AKA's generalization gap.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GeneralizationGap {
    /// Equals `conditional_correctness.rate_pct`.
    pub correctness_retention_pct: f64,
    /// `mean(held-out speedups) − mean(original-run speedups)`.
    pub speedup_mean_delta: f64,
}

/// kernelgate: held-out mean speedup ÷ original-run mean speedup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeedupRetention {
    /// What the ratio is.
    pub description: String,
    /// The ratio (null when the original-run mean is 0).
    pub ratio: Option<f64>,
}

/// One row of `per_task`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerTask {
    /// Task id.
    pub task_name: String,
    /// Status.
    pub generalization_status: String,
    /// Original correct on held-out shapes.
    pub orig_heldout_correct: bool,
    /// Optimised correct on held-out shapes.
    pub opt_heldout_correct: bool,
    /// Held-out speedup.
    pub heldout_speedup: f64,
    /// kernelgate: whether the held-out speedup is a measurement.
    #[serde(default)]
    pub speedup_status: Option<SpeedupStatus>,
    /// kernelgate: the held-out speedup's interval over the repeats.
    #[serde(default)]
    pub speedup_interval: Option<SpeedupInterval>,
    /// kernelgate: what that interval allows one to say.
    #[serde(default)]
    pub speedup_call: Option<SpeedupCall>,
    /// Original-run speedup.
    pub original_run_speedup: f64,
    /// Held-out minus original-run speedup.
    pub speedup_delta: f64,
    /// kernelgate: held-out ÷ original-run speedup (null when either is ≤ 0).
    pub speedup_retention: Option<f64>,
    /// kernelgate: what the retention interval allows one to say.
    #[serde(default)]
    pub retention_call: Option<RetentionCall>,
    /// Held-out score.
    pub heldout_score: f64,
    /// Original-run score.
    pub original_run_score: f64,
    /// Error or failure reason.
    pub error: Option<String>,
    /// kernelgate: why the status is `error`.
    #[serde(default)]
    pub error_kind: Option<ErrorKind>,
}

/// `heldout_summary.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldoutSummary {
    /// Tasks evaluated (including errored ones).
    pub total_tasks: usize,
    /// Counts of the four quadrants.
    pub quadrant_counts: IndexMap<String, usize>,
    /// kernelgate: tasks with status `error` (not in any quadrant).
    pub errored_tasks: usize,
    /// kernelgate: `both_pass` tasks without a valid timing (in no speedup statistic).
    #[serde(default)]
    pub both_pass_without_timing: usize,
    /// kernelgate: measured tasks by `speedup_call` (`gain`, `loss`, `not_called`).
    #[serde(default)]
    pub speedup_calls: IndexMap<String, usize>,
    /// kernelgate: measured tasks by `retention_call` (`lower`, `higher`, `not_called`).
    #[serde(default)]
    pub retention_calls: IndexMap<String, usize>,
    /// kernelgate: tasks whose entries an earlier evaluation wrote (a `--tasks` re-run keeps
    /// them from the output directory).
    #[serde(default)]
    pub carried_over: Vec<String>,
    /// P(opt correct | orig correct).
    pub conditional_correctness: ConditionalCorrectness,
    /// Held-out speedups of both_pass tasks with speedup > 0.
    pub heldout_speedup_stats: Stats,
    /// Original-run speedups of both_pass tasks with speedup > 0.
    pub original_run_speedup_stats: Stats,
    /// The gap.
    pub generalization_gap: GeneralizationGap,
    /// kernelgate: ratio form of the speedup gap.
    pub speedup_retention: SpeedupRetention,
    /// Per task.
    pub per_task: Vec<PerTask>,
}

/// Rounds to `places` decimals.
pub fn round(x: f64, places: i32) -> f64 {
    let m = 10f64.powi(places);
    (x * m).round() / m
}

fn stats(description: &str, v: &[f64]) -> Stats {
    if v.is_empty() {
        return Stats {
            description: description.into(),
            count: 0,
            mean: 0.0,
            median: 0.0,
            std: 0.0,
        };
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let median = if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    let std = if v.len() > 1 {
        (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        0.0
    };
    Stats {
        description: description.into(),
        count: v.len(),
        mean: round(mean, 4),
        median: round(median, 4),
        std: round(std, 4),
    }
}

/// 95 % Wilson score interval for `k` successes out of `n`, in percent.
pub fn wilson95(k: usize, n: usize) -> Option<Interval> {
    if n == 0 {
        return None;
    }
    let z = 1.959_963_984_540_054_f64;
    let n_f = n as f64;
    let p = k as f64 / n_f;
    let denom = 1.0 + z * z / n_f;
    let center = (p + z * z / (2.0 * n_f)) / denom;
    let half = z * (p * (1.0 - p) / n_f + z * z / (4.0 * n_f * n_f)).sqrt() / denom;
    Some(Interval {
        method: "wilson".into(),
        low_pct: round(100.0 * (center - half).max(0.0), 1),
        high_pct: round(100.0 * (center + half).min(1.0), 1),
    })
}

/// `a / b` when both are > 0.
pub fn retention(heldout: f64, original: f64) -> Option<f64> {
    (heldout > 0.0 && original > 0.0).then(|| round(heldout / original, 4))
}

/// Builds the summary from the per-task results.
pub fn summarize(results: &[HeldoutTaskResult]) -> HeldoutSummary {
    let mut quadrant_counts: IndexMap<String, usize> =
        QUADRANTS.iter().map(|q| (q.to_string(), 0)).collect();
    let mut errored = 0;
    for r in results {
        match quadrant_counts.get_mut(&r.generalization_status) {
            Some(c) => *c += 1,
            None => errored += 1,
        }
    }
    let evaluated: Vec<&HeldoutTaskResult> = results
        .iter()
        .filter(|r| r.generalization_status != ERROR_STATUS)
        .collect();
    let orig_ok: Vec<&&HeldoutTaskResult> = evaluated
        .iter()
        .filter(|r| r.orig_heldout_pass_correctness)
        .collect();
    let both = orig_ok.iter().filter(|r| r.opt_pass_correctness).count();
    let rate = if orig_ok.is_empty() {
        0.0
    } else {
        round(both as f64 / orig_ok.len() as f64 * 100.0, 1)
    };
    let both_pass: Vec<&&HeldoutTaskResult> = evaluated
        .iter()
        .filter(|r| r.generalization_status == "both_pass")
        .collect();
    let held: Vec<f64> = both_pass
        .iter()
        .map(|r| r.speedup_ratio)
        .filter(|s| *s > 0.0)
        .collect();
    // Over the same tasks as `held`: a both_pass task without a held-out timing would otherwise
    // count on one side of the gap only and show as a loss that was never measured.
    let orig: Vec<f64> = both_pass
        .iter()
        .filter(|r| r.speedup_ratio > 0.0)
        .map(|r| r.original_run_speedup_ratio)
        .filter(|s| *s > 0.0)
        .collect();
    let hs = stats("Speedup on held-out shapes (both_pass tasks only)", &held);
    let os = stats(
        "Speedup from original run (both_pass tasks with a held-out speedup, for reference)",
        &orig,
    );
    let per_task = results
        .iter()
        .map(|r| PerTask {
            task_name: r.task_name.clone(),
            generalization_status: r.generalization_status.clone(),
            orig_heldout_correct: r.orig_heldout_pass_correctness,
            opt_heldout_correct: r.opt_pass_correctness,
            heldout_speedup: round(r.speedup_ratio, 4),
            speedup_status: r.speedup_status,
            speedup_interval: r.speedup_interval.clone(),
            speedup_call: r.speedup_call,
            original_run_speedup: round(r.original_run_speedup_ratio, 4),
            speedup_delta: round(r.speedup_ratio - r.original_run_speedup_ratio, 4),
            speedup_retention: retention(r.speedup_ratio, r.original_run_speedup_ratio),
            retention_call: r.retention_call,
            heldout_score: round(r.score, 2),
            original_run_score: round(r.original_run_score, 2),
            error: r.error.clone(),
            error_kind: r.error_kind,
        })
        .collect();
    HeldoutSummary {
        total_tasks: results.len(),
        quadrant_counts,
        errored_tasks: errored,
        both_pass_without_timing: both_pass
            .iter()
            .filter(|r| r.speedup_status == Some(SpeedupStatus::NoValidTiming))
            .count(),
        speedup_calls: calls(
            &SpeedupCall::NAMES,
            results.iter().map(|r| r.speedup_call.map(|c| c.name())),
        ),
        retention_calls: calls(
            &RetentionCall::NAMES,
            results.iter().map(|r| r.retention_call.map(|c| c.name())),
        ),
        carried_over: Vec::new(),
        conditional_correctness: ConditionalCorrectness {
            description: "P(opt correct on held-out | orig correct on held-out)".into(),
            orig_correct_count: orig_ok.len(),
            opt_also_correct_count: both,
            rate_pct: rate,
            ci95: wilson95(both, orig_ok.len()),
        },
        generalization_gap: GeneralizationGap {
            correctness_retention_pct: rate,
            speedup_mean_delta: round(hs.mean - os.mean, 4),
        },
        speedup_retention: SpeedupRetention {
            description: "held-out mean speedup / original-run mean speedup (both_pass tasks)"
                .into(),
            ratio: retention(hs.mean, os.mean),
        },
        heldout_speedup_stats: hs,
        original_run_speedup_stats: os,
        per_task,
    }
}

/// Counts per call name, every name present (in `names` order).
fn calls<'a>(
    names: &[&'static str],
    values: impl Iterator<Item = Option<&'a str>>,
) -> IndexMap<String, usize> {
    let mut out: IndexMap<String, usize> = names.iter().map(|n| (n.to_string(), 0)).collect();
    for name in values.flatten() {
        if let Some(c) = out.get_mut(name) {
            *c += 1;
        }
    }
    out
}

/// AKA's score.
pub fn score(
    pass_compilation: bool,
    pass_correctness: bool,
    speedup: f64,
    base_ms: f64,
    opt_ms: f64,
) -> f64 {
    if !pass_compilation {
        return 0.0;
    }
    if !pass_correctness {
        return 20.0;
    }
    let s = if speedup > 0.0 {
        speedup
    } else if base_ms > 0.0 && opt_ms > 0.0 {
        base_ms / opt_ms
    } else {
        0.0
    };
    120.0 + 100.0 * s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(status: &str, orig: bool, opt: bool, s: f64, o: f64) -> HeldoutTaskResult {
        HeldoutTaskResult {
            task_name: status.into(),
            heldout: true,
            opt_pass_compilation: true,
            opt_pass_correctness: opt,
            opt_execution_time: 0.0,
            orig_heldout_pass_compilation: true,
            orig_heldout_pass_correctness: orig,
            orig_heldout_execution_time: 0.0,
            generalization_status: status.into(),
            speedup_ratio: s,
            score: 0.0,
            original_run_pass_correctness: true,
            original_run_speedup_ratio: o,
            original_run_score: 0.0,
            error: None,
            speedup_retention: None,
            orig_benchmark_methods: vec![],
            opt_benchmark_methods: vec![],
            error_kind: None,
            speedup_status: None,
            orig_failure: None,
            opt_failure: None,
            device: None,
            perf_repeats: None,
            perf_runs: vec![],
            speedup_interval: None,
            speedup_call: None,
            retention_interval: None,
            retention_call: None,
        }
    }

    #[test]
    fn summary_numbers() {
        let rs = vec![
            r("both_pass", true, true, 1.2, 1.5),
            r("both_pass", true, true, 0.8, 1.0),
            r("opt_regression", true, false, 0.0, 2.0),
            r("both_fail", false, false, 0.0, 1.1),
            r("error", false, false, 0.0, 1.0),
        ];
        let s = summarize(&rs);
        assert_eq!(s.total_tasks, 5);
        assert_eq!(s.errored_tasks, 1);
        assert_eq!(s.quadrant_counts["both_pass"], 2);
        assert_eq!(s.quadrant_counts["opt_improvement"], 0);
        assert_eq!(s.conditional_correctness.orig_correct_count, 3);
        assert_eq!(s.conditional_correctness.opt_also_correct_count, 2);
        assert_eq!(s.conditional_correctness.rate_pct, 66.7);
        let ci = s.conditional_correctness.ci95.unwrap();
        assert_eq!((ci.low_pct, ci.high_pct), (20.8, 93.9));
        assert_eq!(s.heldout_speedup_stats.mean, 1.0);
        assert_eq!(s.heldout_speedup_stats.std, 0.2828);
        assert_eq!(s.original_run_speedup_stats.mean, 1.25);
        assert_eq!(s.generalization_gap.speedup_mean_delta, -0.25);
        assert_eq!(s.speedup_retention.ratio, Some(0.8));
        assert_eq!(s.per_task[0].speedup_retention, Some(0.8));
        assert_eq!(s.per_task[2].speedup_retention, None);
    }

    /// A both_pass task without a valid timing is counted as such and is in neither speedup
    /// statistic, so the gap compares the same tasks.
    #[test]
    fn both_pass_without_timing_is_in_no_speedup_statistic() {
        let mut untimed = r("both_pass", true, true, 0.0, 3.0);
        untimed.speedup_status = Some(SpeedupStatus::NoValidTiming);
        let mut timed = r("both_pass", true, true, 1.2, 1.5);
        timed.speedup_status = Some(SpeedupStatus::Measured);
        let s = summarize(&[timed, untimed]);
        assert_eq!(s.quadrant_counts["both_pass"], 2);
        assert_eq!(s.both_pass_without_timing, 1);
        assert_eq!(s.heldout_speedup_stats.count, 1);
        assert_eq!(s.original_run_speedup_stats.count, 1);
        assert_eq!(s.original_run_speedup_stats.mean, 1.5);
        assert_eq!(s.generalization_gap.speedup_mean_delta, -0.3);
        assert_eq!(s.speedup_retention.ratio, Some(0.8));
        assert_eq!(
            s.per_task[1].speedup_status,
            Some(SpeedupStatus::NoValidTiming)
        );
    }

    #[test]
    fn wilson_edges() {
        assert!(wilson95(0, 0).is_none());
        let all = wilson95(5, 5).unwrap();
        assert_eq!(all.high_pct, 100.0);
        assert!(all.low_pct > 50.0 && all.low_pct < 60.0);
    }

    #[test]
    fn aka_score() {
        assert_eq!(score(false, true, 2.0, 1.0, 1.0), 0.0);
        assert_eq!(score(true, false, 2.0, 1.0, 1.0), 20.0);
        assert_eq!(score(true, true, 1.5, 0.0, 0.0), 270.0);
        assert_eq!(score(true, true, 0.0, 2.0, 1.0), 320.0);
    }
}
