//! GPU claim evidence: which device a run held, how idle it was, who owned it, what the clocks
//! were. Written by kg-gpu (`KG_GPU_CLAIM` file, reports) and read by every workflow report.
//!
//! Also the lock owner record that kg-gpu writes into its lock files, so `kg-gpu status` (and a
//! later claimer) can say who holds a device and whether a record is stale.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::trace::{ClockState, DeviceIdentity};

/// Schema version of [`GpuClaim`]; bumped when a field that matters is added.
pub const CLAIM_SCHEMA_VERSION: u32 = 1;

/// Schema version of [`LockOwner`].
pub const LOCK_OWNER_SCHEMA_VERSION: u32 = 1;

/// What evidence a device's idleness rests on (the seed's `idleness_basis`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum IdlenessBasis {
    /// Busy percentage and resident memory were both measured over the window.
    #[serde(rename = "activity+vram")]
    ActivityVram,
    /// Activity was unavailable; only resident memory separated the devices. Activity is `null`.
    #[serde(rename = "vram-only")]
    VramOnly,
    /// Neither was measurable; the device was not judged idle.
    #[serde(rename = "unknown")]
    Unknown,
}

impl IdlenessBasis {
    /// The serialised spelling, e.g. `vram-only`.
    pub fn as_str(self) -> &'static str {
        match self {
            IdlenessBasis::ActivityVram => "activity+vram",
            IdlenessBasis::VramOnly => "vram-only",
            IdlenessBasis::Unknown => "unknown",
        }
    }
}

/// The process that owns (or owned) a lock, as written into the lock file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LockOwner {
    /// [`LOCK_OWNER_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Device UUID the lock is for.
    pub uuid: String,
    /// `l1-ownership` or `l2-execution`.
    pub level: String,
    /// Owner process id.
    pub pid: u32,
    /// Process start time in clock ticks since boot (`/proc/<pid>/stat` field 22), used to tell
    /// a live owner from a reused pid. `None` where `/proc` is unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start_ticks: Option<u64>,
    /// Host name of the owner.
    pub host: String,
    /// RFC 3339 UTC time the lock was taken.
    pub started_utc: String,
    /// The owner's command line (`kg-gpu claim -- CMD...` records CMD).
    pub command: Vec<String>,
    /// Whether the owner locked the device clocks (and so owes a restore).
    #[serde(default)]
    pub clocks_locked: bool,
}

/// Clock control during a claim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClaimClocks {
    /// What was asked for: `base`, `max` or a number of MHz; `None` when no lock was asked.
    #[serde(default)]
    pub requested: Option<String>,
    /// Whether the SM clock was locked for the claim.
    pub locked: bool,
    /// Why clocks were not locked although asked, or why the restore failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// SM clock the lock was set to, in MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_sm_mhz: Option<u32>,
    /// SM clock read when the claim started, in MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_mhz_before: Option<u32>,
    /// Memory clock read when the claim started, in MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_mhz_before: Option<u32>,
    /// Whether the clocks were restored when the claim ended; `None` while the claim is live or
    /// when nothing was locked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored: Option<bool>,
}

/// Lock files the claim holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClaimLocks {
    /// The lock directory (`KG_GPU_LOCK_DIR` or the default).
    pub dir: String,
    /// L1 ownership lock, held by the owner for the whole claim.
    pub l1: String,
    /// L2 execution lock, contended for by the owner's children.
    pub l2: String,
}

