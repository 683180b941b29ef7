//! NVIDIA backend through NVML (`nvml-wrapper`, which loads `libnvidia-ml.so.1` at run time).

use std::error::Error as _;

use nvml_wrapper::enum_wrappers::device::{Clock, ClockId, TemperatureSensor};
use nvml_wrapper::enums::device::{GpuLockedClocksSetting, UsedGpuMemory};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use crate::backend::Backend;
use crate::device::{Clocks, DeviceInfo, IndexBasis, ProcessUse, Sample, Vendor, normalize_bdf};
use crate::env;
use crate::error::{BackendError, ClockError};

const NAME: &str = "nvml";

/// NVML, initialised.
pub struct NvmlBackend {
    nvml: Nvml,
}

fn chain(e: &NvmlError) -> String {
    // libloading's Display hides dlerror; the source has it.
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        let text = inner.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        src = inner.source();
    }
    s
}

fn query(what: &'static str, device: Option<u32>) -> impl FnOnce(NvmlError) -> BackendError {
    move |e| BackendError::Query {
        backend: NAME,
        what,
        device,
        message: chain(&e),
    }
}

impl NvmlBackend {
    /// Loads and initialises NVML (`KG_NVML_LIB` overrides the library path).
    pub fn load() -> Result<NvmlBackend, BackendError> {
        let lib = std::env::var_os(env::KG_NVML_LIB);
        let result = match &lib {
            Some(path) => Nvml::builder().lib_path(path).init(),
            None => Nvml::init(),
        };
        match result {
            Ok(nvml) => Ok(NvmlBackend { nvml }),
            Err(
                e @ (NvmlError::LibloadingError(_)
                | NvmlError::LibraryNotFound
                | NvmlError::DriverNotLoaded
                | NvmlError::FailedToLoadSymbol(_)),
            ) => Err(BackendError::Unavailable {
                backend: NAME,
                reason: chain(&e),
            }),
            Err(e) => Err(query("initialisation", None)(e)),
        }
    }

    fn device(&self, index: u32) -> Result<Device<'_>, BackendError> {
        self.nvml
            .device_by_index(index)
            .map_err(query("device handle", Some(index)))
    }

    fn sample_of(dev: &Device<'_>, index: u32) -> Result<Sample, BackendError> {
        let mem = dev
            .memory_info()
            .map_err(query("memory info", Some(index)))?;
        let activity = match dev.utilization_rates() {
            Ok(u) => Some(f64::from(u.gpu)),
            Err(NvmlError::NotSupported) => None,
            Err(e) => return Err(query("utilisation", Some(index))(e)),
        };
        Ok(Sample {
            activity_pct: activity,
            memory_used_bytes: Some(mem.used),
            memory_free_bytes: Some(mem.free),
        })
    }

    fn clocks_of(dev: &Device<'_>) -> Clocks {
        Clocks {
            sm_mhz: dev.clock_info(Clock::SM).ok(),
            sm_max_mhz: dev.max_clock_info(Clock::SM).ok(),
            sm_base_mhz: dev.clock(Clock::SM, ClockId::DefaultAppClock).ok(),
            mem_mhz: dev.clock_info(Clock::Memory).ok(),
            mem_max_mhz: dev.max_clock_info(Clock::Memory).ok(),
        }
    }
}

fn clock_error(e: NvmlError) -> ClockError {
    match e {
        NvmlError::NoPermission => ClockError::NoPermission(
            "NVML refused (NVML_ERROR_NO_PERMISSION); locking clocks needs root".into(),
        ),
        NvmlError::NotSupported => {
            ClockError::Unsupported("NVML_ERROR_NOT_SUPPORTED on this device".into())
        }
        other => ClockError::Failed(chain(&other)),
    }
}

impl Backend for NvmlBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn vendor(&self) -> Vendor {
        Vendor::Nvidia
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        let count = self
            .nvml
            .device_count()
            .map_err(query("device count", None))?;
        let mut out = Vec::with_capacity(count as usize);
        for i in 0..count {
            let dev = self.device(i)?;
            let uuid = dev.uuid().map_err(query("uuid", Some(i)))?;
            let pci = dev.pci_info().map_err(query("pci info", Some(i)))?;
            let name = dev.name().map_err(query("name", Some(i)))?;
            let arch = dev
                .cuda_compute_capability()
                .ok()
                .map(|c| format!("sm_{}{}", c.major, c.minor));
            let total = dev.memory_info().ok().map(|m| m.total);
            let processes = dev.running_compute_processes().ok().map(|ps| {
                ps.into_iter()
                    .map(|p| ProcessUse {
                        pid: p.pid,
                        memory_bytes: match p.used_gpu_memory {
                            UsedGpuMemory::Used(b) => Some(b),
                            UsedGpuMemory::Unavailable => None,
                        },
                    })
                    .collect()
            });
            out.push(DeviceInfo {
                vendor: Vendor::Nvidia,
                backend: NAME.into(),
                smi_index: i,
                runtime_index: None,
                runtime_index_basis: IndexBasis::Unknown,
                uuid,
                pci_bus_id: normalize_bdf(&pci.bus_id),
                name,
                arch,
                memory_total_bytes: total,
                sample: Self::sample_of(&dev, i)?,
                clocks: Self::clocks_of(&dev),
                temperature_c: dev.temperature(TemperatureSensor::Gpu).ok(),
                power_w: dev.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
                processes,
                kfd_unique_id: None,
            });
        }
        Ok(out)
    }

    fn sample(&self, smi_index: u32) -> Result<Sample, BackendError> {
        let dev = self.device(smi_index)?;
        Self::sample_of(&dev, smi_index)
    }

    fn clocks(&self, smi_index: u32) -> Result<Clocks, BackendError> {
        Ok(Self::clocks_of(&self.device(smi_index)?))
    }

    fn lock_sm_clock(&mut self, smi_index: u32, mhz: u32) -> Result<(), ClockError> {
        let mut dev = self
            .nvml
            .device_by_index(smi_index)
            .map_err(|e| ClockError::Failed(chain(&e)))?;
        dev.set_gpu_locked_clocks(GpuLockedClocksSetting::Numeric {
            min_clock_mhz: mhz,
            max_clock_mhz: mhz,
        })
        .map_err(clock_error)
    }

    fn reset_clocks(&mut self, smi_index: u32) -> Result<(), ClockError> {
        let mut dev = self
            .nvml
            .device_by_index(smi_index)
            .map_err(|e| ClockError::Failed(chain(&e)))?;
        dev.reset_gpu_locked_clocks().map_err(clock_error)
    }
}
