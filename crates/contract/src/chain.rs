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

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::error::ContractError;
use crate::io::sha256_hex;
use crate::solution::Solution;
use crate::trace::Trace;

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
/// At most this many findings are listed per file (then a count of the rest).
const MAX_FINDINGS: usize = 100;

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

/// Failures of writing a chain or reading keys.
#[derive(Debug, thiserror::Error)]
pub enum ChainError {
    /// File I/O.
    #[error("failed to {what} `{}`: {source}", path.display())]
    Io {
        /// What was being done.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// Another writer held the lock too long.
    #[error(
        "failed to lock `{}` within {} s: another kg-bench is writing these traces (or hung holding the lock)",
        path.display(), waited.as_secs()
    )]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
        /// How long we waited.
        waited: Duration,
    },
    /// The existing file does not verify, so appending would vouch for it.
    #[error(
        "refusing to append to `{}`: it does not verify ({first}); move it aside or check it with `kg-bench verify`",
        path.display()
    )]
    Broken {
        /// The trace file.
        path: PathBuf,
        /// Its first finding.
        first: Finding,
    },
    /// A key file is malformed or too open.
    #[error("failed to use key `{}`: {message}", path.display())]
    Key {
        /// The key file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// Serialising a trace.
    #[error(transparent)]
    Contract(#[from] ContractError),
    /// Random bytes for a run id or key.
    #[error("failed to get random bytes from the OS: {0}")]
    Random(String),
    /// A `--problem` directory whose `definition.json` names no definition.
    #[error("`{}` has no `name`: not a problem's definition", path.display())]
    NotAProblem {
        /// The definition file.
        path: PathBuf,
    },
    /// A problem directory that has no tree hash.
    #[error(transparent)]
    Tree(Box<crate::tree::TreeError>),
}

fn io_err<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> ChainError + 'a {
    move |source| ChainError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// A private Ed25519 key, read by kg-bench only (never handed to a worker).
pub struct TraceSigner {
    key: SigningKey,
}

impl std::fmt::Debug for TraceSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        write!(f, "TraceSigner({})", self.public_hex())
    }
}

impl TraceSigner {
    /// The public key, hex.
    pub fn public_hex(&self) -> String {
        hex(&self.key.verifying_key().to_bytes())
    }

    fn seal(&self, message: &[u8]) -> String {
        format!("ed25519:{}", hex(&self.key.sign(message).to_bytes()))
    }
}

/// A trusted Ed25519 public key (`verify --pubkey`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedKey {
    key: VerifyingKey,
}

impl TrustedKey {
    /// The key, hex (as in a line's `signer`).
    pub fn hex(&self) -> String {
        hex(&self.key.to_bytes())
    }

    /// Parses a hex public key.
    pub fn from_hex(s: &str) -> Option<TrustedKey> {
        let b: [u8; 32] = unhex(s)?.try_into().ok()?;
        VerifyingKey::from_bytes(&b)
            .ok()
            .map(|key| TrustedKey { key })
    }
}

/// Lower-case hex of bytes.
fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Bytes of lower-case or upper-case hex; `None` when malformed.
fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn random_bytes<const N: usize>() -> Result<[u8; N], ChainError> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).map_err(|e| ChainError::Random(e.to_string()))?;
    Ok(b)
}

/// A fresh run id: 128 random bits, hex.
pub fn new_run_id() -> Result<String, ChainError> {
    Ok(hex(&random_bytes::<16>()?))
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

/// The public key file written beside a private key: `<private>.pub`.
pub fn public_key_path(secret: &Path) -> PathBuf {
    let mut s = secret.as_os_str().to_owned();
    s.push(".pub");
    PathBuf::from(s)
}

/// Writes a new key pair: `secret` (mode 0600, never overwritten) and `<secret>.pub`.
/// Returns the public key.
pub fn generate_key(secret: &Path) -> Result<TrustedKey, ChainError> {
    let seed = random_bytes::<32>()?;
    let key = SigningKey::from_bytes(&seed);
    let public = TrustedKey {
        key: key.verifying_key(),
    };
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(secret).map_err(io_err("create", secret))?;
    f.write_all(format!("{SECRET_KEY_TAG} {}\n", hex(&seed)).as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io_err("write", secret))?;
    let pub_path = public_key_path(secret);
    crate::io::write_atomic(
        &pub_path,
        format!("{PUBLIC_KEY_TAG} {}\n", public.hex()).as_bytes(),
    )?;
    Ok(public)
}

fn read_key_line(path: &Path, tag: &str) -> Result<Vec<u8>, ChainError> {
    let text = std::fs::read_to_string(path).map_err(io_err("read", path))?;
    let bad = |message: String| ChainError::Key {
        path: path.to_path_buf(),
        message,
    };
    let mut words = text.split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some(t), Some(h), None) if t == tag => {
            unhex(h).ok_or_else(|| bad("the key is not hex".into()))
        }
        _ => Err(bad(format!(
            "expected one line `{tag} <64 hex digits>` (as `kg-bench keygen` writes)"
        ))),
    }
}

/// Reads a private key written by [`generate_key`]; refuses one that others may read.
pub fn load_signing_key(path: &Path) -> Result<TraceSigner, ChainError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path)
            .map_err(io_err("read", path))?
            .permissions()
            .mode();
        if mode & 0o077 != 0 {
            return Err(ChainError::Key {
                path: path.to_path_buf(),
                message: format!(
                    "mode {:o} lets others read the private key; run `chmod 600` on it",
                    mode & 0o777
                ),
            });
        }
    }
    let bytes: [u8; 32] = read_key_line(path, SECRET_KEY_TAG)?
        .try_into()
        .map_err(|_| ChainError::Key {
            path: path.to_path_buf(),
            message: "the private key must be 32 bytes (64 hex digits)".into(),
        })?;
    Ok(TraceSigner {
        key: SigningKey::from_bytes(&bytes),
    })
}

/// Reads a public key written by [`generate_key`] (`<secret>.pub`).
pub fn load_public_key(path: &Path) -> Result<TrustedKey, ChainError> {
    let bytes = read_key_line(path, PUBLIC_KEY_TAG)?;
    let bad = || ChainError::Key {
        path: path.to_path_buf(),
        message: "not a valid Ed25519 public key (32 bytes, 64 hex digits)".into(),
    };
    let b: [u8; 32] = bytes.try_into().map_err(|_| bad())?;
    VerifyingKey::from_bytes(&b)
        .map(|key| TrustedKey { key })
        .map_err(|_| bad())
}

