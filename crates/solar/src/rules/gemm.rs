//! Contractions: matmul and its aliases, linear, addmm, `_scaled_mm`, einsum and scaled
//! dot-product attention, priced as tensor-core FLOPs at the wider input dtype.

use indexmap::IndexMap;
use kg_contract::DType;
use serde_json::Value;

use super::RuleError;
use super::common::{
    Cost, Ctx, Lowered, ReplayModel, aligned, broadcast, dtype_of, free_names, full, letters, numel,
};
use crate::graph::TensorMeta;
use crate::ir::{Flops, OpClass};

/// The rule for a contraction or attention op, or `None` when `name` is not one.
pub(super) fn dispatch(ctx: &Ctx, name: &str) -> Option<Result<Lowered, RuleError>> {
    Some(match name {
        "mm" | "matmul" | "bmm" | "mv" | "dot" | "vdot" | "inner" => matmul(ctx),
        "linear" => linear(ctx),
        "addmm" | "baddbmm" | "addbmm" => addmm(ctx, "addmm"),
        "_scaled_mm" => scaled_mm(ctx),
        "einsum" => einsum(ctx),
        _ => return AttentionOp::from_name(name).map(|op| sdpa(ctx, op)),
    })
}

fn wider(a: DType, b: DType) -> DType {
    if b.bits() > a.bits() { b } else { a }
}

/// Operands, index lists and multiply-accumulates of one matrix product.
struct Gemm<'a> {
    a: (&'a str, &'a TensorMeta),
    b: (&'a str, &'a TensorMeta),
    a_idx: Vec<String>,
    b_idx: Vec<String>,
    out_idx: Vec<String>,
    macs: u64,
    out_shape: Vec<i64>,
}

fn matmul(ctx: &Ctx) -> Result<Lowered, RuleError> {
    let a = ctx.tensor(0, "input").or_else(|_| ctx.tensor(0, "self"))?;
    let b = ctx.tensor(1, "other").or_else(|_| ctx.tensor(1, "mat2"))?;
    let g = matmul_shapes(a, b)?;
    gemm_lowered(ctx, "matmul", g, None)
}

/// torch.matmul semantics (1-D promotion and batch broadcasting).
fn matmul_shapes<'a>(
    a: (&'a str, &'a TensorMeta),
    b: (&'a str, &'a TensorMeta),
) -> Result<Gemm<'a>, RuleError> {
    let (sa, sb) = (&a.1.shape, &b.1.shape);
    if sa.is_empty() || sb.is_empty() {
        return Err(RuleError::BadShape("matmul of a 0-d tensor".into()));
    }
    let k = sa[sa.len() - 1];
    let kb = if sb.len() == 1 {
        sb[0]
    } else {
        sb[sb.len() - 2]
    };
    if k != kb {
        return Err(RuleError::BadShape(format!(
            "inner sizes differ: {sa:?} @ {sb:?}"
        )));
    }
    let m = if sa.len() >= 2 {
        Some(sa[sa.len() - 2])
    } else {
        None
    };
    let n = if sb.len() >= 2 {
        Some(sb[sb.len() - 1])
    } else {
        None
    };
    let ba = if sa.len() > 2 {
        &sa[..sa.len() - 2]
    } else {
        &[][..]
    };
    let bb = if sb.len() > 2 {
        &sb[..sb.len() - 2]
    } else {
        &[][..]
    };
    let batch = broadcast(&[ba, bb])?;
    let bnames = letters(batch.len(), 0);
    let mut out_shape = batch.clone();
    let mut out_idx = bnames.clone();
    let align = |bs: &[i64]| -> Vec<String> {
        let off = batch.len() - bs.len();
        bs.iter()
            .enumerate()
            .map(|(j, &d)| {
                if d == 1 && batch[off + j] != 1 {
                    "1".to_string()
                } else {
                    bnames[off + j].clone()
                }
            })
            .collect()
    };
    let mut a_idx = align(ba);
    let mut b_idx = align(bb);
    if let Some(m) = m {
        out_shape.push(m);
        out_idx.push("m".into());
        a_idx.push("m".into());
    }
    a_idx.push("k".into());
    b_idx.push("k".into());
    if let Some(n) = n {
        out_shape.push(n);
        out_idx.push("n".into());
        b_idx.push("n".into());
    }
    let macs = numel(&batch)
        * m.unwrap_or(1).max(0) as u64
        * n.unwrap_or(1).max(0) as u64
        * k.max(0) as u64;
    Ok(Gemm {
        a,
        b,
        a_idx,
        b_idx,
        out_idx,
        macs,
        out_shape,
    })
}

