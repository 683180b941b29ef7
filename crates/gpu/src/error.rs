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
    /// The lock environment is not usable.
    #[error(transparent)]
    Env(#[from] EnvError),
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

/// The lock environment (`GPU_LOCK_DIR`, `GPU_LOCK_UUID` and their `KG_*` aliases) is not
/// usable as the SOL ExecBench ROCm port specifies it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvError {
    /// A variable and its alias name different values.
    #[error(
        "{name} is `{value}` but its alias {alias_name} is `{alias}`; set one of them, or both to the same value"
    )]
    Conflict {
        /// The port's name.
        name: &'static str,
        /// Its value.
        value: String,
        /// The `KG_*` alias.
        alias_name: &'static str,
        /// The alias's value.
        alias: String,
    },
    /// `GPU_LOCK_UUID` is not a full device UUID (an index, a prefix, a PCI id).
    #[error(
        "{var} is `{value}`, which is not a full device UUID (8-4-4-4-12 hex digits, optionally after `GPU-`, as `kg-gpu list` prints it); indices and prefixes are refused"
    )]
    NotFullUuid {
        /// The variable read.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// `GPU_LOCK_UUID` was given without an explicit lock directory.
    #[error(
        "{var} is set but no lock directory is: set GPU_LOCK_DIR (or KG_GPU_LOCK_DIR) explicitly, to the directory every process sharing the device uses"
    )]
    DirRequired {
        /// The UUID variable that was set.
        var: &'static str,
    },
    /// An old index-based lock variable is set.
    #[error(
        "{var} is set: the old index-based GPU locks are refused because they do not exclude UUID locks; unset it and use GPU_LOCK_DIR and GPU_LOCK_UUID (in a coordinated idle window)"
    )]
    OldIndexVariable {
        /// The variable.
        var: &'static str,
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
    /// The lock environment is not usable.
    #[error(transparent)]
    Env(#[from] EnvError),
    /// A previous owner left recovery evidence: its cleanup or clock restore is unverified.
    #[error("device {uuid} needs recovery before anyone may claim it: {summary}; evidence `{}`; run `kg-gpu recover --device {uuid}` (resets the clocks, checks the old process group is gone, then removes the evidence)", path.display())]
    RecoveryRequired {
        /// Device UUID.
        uuid: String,
        /// The recovery file.
        path: PathBuf,
        /// What is pending, and who left it.
        summary: String,
    },
    /// `kg-gpu recover` could not verify what the evidence says is pending; it is kept.
    #[error("failed to recover device {uuid}: {reason}; the evidence `{}` is kept", path.display())]
    RecoveryFailed {
        /// Device UUID.
        uuid: String,
        /// The recovery file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
}
