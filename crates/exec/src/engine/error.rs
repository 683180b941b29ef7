//! The engine's error type.

use super::*;

/// Errors that stop an evaluation (as opposed to statuses recorded in traces).
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The solution declares a language we do not run.
    #[error("solution `{solution}` declares language(s) {languages:?}; supported: {supported}")]
    UnsupportedLanguage {
        /// Solution name.
        solution: String,
        /// Its languages.
        languages: Vec<String>,
        /// The supported list.
        supported: String,
    },
    /// The solution is for another definition.
    #[error(
        "solution `{solution}` is for definition `{for_def}`, but the problem is `{def}`; pass the matching `--solution`"
    )]
    WrongDefinition {
        /// Solution name.
        solution: String,
        /// Its definition.
        for_def: String,
        /// The problem's definition.
        def: String,
    },
    /// The judge could not be started or set up (environment problem).
    #[error("failed to start the judge worker with `{python}`: {message}")]
    Judge {
        /// Interpreter.
        python: PathBuf,
        /// What went wrong (with its stderr tail).
        message: String,
    },
    /// Local I/O (temp dirs, scripts).
    #[error("failed to {what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// Cancelled (Ctrl-C / SIGTERM); workers were killed.
    #[error("cancelled")]
    Cancelled,
    /// The problem directory could not be hashed before the candidate started (a file that
    /// cannot be read, too many entries): its traces would record no tree hash.
    #[error("{0}")]
    ProblemTree(kg_contract::tree::TreeError),
    /// The problem directory no longer matches the tree it was loaded from (a candidate of an
    /// earlier evaluation, or someone else, changed it).
    #[error(
        "the problem directory `{}` changed since it was loaded ({files}); refusing to evaluate on it",
        dir.display()
    )]
    ProblemChanged {
        /// The problem directory.
        dir: PathBuf,
        /// What differs.
        files: String,
    },
    /// `--require-sandbox` and a layer did not hold on the candidate; it was killed.
    #[error(
        "the candidate sandbox is incomplete on this host: {missing}; nothing was evaluated (run without --require-sandbox to record the missing layers in the traces instead)"
    )]
    SandboxIncomplete {
        /// The missing layers with what was seen.
        missing: String,
    },
    /// The session directory could not be made.
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    /// What a sandboxed worker needs of the interpreter could not be found.
    #[error("failed to read the interpreter's import path for the workers: {0}")]
    SandboxPaths(#[from] crate::python::PythonError),
    /// A fault of the harness's own plumbing (its transfer directory vanished) in both
    /// attempts at a workload: the evaluation stops there, and that workload gets no status.
    #[error(
        "harness fault (not the candidate's) at workload `{workload}` of `{definition}`: {detail}; the evaluation stopped there (the workloads before it are recorded); rerun it, and report this if it repeats"
    )]
    HarnessFault {
        /// The definition.
        definition: String,
        /// The workload's uuid.
        workload: String,
        /// What happened in each attempt.
        detail: String,
    },
    /// The solution's language cannot be built or run on this host or device; nothing ran.
    #[error(
        "solution `{solution}` ({language}) cannot run here: missing {missing}; {fix}. Nothing was evaluated"
    )]
    ToolchainMissing {
        /// Solution name.
        solution: String,
        /// The language that needs it.
        language: String,
        /// What is missing.
        missing: String,
        /// What to do about it.
        fix: String,
    },
}
