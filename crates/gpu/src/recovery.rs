//! Recovery evidence: what an owner leaves when it cannot verify that it cleaned up.
//!
//! The SOL ExecBench ROCm port requires that "unverified cleanup or restoration leaves native
//! recovery evidence blocking a later owner". Ours is `<dir>/gpu-<UUID>.recovery.json`, a
//! [`RecoveryRecord`] written by the L1 owner, under L1:
//!
//! - **before** it changes clocks ([`Pending::ClockRestore`]), and removed only after the
//!   restore call succeeded: an owner killed in between (SIGKILL, power loss) leaves it;
//! - when the restore call fails (the record then carries the error);
//! - when the claimed command's process group still has members after SIGTERM and SIGKILL
//!   ([`Pending::ChildCleanup`]).
//!
//! While the file exists no claim takes the device ([`crate::ClaimError::RecoveryRequired`]).
//! [`recover`] (`kg-gpu recover --device UUID`) takes L1, redoes what is pending (resets the
//! clocks, checks the old process group is gone) and only then removes the file. An
//! unreadable file blocks too: evidence is never discarded because it cannot be parsed.

use std::path::{Path, PathBuf};

use kg_contract::LockOwner;
use serde::{Deserialize, Serialize};

use crate::backend::{BackendSelection, Discovery};
use crate::error::{ClaimError, LockError};
use crate::lock::{self, HeldLock, Level};
use crate::sys;

/// Version of [`RecoveryRecord`].
pub const SCHEMA_VERSION: u32 = 1;

/// What is still unverified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Pending {
    /// Clocks were locked (or about to be) and their restore has not been confirmed.
    ClockRestore {
        /// The restore call's error, when it was made and failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The claimed command's process group still had members after SIGTERM and SIGKILL.
    ChildCleanup {
        /// The process group id.
        pgid: i32,
        /// Pids still in the group when the owner gave up.
        survivors: Vec<u32>,
    },
}

impl std::fmt::Display for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pending::ClockRestore { error: None } => {
                f.write_str("clocks were locked and their restore was never confirmed")
            }
            Pending::ClockRestore { error: Some(e) } => write!(f, "the clock restore failed: {e}"),
            Pending::ChildCleanup { pgid, survivors } => write!(
                f,
                "process group {pgid} still had members {survivors:?} after SIGKILL"
            ),
        }
    }
}

/// `gpu-<UUID>.recovery.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecoveryRecord {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Device UUID.
    pub uuid: String,
    /// The owner that left it.
    pub owner: LockOwner,
    /// RFC 3339 UTC time of the last update.
    pub written_utc: String,
    /// What is unverified; never empty in a written file.
    pub pending: Vec<Pending>,
}

impl RecoveryRecord {
    /// One line: every pending item, and who left it.
    pub fn summary(&self) -> String {
        let items: Vec<String> = self.pending.iter().map(ToString::to_string).collect();
        format!(
            "{} (left by pid {} on {}, command `{}`, at {})",
            items.join("; "),
            self.owner.pid,
            self.owner.host,
            self.owner.command.join(" "),
            self.written_utc
        )
    }
}

/// A recovery file as found on disk.
#[derive(Debug, Clone, PartialEq)]
pub enum Marker {
    /// A readable record.
    Record(Box<RecoveryRecord>),
    /// A file that is not a readable record (it still blocks).
    Unreadable(String),
}

impl Marker {
    /// One line for messages.
    pub fn summary(&self) -> String {
        match self {
            Marker::Record(r) => r.summary(),
            Marker::Unreadable(why) => format!("the recovery evidence is unreadable ({why})"),
        }
    }
}

/// The recovery file of `uuid` in `dir`.
pub fn marker_path(dir: &Path, uuid: &str) -> PathBuf {
    let l1 = lock::lock_path(dir, uuid, Level::L1Ownership);
    let name = l1
        .file_name()
        .map(|n| {
            n.to_string_lossy()
                .replace(".L1-ownership.lock", ".recovery.json")
        })
        .unwrap_or_else(|| "gpu-unknown.recovery.json".into());
    dir.join(name)
}

