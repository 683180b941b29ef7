//! `kg-bench solar ...`: speed-of-light analysis of a problem's reference (kg-solar).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use kg_contract::Problem;
use kg_solar::ExtractionPath;
use kg_solar::analysis::{analysis_dir, analyze_batch, write_analysis};

/// SOL analysis subcommands.
#[derive(Subcommand)]
pub enum SolarCommand {
    /// Derive T_SOL per workload from the reference: operator graph, einsum IR, roofline.
    Analyze(AnalyzeArgs),
}

/// Extraction backend; the SOL ExecBench ROCm port's names are aliases.
#[derive(Clone, Copy, ValueEnum)]
pub enum ExtractionArg {
    /// ATen ops after dispatch (make_fx, fake tensors); alias make_fx_aten.
    #[value(alias = "make_fx_aten")]
    Aten,
    /// torch-function calls (torch.*, Tensor methods, torch.nn.functional.*); alias
    /// torchview_extended_einsum.
    #[value(alias = "torchview_extended_einsum")]
    Fx,
}

/// Arguments of `solar analyze`.
#[derive(Args)]
pub struct AnalyzeArgs {
    /// Problem directory, or a corpus directory holding problem directories.
    pub problem_dir: PathBuf,
    /// Only this workload uuid (default: every workload).
    #[arg(long, conflicts_with = "all")]
    pub workload: Option<String>,
    /// Every workload (the default).
    #[arg(long)]
    pub all: bool,
    /// h200, h100, b200, mi300x, mi355x, rx9060xt, or a spec YAML file.
    #[arg(long, default_value = "h200")]
    pub hardware: String,
    /// Extraction backend; a run never falls back to the other one.
    #[arg(long, value_enum, default_value = "aten")]
    pub backend: ExtractionArg,
    /// Output directory: OUT/<definition>/<workload>/ holding operator_graph.yaml,
    /// einsum_graph.yaml (fx) or aten_graph.yaml (aten), conversion-attestation.yaml,
    /// solar-analysis.yaml and manifest.yaml.
    #[arg(short, long, default_value = "solar-out")]
    pub output: PathBuf,
    /// Print the analysis records as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Python interpreter (else $PYTHON_BIN, else .venv/bin/python here or above, else python3).
    #[arg(long)]
    pub python: Option<PathBuf>,
}

/// Problem directories at `path`: itself, or its subdirectories holding a definition.
pub fn problem_dirs(path: &Path) -> Result<Vec<PathBuf>> {
    if path.join("definition.json").is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut dirs = Vec::new();
    let rd =
        std::fs::read_dir(path).with_context(|| format!("failed to read `{}`", path.display()))?;
    for e in rd {
        let p = e
            .with_context(|| format!("failed to read `{}`", path.display()))?
            .path();
        if p.is_dir() {
            dirs.extend(problem_dirs(&p)?);
        }
    }
    dirs.sort();
    if dirs.is_empty() {
        bail!(
            "`{}` holds no definition.json (neither a problem nor a corpus directory)",
            path.display()
        );
    }
    Ok(dirs)
}

/// Runs a solar subcommand; returns the exit code.
pub fn run(cmd: SolarCommand) -> Result<i32> {
    match cmd {
        SolarCommand::Analyze(a) => analyze(a),
    }
}

fn analyze(a: AnalyzeArgs) -> Result<i32> {
    let hw = kg_solar::hardware::load(&a.hardware)?;
    let backend = match a.backend {
        ExtractionArg::Aten => ExtractionPath::Aten,
        ExtractionArg::Fx => ExtractionPath::Fx,
    };
    let cwd = std::env::current_dir().context("failed to read the working directory")?;
    let python = kg_exec::find_python_env(a.python.as_deref(), &cwd)?.path;
    let problems: Vec<Problem> = problem_dirs(&a.problem_dir)?
        .iter()
        .map(|d| {
            Problem::load(d).with_context(|| format!("failed to load problem `{}`", d.display()))
        })
        .collect::<Result<_>>()?;
    let mut items = Vec::new();
    for p in &problems {
        for (i, w) in p.workloads.iter().enumerate() {
            if a.workload.as_deref().is_none_or(|u| u == w.workload.uuid) {
                items.push((p, i, backend));
            }
        }
    }
    if items.is_empty() {
        bail!("no workload matches `{}`", a.workload.unwrap_or_default());
    }
    eprintln!(
        "tracing {} workload(s) with backend {backend} using `{}`",
        items.len(),
        python.display()
    );
    let results = analyze_batch(&items, &python, &hw)?;
    let mut records = Vec::new();
    let mut failed = 0;
    for ((p, i, _), r) in items.iter().zip(results) {
        match r {
            Ok(an) => {
                let dir = analysis_dir(
                    &a.output,
                    &p.definition.name,
                    &p.workloads[*i].workload.uuid,
                );
                write_analysis(&dir, &an, &hw)?;
                if !a.json {
                    let r = &an.record;
                    println!(
                        "{:<48} {:<38} T_SOL {:>12.6} ms  {:<7} compute {:.6} ms  memory fused {:.6} / unfused {:.6} ms",
                        r.definition,
                        r.workload,
                        r.t_sol_ms,
                        format!("{:?}", r.bound).to_lowercase(),
                        r.t_compute_ms,
                        r.t_memory_fused_ms,
                        r.t_memory_unfused_ms
                    );
                }
                records.push(an.record);
            }
            Err(e) => {
                failed += 1;
                eprintln!("error: {e}");
            }
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&records)?);
    }
    eprintln!(
        "{} analysed, {failed} failed; artifacts in `{}` (hardware {}, backend {backend} = {})",
        records.len(),
        a.output.display(),
        hw.spec.name,
        backend.port_name()
    );
    Ok(if failed == 0 {
        kg_contract::exit::OK
    } else {
        kg_contract::exit::FAILED
    })
}
