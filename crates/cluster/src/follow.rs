//! Waiting for an array's tasks and telling what became of each.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use kg_proc::CancelToken;

use crate::{ArraySpec, ClusterError, Slurm};

/// Where one task (shard) stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskState {
    /// Queued, not started.
    Pending,
    /// Started.
    Running,
    /// `kg-bench run` gave verdicts (its exit code, 0 or 1) and wrote its shard manifest.
    Succeeded {
        /// `kg-bench run`'s exit code.
        exit: i32,
    },
    /// Anything else: why, in words (exit code, accounting state).
    Failed {
        /// What happened.
        why: String,
    },
}

impl TaskState {
    /// Whether the task is over.
    pub fn finished(&self) -> bool {
        matches!(self, TaskState::Succeeded { .. } | TaskState::Failed { .. })
    }
}

/// What became of task `k` once it left the queue, from the files it leaves: its exit record
/// and its shard manifest. `accounting` says how Slurm saw it end, where known.
pub fn task_outcome(spec: &ArraySpec, k: u32, accounting: Option<String>) -> TaskState {
    let seen = accounting
        .map(|a| format!(" (Slurm: {a})"))
        .unwrap_or_default();
    let exit = std::fs::read_to_string(spec.exit_path(k))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok());
    match exit {
        Some(code @ (0 | 1)) if spec.shard_dir(k).join("shard.json").is_file() => {
            TaskState::Succeeded { exit: code }
        }
        Some(code @ (0 | 1)) => TaskState::Failed {
            why: format!("kg-bench run exited {code} but wrote no shard.json{seen}"),
        },
        Some(code) => TaskState::Failed {
            why: format!("kg-bench run exited {code}{seen}"),
        },
        None => TaskState::Failed {
            why: format!(
                "left the queue without an exit record: killed (time limit, memory, node failure, scancel) or never started{seen}"
            ),
        },
    }
}

