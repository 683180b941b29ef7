//! The L2 execution lock, held by kg-bench (the parent) while its workers run kernels.
//!
//! kg-gpu's ownership rules (and the SOL ExecBench ROCm port's) let the borrowers of a claim
//! serialise their device work on `gpu-<UUID>.L2-execution.lock`. The workers cannot be the
//! ones to take it: the sandboxed candidate sees a read-only filesystem and a private `/tmp`,
//! so it may be unable to open the lock file, and a lock it held could be kept (or dropped)
//! at the candidate's whim. So the parent takes it, with a blocking `flock` bounded by
//! `KG_GPU_L2_TIMEOUT` ([`kg_gpu::lock::l2_timeout`]), around each workload's requests (inputs,
//! reference, candidate runs, timing, comparison) and each reference check, and the trace's
//! log says so. A wait that runs out is a harness fault: the candidate gets no status.
//!
//! Which lock: the one of the claim kg-bench holds itself (`KG_GPU_L2_LOCK` in the workers'
//! environment), else the one its own environment names (an enclosing `kg-gpu claim`, or the
//! port's native owner exporting `GPU_LOCK_DIR` + `GPU_LOCK_UUID`). A CPU run, or a device used
//! unclaimed (`--device cuda:N`), has no lock to take.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kg_gpu::ExecutionLock;
use kg_gpu::lock::{l2_from, l2_timeout};

use crate::engine::{EvalOptions, ExecError};

/// The L2 lock a run contends for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct L2Gate {
    /// The lock file.
    pub path: PathBuf,
    /// The device UUID (empty when only the file is known).
    pub uuid: String,
    /// How long to wait for it.
    pub timeout: Duration,
}

/// A held L2 lock; released on drop.
pub struct L2Held {
    _lock: ExecutionLock,
    path: PathBuf,
    waited: Duration,
}

