//! The child's half: runs between fork and exec, on data the parent prepared (no allocation,
//! no locks, raw system calls only). Every step is best effort: the parent observes from
//! outside what took effect (`observe.rs`) and reports it; `--require-sandbox` refuses to go
//! on when a layer is missing.
//!
//! Order matters:
//! 1. resource limits; 2. a user namespace where we are not root (it grants the capabilities
//!    the next steps need, inside it only); 3. network namespace; 4. mount namespace: every
//!    existing mount read-only, then the private tmpfs mounts and masks, then the binds back;
//! 5. PID namespace (a fork: the relay stays behind, the worker becomes its process 1 and
//!    mounts its own `/proc`); 6. in the worker: the capability bounding set dropped, then the
//!    unprivileged uid (as root), the parent-death signal (a credential change clears it),
//!    `no_new_privs`, and last the seccomp filter (it refuses the mounts made above).

use std::ffi::CStr;
use std::os::fd::AsRawFd;

use rustix::mount::{MountFlags, MountPropagationFlags};
use rustix::process::{Resource, Rlimit};
use rustix::thread::UnshareFlags;

use super::Limits;
use super::plan::MountPlan;

/// What the child does, prepared by the parent.
#[derive(Debug)]
pub(crate) struct ChildPlan {
    /// `cgroup.procs` of the worker's own cgroup, or -1.
    pub cgroup_procs: i32,
    pub limits: Limits,
    pub no_network: bool,
    pub pid_namespace: bool,
    /// `(uid_map, gid_map)` contents for a user namespace (we are not root).
    pub userns: Option<(Vec<u8>, Vec<u8>)>,
    pub mounts: Option<MountPlan>,
    /// Become this uid/gid (we are root).
    pub drop_to: Option<(u32, u32)>,
    /// Drop capabilities and set `no_new_privs`.
    pub no_privileges: bool,
    pub seccomp: Option<Vec<super::seccomp::Insn>>,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const AT_RECURSIVE: u32 = 0x8000;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr(2)` on `path` (recursive or not); false where the kernel lacks it.
fn setattr(path: &CStr, recursive: bool, set: u64, clr: u64) -> bool {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clr,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: a raw system call on a NUL-terminated path and a live struct of the kernel's
    // layout and size.
    unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        ) == 0
    }
}

/// `mount(NULL, path, NULL, flags, NULL)`: a remount.
fn remount(path: &CStr, flags: u64) -> bool {
    // SAFETY: raw system call on a NUL-terminated path.
    unsafe {
        libc::mount(
            std::ptr::null(),
            path.as_ptr(),
            std::ptr::null(),
            flags as libc::c_ulong,
            std::ptr::null(),
        ) == 0
    }
}

fn write_file(path: &CStr, data: &[u8]) -> bool {
    // SAFETY: raw system calls on a NUL-terminated path and our own buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return false;
        }
        let ok = libc::write(fd, data.as_ptr().cast(), data.len()) == data.len() as isize;
        libc::close(fd);
        ok
    }
}

/// The whole child side; returns normally (the caller then execs), whatever failed.
pub(crate) fn confine(p: &mut ChildPlan) {
    if p.cgroup_procs >= 0 {
        // "0" moves the writer itself; its children (the worker, after the PID-namespace
        // fork) are born in it.
        // SAFETY: a raw write of two bytes of static data to a descriptor the parent opened.
        unsafe { libc::write(p.cgroup_procs, b"0".as_ptr().cast(), 1) };
    }
    set_limits(&p.limits);
    let mut in_pid_ns = false;
    if let Some((uid_map, gid_map)) = &p.userns {
        // SAFETY: single-threaded pre-exec child; a user namespace does not affect file
        // descriptor tables.
        if unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER) }.is_ok() {
            write_file(c"/proc/self/setgroups", b"deny");
            write_file(c"/proc/self/uid_map", uid_map);
            write_file(c"/proc/self/gid_map", gid_map);
        }
    }
    if p.no_network {
        // A private IPC namespace too: no System V shared memory or message queues of the
        // host's to attach to (nor to fill outside the memory limit).
        // SAFETY: as above.
        let _ =
            unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNET | UnshareFlags::NEWIPC) };
    }
    if p.mounts.is_some() || p.pid_namespace {
        // SAFETY: as above.
        let ns = unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNS) }.is_ok()
            && rustix::mount::mount_change(
                c"/",
                MountPropagationFlags::REC | MountPropagationFlags::PRIVATE,
            )
            .is_ok();
        // Without our own mount namespace nothing below may be mounted: it would change
        // the host's view.
        if ns {
            if let Some(m) = p.mounts.as_mut() {
                build_view(m);
            }
            if p.pid_namespace {
                in_pid_ns = enter_pid_namespace();
            }
        }
    }
    drop_privileges(p, in_pid_ns);
}

fn set_limits(limits: &Limits) {
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
    set(Resource::Data, limits.data_bytes, 0);
    if let Some(n) = limits.nice {
        // SAFETY: a raw system call on this process.
        unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, n) };
    }
}

fn build_view(m: &mut MountPlan) {
    // Sources first: the tmpfs mounts below hide some of them.
    for b in &mut m.binds {
        b.fd = rustix::fs::open(
            if b.cover {
                c"/dev/null"
            } else {
                b.path.as_c_str()
            },
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .map_or(-1, |fd| {
            let raw = fd.as_raw_fd();
            std::mem::forget(fd);
            raw
        });
    }
    // Everything read-only: atomically where the kernel has mount_setattr (5.12+), else mount
    // by mount, keeping each one's other flags.
    if !setattr(c"/", true, MOUNT_ATTR_RDONLY, 0) {
        for (point, flags) in &m.existing {
            remount(
                point.as_c_str(),
                libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
            );
        }
    }
    for t in &m.tmpfs {
        let _ = rustix::mount::mount(
            c"tmpfs",
            t.path.as_c_str(),
            c"tmpfs",
            MountFlags::NOSUID | MountFlags::NODEV,
            t.data.as_c_str(),
        );
    }
    for b in &m.binds {
        if b.fd < 0 {
            continue;
        }
        for d in &b.make_dirs {
            // SAFETY: raw system call on a NUL-terminated path.
            unsafe { libc::mkdir(d.as_ptr(), 0o755) };
        }
        if b.is_file {
            // SAFETY: as above.
            unsafe {
                let fd = libc::open(
                    b.path.as_ptr(),
                    libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                    0o644,
                );
                if fd >= 0 {
                    libc::close(fd);
                }
            }
        }
        let mut buf = [0u8; 32];
        let Some(src) = super::fd_path(&mut buf, b.fd) else {
            continue;
        };
        if rustix::mount::mount_bind_recursive(src, b.path.as_c_str()).is_err() {
            continue;
        }
        if b.cover && !setattr(b.path.as_c_str(), false, MOUNT_ATTR_RDONLY, 0) {
            remount(
                b.path.as_c_str(),
                libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY,
            );
        }
        if b.write && !setattr(b.path.as_c_str(), false, 0, MOUNT_ATTR_RDONLY) {
            remount(
                b.path.as_c_str(),
                libc::MS_REMOUNT | libc::MS_BIND | (b.source_flags & !libc::MS_RDONLY),
            );
        }
        // SAFETY: closing our own descriptor.
        unsafe { libc::close(b.fd) };
    }
    for t in m.tmpfs.iter().filter(|t| t.read_only) {
        if !setattr(t.path.as_c_str(), false, MOUNT_ATTR_RDONLY, 0) {
            remount(
                t.path.as_c_str(),
                libc::MS_REMOUNT
                    | libc::MS_BIND
                    | libc::MS_RDONLY
                    | libc::MS_NOSUID
                    | libc::MS_NODEV,
            );
        }
    }
    if let Some(cwd) = &m.cwd {
        // SAFETY: raw system call on a NUL-terminated path.
        unsafe { libc::chdir(cwd.as_ptr()) };
    }
}

/// Makes the rest of this (pre-exec) child run as process 1 of a new PID namespace with its
/// own `/proc`. A PID namespace applies to children only, so this forks: the new process goes
/// on to exec the worker; this one stays behind as a relay that waits for it and ends the same
/// way (exit code, or the same signal), so the parent sees the worker's own end. True in the
/// worker when it is process 1 of the new namespace.
fn enter_pid_namespace() -> bool {
    // SAFETY: single-threaded pre-exec child; no file descriptor tables are unshared.
    if unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWPID) }.is_err() {
        return false;
    }
    // SAFETY: fork in a single-threaded child (glibc re-initialises its locks in the new
    // process); both sides only make system calls until exec or _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return false;
    }
    if pid == 0 {
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
            if let Some(path) = super::fd_path(&mut buf, fd.as_raw_fd()) {
                let _ = rustix::mount::mount_bind_recursive(path, c"/proc/driver");
            }
        }
        return true;
    }
    relay(pid);
}

/// The relay: mirrors the worker's end and kills it if kg-exec goes away. Never returns.
fn relay(pid: libc::pid_t) -> ! {
    // kg-bench is non-dumpable (`protect_harness_process`) and the relay, never exec'ing,
    // would inherit that; the parent reads the relay's /proc entries to observe the sandbox,
    // and the candidate cannot see the relay from inside its namespace.
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::Dumpable);
    // The relay never execs, so it still holds every descriptor the parent had when it forked
    // (other workers' pipes and sockets): close them, or their readers never see EOF.
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

/// The worker's last steps before exec: no capabilities, an unprivileged uid, the parent-death
/// signal (`in_pid_ns`: our parent is the single-threaded relay), `no_new_privs`, the seccomp
/// filter.
fn drop_privileges(p: &ChildPlan, in_pid_ns: bool) {
    // SAFETY: raw prctl/set*id system calls in the single-threaded pre-exec child.
    unsafe {
        if p.no_privileges {
            // The bounding set needs CAP_SETPCAP (root, or our user namespace): drop it first.
            for cap in 0..64 {
                libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0);
            }
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL,
                0,
                0,
                0,
            );
        }
        if let Some((uid, gid)) = p.drop_to {
            // Supplementary groups first (needs CAP_SETGID), then gid, then uid: a uid change
            // away from 0 clears the permitted and effective capability sets.
            libc::setgroups(0, std::ptr::null());
            libc::setresgid(gid, gid, gid);
            libc::setresuid(uid, uid, uid);
        }
        // Set after the uid change, which clears it. Only under the relay: kg-exec's spawning
        // thread may end before we do, and the signal follows the parent thread.
        if in_pid_ns {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
        }
        if p.no_privileges {
            libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        }
    }
    if let Some(prog) = &p.seccomp {
        super::seccomp::install(prog);
    }
}
