//! Counting rules: each traced op becomes one [`IrOp`] through the rule for its canonical name.
//!
//! Op names from both backends (`aten.mul.Tensor`, `Tensor.__mul__`, `torch.mul`) map to one
//! canonical name (`mul`), so both backends share every rule. An op with no rule, or whose
//! arguments a rule cannot read, is collected as [`Unsupported`]; lowering fails closed listing
//! all of them. The conventions (what one exp, division or comparison costs) are in
//! `docs/solar.md`; change both together.

use indexmap::IndexMap;
use kg_contract::DType;
use serde_json::Value;

use crate::graph::{OperatorGraph, TensorMeta, TracedOp};
use crate::ir::{
    Flops, IrGraph, IrOp, OpClass, Operand, Replay, einsum_output_shapes, einsum_string,
};

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
    pub reason: String,
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

/// Per-element cost of a rule.
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    ew: u64,
    red: u64,
    tr: u64,
}

const fn c(ew: u64, red: u64, tr: u64) -> Cost {
    Cost { ew, red, tr }
}

fn add_cost(f: &mut Flops, n: u64, k: Cost) {
    f.elementwise += n * k.ew;
    f.reduction += n * k.red;
    f.transcendental += n * k.tr;
}

/// Maps a traced op name from either backend onto one canonical rule name.
pub fn canonical(op: &str) -> String {
    let base = if let Some(rest) = op.strip_prefix("aten.") {
        rest.split('.').next().unwrap_or(rest).to_string()
    } else {
        op.rsplit('.').next().unwrap_or(op).to_string()
    };
    let dunder = match base.as_str() {
        "__add__" | "__radd__" | "__iadd__" => Some("add"),
        "__sub__" | "__isub__" => Some("sub"),
        "__rsub__" => Some("rsub"),
        "__mul__" | "__rmul__" | "__imul__" => Some("mul"),
        "__truediv__" | "__itruediv__" | "__rtruediv__" | "__div__" | "__rdiv__" => Some("div"),
        "__floordiv__" | "__rfloordiv__" | "__ifloordiv__" => Some("floor_divide"),
        "__mod__" | "__rmod__" => Some("remainder"),
        "__pow__" | "__ipow__" | "__rpow__" => Some("pow"),
        "__matmul__" | "__rmatmul__" => Some("matmul"),
        "__neg__" => Some("neg"),
        "__abs__" => Some("abs"),
        "__invert__" => Some("bitwise_not"),
        "__and__" | "__rand__" | "__iand__" => Some("bitwise_and"),
        "__or__" | "__ror__" | "__ior__" => Some("bitwise_or"),
        "__xor__" | "__rxor__" | "__ixor__" => Some("bitwise_xor"),
        "__lshift__" | "__rshift__" => Some("bitwise_shift"),
        "__eq__" => Some("eq"),
        "__ne__" => Some("ne"),
        "__lt__" => Some("lt"),
        "__le__" => Some("le"),
        "__gt__" => Some("gt"),
        "__ge__" => Some("ge"),
        "__getitem__" => Some("getitem"),
        "__setitem__" => Some("setitem"),
        _ => None,
    };
    if let Some(d) = dunder {
        return d.to_string();
    }
    // In-place variants (`mul_`, `copy_`) share the out-of-place rule.
    let trimmed = if base.ends_with('_') && !base.ends_with("__") && base.len() > 1 {
        base.trim_end_matches('_').to_string()
    } else {
        base
    };
    match trimmed.as_str() {
        "multiply" => "mul",
        "subtract" => "sub",
        "divide" | "true_divide" => "div",
        "expit" => "sigmoid",
        "absolute" => "abs",
        "negative" => "neg",
        "clip" => "clamp",
        "greater" => "gt",
        "greater_equal" => "ge",
        "less" => "lt",
        "less_equal" => "le",
        "not_equal" => "ne",
        "concat" | "concatenate" => "cat",
        "swapaxes" | "swapdims" => "transpose",
        "arccos" => "acos",
        "special_erf" => "erf",
        other => other,
    }
    .to_string()
}

struct Ctx<'a> {
    g: &'a OperatorGraph,
    op: &'a TracedOp,
}

type R<T> = Result<T, String>;

fn tensor_id(v: &Value) -> Option<&str> {
    v.get("tensor").and_then(Value::as_str)
}

fn bytes_of(meta: &TensorMeta) -> R<u64> {
    Ok(dtype_of(meta)?.bytes_for(meta.numel()))
}

fn dtype_of(meta: &TensorMeta) -> R<DType> {
    DType::parse(&meta.dtype).ok_or_else(|| {
        format!(
            "dtype `{}` is not in the dtype table (kg_contract::DType)",
            meta.dtype
        )
    })
}

