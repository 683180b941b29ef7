//! `kg-bench`: evaluate kernels against SOL-ExecBench-format problems (see `docs/kg-bench.md`).
//!
//! Thin binary: argument parsing, progress, tables and exit codes; the work is in kg-exec.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod cache_cmd;
mod compare_cmd;
mod dataset_cmd;
mod evaluate_cmd;
mod merge_cmd;
mod output;
mod progress;
mod report_cmd;
mod run_cmd;
mod score_cmd;
mod setup;
mod slurm_cmd;
mod solar_cmd;
mod verify_cmd;

use dataset_cmd::*;
use evaluate_cmd::*;
use kg_cli::{Failure, usage};
use progress::*;
use run_cmd::*;
use setup::*;

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
use kg_exec::engine::{ExecError, check_languages};
use kg_exec::lanes::Lane;
use kg_exec::placement::{AcquireOptions, Acquired, GpuSet};
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
    /// Join the run directories of `run --shard K/N` into one run: checks that they are one
    /// corpus run's shards, complete and disjoint, and verifies every trace first.
    #[command(after_help = merge_cmd::EXIT_MERGE)]
    Merge(merge_cmd::MergeArgs),
    /// Run a corpus as a Slurm job array (one task per shard), follow it, and merge the
    /// shards; --dry-run prints the script.
    #[command(after_help = slurm_cmd::EXIT_SLURM)]
    Slurm(slurm_cmd::SlurmArgs),
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
enum OnOff {
    /// On.
    On,
    /// Off.
    Off,
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
    /// Compile a Triton solution's kernels ahead on a CUDA GPU, into its own Triton cache,
    /// while its candidate process starts (`run`: while earlier pairs are evaluated): a process
    /// of the solution's own with no GPU it can open runs its calls on meta tensors of the
    /// workloads' shapes, every launch turned into a compile. The trace's
    /// `candidate_start.precompiled` counts them.
    #[arg(long, value_enum, default_value = "on")]
    precompile: OnOff,
    /// Time a workload's reference with one candidate and reuse that timing for later
    /// candidates of the same workload on the same device for up to SECS seconds (`off`:
    /// time it with every candidate). For populations of solutions to one problem; a trace
    /// that reused one names whose evaluation timed it and how long before
    /// (`performance.reference_reused`).
    #[arg(long, value_name = "SECS|off", default_value = "off", value_parser = setup::parse_reuse)]
    reference_reuse: setup::ReuseAge,
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
    /// Evaluate only shard K of N of the selected problem/solution pairs (`2/3`), or `slurm`
    /// (this Slurm array task's shard; the array must be `1-N`). Every shard computes the same
    /// partition, balanced by expected cost; the output directory gets `shard.json`, and
    /// `kg-bench merge` joins the shards into one run.
    #[arg(long, value_name = "K/N|slurm")]
    shard: Option<String>,
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
        Command::Merge(a) => merge_cmd::merge(a),
        Command::Slurm(a) => slurm_cmd::slurm(a, &cancel),
    };
    kg_cli::exit_code(result)
}
