//! Integrity checks the parent makes from outside the candidate's process: timing statistics
//! computed from raw samples, and the dual clock (reported time against the parent's wall
//! time around the same timed batch). See `docs/integrity.md`.

use kg_contract::Spread;
use serde_json::Value;

use crate::protocol::{Aside, AsideReply};

/// Bytes of timed input sets the judge may generate per workload on the CPU.
pub const TIMED_INPUT_BUDGET_CPU: u64 = 192 << 20;
/// Bytes of timed input sets the judge may generate per workload on a GPU.
pub const TIMED_INPUT_BUDGET_GPU: u64 = 1 << 30;
/// Timed calls whose outputs the judge re-checks (chosen after timing).
pub const TIMED_SAMPLES: usize = 3;
/// The dual clock flags a batch whose reported time is below this share of the parent's
/// wall time (after the fixed allowance).
pub const DUAL_CLOCK_RATIO: f64 = 0.5;

/// The reported latency is at least the mean of the timed calls over this: a candidate that
/// concentrates the work of many calls into one (e.g. fetching every timed set's key during
/// its first call) lowers the median but not the mean, so it gains at most this factor.
pub const CONCENTRATION_RATIO: f64 = 2.0;

/// The latency a spread stands for: its median, or mean / [`CONCENTRATION_RATIO`] when that is
/// larger (`true` then: the log says so).
pub fn robust_latency(s: &Spread) -> (f64, bool) {
    let floor = s.mean_ms / CONCENTRATION_RATIO;
    if floor > s.median_ms {
        (floor, true)
    } else {
        (s.median_ms, false)
    }
}

/// Hands out the keys of the sealed timed input sets to the candidate (asides during its
/// `time` request): each key once and in order, so no set can be opened before the call that
/// uses it is due (any other request is recorded as a violation: REWARD_HACK).
#[derive(Debug, Clone)]
pub struct TimedKeys {
    keys: Vec<String>,
    seal_ms: Vec<f64>,
    next: usize,
    /// Why the candidate's key requests broke the protocol, if they did.
    pub violation: Option<String>,
}

impl TimedKeys {
    /// Keys (decimal strings) and the judge's sealing time (ms) of each set.
    pub fn new(keys: Vec<String>, seal_ms: Vec<f64>) -> TimedKeys {
        TimedKeys {
            keys,
            seal_ms,
            next: 0,
            violation: None,
        }
    }

    /// The reply to one aside: the key asked for if it is the one due, else a refusal (and the
    /// violation recorded).
    pub fn answer(&mut self, aside: &Aside) -> AsideReply {
        let Aside::TimedKey { index } = *aside;
        let due = self.next;
        if usize::try_from(index).is_ok_and(|i| i == due) && due < self.keys.len() {
            self.next += 1;
            return AsideReply::Key(self.keys[due].clone());
        }
        let why = if due >= self.keys.len() {
            format!(
                "the candidate asked for the key of timed input set {index} after all {} keys were handed out (each key is handed out once, in order, as its call starts)",
                self.keys.len()
            )
        } else {
            format!(
                "the candidate asked for the key of timed input set {index} when set {due} was due (each key is handed out once, in order, as its call starts)"
            )
        };
        self.violation.get_or_insert(why.clone());
        AsideReply::Refused(why)
    }

    /// How many keys were handed out (sets 0..served).
    pub fn served(&self) -> usize {
        self.next
    }

    /// How many timed sets there are.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are no timed sets.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The judge's sealing time of the sets handed out (decrypting costs the same).
    pub fn seal_ms_served(&self) -> f64 {
        self.seal_ms.iter().take(self.next).sum()
    }
}

/// What the samples of a timing reply must be bound to: the timed calls the parent knows ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SampleRule {
    /// One sample per timed set whose key was handed out, for sets `0..served` in order (the
    /// candidate's timed calls, and the reference's when its sets are sealed too).
    OnePerKey {
        /// Keys handed out.
        served: usize,
    },
    /// A CUDA graph: exactly `calls` replays of set 0, whose key alone (at most) was handed out.
    GraphReplays {
        /// Replays asked for.
        calls: usize,
        /// Keys handed out.
        served: usize,
    },
    /// The reference on clones of one input set (no keys): at most `calls` samples, each naming
    /// a clone below `sets`.
    Unsealed {
        /// Calls asked for.
        calls: usize,
        /// Clones there are.
        sets: usize,
    },
}

