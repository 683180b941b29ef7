//! Why a target run failed, when the probe could tell: an import that failed while collecting
//! tests (a test module or a conftest) or while running a script. The facts come from the
//! exception objects (class name, `ImportError.name`) that the probe writes into its receipt;
//! nothing here reads the log.
//!
//! A `ModuleNotFoundError` for a module that nothing in the checkout provides (or used to
//! provide, in the base commit or the patch) is a [`RunCause::MissingDependency`]: the
//! interpreter's environment lacks a package, which says nothing about the GPU or the PR's code.
//! One for a module the checkout does provide is [`RunCause::MissingCheckoutModule`] (the
//! checkout's own code cannot be imported: a failure like any other).

use std::path::Path;

use serde::Deserialize;

pub use kg_contract::report::{ImportDuring, RunCause};

/// One failed import, as the probe recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ImportFailure {
    /// The exception class (`ModuleNotFoundError`, `ImportError`, ...).
    pub exception: String,
    /// The module that could not be imported (`ImportError.name`), when Python set it.
    pub module: Option<String>,
    /// The file being imported (a pytest node id, a conftest path or the script).
    pub path: String,
    /// When.
    pub during: ImportDuring,
}

/// Classifies `f`; `provides(top)` says whether the checkout provides (or provided) the
/// top-level package `top`.
pub fn classify(f: &ImportFailure, root: &Path, provides: impl Fn(&str) -> bool) -> RunCause {
    let importer = Path::new(&f.path)
        .strip_prefix(root)
        .map(|p| p.to_string_lossy().to_string())
        .unwrap_or_else(|_| f.path.clone());
    match (&f.module, f.exception.as_str()) {
        (Some(m), "ModuleNotFoundError") => {
            let top = m.split('.').next().unwrap_or(m);
            if provides(top) {
                RunCause::MissingCheckoutModule {
                    module: m.clone(),
                    importer,
                    during: f.during,
                }
            } else {
                RunCause::MissingDependency {
                    module: m.clone(),
                    importer,
                    during: f.during,
                }
            }
        }
        _ => RunCause::ImportFailed {
            exception: f.exception.clone(),
            module: f.module.clone(),
            importer,
            during: f.during,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(exception: &str, module: Option<&str>) -> ImportFailure {
        ImportFailure {
            exception: exception.into(),
            module: module.map(String::from),
            path: "/r/tests/conftest.py".into(),
            during: ImportDuring::Conftest,
        }
    }

    #[test]
    fn module_not_found_is_a_dependency_unless_the_checkout_provides_its_package() {
        let root = Path::new("/r");
        let provides = |top: &str| top == "kern";
        let c = classify(
            &failure("ModuleNotFoundError", Some("scipy.linalg")),
            root,
            provides,
        );
        assert_eq!(
            c,
            RunCause::MissingDependency {
                module: "scipy.linalg".into(),
                importer: "tests/conftest.py".into(),
                during: ImportDuring::Conftest
            }
        );
        assert!(c.is_environment());
        let c = classify(
            &failure("ModuleNotFoundError", Some("kern.gone")),
            root,
            provides,
        );
        assert!(
            matches!(c, RunCause::MissingCheckoutModule { ref module, .. } if module == "kern.gone")
        );
        assert!(!c.is_environment());
        // A module that exists but fails to load is not a missing dependency.
        let c = classify(&failure("ImportError", Some("scipy")), root, provides);
        assert!(matches!(c, RunCause::ImportFailed { .. }));
        assert!(!c.is_environment());
        let c = classify(&failure("ModuleNotFoundError", None), root, provides);
        assert!(matches!(c, RunCause::ImportFailed { module: None, .. }));
    }

    #[test]
    fn receipt_entries_deserialise() {
        let f: ImportFailure = serde_json::from_str(
            r#"{"exception": "ModuleNotFoundError", "module": "x", "path": "t.py", "during": "collection"}"#,
        )
        .unwrap();
        assert_eq!(f.during, ImportDuring::Collection);
        assert!(
            serde_json::from_str::<ImportFailure>(
                r#"{"exception": "E", "module": null, "path": "p", "during": "later"}"#
            )
            .is_err()
        );
    }
}
