//! Claims: pick (or name) a device, take its L1 lock, optionally lock clocks, and hand back
//! evidence; releasing (and restoring clocks) when the claim ends.

use std::path::{Path, PathBuf};
use std::str::FromStr;

use kg_contract::{ClaimClocks, ClaimLocks, GpuClaim, IdlenessBasis, LockOwner};

use crate::backend::{BackendSelection, Discovery};
use crate::device::Vendor;
use crate::env;
use crate::error::{ClaimError, ClockError, LockError};
use crate::lock::{self, HeldLock, Level, LockState};
use crate::pick::{self, Candidate, PickOptions, PickOutcome};
use crate::recovery::{self, Pending, RecoveryRecord};
use crate::sys;

/// Ordered environment additions for a child.
pub type Env = Vec<(String, String)>;

/// Which clock to lock the SM clock to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockRequest {
    /// The base clock (NVIDIA: default application clock).
    Base,
    /// The maximum clock.
    Max,
    /// A frequency in MHz.
    Mhz(u32),
}

impl FromStr for ClockRequest {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "base" => Ok(ClockRequest::Base),
            "max" => Ok(ClockRequest::Max),
            n => n
                .parse::<u32>()
                .ok()
                .filter(|&m| m > 0)
                .map(ClockRequest::Mhz)
                .ok_or_else(|| format!("`{s}` is not base, max or a number of MHz")),
        }
    }
}

impl std::fmt::Display for ClockRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClockRequest::Base => f.write_str("base"),
            ClockRequest::Max => f.write_str("max"),
            ClockRequest::Mhz(m) => write!(f, "{m}"),
        }
    }
}

/// What to claim and how.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// Backends to load.
    pub backends: BackendSelection,
    /// A device to claim (UUID or UUID prefix, or PCI bus id); `None` picks an idle one.
    pub device: Option<String>,
    /// Window and thresholds of the idle picker (also applied to a named device).
    pub pick: PickOptions,
    /// Lock the SM clock for the claim.
    pub lock_clocks: Option<ClockRequest>,
    /// Fail instead of continuing with `clocks.locked: false` when clocks cannot be locked.
    pub require_clock_lock: bool,
    /// Lock directory.
    pub lock_dir: PathBuf,
    /// The command the claim is for (recorded in the owner record).
    pub command: Vec<String>,
}

impl ClaimRequest {
    /// A request with defaults from the environment: `KG_GPU_BACKEND`, and the lock
    /// settings of [`lock::lock_env`] (`GPU_LOCK_DIR`, `GPU_LOCK_UUID` and their `KG_*`
    /// aliases; a UUID given there becomes [`ClaimRequest::device`]).
    pub fn from_env(command: Vec<String>) -> Result<ClaimRequest, ClaimError> {
        let locks = lock::lock_env()?;
        Ok(ClaimRequest {
            backends: BackendSelection::from_env()?,
            device: locks.uuid,
            pick: PickOptions::default(),
            lock_clocks: None,
            require_clock_lock: false,
            lock_dir: locks.dir,
            command,
        })
    }
}

/// A held claim. Dropping it restores clocks and releases the lock; [`Claim::finish`] does the
/// same and returns the completed evidence.
pub struct Claim {
    discovery: Discovery,
    backend: usize,
    smi_index: u32,
    l1: Option<HeldLock>,
    evidence: GpuClaim,
    /// What this owner has not verified yet; mirrored in the recovery file while non-empty.
    pending: Vec<Pending>,
}

fn matches(spec: &str, info: &crate::device::DeviceInfo) -> bool {
    let s = spec.trim();
    !s.is_empty()
        && (info.uuid == s
            || info.uuid.starts_with(s)
            || info.pci_bus_id == crate::device::normalize_bdf(s))
}

impl Claim {
    /// Picks (or takes the named) device, locks it non-blocking, locks clocks if asked.
    pub fn acquire(req: ClaimRequest) -> Result<Claim, ClaimError> {
        let discovery = Discovery::load(&req.backends);
        Self::acquire_with(discovery, req)
    }

