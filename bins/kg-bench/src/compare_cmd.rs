//! `kg-bench compare`: flags and printing around kg-report's run comparison.

use std::path::PathBuf;

use anyhow::bail;
use clap::Args;
use kg_contract::exit;

/// Exit codes of `compare`.
pub const EXIT_COMPARE: &str = "Exit codes:
  0    no workload is a significant regression beyond --threshold
  1    a workload is slower: its whole 95% interval lies above 1 + threshold
  2    an input that does not load, or a bad --threshold";

/// `kg-bench compare`.
#[derive(Args)]
pub struct CompareArgs {
    /// The baseline: a run directory or a trace file.
    base: PathBuf,
    /// The run under review: a run directory or a trace file.
    head: PathBuf,
    /// Relative change that counts (0.05: a workload is slower when its interval lies above
    /// 1.05x, faster when below 1/1.05).
    #[arg(long, default_value_t = 0.05)]
    threshold: f64,
    /// Print a Markdown comment for a pull request.
    #[arg(long, conflicts_with = "json")]
    markdown: bool,
    /// Print the comparison as JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `compare`: exit 1 on a significant regression, `Err` (exit 2) for bad inputs.
pub fn compare(a: CompareArgs) -> anyhow::Result<i32> {
    if !(a.threshold.is_finite() && a.threshold >= 0.0) {
        bail!(
            "--threshold is {}; expected a number >= 0 (0.05 is 5%)",
            a.threshold
        );
    }
    let c = kg_report::compare::compare(&[a.base], &[a.head], a.threshold)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&c)?);
    } else if a.markdown {
        print!("{}", c.to_markdown());
    } else {
        print!("{}", c.to_text());
    }
    Ok(if c.has_regression() {
        exit::FAILED
    } else {
        exit::OK
    })
}
