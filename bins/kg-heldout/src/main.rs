#![allow(clippy::print_stdout, clippy::print_stderr)]
//! `kg-heldout`: held-out shape generation and original-versus-optimised evaluation,
//! compatible with AgentKernelArena's held-out files. The logic lives in the kg-heldout crate.

use kg_cli::{Failure, usage};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use kg_contract::exit;
use kg_heldout::generate::{self, GeneratorKind};
use kg_heldout::summary::DeviceMode;
use kg_heldout::{HeldoutError, agent, eval, speedup, task};
use serde::Serialize;

/// Exit code of `eval` when no usable device: refused before any task ran, or lost during the
/// run (as kg-gpu's "no GPU"): no verdict on any kernel.
const NO_DEVICE: i32 = exit::NO_VERDICT;

const GENERATE_EXIT_CODES: &str = "\
Exit codes:
  0  every task's file was written (or, with --dry-run, listed)
  1  some task failed to generate
  2  bad input (a missing directory, an unknown --tasks id)";

const EVAL_EXIT_CODES: &str = "\
Exit codes:
  0  every task was evaluated (each is in a quadrant, whatever the quadrant)
  1  some task of the summary has status `error` (it could not be set up or started;
     carried-over entries of a --tasks re-run count)
  2  bad input, or an earlier entry a --tasks re-run would keep is unreadable (nothing run or
     written); or the summary could not be written
  3  no usable device: the interpreter's torch sees no CUDA/HIP device (nothing run, nothing
     written), or the device became unusable during the run (that task and the ones after it
     are `error`)";

/// Does an optimised kernel still work, and stay fast, on shapes it never saw?
#[derive(Parser)]
#[command(
    name = "kg-heldout",
    version,
    after_help = "Logs go to stderr (level: KG_LOG, default info; colour only on a terminal, never with NO_COLOR).\nExit codes: see `kg-heldout generate --help` and `kg-heldout eval --help`."
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write held_out_tests/<task>/held_out_shapes.yaml for each supported task.
    #[command(after_help = GENERATE_EXIT_CODES)]
    Generate(GenerateArgs),
    /// Evaluate a completed run's original and optimised kernels on the held-out shapes.
    #[command(after_help = EVAL_EXIT_CODES)]
    Eval(EvalArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum GeneratorArg {
    /// Deterministic rules (no agent).
    Rules,
    /// The `claude` CLI.
    #[value(name = "claude_code")]
    ClaudeCode,
    /// The `codex` CLI.
    Codex,
    /// The `cursor-agent` CLI.
    Cursor,
}

#[derive(clap::Args)]
struct GenerateArgs {
    /// The AgentKernelArena tasks directory.
    #[arg(long)]
    tasks_dir: PathBuf,
    /// Where held_out_tests/ goes.
    #[arg(long)]
    output_dir: PathBuf,
    /// Who chooses the shapes.
    #[arg(long, value_enum, default_value = "rules")]
    backend: GeneratorArg,
    /// Model for an agent backend.
    #[arg(long)]
    model: Option<String>,
    /// Per-task agent timeout, seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Only these task ids (e.g. triton2triton/vllm/triton_add).
    #[arg(long, num_args = 1..)]
    tasks: Vec<String>,
    /// List supported tasks and what would be generated; launch and write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Seed of the rules backend.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print each task's outcome as one JSON document on stdout instead of lines.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, ValueEnum)]
enum DeviceArg {
    /// The tasks run on a GPU: refuse (exit 3) unless the interpreter's torch sees one.
    Gpu,
    /// The tasks are known to run on the CPU (kernelgate's fixtures): no device check.
    Cpu,
}

#[derive(clap::Args)]
struct EvalArgs {
    /// The completed run directory (…/run_<timestamp>).
    #[arg(long)]
    run_dir: PathBuf,
    /// The held_out_tests/ directory.
    #[arg(long)]
    heldout_dir: PathBuf,
    /// The canonical tasks directory (original kernels are restored from it).
    #[arg(long)]
    tasks_dir: PathBuf,
    /// Suffix of the sibling output directory.
    #[arg(long, default_value = "_heldout")]
    output_suffix: String,
    /// Only these task ids.
    #[arg(long, num_args = 1..)]
    tasks: Vec<String>,
    /// Timeout of every task command, seconds (default: the task's own, else 3600).
    #[arg(long)]
    timeout: Option<u64>,
    /// Python interpreter for python/pytest commands (else PYTHON_BIN, else .venv, else python3).
    #[arg(long)]
    python: Option<PathBuf>,
    /// Where the tasks run.
    #[arg(long, value_enum, default_value = "gpu")]
    device: DeviceArg,
    /// Runs of each side's performance commands, interleaved orig, opt, orig, opt, … (3 to 50);
    /// the speedup is their Hodges–Lehmann median with a Mann–Whitney interval.
    #[arg(long, default_value_t = speedup::DEFAULT_REPEATS)]
    perf_repeats: usize,
    /// Confidence of the speedup interval; a gain or loss is called only when the interval
    /// excludes 1.0.
    #[arg(long, default_value_t = speedup::DEFAULT_CONFIDENCE)]
    perf_confidence: f64,
    /// Print the results and the summary as one JSON document on stdout instead of lines.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    // Progress goes to the log at `info`, so that is this binary's default level.
    kg_cli::init_logging("info");
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Generate(a) => run_generate(a),
        Cmd::Eval(a) => run_eval(a),
    };
    kg_cli::exit_code(result)
}

/// What `generate` did with a task.
#[derive(Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum GenerateStatus {
    Generated,
    Failed,
    Unsupported,
    /// --dry-run: a file would be generated.
    Supported,
    /// --dry-run: the rules backend cannot plan this task.
    NotPossible,
}

