//! OS confinement of the untrusted candidate worker, applied between `fork` and `exec`, and
//! then *observed* from outside the running worker and recorded in every trace
//! (`environment.isolation`, [`kg_contract::IsolationReport`]), so a reviewer sees which
//! layers a PASS ran under. See `docs/integrity.md` for the threat model.
//!
//! The layers ([`kg_contract::Layer`]): its own network, mount and PID namespaces; a
//! filesystem view in which every mount is read-only except its scratch, transfer and cache
//! directories and a private tmpfs `/tmp` and `/dev/shm` ([`View`]); when kernelgate runs as
//! root, an unprivileged uid ([`SANDBOX_UID`]) with no capabilities, and where it does not, a
//! user namespace that maps only our own uid; `no_new_privs`; a seccomp deny list
//! (`seccomp.rs`); resource limits ([`Limits`]: memory as RLIMIT_DATA, processes, CPU time,
//! file size, descriptors, no core dumps). Each step is best effort, because containers and
//! kernels differ in what they allow; what is missing is reported, and `--require-sandbox`
//! turns a missing layer into an error.
//!
//! Files: `plan.rs` computes the view in the parent (the child must not allocate), `child.rs`
//! is the pre-exec side, `seccomp.rs` the filter, `observe.rs` the outside check.
//!
//! The only `unsafe` in kg-exec is here: `pre_exec`, `unshare`, `fork`, `prctl`, `mount` and
//! `set*id` have no safe form (and so is [`inherit_fd`], which the worker channels need).
#![allow(unsafe_code)]

pub mod cgroup;
mod child;
mod observe;
mod plan;
mod seccomp;

use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

pub use observe::{Expected, observe};

/// The uid and gid the candidate runs as when kernelgate runs as root: dedicated (no account
/// of a common distribution uses it) and inside the 0-65535 range every container maps.
pub const SANDBOX_UID: u32 = 61_904;

/// Resource limits for a worker (hard = soft, except `cpu_seconds`: 5 s more); `None` leaves a
/// limit as inherited, and no limit is raised above the inherited hard limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `RLIMIT_NOFILE`: open file descriptors.
    pub open_files: Option<u64>,
    /// `RLIMIT_NPROC`: processes and threads of the worker's uid (binds only a uid that is
    /// not root).
    pub processes: Option<u64>,
    /// `RLIMIT_CPU`: CPU seconds over all threads (SIGXCPU, then SIGKILL 5 s later).
    pub cpu_seconds: Option<u64>,
    /// `RLIMIT_FSIZE`: the largest file it may write, in bytes.
    pub file_bytes: Option<u64>,
    /// `RLIMIT_CORE`: core dump size (0: none).
    pub core_bytes: Option<u64>,
    /// `RLIMIT_DATA`: private writable memory per process (heap, anonymous mappings), bytes.
    /// Not counted: shared and file mappings, tmpfs pages, GPU memory.
    pub data_bytes: Option<u64>,
    /// Scheduling niceness (`setpriority`), set before privileges are dropped, so the worker
    /// cannot lower it again: a worker that runs beside a timed one yields it the CPU.
    pub nice: Option<i32>,
}

/// The worker's filesystem view (its own mount namespace).
#[derive(Debug, Clone, Default)]
pub struct View {
    /// Paths it must be able to read (the interpreter, its libraries, the worker scripts):
    /// bound back where a tmpfs hides them.
    pub read: Vec<PathBuf>,
    /// Paths it may write (scratch, transfer, its own caches); everything else is read-only.
    pub write: Vec<PathBuf>,
    /// Private tmpfs mount points (`/tmp`, `/dev/shm`).
    pub private_tmp: Vec<PathBuf>,
    /// Size of each private tmpfs, bytes (tmpfs pages are host memory outside RLIMIT_DATA).
    pub tmp_bytes: u64,
    /// The worker's working directory.
    pub cwd: Option<PathBuf>,
    /// Files it sees as `/dev/null`, read-only: a GPU's device nodes ([`gpu_device_nodes`])
    /// for a worker that must not reach the GPU, whatever its environment says.
    pub cover: Vec<PathBuf>,
}

/// The device nodes through which a process reaches a GPU: NVIDIA's (`/dev/nvidia*`,
/// `/dev/nvidia-caps/*`), AMD's (`/dev/kfd`) and the DRM render and card nodes (`/dev/dri/*`).
pub fn gpu_device_nodes() -> Vec<PathBuf> {
    let mut nodes = Vec::new();
    let mut list = |dir: &str, keep: &dyn Fn(&str) -> bool| {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let name = e.file_name();
                if keep(&name.to_string_lossy()) && !e.path().is_dir() {
                    nodes.push(e.path());
                }
            }
        }
    };
    list("/dev", &|n| n.starts_with("nvidia") || n == "kfd");
    list("/dev/nvidia-caps", &|_| true);
    list("/dev/dri", &|_| true);
    nodes.sort();
    nodes
}

