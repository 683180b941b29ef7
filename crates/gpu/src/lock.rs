//! UUID-keyed two-level GPU locks in a lock directory.
//!
//! Layout (the SOL ExecBench ROCm names): `<dir>/gpu-<UUID>.L1-ownership.lock` and
//! `<dir>/gpu-<UUID>.L2-execution.lock`. Both are `flock(2)` locks (`std::fs::File::try_lock`)
//! on files that are never replaced or deleted, so every process locks the same inode; the
//! kernel releases a lock when its holder dies, however it dies.
//!
//! - **L1 ownership**: taken non-blocking by the owner right after selection and held for the
//!   whole claim. The file's content is the owner's [`LockOwner`] record (JSON, rewritten in
//!   place through the locked descriptor); a clean release empties it before unlocking. A
//!   non-empty record on a free lock is therefore **stale**: its owner died without cleaning up
//!   (and, if it says `clocks_locked`, without restoring clocks).
//! - **L2 execution**: contended for, with a bounded wait, by the owner's children (benchmark
//!   workers) to serialise device work. A child borrows the owner's L1; it never takes it over.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kg_contract::LockOwner;
use serde::Serialize;

use crate::env;
use crate::error::{EnvError, LockError};
use crate::sys;

/// The default lock directory: `$XDG_RUNTIME_DIR/kernelgate/gpu-locks`, else
/// `/tmp/kernelgate-gpu-locks-<uid>`.
pub fn default_lock_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR") {
        Some(x) if !x.is_empty() => PathBuf::from(x).join("kernelgate/gpu-locks"),
        _ => PathBuf::from(format!("/tmp/kernelgate-gpu-locks-{}", sys::uid())),
    }
}

/// Where the lock directory came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum DirSource {
    /// `GPU_LOCK_DIR` (the port's name).
    #[serde(rename = "GPU_LOCK_DIR")]
    GpuLockDir,
    /// `KG_GPU_LOCK_DIR` (its alias).
    #[serde(rename = "KG_GPU_LOCK_DIR")]
    KgGpuLockDir,
    /// Neither was set: [`default_lock_dir`].
    #[serde(rename = "default")]
    Default,
}

/// The lock settings read from the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockEnv {
    /// Lock directory.
    pub dir: PathBuf,
    /// Where it came from.
    pub dir_source: DirSource,
    /// The device to own (`GPU_LOCK_UUID` or `KG_GPU_UUID`), a full UUID.
    pub uuid: Option<String>,
}

/// Whether `s` is a full device UUID: 8-4-4-4-12 hex digits (AMD SMI's form), optionally after
/// `GPU-` (NVML's form). An index, a prefix or a PCI bus id is not.
pub fn is_full_uuid(s: &str) -> bool {
    let body = s.strip_prefix("GPU-").unwrap_or(s);
    let groups: Vec<&str> = body.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, n)| g.len() == n && g.chars().all(|c| c.is_ascii_hexdigit()))
}

/// The value of the port's variable `name`, or of its `KG_*` alias; both set differently is
/// refused. Empty counts as unset.
fn aliased(
    get: &dyn Fn(&str) -> Option<String>,
    name: &'static str,
    alias_name: &'static str,
) -> Result<Option<(String, bool)>, EnvError> {
    let read = |n: &str| get(n).filter(|v| !v.is_empty());
    match (read(name), read(alias_name)) {
        (Some(value), Some(alias)) if value != alias => Err(EnvError::Conflict {
            name,
            value,
            alias_name,
            alias,
        }),
        (Some(v), _) => Ok(Some((v, true))),
        (None, Some(a)) => Ok(Some((a, false))),
        (None, None) => Ok(None),
    }
}

