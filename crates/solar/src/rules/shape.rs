//! Ops that move or re-describe data without arithmetic: views (view, reshape, permute,
//! unsqueeze, expand, ...), copies and casts, concatenation, and tensor creation, with the
//! shape models the replay check re-derives their outputs from.

use serde_json::Value;

use super::RuleError;
use super::common::{
    Ctx, Lowered, ReplayModel, bytes_of, free_names, full, norm_dim, numel, operand, outs_full,
    tensor_id,
};
use crate::graph::TensorMeta;
use crate::ir::{Flops, OpClass};

/// The rule for a view, copy, concatenation or creation op, or `None` when `name` is not one.
pub(super) fn dispatch(ctx: &Ctx, name: &str) -> Option<Result<Lowered, RuleError>> {
    Some(match name {
        "fill" | "zero" => fill(ctx),
        "_to_copy" | "to" | "type" | "type_as" | "float" | "half" | "bfloat16" | "double"
        | "int" | "long" | "bool" | "short" | "char" | "byte" | "contiguous" | "clone" | "cpu"
        | "cuda" | "_to_dtype" | "flip" | "roll" | "fliplr" | "flipud" => copy_or_alias(ctx),
        "cat" | "stack" | "hstack" | "vstack" => concat(ctx, name),
        "repeat" | "tile" | "repeat_interleave" | "constant_pad_nd" | "pad" | "one_hot" => {
            simple(ctx, "copy", OpClass::Copy, true, ReplayModel::TracedOnly)
        }
        "view" | "_unsafe_view" | "reshape" | "_reshape_alias" => {
            reshape_replay(ctx).and_then(|r| view(ctx, "view", r))
        }
        "permute" | "transpose" | "t" | "T" | "mT" | "adjoint" => {
            permute_replay(ctx, PermuteOp::from_name(name)).and_then(|r| view(ctx, "view", r))
        }
        "unsqueeze" => unsqueeze_replay(ctx, false).and_then(|r| view(ctx, "view", r)),
        "squeeze" => unsqueeze_replay(ctx, true).and_then(|r| view(ctx, "view", r)),
        "expand" => expand_replay(ctx).and_then(|r| view(ctx, "view", r)),
        "detach" | "alias" | "lift_fresh" | "view_as" | "reshape_as" | "expand_as" | "flatten"
        | "unflatten" | "ravel" | "select" | "slice" | "narrow" | "split" | "split_with_sizes"
        | "chunk" | "unbind" | "as_strided" | "diagonal" | "movedim" | "moveaxis" | "unfold"
        | "tensor_split" | "view_as_real" | "view_as_complex" | "real" | "dropout"
        | "_unsafe_view_dtype" => view(ctx, "view", ReplayModel::TracedOnly),
        "empty" | "empty_like" | "empty_strided" | "new_empty" | "new_empty_strided" => empty(ctx),
        "zeros" | "ones" | "full" | "zeros_like" | "ones_like" | "full_like" | "new_zeros"
        | "new_ones" | "new_full" | "new_tensor" | "scalar_tensor" | "arange" | "linspace"
        | "tensor" | "as_tensor" | "lift_fresh_copy" | "eye" | "rand" | "randn" | "randint"
        | "rand_like" | "randn_like" | "randint_like" | "randperm" | "bernoulli" | "normal"
        | "uniform" => simple(
            ctx,
            "create",
            OpClass::Creation,
            false,
            ReplayModel::TracedOnly,
        ),
        _ => return None,
    })
}

/// An op without arithmetic: tensor arguments read in full (`read`) or not at all, every
/// output written in full.
pub(super) fn simple(
    ctx: &Ctx,
    rule: &'static str,
    class: OpClass,
    read: bool,
    replay: ReplayModel,
) -> Result<Lowered, RuleError> {
    let ins = ctx.all_tensors()?;
    let mut operands = Vec::new();
    for (id, m) in &ins {
        let bytes = if read { bytes_of(m)? } else { 0 };
        operands.push(operand(id, m, free_names(m), bytes));
    }
    Ok(Lowered {
        rule,
        class,
        operands,
        outputs: outs_full(ctx, free_names)?,
        reduction: vec![],
        elementwise: vec![],
        flops: Flops::default(),
        replay,
    })
}

/// A view: no arithmetic and no traffic.
pub(super) fn view(
    ctx: &Ctx,
    rule: &'static str,
    replay: ReplayModel,
) -> Result<Lowered, RuleError> {
    let mut l = simple(ctx, rule, OpClass::View, false, replay)?;
    for o in &mut l.outputs {
        o.bytes = 0;
    }
    Ok(l)
}

