//! Backends (NVML, AMD SMI, none, and the test-only fake) and discovery across them.
//!
//! Vendor libraries are loaded at run time; a missing library or driver becomes a
//! [`BackendState::Unavailable`] with the loader's reason, never a panic.

use std::path::PathBuf;

use serde::Serialize;

use crate::device::{Clocks, DeviceInfo, Sample, Vendor};
use crate::env;
use crate::error::{BackendError, ClockError};
use crate::mapping;

/// One SMI library, loaded. Indices are the library's own (`smi_index`).
pub trait Backend: Send {
    /// `nvml`, `amdsmi` or `fake`.
    fn name(&self) -> &'static str;
    /// The vendor whose devices it enumerates.
    fn vendor(&self) -> Vendor;
    /// Every device with identity, a load sample and clocks. `runtime_index` is filled later by
    /// [`Discovery::devices`].
    fn devices(&self) -> Result<Vec<DeviceInfo>, BackendError>;
    /// One load sample of a device.
    fn sample(&self, smi_index: u32) -> Result<Sample, BackendError>;
    /// Current clock readings of a device.
    fn clocks(&self, smi_index: u32) -> Result<Clocks, BackendError>;
    /// Locks the SM clock to `mhz` (min = max = `mhz`).
    fn lock_sm_clock(&mut self, smi_index: u32, mhz: u32) -> Result<(), ClockError>;
    /// Resets locked clocks to the driver default.
    fn reset_clocks(&mut self, smi_index: u32) -> Result<(), ClockError>;
}

/// Which backends to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendSelection {
    /// NVML and AMD SMI, whichever loads.
    Auto,
    /// NVML only.
    Nvml,
    /// AMD SMI only.
    AmdSmi,
    /// No backend: behaves as a machine with no GPU.
    None,
    /// The fake backend reading a scenario file (test builds only).
    #[cfg(feature = "fake")]
    Fake(PathBuf),
}

impl BackendSelection {
    /// Reads `KG_GPU_BACKEND` (and `KG_GPU_FAKE` for `fake`).
    pub fn from_env() -> Result<BackendSelection, BackendError> {
        let value = std::env::var(env::KG_GPU_BACKEND).unwrap_or_default();
        Self::parse(
            &value,
            std::env::var_os(env::KG_GPU_FAKE).map(PathBuf::from),
        )
    }

    /// Parses a selection name; `fake_path` is the scenario for `fake`.
    pub fn parse(
        value: &str,
        fake_path: Option<PathBuf>,
    ) -> Result<BackendSelection, BackendError> {
        match value.trim() {
            "" | "auto" => Ok(BackendSelection::Auto),
            "nvml" | "nvidia" => Ok(BackendSelection::Nvml),
            "amdsmi" | "amd" => Ok(BackendSelection::AmdSmi),
            "none" => Ok(BackendSelection::None),
            "fake" => fake_selection(fake_path),
            other => Err(BackendError::UnknownSelection(other.to_string())),
        }
    }
}

#[cfg(feature = "fake")]
fn fake_selection(path: Option<PathBuf>) -> Result<BackendSelection, BackendError> {
    match path {
        Some(p) => Ok(BackendSelection::Fake(p)),
        None => Err(BackendError::Unavailable {
            backend: "fake",
            reason: "KG_GPU_FAKE is not set; point it at a scenario JSON".into(),
        }),
    }
}

#[cfg(not(feature = "fake"))]
fn fake_selection(_path: Option<PathBuf>) -> Result<BackendSelection, BackendError> {
    Err(BackendError::FakeNotCompiled)
}

/// Whether a backend could be used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendState {
    /// Loaded and initialised.
    Available,
    /// Library or driver missing: the machine has no such GPUs (or we cannot see them).
    Unavailable,
    /// Library present but failing: says nothing about the GPUs.
    Error,
}