/// Follows `tasks` of the submissions `jobs` until every one has finished, polling `squeue`
/// every `poll`; `on_change` hears each task's state when it changes (first report included).
/// A task that left the queue is judged by [`task_outcome`].
pub fn follow(
    slurm: &Slurm,
    spec: &ArraySpec,
    jobs: &[String],
    tasks: &[u32],
    poll: Duration,
    cancel: &CancelToken,
    on_change: &mut dyn FnMut(u32, &TaskState),
) -> Result<BTreeMap<u32, TaskState>, ClusterError> {
    let mut states: BTreeMap<u32, TaskState> = BTreeMap::new();
    loop {
        let queued = slurm.queue(jobs)?;
        for &k in tasks {
            if states.get(&k).is_some_and(TaskState::finished) {
                continue;
            }
            // The latest submission of a task is the one that counts.
            let q = queued
                .iter()
                .filter(|q| q.task == k)
                .max_by_key(|q| q.job_id.parse::<u64>().unwrap_or(0));
            let now = match q {
                Some(q) if matches!(q.state.as_str(), "PENDING" | "CONFIGURING") => {
                    TaskState::Pending
                }
                Some(_) => TaskState::Running,
                None => {
                    let job = jobs.last().map(String::as_str).unwrap_or("");
                    let acct = match std::fs::read_to_string(spec.exit_path(k)) {
                        Ok(_) => None,
                        Err(_) => slurm.accounting(job, k),
                    };
                    task_outcome(spec, k, acct)
                }
            };
            if states.get(&k) != Some(&now) {
                on_change(k, &now);
                states.insert(k, now);
            }
        }
        if tasks
            .iter()
            .all(|k| states.get(k).is_some_and(TaskState::finished))
        {
            return Ok(states);
        }
        let until = Instant::now() + poll;
        while Instant::now() < until {
            if cancel.is_cancelled() {
                return Err(ClusterError::Cancelled);
            }
            std::thread::sleep(Duration::from_millis(100).min(poll));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(out: &std::path::Path) -> ArraySpec {
        ArraySpec {
            job_name: "kg".into(),
            shards: 3,
            kg_bench: "/opt/kg/kg-bench".into(),
            corpus: "/data/problems core".into(),
            out: out.to_path_buf(),
            run_args: vec!["--device".into(), "cpu".into()],
            gpus_per_task: 0,
            cpus_per_task: None,
            partition: None,
            time: None,
            account: None,
            extra: Vec::new(),
        }
    }

    #[test]
    fn a_task_succeeds_only_with_a_verdict_exit_and_its_shard_manifest() {
        let tmp = tempfile::tempdir().unwrap();
        let s = spec(tmp.path());
        std::fs::create_dir_all(s.slurm_dir()).unwrap();
        // No exit record: killed by Slurm; accounting named where known.
        let t = task_outcome(&s, 1, Some("TIMEOUT 0:15".into()));
        assert!(
            matches!(&t, TaskState::Failed { why } if why.contains("without an exit record") && why.contains("TIMEOUT")),
            "{t:?}"
        );
        // A verdict exit but no manifest (the run stopped before its summary).
        std::fs::write(s.exit_path(1), "1\n").unwrap();
        assert!(matches!(
            task_outcome(&s, 1, None),
            TaskState::Failed { .. }
        ));
        std::fs::create_dir_all(s.shard_dir(1)).unwrap();
        std::fs::write(s.shard_dir(1).join("shard.json"), "{}").unwrap();
        assert_eq!(task_outcome(&s, 1, None), TaskState::Succeeded { exit: 1 });
        // Exit 2 (bad input) or 3 (no verdict) fail the task even with a manifest left over.
        std::fs::write(s.exit_path(1), "3\n").unwrap();
        let t = task_outcome(&s, 1, None);
        assert!(
            matches!(&t, TaskState::Failed { why } if why.contains("exited 3")),
            "{t:?}"
        );
    }

    #[test]
    fn the_script_runs_shard_k_of_n_and_records_the_exit_code() {
        let s = ArraySpec {
            gpus_per_task: 2,
            partition: Some("gpu".into()),
            time: Some("01:00:00".into()),
            extra: vec!["--qos=high".into()],
            ..spec(std::path::Path::new("/runs/r1"))
        };
        s.check().unwrap();
        let text = s.script();
        for line in [
            "#SBATCH --array=1-3\n",
            "#SBATCH --output=/runs/r1/slurm/task-%a.log\n",
            "#SBATCH --gres=gpu:2\n",
            "#SBATCH --partition=gpu\n",
            "#SBATCH --time=01:00:00\n",
            "#SBATCH --qos=high\n",
            "/opt/kg/kg-bench run '/data/problems core' --shard \"$K\"/3 -o /runs/r1/shards/\"$K\" --device cpu\n",
            "echo \"$rc\" > /runs/r1/slurm/task-\"$K\".exit\n",
        ] {
            assert!(text.contains(line), "missing {line:?} in:\n{text}");
        }
        // Every #SBATCH line comes before the first command (sbatch stops reading them there).
        let first_cmd = text.find("set -u").unwrap();
        assert!(text.rfind("#SBATCH").unwrap() < first_cmd);
        // Flags that cannot be one #SBATCH line, or that the script sets itself.
        for bad in [
            ArraySpec {
                partition: Some("a b".into()),
                ..s.clone()
            },
            ArraySpec {
                extra: vec!["--qos=x\n--wrap=evil".into()],
                ..s.clone()
            },
            ArraySpec {
                run_args: vec!["--shard".into(), "1/2".into()],
                ..s.clone()
            },
            ArraySpec {
                shards: 0,
                ..s.clone()
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn shell_quote_keeps_words_and_quotes_the_rest() {
        assert_eq!(crate::shell_quote("--device"), "--device");
        assert_eq!(crate::shell_quote("a b"), "'a b'");
        assert_eq!(crate::shell_quote("it's"), "'it'\\''s'");
        assert_eq!(crate::shell_quote(""), "''");
        assert_eq!(crate::shell_quote("$HOME"), "'$HOME'");
    }
}
