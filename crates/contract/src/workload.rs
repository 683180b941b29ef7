//! SOL-ExecBench `Workload`: one concrete binding of a definition's variable axes and inputs.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A Python scalar value: `int`, `float` or `bool`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ScalarValue {
    /// `True` / `False`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
}

impl<'de> Deserialize<'de> for ScalarValue {
    fn deserialize<D: serde::Deserializer<'de>>(de: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ScalarValue;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an int, a float or a bool")
            }
            fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<ScalarValue, E> {
                Ok(ScalarValue::Bool(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ScalarValue, E> {
                Ok(ScalarValue::Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ScalarValue, E> {
                i64::try_from(v).map(ScalarValue::Int).map_err(|_| {
                    E::custom(format!(
                        "integer {v} does not fit in a signed 64-bit int; write it as a float"
                    ))
                })
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<ScalarValue, E> {
                Ok(ScalarValue::Float(v))
            }
        }
        de.deserialize_any(V)
    }
}

/// Where one input's data comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputSpec {
    /// Random data with the definition's shape and dtype.
    Random,
    /// A fixed Python scalar (for `shape: null` inputs).
    Scalar {
        /// The value.
        value: ScalarValue,
    },
    /// A tensor stored in a `.safetensors` file.
    Safetensors {
        /// Path, relative to the problem directory.
        path: String,
        /// Key inside the file.
        tensor_key: String,
    },
    /// Produced by the definition's `custom_inputs_entrypoint`.
    Custom,
    /// Drawn from an explicit distribution (the ROCm port's `generated` inputs).
    Generated {
        /// The distribution.
        generator: Generator,
    },
}

/// An integer generator's bound: a literal or an expression over the definition's axes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum IntBound {
    /// A literal integer.
    Int(i64),
    /// An axis expression, e.g. `"C"` or `"E - 1"`.
    Expr(String),
}

fn one() -> f64 {
    1.0
}
fn half() -> f64 {
    0.5
}
fn last_axis() -> i64 {
    -1
}

/// How a `generated` input's values are drawn (the ROCm port's generator specs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Generator {
    /// `mean + std * N(0, 1)`, drawn in float32 and cast.
    Normal {
        /// Mean (default 0).
        #[serde(default)]
        mean: f64,
        /// Standard deviation, > 0 (default 1).
        #[serde(default = "one")]
        std: f64,
    },
    /// Uniform in `[low, high)`, drawn in float32 and cast.
    Uniform {
        /// Lower bound (inclusive).
        low: f64,
        /// Upper bound (exclusive), > `low`.
        high: f64,
    },
    /// Integers in `[low, high)`; integer dtypes only.
    Integer {
        /// Lower bound (inclusive).
        low: IntBound,
        /// Upper bound (exclusive).
        high: IntBound,
    },
    /// 1 with probability `probability`, else 0, cast to the dtype.
    Bernoulli {
        /// Probability of a 1, in [0, 1] (default 0.5).
        #[serde(default = "half")]
        probability: f64,
    },
    /// Every element `value`.
    Constant {
        /// The value (finite).
        value: ScalarValue,
    },
    /// `softmax(N(0, 1) / temperature)` along `axis`, in float32, cast; floating dtypes only.
    Simplex {
        /// The axis that sums to one (default -1).
        #[serde(default = "last_axis")]
        axis: i64,
        /// Softmax temperature, > 0 (default 1).
        #[serde(default = "one")]
        temperature: f64,
    },
}

impl Generator {
    /// Whether every draw yields the same values (a constant), so the input is not random.
    pub fn is_constant(&self) -> bool {
        matches!(self, Generator::Constant { .. })
    }
}

/// Default absolute tolerance (upstream `max_atol`).
pub const DEFAULT_ATOL: f64 = 1e-2;
/// Default relative tolerance (upstream `max_rtol`).
pub const DEFAULT_RTOL: f64 = 1e-2;
/// Default fraction of elements that must match.
pub const DEFAULT_MATCHED_RATIO: f64 = 0.99;

fn default_atol() -> f64 {
    DEFAULT_ATOL
}
fn default_rtol() -> f64 {
    DEFAULT_RTOL
}
fn default_ratio() -> f64 {
    DEFAULT_MATCHED_RATIO
}