fn gemm_lowered(
    ctx: &Ctx,
    rule: &'static str,
    g: Gemm,
    bias: Option<(&str, &TensorMeta)>,
) -> Result<Lowered, RuleError> {
    let (oid, om) = ctx.out0()?;
    let dt = wider(dtype_of(g.a.1)?, dtype_of(g.b.1)?);
    let mut operands = vec![full(g.a.0, g.a.1, g.a_idx)?, full(g.b.0, g.b.1, g.b_idx)?];
    let mut flops = Flops {
        tensor: 2 * g.macs,
        tensor_dtype: Some(dt),
        ..Flops::default()
    };
    let mut work = vec!["mul", "add"];
    if let Some((id, m)) = bias {
        operands.push(full(id, m, aligned(m, &g.out_shape, &g.out_idx))?);
        flops.elementwise += numel(&g.out_shape);
        work.push("bias_add");
    }
    Ok(Lowered {
        rule,
        class: OpClass::Contraction,
        operands,
        outputs: vec![full(oid, om, g.out_idx)?],
        reduction: vec!["k".into()],
        elementwise: work,
        flops,
        replay: ReplayModel::Einsum,
    })
}

/// `linear(x, w, b)`: `x @ w.T + b` with `w` of shape `[n, k]`.
fn linear(ctx: &Ctx) -> Result<Lowered, RuleError> {
    let x = ctx.tensor(0, "input")?;
    let w = ctx.tensor(1, "weight")?;
    let bias = ctx.opt_tensor(2, "bias")?;
    if w.1.shape.len() != 2 {
        return Err(RuleError::BadShape(format!(
            "linear weight has rank {}, expected 2",
            w.1.shape.len()
        )));
    }
    let sx = &x.1.shape;
    let (n, k) = (w.1.shape[0], w.1.shape[1]);
    if sx.last().copied() != Some(k) {
        return Err(RuleError::BadShape(format!(
            "linear: input {sx:?} does not end in {k}"
        )));
    }
    let lead = letters(sx.len() - 1, 0);
    let mut a_idx = lead.clone();
    a_idx.push("k".into());
    let mut out_idx = lead;
    out_idx.push("n".into());
    let mut out_shape = sx[..sx.len() - 1].to_vec();
    out_shape.push(n);
    let g = Gemm {
        a: x,
        b: w,
        a_idx,
        b_idx: vec!["n".into(), "k".into()],
        out_idx,
        macs: numel(&out_shape) * k.max(0) as u64,
        out_shape,
    };
    gemm_lowered(ctx, "linear", g, bias)
}

fn addmm(ctx: &Ctx, rule: &'static str) -> Result<Lowered, RuleError> {
    let bias = ctx.tensor(0, "self")?;
    let g = matmul_shapes(ctx.tensor(1, "mat1")?, ctx.tensor(2, "mat2")?)?;
    gemm_lowered(ctx, rule, g, Some(bias))
}

/// `_scaled_mm`: a matmul plus one elementwise op per output element for each scale or bias.
fn scaled_mm(ctx: &Ctx) -> Result<Lowered, RuleError> {
    let g = matmul_shapes(ctx.tensor(0, "self")?, ctx.tensor(1, "mat2")?)?;
    let out_n = numel(&g.out_shape);
    let mut scales = Vec::new();
    for (pos, name) in [
        (2, "scale_a"),
        (3, "scale_b"),
        (4, "bias"),
        (5, "scale_result"),
    ] {
        if let Some((id, m)) = ctx.opt_tensor(pos, name)? {
            scales.push(full(id, m, free_names(m))?);
        }
    }
    let mut l = gemm_lowered(ctx, "scaled_mm", g, None)?;
    l.flops.elementwise += out_n * scales.len() as u64;
    l.operands.extend(scales);
    Ok(l)
}