/// The per-call times (ms) of a timing reply, once they are shown to be bound to the timed
/// calls that ran: `times_ms` (finite, >= 0), one `notes.timed_index` entry per sample naming
/// the set its call used, as `rule` requires, and, where present, one `notes.cupti_ms` span
/// per sample. `Err(why)` otherwise: a candidate then added, dropped or reordered samples
/// (REWARD_HACK); samples appended from inside a timed call change the count.
pub fn bound_samples(reply: &Value, rule: SampleRule) -> Result<Vec<f64>, String> {
    let numbers = |v: Option<&Value>, what: &str| -> Result<Option<Vec<f64>>, String> {
        let Some(v) = v else { return Ok(None) };
        let a = v
            .as_array()
            .ok_or_else(|| format!("`{what}` is not a list of numbers"))?;
        a.iter()
            .map(|x| {
                x.as_f64()
                    .filter(|t| t.is_finite() && *t >= 0.0)
                    .ok_or_else(|| format!("`{what}` holds {x}, not a finite time >= 0"))
            })
            .collect::<Result<Vec<f64>, String>>()
            .map(Some)
    };
    let notes = reply.get("notes");
    let times = numbers(reply.get("times_ms"), "times_ms")?.unwrap_or_default();
    let index: Vec<u64> = notes
        .and_then(|n| n.get("timed_index"))
        .and_then(Value::as_array)
        .ok_or("no `timed_index` (the set each sample's call used)")?
        .iter()
        .map(|x| {
            x.as_u64()
                .ok_or(format!("`timed_index` holds {x}, not a set index"))
        })
        .collect::<Result<_, _>>()?;
    let n = times.len();
    if index.len() != n {
        return Err(format!(
            "{n} sample(s) but {} set index(es): every sample must name the timed call it measured",
            index.len()
        ));
    }
    let at = |j: usize| index[j];
    match rule {
        SampleRule::OnePerKey { served } => {
            if n != served {
                return Err(format!(
                    "{n} timing sample(s) for {served} timed call(s) whose input-set keys were handed out; exactly one sample per timed call is accepted (samples added from inside a call, or calls left out, change the count)"
                ));
            }
            if let Some(j) = (0..n).find(|&j| at(j) != j as u64) {
                return Err(format!(
                    "timing sample {j} names timed set {}, expected set {j} (samples must follow the timed calls in order)",
                    at(j)
                ));
            }
        }
        SampleRule::GraphReplays { calls, served } => {
            if n != calls || served > 1 {
                return Err(format!(
                    "{n} timing sample(s) for {calls} CUDA-graph replay(s) ({served} key(s) handed out, at most 1 expected); exactly one sample per replay is accepted"
                ));
            }
            if let Some(j) = (0..n).find(|&j| at(j) != 0) {
                return Err(format!(
                    "CUDA-graph sample {j} names timed set {}, but a graph replays set 0 only",
                    at(j)
                ));
            }
        }
        SampleRule::Unsealed { calls, sets } => {
            if n > calls {
                return Err(format!(
                    "{n} timing sample(s) for at most {calls} timed call(s)"
                ));
            }
            if let Some(j) = (0..n).find(|&j| at(j) != (j % sets.max(1)) as u64) {
                return Err(format!(
                    "timing sample {j} names input set {}, expected {} ({sets} set(s) in rotation)",
                    at(j),
                    j % sets.max(1)
                ));
            }
        }
    }
    let cupti = numbers(notes.and_then(|v| v.get("cupti_ms")), "cupti_ms")?;
    if let Some(c) = cupti
        && c.len() != n
    {
        return Err(format!(
            "{} CUPTI span(s) for {n} timed call(s); exactly one span per timed call is accepted",
            c.len()
        ));
    }
    Ok(times)
}

