//! `kg-bench report`: flags and file writing around kg-report's HTML page.

use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::Args;
use kg_report::model::{Report, ReportOptions, SolTable};

/// Exit codes of `report`.
pub const EXIT_REPORT: &str = "Exit codes:
  0    the report was written (whatever the traces' statuses)
  2    an input, --sol or --hardware that does not load, or -o that cannot be written";

/// `kg-bench report`.
#[derive(Args)]
pub struct ReportArgs {
    /// Run directories (`kg-bench run -o DIR`) or trace files (JSONL).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// The HTML file to write (self-contained: opens from disk, fetches nothing).
    #[arg(short, long, value_name = "FILE")]
    output: PathBuf,
    /// kg-solar analyses (`kg-bench solar analyze CORPUS -o DIR`): FLOPs and bytes per workload
    /// for the roofline and fraction of SOL.
    #[arg(long, value_name = "DIR")]
    sol: Option<PathBuf>,
    /// Hardware spec for every device (h200, h100, b200, mi300x, mi355x, rx9060xt, or a spec YAML
    /// file); default: the built-in spec the device's name names, if any.
    #[arg(long, value_name = "NAME|FILE")]
    hardware: Option<String>,
}

/// Runs `report`: writes the page, prints its path; `Err` is exit 2.
pub fn report(a: ReportArgs) -> anyhow::Result<i32> {
    if a.output.is_dir() {
        bail!(
            "-o `{}` is a directory; give a file name such as report.html",
            a.output.display()
        );
    }
    let loaded = kg_report::load::load_inputs(&a.inputs)?;
    for w in &loaded.warnings {
        eprintln!("warning: {w}");
    }
    let sol = a
        .sol
        .as_deref()
        .map(SolTable::load)
        .transpose()
        .context("failed to load --sol")?;
    let hardware = a
        .hardware
        .as_deref()
        .map(kg_solar::hardware::load)
        .transpose()?;
    let opts = ReportOptions {
        sol,
        hardware,
        inputs: a.inputs.iter().map(|p| p.display().to_string()).collect(),
    };
    let report = Report::build(loaded, &opts);
    let points = report.rows.iter().filter(|r| r.on_roofline()).count();
    kg_contract::io::write_atomic(&a.output, kg_report::html::render(&report).as_bytes())?;
    if opts.sol.is_none() {
        eprintln!("note: no --sol DIR given, so the report has no roofline and no fraction of SOL");
    }
    for d in report.devices.iter().filter(|d| d.spec.is_none()) {
        eprintln!("note: {}: {}", d.label(), d.spec_note);
    }
    println!(
        "{} ({} trace(s), {} roofline point(s))",
        a.output.display(),
        report.rows.len(),
        points
    );
    Ok(kg_contract::exit::OK)
}
