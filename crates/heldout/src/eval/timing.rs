//! Timing of a task's correct sides: each side's performance commands run repeatedly,
//! interleaved orig, opt, orig, opt, …, every run recorded; then each side's median time and,
//! when both sides pass, the speedup with its interval and call.

use crate::perf::{self, PerfCase};
use crate::speedup;
use crate::summary::{HeldoutTaskResult, PerfRunRecord, PerfSide, SpeedupStatus};

use super::commands::performance;
use super::task::TaskRun;

/// Runs the performance commands of the correct sides, interleaved orig, opt, orig, opt, …
/// so that drift (clocks, temperature, other tenants) falls on both sides alike; every run is
/// recorded in `r` in the order it ran. Returns the runs and, when a run gave no valid case,
/// why (`gap`; the repeats then stop).
pub(super) fn time_sides(
    t: &TaskRun<'_>,
    orig_correct: bool,
    opt_correct: bool,
    r: &mut HeldoutTaskResult,
) -> Result<(SideRuns, Vec<String>), String> {
    let mut runs = SideRuns::default();
    let mut gap: Vec<String> = Vec::new();
    // A side whose counterpart failed is compared with nothing: one run gives its time.
    let repeats = if orig_correct && opt_correct {
        t.opts.perf_repeats
    } else {
        1
    };
    if orig_correct || opt_correct {
        r.perf_repeats = Some(repeats);
    }
    for rep in 1..=repeats {
        for (which, correct) in [(PerfSide::Orig, orig_correct), (PerfSide::Opt, opt_correct)] {
            if !correct {
                continue;
            }
            let (side, label) = match which {
                // torch2hip's original is the PyTorch module, timed in opt/ (AKA's flow).
                PerfSide::Orig if t.torch2hip => (&t.opt, format!("orig_baseline_rep{rep}")),
                PerfSide::Orig => (&t.orig, format!("orig_performance_rep{rep}")),
                PerfSide::Opt => (&t.opt, format!("opt_performance_rep{rep}")),
            };
            let run = performance(
                t.opts,
                side,
                &t.cfg,
                which == PerfSide::Orig,
                t.torch2hip,
                &label,
            )?;
            let cases = perf::valid(&run.cases);
            let note = cases.is_empty().then(|| run.note());
            if let Some(n) = &note {
                gap.push(format!(
                    "the {} side has no valid performance case in run {rep} of {repeats} ({n})",
                    side_word(which),
                ));
            }
            r.perf_runs.push(PerfRunRecord {
                side: which,
                repeat: rep,
                valid_cases: cases.len(),
                mean_time_ms: perf::mean_time(&cases),
                logs: run.logs.clone(),
                note,
            });
            runs.add(which, cases, run.methods);
        }
        // Fail closed: a run without a valid case leaves no complete set to compare, and
        // more runs would only spend device time.
        if !gap.is_empty() {
            break;
        }
    }
    Ok((runs, gap))
}

/// Each correct side's median time and benchmark methods.
pub(super) fn record_times(
    runs: &SideRuns,
    orig_correct: bool,
    opt_correct: bool,
    r: &mut HeldoutTaskResult,
) {
    if orig_correct {
        if !runs.orig.is_empty() {
            r.orig_heldout_execution_time = runs.median_time(PerfSide::Orig);
        }
        r.orig_benchmark_methods = merged(&r.orig_benchmark_methods, &runs.orig_methods);
    }
    if opt_correct {
        r.opt_execution_time = runs.median_time(PerfSide::Opt);
        r.opt_benchmark_methods = runs.opt_methods.clone();
    }
}

/// Both sides passed: the speedup with its interval and call, and the retention call; with a
/// `gap` or no estimate, no valid timing.
pub(super) fn call_speedup(
    runs: &SideRuns,
    gap: &[String],
    confidence: f64,
    r: &mut HeldoutTaskResult,
) {
    let estimate = if gap.is_empty() {
        speedup::estimate(&runs.orig, &runs.opt, confidence).map_err(|e| e.to_string())
    } else {
        Err(gap.join("; "))
    };
    match estimate {
        Ok(e) => {
            r.speedup_ratio = e.speedup;
            r.speedup_status = Some(SpeedupStatus::Measured);
            if let Some((interval, call)) =
                speedup::retention(&e.interval, r.original_run_speedup_ratio)
            {
                r.retention_interval = Some(interval);
                r.retention_call = Some(call);
            }
            r.speedup_interval = Some(e.interval);
            r.speedup_call = Some(e.call);
        }
        Err(why) => {
            r.speedup_ratio = 0.0;
            r.speedup_status = Some(SpeedupStatus::NoValidTiming);
            r.error = Some(format!("no valid timing: {why}"));
        }
    }
}

/// Each side's valid cases per run, and the benchmark methods seen.
#[derive(Default)]
pub(super) struct SideRuns {
    orig: Vec<Vec<PerfCase>>,
    opt: Vec<Vec<PerfCase>>,
    orig_methods: Vec<String>,
    opt_methods: Vec<String>,
}

impl SideRuns {
    /// Adds a run; one without a valid case adds only its methods.
    fn add(&mut self, side: PerfSide, cases: Vec<PerfCase>, methods: Vec<String>) {
        let (runs, seen) = match side {
            PerfSide::Orig => (&mut self.orig, &mut self.orig_methods),
            PerfSide::Opt => (&mut self.opt, &mut self.opt_methods),
        };
        *seen = merged(seen, &methods);
        if !cases.is_empty() {
            runs.push(cases);
        }
    }

    /// Median over runs of each run's mean time, ms (0 without runs).
    fn median_time(&self, side: PerfSide) -> f64 {
        let runs = match side {
            PerfSide::Orig => &self.orig,
            PerfSide::Opt => &self.opt,
        };
        let mut t: Vec<f64> = runs.iter().map(|c| perf::mean_time(c)).collect();
        if t.is_empty() {
            return 0.0;
        }
        t.sort_by(f64::total_cmp);
        let n = t.len();
        if n % 2 == 1 {
            t[n / 2]
        } else {
            (t[n / 2 - 1] + t[n / 2]) / 2.0
        }
    }
}

/// The sorted union of two method lists.
fn merged(a: &[String], b: &[String]) -> Vec<String> {
    let mut v: Vec<String> = a.iter().chain(b).cloned().collect();
    v.sort();
    v.dedup();
    v
}

fn side_word(side: PerfSide) -> &'static str {
    match side {
        PerfSide::Orig => "original",
        PerfSide::Opt => "optimised",
    }
}
