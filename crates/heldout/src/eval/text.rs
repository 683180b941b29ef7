//! The evaluation log and the one-line descriptions it (and the CLI) prints.

use std::io::Write;

use crate::speedup;
use crate::summary::{DeviceInfo, DeviceMode, HeldoutTaskResult, SpeedupStatus};

/// `heldout_eval.log`, each line also traced.
pub(super) struct EvalLog {
    pub(super) file: Option<std::fs::File>,
}

impl EvalLog {
    pub(super) fn line(&mut self, msg: &str) {
        tracing::info!("{msg}");
        if let Some(f) = &mut self.file {
            let _ = writeln!(f, "{msg}");
        }
    }
}

/// `speedup 1.234x (96.8% interval 1.100–1.300: gain)`, `no valid timing`, or
/// `no speedup compared`.
pub fn speedup_text(r: &HeldoutTaskResult) -> String {
    match r.speedup_status {
        Some(SpeedupStatus::Measured) => match (&r.speedup_interval, r.speedup_call) {
            (Some(i), Some(c)) => format!(
                "speedup {:.3}x ({:.1}% interval {:.3}–{:.3}: {})",
                r.speedup_ratio,
                100.0 * i.confidence,
                i.low,
                i.high,
                match c {
                    speedup::SpeedupCall::Gain => "gain",
                    speedup::SpeedupCall::Loss => "loss",
                    speedup::SpeedupCall::NotCalled => "not called, contains 1",
                }
            ),
            // An entry of an older version: one run a side, no interval.
            _ => format!("speedup {:.3}x (no interval)", r.speedup_ratio),
        },
        Some(SpeedupStatus::NoValidTiming) => "no valid timing".into(),
        Some(SpeedupStatus::NotApplicable) | None => "no speedup compared".into(),
    }
}

/// `retention 0.667x (interval 0.600–0.700: lower)`, or `None` without a retention interval.
pub fn retention_text(r: &HeldoutTaskResult) -> Option<String> {
    let (i, c) = (r.retention_interval.as_ref()?, r.retention_call?);
    Some(format!(
        "retention {:.3}x (interval {:.3}–{:.3}: {})",
        r.speedup_retention.unwrap_or(0.0),
        i.low,
        i.high,
        match c {
            speedup::RetentionCall::Lower => "lower than the original run's",
            speedup::RetentionCall::Higher => "higher than the original run's",
            speedup::RetentionCall::NotCalled => "not called, contains 1",
        }
    ))
}

pub(super) fn describe_device(d: &DeviceInfo) -> String {
    match d.mode {
        DeviceMode::Cpu => "cpu (--device cpu: not probed; the tasks' own timings)".into(),
        DeviceMode::Gpu => format!(
            "gpu: {} (torch {})",
            d.name.as_deref().unwrap_or("unnamed"),
            d.torch.as_deref().unwrap_or("unknown")
        ),
    }
}

pub(super) fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}