/// How [`write_traces`] treats an existing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Continue the file's chain (it must verify first). `kg-bench evaluate -o`.
    Append,
    /// Replace the file with a new chain of just these lines (temp file + rename, under the
    /// same lock). `kg-bench run`, whose trace files hold one evaluation each.
    Replace,
}

/// What [`write_traces`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// The traces as written, each with its chain record.
    pub traces: Vec<Trace>,
    /// The file's head afterwards.
    pub head: ChainHead,
}

/// The sidecar lock file of a trace file: `.<name>.lock` in the same directory.
pub fn lock_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "traces".into());
    path.with_file_name(format!(".{name}.lock"))
}

/// An exclusive lock on a trace file's sidecar; released on drop.
struct Locked {
    file: std::fs::File,
}

impl Drop for Locked {
    fn drop(&mut self) {
        let _ = self.file.unlock();
    }
}

fn lock(path: &Path) -> Result<Locked, ChainError> {
    let lp = lock_path(path);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lp)
        .map_err(io_err("open the lock", &lp))?;
    let start = Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(Locked { file }),
            Err(std::fs::TryLockError::WouldBlock) => {
                if start.elapsed() >= LOCK_WAIT {
                    return Err(ChainError::LockTimeout {
                        path: lp,
                        waited: start.elapsed(),
                    });
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(io_err("lock", &lp)(e)),
        }
    }
}

/// Seals one line: `trace` with `record` (no seal yet) → the line's text (no newline).
fn seal_line(
    trace: &Trace,
    record: ChainRecord,
    signer: Option<&TraceSigner>,
) -> Result<(String, Trace), ChainError> {
    let mut t = trace.clone();
    t.kernelgate_chain = Some(record);
    let unsealed = serde_json::to_string(&t).map_err(|source| ContractError::Serialize {
        what: "trace".into(),
        source,
    })?;
    let mut message = SEAL_DOMAIN.to_vec();
    message.extend_from_slice(unsealed.as_bytes());
    let seal = match signer {
        Some(s) => s.seal(&message),
        None => format!("sha256:{}", sha256_hex(&message)),
    };
    // The chain record is the trace's last member and the seal the record's last: splice it
    // in before the two closing braces, so the verifier can cut it out byte for byte.
    let body = unsealed
        .strip_suffix("}}")
        .ok_or_else(|| ContractError::Invalid {
            at: crate::error::Location {
                path: PathBuf::from("<trace>"),
                line: None,
                field: "kernelgate_chain".into(),
            },
            message: "the chain record is not the trace's last member".into(),
        })?;
    let line = format!("{body},\"seal\":\"{seal}\"}}}}");
    if let Some(c) = t.kernelgate_chain.as_mut() {
        c.seal = Some(seal);
    }
    Ok((line, t))
}

/// Seals `traces` as one batch following `head` (`None`: a new file).
fn seal_batch(
    traces: &[Trace],
    manifest: &Manifest,
    head: Option<&ChainHead>,
    signer: Option<&TraceSigner>,
) -> Result<(String, Vec<Trace>, ChainHead), ChainError> {
    let mut seq = head.map_or(0, |h| h.lines);
    let mut prev = head.map(|h| h.sha256.clone());
    let mut text = String::new();
    let mut out = Vec::with_capacity(traces.len());
    let count = traces.len() as u64;
    for (i, t) in traces.iter().enumerate() {
        let record = ChainRecord {
            format: CHAIN_FORMAT.into(),
            seq,
            prev_sha256: prev.clone(),
            batch: Batch {
                index: i as u64,
                count,
            },
            manifest: manifest.clone(),
            signer: signer.map(TraceSigner::public_hex),
            seal: None,
        };
        let (line, sealed) = seal_line(t, record, signer)?;
        prev = Some(sha256_hex(line.as_bytes()));
        text.push_str(&line);
        text.push('\n');
        out.push(sealed);
        seq += 1;
    }
    let head = ChainHead {
        lines: seq,
        sha256: prev.unwrap_or_default(),
    };
    Ok((text, out, head))
}

/// Writes `traces` (one evaluation, one batch) to `path` under the sidecar lock (module docs).
/// Writes (and creates) nothing for an empty slice. [`WriteMode::Append`] refuses a file that does not
/// verify (without a trusted key): appending would seal a chain that is already broken.
pub fn write_traces(
    path: &Path,
    traces: &[Trace],
    manifest: &Manifest,
    signer: Option<&TraceSigner>,
    mode: WriteMode,
) -> Result<Written, ChainError> {
    if traces.is_empty() {
        // Nothing to vouch for: no file, no lock file, no directory is created.
        let head = file_head(path)?.unwrap_or(ChainHead {
            lines: 0,
            sha256: String::new(),
        });
        return Ok(Written {
            traces: Vec::new(),
            head,
        });
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io_err("create", dir))?;
    }
    let _lock = lock(path)?;
    match mode {
        WriteMode::Replace => {
            let (text, traces, head) = seal_batch(traces, manifest, None, signer)?;
            crate::io::write_atomic(path, text.as_bytes())?;
            Ok(Written { traces, head })
        }
        WriteMode::Append => {
            let mut f = std::fs::OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .open(path)
                .map_err(io_err("open", path))?;
            let mut existing = Vec::new();
            f.read_to_end(&mut existing).map_err(io_err("read", path))?;
            let head = if existing.is_empty() {
                None
            } else {
                let report = verify_bytes(path, &existing, &VerifyOptions::default());
                if let Some(first) = report.findings.into_iter().next() {
                    return Err(ChainError::Broken {
                        path: path.to_path_buf(),
                        first,
                    });
                }
                report.head
            };
            let (text, traces, new_head) = seal_batch(traces, manifest, head.as_ref(), signer)?;
            // One write of whole lines with O_APPEND, then fsync: readers never see a torn
            // line unless the machine dies mid-write (the verifier then names it).
            f.write_all(text.as_bytes())
                .and_then(|()| f.sync_data())
                .map_err(io_err("append to", path))?;
            if existing.is_empty()
                && let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
                && let Ok(d) = std::fs::File::open(dir)
            {
                // A new file's directory entry survives a crash too.
                let _ = d.sync_all();
            }
            Ok(Written {
                traces,
                head: new_head,
            })
        }
    }
}