fn letters(n: usize, offset: usize) -> Vec<String> {
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

fn red_letters(n: usize) -> Vec<String> {
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

fn numel(shape: &[i64]) -> u64 {
    shape.iter().map(|&d| d.max(0) as u64).product()
}

fn norm_dim(d: i64, rank: usize) -> R<usize> {
    let r = rank.max(1) as i64;
    let v = if d < 0 { d + r } else { d };
    if v < 0 || v >= r {
        return Err(format!("dim {d} is out of range for rank {rank}"));
    }
    Ok(v as usize)
}

fn broadcast(shapes: &[&[i64]]) -> R<Vec<i64>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1i64; rank];
    for s in shapes {
        for (j, &d) in s.iter().enumerate() {
            let o = &mut out[rank - s.len() + j];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(format!("shapes {shapes:?} do not broadcast"));
            }
        }
    }
    Ok(out)
}

impl<'a> Ctx<'a> {
    fn arg(&self, pos: usize, name: &str) -> Option<&'a Value> {
        self.op
            .kwargs
            .get(name)
            .or_else(|| self.op.args.get(pos))
            .filter(|v| !v.is_null())
    }
    fn meta(&self, id: &str) -> R<&'a TensorMeta> {
        self.g
            .tensors
            .get(id)
            .ok_or_else(|| format!("tensor `{id}` is not in the graph"))
    }
    fn tensor(&self, pos: usize, name: &str) -> R<(&'a str, &'a TensorMeta)> {
        let v = self
            .arg(pos, name)
            .ok_or_else(|| format!("argument {pos} (`{name}`) is missing"))?;
        let id = tensor_id(v).ok_or_else(|| format!("argument `{name}` is not a tensor"))?;
        Ok((id, self.meta(id)?))
    }
    fn opt_tensor(&self, pos: usize, name: &str) -> R<Option<(&'a str, &'a TensorMeta)>> {
        match self.arg(pos, name).and_then(tensor_id) {
            Some(id) => Ok(Some((id, self.meta(id)?))),
            None => Ok(None),
        }
    }
    fn int(&self, pos: usize, name: &str) -> Option<i64> {
        self.arg(pos, name).and_then(Value::as_i64)
    }
    fn float(&self, pos: usize, name: &str) -> Option<f64> {
        self.arg(pos, name).and_then(Value::as_f64)
    }
    fn boolean(&self, pos: usize, name: &str) -> Option<bool> {
        self.arg(pos, name).and_then(Value::as_bool)
    }
    fn ints(&self, pos: usize, name: &str) -> Option<Vec<i64>> {
        let v = self.arg(pos, name)?;
        if let Some(i) = v.as_i64() {
            return Some(vec![i]);
        }
        v.as_array()?.iter().map(Value::as_i64).collect()
    }
    /// Every tensor among the arguments, in order, looking into lists.
    fn all_tensors(&self) -> R<Vec<(&'a str, &'a TensorMeta)>> {
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
    fn outputs(&self) -> R<Vec<(&'a str, &'a TensorMeta)>> {
        self.op
            .outputs
            .iter()
            .flatten()
            .map(|id| Ok((id.as_str(), self.meta(id)?)))
            .collect()
    }
    fn out0(&self) -> R<(&'a str, &'a TensorMeta)> {
        self.outputs()?
            .into_iter()
            .next()
            .ok_or_else(|| "the op produced no tensor".to_string())
    }
}

fn operand(id: &str, m: &TensorMeta, indices: Vec<String>, bytes: u64) -> Operand {
    Operand {
        tensor: id.to_string(),
        indices,
        shape: m.shape.clone(),
        dtype: m.dtype.clone(),
        bytes,
    }
}

fn full(id: &str, m: &TensorMeta, indices: Vec<String>) -> R<Operand> {
    Ok(operand(id, m, indices, bytes_of(m)?))
}

/// Indices of an operand broadcast against an output of rank `rank` named `names`.
fn aligned(m: &TensorMeta, out_shape: &[i64], names: &[String]) -> Vec<String> {
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
struct Lowered {
    rule: &'static str,
    class: OpClass,
    operands: Vec<Operand>,
    outputs: Vec<Operand>,
    reduction: Vec<String>,
    elementwise: Vec<&'static str>,
    flops: Flops,
    /// Shapes the rule derives for the outputs; `None` = einsum-derived (or traced-only).
    replay: ReplayModel,
}

enum ReplayModel {
    Einsum,
    Shapes(Vec<Vec<i64>>),
    TracedOnly,
}

fn outs_full(ctx: &Ctx, names: impl Fn(&TensorMeta) -> Vec<String>) -> R<Vec<Operand>> {
    ctx.outputs()?
        .into_iter()
        .map(|(id, m)| full(id, m, names(m)))
        .collect()
}

fn free_names(m: &TensorMeta) -> Vec<String> {
    letters(m.shape.len(), 0)
}

// ---------------------------------------------------------------- elementwise

fn elementwise(ctx: &Ctx, rule: &'static str, work: &[&'static str], k: Cost) -> R<Lowered> {
    let ins = ctx.all_tensors()?;
    let (oid, om) = ctx.out0()?;
    let shapes: Vec<&[i64]> = ins.iter().map(|(_, m)| m.shape.as_slice()).collect();
    let names = letters(om.shape.len(), 0);
    let mut operands = Vec::new();
    let mut seen = Vec::new();
    for (id, m) in &ins {
        // An in-place op reads and writes the same tensor; a tensor used twice is read once.
        if seen.contains(id) {
            continue;
        }
        seen.push(*id);
        operands.push(full(id, m, aligned(m, &om.shape, &names))?);
    }
    let mut flops = Flops::default();
    add_cost(&mut flops, om.numel(), k);
    let replay = if shapes.is_empty() {
        ReplayModel::TracedOnly
    } else {
        let b = broadcast(&shapes)?;
        ReplayModel::Shapes(vec![b])
    };
    Ok(Lowered {
        rule,
        class: OpClass::Elementwise,
        operands,
        outputs: vec![full(oid, om, names)?],
        reduction: vec![],
        elementwise: work.to_vec(),
        flops,
        replay,
    })
}