/// One task of `generate --json`.
#[derive(Serialize)]
struct GenerateEntry {
    task: String,
    status: GenerateStatus,
    /// The injection target, for supported tasks.
    target: Option<&'static str>,
    /// The written file.
    path: Option<PathBuf>,
    /// Why not, for `failed`, `unsupported` and `not_possible`.
    reason: Option<String>,
    /// rules plans: the visible rows, held-out rows and injections.
    num_original_shapes: Option<u64>,
    rows: Option<usize>,
    injections: Option<usize>,
}

/// `generate --json`.
#[derive(Serialize)]
struct GenerateReport {
    tasks: Vec<GenerateEntry>,
    written: usize,
    failed: usize,
}

fn entry(task: &str, status: GenerateStatus) -> GenerateEntry {
    GenerateEntry {
        task: task.to_string(),
        status,
        target: None,
        path: None,
        reason: None,
        num_original_shapes: None,
        rows: None,
        injections: None,
    }
}

fn run_generate(a: GenerateArgs) -> Result<i32, Failure> {
    let backend = match a.backend {
        GeneratorArg::Rules => GeneratorKind::Rules,
        GeneratorArg::ClaudeCode => GeneratorKind::ClaudeCode,
        GeneratorArg::Codex => GeneratorKind::Codex,
        GeneratorArg::Cursor => GeneratorKind::Cursor,
    };
    if !a.tasks_dir.is_dir() {
        return Err(usage(anyhow::anyhow!(
            "--tasks-dir `{}` is not a directory",
            a.tasks_dir.display()
        )));
    }
    let mut tasks = task::discover(&a.tasks_dir).map_err(usage)?;
    if !a.tasks.is_empty() {
        for t in &a.tasks {
            if !tasks.iter().any(|d| &d.id == t) {
                return Err(usage(anyhow::anyhow!(
                    "--tasks: `{t}` is not a task under `{}`",
                    a.tasks_dir.display()
                )));
            }
        }
        tasks.retain(|t| a.tasks.contains(&t.id));
    }
    let supported = tasks.iter().filter(|t| t.scope.is_ok()).count();
    eprintln!(
        "{} tasks found, {supported} in the held-out scope",
        tasks.len()
    );
    let mut entries = Vec::new();
    let mut failed = 0;
    let mut written = 0;
    for t in &tasks {
        let scope = match &t.scope {
            Ok(s) => *s,
            Err(why) => {
                entries.push(GenerateEntry {
                    reason: Some(why.to_string()),
                    ..entry(&t.id, GenerateStatus::Unsupported)
                });
                continue;
            }
        };
        if a.dry_run {
            if backend == GeneratorKind::Rules {
                match generate::plan_rules(t, a.seed) {
                    Ok(plan) => entries.push(GenerateEntry {
                        target: Some(scope.target()),
                        num_original_shapes: Some(plan.shapes.num_original_shapes),
                        rows: Some(plan.shapes.shapes.len()),
                        injections: Some(plan.shapes.injections.len()),
                        ..entry(&t.id, GenerateStatus::Supported)
                    }),
                    Err(e) => entries.push(GenerateEntry {
                        reason: Some(e.to_string()),
                        ..entry(&t.id, GenerateStatus::NotPossible)
                    }),
                }
            } else {
                entries.push(GenerateEntry {
                    target: Some(scope.target()),
                    ..entry(&t.id, GenerateStatus::Supported)
                });
            }
            continue;
        }
        let outcome = if backend == GeneratorKind::Rules {
            generate::plan_rules(t, a.seed).and_then(|p| generate::write_plan(&a.output_dir, &p))
        } else {
            agent::run_agent(
                t,
                scope,
                backend,
                a.model.as_deref(),
                Duration::from_secs(a.timeout),
                &a.output_dir,
            )
        };
        match outcome {
            Ok(path) => {
                written += 1;
                entries.push(GenerateEntry {
                    target: Some(scope.target()),
                    path: Some(path),
                    ..entry(&t.id, GenerateStatus::Generated)
                });
            }
            Err(e) => {
                failed += 1;
                entries.push(GenerateEntry {
                    reason: Some(e.to_string()),
                    ..entry(&t.id, GenerateStatus::Failed)
                });
            }
        }
    }
    if a.json {
        let report = GenerateReport {
            tasks: entries,
            written,
            failed,
        };
        println!("{}", serde_json::to_string_pretty(&report).map_err(usage)?);
    } else {
        for e in &entries {
            print_generate_line(e, backend);
        }
    }
    if !a.dry_run {
        eprintln!("{written} written, {failed} failed");
    }
    Ok(if failed > 0 { exit::FAILED } else { exit::OK })
}

