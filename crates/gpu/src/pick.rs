//! The idle picker: sample every device over a window and pick the quietest that passes the
//! thresholds (the seed's `pick-idle-gpu`, vendor-neutral).

use std::time::Duration;

use kg_contract::IdlenessBasis;
use serde::Serialize;

use crate::backend::{BackendStatus, Discovery};
use crate::device::{DeviceInfo, Sample};

/// GiB in bytes.
pub const GIB: u64 = 1 << 30;

/// Picker exit codes (as the seed's picker).
pub mod exit {
    /// A device was picked.
    pub const PICKED: i32 = 0;
    /// GPUs exist, none is idle.
    pub const NONE_IDLE: i32 = 1;
    /// An SMI library failed: says nothing about the GPUs.
    pub const SMI_ERROR: i32 = 2;
    /// No GPU (no backend available, or no device).
    pub const NO_GPU: i32 = 3;
}

/// Sampling window and thresholds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PickOptions {
    /// Samples per device.
    pub samples: u32,
    /// Time between samples.
    #[serde(serialize_with = "secs")]
    pub interval: Duration,
    /// Largest allowed peak activity, %.
    pub max_peak_activity_pct: f64,
    /// Largest allowed used memory, bytes.
    pub max_used_bytes: u64,
    /// Smallest required free memory, bytes.
    pub min_free_bytes: u64,
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Default for PickOptions {
    fn default() -> Self {
        PickOptions {
            samples: 10,
            interval: Duration::from_secs(1),
            max_peak_activity_pct: 2.0,
            max_used_bytes: 2 * GIB,
            min_free_bytes: 16 * GIB,
        }
    }
}

/// One device's window summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// Backend index in the discovery.
    #[serde(skip)]
    pub backend: usize,
    /// The device as listed before sampling.
    pub device: DeviceInfo,
    /// Peak activity over the window; `None` = unknown (never 0).
    pub peak_activity_pct: Option<f64>,
    /// Mean activity over the window; `None` = unknown.
    pub mean_activity_pct: Option<f64>,
    /// Largest used memory seen.
    pub used_bytes: Option<u64>,
    /// Smallest free memory seen.
    pub free_bytes: Option<u64>,
    /// What the judgement rests on.
    pub idleness_basis: IdlenessBasis,
    /// Whether every threshold passed.
    pub idle: bool,
    /// Why not idle (empty when idle).
    pub reasons: Vec<String>,
}

/// What the picker concluded.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "result", content = "detail", rename_all = "kebab-case")]
pub enum PickOutcome {
    /// `candidates[0]` is idle and picked.
    Picked,
    /// No device passed the thresholds.
    NoneIdle,
    /// A backend failed.
    SmiError(String),
    /// No GPU.
    NoGpu(String),
}

/// The picker's full report (`kg-gpu pick --json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PickReport {
    /// Outcome.
    pub outcome: PickOutcome,
    /// Window and thresholds used.
    pub options: PickOptions,
    /// Backends and their availability.
    pub backends: Vec<BackendStatus>,
    /// Every device, idle ones first, each group sorted by (peak, mean, used, -free).
    pub candidates: Vec<Candidate>,
}

impl PickReport {
    /// Process exit code for this outcome.
    pub fn exit_code(&self) -> i32 {
        match self.outcome {
            PickOutcome::Picked => exit::PICKED,
            PickOutcome::NoneIdle => exit::NONE_IDLE,
            PickOutcome::SmiError(_) => exit::SMI_ERROR,
            PickOutcome::NoGpu(_) => exit::NO_GPU,
        }
    }

    /// The picked device.
    pub fn picked(&self) -> Option<&Candidate> {
        match self.outcome {
            PickOutcome::Picked => self.candidates.first(),
            _ => None,
        }
    }

    /// Idle candidates in order.
    pub fn idle(&self) -> impl Iterator<Item = &Candidate> {
        self.candidates.iter().filter(|c| c.idle)
    }
}