/// A backend's availability, as `kg-gpu list` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BackendStatus {
    /// Backend name.
    pub name: &'static str,
    /// State.
    pub state: BackendState,
    /// Why it is unavailable or failing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The loaded backends and what happened to those that did not load.
pub struct Discovery {
    backends: Vec<Box<dyn Backend>>,
    statuses: Vec<BackendStatus>,
}

/// A device and the backend (index into [`Discovery`]) that reported it.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// Index of the backend in the discovery.
    pub backend: usize,
    /// The device.
    pub info: DeviceInfo,
}

impl Discovery {
    /// Loads the selected backends. Never fails for a missing library: that is recorded in
    /// [`Discovery::statuses`].
    pub fn load(selection: &BackendSelection) -> Discovery {
        let mut d = Discovery {
            backends: Vec::new(),
            statuses: Vec::new(),
        };
        let mut try_load = |name: &'static str, r: Result<Box<dyn Backend>, BackendError>| match r {
            Ok(b) => {
                d.statuses.push(BackendStatus {
                    name,
                    state: BackendState::Available,
                    reason: None,
                });
                d.backends.push(b);
            }
            Err(e) => {
                let state = if e.is_unavailable() {
                    BackendState::Unavailable
                } else {
                    BackendState::Error
                };
                tracing::debug!(backend = name, error = %e, "backend not loaded");
                d.statuses.push(BackendStatus {
                    name,
                    state,
                    reason: Some(e.to_string()),
                });
            }
        };
        match selection {
            BackendSelection::Auto => {
                try_load("nvml", crate::nvml::NvmlBackend::load().map(boxed));
                try_load("amdsmi", crate::amd::AmdSmiBackend::load().map(boxed));
            }
            BackendSelection::Nvml => {
                try_load("nvml", crate::nvml::NvmlBackend::load().map(boxed));
            }
            BackendSelection::AmdSmi => {
                try_load("amdsmi", crate::amd::AmdSmiBackend::load().map(boxed));
            }
            BackendSelection::None => {}
            #[cfg(feature = "fake")]
            BackendSelection::Fake(path) => {
                try_load("fake", crate::fake::FakeBackend::load(path).map(boxed));
            }
        }
        d
    }

    /// Builds a discovery from already loaded backends (embedders, tests).
    pub fn from_backends(backends: Vec<Box<dyn Backend>>) -> Discovery {
        let statuses = backends
            .iter()
            .map(|b| BackendStatus {
                name: b.name(),
                state: BackendState::Available,
                reason: None,
            })
            .collect();
        Discovery { backends, statuses }
    }

    /// Each backend's availability.
    pub fn statuses(&self) -> &[BackendStatus] {
        &self.statuses
    }

    /// The first backend that loaded but failed, if any (picker exit 2).
    pub fn failing(&self) -> Option<&BackendStatus> {
        self.statuses
            .iter()
            .find(|s| s.state == BackendState::Error)
    }

    /// Every device of every loaded backend, with runtime indices derived from this process's
    /// environment (see [`mapping`]).
    pub fn devices(&self) -> Result<Vec<Found>, BackendError> {
        let env = mapping::RuntimeEnv::from_process();
        let mut out = Vec::new();
        for (i, b) in self.backends.iter().enumerate() {
            let mut devs = b.devices()?;
            mapping::assign_runtime_indices(b.vendor(), &mut devs, &env);
            out.extend(devs.into_iter().map(|info| Found { backend: i, info }));
        }
        Ok(out)
    }

    /// The backend at `index`.
    pub fn backend(&self, index: usize) -> Option<&dyn Backend> {
        self.backends.get(index).map(|b| b.as_ref())
    }

    /// The backend at `index`, mutably (clock control).
    pub fn backend_mut(&mut self, index: usize) -> Option<&mut (dyn Backend + 'static)> {
        self.backends.get_mut(index).map(|b| b.as_mut())
    }
}

fn boxed<B: Backend + 'static>(b: B) -> Box<dyn Backend> {
    Box::new(b)
}
