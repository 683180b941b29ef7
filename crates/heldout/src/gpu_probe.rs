//! Whether the tasks' interpreter can use a GPU, asked of its torch through kg-exec's probe.
//!
//! AKA's task commands are GPU programs: on a host where torch sees no device, every side
//! fails and every task would look like `both_fail`. The probe is a typed answer
//! (`accelerator_available`, `device_count`), so evaluation refuses before it runs anything,
//! and asks again after a task with a failing side, never reading a command's output for it.

use kg_python::{Interpreter, PythonError};

use crate::summary::{DeviceInfo, DeviceMode};

/// Why no device is usable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceProblem {
    /// The interpreter could not be probed (it did not start, has no torch, or replied badly).
    #[error(transparent)]
    Probe(#[from] PythonError),
    /// torch works but sees no CUDA/HIP device.
    #[error("torch {torch} in `{python}` reports no CUDA/HIP device")]
    NoDevice {
        /// torch's version.
        torch: String,
        /// The interpreter.
        python: std::path::PathBuf,
    },
}

/// Probes `python`: the device its torch sees, or why none is usable.
pub fn probe(python: &Interpreter) -> Result<DeviceInfo, DeviceProblem> {
    let info = kg_python::probe(python)?;
    if !info.accelerator_available || info.device_count == 0 {
        return Err(DeviceProblem::NoDevice {
            torch: info.torch,
            python: python.path.clone(),
        });
    }
    Ok(DeviceInfo {
        mode: DeviceMode::Gpu,
        name: info.device_name,
        torch: Some(info.torch),
    })
}
