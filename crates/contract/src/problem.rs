//! Problem directories: `definition.json` + `workload.jsonl` (+ a sibling `reference.py` where
//! the problem ships its reference that way), and solution files.

use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde_json::Value;

use crate::definition::{Axis, Definition};
use crate::dtype::DType;
use crate::error::{ContractError, Location};
use crate::io::{load_json, load_jsonl, read_to_string};
use crate::shape::{self, Resolved};
use crate::solution::Solution;
use crate::workload::{
    CodeDistanceMode, Generator, InputSpec, IntBound, MAX_TOLERANCE, OutputCheck, Workload,
};

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
                        "is `scalar`, but `{name}` is a tensor (shape not null); expected `random`, `generated`, `safetensors` or `custom`"
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
    // v2 (the ROCm port) lets the entry point build only the `custom` inputs, beside others.
    if !w.is_v2() && !custom.is_empty() && custom.len() != w.inputs.len() {
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
    check_checks(def, w, &resolved).map_err(|(f, m)| at(f, m))?;
    for (name, spec) in &def.inputs {
        if let Some(InputSpec::Generated { generator }) = w.inputs.get(name) {
            let dims = resolved.inputs.get(name).cloned().flatten();
            check_generator(generator, spec.dtype, dims.as_deref(), &resolved.axes)
                .map_err(|(f, m)| at(format!("inputs.{name}.generator{f}"), m))?;
        }
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

/// A located finding inside a workload: (field path, message).
type Finding = (String, String);

/// A tolerance-like field: finite, in `[0, MAX_TOLERANCE]`.
fn bounded(field: &str, v: f64) -> Result<(), Finding> {
    if v.is_finite() && (0.0..=MAX_TOLERANCE).contains(&v) {
        Ok(())
    } else {
        Err((
            field.to_string(),
            format!(
                "is {v:e}; expected a finite number in [0, {MAX_TOLERANCE:e}] (kg_contract::MAX_TOLERANCE)"
            ),
        ))
    }
}

/// A field the port pins to one value (`required_matched_ratio: 1`, `max_mismatch_ratio: 0`).
fn pinned(field: &str, v: f64, want: f64) -> Result<(), Finding> {
    if v == want {
        Ok(())
    } else {
        Err((
            field.to_string(),
            format!("is {v}; the v2 schema allows only {want}"),
        ))
    }
}

/// The version rules and every check of a workload: v2 has non-empty `checks` covering every
/// output exactly once and no `tolerance`; v1 has no `checks`. Each check's fields are in
/// range and its outputs' dtypes and shapes fit it (the ROCm port's contract validation).
fn check_checks(def: &Definition, w: &Workload, resolved: &Resolved) -> Result<(), Finding> {
    let Some(checks) = w.checks.as_ref().filter(|_| w.is_v2()) else {
        if w.checks.is_some() {
            return Err((
                "checks".into(),
                format!(
                    "is a v2 field; add `\"schema_version\": \"{}\"` (or use `tolerance`, v1)",
                    V2_NAME
                ),
            ));
        }
        if w.is_v2() {
            return Err((
                "checks".into(),
                "missing; a v2 workload must list a check for every output".into(),
            ));
        }
        return Ok(());
    };
    if w.tolerance.is_some() {
        return Err((
            "tolerance".into(),
            "is a v1 field; a v2 workload states its bounds in `checks`".into(),
        ));
    }
    if checks.is_empty() {
        return Err((
            "checks".into(),
            "empty; a v2 workload must list a check for every output".into(),
        ));
    }
    let mut covered: IndexMap<&str, usize> = IndexMap::new();
    for (i, c) in checks.iter().enumerate() {
        let f = |name: &str| format!("checks[{i}].{name}");
        for o in c.outputs() {
            if !def.outputs.contains_key(o) {
                return Err((
                    f(if matches!(c, OutputCheck::TopkRouting { .. }) {
                        "ids_output"
                    } else {
                        "output"
                    }),
                    format!(
                        "`{o}` is not an output of definition `{}` (outputs: {})",
                        def.name,
                        def.outputs.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            if let Some(first) = covered.insert(o, i) {
                return Err((
                    f("type"),
                    format!(
                        "checks output `{o}`, which `checks[{first}]` checks already; each output is checked exactly once"
                    ),
                ));
            }
        }
        let dtype = |o: &str| def.outputs[o].dtype;
        match c {
            OutputCheck::Numeric {
                max_atol,
                max_rtol,
                required_matched_ratio,
                max_error_cap,
                denominator_epsilon,
                ..
            } => {
                bounded(&f("max_atol"), *max_atol)?;
                bounded(&f("max_rtol"), *max_rtol)?;
                if let Some(cap) = max_error_cap {
                    bounded(&f("max_error_cap"), *cap)?;
                }
                pinned(&f("required_matched_ratio"), *required_matched_ratio, 1.0)?;
                if *denominator_epsilon <= 0.0 {
                    return Err((
                        f("denominator_epsilon"),
                        format!("is {denominator_epsilon:e}; expected a number > 0"),
                    ));
                }
                bounded(&f("denominator_epsilon"), *denominator_epsilon)?;
            }
            OutputCheck::Exact { output } => {
                if dtype(output).is_float() {
                    return Err((
                        f("output"),
                        format!(
                            "`{output}` is {}; an exact check needs an integer or bool output",
                            dtype(output)
                        ),
                    ));
                }
            }
            OutputCheck::CodeDistance {
                output,
                mode,
                max_distance,
                required_matched_ratio,
            } => {
                let d = dtype(output);
                match mode {
                    CodeDistanceMode::Value if d.is_float() => {
                        return Err((
                            f("mode"),
                            format!(
                                "is `value`, but `{output}` is {d}; expected an integer output"
                            ),
                        ));
                    }
                    CodeDistanceMode::RawBits if d.bits() != 8 => {
                        return Err((
                            f("mode"),
                            format!(
                                "is `raw_bits`, but `{output}` is {d}; expected a one-byte dtype"
                            ),
                        ));
                    }
                    _ => {}
                }
                if i64::try_from(*max_distance).is_err() {
                    return Err((
                        f("max_distance"),
                        format!("is {max_distance}; expected at most {}", i64::MAX),
                    ));
                }
                pinned(&f("required_matched_ratio"), *required_matched_ratio, 1.0)?;
            }
            OutputCheck::TopkRouting {
                ids_output,
                weights_output,
                gating_input,
                bias_input,
                topk,
                tie_atol,
                weight_atol,
                max_mismatch_ratio,
            } => {
                for (field, name) in std::iter::once(("gating_input", gating_input))
                    .chain(bias_input.iter().map(|b| ("bias_input", b)))
                {
                    if def.inputs.get(name).is_none_or(|s| s.is_scalar()) {
                        return Err((
                            f(field),
                            format!(
                                "`{name}` is not a tensor input of definition `{}`",
                                def.name
                            ),
                        ));
                    }
                }
                if *topk == 0 {
                    return Err((f("topk"), "is 0; expected at least 1".into()));
                }
                bounded(&f("tie_atol"), *tie_atol)?;
                bounded(&f("weight_atol"), *weight_atol)?;
                pinned(&f("max_mismatch_ratio"), *max_mismatch_ratio, 0.0)?;
                let ids = resolved.outputs.get(ids_output).cloned().flatten();
                let weights = resolved.outputs.get(weights_output).cloned().flatten();
                let gating = resolved.inputs.get(gating_input).cloned().flatten();
                let ok = match (&ids, &weights, &gating) {
                    (Some(i), Some(wt), Some(g)) => {
                        i == wt
                            && i.last().is_some_and(|&k| u64::try_from(k) == Ok(*topk))
                            && g.len() == i.len()
                            && g[..g.len() - 1] == i[..i.len() - 1]
                    }
                    _ => false,
                };
                if !ok {
                    return Err((
                        f("topk"),
                        format!(
                            "`{ids_output}` {ids:?} and `{weights_output}` {weights:?} must share one shape [..., topk={topk}], whose leading dims are those of `{gating_input}` {gating:?}"
                        ),
                    ));
                }
                if dtype(ids_output).is_float() || !dtype(weights_output).is_float() {
                    return Err((
                        f("ids_output"),
                        format!(
                            "`{ids_output}` is {} and `{weights_output}` {}; expected integer ids and float weights",
                            dtype(ids_output),
                            dtype(weights_output)
                        ),
                    ));
                }
            }
        }
    }
    let missing: Vec<&str> = def
        .outputs
        .keys()
        .map(String::as_str)
        .filter(|o| !covered.contains_key(o))
        .collect();
    if !missing.is_empty() {
        return Err((
            "checks".into(),
            format!(
                "no check for output(s) {}; a v2 workload checks every output exactly once",
                missing.join(", ")
            ),
        ));
    }
    Ok(())
}

/// A `generated` input's parameters against its dtype and shape (field path relative to
/// `generator`, e.g. `.std`).
fn check_generator(
    g: &Generator,
    dtype: DType,
    shape: Option<&[i64]>,
    axes: &IndexMap<String, i64>,
) -> Result<(), Finding> {
    let finite = |field: &str, v: f64| {
        if v.is_finite() {
            Ok(())
        } else {
            Err((
                format!(".{field}"),
                format!("is {v}; expected a finite number"),
            ))
        }
    };
    match g {
        Generator::Normal { mean, std } => {
            finite("mean", *mean)?;
            finite("std", *std)?;
            if *std <= 0.0 {
                return Err((".std".into(), format!("is {std}; expected a number > 0")));
            }
        }
        Generator::Uniform { low, high } => {
            finite("low", *low)?;
            finite("high", *high)?;
            if low >= high {
                return Err((
                    ".low".into(),
                    format!("is {low}, not below `high` ({high})"),
                ));
            }
        }
        Generator::Integer { low, high } => {
            let Some((min, max)) = dtype.int_range().filter(|_| dtype != DType::Bool) else {
                return Err((
                    ".type".into(),
                    format!("is `integer`, but the input is {dtype}; expected an integer dtype"),
                ));
            };
            let value = |field: &str, b: &IntBound| match b {
                IntBound::Int(v) => Ok(*v),
                IntBound::Expr(e) => shape::eval(e, axes)
                    .map_err(|err| (format!(".{field}"), format!("`{e}`: {err}"))),
            };
            let (lo, hi) = (value("low", low)?, value("high", high)?);
            if lo >= hi || lo < min || hi - 1 > max {
                return Err((
                    ".high".into(),
                    format!("[{lo}, {hi}) is empty or leaves {dtype}'s range [{min}, {max}]"),
                ));
            }
        }
        Generator::Bernoulli { probability } => {
            if !(0.0..=1.0).contains(probability) {
                return Err((
                    ".probability".into(),
                    format!("is {probability}; expected a probability in [0, 1]"),
                ));
            }
        }
        Generator::Constant { value } => {
            value
                .check_for(dtype)
                .map_err(|m| (".value".to_string(), m))?;
        }
        Generator::Simplex { axis, temperature } => {
            finite("temperature", *temperature)?;
            if *temperature <= 0.0 {
                return Err((
                    ".temperature".into(),
                    format!("is {temperature}; expected a number > 0"),
                ));
            }
            if !dtype.is_float() {
                return Err((
                    ".type".into(),
                    format!("is `simplex`, but the input is {dtype}; expected a float dtype"),
                ));
            }
            let rank = shape.map_or(0, <[i64]>::len) as i64;
            let a = if *axis < 0 { rank + axis } else { *axis };
            if rank == 0 || !(0..rank).contains(&a) {
                return Err((
                    ".axis".into(),
                    format!("is {axis}, outside the input's rank {rank}"),
                ));
            }
        }
    }
    Ok(())
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
