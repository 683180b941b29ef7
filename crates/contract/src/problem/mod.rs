//! Problem directories: `definition.json` + `workload.jsonl` (+ a sibling `reference.py` where
//! the problem ships its reference that way), and solution files. Loading is here; the rules a
//! definition and each workload must meet are in `checks`.

mod checks;

pub use checks::check_workload;

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::definition::Definition;
use crate::error::{ContractError, Location};
use crate::io::{load_json, load_jsonl, read_to_string};
use crate::shape::Resolved;
use crate::solution::Solution;
use crate::workload::Workload;
use checks::check_definition;

/// The v2 workload schema's name, as written in `schema_version`.
const V2_NAME: &str = "sol_execbench.workload.v2";

/// File name of a problem's definition.
pub const DEFINITION_FILE: &str = "definition.json";
/// File name of a problem's workloads.
pub const WORKLOAD_FILE: &str = "workload.jsonl";
/// File name of a sibling reference implementation.
pub const REFERENCE_FILE: &str = "reference.py";

/// A workload together with where it came from and its resolved shapes.
#[derive(Debug, Clone)]
pub struct LoadedWorkload {
    /// 1-based line in `workload.jsonl`.
    pub line: usize,
    /// The workload.
    pub workload: Workload,
    /// Axes and shapes bound.
    pub resolved: Resolved,
}

/// A loaded, validated problem.
#[derive(Debug, Clone)]
pub struct Problem {
    /// Directory holding the problem (relative paths in workloads resolve against it).
    pub dir: PathBuf,
    /// Path of the definition file.
    pub definition_path: PathBuf,
    /// Path of the workload file.
    pub workload_path: PathBuf,
    /// The definition, with `reference` filled from `reference.py` where needed.
    pub definition: Definition,
    /// Workloads in file order.
    pub workloads: Vec<LoadedWorkload>,
    /// Non-fatal findings, e.g. unknown fields (likely typos).
    pub warnings: Vec<String>,
}

fn invalid(
    path: &Path,
    line: Option<usize>,
    field: impl Into<String>,
    message: String,
) -> ContractError {
    ContractError::Invalid {
        at: Location {
            path: path.to_path_buf(),
            line,
            field: field.into(),
        },
        message,
    }
}

/// Loads a definition file, filling `reference` from a sibling `reference.py` if it is empty.
pub fn load_definition(path: &Path) -> Result<(Definition, Vec<String>), ContractError> {
    let (mut def, unknown): (Definition, _) = load_json(path)?;
    // A versioned (ROCm port) definition is read as strictly as the port reads it.
    if def.schema_version.is_some()
        && let Some(f) = unknown.first()
    {
        return Err(invalid(
            path,
            None,
            f.clone(),
            "unknown field in a `sol_execbench.definition.v1` definition; that schema has no such field".into(),
        ));
    }
    let warnings = unknown
        .into_iter()
        .map(|f| format!("`{}`: unknown field `{f}` ignored", path.display()))
        .collect();
    if def.reference.trim().is_empty() {
        let sibling = path.with_file_name(REFERENCE_FILE);
        if sibling.is_file() {
            def.reference = read_to_string(&sibling)?;
        } else {
            return Err(invalid(
                path,
                None,
                "reference",
                format!(
                    "empty; expected Python source defining `run`, or a sibling `{}`",
                    sibling.display()
                ),
            ));
        }
    }
    check_definition(&def, path)?;
    Ok((def, warnings))
}