/// Explicit-output einsum with one or two operands.
fn einsum(ctx: &Ctx) -> Result<Lowered, RuleError> {
    let eq = ctx
        .arg(0, "equation")
        .and_then(Value::as_str)
        .ok_or(RuleError::Missing("einsum equation is missing"))?
        .replace(' ', "");
    let ins = ctx.all_tensors()?;
    let (lhs, rhs) = eq
        .split_once("->")
        .ok_or_else(|| RuleError::UnsupportedForm("einsum without `->` has no rule".into()))?;
    if eq.contains("...") {
        return Err(RuleError::UnsupportedForm(
            "einsum with `...` has no rule".into(),
        ));
    }
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ins.len() || ins.is_empty() || ins.len() > 2 {
        return Err(RuleError::UnsupportedForm(format!(
            "einsum `{eq}` with {} operands has no rule",
            ins.len()
        )));
    }
    let mut sizes: IndexMap<char, i64> = IndexMap::new();
    let mut operands = Vec::new();
    for (t, (id, m)) in terms.iter().zip(&ins) {
        let idx: Vec<String> = t.chars().map(|c| c.to_string()).collect();
        for (ch, &s) in t.chars().zip(&m.shape) {
            sizes.insert(ch, s);
        }
        operands.push(full(id, m, idx)?);
    }
    let reduced: Vec<String> = sizes
        .keys()
        .filter(|ch| !rhs.contains(**ch))
        .map(|c| c.to_string())
        .collect();
    let all: u64 = sizes.values().map(|&s| s.max(0) as u64).product();
    let (oid, om) = ctx.out0()?;
    let mut flops = Flops::default();
    let class = if ins.len() == 2 && !reduced.is_empty() {
        flops.tensor = 2 * all;
        flops.tensor_dtype = Some(wider(dtype_of(ins[0].1)?, dtype_of(ins[1].1)?));
        OpClass::Contraction
    } else if ins.len() == 2 {
        flops.elementwise = all;
        OpClass::Elementwise
    } else if !reduced.is_empty() {
        flops.reduction = all;
        OpClass::Reduction
    } else {
        OpClass::Copy
    };
    Ok(Lowered {
        rule: "einsum",
        class,
        operands,
        outputs: vec![full(oid, om, rhs.chars().map(|c| c.to_string()).collect())?],
        reduction: reduced,
        elementwise: vec![],
        flops,
        replay: ReplayModel::Einsum,
    })
}

/// The attention ops, which differ only in where their arguments sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AttentionOp {
    /// `scaled_dot_product_attention` (functional and ATen).
    Functional,
    /// `_scaled_dot_product_flash_attention` and its `_for_cpu` variant (no mask argument).
    Flash,
    /// `_scaled_dot_product_efficient_attention`.
    Efficient,
    /// `_scaled_dot_product_cudnn_attention`.
    Cudnn,
}

impl AttentionOp {
    fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "scaled_dot_product_attention" => AttentionOp::Functional,
            "_scaled_dot_product_flash_attention_for_cpu"
            | "_scaled_dot_product_flash_attention" => AttentionOp::Flash,
            "_scaled_dot_product_efficient_attention" => AttentionOp::Efficient,
            "_scaled_dot_product_cudnn_attention" => AttentionOp::Cudnn,
            _ => return None,
        })
    }

    /// Positions of dropout_p, is_causal and the mask (q, k, v are 0, 1, 2).
    fn arg_positions(self) -> (usize, usize, Option<usize>) {
        match self {
            AttentionOp::Functional => (4, 5, Some(3)),
            AttentionOp::Flash => (3, 4, None),
            AttentionOp::Efficient | AttentionOp::Cudnn => (5, 6, Some(3)),
        }
    }
}

/// Query-key pairs scored per head for `l` queries and `s` keys.
fn attended_pairs(l: i64, s: i64, causal: bool) -> u64 {
    // PyTorch's is_causal keeps key j for query i when j <= i (top-left aligned).
    if causal {
        (0..l.max(0)).map(|i| (i + 1).min(s).max(0) as u64).sum()
    } else {
        (l.max(0) * s.max(0)) as u64
    }
}