fn unary_cost(name: &str) -> Option<(&'static str, Cost, &'static [&'static str])> {
    Some(match name {
        "exp" | "exp2" | "expm1" | "log" | "log2" | "log10" | "log1p" | "sin" | "cos" | "tan"
        | "tanh" | "erf" | "erfc" | "erfinv" | "sqrt" | "rsqrt" | "asin" | "acos" | "atan"
        | "sinh" | "cosh" | "asinh" | "acosh" | "atanh" | "lgamma" | "digamma" => {
            ("unary_transcendental", c(0, 0, 1), &["transcendental"])
        }
        "atan2" => ("binary_transcendental", c(0, 0, 1), &["atan2"]),
        "neg" | "abs" | "sign" | "sgn" | "floor" | "ceil" | "round" | "trunc" | "frac"
        | "reciprocal" | "relu" | "logical_not" | "bitwise_not" | "isnan" | "isinf"
        | "isfinite" | "signbit" | "nan_to_num" | "square" | "positive" | "conj" | "tril"
        | "triu" | "logit" => ("unary_simple", c(1, 0, 0), &["op"]),
        "sigmoid" => ("sigmoid", c(2, 0, 1), &["exp", "add", "div"]),
        "silu" => ("silu", c(3, 0, 1), &["exp", "add", "div", "mul"]),
        "softplus" => ("softplus", c(1, 0, 2), &["exp", "log1p", "compare"]),
        "mish" => ("mish", c(2, 0, 3), &["exp", "log1p", "tanh", "mul"]),
        "leaky_relu" | "hardtanh" | "relu6" | "threshold" | "elu" | "celu" => {
            ("piecewise", c(2, 0, 0), &["compare", "mul"])
        }
        "hardsigmoid" => ("hardsigmoid", c(3, 0, 0), &["add", "clamp", "div"]),
        "hardswish" => ("hardswish", c(4, 0, 0), &["add", "clamp", "div", "mul"]),
        "add" | "sub" | "rsub" | "mul" | "div" | "maximum" | "minimum" | "fmax" | "fmin" | "eq"
        | "ne" | "lt" | "le" | "gt" | "ge" | "logical_and" | "logical_or" | "logical_xor"
        | "bitwise_and" | "bitwise_or" | "bitwise_xor" | "bitwise_shift" | "remainder" | "fmod"
        | "floor_divide" | "where" | "masked_fill" | "copysign" | "heaviside" | "xlogy"
        | "isclose" => ("binary", c(1, 0, 0), &["op"]),
        "addcmul" | "addcdiv" => ("ternary", c(2, 0, 0), &["mul", "add"]),
        "lerp" => ("lerp", c(3, 0, 0), &["sub", "mul", "add"]),
        _ => return None,
    })
}

// ---------------------------------------------------------------- reductions

#[derive(Clone, Copy)]
struct RedCost {
    per_in: Cost,
    per_out: Cost,
}

fn reduction_cost(name: &str) -> Option<RedCost> {
    let simple = RedCost {
        per_in: c(0, 1, 0),
        per_out: c(0, 0, 0),
    };
    Some(match name {
        "sum" | "nansum" | "prod" | "amax" | "amin" | "max" | "min" | "argmax" | "argmin"
        | "any" | "all" | "count_nonzero" | "aminmax" => simple,
        "mean" | "nanmean" => RedCost {
            per_in: c(0, 1, 0),
            per_out: c(1, 0, 0),
        },
        "var" | "var_mean" => RedCost {
            per_in: c(2, 2, 0),
            per_out: c(2, 0, 0),
        },
        "std" | "std_mean" => RedCost {
            per_in: c(2, 2, 0),
            per_out: c(2, 0, 1),
        },
        "logsumexp" => RedCost {
            per_in: c(1, 2, 1),
            per_out: c(1, 0, 1),
        },
        "norm" | "vector_norm" | "linalg_vector_norm" => RedCost {
            per_in: c(1, 1, 0),
            per_out: c(0, 0, 1),
        },
        _ => return None,
    })
}

fn reduction(ctx: &Ctx, name: &str, k: RedCost) -> R<Lowered> {
    let (iid, im) = ctx.tensor(0, "input").or_else(|_| ctx.tensor(0, "self"))?;
    // `max(a, b)` with a tensor second argument is the elementwise maximum.
    if ctx.opt_tensor(1, "other")?.is_some() {
        return elementwise(ctx, "binary", &["max"], c(1, 0, 0));
    }
    let rank = im.shape.len();
    let dims: Vec<usize> = match ctx.ints(1, "dim") {
        Some(d) if !d.is_empty() => d.into_iter().map(|x| norm_dim(x, rank)).collect::<R<_>>()?,
        _ => (0..rank).collect(),
    };
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
    add_cost(&mut flops, im.numel(), k.per_in);
    add_cost(&mut flops, out_n, k.per_out);
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

// ---------------------------------------------------------------- normalizations

fn softmax(ctx: &Ctx, log: bool) -> R<Lowered> {
    let (iid, im) = ctx.tensor(0, "input").or_else(|_| ctx.tensor(0, "self"))?;
    let rank = im.shape.len();
    let dim = match ctx.int(1, "dim") {
        Some(d) => norm_dim(d, rank)?,
        None => return Err("softmax without `dim` (implicit dim is deprecated)".into()),
    };
    let names = letters(rank, 0);
    let n = im.numel();
    let rows = n / (im.shape.get(dim).copied().unwrap_or(1).max(1) as u64);
    let mut flops = Flops::default();
    add_cost(&mut flops, n, c(2, 2, 1));
    if log {
        add_cost(&mut flops, rows, c(0, 0, 1));
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
fn norm(ctx: &Ctx, rms: bool) -> R<Lowered> {
    let (iid, im) = ctx.tensor(0, "input")?;
    let ns = ctx
        .ints(1, "normalized_shape")
        .ok_or("normalized_shape is missing")?;
    let rank = im.shape.len();
    if ns.len() > rank {
        return Err(format!(
            "normalized_shape {ns:?} is longer than the input rank {rank}"
        ));
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
    if rms {
        add_cost(&mut flops, im.numel(), c(2 + affine, 1, 0));
        add_cost(&mut flops, rows, c(2, 0, 1));
    } else {
        add_cost(&mut flops, im.numel(), c(3 + affine, 2, 0));
        add_cost(&mut flops, rows, c(3, 0, 1));
    }
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

fn reduction_mode(ctx: &Ctx, pos: usize) -> R<&'static str> {
    match ctx.arg(pos, "reduction") {
        None => Ok("mean"),
        Some(v) => match (v.as_i64(), v.as_str()) {
            (Some(0), _) | (_, Some("none")) => Ok("none"),
            (Some(1), _) | (_, Some("mean")) => Ok("mean"),
            (Some(2), _) | (_, Some("sum")) => Ok("sum"),
            _ => Err(format!("unknown reduction {v}")),
        },
    }
}

fn nll_flops(flops: &mut Flops, rows: u64, weighted: bool, mode: &str) {
    add_cost(flops, rows, c(1 + weighted as u64, 0, 0));
    if mode != "none" {
        add_cost(flops, rows, c(0, 1, 0));
    }
    if mode == "mean" {
        flops.elementwise += 1;
    }
}

/// nll_loss: gathers one log-probability per row.
fn nll_loss(ctx: &Ctx, red_pos: usize) -> R<Lowered> {
    let (iid, im) = ctx.tensor(0, "input")?;
    let (tid, tm) = ctx.tensor(1, "target")?;
    let w = ctx.opt_tensor(2, "weight")?;
    let mode = reduction_mode(ctx, red_pos)?;
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

fn cross_entropy(ctx: &Ctx) -> R<Lowered> {
    let (iid, im) = ctx.tensor(0, "input")?;
    let (tid, tm) = ctx.tensor(1, "target")?;
    if dtype_of(tm)?.is_float() {
        return Err("cross_entropy with probability targets has no rule".into());
    }
    if ctx.float(7, "label_smoothing").unwrap_or(0.0) != 0.0 {
        return Err("cross_entropy with label_smoothing has no rule".into());
    }
    let w = ctx.opt_tensor(2, "weight")?;
    let mode = reduction_mode(ctx, 6)?;
    let cdim = if im.shape.len() >= 2 { 1 } else { 0 };
    let classes = im.shape.get(cdim).copied().unwrap_or(1).max(1) as u64;
    let rows = im.numel() / classes;
    let mut flops = Flops::default();
    add_cost(&mut flops, im.numel(), c(2, 2, 1));
    add_cost(&mut flops, rows, c(0, 0, 1));
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

// ---------------------------------------------------------------- contractions

fn wider(a: DType, b: DType) -> DType {
    if b.bits() > a.bits() { b } else { a }
}

struct Gemm<'a> {
    a: (&'a str, &'a TensorMeta),
    b: (&'a str, &'a TensorMeta),
    a_idx: Vec<String>,
    b_idx: Vec<String>,
    out_idx: Vec<String>,
    macs: u64,
    out_shape: Vec<i64>,
}

/// torch.matmul semantics (1-D promotion and batch broadcasting).
fn matmul_shapes<'a>(a: (&'a str, &'a TensorMeta), b: (&'a str, &'a TensorMeta)) -> R<Gemm<'a>> {
    let (sa, sb) = (&a.1.shape, &b.1.shape);
    if sa.is_empty() || sb.is_empty() {
        return Err("matmul of a 0-d tensor".into());
    }
    let k = sa[sa.len() - 1];
    let kb = if sb.len() == 1 {
        sb[0]
    } else {
        sb[sb.len() - 2]
    };
    if k != kb {
        return Err(format!("inner sizes differ: {sa:?} @ {sb:?}"));
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
) -> R<Lowered> {
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

fn linear(ctx: &Ctx) -> R<Lowered> {
    let x = ctx.tensor(0, "input")?;
    let w = ctx.tensor(1, "weight")?;
    let bias = ctx.opt_tensor(2, "bias")?;
    if w.1.shape.len() != 2 {
        return Err(format!(
            "linear weight has rank {}, expected 2",
            w.1.shape.len()
        ));
    }
    let sx = &x.1.shape;
    let (n, k) = (w.1.shape[0], w.1.shape[1]);
    if sx.last().copied() != Some(k) {
        return Err(format!("linear: input {sx:?} does not end in {k}"));
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

fn addmm(ctx: &Ctx, rule: &'static str) -> R<Lowered> {
    let bias = ctx.tensor(0, "self")?;
    let g = matmul_shapes(ctx.tensor(1, "mat1")?, ctx.tensor(2, "mat2")?)?;
    gemm_lowered(ctx, rule, g, Some(bias))
}

fn scaled_mm(ctx: &Ctx) -> R<Lowered> {
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

fn einsum(ctx: &Ctx) -> R<Lowered> {
    let eq = ctx
        .arg(0, "equation")
        .and_then(Value::as_str)
        .ok_or("einsum equation is missing")?
        .replace(' ', "");
    let ins = ctx.all_tensors()?;
    let (lhs, rhs) = eq
        .split_once("->")
        .ok_or("einsum without `->` has no rule")?;
    if eq.contains("...") {
        return Err("einsum with `...` has no rule".into());
    }
    let terms: Vec<&str> = lhs.split(',').collect();
    if terms.len() != ins.len() || ins.is_empty() || ins.len() > 2 {
        return Err(format!(
            "einsum `{eq}` with {} operands has no rule",
            ins.len()
        ));
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

// ---------------------------------------------------------------- attention

/// (q, k, v positions are 0, 1, 2) positions of dropout_p, is_causal and the mask, by op.
fn sdpa(ctx: &Ctx, name: &str) -> R<Lowered> {
    let (drop_pos, causal_pos, mask_pos): (usize, usize, Option<usize>) = match name {
        "scaled_dot_product_attention" => (4, 5, Some(3)),
        "_scaled_dot_product_flash_attention_for_cpu" | "_scaled_dot_product_flash_attention" => {
            (3, 4, None)
        }
        "_scaled_dot_product_efficient_attention" => (5, 6, Some(3)),
        "_scaled_dot_product_cudnn_attention" => (5, 6, Some(3)),
        _ => return Err("unknown attention op".into()),
    };
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
        return Err("attention with dropout_p > 0 has no rule (inference only)".into());
    }
    let causal = ctx.boolean(causal_pos, "is_causal").unwrap_or(false);
    let (sq, sk, sv) = (&q.1.shape, &k.1.shape, &v.1.shape);
    if sq.len() < 2 || sk.len() < 2 || sv.len() < 2 {
        return Err("attention inputs need rank >= 2".into());
    }
    let (l, e) = (sq[sq.len() - 2], sq[sq.len() - 1]);
    let s = sk[sk.len() - 2];
    let ev = sv[sv.len() - 1];
    if sk[sk.len() - 1] != e || sv[sv.len() - 2] != s {
        return Err(format!(
            "attention shapes q {sq:?} k {sk:?} v {sv:?} do not agree"
        ));
    }
    let bh = q.1.numel() / ((l * e).max(1) as u64);
    // PyTorch's is_causal keeps key j for query i when j <= i (top-left aligned).
    let pairs: u64 = if causal {
        (0..l.max(0)).map(|i| (i + 1).min(s).max(0) as u64).sum()
    } else {
        (l.max(0) * s.max(0)) as u64
    };
    let scores = bh * pairs;
    let dt = wider(dtype_of(q.1)?, dtype_of(k.1)?);
    let mut flops = Flops {
        tensor: 2 * scores * e.max(0) as u64 + 2 * scores * ev.max(0) as u64,
        tensor_dtype: Some(dt),
        ..Flops::default()
    };
    add_cost(&mut flops, scores, c(3 + mask.is_some() as u64, 2, 1));
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

// ---------------------------------------------------------------- data movement

fn simple(
    ctx: &Ctx,
    rule: &'static str,
    class: OpClass,
    read: bool,
    replay: ReplayModel,
) -> R<Lowered> {
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

fn view(ctx: &Ctx, rule: &'static str, replay: ReplayModel) -> R<Lowered> {
    let mut l = simple(ctx, rule, OpClass::View, false, replay)?;
    for o in &mut l.outputs {
        o.bytes = 0;
    }
    Ok(l)
}

fn same_as_input(ctx: &Ctx) -> R<ReplayModel> {
    let (_, im) = ctx.tensor(0, "self").or_else(|_| ctx.tensor(0, "input"))?;
    Ok(ReplayModel::Shapes(vec![im.shape.clone()]))
}

/// `view`/`reshape`: the target size with `-1` resolved.
fn reshape_replay(ctx: &Ctx) -> R<ReplayModel> {
    let (_, im) = ctx.tensor(0, "self")?;
    let mut size: Vec<i64> = match ctx.arg(1, "shape").or_else(|| ctx.arg(1, "size")) {
        Some(v) if v.is_array() => v
            .as_array()
            .into_iter()
            .flatten()
            .map(|x| x.as_i64().ok_or("non-integer size"))
            .collect::<Result<_, _>>()?,
        Some(v) if v.is_i64() => ctx
            .op
            .args
            .iter()
            .skip(1)
            .map(|x| x.as_i64().ok_or("non-integer size"))
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
        return Err(format!("cannot view {:?} as {size:?}", im.shape));
    }
    Ok(ReplayModel::Shapes(vec![size]))
}

fn permute_replay(ctx: &Ctx, name: &str) -> R<ReplayModel> {
    let (_, im) = ctx.tensor(0, "self").or_else(|_| ctx.tensor(0, "input"))?;
    let rank = im.shape.len();
    let mut s = im.shape.clone();
    match name {
        "t" | "T" | "mT" if rank >= 2 => s.swap(rank - 2, rank - 1),
        "t" | "T" => {}
        "transpose" => {
            let a = norm_dim(ctx.int(1, "dim0").ok_or("dim0 missing")?, rank)?;
            let b = norm_dim(ctx.int(2, "dim1").ok_or("dim1 missing")?, rank)?;
            s.swap(a, b);
        }
        _ => {
            let dims: Vec<i64> = match ctx.arg(1, "dims") {
                Some(v) if v.is_array() => ctx.ints(1, "dims").ok_or("dims missing")?,
                _ => ctx
                    .op
                    .args
                    .iter()
                    .skip(1)
                    .filter_map(Value::as_i64)
                    .collect(),
            };
            if dims.len() != rank {
                return Err(format!("permute dims {dims:?} for rank {rank}"));
            }
            s = dims
                .iter()
                .map(|&d| Ok(im.shape[norm_dim(d, rank)?]))
                .collect::<R<_>>()?;
        }
    }
    Ok(ReplayModel::Shapes(vec![s]))
}

fn unsqueeze_replay(ctx: &Ctx, squeeze: bool) -> R<ReplayModel> {
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
                    .collect::<R<_>>()?;
                s = s
                    .iter()
                    .enumerate()
                    .filter(|(i, d)| !(dims.contains(i) && **d == 1))
                    .map(|(_, d)| *d)
                    .collect();
            }
        }
    } else {
        let d = ctx.int(1, "dim").ok_or("dim missing")?;
        let d = norm_dim(d, rank + 1)?;
        s.insert(d, 1);
    }
    Ok(ReplayModel::Shapes(vec![s]))
}

fn expand_replay(ctx: &Ctx) -> R<ReplayModel> {
    let (_, im) = ctx.tensor(0, "self")?;
    let size: Vec<i64> = match ctx.arg(1, "size") {
        Some(v) if v.is_array() => ctx.ints(1, "size").ok_or("size missing")?,
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

fn gather_like(ctx: &Ctx, rule: &'static str, src: (&str, &TensorMeta)) -> R<Lowered> {
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

fn embedding(ctx: &Ctx, fx: bool) -> R<Lowered> {
    let (w, idx) = if fx {
        (ctx.tensor(1, "weight")?, ctx.tensor(0, "input")?)
    } else {
        (ctx.tensor(0, "weight")?, ctx.tensor(1, "indices")?)
    };
    if w.1.shape.len() != 2 {
        return Err("embedding weight must be 2-D".into());
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

fn topk(ctx: &Ctx) -> R<Lowered> {
    let (iid, im) = ctx.tensor(0, "input").or_else(|_| ctx.tensor(0, "self"))?;
    let k = ctx.int(1, "k").ok_or("k missing")?;
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

fn sort(ctx: &Ctx, rule: &'static str) -> R<Lowered> {
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

fn scan(ctx: &Ctx) -> R<Lowered> {
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

fn cat_replay(ctx: &Ctx, stack: bool) -> R<ReplayModel> {
    let list = ctx
        .arg(0, "tensors")
        .and_then(Value::as_array)
        .ok_or("tensor list missing")?;
    let metas: Vec<&TensorMeta> = list
        .iter()
        .filter_map(tensor_id)
        .map(|id| ctx.meta(id))
        .collect::<R<_>>()?;
    let first = metas
        .iter()
        .find(|m| !(m.shape.len() == 1 && m.shape[0] == 0))
        .ok_or("empty tensor list")?;
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

fn scatter(ctx: &Ctx, rule: &'static str, arith: bool) -> R<Lowered> {
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
fn write_into(ctx: &Ctx, setitem: bool) -> R<Lowered> {
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

fn rule_for(ctx: &Ctx, name: &str, fx: bool) -> R<Lowered> {
    if let Some((rule, k, work)) = unary_cost(name) {
        let mut k = k;
        if matches!(name, "add" | "sub" | "rsub") && ctx.float(2, "alpha").is_some_and(|a| a != 1.0)
        {
            k.ew += 1;
        }
        return elementwise(ctx, rule, work, k);
    }
    if let Some(k) = reduction_cost(name) {
        return reduction(ctx, name, k);
    }
    match name {
        "pow" | "float_power" => {
            let exp = ctx.arg(1, "exponent");
            let square = exp
                .and_then(Value::as_f64)
                .is_some_and(|e| e == 2.0 || e == 1.0);
            if square {
                elementwise(ctx, "pow_square", &["mul"], c(1, 0, 0))
            } else {
                elementwise(ctx, "pow", &["pow"], c(0, 0, 1))
            }
        }
        "clamp" | "clamp_min" | "clamp_max" => {
            let bounds = match name {
                "clamp" => {
                    (ctx.arg(1, "min").is_some() as u64 + ctx.arg(2, "max").is_some() as u64).max(1)
                }
                _ => 1,
            };
            elementwise(ctx, "clamp", &["compare"], c(bounds, 0, 0))
        }
        "gelu" => {
            let tanh = ctx.arg(1, "approximate").and_then(Value::as_str) == Some("tanh");
            if tanh {
                elementwise(
                    ctx,
                    "gelu_tanh",
                    &["mul", "mul", "mul", "add", "mul", "tanh", "add", "mul"],
                    c(7, 0, 1),
                )
            } else {
                elementwise(
                    ctx,
                    "gelu_erf",
                    &["div", "erf", "add", "mul", "mul"],
                    c(4, 0, 1),
                )
            }
        }
        "mm" | "matmul" | "bmm" | "mv" | "dot" | "vdot" | "inner" => {
            let a = ctx.tensor(0, "input").or_else(|_| ctx.tensor(0, "self"))?;
            let b = ctx.tensor(1, "other").or_else(|_| ctx.tensor(1, "mat2"))?;
            let g = matmul_shapes(a, b)?;
            gemm_lowered(ctx, "matmul", g, None)
        }
        "linear" => linear(ctx),
        "addmm" | "baddbmm" | "addbmm" => addmm(ctx, "addmm"),
        "_scaled_mm" => scaled_mm(ctx),
        "einsum" => einsum(ctx),
        "outer" | "ger" => elementwise(ctx, "binary", &["mul"], c(1, 0, 0)),
        "softmax" | "_softmax" | "_safe_softmax" => softmax(ctx, false),
        "log_softmax" | "_log_softmax" => softmax(ctx, true),
        "layer_norm" | "native_layer_norm" => norm(ctx, false),
        "rms_norm" | "_fused_rms_norm" => norm(ctx, true),
        "cross_entropy" | "cross_entropy_loss" => cross_entropy(ctx),
        "nll_loss" => nll_loss(ctx, 4),
        "nll_loss_forward" | "nll_loss_nd" | "nll_loss2d_forward" => nll_loss(ctx, 3),
        "scaled_dot_product_attention"
        | "_scaled_dot_product_flash_attention_for_cpu"
        | "_scaled_dot_product_flash_attention"
        | "_scaled_dot_product_efficient_attention"
        | "_scaled_dot_product_cudnn_attention" => sdpa(ctx, name),
        "embedding" => embedding(ctx, fx),
        "index_select" => {
            let src = ctx.tensor(0, "self").or_else(|_| ctx.tensor(0, "input"))?;
            gather_like(ctx, "index_select", src)
        }
        "gather" | "take_along_dim" | "index" | "take" => {
            let src = ctx.tensor(0, "self").or_else(|_| ctx.tensor(0, "input"))?;
            gather_like(ctx, "gather", src)
        }
        "getitem" => {
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
        "fill" | "zero" => {
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
        "_to_copy" | "to" | "type" | "type_as" | "float" | "half" | "bfloat16" | "double"
        | "int" | "long" | "bool" | "short" | "char" | "byte" | "contiguous" | "clone" | "cpu"
        | "cuda" | "_to_dtype" | "flip" | "roll" | "fliplr" | "flipud" => {
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
        "cat" | "stack" | "hstack" | "vstack" => {
            let replay = if matches!(name, "cat" | "stack") {
                cat_replay(ctx, name == "stack")?
            } else {
                ReplayModel::TracedOnly
            };
            simple(ctx, "concat", OpClass::Copy, true, replay)
        }
        "repeat" | "tile" | "repeat_interleave" | "constant_pad_nd" | "pad" | "one_hot" => {
            simple(ctx, "copy", OpClass::Copy, true, ReplayModel::TracedOnly)
        }
        "view" | "_unsafe_view" | "reshape" | "_reshape_alias" => {
            let r = reshape_replay(ctx)?;
            view(ctx, "view", r)
        }
        "permute" | "transpose" | "t" | "T" | "mT" | "adjoint" => {
            let r = permute_replay(ctx, name)?;
            view(ctx, "view", r)
        }
        "unsqueeze" => {
            let r = unsqueeze_replay(ctx, false)?;
            view(ctx, "view", r)
        }
        "squeeze" => {
            let r = unsqueeze_replay(ctx, true)?;
            view(ctx, "view", r)
        }
        "expand" => {
            let r = expand_replay(ctx)?;
            view(ctx, "view", r)
        }
        "detach" | "alias" | "lift_fresh" | "view_as" | "reshape_as" | "expand_as" | "flatten"
        | "unflatten" | "ravel" | "select" | "slice" | "narrow" | "split" | "split_with_sizes"
        | "chunk" | "unbind" | "as_strided" | "diagonal" | "movedim" | "moveaxis" | "unfold"
        | "tensor_split" | "view_as_real" | "view_as_complex" | "real" | "dropout"
        | "_unsafe_view_dtype" => view(ctx, "view", ReplayModel::TracedOnly),
        "empty" | "empty_like" | "empty_strided" | "new_empty" | "new_empty_strided" => {
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
        _ => Err("no counting rule for this op".to_string()),
    }
}

/// Lowers a whole operator graph, failing closed on any op without a rule.
pub fn lower(g: &OperatorGraph) -> Result<IrGraph, LowerError> {
    let fx = g.backend == crate::Backend::Fx;
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
        let fail = |message: String| LowerError::Replay {
            index,
            op: op.op.clone(),
            loc: op.loc.clone().unwrap_or_else(|| "<unknown line>".into()),
            message,
        };
        let replay = match &l.replay {
            ReplayModel::TracedOnly => Replay::TracedOnly,
            ReplayModel::Einsum => {
                let shapes = einsum_output_shapes(&l.operands, &l.outputs).map_err(fail)?;
                for (o, s) in l.outputs.iter().zip(&shapes) {
                    if &o.shape != s {
                        return Err(fail(format!(
                            "IR gives {s:?} for `{}`, traced {:?}",
                            o.tensor, o.shape
                        )));
                    }
                }
                Replay::Checked
            }
            ReplayModel::Shapes(shapes) => {
                for (o, s) in l.outputs.iter().zip(shapes) {
                    if &o.shape != s {
                        return Err(fail(format!(
                            "IR gives {s:?} for `{}`, traced {:?}",
                            o.tensor, o.shape
                        )));
                    }
                }
                Replay::Checked
            }
        };
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
        ir_ops.push(IrOp {
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
        });
    }
    let (input_bytes, output_bytes) =
        fused_io(g, &ir_ops).map_err(|message| LowerError::Replay {
            index: 0,
            op: "<graph>".into(),
            loc: "<graph>".into(),
            message,
        })?;
    Ok(IrGraph {
        backend: g.backend,
        ops: ir_ops,
        input_bytes,
        output_bytes,
    })
}

/// Touched bytes per graph input name, and bytes per graph output id.
type FusedIo = (IndexMap<String, u64>, IndexMap<String, u64>);

/// Fused traffic: each graph input's touched bytes (reads through views summed, capped at the
/// tensor's size) and each graph output's size.
fn fused_io(g: &OperatorGraph, ops: &[IrOp]) -> Result<FusedIo, String> {
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
                .ok_or_else(|| format!("graph input `{}` has no tensor record", inp.name))?;
            let cap = bytes_of(meta)?;
            if let Some(t) = touched.get_mut(&inp.name) {
                *t = (*t).min(cap);
            }
        }
    }
    let mut outputs = IndexMap::new();
    for (i, o) in g.outputs.iter().enumerate() {
        let id = o
            .as_ref()
            .ok_or_else(|| format!("graph output {i} is not a tensor"))?;
        let meta = g
            .tensors
            .get(id)
            .ok_or_else(|| format!("graph output `{id}` has no tensor record"))?;
        outputs.insert(id.clone(), bytes_of(meta)?);
    }
    Ok((touched, outputs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_names_agree_across_backends() {
        assert_eq!(canonical("aten.mul.Tensor"), "mul");
        assert_eq!(canonical("Tensor.__rmul__"), "mul");
        assert_eq!(canonical("torch.mul"), "mul");
        assert_eq!(canonical("Tensor.mul_"), "mul");
        assert_eq!(canonical("aten._to_copy.default"), "_to_copy");
        assert_eq!(canonical("torch.nn.functional.silu"), "silu");
        assert_eq!(canonical("aten.copy_.default"), "copy");
        assert_eq!(canonical("Tensor.__getitem__"), "getitem");
    }

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

    #[test]
    fn broadcast_rejects_mismatch() {
        assert_eq!(broadcast(&[&[4, 1], &[3]]).unwrap(), vec![4, 3]);
        assert!(broadcast(&[&[4, 2], &[3]]).is_err());
    }
}
