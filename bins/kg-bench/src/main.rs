//! `kg-bench`: evaluate kernels against SOL-ExecBench-format problems (see `docs/kg-bench.md`).
//!
//! Thin binary: argument parsing, progress, tables and exit codes; the work is in kg-exec.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod cache_cmd;
mod compare_cmd;
mod output;
mod report_cmd;
mod score_cmd;
mod solar_cmd;
mod verify_cmd;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use clap::{Args, Parser, Subcommand, ValueEnum};
use indexmap::IndexMap;
use kg_contract::chain;
use kg_contract::{Problem, Status, Trace, exit, load_solution};
use kg_exec::corpus::{self, CpuEstimate, SolCoverage, SolutionSource};
use kg_exec::device::{AcquireOptions, Acquired, GpuSet};
use kg_exec::engine::{ExecError, check_languages};
use kg_exec::lanes::Lane;
use kg_exec::runner::{
    BuildEnd, CorpusPlan, CorpusRunner, PlanOptions, Reporter, RunConfig, RunEvent, RunnerError,
    SkipReason,
};
use kg_exec::{CancelToken, DeviceRequest, EvalOptions, Event, Session, TimingChoice};

/// Exit codes, in every subcommand's `--help` (docs/kg-bench.md has them too).
const EXIT_TOP: &str = "Exit codes (each subcommand's --help has its own):
  0    success: everything passed / verified
  1    the command ran and something did not pass, verify or load
  2    bad input or an unusable environment (the message names the file, field or missing piece)
  3    no verdict: kernelgate's own plumbing failed twice on one workload (a harness fault);
       that workload has no trace and no kernel is blamed
  130  interrupted by Ctrl-C/SIGTERM (evaluate, run): every worker killed first";
const EXIT_EVALUATE: &str = "Exit codes:
  0    every workload PASSED
  1    a workload did not pass
  2    bad input or an unusable environment (unsupported language, missing toolchain, no torch,
       a file that does not load): nothing was evaluated
  3    no verdict: kernelgate's own plumbing failed twice on one workload (a harness fault);
       that workload has no trace and no kernel is blamed
  130  interrupted by Ctrl-C/SIGTERM: every worker killed, then the finished workloads' traces
       written";
const EXIT_RUN: &str = "Exit codes:
  0    every evaluated workload PASSED and every problem loaded (pairs refused up front, listed
       on stderr and in summary.json's `refused`, do not change it)
  1    a workload did not pass, or a problem failed to load
  2    bad input or an unusable environment, a --filter that matches nothing, or every selected
       solution refused (nothing could run here): nothing was evaluated
  3    no verdict: kernelgate's own plumbing failed twice on one workload (a harness fault);
       that workload has no trace and no kernel is blamed; or a lane of --gpus/--jobs stopped
       (named): the other lanes' traces are written, no summary.json is
  130  interrupted by Ctrl-C/SIGTERM: every worker killed, finished traces written

On the CPU, Triton runs through its interpreter (hundreds of ns per element per call):
kg-bench warns up front when a run is estimated to take long; `--max-workloads 1 --rounds 2`
keeps a first look short.";
const EXIT_VALIDATE: &str = "Exit codes:
  0    every problem is usable
  1    a problem is BAD (a load error, a reference that fails its checks, a definition name that
       another problem defines differently)
  2    bad input or an unusable environment";
const EXIT_SOLAR: &str = "Exit codes:
  0    every problem analysed
  1    a problem could not be analysed (named on stderr)
  2    bad input or an unusable environment";
const EXIT_SCORE: &str = "Exit codes:
  0    computed / verified
  2    bad input, or a bundle or artifact that does not verify (named)";
const EXIT_VERIFY: &str = "Exit codes:
  0    everything verified
  1    something did not verify (tampered, torn, unchained, another problem, wrong signer)
  2    usage errors; files, keys or problem directories that cannot be read";
const EXIT_KEYGEN: &str = "Exit codes:
  0    key pair written
  2    the file exists or cannot be written";

/// Evidence-grade kernel evaluation on SOL-ExecBench-format problems.
#[derive(Parser)]
#[command(name = "kg-bench", version, after_help = EXIT_TOP)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate one solution on one problem; writes one trace per workload.
    #[command(after_help = EXIT_EVALUATE)]
    Evaluate(EvaluateArgs),
    /// Evaluate every problem of a corpus (default: each problem's own reference).
    #[command(after_help = EXIT_RUN)]
    Run(RunArgs),
    /// Work on corpora.
    Dataset {
        #[command(subcommand)]
        command: DatasetCommand,
    },
    /// Speed-of-light analysis of a problem's reference.
    #[command(subcommand, after_help = EXIT_SOLAR)]
    Solar(solar_cmd::SolarCommand),
    /// SOL score and release bundles.
    #[command(subcommand, after_help = EXIT_SCORE)]
    Score(score_cmd::ScoreCommand),
    /// Check trace files: every line's hash chain and seal, its problem's tree hash
    /// (--problem), its signature (--pubkey) and the file's end (--summary, --head).
    #[command(after_help = EXIT_VERIFY)]
    Verify(verify_cmd::VerifyArgs),
    /// Write an Ed25519 key pair for --sign-key (private OUT, mode 0600; public OUT.pub).
    #[command(after_help = EXIT_KEYGEN)]
    Keygen(verify_cmd::KeygenArgs),
    /// Write one self-contained HTML report of runs or trace files: header, roofline, table,
    /// speedups.
    #[command(after_help = report_cmd::EXIT_REPORT)]
    Report(report_cmd::ReportArgs),
    /// Compare two runs per workload: latency ratio with a confidence interval; exit 1 on a
    /// significant regression.
    #[command(after_help = compare_cmd::EXIT_COMPARE)]
    Compare(compare_cmd::CompareArgs),
    /// The build cache of compiled solutions (cuda_cpp, hip_cpp): list or clean it.
    #[command(subcommand, after_help = cache_cmd::EXIT_CACHE)]
    Cache(cache_cmd::CacheCommand),
}

