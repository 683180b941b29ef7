//! Reductions and the ops built on them: sum/mean/var/norm-style reductions, softmax and
//! log-softmax, layer and RMS norm, and the nll / cross-entropy losses.

use super::RuleError;
use super::common::{
    Cost, Ctx, Lowered, ReplayModel, aligned, dtype_of, free_names, full, letters, norm_dim, numel,
    operand, outs_full, red_letters,
};
use super::elementwise::elementwise;
use crate::ir::{Flops, OpClass};

/// The rule for a reduction, normalization or loss, or `None` when `name` is not one.
pub(super) fn dispatch(ctx: &Ctx, name: &str) -> Option<Result<Lowered, RuleError>> {
    if let Some(cost) = reduction_cost(name) {
        return Some(reduction(ctx, name, cost));
    }
    Some(match name {
        "softmax" | "_softmax" | "_safe_softmax" => softmax(ctx, false),
        "log_softmax" | "_log_softmax" => softmax(ctx, true),
        "layer_norm" | "native_layer_norm" => norm(ctx, false),
        "rms_norm" | "_fused_rms_norm" => norm(ctx, true),
        "cross_entropy" | "cross_entropy_loss" => cross_entropy(ctx),
        "nll_loss" => nll_loss(ctx, 4),
        "nll_loss_forward" | "nll_loss_nd" | "nll_loss2d_forward" => nll_loss(ctx, 3),
        _ => return None,
    })
}

/// Cost of a reduction: per input element reduced, and per output element produced.
#[derive(Clone, Copy)]
struct RedCost {
    per_input: Cost,
    per_output: Cost,
}

fn reduction_cost(name: &str) -> Option<RedCost> {
    let simple = RedCost {
        per_input: Cost {
            reduction: 1,
            ..Cost::ZERO
        },
        per_output: Cost::ZERO,
    };
    Some(match name {
        "sum" | "nansum" | "prod" | "amax" | "amin" | "max" | "min" | "argmax" | "argmin"
        | "any" | "all" | "count_nonzero" | "aminmax" => simple,
        "mean" | "nanmean" => RedCost {
            per_input: Cost {
                reduction: 1,
                ..Cost::ZERO
            },
            per_output: Cost {
                elementwise: 1,
                ..Cost::ZERO
            },
        },
        "var" | "var_mean" => RedCost {
            per_input: Cost {
                elementwise: 2,
                reduction: 2,
                ..Cost::ZERO
            },
            per_output: Cost {
                elementwise: 2,
                ..Cost::ZERO
            },
        },
        "std" | "std_mean" => RedCost {
            per_input: Cost {
                elementwise: 2,
                reduction: 2,
                ..Cost::ZERO
            },
            per_output: Cost {
                elementwise: 2,
                transcendental: 1,
                ..Cost::ZERO
            },
        },
        "logsumexp" => RedCost {
            per_input: Cost {
                elementwise: 1,
                reduction: 2,
                transcendental: 1,
            },
            per_output: Cost {
                elementwise: 1,
                transcendental: 1,
                ..Cost::ZERO
            },
        },
        "norm" | "vector_norm" | "linalg_vector_norm" => RedCost {
            per_input: Cost {
                elementwise: 1,
                reduction: 1,
                ..Cost::ZERO
            },
            per_output: Cost {
                transcendental: 1,
                ..Cost::ZERO
            },
        },
        _ => return None,
    })
}

fn reduction(ctx: &Ctx, name: &str, k: RedCost) -> Result<Lowered, RuleError> {
    let (iid, im) = ctx.tensor(0, "input").or_else(|_| ctx.tensor(0, "self"))?;
    // `max(a, b)` with a tensor second argument is the elementwise maximum.
    if ctx.opt_tensor(1, "other")?.is_some() {
        return elementwise(
            ctx,
            "binary",
            &["max"],
            Cost {
                elementwise: 1,
                ..Cost::ZERO
            },
        );
    }
    let rank = im.shape.len();
    let dims: Vec<usize> = match ctx.ints(1, "dim") {
        Some(d) if !d.is_empty() => d
            .into_iter()
            .map(|x| norm_dim(x, rank))
            .collect::<Result<_, _>>()?,
        _ => (0..rank).collect(),
    };
    // var/std take `unbiased` (or `correction`) before `keepdim`.
    let keepdim = ctx.boolean(2, "keepdim").unwrap_or(false)
        || (name == "var" || name == "std") && ctx.boolean(3, "keepdim").unwrap_or(false);
    let free = letters(rank, 0);
    let reds = red_letters(dims.len());
    let mut in_idx = Vec::new();
    let mut out_idx = Vec::new();
    let mut r = 0;
    for (d, f) in free.iter().enumerate() {
        if dims.contains(&d) {
            in_idx.push(reds[r].clone());
            r += 1;
            if keepdim {
                out_idx.push("1".to_string());
            }
        } else {
            in_idx.push(f.clone());
            out_idx.push(f.clone());
        }
    }
    let outs = ctx.outputs()?;
    let mut outputs = Vec::new();
    for (id, m) in &outs {
        outputs.push(full(id, m, out_idx.clone())?);
    }
    let out_n = numel(
        &outs
            .first()
            .map(|(_, m)| m.shape.clone())
            .unwrap_or_default(),
    );
    let mut flops = Flops::default();
    k.per_input.add_to(&mut flops, im.numel());
    k.per_output.add_to(&mut flops, out_n);
    Ok(Lowered {
        rule: "reduction",
        class: OpClass::Reduction,
        operands: vec![full(iid, im, in_idx)?],
        outputs,
        reduction: reds,
        elementwise: vec![],
        flops,
        replay: ReplayModel::Einsum,
    })
}

