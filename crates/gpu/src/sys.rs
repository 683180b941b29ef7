//! Host facts: host name, time, process liveness.

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

/// This host's name (`unknown-host` if the call fails).
pub fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".into())
}

pub use kg_proc::now_utc;
/// Start time of a process in clock ticks since boot (`/proc/<pid>/stat` field 22).
pub use kg_proc::start_ticks as pid_start_ticks;

/// Whether `pid` is alive and (when `start_ticks` is known) is the same process, not a reuse.
pub fn pid_alive(pid: u32, start_ticks: Option<u64>) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    match kill(Pid::from_raw(raw), None) {
        Ok(()) | Err(Errno::EPERM) => {}
        Err(_) => return false,
    }
    match (start_ticks, pid_start_ticks(pid)) {
        (Some(want), Some(have)) => want == have,
        _ => true,
    }
}

/// This process's real user id.
pub fn uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_reuse_is_detected() {
        let me = std::process::id();
        let ticks = pid_start_ticks(me);
        assert!(
            ticks.is_some(),
            "/proc/self/stat should be readable on Linux"
        );
        assert!(pid_alive(me, ticks));
        // Same pid, different start time: a reused pid, so not our owner.
        assert!(!pid_alive(me, ticks.map(|t| t + 1)));
        assert!(now_utc().ends_with('Z'));
    }
}
