//! kg-test-support: helpers every kernelgate test suite shares (a dev-dependency only).
//!
//! A test that needs Python gets it from [`python`] / [`python_with`], which fail the test
//! with the fix when the interpreter lacks what it needs: a missing tool never turns a test
//! into a pass.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The interpreter tests run: `KG_TEST_PYTHON`, else `<workspace>/.venv/bin/python`, else
/// `python3` (not checked).
pub fn python_path() -> PathBuf {
    std::env::var_os("KG_TEST_PYTHON")
        .map(PathBuf::from)
        .or_else(|| {
            let v = workspace().join(".venv/bin/python");
            v.is_file().then_some(v)
        })
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// Whether `python` imports every module of `modules`.
pub fn imports(python: &Path, modules: &[&str]) -> bool {
    Command::new(python)
        .args(["-c", &format!("import {}", modules.join(", "))])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The test interpreter, which must import `modules`; panics (the test fails) naming the
/// fix when it does not.
pub fn python_with(modules: &[&str]) -> PathBuf {
    let py = python_path();
    assert!(
        imports(&py, modules),
        "`{}` cannot import {}: run `cargo xtask setup` or set KG_TEST_PYTHON",
        py.display(),
        modules.join(", ")
    );
    py
}

/// The test interpreter with torch ([`python_with`]).
pub fn python() -> PathBuf {
    python_with(&["torch"])
}

/// Copies the tree `from` into `to` (created), files and directories; panics on an error.
pub fn copy_tree(from: &Path, to: &Path) {
    if let Err(e) = try_copy_tree(from, to) {
        panic!("copying `{}` to `{}`: {e}", from.display(), to.display());
    }
}

fn try_copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    kg_contract::tree::copy_tree(from, to, kg_contract::tree::CopyOptions::default()).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspace_root_holds_the_workspace_manifest() {
        let root = workspace();
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        assert!(manifest.contains("[workspace]"), "{}", root.display());
    }

    #[test]
    fn a_missing_module_is_not_importable() {
        let py = python_path();
        assert!(!imports(&py, &["kg_no_such_module_for_sure"]));
    }

    #[test]
    fn trees_are_copied_whole() {
        let d = std::env::temp_dir().join(format!("kg-ts-{}", std::process::id()));
        let src = d.join("a");
        std::fs::create_dir_all(src.join("b")).unwrap();
        std::fs::write(src.join("b/c.txt"), "x").unwrap();
        copy_tree(&src, &d.join("z"));
        assert_eq!(std::fs::read_to_string(d.join("z/b/c.txt")).unwrap(), "x");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