/// Softmax (`log = false`) or log-softmax (`log = true`) along one dim.
fn softmax(ctx: &Ctx, log: bool) -> Result<Lowered, RuleError> {
    let (iid, im) = ctx.tensor(0, "input").or_else(|_| ctx.tensor(0, "self"))?;
    let rank = im.shape.len();
    let dim = match ctx.int(1, "dim") {
        Some(d) => norm_dim(d, rank)?,
        None => {
            return Err(RuleError::UnsupportedForm(
                "softmax without `dim` (implicit dim is deprecated)".into(),
            ));
        }
    };
    let names = letters(rank, 0);
    let n = im.numel();
    let rows = n / (im.shape.get(dim).copied().unwrap_or(1).max(1) as u64);
    let mut flops = Flops::default();
    Cost {
        elementwise: 2,
        reduction: 2,
        transcendental: 1,
    }
    .add_to(&mut flops, n);
    if log {
        // One log per row of the sum.
        Cost {
            transcendental: 1,
            ..Cost::ZERO
        }
        .add_to(&mut flops, rows);
    }
    let (oid, om) = ctx.out0()?;
    Ok(Lowered {
        rule: if log { "log_softmax" } else { "softmax" },
        class: OpClass::Normalization,
        operands: vec![full(iid, im, names.clone())?],
        outputs: vec![full(oid, om, names.clone())?],
        reduction: vec![names.get(dim).cloned().unwrap_or_default()],
        elementwise: if log {
            vec!["max", "sub", "exp", "sum", "log", "sub"]
        } else {
            vec!["max", "sub", "exp", "sum", "div"]
        },
        flops,
        replay: ReplayModel::Einsum,
    })
}

/// layer_norm (`rms = false`) or rms_norm (`rms = true`).
fn norm(ctx: &Ctx, rms: bool) -> Result<Lowered, RuleError> {
    let (iid, im) = ctx.tensor(0, "input")?;
    let ns = ctx
        .ints(1, "normalized_shape")
        .ok_or(RuleError::Missing("normalized_shape is missing"))?;
    let rank = im.shape.len();
    if ns.len() > rank {
        return Err(RuleError::BadShape(format!(
            "normalized_shape {ns:?} is longer than the input rank {rank}"
        )));
    }
    let axis = rank - ns.len();
    let inner: u64 = numel(&im.shape[axis..]);
    let rows = im.numel() / inner.max(1);
    let names = letters(rank, 0);
    let w = ctx.opt_tensor(2, "weight")?;
    let b = if rms {
        None
    } else {
        ctx.opt_tensor(3, "bias")?
    };
    let mut operands = vec![full(iid, im, names.clone())?];
    for (id, m) in w.iter().chain(b.iter()) {
        operands.push(full(id, m, aligned(m, &im.shape, &names))?);
    }
    let affine = w.is_some() as u64 + b.is_some() as u64;
    let mut flops = Flops::default();
    let mut stats_shape = im.shape[..axis].to_vec();
    stats_shape.extend(std::iter::repeat_n(1, ns.len()));
    let (per_element, per_row) = if rms {
        (
            Cost {
                elementwise: 2 + affine,
                reduction: 1,
                ..Cost::ZERO
            },
            Cost {
                elementwise: 2,
                transcendental: 1,
                ..Cost::ZERO
            },
        )
    } else {
        (
            Cost {
                elementwise: 3 + affine,
                reduction: 2,
                ..Cost::ZERO
            },
            Cost {
                elementwise: 3,
                transcendental: 1,
                ..Cost::ZERO
            },
        )
    };
    per_element.add_to(&mut flops, im.numel());
    per_row.add_to(&mut flops, rows);
    let outs = ctx.outputs()?;
    let mut outputs = Vec::new();
    let mut replay = Vec::new();
    for (i, (id, m)) in outs.iter().enumerate() {
        let idx = if i == 0 {
            names.clone()
        } else {
            let mut v = names[..axis].to_vec();
            v.extend(std::iter::repeat_n("1".to_string(), ns.len()));
            v
        };
        replay.push(if i == 0 {
            im.shape.clone()
        } else {
            stats_shape.clone()
        });
        // Stats outputs (mean, rstd) may be flattened differently by some kernels; compare numel.
        if i > 0 && numel(&m.shape) == numel(&stats_shape) {
            replay[i] = m.shape.clone();
        }
        let idx = if idx.len() == m.shape.len() {
            idx
        } else {
            free_names(m)
        };
        outputs.push(full(id, m, idx)?);
    }
    Ok(Lowered {
        rule: if rms { "rms_norm" } else { "layer_norm" },
        class: OpClass::Normalization,
        operands,
        outputs,
        reduction: names[axis..].to_vec(),
        elementwise: if rms {
            vec!["square", "sum", "div", "add", "rsqrt", "mul"]
        } else {
            vec!["sum", "div", "sub", "square", "sum", "add", "rsqrt", "mul"]
        },
        flops,
        replay: ReplayModel::Shapes(replay),
    })
}

