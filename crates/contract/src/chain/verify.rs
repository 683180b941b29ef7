//! Verifying a trace file: each line's chain link, batch, manifest and seal, then its end.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::error::{ChainError, io_err};
use super::keys::{TrustedKey, check_seal};
use super::{CHAIN_FORMAT, ChainHead, ChainRecord, Manifest, SEAL_DOMAIN};
use crate::io::sha256_hex;
use crate::trace::Trace;

/// At most this many findings are listed per file (then a count of the rest).
const MAX_FINDINGS: usize = 100;

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
pub struct ChainFinding {
    /// 1-based line, where one line is at fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for ChainFinding {
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
    pub findings: Vec<ChainFinding>,
}

impl FileReport {
    /// Whether nothing is wrong.
    pub fn ok(&self) -> bool {
        self.findings.is_empty()
    }

    /// Each finding located, `FILE:LINE: message` (or `FILE: message`).
    pub fn located(&self) -> impl Iterator<Item = String> + '_ {
        self.findings.iter().map(move |x| match x.line {
            Some(l) => format!("{}:{l}: {}", self.path.display(), x.message),
            None => format!("{}: {}", self.path.display(), x.message),
        })
    }
}

/// Verifies a trace file (module docs for what that proves). `Err` only when it cannot be
/// read; tampering is a [`FileReport`] with findings.
pub fn verify_file(path: &Path, opts: &VerifyOptions) -> Result<FileReport, ChainError> {
    let bytes = std::fs::read(path).map_err(io_err("read", path))?;
    Ok(verify_bytes(path, &bytes, opts))
}

fn push(r: &mut FileReport, line: Option<usize>, message: String) {
    r.findings.push(ChainFinding { line, message });
}

/// A batch whose first lines were read and whose others must follow.
struct OpenBatch {
    next: u64,
    count: u64,
    manifest: Manifest,
    first_line: usize,
}

/// One file's verification as it reads the lines in order: what each line is checked against
/// depends on the lines before it.
struct FileCheck<'a> {
    path: &'a Path,
    opts: &'a VerifyOptions,
    report: FileReport,
    /// (seq, sha256) of the previous line.
    prev: Option<(u64, String)>,
    /// The batch the next line must continue, if any.
    open: Option<OpenBatch>,
}

/// Verifies the bytes of a trace file; `path` names it in findings.
pub fn verify_bytes(path: &Path, bytes: &[u8], opts: &VerifyOptions) -> FileReport {
    let mut check = FileCheck {
        path,
        opts,
        report: FileReport {
            path: path.to_path_buf(),
            lines: 0,
            head: None,
            signed_lines: 0,
            signers: Vec::new(),
            findings: Vec::new(),
        },
        prev: None,
        open: None,
    };
    if bytes.is_empty() {
        push(
            &mut check.report,
            None,
            "holds no trace lines (empty file)".into(),
        );
        return finish(check.report, opts);
    }
    let torn = !bytes.ends_with(b"\n");
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let raw: Vec<&[u8]> = body.split(|b| *b == b'\n').collect();
    let last = raw.len();
    for (i, line) in raw.iter().enumerate() {
        let n = i + 1;
        check.line(n, line, torn && n == last);
    }
    check.end_of_file();
    finish(check.report, opts)
}

