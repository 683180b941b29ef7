//! Errors of kg-contract: every one names the file, the line (for JSONL) and the field.

use std::path::PathBuf;

/// Where in an input a problem was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file.
    pub path: PathBuf,
    /// 1-based line (JSONL line, or the line of a JSON syntax error).
    pub line: Option<usize>,
    /// Dotted field path, e.g. `inputs.x.dtype`; empty for the whole document.
    pub field: String,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}`", self.path.display())?;
        if let Some(line) = self.line {
            write!(f, " line {line}")?;
        }
        if !self.field.is_empty() {
            write!(f, " field `{}`", self.field)?;
        }
        Ok(())
    }
}

/// An error reading, validating or writing a contract artifact.
#[derive(Debug, thiserror::Error)]
pub enum ContractError {
    /// The file could not be read or written.
    #[error("failed to access `{path}`: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The document is not valid JSON, or does not match the schema.
    #[error("failed to parse {at}: {message}")]
    Parse {
        /// Where.
        at: Location,
        /// What was wrong and what was expected.
        message: String,
    },
    /// The document parsed but its content is inconsistent.
    #[error("invalid {at}: {message}")]
    Invalid {
        /// Where.
        at: Location,
        /// What was wrong and what was expected.
        message: String,
    },
    /// A problem directory lacks a required file.
    #[error(
        "problem directory `{dir}` has no `{file}`; expected `definition.json` and `workload.jsonl`"
    )]
    MissingFile {
        /// The directory.
        dir: PathBuf,
        /// The missing file name.
        file: String,
    },
    /// Serialising a value failed (a bug: our types always serialise).
    #[error("failed to serialise {what}: {source}")]
    Serialize {
        /// What was being written.
        what: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
}

impl ContractError {
    /// The location the error refers to, if any.
    pub fn location(&self) -> Option<&Location> {
        match self {
            ContractError::Parse { at, .. } | ContractError::Invalid { at, .. } => Some(at),
            _ => None,
        }
    }
}