/// Evidence that a run held one GPU exclusively: enough for a reviewer to tell which device
/// produced the numbers and in what state it was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuClaim {
    /// [`CLAIM_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Host name.
    pub host: String,
    /// `nvidia`, `amd` or `fake` (tests only).
    pub vendor: String,
    /// SMI backend that enumerated the device: `nvml`, `amdsmi` or `fake`.
    pub backend: String,
    /// Runtime index (CUDA ordinal / HIP index) in the claiming process's environment; `None`
    /// when it cannot be derived (see `runtime_index_basis`).
    pub runtime_index: Option<u32>,
    /// How `runtime_index` was derived from the SMI enumeration (e.g. `pci-bus-id-order`).
    pub runtime_index_basis: String,
    /// Index the device has inside the claimed child, which sees only this device.
    pub child_runtime_index: u32,
    /// Visibility variables set for the child (e.g. `CUDA_VISIBLE_DEVICES`).
    #[serde(default)]
    pub visible_devices: IndexMap<String, String>,
    /// Index in the SMI library's enumeration (NVML index / AMD SMI processor order).
    pub smi_index: u32,
    /// Device UUID as the SMI library reports it.
    pub uuid: String,
    /// PCI bus id, `dddd:bb:dd.f`.
    pub pci_bus_id: String,
    /// Marketing name.
    pub name: String,
    /// Architecture, e.g. `sm_90`, `gfx942`.
    #[serde(default)]
    pub arch: Option<String>,
    /// Total device memory in bytes.
    #[serde(default)]
    pub memory_total_bytes: Option<u64>,
    /// `picked` (idle picker over a window) or `requested` (caller named the device).
    pub selection: String,
    /// Samples in the idleness window.
    pub window_samples: u32,
    /// Seconds between samples.
    pub window_interval_s: f64,
    /// What the idleness judgement rests on.
    pub idleness_basis: IdlenessBasis,
    /// Peak activity % over the window; `null` means unknown, never zero.
    pub activity_before_pct: Option<f64>,
    /// Mean activity % over the window; `null` means unknown.
    pub activity_before_mean_pct: Option<f64>,
    /// Largest used memory over the window, bytes.
    pub memory_used_before_bytes: Option<u64>,
    /// Smallest free memory over the window, bytes.
    pub memory_free_before_bytes: Option<u64>,
    /// Activity % sampled when the claim ended; `null` while live or unknown.
    #[serde(default)]
    pub activity_after_pct: Option<f64>,
    /// Used memory sampled when the claim ended.
    #[serde(default)]
    pub memory_used_after_bytes: Option<u64>,
    /// Clock control.
    pub clocks: ClaimClocks,
    /// Lock files held.
    pub locks: ClaimLocks,
    /// This claim's owner record (also written into the L1 lock file).
    pub owner: LockOwner,
    /// A stale record found in the L1 lock file when the claim was acquired (its owner died
    /// without releasing); kept as evidence, especially when it says clocks were locked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale_previous_owner: Option<LockOwner>,
    /// RFC 3339 UTC start of the claim.
    pub started_utc: String,
    /// RFC 3339 UTC end of the claim; `None` while live.
    #[serde(default)]
    pub finished_utc: Option<String>,
}

impl GpuClaim {
    /// The trace-level device identity of the claimed device, as the child sees it.
    pub fn device_identity(&self) -> DeviceIdentity {
        let kind = match self.vendor.as_str() {
            "nvidia" => "cuda",
            "amd" => "rocm",
            other => other,
        };
        DeviceIdentity {
            kind: kind.to_string(),
            index: Some(self.child_runtime_index),
            name: self.name.clone(),
            uuid: Some(self.uuid.clone()),
            pci_bus_id: Some(self.pci_bus_id.clone()),
            arch: self.arch.clone(),
            memory_total_bytes: self.memory_total_bytes,
        }
    }

    /// The trace-level clock state of the claim.
    pub fn clock_state(&self) -> ClockState {
        ClockState {
            sm_mhz: self.clocks.locked_sm_mhz.or(self.clocks.sm_mhz_before),
            mem_mhz: self.clocks.mem_mhz_before,
            locked: self.clocks.locked,
            reason: self.clocks.reason.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idleness_basis_uses_seed_spelling() {
        let s = serde_json::to_string(&[
            IdlenessBasis::ActivityVram,
            IdlenessBasis::VramOnly,
            IdlenessBasis::Unknown,
        ])
        .unwrap();
        assert_eq!(s, r#"["activity+vram","vram-only","unknown"]"#);
        let back: IdlenessBasis = serde_json::from_str("\"vram-only\"").unwrap();
        assert_eq!(back, IdlenessBasis::VramOnly);
        assert_eq!(IdlenessBasis::VramOnly.as_str(), "vram-only");
    }
}
