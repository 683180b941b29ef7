//! Errors of kg-heldout. Per-task problems are not errors of the whole command: they become
//! error entries in the outputs; these variants are for what stops a command or one task.

use std::path::PathBuf;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HeldoutError {
    /// A file or directory could not be read or written.
    #[error("failed to access `{path}`: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A YAML file did not parse or did not have the expected fields.
    #[error("failed to read YAML `{path}`: {message}")]
    Yaml {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A document could not be serialised.
    #[error("failed to serialise {what}: {message}")]
    Serialize {
        /// What was being written.
        what: String,
        /// The serialiser's message.
        message: String,
    },
    /// Python source analysis or rewriting failed.
    #[error(transparent)]
    Inject(#[from] kg_inject::InjectError),
    /// An atomic write failed.
    #[error(transparent)]
    Contract(#[from] kg_contract::ContractError),
    /// The task cannot get held-out shapes from the rules backend, and why.
    #[error("task `{task}`: {reason}")]
    Unsupported {
        /// The task id.
        task: String,
        /// Why.
        reason: String,
    },
    /// A held-out injection could not be applied.
    #[error("injection {index} into `{file}` failed: {reason}")]
    Injection {
        /// 0-based index in `injections`.
        index: usize,
        /// The injected file, relative to the workspace.
        file: String,
        /// Why.
        reason: String,
    },
    /// An agent CLI is not installed.
    #[error(
        "the `{backend}` backend needs the `{program}` CLI on PATH, and it is not installed (install it, or use `--backend rules`)"
    )]
    AgentMissing {
        /// The backend name.
        backend: String,
        /// The program looked for.
        program: String,
    },
    /// The tasks need a GPU and the interpreter's torch has none; nothing was evaluated.
    #[error(
        "no usable device: {problem}; nothing was evaluated (held-out tasks run on a GPU; pass `--device cpu` only for tasks known to run on the CPU)"
    )]
    DeviceUnusable {
        /// What the probe found.
        problem: crate::gpu_probe::DeviceProblem,
    },
    /// Bad command-line input.
    #[error("{0}")]
    Usage(String),
}

pub(crate) fn io_err(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> HeldoutError + '_ {
    move |source| HeldoutError::Io {
        path: path.to_path_buf(),
        source,
    }
}