/// The head of a trace file as it stands (lines and the SHA-256 of the last); `None` when it
/// is missing or empty. Reads under the lock, so it never sees half an append.
pub fn file_head(path: &Path) -> Result<Option<ChainHead>, ChainError> {
    // A file never written has no head (and gets no lock file, nor needs its directory).
    if !path.exists() {
        return Ok(None);
    }
    let _lock = lock(path)?;
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("read", path)(e)),
    };
    let text = bytes.strip_suffix(b"\n").unwrap_or(&bytes);
    if text.is_empty() {
        return Ok(None);
    }
    let lines = text.split(|b| *b == b'\n').count() as u64;
    let last = text.rsplit(|b| *b == b'\n').next().unwrap_or(text);
    Ok(Some(ChainHead {
        lines,
        sha256: sha256_hex(last),
    }))
}

/// The tree hash a line must carry for its definition (`verify --problem`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedProblem {
    /// The problem directory (for messages).
    pub dir: PathBuf,
    /// Its tree hash now.
    pub tree_sha256: String,
}

impl ExpectedProblem {
    /// A problem directory as `verify --problem` takes it: the definition name it holds (read
    /// leniently from `definition.json`: only `name`) and its tree hash now.
    pub fn from_dir(dir: &Path) -> Result<(String, ExpectedProblem), ChainError> {
        let def = dir.join(crate::problem::DEFINITION_FILE);
        let (value, _) = crate::io::load_json::<serde_json::Value>(&def)?;
        let name = value
            .get("name")
            .and_then(serde_json::Value::as_str)
            .filter(|n| !n.trim().is_empty())
            .ok_or_else(|| ChainError::NotAProblem { path: def.clone() })?
            .to_string();
        let tree_sha256 =
            crate::tree::tree_sha256(dir).map_err(|e| ChainError::Tree(Box::new(e)))?;
        Ok((
            name,
            ExpectedProblem {
                dir: dir.to_path_buf(),
                tree_sha256,
            },
        ))
    }
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

/// What [`verify_file`] checks beyond the chain itself.
#[derive(Debug, Clone, Default)]
pub struct VerifyOptions {
    /// Every line must be signed by this key.
    pub trusted_key: Option<TrustedKey>,
    /// Definition name → the problem it must have been evaluated on. When not empty, a line
    /// whose definition is not here fails.
    pub problems: BTreeMap<String, ExpectedProblem>,
    /// The head the file must end at (from `summary.json` or the writer's output).
    pub expected_head: Option<ChainHead>,
}

/// One thing wrong with a trace file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// 1-based line, where one line is at fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(l) => write!(f, "line {l}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// The verdict on one trace file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileReport {
    /// The file.
    pub path: PathBuf,
    /// Lines read.
    pub lines: usize,
    /// Its head (lines and last line's SHA-256), when it has lines.
    pub head: Option<ChainHead>,
    /// Lines whose seal is an Ed25519 signature that verifies.
    pub signed_lines: usize,
    /// Distinct signer keys seen (hex).
    pub signers: Vec<String>,
    /// Everything wrong, in file order (empty: verified).
    pub findings: Vec<Finding>,
}

