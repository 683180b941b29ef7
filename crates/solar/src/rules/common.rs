//! What every rule shares: argument access ([`Ctx`]), operand builders, index letters, shape
//! helpers, per-element [`Cost`]s and the [`Lowered`] form a rule returns.

use kg_contract::DType;
use serde_json::Value;

use super::RuleError;
use crate::graph::{OperatorGraph, TensorMeta, TracedOp};
use crate::ir::{Flops, OpClass, Operand};

/// Per-element cost of a rule, in the units of [`Flops`]' vector fields.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Cost {
    /// Elementwise operations (add, mul, div, compare, select) per element.
    pub(super) elementwise: u64,
    /// Reduction steps per element.
    pub(super) reduction: u64,
    /// Transcendental functions (exp, log, tanh, ...) per element.
    pub(super) transcendental: u64,
}

impl Cost {
    /// No work; the base for struct literals that name only the non-zero parts.
    pub(super) const ZERO: Cost = Cost {
        elementwise: 0,
        reduction: 0,
        transcendental: 0,
    };

    /// Adds this cost, paid once per each of `elements`, to `flops`.
    pub(super) fn add_to(self, flops: &mut Flops, elements: u64) {
        flops.elementwise += elements * self.elementwise;
        flops.reduction += elements * self.reduction;
        flops.transcendental += elements * self.transcendental;
    }
}

/// One op and the graph it reads its tensors from.
pub(super) struct Ctx<'a> {
    pub(super) g: &'a OperatorGraph,
    pub(super) op: &'a TracedOp,
}

/// The tensor id of an argument encoded as `{"tensor": id}`.
pub(super) fn tensor_id(v: &Value) -> Option<&str> {
    v.get("tensor").and_then(Value::as_str)
}

pub(super) fn bytes_of(meta: &TensorMeta) -> Result<u64, RuleError> {
    Ok(dtype_of(meta)?.bytes_for(meta.numel()))
}

pub(super) fn dtype_of(meta: &TensorMeta) -> Result<DType, RuleError> {
    DType::parse(&meta.dtype).ok_or_else(|| RuleError::UnknownDtype(meta.dtype.clone()))
}

/// Free index names from `abcdefghijmnopq`, then `i15`, `i16`, ..., starting at `offset`.
pub(super) fn letters(n: usize, offset: usize) -> Vec<String> {
    const FREE: &[u8] = b"abcdefghijmnopq";
    (0..n)
        .map(|i| {
            let j = i + offset;
            if j < FREE.len() {
                (FREE[j] as char).to_string()
            } else {
                format!("i{j}")
            }
        })
        .collect()
}

/// Reduced index names `r`, `s`, ...
pub(super) fn red_letters(n: usize) -> Vec<String> {
    const RED: &[u8] = b"rstuvwxyz";
    (0..n)
        .map(|i| {
            if i < RED.len() {
                (RED[i] as char).to_string()
            } else {
                format!("r{i}")
            }
        })
        .collect()
}

pub(super) fn numel(shape: &[i64]) -> u64 {
    shape.iter().map(|&d| d.max(0) as u64).product()
}

/// A possibly negative dim as an index into `rank` dimensions (a 0-d tensor accepts 0 and -1).
pub(super) fn norm_dim(d: i64, rank: usize) -> Result<usize, RuleError> {
    let r = rank.max(1) as i64;
    let v = if d < 0 { d + r } else { d };
    if v < 0 || v >= r {
        return Err(RuleError::DimOutOfRange { dim: d, rank });
    }
    Ok(v as usize)
}

/// The broadcast shape of `shapes`, by PyTorch's rules.
pub(super) fn broadcast(shapes: &[&[i64]]) -> Result<Vec<i64>, RuleError> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1i64; rank];
    for s in shapes {
        for (j, &d) in s.iter().enumerate() {
            let o = &mut out[rank - s.len() + j];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(RuleError::NoBroadcast(
                    shapes.iter().map(|s| s.to_vec()).collect(),
                ));
            }
        }
    }
    Ok(out)
}

