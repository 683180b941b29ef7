//! The fused memory model: what the graph's inputs and outputs cost when every intermediate
//! stays on chip.

use indexmap::IndexMap;

use super::RuleError;
use super::common::bytes_of;
use crate::graph::OperatorGraph;
use crate::ir::{IrOp, OpClass};

/// Touched bytes per graph input name, and bytes per graph output id.
pub(super) type FusedIo = (IndexMap<String, u64>, IndexMap<String, u64>);

/// Fused traffic: each graph input's touched bytes (reads through views summed, capped at the
/// tensor's size) and each graph output's size.
pub(super) fn fused_io(g: &OperatorGraph, ops: &[IrOp]) -> Result<FusedIo, RuleError> {
    let mut base: IndexMap<String, String> = IndexMap::new();
    for inp in &g.inputs {
        if let Some(t) = &inp.tensor {
            base.insert(t.clone(), inp.name.clone());
        }
    }
    let mut touched: IndexMap<String, u64> = g
        .inputs
        .iter()
        .filter(|i| i.tensor.is_some())
        .map(|i| (i.name.clone(), 0))
        .collect();
    for op in ops {
        if op.class == OpClass::View {
            // A view of a graph input is still that input.
            if let Some(b) = op
                .operands
                .first()
                .and_then(|o| base.get(&o.tensor))
                .cloned()
            {
                for o in &op.outputs {
                    base.entry(o.tensor.clone()).or_insert_with(|| b.clone());
                }
            }
            continue;
        }
        for o in &op.operands {
            if let Some(b) = base.get(&o.tensor)
                && let Some(t) = touched.get_mut(b)
            {
                *t += o.bytes;
            }
        }
    }
    // An output that is only a view of an input still has to be read from it (and written).
    for id in g.outputs.iter().flatten() {
        if let (Some(b), Some(meta)) = (base.get(id), g.tensors.get(id))
            && let Some(t) = touched.get_mut(b)
        {
            *t += bytes_of(meta)?;
        }
    }
    for inp in &g.inputs {
        if let Some(tid) = &inp.tensor {
            let meta = g
                .tensors
                .get(tid)
                .ok_or_else(|| RuleError::NoTensorRecord {
                    side: "input",
                    name: inp.name.clone(),
                })?;
            let cap = bytes_of(meta)?;
            if let Some(t) = touched.get_mut(&inp.name) {
                *t = (*t).min(cap);
            }
        }
    }
    let mut outputs = IndexMap::new();
    for (i, o) in g.outputs.iter().enumerate() {
        let id = o.as_ref().ok_or(RuleError::OutputNotTensor(i))?;
        let meta = g.tensors.get(id).ok_or_else(|| RuleError::NoTensorRecord {
            side: "output",
            name: id.clone(),
        })?;
        outputs.insert(id.clone(), bytes_of(meta)?);
    }
    Ok((touched, outputs))
}
