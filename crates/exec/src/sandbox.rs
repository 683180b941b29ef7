//! OS confinement of the untrusted candidate worker, applied between `fork` and `exec`:
//! resource limits, a private network namespace, read-only views of the directories it must
//! not change (its own mount namespace), and its own PID namespace and `/proc`. Every step is best effort, because containers
//! and kernels differ in what they allow; the parent then *observes* what took effect
//! (`/proc/<pid>/ns/*`, `/proc/<pid>/mountinfo`, `/proc/<pid>/limits`) and records that in
//! the trace log, so a reviewer sees which isolation a PASS ran under. See `docs/integrity.md`.
//!
//! The only `unsafe` in kg-exec is here: `pre_exec` and `unshare` have no safe form (and so
//! is [`inherit_fd`], which a worker's descriptor channel needs).
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use rustix::mount::{MountFlags, MountPropagationFlags};
use rustix::process::{Resource, Rlimit};
use rustix::thread::UnshareFlags;

/// Resource limits for a worker (hard = soft, except `cpu_seconds`: 5 s more); `None` leaves a
/// limit as inherited, and no limit is raised above the inherited hard limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `RLIMIT_NOFILE`: open file descriptors.
    pub open_files: Option<u64>,
    /// `RLIMIT_NPROC`: processes and threads of the user (not enforced for root).
    pub processes: Option<u64>,
    /// `RLIMIT_CPU`: CPU seconds over all threads (SIGXCPU, then SIGKILL 5 s later).
    pub cpu_seconds: Option<u64>,
    /// `RLIMIT_FSIZE`: the largest file it may write, in bytes.
    pub file_bytes: Option<u64>,
    /// `RLIMIT_CORE`: core dump size (0: none).
    pub core_bytes: Option<u64>,
}

/// What to confine a worker with.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// Resource limits.
    pub limits: Limits,
    /// Give the worker its own, empty network namespace.
    pub no_network: bool,
    /// Directories the worker sees read-only (bind mounts in its own mount namespace).
    pub read_only: Vec<PathBuf>,
    /// Run the worker as process 1 of its own PID namespace with its own `/proc` (needs the
    /// mount namespace): it cannot see, read or signal the judge, kg-bench or anything else,
    /// and when it ends the kernel kills every process it left behind.
    pub pid_namespace: bool,
}

impl Sandbox {
    /// The candidate worker's sandbox: `read_only` directories, no network, and limits sized
    /// from the wall-time budget of its whole life (`wall_budget_s`) and the host's cores.
    pub fn candidate(read_only: Vec<PathBuf>, wall_budget_s: u64) -> Sandbox {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
        Sandbox {
            limits: Limits {
                open_files: Some(4096),
                processes: Some(user_threads().unwrap_or(0) + 4096),
                cpu_seconds: Some(wall_budget_s.saturating_mul(cores).max(60)),
                file_bytes: Some(64 << 30),
                core_bytes: Some(0),
            },
            no_network: true,
            read_only,
            pid_namespace: true,
        }
    }

    /// Arranges for `cmd`'s child to be confined before it runs its program.
    pub fn apply(&self, cmd: &mut Command) {
        let limits = self.limits;
        let no_network = self.no_network;
        let pid_ns = self.pid_namespace;
        // Paths are converted here: the child between fork and exec must not allocate.
        let ro: Vec<CString> = self
            .read_only
            .iter()
            .filter_map(|p| CString::new(p.as_os_str().as_bytes()).ok())
            .collect();
        // SAFETY: the closure runs in the forked child before exec; it only makes raw system
        // calls through rustix (no allocation, no locks) on data prepared above.
        unsafe {
            cmd.pre_exec(move || {
                confine_child(&limits, no_network, &ro, pid_ns);
                Ok(())
            });
        }
    }
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

/// The child side; every failure is ignored (observed and reported by the parent).
fn confine_child(limits: &Limits, no_network: bool, ro: &[CString], pid_ns: bool) {
    let set = |r: Resource, v: Option<u64>, hard_extra: u64| {
        if let Some(v) = v {
            let cur = rustix::process::getrlimit(r);
            let cap = |x: u64| cur.maximum.map_or(x, |m| x.min(m));
            let _ = rustix::process::setrlimit(
                r,
                Rlimit {
                    current: Some(cap(v)),
                    maximum: Some(cap(v.saturating_add(hard_extra))),
                },
            );
        }
    };
    set(Resource::Nofile, limits.open_files, 0);
    set(Resource::Nproc, limits.processes, 0);
    set(Resource::Cpu, limits.cpu_seconds, 5);
    set(Resource::Fsize, limits.file_bytes, 0);
    set(Resource::Core, limits.core_bytes, 0);
    if no_network {
        // SAFETY: a fresh network namespace does not affect file descriptor tables.
        let _ = unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET) };
    }
    if ro.is_empty() && !pid_ns {
        return;
    }
    // SAFETY: as above; the child is single-threaded here.
    if unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNS) }.is_err() {
        return;
    }
    // Without private propagation our mounts would leak back into the host's namespace.
    if rustix::mount::mount_change(
        c"/",
        MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
    )
    .is_err()
    {
        return;
    }
    for p in ro {
        if rustix::mount::mount_bind_recursive(p.as_c_str(), p.as_c_str()).is_ok() {
            let _ = rustix::mount::mount_remount(
                p.as_c_str(),
                MountFlags::BIND | MountFlags::RDONLY,
                c"",
            );
        }
    }
    if pid_ns {
        enter_pid_namespace();
    }
}

