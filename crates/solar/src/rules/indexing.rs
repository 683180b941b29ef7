//! Indexing rules: `getitem`, gather-like reads, embedding, top-k, sort, scans, scatter-like
//! writes and writes into an existing tensor (`setitem`, `copy_`). Reads and writes are priced
//! by the elements they touch, not the whole tensor.

use serde_json::Value;

use super::RuleError;
use super::common::{
    Ctx, Lowered, ReplayModel, bytes_of, dtype_of, free_names, full, norm_dim, numel, operand,
    outs_full, tensor_id,
};
use super::shape::view;
use crate::graph::TensorMeta;
use crate::ir::{Flops, OpClass};

/// The rule for an indexing, selection or scatter op, or `None` when `name` is not one.
pub(super) fn dispatch(ctx: &Ctx, name: &str, fx: bool) -> Option<Result<Lowered, RuleError>> {
    Some(match name {
        "embedding" => embedding(ctx, fx),
        "index_select" => ctx
            .tensor(0, "self")
            .or_else(|_| ctx.tensor(0, "input"))
            .and_then(|src| gather_like(ctx, "index_select", src)),
        "gather" | "take_along_dim" | "index" | "take" => ctx
            .tensor(0, "self")
            .or_else(|_| ctx.tensor(0, "input"))
            .and_then(|src| gather_like(ctx, "gather", src)),
        "getitem" => getitem(ctx),
        "setitem" => write_into(ctx, true),
        "copy" => write_into(ctx, false),
        "topk" => topk(ctx),
        "sort" | "argsort" | "msort" => sort(ctx, "sort"),
        "cumsum" | "cumprod" | "cummax" | "cummin" | "logcumsumexp" => scan(ctx),
        "scatter" | "index_copy" | "index_put" | "masked_scatter" | "index_fill" => {
            scatter(ctx, "scatter", false)
        }
        "scatter_add" | "scatter_reduce" | "index_add" | "index_reduce" => {
            scatter(ctx, "scatter_add", true)
        }
        _ => return None,
    })
}

/// `x[key]`: a gather when the key holds a tensor, else a view of basic indexing.
fn getitem(ctx: &Ctx) -> Result<Lowered, RuleError> {
    let key = ctx.op.args.get(1).cloned().unwrap_or(Value::Null);
    let (_, im) = ctx.tensor(0, "self")?;
    if has_tensor(&key) {
        let src = ctx.tensor(0, "self")?;
        gather_like(ctx, "gather", src)
    } else {
        let replay = match getitem_basic_shape(&im.shape, &key) {
            Some(s) => ReplayModel::Shapes(vec![s]),
            None => ReplayModel::TracedOnly,
        };
        view(ctx, "view", replay)
    }
}

/// Basic (view) indexing: ints, slices, None, Ellipsis.
fn getitem_basic_shape(shape: &[i64], key: &Value) -> Option<Vec<i64>> {
    let items: Vec<&Value> = match key.as_array() {
        Some(a) => a.iter().collect(),
        None => vec![key],
    };
    let consumes = |v: &Value| !(v.is_null() || v.get("ellipsis").is_some());
    let used = items.iter().filter(|v| consumes(v)).count();
    let mut out = Vec::new();
    let mut d = 0usize;
    for v in items {
        if v.is_null() {
            out.push(1);
        } else if v.get("ellipsis").is_some() {
            let n = shape.len().checked_sub(used)?;
            out.extend_from_slice(shape.get(d..d + n)?);
            d += n;
        } else if v.as_i64().is_some() {
            d += 1;
        } else if let Some(sl) = v.get("slice").and_then(Value::as_array) {
            let size = *shape.get(d)?;
            let get = |i: usize| sl.get(i).and_then(Value::as_i64);
            let step = get(2).unwrap_or(1);
            if step <= 0 {
                return None;
            }
            let clampi = |x: i64| {
                let x = if x < 0 { x + size } else { x };
                x.clamp(0, size)
            };
            let start = get(0).map(clampi).unwrap_or(0);
            let stop = get(1).map(clampi).unwrap_or(size);
            out.push(if stop > start {
                (stop - start + step - 1) / step
            } else {
                0
            });
            d += 1;
        } else {
            return None;
        }
    }
    out.extend_from_slice(shape.get(d..)?);
    Some(out)
}

fn has_tensor(v: &Value) -> bool {
    tensor_id(v).is_some() || v.as_array().is_some_and(|a| a.iter().any(has_tensor))
}

