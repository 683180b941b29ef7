//! The held-out speedup over repeated runs, with a distribution-free interval and a call.
//!
//! Each side's performance command runs `N` times, interleaved (orig, opt, orig, opt, …), so
//! slow drift (clocks, temperature, other tenants) falls on both sides alike. Every pair of an
//! original run `i` and an optimised run `j` gives `S_ij`, the speedup AgentKernelArena would
//! have read from those two runs alone (mean over cases of `orig/opt`, [`perf::speedup`]).
//!
//! - Estimate: the median of the `n·m` values `S_ij` (the Hodges–Lehmann estimator of a
//!   two-sample ratio).
//! - Interval: `[S_(k), S_(nm+1−k)]` of the sorted `S_ij`, with `k` from the exact
//!   Mann–Whitney null distribution: the largest `k` whose coverage `1 − 2·P(U ≤ k−1)` is at
//!   least the requested confidence (if none is, `k = 1`, and the lower coverage is reported).
//!
//! Why this and not a bootstrap or a t interval: GPU timings are skewed and have outlier runs
//! (a cold first process, a clock dip), and a task gets only a handful of repeats. The median
//! moves little for one outlier run, which only widens the interval; the coverage is exact
//! from 3 repeats a side without assuming normality (exact for one case per run or noise that
//! scales a run's cases alike, to first order otherwise), and it is deterministic, where a
//! bootstrap of 3–5 runs is random and under-covers. Its ends are speedups that one run per
//! side could have shown, so a reader can check them against the logs.
//!
//! A call is made only when the interval excludes 1.0: [`SpeedupCall::Gain`] or
//! [`SpeedupCall::Loss`]; otherwise [`SpeedupCall::NotCalled`]. A retention ratio (held-out
//! speedup ÷ original-run speedup) is called the same way on the interval divided by the
//! original-run speedup, which is one number from the run (its own noise is not known here).

use serde::{Deserialize, Serialize};

use crate::perf::{self, PerfCase};
use crate::summary::round;

/// The default number of runs per side.
pub const DEFAULT_REPEATS: usize = 5;
/// The fewest runs per side: below 3 no distribution-free interval reaches even 90 %.
pub const MIN_REPEATS: usize = 3;
/// The most runs per side (each is a process of the task's own benchmark).
pub const MAX_REPEATS: usize = 50;
/// The default confidence of the interval.
pub const DEFAULT_CONFIDENCE: f64 = 0.95;
/// The interval's method, as recorded.
pub const METHOD: &str = "hodges_lehmann_mann_whitney";

/// A speedup's interval over the repeats (kernelgate).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpeedupInterval {
    /// How it was computed: [`METHOD`].
    pub method: String,
    /// Its exact coverage under the method's model (e.g. 0.9683 for 5 runs a side).
    pub confidence: f64,
    /// Lower end.
    pub low: f64,
    /// Upper end.
    pub high: f64,
    /// Original runs used.
    pub orig_runs: usize,
    /// Optimised runs used.
    pub opt_runs: usize,
}

/// What the held-out speedup's interval allows one to say (kernelgate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SpeedupCall {
    /// The whole interval is above 1.0: the optimised kernel is faster.
    Gain,
    /// The whole interval is below 1.0: the optimised kernel is slower.
    Loss,
    /// The interval contains 1.0: no difference is shown either way.
    NotCalled,
}

impl SpeedupCall {
    /// The names, as serialised, in report order.
    pub const NAMES: [&'static str; 3] = ["gain", "loss", "not_called"];

    /// The name, as serialised.
    pub fn name(&self) -> &'static str {
        match self {
            SpeedupCall::Gain => "gain",
            SpeedupCall::Loss => "loss",
            SpeedupCall::NotCalled => "not_called",
        }
    }
}

/// What a retention ratio's interval allows one to say (kernelgate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetentionCall {
    /// The whole interval is below 1.0: the held-out speedup is below the original run's.
    Lower,
    /// The whole interval is above 1.0: the held-out speedup is above the original run's.
    Higher,
    /// The interval contains 1.0: consistent with the original run's speedup.
    NotCalled,
}