#[derive(Subcommand)]
enum DatasetCommand {
    /// Check a corpus: schemas, axes, duplicate definition names, and each reference run on
    /// its smallest workload.
    #[command(after_help = EXIT_VALIDATE)]
    Validate(ValidateArgs),
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum TimingArg {
    /// On a GPU, CUPTI device-activity spans (device_event_sync where CUPTI is unusable); on the
    /// CPU, cpu_wall.
    Default,
    /// device_event_sync: device events bracketed by device-wide syncs (GPU only).
    Events,
    /// CUDA-graph replay, per launch; for launch-bound kernels (GPU only).
    CudaGraph,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum PrestartArg {
    /// On, except on the CPU (whose cores the timed workload uses).
    Auto,
    /// On, also on the CPU.
    On,
    /// Off: each candidate process starts when its evaluation begins.
    Off,
}

#[derive(Args, Clone)]
struct EnvArgs {
    /// auto, cpu, cuda:N or rocm:N (auto: an idle GPU claimed through kg-gpu, else the CPU with a
    /// notice; cuda:N/rocm:N use that device unclaimed).
    #[arg(long, default_value = "auto")]
    device: String,
    /// Python interpreter (else $PYTHON_BIN, else .venv/bin/python here or above, else python3).
    #[arg(long)]
    python: Option<PathBuf>,
    /// Lock the SM clock to its maximum for the run through the kg-gpu claim (with --device auto),
    /// restored afterwards; exit 2 when clocks cannot be locked (fail closed).
    #[arg(long)]
    lock_clocks: bool,
    /// Print results as JSON on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Quieter: no per-workload progress lines and no skip notices on stderr (warnings, errors
    /// and the final table stay).
    #[arg(short, long, conflicts_with = "verbose")]
    quiet: bool,
    /// More: a line when each workload starts (also outside a terminal), and each failed
    /// workload's reason in its progress line.
    #[arg(short, long)]
    verbose: bool,
}

#[derive(Args, Clone)]
struct EvalArgs {
    /// Seconds allowed per workload for the candidate's calls.
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
    /// Seconds allowed to start the candidate and build/import the solution.
    #[arg(long, default_value_t = 120.0)]
    compile_timeout: f64,
    /// Warm-up calls before timing.
    #[arg(long, default_value_t = 10)]
    warmup: u32,
    /// Timed iterations (on the CPU at most this many, within a 0.5 s budget).
    #[arg(long, default_value_t = 50)]
    iterations: u32,
    /// Correctness rounds, each with fresh inputs.
    #[arg(long, default_value_t = 10)]
    rounds: u32,
    /// Fixed input seed (default: a secret random seed per run).
    #[arg(long)]
    seed: Option<u64>,
    /// Timing method on a GPU.
    #[arg(long, value_enum, default_value = "default")]
    timing: TimingArg,
    /// Evaluate at most N workloads per problem (in file order); with --rounds, what keeps a
    /// CPU run short (e.g. `--max-workloads 1 --rounds 2`).
    #[arg(long)]
    max_workloads: Option<usize>,
    /// Run the candidate without its sandbox (resource limits, no network, read-only problem
    /// directory, private HOME/TMPDIR); for measuring its cost, or where namespaces break the
    /// GPU runtime. Every trace log then says `isolation: none`.
    #[arg(long)]
    no_sandbox: bool,
    /// Refuse to evaluate (exit 2) when any layer of the candidate's sandbox does not hold on
    /// this host, instead of recording the missing layers in each trace.
    #[arg(long, conflicts_with = "no_sandbox")]
    require_sandbox: bool,
    /// Memory limit of each candidate process (RLIMIT_DATA), e.g. `8G`, `512M` (default: half
    /// the host's memory).
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    memory_limit: Option<u64>,
    /// Speed-of-light bounds (a directory of `solar analyze` outputs, or JSONL of
    /// {"definition", "workload", "t_sol_ms"}): a PASSED latency below T_SOL is REWARD_HACK.
    #[arg(long, value_name = "SOL")]
    sol: Option<PathBuf>,
    /// Sign every trace line (and `run`'s summary chain record) with this Ed25519 private key
    /// (`kg-bench keygen`); read by kg-bench before any worker starts, never passed to one.
    #[arg(long, value_name = "FILE")]
    sign_key: Option<PathBuf>,
    /// Also write the results as JUnit XML (a testcase per workload; a status other than PASSED
    /// is a failure, INVALID_REFERENCE an error, a refused pair skipped) for CI test reports.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
}

#[derive(Args)]
struct EvaluateArgs {
    /// Problem directory with definition.json and workload.jsonl.
    problem_dir: Option<PathBuf>,
    /// Solution JSON file, or `reference` for the problem's own reference (a speedup near 1.0x
    /// then shows the timing is even-handed).
    #[arg(long)]
    solution: PathBuf,
    /// Definition file (instead of PROBLEM_DIR; needs --workload).
    #[arg(long, requires = "workload", conflicts_with = "problem_dir")]
    definition: Option<PathBuf>,
    /// Workload JSONL file (with --definition).
    #[arg(long, requires = "definition")]
    workload: Option<PathBuf>,
    /// Append traces (JSONL, one line per workload, atomically) to this file.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Only these workload uuids (comma-separated).
    #[arg(long, value_delimiter = ',')]
    workloads: Option<Vec<String>>,
    #[command(flatten)]
    env: EnvArgs,
    #[command(flatten)]
    eval: EvalArgs,
}

#[derive(Args)]
struct RunArgs {
    /// Corpus directory (problem directories at any depth below).
    corpus_dir: PathBuf,
    /// `reference` (each problem's own reference), `bundled` (each problem's solutions/*.json
    /// and solution_*.json beside its definition.json), or DIR (DIR/<problem path>/*.json, else
    /// DIR/<definition name>/*.json).
    #[arg(long, default_value = "reference")]
    solutions: String,
    /// Output directory: OUTDIR/<problem path>/<solution>.jsonl and OUTDIR/summary.json (the
    /// problem path is its directory relative to CORPUS_DIR).
    #[arg(short, long, default_value = "kg-results")]
    output: PathBuf,
    /// Evaluate problems again even when their traces are complete.
    #[arg(long)]
    rerun: bool,
    /// Evaluate again only the problem/solution pairs whose earlier traces did not all pass
    /// (or are not complete); pairs whose traces all PASSED are skipped.
    #[arg(long, conflicts_with = "rerun")]
    rerun_failed: bool,
    /// Only the problem/solution pairs this expression matches (repeatable: any of them).
    /// Terms joined by `&`, each `[!][problem:|definition:|solution:|language:]PATTERN`; a bare
    /// pattern matches the problem path, definition or solution name; `*`/`?` glob the whole
    /// value, else a substring. E.g. `rmsnorm`, `language:triton & !problem:cuda*`.
    #[arg(long, value_name = "EXPR")]
    filter: Vec<String>,
    /// Start the next pairs' candidate processes (up to 5; interpreter and `import torch`, none
    /// of their code) while the current pair is evaluated, so each is ready when its turn comes.
    /// Only where
    /// every candidate runs in its own PID namespace and read-only view (the sandbox); the
    /// trace's `candidate_start` says when each process started.
    #[arg(long, value_enum, default_value = "auto")]
    prestart: PrestartArg,
    /// Spread the run over GPUs, one lane (judge and candidate) per GPU, each under its own
    /// kg-gpu claim and L2 execution lock: `all` (every GPU that can be claimed), a count
    /// (`2`), or UUIDs / PCI bus ids separated by commas. The most expensive pairs go first;
    /// traces and summary.json are as a one-GPU run writes them, each trace naming its GPU.
    #[arg(long, value_name = "all|N|LIST", conflicts_with = "jobs")]
    gpus: Option<String>,
    /// On the CPU: evaluate this many pairs at once, one lane each (every worker uses one
    /// thread; timings are CPU timings taken beside the other lanes).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    jobs: Option<u16>,
    #[command(flatten)]
    env: EnvArgs,
    #[command(flatten)]
    eval: EvalArgs,
}

#[derive(Args)]
struct ValidateArgs {
    /// Corpus directory.
    corpus_dir: PathBuf,
    /// Seconds allowed for each reference run.
    #[arg(long, default_value_t = 600.0)]
    timeout: f64,
    #[command(flatten)]
    env: EnvArgs,
}

/// An error with the exit code it maps to.
struct Failure {
    code: i32,
    error: anyhow::Error,
}

fn usage(e: impl Into<anyhow::Error>) -> Failure {
    Failure {
        code: exit::USAGE,
        error: e.into(),
    }
}

fn from_exec(e: ExecError) -> Failure {
    match e {
        ExecError::Cancelled => Failure {
            code: 130,
            error: anyhow!("cancelled; every worker process was killed"),
        },
        e @ ExecError::HarnessFault { .. } => Failure {
            code: kg_contract::exit::NO_VERDICT,
            error: e.into(),
        },
        other => usage(other),
    }
}

fn main() -> ExitCode {
    kg_cli::init_logging("warn");
    let cli = Cli::parse();
    // Candidates run as our user: keep our environment and memory out of their reach.
    if !kg_exec::sandbox::protect_harness_process() {
        tracing::warn!("could not make kg-bench non-dumpable; its /proc entries stay readable");
    }
    let flag = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, flag.clone()) {
            eprintln!("warning: failed to install a signal handler: {e}");
        }
    }
    let cancel = CancelToken::from_flag(flag);
    let result = match cli.command {
        Command::Evaluate(a) => evaluate(a, &cancel),
        Command::Run(a) => run(a, &cancel),
        Command::Dataset {
            command: DatasetCommand::Validate(a),
        } => validate(a, &cancel),
        Command::Solar(c) => solar_cmd::run(c).map_err(usage),
        Command::Score(c) => score_cmd::run(c).map_err(usage),
        Command::Verify(a) => verify_cmd::verify(a).map_err(usage),
        Command::Keygen(a) => verify_cmd::keygen(a).map_err(usage),
        Command::Report(a) => report_cmd::report(a).map_err(usage),
        Command::Compare(a) => compare_cmd::compare(a).map_err(usage),
        Command::Cache(c) => cache_cmd::run(c).map_err(usage),
    };
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(f) => {
            eprintln!("error: {:#}", f.error);
            ExitCode::from(f.code as u8)
        }
    }
}