/// Statistics of raw per-iteration times (ms); `None` when there are none or any is not finite
/// or negative. Quartiles interpolate like Python's `statistics.quantiles(method="inclusive")`.
pub fn spread_from_times(times: &[f64]) -> Option<Spread> {
    if times.is_empty() || times.iter().any(|t| !t.is_finite() || *t < 0.0) {
        return None;
    }
    let mut s = times.to_vec();
    s.sort_by(f64::total_cmp);
    let q = |p: f64| -> f64 {
        let pos = p * (s.len() - 1) as f64;
        let lo = pos.floor() as usize;
        let hi = pos.ceil() as usize;
        s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
    };
    Some(Spread {
        min_ms: s[0],
        p25_ms: q(0.25),
        median_ms: q(0.5),
        p75_ms: q(0.75),
        max_ms: s[s.len() - 1],
        mean_ms: s.iter().sum::<f64>() / s.len() as f64,
    })
}

/// The fixed allowance (ms) for work inside the parent's wall time that the candidate's
/// timer rightly excludes: the request round trip, the loop, and on a GPU the per-iteration
/// L2 flush, synchronisations, spin kernel and the empty-bracket calibration (up to 100).
pub fn dual_clock_allowance_ms(iterations: usize, gpu: bool) -> f64 {
    if gpu {
        200.0 + 2.0 * (iterations as f64 + 100.0)
    } else {
        20.0 + 0.5 * iterations as f64
    }
}

/// How many times the reference's unexplained batch time (its batch wall time in the judge
/// minus its reported calls) an honest candidate's batch may leave unexplained on top of the
/// fixed allowance: the same harness steps run on both sides, and a loaded machine slows both.
pub const DUAL_CLOCK_REFERENCE_FACTOR: f64 = 3.0;

/// Dual clock: `Some(reason)` when the time the candidate reported for a timed batch
/// (`reported_ms`, summed over its iterations) is less than [`DUAL_CLOCK_RATIO`] of the wall
/// time the parent measured around the same batch (`outside_ms`) minus the allowance, which
/// grows by `extra_allowance_ms` (trusted time inside the wall time: opening the timed sets as
/// the judge measured it, and a multiple of the reference's own unexplained batch time).
pub fn dual_clock_violation(
    reported_ms: f64,
    outside_ms: f64,
    iterations: usize,
    gpu: bool,
    extra_allowance_ms: f64,
) -> Option<String> {
    let allowance = dual_clock_allowance_ms(iterations, gpu) + extra_allowance_ms.max(0.0);
    let floor = DUAL_CLOCK_RATIO * (outside_ms - allowance);
    if reported_ms.is_finite() && reported_ms >= floor {
        return None;
    }
    Some(format!(
        "dual clock: the candidate reported {reported_ms:.3} ms for {iterations} timed call(s), but the parent measured {outside_ms:.3} ms of wall time around them (at least {floor:.3} ms expected: {DUAL_CLOCK_RATIO} x (wall - {allowance:.1} ms allowance)); its timer does not measure its calls"
    ))
}

