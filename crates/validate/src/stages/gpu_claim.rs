//! Stage 2, `gpu_claim`: claim an idle GPU through kg-gpu ([`crate::gpu`]), or record
//! `NO_GPU` and hide every device from the targets.

use kg_contract::report::{Stage, StageStatus};

use super::{Input, State};
use crate::error::ValidateError;
use crate::gpu::{self, GpuState};

/// Claims a device; leaves the claim and the targets' device environment in `st`.
pub(crate) fn run(st: &mut State<'_>, input: &Input<'_>) -> Result<(), ValidateError> {
    // The lock owner record names the command line that holds the device.
    let argv: Vec<String> = std::env::args().collect();
    match gpu::claim(&input.opts.host, argv) {
        GpuState::Claimed(c) => {
            let ev = c.evidence().clone();
            st.report.stages.gpu_claim = Stage::new(
                StageStatus::Pass,
                format!(
                    "claimed {} {} ({}), idleness basis {}, lock `{}`",
                    ev.name,
                    ev.uuid,
                    ev.arch.clone().unwrap_or_else(|| "arch unknown".into()),
                    ev.idleness_basis.as_str(),
                    ev.locks.l1
                ),
            );
            st.report.device = "gpu".into();
            st.report.gpu_claim = Some(ev.into());
            st.device_env = c.child_env();
            st.claim = Some(c);
        }
        GpuState::NoGpu { reason, .. } => {
            st.report.stages.gpu_claim = Stage::skip(reason);
            st.report.degraded_mode = Some("NO_GPU".into());
            st.device_env = vec![
                ("CUDA_VISIBLE_DEVICES".to_string(), String::new()),
                ("HIP_VISIBLE_DEVICES".to_string(), String::new()),
                ("ROCR_VISIBLE_DEVICES".to_string(), String::new()),
            ];
        }
    }
    Ok(())
}