impl FileReport {
    /// Whether nothing is wrong.
    pub fn ok(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Verifies a trace file (module docs for what that proves). `Err` only when it cannot be
/// read; tampering is a [`FileReport`] with findings.
pub fn verify_file(path: &Path, opts: &VerifyOptions) -> Result<FileReport, ChainError> {
    let bytes = std::fs::read(path).map_err(io_err("read", path))?;
    Ok(verify_bytes(path, &bytes, opts))
}

/// Checks a seal: `Ok(Some(signer))` for a valid signature, `Ok(None)` for a valid unsigned
/// seal, `Err(why)` otherwise.
fn check_seal(seal: &str, signer: Option<&str>, message: &[u8]) -> Result<Option<String>, String> {
    match (seal.split_once(':'), signer) {
        (Some(("sha256", h)), None) => {
            if h == sha256_hex(message) {
                Ok(None)
            } else {
                Err("its seal does not match its content: the line was changed after it was written".into())
            }
        }
        (Some(("sha256", _)), Some(_)) => Err(
            "names a signer but its seal is an unsigned hash: the signature was replaced".into(),
        ),
        (Some(("ed25519", sig)), Some(pk)) => {
            let key = TrustedKey::from_hex(pk)
                .ok_or_else(|| format!("its signer `{pk}` is not an Ed25519 public key"))?;
            let sig: [u8; 64] = unhex(sig)
                .and_then(|b| b.try_into().ok())
                .ok_or("its signature is not 64 bytes of hex")?;
            let sig = ed25519_dalek::Signature::from_bytes(&sig);
            key.key
                .verify_strict(message, &sig)
                .map(|()| Some(pk.to_string()))
                .map_err(|_| {
                    "its signature does not verify: the line was changed after it was signed, or forged".to_string()
                })
        }
        (Some(("ed25519", _)), None) => Err("is signed but names no signer".into()),
        _ => Err(format!("unknown seal `{seal}`")),
    }
}

fn push(r: &mut FileReport, line: Option<usize>, message: String) {
    r.findings.push(Finding { line, message });
}

struct OpenBatch {
    next: u64,
    count: u64,
    manifest: Manifest,
    first_line: usize,
}

/// Verifies the bytes of a trace file; `path` names it in findings.
pub fn verify_bytes(path: &Path, bytes: &[u8], opts: &VerifyOptions) -> FileReport {
    let mut report = FileReport {
        path: path.to_path_buf(),
        lines: 0,
        head: None,
        signed_lines: 0,
        signers: Vec::new(),
        findings: Vec::new(),
    };
    if bytes.is_empty() {
        push(
            &mut report,
            None,
            "holds no trace lines (empty file)".into(),
        );
        return finish(report, opts);
    }
    let torn = !bytes.ends_with(b"\n");
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let raw: Vec<&[u8]> = body.split(|b| *b == b'\n').collect();
    let mut prev: Option<(u64, String)> = None; // (seq, sha256) of the previous line
    let mut open: Option<OpenBatch> = None;
    let last = raw.len();
    for (i, line) in raw.iter().enumerate() {
        let n = i + 1;
        let hash = sha256_hex(line);
        report.lines = n;
        report.head = Some(ChainHead {
            lines: n as u64,
            sha256: hash.clone(),
        });
        // What the previous line was; this line's seq is guessed until its record is read.
        let this_prev = prev.take();
        prev = Some((this_prev.as_ref().map_or(0, |p| p.0 + 1), hash));
        if torn && n == last {
            push(
                &mut report,
                Some(n),
                "is torn: the file does not end with a newline (bytes were cut from the end, or a write was interrupted)".into(),
            );
        }
        let Ok(text) = std::str::from_utf8(line) else {
            push(&mut report, Some(n), "is not UTF-8".into());
            open = None;
            continue;
        };
        if text.trim().is_empty() {
            push(
                &mut report,
                Some(n),
                "is blank (kg-bench never writes a blank line)".into(),
            );
            continue;
        }
        let trace: Trace = match crate::io::parse_json(text, path, Some(n)) {
            Ok((t, _)) => t,
            Err(e) => {
                push(
                    &mut report,
                    Some(n),
                    format!("does not parse as a trace: {e}"),
                );
                open = None;
                continue;
            }
        };
        if trace.definition.trim().is_empty() {
            push(&mut report, Some(n), "has an empty `definition`".into());
        }
        if let Some(ev) = &trace.evaluation
            && let Err(e) = ev.check_nullable()
        {
            push(
                &mut report,
                Some(n),
                format!("evaluation.{} {e}", e.field()),
            );
        }
        let Some(chain) = &trace.kernelgate_chain else {
            push(
                &mut report,
                Some(n),
                "carries no `kernelgate_chain` (written before traces were chained, or the record was removed): nothing vouches for it".into(),
            );
            open = None;
            continue;
        };
        if chain.format != CHAIN_FORMAT {
            push(
                &mut report,
                Some(n),
                format!(
                    "has chain format `{}`; this kernelgate reads `{CHAIN_FORMAT}`",
                    chain.format
                ),
            );
            open = None;
            continue;
        }
        // Sequence and link to the previous line, each relative to that line so one
        // removed line is one finding, not one per later line.
        match &this_prev {
            None => {
                if chain.seq != 0 || chain.prev_sha256.is_some() {
                    push(
                        &mut report,
                        Some(n),
                        format!(
                            "is the first line but has seq {} and follows another line: lines were cut from the start of the file",
                            chain.seq
                        ),
                    );
                }
            }
            Some((pseq, phash)) => {
                if chain.seq != pseq + 1 {
                    push(
                        &mut report,
                        Some(n),
                        format!(
                            "has seq {} after line {} with seq {pseq}: lines were removed, inserted or reordered here",
                            chain.seq,
                            n - 1
                        ),
                    );
                }
                if chain.prev_sha256.as_deref() != Some(phash.as_str()) {
                    push(
                        &mut report,
                        Some(n),
                        format!(
                            "says the line before it has SHA-256 {}, but line {} has {phash}: that line was changed, or lines were removed, inserted or reordered here",
                            chain.prev_sha256.as_deref().unwrap_or("null"),
                            n - 1
                        ),
                    );
                }
            }
        }
        if let Some(p) = prev.as_mut() {
            p.0 = chain.seq;
        }
        // Batches: each group of lines appended together is whole and shares its manifest.
        let b = chain.batch;
        if b.index >= b.count {
            push(
                &mut report,
                Some(n),
                format!("has batch index {} of {}", b.index, b.count),
            );
        }
        match open.take() {
            Some(o) => {
                if b.index != o.next || b.count != o.count || chain.manifest != o.manifest {
                    push(
                        &mut report,
                        Some(n),
                        format!(
                            "does not continue the batch of {} line(s) that started at line {} (which stopped after {}): lines were removed or reordered",
                            o.count, o.first_line, o.next
                        ),
                    );
                    if b.index == 0 && b.count > 1 {
                        open = Some(OpenBatch {
                            next: 1,
                            count: b.count,
                            manifest: chain.manifest.clone(),
                            first_line: n,
                        });
                    }
                } else if b.index + 1 < b.count {
                    open = Some(OpenBatch {
                        next: b.index + 1,
                        ..o
                    });
                }
            }
            None => {
                if b.index != 0 {
                    push(
                        &mut report,
                        Some(n),
                        format!(
                            "is line {} of {} appended together, but the lines before it in that batch are missing",
                            b.index + 1,
                            b.count
                        ),
                    );
                }
                if b.index + 1 < b.count {
                    open = Some(OpenBatch {
                        next: b.index + 1,
                        count: b.count,
                        manifest: chain.manifest.clone(),
                        first_line: n,
                    });
                }
            }
        }
        let m = &chain.manifest;
        if m.definition != trace.definition {
            push(
                &mut report,
                Some(n),
                format!(
                    "is a trace of `{}` but its manifest names `{}`",
                    trace.definition, m.definition
                ),
            );
        }
        if trace.solution.as_deref() != Some(m.solution.as_str()) {
            push(
                &mut report,
                Some(n),
                format!(
                    "is a trace of solution {:?} but its manifest names `{}`",
                    trace.solution, m.solution
                ),
            );
        }
        if !opts.problems.is_empty() {
            match opts.problems.get(&trace.definition) {
                None => push(
                    &mut report,
                    Some(n),
                    format!(
                        "is a trace of `{}`, which none of the --problem directories defines",
                        trace.definition
                    ),
                ),
                Some(p) if p.tree_sha256 != m.problem_tree_sha256 => push(
                    &mut report,
                    Some(n),
                    format!(
                        "was evaluated on a problem tree with hash {}, but `{}` hashes to {} now: a file of the problem changed since (or it is another problem)",
                        m.problem_tree_sha256,
                        p.dir.display(),
                        p.tree_sha256
                    ),
                ),
                Some(_) => {}
            }
        }
        // The seal: the line without its `,"seal":"…"` member, byte for byte.
        match &chain.seal {
            None => push(&mut report, Some(n), "has no seal".into()),
            Some(seal) => {
                let suffix = format!(",\"seal\":\"{seal}\"}}}}");
                match text.strip_suffix(&suffix) {
                    None => push(
                        &mut report,
                        Some(n),
                        "has its seal elsewhere than at the end of the line: not a line kg-bench wrote".into(),
                    ),
                    Some(body) => {
                        let mut message = SEAL_DOMAIN.to_vec();
                        message.extend_from_slice(body.as_bytes());
                        message.extend_from_slice(b"}}");
                        match check_seal(seal, chain.signer.as_deref(), &message) {
                            Err(why) => push(&mut report, Some(n), why),
                            Ok(Some(signer)) => {
                                report.signed_lines += 1;
                                if !report.signers.contains(&signer) {
                                    report.signers.push(signer);
                                }
                            }
                            Ok(None) => {}
                        }
                    }
                }
            }
        }
        if let Some(k) = &opts.trusted_key {
            match chain.signer.as_deref() {
                None => push(
                    &mut report,
                    Some(n),
                    format!(
                        "is not signed, but --pubkey requires a signature by {}",
                        k.hex()
                    ),
                ),
                Some(s) if s != k.hex() => push(
                    &mut report,
                    Some(n),
                    format!("is signed by {s}, not by the trusted key {}", k.hex()),
                ),
                Some(_) => {}
            }
        }
    }
    if let Some(o) = open {
        let at = report.lines;
        push(
            &mut report,
            Some(at),
            format!(
                "ends the file inside a batch: the {} line(s) appended together from line {} stop after {}; the rest were cut from the end",
                o.count, o.first_line, o.next
            ),
        );
    }
    finish(report, opts)
}

fn finish(mut report: FileReport, opts: &VerifyOptions) -> FileReport {
    if let Some(want) = &opts.expected_head {
        let got = report.head.as_ref();
        if got != Some(want) {
            let (lines, sha) = got.map_or((0, "none"), |h| (h.lines, h.sha256.as_str()));
            report.findings.push(Finding {
                line: None,
                message: format!(
                    "ends at line {lines} (SHA-256 {sha}), but its recorded head is line {} (SHA-256 {}): lines were cut from or added to the end",
                    want.lines, want.sha256
                ),
            });
        }
    }
    if report.findings.len() > MAX_FINDINGS {
        let more = report.findings.len() - MAX_FINDINGS;
        report.findings.truncate(MAX_FINDINGS);
        report.findings.push(Finding {
            line: None,
            message: format!("... and {more} more finding(s)"),
        });
    }
    report
}

impl RunChain {
    /// The heads of `files` (trace files under `out_dir`), sealed (signed with `signer`).
    /// Files that do not exist are left out.
    pub fn seal(
        out_dir: &Path,
        run_id: &str,
        files: &[PathBuf],
        signer: Option<&TraceSigner>,
    ) -> Result<RunChain, ChainError> {
        let mut heads = indexmap::IndexMap::new();
        for f in files {
            let Some(h) = file_head(f)? else { continue };
            let rel = f.strip_prefix(out_dir).unwrap_or(f);
            let parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            heads.insert(parts.join("/"), h);
        }
        let mut rc = RunChain {
            format: RUN_CHAIN_FORMAT.into(),
            run_id: run_id.to_string(),
            heads,
            signer: signer.map(TraceSigner::public_hex),
            seal: None,
        };
        let message = rc.message()?;
        rc.seal = Some(match signer {
            Some(s) => s.seal(&message),
            None => format!("sha256:{}", sha256_hex(&message)),
        });
        Ok(rc)
    }

    fn message(&self) -> Result<Vec<u8>, ChainError> {
        let mut unsealed = self.clone();
        unsealed.seal = None;
        // Only strings and integers: serde_json's compact output of the typed record is
        // canonical, so the verifier rebuilds the same bytes from the parsed record.
        let text = serde_json::to_string(&unsealed).map_err(|source| ContractError::Serialize {
            what: "run chain".into(),
            source,
        })?;
        let mut m = RUN_SEAL_DOMAIN.to_vec();
        m.extend_from_slice(text.as_bytes());
        Ok(m)
    }
}

/// The verdict on a run's `summary.json` and every trace file it lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunReport {
    /// The summary file.
    pub summary: PathBuf,
    /// What is wrong with the summary's own record.
    pub findings: Vec<Finding>,
    /// Each listed trace file, checked against its recorded head.
    pub files: Vec<FileReport>,
}

impl RunReport {
    /// Whether the record and every file verified.
    pub fn ok(&self) -> bool {
        self.findings.is_empty() && self.files.iter().all(FileReport::ok)
    }
}

/// Verifies a `summary.json`'s [`RunChain`] (its seal; signed by the trusted key when one is
/// given) and every trace file it lists against the head it records. `Err` only when the
/// summary cannot be read or parsed; a missing trace file is a finding.
pub fn verify_run(summary: &Path, opts: &VerifyOptions) -> Result<RunReport, ChainError> {
    let (value, _) = crate::io::load_json::<serde_json::Value>(summary)?;
    let mut report = RunReport {
        summary: summary.to_path_buf(),
        findings: Vec::new(),
        files: Vec::new(),
    };
    let find = |message: String| Finding {
        line: None,
        message,
    };
    let Some(raw) = value.get("chain") else {
        report.findings.push(find(
            "has no `chain` record (written before traces were chained): no trace file's end is vouched for".into(),
        ));
        return Ok(report);
    };
    let rc: RunChain = match serde_json::from_value(raw.clone()) {
        Ok(r) => r,
        Err(e) => {
            report
                .findings
                .push(find(format!("its `chain` record does not parse: {e}")));
            return Ok(report);
        }
    };
    if rc.format != RUN_CHAIN_FORMAT {
        report.findings.push(find(format!(
            "its `chain` record has format `{}`; this kernelgate reads `{RUN_CHAIN_FORMAT}`",
            rc.format
        )));
        return Ok(report);
    }
    match (&rc.seal, rc.message()) {
        (None, _) => report
            .findings
            .push(find("its `chain` record has no seal".into())),
        (Some(seal), Ok(message)) => {
            if let Err(why) = check_seal(seal, rc.signer.as_deref(), &message) {
                report
                    .findings
                    .push(find(format!("its `chain` record {why}")));
            }
        }
        (Some(_), Err(e)) => report.findings.push(find(e.to_string())),
    }
    if let Some(k) = &opts.trusted_key
        && rc.signer.as_deref() != Some(k.hex().as_str())
    {
        report.findings.push(find(format!(
            "its `chain` record is not signed by the trusted key {}",
            k.hex()
        )));
    }
    let dir = summary.parent().unwrap_or(Path::new("."));
    for (rel, head) in &rc.heads {
        let rel_path = Path::new(rel);
        if rel_path.is_absolute()
            || rel_path
                .components()
                .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            report.findings.push(find(format!(
                "lists `{rel}`, which is not a plain path below the summary's directory"
            )));
            continue;
        }
        let path = dir.join(rel_path);
        let file_opts = VerifyOptions {
            expected_head: Some(head.clone()),
            ..opts.clone()
        };
        match std::fs::read(&path) {
            Ok(bytes) => report.files.push(verify_bytes(&path, &bytes, &file_opts)),
            Err(e) => report.files.push(FileReport {
                path: path.clone(),
                lines: 0,
                head: None,
                signed_lines: 0,
                signers: Vec::new(),
                findings: vec![find(format!(
                    "is listed in `{}` with {} line(s) but cannot be read: {e}",
                    summary.display(),
                    head.lines
                ))],
            }),
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::trace::{Evaluation, Status};
    use crate::workload::Workload;

    fn trace(uuid: &str, latency: f64) -> Trace {
        let eval: Evaluation = serde_json::from_value(serde_json::json!({
            "status": "PASSED", "log": "ok",
            "correctness": {"max_relative_error": 0.0, "max_absolute_error": 0.0, "has_nan": false, "has_inf": false},
            "performance": {"latency_ms": latency, "reference_latency_ms": 2.0, "speedup_factor": 2.0 / latency},
            "environment": {"hardware": "CPU", "libs": {}},
            "timestamp": "2026-12-04T00:00:00Z"
        }))
        .unwrap();
        assert_eq!(eval.status, Status::Passed);
        Trace {
            definition: "add".into(),
            solution: Some("s".into()),
            workload: serde_json::from_value::<Workload>(
                serde_json::json!({"uuid": uuid, "axes": {}, "inputs": {}}),
            )
            .unwrap(),
            evaluation: Some(eval),
            kernelgate_chain: None,
        }
    }

    fn manifest(tree: &str) -> Manifest {
        Manifest {
            kernelgate_version: "0.1.0".into(),
            run_id: "r1".into(),
            definition: "add".into(),
            problem_tree_sha256: tree.into(),
            solution: "s".into(),
            solution_sha256: "00".into(),
        }
    }

    /// A file of two batches (2 lines, then 3), signed when `signer` is given.
    fn chain_file(signer: Option<&TraceSigner>) -> (tempfile::TempDir, PathBuf) {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.jsonl");
        let m = manifest("tree");
        write_traces(
            &p,
            &[trace("w0", 1.0), trace("w1", 1.5)],
            &m,
            signer,
            WriteMode::Append,
        )
        .unwrap();
        write_traces(
            &p,
            &[trace("w2", 1.0), trace("w3", 1.25), trace("w4", 0.5)],
            &m,
            signer,
            WriteMode::Append,
        )
        .unwrap();
        (d, p)
    }

    fn lines(p: &Path) -> Vec<String> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The line with one byte of its latency changed (its first digit, 1 <-> 0).
    fn edit_latency(line: &str) -> String {
        let key = "\"latency_ms\":";
        let at = line.find(key).expect("a PASSED line") + key.len();
        let digit = if &line[at..at + 1] == "1" { "0" } else { "1" };
        format!("{}{digit}{}", &line[..at], &line[at + 1..])
    }

    fn write_lines(p: &Path, l: &[String]) {
        std::fs::write(p, l.join("\n") + "\n").unwrap();
    }

    fn verify(p: &Path) -> FileReport {
        verify_file(p, &VerifyOptions::default()).unwrap()
    }

    fn signer() -> (tempfile::TempDir, TraceSigner, TrustedKey) {
        let d = tempfile::tempdir().unwrap();
        let k = d.path().join("key");
        let public = generate_key(&k).unwrap();
        let s = load_signing_key(&k).unwrap();
        assert_eq!(load_public_key(&public_key_path(&k)).unwrap(), public);
        (d, s, public)
    }

    #[test]
    fn a_written_chain_verifies_and_reads_back_as_traces() {
        let (_d, p) = chain_file(None);
        let r = verify(&p);
        assert!(r.ok(), "{:?}", r.findings);
        assert_eq!(r.lines, 5);
        let (traces, _) = crate::trace::load_traces(&p).unwrap();
        let seqs: Vec<u64> = traces
            .iter()
            .map(|t| t.kernelgate_chain.as_ref().unwrap().seq)
            .collect();
        assert_eq!(seqs, vec![0, 1, 2, 3, 4]);
        let c = traces[3].kernelgate_chain.as_ref().unwrap();
        assert_eq!(c.batch, Batch { index: 1, count: 3 });
        assert_eq!(
            c.prev_sha256.as_deref(),
            Some(sha256_hex(lines(&p)[2].as_bytes()).as_str())
        );
        assert_eq!(r.head.unwrap(), file_head(&p).unwrap().unwrap());
    }

    #[test]
    fn an_edited_line_fails_even_the_last_one() {
        for at in [1usize, 4] {
            let (_d, p) = chain_file(None);
            let mut l = lines(&p);
            l[at] = edit_latency(&l[at]);
            write_lines(&p, &l);
            let r = verify(&p);
            assert!(!r.ok());
            assert_eq!(r.findings[0].line, Some(at + 1), "{:?}", r.findings);
            assert!(
                r.findings[0].message.contains("seal does not match"),
                "{:?}",
                r.findings
            );
        }
    }

    #[test]
    fn reordered_lines_fail() {
        let (_d, p) = chain_file(None);
        let mut l = lines(&p);
        l.swap(2, 3);
        write_lines(&p, &l);
        let r = verify(&p);
        assert!(!r.ok());
        assert_eq!(r.findings[0].line, Some(3), "{:?}", r.findings);
        assert!(
            r.findings[0].message.contains("reordered"),
            "{:?}",
            r.findings
        );
    }

    #[test]
    fn a_deleted_middle_line_fails_once() {
        let (_d, p) = chain_file(None);
        let mut l = lines(&p);
        l.remove(3);
        write_lines(&p, &l);
        let r = verify(&p);
        assert!(!r.ok());
        assert!(
            r.findings.iter().all(|f| f.line == Some(4)),
            "{:?}",
            r.findings
        );
        assert!(
            r.findings[0]
                .message
                .contains("has seq 4 after line 3 with seq 2")
        );
    }

    #[test]
    fn truncation_inside_a_batch_and_of_bytes_fails() {
        // Bytes cut from the last line.
        let (_d, p) = chain_file(None);
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 10]).unwrap();
        let r = verify(&p);
        assert_eq!(r.findings[0].line, Some(5), "{:?}", r.findings);
        assert!(r.findings[0].message.contains("torn"), "{:?}", r.findings);
        // Only the newline cut: still torn.
        std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
        assert!(verify(&p).findings[0].message.contains("torn"));
        // The last whole line of a batch cut.
        let mut l = lines_of(&bytes);
        l.pop();
        write_lines(&p, &l);
        let r = verify(&p);
        assert!(!r.ok());
        assert!(
            r.findings[0].message.contains("inside a batch"),
            "{:?}",
            r.findings
        );
        // A whole batch cut from the end: the file alone cannot tell, its head can.
        let mut l = lines_of(&bytes);
        l.truncate(2);
        write_lines(&p, &l);
        assert!(verify(&p).ok());
        let head = verify_bytes(&p, &bytes, &VerifyOptions::default()).head;
        let r = verify_file(
            &p,
            &VerifyOptions {
                expected_head: head,
                ..VerifyOptions::default()
            },
        )
        .unwrap();
        assert!(
            r.findings[0].message.contains("recorded head is line 5"),
            "{:?}",
            r.findings
        );
        // The first lines cut.
        let mut l = lines_of(&bytes);
        l.drain(..2);
        write_lines(&p, &l);
        assert!(
            verify(&p).findings[0]
                .message
                .contains("cut from the start")
        );
        // Empty.
        std::fs::write(&p, "").unwrap();
        assert!(!verify(&p).ok());
    }

