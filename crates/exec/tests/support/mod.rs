//! Helpers shared by kg-exec's integration tests (each test file is its own crate, so not
//! every helper is used by each).
#![allow(dead_code)]

use std::path::PathBuf;

use kg_exec::Interpreter;

pub use kg_test_support::workspace;

/// The test interpreter (`KG_TEST_PYTHON`, else as kg-bench finds one), not yet probed.
pub fn interpreter() -> Interpreter {
    let flag = std::env::var_os("KG_TEST_PYTHON").map(PathBuf::from);
    kg_exec::find_python_env(flag.as_deref(), &workspace())
        .unwrap_or_else(|e| panic!("no test interpreter ({e}): run `cargo xtask setup`"))
}

/// The test interpreter, which must import torch; a test that needs it fails without it
/// (never passes by skipping).
pub fn python() -> Interpreter {
    let interp = interpreter();
    assert!(
        kg_exec::probe(&interp).is_ok(),
        "`{}` cannot import torch: run `cargo xtask setup` or set KG_TEST_PYTHON",
        interp.path.display()
    );
    interp
}