impl L2Held {
    /// The line recorded in the trace's log.
    pub fn note(&self) -> String {
        format!(
            "harness: held the L2 execution lock `{}` while this ran (waited {:.3} s for it)",
            self.path.display(),
            self.waited.as_secs_f64()
        )
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl L2Gate {
    /// The gate for a run whose workers get `worker_env`, looking up this process's
    /// environment through `get` when the workers' names none.
    pub fn resolve(
        worker_env: &[(String, String)],
        get: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<L2Gate>, kg_gpu::EnvError> {
        let from_workers = |n: &str| {
            worker_env
                .iter()
                .rev()
                .find(|(k, _)| k == n)
                .map(|(_, v)| v.clone())
        };
        let found = match l2_from(&from_workers)? {
            Some(f) => Some(f),
            None => l2_from(get)?,
        };
        Ok(found.map(|(path, uuid)| L2Gate {
            path,
            uuid,
            timeout: l2_timeout(),
        }))
    }

    /// Waits for the lock (up to [`L2Gate::timeout`]).
    pub fn hold(&self, what: &str) -> Result<L2Held, kg_gpu::LockError> {
        let start = Instant::now();
        let command = vec!["kg-bench".to_string(), what.to_string()];
        let lock = ExecutionLock::acquire(&self.path, &self.uuid, &command, self.timeout)?;
        Ok(L2Held {
            _lock: lock,
            path: self.path.clone(),
            waited: start.elapsed(),
        })
    }
}

/// Holds the run's L2 lock for one workload of `definition`; `None` when the run has none
/// (CPU, or a device used unclaimed). Failing to get it is [`ExecError::HarnessFault`].
pub fn hold_for_workload(
    opts: &EvalOptions,
    definition: &str,
    workload: &str,
) -> Result<Option<L2Held>, ExecError> {
    if opts.device.is_cpu() {
        return Ok(None);
    }
    let fault = |detail: String| ExecError::HarnessFault {
        definition: definition.to_string(),
        workload: workload.to_string(),
        detail,
    };
    let gate = L2Gate::resolve(&opts.worker_env, &|n| std::env::var(n).ok())
        .map_err(|e| fault(format!("the L2 execution lock cannot be named: {e}")))?;
    let Some(gate) = gate else {
        return Ok(None);
    };
    let held = gate
        .hold(&format!("{definition}/{workload}"))
        .map_err(|e| fault(e.to_string()))?;
    tracing::debug!(lock = %held.path().display(), "holding the L2 execution lock");
    Ok(Some(held))
}

/// `outcome_log` with the L2 note in front, when a lock was held.
pub fn with_note(held: &Option<L2Held>, outcome_log: String) -> String {
    match held {
        Some(h) if outcome_log.is_empty() => h.note(),
        Some(h) => format!("{}\n{outcome_log}", h.note()),
        None => outcome_log,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "8aff74a1-0000-1000-80ea-f6c8f2a1a0a1";

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn the_workers_claim_names_the_lock_before_the_process_environment() {
        let dir = tempfile::tempdir().unwrap();
        let own = dir.path().join("own.lock");
        let workers = vec![("KG_GPU_L2_LOCK".to_string(), own.display().to_string())];
        let outer = dir.path().display().to_string();
        let get = |n: &str| match n {
            "GPU_LOCK_DIR" => Some(outer.clone()),
            "GPU_LOCK_UUID" => Some(UUID.to_string()),
            _ => None,
        };
        let g = L2Gate::resolve(&workers, &get).unwrap().unwrap();
        assert_eq!(g.path, own);
        // The port's native owner: directory and UUID from our environment.
        let g = L2Gate::resolve(&[], &get).unwrap().unwrap();
        assert_eq!(
            g.path,
            dir.path().join(format!("gpu-{UUID}.L2-execution.lock"))
        );
        assert!(L2Gate::resolve(&[], &no_env).unwrap().is_none());
    }

    #[test]
    fn a_held_lock_makes_the_next_holder_wait_and_time_out() {
        let dir = tempfile::tempdir().unwrap();
        let gate = L2Gate {
            path: dir.path().join("gpu-x.L2-execution.lock"),
            uuid: UUID.into(),
            timeout: Duration::from_millis(150),
        };
        let first = gate.hold("a/w0").unwrap();
        assert!(first.note().contains("held the L2 execution lock"));
        assert_eq!(
            with_note(&Some(first), "log".into()).lines().nth(1),
            Some("log")
        );
        let first = gate.hold("a/w0").unwrap();
        let err = gate.hold("a/w1").err().unwrap();
        assert!(err.to_string().contains("KG_GPU_L2_TIMEOUT"), "{err}");
        drop(first);
        gate.hold("a/w1").unwrap();
    }

    #[test]
    fn a_claimed_device_run_holds_l2_per_workload_and_a_cpu_run_does_not() {
        use crate::placement::DeviceChoice;
        let dir = tempfile::tempdir().unwrap();
        let lock = dir.path().join("gpu-x.L2-execution.lock");
        let mut opts = EvalOptions::new(DeviceChoice::Rocm(0));
        opts.worker_env = vec![("KG_GPU_L2_LOCK".into(), lock.display().to_string())];
        let held = hold_for_workload(&opts, "def", "w0").unwrap().unwrap();
        assert_eq!(held.path(), lock);
        // While held, the lock's owner record names the workload.
        let owner = kg_gpu::lock::read_owner(&lock).unwrap();
        assert_eq!(owner.command, ["kg-bench", "def/w0"]);
        drop(held);
        assert!(kg_gpu::lock::read_owner(&lock).is_none(), "released");
        let mut cpu = EvalOptions::new(DeviceChoice::Cpu);
        cpu.worker_env = opts.worker_env.clone();
        assert!(hold_for_workload(&cpu, "def", "w0").unwrap().is_none());
        // A name the port refuses is a harness fault, not a candidate verdict.
        opts.worker_env = vec![
            ("GPU_LOCK_DIR".into(), dir.path().display().to_string()),
            ("GPU_LOCK_UUID".into(), "0".into()),
        ];
        let err = hold_for_workload(&opts, "def", "w0").err().unwrap();
        assert!(matches!(err, ExecError::HarnessFault { .. }), "{err}");
    }
}
