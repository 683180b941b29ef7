//! Every environment variable kg-gpu reads or sets, in one place.

/// The SOL ExecBench ROCm port's name for the lock directory; read before [`KG_GPU_LOCK_DIR`]
/// (its alias) and set for a claimed child. Both set to different directories is refused.
pub const GPU_LOCK_DIR: &str = "GPU_LOCK_DIR";

/// The port's name for the device to own: the full SMI UUID (never an index or a prefix).
/// [`KG_GPU_UUID`] is its alias. When set, the lock directory must be explicit too.
pub const GPU_LOCK_UUID: &str = "GPU_LOCK_UUID";

/// The port's old index-based lock variables (`gpu-<index>.lock`), refused: index locks and
/// UUID locks do not exclude each other, so the two schemes must never run at once.
pub const OLD_INDEX_LOCK_VARS: [&str; 2] =
    ["SOL_EXECBENCH_GPU_LOCK_DIR", "SOL_EXECBENCH_GPU_LOCK_FD"];

/// Lock directory (alias of [`GPU_LOCK_DIR`]). Default: `$XDG_RUNTIME_DIR/kernelgate/gpu-locks` when `XDG_RUNTIME_DIR` is
/// set, else `/tmp/kernelgate-gpu-locks-<uid>`. Every process that must exclude another from a
/// GPU has to use the same directory: set it machine-wide when several users share GPUs.
pub const KG_GPU_LOCK_DIR: &str = "KG_GPU_LOCK_DIR";

/// Which backends to load: `auto` (default: NVML and AMD SMI, whichever loads), `nvml`,
/// `amdsmi`, `none`, or `fake` (only in test builds with the `fake` feature).
pub const KG_GPU_BACKEND: &str = "KG_GPU_BACKEND";

/// Set by `kg-gpu claim` in the child's environment: path of the claim evidence JSON
/// ([`kg_contract::GpuClaim`]).
pub const KG_GPU_CLAIM: &str = "KG_GPU_CLAIM";

/// Set by `kg-gpu claim` in the child's environment: the claimed device's UUID. Read as an
/// alias of [`GPU_LOCK_UUID`].
pub const KG_GPU_UUID: &str = "KG_GPU_UUID";

/// Set by `kg-gpu claim` in the child's environment: the L2 execution lock file the child
/// contends for (see [`crate::lock::ExecutionLock`]).
pub const KG_GPU_L2_LOCK: &str = "KG_GPU_L2_LOCK";

/// Seconds a child waits for the L2 execution lock before giving up (default 600).
pub const KG_GPU_L2_TIMEOUT: &str = "KG_GPU_L2_TIMEOUT";

/// Path of the NVML library to load instead of `libnvidia-ml.so.1`.
pub const KG_NVML_LIB: &str = "KG_NVML_LIB";

/// Path of the AMD SMI library to load instead of `libamd_smi.so` (then `/opt/rocm/lib`).
pub const KG_AMDSMI_LIB: &str = "KG_AMDSMI_LIB";

/// Root of the KFD topology used to map AMD SMI devices to HIP indices (default
/// `/sys/class/kfd/kfd/topology/nodes`); tests point it at a fixture.
pub const KG_KFD_TOPOLOGY: &str = "KG_KFD_TOPOLOGY";

/// Test builds only: path of the fake backend's scenario JSON.
pub const KG_GPU_FAKE: &str = "KG_GPU_FAKE";

/// CUDA's device ordering (`FASTEST_FIRST` default, or `PCI_BUS_ID`); read to derive ordinals.
pub const CUDA_DEVICE_ORDER: &str = "CUDA_DEVICE_ORDER";

/// CUDA device visibility; read to derive ordinals, set for a claimed child.
pub const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";

/// HIP device visibility; read to derive indices, set for a claimed child.
pub const HIP_VISIBLE_DEVICES: &str = "HIP_VISIBLE_DEVICES";

/// ROCr device visibility; read to derive indices, set for a claimed child.
pub const ROCR_VISIBLE_DEVICES: &str = "ROCR_VISIBLE_DEVICES";