/// Summarises one device's samples against the thresholds.
pub fn summarise(
    backend: usize,
    device: DeviceInfo,
    samples: &[Sample],
    opts: &PickOptions,
) -> Candidate {
    let activities: Option<Vec<f64>> = samples.iter().map(|s| s.activity_pct).collect();
    let activities = activities.filter(|a| !a.is_empty());
    let used: Option<Vec<u64>> = samples.iter().map(|s| s.memory_used_bytes).collect();
    let free: Option<Vec<u64>> = samples.iter().map(|s| s.memory_free_bytes).collect();
    let used = used.and_then(|v| v.into_iter().max());
    let free = free.and_then(|v| v.into_iter().min());
    let peak = activities
        .as_ref()
        .map(|a| a.iter().copied().fold(f64::MIN, f64::max));
    let mean = activities
        .as_ref()
        .map(|a| a.iter().sum::<f64>() / a.len() as f64);
    let basis = match (peak.is_some(), used.is_some() && free.is_some()) {
        (true, true) => IdlenessBasis::ActivityVram,
        (false, true) => IdlenessBasis::VramOnly,
        _ => IdlenessBasis::Unknown,
    };
    let mut reasons = Vec::new();
    if let Some(p) = peak
        && p > opts.max_peak_activity_pct
    {
        reasons.push(format!(
            "peak activity {p:.1}% > {:.1}%",
            opts.max_peak_activity_pct
        ));
    }
    match used {
        Some(u) if u > opts.max_used_bytes => reasons.push(format!(
            "used memory {:.2} GiB > {:.2} GiB",
            u as f64 / GIB as f64,
            opts.max_used_bytes as f64 / GIB as f64
        )),
        None => reasons.push("used memory unknown".into()),
        _ => {}
    }
    match free {
        Some(f) if f < opts.min_free_bytes => reasons.push(format!(
            "free memory {:.2} GiB < {:.2} GiB",
            f as f64 / GIB as f64,
            opts.min_free_bytes as f64 / GIB as f64
        )),
        None => reasons.push("free memory unknown".into()),
        _ => {}
    }
    Candidate {
        backend,
        device,
        peak_activity_pct: peak,
        mean_activity_pct: mean,
        used_bytes: used,
        free_bytes: free,
        idleness_basis: basis,
        idle: reasons.is_empty(),
        reasons,
    }
}

/// Orders candidates: idle first, then by (peak, mean, used, -free); unknown activity sorts
/// after measured activity; remaining ties keep SMI enumeration order.
pub fn sort_candidates(cands: &mut [Candidate]) {
    let key = |c: &Candidate| {
        (
            !c.idle,
            c.peak_activity_pct.unwrap_or(f64::INFINITY),
            c.mean_activity_pct.unwrap_or(f64::INFINITY),
            c.used_bytes.unwrap_or(u64::MAX),
            u64::MAX - c.free_bytes.unwrap_or(0),
        )
    };
    cands.sort_by(|a, b| {
        key(a)
            .partial_cmp(&key(b))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
}

/// Samples every device (optionally only those `keep` accepts) over the window and picks.
pub fn pick(
    discovery: &Discovery,
    opts: &PickOptions,
    keep: &dyn Fn(&DeviceInfo) -> bool,
) -> PickReport {
    let mut report = PickReport {
        outcome: PickOutcome::NoneIdle,
        options: opts.clone(),
        backends: discovery.statuses().to_vec(),
        candidates: Vec::new(),
    };
    if let Some(bad) = discovery.failing() {
        report.outcome = PickOutcome::SmiError(bad.reason.clone().unwrap_or_default());
        return report;
    }
    let devices = match discovery.devices() {
        Ok(d) => d,
        Err(e) => {
            report.outcome = PickOutcome::SmiError(e.to_string());
            return report;
        }
    };
    let devices: Vec<_> = devices.into_iter().filter(|f| keep(&f.info)).collect();
    if devices.is_empty() {
        let why: Vec<String> = discovery
            .statuses()
            .iter()
            .map(|s| match &s.reason {
                Some(r) => r.clone(),
                None => format!("{}: no devices", s.name),
            })
            .collect();
        report.outcome = PickOutcome::NoGpu(if why.is_empty() {
            "no backend selected".into()
        } else {
            why.join("; ")
        });
        return report;
    }
    let n = opts.samples.max(1);
    let mut samples: Vec<Vec<Sample>> = vec![Vec::with_capacity(n as usize); devices.len()];
    for round in 0..n {
        for (i, f) in devices.iter().enumerate() {
            let Some(b) = discovery.backend(f.backend) else {
                continue;
            };
            match b.sample(f.info.smi_index) {
                Ok(s) => samples[i].push(s),
                Err(e) => {
                    report.outcome = PickOutcome::SmiError(e.to_string());
                    return report;
                }
            }
        }
        if round + 1 < n {
            std::thread::sleep(opts.interval);
        }
    }
    report.candidates = devices
        .into_iter()
        .zip(samples)
        .map(|(f, s)| summarise(f.backend, f.info, &s, opts))
        .collect();
    sort_candidates(&mut report.candidates);
    if report.candidates.first().is_some_and(|c| c.idle) {
        report.outcome = PickOutcome::Picked;
    }
    report
}