/// The keys of `raw` (a document as written) that its parsed form `parsed` lacks, as dotted
/// paths: what serde skipped silently (inside tagged enums) or would have warned about.
fn unread_keys(raw: &Value, parsed: &Value, path: &str, out: &mut Vec<String>) {
    match (raw, parsed) {
        (Value::Object(r), Value::Object(p)) => {
            for (k, v) in r {
                let at = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match p.get(k) {
                    Some(pv) => unread_keys(v, pv, &at, out),
                    None => out.push(at),
                }
            }
        }
        (Value::Array(r), Value::Array(p)) => {
            for (i, (rv, pv)) in r.iter().zip(p).enumerate() {
                unread_keys(rv, pv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// The first field of a v2 workload line that kernelgate did not read (the port rejects any
/// field it does not define, and so does this).
fn v2_unread(text: &str, w: &Workload) -> Option<String> {
    let raw: Value = serde_json::from_str(text).ok()?;
    let parsed = serde_json::to_value(w).ok()?;
    let mut out = Vec::new();
    unread_keys(&raw, &parsed, "", &mut out);
    out.into_iter().next()
}

impl Problem {
    /// Loads `dir/definition.json` and `dir/workload.jsonl`.
    pub fn load(dir: &Path) -> Result<Problem, ContractError> {
        for file in [DEFINITION_FILE, WORKLOAD_FILE] {
            if !dir.join(file).is_file() {
                return Err(ContractError::MissingFile {
                    dir: dir.to_path_buf(),
                    file: file.to_string(),
                });
            }
        }
        Problem::from_files(&dir.join(DEFINITION_FILE), &dir.join(WORKLOAD_FILE))
    }

    /// Loads a definition and a workload file given separately.
    pub fn from_files(definition: &Path, workloads: &Path) -> Result<Problem, ContractError> {
        let (def, mut warnings) = load_definition(definition)?;
        let mut loaded = Vec::new();
        let mut seen = std::collections::HashMap::new();
        let mut lines: Option<Vec<String>> = None;
        for (line, w, unknown) in load_jsonl::<Workload>(workloads)? {
            if w.is_v2() {
                // Read once more as raw JSON: serde drops unknown keys inside tagged enums
                // (an input's, a check's) without a word, and in v2 any unknown key is an error.
                let text = match &lines {
                    Some(l) => l,
                    None => lines.insert(
                        read_to_string(workloads)?
                            .lines()
                            .map(str::to_string)
                            .collect(),
                    ),
                };
                let raw = text.get(line - 1).map(String::as_str).unwrap_or("");
                if let Some(f) = unknown.first().cloned().or_else(|| v2_unread(raw, &w)) {
                    return Err(invalid(
                        workloads,
                        Some(line),
                        f,
                        format!(
                            "unknown field in a `{V2_NAME}` workload; that schema has no such field (nothing unknown is ignored in v2)"
                        ),
                    ));
                }
            }
            warnings.extend(unknown.into_iter().map(|f| {
                format!(
                    "`{}` line {line}: unknown field `{f}` ignored",
                    workloads.display()
                )
            }));
            if let Some(first) = seen.insert(w.uuid.clone(), line) {
                return Err(invalid(
                    workloads,
                    Some(line),
                    "uuid",
                    format!(
                        "`{}` repeats the uuid of line {first}; uuids must be unique",
                        w.uuid
                    ),
                ));
            }
            let resolved = check_workload(&def, &w, workloads, line)?;
            loaded.push(LoadedWorkload {
                line,
                workload: w,
                resolved,
            });
        }
        if loaded.is_empty() {
            return Err(invalid(
                workloads,
                None,
                "",
                "holds no workloads; expected one JSON object per line".into(),
            ));
        }
        let dir = definition
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        Ok(Problem {
            dir,
            definition_path: definition.to_path_buf(),
            workload_path: workloads.to_path_buf(),
            definition: def,
            workloads: loaded,
            warnings,
        })
    }
}

/// Loads a solution file and checks its entry point.
pub fn load_solution(path: &Path) -> Result<(Solution, Vec<String>), ContractError> {
    let (sol, unknown): (Solution, _) = load_json(path)?;
    if sol.spec.entry().is_none() || sol.spec.entry_point.matches("::").count() != 1 {
        return Err(invalid(
            path,
            None,
            "spec.entry_point",
            format!(
                "`{}` is not of the form `file.py::function`",
                sol.spec.entry_point
            ),
        ));
    }
    if let Some((file, _)) = sol.spec.entry()
        && !sol.sources.iter().any(|s| s.path == file)
    {
        return Err(invalid(
            path,
            None,
            "spec.entry_point",
            format!(
                "names file `{file}`, which is not among `sources` ({})",
                sol.sources
                    .iter()
                    .map(|s| s.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ));
    }
    for (i, s) in sol.sources.iter().enumerate() {
        if let Some(first) = sol.sources[..i].iter().position(|o| o.path == s.path) {
            return Err(invalid(
                path,
                None,
                format!("sources[{i}].path"),
                format!(
                    "`{}` repeats the path of `sources[{first}]`; source paths must be unique",
                    s.path
                ),
            ));
        }
        let p = Path::new(&s.path);
        if p.is_absolute()
            || p.components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(invalid(
                path,
                None,
                format!("sources[{i}].path"),
                format!(
                    "`{}` escapes the solution directory; expected a relative path",
                    s.path
                ),
            ));
        }
    }
    if sol.spec.languages.is_empty() {
        return Err(invalid(
            path,
            None,
            "spec.languages",
            "empty; expected e.g. [\"triton\"]".into(),
        ));
    }
    let warnings = unknown
        .into_iter()
        .map(|f| format!("`{}`: unknown field `{f}` ignored", path.display()))
        .collect();
    Ok((sol, warnings))
}
