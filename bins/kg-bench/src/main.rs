//! `kg-bench`: evaluate kernels against SOL-ExecBench-format problems (see `docs/kg-bench.md`).
//!
//! Thin binary: argument parsing, progress, tables and exit codes; the work is in kg-exec.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod output;
mod score_cmd;
mod solar_cmd;
mod verify_cmd;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::{Args, Parser, Subcommand, ValueEnum};
use indexmap::IndexMap;
use kg_contract::chain;
use kg_contract::{Problem, Status, Trace, exit, load_solution};
use kg_exec::corpus::{self, SolutionSource};
use kg_exec::device::{AcquireOptions, Acquired};
use kg_exec::engine::{ExecError, check_languages};
use kg_exec::{CancelToken, DeviceRequest, EvalOptions, Event, Session, TimingChoice};

/// Evidence-grade kernel evaluation on SOL-ExecBench-format problems.
#[derive(Parser)]
#[command(name = "kg-bench", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate one solution on one problem; writes one trace per workload.
    Evaluate(EvaluateArgs),
    /// Evaluate every problem of a corpus (default: each problem's own reference).
    Run(RunArgs),
    /// Work on corpora.
    Dataset {
        #[command(subcommand)]
        command: DatasetCommand,
    },
    /// Speed-of-light analysis of a problem's reference.
    #[command(subcommand)]
    Solar(solar_cmd::SolarCommand),
    /// SOL score and release bundles.
    #[command(subcommand)]
    Score(score_cmd::ScoreCommand),
    /// Check trace files: every line's hash chain and seal, its problem's tree hash
    /// (--problem), its signature (--pubkey) and the file's end (--summary, --head).
    Verify(verify_cmd::VerifyArgs),
    /// Write an Ed25519 key pair for --sign-key (private OUT, mode 0600; public OUT.pub).
    Keygen(verify_cmd::KeygenArgs),
}

#[derive(Subcommand)]
enum DatasetCommand {
    /// Check a corpus: schemas, axes, and each reference run on its smallest workload.
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
    /// Evaluate at most N workloads per problem (in file order).
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
    /// `reference` (each problem's own reference), `bundled` (each problem's solutions/*.json),
    /// or DIR (DIR/<problem>/*.json).
    #[arg(long, default_value = "reference")]
    solutions: String,
    /// Output directory: OUTDIR/<problem>/<solution>.jsonl and OUTDIR/summary.json.
    #[arg(short, long, default_value = "kg-results")]
    output: PathBuf,
    /// Evaluate problems again even when their traces are complete.
    #[arg(long)]
    rerun: bool,
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
        other => usage(other),
    }
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("KG_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
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
    };
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(f) => {
            eprintln!("error: {:#}", f.error);
            ExitCode::from(f.code as u8)
        }
    }
}

