//! Helpers shared by kg-bench's end-to-end test suites (each suite uses some of them).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use kg_contract::Trace;
use kg_test_support::{copy_tree, workspace};

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

/// The traces of a JSONL file, whose last line must be whole.
pub fn traces_in(path: &Path) -> Vec<Trace> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.ends_with('\n'), "torn last line in {}", path.display());
    text.lines()
        .map(|l| serde_json::from_str::<Trace>(l).unwrap())
        .collect()
}

/// A corpus under `dir` holding the problem at `from` (relative to the workspace) as `as_name`,
/// its solutions replaced by copies of its solution file `solution`, one per name in `names`.
pub fn corpus_of_copies(
    dir: &Path,
    from: &str,
    as_name: &str,
    solution: &str,
    names: &[&str],
) -> PathBuf {
    let to = dir.join("corpus").join(as_name);
    copy_tree(&workspace().join(from), &to);
    let sols = to.join("solutions");
    let text = std::fs::read_to_string(sols.join(solution)).unwrap();
    std::fs::remove_dir_all(&sols).unwrap();
    std::fs::create_dir(&sols).unwrap();
    let mut sol: serde_json::Value = serde_json::from_str(&text).unwrap();
    for name in names {
        sol["name"] = (*name).into();
        std::fs::write(sols.join(format!("{name}.json")), sol.to_string()).unwrap();
    }
    dir.join("corpus")
}
