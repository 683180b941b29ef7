//! Which device an evaluation runs on, and the kg-gpu claim that holds it.
//!
//! [`choose`] resolves a request against what the interpreter's torch can use. [`acquire`]
//! adds ownership: `auto` claims an idle GPU through kg-gpu (UUID-keyed L1 lock, optional clock
//! lock) and restricts the workers to it; when no GPU can be claimed it falls back to the CPU
//! with a notice saying why. Inside `kg-gpu claim -- kg-bench ...` the enclosing claim (named by
//! `KG_GPU_CLAIM`) is borrowed, never re-taken. Explicit `cuda:N` / `rocm:N` use the device as
//! named, unclaimed (the trace then carries no claim evidence).
//!
//! Ownership: the returned [`Acquired`] owns the [`kg_gpu::Claim`]; dropping it (on every exit
//! path of the caller, including Ctrl-C handled as cancellation) restores clocks and releases
//! the lock.

use std::str::FromStr;
use std::time::Duration;

use kg_contract::GpuClaim;
use kg_gpu::claim::{Claim, ClaimRequest, ClockRequest};
use kg_gpu::error::ClaimError;
use kg_gpu::pick::PickOptions;

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
    /// Clock locking was asked for where no claim can hold it.
    #[error(
        "--lock-clocks needs a GPU claimed through kg-gpu, which `{asked}` does not give: {why}"
    )]
    ClocksNeedClaim {
        /// The request.
        asked: String,
        /// Why no claim is possible here, and what to do.
        why: String,
    },
    /// The GPU could not be claimed and the run requires a claim (clock locking).
    #[error("failed to claim a GPU: {0}")]
    Claim(#[from] ClaimError),
    /// An enclosing claim's evidence file could not be read.
    #[error("`KG_GPU_CLAIM` names `{path}`, which is not readable claim evidence: {reason}")]
    EnclosingClaim {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// `--gpus` cannot be honoured here.
    #[error("--gpus {asked}: {why}")]
    Lanes {
        /// The GPU set asked for.
        asked: String,
        /// Why, and what to do.
        why: String,
    },
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

/// A device acquired for a run.
pub struct Acquired {
    /// The device the workers use.
    pub choice: DeviceChoice,
    /// The claim this process holds (released and clocks restored when dropped).
    pub claim: Option<Claim>,
    /// Claim evidence for traces: ours, or the enclosing `kg-gpu claim`'s.
    pub evidence: Option<GpuClaim>,
    /// Environment the workers need (device visibility for a claimed GPU).
    pub worker_env: Vec<(String, String)>,
    /// A one-line notice for the user (e.g. why `auto` fell back to the CPU).
    pub notice: Option<String>,
}

impl Acquired {
    /// Evaluation options for this device, before any flag: its choice, the workers'
    /// environment and the claim's evidence.
    pub fn eval_options(&self) -> crate::EvalOptions {
        let mut o = crate::EvalOptions::new(self.choice.clone());
        o.worker_env.clone_from(&self.worker_env);
        o.gpu_claim.clone_from(&self.evidence);
        o
    }
}

/// What [`acquire`] should do beyond choosing.
#[derive(Debug, Clone)]
pub struct AcquireOptions {
    /// Lock the SM clock to its maximum for the run; fail closed when that is impossible.
    pub lock_clocks: bool,
    /// The command line the claim is for (recorded in the lock's owner record).
    pub command: Vec<String>,
    /// How long `auto` keeps asking while every GPU is busy (activity or memory above the idle
    /// thresholds) before it falls back to the CPU ([`AUTO_BUSY_WAIT`] by default).
    pub busy_wait: Duration,
}

impl Default for AcquireOptions {
    fn default() -> Self {
        AcquireOptions {
            lock_clocks: false,
            command: Vec::new(),
            busy_wait: AUTO_BUSY_WAIT,
        }
    }
}

/// How long `auto` waits for a busy GPU to settle: a run started right after another GPU job
/// (the last command of a script) sees that job's activity in the SMI's sampling window for a
/// moment, and would otherwise fall back to the CPU.
pub const AUTO_BUSY_WAIT: Duration = Duration::from_secs(5);
/// Pause between two asks while waiting.
const AUTO_BUSY_RETRY: Duration = Duration::from_secs(1);

/// The picker window `auto` uses: shorter than `kg-gpu pick`'s default (10 x 1 s) so that a
/// run starts quickly, still long enough to see a busy neighbour.
pub fn auto_pick_options() -> PickOptions {
    PickOptions {
        samples: 3,
        interval: Duration::from_millis(200),
        ..PickOptions::default()
    }
}

/// Resolves the request and, for `auto` on a GPU machine, claims an idle GPU through kg-gpu.
pub fn acquire(
    req: DeviceRequest,
    probe: &ProbeInfo,
    opts: &AcquireOptions,
) -> Result<Acquired, DeviceError> {
    let enclosing = match std::env::var_os(kg_gpu::env::KG_GPU_CLAIM) {
        Some(p) => Some(read_enclosing(std::path::Path::new(&p))?),
        None => None,
    };
    acquire_with(req, probe, opts, enclosing, Claim::acquire)
}

fn read_enclosing(path: &std::path::Path) -> Result<GpuClaim, DeviceError> {
    let bad = |reason: String| DeviceError::EnclosingClaim {
        path: path.display().to_string(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| bad(e.to_string()))
}

/// As [`acquire`], with the enclosing claim and the claimer given (for tests and embedders).
pub fn acquire_with(
    req: DeviceRequest,
    probe: &ProbeInfo,
    opts: &AcquireOptions,
    enclosing: Option<GpuClaim>,
    mut claimer: impl FnMut(ClaimRequest) -> Result<Claim, ClaimError>,
) -> Result<Acquired, DeviceError> {
    let plain = |choice: DeviceChoice, notice: Option<String>| Acquired {
        choice,
        claim: None,
        evidence: None,
        worker_env: Vec::new(),
        notice,
    };
    let gpu0 = if probe.hip_version.is_some() {
        DeviceChoice::Rocm(0)
    } else {
        DeviceChoice::Cuda(0)
    };
    match req {
        DeviceRequest::Cpu if opts.lock_clocks => Err(DeviceError::ClocksNeedClaim {
            asked: "cpu".into(),
            why: "the CPU has no clocks kernelgate can lock".into(),
        }),
        DeviceRequest::Cuda(_) | DeviceRequest::Rocm(_) if opts.lock_clocks => {
            Err(DeviceError::ClocksNeedClaim {
                asked: req_name(req),
                why: "an explicit device is used unclaimed; use `--device auto --lock-clocks`, or run under `kg-gpu claim --lock-clocks max -- kg-bench ...`".into(),
            })
        }
        DeviceRequest::Cpu | DeviceRequest::Cuda(_) | DeviceRequest::Rocm(_) => {
            let (choice, notice) = choose(req, probe)?;
            Ok(plain(choice, notice))
        }
        DeviceRequest::Auto => {
            if let Some(ev) = enclosing {
                // Inside `kg-gpu claim`: the device is already ours and is the only one visible.
                if opts.lock_clocks && !ev.clocks.locked {
                    return Err(DeviceError::ClocksNeedClaim {
                        asked: "auto".into(),
                        why: format!(
                            "the enclosing `kg-gpu claim` holds {} without locked clocks ({}); pass `--lock-clocks` to `kg-gpu claim` instead",
                            ev.uuid,
                            ev.clocks.reason.clone().unwrap_or_else(|| "not requested".into())
                        ),
                    });
                }
                let (choice, _) = choose(gpu_request(gpu0), probe)?;
                return Ok(Acquired {
                    choice,
                    claim: None,
                    evidence: Some(ev),
                    worker_env: Vec::new(),
                    notice: None,
                });
            }
            if !(probe.accelerator_available && probe.device_count > 0) {
                if opts.lock_clocks {
                    return Err(DeviceError::ClocksNeedClaim {
                        asked: "auto".into(),
                        why: format!("torch {} sees no GPU", probe.torch),
                    });
                }
                let (choice, notice) = choose(DeviceRequest::Auto, probe)?;
                return Ok(plain(choice, notice));
            }
            let request = ClaimRequest {
                pick: auto_pick_options(),
                lock_clocks: opts.lock_clocks.then_some(ClockRequest::Max),
                require_clock_lock: opts.lock_clocks,
                ..ClaimRequest::from_env(opts.command.clone())?
            };
            let started = std::time::Instant::now();
            let (claimed, first_busy) = claim_settled(&mut claimer, &request, opts.busy_wait);
            match claimed {
                Ok(claim) => {
                    let worker_env = claim.child_env();
                    let evidence = claim.evidence().clone();
                    // The workers see only the claimed device, as index 0.
                    let (choice, _) = choose(gpu_request(gpu0), probe)?;
                    let notice = first_busy.map(|why| {
                        format!(
                            "every GPU was busy when the run started ({why}); {} was idle {:.1} s later and is claimed",
                            evidence.uuid,
                            started.elapsed().as_secs_f64()
                        )
                    });
                    Ok(Acquired {
                        choice,
                        claim: Some(claim),
                        evidence: Some(evidence),
                        worker_env,
                        notice,
                    })
                }
                Err(e) if opts.lock_clocks => Err(DeviceError::Claim(e)),
                Err(e) => Ok(plain(
                    DeviceChoice::Cpu,
                    Some(format!(
                        "no GPU could be claimed ({e}); running on the CPU: timings are CPU timings. Use `--device cuda:N` to run on a device unclaimed"
                    )),
                )),
            }
        }
    }
}

/// Claims with `req`, asking again each [`AUTO_BUSY_RETRY`] while every GPU is busy, for up to
/// `wait`: the activity may be what the previous job left in the SMI's window. Any other
/// refusal is final at once. The second value is the first busy refusal, when there was one.
fn claim_settled(
    claimer: &mut impl FnMut(ClaimRequest) -> Result<Claim, ClaimError>,
    req: &ClaimRequest,
    wait: Duration,
) -> (Result<Claim, ClaimError>, Option<String>) {
    let started = std::time::Instant::now();
    let mut first_busy: Option<String> = None;
    loop {
        match claimer(req.clone()) {
            Err(ClaimError::NoneIdle(why)) if started.elapsed() < wait => {
                first_busy.get_or_insert(why);
                std::thread::sleep(AUTO_BUSY_RETRY.min(wait.saturating_sub(started.elapsed())));
            }
            other => return (other, first_busy),
        }
    }
}

/// Which GPUs a run spreads over (`kg-bench run --gpus`), one lane each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSet {
    /// Every GPU of the host that can be claimed (at least one).
    All,
    /// This many idle GPUs, picked by kg-gpu.
    Count(u32),
    /// These GPUs, each a UUID, UUID prefix or PCI bus id (as `kg-gpu claim --device`).
    List(Vec<String>),
}

impl FromStr for GpuSet {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t == "all" {
            return Ok(GpuSet::All);
        }
        if let Ok(n) = t.parse::<u32>() {
            return if n == 0 {
                Err("`--gpus 0`: give at least one GPU (for the CPU, use `--device cpu`)".into())
            } else {
                Ok(GpuSet::Count(n))
            };
        }
        let list: Vec<String> = t
            .split(',')
            .map(|x| x.trim().to_string())
            .filter(|x| !x.is_empty())
            .collect();
        if list.is_empty() {
            return Err(format!(
                "`{s}` is not a GPU set; expected all, a count (2), or UUIDs/PCI bus ids separated by commas"
            ));
        }
        for (k, a) in list.iter().enumerate() {
            if list[..k].contains(a) {
                return Err(format!("`--gpus {s}` names `{a}` twice"));
            }
        }
        Ok(GpuSet::List(list))
    }
}

/// Claims the GPUs of `set` through kg-gpu, one [`Acquired`] per lane (each holds its own
/// claim: its own L1 lock, clocks and L2 execution lock; the workers of a lane see only its
/// GPU, as index 0). Inside an enclosing `kg-gpu claim` only that one GPU can be used.
pub fn acquire_lanes(
    set: &GpuSet,
    probe: &ProbeInfo,
    opts: &AcquireOptions,
) -> Result<(Vec<Acquired>, Option<String>), DeviceError> {
    let enclosing = match std::env::var_os(kg_gpu::env::KG_GPU_CLAIM) {
        Some(p) => Some(read_enclosing(std::path::Path::new(&p))?),
        None => None,
    };
    acquire_lanes_with(set, probe, opts, enclosing, Claim::acquire)
}

/// As [`acquire_lanes`], with the enclosing claim and the claimer given (for tests and
/// embedders). The second value is a notice when `all` claimed fewer GPUs than torch sees.
pub fn acquire_lanes_with(
    set: &GpuSet,
    probe: &ProbeInfo,
    opts: &AcquireOptions,
    enclosing: Option<GpuClaim>,
    mut claimer: impl FnMut(ClaimRequest) -> Result<Claim, ClaimError>,
) -> Result<(Vec<Acquired>, Option<String>), DeviceError> {
    let asked = match set {
        GpuSet::All => "all".to_string(),
        GpuSet::Count(n) => n.to_string(),
        GpuSet::List(l) => l.join(","),
    };
    if let Some(ev) = enclosing {
        if matches!(set, GpuSet::All | GpuSet::Count(1)) {
            let a = acquire_with(DeviceRequest::Auto, probe, opts, Some(ev), |_| {
                Err(ClaimError::NoGpu("inside an enclosing claim".into()))
            })?;
            return Ok((vec![a], None));
        }
        return Err(DeviceError::Lanes {
            asked,
            why: format!(
                "inside `kg-gpu claim` (KG_GPU_CLAIM) only its GPU {} is ours; run kg-bench outside it to claim several",
                ev.uuid
            ),
        });
    }
    if !(probe.accelerator_available && probe.device_count > 0) {
        return Err(DeviceError::Unavailable {
            asked: format!("--gpus {asked}"),
            why: format!("torch {} sees no GPU", probe.torch),
        });
    }
    let base = ClaimRequest {
        pick: auto_pick_options(),
        lock_clocks: opts.lock_clocks.then_some(ClockRequest::Max),
        require_clock_lock: opts.lock_clocks,
        ..ClaimRequest::from_env(opts.command.clone())?
    };
    if let Some(named) = &base.device
        && !matches!(set, GpuSet::Count(1))
    {
        return Err(DeviceError::Lanes {
            asked,
            why: format!(
                "GPU_LOCK_UUID (or KG_GPU_LOCK_UUID) names one GPU, {named}; unset it to claim several"
            ),
        });
    }
    let (choice, _) = choose(
        if probe.hip_version.is_some() {
            DeviceRequest::Rocm(0)
        } else {
            DeviceRequest::Cuda(0)
        },
        probe,
    )?;
    let lane = |claim: Claim| Acquired {
        choice: choice.clone(),
        worker_env: claim.child_env(),
        evidence: Some(claim.evidence().clone()),
        claim: Some(claim),
        notice: None,
    };
    let mut lanes = Vec::new();
    match set {
        GpuSet::List(specs) => {
            for spec in specs {
                let req = ClaimRequest {
                    device: Some(spec.clone()),
                    ..base.clone()
                };
                match claim_settled(&mut claimer, &req, opts.busy_wait).0 {
                    Ok(c) => lanes.push(lane(c)),
                    Err(e) => {
                        return Err(DeviceError::Lanes {
                            asked,
                            why: format!("`{spec}` could not be claimed: {e}"),
                        });
                    }
                }
            }
            Ok((lanes, None))
        }
        GpuSet::Count(n) => {
            for _ in 0..*n {
                match claim_settled(&mut claimer, &base, opts.busy_wait).0 {
                    Ok(c) => lanes.push(lane(c)),
                    Err(e) => {
                        return Err(DeviceError::Lanes {
                            asked,
                            why: format!(
                                "only {} of {n} GPU(s) could be claimed: {e}",
                                lanes.len()
                            ),
                        });
                    }
                }
            }
            Ok((lanes, None))
        }
        GpuSet::All => {
            let mut last = None;
            // Each claim takes another idle GPU (the ones held are skipped); at most as many
            // as torch sees.
            for k in 0..probe.device_count {
                // The first GPU may still show the previous job's activity; once one is
                // claimed, a busy GPU is someone else's.
                let wait = if k == 0 {
                    opts.busy_wait
                } else {
                    Duration::ZERO
                };
                match claim_settled(&mut claimer, &base, wait).0 {
                    Ok(c) => lanes.push(lane(c)),
                    Err(e) => {
                        last = Some(e);
                        break;
                    }
                }
            }
            match (lanes.is_empty(), last) {
                (true, Some(e)) => Err(DeviceError::Claim(e)),
                (false, Some(e)) => {
                    let n = lanes.len();
                    Ok((
                        lanes,
                        Some(format!(
                            "--gpus all: claimed {n} of the {} GPU(s) torch sees; the others could not be claimed: {e}",
                            probe.device_count
                        )),
                    ))
                }
                (_, None) => Ok((lanes, None)),
            }
        }
    }
}

fn gpu_request(c: DeviceChoice) -> DeviceRequest {
    match c {
        DeviceChoice::Rocm(n) => DeviceRequest::Rocm(n),
        DeviceChoice::Cuda(n) => DeviceRequest::Cuda(n),
        DeviceChoice::Cpu => DeviceRequest::Cpu,
    }
}

fn req_name(r: DeviceRequest) -> String {
    match r {
        DeviceRequest::Auto => "auto".into(),
        DeviceRequest::Cpu => "cpu".into(),
        DeviceRequest::Cuda(n) => format!("cuda:{n}"),
        DeviceRequest::Rocm(n) => format!("rocm:{n}"),
    }
}

#[cfg(test)]
mod tests;
