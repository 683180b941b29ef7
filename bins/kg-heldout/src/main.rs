#![allow(clippy::print_stdout, clippy::print_stderr)]
//! `kg-heldout`: held-out shape generation and original-versus-optimised evaluation,
//! compatible with AgentKernelArena's held-out files. The logic lives in the kg-heldout crate.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use kg_contract::exit;
use kg_heldout::generate::{self, Backend};
use kg_heldout::{agent, eval, task};

/// Does an optimised kernel still work, and stay fast, on shapes it never saw?
#[derive(Parser)]
#[command(name = "kg-heldout", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write held_out_tests/<task>/held_out_shapes.yaml for each supported task.
    Generate(GenerateArgs),
    /// Evaluate a completed run's original and optimised kernels on the held-out shapes.
    Eval(EvalArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum BackendArg {
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
    backend: BackendArg,
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
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Generate(a) => run_generate(a),
        Cmd::Eval(a) => run_eval(a),
    };
    match result {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit::USAGE as u8)
        }
    }
}

fn run_generate(a: GenerateArgs) -> anyhow::Result<i32> {
    let backend = match a.backend {
        BackendArg::Rules => Backend::Rules,
        BackendArg::ClaudeCode => Backend::ClaudeCode,
        BackendArg::Codex => Backend::Codex,
        BackendArg::Cursor => Backend::Cursor,
    };
    if !a.tasks_dir.is_dir() {
        anyhow::bail!("--tasks-dir `{}` is not a directory", a.tasks_dir.display());
    }
    let mut tasks = task::discover(&a.tasks_dir)?;
    if !a.tasks.is_empty() {
        for t in &a.tasks {
            if !tasks.iter().any(|d| &d.id == t) {
                anyhow::bail!(
                    "--tasks: `{t}` is not a task under `{}`",
                    a.tasks_dir.display()
                );
            }
        }
        tasks.retain(|t| a.tasks.contains(&t.id));
    }
    let supported = tasks.iter().filter(|t| t.scope.is_ok()).count();
    eprintln!(
        "{} tasks found, {supported} in the held-out scope",
        tasks.len()
    );
    let mut failed = 0;
    let mut written = 0;
    for t in &tasks {
        let scope = match &t.scope {
            Ok(s) => *s,
            Err(why) => {
                println!("unsupported  {}  ({why})", t.id);
                continue;
            }
        };
        if a.dry_run {
            if backend == Backend::Rules {
                match generate::plan_rules(t, a.seed) {
                    Ok(plan) => println!(
                        "supported    {}  [{}] {} original shapes -> {} held-out rows in {} injection(s)",
                        t.id,
                        scope.target(),
                        plan.shapes.num_original_shapes,
                        plan.shapes.shapes.len(),
                        plan.shapes.injections.len()
                    ),
                    Err(e) => println!("not possible {}  ({e})", t.id),
                }
            } else {
                println!(
                    "supported    {}  [{}] agent {} would run",
                    t.id,
                    scope.target(),
                    backend.name()
                );
            }
            continue;
        }
        let outcome = if backend == Backend::Rules {
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
                println!("generated    {}  -> {}", t.id, path.display());
            }
            Err(e) => {
                failed += 1;
                println!("failed       {}  ({e})", t.id);
            }
        }
    }
    if !a.dry_run {
        eprintln!("{written} written, {failed} failed");
    }
    Ok(if failed > 0 { exit::FAILED } else { exit::OK })
}

fn run_eval(a: EvalArgs) -> anyhow::Result<i32> {
    let cwd = std::env::current_dir()?;
    let py = kg_exec::find_python_env(a.python.as_deref(), &cwd)?;
    let outcome = eval::evaluate(&eval::EvalOptions {
        run_dir: a.run_dir,
        heldout_dir: a.heldout_dir,
        tasks_dir: a.tasks_dir,
        output_suffix: a.output_suffix,
        tasks: a.tasks,
        timeout: a.timeout.map(Duration::from_secs),
        python: py.path,
        env: vec![],
    })?;
    for r in &outcome.results {
        println!(
            "{:<16} {:<48} speedup {:>7.3}x (original run {:>7.3}x){}",
            r.generalization_status,
            r.task_name,
            r.speedup_ratio,
            r.original_run_speedup_ratio,
            r.error
                .as_deref()
                .and_then(|e| e.lines().next())
                .map(|e| format!("  {e}"))
                .unwrap_or_default()
        );
    }
    let s = &outcome.summary;
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
    println!(
        "summary: {}",
        outcome.output_dir.join("heldout_summary.yaml").display()
    );
    Ok(if s.errored_tasks > 0 {
        exit::FAILED
    } else {
        exit::OK
    })
}
