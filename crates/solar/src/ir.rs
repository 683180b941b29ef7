//! The extended-einsum IR: one [`IrOp`] per traced op, with operands and their index lists,
//! reduction indices, the elementwise work, FLOPs split into tensor-core and other arithmetic,
//! and bytes per operand. [`IrGraph::replay`] checks the IR's own shape model against the
//! traced shapes.

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

use crate::ExtractionPath;

/// What kind of work an op does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpClass {
    /// A contraction (GEMM, batched GEMM, linear): tensor-core work.
    Contraction,
    /// Per-element arithmetic with broadcasting.
    Elementwise,
    /// Reduction over some indices.
    Reduction,
    /// Softmax / log-softmax / layer norm / RMS norm: reductions plus elementwise work.
    Normalization,
    /// Scaled dot-product attention: two contractions with a softmax between them.
    Attention,
    /// Reads selected rows or elements (embedding, gather, advanced indexing).
    Gather,
    /// Writes selected elements (scatter, index_put, setitem).
    Scatter,
    /// Moves data without arithmetic (dtype casts, copies, concatenation).
    Copy,
    /// Re-describes existing memory (view, permute, slice): no arithmetic, no traffic.
    View,
    /// Creates a tensor (zeros, arange, empty).
    Creation,
    /// Selection by comparison (top-k, sort).
    Select,
}

/// One operand or result of an IR op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Operand {
    /// Tensor id in the operator graph.
    pub tensor: String,
    /// Index names, one per dimension; `1` marks a broadcast or kept size-1 dimension.
    pub indices: Vec<String>,
    /// Traced sizes.
    pub shape: Vec<i64>,
    /// dtype.
    pub dtype: String,
    /// Bytes this op moves for this operand (a gather reads only the rows it touches).
    pub bytes: u64,
}

/// FLOPs of one op, split by where they run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flops {
    /// Tensor-core FLOPs: 2 x multiply-accumulates.
    pub tensor: u64,
    /// Input dtype the tensor FLOPs are priced at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_dtype: Option<kg_contract::DType>,
    /// Elementwise arithmetic (add, mul, div, compare, select), one per element-op.
    pub elementwise: u64,
    /// Reduction steps, one per input element reduced.
    pub reduction: u64,
    /// Transcendental functions (exp, log, rsqrt, tanh, erf, sin, cos), one each.
    pub transcendental: u64,
}

impl Flops {
    /// Everything that is not tensor-core work (priced at the vector rate).
    pub fn other(&self) -> u64 {
        self.elementwise + self.reduction + self.transcendental
    }
}

/// Whether an op's output shapes were re-derived by the IR.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Replay {
    /// The IR's shape model reproduced every traced output shape.
    Checked,
    /// The output shape depends on indexing the IR does not model; the traced shape is used.
    TracedOnly,
}

/// One op of the IR.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IrOp {
    /// Position in the operator graph.
    pub index: usize,
    /// Op name as traced.
    pub op: String,
    /// The counting rule applied (see `docs/solar.md`).
    pub rule: String,
    /// Kind of work.
    pub class: OpClass,
    /// Extended einsum, e.g. `ak,kb->ab`, where the op is a contraction, elementwise or reduction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub einsum: Option<String>,
    /// Tensor operands.
    pub operands: Vec<Operand>,
    /// Results.
    pub outputs: Vec<Operand>,
    /// Indices summed or otherwise reduced over.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reduction_indices: Vec<String>,
    /// The per-element work, e.g. `["sub", "exp", "div"]`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub elementwise: Vec<String>,
    /// FLOPs.
    pub flops: Flops,
    /// Bytes moved when this op runs alone: operands read plus results written.
    pub bytes_unfused: u64,
    /// Whether the output shapes were re-derived.
    pub replay: Replay,
    /// Reference source line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loc: Option<String>,
}

