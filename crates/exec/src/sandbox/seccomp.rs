//! The candidate's seccomp filter: a classic-BPF deny list built in the parent (the child
//! between fork and exec must not allocate) and installed last, after `no_new_privs`.
//!
//! It refuses what a confined process could use to undo or see past its confinement: mounts
//! and the new mount API, namespace changes (`setns`, `unshare`, `clone` with a namespace flag),
//! reading or writing other processes (`ptrace`, `process_vm_*`, `pidfd_getfd`,
//! `process_madvise`, `kcmp`), the kernel keyring, `bpf`, `perf_event_open`, `io_uring`
//! (whose operations bypass this filter), `userfaultfd`, and the module, reboot, swap, clock,
//! kexec and quota calls. Refused calls fail with EPERM; `clone3` fails with ENOSYS, so libc
//! falls back to `clone`, whose flags a classic filter can read. A syscall of another ABI
//! than the build's (x32, or a foreign architecture) kills the process.

/// One classic-BPF instruction (`struct sock_filter`).
pub(crate) type Insn = libc::sock_filter;

/// BPF_LD | BPF_W | BPF_ABS (the first two are 0).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_JMP_JSET_K: u16 = 0x05 | 0x40;
const BPF_RET_K: u16 = 0x06;
const BPF_ALU_AND_K: u16 = 0x04 | 0x50;

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;

/// `struct seccomp_data` offsets.
const OFF_NR: u32 = 0;
const OFF_ARCH: u32 = 4;
const OFF_ARG0_LO: u32 = 16;
const OFF_ARG3_LO: u32 = 16 + 3 * 8;

/// `mmap` flags that together make memory no per-process limit counts.
const MAP_SHARED_ANON: u32 = (libc::MAP_SHARED | libc::MAP_ANONYMOUS) as u32;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7;

/// Namespace flags of `clone` (all in the low 32 bits of its first argument).
const CLONE_NS_FLAGS: u32 = (libc::CLONE_NEWNS
    | libc::CLONE_NEWCGROUP
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC
    | libc::CLONE_NEWUSER
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET) as u32;

/// The refused system calls (EPERM).
fn denied() -> Vec<libc::c_long> {
    let mut v = vec![
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_setns,
        libc::SYS_unshare,
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_pidfd_getfd,
        libc::SYS_process_madvise,
        libc::SYS_kcmp,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_bpf,
        libc::SYS_perf_event_open,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_userfaultfd,
        libc::SYS_open_by_handle_at,
        libc::SYS_name_to_handle_at,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_reboot,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_quotactl,
        libc::SYS_acct,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_adjtimex,
        libc::SYS_syslog,
        libc::SYS_sethostname,
        libc::SYS_setdomainname,
        libc::SYS_fanotify_init,
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        libc::SYS_iopl,
        libc::SYS_ioperm,
        libc::SYS_uselib,
        libc::SYS_kexec_file_load,
    ]);
    v.sort_unstable();
    v.dedup();
    v
}

fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

/// The whole filter program. `refuse_shared_memory`: also refuse memory RLIMIT_DATA does not
/// count (shared anonymous `mmap`, `memfd_create`, System V shared memory), where that limit is
/// the worker's only memory bound.
pub(crate) fn program(refuse_shared_memory: bool) -> Vec<Insn> {
    let mut p = vec![
        stmt(BPF_LD_W_ABS, OFF_ARCH),
        jump(BPF_JMP_JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET_K, RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, OFF_NR),
    ];
    #[cfg(target_arch = "x86_64")]
    {
        // x32 system calls share the architecture tag; their numbers carry this bit.
        p.push(jump(BPF_JMP_JGE_K, 0x4000_0000, 0, 1));
        p.push(stmt(BPF_RET_K, RET_KILL_PROCESS));
    }
    let eperm = RET_ERRNO | libc::EPERM as u32;
    let mut deny = denied();
    if refuse_shared_memory {
        deny.extend([libc::SYS_memfd_create, libc::SYS_shmget, libc::SYS_shmat]);
    }
    for nr in deny {
        p.push(jump(BPF_JMP_JEQ_K, nr as u32, 0, 1));
        p.push(stmt(BPF_RET_K, eperm));
    }
    if refuse_shared_memory {
        p.push(jump(BPF_JMP_JEQ_K, libc::SYS_mmap as u32, 0, 5));
        p.push(stmt(BPF_LD_W_ABS, OFF_ARG3_LO));
        p.push(stmt(BPF_ALU_AND_K, MAP_SHARED_ANON));
        p.push(jump(BPF_JMP_JEQ_K, MAP_SHARED_ANON, 0, 1));
        p.push(stmt(BPF_RET_K, RET_ERRNO | libc::ENOMEM as u32));
        p.push(stmt(BPF_RET_K, RET_ALLOW));
    }
    p.push(jump(BPF_JMP_JEQ_K, libc::SYS_clone3 as u32, 0, 1));
    p.push(stmt(BPF_RET_K, RET_ERRNO | libc::ENOSYS as u32));
    // clone: refused when its flags ask for a namespace.
    p.push(jump(BPF_JMP_JEQ_K, libc::SYS_clone as u32, 0, 3));
    p.push(stmt(BPF_LD_W_ABS, OFF_ARG0_LO));
    p.push(jump(BPF_JMP_JSET_K, CLONE_NS_FLAGS, 0, 1));
    p.push(stmt(BPF_RET_K, eperm));
    p.push(stmt(BPF_RET_K, RET_ALLOW));
    p
}