/// `fill_` / `zero_`: writes the whole tensor, reads nothing.
fn fill(ctx: &Ctx) -> Result<Lowered, RuleError> {
    let (sid, sm) = ctx.tensor(0, "self")?;
    Ok(Lowered {
        rule: "fill",
        class: OpClass::Creation,
        operands: vec![operand(sid, sm, free_names(sm), 0)],
        outputs: vec![full(sid, sm, free_names(sm))?],
        reduction: vec![],
        elementwise: vec![],
        flops: Flops::default(),
        replay: ReplayModel::Shapes(vec![sm.shape.clone()]),
    })
}

/// Casts, clones and flips: a full copy, or an alias when the op returned its input.
fn copy_or_alias(ctx: &Ctx) -> Result<Lowered, RuleError> {
    let (iid, _) = ctx.tensor(0, "self").or_else(|_| ctx.tensor(0, "input"))?;
    let (oid, _) = ctx.out0()?;
    let replay = same_as_input(ctx)?;
    if iid == oid {
        // Returned its input unchanged (already the dtype / already contiguous).
        view(ctx, "alias", replay)
    } else {
        simple(ctx, "copy", OpClass::Copy, true, replay)
    }
}

/// `cat` / `stack` (shape modelled) and `hstack` / `vstack` (traced shape only).
fn concat(ctx: &Ctx, name: &str) -> Result<Lowered, RuleError> {
    let replay = if matches!(name, "cat" | "stack") {
        cat_replay(ctx, name == "stack")?
    } else {
        ReplayModel::TracedOnly
    };
    simple(ctx, "concat", OpClass::Copy, true, replay)
}

/// `empty*`: allocates without writing, so no traffic either way.
fn empty(ctx: &Ctx) -> Result<Lowered, RuleError> {
    let mut l = simple(
        ctx,
        "empty",
        OpClass::Creation,
        false,
        ReplayModel::TracedOnly,
    )?;
    for o in &mut l.outputs {
        o.bytes = 0;
    }
    Ok(l)
}

fn same_as_input(ctx: &Ctx) -> Result<ReplayModel, RuleError> {
    let (_, im) = ctx.tensor(0, "self").or_else(|_| ctx.tensor(0, "input"))?;
    Ok(ReplayModel::Shapes(vec![im.shape.clone()]))
}

/// `view`/`reshape`: the target size with `-1` resolved.
fn reshape_replay(ctx: &Ctx) -> Result<ReplayModel, RuleError> {
    let (_, im) = ctx.tensor(0, "self")?;
    let int = |x: &Value| x.as_i64().ok_or(RuleError::NonInteger("size"));
    let mut size: Vec<i64> = match ctx.arg(1, "shape").or_else(|| ctx.arg(1, "size")) {
        Some(v) if v.is_array() => v
            .as_array()
            .into_iter()
            .flatten()
            .map(int)
            .collect::<Result<_, _>>()?,
        // `x.view(2, 3)`: the sizes are the remaining positional arguments.
        Some(v) if v.is_i64() => ctx
            .op
            .args
            .iter()
            .skip(1)
            .map(int)
            .collect::<Result<_, _>>()?,
        _ => return Ok(ReplayModel::TracedOnly),
    };
    let known: i64 = size.iter().filter(|&&d| d != -1).product();
    if let Some(p) = size.iter().position(|&d| d == -1) {
        size[p] = if known == 0 {
            0
        } else {
            im.numel() as i64 / known
        };
    }
    if numel(&size) != im.numel() {
        return Err(RuleError::BadShape(format!(
            "cannot view {:?} as {size:?}",
            im.shape
        )));
    }
    Ok(ReplayModel::Shapes(vec![size]))
}

/// The transposing ops, which differ in how they pick the dims to swap or reorder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PermuteOp {
    /// `t` / `T`: swaps the last two dims; the identity below rank 2.
    T,
    /// `mT`: swaps the last two dims; below rank 2 it reads dims like `permute`.
    MatrixT,
    /// `transpose(dim0, dim1)`.
    Transpose,
    /// `permute(dims)` and `adjoint`.
    Permute,
}

impl PermuteOp {
    fn from_name(name: &str) -> Self {
        match name {
            "t" | "T" => PermuteOp::T,
            "mT" => PermuteOp::MatrixT,
            "transpose" => PermuteOp::Transpose,
            _ => PermuteOp::Permute,
        }
    }
}

