//! Running a command under a claim (`kg-gpu claim -- CMD`): the child sees only the claimed
//! device, gets the evidence file in `KG_GPU_CLAIM`, runs in its own process group, and
//! receives SIGINT/SIGTERM/SIGHUP forwarded to that group; the claim is finished (clocks
//! restored, lock released) after the child is gone, however it ended.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::Duration;

use kg_contract::GpuClaim;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

use crate::claim::Claim;
use crate::env;

/// Seconds a child gets after a forwarded signal before its group is killed.
pub const GRACE: Duration = Duration::from_secs(10);

/// How long leftover members of the child's group get after SIGTERM, and again after SIGKILL.
pub const GROUP_GRACE: Duration = Duration::from_secs(2);

/// Running the child failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// No command given.
    #[error("no command given; usage: kg-gpu claim -- CMD ARGS...")]
    NoCommand,
    /// The command could not be started.
    #[error("failed to start `{command}`: {source}")]
    Spawn {
        /// Program.
        command: String,
        /// OS error.
        source: std::io::Error,
    },
    /// Waiting for the command failed.
    #[error("failed to wait for `{command}`: {source}")]
    Wait {
        /// Program.
        command: String,
        /// OS error.
        source: std::io::Error,
    },
    /// Signal handlers could not be installed.
    #[error("failed to install signal handlers: {0}")]
    Signals(std::io::Error),
    /// Writing the evidence failed.
    #[error("failed to write claim evidence: {0}")]
    Evidence(#[from] kg_contract::ContractError),
}

/// How the claimed command ended.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The command's exit code, or 128 + signal when a signal ended it.
    pub exit_code: i32,
    /// The signal forwarded to the child, if any.
    pub forwarded_signal: Option<i32>,
    /// The final evidence (after-sample, clock restore, end time).
    pub evidence: GpuClaim,
    /// The recovery file this claim left (unverified cleanup or restore), if any.
    pub recovery: Option<std::path::PathBuf>,
    /// What it says is unverified.
    pub recovery_pending: Vec<crate::recovery::Pending>,
}

fn write_evidence(path: &Path, claim: &GpuClaim) -> Result<(), RunError> {
    let text = kg_contract::io::to_json_pretty(claim, "claim evidence")?;
    kg_contract::io::write_atomic(path, text.as_bytes())?;
    Ok(())
}

fn exit_code(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    }
}

/// Runs `command` under `claim`, writing the evidence to `evidence_path` before the child
/// starts and again (completed) after it ends.
pub fn run_claimed(
    mut claim: Claim,
    command: &[String],
    evidence_path: &Path,
) -> Result<RunOutcome, RunError> {
    let Some((program, args)) = command.split_first() else {
        return Err(RunError::NoCommand);
    };
    write_evidence(evidence_path, claim.evidence())?;

    let child_pgid = Arc::new(AtomicI32::new(0));
    let pending = Arc::new(AtomicI32::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP]).map_err(RunError::Signals)?;
    let handle = signals.handle();
    let forwarder = {
        let (child_pgid, pending, done) = (child_pgid.clone(), pending.clone(), done.clone());
        std::thread::spawn(move || {
            let mut count = 0;
            for sig in signals.forever() {
                count += 1;
                pending
                    .compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst)
                    .ok();
                let pgid = child_pgid.load(Ordering::SeqCst);
                if pgid > 0 {
                    let s = if count > 1 {
                        kg_proc::Signal::KILL
                    } else {
                        kg_proc::Signal::from_named_raw(sig).unwrap_or(kg_proc::Signal::TERM)
                    };
                    tracing::info!(signal = sig, "forwarding {s:?} to the claimed command");
                    kg_proc::signal_group(pgid.unsigned_abs(), s);
                    if count == 1 {
                        let done = done.clone();
                        std::thread::spawn(move || {
                            std::thread::sleep(GRACE);
                            if !done.load(Ordering::SeqCst) {
                                tracing::warn!(
                                    "command still running after the grace period; killing its group"
                                );
                                kg_proc::signal_group(pgid.unsigned_abs(), kg_proc::Signal::KILL);
                            }
                        });
                    }
                }
            }
        })
    };

    let mut cmd = Command::new(program);
    cmd.args(args)
        .envs(claim.child_env())
        .env(env::KG_GPU_CLAIM, evidence_path)
        .process_group(0);
    let spawned = cmd.spawn();
    let mut group = 0;
    let status = match spawned {
        Ok(mut child) => {
            let pid = i32::try_from(child.id()).unwrap_or(0);
            child_pgid.store(pid, Ordering::SeqCst);
            group = pid;
            // A signal that arrived before the child existed is forwarded now.
            let early = pending.load(Ordering::SeqCst);
            if early != 0 && pid > 0 {
                kg_proc::signal_group(
                    pid.unsigned_abs(),
                    kg_proc::Signal::from_named_raw(early).unwrap_or(kg_proc::Signal::TERM),
                );
            }
            let r = child.wait();
            done.store(true, Ordering::SeqCst);
            r.map_err(|source| RunError::Wait {
                command: program.clone(),
                source,
            })
        }
        Err(source) => Err(RunError::Spawn {
            command: program.clone(),
            source,
        }),
    };
    handle.close();
    let _ = forwarder.join();
    // The owner keeps L1 through the child's cleanup: what the child left in its group is
    // ended here, and a group that will not die is recorded as unverified cleanup.
    if group > 0 {
        let survivors = kg_proc::end_group(group.unsigned_abs(), GROUP_GRACE);
        if !survivors.is_empty() {
            tracing::error!(
                pgid = group,
                ?survivors,
                "the claimed command's process group survived SIGKILL; leaving recovery evidence"
            );
            claim.mark_cleanup_unverified(group, survivors);
        }
    }
    // The claim ends here on every path: restore clocks, release the lock.
    let recovery_path = claim.recovery_path();
    let evidence = claim.finish_keeping_pending();
    let (evidence, recovery_pending) = evidence;
    let recovery = (!recovery_pending.is_empty()).then_some(recovery_path);
    let write = write_evidence(evidence_path, &evidence);
    let status = status?;
    write?;
    let sig = pending.load(Ordering::SeqCst);
    Ok(RunOutcome {
        exit_code: exit_code(status),
        forwarded_signal: (sig != 0).then_some(sig),
        evidence,
        recovery,
        recovery_pending,
    })
}