/// The largest `max_atol`, `max_rtol` and `max_error_cap` a workload may set. A tolerance this
/// large already accepts any output of ordinary magnitude, so anything above it is a typo or an
/// attack; the bound also keeps the judge's float32 arithmetic finite (`atol + rtol * |ref|`
/// and `diff / max(|ref|, atol)`: a tolerance of 1e300 is `inf` in float32, and `inf * 0` made
/// even the reference fail against itself).
pub const MAX_TOLERANCE: f64 = 1e6;

/// Per-workload correctness bounds, with the upstream defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Tolerance {
    /// Absolute tolerance per element.
    #[serde(default = "default_atol")]
    pub max_atol: f64,
    /// Relative tolerance per element.
    #[serde(default = "default_rtol")]
    pub max_rtol: f64,
    /// Fraction of elements that must satisfy `|o-r| <= atol + rtol*|r|`.
    #[serde(default = "default_ratio")]
    pub required_matched_ratio: f64,
    /// Hard ceiling on the largest absolute error, if any.
    #[serde(default)]
    pub max_error_cap: Option<f64>,
    /// Treat `-inf` in the same place in output and reference as a match.
    #[serde(default)]
    pub allow_negative_inf: bool,
}

impl Tolerance {
    /// Checks every numeric field against its allowed range: `Err((field, message))` naming the
    /// field (relative to `tolerance`) and the range.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        let bounded = |field: &'static str, v: f64| {
            if v.is_finite() && (0.0..=MAX_TOLERANCE).contains(&v) {
                Ok(())
            } else {
                Err((
                    field,
                    format!(
                        "is {v:e}; expected a finite number in [0, {MAX_TOLERANCE:e}] (kg_contract::MAX_TOLERANCE)"
                    ),
                ))
            }
        };
        bounded("max_atol", self.max_atol)?;
        bounded("max_rtol", self.max_rtol)?;
        if let Some(cap) = self.max_error_cap {
            bounded("max_error_cap", cap)?;
        }
        if !(0.0..=1.0).contains(&self.required_matched_ratio) {
            return Err((
                "required_matched_ratio",
                format!(
                    "is {}; expected a fraction in [0, 1]",
                    self.required_matched_ratio
                ),
            ));
        }
        Ok(())
    }
}

impl ScalarValue {
    /// Checks that the value is representable in `dtype` (the declared type of its input):
    /// within a float type's finite range, or an integral value within an integer type's
    /// range (a bool is 0 or 1 and fits every type).
    pub fn check_for(&self, dtype: crate::DType) -> Result<(), String> {
        let v = match *self {
            ScalarValue::Bool(_) => return Ok(()),
            ScalarValue::Int(i) => i as f64,
            ScalarValue::Float(f) => f,
        };
        if !v.is_finite() {
            return Err(format!("is {v}; expected a finite number"));
        }
        if let Some(max) = dtype.max_finite() {
            if v.abs() > max {
                return Err(format!(
                    "is {v:e}, beyond the largest finite {dtype} ({max:e}); expected a value in [-{max:e}, {max:e}]"
                ));
            }
            return Ok(());
        }
        if let Some((lo, hi)) = dtype.int_range() {
            let fits = match *self {
                ScalarValue::Int(i) => (lo..=hi).contains(&i),
                // An integral float within range (`1.0` for an int): compared as f64, exact
                // for every bound but i64's, where the float is at most 2^63 anyway.
                _ => v.fract() == 0.0 && v >= lo as f64 && v <= hi as f64,
            };
            if !fits {
                return Err(format!(
                    "is {v}; expected an integer in [{lo}, {hi}] for {dtype}"
                ));
            }
        }
        Ok(())
    }
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance {
            max_atol: DEFAULT_ATOL,
            max_rtol: DEFAULT_RTOL,
            required_matched_ratio: DEFAULT_MATCHED_RATIO,
            max_error_cap: None,
            allow_negative_inf: false,
        }
    }
}

/// The workload schema versions kernelgate reads; a file without `schema_version` is v1
/// (SOL-ExecBench's format, with an optional `tolerance`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum WorkloadSchema {
    /// The ROCm port's v2: per-output `checks` replace `tolerance`.
    #[serde(rename = "sol_execbench.workload.v2")]
    V2,
}

/// The numeric check's default `max_atol` and `max_rtol` (the ROCm port's).
pub const CHECK_DEFAULT_TOL: f64 = 1e-2;
/// The numeric check's default `denominator_epsilon` (the ROCm port's).
pub const CHECK_DEFAULT_EPSILON: f64 = 1e-12;
/// The top-k check's default `tie_atol` (the ROCm port's).
pub const CHECK_DEFAULT_TIE_ATOL: f64 = 1e-4;