fn permute_replay(ctx: &Ctx, op: PermuteOp) -> Result<ReplayModel, RuleError> {
    let (_, im) = ctx.tensor(0, "self").or_else(|_| ctx.tensor(0, "input"))?;
    let rank = im.shape.len();
    let mut s = im.shape.clone();
    match op {
        PermuteOp::T | PermuteOp::MatrixT if rank >= 2 => s.swap(rank - 2, rank - 1),
        PermuteOp::T => {}
        PermuteOp::Transpose => {
            let a = norm_dim(
                ctx.int(1, "dim0")
                    .ok_or(RuleError::Missing("dim0 missing"))?,
                rank,
            )?;
            let b = norm_dim(
                ctx.int(2, "dim1")
                    .ok_or(RuleError::Missing("dim1 missing"))?,
                rank,
            )?;
            s.swap(a, b);
        }
        PermuteOp::MatrixT | PermuteOp::Permute => {
            let dims: Vec<i64> = match ctx.arg(1, "dims") {
                Some(v) if v.is_array() => ctx
                    .ints(1, "dims")
                    .ok_or(RuleError::Missing("dims missing"))?,
                // `x.permute(1, 0)`: the dims are the remaining positional arguments.
                _ => ctx
                    .op
                    .args
                    .iter()
                    .skip(1)
                    .filter_map(Value::as_i64)
                    .collect(),
            };
            if dims.len() != rank {
                return Err(RuleError::BadShape(format!(
                    "permute dims {dims:?} for rank {rank}"
                )));
            }
            s = dims
                .iter()
                .map(|&d| Ok(im.shape[norm_dim(d, rank)?]))
                .collect::<Result<_, RuleError>>()?;
        }
    }
    Ok(ReplayModel::Shapes(vec![s]))
}

/// `unsqueeze(dim)`, or `squeeze` (all size-1 dims, or the size-1 ones among `dim`).
fn unsqueeze_replay(ctx: &Ctx, squeeze: bool) -> Result<ReplayModel, RuleError> {
    let (_, im) = ctx.tensor(0, "self").or_else(|_| ctx.tensor(0, "input"))?;
    let rank = im.shape.len();
    let mut s = im.shape.clone();
    if squeeze {
        match ctx.ints(1, "dim") {
            None => s.retain(|&d| d != 1),
            Some(dims) => {
                let dims: Vec<usize> = dims
                    .into_iter()
                    .map(|d| norm_dim(d, rank))
                    .collect::<Result<_, _>>()?;
                s = s
                    .iter()
                    .enumerate()
                    .filter(|(i, d)| !(dims.contains(i) && **d == 1))
                    .map(|(_, d)| *d)
                    .collect();
            }
        }
    } else {
        let d = ctx.int(1, "dim").ok_or(RuleError::Missing("dim missing"))?;
        let d = norm_dim(d, rank + 1)?;
        s.insert(d, 1);
    }
    Ok(ReplayModel::Shapes(vec![s]))
}

/// `expand(size)`: `-1` keeps the input's size at that position.
fn expand_replay(ctx: &Ctx) -> Result<ReplayModel, RuleError> {
    let (_, im) = ctx.tensor(0, "self")?;
    let size: Vec<i64> = match ctx.arg(1, "size") {
        Some(v) if v.is_array() => ctx
            .ints(1, "size")
            .ok_or(RuleError::Missing("size missing"))?,
        Some(v) if v.is_i64() => ctx
            .op
            .args
            .iter()
            .skip(1)
            .filter_map(Value::as_i64)
            .collect(),
        _ => return Ok(ReplayModel::TracedOnly),
    };
    let off = size.len().saturating_sub(im.shape.len());
    let s = size
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            if d == -1 && i >= off {
                im.shape[i - off]
            } else {
                d
            }
        })
        .collect();
    Ok(ReplayModel::Shapes(vec![s]))
}

/// `cat` / `stack` output shape; `cat` skips 1-D empty tensors, as `torch.cat` does.
fn cat_replay(ctx: &Ctx, stack: bool) -> Result<ReplayModel, RuleError> {
    let list = ctx
        .arg(0, "tensors")
        .and_then(Value::as_array)
        .ok_or(RuleError::Missing("tensor list missing"))?;
    let metas: Vec<&TensorMeta> = list
        .iter()
        .filter_map(tensor_id)
        .map(|id| ctx.meta(id))
        .collect::<Result<_, _>>()?;
    let first = metas
        .iter()
        .find(|m| !(m.shape.len() == 1 && m.shape[0] == 0))
        .ok_or_else(|| RuleError::BadShape("empty tensor list".into()))?;
    let d = ctx.int(1, "dim").unwrap_or(0);
    if stack {
        let dim = norm_dim(d, first.shape.len() + 1)?;
        let mut s = first.shape.clone();
        s.insert(dim, metas.len() as i64);
        return Ok(ReplayModel::Shapes(vec![s]));
    }
    let dim = norm_dim(d, first.shape.len())?;
    let mut s = first.shape.clone();
    s[dim] = metas
        .iter()
        .filter(|m| !(m.shape.len() == 1 && m.shape[0] == 0))
        .map(|m| m.shape.get(dim).copied().unwrap_or(0))
        .sum();
    Ok(ReplayModel::Shapes(vec![s]))
}
