//! Counting rules: each traced op becomes one [`IrOp`] through the rule for its canonical name.
//!
//! Op names from both backends (`aten.mul.Tensor`, `Tensor.__mul__`, `torch.mul`) map to one
//! canonical name (`mul`), so both backends share every rule. An op with no rule, or whose
//! arguments a rule cannot read, is collected as [`Unsupported`]; lowering fails closed listing
//! all of them. The conventions (what one exp, division or comparison costs) are in
//! `docs/solar.md`; change both together.
//!
//! Layout: this file holds the public API ([`lower`], [`canonical`], the errors) and the one
//! dispatch, `rule_for`, which asks each family's `dispatch` in turn: `elementwise`,
//! `reduction` (reductions, softmax, norms, losses), `gemm` (contractions, einsum,
//! attention), `indexing` (gather, scatter, sort, writes) and `shape` (views, copies,
//! creation). `common` holds what the rules share; `fusion` the fused memory model.

mod canonical;
mod common;
mod elementwise;
mod fusion;
mod gemm;
mod indexing;
mod reduction;
mod shape;

pub use canonical::canonical;

use common::{Ctx, Lowered, ReplayModel};
use fusion::fused_io;

use crate::graph::{OperatorGraph, TracedOp};
use crate::ir::{IrGraph, IrOp, OpClass, Operand, Replay, einsum_output_shapes, einsum_string};

/// An op the rules cannot count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsupported {
    /// Position in the operator graph.
    pub index: usize,
    /// Op name as traced.
    pub op: String,
    /// Reference source line, where known.
    pub loc: Option<String>,
    /// Why: no rule, or arguments the rule cannot read.
    pub reason: RuleError,
}

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "op #{} `{}` at {}: {}",
            self.index,
            self.op,
            self.loc.as_deref().unwrap_or("<unknown line>"),
            self.reason
        )
    }
}

/// Why lowering failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LowerError {
    /// At least one op has no rule (all are listed).
    #[error("{} op(s) have no counting rule; an analysis never counts them as zero:\n  {}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    Unsupported(Vec<Unsupported>),
    /// The IR's shape model disagrees with the traced shapes.
    #[error("replay check failed for op #{index} `{op}` at {loc}: {message}")]
    Replay {
        /// Position in the operator graph.
        index: usize,
        /// Op name.
        op: String,
        /// Source line.
        loc: String,
        /// The disagreement.
        message: String,
    },
}

