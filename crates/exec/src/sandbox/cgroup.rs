//! A cgroup v2 memory and process limit for one worker, where the host delegates one to us:
//! unlike RLIMIT_DATA it counts every page the worker's processes use (shared mappings and
//! tmpfs included) and binds them all together. Where cgroup v2 is missing, its memory
//! controller is not enabled for our cgroup, or our cgroup holds processes and so cannot hand
//! controllers down (the "no internal processes" rule), the worker keeps RLIMIT_DATA only and
//! the report says which.

use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// A cgroup made for one worker; removed when dropped (it must be empty by then: the worker's
/// processes are dead, which kg-exec makes sure of before dropping it).
#[derive(Debug)]
pub struct Cgroup {
    dir: PathBuf,
    /// `cgroup.procs` of `dir`, open for writing: the child writes `0` to it (moving itself)
    /// before it execs.
    procs: OwnedFd,
}

impl Cgroup {
    /// The descriptor the child writes `0` into.
    pub(crate) fn procs_fd(&self) -> i32 {
        self.procs.as_raw_fd()
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Processes leave a cgroup as they are reaped; give the last ones a moment.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        tracing::warn!(dir = %self.dir.display(), "failed to remove a worker's cgroup");
    }
}

/// Our own cgroup v2 directory: the cgroup2 mount point joined with our `0::` path.
fn our_cgroup() -> Result<PathBuf, String> {
    let cg = std::fs::read_to_string("/proc/self/cgroup")
        .map_err(|e| format!("cannot read /proc/self/cgroup: {e}"))?;
    let rel = cg
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or("no cgroup v2 hierarchy (cgroup v1 only)")?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    let mount = super::plan::parse_mountinfo_full(&mounts)
        .into_iter()
        .filter(|m| m.fstype == "cgroup2")
        .map(|m| m.point)
        .next_back()
        .ok_or("cgroup2 is not mounted")?;
    Ok(mount.join(rel.trim_start_matches('/')))
}

/// Makes a cgroup under ours limited to `memory_bytes` (no swap) and `pids` tasks.
pub fn create(name: &str, memory_bytes: u64, pids: u64) -> Result<Cgroup, String> {
    let ours = our_cgroup()?;
    let controllers = std::fs::read_to_string(ours.join("cgroup.controllers")).map_err(|e| {
        format!(
            "cannot read `{}`: {e}",
            ours.join("cgroup.controllers").display()
        )
    })?;
    for c in ["memory", "pids"] {
        if !controllers.split_whitespace().any(|x| x == c) {
            return Err(format!(
                "the {c} controller is not available in our cgroup `{}`",
                ours.display()
            ));
        }
    }
    let subtree = ours.join("cgroup.subtree_control");
    let enabled = std::fs::read_to_string(&subtree).unwrap_or_default();
    let has = |c: &str| enabled.split_whitespace().any(|x| x == c);
    if !(has("memory") && has("pids")) {
        std::fs::OpenOptions::new()
            .write(true)
            .open(&subtree)
            .and_then(|mut f| f.write_all(b"+memory +pids"))
            .map_err(|e| {
                format!(
                    "our cgroup `{}` cannot hand the memory controller down ({e}; it holds processes, or is not delegated to us)",
                    ours.display()
                )
            })?;
    }
    let dir = ours.join(name);
    std::fs::create_dir(&dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
    let set = |file: &str, value: String| -> Result<(), String> {
        std::fs::write(dir.join(file), value)
            .map_err(|e| format!("cannot write `{}`: {e}", dir.join(file).display()))
    };
    let made = (|| {
        set("memory.max", memory_bytes.to_string())?;
        if dir.join("memory.swap.max").exists() {
            set("memory.swap.max", "0".into())?;
        }
        set("pids.max", pids.to_string())?;
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
            .map_err(|e| format!("cannot open `{}`: {e}", dir.join("cgroup.procs").display()))?;
        Ok(OwnedFd::from(procs))
    })();
    match made {
        Ok(procs) => Ok(Cgroup { dir, procs }),
        Err(e) => {
            let _ = std::fs::remove_dir(&dir);
            Err(e)
        }
    }
}

/// Whether process `pid` is in the cgroup `dir` we made, and its `memory.max` there.
pub(crate) fn holds(pid: u32, dir: &Path) -> Option<u64> {
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let rel = cg.lines().find_map(|l| l.strip_prefix("0::"))?;
    // Its path is relative to its cgroup namespace, which is ours (the seccomp filter refuses
    // making another): the last component names our cgroup.
    if Path::new(rel).file_name()? != dir.file_name()? {
        return None;
    }
    std::fs::read_to_string(dir.join("memory.max"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where this host delegates cgroup v2 memory (not CI's cgroup v1 machine kind), a made
    /// cgroup carries the limit and is removed again; elsewhere the refusal names why.
    #[test]
    fn a_cgroup_is_made_with_its_limits_or_refused_with_the_reason() {
        match create(&format!("kg-test-{}", std::process::id()), 1 << 30, 64) {
            Ok(cg) => {
                let max = std::fs::read_to_string(cg.dir().join("memory.max")).unwrap();
                assert_eq!(max.trim(), (1u64 << 30).to_string());
                let dir = cg.dir().to_path_buf();
                drop(cg);
                assert!(!dir.exists());
            }
            Err(why) => {
                assert!(
                    why.contains("cgroup") || why.contains("controller"),
                    "{why}"
                );
                eprintln!("no cgroup v2 memory delegation here: {why}");
            }
        }
    }
}