/// Reads as many source elements as the output has (at most the whole source).
fn gather_like(
    ctx: &Ctx,
    rule: &'static str,
    src: (&str, &TensorMeta),
) -> Result<Lowered, RuleError> {
    let (oid, om) = ctx.out0()?;
    let e = dtype_of(src.1)?;
    let touched = e.bytes_for(om.numel().min(src.1.numel()));
    let mut operands = vec![operand(src.0, src.1, free_names(src.1), touched)];
    for (id, m) in ctx.all_tensors()? {
        if id != src.0 {
            operands.push(full(id, m, free_names(m))?);
        }
    }
    Ok(Lowered {
        rule,
        class: OpClass::Gather,
        operands,
        outputs: vec![full(oid, om, free_names(om))?],
        reduction: vec![],
        elementwise: vec![],
        flops: Flops::default(),
        replay: ReplayModel::TracedOnly,
    })
}

/// Embedding lookup; the fx path passes `(input, weight)`, ATen `(weight, indices)`.
fn embedding(ctx: &Ctx, fx: bool) -> Result<Lowered, RuleError> {
    let (w, idx) = if fx {
        (ctx.tensor(1, "weight")?, ctx.tensor(0, "input")?)
    } else {
        (ctx.tensor(0, "weight")?, ctx.tensor(1, "indices")?)
    };
    if w.1.shape.len() != 2 {
        return Err(RuleError::BadShape("embedding weight must be 2-D".into()));
    }
    let d = w.1.shape[1];
    let rows = idx.1.numel();
    let e = dtype_of(w.1)?;
    let touched = e.bytes_for((rows * d.max(0) as u64).min(w.1.numel()));
    let (oid, om) = ctx.out0()?;
    let mut shape = idx.1.shape.clone();
    shape.push(d);
    Ok(Lowered {
        rule: "embedding",
        class: OpClass::Gather,
        operands: vec![
            operand(w.0, w.1, vec!["v".into(), "d".into()], touched),
            full(idx.0, idx.1, free_names(idx.1))?,
        ],
        outputs: vec![full(oid, om, free_names(om))?],
        reduction: vec![],
        elementwise: vec![],
        flops: Flops::default(),
        replay: ReplayModel::Shapes(vec![shape]),
    })
}

/// top-k: one compare per input element.
fn topk(ctx: &Ctx) -> Result<Lowered, RuleError> {
    let (iid, im) = ctx.tensor(0, "input").or_else(|_| ctx.tensor(0, "self"))?;
    let k = ctx.int(1, "k").ok_or(RuleError::Missing("k missing"))?;
    let rank = im.shape.len();
    let dim = norm_dim(ctx.int(2, "dim").unwrap_or(-1), rank)?;
    let mut s = im.shape.clone();
    if rank > 0 {
        s[dim] = k;
    }
    let flops = Flops {
        reduction: im.numel(),
        ..Flops::default()
    };
    Ok(Lowered {
        rule: "topk",
        class: OpClass::Select,
        operands: vec![full(iid, im, free_names(im))?],
        outputs: outs_full(ctx, free_names)?,
        reduction: vec![],
        elementwise: vec!["compare"],
        flops,
        replay: ReplayModel::Shapes(vec![s.clone(), s]),
    })
}

/// Sort along a dim: `ceil(log2(n))` compare steps per element (at least one).
fn sort(ctx: &Ctx, rule: &'static str) -> Result<Lowered, RuleError> {
    let (iid, im) = ctx.tensor(0, "input").or_else(|_| ctx.tensor(0, "self"))?;
    let rank = im.shape.len();
    let dim = match ctx.arg(1, "dim").and_then(Value::as_i64) {
        Some(d) => norm_dim(d, rank)?,
        None => rank.saturating_sub(1),
    };
    let n = im.shape.get(dim).copied().unwrap_or(1).max(1) as u64;
    let log2 = 64 - (n - 1).leading_zeros() as u64;
    let flops = Flops {
        reduction: im.numel() * log2.max(1),
        ..Flops::default()
    };
    let outs = ctx.outputs()?;
    Ok(Lowered {
        rule,
        class: OpClass::Select,
        operands: vec![full(iid, im, free_names(im))?],
        outputs: outs_full(ctx, free_names)?,
        reduction: vec![],
        elementwise: vec!["compare"],
        flops,
        replay: ReplayModel::Shapes(vec![im.shape.clone(); outs.len()]),
    })
}