/// Why one op (or the graph's fused traffic) could not be counted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    /// The canonical op name has no rule.
    #[error("no counting rule for this op")]
    NoRule,
    /// The op has a rule, but not for this form of its arguments.
    #[error("{0}")]
    UnsupportedForm(String),
    /// A dtype that `kg_contract::DType` does not know.
    #[error("dtype `{0}` is not in the dtype table (kg_contract::DType)")]
    UnknownDtype(String),
    /// A dim outside the tensor's rank.
    #[error("dim {dim} is out of range for rank {rank}")]
    DimOutOfRange {
        /// The dim as passed.
        dim: i64,
        /// The rank it indexes.
        rank: usize,
    },
    /// Operand shapes that do not broadcast together.
    #[error("shapes {0:?} do not broadcast")]
    NoBroadcast(Vec<Vec<i64>>),
    /// Shapes or ranks the rule's shape model rejects.
    #[error("{0}")]
    BadShape(String),
    /// A required tensor argument is absent.
    #[error("argument {pos} (`{name}`) is missing")]
    MissingArgument {
        /// Position.
        pos: usize,
        /// Keyword name.
        name: String,
    },
    /// A non-tensor value the rule needs is absent (the text names it).
    #[error("{0}")]
    Missing(&'static str),
    /// An argument that must be a tensor is something else.
    #[error("argument `{0}` is not a tensor")]
    NotATensor(String),
    /// A non-integer where an integer is needed (the text names what).
    #[error("non-integer {0}")]
    NonInteger(&'static str),
    /// A loss `reduction` other than none/mean/sum (or 0/1/2), as JSON.
    #[error("unknown reduction {0}")]
    UnknownReduction(String),
    /// A tensor id the graph has no record of.
    #[error("tensor `{0}` is not in the graph")]
    UnknownTensor(String),
    /// The op returned no tensor.
    #[error("the op produced no tensor")]
    NoOutput,
    /// A graph input or output whose tensor has no record.
    #[error("graph {side} `{name}` has no tensor record")]
    NoTensorRecord {
        /// `input` or `output`.
        side: &'static str,
        /// Input name or output tensor id.
        name: String,
    },
    /// A graph output (by position) that is not a tensor.
    #[error("graph output {0} is not a tensor")]
    OutputNotTensor(usize),
}

/// The single dispatch: the first family that knows `name` lowers the op.
fn rule_for(ctx: &Ctx, name: &str, fx: bool) -> Result<Lowered, RuleError> {
    // The families' names are disjoint; the order only keeps the elementwise and reduction
    // tables ahead of everything else, as they always were.
    elementwise::dispatch(ctx, name)
        .or_else(|| reduction::dispatch(ctx, name))
        .or_else(|| gemm::dispatch(ctx, name))
        .or_else(|| indexing::dispatch(ctx, name, fx))
        .or_else(|| shape::dispatch(ctx, name))
        .unwrap_or(Err(RuleError::NoRule))
}

/// Lowers a whole operator graph, failing closed on any op without a rule.
pub fn lower(g: &OperatorGraph) -> Result<IrGraph, LowerError> {
    let fx = g.backend == crate::ExtractionPath::Fx;
    let mut ops = Vec::new();
    let mut unsupported = Vec::new();
    for (index, op) in g.ops.iter().enumerate() {
        let ctx = Ctx { g, op };
        let name = canonical(&op.op);
        match rule_for(&ctx, &name, fx) {
            Ok(l) => ops.push((index, op, l)),
            Err(reason) => unsupported.push(Unsupported {
                index,
                op: op.op.clone(),
                loc: op.loc.clone(),
                reason,
            }),
        }
    }
    if !unsupported.is_empty() {
        return Err(LowerError::Unsupported(unsupported));
    }
    let mut ir_ops = Vec::new();
    for (index, op, l) in ops {
        let replay = replay_check(&l).map_err(|message| LowerError::Replay {
            index,
            op: op.op.clone(),
            loc: op.loc.clone().unwrap_or_else(|| "<unknown line>".into()),
            message,
        })?;
        ir_ops.push(ir_op(index, op, l, replay));
    }
    let (input_bytes, output_bytes) = fused_io(g, &ir_ops).map_err(|e| LowerError::Replay {
        index: 0,
        op: "<graph>".into(),
        loc: "<graph>".into(),
        message: e.to_string(),
    })?;
    Ok(IrGraph {
        backend: g.backend,
        ops: ir_ops,
        input_bytes,
        output_bytes,
    })
}

/// Re-derives the output shapes from the rule's model and compares them with the traced ones.
fn replay_check(l: &Lowered) -> Result<Replay, String> {
    match &l.replay {
        ReplayModel::TracedOnly => return Ok(Replay::TracedOnly),
        ReplayModel::Einsum => {
            compare_shapes(&l.outputs, &einsum_output_shapes(&l.operands, &l.outputs)?)?;
        }
        ReplayModel::Shapes(shapes) => compare_shapes(&l.outputs, shapes)?,
    }
    Ok(Replay::Checked)
}

fn compare_shapes(outputs: &[Operand], shapes: &[Vec<i64>]) -> Result<(), String> {
    for (o, s) in outputs.iter().zip(shapes) {
        if &o.shape != s {
            return Err(format!(
                "IR gives {s:?} for `{}`, traced {:?}",
                o.tensor, o.shape
            ));
        }
    }
    Ok(())
}

/// The IR op for a lowered, replay-checked op.
fn ir_op(index: usize, op: &TracedOp, l: Lowered, replay: Replay) -> IrOp {
    let einsum = match l.class {
        OpClass::Contraction
        | OpClass::Elementwise
        | OpClass::Reduction
        | OpClass::Normalization
        | OpClass::Attention => Some(einsum_string(&l.operands, &l.outputs)),
        _ => None,
    };
    let bytes_unfused = l.operands.iter().map(|o| o.bytes).sum::<u64>()
        + l.outputs.iter().map(|o| o.bytes).sum::<u64>();
    IrOp {
        index,
        op: op.op.clone(),
        rule: l.rule.to_string(),
        class: l.class,
        einsum,
        operands: l.operands,
        outputs: l.outputs,
        reduction_indices: l.reduction,
        elementwise: l.elementwise.iter().map(|s| s.to_string()).collect(),
        flops: l.flops,
        bytes_unfused,
        replay,
        loc: op.loc.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The typed errors print exactly the messages the rules printed as strings.
    #[test]
    fn rule_error_messages_are_unchanged() {
        let cases = [
            (RuleError::NoRule, "no counting rule for this op"),
            (
                RuleError::UnknownDtype("complex32".into()),
                "dtype `complex32` is not in the dtype table (kg_contract::DType)",
            ),
            (
                RuleError::DimOutOfRange { dim: -3, rank: 2 },
                "dim -3 is out of range for rank 2",
            ),
            (
                RuleError::NoBroadcast(vec![vec![4, 8], vec![16]]),
                "shapes [[4, 8], [16]] do not broadcast",
            ),
            (
                RuleError::MissingArgument {
                    pos: 0,
                    name: "self".into(),
                },
                "argument 0 (`self`) is missing",
            ),
            (
                RuleError::NotATensor("input".into()),
                "argument `input` is not a tensor",
            ),
            (RuleError::NonInteger("size"), "non-integer size"),
            (
                RuleError::UnknownReduction(serde_json::json!("bogus").to_string()),
                "unknown reduction \"bogus\"",
            ),
            (
                RuleError::UnknownTensor("t3".into()),
                "tensor `t3` is not in the graph",
            ),
            (RuleError::NoOutput, "the op produced no tensor"),
            (
                RuleError::NoTensorRecord {
                    side: "input",
                    name: "x".into(),
                },
                "graph input `x` has no tensor record",
            ),
            (
                RuleError::OutputNotTensor(1),
                "graph output 1 is not a tensor",
            ),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), text);
        }
    }
}
