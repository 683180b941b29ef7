//! kernelgate on the schedulers GPU clusters already run: a corpus run as a Slurm job array,
//! one task per shard (`kg-bench run --shard K/N`).
//!
//! [`ArraySpec`] is the job: it writes the `sbatch` script and names every file a task leaves
//! (its shard's run directory, its log, its exit record). [`Slurm`] talks to the scheduler
//! through its own commands (`sbatch`, `squeue`, `sacct`), so it works with any Slurm the user
//! can submit to and needs no library of Slurm's. [`follow`] waits for an array's tasks and
//! says what became of each; a task succeeded when `kg-bench run` gave verdicts (exit 0 or 1)
//! and wrote its shard manifest. [`JobState`] is what `--retry-failed` reads back.
//!
//! Other schedulers need no code of ours: they set `--shard K/N` per task (`docs/cluster.md`).

mod follow;
mod script;
mod slurm;

pub use follow::{TaskState, follow, task_outcome};
pub use script::{ArraySpec, JobState, STATE_FORMAT, SubmittedJob, shell_quote};
pub use slurm::{QueuedTask, Slurm, parse_squeue};

use std::path::PathBuf;

/// Errors of cluster work.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A Slurm command is not installed.
    #[error(
        "`{command}` was not found on PATH: kg-bench slurm runs on a Slurm login node (install slurm-wlm, or use `kg-bench run --shard K/N` under another scheduler)"
    )]
    NotInstalled {
        /// The command.
        command: String,
    },
    /// A Slurm command failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// How it ended.
        status: String,
        /// What it said.
        stderr: String,
    },
    /// A Slurm command's output was not understood.
    #[error("`{command}` printed `{output}`, which is not {expected}")]
    Output {
        /// The command line.
        command: String,
        /// What it printed.
        output: String,
        /// What was expected.
        expected: String,
    },
    /// A flag that cannot go into an `#SBATCH` line.
    #[error("{flag} `{value}`: {why}")]
    BadFlag {
        /// The flag.
        flag: String,
        /// Its value.
        value: String,
        /// What is wrong.
        why: String,
    },
    /// File I/O.
    #[error("failed to {what} `{}`: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The job state file does not parse.
    #[error("`{}` is not a kg-bench slurm job state: {why}", path.display())]
    State {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// Following was interrupted (the array keeps running).
    #[error("interrupted while following the array; its tasks keep running")]
    Cancelled,
}

fn io_err(
    what: &'static str,
    path: &std::path::Path,
) -> impl FnOnce(std::io::Error) -> ClusterError {
    let path = path.to_path_buf();
    move |source| ClusterError::Io { what, path, source }
}
