//! The Python worker scripts, embedded so an installed binary needs no checkout.

use std::path::Path;

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
pub const PROBE: &str = kg_python::PROBE;

/// Writes every worker script into `dir`, which must not exist yet: each worker gets scripts
/// written for it, so no worker imports what another process (a candidate that ran before it,
/// or runs beside it) could have changed, and rewriting them never tears a file a starting
/// worker is reading.
pub fn install(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir(dir)?;
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
