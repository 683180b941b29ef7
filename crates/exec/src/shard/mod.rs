//! Sharding a corpus run over hosts (`kg-bench run --shard K/N`) and merging the shards back
//! into one run (`kg-bench merge`).
//!
//! Every shard loads the whole corpus and computes the same partition of its selected
//! (problem, solution) pairs, so no coordinator is needed: a scheduler only hands each task its
//! `K`. The partition is deterministic (longest expected cost first, onto the lightest shard,
//! ties by plan order and shard number) and depends only on the corpus, the solutions, the
//! filters and `--max-workloads`, never on the device or the host.
//!
//! A shard's run directory is a normal run directory plus `shard.json` ([`ShardManifest`]): the
//! whole corpus listing (every problem's tree hash, every selected pair with its cost and its
//! shard), the hashes over that listing, this shard's number, its run id, host and GPU claims.
//! [`merge()`] checks the listings agree, that the shards are complete and disjoint, verifies
//! every trace against the listing, and writes one run directory.

mod merge;
#[cfg(test)]
mod tests;

use std::str::FromStr;

use kg_contract::LoadedWorkload;
use kg_contract::claim::GpuClaim;
use kg_contract::io::sha256_hex;
use serde::{Deserialize, Serialize};

pub use merge::{MergeError, MergeFinding, MergeOptions, MergeOutcome, MergedShard, merge};

/// The shard manifest's file name in a shard's run directory.
pub const SHARD_FILE: &str = "shard.json";
/// [`ShardManifest::format`].
pub const SHARD_FORMAT: &str = "kernelgate-shard-v1";

/// Fixed cost of a pair in the partition's units (milliseconds): starting its candidate.
const PAIR_FIXED_MS: u64 = 3000;
/// Fixed cost of a workload (messages, files, correctness rounds).
const WORKLOAD_FIXED_MS: u64 = 1000;
/// Input elements per millisecond of cost: a workload's size counts, its count counts more.
const ELEMENTS_PER_MS: i64 = 100_000;

/// Shard `k` of `n` (1-based), as `--shard K/N` gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ShardSpec {
    /// This shard, 1..=n.
    pub k: u32,
    /// The number of shards.
    pub n: u32,
}

impl std::fmt::Display for ShardSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.k, self.n)
    }
}

impl FromStr for ShardSpec {
    type Err = String;

    /// `K/N` with 1 ≤ K ≤ N.
    fn from_str(s: &str) -> Result<ShardSpec, String> {
        let bad = || format!("`{s}` is not a shard `K/N` with 1 <= K <= N (e.g. `2/3`)");
        let (k, n) = s.trim().split_once('/').ok_or_else(bad)?;
        let k: u32 = k.trim().parse().map_err(|_| bad())?;
        let n: u32 = n.trim().parse().map_err(|_| bad())?;
        if k == 0 || n == 0 || k > n {
            return Err(bad());
        }
        Ok(ShardSpec { k, n })
    }
}

impl ShardSpec {
    /// The shard of a Slurm array task: `SLURM_ARRAY_TASK_ID` of an array `1-N`
    /// (`SLURM_ARRAY_TASK_MIN` 1, `SLURM_ARRAY_TASK_COUNT` N). Any other array is refused with
    /// the fix: an explicit `--shard $SLURM_ARRAY_TASK_ID/N` (a resubmitted subset such as
    /// `--array=3,5` has no way to say N).
    pub fn from_slurm(var: impl Fn(&str) -> Option<String>) -> Result<ShardSpec, String> {
        let get = |name: &str| -> Result<u32, String> {
            let v = var(name).ok_or_else(|| {
                format!("--shard slurm: `{name}` is not set (not inside a Slurm array task?)")
            })?;
            v.trim()
                .parse()
                .map_err(|_| format!("--shard slurm: `{name}={v}` is not a number"))
        };
        let (id, min, count) = (
            get("SLURM_ARRAY_TASK_ID")?,
            get("SLURM_ARRAY_TASK_MIN")?,
            get("SLURM_ARRAY_TASK_COUNT")?,
        );
        let max = get("SLURM_ARRAY_TASK_MAX")?;
        if min != 1 || max != count {
            return Err(format!(
                "--shard slurm needs an array `1-N` (this one runs tasks {min}..{max}, {count} of them); pass `--shard $SLURM_ARRAY_TASK_ID/N` instead"
            ));
        }
        Ok(ShardSpec { k: id, n: count })
    }
}

/// Every problem of the corpus as the shards saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardProblem {
    /// Its key ([`crate::corpus::problem_key`]).
    pub key: String,
    /// Its tree hash when loaded; `None` when it failed to load.
    pub tree_sha256: Option<String>,
}

/// One selected pair of the corpus and the shard it belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardPair {
    /// The problem key.
    pub key: String,
    /// The solution's name.
    pub solution: String,
    /// The solution's hash ([`kg_contract::chain::solution_sha256`]).
    pub solution_sha256: String,
    /// Its trace file, as the run's chain record names it ([`kg_contract::chain::head_key`]).
    pub trace: String,
    /// Its expected cost ([`pair_cost`]), in the partition's units.
    pub cost: u64,
    /// The shard that evaluates it (1-based).
    pub shard: u32,
}