/// Installs `prog` on the calling thread (raw system calls only: safe between fork and exec).
/// Needs `no_new_privs` (or CAP_SYS_ADMIN).
pub(crate) fn install(prog: &[Insn]) -> bool {
    let fprog = libc::sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_ptr().cast_mut(),
    };
    // SAFETY: `fprog` points at a live, well-formed program for the duration of the call.
    unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &raw const fprog,
        ) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `prog` the way the kernel would on (nr, arch, arg0) and returns the action.
    fn eval(prog: &[Insn], nr: u32, arch: u32, arg0: u32) -> u32 {
        eval_args(prog, nr, arch, arg0, 0)
    }

    fn eval_args(prog: &[Insn], nr: u32, arch: u32, arg0: u32, arg3: u32) -> u32 {
        let mut acc = 0u32;
        let mut pc = 0usize;
        loop {
            let i = prog[pc];
            match i.code {
                BPF_LD_W_ABS => {
                    acc = match i.k {
                        OFF_NR => nr,
                        OFF_ARCH => arch,
                        OFF_ARG0_LO => arg0,
                        OFF_ARG3_LO => arg3,
                        k => panic!("load of offset {k}"),
                    };
                }
                BPF_ALU_AND_K => acc &= i.k,
                BPF_RET_K => return i.k,
                BPF_JMP_JEQ_K | BPF_JMP_JGE_K | BPF_JMP_JSET_K => {
                    let hit = match i.code {
                        BPF_JMP_JEQ_K => acc == i.k,
                        BPF_JMP_JGE_K => acc >= i.k,
                        _ => acc & i.k != 0,
                    };
                    pc += usize::from(if hit { i.jt } else { i.jf });
                }
                c => panic!("opcode {c:#x}"),
            }
            pc += 1;
        }
    }

    #[test]
    fn the_filter_refuses_what_it_lists_and_allows_the_rest() {
        let p = program(false);
        assert!(p.len() < 4096);
        let eperm = RET_ERRNO | libc::EPERM as u32;
        for nr in [
            libc::SYS_mount,
            libc::SYS_umount2,
            libc::SYS_ptrace,
            libc::SYS_process_vm_readv,
            libc::SYS_setns,
            libc::SYS_unshare,
            libc::SYS_bpf,
            libc::SYS_keyctl,
        ] {
            assert_eq!(eval(&p, nr as u32, AUDIT_ARCH, 0), eperm, "syscall {nr}");
        }
        for nr in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_mmap,
            libc::SYS_openat,
            libc::SYS_ioctl,
        ] {
            assert_eq!(
                eval(&p, nr as u32, AUDIT_ARCH, 0),
                RET_ALLOW,
                "syscall {nr}"
            );
        }
        let thread = (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_SIGHAND) as u32;
        assert_eq!(
            eval(&p, libc::SYS_clone as u32, AUDIT_ARCH, thread),
            RET_ALLOW
        );
        assert_eq!(
            eval(
                &p,
                libc::SYS_clone as u32,
                AUDIT_ARCH,
                libc::CLONE_NEWUSER as u32
            ),
            eperm
        );
        assert_eq!(
            eval(&p, libc::SYS_clone3 as u32, AUDIT_ARCH, 0),
            RET_ERRNO | libc::ENOSYS as u32
        );
        assert_eq!(
            eval(&p, libc::SYS_read as u32, 0x4000_0003, 0),
            RET_KILL_PROCESS
        );
    }

    #[test]
    fn shared_anonymous_memory_is_refused_only_when_asked() {
        let anon_shared = MAP_SHARED_ANON;
        let anon_private = (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u32;
        let shared_file = libc::MAP_SHARED as u32;
        let mmap = libc::SYS_mmap as u32;
        let on = program(true);
        let enomem = RET_ERRNO | libc::ENOMEM as u32;
        assert_eq!(eval_args(&on, mmap, AUDIT_ARCH, 0, anon_shared), enomem);
        assert_eq!(eval_args(&on, mmap, AUDIT_ARCH, 0, anon_private), RET_ALLOW);
        assert_eq!(eval_args(&on, mmap, AUDIT_ARCH, 0, shared_file), RET_ALLOW);
        assert_eq!(
            eval(&on, libc::SYS_memfd_create as u32, AUDIT_ARCH, 0),
            RET_ERRNO | libc::EPERM as u32
        );
        let off = program(false);
        assert_eq!(eval_args(&off, mmap, AUDIT_ARCH, 0, anon_shared), RET_ALLOW);
        assert_eq!(
            eval(&off, libc::SYS_memfd_create as u32, AUDIT_ARCH, 0),
            RET_ALLOW
        );
    }

    /// The filter installed in a real child: `unshare` and `mount` fail with EPERM there, a
    /// plain write still works.
    #[test]
    fn an_installed_filter_refuses_unshare_in_a_child() {
        let prog = program(true);
        // SAFETY: fork in a test; the child only makes raw system calls, then _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: raw system calls in the forked child.
            unsafe {
                libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
                if !install(&prog) {
                    libc::_exit(10);
                }
                let r = libc::unshare(libc::CLONE_NEWNS);
                let e = *libc::__errno_location();
                if r == 0 || e != libc::EPERM {
                    libc::_exit(11);
                }
                if libc::write(2, b"".as_ptr().cast(), 0) < 0 {
                    libc::_exit(12);
                }
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: waiting on our own child.
        unsafe { libc::waitpid(pid, &raw mut status, 0) };
        assert!(libc::WIFEXITED(status), "status {status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 0);
    }
}