/// What to confine a worker with.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// Resource limits.
    pub limits: Limits,
    /// Give the worker its own, empty network namespace.
    pub no_network: bool,
    /// Run the worker as process 1 of its own PID namespace with its own `/proc` (needs the
    /// mount namespace): it cannot see, read or signal the judge, kg-bench or anything else,
    /// and when it ends the kernel kills every process it left behind.
    pub pid_namespace: bool,
    /// Its filesystem view; `None`: it sees ours.
    pub view: Option<View>,
    /// The uid/gid it runs as when we are root.
    pub user: Option<(u32, u32)>,
    /// No capabilities and `no_new_privs`.
    pub no_privileges: bool,
    /// Install the seccomp filter.
    pub seccomp: bool,
    /// The filter also refuses the memory RLIMIT_DATA does not count (shared anonymous
    /// mappings, memfds, System V shared memory), so that limit bounds each process; off where
    /// a GPU runtime runs in the worker (its use of them is not verified).
    pub refuse_shared_memory: bool,
    /// Also limit memory (`limits.data_bytes`) and processes (`limits.processes`) through a
    /// cgroup v2 of its own, where the host delegates one ([`cgroup`]).
    pub cgroup: bool,
}

/// Bytes of memory a candidate process may use by default: half the host's.
pub fn default_memory_bytes() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(16 << 30, |kb| kb * 1024);
    total / 2
}

impl Sandbox {
    /// The candidate worker's sandbox: `view`, no network, every privilege dropped, limits
    /// sized from the wall-time budget of its whole life (`wall_budget_s`), the host's cores
    /// and `memory_bytes` per process.
    pub fn candidate(mut view: View, wall_budget_s: u64, memory_bytes: u64) -> Sandbox {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        let root = rustix::process::geteuid().is_root();
        // Our own uid's threads count against RLIMIT_NPROC where the worker keeps our uid.
        let processes = if root {
            4096
        } else {
            user_threads().unwrap_or(0) + 4096
        };
        if view.private_tmp.is_empty() {
            view.private_tmp = vec![PathBuf::from("/tmp"), PathBuf::from("/dev/shm")];
        }
        if view.tmp_bytes == 0 {
            view.tmp_bytes = (memory_bytes / 8).clamp(64 << 20, 4 << 30);
        }
        Sandbox {
            limits: Limits {
                open_files: Some(4096),
                processes: Some(processes),
                cpu_seconds: Some(wall_budget_s.saturating_mul(cores).max(60)),
                file_bytes: Some(64 << 30),
                core_bytes: Some(0),
                data_bytes: Some(memory_bytes),
                nice: None,
            },
            no_network: true,
            pid_namespace: true,
            view: Some(view),
            user: Some((SANDBOX_UID, SANDBOX_UID)),
            no_privileges: true,
            seccomp: true,
            refuse_shared_memory: false,
            cgroup: true,
        }
    }

    /// The uid/gid the worker will run as, where it changes: we are root, and both ids exist
    /// in our user namespace (a rootless container often maps only its own root; the worker
    /// then keeps uid 0 of that namespace, and the report says so).
    pub fn drops_to(&self) -> Option<(u32, u32)> {
        self.user.filter(|&(uid, gid)| {
            rustix::process::geteuid().is_root()
                && id_mapped("/proc/self/uid_map", uid)
                && id_mapped("/proc/self/gid_map", gid)
        })
    }

    /// What [`observe`] compares the running worker against (`cgroup`: what [`Sandbox::apply`]
    /// returned).
    pub fn expected(&self, cgroup: Option<&cgroup::Cgroup>) -> Expected {
        let canon = |p: &PathBuf| p.canonicalize().unwrap_or_else(|_| p.clone());
        Expected {
            write: self
                .view
                .as_ref()
                .map(|v| v.write.iter().map(canon).collect())
                .unwrap_or_default(),
            private_tmp: self
                .view
                .as_ref()
                .map(|v| v.private_tmp.iter().map(canon).collect())
                .unwrap_or_default(),
            cgroup: cgroup.map(|c| c.dir().to_path_buf()),
            shared_memory_refused: self.seccomp && self.refuse_shared_memory,
        }
    }

