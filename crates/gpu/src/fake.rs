//! Test-only backend (feature `fake`): devices, samples and clock behaviour come from a
//! scenario JSON (`KG_GPU_FAKE`); clock calls are appended to a journal file so tests in other
//! processes can check that a restore happened.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde::Deserialize;

use crate::backend::Backend;
use crate::device::{Clocks, DeviceInfo, IndexBasis, Sample, Vendor};
use crate::error::{BackendError, ClockError};

const NAME: &str = "fake";

/// A scenario file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// The devices.
    #[serde(default)]
    pub devices: Vec<FakeDevice>,
    /// `init`: loading fails as a broken library would (picker exit 2); `sample`: every sample
    /// query fails.
    #[serde(default)]
    pub fail: Option<String>,
    /// `ok` (default), `no-permission`, `unsupported`, or `reset-fails` (locking works, the
    /// restore fails).
    #[serde(default)]
    pub clock_lock: Option<String>,
    /// File that clock operations are appended to (`lock <uuid> <mhz>`, `reset <uuid>`).
    #[serde(default)]
    pub journal: Option<PathBuf>,
}

/// One fake device.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeDevice {
    /// UUID.
    pub uuid: String,
    /// PCI bus id.
    pub pci_bus_id: String,
    /// Name.
    #[serde(default = "default_name")]
    pub name: String,
    /// Architecture.
    #[serde(default)]
    pub arch: Option<String>,
    /// Runtime index to report.
    #[serde(default)]
    pub runtime_index: Option<u32>,
    /// Hidden from this process by a visibility variable, as Slurm's `CUDA_VISIBLE_DEVICES`
    /// hides the GPUs of other jobs (reported as [`IndexBasis::NotVisible`]).
    #[serde(default)]
    pub hidden: bool,
    /// Total memory.
    #[serde(default)]
    pub memory_total_bytes: Option<u64>,
    /// Samples returned in turn by successive `sample` calls (the last one repeats).
    pub samples: Vec<Sample>,
    /// Clocks.
    #[serde(default)]
    pub clocks: Clocks,
}

fn default_name() -> String {
    "Fake GPU".into()
}

/// The fake backend.
pub struct FakeBackend {
    scenario: Scenario,
    calls: Vec<AtomicUsize>,
}

/// A claimer over `n` idle fake GPUs (`GPU-fake-0`, `GPU-fake-1`, ...) with their locks in
/// `lock_dir` and no wait between picker samples: what a test passes where
/// [`crate::claim::Claim::acquire`] would go.
pub fn idle_claimer(
    n: u32,
    lock_dir: PathBuf,
) -> impl FnMut(crate::claim::ClaimRequest) -> Result<crate::claim::Claim, crate::error::ClaimError>
{
    move |mut req| {
        let devices = (0..n)
            .map(|k| FakeDevice {
                uuid: format!("GPU-fake-{k}"),
                pci_bus_id: format!("0000:{:02x}:00.0", k + 1),
                name: default_name(),
                arch: None,
                runtime_index: Some(k),
                hidden: false,
                memory_total_bytes: None,
                samples: vec![Sample {
                    activity_pct: Some(0.0),
                    memory_used_bytes: Some(0),
                    memory_free_bytes: Some(100 << 30),
                }],
                clocks: Clocks::default(),
            })
            .collect();
        let backend = FakeBackend::new(Scenario {
            devices,
            fail: None,
            clock_lock: None,
            journal: None,
        })?;
        req.lock_dir = lock_dir.clone();
        req.pick.interval = std::time::Duration::ZERO;
        crate::claim::Claim::acquire_with(
            crate::Discovery::from_backends(vec![Box::new(backend)]),
            req,
        )
    }
}

impl FakeBackend {
    /// Reads a scenario file.
    pub fn load(path: &Path) -> Result<FakeBackend, BackendError> {
        let text = std::fs::read_to_string(path).map_err(|e| BackendError::Unavailable {
            backend: NAME,
            reason: format!("failed to read scenario `{}`: {e}", path.display()),
        })?;
        let scenario: Scenario =
            serde_json::from_str(&text).map_err(|e| BackendError::Unavailable {
                backend: NAME,
                reason: format!("failed to parse scenario `{}`: {e}", path.display()),
            })?;
        Self::new(scenario)
    }

