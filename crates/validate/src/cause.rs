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

/// When the failed import happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImportDuring {
    /// pytest importing a test module (or a conftest found while collecting).
    Collection,
    /// pytest importing its initial conftest files, before collection.
    Conftest,
    /// The script target, run as `__main__`.
    Script,
}

impl ImportDuring {
    /// `at collection`, `while loading conftest files` or `while running the script`.
    pub fn phrase(self) -> &'static str {
        match self {
            ImportDuring::Collection => "at collection",
            ImportDuring::Conftest => "while loading its conftest files",
            ImportDuring::Script => "while running the script",
        }
    }
}

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

/// The typed cause of a failed run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunCause {
    /// `module` is found nowhere: not installed, not in the checkout. An environment fact.
    MissingDependency {
        /// The module (dotted) Python could not find.
        module: String,
        /// The file that imports it, relative to the worktree where possible.
        importer: String,
        /// When.
        during: ImportDuring,
    },
    /// `module` belongs to a package the checkout provides, and is not there.
    MissingCheckoutModule {
        /// The module (dotted).
        module: String,
        /// The file that imports it.
        importer: String,
        /// When.
        during: ImportDuring,
    },
    /// Any other failed import (an extension that does not load, a name a module lacks).
    ImportFailed {
        /// The exception class.
        exception: String,
        /// The module, when Python named it.
        module: Option<String>,
        /// The file that imports it.
        importer: String,
        /// When.
        during: ImportDuring,
    },
}

impl RunCause {
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

    /// Whether this is an environment fact rather than a result of the code under review.
    pub fn is_environment(&self) -> bool {
        matches!(self, RunCause::MissingDependency { .. })
    }
}

impl std::fmt::Display for RunCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunCause::MissingDependency {
                module,
                importer,
                during,
            } => write!(
                f,
                "missing dependency `{module}`: `{importer}` imports it {} and the interpreter cannot find it (ModuleNotFoundError); nothing in the checkout provides it, so install it in the interpreter's environment (or fix the import if it is misspelt)",
                during.phrase()
            ),
            RunCause::MissingCheckoutModule {
                module,
                importer,
                during,
            } => write!(
                f,
                "`{importer}` cannot import `{module}` {} (ModuleNotFoundError), a module of a package the checkout provides",
                during.phrase()
            ),
            RunCause::ImportFailed {
                exception,
                module,
                importer,
                during,
            } => write!(
                f,
                "`{importer}` failed to import {} {} ({exception})",
                module
                    .as_ref()
                    .map(|m| format!("`{m}`"))
                    .unwrap_or_else(|| "a module".into()),
                during.phrase()
            ),
        }
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
        let c = RunCause::classify(
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
        let c = RunCause::classify(
            &failure("ModuleNotFoundError", Some("kern.gone")),
            root,
            provides,
        );
        assert!(
            matches!(c, RunCause::MissingCheckoutModule { ref module, .. } if module == "kern.gone")
        );
        assert!(!c.is_environment());
        // A module that exists but fails to load is not a missing dependency.
        let c = RunCause::classify(&failure("ImportError", Some("scipy")), root, provides);
        assert!(matches!(c, RunCause::ImportFailed { .. }));
        assert!(!c.is_environment());
        let c = RunCause::classify(&failure("ModuleNotFoundError", None), root, provides);
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
