//! What kg-gpu knows about a device: identity, index mapping, and a point-in-time sample.

use serde::{Deserialize, Serialize};

/// GPU vendor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    /// NVIDIA, through NVML.
    Nvidia,
    /// AMD, through AMD SMI.
    Amd,
    /// The test-only fake backend.
    Fake,
}

impl Vendor {
    /// `nvidia`, `amd` or `fake`.
    pub fn as_str(self) -> &'static str {
        match self {
            Vendor::Nvidia => "nvidia",
            Vendor::Amd => "amd",
            Vendor::Fake => "fake",
        }
    }
}

/// How a device's runtime index (CUDA ordinal / HIP index) was derived from SMI data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum IndexBasis {
    /// `CUDA_DEVICE_ORDER=PCI_BUS_ID`: CUDA orders devices by PCI bus id, as we do.
    PciBusIdOrder,
    /// `CUDA_DEVICE_ORDER` unset or `FASTEST_FIRST`, all devices the same model: CUDA's fastest
    /// first heuristic cannot separate them and falls back to PCI bus id order.
    FastestFirstSameModel,
    /// HIP enumerates GPU agents in KFD topology node order; the index is the rank of the
    /// device's KFD node among GPU nodes.
    KfdNodeOrder,
    /// The index could not be derived (mixed models under `FASTEST_FIRST`, no KFD topology, a
    /// visibility variable we cannot interpret). Use the UUID.
    Unknown,
    /// A visibility variable (`CUDA_VISIBLE_DEVICES`, `HIP_VISIBLE_DEVICES`) hides the device
    /// from this process.
    NotVisible,
    /// Fake backend: the scenario states the index.
    Fake,
}

impl IndexBasis {
    /// The serialised spelling, e.g. `pci-bus-id-order`.
    pub fn as_str(self) -> &'static str {
        match self {
            IndexBasis::PciBusIdOrder => "pci-bus-id-order",
            IndexBasis::FastestFirstSameModel => "fastest-first-same-model",
            IndexBasis::KfdNodeOrder => "kfd-node-order",
            IndexBasis::Unknown => "unknown",
            IndexBasis::NotVisible => "not-visible",
            IndexBasis::Fake => "fake",
        }
    }
}

/// A process using a device, where the SMI library reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessUse {
    /// Process id (in the SMI library's pid namespace).
    pub pid: u32,
    /// Device memory it holds, bytes, when reported.
    pub memory_bytes: Option<u64>,
}

/// One point-in-time reading of a device's load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Busy percentage (GPU utilisation / GFX activity); `None` when the library cannot say.
    pub activity_pct: Option<f64>,
    /// Used device memory, bytes.
    pub memory_used_bytes: Option<u64>,
    /// Free device memory, bytes.
    pub memory_free_bytes: Option<u64>,
}

/// Clock readings in MHz; `None` where unsupported.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clocks {
    /// Current SM / shader clock.
    pub sm_mhz: Option<u32>,
    /// Maximum SM clock.
    pub sm_max_mhz: Option<u32>,
    /// Base SM clock (NVIDIA default application clock).
    pub sm_base_mhz: Option<u32>,
    /// Current memory clock.
    pub mem_mhz: Option<u32>,
    /// Maximum memory clock.
    pub mem_max_mhz: Option<u32>,
}

/// Everything kg-gpu reports about one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    /// Vendor.
    pub vendor: Vendor,
    /// Backend that enumerated it (`nvml`, `amdsmi`, `fake`).
    pub backend: String,
    /// Index in the SMI library's own enumeration.
    pub smi_index: u32,
    /// CUDA ordinal / HIP index in this process's environment, when derivable.
    pub runtime_index: Option<u32>,
    /// How `runtime_index` was derived.
    pub runtime_index_basis: IndexBasis,
    /// UUID as the SMI library reports it.
    pub uuid: String,
    /// PCI bus id, normalised to lower-case `dddd:bb:dd.f`.
    pub pci_bus_id: String,
    /// Marketing name.
    pub name: String,
    /// Architecture (`sm_90`, `gfx942`, ...).
    pub arch: Option<String>,
    /// Total memory, bytes.
    pub memory_total_bytes: Option<u64>,
    /// Load when listed.
    pub sample: Sample,
    /// Clocks when listed.
    pub clocks: Clocks,
    /// Temperature, degrees Celsius.
    pub temperature_c: Option<u32>,
    /// Power draw, watts.
    pub power_w: Option<f64>,
    /// Processes using the device; `None` when the library does not report them.
    pub processes: Option<Vec<ProcessUse>>,
    /// AMD: the KFD `unique_id` (what `ROCR_VISIBLE_DEVICES=GPU-<hex>` names), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kfd_unique_id: Option<u64>,
}

/// Normalises a PCI bus id to lower-case `dddd:bb:dd.f` (NVML reports an 8-digit domain).
pub fn normalize_bdf(raw: &str) -> String {
    let s = raw.trim().to_ascii_lowercase();
    let mut parts = s.splitn(2, ':');
    let (Some(domain), Some(rest)) = (parts.next(), parts.next()) else {
        return s;
    };
    if !rest.contains(':') {
        // No domain given: `bb:dd.f`.
        return format!("0000:{s}");
    }
    match u32::from_str_radix(domain, 16) {
        Ok(d) if d <= 0xffff => format!("{d:04x}:{rest}"),
        Ok(d) => format!("{d:08x}:{rest}"),
        Err(_) => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdf_normalisation() {
        assert_eq!(normalize_bdf("00000000:19:00.0"), "0000:19:00.0");
        assert_eq!(normalize_bdf("0000:C1:00.0"), "0000:c1:00.0");
        assert_eq!(normalize_bdf("c1:00.0"), "0000:c1:00.0");
        assert_eq!(normalize_bdf("00010000:01:00.0"), "00010000:01:00.0");
    }
}
