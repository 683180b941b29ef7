//! The Python worker scripts, embedded so an installed binary needs no checkout.

use std::path::Path;

/// The wire: channel to the parent, request loop, watchdog, error replies.
pub const KG_WIRE: &str = include_str!("../py/kg_wire.py");
/// Inputs: dtypes, seeded input sets, sealed timed sets, digests.
pub const KG_INPUTS: &str = include_str!("../py/kg_inputs.py");
/// The device and environment a worker runs on.
pub const KG_ENV: &str = include_str!("../py/kg_env.py");
/// Timing: one class per method, CUPTI span readings.
pub const KG_TIMING: &str = include_str!("../py/kg_timing.py");
/// Outputs on their way from candidate to judge (file and device pool).
pub const KG_HANDOVER: &str = include_str!("../py/kg_handover.py");
/// CUPTI device activity recording through ctypes.
pub const KGCUPTI: &str = include_str!("../py/kgcupti.py");
/// Device memory shared through file descriptors (CUDA VMM) through ctypes.
pub const KGVMM: &str = include_str!("../py/kgvmm.py");
/// The trusted judge worker.
pub const JUDGE: &str = include_str!("../py/judge.py");
/// The judge's comparison of outputs (tolerances, v2 workload checks).
pub const JUDGE_COMPARE: &str = include_str!("../py/judge_compare.py");
/// The untrusted candidate worker.
pub const CANDIDATE: &str = include_str!("../py/candidate.py");
/// The precompiler of Triton solutions (untrusted, no GPU).
pub const PRECOMPILE: &str = include_str!("../py/precompile.py");
/// The interpreter probe.
pub const PROBE: &str = kg_python::PROBE;

/// Writes every worker script into `dir`, which must not exist yet: each worker gets scripts
/// written for it, so no worker imports what another process (a candidate that ran before it,
/// or runs beside it) could have changed, and rewriting them never tears a file a starting
/// worker is reading.
pub fn install(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir(dir)?;
    for (name, text) in [
        ("kg_wire.py", KG_WIRE),
        ("kg_inputs.py", KG_INPUTS),
        ("kg_env.py", KG_ENV),
        ("kg_timing.py", KG_TIMING),
        ("kg_handover.py", KG_HANDOVER),
        ("kgcupti.py", KGCUPTI),
        ("kgvmm.py", KGVMM),
        ("judge.py", JUDGE),
        ("judge_compare.py", JUDGE_COMPARE),
        ("candidate.py", CANDIDATE),
        ("precompile.py", PRECOMPILE),
        ("probe.py", PROBE),
    ] {
        std::fs::write(dir.join(name), text)?;
    }
    Ok(())
}
