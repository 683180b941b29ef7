//! The Python worker scripts, embedded so an installed binary needs no checkout.

use std::path::{Path, PathBuf};

/// Shared helpers: protocol, device identity, clocks, timing.
pub const KGCOMMON: &str = include_str!("../py/kgcommon.py");
/// CUPTI device activity recording through ctypes.
pub const KGCUPTI: &str = include_str!("../py/kgcupti.py");
/// Device memory shared through file descriptors (CUDA VMM) through ctypes.
pub const KGVMM: &str = include_str!("../py/kgvmm.py");
/// The trusted judge worker.
pub const JUDGE: &str = include_str!("../py/judge.py");
/// The untrusted candidate worker.
pub const CANDIDATE: &str = include_str!("../py/candidate.py");
/// The interpreter probe.
pub const PROBE: &str = include_str!("../py/probe.py");

/// The directory under a session's private temp dir that holds the worker scripts (mounted
/// read-only for the candidate where the OS allows).
pub fn dir(session_dir: &Path) -> PathBuf {
    session_dir.join("py")
}

/// (Re)writes every worker script into [`dir`]`(session_dir)`, removing anything else there
/// first, so a judge started after a candidate ran never imports what the candidate planted.
pub fn install(session_dir: &Path) -> std::io::Result<()> {
    let dir = dir(session_dir);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(&dir)?;
    for (name, text) in [
        ("kgcommon.py", KGCOMMON),
        ("kgcupti.py", KGCUPTI),
        ("kgvmm.py", KGVMM),
        ("judge.py", JUDGE),
        ("candidate.py", CANDIDATE),
        ("probe.py", PROBE),
    ] {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(())
}