/// Reads the lock settings through `get` (the process environment in [`lock_env`]):
/// `GPU_LOCK_DIR` (alias `KG_GPU_LOCK_DIR`) and `GPU_LOCK_UUID` (alias `KG_GPU_UUID`). As the
/// port requires, a device named this way must be a full UUID and comes with an explicit lock
/// directory; the old index-based variables are refused. Without any of them the directory is
/// [`default_lock_dir`].
pub fn lock_env_with(get: &dyn Fn(&str) -> Option<String>) -> Result<LockEnv, EnvError> {
    if let Some(var) = env::OLD_INDEX_LOCK_VARS
        .into_iter()
        .find(|v| get(v).is_some_and(|x| !x.is_empty()))
    {
        return Err(EnvError::OldIndexVariable { var });
    }
    let dir = aliased(get, env::GPU_LOCK_DIR, env::KG_GPU_LOCK_DIR)?;
    let uuid = aliased(get, env::GPU_LOCK_UUID, env::KG_GPU_UUID)?;
    let uuid = match uuid {
        Some((u, port)) => {
            let var = if port {
                env::GPU_LOCK_UUID
            } else {
                env::KG_GPU_UUID
            };
            if !is_full_uuid(&u) {
                return Err(EnvError::NotFullUuid { var, value: u });
            }
            if dir.is_none() {
                return Err(EnvError::DirRequired { var });
            }
            Some(u)
        }
        None => None,
    };
    let (dir, dir_source) = match dir {
        Some((d, true)) => (PathBuf::from(d), DirSource::GpuLockDir),
        Some((d, false)) => (PathBuf::from(d), DirSource::KgGpuLockDir),
        None => (default_lock_dir(), DirSource::Default),
    };
    Ok(LockEnv {
        dir,
        dir_source,
        uuid,
    })
}

/// [`lock_env_with`] on the process environment.
pub fn lock_env() -> Result<LockEnv, EnvError> {
    lock_env_with(&|n| std::env::var(n).ok())
}

/// The lock directory only, never failing: `GPU_LOCK_DIR`, else `KG_GPU_LOCK_DIR`, else
/// [`default_lock_dir`]. Callers that claim should use [`lock_env`], which refuses what the
/// port refuses.
pub fn lock_dir_from_env() -> PathBuf {
    [env::GPU_LOCK_DIR, env::KG_GPU_LOCK_DIR]
        .into_iter()
        .find_map(|n| std::env::var_os(n).filter(|d| !d.is_empty()))
        .map(PathBuf::from)
        .unwrap_or_else(default_lock_dir)
}

/// The L2 execution lock a borrower of the claim described by `get` contends for:
/// `KG_GPU_L2_LOCK` when set, else `gpu-<UUID>.L2-execution.lock` in the lock directory when
/// both are named (`GPU_LOCK_DIR` + `GPU_LOCK_UUID`, as the port's native owner exports them,
/// or their aliases). Returns the path and the device UUID.
pub fn l2_from(
    get: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<(PathBuf, String)>, EnvError> {
    let uuid = aliased(get, env::GPU_LOCK_UUID, env::KG_GPU_UUID)?.map(|(u, _)| u);
    if let Some(p) = get(env::KG_GPU_L2_LOCK).filter(|p| !p.is_empty()) {
        return Ok(Some((PathBuf::from(p), uuid.unwrap_or_default())));
    }
    let dir = aliased(get, env::GPU_LOCK_DIR, env::KG_GPU_LOCK_DIR)?.map(|(d, _)| d);
    Ok(match (dir, uuid) {
        (Some(d), Some(u)) => {
            if !is_full_uuid(&u) {
                return Err(EnvError::NotFullUuid {
                    var: env::GPU_LOCK_UUID,
                    value: u,
                });
            }
            Some((lock_path(Path::new(&d), &u, Level::L2Execution), u))
        }
        _ => None,
    })
}

/// Lock level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Level {
    /// L1 ownership.
    L1Ownership,
    /// L2 execution.
    L2Execution,
}

impl Level {
    /// `l1-ownership` / `l2-execution`.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::L1Ownership => "l1-ownership",
            Level::L2Execution => "l2-execution",
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            Level::L1Ownership => ".L1-ownership.lock",
            Level::L2Execution => ".L2-execution.lock",
        }
    }
}