impl RetentionCall {
    /// The names, as serialised, in report order.
    pub const NAMES: [&'static str; 3] = ["lower", "higher", "not_called"];

    /// The name, as serialised.
    pub fn name(&self) -> &'static str {
        match self {
            RetentionCall::Lower => "lower",
            RetentionCall::Higher => "higher",
            RetentionCall::NotCalled => "not_called",
        }
    }
}

/// An interval of a ratio without its method (the retention's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RatioInterval {
    /// Lower end.
    pub low: f64,
    /// Upper end.
    pub high: f64,
}

/// The estimate from the repeats.
#[derive(Debug, Clone, PartialEq)]
pub struct Estimate {
    /// The median of the cross-run speedups.
    pub speedup: f64,
    /// Its interval.
    pub interval: SpeedupInterval,
    /// What it allows one to say.
    pub call: SpeedupCall,
}

/// Why no estimate could be made from the repeats.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EstimateError {
    /// A side has no run with a valid case.
    #[error("the {side} side has no run with a valid case")]
    NoRuns {
        /// `original` or `optimised`.
        side: &'static str,
    },
    /// The cases of two runs do not match one to one (or a time is not > 0).
    #[error(
        "the original's run {orig_run} ({orig_cases} valid case(s)) and the optimised's run {opt_run} ({opt_cases}) do not match one to one by params, shape or test_case_id"
    )]
    Unmatched {
        /// 1-based original run.
        orig_run: usize,
        /// Its valid cases.
        orig_cases: usize,
        /// 1-based optimised run.
        opt_run: usize,
        /// Its valid cases.
        opt_cases: usize,
    },
}

/// Estimates the speedup from each side's runs (valid cases only), at `confidence`.
pub fn estimate(
    orig: &[Vec<PerfCase>],
    opt: &[Vec<PerfCase>],
    confidence: f64,
) -> Result<Estimate, EstimateError> {
    if orig.is_empty() {
        return Err(EstimateError::NoRuns { side: "original" });
    }
    if opt.is_empty() {
        return Err(EstimateError::NoRuns { side: "optimised" });
    }
    let mut cross = Vec::with_capacity(orig.len() * opt.len());
    for (i, a) in orig.iter().enumerate() {
        for (j, b) in opt.iter().enumerate() {
            let s = perf::speedup(a, b);
            if !(s > 0.0 && s.is_finite()) {
                return Err(EstimateError::Unmatched {
                    orig_run: i + 1,
                    orig_cases: a.len(),
                    opt_run: j + 1,
                    opt_cases: b.len(),
                });
            }
            cross.push(s);
        }
    }
    cross.sort_by(f64::total_cmp);
    let (k, coverage) = rank_for(orig.len(), opt.len(), confidence);
    let low = cross[k - 1];
    let high = cross[cross.len() - k];
    let interval = SpeedupInterval {
        method: METHOD.into(),
        confidence: round(coverage, 4),
        low: round(low, 4),
        high: round(high, 4),
        orig_runs: orig.len(),
        opt_runs: opt.len(),
    };
    Ok(Estimate {
        speedup: median_sorted(&cross),
        call: call(low, high),
        interval,
    })
}

/// The call for an interval of a speedup.
pub fn call(low: f64, high: f64) -> SpeedupCall {
    if low > 1.0 {
        SpeedupCall::Gain
    } else if high < 1.0 {
        SpeedupCall::Loss
    } else {
        SpeedupCall::NotCalled
    }
}

/// The retention interval (the speedup's interval ÷ the original-run speedup) and its call;
/// `None` when the original-run speedup is not > 0.
pub fn retention(
    interval: &SpeedupInterval,
    original_run: f64,
) -> Option<(RatioInterval, RetentionCall)> {
    if !(original_run > 0.0 && original_run.is_finite()) {
        return None;
    }
    let (low, high) = (interval.low / original_run, interval.high / original_run);
    let c = if high < 1.0 {
        RetentionCall::Lower
    } else if low > 1.0 {
        RetentionCall::Higher
    } else {
        RetentionCall::NotCalled
    };
    Some((
        RatioInterval {
            low: round(low, 4),
            high: round(high, 4),
        },
        c,
    ))
}

