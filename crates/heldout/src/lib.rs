//! kg-heldout: held-out shape evaluation, compatible with AgentKernelArena's `src.held_out`.
//!
//! Does an optimised kernel still work, and stay fast, on shapes it never saw?
//!
//! - [`task`]: AKA tasks (`config.yaml`), discovery and the held-out scope
//!   (`triton2triton/vllm`, `triton2triton/rocmbench`, `hip2hip|torch2hip/gpumode`).
//! - [`generate`]: `held_out_tests/<task>/held_out_shapes.yaml` per task, by the deterministic
//!   [`shape_rules`] backend (default; seeded) or an [`agent`] CLI. Rules-generated injections are
//!   applied to the task's own files in memory before they are written. The output directory
//!   ignores itself in Git (a `.gitignore` of `*`), as AKA keeps `held_out_tests/` private.
//! - [`shapes_file`]: the YAML format (AKA's fields plus `shapes` and `generator`) and
//!   applying its injections through kg-inject (byte-exact, re-parsed).
//! - [`eval`]: the `RUN_heldout/` flow — `orig/` and `opt/` per task, injections, the task's
//!   commands through [`runner`], [`perf`] report parsing and case matching, statuses and
//!   [`summary`] (AKA's fields plus speedup retention, speedup intervals and calls, and a
//!   Wilson interval).
//! - [`speedup`]: each side's performance commands run repeatedly, interleaved orig, opt,
//!   orig, opt, …; the held-out speedup is the median of the cross-run speedups with a
//!   distribution-free (Mann–Whitney) interval, and a gain, loss or retention change is
//!   called only when that interval excludes 1.0.
//! - [`gpu_probe`]: whether the interpreter's torch sees a GPU, asked before any task runs and
//!   again after a task with a failing side; with none, nothing is scored.
//! - [`python`]: routes `python`/`pytest` task commands through the chosen interpreter.
//!
//! Ownership: evaluation only reads the run directory and the tasks directory; everything it
//! writes is under the sibling output directory, which it owns. Each task command runs in its
//! own process group that the [`runner`] kills on timeout. Per-task failures become `error`
//! entries, never a crash of the whole evaluation; an unusable device is never a quadrant.
//!
//! Not for: timing kernels itself (the task's own performance command does), or judging
//! numerical correctness (the task's correctness command does).

pub mod agent;
pub mod error;
pub mod eval;
pub mod generate;
pub mod gpu_probe;
pub mod perf;
pub mod python;
pub mod runner;
pub mod shape_rules;
pub mod shapes_file;
pub mod speedup;
pub mod summary;
pub mod task;
pub mod yaml;

pub use error::HeldoutError;
