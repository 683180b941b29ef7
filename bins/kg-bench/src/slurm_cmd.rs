//! `kg-bench slurm`: a corpus run as a Slurm job array (one task per shard), followed to the
//! end and merged; flags and printing around `kg_cluster`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use clap::Args;
use kg_cluster::{ArraySpec, ClusterError, JobState, STATE_FORMAT, Slurm, SubmittedJob, TaskState};
use kg_contract::{chain, exit};
use kg_exec::CancelToken;
use kg_exec::shard::MergeOptions;

use kg_cli::{Failure, usage};

/// Exit codes of `slurm`.
pub const EXIT_SLURM: &str = "Exit codes:
  0    every task gave verdicts, the shards merged, and every workload PASSED (--dry-run: the
       script was printed)
  1    merged, and a workload did not pass or a problem failed to load; or a shard's evidence
       does not verify (nothing merged)
  2    bad input, no Slurm here, a submission Slurm refused, or OUT already holds a job
  3    a task failed (named, with its log): no merge; --retry-failed resubmits the failed tasks
  130  interrupted while following: the array keeps running; --retry-failed follows it again";

/// `kg-bench slurm`.
#[derive(Args)]
pub struct SlurmArgs {
    /// Corpus directory (problem directories at any depth below), as for `run`.
    #[arg(required_unless_present = "retry_failed")]
    corpus_dir: Option<PathBuf>,
    /// The job's directory: `shards/K` (each task's run), `slurm/` (the script, logs, exit
    /// records, state), and the merged run (traces and summary.json) at the top.
    #[arg(short, long)]
    output: PathBuf,
    /// Number of shards, one array task each.
    #[arg(long, required_unless_present = "retry_failed", value_parser = clap::value_parser!(u32).range(1..))]
    shards: Option<u32>,
    /// GPUs per task (`#SBATCH --gres=gpu:G`); each task then runs `--gpus all` over the GPUs
    /// Slurm gave it, claimed through kg-gpu. 0: none, and the tasks run `--device cpu` unless
    /// the run flags name a device.
    #[arg(long, default_value_t = 0)]
    gpus_per_task: u32,
    /// `#SBATCH --cpus-per-task`.
    #[arg(long)]
    cpus_per_task: Option<u32>,
    /// `#SBATCH --partition`.
    #[arg(long)]
    partition: Option<String>,
    /// `#SBATCH --time` (e.g. `02:00:00`).
    #[arg(long)]
    time: Option<String>,
    /// `#SBATCH --account`.
    #[arg(long)]
    account: Option<String>,
    /// Another `#SBATCH` line, as its option (`--sbatch=--qos=high`; repeatable).
    #[arg(long = "sbatch", value_name = "OPTION", allow_hyphen_values = true)]
    sbatch: Vec<String>,
    /// `#SBATCH --job-name`.
    #[arg(long, default_value = "kg-bench")]
    job_name: String,
    /// Print the script; submit nothing, write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Resubmit the tasks of the job in OUTPUT that failed (following any still running
    /// first), then follow and merge.
    #[arg(long, conflicts_with_all = ["corpus_dir", "shards", "dry_run"])]
    retry_failed: bool,
    /// Seconds between `squeue` polls.
    #[arg(long, default_value_t = 10.0)]
    poll: f64,
    /// Print the merged summary as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Flags for each task's `kg-bench run`, after `--` (e.g. `-- --device cpu --solutions
    /// bundled`).
    #[arg(last = true, value_name = "RUN_FLAGS")]
    run_args: Vec<String>,
}

fn absolute(p: &Path) -> Result<PathBuf, Failure> {
    std::path::absolute(p).map_err(|e| usage(anyhow!("`{}`: {e}", p.display())))
}