/// Scaled dot-product attention: `q @ k.T`, a softmax, then `@ v`, causal pairs only if causal.
fn sdpa(ctx: &Ctx, op: AttentionOp) -> Result<Lowered, RuleError> {
    let (drop_pos, causal_pos, mask_pos) = op.arg_positions();
    let q = ctx.tensor(0, "query")?;
    let k = ctx.tensor(1, "key")?;
    let v = ctx.tensor(2, "value")?;
    let mask_names = ["attn_mask", "attn_bias"];
    let mut mask = None;
    for mn in mask_names {
        if let Some(t) = ctx.opt_tensor(mask_pos.unwrap_or(usize::MAX), mn)? {
            mask = Some(t);
        }
    }
    if ctx.float(drop_pos, "dropout_p").unwrap_or(0.0) != 0.0 {
        return Err(RuleError::UnsupportedForm(
            "attention with dropout_p > 0 has no rule (inference only)".into(),
        ));
    }
    let causal = ctx.boolean(causal_pos, "is_causal").unwrap_or(false);
    let (sq, sk, sv) = (&q.1.shape, &k.1.shape, &v.1.shape);
    if sq.len() < 2 || sk.len() < 2 || sv.len() < 2 {
        return Err(RuleError::BadShape(
            "attention inputs need rank >= 2".into(),
        ));
    }
    let (l, e) = (sq[sq.len() - 2], sq[sq.len() - 1]);
    let s = sk[sk.len() - 2];
    let ev = sv[sv.len() - 1];
    if sk[sk.len() - 1] != e || sv[sv.len() - 2] != s {
        return Err(RuleError::BadShape(format!(
            "attention shapes q {sq:?} k {sk:?} v {sv:?} do not agree"
        )));
    }
    let bh = q.1.numel() / ((l * e).max(1) as u64);
    let scores = bh * attended_pairs(l, s, causal);
    let dt = wider(dtype_of(q.1)?, dtype_of(k.1)?);
    let mut flops = Flops {
        tensor: 2 * scores * e.max(0) as u64 + 2 * scores * ev.max(0) as u64,
        tensor_dtype: Some(dt),
        ..Flops::default()
    };
    // Per score: scale, subtract max, divide (and add the mask); max and sum; one exp.
    Cost {
        elementwise: 3 + mask.is_some() as u64,
        reduction: 2,
        transcendental: 1,
    }
    .add_to(&mut flops, scores);
    let lead = letters(sq.len() - 2, 0);
    let idx = |last: [&str; 2]| {
        let mut v = lead.clone();
        v.extend(last.iter().map(|s| s.to_string()));
        v
    };
    let kv_idx = |m: &TensorMeta, last: [&str; 2]| {
        let mut v = idx(last);
        if m.shape[..m.shape.len() - 2] != sq[..sq.len() - 2] {
            // Grouped-query attention: fewer key/value heads than query heads.
            let n = m.shape.len() - 2;
            for (j, x) in v.iter_mut().take(n).enumerate() {
                if m.shape[j] != sq[j] {
                    *x = format!("{x}kv");
                }
            }
        }
        v
    };
    let mut operands = vec![
        full(q.0, q.1, idx(["l", "e"]))?,
        full(k.0, k.1, kv_idx(k.1, ["s", "e"]))?,
        full(v.0, v.1, kv_idx(v.1, ["s", "f"]))?,
    ];
    if let Some((id, m)) = mask {
        operands.push(full(id, m, free_names(m))?);
    }
    let outs = ctx.outputs()?;
    let mut outputs = Vec::new();
    let mut out_shape = sq[..sq.len() - 1].to_vec();
    out_shape.push(ev);
    for (i, (id, m)) in outs.iter().enumerate() {
        outputs.push(full(
            id,
            m,
            if i == 0 {
                idx(["l", "f"])
            } else {
                free_names(m)
            },
        )?);
    }
    let mut replay: Vec<Vec<i64>> = outs.iter().map(|(_, m)| m.shape.clone()).collect();
    if let Some(r) = replay.first_mut() {
        *r = out_shape;
    }
    Ok(Lowered {
        rule: if causal {
            "attention_causal"
        } else {
            "attention"
        },
        class: OpClass::Attention,
        operands,
        outputs,
        reduction: vec!["s".into(), "e".into()],
        elementwise: vec!["scale", "max", "sub", "exp", "sum", "div"],
        flops,
        replay: ReplayModel::Shapes(replay),
    })
}
