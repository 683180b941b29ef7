//! The job array's `sbatch` script, the files each task leaves, and the job state file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{ClusterError, io_err};

/// [`JobState::format`].
pub const STATE_FORMAT: &str = "kernelgate-slurm-v1";

/// A corpus run as a Slurm job array: one task per shard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArraySpec {
    /// `#SBATCH --job-name`.
    pub job_name: String,
    /// Number of shards (array tasks `1-N`).
    pub shards: u32,
    /// The `kg-bench` binary every task runs (absolute: tasks start elsewhere).
    pub kg_bench: PathBuf,
    /// The corpus (absolute).
    pub corpus: PathBuf,
    /// The run directory: `shards/K` per task, `slurm/` for the script, logs and exit records,
    /// and the merged run at the top.
    pub out: PathBuf,
    /// Flags for `kg-bench run` after the corpus (not `--shard` or `-o`: the script sets them).
    pub run_args: Vec<String>,
    /// GPUs per task (`#SBATCH --gres=gpu:G`); 0 asks for none.
    pub gpus_per_task: u32,
    /// `#SBATCH --cpus-per-task`.
    pub cpus_per_task: Option<u32>,
    /// `#SBATCH --partition`.
    pub partition: Option<String>,
    /// `#SBATCH --time`.
    pub time: Option<String>,
    /// `#SBATCH --account`.
    pub account: Option<String>,
    /// More `#SBATCH` lines, each without the `#SBATCH ` prefix (e.g. `--qos=high`).
    pub extra: Vec<String>,
}

/// Quotes `s` for a POSIX shell (single quotes).
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl ArraySpec {
    /// Refuses values that would not survive as one `#SBATCH` line or one shell word.
    pub fn check(&self) -> Result<(), ClusterError> {
        let bad = |flag: &str, value: &str, why: &str| ClusterError::BadFlag {
            flag: flag.into(),
            value: value.into(),
            why: why.into(),
        };
        if self.shards == 0 {
            return Err(bad("--shards", "0", "needs at least one shard"));
        }
        let lines = [
            ("--job-name", Some(&self.job_name)),
            ("--partition", self.partition.as_ref()),
            ("--time", self.time.as_ref()),
            ("--account", self.account.as_ref()),
        ];
        for (flag, v) in lines {
            if let Some(v) = v
                && (v.is_empty() || v.contains(char::is_whitespace))
            {
                return Err(bad(flag, v, "must be one word (no spaces or newlines)"));
            }
        }
        for e in &self.extra {
            if e.contains('\n') || e.contains('\r') {
                return Err(bad("--sbatch", e, "must be one line"));
            }
            if !e.trim_start().starts_with('-') {
                return Err(bad(
                    "--sbatch",
                    e,
                    "is an sbatch option such as `--qos=high` (without `#SBATCH`)",
                ));
            }
        }
        for a in &self.run_args {
            if a == "--shard" || a.starts_with("--shard=") || a == "-o" || a == "--output" {
                return Err(bad(
                    "run flag",
                    a,
                    "is set by the script itself (each task's shard and directory)",
                ));
            }
        }
        Ok(())
    }

    /// `OUT/slurm`: the script, the state file, logs and exit records.
    pub fn slurm_dir(&self) -> PathBuf {
        self.out.join("slurm")
    }

    /// `OUT/slurm/job.sbatch`.
    pub fn script_path(&self) -> PathBuf {
        self.slurm_dir().join("job.sbatch")
    }

    /// `OUT/slurm/state.json`.
    pub fn state_path(&self) -> PathBuf {
        self.slurm_dir().join("state.json")
    }

    /// Task `k`'s shard run directory, `OUT/shards/K`.
    pub fn shard_dir(&self, k: u32) -> PathBuf {
        self.out.join("shards").join(k.to_string())
    }

    /// Task `k`'s log (stdout and stderr), `OUT/slurm/task-K.log`.
    pub fn log_path(&self, k: u32) -> PathBuf {
        self.slurm_dir().join(format!("task-{k}.log"))
    }

    /// The last `bytes` of task `k`'s log (empty when it has none).
    pub fn log_tail(&self, k: u32, bytes: usize) -> String {
        let text = std::fs::read_to_string(self.log_path(k)).unwrap_or_default();
        kg_proc::tail(&text, bytes).to_string()
    }

    /// Task `k`'s exit record: `kg-bench run`'s exit code, written when it returns.
    pub fn exit_path(&self, k: u32) -> PathBuf {
        self.slurm_dir().join(format!("task-{k}.exit"))
    }

    /// The `sbatch` script: an array `1-N`; each task runs its shard into `OUT/shards/K` and
    /// records `kg-bench run`'s exit code. Exit 0 and 1 are verdicts (the task succeeded);
    /// anything else fails the task in Slurm's accounting too.
    pub fn script(&self) -> String {
        let q = |p: &Path| shell_quote(&p.display().to_string());
        let mut s = String::from("#!/bin/bash\n");
        s.push_str(&format!("#SBATCH --job-name={}\n", self.job_name));
        s.push_str(&format!("#SBATCH --array=1-{}\n", self.shards));
        s.push_str(&format!(
            "#SBATCH --output={}\n",
            self.slurm_dir().join("task-%a.log").display()
        ));
        if self.gpus_per_task > 0 {
            s.push_str(&format!("#SBATCH --gres=gpu:{}\n", self.gpus_per_task));
        }
        if let Some(c) = self.cpus_per_task {
            s.push_str(&format!("#SBATCH --cpus-per-task={c}\n"));
        }
        for (flag, v) in [
            ("partition", &self.partition),
            ("time", &self.time),
            ("account", &self.account),
        ] {
            if let Some(v) = v {
                s.push_str(&format!("#SBATCH --{flag}={v}\n"));
            }
        }
        for e in &self.extra {
            s.push_str(&format!("#SBATCH {}\n", e.trim()));
        }
        s.push_str(&format!(
            "# Written by kg-bench slurm: task K of this array evaluates shard K/{n} of the corpus\n\
             # (kg-bench run --shard K/{n}); kg-bench merge joins the shards when all are done.\n",
            n = self.shards
        ));
        s.push_str("set -u\n");
        s.push_str("K=\"${SLURM_ARRAY_TASK_ID:?not inside a Slurm array task}\"\n");
        let slurm = q(&self.slurm_dir());
        s.push_str(&format!("rm -f {slurm}/task-\"$K\".exit\n"));
        let mut cmd = vec![q(&self.kg_bench), "run".into(), q(&self.corpus)];
        cmd.push("--shard".into());
        cmd.push(format!("\"$K\"/{}", self.shards));
        cmd.push("-o".into());
        cmd.push(format!("{}/\"$K\"", q(&self.out.join("shards"))));
        cmd.extend(self.run_args.iter().map(|a| shell_quote(a)));
        s.push_str(&cmd.join(" "));
        s.push('\n');
        s.push_str("rc=$?\n");
        s.push_str(&format!("echo \"$rc\" > {slurm}/task-\"$K\".exit\n"));
        s.push_str("# 0: every workload passed, 1: some did not; both are verdicts.\n");
        s.push_str("if [ \"$rc\" -le 1 ]; then exit 0; fi\n");
        s.push_str("exit \"$rc\"\n");
        s
    }
}