    /// Arranges for `cmd`'s child to be confined before it runs its program. Where the worker
    /// changes uid, its writable paths are handed to that uid first. Returns the worker's
    /// cgroup, where one was made: keep it until the worker's processes are dead.
    pub fn apply(&self, cmd: &mut Command) -> Option<cgroup::Cgroup> {
        let drop_to = self.drops_to();
        if let (Some((uid, gid)), Some(v)) = (drop_to, &self.view) {
            for w in &v.write {
                if let Err(e) = chown_tree(w, uid, gid) {
                    tracing::warn!(path = %w.display(), "failed to hand a writable path to the sandbox uid: {e}");
                }
            }
        }
        let userns = (!rustix::process::geteuid().is_root()
            && (self.view.is_some() || self.pid_namespace || self.no_network))
            .then(|| {
                let uid = rustix::process::geteuid().as_raw();
                let gid = rustix::process::getegid().as_raw();
                (
                    format!("{uid} {uid} 1\n").into_bytes(),
                    format!("{gid} {gid} 1\n").into_bytes(),
                )
            });
        let mounts = self.view.as_ref().map(|v| {
            plan::plan(
                &v.read,
                &v.write,
                &v.cover,
                &v.private_tmp,
                v.tmp_bytes,
                v.cwd.as_deref(),
                drop_to,
            )
        });
        let cg = self.cgroup.then(|| {
            static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let name = format!(
                "kg-{}-{}",
                std::process::id(),
                N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            );
            cgroup::create(
                &name,
                self.limits.data_bytes.unwrap_or(u64::MAX),
                self.limits.processes.unwrap_or(4096),
            )
            .map_err(|why| tracing::debug!("no cgroup for the worker: {why}"))
            .ok()
        });
        let cg = cg.flatten();
        let mut p = child::ChildPlan {
            cgroup_procs: cg.as_ref().map_or(-1, cgroup::Cgroup::procs_fd),
            limits: self.limits,
            no_network: self.no_network,
            pid_namespace: self.pid_namespace,
            userns,
            mounts,
            drop_to,
            no_privileges: self.no_privileges,
            seccomp: self
                .seccomp
                .then(|| seccomp::program(self.refuse_shared_memory)),
        };
        // SAFETY: the closure runs in the forked child before exec; it only makes raw system
        // calls (no allocation, no locks) on data prepared above.
        unsafe {
            cmd.pre_exec(move || {
                child::confine(&mut p);
                Ok(())
            });
        }
        cg
    }
}

/// Whether `id` falls in a range of the id map at `path` (`inside outside count` lines); true
/// where the map cannot be read (no user namespaces: every id exists).
fn id_mapped(path: &str, id: u32) -> bool {
    let Ok(text) = std::fs::read_to_string(path) else {
        return true;
    };
    map_contains(&text, id)
}

fn map_contains(text: &str, id: u32) -> bool {
    text.lines().any(|l| {
        let f: Vec<u64> = l
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        matches!(f.as_slice(), [inside, _, count] if (*inside..inside + count).contains(&u64::from(id)))
    })
}

/// Gives `path` and everything below it to `uid`/`gid` (symlinks themselves, not targets).
fn chown_tree(path: &Path, uid: u32, gid: u32) -> std::io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    if std::fs::symlink_metadata(path)?.is_dir() {
        for e in std::fs::read_dir(path)? {
            chown_tree(&e?.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// Lets `cmd`'s child inherit descriptor `fd` (open in this process, close-on-exec) under the
/// same number; no other child sees it, as the flag is cleared in that child only.
pub fn inherit_fd(cmd: &mut Command, fd: std::os::fd::RawFd) {
    // SAFETY: the closure runs in the forked child before exec and makes one raw fcntl on a
    // descriptor the child inherited from us (no allocation, no locks).
    unsafe {
        cmd.pre_exec(move || {
            rustix::io::fcntl_setfd(
                std::os::fd::BorrowedFd::borrow_raw(fd),
                rustix::io::FdFlags::empty(),
            )?;
            Ok(())
        });
    }
}

/// Writes `/proc/self/fd/<fd>` into `buf` without allocating (we are between fork and exec).
fn fd_path(buf: &mut [u8; 32], fd: i32) -> Option<&std::ffi::CStr> {
    const PREFIX: &[u8] = b"/proc/self/fd/";
    let mut digits = [0u8; 10];
    let mut n = u32::try_from(fd).ok()?;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    buf[..PREFIX.len()].copy_from_slice(PREFIX);
    for i in 0..len {
        buf[PREFIX.len() + i] = digits[len - 1 - i];
    }
    buf[PREFIX.len() + len] = 0;
    std::ffi::CStr::from_bytes_until_nul(&buf[..]).ok()
}

/// Makes this (harness) process non-dumpable: its `/proc/<pid>/environ`, `mem` and `fd`
/// become readable by root only, and a same-user process cannot ptrace it. This guards
/// kg-bench where the candidate's PID namespace is refused; it also disables core dumps.
pub fn protect_harness_process() -> bool {
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable).is_ok()
}

/// Threads owned by our real uid now (the count `RLIMIT_NPROC` is checked against).
fn user_threads() -> Option<u64> {
    let uid = rustix::process::getuid().as_raw();
    let mut n = 0u64;
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        if !e.file_name().as_bytes().iter().all(u8::is_ascii_digit) {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(e.path().join("status")) else {
            continue;
        };
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        if field("Uid:") == Some(u64::from(uid)) {
            n += field("Threads:").unwrap_or(1);
        }
    }
    Some(n)
}

#[cfg(test)]
mod tests;
