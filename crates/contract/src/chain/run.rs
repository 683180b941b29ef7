//! The run-level record in `summary.json`: sealing every trace file's head, and verifying
//! the record and the files against it.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::error::ChainError;
use super::keys::{TraceSigner, check_seal};
use super::verify::{ChainFinding, FileReport, VerifyOptions, verify_bytes};
use super::write::file_head;
use super::{RUN_CHAIN_FORMAT, RUN_SEAL_DOMAIN, RunChain};
use crate::error::ContractError;
use crate::io::sha256_hex;

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
            heads.insert(head_key(out_dir, f), h);
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

/// How [`RunChain::heads`] names `file` of the run directory `out_dir`: its path below it,
/// `/`-separated.
pub fn head_key(out_dir: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(out_dir).unwrap_or(file);
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    parts.join("/")
}

/// The verdict on a run's `summary.json` and every trace file it lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunReport {
    /// The summary file.
    pub summary: PathBuf,
    /// What is wrong with the summary's own record.
    pub findings: Vec<ChainFinding>,
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
    let find = |message: String| ChainFinding {
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
