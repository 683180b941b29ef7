//! What confinement a running worker actually has, read from outside it (`/proc/<pid>/ns/*`,
//! `status`, `limits`, `mountinfo`) — never what the worker says about itself.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use kg_contract::isolation::{IsolationReport, Layer, LayerState};

use super::plan::parse_mountinfo_full;

/// What the sandbox was asked to give (the parent's side of the comparison).
#[derive(Debug, Clone)]
pub struct Expected {
    /// Paths the worker may write (everything else must be read-only in its view).
    pub write: Vec<PathBuf>,
    /// Private tmpfs mount points.
    pub private_tmp: Vec<PathBuf>,
    /// The cgroup made for it, if one was.
    pub cgroup: Option<PathBuf>,
    /// Its seccomp filter refuses shared anonymous memory, memfds and System V shared memory.
    pub shared_memory_refused: bool,
}

/// The worker process: the relay's child where a PID namespace took effect, else `pid` itself.
fn worker_pid(pid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|c| c.parse().ok()))
        .unwrap_or(pid)
}

fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
}

fn soft_limit(limits: &str, row: &str) -> Option<String> {
    let line = limits.lines().find(|l| l.starts_with(row))?;
    line[row.len()..]
        .split_whitespace()
        .next()
        .map(str::to_string)
}

/// What `/proc` shows of a worker, read once.
struct Seen {
    worker: u32,
    proc_dir: PathBuf,
    status: String,
    limits: String,
    mountinfo: String,
    our_mounts: String,
}

impl Seen {
    /// `None` when the worker's entries cannot be read (it is gone).
    fn read(worker: u32) -> Option<Seen> {
        let proc_dir = PathBuf::from(format!("/proc/{worker}"));
        Some(Seen {
            worker,
            status: std::fs::read_to_string(proc_dir.join("status")).ok()?,
            limits: std::fs::read_to_string(proc_dir.join("limits")).ok()?,
            mountinfo: std::fs::read_to_string(proc_dir.join("mountinfo")).ok()?,
            our_mounts: std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default(),
            proc_dir,
        })
    }

    /// Whether the worker's `kind` namespace differs from ours.
    fn differs(&self, kind: &str) -> bool {
        let ns = |p: &Path| std::fs::read_link(p.join("ns").join(kind)).ok();
        match (ns(&self.proc_dir), ns(Path::new("/proc/self"))) {
            (Some(a), Some(b)) => a != b,
            _ => false,
        }
    }

    /// The network and PID namespace layers.
    fn namespaces(&self, push: &mut impl FnMut(Layer, bool, String)) {
        let net = self.differs("net");
        let ipc = self.differs("ipc");
        push(
            Layer::NetworkNamespace,
            net,
            match (net, ipc) {
                (true, true) => "no network, private IPC namespace",
                (true, false) => "no network (the IPC namespace is the host's)",
                _ => "the OS refused a network namespace",
            }
            .into(),
        );
        let pids = self.differs("pid");
        push(
            Layer::PidNamespace,
            pids,
            if pids {
                "process 1 of its own PID namespace and /proc"
            } else {
                "it can see other processes in /proc"
            }
            .into(),
        );
    }

