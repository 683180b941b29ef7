//! kg-gpu: find, claim and own GPUs of either vendor, with evidence.
//!
//! - **Backends** ([`backend`]): NVIDIA through NVML (`nvml-wrapper`), AMD through AMD SMI (our
//!   own `libloading` bindings, [`amd`]), or none. Libraries are loaded at run time; a missing
//!   library or driver is reported as `backend unavailable: <reason>`, never a panic. A fake
//!   backend (feature `fake`, test builds only) reads a scenario file.
//! - **Device identity** ([`device`], [`mapping`]): vendor, SMI index, runtime index (CUDA
//!   ordinal / HIP index) derived through PCI bus id and UUID with the basis it rests on, UUID,
//!   BDF, name, architecture, memory, activity, clocks, temperature, power, processes.
//! - **Idle picker** ([`pick`]): samples over a window, thresholds, sort, `idleness_basis`,
//!   exit codes 0/1/2/3.
//! - **Locks** ([`lock`]): UUID-keyed L1 ownership and L2 execution locks with owner records
//!   and stale-record detection.
//! - **Claims** ([`claim`], [`run`]): [`Claim::acquire`] picks, locks, optionally locks clocks,
//!   and yields [`kg_contract::GpuClaim`] evidence; [`run::run_claimed`] runs a command under
//!   a claim with signal forwarding.
//!
//! Not for: timing, kernels, or anything that needs a CUDA/HIP context. kg-gpu never links a
//! vendor library and never changes clocks unless a caller asks for a clock lock.
//!
//! # Ownership rules
//!
//! These are the rules every kernelgate crate relies on; they are stated here once.
//!
//! 1. **The owner is the process that called [`Claim::acquire`].** It holds the L1 ownership
//!    lock (a `flock` on `gpu-<UUID>.L1-ownership.lock`) from acquisition until the [`Claim`]
//!    is finished or dropped. Nobody else releases it; the kernel releases it if the owner
//!    dies.
//! 2. **The owner owns the clock restore duty.** If it locked clocks, it records
//!    `clocks_locked: true` in the L1 owner record *before* changing them, and restores them
//!    when the claim ends: on [`Claim::finish`], on drop (normal return, `?` errors, panics that
//!    unwind), and — in `kg-gpu claim` / [`run::run_claimed`] — after SIGINT, SIGTERM or SIGHUP,
//!    which are forwarded to the child's process group instead of killing the owner. Only
//!    then is the lock released. If the restore fails, the lock is kept until the process
//!    exits and the record stays, so `kg-gpu status` and the next owner see it. SIGKILL cannot
//!    be handled: the lock is freed by the kernel and the record is left **stale**.
//!    Whatever the owner cannot verify (a restore that failed or never ran, a child process
//!    group that survived SIGKILL) stays in [`recovery`] evidence, written before clocks are
//!    touched, which blocks every later owner until `kg-gpu recover` clears it.
//! 3. **Children borrow, never take over.** A child started under a claim sees only the
//!    claimed device (by UUID where the runtime accepts one, so its index is 0), finds the
//!    evidence in `KG_GPU_CLAIM`, and may contend for the L2 execution lock
//!    ([`lock::ExecutionLock`]) named by `KG_GPU_L2_LOCK` to serialise device work. It never
//!    touches L1 or clocks. The owner waits for its children (their whole process group)
//!    before it restores clocks and releases L1. kg-bench, the borrower that runs kernels,
//!    takes L2 in its parent process around each workload (`kg_exec::l2`), never in its
//!    sandboxed workers.
//! 4. **Acquisition is non-blocking.** A held device is refused immediately, naming the
//!    holder from its owner record. Only L2 waits, bounded by `KG_GPU_L2_TIMEOUT`.
//! 5. **All processes that must exclude each other use the same lock directory**
//!    (`KG_GPU_LOCK_DIR`; the default is per user).
//!
//! Library callers that run their own children (kg-bench) must convert SIGINT/SIGTERM into
//! a normal return so the [`Claim`] is dropped; [`run::run_claimed`] shows the pattern.

pub mod amd;
pub mod backend;
pub mod claim;
pub mod device;
pub mod env;
pub mod error;
#[cfg(feature = "fake")]
pub mod fake;
pub mod lock;
pub mod mapping;
pub mod nvml;
pub mod pick;
pub mod recovery;
pub mod run;
pub mod sys;

pub use backend::{Backend, BackendSelection, BackendState, BackendStatus, Discovery, Found};
pub use claim::{Claim, ClaimRequest, ClockRequest};
pub use device::{Clocks, DeviceInfo, IndexBasis, ProcessUse, Sample, Vendor};
pub use error::{BackendError, ClaimError, ClockError, EnvError, LockError};
pub use lock::{ExecutionLock, LockState, LockStatus};
pub use pick::{PickOptions, PickOutcome, PickReport};
pub use run::{RunError, RunOutcome, run_claimed};

/// `kg-gpu claim` exit codes when no command ran (otherwise the command's own code).
pub mod claim_exit {
    /// GPUs exist but none is idle.
    pub const NONE_IDLE: i32 = 1;
    /// An SMI library failed, or clocks were required and could not be locked, or bad input.
    pub const ERROR: i32 = 2;
    /// No GPU.
    pub const NO_GPU: i32 = 3;
    /// The device is held by another process.
    pub const BUSY: i32 = 4;
    /// A previous owner left recovery evidence (unverified cleanup or clock restore); see
    /// `kg-gpu recover`.
    pub const RECOVERY: i32 = 5;
}

impl ClaimError {
    /// The `kg-gpu claim` exit code for this refusal.
    pub fn exit_code(&self) -> i32 {
        match self {
            ClaimError::NoneIdle(_) => claim_exit::NONE_IDLE,
            ClaimError::NoGpu(_) => claim_exit::NO_GPU,
            ClaimError::Lock(LockError::Busy { .. }) => claim_exit::BUSY,
            ClaimError::RecoveryRequired { .. } => claim_exit::RECOVERY,
            _ => claim_exit::ERROR,
        }
    }
}