/// One submission of the array (the first, or a retry of some tasks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmittedJob {
    /// Slurm's job id.
    pub job_id: String,
    /// The tasks (shards) it runs.
    pub tasks: Vec<u32>,
    /// When it was submitted (UTC, RFC 3339).
    pub submitted_at: String,
}

impl SubmittedJob {
    /// A submission made now.
    pub fn now(job_id: String, tasks: Vec<u32>) -> SubmittedJob {
        SubmittedJob {
            job_id,
            tasks,
            submitted_at: kg_proc::now_utc(),
        }
    }
}

/// `OUT/slurm/state.json`: the job and its submissions, for `--retry-failed`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobState {
    /// [`STATE_FORMAT`].
    pub format: String,
    /// The job.
    pub spec: ArraySpec,
    /// Every submission, oldest first.
    pub jobs: Vec<SubmittedJob>,
}

impl JobState {
    /// Reads a state file.
    pub fn load(path: &Path) -> Result<JobState, ClusterError> {
        let text = std::fs::read_to_string(path).map_err(io_err("read", path))?;
        let s: JobState = serde_json::from_str(&text).map_err(|e| ClusterError::State {
            path: path.to_path_buf(),
            why: e.to_string(),
        })?;
        if s.format != STATE_FORMAT {
            return Err(ClusterError::State {
                path: path.to_path_buf(),
                why: format!("format `{}`, expected `{STATE_FORMAT}`", s.format),
            });
        }
        Ok(s)
    }

    /// Writes it (atomically: a temporary file renamed over it).
    pub fn save(&self) -> Result<(), ClusterError> {
        let path = self.spec.state_path();
        let text = serde_json::to_string_pretty(self).map_err(|e| ClusterError::State {
            path: path.clone(),
            why: e.to_string(),
        })?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text).map_err(io_err("write", &tmp))?;
        std::fs::rename(&tmp, &path).map_err(io_err("rename into place", &path))
    }

    /// The ids of every submission.
    pub fn job_ids(&self) -> Vec<String> {
        self.jobs.iter().map(|j| j.job_id.clone()).collect()
    }
}
