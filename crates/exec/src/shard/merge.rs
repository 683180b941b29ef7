//! Merging shard run directories into one run: every check first, then the files.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use kg_contract::chain::{self, ChainError, RunChain, TraceSigner, TrustedKey, VerifyOptions};
use kg_contract::{ContractError, Trace};
use serde::{Deserialize, Serialize};

use super::{
    SHARD_FILE, SHARD_FORMAT, ShardManifest, ShardSpec, corpus_sha256, partition, solutions_sha256,
};
use crate::corpus::{self, RunSummary, TraceFile};

/// What [`merge`] checks the shards against and how it seals the result.
#[derive(Debug, Default)]
pub struct MergeOptions {
    /// Every trace line and every shard's chain record must be signed by this key.
    pub trusted_key: Option<TrustedKey>,
    /// Signs the merged summary's chain record.
    pub signer: Option<TraceSigner>,
    /// The merged run's id ([`chain::new_run_id`]).
    pub run_id: String,
}

/// One shard of a merged run, as `summary.json`'s `merged_from` records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MergedShard {
    /// Which shard.
    pub shard: ShardSpec,
    /// Its run directory as given to the merge.
    pub dir: String,
    /// Its run id.
    pub run_id: String,
    /// The host it ran on.
    pub host: String,
    /// Its device as chosen.
    pub device: String,
    /// The UUIDs of the GPUs its lanes claimed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<String>,
    /// Its trace files.
    pub traces: usize,
}

/// One thing wrong with a shard's evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MergeFinding {
    /// The file at fault.
    pub path: PathBuf,
    /// 1-based line, where one line is at fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for MergeFinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{l}: {}", self.path.display(), self.message),
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

/// What a finished merge wrote.
#[derive(Debug, Clone)]
pub struct MergeOutcome {
    /// The merged summary, as written.
    pub summary: RunSummary,
    /// Where (`OUT/summary.json`).
    pub summary_path: PathBuf,
    /// The trace files written, relative to `OUT`.
    pub traces: Vec<String>,
}

