//! Shared helpers: fixture paths and error assertions.

use std::path::{Path, PathBuf};

use kg_contract::ContractError;

/// `fixtures/contract/<rel>` in the workspace.
pub fn fixture(rel: &str) -> PathBuf {
    workspace().join("fixtures/contract").join(rel)
}

pub use kg_test_support::workspace;

/// 1-based line of the first line of `path` containing `marker`.
pub fn line_of(path: &Path, marker: &str) -> usize {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .position(|l| l.contains(marker))
        .unwrap_or_else(|| panic!("`{marker}` not in {}", path.display()))
        + 1
}

/// Asserts that `err` points at `file`, `line` and `field`, and that its message names all
/// three and contains `fragment`.
#[track_caller]
pub fn assert_located(
    err: &ContractError,
    file: &Path,
    line: Option<usize>,
    field: &str,
    fragment: &str,
) {
    let msg = err.to_string();
    println!("{msg}");
    let at = err
        .location()
        .unwrap_or_else(|| panic!("error has no location: {msg}"));
    assert_eq!(at.path, file, "wrong file in: {msg}");
    assert_eq!(at.line, line, "wrong line in: {msg}");
    assert_eq!(at.field, field, "wrong field in: {msg}");
    assert!(
        msg.contains(&format!("`{}`", file.display())),
        "message does not name the file: {msg}"
    );
    if let Some(l) = line {
        assert!(
            msg.contains(&format!(" line {l}")),
            "message does not name line {l}: {msg}"
        );
    }
    if !field.is_empty() {
        assert!(
            msg.contains(&format!("field `{field}`")),
            "message does not name field `{field}`: {msg}"
        );
    }
    assert!(msg.contains(fragment), "message lacks `{fragment}`: {msg}");
}
