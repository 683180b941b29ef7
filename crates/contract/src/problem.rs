//! Problem directories: `definition.json` + `workload.jsonl` (+ a sibling `reference.py` where
//! the problem ships its reference that way), and solution files.

use std::path::{Path, PathBuf};

use crate::definition::{Axis, Definition};
use crate::error::{ContractError, Location};
use crate::io::{load_json, load_jsonl, read_to_string};
use crate::shape::{self, Resolved};
use crate::solution::Solution;
use crate::workload::{InputSpec, Workload};

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

/// Whether Python `source` has a top-level `def name(` (a textual check, no Python parser).
fn defines_function(source: &str, name: &str) -> bool {
    source.lines().any(|line| {
        line.strip_prefix("def ")
            .and_then(|rest| rest.trim_start().strip_prefix(name))
            .is_some_and(|rest| rest.trim_start().starts_with('('))
    })
}

fn check_definition(def: &Definition, path: &Path) -> Result<(), ContractError> {
    if def.name.trim().is_empty() {
        return Err(invalid(
            path,
            None,
            "name",
            "empty; expected a unique name".into(),
        ));
    }
    if !defines_function(&def.reference, "run") {
        return Err(invalid(
            path,
            None,
            "reference",
            "does not define `run`; the reference must define a global function `run`".into(),
        ));
    }
    if def.outputs.is_empty() {
        return Err(invalid(
            path,
            None,
            "outputs",
            "empty; expected at least one output".into(),
        ));
    }
    for (name, axis) in &def.axes {
        match axis {
            Axis::Const { value, .. } if *value < 0 => {
                return Err(invalid(
                    path,
                    None,
                    format!("axes.{name}.value"),
                    format!("is {value}; sizes must be >= 0"),
                ));
            }
            Axis::Expr { expression, .. } => {
                shape::check_expression(expression, def.axes.keys()).map_err(|e| {
                    invalid(
                        path,
                        None,
                        format!("axes.{name}.expression"),
                        format!(
                            "`{expression}`: {e}; expected axis names, integers, `+ - * / // % **` and parentheses"
                        ),
                    )
                })?;
            }
            _ => {}
        }
    }
    for (kind, specs) in [("inputs", &def.inputs), ("outputs", &def.outputs)] {
        for (tname, spec) in specs {
            for axis in spec.shape.iter().flatten() {
                if !def.axes.contains_key(axis) && shape::literal_dim(axis).is_none() {
                    return Err(invalid(
                        path,
                        None,
                        format!("{kind}.{tname}.shape"),
                        format!(
                            "axis `{axis}` is not declared in `axes` (declared: {})",
                            def.axes.keys().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    ));
                }
            }
        }
    }
    for name in def.inputs.keys() {
        if def.axes.contains_key(name) {
            return Err(invalid(
                path,
                None,
                format!("inputs.{name}"),
                "has the same name as an axis; input and axis names must be distinct".into(),
            ));
        }
        if def.outputs.contains_key(name) {
            return Err(invalid(
                path,
                None,
                format!("outputs.{name}"),
                "has the same name as an input; names must be distinct".into(),
            ));
        }
    }
    if let Some(ep) = &def.custom_inputs_entrypoint
        && !defines_function(&def.reference, ep)
    {
        return Err(invalid(
            path,
            None,
            "custom_inputs_entrypoint",
            format!("names `{ep}`, which the reference does not define"),
        ));
    }
    Ok(())
}

/// Checks one workload against its definition and resolves its shapes.
pub fn check_workload(
    def: &Definition,
    w: &Workload,
    path: &Path,
    line: usize,
) -> Result<Resolved, ContractError> {
    let at = |field: String, message: String| invalid(path, Some(line), field, message);
    let resolved = shape::resolve(def, &w.axes).map_err(|e| {
        let field = match &e {
            shape::ShapeError::Unknown { axis, .. }
            | shape::ShapeError::Contradiction { axis, .. }
            | shape::ShapeError::Negative { axis, .. } => format!("axes.{axis}"),
            shape::ShapeError::Unbound { axis } => format!("axes.{axis}"),
            shape::ShapeError::Expr { axis, .. } => format!("axes.{axis}"),
            shape::ShapeError::UndeclaredInShape { tensor, .. } => format!("inputs.{tensor}"),
        };
        at(field, e.to_string())
    })?;
    for (name, spec) in &def.inputs {
        let Some(input) = w.inputs.get(name) else {
            return Err(at(
                format!("inputs.{name}"),
                format!(
                    "missing; the definition declares input `{name}`, expected e.g. `\"{name}\": {}`",
                    if spec.is_scalar() {
                        r#"{"type": "scalar", "value": <number>}"#
                    } else {
                        r#"{"type": "random"}"#
                    }
                ),
            ));
        };
        match input {
            InputSpec::Scalar { .. } if !spec.is_scalar() => {
                return Err(at(
                    format!("inputs.{name}.type"),
                    format!(
                        "is `scalar`, but `{name}` is a tensor (shape not null); expected `random`, `safetensors` or `custom`"
                    ),
                ));
            }
            InputSpec::Random if spec.is_scalar() => {
                return Err(at(
                    format!("inputs.{name}.type"),
                    format!(
                        "is `random`, but `{name}` is a Python scalar (shape null); expected `scalar` with a `value`"
                    ),
                ));
            }
            InputSpec::Custom if def.custom_inputs_entrypoint.is_none() => {
                return Err(at(
                    format!("inputs.{name}.type"),
                    "is `custom`, but the definition has no `custom_inputs_entrypoint`".into(),
                ));
            }
            _ => {}
        }
    }
    let custom: Vec<&str> = w
        .inputs
        .iter()
        .filter(|(_, i)| matches!(i, InputSpec::Custom))
        .map(|(n, _)| n.as_str())
        .collect();
    if !custom.is_empty() && custom.len() != w.inputs.len() {
        let other: Vec<&str> = w
            .inputs
            .iter()
            .filter(|(_, i)| !matches!(i, InputSpec::Custom))
            .map(|(n, _)| n.as_str())
            .collect();
        return Err(at(
            format!("inputs.{}.type", other.first().copied().unwrap_or_default()),
            format!(
                "mixes `custom` inputs ({}) with other types ({}); the custom entry point builds all inputs, so either every input is `custom` or none is",
                custom.join(", "),
                other.join(", ")
            ),
        ));
    }
    for name in w.inputs.keys() {
        if !def.inputs.contains_key(name) {
            return Err(at(
                format!("inputs.{name}"),
                format!(
                    "not an input of definition `{}` (inputs: {})",
                    def.name,
                    def.inputs.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            ));
        }
    }
    // Every numeric field is checked here, at load, so that no value the judge cannot compute
    // with (an infinite tolerance, an element count past int64, an eps past float32) reaches it.
    if let Err((field, message)) = w.tolerance().check() {
        return Err(at(format!("tolerance.{field}"), message));
    }
    for (name, spec) in &def.inputs {
        if let Some(InputSpec::Scalar { value }) = w.inputs.get(name)
            && let Err(message) = value.check_for(spec.dtype)
        {
            return Err(at(format!("inputs.{name}.value"), message));
        }
    }
    for (kind, specs, shapes) in [
        ("inputs", &def.inputs, &resolved.inputs),
        ("outputs", &def.outputs, &resolved.outputs),
    ] {
        for (name, spec) in specs {
            let Some(Some(dims)) = shapes.get(name) else {
                continue;
            };
            let elements = dims
                .iter()
                .try_fold(1i64, |n, &d| n.checked_mul(d))
                .filter(|&n| {
                    u64::try_from(n)
                        .ok()
                        .and_then(|n| n.checked_mul(u64::from(spec.dtype.bits())))
                        .is_some()
                });
            if elements.is_none() {
                return Err(at(
                    format!("{kind}.{name}.shape"),
                    format!(
                        "resolves to {dims:?}, whose element count (or size in bits) does not fit in 64 bits; expected smaller axes"
                    ),
                ));
            }
        }
    }
    Ok(resolved)
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
        for (line, w, unknown) in load_jsonl::<Workload>(workloads)? {
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
