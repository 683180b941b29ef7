//! Errors of kg-inject: every variant names the file and, where there is one, the line and
//! column in it.

use std::path::PathBuf;

use crate::source::Location;

/// What went wrong while reading, analysing or rewriting a Python file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InjectError {
    /// The file could not be read.
    #[error("failed to read `{path}`: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid Python.
    #[error("failed to parse {at}: {message} (fix the syntax error, or point at the right file)")]
    Parse {
        /// Where the parser stopped.
        at: Location,
        /// The parser's message.
        message: String,
    },
    /// A rewrite produced a file that no longer parses.
    #[error(
        "failed to rewrite `{path}`: the result does not parse at line {line}, column {column}: \
         {message} (check the replacement code)"
    )]
    RewriteInvalid {
        /// The file being rewritten.
        path: PathBuf,
        /// Line in the rewritten text.
        line: usize,
        /// Column in the rewritten text.
        column: usize,
        /// The parser's message.
        message: String,
    },
    /// Two edits overlap, or an edit lies outside the text or splits a character.
    #[error("failed to rewrite `{path}`: {reason}")]
    BadEdit {
        /// The file being rewritten.
        path: PathBuf,
        /// Why the edit set is invalid.
        reason: String,
    },
    /// The marker the injection names was not found.
    #[error("failed to inject into `{path}`: {what} not found (the task's file no longer has it)")]
    MarkerNotFound {
        /// The file.
        path: PathBuf,
        /// What was looked for.
        what: String,
    },
    /// The injection changed nothing.
    #[error("failed to inject into `{path}`: the replacement leaves the file unchanged")]
    NoChange {
        /// The file.
        path: PathBuf,
    },
}