/// Makes the rest of this (pre-exec) child run as process 1 of a new PID namespace with its
/// own `/proc`. A PID namespace applies to children only, so this forks: the new process goes
/// on to exec the worker; this one stays behind as a relay that waits for it and ends the same
/// way (exit code, or the same signal), so the parent sees the worker's own end.
fn enter_pid_namespace() {
    // SAFETY: single-threaded pre-exec child; no file descriptor tables are unshared.
    if unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWPID) }.is_err() {
        return;
    }
    // SAFETY: fork in a single-threaded child (glibc re-initialises its locks in the new
    // process); both sides only make system calls until exec or _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return;
    }
    if pid == 0 {
        // The worker: die with the relay, and see only its own namespace in /proc.
        let _ =
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL));
        // GPU drivers publish device state under /proc/driver, and container runtimes narrow
        // it to the devices the container was given: keep that view, not the fresh mount's.
        let driver = rustix::fs::open(
            c"/proc/driver",
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .ok();
        let mounted = rustix::mount::mount(
            c"proc",
            c"/proc",
            c"proc",
            MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
            c"",
        )
        .is_ok();
        if let (true, Some(fd)) = (mounted, driver) {
            let mut buf = [0u8; 32];
            if let Some(path) = fd_path(&mut buf, fd.as_raw_fd()) {
                let _ = rustix::mount::mount_bind_recursive(path, c"/proc/driver");
            }
        }
        return;
    }
    // kg-bench is non-dumpable (`protect_harness_process`) and the relay, never exec'ing,
    // would inherit that; the parent reads the relay's /proc entries to observe the sandbox,
    // and the candidate cannot see the relay from inside its namespace.
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::Dumpable);
    // The relay never execs, so it still holds every descriptor the parent had when it forked
    // (other workers' pipes, the listening socket): close them, or their readers never see EOF.
    // SAFETY: raw system calls on our own descriptor table.
    unsafe {
        if libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) != 0 {
            for fd in 3..4096 {
                libc::close(fd);
            }
        }
    }
    let mut status = 0;
    // SAFETY: plain system calls.
    let parent = unsafe { libc::getppid() };
    loop {
        // SAFETY: plain system calls on our own child.
        let r = unsafe { libc::waitpid(pid, &raw mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // SAFETY: ends this relay process without running anything of the parent's.
            unsafe { libc::_exit(127) };
        }
        // The worker cannot see its parent from inside the namespace; the relay watches for
        // it: if kg-exec goes away, the worker goes too (and, as process 1, takes every
        // process of its namespace with it).
        // SAFETY: plain system calls.
        unsafe {
            if libc::getppid() != parent {
                libc::kill(pid, libc::SIGKILL);
            }
            let t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 20_000_000,
            };
            libc::nanosleep(&raw const t, std::ptr::null_mut());
        }
    }
    // SAFETY: as above; a signal death is mirrored by raising the same signal at default.
    unsafe {
        if libc::WIFSIGNALED(status) {
            let sig = libc::WTERMSIG(status);
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&raw mut set);
            libc::sigaddset(&raw mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &raw const set, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(libc::WEXITSTATUS(status));
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

/// What confinement a running worker actually has, as seen from outside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// It is in a network namespace other than ours.
    pub private_network: bool,
    /// It (through its relay) runs in a PID namespace other than ours.
    pub private_pids: bool,
    /// The `read_only` directories that are mounted read-only in its view.
    pub read_only: Vec<PathBuf>,
    /// The `read_only` directories it can still write.
    pub writable: Vec<PathBuf>,
    /// Its soft limits as `/proc/<pid>/limits` states them: (name, value).
    pub limits: Vec<(String, String)>,
}

impl Observed {
    /// One line for the trace log.
    pub fn summary(&self) -> String {
        let net = if self.private_network {
            "private network namespace (no network)"
        } else {
            "network NOT isolated (the OS refused a network namespace)"
        };
        let pids = if self.private_pids {
            "private PID namespace and /proc"
        } else {
            "PIDs NOT isolated (it can see other processes in /proc)"
        };
        let ro = if self.writable.is_empty() {
            format!("{} read-only director(ies)", self.read_only.len())
        } else {
            format!(
                "NOT read-only (no mount namespace; snapshot-checked instead): {}",
                self.writable
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let lim = self
            .limits
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!("isolation: {net}; {pids}; {ro}; limits: {lim}")
    }
}

/// Reads what confinement process `pid` has, for the directories `read_only` it should see
/// read-only. `None` when `/proc/<pid>` cannot be read (the process is gone).
pub fn observe(pid: u32, read_only: &[PathBuf]) -> Option<Observed> {
    let proc_dir = PathBuf::from(format!("/proc/{pid}"));
    let ns = |p: &Path, kind: &str| std::fs::read_link(p.join("ns").join(kind)).ok();
    let private_network = match (ns(&proc_dir, "net"), ns(Path::new("/proc/self"), "net")) {
        (Some(theirs), Some(ours)) => theirs != ours,
        _ => false,
    };
    // The relay stays in our PID namespace; its children (the worker) are in the new one.
    let private_pids = match (
        ns(&proc_dir, "pid_for_children"),
        ns(Path::new("/proc/self"), "pid"),
    ) {
        (Some(theirs), Some(ours)) => theirs != ours,
        _ => false,
    };
    let mountinfo = std::fs::read_to_string(proc_dir.join("mountinfo")).ok()?;
    let (ro, writable): (Vec<_>, Vec<_>) = read_only
        .iter()
        .cloned()
        .partition(|p| mounted_read_only(&mountinfo, p));
    let limits_text = std::fs::read_to_string(proc_dir.join("limits")).ok()?;
    let limits = [
        ("Max open files", "nofile"),
        ("Max processes", "nproc"),
        ("Max cpu time", "cpu"),
        ("Max file size", "fsize"),
        ("Max core file size", "core"),
    ]
    .iter()
    .filter_map(|(row, short)| {
        let line = limits_text.lines().find(|l| l.starts_with(row))?;
        let soft = line[row.len()..].split_whitespace().next()?;
        Some((short.to_string(), soft.to_string()))
    })
    .collect();
    Some(Observed {
        private_network,
        private_pids,
        read_only: ro,
        writable,
        limits,
    })
}

/// Whether `/proc/<pid>/mountinfo` text mounts exactly `dir` read-only (the last mount on
/// that point wins, as the kernel stacks them).
fn mounted_read_only(mountinfo: &str, dir: &Path) -> bool {
    let want = dir.as_os_str().as_bytes();
    mountinfo
        .lines()
        .filter_map(|l| {
            let mut f = l.split(' ');
            let point = f.nth(4)?;
            let opts = f.next()?;
            (unescape_mount_path(point).as_slice() == want)
                .then(|| opts.split(',').any(|o| o == "ro"))
        })
        .next_back()
        .unwrap_or(false)
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo` octal.
fn unescape_mount_path(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_paths_are_written_without_allocating() {
        let mut buf = [0u8; 32];
        assert_eq!(
            fd_path(&mut buf, 0).unwrap().to_str().unwrap(),
            "/proc/self/fd/0"
        );
        assert_eq!(
            fd_path(&mut buf, 1_234_567_890).unwrap().to_str().unwrap(),
            "/proc/self/fd/1234567890"
        );
        assert!(fd_path(&mut buf, -1).is_none());
    }

    #[test]
    fn mountinfo_read_only_is_found_for_the_exact_point_and_last_mount_wins() {
        let info = "\
22 1 0:21 / / rw,relatime shared:1 - overlay overlay rw
40 22 0:21 /work/p /work/p rw,relatime - overlay overlay rw
41 40 0:21 /work/p /work/p ro,relatime - overlay overlay rw
42 22 0:21 /a\\040b /a\\040b ro,relatime - overlay overlay rw
";
        assert!(mounted_read_only(info, Path::new("/work/p")));
        assert!(mounted_read_only(info, Path::new("/a b")));
        assert!(!mounted_read_only(info, Path::new("/work")));
        assert!(!mounted_read_only(info, Path::new("/")));
        let rw_last = format!("{info}43 41 0:21 /work/p /work/p rw - overlay overlay rw\n");
        assert!(!mounted_read_only(&rw_last, Path::new("/work/p")));
    }

    /// A worker killed by a signal is seen by the parent as killed by that signal, through
    /// the PID-namespace relay; the relay holds none of the parent's other descriptors.
    #[test]
    fn a_signal_death_is_mirrored_through_the_relay() {
        use std::io::Read;
        use std::os::unix::process::ExitStatusExt;
        let sb = Sandbox {
            limits: Limits {
                open_files: None,
                processes: None,
                cpu_seconds: None,
                file_bytes: None,
                core_bytes: Some(0),
            },
            no_network: false,
            read_only: vec![],
            pid_namespace: true,
        };
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("echo ready; exec sleep 30");
        cmd.stdout(std::process::Stdio::piped());
        sb.apply(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        let mut first = [0u8; 6];
        child.stdout.take().unwrap().read_exact(&mut first).unwrap();
        let relay = child.id();
        let kids = std::fs::read_to_string(format!("/proc/{relay}/task/{relay}/children"))
            .unwrap_or_default();
        let Some(worker) = kids.split_whitespace().next() else {
            // No PID namespace here: the shell is the child itself.
            eprintln!("this host refuses PID namespaces: relay not checked");
            child.kill().unwrap();
            child.wait().unwrap();
            return;
        };
        let fds = std::fs::read_dir(format!("/proc/{relay}/fd"))
            .unwrap()
            .count();
        assert!(fds <= 3, "the relay holds {fds} descriptors");
        let worker = rustix::process::Pid::from_raw(worker.parse().unwrap()).unwrap();
        rustix::process::kill_process(worker, rustix::process::Signal::KILL).unwrap();
        let st = child.wait().unwrap();
        assert_eq!(st.signal(), Some(libc::SIGKILL), "{st:?}");
    }

    /// Runs a shell under the sandbox and checks from inside and outside that each confinement
    /// the OS allows took effect. Where this host refuses namespaces the test says so and
    /// checks only the limits (which every Linux allows).
    #[test]
    fn confinement_takes_effect_in_the_child() {
        let dir = tempfile::tempdir().unwrap();
        let ro_dir = dir.path().join("problem");
        std::fs::create_dir(&ro_dir).unwrap();
        let ro_dir = ro_dir.canonicalize().unwrap();
        let sb = Sandbox {
            limits: Limits {
                open_files: Some(77),
                processes: None,
                cpu_seconds: Some(123),
                file_bytes: None,
                core_bytes: Some(0),
            },
            no_network: true,
            read_only: vec![ro_dir.clone()],
            pid_namespace: true,
        };
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(
            "ulimit -n; ulimit -t; { echo x > \"$1/planted\"; } 2>/dev/null && echo wrote || echo refused; echo $$; ls /proc | grep -c '^[0-9]'; grep -c ' /proc/driver ' /proc/self/mountinfo; read _; exit 7",
        );
        cmd.arg("sh").arg(&ro_dir);
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        sb.apply(&mut cmd);
        let mut child = cmd.spawn().unwrap();
        // Give the shell time to run its checks, then observe it while it waits on stdin.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let seen = observe(child.id(), &sb.read_only).unwrap();
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "77", "{text}");
        assert_eq!(lines[1], "123", "{text}");
        assert!(
            seen.limits
                .contains(&("nofile".to_string(), "77".to_string()))
        );
        assert!(
            seen.limits
                .contains(&("cpu".to_string(), "123".to_string()))
        );
        let ro_effective = seen.writable.is_empty();
        assert_eq!(
            lines[2],
            if ro_effective { "refused" } else { "wrote" },
            "{text}"
        );
        if ro_effective {
            assert!(!ro_dir.join("planted").exists());
        } else {
            eprintln!("this host refuses mount namespaces: read-only view not checked");
        }
        if seen.private_pids {
            assert_eq!(lines[3], "1", "process 1 of its namespace: {text}");
            let visible: u32 = lines[4].parse().unwrap();
            assert!(visible <= 3, "sees only its own processes: {text}");
            if Path::new("/proc/driver").is_dir() {
                assert_eq!(
                    lines[5], "1",
                    "our /proc/driver is kept over the fresh /proc: {text}"
                );
            }
        } else {
            eprintln!("this host refuses PID namespaces: not checked");
        }
        assert_eq!(
            out.status.code(),
            Some(7),
            "the relay ends as the worker did"
        );
        // Our own namespace is untouched either way.
        std::fs::write(ro_dir.join("ours"), "y").unwrap();
        eprintln!("{}", seen.summary());
    }
}
