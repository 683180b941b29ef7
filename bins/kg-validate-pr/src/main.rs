//! `kg-validate-pr`: validate a kernel PR on a claimed GPU, base against head, and write a
//! head-bound `validation_report.json`. Exit codes: PASS 0, BLOCK or NEEDS_WORK 1,
//! INCONCLUSIVE 2 (also for bad input and interruption).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::{CommandFactory, FromArgMatches, Parser};
use kg_contract::report::Verdict;
use kg_validate::options::{parse_grid, parse_perf_args, parse_tol_table};
use kg_validate::{AxisSpec, HostSettings, Options, RunnerChoice, ValidateError};

/// Validate a kernel pull request: apply the patch to a clean base worktree, claim an idle GPU,
/// run the same target on base and head, prove the shape grid reaches the target, record the
/// kernel route that ran, and write a report bound to the head commit. Missing evidence is
/// INCONCLUSIVE, never PASS.
///
/// Host settings come from the environment: PYLIB, PYTHON_BIN, PICKER, TIMEOUT (1800),
/// PERF_TIMEOUT, PERF_REPEAT (3), PERF_THRESHOLD (0.95), PERF_MIN_ROWS (3),
/// PERF_CONTROL_TOL (0.10), KG_VALIDATE_PICK_SAMPLES (10), KG_VALIDATE_PICK_INTERVAL_S (1),
/// and kg-gpu's KG_GPU_BACKEND / KG_GPU_LOCK_DIR.
#[derive(Parser, Debug)]
#[command(name = "kg-validate-pr", version)]
struct Cli {
    /// The clean base worktree to validate (handed back unchanged).
    #[arg(long)]
    repo: PathBuf,
    /// Script file or pytest file / `path::node` the PR ships.
    #[arg(long, alias = "tests")]
    target: String,
    /// Base-to-head patch to apply first; a conflict is a blocker.
    #[arg(long)]
    patch: Option<PathBuf>,
    /// Exact PR head OID the patch represents (40 hex); without it the report is local evidence.
    #[arg(long)]
    head_sha: Option<String>,
    /// Exact `module:function` route the validator-owned probe must observe.
    #[arg(long)]
    expected_route: Option<String>,
    /// Comma-separated locals captured from each route call, in grid order.
    #[arg(long, value_delimiter = ',')]
    shape_vars: Vec<String>,
    /// Environment variable the target reads its shapes from.
    #[arg(long)]
    shape_env: Option<String>,
    /// The script target's own CLI flag that accepts shapes (e.g. `--shape-arg --shapes`).
    #[arg(long, allow_hyphen_values = true)]
    shape_arg: Option<String>,
    /// Pytest parameter names whose parametrize rows the grid replaces (comma-separated).
    #[arg(long, value_delimiter = ',')]
    shape_argnames: Option<Vec<String>>,
    /// Shape cells, `a,b,c;d,e,f`.
    #[arg(long)]
    grid: Option<String>,
    /// Extra independent axis `NAME=FLAG:v1;v2` on its own CLI flag (repeatable; scripts only).
    #[arg(long)]
    axis: Vec<String>,
    /// Force `pytest`, `script` or `none` (the report records what selection had said).
    #[arg(long, default_value = "auto")]
    runner: String,
    /// Package whose import from the checkout runtime_compat checks (default: by repo kind, else
    /// the target's first import the checkout provides).
    #[arg(long)]
    runtime_module: Option<String>,
    /// Why the grid adds coverage, when the channel exposes no default to compare it with (an
    /// env-var channel): recorded, and `grid_independence` becomes `adds-coverage` (asserted).
    /// Never overrides a grid found to duplicate the target's own defaults.
    #[arg(long, value_name = "WHY")]
    grid_novelty: Option<String>,
    /// A timing column the patch does not touch; timings are distrusted if it moves.
    #[arg(long)]
    perf_control_column: Option<String>,
    /// Reference tolerances, `f32=1e-5,f16=2e-3,bf16=1e-2`.
    #[arg(long)]
    tol_table: Option<String>,
    /// Benchmark entry point for the perf stage (`script.py args...`); forces perf on.
    #[arg(long, allow_hyphen_values = true)]
    perf_args: Option<String>,
    /// Skip the perf stage.
    #[arg(long)]
    no_perf: bool,
    /// Run name.
    #[arg(long, default_value = "kg-validate-pr")]
    label: String,
    /// Report path; inside the worktree only where git ignores it or lists just that untracked
    /// path (the worktree is handed back as received either way).
    #[arg(long, default_value = "validation_report.json")]
    out: PathBuf,
    /// Also write a PR-comment summary in Markdown.
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Also write JUnit XML for CI test reports: a testcase per stage (a failed stage a failure
    /// with its findings, a skipped one skipped) and a `verdict` testcase that fails unless PASS.
    #[arg(long, value_name = "FILE")]
    junit: Option<PathBuf>,
    /// Also print the report to stdout.
    #[arg(long)]
    json: bool,
    /// Interpreter (else PYTHON_BIN, else .venv/bin/python, else python3).
    #[arg(long)]
    python: Option<PathBuf>,
}

/// Exit code for input the validator refuses, a failure of its own, and interruption.
const EXIT_ERROR: i32 = 2;

/// The exit-code table shown by `-h` and `--help`, from the codes the verdicts carry.
fn exit_codes_help() -> String {
    format!(
        "Exit codes:\n  {}  PASS\n  {}  BLOCK or NEEDS_WORK\n  {}  INCONCLUSIVE; also bad input, a validator error, or SIGINT/SIGTERM/SIGHUP (an `error:` line, no report)",
        Verdict::Pass.exit_code(),
        Verdict::Block.exit_code(),
        Verdict::Inconclusive.exit_code(),
    )
}

fn options(cli: &Cli) -> Result<Options, ValidateError> {
    let axes = cli
        .axis
        .iter()
        .map(|a| a.parse::<AxisSpec>())
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Options {
        repo: cli.repo.clone(),
        target: cli.target.clone(),
        patch: cli.patch.clone(),
        head_sha: cli.head_sha.clone(),
        expected_route: cli.expected_route.clone(),
        shape_vars: cli
            .shape_vars
            .iter()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect(),
        shape_env: cli.shape_env.clone(),
        shape_arg: cli.shape_arg.clone(),
        shape_argnames: cli.shape_argnames.clone(),
        grid: cli.grid.as_deref().map(parse_grid).unwrap_or_default(),
        axes,
        runner: cli.runner.parse::<RunnerChoice>()?,
        runtime_module: cli.runtime_module.clone(),
        perf_control_column: cli.perf_control_column.clone(),
        grid_novelty: cli.grid_novelty.clone(),
        tol_table: cli
            .tol_table
            .as_deref()
            .map(parse_tol_table)
            .transpose()?
            .unwrap_or_default(),
        perf_args: cli.perf_args.as_deref().map(parse_perf_args).transpose()?,
        no_perf: cli.no_perf,
        label: cli.label.clone(),
        out: cli.out.clone(),
        python: cli.python.clone(),
        host: HostSettings::from_env()?,
    })
}