/// Cumulative ops: one step per element.
fn scan(ctx: &Ctx) -> Result<Lowered, RuleError> {
    let (iid, im) = ctx.tensor(0, "input").or_else(|_| ctx.tensor(0, "self"))?;
    let flops = Flops {
        reduction: im.numel(),
        ..Flops::default()
    };
    Ok(Lowered {
        rule: "scan",
        class: OpClass::Reduction,
        operands: vec![full(iid, im, free_names(im))?],
        outputs: outs_full(ctx, free_names)?,
        reduction: vec![],
        elementwise: vec!["add"],
        flops,
        replay: ReplayModel::Shapes(vec![im.shape.clone()]),
    })
}

/// Scatter-like writes; `arith` when each written element is combined (scatter_add).
fn scatter(ctx: &Ctx, rule: &'static str, arith: bool) -> Result<Lowered, RuleError> {
    let (sid, sm) = ctx.tensor(0, "self").or_else(|_| ctx.tensor(0, "input"))?;
    let (oid, om) = ctx.out0()?;
    let in_place = oid == sid;
    let others: Vec<_> = ctx
        .all_tensors()?
        .into_iter()
        .filter(|(id, _)| *id != sid)
        .collect();
    // Elements written: the largest non-index operand (values/src), else the whole tensor.
    let e = dtype_of(sm)?;
    let written = others
        .iter()
        .filter(|(_, m)| m.dtype == sm.dtype)
        .map(|(_, m)| m.numel())
        .max()
        .unwrap_or(sm.numel())
        .min(sm.numel());
    let mut operands = vec![operand(
        sid,
        sm,
        free_names(sm),
        if in_place { 0 } else { bytes_of(sm)? },
    )];
    for (id, m) in &others {
        operands.push(full(id, m, free_names(m))?);
    }
    let out_bytes = if in_place {
        e.bytes_for(written)
    } else {
        bytes_of(om)?
    };
    let mut flops = Flops::default();
    if arith {
        flops.elementwise = written;
    }
    Ok(Lowered {
        rule,
        class: OpClass::Scatter,
        operands,
        outputs: vec![operand(oid, om, free_names(om), out_bytes)],
        reduction: vec![],
        elementwise: if arith { vec!["add"] } else { vec![] },
        flops,
        replay: ReplayModel::Shapes(vec![sm.shape.clone()]),
    })
}

/// `copy_(dst, src)` and `__setitem__(dst, key, value)`: writes into an existing tensor.
fn write_into(ctx: &Ctx, setitem: bool) -> Result<Lowered, RuleError> {
    let (did, dm) = ctx.tensor(0, "self")?;
    let e = dtype_of(dm)?;
    let src_pos = if setitem { 2 } else { 1 };
    let src = ctx.opt_tensor(src_pos, "src")?;
    let key_elems = if setitem {
        ctx.op
            .args
            .get(1)
            .and_then(|k| getitem_basic_shape(&dm.shape, k))
            .map(|s| numel(&s))
    } else {
        Some(dm.numel())
    };
    let written = key_elems
        .or(src.map(|(_, m)| m.numel()))
        .unwrap_or(dm.numel())
        .min(dm.numel());
    let mut operands = vec![operand(did, dm, free_names(dm), 0)];
    for (id, m) in ctx.all_tensors()? {
        if id != did {
            operands.push(full(id, m, free_names(m))?);
        }
    }
    Ok(Lowered {
        rule: if setitem { "setitem" } else { "copy_into" },
        class: OpClass::Copy,
        operands,
        outputs: vec![operand(did, dm, free_names(dm), e.bytes_for(written))],
        reduction: vec![],
        elementwise: vec![],
        flops: Flops::default(),
        replay: ReplayModel::Shapes(vec![dm.shape.clone()]),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_indexing_shapes() {
        let s = [4, 8, 16];
        let key: Value =
            serde_json::json!([{"slice": [null, null, null]}, 2, {"slice": [0, 8, 2]}]);
        assert_eq!(getitem_basic_shape(&s, &key), Some(vec![4, 4]));
        let key: Value = serde_json::json!([{"ellipsis": true}, null]);
        assert_eq!(getitem_basic_shape(&s, &key), Some(vec![4, 8, 16, 1]));
        let key: Value = serde_json::json!([{"slice": [-4, null, null]}]);
        assert_eq!(getitem_basic_shape(&s, &key), Some(vec![4, 8, 16]));
        let key: Value =
            serde_json::json!([{"slice": [null, null, null]}, {"slice": [4, null, null]}]);
        assert_eq!(getitem_basic_shape(&s, &key), Some(vec![4, 4, 16]));
    }
}