    /// As [`Claim::acquire`], with backends already loaded.
    pub fn acquire_with(mut discovery: Discovery, req: ClaimRequest) -> Result<Claim, ClaimError> {
        // Devices already held are refused before sampling: the refusal is immediate and names
        // the holder.
        let held: Vec<LockOwner> = Vec::new();
        let held = std::cell::RefCell::new(held);
        let hidden: std::cell::RefCell<Vec<String>> = std::cell::RefCell::new(Vec::new());
        let dir = req.lock_dir.clone();
        let keep = |info: &crate::device::DeviceInfo| {
            // A device this process's visibility variables hide is not ours to claim: under
            // Slurm, `CUDA_VISIBLE_DEVICES` names the GPUs of this job, and the others belong
            // to other jobs even when they look idle.
            if info.runtime_index_basis == crate::device::IndexBasis::NotVisible {
                hidden.borrow_mut().push(info.uuid.clone());
                return false;
            }
            if let Some(spec) = &req.device
                && !matches(spec, info)
            {
                return false;
            }
            let path = lock::lock_path(&dir, &info.uuid, Level::L1Ownership);
            match lock::inspect(&path, &info.uuid, Level::L1Ownership) {
                Ok(st) if matches!(st.state, LockState::Held | LockState::HeldUnverified) => {
                    if let Some(o) = st.owner {
                        held.borrow_mut().push(o);
                    }
                    false
                }
                _ => true,
            }
        };
        let report = pick::pick(&discovery, &req.pick, &keep);
        let held = held.into_inner();
        let hidden = hidden.into_inner();
        let idle: Vec<Candidate> = match &report.outcome {
            PickOutcome::Picked => report.idle().cloned().collect(),
            PickOutcome::NoneIdle => {
                let why: Vec<String> = report
                    .candidates
                    .iter()
                    .map(|c| format!("{}: {}", c.device.uuid, c.reasons.join(", ")))
                    .collect();
                return Err(ClaimError::NoneIdle(why.join("; ")));
            }
            PickOutcome::SmiError(e) => {
                return Err(ClaimError::Backend(crate::error::BackendError::Query {
                    backend: "smi",
                    what: "devices",
                    device: None,
                    message: e.clone(),
                }));
            }
            PickOutcome::NoGpu(why) => {
                if let Some(o) = held.into_iter().next() {
                    let path = lock::lock_path(&req.lock_dir, &o.uuid, Level::L1Ownership);
                    return Err(ClaimError::Lock(LockError::Busy {
                        uuid: o.uuid.clone(),
                        path,
                        owner: Some(Box::new(o)),
                    }));
                }
                if !hidden.is_empty() {
                    return Err(ClaimError::NoGpu(format!(
                        "{} GPU(s) hidden from this process by CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES / ROCR_VISIBLE_DEVICES ({}); a hidden GPU is never claimed (under Slurm it belongs to another job)",
                        hidden.len(),
                        hidden.join(", ")
                    )));
                }
                if let Some(spec) = &req.device {
                    return Err(ClaimError::NoSuchDevice(spec.clone()));
                }
                return Err(ClaimError::NoGpu(why.clone()));
            }
        };
        let mut last_busy = None;
        for cand in idle {
            // Checked before L1 is taken so the previous owner's stale record stays as it was;
            // the evidence is only ever written under L1, so a free L1 with evidence means a
            // finished owner that could not verify its cleanup.
            let marker = recovery::marker_path(&req.lock_dir, &cand.device.uuid);
            if let Some(m) = recovery::read(&marker) {
                last_busy = Some(ClaimError::RecoveryRequired {
                    uuid: cand.device.uuid.clone(),
                    path: marker,
                    summary: m.summary(),
                });
                continue;
            }
            let path = lock::lock_path(&req.lock_dir, &cand.device.uuid, Level::L1Ownership);
            let owner = lock::owner_record(&cand.device.uuid, Level::L1Ownership, &req.command);
            match HeldLock::try_acquire(&path, Level::L1Ownership, &owner) {
                Ok((l1, stale)) => {
                    let backend = cand.backend;
                    let smi_index = cand.device.smi_index;
                    let (evidence, l1) =
                        Self::finish_acquire(&mut discovery, &req, cand, l1, owner, stale)?;
                    let pending = if evidence.clocks.locked {
                        vec![Pending::ClockRestore { error: None }]
                    } else {
                        Vec::new()
                    };
                    return Ok(Claim {
                        discovery,
                        backend,
                        smi_index,
                        l1: Some(l1),
                        evidence,
                        pending,
                    });
                }
                Err(e @ LockError::Busy { .. }) => last_busy = Some(ClaimError::Lock(e)),
                Err(e) => return Err(e.into()),
            }
        }
        Err(last_busy
            .unwrap_or_else(|| ClaimError::NoneIdle("no candidate could be locked".into())))
    }

