//! kg-solar: speed-of-light (SOL) bounds from a definition's PyTorch reference.
//!
//! Pipeline, for one workload at its concrete shapes:
//! 1. **Extraction** ([`python::trace_all`]): the user's interpreter runs an embedded script that
//!    traces the reference's `run` on fake tensors (no data, no GPU) through one of two fixed
//!    [`ExtractionPath`]s and reports an [`graph::OperatorGraph`]. A run never falls back from one
//!    backend to the other.
//! 2. **IR** ([`rules::lower`]): every op becomes an extended-einsum [`ir::IrOp`] with FLOPs split
//!    into tensor-core and other work and bytes per operand. An op with no rule fails the whole
//!    analysis, listing every unsupported op and its source line; a replay check compares the
//!    IR's output shapes with the traced ones.
//! 3. **Bound** ([`analysis::analyze_graph`]): `T_SOL = max(T_compute, T_memory_fused)` on a
//!    [`hardware::HardwareSpec`], with the unfused memory model reported beside it.
//! 4. **Artifacts** ([`analysis::write_analysis`]): the port's published file set,
//!    `operator_graph.yaml`, the IR under the path's name ([`ExtractionPath::ir_file`]),
//!    `conversion-attestation.yaml` (what the replay check verified, hash-bound to the graph
//!    files), `solar-analysis.yaml`, and `manifest.yaml` (SHA-256 of each), written atomically.
//!
//! Not for: timing, scoring (kg-score), or running candidate code. Counting conventions are in
//! `docs/solar.md`.

pub mod analysis;
pub mod graph;
pub mod hardware;
pub mod ir;
pub mod python;
pub mod rules;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The two fixed extraction paths (the port calls them backends; kg-gpu's backends are GPU
/// interfaces). The SOL ExecBench ROCm port names them `make_fx_aten` and
/// `torchview_extended_einsum`; those names are accepted everywhere a path is read
/// ([`ExtractionPath::from_str`], serde aliases), and ours are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExtractionPath {
    /// ATen ops after dispatch, through `make_fx` in fake-tensor mode (the port's
    /// `make_fx_aten`).
    #[serde(alias = "make_fx_aten")]
    Aten,
    /// torch-function calls (torch.*, Tensor methods, torch.nn.functional.*), outermost only
    /// (the port's `torchview_extended_einsum`: the function-level path).
    #[serde(alias = "torchview_extended_einsum")]
    Fx,
}

impl ExtractionPath {
    /// `aten` or `fx`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExtractionPath::Aten => "aten",
            ExtractionPath::Fx => "fx",
        }
    }

    /// The port's name of this path: `make_fx_aten` or `torchview_extended_einsum`.
    pub fn port_name(self) -> &'static str {
        match self {
            ExtractionPath::Aten => "make_fx_aten",
            ExtractionPath::Fx => "torchview_extended_einsum",
        }
    }

    /// The IR file of this path, named as the port names it: `aten_graph.yaml` for
    /// `make_fx_aten`, `einsum_graph.yaml` for `torchview_extended_einsum` (both hold our
    /// extended-einsum IR; the ATen path keeps ATen op names in it).
    pub fn ir_file(self) -> &'static str {
        match self {
            ExtractionPath::Aten => "aten_graph.yaml",
            ExtractionPath::Fx => "einsum_graph.yaml",
        }
    }
}

/// A backend name that is neither ours nor the port's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown SOLAR backend `{0}`; use aten (make_fx_aten) or fx (torchview_extended_einsum)")]
pub struct UnknownBackend(pub String);

impl std::str::FromStr for ExtractionPath {
    type Err = UnknownBackend;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "aten" | "make_fx_aten" => Ok(ExtractionPath::Aten),
            "fx" | "torchview_extended_einsum" => Ok(ExtractionPath::Fx),
            other => Err(UnknownBackend(other.to_string())),
        }
    }
}

impl std::fmt::Display for ExtractionPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<kg_contract::ContractError> for SolarError {
    fn from(e: kg_contract::ContractError) -> Self {
        SolarError::Contract(Box::new(e))
    }
}

/// Everything that can go wrong in kg-solar.
#[derive(Debug, thiserror::Error)]
pub enum SolarError {
    /// Reading or writing a file.
    #[error("failed to access `{path}`: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A contract file (definition, workload) is invalid or unreadable.
    #[error(transparent)]
    Contract(Box<kg_contract::ContractError>),
    /// The interpreter could not be started.
    #[error("failed to start `{python}`: {source}; pass --python or set PYTHON_BIN")]
    Spawn {
        /// Interpreter.
        python: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The interpreter exited non-zero.
    #[error("`{python}` exited with {status} while extracting; stderr tail:\n{stderr}")]
    PythonExit {
        /// Interpreter.
        python: PathBuf,
        /// Exit status.
        status: String,
        /// Last lines of stderr.
        stderr: String,
    },
    /// The interpreter lacks torch (or rejected the request).
    #[error(
        "failed to extract with `{python}` ({kind}): {message}; install torch in that interpreter or pass --python"
    )]
    PythonSetup {
        /// Interpreter.
        python: PathBuf,
        /// Failure kind.
        kind: String,
        /// Message.
        message: String,
    },
    /// The script's reply was not what the protocol says.
    #[error("extraction protocol error: {0}")]
    Protocol(String),
    /// The reference could not be traced.
    #[error(
        "failed to trace `{definition}` workload `{workload}` with backend {backend} ({kind}): {message}"
    )]
    Trace {
        /// Definition name.
        definition: String,
        /// Workload uuid.
        workload: String,
        /// The extraction path that failed.
        backend: ExtractionPath,
        /// Failure kind.
        kind: String,
        /// Message.
        message: String,
    },
    /// Lowering to the IR failed (unsupported ops or replay mismatch).
    #[error("failed to analyse `{definition}` workload `{workload}`: {source}")]
    Lower {
        /// Definition name.
        definition: String,
        /// Workload uuid.
        workload: String,
        /// The cause.
        source: Box<rules::LowerError>,
    },
    /// A hardware spec is missing or invalid.
    #[error("failed to load hardware spec `{origin}`: {message}")]
    Hardware {
        /// Name or path.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// The hardware has no tensor rate for a dtype the graph uses.
    #[error(
        "hardware `{hardware}` lists no tensor rate for dtype `{dtype}`; add it to the spec file"
    )]
    NoRate {
        /// Hardware name.
        hardware: String,
        /// dtype.
        dtype: String,
    },
    /// A written artifact does not match its manifest or is malformed.
    #[error("artifact `{path}` is invalid: {message}")]
    Artifact {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}