fn check_tol() -> f64 {
    CHECK_DEFAULT_TOL
}
fn check_epsilon() -> f64 {
    CHECK_DEFAULT_EPSILON
}
fn full_ratio() -> f64 {
    1.0
}
fn tie_atol() -> f64 {
    CHECK_DEFAULT_TIE_ATOL
}

/// How a numeric check measures error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum NumericMode {
    /// Every element within `max_atol + max_rtol * |ref|`.
    #[default]
    Elementwise,
    /// `max |o - r| / (max |r| + denominator_epsilon) <= max_rtol`.
    NormalizedMax,
}

/// How a code-distance check reads codes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CodeDistanceMode {
    /// Integer values (integer outputs only).
    #[default]
    Value,
    /// Raw storage bytes (one-byte dtypes only).
    RawBits,
}

/// One correctness check of a v2 workload (the ROCm port's `OutputCheck`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum OutputCheck {
    /// Numeric comparison of one output.
    Numeric {
        /// The output.
        output: String,
        /// Absolute tolerance (elementwise mode).
        #[serde(default = "check_tol")]
        max_atol: f64,
        /// Relative tolerance (the bound on the normalized error in `normalized_max` mode).
        #[serde(default = "check_tol")]
        max_rtol: f64,
        /// Fraction of elements that must match; exactly 1.
        #[serde(default = "full_ratio")]
        required_matched_ratio: f64,
        /// Hard ceiling on the largest absolute error, if any.
        #[serde(default)]
        max_error_cap: Option<f64>,
        /// `-inf` in the same place on both sides matches.
        #[serde(default)]
        allow_negative_inf: bool,
        /// Elementwise or normalized-max.
        #[serde(default)]
        mode: NumericMode,
        /// Added to `max |r|` in `normalized_max` mode; > 0.
        #[serde(default = "check_epsilon")]
        denominator_epsilon: f64,
    },
    /// Exact equality of one integer or boolean output.
    Exact {
        /// The output.
        output: String,
    },
    /// Every code within `max_distance` of the reference's.
    CodeDistance {
        /// The output.
        output: String,
        /// Values or raw bytes.
        #[serde(default)]
        mode: CodeDistanceMode,
        /// Largest allowed `|o - r|` per code.
        max_distance: u64,
        /// Fraction of codes that must match; exactly 1.
        #[serde(default = "full_ratio")]
        required_matched_ratio: f64,
    },
    /// Joint, tie-aware check of MoE routing ids and weights.
    TopkRouting {
        /// The integer expert-id output, `[..., topk]`.
        ids_output: String,
        /// The float weight output, same shape.
        weights_output: String,
        /// The input whose softmax scores the experts.
        gating_input: String,
        /// An input added to the scores before selection, if any.
        #[serde(default)]
        bias_input: Option<String>,
        /// Experts selected per token, > 0.
        topk: u64,
        /// Score distance from the cut-off within which experts count as tied; >= 0.
        #[serde(default = "tie_atol")]
        tie_atol: f64,
        /// Largest allowed weight error of a correctly chosen expert; >= 0.
        #[serde(default = "check_tol")]
        weight_atol: f64,
        /// Fraction of tokens that may be routed differently; exactly 0.
        #[serde(default)]
        max_mismatch_ratio: f64,
    },
}

impl OutputCheck {
    /// The check's `type` as written in JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            OutputCheck::Numeric { .. } => "numeric",
            OutputCheck::Exact { .. } => "exact",
            OutputCheck::CodeDistance { .. } => "code_distance",
            OutputCheck::TopkRouting { .. } => "topk_routing",
        }
    }

    /// The outputs the check judges.
    pub fn outputs(&self) -> Vec<&str> {
        match self {
            OutputCheck::Numeric { output, .. }
            | OutputCheck::Exact { output }
            | OutputCheck::CodeDistance { output, .. } => vec![output.as_str()],
            OutputCheck::TopkRouting {
                ids_output,
                weights_output,
                ..
            } => vec![ids_output.as_str(), weights_output.as_str()],
        }
    }
}

