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

/// One workload: a JSONL line of `workload.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Workload {
    /// Unique id.
    pub uuid: String,
    /// Values of the definition's `var` axes.
    pub axes: IndexMap<String, i64>,
    /// Data source per input name.
    pub inputs: IndexMap<String, InputSpec>,
    /// Correctness bounds; upstream defaults when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerance: Option<Tolerance>,
}

impl Workload {
    /// The effective tolerance (the workload's, else the defaults).
    pub fn tolerance(&self) -> Tolerance {
        self.tolerance.unwrap_or_default()
    }
}
