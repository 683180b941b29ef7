//! The operator graph as the extraction script reports it: tensors, graph inputs and outputs,
//! and every traced op with its arguments and source line.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::ExtractionPath;

/// Shape and dtype of one traced tensor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TensorMeta {
    /// Concrete sizes.
    pub shape: Vec<i64>,
    /// dtype as PyTorch spells it, e.g. `bfloat16`.
    pub dtype: String,
}

impl TensorMeta {
    /// Number of elements.
    pub fn numel(&self) -> u64 {
        self.shape.iter().map(|&d| d.max(0) as u64).product()
    }
}

/// One argument of the reference's `run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GraphInput {
    /// Input name from the definition.
    pub name: String,
    /// Tensor id, for tensor inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor: Option<String>,
    /// Value, for Python scalar inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalar: Option<serde_json::Value>,
}

/// One traced op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TracedOp {
    /// Op name as traced: `aten.mm.default` (aten) or `torch.matmul` / `Tensor.mul` (fx).
    pub op: String,
    /// Positional arguments: tensors as `{"tensor": id}`, everything else by value.
    pub args: Vec<serde_json::Value>,
    /// Keyword arguments, encoded like `args`.
    #[serde(default)]
    pub kwargs: IndexMap<String, serde_json::Value>,
    /// Ids of the tensors the op produced (`null` for a non-tensor element of a tuple).
    pub outputs: Vec<Option<String>>,
    /// `reference.py:LINE` of the reference line that issued the op, where known.
    #[serde(default)]
    pub loc: Option<String>,
}

/// The operator graph of one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorGraph {
    /// Extraction backend.
    pub backend: ExtractionPath,
    /// PyTorch version that traced it.
    pub torch_version: String,
    /// Every tensor by id.
    pub tensors: IndexMap<String, TensorMeta>,
    /// The reference's arguments, in definition order.
    pub inputs: Vec<GraphInput>,
    /// Tensor ids of the reference's outputs, in definition order.
    pub outputs: Vec<Option<String>>,
    /// Ops in execution order.
    pub ops: Vec<TracedOp>,
    /// Calls that produced no tensor (metadata reads such as `Tensor.shape`), not counted.
    #[serde(default)]
    pub ignored: Vec<String>,
}