/// The job described by the flags.
fn spec_of(a: &SlurmArgs) -> Result<ArraySpec, Failure> {
    let corpus = a
        .corpus_dir
        .as_deref()
        .ok_or_else(|| usage(anyhow!("give the corpus directory")))?;
    let corpus = std::fs::canonicalize(corpus).map_err(|e| {
        usage(anyhow!(
            "corpus `{}`: {e} (every task reads it: use a path on a shared filesystem)",
            corpus.display()
        ))
    })?;
    let kg_bench = std::env::current_exe()
        .map_err(|e| usage(anyhow!("cannot tell where kg-bench is: {e}")))?;
    let mut run_args = a.run_args.clone();
    let named = |f: &str| {
        run_args
            .iter()
            .any(|x| x == f || x.starts_with(&format!("{f}=")))
    };
    // A task uses what Slurm gave it: the GPUs of `--gres` through `--gpus all`, and without
    // GPUs asked for, the CPU (an idle-looking GPU of the node may be another job's).
    if !named("--gpus") && !named("--device") {
        if a.gpus_per_task > 0 {
            run_args.extend(["--gpus".to_string(), "all".to_string()]);
        } else {
            run_args.extend(["--device".to_string(), "cpu".to_string()]);
        }
    }
    let spec = ArraySpec {
        job_name: a.job_name.clone(),
        shards: a.shards.unwrap_or(1),
        kg_bench,
        corpus,
        out: absolute(&a.output)?,
        run_args,
        gpus_per_task: a.gpus_per_task,
        cpus_per_task: a.cpus_per_task,
        partition: a.partition.clone(),
        time: a.time.clone(),
        account: a.account.clone(),
        extra: a.sbatch.clone(),
    };
    spec.check().map_err(usage)?;
    Ok(spec)
}

fn cluster(e: ClusterError) -> Failure {
    match e {
        ClusterError::Cancelled => Failure {
            code: 130,
            error: e.into(),
        },
        other => usage(other),
    }
}

/// Runs `slurm`.
pub(crate) fn slurm(a: SlurmArgs, cancel: &CancelToken) -> Result<i32, Failure> {
    let slurm = Slurm::default();
    let poll = Duration::from_secs_f64(a.poll.max(0.1));
    let state = if a.retry_failed {
        let path = absolute(&a.output)?.join("slurm").join("state.json");
        let mut state = JobState::load(&path).map_err(usage)?;
        let before = states_now(&slurm, &state)?;
        let failed: Vec<u32> = before
            .iter()
            .filter(|(_, s)| matches!(s, TaskState::Failed { .. }))
            .map(|(k, _)| *k)
            .collect();
        if failed.is_empty() {
            eprintln!("no failed task to resubmit");
        } else {
            let job_id = slurm
                .submit(&state.spec.script_path(), Some(&failed))
                .map_err(cluster)?;
            eprintln!(
                "resubmitted task(s) {} as job {job_id}",
                failed
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(",")
            );
            state.jobs.push(SubmittedJob::now(job_id, failed));
            state.save().map_err(usage)?;
        }
        state
    } else {
        let spec = spec_of(&a)?;
        if a.dry_run {
            print!("{}", spec.script());
            return Ok(exit::OK);
        }
        if spec.state_path().exists() {
            return Err(usage(anyhow!(
                "`{}` exists: this directory holds a job already; `kg-bench slurm --retry-failed -o {}` resubmits its failed tasks, or choose another --output",
                spec.state_path().display(),
                a.output.display()
            )));
        }
        std::fs::create_dir_all(spec.slurm_dir())
            .map_err(|e| usage(anyhow!("`{}`: {e}", spec.slurm_dir().display())))?;
        let script = spec.script_path();
        std::fs::write(&script, spec.script())
            .map_err(|e| usage(anyhow!("`{}`: {e}", script.display())))?;
        let job_id = slurm.submit(&script, None).map_err(cluster)?;
        eprintln!(
            "submitted job {job_id}: {} task(s), script {}, logs {}/task-K.log",
            spec.shards,
            script.display(),
            spec.slurm_dir().display()
        );
        let jobs = vec![SubmittedJob::now(job_id, tasks_of(&spec))];
        let state = JobState {
            format: STATE_FORMAT.into(),
            spec,
            jobs,
        };
        state.save().map_err(usage)?;
        state
    };
    let spec = state.spec.clone();
    let tasks = tasks_of(&spec);
    let started = Instant::now();
    let n = spec.shards;
    eprintln!(
        "following (squeue every {} s; Ctrl-C stops following, not the job)",
        poll.as_secs_f64()
    );
    let states = kg_cluster::follow(
        &slurm,
        &spec,
        &state.job_ids(),
        &tasks,
        poll,
        cancel,
        &mut |k, s| report(&spec, k, n, s, started),
    )
    .map_err(|e| match e {
        ClusterError::Cancelled => Failure {
            code: 130,
            error: anyhow!(
                "stopped following; the array keeps running (`scancel {}` stops it; `kg-bench slurm --retry-failed -o {}` follows it again)",
                state.job_ids().join(" "),
                a.output.display()
            ),
        },
        other => usage(other),
    })?;
    finish(&spec, &states, &a)
}