/// Resolves Python and probes it.
fn interpreter(env: &EnvArgs) -> Result<(kg_exec::Interpreter, kg_exec::ProbeInfo), Failure> {
    let cwd = std::env::current_dir().map_err(usage)?;
    let interp = kg_exec::find_python_env(env.python.as_deref(), &cwd).map_err(usage)?;
    // Cached by the interpreter's files, its import path, device visibility and the driver:
    // importing torch to ask costs seconds per command.
    let (info, cached) =
        kg_exec::probe_cached(&interp, &kg_exec::engine::default_cache_dir()).map_err(usage)?;
    tracing::info!(python = %interp.path.display(), torch = %info.torch, cached, "interpreter");
    Ok((interp, info))
}

fn acquire_options(env: &EnvArgs) -> AcquireOptions {
    AcquireOptions {
        lock_clocks: env.lock_clocks,
        command: std::env::args().collect(),
    }
}

/// Says what was acquired: the notice, and each claim.
fn announce(acquired: &Acquired) {
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
fn prepare_env(env: &EnvArgs) -> Result<(kg_exec::Interpreter, Acquired), Failure> {
    let request: DeviceRequest = env.device.parse().map_err(|e: String| usage(anyhow!(e)))?;
    let (interp, info) = interpreter(env)?;
    let acquired =
        kg_exec::device::acquire(request, &info, &acquire_options(env)).map_err(usage)?;
    announce(&acquired);
    Ok((interp, acquired))
}

/// As [`prepare_env`] for `--gpus`: one claimed GPU per lane (never the CPU).
fn prepare_lanes(
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
        kg_exec::device::acquire_lanes(&set, &info, &acquire_options(env)).map_err(usage)?;
    if let Some(n) = notice {
        eprintln!("notice: {n}");
    }
    for a in &lanes {
        announce(a);
    }
    Ok((interp, lanes))
}

/// Evaluation options for the acquired device, before flags.
fn base_options(acq: &Acquired) -> EvalOptions {
    let mut o = EvalOptions::new(acq.choice.clone());
    o.worker_env.clone_from(&acq.worker_env);
    o.gpu_claim.clone_from(&acq.evidence);
    o
}

/// `--memory-limit`: a byte count with an optional K/M/G/T suffix (powers of 1024).
fn parse_bytes(s: &str) -> Result<u64, String> {
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

fn options(acq: &Acquired, a: &EvalArgs) -> Result<EvalOptions, Failure> {
    let secs = |name: &str, v: f64| -> Result<Duration, Failure> {
        if v.is_finite() && v > 0.0 {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(usage(anyhow!(
                "--{name} must be a positive number of seconds, got {v}"
            )))
        }
    };
    let mut o = base_options(acq);
    o.timeout = secs("timeout", a.timeout)?;
    o.compile_timeout = secs("compile-timeout", a.compile_timeout)?;
    o.warmup = a.warmup;
    o.iterations = a.iterations.max(1);
    o.rounds = a.rounds.max(1);
    o.seed = a.seed;
    o.sandbox = !a.no_sandbox;
    o.require_sandbox = a.require_sandbox;
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

/// How much goes to stderr while workloads run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

impl Verbosity {
    fn of(env: &EnvArgs) -> Verbosity {
        if env.quiet {
            Verbosity::Quiet
        } else if env.verbose {
            Verbosity::Verbose
        } else {
            Verbosity::Normal
        }
    }
}

/// Progress on stderr: a line per finished workload with its wall time (also outside a
/// terminal, so a long run shows in logs), a line per started workload in a terminal or with
/// `-v`, and, where CPU estimates exist, the elapsed time and an ETA.
struct Progress {
    verbosity: Verbosity,
    tty: bool,
    started: Instant,
    /// Workloads this command will evaluate, and how many have finished.
    total: usize,
    done: usize,
    /// Per lane, the pair being evaluated (the problem key, not the definition name), with
    /// its workloads' CPU estimates.
    current: IndexMap<usize, LanePair>,
    /// Lane labels, shown in each line when there are several.
    labels: Vec<String>,
    estimated_total_s: f64,
    estimated_done_s: f64,
}

/// The pair a lane is evaluating.
#[derive(Default)]
struct LanePair {
    key: String,
    solution: String,
    estimates: IndexMap<String, f64>,
}

/// `12.3 s`, `4m05s`, `1h02m`.
fn fmt_secs(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return "?".into();
    }
    if s < 60.0 {
        return format!("{s:.1} s");
    }
    let t = s.round() as u64;
    if t < 3600 {
        format!("{}m{:02}s", t / 60, t % 60)
    } else {
        format!("{}h{:02}m", t / 3600, (t % 3600) / 60)
    }
}

impl Progress {
    fn new(verbosity: Verbosity, total: usize, estimated_total_s: f64) -> Self {
        Progress {
            verbosity,
            tty: std::io::stderr().is_terminal(),
            started: Instant::now(),
            total,
            done: 0,
            current: IndexMap::new(),
            labels: Vec::new(),
            estimated_total_s,
            estimated_done_s: 0.0,
        }
    }

    /// The pair lane `lane` is about to evaluate, with its workloads' CPU estimates (empty off
    /// the CPU).
    fn pair(&mut self, lane: usize, key: &str, solution: &str, estimates: IndexMap<String, f64>) {
        self.current.insert(
            lane,
            LanePair {
                key: key.to_string(),
                solution: solution.to_string(),
                estimates,
            },
        );
    }

    /// `key / solution`, after the lane's label when there are several lanes.
    fn what(&self, lane: usize) -> String {
        let p = self.current.get(&lane);
        let (key, sol) = p.map_or(("?", "?"), |p| (p.key.as_str(), p.solution.as_str()));
        match self.labels.get(lane) {
            Some(l) if self.labels.len() > 1 => format!("[lane {lane} {l}] {key} / {sol}"),
            _ => format!("{key} / {sol}"),
        }
    }

    fn event(&mut self, e: &Event) {
        match e {
            Event::Notice(n) => eprintln!("notice: {n}"),
            Event::WorkloadStarted { uuid, .. } => self.started(0, uuid),
            Event::WorkloadFinished(t) => self.finished(0, t),
        }
    }

    /// A workload of a lane's pair starts: a line in a terminal or with `-v`.
    fn started(&mut self, lane: usize, uuid: &str) {
        if self.verbosity == Verbosity::Verbose || (self.tty && self.verbosity == Verbosity::Normal)
        {
            eprintln!(
                "[{}/{}] {} / {uuid} ...",
                self.done + 1,
                self.total,
                self.what(lane)
            );
        }
    }

    /// A workload of a lane's pair finished: a line with its status, wall time, elapsed time
    /// and ETA.
    fn finished(&mut self, lane: usize, t: &Trace) {
        self.done += 1;
        self.estimated_done_s += self
            .current
            .get(&lane)
            .and_then(|p| p.estimates.get(&t.workload.uuid))
            .copied()
            .unwrap_or(0.0);
        if self.verbosity == Verbosity::Quiet {
            return;
        }
        let Some(ev) = &t.evaluation else { return };
        let wall = ev.wall_s.map_or_else(|| "wall ?".into(), fmt_secs);
        let mut line = format!(
            "[{}/{}] {:<19} {:>8}  {} / {}",
            self.done,
            self.total,
            ev.status.as_str(),
            wall,
            self.what(lane),
            t.workload.uuid
        );
        let elapsed = self.started.elapsed().as_secs_f64();
        line.push_str(&format!("  (elapsed {}", fmt_secs(elapsed)));
        if self.estimated_done_s > 0.0 && self.done < self.total {
            // The estimate scaled by how far off it has been so far.
            let left = (self.estimated_total_s - self.estimated_done_s).max(0.0)
                * (elapsed / self.estimated_done_s);
            line.push_str(&format!(", ETA ~{}", fmt_secs(left)));
        }
        line.push(')');
        if self.verbosity == Verbosity::Verbose && ev.status != Status::Passed {
            line.push_str(&format!("\n    {}", output::first_line(&ev.log)));
        }
        eprintln!("{line}");
    }
}

/// Warns before a CPU run estimated at more than [`LONG_RUN_S`], with what the usual
/// shortening flags would make of it; says the estimate of one over a minute.
fn warn_if_long(e: &CpuEstimate) {
    let CpuEstimate {
        estimated_s,
        short_s,
        interpreted,
    } = *e;
    if estimated_s <= LONG_RUN_S {
        if estimated_s > 60.0 {
            eprintln!(
                "notice: this CPU run is estimated at ~{} (a rough estimate from input sizes)",
                fmt_secs(estimated_s)
            );
        }
        return;
    }
    let why = if interpreted {
        " (Triton runs through its interpreter on the CPU, hundreds of ns per element per call)"
    } else {
        ""
    };
    eprintln!(
        "warning: this CPU run is estimated at ~{}{why}; `--max-workloads 1 --rounds 2` would take ~{} (a rough estimate from input sizes)",
        fmt_secs(estimated_s),
        fmt_secs(short_s)
    );
}

/// A CPU run estimated at more than this many seconds is warned about up front.
const LONG_RUN_S: f64 = 600.0;

/// Reads `--sign-key` (before any worker exists, so no worker can inherit or see it).
fn load_signer(a: &EvalArgs) -> Result<Option<chain::TraceSigner>, Failure> {
    a.sign_key
        .as_deref()
        .map(chain::load_signing_key)
        .transpose()
        .map_err(usage)
}

fn evaluate(a: EvaluateArgs, cancel: &CancelToken) -> Result<i32, Failure> {
    let problem = match (&a.problem_dir, &a.definition, &a.workload) {
        (Some(d), None, None) => Problem::load(d),
        (None, Some(d), Some(w)) => Problem::from_files(d, w),
        _ => {
            return Err(usage(anyhow!(
                "give PROBLEM_DIR, or --definition FILE and --workload FILE"
            )));
        }
    }
    .map_err(usage)?;
    for w in &problem.warnings {
        eprintln!("warning: {w}");
    }
    let solution = if a.solution == Path::new("reference") && !a.solution.exists() {
        kg_exec::engine::reference_solution(&problem)
    } else {
        let (solution, warns) = load_solution(&a.solution).map_err(usage)?;
        for w in warns {
            eprintln!("warning: {w}");
        }
        solution
    };
    check_languages(&solution).map_err(from_exec)?;
    let workloads =
        corpus::select_workloads(&problem, a.workloads.as_deref(), a.eval.max_workloads);
    if let Some(u) = &a.workloads {
        for id in u {
            if !problem.workloads.iter().any(|w| &w.workload.uuid == id) {
                return Err(usage(anyhow!(
                    "--workloads: `{id}` is not a workload of `{}`",
                    problem.workload_path.display()
                )));
            }
        }
    }
    if workloads.is_empty() {
        return Err(usage(anyhow!("no workloads selected")));
    }
    if a.eval.sign_key.is_some() && a.output.is_none() {
        return Err(usage(anyhow!(
            "--sign-key signs the trace file: give -o FILE too"
        )));
    }
    let signer = load_signer(&a.eval)?;
    let run_id = chain::new_run_id().map_err(usage)?;
    let (interp, acquired) = prepare_env(&a.env)?;
    let opts = options(&acquired, &a.eval)?;
    if let Some(f) = &opts.sol_floor
        && let Some(c) = corpus::sol_coverage(
            f,
            workloads
                .iter()
                .map(|w| (problem.definition.name.as_str(), w.workload.uuid.as_str())),
        )
    {
        sol_notice(&c);
    }
    let cpu = opts.device.is_cpu();
    let estimates = if cpu {
        corpus::cpu_estimates(&workloads, &solution, opts.rounds)
    } else {
        IndexMap::new()
    };
    let estimated_s = estimates.values().sum::<f64>() + corpus::CPU_PAIR_FIXED_S;
    if cpu {
        let short = corpus::estimate_cpu_s(workloads[0], &solution, 2) + corpus::CPU_PAIR_FIXED_S;
        warn_if_long(&CpuEstimate {
            estimated_s,
            short_s: short,
            interpreted: corpus::is_triton(&solution),
        });
    }
    let mut session = Session::new(interp, opts, cancel.clone()).map_err(from_exec)?;
    let mut progress = Progress::new(Verbosity::of(&a.env), workloads.len(), estimated_s);
    progress.pair(0, &problem.definition.name, &solution.name, estimates);
    // Nothing is written while the candidate lives: `evaluate_sealed` returns once it is gone.
    let sealed = session.evaluate_sealed(&problem, None, &solution, &workloads, &mut |e| {
        progress.event(&e);
    });
    session.shutdown();
    let evaluated = sealed.map_err(from_exec)?;
    let mut traces = evaluated.traces;
    let mut head = None;
    if let Some(path) = &a.output {
        let manifest = chain::Manifest::new(
            &run_id,
            &problem.definition.name,
            &evaluated.problem_tree_sha256,
            &solution,
        )
        .map_err(usage)?;
        let w = chain::write_traces(
            path,
            &traces,
            &manifest,
            signer.as_ref(),
            chain::WriteMode::Append,
        )
        .map_err(usage)?;
        traces = w.traces;
        head = Some(w.head);
    }
    // Stopped part way (Ctrl-C, the judge lost): the finished traces are written above.
    if let Some(e) = evaluated.error {
        return Err(from_exec(e));
    }
    if let Some(path) = &a.eval.junit {
        let key = problem.dir.file_name().map_or_else(
            || problem.definition.name.clone(),
            |n| n.to_string_lossy().into_owned(),
        );
        let suite = kg_report::junit::suite_of_traces(&key, &solution.name, &traces);
        write_junit(path, &[suite])?;
    }
    if a.env.json {
        println!("{}", serde_json::to_string_pretty(&traces).map_err(usage)?);
        if let (Some(p), Some(h)) = (&a.output, &head) {
            eprintln!("traces: {} (chain head {h})", p.display());
        }
    } else {
        println!("{}", output::trace_table(&traces));
        println!("{}", output::totals_line(&traces));
        if let (Some(p), Some(h)) = (&a.output, &head) {
            println!("traces: {} (chain head {h})", p.display());
        }
    }
    Ok(exit_for(&traces))
}

/// Writes `--junit`'s file (atomically: a CI system never reads half of one).
fn write_junit(path: &Path, suites: &[kg_report::junit::Suite]) -> Result<(), Failure> {
    let xml = kg_report::junit::render("kernelgate", suites);
    kg_contract::io::write_atomic(path, xml.as_bytes()).map_err(|e| usage(anyhow!("--junit: {e}")))
}

/// Says so when `--sol` bounds fewer than all of the workloads about to run (a wrong file
/// would otherwise check nothing, silently).
fn sol_notice(c: &SolCoverage) {
    eprintln!(
        "notice: --sol `{}` bounds {} of the {} selected workload(s); the others have no speed-of-light floor",
        c.source, c.bounded, c.total
    );
}

fn exit_for(traces: &[Trace]) -> i32 {
    let all = !traces.is_empty()
        && traces.iter().all(|t| {
            t.evaluation
                .as_ref()
                .is_some_and(|e| e.status == Status::Passed)
        });
    if all { exit::OK } else { exit::FAILED }
}

/// `run`'s stderr: what the corpus runner reports, as notices, refusals and progress lines.
struct RunReporter {
    verbosity: Verbosity,
    /// Lane labels (from [`RunEvent::LanesStarted`]).
    labels: Vec<String>,
    /// Set when evaluation starts.
    progress: Option<Progress>,
}

impl Reporter for RunReporter {
    fn report(&mut self, event: &RunEvent) {
        let loud = self.verbosity != Verbosity::Quiet;
        match event {
            RunEvent::ProblemFailed { key, error } => eprintln!("error: {key}: {error}"),
            RunEvent::ProblemChanged { key, error } => eprintln!("error: {key}: {error}"),
            RunEvent::DuplicateDefinition(dup) => {
                let dirs: Vec<String> = dup
                    .dirs
                    .iter()
                    .map(|d| format!("`{}`", d.display()))
                    .collect();
                eprintln!(
                    "notice: definition `{}` is defined by {} problems ({}){}; each is evaluated on its own and keyed by its path",
                    dup.name,
                    dup.dirs.len(),
                    dirs.join(", "),
                    if dup.identical {
                        ""
                    } else {
                        ", with different definitions"
                    }
                );
            }
            RunEvent::NoSolutions { key, searched } if loud => eprintln!(
                "notice: {key}: no solutions (looked for {}); skipped",
                searched.join(" and ")
            ),
            RunEvent::SolutionLayouts(by_layout) if loud && !by_layout.is_empty() => {
                let parts: Vec<String> = by_layout
                    .iter()
                    .map(|(l, n)| format!("{n} problem(s) from {l}"))
                    .collect();
                eprintln!("solutions: {}", parts.join("; "));
            }
            RunEvent::PairRefused {
                key,
                solution,
                languages,
                error,
            } => eprintln!(
                "refused: {key} / {solution} ({}): {error}",
                languages.join(", ")
            ),
            RunEvent::RefusedTotal { refused, selected } => eprintln!(
                "{refused} of {selected} problem/solution pair(s) refused up front (not evaluated); {} to go",
                selected - refused
            ),
            RunEvent::SolCoverage(c) => sol_notice(c),
            RunEvent::PairSkipped {
                key,
                solution,
                path,
                reason,
            } if loud => {
                let what = match reason {
                    SkipReason::NotPassed(n) => {
                        format!("{n} workload(s) did not pass; --rerun-failed evaluates it again")
                    }
                    _ => "all PASSED; --rerun evaluates it again".to_string(),
                };
                eprintln!(
                    "notice: {key} / {solution}: complete traces in `{}` ({what}); skipped",
                    path.display()
                );
            }
            RunEvent::CpuEstimate(e) => warn_if_long(e),
            RunEvent::LanesStarted { labels, reduced } => {
                if let Some(why) = reduced {
                    eprintln!("notice: {why}");
                }
                if labels.len() > 1 && loud {
                    let named: Vec<String> = labels
                        .iter()
                        .enumerate()
                        .map(|(k, l)| format!("{k}: {l}"))
                        .collect();
                    eprintln!("lanes: {}", named.join("; "));
                }
                self.labels.clone_from(labels);
            }
            RunEvent::RunStarted {
                workloads,
                estimated_s,
            } => {
                let mut p = Progress::new(self.verbosity, *workloads, *estimated_s);
                p.labels.clone_from(&self.labels);
                self.progress = Some(p);
            }
            RunEvent::PairStarted {
                lane,
                key,
                solution,
                estimates,
            } => {
                if let Some(p) = &mut self.progress {
                    p.pair(*lane, key, solution, estimates.clone());
                }
            }
            RunEvent::WorkloadStarted { lane, uuid, .. } => {
                if let Some(p) = &mut self.progress {
                    p.started(*lane, uuid);
                }
            }
            RunEvent::WorkloadFinished { lane, trace } => {
                if let Some(p) = &mut self.progress {
                    p.finished(*lane, trace);
                }
            }
            RunEvent::BuildStarted { solution } if self.verbosity == Verbosity::Verbose => {
                eprintln!("build: {solution} ...");
            }
            RunEvent::BuildFinished {
                solution,
                outcome,
                seconds,
            } if loud => match outcome {
                BuildEnd::Built => eprintln!("build: {solution} built in {}", fmt_secs(*seconds)),
                BuildEnd::Cached => eprintln!("build: {solution} from the build cache"),
                BuildEnd::Failed => eprintln!(
                    "build: {solution} failed after {} (COMPILE_ERROR; the compiler's output is in its traces)",
                    fmt_secs(*seconds)
                ),
                BuildEnd::LeftToLane => {}
            },
            RunEvent::LaneFailed {
                lane,
                label,
                key,
                solution,
                error,
            } => eprintln!(
                "error: lane {lane} ({label}) stopped at {key} / {solution}: {error}; the other lanes go on"
            ),
            RunEvent::Notice(n) => eprintln!("notice: {n}"),
            _ => {}
        }
    }
}

/// Maps a corpus runner error to its exit code.
fn from_runner(e: RunnerError) -> Failure {
    match e {
        RunnerError::Exec(e) => from_exec(e),
        e @ RunnerError::LanesFailed { .. } => Failure {
            code: kg_contract::exit::NO_VERDICT,
            error: e.into(),
        },
        other => usage(other),
    }
}

fn run(a: RunArgs, cancel: &CancelToken) -> Result<i32, Failure> {
    let verbosity = Verbosity::of(&a.env);
    let mut reporter = RunReporter {
        verbosity,
        labels: Vec::new(),
        progress: None,
    };
    let resume = if a.rerun {
        corpus::Resume::All
    } else if a.rerun_failed {
        corpus::Resume::Failed
    } else {
        corpus::Resume::SkipFinished
    };
    // Load everything first: bad solutions stop before anything runs.
    let mut plan = CorpusPlan::load(
        PlanOptions {
            corpus_dir: a.corpus_dir.clone(),
            solutions: SolutionSource::parse(&a.solutions),
            output_dir: a.output.clone(),
            filters: a.filter.clone(),
        },
        &mut reporter,
    )
    .map_err(from_runner)?;
    let signer = load_signer(&a.eval)?;
    let run_id = chain::new_run_id().map_err(usage)?;
    let (interp, acquired) = match &a.gpus {
        Some(g) => prepare_lanes(&a.env, g)?,
        None => {
            let (i, acq) = prepare_env(&a.env)?;
            (i, vec![acq])
        }
    };
    let first = acquired
        .first()
        .ok_or_else(|| usage(anyhow!("no device was acquired")))?;
    // Refused up front, named, before any worker starts (and before flags are checked
    // against the device).
    plan.refuse(&first.choice, &interp.path, &mut reporter)
        .map_err(from_runner)?;
    let mut opts = options(first, &a.eval)?;
    opts.prestart = match a.prestart {
        PrestartArg::Auto => kg_exec::Prestart::Auto,
        PrestartArg::On => kg_exec::Prestart::On,
        PrestartArg::Off => kg_exec::Prestart::Off,
    };
    let lanes: Vec<Lane> = match a.jobs {
        Some(jobs) if jobs > 1 && !opts.device.is_cpu() => {
            return Err(usage(anyhow!(
                "--jobs {jobs} spreads a run over CPU cores, but the device is {}; on GPUs use --gpus",
                opts.device
            )));
        }
        Some(jobs) if jobs > 1 => vec![Lane::of(&opts); usize::from(jobs)],
        _ => acquired
            .iter()
            .map(|acq| Lane {
                device: acq.choice.clone(),
                worker_env: acq.worker_env.clone(),
                gpu_claim: acq.evidence.clone(),
            })
            .collect(),
    };
    let config = RunConfig {
        resume,
        max_workloads: a.eval.max_workloads,
        run_id,
        signer,
    };
    let mut runner = CorpusRunner::new(plan, interp, opts, cancel.clone(), config)
        .with_lanes(lanes)
        .map_err(from_runner)?;
    let outcome = runner.run(&mut reporter).map_err(from_runner)?;
    if let Some(path) = &a.eval.junit {
        write_junit(path, &output::junit_suites(&outcome.pairs))?;
    }
    let summary = &outcome.summary;
    if a.env.json {
        println!("{}", serde_json::to_string_pretty(summary).map_err(usage)?);
    } else {
        println!("{}", output::run_table(&outcome.pairs));
        println!("{}", output::summary_line(summary));
        println!(
            "traces: {}/<problem path>/<solution>.jsonl",
            a.output.display()
        );
        println!("summary: {}", outcome.summary_path.display());
    }
    Ok(if summary.all_passed() {
        exit::OK
    } else {
        exit::FAILED
    })
}

fn validate(a: ValidateArgs, cancel: &CancelToken) -> Result<i32, Failure> {
    let dirs = corpus::discover(&a.corpus_dir).map_err(usage)?;
    let mut loaded = Vec::new();
    let mut findings: Vec<output::Finding> = Vec::new();
    for d in &dirs {
        match Problem::load(d) {
            Ok(p) => loaded.push(p),
            Err(e) => findings.push(output::Finding {
                problem: d.display().to_string(),
                workloads: 0,
                ok: false,
                messages: vec![e.to_string()],
            }),
        }
    }
    // Traces name only their definition: problems sharing a name are told apart by path in
    // `run`, but not by `verify --corpus` or by a reader of a trace.
    let dups =
        corpus::duplicate_definitions(loaded.iter().map(|p| (p.dir.as_path(), &p.definition)));
    let (interp, acquired) = prepare_env(&a.env)?;
    let timeout = if a.timeout.is_finite() && a.timeout > 0.0 {
        Duration::from_secs_f64(a.timeout)
    } else {
        return Err(usage(anyhow!(
            "--timeout must be a positive number of seconds"
        )));
    };
    let mut opts = base_options(&acquired);
    opts.timeout = timeout;
    let mut session = Session::new(interp, opts, cancel.clone()).map_err(from_exec)?;
    for p in &loaded {
        let mut messages: Vec<String> = p.warnings.clone();
        let smallest = p.workloads.iter().min_by_key(|w| corpus::input_elements(w));
        let mut ok = true;
        if let Some(d) = dups.iter().find(|d| d.dirs.contains(&p.dir)) {
            let others: Vec<String> = d
                .dirs
                .iter()
                .filter(|o| **o != p.dir)
                .map(|o| format!("`{}`", o.display()))
                .collect();
            // Different definitions under one name make a trace ambiguous: BAD. The same
            // definition twice (SOL-ExecBench's examples, one per language) is flagged only.
            ok = d.identical;
            messages.push(format!(
                "duplicate definition name `{}`: also defined by {}{}; traces name only the definition, so `kg-bench verify --corpus` cannot tell them apart (`run` keys them by path)",
                d.name,
                others.join(", "),
                if d.identical {
                    " (the same definition)"
                } else {
                    " with a different definition"
                }
            ));
        }
        if let Some(w) = smallest {
            match session.check_reference(p, w) {
                Ok(None) => {}
                Ok(Some(m)) => {
                    ok = false;
                    messages.push(format!(
                        "workload `{}` (line {}): {}",
                        w.workload.uuid,
                        w.line,
                        m.lines().next().unwrap_or("")
                    ));
                }
                Err(e) => {
                    session.shutdown();
                    return Err(from_exec(e));
                }
            }
        }
        findings.push(output::Finding {
            problem: if dups.iter().any(|d| d.dirs.contains(&p.dir)) {
                format!(
                    "{} ({})",
                    p.definition.name,
                    corpus::problem_key(&a.corpus_dir, &p.dir)
                )
            } else {
                p.definition.name.clone()
            },
            workloads: p.workloads.len(),
            ok,
            messages,
        });
    }
    session.shutdown();
    let bad = findings.iter().filter(|f| !f.ok).count();
    if a.env.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&findings)
                .context("serialise findings")
                .map_err(usage)?
        );
    } else {
        println!("{}", output::findings_table(&findings));
        println!("{} problem(s), {} bad", findings.len(), bad);
    }
    Ok(if bad == 0 { exit::OK } else { exit::FAILED })
}