/// Why shards were not merged. Nothing is written when any of these is returned.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// No shard directories were given.
    #[error("no shard directories given; pass the run directories of `kg-bench run --shard K/N`")]
    NoShards,
    /// A directory is not a finished shard.
    #[error("`{dir}` is not a finished shard run directory: {why}")]
    NotAShard {
        /// The directory.
        dir: PathBuf,
        /// What is missing or unreadable.
        why: String,
    },
    /// A shard manifest disagrees with itself (edited, or written by another kernelgate).
    #[error("`{path}` does not agree with itself: {why}")]
    Listing {
        /// Its `shard.json`.
        path: PathBuf,
        /// What does not agree.
        why: String,
    },
    /// Two shards were cut for different numbers of shards.
    #[error(
        "`{dir}` is shard {this} but `{first_dir}` is shard {first}: the shards of one run share N"
    )]
    CountMismatch {
        /// The directory.
        dir: PathBuf,
        /// Its shard.
        this: ShardSpec,
        /// The first directory.
        first_dir: PathBuf,
        /// Its shard.
        first: ShardSpec,
    },
    /// A shard of another corpus (or of the corpus after a change).
    #[error(
        "`{dir}` is a shard of another corpus than `{first_dir}` (corpus hash {this} against {first}): a problem was added, removed or changed between them"
    )]
    OtherCorpus {
        /// The directory.
        dir: PathBuf,
        /// Its corpus hash.
        this: String,
        /// The first directory.
        first_dir: PathBuf,
        /// Its corpus hash.
        first: String,
    },
    /// A shard of another solution set, filter or `--max-workloads`.
    #[error(
        "`{dir}` evaluated another solution set than `{first_dir}` (solutions hash {this} against {first}): other solutions, --filter or --max-workloads"
    )]
    OtherSolutions {
        /// The directory.
        dir: PathBuf,
        /// Its solutions hash.
        this: String,
        /// The first directory.
        first_dir: PathBuf,
        /// Its solutions hash.
        first: String,
    },
    /// The same shard given twice.
    #[error("shard {k}/{n} is given twice: `{first}` and `{second}`; give one")]
    Duplicate {
        /// The shard number.
        k: u32,
        /// N.
        n: u32,
        /// The first directory.
        first: PathBuf,
        /// The second.
        second: PathBuf,
    },
    /// Shards missing.
    #[error("shard(s) {} of {n} missing (given: {}); run them with `kg-bench run --shard K/{n}`", list(.missing), list(.given))]
    Missing {
        /// The missing shard numbers.
        missing: Vec<u32>,
        /// N.
        n: u32,
        /// The shard numbers given.
        given: Vec<u32>,
    },
    /// Evidence that does not verify.
    #[error("{} finding(s) in the shards' evidence; first: {}", .findings.len(), .findings.first().map(ToString::to_string).unwrap_or_default())]
    Unverified {
        /// Every finding.
        findings: Vec<MergeFinding>,
    },
    /// The output would overwrite a run.
    #[error("`{path}` exists; merge into an empty directory (or one holding only the shards)")]
    OutputExists {
        /// The file that exists.
        path: PathBuf,
    },
    /// Reading or writing.
    #[error(transparent)]
    Contract(#[from] ContractError),
    /// Sealing.
    #[error(transparent)]
    Chain(#[from] ChainError),
}

fn io_err(path: &Path, source: std::io::Error) -> ContractError {
    ContractError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn list(v: &[u32]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A shard as loaded.
struct Loaded {
    dir: PathBuf,
    manifest: ShardManifest,
    summary: RunSummary,
}

/// Loads and checks one shard directory on its own.
fn load(dir: &Path) -> Result<Loaded, MergeError> {
    let not = |why: String| MergeError::NotAShard {
        dir: dir.to_path_buf(),
        why,
    };
    let mpath = dir.join(SHARD_FILE);
    if !mpath.is_file() {
        return Err(not(format!(
            "no `{SHARD_FILE}` (a run without --shard, or one that did not finish)"
        )));
    }
    let (manifest, _) = kg_contract::io::load_json::<ShardManifest>(&mpath)
        .map_err(|e| not(format!("`{SHARD_FILE}`: {e}")))?;
    let spath = dir.join("summary.json");
    let (summary, _) = kg_contract::io::load_json::<RunSummary>(&spath)
        .map_err(|e| not(format!("`summary.json`: {e}")))?;
    let bad = |why: String| MergeError::Listing {
        path: mpath.clone(),
        why,
    };
    if manifest.format != SHARD_FORMAT {
        return Err(bad(format!(
            "format `{}`; this kernelgate reads `{SHARD_FORMAT}`",
            manifest.format
        )));
    }
    if corpus_sha256(&manifest.problems) != manifest.corpus_sha256 {
        return Err(bad(
            "its problem list does not hash to its corpus_sha256".into()
        ));
    }
    let sol = solutions_sha256(&manifest.pairs, &manifest.filters, manifest.max_workloads);
    if sol != manifest.solutions_sha256 {
        return Err(bad(
            "its pair list does not hash to its solutions_sha256".into()
        ));
    }
    let costs: Vec<u64> = manifest.pairs.iter().map(|p| p.cost).collect();
    let cut = partition(&costs, manifest.shard.n);
    if let Some(p) = manifest
        .pairs
        .iter()
        .zip(&cut)
        .find(|(p, k)| p.shard != **k)
    {
        return Err(bad(format!(
            "it assigns {} / {} to shard {}, but the partition gives shard {}",
            p.0.key, p.0.solution, p.0.shard, p.1
        )));
    }
    Ok(Loaded {
        dir: dir.to_path_buf(),
        manifest,
        summary,
    })
}

/// Checks that the shards are of one run and complete; orders them by shard number.
fn check_set(mut shards: Vec<Loaded>) -> Result<Vec<Loaded>, MergeError> {
    let Some(first) = shards.first() else {
        return Err(MergeError::NoShards);
    };
    let (fdir, fm) = (first.dir.clone(), first.manifest.clone());
    for s in &shards[1..] {
        let m = &s.manifest;
        if m.shard.n != fm.shard.n {
            return Err(MergeError::CountMismatch {
                dir: s.dir.clone(),
                this: m.shard,
                first_dir: fdir,
                first: fm.shard,
            });
        }
        if m.corpus_sha256 != fm.corpus_sha256 {
            return Err(MergeError::OtherCorpus {
                dir: s.dir.clone(),
                this: m.corpus_sha256.clone(),
                first_dir: fdir,
                first: fm.corpus_sha256,
            });
        }
        if m.solutions_sha256 != fm.solutions_sha256 {
            return Err(MergeError::OtherSolutions {
                dir: s.dir.clone(),
                this: m.solutions_sha256.clone(),
                first_dir: fdir,
                first: fm.solutions_sha256,
            });
        }
    }
    shards.sort_by_key(|s| s.manifest.shard.k);
    for w in shards.windows(2) {
        if w[0].manifest.shard.k == w[1].manifest.shard.k {
            return Err(MergeError::Duplicate {
                k: w[0].manifest.shard.k,
                n: fm.shard.n,
                first: w[0].dir.clone(),
                second: w[1].dir.clone(),
            });
        }
    }
    let given: Vec<u32> = shards.iter().map(|s| s.manifest.shard.k).collect();
    let missing: Vec<u32> = (1..=fm.shard.n).filter(|k| !given.contains(k)).collect();
    if !missing.is_empty() {
        return Err(MergeError::Missing {
            missing,
            n: fm.shard.n,
            given,
        });
    }
    Ok(shards)
}

/// Verifies one shard's summary chain and traces against the listing; the trace files it
/// contributes (relative path → source file).
fn verify_shard(
    s: &Loaded,
    opts: &MergeOptions,
    findings: &mut Vec<MergeFinding>,
) -> Result<BTreeMap<String, PathBuf>, MergeError> {
    let m = &s.manifest;
    let summary_path = s.dir.join("summary.json");
    let vopts = VerifyOptions {
        trusted_key: opts.trusted_key.clone(),
        ..VerifyOptions::default()
    };
    let report = chain::verify_run(&summary_path, &vopts)?;
    for f in &report.findings {
        findings.push(MergeFinding {
            path: summary_path.clone(),
            line: f.line,
            message: f.message.clone(),
        });
    }
    for f in &report.files {
        for x in &f.findings {
            findings.push(MergeFinding {
                path: f.path.clone(),
                line: x.line,
                message: x.message.clone(),
            });
        }
    }
    let listed: BTreeSet<String> = s
        .summary
        .chain
        .as_ref()
        .map(|c| c.heads.keys().cloned().collect())
        .unwrap_or_default();
    let trees: BTreeMap<&str, Option<&str>> = m
        .problems
        .iter()
        .map(|p| (p.key.as_str(), p.tree_sha256.as_deref()))
        .collect();
    let mut files = BTreeMap::new();
    for p in m.pairs.iter().filter(|p| p.shard == m.shard.k) {
        let refused = s
            .summary
            .refused
            .get(&p.key)
            .is_some_and(|r| r.contains_key(&p.solution));
        let stopped = s.summary.errors.contains_key(&p.key);
        let path = s.dir.join(&p.trace);
        if !listed.contains(&p.trace) {
            if !refused && !stopped {
                findings.push(MergeFinding {
                    path: summary_path.clone(),
                    line: None,
                    message: format!(
                        "{} / {} belongs to shard {} but its trace file `{}` is not in the summary's chain record",
                        p.key, p.solution, m.shard, p.trace
                    ),
                });
            }
            continue;
        }
        let rows = match kg_contract::io::load_jsonl::<Trace>(&path) {
            Ok(r) => r,
            Err(e) => {
                findings.push(MergeFinding {
                    path: path.clone(),
                    line: None,
                    message: e.to_string(),
                });
                continue;
            }
        };
        let tree = trees.get(p.key.as_str()).copied().flatten();
        for (line, t, _) in rows {
            let mut bad = |message: String| {
                findings.push(MergeFinding {
                    path: path.clone(),
                    line: Some(line),
                    message,
                });
            };
            let Some(c) = &t.kernelgate_chain else {
                bad("has no chain record".into());
                continue;
            };
            if Some(c.manifest.problem_tree_sha256.as_str()) != tree {
                bad(format!(
                    "was evaluated on problem tree {}, but the shards' corpus lists `{}` as {}",
                    c.manifest.problem_tree_sha256,
                    p.key,
                    tree.unwrap_or("not loadable")
                ));
            }
            if c.manifest.solution_sha256 != p.solution_sha256 {
                bad(format!(
                    "evaluated solution {}, but the shards' listing has `{}` as {}",
                    c.manifest.solution_sha256, p.solution, p.solution_sha256
                ));
            }
        }
        files.insert(p.trace.clone(), path);
    }
    for extra in listed.iter().filter(|t| !files.contains_key(*t)) {
        findings.push(MergeFinding {
            path: summary_path.clone(),
            line: None,
            message: format!(
                "lists `{extra}`, which is not a pair of shard {} in the listing",
                m.shard
            ),
        });
    }
    Ok(files)
}

/// Merges the shard run directories `dirs` into `out`: checks that they are one corpus run's
/// shards (same corpus, solution set and N), complete and disjoint; verifies every shard's
/// summary chain and every trace against the listing (problem tree and solution hashes);
/// then copies the trace files and writes `out/summary.json`, sealed anew. On any error
/// nothing is written.
pub fn merge(
    out: &Path,
    dirs: &[PathBuf],
    opts: &MergeOptions,
) -> Result<MergeOutcome, MergeError> {
    let loaded = dirs
        .iter()
        .map(|d| load(d))
        .collect::<Result<Vec<_>, _>>()?;
    let shards = check_set(loaded)?;
    let mut findings = Vec::new();
    let mut sources: BTreeMap<String, PathBuf> = BTreeMap::new();
    for s in &shards {
        sources.extend(verify_shard(s, opts, &mut findings)?);
    }
    if !findings.is_empty() {
        return Err(MergeError::Unverified { findings });
    }
    let summary_path = out.join("summary.json");
    for p in std::iter::once(summary_path.clone()).chain(sources.keys().map(|r| out.join(r))) {
        if p.exists() {
            return Err(MergeError::OutputExists { path: p });
        }
    }
    // The listing's order is the plan's order: the merged files follow it, as a one-host
    // run's do.
    let first = &shards[0];
    let mut files = Vec::new();
    for p in &first.manifest.pairs {
        let Some(src) = sources.get(&p.trace) else {
            continue;
        };
        let bytes = std::fs::read(src).map_err(|e| io_err(src, e))?;
        let dst = out.join(&p.trace);
        if let Some(parent) = dst.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_err(parent, e))?;
        }
        kg_contract::io::write_atomic(&dst, &bytes)?;
        files.push(TraceFile {
            key: p.key.clone(),
            solution: p.solution.clone(),
            path: dst,
        });
    }
    let mut errors = IndexMap::new();
    let mut info = IndexMap::new();
    let mut refused: IndexMap<String, IndexMap<String, String>> = IndexMap::new();
    let mut devices: Vec<String> = Vec::new();
    for s in &shards {
        errors.extend(s.summary.errors.clone());
        info.extend(s.summary.problem_info.clone());
        for (k, r) in &s.summary.refused {
            refused.entry(k.clone()).or_default().extend(r.clone());
        }
        if !devices.contains(&s.manifest.device) {
            devices.push(s.manifest.device.clone());
        }
    }
    let mut summary = corpus::summarize(
        Path::new(&first.manifest.corpus),
        &devices.join(", "),
        &files,
        errors,
    );
    // Problem info and refusals in corpus order, as one run lists them.
    summary.problem_info = first
        .manifest
        .problems
        .iter()
        .filter_map(|p| info.swap_remove(&p.key).map(|i| (p.key.clone(), i)))
        .collect();
    summary.refused = first
        .manifest
        .problems
        .iter()
        .filter_map(|p| refused.swap_remove(&p.key).map(|r| (p.key.clone(), r)))
        .collect();
    summary.filters = first.manifest.filters.clone();
    let paths: Vec<PathBuf> = files.iter().map(|f| f.path.clone()).collect();
    summary.chain = Some(RunChain::seal(
        out,
        &opts.run_id,
        &paths,
        opts.signer.as_ref(),
    )?);
    summary.merged_from = shards
        .iter()
        .map(|s| MergedShard {
            shard: s.manifest.shard,
            dir: s.dir.display().to_string(),
            run_id: s.manifest.run_id.clone(),
            host: s.manifest.host.clone(),
            device: s.manifest.device.clone(),
            gpus: s
                .manifest
                .gpu_claims
                .iter()
                .map(|c| c.uuid.clone())
                .collect(),
            traces: s.summary.chain.as_ref().map_or(0, |c| c.heads.len()),
        })
        .collect();
    let text = kg_contract::io::to_json_pretty(&summary, "summary")?;
    kg_contract::io::write_atomic(&summary_path, text.as_bytes())?;
    Ok(MergeOutcome {
        summary,
        summary_path,
        traces: sources.into_keys().collect(),
    })
}
