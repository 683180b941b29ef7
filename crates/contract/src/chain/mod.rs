//! Tamper-evident trace files: every line kg-bench writes carries a hash chain, the run's
//! manifest and a seal, and is appended under an exclusive lock; [`verify_file`] checks all of it.
//!
//! # The record
//!
//! Each trace line gets one additive, optional field (upstream readers ignore it), always the
//! trace object's last key:
//!
//! ```json
//! "kernelgate_chain": {
//!   "format": "kernelgate-chain-v1",
//!   "seq": 0,                       // 0-based line number in the file
//!   "prev_sha256": null,            // SHA-256 of the previous line's bytes (no newline); null on line 0
//!   "batch": {"index": 0, "count": 2},   // place among the lines appended together
//!   "manifest": {"kernelgate_version": "0.1.0", "run_id": "…", "definition": "…",
//!                "problem_tree_sha256": "…", "solution": "…", "solution_sha256": "…"},
//!   "signer": "<hex Ed25519 public key>",   // only when signed
//!   "seal": "sha256:<hex>" | "ed25519:<hex signature>"
//! }
//! ```
//!
//! The seal covers the line as written without its `,"seal":"…"` member: the *message* is
//! [`SEAL_DOMAIN`] followed by those bytes. An unsigned seal is the SHA-256 of the message, a
//! signed one an Ed25519 signature of it (`--sign-key`; [`verify_file`] with a trusted key
//! checks it). The problem tree hash is [`crate::tree`]'s; the solution hash is the SHA-256 of
//! the solution's canonical JSON ([`solution_sha256`]).
//!
//! # What verification proves
//!
//! Without a trusted key (anyone can recompute SHA-256): every line parses; no line was edited
//! with a text editor (its seal); no line was edited, removed, inserted or reordered before
//! the last (the next line's `prev_sha256` and `seq`); no line or bytes were cut from the end
//! of a batch (each line says how many were appended with it, and the file must end on a
//! newline). It does **not** prove who wrote the file: a writer who knows this format can
//! rebuild a whole consistent chain.
//!
//! With a trusted key ([`VerifyOptions::trusted_key`]): every line was written by the holder
//! of the private key, as it stands, in this order, with nothing removed between lines.
//!
//! Neither can tell whether whole batches were cut from the end of a file (the file then
//! ends on an earlier, valid head). That needs the head recorded elsewhere:
//! [`VerifyOptions::expected_head`], or `kg-bench run`'s `summary.json`, whose [`RunChain`]
//! records every trace file's head and is sealed (signed with `--sign-key`) the same way
//! ([`verify_run`]).
//!
//! # Appends
//!
//! [`write_traces`] takes an exclusive lock on a sidecar file (`.<name>.lock` beside the
//! trace file, never removed; a lock on the trace file itself would be lost by anyone who
//! replaces the file by renaming a new copy over it), reads the chain head under the lock,
//! checks the existing lines, and writes the new lines with `O_APPEND` in one write, then
//! `fsync`. Concurrent writers therefore never lose a line and the chain stays valid.

mod error;
mod keys;
mod run;
mod verify;
mod write;

#[cfg(test)]
mod tests;

pub use error::ChainError;
pub use keys::{
    TraceSigner, TrustedKey, generate_key, load_public_key, load_signing_key, new_run_id,
    public_key_path,
};
pub use run::{RunReport, head_key, verify_run};
pub use verify::{
    ChainFinding, ExpectedProblem, FileReport, VerifyOptions, verify_bytes, verify_file,
};
pub use write::{WriteMode, Written, file_head, lock_path, write_traces};

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::ContractError;
use crate::io::sha256_hex;
use crate::solution::Solution;
use keys::unhex;

/// The `format` of every chain record this version writes.
pub const CHAIN_FORMAT: &str = "kernelgate-chain-v1";
/// The `format` of the run-level record in `summary.json`.
pub const RUN_CHAIN_FORMAT: &str = "kernelgate-run-chain-v1";
/// Prefix of every sealed trace line's message (domain separation from any other signature
/// made with the same key).
pub const SEAL_DOMAIN: &[u8] = b"kernelgate-chain-v1\n";
/// Prefix of the run-level record's message.
pub const RUN_SEAL_DOMAIN: &[u8] = b"kernelgate-run-chain-v1\n";
/// How long a writer waits for another writer's lock before giving up.
pub const LOCK_WAIT: Duration = Duration::from_secs(120);
/// First word of a private key file written by [`generate_key`].
pub const SECRET_KEY_TAG: &str = "kernelgate-ed25519-secret";
/// First word of a public key file written by [`generate_key`].
pub const PUBLIC_KEY_TAG: &str = "kernelgate-ed25519-public";

