//! Slurm's own commands: `sbatch` to submit, `squeue` to watch, `sacct` to ask how a task
//! ended (when the cluster keeps accounting).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::ClusterError;

/// How long one Slurm command may take (a busy controller answers slowly, not never).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// The Slurm client commands, found on `PATH` (and `SLURM_CONF` from the environment).
#[derive(Debug, Clone, Default)]
pub struct Slurm {
    /// Extra environment for every command (tests point `SLURM_CONF` elsewhere).
    pub env: Vec<(String, String)>,
}

/// One array task as `squeue` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedTask {
    /// The job id (`123` of `123_4`).
    pub job_id: String,
    /// The array task id (`4`).
    pub task: u32,
    /// Slurm's state name (`PENDING`, `RUNNING`, `COMPLETING`, ...).
    pub state: String,
}

/// Parses `squeue -h -r -o %i|%T` output: one `JOB_TASK|STATE` per line; lines that are not
/// an array task (`123|RUNNING`) are left out.
pub fn parse_squeue(out: &str) -> Vec<QueuedTask> {
    out.lines()
        .filter_map(|l| {
            let (id, state) = l.trim().split_once('|')?;
            let (job, task) = id.split_once('_')?;
            Some(QueuedTask {
                job_id: job.to_string(),
                task: task.parse().ok()?,
                state: state.trim().to_string(),
            })
        })
        .collect()
}

impl Slurm {
    fn run(&self, program: &str, args: &[String]) -> Result<String, ClusterError> {
        let line = format!("{program} {}", args.join(" "));
        if which::which(program).is_err() {
            return Err(ClusterError::NotInstalled {
                command: program.into(),
            });
        }
        let mut cmd = Command::new(program);
        cmd.args(args);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let out = kg_proc::output_with_timeout(cmd, COMMAND_TIMEOUT).map_err(|e| {
            ClusterError::Command {
                command: line.clone(),
                status: "did not start".into(),
                stderr: e.to_string(),
            }
        })?;
        if !out.success {
            return Err(ClusterError::Command {
                command: line,
                status: out.status_text,
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Submits `script`: the whole array, or only `tasks` (a retry). Returns the job id.
    pub fn submit(&self, script: &Path, tasks: Option<&[u32]>) -> Result<String, ClusterError> {
        let mut args = vec!["--parsable".to_string()];
        if let Some(t) = tasks {
            let list: Vec<String> = t.iter().map(ToString::to_string).collect();
            args.push(format!("--array={}", list.join(",")));
        }
        args.push(script.display().to_string());
        let out = self.run("sbatch", &args)?;
        // `--parsable` prints `JOBID` or `JOBID;CLUSTER`.
        let id = out.trim().split(';').next().unwrap_or("").to_string();
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
            return Err(ClusterError::Output {
                command: format!("sbatch {}", args.join(" ")),
                output: out.trim().to_string(),
                expected: "a job id".into(),
            });
        }
        Ok(id)
    }

    /// The array tasks of `jobs` still in the queue.
    pub fn queue(&self, jobs: &[String]) -> Result<Vec<QueuedTask>, ClusterError> {
        let args = vec![
            "-h".to_string(),
            "-r".into(),
            "-o".into(),
            "%i|%T".into(),
            "-j".into(),
            jobs.join(","),
        ];
        match self.run("squeue", &args) {
            Ok(out) => Ok(parse_squeue(&out)),
            // A job that left the queue long ago is "Invalid job id": nothing of it is queued.
            Err(ClusterError::Command { stderr, .. }) if stderr.contains("Invalid job id") => {
                Ok(Vec::new())
            }
            Err(e) => Err(e),
        }
    }

    /// How task `task` of `job` ended, as accounting says (`FAILED 2:0`, `TIMEOUT 0:15`);
    /// `None` where the cluster keeps no accounting or has no record.
    pub fn accounting(&self, job: &str, task: u32) -> Option<String> {
        let args = vec![
            "-n".to_string(),
            "-P".into(),
            "-X".into(),
            "-o".into(),
            "State,ExitCode".into(),
            "-j".into(),
            format!("{job}_{task}"),
        ];
        let out = self.run("sacct", &args).ok()?;
        let line = out.lines().next()?.trim();
        let (state, code) = line.split_once('|')?;
        Some(format!("{state} {code}"))
    }

    /// Cancels `job` (every task still queued or running).
    pub fn cancel(&self, job: &str) -> Result<(), ClusterError> {
        self.run("scancel", &[job.to_string()]).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn squeue_lines_of_array_tasks_parse_and_others_are_left_out() {
        let out = "123_1|RUNNING\n123_3|PENDING\n124|RUNNING\n\n125_x|PENDING\n";
        assert_eq!(
            parse_squeue(out),
            vec![
                QueuedTask {
                    job_id: "123".into(),
                    task: 1,
                    state: "RUNNING".into()
                },
                QueuedTask {
                    job_id: "123".into(),
                    task: 3,
                    state: "PENDING".into()
                },
            ]
        );
    }
}
