//! A small process runner for task commands: `bash -c` in its own process group, stdout and
//! stderr drained on threads into a log, a timeout that sends SIGTERM to the group, waits a
//! grace period, then SIGKILLs it; children left behind after the command exits are reported
//! and killed. It sits behind [`run`] so that kg-exec's runner can replace it later.

use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

/// What to run.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// A shell command line (run by `bash -c`).
    pub command: String,
    /// Working directory.
    pub cwd: PathBuf,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Wall-clock limit.
    pub timeout: Duration,
    /// Where to write the combined log (command, exit status, stdout, stderr).
    pub log_path: Option<PathBuf>,
}

/// How a command ended.
#[derive(Debug, Clone)]
pub struct CommandOutcome {
    /// Exit code, if it exited (not killed by a signal).
    pub exit_code: Option<i32>,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// Whether the timeout killed it.
    pub timed_out: bool,
    /// Whether processes of its group outlived it (they were killed).
    pub leaked_children: bool,
    /// Captured stdout (lossy UTF-8, capped).
    pub stdout: String,
    /// Captured stderr (lossy UTF-8, capped).
    pub stderr: String,
    /// Wall time.
    pub elapsed: Duration,
    /// Set when the process could not be started at all.
    pub spawn_error: Option<String>,
}

impl CommandOutcome {
    /// Exit 0 within the timeout.
    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && self.spawn_error.is_none()
    }

    /// One line saying how it ended.
    pub fn describe(&self) -> String {
        if let Some(e) = &self.spawn_error {
            format!("could not start: {e}")
        } else if self.timed_out {
            format!(
                "timed out after {:.1}s (process group killed)",
                self.elapsed.as_secs_f64()
            )
        } else {
            let secs = self.elapsed.as_secs_f64();
            match (self.exit_code, self.signal) {
                (_, Some(n)) => format!("killed by {} after {secs:.1}s", signal_text(n)),
                // `bash -c` reports a command that a signal ended as 128 + the signal.
                (Some(c), None) if c > 128 && signal_name(c - 128).is_some() => format!(
                    "exit code {c} after {secs:.1}s (as a shell reports a command killed by {})",
                    signal_text(c - 128)
                ),
                (Some(c), None) => format!("exit code {c} after {secs:.1}s"),
                (None, None) => format!("ended without an exit status after {secs:.1}s"),
            }
        }
    }
}

/// The name of signal `n` (`SIGSEGV`), if it is one.
pub fn signal_name(n: i32) -> Option<&'static str> {
    Signal::try_from(n).ok().map(Signal::as_str)
}

/// `signal 11 (SIGSEGV)`.
fn signal_text(n: i32) -> String {
    match signal_name(n) {
        Some(name) => format!("signal {n} ({name})"),
        None => format!("signal {n}"),
    }
}

const CAP: usize = 8 * 1024 * 1024;

fn drain(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if out.len() < CAP {
                        out.extend_from_slice(&buf[..n.min(CAP - out.len())]);
                    }
                }
            }
        }
        out
    })
}

/// Runs a command to completion or timeout.
pub fn run(spec: &CommandSpec) -> CommandOutcome {
    let start = Instant::now();
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(&spec.command)
        .current_dir(&spec.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let out = CommandOutcome {
                exit_code: None,
                signal: None,
                timed_out: false,
                leaked_children: false,
                stdout: String::new(),
                stderr: String::new(),
                elapsed: start.elapsed(),
                spawn_error: Some(format!(
                    "failed to run `bash -c` in `{}`: {e}",
                    spec.cwd.display()
                )),
            };
            write_log(spec, &out);
            return out;
        }
    };
    let pgid = child.id();
    let out_h = child.stdout.take().map(drain);
    let err_h = child.stderr.take().map(drain);
    let mut timed_out = false;
    let mut status = None;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => {
                status = Some(s);
                break;
            }
            Ok(None) => {}
            Err(_) => break,
        }
        if start.elapsed() >= spec.timeout {
            timed_out = true;
            // SIGTERM to its group, a grace period, then SIGKILL; the leader is reaped.
            kg_proc::end_child_group(&mut child, None);
            status = child.try_wait().ok().flatten();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Anything left in the group outlived the command: report it and kill it, so that its
    // pipes close and GPU memory is freed.
    let leaked_children = i32::try_from(pgid)
        .map(|g| !kg_proc::group_members(g).is_empty())
        .unwrap_or(false);
    if leaked_children {
        kg_proc::signal_group(pgid, kg_proc::Signal::KILL);
    }
    let stdout = out_h.and_then(|h| h.join().ok()).unwrap_or_default();
    let stderr = err_h.and_then(|h| h.join().ok()).unwrap_or_default();
    let out = CommandOutcome {
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
        timed_out,
        leaked_children: leaked_children && !timed_out,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        elapsed: start.elapsed(),
        spawn_error: None,
    };
    write_log(spec, &out);
    out
}