/// Variables a candidate worker inherits from kg-bench's environment, by exact name: the
/// shell basics, compilers and toolkit locations that `torch.utils.cpp_extension` and Triton
/// look up, and the Python environment's own markers. kernelgate's own variables are not
/// passed by a prefix: the workers need none from kg-bench's environment (`KG_WORKER_TAG`
/// and `KG_FD_CHANNEL` are set for each worker explicitly, the protocol channel comes as a
/// descriptor number in argv), so only the two test harness markers below are named.
const ENV_EXACT: [&str; 26] = [
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TERM",
    "TZ",
    "LANG",
    "LANGUAGE",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "LIBRARY_PATH",
    "CPATH",
    "CC",
    "CXX",
    "NVCC",
    "MAX_JOBS",
    "VIRTUAL_ENV",
    "CONDA_PREFIX",
    "XDG_CACHE_HOME",
    "CUDA_HOME",
    "CUDA_PATH",
    "ROCM_PATH",
    "HIP_PATH",
    // Markers of kernelgate's own test harnesses, no secrets: the CLI fixtures record their
    // helpers' pids in `KG_TEST_PIDFILE`, and `cargo xtask redteam` finds a case's leftover
    // processes by `KG_REDTEAM_MARKER`.
    "KG_TEST_PIDFILE",
    "KG_REDTEAM_MARKER",
];
/// ... and by prefix, only where a runtime reads a family of variables: locale (`LC_`), the
/// GPU runtimes and their libraries (`CUDA_VISIBLE_DEVICES`, `CUDA_MODULE_LOADING`,
/// `NVIDIA_TF32_OVERRIDE`, `HIP_VISIBLE_DEVICES`, `HSA_OVERRIDE_GFX_VERSION`,
/// `ROCR_VISIBLE_DEVICES`, `AMD_SERIALIZE_KERNEL`, `CUBLAS_WORKSPACE_CONFIG`), the frameworks'
/// settings (`TRITON_`, `TORCH_`, `PYTORCH_`), the math libraries' thread counts (`OMP_`,
/// `MKL_`) and the interpreter launchers that need their variables (pyenv shims, conda).
const ENV_PREFIXES: [&str; 16] = [
    "LC_", "CUDA_", "NVIDIA_", "ROCM_", "HIP_", "HSA_", "ROCR_", "AMD_", "TRITON_", "TORCH_",
    "PYTORCH_", "CUBLAS", "OMP_", "MKL_", "PYENV", "CONDA_",
];
/// Parts of a name that mark a credential: refused even under an allowed prefix (a
/// `TORCH_HUB_TOKEN` or `CUDA_..._API_KEY` is no runtime setting).
const ENV_SECRET_MARKS: [&str; 6] = [
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "_KEY",
];

