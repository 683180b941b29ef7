//! SOL-ExecBench / FlashInfer-Bench `Definition`: the operator's contract.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::dtype::DType;

/// One symbolic dimension of a definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Axis {
    /// Fixed when the problem is defined.
    Const {
        /// The fixed value.
        value: i64,
        /// What the axis means.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
    /// Bound by each workload.
    Var {
        /// What the axis means.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
    /// Computed from other axes (`+ - * / // % **`, parentheses, unary signs).
    Expr {
        /// The expression over other axis names.
        expression: String,
        /// What the axis means.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
    },
}

/// A named input or output of a definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TensorSpec {
    /// Axis names (or literal sizes such as `"4"`); `[]` is a 0-d tensor and `null` a Python scalar.
    pub shape: Option<Vec<String>>,
    /// Element type.
    pub dtype: DType,
    /// What the tensor holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

impl TensorSpec {
    /// Whether this is a Python scalar (`shape: null`).
    pub fn is_scalar(&self) -> bool {
        self.shape.is_none()
    }
}

/// The definition schema versions kernelgate reads; absent is SOL-ExecBench's unversioned format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DefinitionSchema {
    /// The ROCm port's `sol_execbench.definition.v1`: no field beyond the port's is accepted.
    #[serde(rename = "sol_execbench.definition.v1")]
    V1,
}

/// A problem definition: axes, tensors and a PyTorch reference defining `run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Definition {
    /// `sol_execbench.definition.v1` (the ROCm port's), or absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_version: Option<DefinitionSchema>,
    /// Unique name, e.g. `rmsnorm_h4096`.
    pub name: String,
    /// Compute category, e.g. `gemm`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_type: Option<String>,
    /// Human-readable description (our corpus cites the model and layer here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Hugging Face model id the definition was taken from (upstream `hf_id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hf_id: Option<String>,
    /// Symbolic axes by name, in declaration order.
    pub axes: IndexMap<String, Axis>,
    /// Optional free-form tags (FlashInfer-Bench).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// Function in `reference` that builds inputs of type `custom`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_inputs_entrypoint: Option<String>,
    /// Inputs in call order.
    pub inputs: IndexMap<String, TensorSpec>,
    /// Outputs in call order.
    pub outputs: IndexMap<String, TensorSpec>,
    /// Python source defining `run`; empty when the problem ships a sibling `reference.py`.
    #[serde(default)]
    pub reference: String,
    /// Assertions relating axes, e.g. `H_qo == H_kv * H_r`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraints: Vec<String>,
}
