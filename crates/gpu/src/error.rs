//! Error types of kg-gpu. Messages are lower-case and name the input and the fix.

use std::path::PathBuf;

/// A backend (NVML, AMD SMI) could not be used, or a query through it failed.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The vendor library is missing or its driver is not loaded: a fact, not a fault.
    #[error("backend unavailable: {backend}: {reason}")]
    Unavailable {
        /// `nvml`, `amdsmi`, `fake`.
        backend: &'static str,
        /// Why, including the loader's own message.
        reason: String,
    },
    /// The library loaded but a call failed.
    #[error("failed to query {what} through {backend}{}: {message}", device.map(|d| format!(" for device {d}")).unwrap_or_default())]
    Query {
        /// Backend name.
        backend: &'static str,
        /// What was asked (e.g. `memory info`).
        what: &'static str,
        /// SMI index of the device, when the call was per device.
        device: Option<u32>,
        /// The library's message.
        message: String,
    },
    /// `KG_GPU_BACKEND` names something that is not a backend.
    #[error("unknown backend `{0}` in KG_GPU_BACKEND; use auto, nvml, amdsmi or none")]
    UnknownSelection(String),
    /// The fake backend was asked for in a build without it.
    #[error(
        "the fake backend is not compiled into this build (it exists only in test builds); unset KG_GPU_BACKEND"
    )]
    FakeNotCompiled,
}

impl BackendError {
    /// Whether this error means "no such library / driver" rather than a failing library.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, BackendError::Unavailable { .. })
    }
}

/// Changing clocks failed or is not possible.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ClockError {
    /// The caller may not change clocks (not root, or the API is restricted).
    #[error("no permission to change clocks: {0}")]
    NoPermission(String),
    /// The device or library does not support locking clocks.
    #[error("clock locking is not supported: {0}")]
    Unsupported(String),
    /// The requested clock could not be resolved (e.g. `base` without a reported base clock).
    #[error("cannot resolve the requested clock: {0}")]
    Resolve(String),
    /// Any other failure.
    #[error("failed to change clocks: {0}")]
    Failed(String),
}

/// A lock could not be taken or inspected.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the lock (non-blocking acquire refused).
    #[error("device {uuid} is held by another process{}; lock `{}`", owner.as_ref().map(|o| format!(" (pid {} on {}, since {}, command `{}`)", o.pid, o.host, o.started_utc, o.command.join(" "))).unwrap_or_default(), path.display())]
    Busy {
        /// Device UUID.
        uuid: String,
        /// Lock file.
        path: PathBuf,
        /// The holder's record, when readable.
        owner: Option<Box<kg_contract::LockOwner>>,
    },
    /// Waiting for the L2 execution lock timed out.
    #[error(
        "timed out after {waited_s:.0} s waiting for the execution lock `{}`; is another kernelgate child still running on this device? raise KG_GPU_L2_TIMEOUT to wait longer",
        path.display()
    )]
    Timeout {
        /// Lock file.
        path: PathBuf,
        /// Seconds waited.
        waited_s: f64,
    },
    /// A file operation failed.
    #[error("failed to {action} lock file `{}`: {source}; check KG_GPU_LOCK_DIR", path.display())]
    Io {
        /// What was being done (`open`, `lock`, `write`, ...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// A claim could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// Backends could not be loaded or queried.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// No GPU is present (or no backend is available).
    #[error("no GPU found: {0}")]
    NoGpu(String),
    /// GPUs exist but none passed the idleness thresholds.
    #[error("no idle GPU: {0}")]
    NoneIdle(String),
    /// The requested device does not exist.
    #[error("no device matches `{0}`; run `kg-gpu list` to see UUIDs and indices")]
    NoSuchDevice(String),
    /// The device is held by someone else.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// Clocks were asked for with `require_clock_lock` and could not be locked.
    #[error("clocks could not be locked and the caller requires it: {0}")]
    Clocks(#[from] ClockError),
    /// The child cannot be restricted to the device (AMD without a known index or KFD id).
    #[error("cannot restrict a child to device {uuid}: {reason}")]
    Visibility {
        /// Device UUID.
        uuid: String,
        /// Why.
        reason: String,
    },
    /// Writing the evidence failed.
    #[error("failed to write claim evidence: {0}")]
    Evidence(#[from] kg_contract::ContractError),
}