/// Whether a candidate worker may inherit the variable `name`: an allow-list, so tokens and
/// credentials in kg-bench's environment (cloud keys, CI secrets, anything `KG_*` of the
/// parent's) never reach untrusted code. The candidate runs Python with `-I`, which ignores
/// `PYTHON*` variables anyway.
pub fn worker_env_allowed(name: &str) -> bool {
    if ENV_EXACT.contains(&name) {
        return true;
    }
    ENV_PREFIXES.iter().any(|p| name.starts_with(p))
        && !ENV_SECRET_MARKS.iter().any(|m| name.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_env_allow_list() {
        for ok in [
            "PATH",
            "HOME",
            "CUDA_VISIBLE_DEVICES",
            "TRITON_INTERPRET",
            "LC_ALL",
            "HIP_VISIBLE_DEVICES",
            "PYTORCH_CUDA_ALLOC_CONF",
            "KG_TEST_PIDFILE",
            "KG_REDTEAM_MARKER",
        ] {
            assert!(worker_env_allowed(ok), "{ok}");
        }
        for no in [
            "AWS_SECRET_ACCESS_KEY",
            "GITHUB_TOKEN",
            "OPENAI_API_KEY",
            "PYTHONPATH",
            "SSH_AUTH_SOCK",
            "PATHX",
            "HOMEBREW",
            // No `KG_*` wildcard: the parent's own settings and anything planted under the name.
            "KG_SECRET_TOKEN",
            "KG_GPU_CLAIM",
            "KG_CACHE_DIR",
            "KG_WORKER_TAG",
            "KG_FD_CHANNEL",
            // Credentials under an allowed prefix.
            "TORCH_HUB_TOKEN",
            "CUDA_API_KEY",
            "CONDA_PASSWORD",
        ] {
            assert!(!worker_env_allowed(no), "{no}");
        }
    }

    #[test]
    fn spread_matches_python_inclusive_quartiles() {
        // statistics.quantiles([1, 2, 3, 4, 10], n=4, method="inclusive") == [2.0, 3.0, 4.0]
        let s = spread_from_times(&[10.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!((s.min_ms, s.p25_ms, s.median_ms), (1.0, 2.0, 3.0));
        assert_eq!((s.p75_ms, s.max_ms, s.mean_ms), (4.0, 10.0, 4.0));
        let s = spread_from_times(&[1.0, 2.0]).unwrap();
        assert_eq!(s.median_ms, 1.5);
        assert!(spread_from_times(&[]).is_none());
        assert!(spread_from_times(&[1.0, f64::NAN]).is_none());
        assert!(spread_from_times(&[-1.0]).is_none());
    }

    #[test]
    fn dual_clock_extra_allowance_covers_trusted_work_only() {
        // 200 ms of decryption inside the wall time: allowed when the judge measured it.
        assert!(dual_clock_violation(10.0, 250.0, 10, false, 0.0).is_some());
        assert!(dual_clock_violation(10.0, 250.0, 10, false, 220.0).is_none());
        assert!(dual_clock_violation(10.0, 250.0, 10, false, -1e9).is_some());
    }

    #[test]
    fn robust_latency_bounds_work_concentrated_in_few_calls() {
        let honest = spread_from_times(&[1.0, 1.1, 0.9, 1.0, 1.2]).unwrap();
        assert_eq!(robust_latency(&honest), (honest.median_ms, false));
        // All work in the first call: the median says 0.01 ms, the mean 1.0 ms.
        let mut t = vec![0.01; 49];
        t.insert(0, 50.0 - 0.49);
        let s = spread_from_times(&t).unwrap();
        let (lat, raised) = robust_latency(&s);
        assert!(raised);
        assert!((lat - s.mean_ms / CONCENTRATION_RATIO).abs() < 1e-12);
        assert!(lat >= 0.5 * 1.0 - 1e-9, "{lat}");
    }

    #[test]
    fn timed_keys_are_handed_out_once_and_in_order() {
        let mut k = TimedKeys::new(
            vec!["11".into(), "22".into(), "33".into()],
            vec![1.0, 2.0, 4.0],
        );
        let ask = |i: u64| Aside::TimedKey { index: i };
        assert_eq!(k.answer(&ask(0)), AsideReply::Key("11".into()));
        assert_eq!(k.answer(&ask(1)), AsideReply::Key("22".into()));
        assert_eq!(k.seal_ms_served(), 3.0, "the first two sets served");
        assert_eq!((k.served(), k.len()), (2, 3));
        assert!(k.violation.is_none());
        // Asking again, skipping ahead, or past the end: refused and recorded.
        assert!(matches!(k.answer(&ask(1)), AsideReply::Refused(_)));
        assert!(
            k.violation
                .as_deref()
                .unwrap()
                .contains("set 1 when set 2 was due")
        );
        let mut k2 = TimedKeys::new(vec!["1".into()], vec![0.5]);
        assert!(matches!(k2.answer(&ask(3)), AsideReply::Refused(_)));
        let mut k3 = TimedKeys::new(vec!["1".into()], vec![0.5]);
        assert_eq!(k3.answer(&ask(0)), AsideReply::Key("1".into()));
        assert!(matches!(k3.answer(&ask(1)), AsideReply::Refused(_)));
        assert!(
            k3.violation
                .as_deref()
                .unwrap()
                .contains("after all 1 keys")
        );
        assert_eq!(k3.seal_ms_served(), 0.5, "only the one set served");
    }

    fn timing(times: &[f64], index: &[u64]) -> Value {
        serde_json::json!({"result": "ok", "times_ms": times, "notes": {"timed_index": index}})
    }

    #[test]
    fn samples_must_be_one_per_key_handed_out_in_order() {
        let ok = timing(&[1.0, 1.1, 0.9], &[0, 1, 2]);
        assert_eq!(
            bound_samples(&ok, SampleRule::OnePerKey { served: 3 }).unwrap(),
            vec![1.0, 1.1, 0.9]
        );
        // Samples appended from inside a call (the attack), with or without matching indices.
        let mut forged = vec![1.0, 1.1, 0.9];
        forged.extend([1e-7; 1000]);
        let why = bound_samples(
            &timing(&forged, &[0, 1, 2]),
            SampleRule::OnePerKey { served: 3 },
        )
        .unwrap_err();
        assert!(why.contains("1003 sample(s) but 3 set index"), "{why}");
        let idx: Vec<u64> = (0..1003).collect();
        let why =
            bound_samples(&timing(&forged, &idx), SampleRule::OnePerKey { served: 3 }).unwrap_err();
        assert!(
            why.contains("1003 timing sample(s) for 3 timed call(s)"),
            "{why}"
        );
        // Fewer samples than calls, reordered ones, no indices, junk values.
        assert!(bound_samples(&timing(&[1.0], &[0]), SampleRule::OnePerKey { served: 2 }).is_err());
        let why = bound_samples(
            &timing(&[1.0, 2.0], &[1, 0]),
            SampleRule::OnePerKey { served: 2 },
        )
        .unwrap_err();
        assert!(why.contains("sample 0 names timed set 1"), "{why}");
        let bare = serde_json::json!({"times_ms": [1.0]});
        assert!(bound_samples(&bare, SampleRule::OnePerKey { served: 1 }).is_err());
        let junk = serde_json::json!({"times_ms": [1.0, "x"], "notes": {"timed_index": [0, 1]}});
        assert!(bound_samples(&junk, SampleRule::OnePerKey { served: 2 }).is_err());
        let neg = timing(&[-1.0], &[0]);
        assert!(bound_samples(&neg, SampleRule::OnePerKey { served: 1 }).is_err());
    }

    #[test]
    fn graph_replays_clones_and_cupti_spans_are_counted_too() {
        let g = timing(&[0.1, 0.1, 0.1], &[0, 0, 0]);
        assert!(
            bound_samples(
                &g,
                SampleRule::GraphReplays {
                    calls: 3,
                    served: 1
                }
            )
            .is_ok()
        );
        assert!(
            bound_samples(
                &g,
                SampleRule::GraphReplays {
                    calls: 2,
                    served: 1
                }
            )
            .is_err()
        );
        assert!(
            bound_samples(
                &g,
                SampleRule::GraphReplays {
                    calls: 3,
                    served: 2
                }
            )
            .is_err()
        );
        let g1 = timing(&[0.1, 0.1], &[0, 1]);
        assert!(
            bound_samples(
                &g1,
                SampleRule::GraphReplays {
                    calls: 2,
                    served: 1
                }
            )
            .is_err()
        );
        // The reference on clones: at most the calls asked for, clones in rotation.
        let c = timing(&[1.0, 1.0, 1.0, 1.0, 1.0], &[0, 1, 2, 3, 0]);
        assert!(bound_samples(&c, SampleRule::Unsealed { calls: 5, sets: 4 }).is_ok());
        assert!(bound_samples(&c, SampleRule::Unsealed { calls: 4, sets: 4 }).is_err());
        assert!(bound_samples(&c, SampleRule::Unsealed { calls: 5, sets: 1 }).is_err());
        // One CUPTI span per sample.
        let mut v = timing(&[1.0, 1.0], &[0, 1]);
        v["notes"]["cupti_ms"] = serde_json::json!([0.5, 0.5]);
        assert!(bound_samples(&v, SampleRule::OnePerKey { served: 2 }).is_ok());
        v["notes"]["cupti_ms"] = serde_json::json!([0.5, 0.5, 1e-9]);
        let why = bound_samples(&v, SampleRule::OnePerKey { served: 2 }).unwrap_err();
        assert!(why.contains("3 CUPTI span(s) for 2 timed call(s)"), "{why}");
    }

    #[test]
    fn dual_clock_flags_forged_totals_only() {
        // Honest CPU batch: 50 calls of 10 ms, 505 ms of wall time.
        assert!(dual_clock_violation(500.0, 505.0, 50, false, 0.0).is_none());
        // A timer running 1000x slow: 0.5 ms reported for 500 ms of work.
        let why = dual_clock_violation(0.5, 505.0, 50, false, 0.0).unwrap();
        assert!(why.contains("dual clock"), "{why}");
        // Forged constant statistics.
        assert!(dual_clock_violation(0.005, 60.0, 5, false, 0.0).is_some());
        // Tiny honest batches sit inside the allowance.
        assert!(dual_clock_violation(0.01, 15.0, 3, false, 0.0).is_none());
        // A GPU batch with per-iteration flush/sync overhead outside the events is fine.
        assert!(dual_clock_violation(0.5, 300.0, 50, true, 0.0).is_none());
        assert!(dual_clock_violation(f64::NAN, 1.0, 1, false, 0.0).is_some());
    }
}

/// What a directory held: every entry by relative path, with the SHA-256 of every regular file
/// ([`kg_contract::tree`]), so content rewritten with the old size and modification time is
/// still a change.
pub type DirSnapshot = kg_contract::tree::Tree;

/// Records every entry under `root` and hashes its files (symlinks below it not followed; at
/// most [`kg_contract::tree::MAX_ENTRIES`] entries and [`kg_contract::tree::MAX_DEPTH`]
/// levels), to tell afterwards whether a candidate wrote into it. Its
/// [`sha256`](kg_contract::tree::Tree::sha256) is the tree hash traces record.
pub fn snapshot_dir(root: &std::path::Path) -> DirSnapshot {
    kg_contract::tree::walk(root)
}

/// Entries added since `before`, and entries changed or removed (relative paths). An entry
/// that cannot be read now counts as changed; a walk that could not see the whole directory
/// now (too many entries, too deep, unreadable) is reported as a changed entry naming why.
pub fn dir_changes(
    before: &DirSnapshot,
    root: &std::path::Path,
) -> (Vec<std::path::PathBuf>, Vec<std::path::PathBuf>) {
    let c = before.changes(&snapshot_dir(root));
    let mut changed = c.changed;
    if let Some(why) = c.incomplete {
        changed.push(std::path::PathBuf::from(format!(
            "<the directory as a whole: {why}>"
        )));
    }
    (c.added, changed)
}

/// Removes entries a candidate added under `root` (newly created files and directories).
pub fn remove_added(root: &std::path::Path, added: &[std::path::PathBuf]) {
    for rel in added {
        let p = root.join(rel);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.is_dir() => {
                let _ = std::fs::remove_dir_all(&p);
            }
            Ok(_) => {
                let _ = std::fs::remove_file(&p);
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod dir_tests {
    use super::*;

    #[test]
    fn added_and_changed_entries_are_found_and_added_ones_removed() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("definition.json"), "{}").unwrap();
        std::fs::create_dir(d.path().join("data")).unwrap();
        std::fs::write(d.path().join("data/w.bin"), "abc").unwrap();
        let snap = snapshot_dir(d.path());
        assert_eq!(dir_changes(&snap, d.path()), (vec![], vec![]));
        std::fs::write(d.path().join("numpy.py"), "x = 1").unwrap();
        std::fs::create_dir(d.path().join("pkg")).unwrap();
        std::fs::write(d.path().join("pkg/__init__.py"), "").unwrap();
        std::fs::write(d.path().join("data/w.bin"), "abcd").unwrap();
        let (added, changed) = dir_changes(&snap, d.path());
        assert!(added.contains(&"numpy.py".into()), "{added:?}");
        assert!(added.contains(&"pkg".into()), "{added:?}");
        assert_eq!(changed, vec![std::path::PathBuf::from("data/w.bin")]);
        remove_added(d.path(), &added);
        let (added, _) = dir_changes(&snap, d.path());
        assert!(added.is_empty(), "{added:?}");
        assert!(d.path().join("definition.json").is_file());
    }

    #[test]
    fn content_rewritten_with_the_old_size_and_mtime_is_a_change() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("workload.jsonl");
        std::fs::write(&p, "{\"max_atol\":0.01}\n").unwrap();
        let mtime = std::fs::metadata(&p).unwrap().modified().unwrap();
        let snap = snapshot_dir(d.path());
        std::fs::write(&p, "{\"max_atol\":9.99}\n").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        assert_eq!(std::fs::metadata(&p).unwrap().modified().unwrap(), mtime);
        assert_eq!(
            dir_changes(&snap, d.path()),
            (vec![], vec![std::path::PathBuf::from("workload.jsonl")])
        );
    }
}