fn safe_uuid(uuid: &str) -> String {
    uuid.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The lock file of `uuid` at `level` in `dir`.
pub fn lock_path(dir: &Path, uuid: &str, level: Level) -> PathBuf {
    dir.join(format!("gpu-{}{}", safe_uuid(uuid), level.suffix()))
}

fn io<'a>(action: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> LockError + 'a {
    move |source| LockError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

fn open(path: &Path) -> Result<File, LockError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io("create the directory of", path))?;
    }
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io("open", path))
}

fn read_record(file: &mut File) -> Option<LockOwner> {
    let mut text = String::new();
    file.seek(SeekFrom::Start(0)).ok()?;
    file.read_to_string(&mut text).ok()?;
    if text.trim().is_empty() {
        return None;
    }
    match serde_json::from_str(&text) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(error = %e, "unreadable lock owner record");
            None
        }
    }
}

/// Reads the owner record of a lock file without locking it.
pub fn read_owner(path: &Path) -> Option<LockOwner> {
    let mut f = File::open(path).ok()?;
    read_record(&mut f)
}

fn write_record(file: &mut File, path: &Path, owner: Option<&LockOwner>) -> Result<(), LockError> {
    file.set_len(0).map_err(io("truncate", path))?;
    file.seek(SeekFrom::Start(0)).map_err(io("seek", path))?;
    if let Some(o) = owner {
        let text = serde_json::to_string_pretty(o).unwrap_or_default();
        file.write_all(text.as_bytes()).map_err(io("write", path))?;
        file.write_all(b"\n").map_err(io("write", path))?;
    }
    file.sync_data().map_err(io("sync", path))
}

/// Builds this process's owner record.
pub fn owner_record(uuid: &str, level: Level, command: &[String]) -> LockOwner {
    let pid = std::process::id();
    LockOwner {
        schema_version: kg_contract::claim::LOCK_OWNER_SCHEMA_VERSION,
        uuid: uuid.to_string(),
        level: level.as_str().to_string(),
        pid,
        pid_start_ticks: sys::pid_start_ticks(pid),
        host: sys::hostname(),
        started_utc: sys::now_utc(),
        command: command.to_vec(),
        clocks_locked: false,
    }
}

/// A held lock (L1 or L2). Dropping it empties the record and unlocks.
#[derive(Debug)]
pub struct HeldLock {
    file: File,
    path: PathBuf,
    level: Level,
    released: bool,
}

