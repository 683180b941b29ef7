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
    /// Verify a release bundle: re-hash every artifact and recompute the score. Reads
    /// kernelgate's bundles and the SOL ExecBench ROCm port's (`RELEASE/release-bundle.json`,
    /// `sol_execbench.release_bundle.v2`).
    Official {
        /// Path of release-bundle.json.
        bundle: PathBuf,
        /// Port bundles: score over this corpus manifest SHA-256 instead of the port's pinned
        /// one (the report says so).
        #[arg(long, value_name = "SHA256")]
        corpus_sha256: Option<String>,
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
        ScoreCommand::Official {
            bundle: path,
            json,
            corpus_sha256,
        } if kg_score::port::is_port_bundle(&path)? => {
            let opts = kg_score::port::VerifyOptions { corpus_sha256 };
            let r = kg_score::port::verify(&path, &opts).with_context(|| {
                format!(
                    "port release bundle `{}` failed verification",
                    path.display()
                )
            })?;
            if json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                for (p, s) in &r.problem_scores {
                    println!("{p:<56} {s:>8.6}");
                }
                println!(
                    "Official SOL score: {:.9} over {} problems, {} workloads",
                    r.score,
                    r.problem_scores.len(),
                    r.scored_workloads
                );
                println!(
                    "candidate {}  baseline {}  source {}  bundle sha256 {}",
                    r.candidate_id, r.baseline_id, r.source_revision, r.release_bundle_sha256
                );
                println!(
                    "verified: {} artifacts re-hashed; corpus manifest {}{}",
                    r.artifacts_verified,
                    r.corpus_manifest_sha256,
                    if r.corpus_is_port_pinned {
                        " (the port's pinned corpus)"
                    } else {
                        " (NOT the port's pinned corpus: pinned by --corpus-sha256)"
                    }
                );
                for u in &r.unchecked {
                    println!("not checked: {u}");
                }
            }
            Ok(kg_contract::exit::OK)
        }
        ScoreCommand::Official {
            bundle: path, json, ..
        } => {
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
            if let Some(path) = path
                .as_ref()
                .filter(|p| kg_score::port::is_port_bundle(p).unwrap_or(false))
            {
                let (b, _): (kg_score::port::PortBundle, _) = kg_contract::io::load_json(path)?;
                println!(
                    "bundle format:     {} (SOL ExecBench ROCm port)",
                    b.schema_version
                );
                for (what, r) in [
                    ("corpus manifest", &b.corpus_manifest),
                    ("baseline", &b.baseline),
                    ("candidate", &b.candidate),
                    ("solar", &b.solar),
                ] {
                    println!(
                        "{what:<18} {} ({} bytes, sha256 {})",
                        r.path, r.size_bytes, r.sha256
                    );
                }
                println!(
                    "corpus pinned:     {}",
                    b.corpus_manifest.sha256 == kg_score::port::PINNED_CORPUS_MANIFEST_SHA256
                );
                println!("not verified; run `kg-bench score official`");
            } else if let Some(path) = path {
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