fn print_generate_line(e: &GenerateEntry, backend: GeneratorKind) {
    let reason = e.reason.as_deref().unwrap_or("");
    let target = e.target.unwrap_or("");
    match e.status {
        GenerateStatus::Unsupported => println!("unsupported  {}  ({reason})", e.task),
        GenerateStatus::NotPossible => println!("not possible {}  ({reason})", e.task),
        GenerateStatus::Failed => println!("failed       {}  ({reason})", e.task),
        GenerateStatus::Generated => println!(
            "generated    {}  -> {}",
            e.task,
            e.path
                .as_deref()
                .unwrap_or(std::path::Path::new(""))
                .display()
        ),
        GenerateStatus::Supported => match (e.num_original_shapes, e.rows, e.injections) {
            (Some(n), Some(rows), Some(inj)) => println!(
                "supported    {}  [{target}] {n} original shapes -> {rows} held-out rows in {inj} injection(s)",
                e.task
            ),
            _ => println!(
                "supported    {}  [{target}] agent {} would run",
                e.task,
                backend.name()
            ),
        },
    }
}

fn run_eval(a: EvalArgs) -> Result<i32, Failure> {
    let cwd = std::env::current_dir().map_err(usage)?;
    let python = kg_python::find_python_env(a.python.as_deref(), &cwd).map_err(usage)?;
    let outcome = eval::evaluate(&eval::EvalOptions {
        run_dir: a.run_dir,
        heldout_dir: a.heldout_dir,
        tasks_dir: a.tasks_dir,
        output_suffix: a.output_suffix,
        tasks: a.tasks,
        timeout: a.timeout.map(Duration::from_secs),
        python,
        env: vec![],
        device: match a.device {
            DeviceArg::Gpu => DeviceMode::Gpu,
            DeviceArg::Cpu => DeviceMode::Cpu,
        },
        perf_repeats: a.perf_repeats,
        perf_confidence: a.perf_confidence,
    })
    .map_err(|e| match e {
        e @ HeldoutError::DeviceUnusable { .. } => Failure {
            code: NO_DEVICE,
            error: e.into(),
        },
        e => usage(e),
    })?;
    let s = &outcome.summary;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&outcome).map_err(usage)?);
    } else {
        for r in &outcome.results {
            println!(
                "{:<16} {:<48} {} (original run {:>7.3}x{}){}",
                r.generalization_status,
                r.task_name,
                eval::speedup_text(r),
                r.original_run_speedup_ratio,
                eval::retention_text(r)
                    .map(|t| format!("; {t}"))
                    .unwrap_or_default(),
                r.error
                    .as_deref()
                    .and_then(|e| e.lines().next())
                    .map(|e| format!("  {e}"))
                    .unwrap_or_default()
            );
        }
        let c = &s.conditional_correctness;
        println!(
            "tasks {}  both_pass {}  opt_regression {}  both_fail {}  opt_improvement {}  error {}",
            s.total_tasks,
            s.quadrant_counts["both_pass"],
            s.quadrant_counts["opt_regression"],
            s.quadrant_counts["both_fail"],
            s.quadrant_counts["opt_improvement"],
            s.errored_tasks
        );
        if !s.carried_over.is_empty() {
            println!(
                "{} of them carried over from an earlier evaluation (--tasks re-run)",
                s.carried_over.len()
            );
        }
        let calls = &s.speedup_calls;
        let n = |k: &str| calls.get(k).copied().unwrap_or(0);
        if n("gain") + n("loss") + n("not_called") > 0 {
            println!(
                "held-out speedup calls: gain {}  loss {}  not called (interval contains 1) {}",
                n("gain"),
                n("loss"),
                n("not_called")
            );
        }
        if s.both_pass_without_timing > 0 {
            println!(
                "both_pass without a valid timing (in no speedup statistic): {}",
                s.both_pass_without_timing
            );
        }
        if c.orig_correct_count == 0 {
            println!("conditional correctness: no task's original kernel passed (no rate)");
        } else {
            println!(
                "conditional correctness {}/{} = {:.1}%{}",
                c.opt_also_correct_count,
                c.orig_correct_count,
                c.rate_pct,
                c.ci95
                    .as_ref()
                    .map(|i| format!(" (95% CI {:.1}–{:.1}%)", i.low_pct, i.high_pct))
                    .unwrap_or_default()
            );
        }
        println!(
            "summary: {}",
            outcome.output_dir.join("heldout_summary.yaml").display()
        );
    }
    if let Some(why) = &outcome.device_lost {
        eprintln!(
            "error: the device became unusable during the run ({why}); that task and the ones after it are `error`"
        );
        return Ok(NO_DEVICE);
    }
    Ok(if s.errored_tasks > 0 {
        exit::FAILED
    } else {
        exit::OK
    })
}
