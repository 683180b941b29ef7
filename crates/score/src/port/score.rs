//! The paper's score over the verified runs and bounds, after one denominator is checked.

use std::collections::{BTreeMap, BTreeSet};

use super::files::bad;
use super::runs::Run;
use crate::ScoreError;

/// The mean score per problem, once baseline, candidate and SOLAR cover the same workloads.
pub(super) fn problem_scores(
    b: &Run,
    c: &Run,
    bounds: &BTreeMap<(String, String), f64>,
) -> Result<BTreeMap<String, f64>, ScoreError> {
    let b_keys: BTreeSet<_> = b.workloads.keys().collect();
    let c_keys: BTreeSet<_> = c.workloads.keys().collect();
    let s_keys: BTreeSet<_> = bounds.keys().collect();
    if b_keys != c_keys || b_keys != s_keys {
        return Err(bad(
            "denominator",
            format!(
                "baseline has {} workloads, candidate {}, SOLAR {}; they must be the same set",
                b_keys.len(),
                c_keys.len(),
                s_keys.len()
            ),
        ));
    }
    let mut per_problem: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (key, t_sol) in bounds {
        let (_, t_b) = b.workloads[key];
        let (passed, t_k) = c.workloads[key];
        let who = format!("{}:{}", key.0, key.1);
        let t_b = t_b.ok_or_else(|| bad(&who, "baseline has no latency"))?;
        let s = if !passed {
            0.0
        } else {
            let t_k = t_k.ok_or_else(|| bad(&who, "passing candidate has no latency"))?;
            if t_b <= *t_sol {
                return Err(bad(
                    &who,
                    format!("baseline {t_b} ms is not slower than T_SOL {t_sol} ms"),
                ));
            }
            if t_k < *t_sol {
                return Err(bad(
                    &who,
                    format!(
                        "candidate {t_k} ms is faster than T_SOL {t_sol} ms: the bound or the candidate needs review"
                    ),
                ));
            }
            1.0 / (1.0 + (t_k - t_sol) / (t_b - t_sol))
        };
        per_problem.entry(key.0.clone()).or_default().push(s);
    }
    Ok(per_problem
        .iter()
        .map(|(p, s)| (p.clone(), s.iter().sum::<f64>() / s.len() as f64))
        .collect())
}
