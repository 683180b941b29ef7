//! Children in their own process group, ended as a group, and what they leave behind swept.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use rustix::process::Signal;
use rustix::process::{Pid, kill_process_group};

use crate::capture::{Bounded, drain};
use crate::table::{descendants_in, group_members, proc_table, with_env};

/// Time between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(2);

/// Describes how a process ended, naming the signal if one killed it.
pub fn describe_exit(status: &ExitStatus) -> String {
    if let Some(sig) = status.signal() {
        let name = match sig {
            4 => "SIGILL",
            6 => "SIGABRT",
            7 => "SIGBUS",
            8 => "SIGFPE",
            9 => "SIGKILL",
            11 => "SIGSEGV",
            15 => "SIGTERM",
            _ => "signal",
        };
        format!("killed by {name} ({sig})")
    } else {
        format!("exited with status {}", status.code().unwrap_or(-1))
    }
}

/// Sends `sig` to process group `pgid`; whether it was delivered.
pub fn signal_group(pgid: u32, sig: Signal) -> bool {
    i32::try_from(pgid)
        .ok()
        .and_then(Pid::from_raw)
        .is_some_and(|p| kill_process_group(p, sig).is_ok())
}

/// Kills every process a child started, also those that left its process group or session
/// (`setsid`, `start_new_session=True`): its descendants by parent link and every process
/// whose environment holds `tag` (`NAME=value`). Found processes are stopped first (so they
/// cannot fork away while we look), then killed; those re-parented to us (see
/// [`become_child_subreaper`]) are reaped.
///
/// `root` must be a pid we have not reaped yet (so it cannot have been reused).
pub fn sweep_descendants(root: Option<u32>, tag: Option<&str>) {
    let me = std::process::id();
    let pid = root.unwrap_or(0);
    let mut found: Vec<u32> = Vec::new();
    for _ in 0..5 {
        let table = proc_table();
        let mut now = root.map(|r| descendants_in(r, &table)).unwrap_or_default();
        if let Some(t) = tag {
            now.extend(with_env(t, &table));
        }
        let mut new = false;
        for p in now {
            if p == me || p == pid || found.contains(&p) {
                continue;
            }
            if let Some(q) = i32::try_from(p).ok().and_then(Pid::from_raw) {
                let _ = rustix::process::kill_process(q, Signal::STOP);
            }
            found.push(p);
            new = true;
        }
        if !new {
            break;
        }
    }
    for &p in &found {
        if let Some(q) = i32::try_from(p).ok().and_then(Pid::from_raw) {
            let _ = rustix::process::kill_process(q, Signal::KILL);
        }
    }
    if !found.is_empty() {
        tracing::debug!(root = pid, killed = ?found, "killed processes a child left behind");
    }
    // Reap the ones that became our children; leave everything else to its own parent.
    let deadline = Instant::now() + Duration::from_millis(500);
    let mut left: Vec<u32> = found;
    while !left.is_empty() && Instant::now() < deadline {
        left.retain(|&p| {
            let Some(q) = i32::try_from(p).ok().and_then(Pid::from_raw) else {
                return false;
            };
            match rustix::process::waitpid(Some(q), rustix::process::WaitOptions::NOHANG) {
                Ok(Some(_)) => false,
                Ok(None) => true,
                Err(_) => false, // not our child (its parent reaps it) or already gone
            }
        });
        if !left.is_empty() {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// Makes this process a child subreaper (Linux `PR_SET_CHILD_SUBREAPER`), so processes a
/// child detached are re-parented to us rather than to init when their parent dies, and
/// stay findable. Returns whether it took effect.
pub fn become_child_subreaper() -> bool {
    rustix::process::set_child_subreaper(Some(rustix::process::getpid())).is_ok()
}

/// Ends `child`, the leader of its own process group, and everything it started: what it
/// left behind is swept ([`sweep_descendants`] with `tag`), the group gets SIGTERM, [`GRACE`]
/// for the leader to exit, then SIGKILL; the leader is reaped.
pub fn end_child_group(child: &mut Child, tag: Option<&str>) {
    let pid = child.id();
    // Not reaped yet (a zombie at most), so its pid is still its own.
    let alive = matches!(child.try_wait(), Ok(None));
    sweep_descendants(alive.then_some(pid), tag);
    signal_group(pid, Signal::TERM);
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Whatever else is in the group (compilers, helpers) goes too, even if the leader exited.
    signal_group(pid, Signal::KILL);
    let _ = child.wait();
}

/// Ends what is left of process group `pgid` whose leader is gone (SIGTERM, `grace`,
/// SIGKILL, `grace`); returns the pids that are still there.
pub fn end_group(pgid: u32, grace: Duration) -> Vec<u32> {
    let Ok(group) = i32::try_from(pgid) else {
        return Vec::new();
    };
    let wait_empty = || {
        let until = Instant::now() + grace;
        loop {
            let left = group_members(group);
            if left.is_empty() || Instant::now() >= until {
                return left;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    if group_members(group).is_empty() {
        return Vec::new();
    }
    signal_group(pgid, Signal::TERM);
    if wait_empty().is_empty() {
        return Vec::new();
    }
    signal_group(pgid, Signal::KILL);
    wait_empty()
}

/// Output of a short-lived command run with a timeout.
#[derive(Debug)]
pub struct CommandOutput {
    /// Captured stdout (bounded).
    pub stdout: Vec<u8>,
    /// Captured stderr (bounded).
    pub stderr: Vec<u8>,
    /// Human description of how it ended.
    pub status_text: String,
    /// Whether it exited 0.
    pub success: bool,
}

/// Runs a command to completion in its own process group, killing the group after `timeout`.
pub fn output_with_timeout(
    mut cmd: Command,
    timeout: Duration,
) -> Result<CommandOutput, std::io::Error> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = cmd.spawn()?;
    let out = Arc::new(Mutex::new(Bounded::default()));
    let err = Arc::new(Mutex::new(Bounded::default()));
    let mut threads = Vec::new();
    if let Some(s) = child.stdout.take() {
        threads.push(drain(s, out.clone()));
    }
    if let Some(s) = child.stderr.take() {
        threads.push(drain(s, err.clone()));
    }
    let deadline = Instant::now() + timeout;
    let status_text;
    let mut success = false;
    loop {
        if let Some(st) = child.try_wait()? {
            success = st.success();
            status_text = describe_exit(&st);
            break;
        }
        if Instant::now() >= deadline {
            end_child_group(&mut child, None);
            status_text = format!("timed out after {:.0} s", timeout.as_secs_f64());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for t in threads {
        let _ = t.join();
    }
    let text =
        |b: &Arc<Mutex<Bounded>>| b.lock().map(|b| b.text().into_bytes()).unwrap_or_default();
    Ok(CommandOutput {
        stdout: text(&out),
        stderr: text(&err),
        status_text,
        success,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
    }

    fn read_pid(p: &Path) -> i32 {
        for _ in 0..100 {
            if let Ok(s) = std::fs::read_to_string(p)
                && let Ok(v) = s.trim().parse()
            {
                return v;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("no pid in {}", p.display())
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild.pid");
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("sleep 60 & echo $! > {}; wait", pidfile.display()));
        let out = output_with_timeout(cmd, Duration::from_millis(500)).unwrap();
        assert!(out.status_text.contains("timed out"), "{}", out.status_text);
        assert!(!out.success);
        let pid = read_pid(&pidfile);
        // The grandchild was in the same group, so it is gone (or a zombie reaped by init).
        std::thread::sleep(Duration::from_millis(200));
        assert!(!alive(pid), "grandchild {pid} survived the group kill");
    }

    #[test]
    fn output_is_captured_and_the_exit_described() {
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg("echo out; echo err >&2; exit 3");
        let out = output_with_timeout(cmd, Duration::from_secs(10)).unwrap();
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
        assert_eq!(out.status_text, "exited with status 3");
        assert!(!out.success);
    }

    #[test]
    fn ending_a_child_reaches_a_new_session_and_a_tagged_orphan() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("detached.pid");
        let tagged_pidfile = dir.path().join("tagged.pid");
        let tag = format!("KG_PROC_TEST_TAG=test-{}", std::process::id());
        let (name, value) = tag.split_once('=').unwrap();
        // Child 1: a new session (setsid), out of the group. Child 2: double-forked (its
        // parent exits at once, so it is no descendant any more) but it carries the tag.
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!(
                "setsid sleep 60 & echo $! > {}; (setsid sleep 61 & echo $! > {}) ; sleep 60",
                pidfile.display(),
                tagged_pidfile.display()
            ))
            .env(name, value)
            .process_group(0);
        let mut child = cmd.spawn().unwrap();
        let (a, b) = (read_pid(&pidfile), read_pid(&tagged_pidfile));
        assert!(alive(a) && alive(b));
        end_child_group(&mut child, Some(&tag));
        std::thread::sleep(Duration::from_millis(200));
        assert!(!alive(a), "detached child {a} survived");
        assert!(!alive(b), "tagged orphan {b} survived");
    }

    #[test]
    fn a_group_whose_leader_is_gone_is_ended() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("left.pid");
        // The leader starts a member that ignores SIGTERM and exits; the member stays.
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!(
                "sh -c 'trap \"\" TERM; sleep 60' & echo $! > {}",
                pidfile.display()
            ))
            .process_group(0);
        let mut child = cmd.spawn().unwrap();
        let pgid = child.id();
        let member = read_pid(&pidfile);
        let _ = child.wait();
        assert!(alive(member));
        assert!(end_group(pgid, Duration::from_secs(2)).is_empty());
        assert!(!alive(member), "group member {member} survived");
        assert!(end_group(pgid, Duration::from_millis(100)).is_empty());
    }
}