/// `shard.json`: what a shard covers and where it ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardManifest {
    /// [`SHARD_FORMAT`].
    pub format: String,
    /// This shard.
    pub shard: ShardSpec,
    /// The corpus directory as given.
    pub corpus: String,
    /// SHA-256 over [`ShardManifest::problems`] ([`corpus_sha256`]).
    pub corpus_sha256: String,
    /// SHA-256 over [`ShardManifest::pairs`], the filters and `--max-workloads`
    /// ([`solutions_sha256`]).
    pub solutions_sha256: String,
    /// `--max-workloads`.
    pub max_workloads: Option<usize>,
    /// `--filter` expressions.
    pub filters: Vec<String>,
    /// Every problem of the corpus, in corpus order.
    pub problems: Vec<ShardProblem>,
    /// Every selected pair of the corpus (all shards), in plan order.
    pub pairs: Vec<ShardPair>,
    /// The run that evaluated this shard.
    pub run_id: String,
    /// The host it ran on.
    pub host: String,
    /// The device as chosen.
    pub device: String,
    /// The GPU claims of its lanes (none on the CPU or an unclaimed device).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_claims: Vec<GpuClaim>,
    /// kernelgate's version.
    pub kernelgate_version: String,
    /// When it was written (UTC, RFC 3339).
    pub written_at: String,
}

/// The hash that identifies a corpus: every problem's key and tree hash (or that it failed to
/// load), in order.
pub fn corpus_sha256(problems: &[ShardProblem]) -> String {
    let mut text = String::new();
    for p in problems {
        text.push_str(&p.key);
        text.push('\t');
        text.push_str(p.tree_sha256.as_deref().unwrap_or("!failed"));
        text.push('\n');
    }
    sha256_hex(text.as_bytes())
}

/// The hash that identifies a solution set: every selected pair (key, solution, its hash, its
/// trace file, cost and shard), the filters and `--max-workloads`.
pub fn solutions_sha256(pairs: &[ShardPair], filters: &[String], max: Option<usize>) -> String {
    let mut text = format!("max_workloads\t{max:?}\n");
    for f in filters {
        text.push_str("filter\t");
        text.push_str(f);
        text.push('\n');
    }
    for p in pairs {
        text.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\t{}\n",
            p.key, p.solution, p.solution_sha256, p.trace, p.cost, p.shard
        ));
    }
    sha256_hex(text.as_bytes())
}

/// A pair's expected cost in the partition's units: a fixed cost, and per workload a fixed
/// cost plus its input size. Device-neutral on purpose (a Triton kernel is interpreted on the
/// CPU only), so every host computes the same partition.
pub fn pair_cost(workloads: &[&LoadedWorkload]) -> u64 {
    PAIR_FIXED_MS
        + workloads
            .iter()
            .map(|w| {
                let e = crate::corpus::input_elements(w).max(0) / ELEMENTS_PER_MS;
                WORKLOAD_FIXED_MS + u64::try_from(e).unwrap_or(0)
            })
            .sum::<u64>()
}

/// The shard (1-based) of each item of `costs`: longest first onto the shard with the least
/// cost so far; ties go to the earlier item and the lower shard. Deterministic.
pub fn partition(costs: &[u64], n: u32) -> Vec<u32> {
    let n = n.max(1);
    let mut order: Vec<usize> = (0..costs.len()).collect();
    order.sort_by(|&a, &b| costs[b].cmp(&costs[a]).then(a.cmp(&b)));
    let mut load = vec![0u64; n as usize];
    let mut out = vec![1u32; costs.len()];
    for i in order {
        let (s, _) = load
            .iter()
            .enumerate()
            .min_by(|(a, la), (b, lb)| la.cmp(lb).then(a.cmp(b)))
            .unwrap_or((0, &0));
        load[s] += costs[i];
        out[i] = u32::try_from(s).unwrap_or(0) + 1;
    }
    out
}

/// Errors of choosing a shard.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    /// More shards than selected pairs: some would be empty.
    #[error(
        "--shard {spec}: the run selects {pairs} problem/solution pair(s), fewer than {n} shards; use at most {pairs} shard(s)",
        n = spec.n
    )]
    TooManyShards {
        /// The shard asked for.
        spec: ShardSpec,
        /// Selected pairs.
        pairs: usize,
    },
}

/// The listing part of a [`ShardManifest`], computed from a plan before anything runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardListing {
    /// This shard.
    pub spec: ShardSpec,
    /// Every problem.
    pub problems: Vec<ShardProblem>,
    /// Every selected pair, with its shard.
    pub pairs: Vec<ShardPair>,
}

impl ShardListing {
    /// The manifest of this listing once the shard ran.
    pub fn manifest(&self, run: ShardRun) -> ShardManifest {
        ShardManifest {
            format: SHARD_FORMAT.into(),
            shard: self.spec,
            corpus: run.corpus,
            corpus_sha256: corpus_sha256(&self.problems),
            solutions_sha256: solutions_sha256(&self.pairs, &run.filters, run.max_workloads),
            max_workloads: run.max_workloads,
            filters: run.filters,
            problems: self.problems.clone(),
            pairs: self.pairs.clone(),
            run_id: run.run_id,
            host: kg_gpu::sys::hostname(),
            device: run.device,
            gpu_claims: run.gpu_claims,
            kernelgate_version: env!("CARGO_PKG_VERSION").into(),
            written_at: kg_proc::now_utc(),
        }
    }
}

/// What a shard's run adds to its listing.
#[derive(Debug, Clone)]
pub struct ShardRun {
    /// The corpus directory as given.
    pub corpus: String,
    /// `--filter` expressions.
    pub filters: Vec<String>,
    /// `--max-workloads`.
    pub max_workloads: Option<usize>,
    /// The run id.
    pub run_id: String,
    /// The device as chosen.
    pub device: String,
    /// The lanes' GPU claims.
    pub gpu_claims: Vec<GpuClaim>,
}