    /// The read-only view and private temporary directories.
    fn filesystem(&self, want: &Expected, push: &mut impl FnMut(Layer, bool, String)) {
        let theirs = parse_mountinfo_full(&self.mountinfo);
        let own_mount_ns = self.differs("mnt");
        let allowed_rw = |p: &Path| {
            want.write
                .iter()
                .chain(&want.private_tmp)
                .any(|w| p.starts_with(w))
                || p.starts_with("/proc")
        };
        let writable: Vec<&Path> = theirs
            .iter()
            .filter(|m| !m.read_only && !allowed_rw(&m.point))
            .map(|m| m.point.as_path())
            .collect();
        let ro = own_mount_ns && writable.is_empty();
        push(
            Layer::ReadOnlyFilesystem,
            ro,
            if !own_mount_ns {
                "no mount namespace (the problem directory is content-checked instead)".into()
            } else if writable.is_empty() {
                format!(
                    "every mount read-only but {} writable path(s)",
                    want.write.len() + want.private_tmp.len()
                )
            } else {
                format!(
                    "writable mounts: {}",
                    writable
                        .iter()
                        .take(4)
                        .map(|p| format!("`{}`", p.display()))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            },
        );

        let our_devs: HashSet<String> = parse_mountinfo_full(&self.our_mounts)
            .into_iter()
            .map(|m| m.dev)
            .collect();
        let private: Vec<(PathBuf, bool)> = want
            .private_tmp
            .iter()
            .map(|t| {
                let fresh = theirs
                    .iter()
                    .rev()
                    .find(|m| &m.point == t)
                    .is_some_and(|m| m.fstype == "tmpfs" && !our_devs.contains(&m.dev));
                (t.clone(), fresh)
            })
            .collect();
        let all_private = own_mount_ns && !private.is_empty() && private.iter().all(|(_, f)| *f);
        push(
            Layer::PrivateTmp,
            all_private,
            private
                .iter()
                .map(|(t, f)| {
                    format!(
                        "`{}` {}",
                        t.display(),
                        if *f {
                            "private tmpfs"
                        } else {
                            "SHARED with the host"
                        }
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
        );
    }

    /// User, capabilities, no-new-privileges and seccomp; returns whether the worker is
    /// unprivileged and filtered by seccomp (the limits depend on both).
    fn credentials(&self, push: &mut impl FnMut(Layer, bool, String)) -> (bool, bool) {
        // Real, effective, saved and filesystem uids, as mapped into our namespace.
        let uids: Vec<u64> = status_field(&self.status, "Uid:")
            .map(|s| {
                s.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        let unprivileged = !uids.is_empty() && uids.iter().all(|&u| u != 0);
        push(
            Layer::UnprivilegedUser,
            unprivileged,
            format!("uid {}", uids.first().map_or("?".into(), u64::to_string)),
        );
        let cap = |name: &str| {
            status_field(&self.status, name).and_then(|v| u64::from_str_radix(v, 16).ok())
        };
        let (eff, prm, bnd) = (cap("CapEff:"), cap("CapPrm:"), cap("CapBnd:"));
        let no_caps = eff == Some(0) && prm == Some(0) && bnd == Some(0);
        push(
            Layer::NoCapabilities,
            no_caps,
            format!(
                "CapEff {:x} CapPrm {:x} CapBnd {:x}",
                eff.unwrap_or(u64::MAX),
                prm.unwrap_or(u64::MAX),
                bnd.unwrap_or(u64::MAX)
            ),
        );
        let nnp = status_field(&self.status, "NoNewPrivs:") == Some("1");
        push(
            Layer::NoNewPrivs,
            nnp,
            format!(
                "NoNewPrivs {}",
                status_field(&self.status, "NoNewPrivs:").unwrap_or("?")
            ),
        );
        let seccomp = status_field(&self.status, "Seccomp:") == Some("2");
        push(
            Layer::Seccomp,
            seccomp,
            format!(
                "Seccomp mode {}",
                status_field(&self.status, "Seccomp:").unwrap_or("?")
            ),
        );
        (unprivileged, seccomp)
    }

    /// Memory, process and file-size limits.
    fn limits(
        &self,
        want: &Expected,
        (unprivileged, seccomp): (bool, bool),
        push: &mut impl FnMut(Layer, bool, String),
    ) {
        let finite = |row: &str| soft_limit(&self.limits, row).filter(|v| v != "unlimited");
        let data = finite("Max data size");
        let cg = want
            .cgroup
            .as_deref()
            .and_then(|d| super::cgroup::holds(self.worker, d));
        // RLIMIT_DATA alone does not count shared anonymous mappings, memfds or pinned host memory:
        // it bounds a process only where its filter refuses those (and tmpfs is size-limited).
        let data_bounds = data.is_some() && seccomp && want.shared_memory_refused;
        push(
            Layer::MemoryLimit,
            cg.is_some() || data_bounds,
            match (cg, data) {
                (Some(m), _) => {
                    format!("cgroup v2 memory.max {m} bytes for all its processes, no swap")
                }
                (None, Some(v)) if data_bounds => format!(
                    "RLIMIT_DATA {v} bytes per process, shared anonymous memory, memfds and System V shared memory refused (not summed over its processes; no cgroup v2 delegated)"
                ),
                (None, Some(v)) => format!(
                    "RLIMIT_DATA {v} bytes per process only: shared, memfd and pinned host memory are not counted, and no cgroup v2 is delegated"
                ),
                (None, None) => "no memory limit".into(),
            },
        );
        let nproc = finite("Max processes");
        push(
            Layer::ProcessLimit,
            nproc.is_some() && unprivileged,
            match (&nproc, unprivileged) {
                (Some(v), true) => format!("RLIMIT_NPROC {v}"),
                (Some(v), false) => format!("RLIMIT_NPROC {v} does not bind root"),
                (None, _) => "no process limit".into(),
            },
        );
        let fsize = finite("Max file size");
        push(
            Layer::FileSizeLimit,
            fsize.is_some(),
            fsize.map_or("no file-size limit".into(), |v| {
                format!("RLIMIT_FSIZE {v} bytes")
            }),
        );
    }
}

/// Observes the sandbox of the worker started as `pid` (the relay, where there is one).
/// `None` when its `/proc` entries cannot be read (it is gone).
pub fn observe(pid: u32, want: &Expected) -> Option<IsolationReport> {
    let seen = Seen::read(worker_pid(pid))?;
    let mut layers = Vec::new();
    let mut push = |layer: Layer, held: bool, detail: String| {
        layers.push(LayerState {
            layer,
            held,
            detail,
        });
    };
    seen.namespaces(&mut push);
    seen.filesystem(want, &mut push);
    let creds = seen.credentials(&mut push);
    seen.limits(want, creds, &mut push);
    Some(IsolationReport {
        sandboxed: true,
        layers,
    })
}
