//! `gpu_claim` through kg-gpu: pick an idle device over a sampling window, take its L1 lock for
//! the whole run, and keep the claim evidence. With no claim, the run is `NO_GPU` and the
//! reason names the fact it rests on (no GPU, none idle, SMI error, held by another process).

use kg_gpu::{BackendSelection, Claim, ClaimError, ClaimRequest, PickOptions};

use crate::options::HostSettings;

/// The outcome of claiming.
pub enum GpuState {
    /// A device is held until this is dropped.
    Claimed(Box<Claim>),
    /// No device; why, and the picker exit code it corresponds to (1 none idle, 2 SMI error,
    /// 3 no GPU, 4 held).
    NoGpu {
        /// The fact.
        reason: String,
        /// Picker-style exit code.
        code: i32,
    },
}

impl std::fmt::Debug for GpuState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GpuState::Claimed(c) => write!(f, "Claimed({})", c.evidence().uuid),
            GpuState::NoGpu { reason, code } => write!(f, "NoGpu({code}: {reason})"),
        }
    }
}

fn fact(code: i32) -> &'static str {
    match code {
        1 => "GPUs are present but none stayed idle over the window (an environment fact)",
        2 => "the SMI library failed; this says nothing about the GPUs",
        3 => "no GPU on this host",
        4 => "the device is held by another process",
        _ => "no GPU claimed",
    }
}

/// Claims a device for `command` (recorded in the lock owner record).
pub fn claim(host: &HostSettings, command: Vec<String>) -> GpuState {
    let backends = match BackendSelection::from_env() {
        Ok(b) => b,
        Err(e) => {
            return GpuState::NoGpu {
                reason: format!("{}: {e}", fact(2)),
                code: 2,
            };
        }
    };
    let mut device = None;
    if let Some(picker) = &host.picker {
        match run_picker(picker, host) {
            Ok(index) => device = Some(index),
            Err((code, why)) => {
                return GpuState::NoGpu {
                    reason: format!("{} (PICKER `{}`: {why})", fact(code), picker.display()),
                    code,
                };
            }
        }
    }
    let mut req = ClaimRequest {
        backends,
        device: None,
        pick: PickOptions {
            samples: host.pick_samples,
            interval: host.pick_interval,
            ..PickOptions::default()
        },
        lock_clocks: None,
        require_clock_lock: false,
        lock_dir: kg_gpu::lock::lock_dir_from_env(),
        command,
    };
    if let Some(index) = device {
        // The picker prints a runtime index; map it to a UUID through the SMI enumeration
        // rather than using it as an SMI index.
        let disc = kg_gpu::Discovery::load(&req.backends);
        let found = disc
            .devices()
            .ok()
            .and_then(|d| d.into_iter().find(|f| f.info.runtime_index == Some(index)));
        match found {
            Some(f) => req.device = Some(f.info.uuid),
            None => {
                return GpuState::NoGpu {
                    reason: format!(
                        "PICKER chose runtime index {index}, which no SMI device maps to"
                    ),
                    code: 2,
                };
            }
        }
    }
    match Claim::acquire(req) {
        Ok(c) => GpuState::Claimed(Box::new(c)),
        Err(e) => {
            let code = match &e {
                ClaimError::NoGpu(_) => 3,
                ClaimError::NoneIdle(_) => 1,
                ClaimError::Lock(_) => 4,
                _ => 2,
            };
            GpuState::NoGpu {
                reason: format!("{}: {e}", fact(code)),
                code,
            }
        }
    }
}

fn run_picker(picker: &std::path::Path, host: &HostSettings) -> Result<u32, (i32, String)> {
    let mut cmd = std::process::Command::new(picker);
    cmd.args([
        "--samples".to_string(),
        host.pick_samples.to_string(),
        "--interval".to_string(),
        format!("{}", host.pick_interval.as_secs_f64()),
        "--quiet".to_string(),
    ]);
    let out = cmd
        .output()
        .map_err(|e| (2, format!("failed to start: {e}")))?;
    match out.status.code() {
        Some(0) => String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .and_then(|s| s.parse().ok())
            .ok_or((2, "exit 0 without an index on stdout".into())),
        Some(c @ (1 | 3)) => Err((c, format!("exit {c}"))),
        other => Err((2, format!("exit {other:?}"))),
    }
}