    fn finish_acquire(
        discovery: &mut Discovery,
        req: &ClaimRequest,
        cand: Candidate,
        mut l1: HeldLock,
        mut owner: LockOwner,
        stale: Option<LockOwner>,
    ) -> Result<(GpuClaim, HeldLock), ClaimError> {
        let d = &cand.device;
        // Before any clock change: a device the child cannot be restricted to is refused.
        let visible = visibility(d.vendor, &d.uuid, d.kfd_unique_id, d.runtime_index)?;
        let backend = cand.backend;
        let before = discovery
            .backend(backend)
            .and_then(|b| b.clocks(d.smi_index).ok())
            .unwrap_or_else(|| d.clocks.clone());
        let mut clocks = ClaimClocks {
            requested: req.lock_clocks.map(|r| r.to_string()),
            locked: false,
            reason: None,
            locked_sm_mhz: None,
            sm_mhz_before: before.sm_mhz,
            mem_mhz_before: before.mem_mhz,
            restored: None,
        };
        if let Some(want) = req.lock_clocks {
            let target = match want {
                ClockRequest::Base => before.sm_base_mhz.ok_or_else(|| {
                    ClockError::Resolve("the device reports no base SM clock".into())
                }),
                ClockRequest::Max => before.sm_max_mhz.ok_or_else(|| {
                    ClockError::Resolve("the device reports no maximum SM clock".into())
                }),
                ClockRequest::Mhz(m) => Ok(m),
            };
            // Record the duty to restore before touching the clocks, so a crash in between
            // leaves a stale record and recovery evidence that block the next owner.
            owner.clocks_locked = true;
            l1.update(&owner)?;
            let marker = recovery::marker_path(&req.lock_dir, &d.uuid);
            recovery::store(
                &marker,
                &recovery_record(&d.uuid, &owner, vec![Pending::ClockRestore { error: None }]),
            )?;
            let result = target.and_then(|mhz| {
                discovery
                    .backend_mut(backend)
                    .ok_or_else(|| ClockError::Failed("backend gone".into()))?
                    .lock_sm_clock(d.smi_index, mhz)
                    .map(|()| mhz)
            });
            match result {
                Ok(mhz) => {
                    clocks.locked = true;
                    clocks.locked_sm_mhz = Some(mhz);
                }
                Err(e) => {
                    // The lock call failed, so nothing is owed; the evidence goes too.
                    owner.clocks_locked = false;
                    l1.update(&owner)?;
                    recovery::remove(&marker)?;
                    if req.require_clock_lock {
                        return Err(ClaimError::Clocks(e));
                    }
                    tracing::warn!(error = %e, "clocks not locked");
                    clocks.reason = Some(e.to_string());
                }
            }
        }
        let dir = req.lock_dir.display().to_string();
        let evidence = GpuClaim {
            schema_version: kg_contract::claim::CLAIM_SCHEMA_VERSION,
            host: sys::hostname(),
            vendor: d.vendor.as_str().into(),
            backend: d.backend.clone(),
            runtime_index: d.runtime_index,
            runtime_index_basis: d.runtime_index_basis.as_str().into(),
            child_runtime_index: 0,
            visible_devices: visible.into_iter().collect(),
            smi_index: d.smi_index,
            uuid: d.uuid.clone(),
            pci_bus_id: d.pci_bus_id.clone(),
            name: d.name.clone(),
            arch: d.arch.clone(),
            memory_total_bytes: d.memory_total_bytes,
            selection: if req.device.is_some() {
                "requested".into()
            } else {
                "picked".into()
            },
            window_samples: req.pick.samples.max(1),
            window_interval_s: req.pick.interval.as_secs_f64(),
            idleness_basis: cand.idleness_basis,
            activity_before_pct: cand.peak_activity_pct,
            activity_before_mean_pct: cand.mean_activity_pct,
            memory_used_before_bytes: cand.used_bytes,
            memory_free_before_bytes: cand.free_bytes,
            activity_after_pct: None,
            memory_used_after_bytes: None,
            clocks,
            locks: ClaimLocks {
                dir,
                l1: l1.path().display().to_string(),
                l2: lock::lock_path(&req.lock_dir, &d.uuid, Level::L2Execution)
                    .display()
                    .to_string(),
            },
            owner: owner.clone(),
            stale_previous_owner: stale,
            started_utc: owner.started_utc.clone(),
            finished_utc: None,
        };
        debug_assert!(matches!(
            evidence.idleness_basis,
            IdlenessBasis::ActivityVram | IdlenessBasis::VramOnly
        ));
        Ok((evidence, l1))
    }

