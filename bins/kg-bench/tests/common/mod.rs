//! Helpers shared by kg-bench's end-to-end test suites (each suite uses some of them).

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

use kg_test_support::workspace;

/// A kg-bench command with its own TMPDIR (so its workers can be found in /proc), the test's
/// interpreter, and no `CI_DEVICE` from the environment.
pub fn kg(py: &Path, tmp: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kg-bench"));
    c.env("TMPDIR", tmp)
        .env("PYTHON_BIN", py)
        .env_remove("CI_DEVICE")
        .current_dir(workspace());
    c
}

/// The fewest rounds, iterations and warm-up calls that still exercise every step, on the CPU.
pub const FAST: [&str; 8] = [
    "--device",
    "cpu",
    "--rounds",
    "2",
    "--iterations",
    "3",
    "--warmup",
    "1",
];