/// The IR of one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IrGraph {
    /// Extraction backend the IR came from.
    pub backend: ExtractionPath,
    /// Ops in execution order (metadata calls are not listed).
    pub ops: Vec<IrOp>,
    /// Bytes of each graph input actually touched (capped at its size), by input name.
    pub input_bytes: IndexMap<String, u64>,
    /// Bytes of each graph output, by output tensor id.
    pub output_bytes: IndexMap<String, u64>,
}

/// Totals over an IR graph.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// Tensor-core FLOPs by dtype.
    pub tensor_flops: IndexMap<String, u64>,
    /// Elementwise FLOPs.
    pub elementwise_flops: u64,
    /// Reduction FLOPs.
    pub reduction_flops: u64,
    /// Transcendental FLOPs.
    pub transcendental_flops: u64,
    /// Bytes when every op reads its inputs and writes its outputs.
    pub bytes_unfused: u64,
    /// Bytes when only graph inputs (as touched) and graph outputs move.
    pub bytes_fused: u64,
}

impl Totals {
    /// All tensor-core FLOPs.
    pub fn tensor_flops_total(&self) -> u64 {
        self.tensor_flops.values().sum()
    }
    /// All other FLOPs.
    pub fn other_flops(&self) -> u64 {
        self.elementwise_flops + self.reduction_flops + self.transcendental_flops
    }
}

impl IrGraph {
    /// Sums FLOPs and both byte models.
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for op in &self.ops {
            if let Some(dt) = op.flops.tensor_dtype
                && op.flops.tensor > 0
            {
                *t.tensor_flops.entry(dt.name().to_string()).or_default() += op.flops.tensor;
            }
            t.elementwise_flops += op.flops.elementwise;
            t.reduction_flops += op.flops.reduction;
            t.transcendental_flops += op.flops.transcendental;
            t.bytes_unfused += op.bytes_unfused;
        }
        t.bytes_fused =
            self.input_bytes.values().sum::<u64>() + self.output_bytes.values().sum::<u64>();
        t
    }
}

/// Output shapes implied by an einsum's index sizes; `1` stands for a size-1 dimension.
pub fn einsum_output_shapes(
    operands: &[Operand],
    outputs: &[Operand],
) -> Result<Vec<Vec<i64>>, String> {
    let mut sizes: IndexMap<&str, i64> = IndexMap::new();
    for o in operands {
        if o.indices.len() != o.shape.len() {
            return Err(format!(
                "operand `{}` has {} indices for rank {}",
                o.tensor,
                o.indices.len(),
                o.shape.len()
            ));
        }
        for (ix, &s) in o.indices.iter().zip(&o.shape) {
            if ix == "1" {
                if s != 1 {
                    return Err(format!(
                        "operand `{}`: broadcast index has size {s}",
                        o.tensor
                    ));
                }
                continue;
            }
            match sizes.get(ix.as_str()) {
                Some(&prev) if prev != s => {
                    return Err(format!(
                        "index `{ix}` is {prev} in one operand and {s} in `{}`",
                        o.tensor
                    ));
                }
                _ => {
                    sizes.insert(ix, s);
                }
            }
        }
    }
    outputs
        .iter()
        .map(|o| {
            o.indices
                .iter()
                .map(|ix| {
                    if ix == "1" {
                        Ok(1)
                    } else {
                        sizes
                            .get(ix.as_str())
                            .copied()
                            .ok_or_else(|| format!("output index `{ix}` appears in no operand"))
                    }
                })
                .collect()
        })
        .collect()
}

/// Renders `ab,bc->ac` from operand and output index lists (multi-letter indices are joined).
pub fn einsum_string(operands: &[Operand], outputs: &[Operand]) -> String {
    let side = |ops: &[Operand]| {
        ops.iter()
            .map(|o| o.indices.concat())
            .collect::<Vec<_>>()
            .join(",")
    };
    format!("{}->{}", side(operands), side(outputs))
}