impl FileCheck<'_> {
    /// A finding on line `n` (1-based).
    fn push(&mut self, n: usize, message: String) {
        push(&mut self.report, Some(n), message);
    }

    /// Line `n` (1-based), `torn` when the file ends inside it: every check in file order. A
    /// line that is not a chained trace gets one finding saying so and no further checks.
    fn line(&mut self, n: usize, line: &[u8], torn: bool) {
        let this_prev = self.advance(n, line);
        if torn {
            self.push(
                n,
                "is torn: the file does not end with a newline (bytes were cut from the end, or a write was interrupted)".into(),
            );
        }
        let Some((text, trace)) = self.parse(n, line) else {
            return;
        };
        self.check_trace(n, &trace);
        let Some(chain) = self.chain_record(n, &trace) else {
            return;
        };
        self.check_link(n, chain, this_prev.as_ref());
        self.check_batch(n, chain);
        self.check_manifest(n, &trace, &chain.manifest);
        self.check_line_seal(n, text, chain);
        self.check_signer(n, chain);
    }

    /// Makes line `n` the head and the line the next one must link to; returns the previous
    /// line's (seq, SHA-256).
    fn advance(&mut self, n: usize, line: &[u8]) -> Option<(u64, String)> {
        let hash = sha256_hex(line);
        self.report.lines = n;
        self.report.head = Some(ChainHead {
            lines: n as u64,
            sha256: hash.clone(),
        });
        // What the previous line was; this line's seq is guessed until its record is read.
        let this_prev = self.prev.take();
        self.prev = Some((this_prev.as_ref().map_or(0, |p| p.0 + 1), hash));
        this_prev
    }

    /// The line's text and trace; `None` (after a finding) when it is not UTF-8, blank or not
    /// a trace. A line that is not a trace ends any open batch; a blank one does not.
    fn parse<'l>(&mut self, n: usize, line: &'l [u8]) -> Option<(&'l str, Trace)> {
        let Ok(text) = std::str::from_utf8(line) else {
            self.push(n, "is not UTF-8".into());
            self.open = None;
            return None;
        };
        if text.trim().is_empty() {
            self.push(n, "is blank (kg-bench never writes a blank line)".into());
            return None;
        }
        match crate::io::parse_json(text, self.path, Some(n)) {
            Ok((t, _)) => Some((text, t)),
            Err(e) => {
                self.push(n, format!("does not parse as a trace: {e}"));
                self.open = None;
                None
            }
        }
    }

    /// The trace's own rules: a definition name, and an evaluation whose fields fit its status.
    fn check_trace(&mut self, n: usize, trace: &Trace) {
        if trace.definition.trim().is_empty() {
            self.push(n, "has an empty `definition`".into());
        }
        if let Some(ev) = &trace.evaluation
            && let Err(e) = ev.check_nullable()
        {
            self.push(n, format!("evaluation.{} {e}", e.field()));
        }
    }

    /// The line's chain record, when it has one of this format; otherwise a finding, and any
    /// open batch ends.
    fn chain_record<'t>(&mut self, n: usize, trace: &'t Trace) -> Option<&'t ChainRecord> {
        let Some(chain) = &trace.kernelgate_chain else {
            self.push(
                n,
                "carries no `kernelgate_chain` (written before traces were chained, or the record was removed): nothing vouches for it".into(),
            );
            self.open = None;
            return None;
        };
        if chain.format != CHAIN_FORMAT {
            self.push(
                n,
                format!(
                    "has chain format `{}`; this kernelgate reads `{CHAIN_FORMAT}`",
                    chain.format
                ),
            );
            self.open = None;
            return None;
        }
        Some(chain)
    }

    /// Sequence and link to the previous line, each relative to that line so one removed line
    /// is one finding, not one per later line.
    fn check_link(&mut self, n: usize, chain: &ChainRecord, this_prev: Option<&(u64, String)>) {
        match this_prev {
            None => {
                if chain.seq != 0 || chain.prev_sha256.is_some() {
                    self.push(
                        n,
                        format!(
                            "is the first line but has seq {} and follows another line: lines were cut from the start of the file",
                            chain.seq
                        ),
                    );
                }
            }
            Some((pseq, phash)) => {
                if chain.seq != pseq + 1 {
                    self.push(
                        n,
                        format!(
                            "has seq {} after line {} with seq {pseq}: lines were removed, inserted or reordered here",
                            chain.seq,
                            n - 1
                        ),
                    );
                }
                if chain.prev_sha256.as_deref() != Some(phash.as_str()) {
                    self.push(
                        n,
                        format!(
                            "says the line before it has SHA-256 {}, but line {} has {phash}: that line was changed, or lines were removed, inserted or reordered here",
                            chain.prev_sha256.as_deref().unwrap_or("null"),
                            n - 1
                        ),
                    );
                }
            }
        }
        // The next line is checked against the seq this one carries, not the guess.
        if let Some(p) = self.prev.as_mut() {
            p.0 = chain.seq;
        }
    }

    /// Batches: each group of lines appended together is whole and shares its manifest.
    fn check_batch(&mut self, n: usize, chain: &ChainRecord) {
        let b = chain.batch;
        if b.index >= b.count {
            self.push(n, format!("has batch index {} of {}", b.index, b.count));
        }
        match self.open.take() {
            Some(o) => {
                if b.index != o.next || b.count != o.count || chain.manifest != o.manifest {
                    self.push(
                        n,
                        format!(
                            "does not continue the batch of {} line(s) that started at line {} (which stopped after {}): lines were removed or reordered",
                            o.count, o.first_line, o.next
                        ),
                    );
                    if b.index == 0 && b.count > 1 {
                        self.open = Some(OpenBatch {
                            next: 1,
                            count: b.count,
                            manifest: chain.manifest.clone(),
                            first_line: n,
                        });
                    }
                } else if b.index + 1 < b.count {
                    self.open = Some(OpenBatch {
                        next: b.index + 1,
                        ..o
                    });
                }
            }
            None => {
                if b.index != 0 {
                    self.push(
                        n,
                        format!(
                            "is line {} of {} appended together, but the lines before it in that batch are missing",
                            b.index + 1,
                            b.count
                        ),
                    );
                }
                if b.index + 1 < b.count {
                    self.open = Some(OpenBatch {
                        next: b.index + 1,
                        count: b.count,
                        manifest: chain.manifest.clone(),
                        first_line: n,
                    });
                }
            }
        }
    }

    /// The manifest names the trace's definition and solution, and (with `--problem`) the
    /// problem tree as it is now.
    fn check_manifest(&mut self, n: usize, trace: &Trace, m: &Manifest) {
        if m.definition != trace.definition {
            self.push(
                n,
                format!(
                    "is a trace of `{}` but its manifest names `{}`",
                    trace.definition, m.definition
                ),
            );
        }
        if trace.solution.as_deref() != Some(m.solution.as_str()) {
            self.push(
                n,
                format!(
                    "is a trace of solution {:?} but its manifest names `{}`",
                    trace.solution, m.solution
                ),
            );
        }
        let opts = self.opts;
        if !opts.problems.is_empty() {
            match opts.problems.get(&trace.definition) {
                None => self.push(
                    n,
                    format!(
                        "is a trace of `{}`, which none of the --problem directories defines",
                        trace.definition
                    ),
                ),
                Some(p) if p.tree_sha256 != m.problem_tree_sha256 => self.push(
                    n,
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
    }

    /// The seal: the line without its `,"seal":"…"` member, byte for byte.
    fn check_line_seal(&mut self, n: usize, text: &str, chain: &ChainRecord) {
        let Some(seal) = &chain.seal else {
            self.push(n, "has no seal".into());
            return;
        };
        let suffix = format!(",\"seal\":\"{seal}\"}}}}");
        let Some(body) = text.strip_suffix(&suffix) else {
            self.push(
                n,
                "has its seal elsewhere than at the end of the line: not a line kg-bench wrote"
                    .into(),
            );
            return;
        };
        let mut message = SEAL_DOMAIN.to_vec();
        message.extend_from_slice(body.as_bytes());
        message.extend_from_slice(b"}}");
        match check_seal(seal, chain.signer.as_deref(), &message) {
            Err(why) => self.push(n, why),
            Ok(Some(signer)) => {
                self.report.signed_lines += 1;
                if !self.report.signers.contains(&signer) {
                    self.report.signers.push(signer);
                }
            }
            Ok(None) => {}
        }
    }

    /// With `--pubkey`, the line names the trusted key as its signer.
    fn check_signer(&mut self, n: usize, chain: &ChainRecord) {
        let opts = self.opts;
        let Some(k) = &opts.trusted_key else {
            return;
        };
        match chain.signer.as_deref() {
            None => self.push(
                n,
                format!(
                    "is not signed, but --pubkey requires a signature by {}",
                    k.hex()
                ),
            ),
            Some(s) if s != k.hex() => self.push(
                n,
                format!("is signed by {s}, not by the trusted key {}", k.hex()),
            ),
            Some(_) => {}
        }
    }

    /// A batch still open at the end of the file lost its last lines.
    fn end_of_file(&mut self) {
        if let Some(o) = self.open.take() {
            let at = self.report.lines;
            self.push(
                at,
                format!(
                    "ends the file inside a batch: the {} line(s) appended together from line {} stop after {}; the rest were cut from the end",
                    o.count, o.first_line, o.next
                ),
            );
        }
    }
}

fn finish(mut report: FileReport, opts: &VerifyOptions) -> FileReport {
    if let Some(want) = &opts.expected_head {
        let got = report.head.as_ref();
        if got != Some(want) {
            let (lines, sha) = got.map_or((0, "none"), |h| (h.lines, h.sha256.as_str()));
            report.findings.push(ChainFinding {
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
        report.findings.push(ChainFinding {
            line: None,
            message: format!("... and {more} more finding(s)"),
        });
    }
    report
}