/// A loss's `reduction` argument: `none`/`mean`/`sum`, or ATen's 0/1/2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LossReduction {
    /// `none`: one loss per row.
    Unreduced,
    /// `mean` (the default).
    Mean,
    /// `sum`.
    Sum,
}

fn loss_reduction(ctx: &Ctx, pos: usize) -> Result<LossReduction, RuleError> {
    match ctx.arg(pos, "reduction") {
        None => Ok(LossReduction::Mean),
        Some(v) => match (v.as_i64(), v.as_str()) {
            (Some(0), _) | (_, Some("none")) => Ok(LossReduction::Unreduced),
            (Some(1), _) | (_, Some("mean")) => Ok(LossReduction::Mean),
            (Some(2), _) | (_, Some("sum")) => Ok(LossReduction::Sum),
            _ => Err(RuleError::UnknownReduction(v.to_string())),
        },
    }
}

/// The nll part of a loss: pick and negate (and weight) per row, then reduce.
fn nll_flops(flops: &mut Flops, rows: u64, weighted: bool, mode: LossReduction) {
    Cost {
        elementwise: 1 + weighted as u64,
        ..Cost::ZERO
    }
    .add_to(flops, rows);
    if mode != LossReduction::Unreduced {
        Cost {
            reduction: 1,
            ..Cost::ZERO
        }
        .add_to(flops, rows);
    }
    if mode == LossReduction::Mean {
        // The final division by the row count (or weight sum).
        flops.elementwise += 1;
    }
}

/// nll_loss: gathers one log-probability per row.
fn nll_loss(ctx: &Ctx, red_pos: usize) -> Result<Lowered, RuleError> {
    let (iid, im) = ctx.tensor(0, "input")?;
    let (tid, tm) = ctx.tensor(1, "target")?;
    let w = ctx.opt_tensor(2, "weight")?;
    let mode = loss_reduction(ctx, red_pos)?;
    let rows = tm.numel();
    let e = dtype_of(im)?;
    let mut operands = vec![
        operand(iid, im, free_names(im), e.bytes_for(rows.min(im.numel()))),
        full(tid, tm, free_names(tm))?,
    ];
    if let Some((id, m)) = w {
        operands.push(full(id, m, free_names(m))?);
    }
    let mut flops = Flops::default();
    nll_flops(&mut flops, rows, w.is_some(), mode);
    Ok(Lowered {
        rule: "nll_loss",
        class: OpClass::Gather,
        operands,
        outputs: outs_full(ctx, free_names)?,
        reduction: vec![],
        elementwise: vec!["neg", "sum"],
        flops,
        replay: ReplayModel::TracedOnly,
    })
}

/// cross_entropy with class-index targets: log-softmax over the class dim, then nll.
fn cross_entropy(ctx: &Ctx) -> Result<Lowered, RuleError> {
    let (iid, im) = ctx.tensor(0, "input")?;
    let (tid, tm) = ctx.tensor(1, "target")?;
    if dtype_of(tm)?.is_float() {
        return Err(RuleError::UnsupportedForm(
            "cross_entropy with probability targets has no rule".into(),
        ));
    }
    if ctx.float(7, "label_smoothing").unwrap_or(0.0) != 0.0 {
        return Err(RuleError::UnsupportedForm(
            "cross_entropy with label_smoothing has no rule".into(),
        ));
    }
    let w = ctx.opt_tensor(2, "weight")?;
    let mode = loss_reduction(ctx, 6)?;
    let cdim = if im.shape.len() >= 2 { 1 } else { 0 };
    let classes = im.shape.get(cdim).copied().unwrap_or(1).max(1) as u64;
    let rows = im.numel() / classes;
    let mut flops = Flops::default();
    Cost {
        elementwise: 2,
        reduction: 2,
        transcendental: 1,
    }
    .add_to(&mut flops, im.numel());
    Cost {
        transcendental: 1,
        ..Cost::ZERO
    }
    .add_to(&mut flops, rows);
    nll_flops(&mut flops, rows, w.is_some(), mode);
    let mut operands = vec![
        full(iid, im, free_names(im))?,
        full(tid, tm, free_names(tm))?,
    ];
    if let Some((id, m)) = w {
        operands.push(full(id, m, free_names(m))?);
    }
    Ok(Lowered {
        rule: "cross_entropy",
        class: OpClass::Normalization,
        operands,
        outputs: outs_full(ctx, free_names)?,
        reduction: vec![],
        elementwise: vec!["max", "sub", "exp", "sum", "log", "sub", "neg", "sum"],
        flops,
        replay: ReplayModel::TracedOnly,
    })
}
