//! Evaluation options: device, timing method, prestart, the speed-of-light floor.

use super::*;

/// Which timing method to use on a GPU (`--timing`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimingChoice {
    /// `cupti` on a GPU (`device_event_sync` where CUPTI is unusable), `cpu_wall` on the CPU.
    #[default]
    Default,
    /// `device_event_sync` on a GPU.
    Events,
    /// CUDA-graph replay (GPU only), for launch-bound kernels.
    CudaGraph,
}

/// Settings of an evaluation.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// The device.
    pub device: DeviceChoice,
    /// Time limit per workload, for the candidate's calls (and the reference's).
    pub timeout: Duration,
    /// Time limit for starting a candidate and importing/building the solution.
    pub compile_timeout: Duration,
    /// Warm-up calls before timing.
    pub warmup: u32,
    /// Timed iterations (on the CPU, an upper bound: see `cpu_time_budget`).
    pub iterations: u32,
    /// Correctness rounds, each with fresh inputs.
    pub rounds: u32,
    /// Fixed seed instead of a secret random one (for reproducing a failure).
    pub seed: Option<u64>,
    /// Timing method choice.
    pub timing: TimingChoice,
    /// On the CPU, stop timing after this many seconds (at least 3 iterations); warm-up stops
    /// after a quarter of it.
    pub cpu_time_budget: Option<Duration>,
    /// Where C++/CUDA builds are cached.
    pub cache_dir: PathBuf,
    /// Extra environment for every worker (device visibility of a kg-gpu claim).
    pub worker_env: Vec<(String, String)>,
    /// Confine the candidate (`crate::sandbox`: limits, no network, read-only problem and
    /// script directories, private HOME/TMPDIR). Off only to measure its cost or on a host
    /// where namespaces break the device runtime; traces then say `isolation: none`.
    pub sandbox: bool,
    /// Refuse to evaluate when any sandbox layer did not hold on the candidate
    /// ([`ExecError::SandboxIncomplete`]), instead of recording the missing layer in the trace.
    pub require_sandbox: bool,
    /// The candidate's memory limit, bytes: a cgroup v2 `memory.max` where one is delegated,
    /// else RLIMIT_DATA per process (`crate::sandbox`).
    pub memory_bytes: u64,
    /// Speed-of-light floor: T_SOL (ms) per (definition, workload uuid), and where it came
    /// from; a PASSED latency below it becomes REWARD_HACK (`kg-bench evaluate --sol`).
    pub sol_floor: Option<SolFloor>,
    /// The claim holding the device, recorded in every trace's environment.
    pub gpu_claim: Option<kg_contract::GpuClaim>,
    /// Whether the candidate processes of the evaluations due next start while the current
    /// one is evaluated ([`Session::prestart_next`]).
    pub prestart: Prestart,
    /// Whether a Triton solution whose candidate starts ahead of time on a CUDA device also
    /// gets its first calls' kernels compiled ahead, by a precompiler with no GPU
    /// ([`Session::prestart_next`]).
    pub precompile: bool,
    /// How long a workload's reference timing, taken with one candidate, serves later
    /// candidates of the same workload in this session (`--reference-reuse`); `None` times
    /// the reference with every candidate.
    pub reference_reuse: Option<Duration>,
}

/// Whether candidate processes start while an earlier evaluation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Prestart {
    /// On, except on a CPU device (the cores it would use run the timed workload).
    #[default]
    Auto,
    /// On, also on a CPU device.
    On,
    /// Never: each candidate process starts when its evaluation begins.
    Off,
}

impl EvalOptions {
    /// The defaults of `kg-bench evaluate` for a device.
    pub fn new(device: DeviceChoice) -> Self {
        EvalOptions {
            device,
            timeout: Duration::from_secs(600),
            compile_timeout: Duration::from_secs(120),
            warmup: 10,
            iterations: 50,
            rounds: 10,
            seed: None,
            timing: TimingChoice::Default,
            cpu_time_budget: Some(Duration::from_millis(500)),
            cache_dir: default_cache_dir(),
            worker_env: Vec::new(),
            sandbox: true,
            require_sandbox: false,
            memory_bytes: crate::sandbox::default_memory_bytes(),
            sol_floor: None,
            gpu_claim: None,
            prestart: Prestart::Auto,
            precompile: true,
            reference_reuse: None,
        }
    }

    /// The timing method these options produce.
    pub fn timing_method(&self) -> TimingMethod {
        match (&self.device, self.timing) {
            (DeviceChoice::Cpu, _) => TimingMethod::CpuWall,
            (_, TimingChoice::CudaGraph) => TimingMethod::CudaGraph,
            // CUPTI is NVIDIA's; on ROCm the default is HIP events (unverified on AMD hardware).
            (DeviceChoice::Rocm(_), TimingChoice::Default) => TimingMethod::DeviceEventSync,
            (_, TimingChoice::Default) => TimingMethod::Cupti,
            (_, TimingChoice::Events) => TimingMethod::DeviceEventSync,
        }
    }
}

/// Speed-of-light bounds an evaluation checks latencies against.
#[derive(Debug, Clone, Default)]
pub struct SolFloor {
    /// T_SOL in ms, keyed by (definition name, workload uuid).
    pub t_sol_ms: IndexMap<(String, String), f64>,
    /// Where the bounds came from (a path), for the log.
    pub source: String,
}

impl SolFloor {
    /// REWARD_HACK when `outcome` PASSED with a latency below the bound for this workload:
    /// faster than the hardware allows means the timing was fooled (or the bound is wrong,
    /// which a reviewer must see either way, never a score).
    pub(super) fn check(&self, definition: &str, workload: &str, outcome: Outcome) -> Outcome {
        let key = (definition.to_string(), workload.to_string());
        let (Some(t_sol), Some(p)) = (self.t_sol_ms.get(&key), outcome.performance.as_ref()) else {
            return outcome;
        };
        if outcome.status != Status::Passed {
            return outcome;
        }
        if p.latency_ms >= *t_sol {
            let mut outcome = outcome;
            outcome.log.push_str(&format!(
                "harness: speed-of-light floor: T_SOL = {t_sol:.6} ms (from `{}`), latency above it\n",
                self.source
            ));
            return outcome;
        }
        let msg = format!(
            "speed-of-light floor: latency {:.6} ms is below T_SOL = {t_sol:.6} ms for this workload (from `{}`); faster than the hardware allows, so the timing was fooled or the bound is wrong\n{}",
            p.latency_ms, self.source, outcome.log
        );
        Outcome::fail(Status::RewardHack, Reason::FasterThanSol, msg)
    }
}

/// `$KG_CACHE_DIR`, else `$XDG_CACHE_HOME/kernelgate`, else `~/.cache/kernelgate`, else a temp dir.
pub fn default_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("KG_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("kernelgate");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("kernelgate");
    }
    std::env::temp_dir().join("kernelgate-cache")
}