/// Reads the recovery file at `path`; `None` when there is none.
pub fn read(path: &Path) -> Option<Marker> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return Some(Marker::Unreadable(e.to_string())),
    };
    Some(match serde_json::from_str(&text) {
        Ok(r) => Marker::Record(Box::new(r)),
        Err(e) => Marker::Unreadable(e.to_string()),
    })
}

/// Writes (atomically) or, when nothing is pending, removes the recovery file.
pub fn store(path: &Path, record: &RecoveryRecord) -> Result<(), LockError> {
    if record.pending.is_empty() {
        return remove(path);
    }
    let text = serde_json::to_string_pretty(record).map_err(|e| LockError::Io {
        action: "serialise recovery evidence for",
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    kg_contract::io::write_atomic(path, text.as_bytes()).map_err(|e| LockError::Io {
        action: "write recovery evidence",
        path: path.to_path_buf(),
        source: std::io::Error::other(e.to_string()),
    })
}

/// Removes the recovery file (absent is fine).
pub fn remove(path: &Path) -> Result<(), LockError> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(LockError::Io {
            action: "remove recovery evidence",
            path: path.to_path_buf(),
            source,
        }),
    }
}

pub use kg_proc::group_members;

/// One recovery file, as `kg-gpu status` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecoveryStatus {
    /// Device UUID (from the file name).
    pub uuid: String,
    /// The file.
    pub path: PathBuf,
    /// The record, when readable.
    pub record: Option<RecoveryRecord>,
    /// What is pending and who left it (or why the file is unreadable).
    pub summary: String,
}

/// Every recovery file in `dir`, sorted by UUID. A missing directory has none.
pub fn list(dir: &Path) -> Result<Vec<RecoveryStatus>, LockError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(LockError::Io {
                action: "list",
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(uuid) = name
            .strip_prefix("gpu-")
            .and_then(|r| r.strip_suffix(".recovery.json"))
        else {
            continue;
        };
        let path = e.path();
        let Some(m) = read(&path) else { continue };
        out.push(RecoveryStatus {
            uuid: uuid.to_string(),
            summary: m.summary(),
            record: match m {
                Marker::Record(r) => Some(*r),
                Marker::Unreadable(_) => None,
            },
            path,
        });
    }
    out.sort_by(|a, b| a.uuid.cmp(&b.uuid));
    Ok(out)
}

/// What [`recover`] did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecoveryOutcome {
    /// The recovery file.
    pub path: PathBuf,
    /// The record that was cleared; `None` when there was nothing to recover.
    pub cleared: Option<RecoveryRecord>,
    /// What was checked or redone, one line each.
    pub actions: Vec<String>,
}

