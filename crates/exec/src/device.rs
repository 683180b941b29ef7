//! Which device an evaluation runs on.
//!
//! `auto` picks CUDA/HIP device 0 when the Python probe reports one, else the CPU (with a
//! notice). When kg-gpu can claim idle GPUs, the claim plugs in here as another way to produce
//! a [`DeviceChoice`].

use std::str::FromStr;

use crate::python::ProbeInfo;

/// What the user asked for (`--device`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceRequest {
    /// A GPU if one is usable, else the CPU.
    Auto,
    /// The CPU.
    Cpu,
    /// CUDA device N.
    Cuda(u32),
    /// ROCm/HIP device N.
    Rocm(u32),
}

impl FromStr for DeviceRequest {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let idx = |rest: &str| -> Result<u32, String> {
            if rest.is_empty() {
                return Ok(0);
            }
            rest.strip_prefix(':')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("`{s}`: expected e.g. `cuda:0`"))
        };
        match s {
            "auto" => Ok(DeviceRequest::Auto),
            "cpu" => Ok(DeviceRequest::Cpu),
            _ if s.starts_with("cuda") => idx(&s[4..]).map(DeviceRequest::Cuda),
            _ if s.starts_with("rocm") => idx(&s[4..]).map(DeviceRequest::Rocm),
            _ => Err(format!(
                "`{s}` is not a device; expected auto, cpu, cuda:N or rocm:N"
            )),
        }
    }
}

/// The device an evaluation actually uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceChoice {
    /// The CPU (Triton through its interpreter; timings are CPU timings).
    Cpu,
    /// CUDA device N.
    Cuda(u32),
    /// ROCm/HIP device N (torch addresses it as `cuda:N`).
    Rocm(u32),
}

impl DeviceChoice {
    /// The name handed to the workers (`cpu`, `cuda:0`, `rocm:0`).
    pub fn worker_name(&self) -> String {
        match self {
            DeviceChoice::Cpu => "cpu".into(),
            DeviceChoice::Cuda(n) => format!("cuda:{n}"),
            DeviceChoice::Rocm(n) => format!("rocm:{n}"),
        }
    }
    /// Whether this is the CPU.
    pub fn is_cpu(&self) -> bool {
        matches!(self, DeviceChoice::Cpu)
    }
}

impl std::fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.worker_name())
    }
}

/// Why no device could be chosen.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// A GPU was asked for but the interpreter's torch cannot use one.
    #[error("device `{asked}` requested, but {why}; use `--device cpu` or `--device auto`")]
    Unavailable {
        /// The request.
        asked: String,
        /// What the probe found.
        why: String,
    },
}

/// Resolves a request against what the interpreter can do. The second value is a notice for
/// the user when `auto` fell back to the CPU.
pub fn choose(
    req: DeviceRequest,
    probe: &ProbeInfo,
) -> Result<(DeviceChoice, Option<String>), DeviceError> {
    let is_hip = probe.hip_version.is_some();
    let check = |n: u32, asked: String| -> Result<(), DeviceError> {
        if !probe.accelerator_available {
            return Err(DeviceError::Unavailable {
                asked,
                why: format!("torch {} reports no CUDA/HIP device", probe.torch),
            });
        }
        if n >= probe.device_count {
            return Err(DeviceError::Unavailable {
                asked,
                why: format!("torch sees only {} device(s)", probe.device_count),
            });
        }
        Ok(())
    };
    match req {
        DeviceRequest::Cpu => Ok((DeviceChoice::Cpu, None)),
        DeviceRequest::Cuda(n) => {
            check(n, format!("cuda:{n}"))?;
            Ok((DeviceChoice::Cuda(n), None))
        }
        DeviceRequest::Rocm(n) => {
            check(n, format!("rocm:{n}"))?;
            Ok((DeviceChoice::Rocm(n), None))
        }
        DeviceRequest::Auto => {
            if probe.accelerator_available && probe.device_count > 0 {
                Ok((
                    if is_hip {
                        DeviceChoice::Rocm(0)
                    } else {
                        DeviceChoice::Cuda(0)
                    },
                    None,
                ))
            } else {
                Ok((
                    DeviceChoice::Cpu,
                    Some(format!(
                        "no usable GPU (torch {} sees none); running on the CPU: timings are CPU timings",
                        probe.torch
                    )),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(avail: bool, count: u32) -> ProbeInfo {
        ProbeInfo {
            python: "3.12".into(),
            executable: "python".into(),
            torch: "2.11.0".into(),
            cuda_version: Some("13.0".into()),
            hip_version: None,
            accelerator_available: avail,
            device_count: count,
            device_name: None,
            triton: None,
            numpy: None,
            safetensors: None,
            ninja: None,
        }
    }

    #[test]
    fn parse_requests() {
        assert_eq!(
            "cuda:3".parse::<DeviceRequest>(),
            Ok(DeviceRequest::Cuda(3))
        );
        assert_eq!("rocm".parse::<DeviceRequest>(), Ok(DeviceRequest::Rocm(0)));
        assert!("gpu".parse::<DeviceRequest>().is_err());
        assert!("cuda:x".parse::<DeviceRequest>().is_err());
    }

    #[test]
    fn auto_falls_back_to_cpu_with_a_notice() {
        let (c, notice) = choose(DeviceRequest::Auto, &probe(false, 0)).unwrap();
        assert_eq!(c, DeviceChoice::Cpu);
        assert!(notice.unwrap().contains("CPU"));
        let (c, notice) = choose(DeviceRequest::Auto, &probe(true, 1)).unwrap();
        assert_eq!(c, DeviceChoice::Cuda(0));
        assert!(notice.is_none());
    }

    #[test]
    fn explicit_gpu_without_one_fails() {
        let err = choose(DeviceRequest::Cuda(0), &probe(false, 0)).unwrap_err();
        assert!(err.to_string().contains("--device cpu"), "{err}");
        assert!(choose(DeviceRequest::Cuda(2), &probe(true, 1)).is_err());
    }
}