/// Resolves Python, probes it, and acquires the device (claiming a GPU through kg-gpu for
/// `auto`). The returned [`Acquired`] holds the claim: keep it alive for the whole run.
fn prepare_env(env: &EnvArgs) -> Result<(kg_exec::Interpreter, Acquired), Failure> {
    let request: DeviceRequest = env.device.parse().map_err(|e: String| usage(anyhow!(e)))?;
    let cwd = std::env::current_dir().map_err(usage)?;
    let interp = kg_exec::find_python_env(env.python.as_deref(), &cwd).map_err(usage)?;
    let info = kg_exec::probe(&interp).map_err(usage)?;
    tracing::info!(python = %interp.path.display(), torch = %info.torch, "interpreter");
    let acquire = AcquireOptions {
        lock_clocks: env.lock_clocks,
        command: std::env::args().collect(),
    };
    let acquired = kg_exec::device::acquire(request, &info, &acquire).map_err(usage)?;
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
    Ok((interp, acquired))
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

struct Progress {
    enabled: bool,
}

impl Progress {
    fn new() -> Self {
        Progress {
            enabled: std::io::stderr().is_terminal(),
        }
    }
    fn event(&self, e: &Event) {
        match e {
            Event::Notice(n) => eprintln!("notice: {n}"),
            Event::WorkloadStarted {
                definition,
                solution,
                uuid,
                index,
                total,
            } if self.enabled => {
                eprintln!(
                    "[{}/{}] {definition} / {solution} / {uuid} ...",
                    index + 1,
                    total
                );
            }
            Event::WorkloadFinished(t) if self.enabled => {
                if let Some(ev) = &t.evaluation {
                    eprintln!("    {}", ev.status);
                }
            }
            _ => {}
        }
    }
}

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
    sol_notice(
        &opts,
        workloads
            .iter()
            .map(|w| (problem.definition.name.as_str(), w.workload.uuid.as_str())),
    );
    let mut session = Session::new(interp, opts, cancel.clone()).map_err(from_exec)?;
    let progress = Progress::new();
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

/// Says so when `--sol` bounds none of the workloads about to run (a wrong file would
/// otherwise check nothing, silently).
fn sol_notice<'a>(opts: &EvalOptions, selected: impl Iterator<Item = (&'a str, &'a str)>) {
    let Some(f) = &opts.sol_floor else { return };
    let (mut n, mut bounded) = (0, 0);
    for (d, u) in selected {
        n += 1;
        if f.t_sol_ms.contains_key(&(d.to_string(), u.to_string())) {
            bounded += 1;
        }
    }
    if bounded < n {
        eprintln!(
            "notice: --sol `{}` bounds {bounded} of the {n} selected workload(s); the others have no speed-of-light floor",
            f.source
        );
    }
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

fn run(a: RunArgs, cancel: &CancelToken) -> Result<i32, Failure> {
    let dirs = corpus::discover(&a.corpus_dir).map_err(usage)?;
    let source = SolutionSource::parse(&a.solutions);
    if let SolutionSource::Dir(d) = &source
        && !d.is_dir()
    {
        return Err(usage(anyhow!(
            "--solutions `{}` is neither `reference`, `bundled` nor a directory",
            d.display()
        )));
    }
    // Load everything first: bad solutions and unsupported languages stop before anything runs.
    let mut plan = Vec::new();
    let mut errors: IndexMap<String, String> = IndexMap::new();
    for d in &dirs {
        let name = || {
            d.file_name().map_or_else(
                || d.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            )
        };
        match Problem::load(d) {
            Ok(p) => {
                let sols = corpus::solutions_for(&p, &source).map_err(usage)?;
                for s in &sols {
                    check_languages(s).map_err(from_exec)?;
                }
                // The tree as loaded: every evaluation of this problem must find it unchanged.
                let tree = kg_exec::integrity::snapshot_dir(&p.dir);
                match tree.sha256() {
                    Ok(sha) => plan.push((p, tree, sha, sols)),
                    Err(e) => {
                        eprintln!("error: {e}");
                        errors.insert(name(), e.to_string());
                    }
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                errors.insert(name(), e.to_string());
            }
        }
    }
    let signer = load_signer(&a.eval)?;
    let run_id = chain::new_run_id().map_err(usage)?;
    let (interp, acquired) = prepare_env(&a.env)?;
    let device = acquired.choice.clone();
    let opts = options(&acquired, &a.eval)?;
    sol_notice(
        &opts,
        plan.iter().flat_map(|(p, _, _, _)| {
            corpus::select_workloads(p, None, a.eval.max_workloads)
                .into_iter()
                .map(|w| (p.definition.name.as_str(), w.workload.uuid.as_str()))
        }),
    );
    let mut session = Session::new(interp, opts, cancel.clone()).map_err(from_exec)?;
    let progress = Progress::new();
    let mut files = Vec::new();
    let mut rows = Vec::new();
    for (problem, tree, tree_sha256, sols) in &plan {
        let name = problem.definition.name.clone();
        if sols.is_empty() {
            eprintln!("notice: {name}: no solutions in the chosen source; skipped");
            continue;
        }
        let workloads = corpus::select_workloads(problem, None, a.eval.max_workloads);
        for sol in sols {
            let path = corpus::trace_path(&a.output, &name, &sol.name);
            files.push((name.clone(), sol.name.clone(), path.clone()));
            let solution_sha256 = chain::solution_sha256(sol).map_err(usage)?;
            if !a.rerun && corpus::is_finished(&path, &workloads, tree_sha256, &solution_sha256) {
                eprintln!(
                    "notice: {name} / {}: complete traces in `{}`; skipped (use --rerun)",
                    sol.name,
                    path.display()
                );
                rows.push((name.clone(), sol.name.clone(), None));
                continue;
            }
            if path.exists()
                && let Err(e) = std::fs::remove_file(&path)
            {
                session.shutdown();
                return Err(usage(anyhow!(
                    "failed to remove stale `{}`: {e}",
                    path.display()
                )));
            }
            // Nothing is written while the candidate lives: `evaluate_sealed` returns once it
            // is gone.
            let res = session.evaluate_sealed(problem, Some(tree), sol, &workloads, &mut |e| {
                progress.event(&e);
            });
            let evaluated = match res {
                Ok(e) => e,
                Err(e @ ExecError::ProblemChanged { .. }) => {
                    // An earlier candidate (or someone) changed this problem: no later
                    // evaluation of it can be trusted; the other problems still run.
                    eprintln!("error: {e}");
                    errors.insert(name.clone(), e.to_string());
                    break;
                }
                Err(e) => {
                    session.shutdown();
                    return Err(from_exec(e));
                }
            };
            let written = chain::Manifest::new(&run_id, &name, &evaluated.problem_tree_sha256, sol)
                .map_err(chain::ChainError::from)
                .and_then(|m| {
                    chain::write_traces(
                        &path,
                        &evaluated.traces,
                        &m,
                        signer.as_ref(),
                        chain::WriteMode::Replace,
                    )
                });
            match written {
                Ok(w) => rows.push((name.clone(), sol.name.clone(), Some(w.traces))),
                Err(e) => {
                    session.shutdown();
                    return Err(usage(e));
                }
            }
            // Stopped part way (Ctrl-C, the judge lost): the finished traces are written.
            if let Some(e) = evaluated.error {
                session.shutdown();
                return Err(from_exec(e));
            }
        }
    }
    session.shutdown();
    let mut summary = corpus::summarize(&a.corpus_dir, &device.to_string(), &files, errors);
    let paths: Vec<PathBuf> = files.iter().map(|(_, _, p)| p.clone()).collect();
    summary.chain =
        Some(chain::RunChain::seal(&a.output, &run_id, &paths, signer.as_ref()).map_err(usage)?);
    let summary_path = a.output.join("summary.json");
    let text = kg_contract::io::to_json_pretty(&summary, "summary").map_err(usage)?;
    kg_contract::io::write_atomic(&summary_path, text.as_bytes()).map_err(usage)?;
    if a.env.json {
        println!("{}", serde_json::to_string_pretty(&summary).map_err(usage)?);
    } else {
        println!("{}", output::run_table(&rows, &files));
        println!("{}", output::summary_line(&summary));
        println!("traces: {}/<problem>/<solution>.jsonl", a.output.display());
        println!("summary: {}", summary_path.display());
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
            problem: p.definition.name.clone(),
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
