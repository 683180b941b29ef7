//! Reading traces from run directories and trace files.

use std::path::{Path, PathBuf};

use kg_contract::Trace;
use serde::Deserialize;

use crate::ReportError;

/// One trace and where it came from.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The problem key: the trace file's directory relative to its run directory
    /// (`triton/rmsnorm`), or the definition name for a trace file given on its own.
    pub key: String,
    /// The trace file.
    pub file: PathBuf,
    /// 1-based line in the file.
    pub line: usize,
    /// The trace.
    pub trace: Trace,
}

/// The fields of a run's `summary.json` a report shows (the rest is kg-exec's business).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct SummaryHead {
    /// The corpus the run evaluated.
    pub corpus: String,
    /// The device the run chose.
    pub device: String,
    /// Its format version.
    pub schema_version: u32,
}

/// Everything read from the inputs.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// Every trace, in input order, then file order.
    pub entries: Vec<Entry>,
    /// Each run directory's summary, where it has one.
    pub summaries: Vec<(PathBuf, SummaryHead)>,
    /// Unknown fields and similar (from kg-contract).
    pub warnings: Vec<String>,
}

/// `*.jsonl` files below `dir`, sorted, at any depth.
fn jsonl_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ReportError> {
    let io = |source| ReportError::Io {
        path: dir.to_path_buf(),
        source,
    };
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(io)?;
    paths.sort();
    for p in paths {
        if p.is_dir() {
            jsonl_files(&p, out)?;
        } else if p.extension().is_some_and(|e| e == "jsonl") {
            out.push(p);
        }
    }
    Ok(())
}

/// The problem key of a trace file below a run directory: its directory, relative.
fn key_of(root: &Path, file: &Path) -> Option<String> {
    let rel = file.parent()?.strip_prefix(root).ok()?;
    let parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    (!parts.is_empty()).then(|| parts.join("/"))
}

/// Loads one run directory or trace file.
pub fn load_input(path: &Path, into: &mut Loaded) -> Result<(), ReportError> {
    let before = into.entries.len();
    if path.is_dir() {
        let summary = path.join("summary.json");
        if summary.is_file() {
            let text = kg_contract::io::read_to_string(&summary)?;
            let head: SummaryHead =
                serde_json::from_str(&text).map_err(|e| ReportError::Summary {
                    path: summary.clone(),
                    message: e.to_string(),
                })?;
            into.summaries.push((path.to_path_buf(), head));
        }
        let mut files = Vec::new();
        jsonl_files(path, &mut files)?;
        for f in files {
            let key = key_of(path, &f);
            push_file(&f, key, into)?;
        }
    } else if path.is_file() {
        push_file(path, None, into)?;
    } else {
        return Err(ReportError::NotFound(path.to_path_buf()));
    }
    if into.entries.len() == before {
        return Err(ReportError::NoTraces(path.to_path_buf()));
    }
    Ok(())
}

fn push_file(f: &Path, key: Option<String>, into: &mut Loaded) -> Result<(), ReportError> {
    let (traces, warnings) = kg_contract::load_traces(f)?;
    into.warnings.extend(warnings);
    // load_traces skips blank lines, so line numbers are counted from the file again.
    let text = kg_contract::io::read_to_string(f)?;
    let lines: Vec<usize> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, _)| i + 1)
        .collect();
    for (i, trace) in traces.into_iter().enumerate() {
        into.entries.push(Entry {
            key: key.clone().unwrap_or_else(|| trace.definition.clone()),
            file: f.to_path_buf(),
            line: lines.get(i).copied().unwrap_or(i + 1),
            trace,
        });
    }
    Ok(())
}

/// Loads every input (run directories and trace files) in order.
pub fn load_inputs(paths: &[PathBuf]) -> Result<Loaded, ReportError> {
    let mut loaded = Loaded::default();
    for p in paths {
        load_input(p, &mut loaded)?;
    }
    Ok(loaded)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn problem_keys_are_directories_relative_to_the_run() {
        let root = Path::new("/r");
        assert_eq!(
            key_of(root, Path::new("/r/triton/rmsnorm/ref.jsonl")).as_deref(),
            Some("triton/rmsnorm")
        );
        assert_eq!(key_of(root, Path::new("/r/x.jsonl")), None);
    }

    #[test]
    fn an_input_without_traces_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let err = load_inputs(&[d.path().to_path_buf()]).unwrap_err();
        assert!(matches!(err, ReportError::NoTraces(_)), "{err}");
        let err = load_inputs(&[d.path().join("missing")]).unwrap_err();
        assert!(
            err.to_string()
                .contains("neither a run directory nor a trace file"),
            "{err}"
        );
    }
}