fn median_sorted(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// `P(U ≤ u)` for `u = 0..=n·m` under the Mann–Whitney null (every arrangement of the `n+m`
/// runs equally likely).
pub fn mann_whitney_cdf(n: usize, m: usize) -> Vec<f64> {
    // p[a][b][u]: the recursion on whether the largest value is from the first sample
    // (it then exceeds all `b` of the second: `u` drops by `b`) or from the second.
    let max_u = n * m;
    let mut prev: Vec<Vec<f64>> = vec![vec![0.0; max_u + 1]; m + 1];
    for row in prev.iter_mut() {
        row[0] = 1.0; // a = 0: U = 0 for sure
    }
    for a in 1..=n {
        let mut cur: Vec<Vec<f64>> = vec![vec![0.0; max_u + 1]; m + 1];
        cur[0][0] = 1.0; // b = 0: U = 0 for sure
        for b in 1..=m {
            let (pa, pb) = (a as f64 / (a + b) as f64, b as f64 / (a + b) as f64);
            for u in 0..=a * b {
                let from_a = if u >= b { prev[b][u - b] } else { 0.0 };
                cur[b][u] = pa * from_a + pb * cur[b - 1][u];
            }
        }
        prev = cur;
    }
    let mut cdf = prev[m].clone();
    for u in 1..cdf.len() {
        cdf[u] += cdf[u - 1];
    }
    cdf
}

/// The order-statistic rank `k` (1-based) of the interval for `n` and `m` runs at
/// `confidence`, and that interval's exact coverage.
pub fn rank_for(n: usize, m: usize, confidence: f64) -> (usize, f64) {
    let cdf = mann_whitney_cdf(n, m);
    let coverage = |k: usize| 1.0 - 2.0 * cdf[k - 1];
    let mut k = 1;
    // k cannot pass the middle: the interval must keep at least the median.
    while k < (n * m).div_ceil(2) && coverage(k + 1) >= confidence {
        k += 1;
    }
    (k, coverage(k).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(times: &[&[f64]]) -> Vec<Vec<PerfCase>> {
        times
            .iter()
            .map(|run| {
                run.iter()
                    .enumerate()
                    .map(|(c, t)| PerfCase {
                        id: format!("case_{c}"),
                        explicit_id: true,
                        shape: None,
                        params: None,
                        time_ms: *t,
                        method: None,
                    })
                    .collect()
            })
            .collect()
    }

    /// Exact Mann–Whitney tails that tables give: 3+3 → P(U=0) = 1/20; 5+5 → P(U≤2) = 4/252.
    #[test]
    fn mann_whitney_tails_match_the_tables() {
        let c = mann_whitney_cdf(3, 3);
        assert!((c[0] - 1.0 / 20.0).abs() < 1e-12, "{c:?}");
        assert!((c[9] - 1.0).abs() < 1e-12);
        let c = mann_whitney_cdf(5, 5);
        assert!((c[2] - 4.0 / 252.0).abs() < 1e-12, "{c:?}");
        assert!((c[3] - 7.0 / 252.0).abs() < 1e-12, "{c:?}");
        // Asymmetric sizes: 2+4 → P(U=0) = 1/15.
        assert!((mann_whitney_cdf(2, 4)[0] - 1.0 / 15.0).abs() < 1e-12);
        // 3+3 reaches only 90 %; 5+5 gives k = 3 at 96.8 %.
        let (k, cov) = rank_for(3, 3, 0.95);
        assert_eq!(k, 1);
        assert!((cov - 0.9).abs() < 1e-12);
        let (k, cov) = rank_for(5, 5, 0.95);
        assert_eq!(k, 3);
        assert!((cov - (1.0 - 8.0 / 252.0)).abs() < 1e-12);
        // A higher confidence widens it: 5+5 at 99 % uses the extremes.
        assert_eq!(rank_for(5, 5, 0.99).0, 1);
    }

    /// Identical timings read exactly 1.0 with an interval of [1, 1], and are not called.
    #[test]
    fn identical_timings_read_one() {
        let a = runs(&[&[2.0, 4.0], &[2.0, 4.0], &[2.0, 4.0]]);
        let e = estimate(&a, &a, 0.95).unwrap();
        assert_eq!(e.speedup, 1.0);
        assert_eq!((e.interval.low, e.interval.high), (1.0, 1.0));
        assert_eq!(e.call, SpeedupCall::NotCalled);
        assert_eq!(e.interval.confidence, 0.9);
    }

    /// One outlier run (a cold first process 1.6× slower) moves the estimate to ~1.0 and
    /// widens the interval, which still contains 1.0, instead of reading 1.6.
    #[test]
    fn an_outlier_run_widens_the_interval_and_is_not_called() {
        let orig = runs(&[&[1.6], &[1.0], &[1.01], &[0.99], &[1.0]]);
        let opt = runs(&[&[1.0], &[0.995], &[1.005], &[1.0], &[1.01]]);
        let e = estimate(&orig, &opt, 0.95).unwrap();
        assert!((e.speedup - 1.0).abs() < 0.011, "{e:?}");
        assert!(e.interval.low <= 1.0 && e.interval.high >= 1.0, "{e:?}");
        assert_eq!(e.call, SpeedupCall::NotCalled);
    }

    #[test]
    fn a_clear_difference_is_called_both_ways() {
        let slow = runs(&[&[2.0, 4.1], &[2.05, 4.0], &[1.98, 3.9]]);
        let fast = runs(&[&[1.0, 2.0], &[1.01, 2.02], &[0.99, 1.98]]);
        let e = estimate(&slow, &fast, 0.95).unwrap();
        assert!((e.speedup - 2.0).abs() < 0.05, "{e:?}");
        assert_eq!(e.call, SpeedupCall::Gain);
        let e = estimate(&fast, &slow, 0.95).unwrap();
        assert_eq!(e.call, SpeedupCall::Loss);
        assert!(e.interval.high < 1.0);
    }

    #[test]
    fn unmatched_runs_are_an_error_naming_the_runs() {
        let a = runs(&[&[1.0, 2.0], &[1.0, 2.0], &[1.0, 2.0]]);
        let b = runs(&[&[1.0, 2.0], &[1.0], &[1.0, 2.0]]);
        let e = estimate(&a, &b, 0.95).unwrap_err();
        assert_eq!(
            e,
            EstimateError::Unmatched {
                orig_run: 1,
                orig_cases: 2,
                opt_run: 2,
                opt_cases: 1
            }
        );
        assert_eq!(
            estimate(&[], &b, 0.95).unwrap_err(),
            EstimateError::NoRuns { side: "original" }
        );
    }

    /// The summary counts calls by these names: they must be what the files say.
    #[test]
    fn call_names_are_the_serialised_names() {
        for c in [SpeedupCall::Gain, SpeedupCall::Loss, SpeedupCall::NotCalled] {
            assert_eq!(serde_json::to_value(c).unwrap(), c.name());
            assert!(SpeedupCall::NAMES.contains(&c.name()));
        }
        for c in [
            RetentionCall::Lower,
            RetentionCall::Higher,
            RetentionCall::NotCalled,
        ] {
            assert_eq!(serde_json::to_value(c).unwrap(), c.name());
            assert!(RetentionCall::NAMES.contains(&c.name()));
        }
    }

    #[test]
    fn retention_is_called_only_outside_its_interval() {
        let i = SpeedupInterval {
            method: METHOD.into(),
            confidence: 0.95,
            low: 0.95,
            high: 1.1,
            orig_runs: 5,
            opt_runs: 5,
        };
        let (r, c) = retention(&i, 1.0).unwrap();
        assert_eq!((r.low, r.high, c), (0.95, 1.1, RetentionCall::NotCalled));
        let (r, c) = retention(&i, 2.0).unwrap();
        assert_eq!((r.low, r.high, c), (0.475, 0.55, RetentionCall::Lower));
        assert_eq!(retention(&i, 0.5).unwrap().1, RetentionCall::Higher);
        assert!(retention(&i, 0.0).is_none());
    }
}