fn main() {
    kg_cli::init_logging("warn");
    let matches = Cli::command().after_help(exit_codes_help()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    std::process::exit(real_main(&cli));
}

fn real_main(cli: &Cli) -> i32 {
    let cancel = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        if let Err(e) = signal_hook::flag::register(sig, cancel.clone()) {
            eprintln!("error: failed to install a signal handler: {e}");
            return EXIT_ERROR;
        }
    }
    let opts = match options(cli) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("error: {e}");
            return EXIT_ERROR;
        }
    };
    let kg_validate::pipeline::Validation { report, decision } =
        match kg_validate::pipeline::run(&opts, cancel) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("error: {e}");
                return EXIT_ERROR;
            }
        };
    if let Err(e) = kg_validate::write_report(&report, &opts.out) {
        eprintln!("error: {e}");
        return EXIT_ERROR;
    }
    if let Some(md) = &cli.markdown
        && let Err(e) =
            kg_contract::io::write_atomic(md, kg_validate::markdown::render(&report).as_bytes())
    {
        eprintln!("error: failed to write `{}`: {e}", md.display());
        return EXIT_ERROR;
    }
    if let Some(path) = &cli.junit {
        let xml = kg_report::junit::render(
            "kg-validate-pr",
            &[kg_report::junit::suite_of_validation(&report)],
        );
        if let Err(e) = kg_contract::io::write_atomic(path, xml.as_bytes()) {
            eprintln!("error: failed to write `{}`: {e}", path.display());
            return EXIT_ERROR;
        }
    }
    if cli.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => eprintln!("error: failed to print the report: {e}"),
        }
    }
    // The verdict and the first stage that decided it; the full reason is in the report.
    eprintln!(
        "{}: {}, {}; report `{}`",
        report.label,
        report.verdict.as_str(),
        decision.summary(),
        opts.out.display()
    );
    report.process_exit_code
}