    /// Builds the backend from a scenario value.
    pub fn new(scenario: Scenario) -> Result<FakeBackend, BackendError> {
        if scenario.fail.as_deref() == Some("init") {
            return Err(BackendError::Query {
                backend: NAME,
                what: "initialisation",
                device: None,
                message: "scenario says init fails".into(),
            });
        }
        let calls = scenario
            .devices
            .iter()
            .map(|_| AtomicUsize::new(0))
            .collect();
        Ok(FakeBackend { scenario, calls })
    }

    fn journal(&self, line: &str) -> Result<(), ClockError> {
        let Some(path) = &self.scenario.journal else {
            return Ok(());
        };
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| ClockError::Failed(format!("journal `{}`: {e}", path.display())))?;
        writeln!(f, "{line}").map_err(|e| ClockError::Failed(e.to_string()))
    }

    fn dev(&self, i: u32) -> Result<&FakeDevice, BackendError> {
        self.scenario
            .devices
            .get(i as usize)
            .ok_or(BackendError::Query {
                backend: NAME,
                what: "device",
                device: Some(i),
                message: "no such device".into(),
            })
    }
}

impl Backend for FakeBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    fn vendor(&self) -> Vendor {
        Vendor::Fake
    }

    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError> {
        Ok(self
            .scenario
            .devices
            .iter()
            .enumerate()
            .map(|(i, d)| DeviceInfo {
                vendor: Vendor::Fake,
                backend: NAME.into(),
                smi_index: i as u32,
                runtime_index: d.runtime_index.filter(|_| !d.hidden),
                runtime_index_basis: if d.hidden {
                    IndexBasis::NotVisible
                } else {
                    IndexBasis::Fake
                },
                uuid: d.uuid.clone(),
                pci_bus_id: d.pci_bus_id.clone(),
                name: d.name.clone(),
                arch: d.arch.clone(),
                memory_total_bytes: d.memory_total_bytes,
                sample: d.samples.first().cloned().unwrap_or_default(),
                clocks: d.clocks.clone(),
                temperature_c: None,
                power_w: None,
                processes: None,
                kfd_unique_id: None,
            })
            .collect())
    }

    fn sample(&self, smi_index: u32) -> Result<Sample, BackendError> {
        if self.scenario.fail.as_deref() == Some("sample") {
            return Err(BackendError::Query {
                backend: NAME,
                what: "sample",
                device: Some(smi_index),
                message: "scenario says sampling fails".into(),
            });
        }
        let d = self.dev(smi_index)?;
        let k = self.calls[smi_index as usize].fetch_add(1, Ordering::SeqCst);
        Ok(d.samples
            .get(k.min(d.samples.len().saturating_sub(1)))
            .cloned()
            .unwrap_or_default())
    }

    fn clocks(&self, smi_index: u32) -> Result<Clocks, BackendError> {
        Ok(self.dev(smi_index)?.clocks.clone())
    }

    fn lock_sm_clock(&mut self, smi_index: u32, mhz: u32) -> Result<(), ClockError> {
        let uuid = self
            .dev(smi_index)
            .map_err(|e| ClockError::Failed(e.to_string()))?
            .uuid
            .clone();
        match self.scenario.clock_lock.as_deref() {
            None | Some("ok") | Some("reset-fails") => self.journal(&format!("lock {uuid} {mhz}")),
            Some("no-permission") => Err(ClockError::NoPermission(
                "fake: scenario denies permission".into(),
            )),
            Some(_) => Err(ClockError::Unsupported(
                "fake: scenario says unsupported".into(),
            )),
        }
    }

    fn reset_clocks(&mut self, smi_index: u32) -> Result<(), ClockError> {
        let uuid = self
            .dev(smi_index)
            .map_err(|e| ClockError::Failed(e.to_string()))?
            .uuid
            .clone();
        if self.scenario.clock_lock.as_deref() == Some("reset-fails") {
            return Err(ClockError::Failed(
                "fake: scenario says the reset fails".into(),
            ));
        }
        self.journal(&format!("reset {uuid}"))
    }
}