fn write_log(spec: &CommandSpec, out: &CommandOutcome) {
    let Some(path) = &spec.log_path else { return };
    let text = format!(
        "$ {}\n# cwd: {}\n# result: {}{}\n----- stdout -----\n{}\n----- stderr -----\n{}\n",
        spec.command,
        spec.cwd.display(),
        out.describe(),
        if out.leaked_children {
            " (children outlived it and were killed)"
        } else {
            ""
        },
        out.stdout,
        out.stderr
    );
    if let Err(e) = kg_contract::io::write_atomic(path, text.as_bytes()) {
        tracing::warn!("failed to write log {}: {e}", path.display());
    }
}

/// The last `n` characters of a text, for error messages.
pub fn tail(s: &str, n: usize) -> String {
    let count = s.chars().count();
    if count <= n {
        s.to_string()
    } else {
        let skip = count - n;
        format!("…{}", s.chars().skip(skip).collect::<String>())
    }
}

/// Whether `dir` exists, for spawn pre-checks.
pub fn dir_exists(dir: &Path) -> bool {
    dir.is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(cmd: &str, secs: u64) -> CommandSpec {
        CommandSpec {
            command: cmd.into(),
            cwd: std::env::temp_dir(),
            env: vec![("KG_T".into(), "v".into())],
            timeout: Duration::from_secs(secs),
            log_path: None,
        }
    }

    #[test]
    fn captures_both_streams_and_exit_code() {
        let o = run(&spec("echo out; echo err >&2; echo $KG_T; exit 3", 10));
        assert_eq!(o.exit_code, Some(3));
        assert!(!o.success());
        assert_eq!(o.stdout, "out\nv\n");
        assert_eq!(o.stderr, "err\n");
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("survived");
        // A grandchild that would write a file after the timeout.
        let cmd = format!("(sleep 4; touch {}) & sleep 30", marker.display());
        let o = run(&spec(&cmd, 1));
        assert!(o.timed_out);
        assert!(o.elapsed < Duration::from_secs(10), "{:?}", o.elapsed);
        std::thread::sleep(Duration::from_secs(5));
        assert!(!marker.exists(), "grandchild survived the group kill");
    }

    #[test]
    fn leaked_children_are_reported_and_killed() {
        let o = run(&spec("sleep 30 >/dev/null 2>&1 & echo started", 10));
        assert!(o.success());
        assert!(o.leaked_children);
        assert!(o.elapsed < Duration::from_secs(10));
    }

    #[test]
    fn a_signal_is_named() {
        let o = run(&spec("kill -SEGV $$", 10));
        assert_eq!((o.exit_code, o.signal), (None, Some(11)));
        assert!(
            o.describe()
                .starts_with("killed by signal 11 (SIGSEGV) after "),
            "{}",
            o.describe()
        );
        // A shell whose child a signal ended exits 128 + the signal.
        let o = run(&spec("bash -c 'kill -ABRT $$'; exit $?", 10));
        assert_eq!((o.exit_code, o.signal), (Some(134), None));
        assert!(
            o.describe()
                .contains("(as a shell reports a command killed by signal 6 (SIGABRT))"),
            "{}",
            o.describe()
        );
        assert_eq!(
            run(&spec("exit 3", 10)).describe().split(" after").next(),
            Some("exit code 3")
        );
    }

    #[test]
    fn missing_cwd_is_a_spawn_error() {
        let mut s = spec("true", 5);
        s.cwd = PathBuf::from("/nonexistent/kg");
        let o = run(&s);
        assert!(o.spawn_error.is_some());
        assert!(!o.success());
    }
}