    /// The evidence so far (before/after fields: after is filled by [`Claim::finish`]).
    pub fn evidence(&self) -> &GpuClaim {
        &self.evidence
    }

    /// The device's runtime index in this process, when derivable.
    pub fn runtime_index(&self) -> Option<u32> {
        self.evidence.runtime_index
    }

    /// Environment for a child that must see only this device (visibility variables, and
    /// `KG_GPU_UUID`, `KG_GPU_LOCK_DIR`, `KG_GPU_L2_LOCK`, and the port's `GPU_LOCK_UUID`,
    /// `GPU_LOCK_DIR`). The child then uses index 0.
    pub fn child_env(&self) -> Env {
        let mut v: Env = self
            .evidence
            .visible_devices
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        v.push((env::KG_GPU_UUID.into(), self.evidence.uuid.clone()));
        v.push((env::KG_GPU_LOCK_DIR.into(), self.evidence.locks.dir.clone()));
        // The port's names, so its container workers find the same L2 lock.
        v.push((env::GPU_LOCK_UUID.into(), self.evidence.uuid.clone()));
        v.push((env::GPU_LOCK_DIR.into(), self.evidence.locks.dir.clone()));
        v.push((env::KG_GPU_L2_LOCK.into(), self.evidence.locks.l2.clone()));
        v
    }

    /// Samples the device once more, restores clocks, releases the lock, and returns the final
    /// evidence.
    pub fn finish(mut self) -> GpuClaim {
        self.end();
        self.evidence.clone()
    }

    /// As [`Claim::finish`], also returning what is left unverified (kept in the recovery
    /// file).
    pub fn finish_keeping_pending(mut self) -> (GpuClaim, Vec<Pending>) {
        self.end();
        (self.evidence.clone(), self.pending.clone())
    }

