//! `kg-gpu`: which GPU is idle, who holds it, and run a command on one exclusively.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use kg_gpu::lock::{self, LockState};
use kg_gpu::pick::{self, GIB, PickOptions};
use kg_gpu::{BackendSelection, Claim, ClaimRequest, ClockRequest, Discovery, PickOutcome};

/// Exit codes of every subcommand, in `kg-gpu --help` (docs/kg-gpu.md has them too).
const EXIT_CODES: &str = "Exit codes:
  list    0, also with no GPU (an empty list and the reasons); 2 bad input
  pick    0 picked, 1 none idle, 2 SMI error or bad input, 3 no GPU
  claim   CMD's exit code (128+signal if a signal ended it); if CMD never ran: 1 none idle,
          2 error (SMI failure, clocks required but not lockable, bad input), 3 no GPU,
          4 device held by another process, 5 device needs recovery (`kg-gpu recover`)
  status  0; 2 when the lock directory cannot be read
  recover 0 recovered (or nothing to recover), 2 not verified (the evidence is kept),
          4 device held by another process";

/// Find, claim and own GPUs (NVIDIA through NVML, AMD through AMD SMI), with evidence.
#[derive(Parser)]
#[command(name = "kg-gpu", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// List devices and each backend's availability (exit 0, also with no GPU).
    #[command(
        after_help = "Exit codes:\n  0  listed, also with no GPU (an empty list and the reasons)\n  2  bad input"
    )]
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Pick an idle device over a sampling window; prints its runtime index.
    /// Exit 0 picked, 1 none idle, 2 SMI error, 3 no GPU.
    #[command(
        after_help = "Exit codes:\n  0  picked\n  1  none idle\n  2  SMI error or bad input\n  3  no GPU"
    )]
    Pick {
        #[command(flatten)]
        window: Window,
        /// Print only the index (no table).
        #[arg(long)]
        quiet: bool,
        /// Print every idle device in order, not only the best.
        #[arg(long)]
        all: bool,
        /// Print the full report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Claim a device, run CMD with only that device visible and the claim evidence in
    /// the file named by KG_GPU_CLAIM, then release. Exit code: CMD's; if no command ran,
    /// 1 none idle, 2 error, 3 no GPU, 4 device held by another process, 5 needs recovery.
    #[command(
        after_help = "Exit codes:\n  CMD's exit code (128+signal if a signal ended it); if CMD never ran:\n  1  none idle\n  2  error (SMI failure, clocks required but not lockable, bad input)\n  3  no GPU\n  4  device held by another process\n  5  device needs recovery: a previous owner's cleanup or clock restore is unverified (`kg-gpu recover`)"
    )]
    Claim {
        #[command(flatten)]
        window: Window,
        /// Lock the SM clock: base, max, or a frequency in MHz; restored when the claim ends.
        #[arg(long, value_name = "base|max|MHZ")]
        lock_clocks: Option<ClockRequest>,
        /// Refuse (exit 2) instead of running with `clocks.locked: false` when clocks cannot
        /// be locked.
        #[arg(long, requires = "lock_clocks")]
        require_clock_lock: bool,
        /// Claim this device (UUID, UUID prefix or PCI bus id) instead of picking one; it must
        /// still pass the idleness thresholds. Default: GPU_LOCK_UUID (a full UUID), if set.
        #[arg(long)]
        device: Option<String>,
        /// Keep the claim evidence JSON here (default: a temporary file).
        #[arg(long)]
        evidence: Option<PathBuf>,
        /// The command and its arguments.
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
    /// Show who holds which GPU lock, since when, and whether records are live or stale.
    #[command(after_help = "Exit codes:\n  0  shown\n  2  the lock directory cannot be read")]
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Clear a device's recovery evidence after redoing what it says is unverified: reset the
    /// clocks, check the old process group is gone. Takes the device's L1 lock meanwhile.
    #[command(
        after_help = "Exit codes:\n  0  recovered, or nothing to recover\n  2  not verified (the evidence is kept) or bad input\n  4  device held by another process"
    )]
    Recover {
        /// The device's full UUID (default: GPU_LOCK_UUID).
        #[arg(long)]
        device: Option<String>,
        /// Clear what cannot be verified from here (another host's process group, an
        /// unreadable file) instead of refusing.
        #[arg(long)]
        force: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args)]
struct Window {
    /// Samples per device.
    #[arg(long, default_value_t = 10)]
    samples: u32,
    /// Seconds between samples.
    #[arg(long, default_value_t = 1.0)]
    interval: f64,
    /// Largest allowed peak activity, %.
    #[arg(long, default_value_t = 2.0)]
    max_activity: f64,
    /// Largest allowed used memory, GiB.
    #[arg(long, default_value_t = 2.0)]
    max_used_gib: f64,
    /// Smallest required free memory, GiB.
    #[arg(long, default_value_t = 16.0)]
    min_free_gib: f64,
}