/// One workload: a JSONL line of `workload.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Workload {
    /// `sol_execbench.workload.v2`, or absent for v1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<WorkloadSchema>,
    /// Unique id.
    pub uuid: String,
    /// Values of the definition's `var` axes.
    pub axes: IndexMap<String, i64>,
    /// Data source per input name.
    pub inputs: IndexMap<String, InputSpec>,
    /// Correctness bounds (v1 only); upstream defaults when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<Tolerance>,
    /// Per-output correctness checks (v2 only; required there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checks: Option<Vec<OutputCheck>>,
}

impl Workload {
    /// The effective v1 tolerance (the workload's, else the defaults); a v2 workload is judged
    /// by its [`Workload::checks`] instead.
    pub fn tolerance(&self) -> Tolerance {
        self.tolerance.unwrap_or_default()
    }

    /// Whether this is a v2 workload.
    pub fn is_v2(&self) -> bool {
        self.schema_version == Some(WorkloadSchema::V2)
    }

    /// What the judge compares with: `{"checks": [...]}` for a v2 workload (no v1 tolerance,
    /// so nothing falls back to the v1 defaults), else the v1 tolerance's fields.
    pub fn judge_policy(&self) -> serde_json::Value {
        match &self.checks {
            Some(checks) => serde_json::json!({ "checks": checks }),
            None => serde_json::to_value(self.tolerance()).unwrap_or(serde_json::Value::Null),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn tolerances_are_finite_non_negative_and_bounded() {
        assert!(Tolerance::default().check().is_ok());
        let with = |f: &dyn Fn(&mut Tolerance)| {
            let mut t = Tolerance::default();
            f(&mut t);
            t.check()
        };
        assert!(with(&|t| t.max_atol = 0.0).is_ok());
        assert!(with(&|t| t.max_atol = MAX_TOLERANCE).is_ok());
        for (bad, field) in [
            (with(&|t| t.max_atol = 1e300), "max_atol"),
            (with(&|t| t.max_atol = f64::INFINITY), "max_atol"),
            (with(&|t| t.max_atol = f64::NAN), "max_atol"),
            (with(&|t| t.max_rtol = -1e-9), "max_rtol"),
            (with(&|t| t.max_rtol = MAX_TOLERANCE * 2.0), "max_rtol"),
            (with(&|t| t.max_error_cap = Some(-1.0)), "max_error_cap"),
            (
                with(&|t| t.max_error_cap = Some(f64::INFINITY)),
                "max_error_cap",
            ),
            (
                with(&|t| t.required_matched_ratio = 1.0001),
                "required_matched_ratio",
            ),
            (
                with(&|t| t.required_matched_ratio = f64::NAN),
                "required_matched_ratio",
            ),
        ] {
            let (f, msg) = bad.unwrap_err();
            assert_eq!(f, field, "{msg}");
        }
    }

    #[test]
    fn scalars_must_be_representable_in_their_dtype() {
        use ScalarValue::{Bool, Float, Int};
        assert!(Float(1e-6).check_for(DType::Float32).is_ok());
        assert!(Float(3.0e38).check_for(DType::Float32).is_ok());
        assert!(Float(1e39).check_for(DType::Float32).is_err());
        assert!(Float(1e39).check_for(DType::Float64).is_ok());
        assert!(Float(65504.0).check_for(DType::Float16).is_ok());
        assert!(Float(-70000.0).check_for(DType::Float16).is_err());
        assert!(Float(f64::INFINITY).check_for(DType::Float64).is_err());
        assert!(Int(300).check_for(DType::Float8E4m3fn).is_ok());
        assert!(Int(500).check_for(DType::Float8E4m3fn).is_err());
        assert!(Int(127).check_for(DType::Int8).is_ok());
        assert!(Int(128).check_for(DType::Int8).is_err());
        assert!(Int(-1).check_for(DType::Uint8).is_err());
        assert!(Int(i64::MAX).check_for(DType::Int64).is_ok());
        assert!(Int(1 << 40).check_for(DType::Int32).is_err());
        assert!(Float(4.0).check_for(DType::Int64).is_ok());
        assert!(Float(4.5).check_for(DType::Int64).is_err());
        assert!(Float(1e30).check_for(DType::Int64).is_err());
        assert!(Bool(true).check_for(DType::Bool).is_ok());
        assert!(Int(1).check_for(DType::Bool).is_ok());
        assert!(Int(2).check_for(DType::Bool).is_err());
        let msg = Float(1e39).check_for(DType::Bfloat16).unwrap_err();
        assert!(msg.contains("largest finite bfloat16"), "{msg}");
    }
}
