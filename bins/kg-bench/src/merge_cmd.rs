//! `kg-bench merge`: flags and printing around `kg_exec::shard::merge`.

use std::path::PathBuf;

use anyhow::anyhow;
use clap::Args;
use kg_contract::{chain, exit};
use kg_exec::shard::{MergeError, MergeOptions};

use kg_cli::{Failure, usage};

/// Exit codes of `merge`.
pub const EXIT_MERGE: &str = "Exit codes:
  0    merged: OUT holds the traces and summary.json (the verdicts are in it)
  1    a shard's evidence does not verify (an edited or cut trace, a trace of another problem
       tree or solution, a file the shard does not account for): nothing written
  2    not one run's complete set of shards (missing, given twice, another corpus or solution
       set, another N), a directory that is not a finished shard, or OUT already holds a run:
       nothing written";

/// `kg-bench merge`.
#[derive(Args)]
pub struct MergeArgs {
    /// Output run directory: empty, new, or holding only the shard directories.
    out: PathBuf,
    /// The shards' run directories (`kg-bench run --shard K/N -o DIR`), in any order.
    #[arg(required = true, value_name = "SHARD_DIR")]
    shards: Vec<PathBuf>,
    /// Public key (`kg-bench keygen`'s OUT.pub): every trace line and every shard's summary
    /// must be signed by it.
    #[arg(long, value_name = "FILE")]
    pubkey: Option<PathBuf>,
    /// Sign the merged summary's chain record with this Ed25519 private key.
    #[arg(long, value_name = "FILE")]
    sign_key: Option<PathBuf>,
    /// Print the merged summary as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// Merges `dirs` into `out`: findings printed on stderr and exit 1 when the evidence does not
/// verify, exit 2 for any other refusal.
pub(crate) fn merge_shards(
    out: &std::path::Path,
    dirs: &[PathBuf],
    opts: &MergeOptions,
) -> Result<kg_exec::shard::MergeOutcome, Failure> {
    match kg_exec::shard::merge(out, dirs, opts) {
        Ok(o) => Ok(o),
        Err(MergeError::Unverified { findings }) => {
            for f in &findings {
                eprintln!("FAILED  {f}");
            }
            Err(Failure {
                code: exit::FAILED,
                error: anyhow!(
                    "the shards' evidence does not verify ({} finding(s) above); nothing was written",
                    findings.len()
                ),
            })
        }
        Err(e) => Err(usage(e)),
    }
}

/// Prints a merged run: its summary as JSON, or each shard (with `shards`), the totals and
/// where the summary is.
pub(crate) fn print_merged(
    outcome: &kg_exec::shard::MergeOutcome,
    json: bool,
    shards: bool,
) -> Result<(), Failure> {
    let s = &outcome.summary;
    if json {
        println!("{}", serde_json::to_string_pretty(s).map_err(usage)?);
        return Ok(());
    }
    for m in s.merged_from.iter().filter(|_| shards) {
        println!(
            "shard {}  {}  host {}  device {}  {} trace file(s)",
            m.shard, m.dir, m.host, m.device, m.traces
        );
    }
    println!("{}", crate::output::summary_line(s));
    println!(
        "merged {} shard(s), {} trace file(s): {}",
        s.merged_from.len(),
        outcome.traces.len(),
        outcome.summary_path.display()
    );
    Ok(())
}

/// Runs `merge`.
pub(crate) fn merge(a: MergeArgs) -> Result<i32, Failure> {
    let mut opts = MergeOptions {
        run_id: chain::new_run_id().map_err(usage)?,
        ..MergeOptions::default()
    };
    if let Some(p) = &a.pubkey {
        opts.trusted_key = Some(chain::load_public_key(p).map_err(usage)?);
    }
    if let Some(p) = &a.sign_key {
        opts.signer = Some(chain::load_signing_key(p).map_err(usage)?);
    }
    let outcome = merge_shards(&a.out, &a.shards, &opts)?;
    print_merged(&outcome, a.json, true)?;
    Ok(exit::OK)
}
