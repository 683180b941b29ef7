//! What every subcommand that evaluates sets up: the interpreter, the device claim or lanes, and the evaluation options from the flags.

use super::*;

/// Resolves Python and probes it.
pub(crate) fn interpreter(
    env: &EnvArgs,
) -> Result<(kg_exec::Interpreter, kg_exec::ProbeInfo), Failure> {
    let cwd = std::env::current_dir().map_err(usage)?;
    let interp = kg_exec::find_python_env(env.python.as_deref(), &cwd).map_err(usage)?;
    // Cached by the interpreter's files, its import path, device visibility and the driver:
    // importing torch to ask costs seconds per command.
    let (info, cached) =
        kg_exec::probe_cached(&interp, &kg_exec::engine::default_cache_dir()).map_err(usage)?;
    tracing::info!(python = %interp.path.display(), torch = %info.torch, cached, "interpreter");
    Ok((interp, info))
}

pub(crate) fn acquire_options(env: &EnvArgs) -> AcquireOptions {
    AcquireOptions {
        lock_clocks: env.lock_clocks,
        command: std::env::args().collect(),
        ..AcquireOptions::default()
    }
}

/// Says what was acquired: the notice, and each claim.
pub(crate) fn announce(acquired: &Acquired) {
    if let Some(n) = &acquired.notice {
        eprintln!("notice: {n}");
    }
    if let Some(c) = &acquired.evidence {
        eprintln!(
            "claimed {} {} ({}), clocks {}",
            c.name,
            c.uuid,
            c.pci_bus_id,
            if c.clocks.locked {
                "locked"
            } else {
                "not locked"
            }
        );
    }
}

/// Resolves Python, probes it, and acquires the device (claiming a GPU through kg-gpu for
/// `auto`). The returned [`Acquired`] holds the claim: keep it alive for the whole run.
pub(crate) fn prepare_env(env: &EnvArgs) -> Result<(kg_exec::Interpreter, Acquired), Failure> {
    let request: DeviceRequest = env.device.parse().map_err(|e: String| usage(anyhow!(e)))?;
    let (interp, info) = interpreter(env)?;
    let acquired =
        kg_exec::placement::acquire(request, &info, &acquire_options(env)).map_err(usage)?;
    announce(&acquired);
    Ok((interp, acquired))
}

/// As [`prepare_env`] for `--gpus`: one claimed GPU per lane (never the CPU).
pub(crate) fn prepare_lanes(
    env: &EnvArgs,
    gpus: &str,
) -> Result<(kg_exec::Interpreter, Vec<Acquired>), Failure> {
    let set: GpuSet = gpus
        .parse()
        .map_err(|e: String| usage(anyhow!("--gpus: {e}")))?;
    if env.device != "auto" {
        return Err(usage(anyhow!(
            "--gpus claims GPUs through kg-gpu and goes with --device auto (got --device {}); for one device unclaimed use --device cuda:N alone",
            env.device
        )));
    }
    let (interp, info) = interpreter(env)?;
    let (lanes, notice) =
        kg_exec::placement::acquire_lanes(&set, &info, &acquire_options(env)).map_err(usage)?;
    if let Some(n) = notice {
        eprintln!("notice: {n}");
    }
    for a in &lanes {
        announce(a);
    }
    Ok((interp, lanes))
}

/// `--memory-limit`: a byte count with an optional K/M/G/T suffix (powers of 1024).
pub(crate) fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => return Err(format!("unknown unit `{c}` in `{s}` (use K, M, G or T)")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a byte count such as 8G or 512M"))?;
    let bytes = n
        .checked_mul(mult)
        .ok_or_else(|| format!("`{s}` is too large"))?;
    if bytes < 64 << 20 {
        return Err(format!(
            "`{s}` is below 64M, too little to start Python and torch"
        ));
    }
    Ok(bytes)
}

/// `--reference-reuse`: how long a reference timing serves later candidates (None: never).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ReuseAge(pub(crate) Option<Duration>);

/// Parses `--reference-reuse`: `off`, or a positive number of seconds.
pub(crate) fn parse_reuse(s: &str) -> Result<ReuseAge, String> {
    if s == "off" {
        return Ok(ReuseAge(None));
    }
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(ReuseAge(Some(Duration::from_secs_f64(v)))),
        _ => Err(format!(
            "`{s}` is neither `off` nor a positive number of seconds (e.g. `60`)"
        )),
    }
}

pub(crate) fn options(acq: &Acquired, a: &EvalArgs) -> Result<EvalOptions, Failure> {
    let secs = |name: &str, v: f64| -> Result<Duration, Failure> {
        if v.is_finite() && v > 0.0 {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(usage(anyhow!(
                "--{name} must be a positive number of seconds, got {v}"
            )))
        }
    };
    let mut o = acq.eval_options();
    o.timeout = secs("timeout", a.timeout)?;
    o.compile_timeout = secs("compile-timeout", a.compile_timeout)?;
    o.warmup = a.warmup;
    o.iterations = a.iterations.max(1);
    o.rounds = a.rounds.max(1);
    o.seed = a.seed;
    o.sandbox = !a.no_sandbox;
    o.require_sandbox = a.require_sandbox;
    o.precompile = a.precompile == OnOff::On;
    o.reference_reuse = a.reference_reuse.0;
    if let Some(m) = a.memory_limit {
        o.memory_bytes = m;
    }
    if let Some(p) = &a.sol {
        let t_sol_ms = kg_score::load_sol(p).map_err(|e| usage(anyhow!("--sol: {e}")))?;
        o.sol_floor = Some(kg_exec::SolFloor {
            t_sol_ms,
            source: p.display().to_string(),
        });
    }
    o.timing = match a.timing {
        TimingArg::Default => TimingChoice::Default,
        TimingArg::Events => {
            if o.device.is_cpu() {
                return Err(usage(anyhow!(
                    "--timing events needs a GPU, but the device is the CPU"
                )));
            }
            TimingChoice::Events
        }
        TimingArg::CudaGraph => {
            if o.device.is_cpu() {
                return Err(usage(anyhow!(
                    "--timing cuda-graph needs a GPU, but the device is the CPU"
                )));
            }
            TimingChoice::CudaGraph
        }
    };
    Ok(o)
}