    fn lines_of(b: &[u8]) -> Vec<String> {
        String::from_utf8(b.to_vec())
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Rebuilds the chain links and unsigned seals from line `from` on, as a forger who knows
    /// the format would.
    fn reseal_from(l: &mut [String], from: usize) {
        for i in from..l.len() {
            let mut t: Trace = serde_json::from_str(&l[i]).unwrap();
            let c = t.kernelgate_chain.as_mut().unwrap();
            c.seal = None;
            c.signer = None;
            c.prev_sha256 = (i > 0).then(|| sha256_hex(l[i - 1].as_bytes()));
            let record = c.clone();
            let (line, _) = seal_line(&t, record, None).unwrap();
            l[i] = line;
        }
    }

    #[test]
    fn a_forged_line_with_recomputed_hashes_fails_only_under_a_trusted_key() {
        let (_k, s, public) = signer();
        let (_d, p) = chain_file(Some(&s));
        let trusted = VerifyOptions {
            trusted_key: Some(public.clone()),
            ..VerifyOptions::default()
        };
        let r = verify_file(&p, &trusted).unwrap();
        assert!(r.ok(), "{:?}", r.findings);
        assert_eq!(r.signed_lines, 5);
        assert_eq!(r.signers, vec![public.hex()]);
        let mut l = lines(&p);
        l[1] = edit_latency(&l[1]);
        // Keeping the old signature: it no longer verifies, under any key.
        let mut kept = l.clone();
        reseal_signed_keep_signature(&mut kept, 2);
        write_lines(&p, &kept);
        let r = verify(&p);
        assert_eq!(r.findings[0].line, Some(2), "{:?}", r.findings);
        assert!(r.findings[0].message.contains("signature does not verify"));
        // A whole new unsigned chain: consistent, so only the trusted key tells.
        reseal_from(&mut l, 1);
        write_lines(&p, &l);
        assert!(verify(&p).ok(), "{:?}", verify(&p).findings);
        let r = verify_file(&p, &trusted).unwrap();
        assert!(!r.ok());
        assert_eq!(r.findings[0].line, Some(2), "{:?}", r.findings);
        assert!(
            r.findings[0].message.contains("not signed"),
            "{:?}",
            r.findings
        );
        // Signed by another key: named as such.
        let (_k2, other, _) = signer();
        let (_d2, p2) = chain_file(Some(&other));
        let r = verify_file(&p2, &trusted).unwrap();
        assert!(r.findings[0].message.contains("not by the trusted key"));
    }

    /// Relinks lines from `from` on without touching their (signed) seals.
    fn reseal_signed_keep_signature(l: &mut [String], from: usize) {
        for i in from..l.len() {
            let t: Trace = serde_json::from_str(&l[i]).unwrap();
            let old = t.kernelgate_chain.unwrap().prev_sha256.unwrap();
            l[i] = l[i].replacen(&old, &sha256_hex(l[i - 1].as_bytes()), 1);
        }
    }

    #[test]
    fn a_changed_problem_file_fails_against_the_problem_directory() {
        let d = tempfile::tempdir().unwrap();
        let prob = d.path().join("add");
        std::fs::create_dir(&prob).unwrap();
        std::fs::write(prob.join("definition.json"), "{\"name\":\"add\"}").unwrap();
        std::fs::write(prob.join("workload.jsonl"), "{\"atol\":0.01}\n").unwrap();
        let tree = crate::tree::tree_sha256(&prob).unwrap();
        let p = d.path().join("t.jsonl");
        write_traces(
            &p,
            &[trace("w0", 1.0)],
            &manifest(&tree),
            None,
            WriteMode::Append,
        )
        .unwrap();
        let opts = |t: &str| VerifyOptions {
            problems: BTreeMap::from([(
                "add".to_string(),
                ExpectedProblem {
                    dir: prob.clone(),
                    tree_sha256: t.to_string(),
                },
            )]),
            ..VerifyOptions::default()
        };
        assert!(verify_file(&p, &opts(&tree)).unwrap().ok());
        std::fs::write(prob.join("workload.jsonl"), "{\"atol\":9.99}\n").unwrap();
        let now = crate::tree::tree_sha256(&prob).unwrap();
        let r = verify_file(&p, &opts(&now)).unwrap();
        assert!(!r.ok());
        assert!(
            r.findings[0].message.contains("problem tree"),
            "{:?}",
            r.findings
        );
        // A trace of a definition no --problem defines.
        let mut other = opts(&now);
        let e = other.problems.remove("add").unwrap();
        other.problems.insert("mul".into(), e);
        assert!(
            verify_file(&p, &other).unwrap().findings[0]
                .message
                .contains("none of the --problem")
        );
    }

    #[test]
    fn unchained_old_traces_read_but_do_not_verify_and_are_not_appended_to() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("old.jsonl");
        let old = crate::io::to_json_line(&trace("w0", 1.0), "trace").unwrap();
        std::fs::write(&p, &old).unwrap();
        assert_eq!(crate::trace::load_traces(&p).unwrap().0.len(), 1);
        assert!(
            verify(&p).findings[0]
                .message
                .contains("no `kernelgate_chain`")
        );
        let e = write_traces(
            &p,
            &[trace("w1", 1.0)],
            &manifest("t"),
            None,
            WriteMode::Append,
        )
        .unwrap_err();
        assert!(e.to_string().contains("refusing to append"), "{e}");
        // Replace starts a new chain.
        write_traces(
            &p,
            &[trace("w1", 1.0)],
            &manifest("t"),
            None,
            WriteMode::Replace,
        )
        .unwrap();
        assert!(verify(&p).ok());
        assert!(!d.path().read_dir().unwrap().any(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".kg-tmp")
        }));
    }

    #[test]
    fn an_empty_batch_creates_nothing() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("sub/t.jsonl");
        let w = write_traces(&p, &[], &manifest("t"), None, WriteMode::Append).unwrap();
        assert_eq!(w.head.lines, 0);
        assert!(!p.parent().unwrap().exists());
    }

    #[test]
    fn concurrent_writers_lose_nothing_and_keep_the_chain() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("t.jsonl");
        let threads: Vec<_> = (0..8)
            .map(|w| {
                let p = p.clone();
                std::thread::spawn(move || {
                    for i in 0..10 {
                        let batch: Vec<Trace> = (0..3)
                            .map(|j| trace(&format!("w{w}-{i}-{j}"), 1.0))
                            .collect();
                        write_traces(&p, &batch, &manifest("t"), None, WriteMode::Append).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let r = verify(&p);
        assert!(r.ok(), "{:?}", r.findings);
        assert_eq!(r.lines, 8 * 10 * 3);
    }

    #[test]
    fn a_run_chain_records_heads_and_catches_a_cut_batch_and_an_edit() {
        let (_k, s, public) = signer();
        let (d, p) = chain_file(Some(&s));
        // A file the run never wrote (its directory neither) is left out.
        let never = d.path().join("never/written.jsonl");
        let rc = RunChain::seal(d.path(), "r1", &[p.clone(), never.clone()], Some(&s)).unwrap();
        assert_eq!(rc.heads["t.jsonl"].lines, 5);
        assert_eq!(rc.heads.len(), 1);
        assert!(!never.parent().unwrap().exists());
        let summary = d.path().join("summary.json");
        let doc = serde_json::json!({"schema_version": 2, "chain": rc});
        std::fs::write(&summary, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
        let trusted = VerifyOptions {
            trusted_key: Some(public),
            ..VerifyOptions::default()
        };
        let r = verify_run(&summary, &trusted).unwrap();
        assert!(r.ok(), "{r:?}");
        // The last batch cut: the file alone verifies, the summary does not.
        let mut l = lines(&p);
        l.truncate(2);
        write_lines(&p, &l);
        assert!(verify_file(&p, &trusted).unwrap().ok());
        let r = verify_run(&summary, &trusted).unwrap();
        assert!(!r.ok());
        assert!(r.files[0].findings[0].message.contains("recorded head"));
        // The recorded head edited to match: its signature breaks.
        let mut doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
        doc["chain"]["heads"]["t.jsonl"] =
            serde_json::to_value(file_head(&p).unwrap().unwrap()).unwrap();
        std::fs::write(&summary, doc.to_string()).unwrap();
        let r = verify_run(&summary, &trusted).unwrap();
        assert!(r.files[0].ok());
        assert!(
            r.findings[0].message.contains("signature does not verify"),
            "{r:?}"
        );
    }

    #[test]
    fn keys_are_private_never_overwritten_and_checked() {
        let d = tempfile::tempdir().unwrap();
        let k = d.path().join("key");
        generate_key(&k).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&k).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
            std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert!(
                load_signing_key(&k)
                    .unwrap_err()
                    .to_string()
                    .contains("chmod 600")
            );
            std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o600)).unwrap();
        }
        assert!(
            generate_key(&k).is_err(),
            "an existing key is never overwritten"
        );
        let s = load_signing_key(&k).unwrap();
        assert!(!format!("{s:?}").contains(&std::fs::read_to_string(&k).unwrap()[26..]));
        assert!(
            load_public_key(&k).is_err(),
            "a private key is not a public key"
        );
    }

    #[test]
    fn solution_hash_ignores_formatting_but_not_content() {
        let a: Solution = serde_json::from_value(serde_json::json!({
            "name": "s", "definition": "add", "author": "a",
            "spec": {"languages": ["pytorch"], "target_hardware": ["cpu"], "entry_point": "m.py::run"},
            "sources": [{"path": "m.py", "content": "def run(x): return x"}]
        }))
        .unwrap();
        let mut b = a.clone();
        assert_eq!(solution_sha256(&a).unwrap(), solution_sha256(&b).unwrap());
        b.sources[0].content.push(' ');
        assert_ne!(solution_sha256(&a).unwrap(), solution_sha256(&b).unwrap());
    }
}