    fn end(&mut self) {
        if self.l1.is_none() {
            return;
        }
        if let Some(b) = self.discovery.backend(self.backend) {
            match b.sample(self.smi_index) {
                Ok(s) => {
                    self.evidence.activity_after_pct = s.activity_pct;
                    self.evidence.memory_used_after_bytes = s.memory_used_bytes;
                }
                Err(e) => tracing::warn!(error = %e, "no after-sample"),
            }
        }
        if self.evidence.clocks.locked {
            let r = self
                .discovery
                .backend_mut(self.backend)
                .ok_or_else(|| ClockError::Failed("backend gone".into()))
                .and_then(|b| b.reset_clocks(self.smi_index));
            self.pending
                .retain(|p| !matches!(p, Pending::ClockRestore { .. }));
            match r {
                Ok(()) => self.evidence.clocks.restored = Some(true),
                Err(e) => {
                    tracing::error!(error = %e, "failed to restore clocks");
                    self.evidence.clocks.restored = Some(false);
                    self.evidence.clocks.reason = Some(format!("restore failed: {e}"));
                    self.pending.push(Pending::ClockRestore {
                        error: Some(e.to_string()),
                    });
                }
            }
        }
        self.store_pending();
        self.evidence.finished_utc = Some(sys::now_utc());
        if let Some(l1) = self.l1.take() {
            if self.evidence.clocks.restored == Some(false) {
                // Keep the record: the next owner and `status` must see the unrestored clocks.
                std::mem::forget(l1);
            } else if let Err(e) = l1.release() {
                tracing::warn!(error = %e, "failed to release the L1 lock cleanly");
            }
        }
    }
}

impl Claim {
    /// Records that the claimed command's process group could not be verified gone: the
    /// recovery evidence then blocks the next owner (see [`crate::recovery`]).
    pub fn mark_cleanup_unverified(&mut self, pgid: i32, survivors: Vec<u32>) {
        self.pending.push(Pending::ChildCleanup { pgid, survivors });
        self.store_pending();
    }

    /// The recovery file of this claim's device.
    pub fn recovery_path(&self) -> PathBuf {
        recovery::marker_path(Path::new(&self.evidence.locks.dir), &self.evidence.uuid)
    }

    /// Whether this claim has left (or will leave) recovery evidence.
    pub fn recovery_pending(&self) -> &[Pending] {
        &self.pending
    }

    fn store_pending(&self) {
        let path = self.recovery_path();
        let rec = recovery_record(
            &self.evidence.uuid,
            &self.evidence.owner,
            self.pending.clone(),
        );
        if let Err(e) = recovery::store(&path, &rec) {
            tracing::error!(error = %e, "failed to update the recovery evidence");
        }
    }
}

fn recovery_record(uuid: &str, owner: &LockOwner, pending: Vec<Pending>) -> RecoveryRecord {
    RecoveryRecord {
        schema_version: recovery::SCHEMA_VERSION,
        uuid: uuid.to_string(),
        owner: owner.clone(),
        written_utc: sys::now_utc(),
        pending,
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.end();
    }
}

/// Visibility variables that restrict a child to one device, by UUID where the runtime
/// accepts one.
pub fn visibility(
    vendor: Vendor,
    uuid: &str,
    kfd_unique_id: Option<u64>,
    runtime_index: Option<u32>,
) -> Result<Env, ClaimError> {
    let mut v: Env = Vec::new();
    match vendor {
        Vendor::Nvidia | Vendor::Fake => {
            v.push((env::CUDA_VISIBLE_DEVICES.into(), uuid.to_string()));
            v.push((env::CUDA_DEVICE_ORDER.into(), "PCI_BUS_ID".into()));
        }
        Vendor::Amd => {
            if let Some(id) = kfd_unique_id {
                v.push((env::ROCR_VISIBLE_DEVICES.into(), format!("GPU-{id:x}")));
                v.push((env::HIP_VISIBLE_DEVICES.into(), "0".into()));
            } else if let Some(i) = runtime_index {
                v.push((env::HIP_VISIBLE_DEVICES.into(), i.to_string()));
            } else {
                return Err(ClaimError::Visibility {
                    uuid: uuid.to_string(),
                    reason: "neither a KFD unique id nor a HIP index is known (no readable KFD topology)".into(),
                });
            }
            v.push((env::CUDA_VISIBLE_DEVICES.into(), "0".into()));
        }
    }
    Ok(v)
}