fn tasks_of(spec: &ArraySpec) -> Vec<u32> {
    (1..=spec.shards).collect()
}

/// Where every task stands now (without waiting for those still queued: they are followed).
fn states_now(slurm: &Slurm, state: &JobState) -> Result<BTreeMap<u32, TaskState>, Failure> {
    let queued = slurm.queue(&state.job_ids()).map_err(cluster)?;
    let spec = &state.spec;
    Ok((1..=spec.shards)
        .map(|k| {
            let s = if queued.iter().any(|q| q.task == k) {
                TaskState::Running
            } else {
                kg_cluster::task_outcome(spec, k, None)
            };
            (k, s)
        })
        .collect())
}

fn report(spec: &ArraySpec, k: u32, n: u32, s: &TaskState, started: Instant) {
    let t = started.elapsed().as_secs();
    match s {
        TaskState::Pending => eprintln!("task {k}/{n}: pending"),
        TaskState::Running => eprintln!("task {k}/{n}: running ({t} s)"),
        TaskState::Succeeded { exit } => eprintln!(
            "task {k}/{n}: done ({}) at {t} s",
            if *exit == 0 {
                "all passed"
            } else {
                "verdicts, not all passed"
            }
        ),
        TaskState::Failed { why } => eprintln!(
            "task {k}/{n}: FAILED at {t} s: {why}; log {}",
            spec.log_path(k).display()
        ),
    }
}

/// Merges when every task succeeded; else names the failed ones with their logs' last lines.
fn finish(
    spec: &ArraySpec,
    states: &BTreeMap<u32, TaskState>,
    a: &SlurmArgs,
) -> Result<i32, Failure> {
    let failed: Vec<(u32, &String)> = states
        .iter()
        .filter_map(|(k, s)| match s {
            TaskState::Failed { why } => Some((*k, why)),
            _ => None,
        })
        .collect();
    if !failed.is_empty() {
        for (k, why) in &failed {
            let log = spec.log_path(*k);
            eprintln!("task {k} failed: {why}\n  log: {}", log.display());
            for l in spec.log_tail(*k, 800).lines() {
                eprintln!("  | {l}");
            }
        }
        return Err(Failure {
            code: exit::NO_VERDICT,
            error: anyhow!(
                "{} of {} task(s) failed; nothing merged. `kg-bench slurm --retry-failed -o {}` resubmits them",
                failed.len(),
                spec.shards,
                a.output.display()
            ),
        });
    }
    let merged = spec.out.join("summary.json");
    if let Ok((s, _)) = kg_contract::io::load_json::<kg_exec::corpus::RunSummary>(&merged)
        && !s.merged_from.is_empty()
    {
        eprintln!("already merged: {}", merged.display());
        println!("{}", crate::output::summary_line(&s));
        return Ok(if s.all_passed() {
            exit::OK
        } else {
            exit::FAILED
        });
    }
    let opts = MergeOptions {
        run_id: chain::new_run_id().map_err(usage)?,
        ..MergeOptions::default()
    };
    let dirs: Vec<PathBuf> = (1..=spec.shards).map(|k| spec.shard_dir(k)).collect();
    let outcome = crate::merge_cmd::merge_shards(&spec.out, &dirs, &opts)?;
    crate::merge_cmd::print_merged(&outcome, a.json, false)?;
    let s = &outcome.summary;
    Ok(if s.all_passed() {
        exit::OK
    } else {
        exit::FAILED
    })
}