/// Clears the recovery evidence of `uuid` after redoing what it says is pending: takes L1
/// (refused while anyone holds it), resets the clocks through the SMI backend, and checks
/// the recorded process group is empty (same host only). `force` clears what cannot be
/// verified (another host's process group, an unreadable file) instead of refusing.
pub fn recover(
    dir: &Path,
    uuid: &str,
    backends: &BackendSelection,
    force: bool,
) -> Result<RecoveryOutcome, ClaimError> {
    let path = marker_path(dir, uuid);
    let Some(marker) = read(&path) else {
        return Ok(RecoveryOutcome {
            path,
            cleared: None,
            actions: vec!["no recovery evidence: nothing to do".into()],
        });
    };
    let me = lock::owner_record(
        uuid,
        Level::L1Ownership,
        &["kg-gpu".into(), "recover".into()],
    );
    let l1_path = lock::lock_path(dir, uuid, Level::L1Ownership);
    let (l1, _) = HeldLock::try_acquire(&l1_path, Level::L1Ownership, &me)?;
    let fail = |reason: String| ClaimError::RecoveryFailed {
        uuid: uuid.to_string(),
        path: path.clone(),
        reason,
    };
    let record = match marker {
        Marker::Record(r) => *r,
        Marker::Unreadable(why) if force => {
            remove(&path)?;
            drop(l1);
            return Ok(RecoveryOutcome {
                path,
                cleared: None,
                actions: vec![format!(
                    "removed unreadable recovery evidence ({why}) with --force"
                )],
            });
        }
        Marker::Unreadable(why) => {
            return Err(fail(format!(
                "the evidence is unreadable ({why}); inspect it, then pass --force"
            )));
        }
    };
    let mut actions = Vec::new();
    for p in &record.pending {
        match p {
            Pending::ClockRestore { .. } => {
                let mut discovery = Discovery::load(backends);
                let found = discovery
                    .devices()
                    .map_err(|e| fail(format!("cannot enumerate devices to reset clocks: {e}")))?
                    .into_iter()
                    .find(|f| f.info.uuid == record.uuid)
                    .ok_or_else(|| {
                        fail(format!(
                            "device {} is not visible to any backend, so its clocks cannot be reset",
                            record.uuid
                        ))
                    })?;
                discovery
                    .backend_mut(found.backend)
                    .ok_or_else(|| fail("backend gone".into()))?
                    .reset_clocks(found.info.smi_index)
                    .map_err(|e| fail(format!("the clock reset failed: {e}")))?;
                actions.push(format!("reset the clocks of {}", record.uuid));
            }
            Pending::ChildCleanup { pgid, .. } if record.owner.host == sys::hostname() => {
                let left = group_members(*pgid);
                if !left.is_empty() && !force {
                    return Err(fail(format!(
                        "process group {pgid} still has members {left:?}; end them (or pass --force)"
                    )));
                }
                actions.push(if left.is_empty() {
                    format!("process group {pgid} is gone")
                } else {
                    format!("process group {pgid} still has {left:?}; cleared with --force")
                });
            }
            Pending::ChildCleanup { pgid, .. } => {
                if !force {
                    return Err(fail(format!(
                        "process group {pgid} ran on host {}, which this host cannot check; check it there, then pass --force",
                        record.owner.host
                    )));
                }
                actions.push(format!(
                    "process group {pgid} on {} not checked; cleared with --force",
                    record.owner.host
                ));
            }
        }
    }
    remove(&path)?;
    l1.release()?;
    Ok(RecoveryOutcome {
        path,
        cleared: Some(record),
        actions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_sits_next_to_the_locks_and_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let p = marker_path(dir.path(), "GPU-a/b");
        assert!(p.ends_with("gpu-GPU-a_b.recovery.json"), "{}", p.display());
        assert!(read(&p).is_none());
        let rec = RecoveryRecord {
            schema_version: SCHEMA_VERSION,
            uuid: "GPU-a/b".into(),
            owner: lock::owner_record("GPU-a/b", Level::L1Ownership, &["x".into()]),
            written_utc: sys::now_utc(),
            pending: vec![Pending::ClockRestore { error: None }],
        };
        store(&p, &rec).unwrap();
        assert_eq!(read(&p), Some(Marker::Record(Box::new(rec.clone()))));
        assert!(rec.summary().contains("restore was never confirmed"));
        std::fs::write(&p, "{").unwrap();
        assert!(matches!(read(&p), Some(Marker::Unreadable(_))));
        store(
            &p,
            &RecoveryRecord {
                pending: Vec::new(),
                ..rec
            },
        )
        .unwrap();
        assert!(read(&p).is_none(), "nothing pending removes the file");
    }

    #[test]
    fn own_group_has_members_and_a_dead_group_has_none() {
        let me = nix::unistd::getpgrp().as_raw();
        assert!(group_members(me).contains(&std::process::id()));
        assert!(group_members(i32::MAX - 7).is_empty());
    }
}
