//! Writing sealed trace lines (appends and replacements) under the sidecar lock, and reading
//! a file's head.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::error::{ChainError, io_err};
use super::keys::TraceSigner;
use super::verify::{VerifyOptions, verify_bytes};
use super::{Batch, CHAIN_FORMAT, ChainHead, ChainRecord, LOCK_WAIT, Manifest, SEAL_DOMAIN};
use crate::error::ContractError;
use crate::io::sha256_hex;
use crate::trace::Trace;

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
pub(super) fn seal_line(
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