impl HeldLock {
    /// Takes the lock without waiting. A short retry (3 × 10 ms) absorbs `kg-gpu status`
    /// probes, which hold a shared lock for microseconds.
    pub fn try_acquire(
        path: &Path,
        level: Level,
        owner: &LockOwner,
    ) -> Result<(HeldLock, Option<LockOwner>), LockError> {
        let mut file = open(path)?;
        let mut tries = 0;
        loop {
            match file.try_lock() {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if tries < 3 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(LockError::Busy {
                        uuid: owner.uuid.clone(),
                        path: path.to_path_buf(),
                        owner: read_record(&mut file).map(Box::new),
                    });
                }
                Err(TryLockError::Error(e)) => return Err(io("lock", path)(e)),
            }
        }
        let stale = read_record(&mut file);
        if let Some(s) = &stale {
            tracing::warn!(
                pid = s.pid,
                host = %s.host,
                since = %s.started_utc,
                clocks_locked = s.clocks_locked,
                "lock `{}` had a stale owner record (owner died without releasing)",
                path.display()
            );
        }
        write_record(&mut file, path, Some(owner))?;
        Ok((
            HeldLock {
                file,
                path: path.to_path_buf(),
                level,
                released: false,
            },
            stale,
        ))
    }

    /// Waits up to `timeout` for the lock, logging while waiting.
    pub fn acquire_wait(
        path: &Path,
        level: Level,
        owner: &LockOwner,
        timeout: Duration,
    ) -> Result<HeldLock, LockError> {
        let start = Instant::now();
        let mut logged = false;
        loop {
            match Self::try_acquire(path, level, owner) {
                Ok((held, _)) => return Ok(held),
                Err(LockError::Busy { owner: holder, .. }) => {
                    if start.elapsed() >= timeout {
                        return Err(LockError::Timeout {
                            path: path.to_path_buf(),
                            waited_s: start.elapsed().as_secs_f64(),
                        });
                    }
                    if !logged {
                        tracing::info!(
                            holder = holder.map(|h| h.pid).unwrap_or(0),
                            "waiting for lock `{}` (up to {:.0} s; {} changes the limit)",
                            path.display(),
                            timeout.as_secs_f64(),
                            env::KG_GPU_L2_TIMEOUT
                        );
                        logged = true;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Rewrites the owner record (e.g. after clocks were locked).
    pub fn update(&mut self, owner: &LockOwner) -> Result<(), LockError> {
        write_record(&mut self.file, &self.path, Some(owner))
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The level.
    pub fn level(&self) -> Level {
        self.level
    }

    /// Empties the record and unlocks.
    pub fn release(mut self) -> Result<(), LockError> {
        self.release_inner()
    }

    fn release_inner(&mut self) -> Result<(), LockError> {
        if self.released {
            return Ok(());
        }
        self.released = true;
        let r = write_record(&mut self.file, &self.path, None);
        let u = self.file.unlock().map_err(io("unlock", &self.path));
        r.and(u)
    }
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        if let Err(e) = self.release_inner() {
            tracing::warn!(error = %e, "failed to release lock cleanly");
        }
    }
}

/// The L2 execution lock, taken by a child of a claim owner.
pub struct ExecutionLock {
    held: HeldLock,
}

impl ExecutionLock {
    /// Takes the L2 lock a borrower of the enclosing claim contends for ([`l2_from`]:
    /// `KG_GPU_L2_LOCK`, or `GPU_LOCK_DIR` + `GPU_LOCK_UUID`), waiting up to [`l2_timeout`].
    pub fn from_env(command: &[String]) -> Result<Option<ExecutionLock>, LockError> {
        let Some((path, uuid)) = l2_from(&|n| std::env::var(n).ok())? else {
            return Ok(None);
        };
        Self::acquire(&path, &uuid, command, l2_timeout()).map(Some)
    }

    /// Takes an L2 lock file, waiting up to `timeout`.
    pub fn acquire(
        path: &Path,
        uuid: &str,
        command: &[String],
        timeout: Duration,
    ) -> Result<ExecutionLock, LockError> {
        let owner = owner_record(uuid, Level::L2Execution, command);
        let held = HeldLock::acquire_wait(path, Level::L2Execution, &owner, timeout)?;
        Ok(ExecutionLock { held })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        self.held.path()
    }
}

/// How long a borrower waits for L2: `KG_GPU_L2_TIMEOUT` seconds, default 600.
pub fn l2_timeout() -> Duration {
    let s = std::env::var(env::KG_GPU_L2_TIMEOUT)
        .ok()
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .unwrap_or(600.0);
    Duration::from_secs_f64(s)
}

/// State of one lock file, as `kg-gpu status` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LockState {
    /// Held, and the recorded owner is alive on this host.
    Held,
    /// Held, but the owner cannot be verified (another host, or the recorded pid is gone and
    /// a process that inherited the descriptor holds it).
    HeldUnverified,
    /// Free, no record.
    Free,
    /// Free, but a record remains: its owner died without releasing.
    Stale,
}

/// One lock file's status.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LockStatus {
    /// Device UUID (from the file name).
    pub uuid: String,
    /// Level.
    pub level: Level,
    /// Lock file.
    pub path: PathBuf,
    /// State.
    pub state: LockState,
    /// Owner record, when present.
    pub owner: Option<LockOwner>,
    /// Whether a stale record says clocks were locked and never restored.
    pub clocks_possibly_locked: bool,
}

/// Inspects one lock file: probes with a shared lock (released immediately) and checks the
/// recorded owner.
pub fn inspect(path: &Path, uuid: &str, level: Level) -> Result<LockStatus, LockError> {
    let mut file = File::open(path).map_err(io("open", path))?;
    let owner = read_record(&mut file);
    let held = match file.try_lock_shared() {
        Ok(()) => {
            let _ = file.unlock();
            false
        }
        Err(TryLockError::WouldBlock) => true,
        Err(TryLockError::Error(e)) => return Err(io("probe", path)(e)),
    };
    let here = sys::hostname();
    let state = match (&owner, held) {
        (None, false) => LockState::Free,
        (Some(_), false) => LockState::Stale,
        (Some(o), true) if o.host == here && sys::pid_alive(o.pid, o.pid_start_ticks) => {
            LockState::Held
        }
        (_, true) => LockState::HeldUnverified,
    };
    let clocks_possibly_locked =
        state == LockState::Stale && owner.as_ref().is_some_and(|o| o.clocks_locked);
    Ok(LockStatus {
        uuid: uuid.to_string(),
        level,
        path: path.to_path_buf(),
        state,
        owner,
        clocks_possibly_locked,
    })
}

/// Every lock in `dir`, sorted by UUID then level. A missing directory has no locks.
pub fn status(dir: &Path) -> Result<Vec<LockStatus>, LockError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("list", dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let entry = entry.map_err(io("list", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("gpu-") else {
            continue;
        };
        for level in [Level::L1Ownership, Level::L2Execution] {
            if let Some(uuid) = rest.strip_suffix(level.suffix()) {
                out.push(inspect(&entry.path(), uuid, level)?);
            }
        }
    }
    out.sort_by(|a, b| (&a.uuid, a.level.as_str()).cmp(&(&b.uuid, b.level.as_str())));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_acquire_in_process_is_refused_and_release_clears_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(dir.path(), "GPU-abc/def", Level::L1Ownership);
        assert!(path.ends_with("gpu-GPU-abc_def.L1-ownership.lock"));
        let me = owner_record("GPU-abc/def", Level::L1Ownership, &["bench".into()]);
        let (held, stale) = HeldLock::try_acquire(&path, Level::L1Ownership, &me).unwrap();
        assert!(stale.is_none());
        // flock is per open file description: a second open in this process conflicts too.
        let started = Instant::now();
        let err = HeldLock::try_acquire(&path, Level::L1Ownership, &me).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(1));
        match err {
            LockError::Busy { owner, .. } => assert_eq!(owner.unwrap().pid, std::process::id()),
            other => panic!("expected Busy, got {other}"),
        }
        let st = status(dir.path()).unwrap();
        assert_eq!(st.len(), 1);
        assert_eq!(st[0].state, LockState::Held);
        assert_eq!(st[0].uuid, "GPU-abc_def");
        held.release().unwrap();
        assert_eq!(status(dir.path()).unwrap()[0].state, LockState::Free);
        assert!(read_owner(&path).is_none());
    }

    #[test]
    fn leftover_record_on_free_lock_is_stale_and_returned_to_next_owner() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(dir.path(), "GPU-x", Level::L1Ownership);
        let mut dead = owner_record("GPU-x", Level::L1Ownership, &[]);
        dead.pid = 999_999_999;
        dead.clocks_locked = true;
        std::fs::write(&path, serde_json::to_string(&dead).unwrap()).unwrap();
        let st = status(dir.path()).unwrap();
        assert_eq!(st[0].state, LockState::Stale);
        assert!(st[0].clocks_possibly_locked);
        let me = owner_record("GPU-x", Level::L1Ownership, &[]);
        let (_held, stale) = HeldLock::try_acquire(&path, Level::L1Ownership, &me).unwrap();
        assert_eq!(stale.unwrap().pid, 999_999_999);
    }

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: std::collections::HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |n| m.get(n).cloned()
    }

    const AMD_UUID: &str = "8aff74a1-0000-1000-80ea-f6c8f2a1a0a1";

    #[test]
    fn port_lock_dir_alone_is_honoured_and_alias_conflicts_are_refused() {
        let e = lock_env_with(&vars(&[("GPU_LOCK_DIR", "/x/locks")])).unwrap();
        assert_eq!(e.dir, PathBuf::from("/x/locks"));
        assert_eq!(e.dir_source, DirSource::GpuLockDir);
        let e = lock_env_with(&vars(&[("KG_GPU_LOCK_DIR", "/y")])).unwrap();
        assert_eq!(
            (e.dir, e.dir_source),
            (PathBuf::from("/y"), DirSource::KgGpuLockDir)
        );
        let same = vars(&[("GPU_LOCK_DIR", "/x"), ("KG_GPU_LOCK_DIR", "/x")]);
        assert_eq!(lock_env_with(&same).unwrap().dir, PathBuf::from("/x"));
        let err =
            lock_env_with(&vars(&[("GPU_LOCK_DIR", "/x"), ("KG_GPU_LOCK_DIR", "/y")])).unwrap_err();
        assert!(matches!(err, EnvError::Conflict { .. }), "{err}");
        assert_eq!(
            lock_env_with(&vars(&[])).unwrap().dir_source,
            DirSource::Default
        );
    }

    #[test]
    fn lock_uuid_must_be_full_and_needs_an_explicit_dir() {
        for bad in [
            "0",
            "GPU-1111",
            "8aff74a1",
            "0000:19:00.0",
            "8aff74a1-0000-1000-80ea-f6c8f2a1a0a",
        ] {
            let err = lock_env_with(&vars(&[("GPU_LOCK_DIR", "/d"), ("GPU_LOCK_UUID", bad)]))
                .unwrap_err();
            assert!(matches!(err, EnvError::NotFullUuid { .. }), "{bad}: {err}");
        }
        let ok = lock_env_with(&vars(&[
            ("GPU_LOCK_DIR", "/d"),
            ("GPU_LOCK_UUID", AMD_UUID),
        ]))
        .unwrap();
        assert_eq!(ok.uuid.as_deref(), Some(AMD_UUID));
        assert!(is_full_uuid("GPU-11111111-2222-3333-4444-555555555555"));
        let err = lock_env_with(&vars(&[("GPU_LOCK_UUID", AMD_UUID)])).unwrap_err();
        assert!(matches!(err, EnvError::DirRequired { .. }), "{err}");
        assert!(err.to_string().contains("GPU_LOCK_DIR"), "{err}");
        let err = lock_env_with(&vars(&[("SOL_EXECBENCH_GPU_LOCK_DIR", "/old")])).unwrap_err();
        assert!(matches!(err, EnvError::OldIndexVariable { .. }), "{err}");
    }

    #[test]
    fn l2_path_comes_from_the_explicit_file_or_the_port_pair() {
        let p = l2_from(&vars(&[("KG_GPU_L2_LOCK", "/a/l2.lock")])).unwrap();
        assert_eq!(p, Some((PathBuf::from("/a/l2.lock"), String::new())));
        let p = l2_from(&vars(&[
            ("GPU_LOCK_DIR", "/d"),
            ("GPU_LOCK_UUID", AMD_UUID),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            p.0,
            PathBuf::from(format!("/d/gpu-{AMD_UUID}.L2-execution.lock"))
        );
        assert_eq!(l2_from(&vars(&[("GPU_LOCK_DIR", "/d")])).unwrap(), None);
        assert!(l2_from(&vars(&[("GPU_LOCK_DIR", "/d"), ("GPU_LOCK_UUID", "0")])).is_err());
    }

    #[test]
    fn execution_lock_wait_times_out_with_hint() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(dir.path(), "GPU-y", Level::L2Execution);
        let first = ExecutionLock::acquire(&path, "GPU-y", &[], Duration::ZERO).unwrap();
        let err = ExecutionLock::acquire(&path, "GPU-y", &[], Duration::from_millis(120))
            .err()
            .unwrap();
        assert!(err.to_string().contains("KG_GPU_L2_TIMEOUT"), "{err}");
        drop(first);
        ExecutionLock::acquire(&path, "GPU-y", &[], Duration::ZERO).unwrap();
    }
}
