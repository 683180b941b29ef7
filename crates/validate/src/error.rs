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
    NoPython(#[from] kg_python::PythonError),
    /// A `--grid` cell does not give exactly one value per `--shape-argnames` name.
    #[error("invalid --grid: {0}")]
    GridCell(Box<GridCellError>),
    /// `--target` names a file that is neither in the base worktree nor created by the patch.
    #[error("invalid --target: {0}")]
    NoSuchTarget(Box<NoSuchTarget>),
    /// SIGINT or SIGTERM arrived; the worktree was restored before this was returned.
    #[error("interrupted by a signal; the worktree was restored and the GPU released")]
    Interrupted,
    /// Writing or validating the report failed.
    #[error("failed to write the report: {0}")]
    Report(String),
}

/// `--target` names a file that exists nowhere: not in the base worktree or commit, not among
/// the files the patch writes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no such target `{target}` in `{}` (not in the base worktree, not created by the patch){}",
    repo.display(),
    suggestion(close, existing, listed_dir.as_deref())
)]
pub struct NoSuchTarget {
    /// The file part of `--target`, as given.
    pub target: String,
    /// The worktree.
    pub repo: PathBuf,
    /// Existing files whose path is close to `target`, closest first.
    pub close: Vec<String>,
    /// When nothing is close: Python files in the nearest directory that exists.
    pub existing: Vec<String>,
    /// The directory `existing` was listed from (`.` for the root).
    pub listed_dir: Option<String>,
}

impl From<GridCellError> for ValidateError {
    fn from(e: GridCellError) -> Self {
        ValidateError::GridCell(Box::new(e))
    }
}

impl From<NoSuchTarget> for ValidateError {
    fn from(e: NoSuchTarget) -> Self {
        ValidateError::NoSuchTarget(Box::new(e))
    }
}

/// How a `--grid` cell fails the `--shape-argnames` it is meant for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GridCellError {
    /// Fewer values than argnames: `argname` (the first without one) gets none.
    #[error(
        "cell {index} `{cell}` has {values} value(s) for --shape-argnames `{}`, so argname `{argname}` gets none; {}",
        argnames.join(","),
        fix(argnames, suggested.as_deref())
    )]
    TooFew {
        /// 1-based cell number.
        index: usize,
        /// The cell as given.
        cell: String,
        /// Values in it.
        values: usize,
        /// The first argname left without a value.
        argname: String,
        /// `--shape-argnames`.
        argnames: Vec<String>,
        /// The grid regrouped, when the values can be (never for too few).
        suggested: Option<String>,
    },
    /// More values than argnames: everything after `argname` (the last) has nowhere to go.
    #[error(
        "cell {index} `{cell}` has {values} values for --shape-argnames `{}`: {} more than there are argnames, after the last argname `{argname}`; {}",
        argnames.join(","),
        values - argnames.len(),
        fix(argnames, suggested.as_deref())
    )]
    TooMany {
        /// 1-based cell number.
        index: usize,
        /// The cell as given.
        cell: String,
        /// Values in it.
        values: usize,
        /// The last argname.
        argname: String,
        /// `--shape-argnames`.
        argnames: Vec<String>,
        /// The cell's values regrouped into cells of the right width, when they divide evenly.
        suggested: Option<String>,
    },
    /// A value is empty (`16,` or `,33`).
    #[error(
        "cell {index} `{cell}` gives argname `{argname}` an empty value; {}",
        fix(argnames, None)
    )]
    EmptyValue {
        /// 1-based cell number.
        index: usize,
        /// The cell as given.
        cell: String,
        /// The argname whose value is empty.
        argname: String,
        /// `--shape-argnames`.
        argnames: Vec<String>,
    },
}

fn fix(argnames: &[String], suggested: Option<&str>) -> String {
    let example = suggested.map(str::to_string).unwrap_or_else(|| {
        // Two illustrative cells of the right width: `1,2;3,4` for two argnames.
        let n = argnames.len().max(1);
        let cell = |k: usize| {
            (1..=n)
                .map(|i| (k * n + i).to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        format!("{};{}", cell(0), cell(1))
    });
    format!(
        "give each cell one comma-separated value per argname ({}) and separate cells with `;`, e.g. `--grid '{example}'`",
        argnames.join(", ")
    )
}

fn suggestion(close: &[String], existing: &[String], dir: Option<&str>) -> String {
    if !close.is_empty() {
        let quoted: Vec<String> = close.iter().map(|c| format!("`{c}`")).collect();
        return format!("; did you mean {}?", quoted.join(" or "));
    }
    match dir {
        Some(d) if !existing.is_empty() => format!(
            "; Python files in `{d}`: {}",
            existing
                .iter()
                .map(|e| format!("`{e}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Some(d) => format!("; `{d}` holds no Python file"),
        None => String::new(),
    }
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
