//! Failures of writing a chain or reading keys.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::verify::ChainFinding;
use crate::error::ContractError;

/// Failures of writing a chain or reading keys.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// File I/O.
    #[error("failed to {what} `{}`: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// Another writer held the lock too long.
    #[error(
        "failed to lock `{}` within {} s: another kg-bench is writing these traces (or hung holding the lock)",
        path.display(), waited.as_secs()
    )]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
        /// How long we waited.
        waited: Duration,
    },
    /// The existing file does not verify, so appending would vouch for it.
    #[error(
        "refusing to append to `{}`: it does not verify ({first}); move it aside or check it with `kg-bench verify`",
        path.display()
    )]
    Broken {
        /// The trace file.
        path: PathBuf,
        /// Its first finding.
        first: ChainFinding,
    },
    /// A key file is malformed or too open.
    #[error("failed to use key `{}`: {message}", path.display())]
    Key {
        /// The key file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Serialising a trace.
    #[error(transparent)]
    Contract(#[from] ContractError),
    /// Random bytes for a run id or key.
    #[error("failed to get random bytes from the OS: {0}")]
    Random(String),
    /// A `--problem` directory whose `definition.json` names no definition.
    #[error("`{}` has no `name`: not a problem's definition", path.display())]
    NotAProblem {
        /// The definition file.
        path: PathBuf,
    },
    /// A problem directory that has no tree hash.
    #[error(transparent)]
    Tree(Box<crate::tree::TreeError>),
}

pub(super) fn io_err<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> ChainError + 'a {
    move |source| ChainError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}