/// Where a group of lines sits among the lines appended together (one evaluation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Batch {
    /// 0-based position in the group.
    pub index: u64,
    /// Lines in the group.
    pub count: u64,
}

/// What produced a trace: the same for every line of one evaluation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Manifest {
    /// kernelgate version that wrote the line.
    pub kernelgate_version: String,
    /// Random id of the kg-bench invocation (128 bits, hex).
    pub run_id: String,
    /// Definition name.
    pub definition: String,
    /// Tree hash of the problem directory before the candidate ran ([`crate::tree`]).
    pub problem_tree_sha256: String,
    /// Solution name.
    pub solution: String,
    /// SHA-256 of the solution's canonical JSON ([`solution_sha256`]).
    pub solution_sha256: String,
}

impl Manifest {
    /// The manifest of one evaluation of `solution` on the problem `definition` whose tree hash
    /// was `problem_tree_sha256`, by this kernelgate version.
    pub fn new(
        run_id: &str,
        definition: &str,
        problem_tree_sha256: &str,
        solution: &Solution,
    ) -> Result<Manifest, ContractError> {
        Ok(Manifest {
            kernelgate_version: env!("CARGO_PKG_VERSION").to_string(),
            run_id: run_id.to_string(),
            definition: definition.to_string(),
            problem_tree_sha256: problem_tree_sha256.to_string(),
            solution: solution.name.clone(),
            solution_sha256: solution_sha256(solution)?,
        })
    }
}

/// The hash-chain record on a trace line (`kernelgate_chain`; module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChainRecord {
    /// [`CHAIN_FORMAT`].
    pub format: String,
    /// 0-based line number in the file.
    pub seq: u64,
    /// SHA-256 of the previous line's bytes without its newline; `null` on the first line.
    pub prev_sha256: Option<String>,
    /// Place among the lines appended together.
    pub batch: Batch,
    /// What produced the trace.
    pub manifest: Manifest,
    /// Hex Ed25519 public key of the signer, when signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    /// `sha256:<hex>` or `ed25519:<hex>` over the line without this member; always the last
    /// member (absent only while the line is being sealed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<String>,
}

/// The end of a chain: how many lines and the SHA-256 of the last one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChainHead {
    /// Lines in the file.
    pub lines: u64,
    /// SHA-256 of the last line's bytes (no newline).
    pub sha256: String,
}

/// The run-level record `kg-bench run` keeps in `summary.json` (`chain`): every trace file's
/// head, so lines cut from the end of a file are detected ([`verify_run`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RunChain {
    /// [`RUN_CHAIN_FORMAT`].
    pub format: String,
    /// The run that wrote the summary.
    pub run_id: String,
    /// Trace file (relative to the summary's directory, `/`-separated) → its head.
    pub heads: indexmap::IndexMap<String, ChainHead>,
    /// Hex Ed25519 public key of the signer, when signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    /// `sha256:<hex>` or `ed25519:<hex>` of [`RUN_SEAL_DOMAIN`] + this record's compact JSON
    /// without `seal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seal: Option<String>,
}

/// SHA-256 of a solution's canonical JSON: its compact serialisation as kernelgate reads it
/// (fields in the format's order, unknown fields of the file dropped), so the hash covers
/// what was evaluated, not how the file was formatted.
pub fn solution_sha256(solution: &Solution) -> Result<String, ContractError> {
    let text = serde_json::to_string(solution).map_err(|source| ContractError::Serialize {
        what: "solution".into(),
        source,
    })?;
    Ok(sha256_hex(text.as_bytes()))
}

impl std::str::FromStr for ChainHead {
    type Err = String;

    /// `LINES:SHA256`, as kg-bench prints a file's head.
    fn from_str(s: &str) -> Result<ChainHead, String> {
        let bad = || format!("`{s}` is not a chain head `LINES:SHA256` (e.g. `4:3a7f...`)");
        let (n, h) = s.split_once(':').ok_or_else(bad)?;
        let lines: u64 = n.parse().map_err(|_| bad())?;
        if h.len() != 64 || unhex(h).is_none() {
            return Err(bad());
        }
        Ok(ChainHead {
            lines,
            sha256: h.to_ascii_lowercase(),
        })
    }
}

impl std::fmt::Display for ChainHead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.lines, self.sha256)
    }
}
