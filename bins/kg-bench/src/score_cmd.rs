//! `kg-bench score ...`: the SOL score and release bundles (kg-score).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Subcommand;
use kg_score::{ScoreReport, bundle};

/// Score subcommands.
#[derive(Subcommand)]
pub enum ScoreCommand {
    /// Score candidate traces against baseline traces and SOL bounds.
    Compute {
        /// Candidate traces: a JSONL file or a directory of them.
        #[arg(long)]
        candidate: PathBuf,
        /// Baseline traces (same device and timing method).
        #[arg(long)]
        baseline: PathBuf,
        /// A directory of solar analyses, or a JSONL file of {"definition","workload","t_sol_ms"}.
        #[arg(long)]
        sol: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Verify a release bundle: re-hash every artifact and recompute the score.
    Official {
        /// Path of release-bundle.json.
        bundle: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the scoring policy, and the baseline identity of a bundle if given.
    Status {
        /// Path of release-bundle.json.
        bundle: Option<PathBuf>,
    },
}

fn print_report(r: &ScoreReport) {
    println!("device {}  timing {}", r.device, r.timing_method);
    println!(
        "{:<56} {:>8} {:>9} {:>7} {:>15}",
        "problem", "score", "workloads", "passed", "faster_than_sol"
    );
    for p in &r.problems {
        println!(
            "{:<56} {:>8.4} {:>9} {:>7} {:>15}",
            p.definition, p.score, p.workloads, p.passed, p.faster_than_sol
        );
    }
    for w in r.workloads.iter().filter(|w| !w.flags.is_empty()) {
        println!(
            "flag {:?}: {} / {} ({})",
            w.flags, w.definition, w.workload, w.status
        );
    }
    println!(
        "overall SOL score {:.6} over {} problems, {} workloads",
        r.overall,
        r.problems.len(),
        r.workloads.len()
    );
}

/// Runs a score subcommand; returns the exit code.
pub fn run(cmd: ScoreCommand) -> Result<i32> {
    match cmd {
        ScoreCommand::Compute {
            candidate,
            baseline,
            sol,
            json,
        } => {
            let c = kg_score::load_traces(&candidate)?;
            let b = kg_score::load_traces(&baseline)?;
            let s = kg_score::load_sol(&sol)?;
            let r = kg_score::compute(&c, &b, &s)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print_report(&r);
            }
            Ok(kg_contract::exit::OK)
        }
        ScoreCommand::Official { bundle: path, json } => {
            let (b, r) = bundle::verify(&path)
                .with_context(|| format!("bundle `{}` failed verification", path.display()))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                print_report(&r);
                println!(
                    "verified: {} corpus files, {} + {} trace files, {} SOL manifests re-hashed; hardware {} ({}), backend {}",
                    b.corpus.len(),
                    b.baseline.traces.len(),
                    b.candidate.traces.len(),
                    b.solar_manifests.len(),
                    b.hardware,
                    b.hardware_sha256,
                    b.backend
                );
            }
            Ok(kg_contract::exit::OK)
        }
        ScoreCommand::Status { bundle: path } => {
            let p = kg_score::policy();
            println!("formula:     {}", p.formula);
            println!("aggregation: {}", p.aggregation);
            for (k, v) in &p.flags {
                println!("flag {k}: {v}");
            }
            for e in &p.errors {
                println!("error when: {e}");
            }
            if let Some(path) = path {
                let (b, _): (bundle::ReleaseBundle, _) = kg_contract::io::load_json(&path)?;
                println!("baseline solution: {}", b.baseline.solution);
                println!("baseline device:   {}", b.device);
                if let Some(d) = &b.device_detail {
                    println!(
                        "device uuid:       {}",
                        d.uuid.as_deref().unwrap_or("unknown")
                    );
                }
                println!("timing method:     {}", b.timing_method);
                println!("hardware spec:     {} ({})", b.hardware, b.hardware_sha256);
                println!("tool version:      {} {}", b.tool, b.tool_version);
                println!(
                    "recorded score:    {} (not verified; run `kg-bench score official`)",
                    b.score.overall
                );
            }
            Ok(kg_contract::exit::OK)
        }
    }
}
