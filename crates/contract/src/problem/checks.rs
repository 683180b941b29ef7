//! Checking a problem against its format: the definition, and each workload against it
//! (shapes, inputs, tolerances, v2 `checks`, generators).

use std::path::Path;

use indexmap::IndexMap;

use super::{V2_NAME, invalid};
use crate::definition::{Axis, Definition};
use crate::dtype::DType;
use crate::error::ContractError;
use crate::shape::{self, Resolved};
use crate::workload::{
    CodeDistanceMode, Generator, InputSpec, IntBound, MAX_TOLERANCE, OutputCheck, Workload,
};

/// Whether Python `source` has a top-level `def name(` (a textual check, no Python parser).
fn defines_function(source: &str, name: &str) -> bool {
    source.lines().any(|line| {
        line.strip_prefix("def ")
            .and_then(|rest| rest.trim_start().strip_prefix(name))
            .is_some_and(|rest| rest.trim_start().starts_with('('))
    })
}

/// The definition's own rules: a name, a reference defining `run`, outputs, axes whose
/// values and expressions hold, shapes naming declared axes, distinct names, and a custom
/// inputs entry point the reference defines.
pub(super) fn check_definition(def: &Definition, path: &Path) -> Result<(), ContractError> {
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
    let Some(checks) = v2_checks(w)? else {
        return Ok(());
    };
    let mut covered: IndexMap<&str, usize> = IndexMap::new();
    for (index, c) in checks.iter().enumerate() {
        let entry = CheckEntry {
            def,
            resolved,
            index,
        };
        entry.cover(c, &mut covered)?;
        entry.check_fields(c)?;
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

/// The version rules: a v2 workload's `checks`, present, not empty and instead of
/// `tolerance`; `None` for a v1 workload, which has no `checks`.
fn v2_checks(w: &Workload) -> Result<Option<&[OutputCheck]>, Finding> {
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
        return Ok(None);
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
    Ok(Some(checks))
}

/// One entry of a v2 workload's `checks` (`checks[index]`) and what it is checked against.
struct CheckEntry<'a> {
    def: &'a Definition,
    resolved: &'a Resolved,
    index: usize,
}

impl CheckEntry<'_> {
    /// The path of one of the check's fields, e.g. `checks[0].max_atol`.
    fn field(&self, name: &str) -> String {
        format!("checks[{}].{name}", self.index)
    }

    /// The dtype of output `o`, which [`CheckEntry::cover`] found in the definition.
    fn dtype(&self, o: &str) -> DType {
        self.def.outputs[o].dtype
    }

    /// Every output the check names is an output of the definition that no earlier check
    /// names; records them in `covered` (output → index of its check).
    fn cover<'c>(
        &self,
        c: &'c OutputCheck,
        covered: &mut IndexMap<&'c str, usize>,
    ) -> Result<(), Finding> {
        let def = self.def;
        for o in c.outputs() {
            if !def.outputs.contains_key(o) {
                return Err((
                    self.field(if matches!(c, OutputCheck::TopkRouting { .. }) {
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
            if let Some(first) = covered.insert(o, self.index) {
                return Err((
                    self.field("type"),
                    format!(
                        "checks output `{o}`, which `checks[{first}]` checks already; each output is checked exactly once"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The check's own fields, by its type, in the order they are written.
    fn check_fields(&self, c: &OutputCheck) -> Result<(), Finding> {
        let f = |name: &str| self.field(name);
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
                if self.dtype(output).is_float() {
                    return Err((
                        f("output"),
                        format!(
                            "`{output}` is {}; an exact check needs an integer or bool output",
                            self.dtype(output)
                        ),
                    ));
                }
            }
            OutputCheck::CodeDistance {
                output,
                mode,
                max_distance,
                required_matched_ratio,
            } => self.code_distance(output, *mode, *max_distance, *required_matched_ratio)?,
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
                self.routing_inputs(gating_input, bias_input.as_ref())?;
                if *topk == 0 {
                    return Err((f("topk"), "is 0; expected at least 1".into()));
                }
                bounded(&f("tie_atol"), *tie_atol)?;
                bounded(&f("weight_atol"), *weight_atol)?;
                pinned(&f("max_mismatch_ratio"), *max_mismatch_ratio, 0.0)?;
                self.routing_shapes(ids_output, weights_output, gating_input, *topk)?;
                self.routing_dtypes(ids_output, weights_output)?;
            }
        }
        Ok(())
    }

    /// A code-distance check: its mode fits the output's dtype, its distance fits an int64.
    fn code_distance(
        &self,
        output: &str,
        mode: CodeDistanceMode,
        max_distance: u64,
        required_matched_ratio: f64,
    ) -> Result<(), Finding> {
        let f = |name: &str| self.field(name);
        let d = self.dtype(output);
        match mode {
            CodeDistanceMode::Value if d.is_float() => {
                return Err((
                    f("mode"),
                    format!("is `value`, but `{output}` is {d}; expected an integer output"),
                ));
            }
            CodeDistanceMode::RawBits if d.bits() != 8 => {
                return Err((
                    f("mode"),
                    format!("is `raw_bits`, but `{output}` is {d}; expected a one-byte dtype"),
                ));
            }
            _ => {}
        }
        if i64::try_from(max_distance).is_err() {
            return Err((
                f("max_distance"),
                format!("is {max_distance}; expected at most {}", i64::MAX),
            ));
        }
        pinned(&f("required_matched_ratio"), required_matched_ratio, 1.0)
    }

    /// A routing check's gating input (and bias input, if any) are tensor inputs.
    fn routing_inputs(
        &self,
        gating_input: &str,
        bias_input: Option<&String>,
    ) -> Result<(), Finding> {
        for (field, name) in std::iter::once(("gating_input", gating_input))
            .chain(bias_input.map(|b| ("bias_input", b.as_str())))
        {
            if self.def.inputs.get(name).is_none_or(|s| s.is_scalar()) {
                return Err((
                    self.field(field),
                    format!(
                        "`{name}` is not a tensor input of definition `{}`",
                        self.def.name
                    ),
                ));
            }
        }
        Ok(())
    }

    /// A routing check's ids and weights share one shape `[..., topk]` whose leading dims are
    /// the gating input's.
    fn routing_shapes(
        &self,
        ids_output: &str,
        weights_output: &str,
        gating_input: &str,
        topk: u64,
    ) -> Result<(), Finding> {
        let resolved = self.resolved;
        let ids = resolved.outputs.get(ids_output).cloned().flatten();
        let weights = resolved.outputs.get(weights_output).cloned().flatten();
        let gating = resolved.inputs.get(gating_input).cloned().flatten();
        let ok = match (&ids, &weights, &gating) {
            (Some(i), Some(wt), Some(g)) => {
                i == wt
                    && i.last().is_some_and(|&k| u64::try_from(k) == Ok(topk))
                    && g.len() == i.len()
                    && g[..g.len() - 1] == i[..i.len() - 1]
            }
            _ => false,
        };
        if !ok {
            return Err((
                self.field("topk"),
                format!(
                    "`{ids_output}` {ids:?} and `{weights_output}` {weights:?} must share one shape [..., topk={topk}], whose leading dims are those of `{gating_input}` {gating:?}"
                ),
            ));
        }
        Ok(())
    }

    /// A routing check's ids are integers and its weights floats.
    fn routing_dtypes(&self, ids_output: &str, weights_output: &str) -> Result<(), Finding> {
        if self.dtype(ids_output).is_float() || !self.dtype(weights_output).is_float() {
            return Err((
                self.field("ids_output"),
                format!(
                    "`{ids_output}` is {} and `{weights_output}` {}; expected integer ids and float weights",
                    self.dtype(ids_output),
                    self.dtype(weights_output)
                ),
            ));
        }
        Ok(())
    }
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