impl<'a> Ctx<'a> {
    /// An argument by keyword, else by position; `null` counts as absent.
    pub(super) fn arg(&self, pos: usize, name: &str) -> Option<&'a Value> {
        self.op
            .kwargs
            .get(name)
            .or_else(|| self.op.args.get(pos))
            .filter(|v| !v.is_null())
    }
    pub(super) fn meta(&self, id: &str) -> Result<&'a TensorMeta, RuleError> {
        self.g
            .tensors
            .get(id)
            .ok_or_else(|| RuleError::UnknownTensor(id.to_string()))
    }
    /// A required tensor argument.
    pub(super) fn tensor(
        &self,
        pos: usize,
        name: &str,
    ) -> Result<(&'a str, &'a TensorMeta), RuleError> {
        let v = self
            .arg(pos, name)
            .ok_or_else(|| RuleError::MissingArgument {
                pos,
                name: name.to_string(),
            })?;
        let id = tensor_id(v).ok_or_else(|| RuleError::NotATensor(name.to_string()))?;
        Ok((id, self.meta(id)?))
    }
    /// An optional tensor argument; anything that is not a tensor counts as absent.
    pub(super) fn opt_tensor(
        &self,
        pos: usize,
        name: &str,
    ) -> Result<Option<(&'a str, &'a TensorMeta)>, RuleError> {
        match self.arg(pos, name).and_then(tensor_id) {
            Some(id) => Ok(Some((id, self.meta(id)?))),
            None => Ok(None),
        }
    }
    pub(super) fn int(&self, pos: usize, name: &str) -> Option<i64> {
        self.arg(pos, name).and_then(Value::as_i64)
    }
    pub(super) fn float(&self, pos: usize, name: &str) -> Option<f64> {
        self.arg(pos, name).and_then(Value::as_f64)
    }
    pub(super) fn boolean(&self, pos: usize, name: &str) -> Option<bool> {
        self.arg(pos, name).and_then(Value::as_bool)
    }
    /// An int list argument; a single int is a list of one.
    pub(super) fn ints(&self, pos: usize, name: &str) -> Option<Vec<i64>> {
        let v = self.arg(pos, name)?;
        if let Some(i) = v.as_i64() {
            return Some(vec![i]);
        }
        v.as_array()?.iter().map(Value::as_i64).collect()
    }
    /// Every tensor among the arguments, in order, looking into lists.
    pub(super) fn all_tensors(&self) -> Result<Vec<(&'a str, &'a TensorMeta)>, RuleError> {
        fn walk<'v>(v: &'v Value, out: &mut Vec<&'v str>) {
            if let Some(id) = tensor_id(v) {
                out.push(id);
            } else if let Some(a) = v.as_array() {
                a.iter().for_each(|x| walk(x, out));
            }
        }
        let mut ids = Vec::new();
        self.op.args.iter().for_each(|v| walk(v, &mut ids));
        self.op
            .kwargs
            .iter()
            .filter(|(k, _)| k.as_str() != "out")
            .for_each(|(_, v)| walk(v, &mut ids));
        ids.into_iter().map(|id| Ok((id, self.meta(id)?))).collect()
    }
    pub(super) fn outputs(&self) -> Result<Vec<(&'a str, &'a TensorMeta)>, RuleError> {
        self.op
            .outputs
            .iter()
            .flatten()
            .map(|id| Ok((id.as_str(), self.meta(id)?)))
            .collect()
    }
    /// The first tensor the op produced.
    pub(super) fn out0(&self) -> Result<(&'a str, &'a TensorMeta), RuleError> {
        self.outputs()?
            .into_iter()
            .next()
            .ok_or(RuleError::NoOutput)
    }
}

pub(super) fn operand(id: &str, m: &TensorMeta, indices: Vec<String>, bytes: u64) -> Operand {
    Operand {
        tensor: id.to_string(),
        indices,
        shape: m.shape.clone(),
        dtype: m.dtype.clone(),
        bytes,
    }
}

/// An operand read or written in full.
pub(super) fn full(id: &str, m: &TensorMeta, indices: Vec<String>) -> Result<Operand, RuleError> {
    Ok(operand(id, m, indices, bytes_of(m)?))
}

/// Indices of an operand broadcast against an output of rank `rank` named `names`.
pub(super) fn aligned(m: &TensorMeta, out_shape: &[i64], names: &[String]) -> Vec<String> {
    let rank = out_shape.len();
    let q = m.shape.len().min(rank);
    (0..q)
        .map(|j| {
            let o = rank - q + j;
            let d = m.shape[m.shape.len() - q + j];
            if d == 1 && out_shape[o] != 1 {
                "1".to_string()
            } else {
                names[o].clone()
            }
        })
        .collect()
}

/// What a rule produces before the generic checks.
pub(super) struct Lowered {
    pub(super) rule: &'static str,
    pub(super) class: OpClass,
    pub(super) operands: Vec<Operand>,
    pub(super) outputs: Vec<Operand>,
    pub(super) reduction: Vec<String>,
    pub(super) elementwise: Vec<&'static str>,
    pub(super) flops: Flops,
    /// How the replay check re-derives the output shapes.
    pub(super) replay: ReplayModel,
}

/// The shape model a rule offers the replay check.
pub(super) enum ReplayModel {
    /// Output shapes follow from the einsum's index sizes.
    Einsum,
    /// The rule computed the output shapes itself.
    Shapes(Vec<Vec<i64>>),
    /// The shape depends on indexing the IR does not model; the traced shape is used.
    TracedOnly,
}

/// Every output in full, indexed by `names`.
pub(super) fn outs_full(
    ctx: &Ctx,
    names: impl Fn(&TensorMeta) -> Vec<String>,
) -> Result<Vec<Operand>, RuleError> {
    ctx.outputs()?
        .into_iter()
        .map(|(id, m)| full(id, m, names(m)))
        .collect()
}

/// Fresh free indices, one per dimension.
pub(super) fn free_names(m: &TensorMeta) -> Vec<String> {
    letters(m.shape.len(), 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_rejects_mismatch() {
        assert_eq!(broadcast(&[&[4, 1], &[3]]).unwrap(), vec![4, 3]);
        assert!(broadcast(&[&[4, 2], &[3]]).is_err());
    }
}
