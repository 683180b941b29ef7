//! The Python worker scripts, embedded so an installed binary needs no checkout.

use std::path::Path;

/// Shared helpers: protocol, device identity, clocks, timing.
pub const KGCOMMON: &str = include_str!("../py/kgcommon.py");
/// The trusted judge worker.
pub const JUDGE: &str = include_str!("../py/judge.py");
/// The untrusted candidate worker.
pub const CANDIDATE: &str = include_str!("../py/candidate.py");
/// The interpreter probe.
pub const PROBE: &str = include_str!("../py/probe.py");

/// Writes every worker script into `dir` (a private temp dir).
pub fn install(dir: &Path) -> std::io::Result<()> {
    for (name, text) in [
        ("kgcommon.py", KGCOMMON),
        ("judge.py", JUDGE),
        ("candidate.py", CANDIDATE),
        ("probe.py", PROBE),
    ] {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(())
}