impl Window {
    fn options(&self) -> anyhow::Result<PickOptions> {
        anyhow::ensure!(
            self.interval.is_finite() && self.interval >= 0.0,
            "--interval must be a non-negative number of seconds"
        );
        Ok(PickOptions {
            samples: self.samples.max(1),
            interval: Duration::from_secs_f64(self.interval),
            max_peak_activity_pct: self.max_activity,
            max_used_bytes: (self.max_used_gib * GIB as f64) as u64,
            min_free_bytes: (self.min_free_gib * GIB as f64) as u64,
        })
    }
}

fn gib(b: Option<u64>) -> String {
    b.map(|b| format!("{:.1}", b as f64 / GIB as f64))
        .unwrap_or_else(|| "?".into())
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}

fn main() -> ExitCode {
    kg_cli::init_logging("warn");
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<i32> {
    match cli.command {
        Cmd::List { json } => list(json),
        Cmd::Pick {
            window,
            quiet,
            all,
            json,
        } => pick_cmd(&window, quiet, all, json),
        Cmd::Claim {
            window,
            lock_clocks,
            require_clock_lock,
            device,
            evidence,
            cmd,
        } => claim_cmd(
            &window,
            lock_clocks,
            require_clock_lock,
            device,
            evidence,
            cmd,
        ),
        Cmd::Status { json } => status(json),
        Cmd::Recover {
            device,
            force,
            json,
        } => recover(device, force, json),
    }
}

fn list(json: bool) -> anyhow::Result<i32> {
    let discovery = Discovery::load(&BackendSelection::from_env()?);
    let (devices, error) = match discovery.devices() {
        Ok(d) => (d, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    if json {
        let v = serde_json::json!({
            "backends": discovery.statuses(),
            "devices": devices.iter().map(|f| &f.info).collect::<Vec<_>>(),
            "error": error,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        for s in discovery.statuses() {
            match &s.reason {
                Some(r) => println!("backend {}: {}", s.name, r),
                None => println!("backend {}: available", s.name),
            }
        }
        if let Some(e) = &error {
            println!("error: {e}");
        }
        println!("{} device(s)", devices.len());
        for f in &devices {
            let d = &f.info;
            println!(
                "[runtime {} ({}) | smi {}] {} {} {} arch={} mem used/total={}/{} GiB activity={}% sm={}/{} MHz mem={}/{} MHz temp={}C power={}W processes={}\n    uuid={}",
                opt(d.runtime_index),
                d.runtime_index_basis.as_str(),
                d.smi_index,
                d.vendor.as_str(),
                d.pci_bus_id,
                d.name,
                opt(d.arch.as_ref()),
                gib(d.sample.memory_used_bytes),
                gib(d.memory_total_bytes),
                opt(d.sample.activity_pct),
                opt(d.clocks.sm_mhz),
                opt(d.clocks.sm_max_mhz),
                opt(d.clocks.mem_mhz),
                opt(d.clocks.mem_max_mhz),
                opt(d.temperature_c),
                opt(d.power_w.map(|w| format!("{w:.0}"))),
                d.processes
                    .as_ref()
                    .map(|p| p.len().to_string())
                    .unwrap_or_else(|| "not reported".into()),
                d.uuid,
            );
        }
    }
    Ok(0)
}

fn index_or_uuid(c: &pick::Candidate) -> String {
    match c.device.runtime_index {
        Some(i) => i.to_string(),
        None => {
            eprintln!(
                "warning: runtime index of {} unknown ({}); printing its UUID instead",
                c.device.uuid,
                c.device.runtime_index_basis.as_str()
            );
            c.device.uuid.clone()
        }
    }
}

fn pick_cmd(window: &Window, quiet: bool, all: bool, json: bool) -> anyhow::Result<i32> {
    let opts = window.options()?;
    let discovery = Discovery::load(&BackendSelection::from_env()?);
    let report = pick::pick(&discovery, &opts, &|_| true);
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(report.exit_code());
    }
    if !quiet {
        for c in &report.candidates {
            eprintln!(
                "{} {} {} basis={} peak={} mean={} used={} GiB free={} GiB {}",
                if c.idle { "idle" } else { "busy" },
                opt(c.device.runtime_index),
                c.device.uuid,
                c.idleness_basis.as_str(),
                opt(c.peak_activity_pct),
                opt(c.mean_activity_pct.map(|m| format!("{m:.1}"))),
                gib(c.used_bytes),
                gib(c.free_bytes),
                c.reasons.join(", ")
            );
        }
    }
    match &report.outcome {
        PickOutcome::Picked => {
            if all {
                for c in report.idle() {
                    println!("{}", index_or_uuid(c));
                }
            } else if let Some(c) = report.picked() {
                println!("{}", index_or_uuid(c));
            }
        }
        PickOutcome::NoneIdle => eprintln!("no idle GPU"),
        PickOutcome::SmiError(e) => eprintln!("error: SMI query failed: {e}"),
        PickOutcome::NoGpu(why) => eprintln!("no GPU: {why}"),
    }
    Ok(report.exit_code())
}

fn claim_cmd(
    window: &Window,
    lock_clocks: Option<ClockRequest>,
    require_clock_lock: bool,
    device: Option<String>,
    evidence: Option<PathBuf>,
    cmd: Vec<String>,
) -> anyhow::Result<i32> {
    let mut req = ClaimRequest::from_env(cmd.clone())?;
    req.pick = window.options()?;
    req.lock_clocks = lock_clocks;
    req.require_clock_lock = require_clock_lock;
    if let (Some(flag), Some(env)) = (&device, &req.device)
        && flag != env
    {
        anyhow::bail!(
            "--device {flag} and GPU_LOCK_UUID {env} name different devices; pass one of them"
        );
    }
    if device.is_some() {
        req.device = device;
    }
    let claim = match Claim::acquire(req) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(e.exit_code());
        }
    };
    let ev = claim.evidence();
    eprintln!(
        "claimed {} ({}, {}), runtime index {} ({}), idleness {}; clocks locked: {}{}",
        ev.uuid,
        ev.name,
        ev.pci_bus_id,
        opt(ev.runtime_index),
        ev.runtime_index_basis,
        ev.idleness_basis.as_str(),
        ev.clocks.locked,
        ev.clocks
            .reason
            .as_ref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    );
    let tmp;
    let path = match evidence {
        Some(p) => p,
        None => {
            tmp = tempfile_dir()?;
            tmp.join("claim.json")
        }
    };
    let outcome = kg_gpu::run_claimed(claim, &cmd, &path)?;
    if let Some(rec) = outcome.recovery.as_ref() {
        eprintln!(
            "error: cleanup not verified; recovery evidence `{}` now blocks the next claim: {}",
            rec.display(),
            outcome
                .recovery_pending
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    if outcome.evidence.clocks.restored == Some(false) {
        eprintln!(
            "error: clocks were NOT restored: {}",
            opt(outcome.evidence.clocks.reason.as_ref())
        );
    }
    Ok(outcome.exit_code)
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("kg-gpu-claim-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn recover(device: Option<String>, force: bool, json: bool) -> anyhow::Result<i32> {
    let locks = lock::lock_env()?;
    let uuid = match (device, locks.uuid) {
        (Some(d), Some(e)) if d != e => {
            anyhow::bail!("--device {d} and GPU_LOCK_UUID {e} name different devices")
        }
        (Some(d), _) | (None, Some(d)) => d,
        (None, None) => anyhow::bail!("name the device: --device UUID (or GPU_LOCK_UUID)"),
    };
    anyhow::ensure!(
        lock::is_full_uuid(&uuid),
        "`{uuid}` is not a full device UUID; `kg-gpu status` lists the devices with recovery evidence"
    );
    let backends = BackendSelection::from_env()?;
    match kg_gpu::recovery::recover(&locks.dir, &uuid, &backends, force) {
        Ok(out) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                for a in &out.actions {
                    println!("{a}");
                }
                if let Some(r) = &out.cleared {
                    println!(
                        "cleared recovery evidence `{}`: {}",
                        out.path.display(),
                        r.summary()
                    );
                }
            }
            Ok(0)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(match e {
                kg_gpu::ClaimError::Lock(kg_gpu::LockError::Busy { .. }) => {
                    kg_gpu::claim_exit::BUSY
                }
                _ => kg_gpu::claim_exit::ERROR,
            })
        }
    }
}

fn status(json: bool) -> anyhow::Result<i32> {
    let dir = lock::lock_dir_from_env();
    let st = lock::status(&dir)?;
    let rec = kg_gpu::recovery::list(&dir)?;
    if json {
        let v = serde_json::json!({ "lock_dir": dir, "locks": st, "recovery": rec });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(0);
    }
    println!("lock dir {}", dir.display());
    for r in &rec {
        println!(
            "{} NEEDS RECOVERY: {}\n    evidence `{}`; clear with `kg-gpu recover --device {}`",
            r.uuid,
            r.summary,
            r.path.display(),
            r.uuid
        );
    }
    if st.is_empty() {
        println!("no locks");
    }
    for s in &st {
        let who = s
            .owner
            .as_ref()
            .map(|o| {
                format!(
                    " pid {} on {} since {} `{}`{}",
                    o.pid,
                    o.host,
                    o.started_utc,
                    o.command.join(" "),
                    if o.clocks_locked {
                        " clocks-locked"
                    } else {
                        ""
                    }
                )
            })
            .unwrap_or_default();
        let state = match s.state {
            LockState::Held => "held",
            LockState::HeldUnverified => "held (owner unverified)",
            LockState::Free => "free",
            LockState::Stale => "STALE (owner died without releasing)",
        };
        println!("{} {} {}{}", s.uuid, s.level.as_str(), state, who);
        if s.clocks_possibly_locked {
            println!("    warning: the stale owner had locked clocks and never restored them");
        }
    }
    Ok(0)
}
