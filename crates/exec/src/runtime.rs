//! Where session directories live, and how the leftovers of dead runs are removed.
//!
//! Every [`crate::Session`] keeps its worker scripts, the candidate's scratch and the transfer
//! files in one directory under a single runtime directory ([`runtime_dir`]: `$KG_RUNTIME_DIR`,
//! else `<temp dir>/kernelgate-<uid>`). A session directory is named after its owner's pid
//! and that process's start time (`kg-<pid>-<start>-<random>`); a `kill -9` of kg-bench
//! leaves it behind, and the next session sweeps every directory whose owner is gone (the pid
//! is dead, or now belongs to a process that started at another time).

use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use kg_proc::start_ticks as start_time;

/// The environment variable that overrides [`runtime_dir`].
pub const KG_RUNTIME_DIR: &str = "KG_RUNTIME_DIR";

/// Why a runtime or session directory could not be made.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// Creating or reading a directory failed.
    #[error("failed to {what} `{path}`: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The directory.
        path: PathBuf,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// The runtime directory is not ours alone (another user's, or a symlink): refused, since
    /// whoever owns it could read or replace a session's files.
    #[error(
        "the runtime directory `{path}` is {why}; remove it or set ${KG_RUNTIME_DIR} to a directory only this user owns"
    )]
    NotPrivate {
        /// The directory.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
}

/// `$KG_RUNTIME_DIR`, else `<temp dir>/kernelgate-<euid>`.
pub fn runtime_dir() -> PathBuf {
    std::env::var_os(KG_RUNTIME_DIR).map_or_else(
        || {
            std::env::temp_dir().join(format!(
                "kernelgate-{}",
                rustix::process::geteuid().as_raw()
            ))
        },
        PathBuf::from,
    )
}

/// The owner named by a session directory's name, if it is one of ours.
fn owner_of(name: &str) -> Option<(u32, u64)> {
    let mut it = name.strip_prefix("kg-")?.splitn(3, '-');
    let pid = it.next()?.parse().ok()?;
    let start = it.next()?.parse().ok()?;
    it.next()?;
    Some((pid, start))
}

/// Makes sure `dir` exists, belongs to us and only we can enter it.
fn ensure_private(dir: &Path) -> Result<(), RuntimeError> {
    match std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(source) => {
            return Err(RuntimeError::Io {
                what: "create",
                path: dir.to_path_buf(),
                source,
            });
        }
    }
    let meta = std::fs::symlink_metadata(dir).map_err(|source| RuntimeError::Io {
        what: "inspect",
        path: dir.to_path_buf(),
        source,
    })?;
    let me = rustix::process::geteuid().as_raw();
    let why = if meta.file_type().is_symlink() {
        Some("a symlink".to_string())
    } else if meta.uid() != me {
        Some(format!("owned by uid {}, not {me}", meta.uid()))
    } else if meta.mode() & 0o077 != 0 {
        Some(format!("open to others (mode {:o})", meta.mode() & 0o777))
    } else {
        None
    };
    match why {
        Some(why) => Err(RuntimeError::NotPrivate {
            path: dir.to_path_buf(),
            why,
        }),
        None => Ok(()),
    }
}

/// Removes every session directory in `base` whose owner is gone; returns what it removed.
pub fn sweep(base: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(base) else {
        return removed;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some((pid, start)) = name.to_str().and_then(owner_of) else {
            continue;
        };
        // Start time 0: its owner could not read its own start time; only a dead pid frees it
        // (a live owner must never lose its directory to another run's sweep).
        if start_time(pid) == Some(start)
            || (start == 0 && Path::new(&format!("/proc/{pid}")).exists())
        {
            continue;
        }
        let path = e.path();
        match std::fs::remove_dir_all(&path) {
            Ok(()) => removed.push(path),
            Err(err) => {
                tracing::warn!(path = %path.display(), "failed to remove a dead run's session directory: {err}");
            }
        }
    }
    removed
}

/// A new session directory under [`runtime_dir`], after sweeping the dead runs' leftovers.
pub fn session_dir() -> Result<tempfile::TempDir, RuntimeError> {
    session_dir_in(&runtime_dir())
}

/// [`session_dir`] under `base`.
pub fn session_dir_in(base: &Path) -> Result<tempfile::TempDir, RuntimeError> {
    ensure_private(base)?;
    for p in sweep(base) {
        tracing::info!(path = %p.display(), "removed a session directory left by a dead run");
    }
    let pid = std::process::id();
    let start = start_time(pid).unwrap_or(0);
    tempfile::Builder::new()
        .prefix(&format!("kg-{pid}-{start}-"))
        .tempdir_in(base)
        .map_err(|source| RuntimeError::Io {
            what: "create a session directory in",
            path: base.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A directory left by a process that is gone is swept; ours and foreign names stay.
    #[test]
    fn the_next_session_sweeps_what_a_dead_run_left() {
        let base = tempfile::tempdir().unwrap();
        let base = base.path().join("rt");
        let mut dead = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = dead.id();
        dead.wait().unwrap();
        let leftover = base.join(format!("kg-{dead_pid}-12345-abc"));
        std::fs::create_dir_all(leftover.join("cand-1/home")).unwrap();
        std::fs::write(leftover.join("cand-1/home/x"), "x").unwrap();
        let me = std::process::id();
        // Our own pid, but another start time: the pid was reused.
        let reused = base.join(format!("kg-{me}-1-abc"));
        std::fs::create_dir_all(&reused).unwrap();
        let foreign = base.join("not-a-session");
        std::fs::create_dir_all(&foreign).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700)).unwrap();
        let ours = session_dir_in(&base).unwrap();
        assert!(!leftover.exists());
        assert!(!reused.exists());
        assert!(foreign.exists());
        assert!(ours.path().exists());
        // An owner that could not read its start time (0) keeps its directory while alive.
        let unknown_start = base.join(format!("kg-{me}-0-abc"));
        std::fs::create_dir_all(&unknown_start).unwrap();
        drop(session_dir_in(&base).unwrap());
        assert!(unknown_start.exists());
        // A second session keeps the first one's directory: its owner is alive.
        let second = session_dir_in(&base).unwrap();
        assert!(ours.path().exists() && second.path().exists());
        let name = ours
            .path()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(owner_of(&name).map(|o| o.0), Some(me));
    }

    #[test]
    fn a_runtime_dir_open_to_others_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let rt = base.path().join("rt");
        std::fs::create_dir(&rt).unwrap();
        std::fs::set_permissions(&rt, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = session_dir_in(&rt).unwrap_err();
        assert!(e.to_string().contains("open to others"), "{e}");
    }
}
