//! Integrity checks the parent makes from outside the candidate's process: timing statistics
//! computed from raw samples, and the dual clock (reported time against the parent's wall
//! time around the same timed batch). See `docs/integrity.md`.

use kg_contract::Spread;

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

    /// The reply to one aside.
    pub fn answer(&mut self, aside: &serde_json::Value) -> serde_json::Value {
        let op = aside.get("op").and_then(serde_json::Value::as_str);
        let index = aside.get("index").and_then(serde_json::Value::as_u64);
        let why = match (op, index) {
            (Some("timed_key"), Some(i))
                if i as usize == self.next && self.next < self.keys.len() =>
            {
                self.next += 1;
                return serde_json::json!({"key": self.keys[i as usize]});
            }
            (Some("timed_key"), Some(i)) => format!(
                "the candidate asked for the key of timed input set {i} when set {} was due (each key is handed out once, in order, as its call starts)",
                self.next
            ),
            _ => format!("the candidate sent an unexpected aside while timed: {aside}"),
        };
        self.violation.get_or_insert(why.clone());
        serde_json::json!({"error": why})
    }

    /// The judge's sealing time of the sets handed out (decrypting costs the same).
    pub fn seal_ms_served(&self) -> f64 {
        self.seal_ms.iter().take(self.next).sum()
    }
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

/// Variables a candidate worker inherits from kg-bench's environment, by exact name.
const ENV_EXACT: [&str; 24] = [
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
];
/// ... and by prefix: locale, GPU runtimes and compilers, the frameworks' own settings,
/// thread counts, kernelgate's own markers, and the Python environment managers whose
/// interpreter launchers (pyenv shims, conda) need their variables.
const ENV_PREFIXES: [&str; 17] = [
    "LC_", "CUDA_", "NVIDIA_", "ROCM_", "HIP_", "HSA_", "ROCR_", "AMD_", "TRITON_", "TORCH_",
    "PYTORCH_", "CUBLAS", "OMP_", "MKL_", "KG_", "PYENV", "CONDA_",
];

/// Whether a candidate worker may inherit the variable `name`: an allow-list, so tokens and
/// credentials in kg-bench's environment (cloud keys, CI secrets) never reach untrusted code.
/// The candidate runs Python with `-I`, which ignores `PYTHON*` variables anyway.
pub fn worker_env_allowed(name: &str) -> bool {
    ENV_EXACT.contains(&name) || ENV_PREFIXES.iter().any(|p| name.starts_with(p))
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
            "KG_WORKER_TAG",
            "HIP_VISIBLE_DEVICES",
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
        let ask = |i: u64| serde_json::json!({"aside": true, "op": "timed_key", "index": i});
        assert_eq!(k.answer(&ask(0))["key"], "11");
        assert_eq!(k.answer(&ask(1))["key"], "22");
        assert_eq!(k.seal_ms_served(), 3.0, "the first two sets served");
        assert!(k.violation.is_none());
        // Asking again, skipping ahead, or past the end: refused and recorded.
        assert!(k.answer(&ask(1)).get("key").is_none());
        assert!(
            k.violation
                .as_deref()
                .unwrap()
                .contains("set 1 when set 2 was due")
        );
        let mut k2 = TimedKeys::new(vec!["1".into()], vec![0.5]);
        assert!(k2.answer(&ask(3)).get("error").is_some());
        assert!(
            k2.answer(&serde_json::json!({"aside": true, "op": "other"}))
                .get("error")
                .is_some()
        );
        let mut k3 = TimedKeys::new(vec!["1".into()], vec![0.5]);
        assert_eq!(k3.answer(&ask(0))["key"], "1");
        assert!(k3.answer(&ask(1)).get("error").is_some());
        assert_eq!(k3.seal_ms_served(), 0.5, "only the one set served");
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
