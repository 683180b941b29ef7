//! Errors of kg-validate. Messages are lower-case, name the input and say what to do.

use std::path::PathBuf;

/// Why a validation could not be carried out (as opposed to a verdict about the PR).
#[derive(Debug, thiserror::Error)]
pub enum ValidateError {
    /// A flag or environment variable is unusable.
    #[error("invalid {what}: {message}")]
    Usage {
        /// The flag or variable.
        what: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A git operation failed.
    #[error("failed to {action} in `{}`: {message}", repo.display())]
    Git {
        /// What was being done.
        action: String,
        /// The repository.
        repo: PathBuf,
        /// libgit2's message.
        message: String,
    },
    /// A file operation failed.
    #[error("failed to {action} `{}`: {source}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// No Python interpreter could be found (the message lists every source checked).
    #[error(transparent)]
    NoPython(#[from] kg_exec::python::PythonError),
    /// SIGINT or SIGTERM arrived; the worktree was restored before this was returned.
    #[error("interrupted by a signal; the worktree was restored and the GPU released")]
    Interrupted,
    /// Writing or validating the report failed.
    #[error("failed to write the report: {0}")]
    Report(String),
}

impl ValidateError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> ValidateError {
        let path = path.into();
        move |source| ValidateError::Io {
            action,
            path,
            source,
        }
    }

    pub(crate) fn usage(what: impl Into<String>, message: impl Into<String>) -> ValidateError {
        ValidateError::Usage {
            what: what.into(),
            message: message.into(),
        }
    }
}
