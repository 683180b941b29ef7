//! Elementwise rules: unary and binary pointwise ops with broadcasting, activations, `pow`,
//! `clamp`, `gelu` and `outer`, each priced per output element.

use serde_json::Value;

use super::RuleError;
use super::common::{Cost, Ctx, Lowered, ReplayModel, aligned, broadcast, full, letters};
use crate::ir::{Flops, OpClass};

/// The rule for an elementwise op, or `None` when `name` is not one.
pub(super) fn dispatch(ctx: &Ctx, name: &str) -> Option<Result<Lowered, RuleError>> {
    if let Some((rule, mut cost, work)) = pointwise(name) {
        // `add(x, y, alpha=a)` computes x + a * y: one more multiply per element.
        if matches!(name, "add" | "sub" | "rsub") && ctx.float(2, "alpha").is_some_and(|a| a != 1.0)
        {
            cost.elementwise += 1;
        }
        return Some(elementwise(ctx, rule, work, cost));
    }
    Some(match name {
        "pow" | "float_power" => pow(ctx),
        "clamp" | "clamp_min" | "clamp_max" => clamp(ctx, name),
        "gelu" => gelu(ctx),
        "outer" | "ger" => elementwise(
            ctx,
            "binary",
            &["mul"],
            Cost {
                elementwise: 1,
                ..Cost::ZERO
            },
        ),
        _ => return None,
    })
}

/// Lowers an op whose output is its (broadcast) tensor arguments combined element by element.
pub(super) fn elementwise(
    ctx: &Ctx,
    rule: &'static str,
    work: &[&'static str],
    cost: Cost,
) -> Result<Lowered, RuleError> {
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
    cost.add_to(&mut flops, om.numel());
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

/// Rule name, per-element cost and work list of the table-driven pointwise ops.
fn pointwise(name: &str) -> Option<(&'static str, Cost, &'static [&'static str])> {
    Some(match name {
        "exp" | "exp2" | "expm1" | "log" | "log2" | "log10" | "log1p" | "sin" | "cos" | "tan"
        | "tanh" | "erf" | "erfc" | "erfinv" | "sqrt" | "rsqrt" | "asin" | "acos" | "atan"
        | "sinh" | "cosh" | "asinh" | "acosh" | "atanh" | "lgamma" | "digamma" => (
            "unary_transcendental",
            Cost {
                transcendental: 1,
                ..Cost::ZERO
            },
            &["transcendental"],
        ),
        "atan2" => (
            "binary_transcendental",
            Cost {
                transcendental: 1,
                ..Cost::ZERO
            },
            &["atan2"],
        ),
        "neg" | "abs" | "sign" | "sgn" | "floor" | "ceil" | "round" | "trunc" | "frac"
        | "reciprocal" | "relu" | "logical_not" | "bitwise_not" | "isnan" | "isinf"
        | "isfinite" | "signbit" | "nan_to_num" | "square" | "positive" | "conj" | "tril"
        | "triu" | "logit" => (
            "unary_simple",
            Cost {
                elementwise: 1,
                ..Cost::ZERO
            },
            &["op"],
        ),
        "sigmoid" => (
            "sigmoid",
            Cost {
                elementwise: 2,
                transcendental: 1,
                ..Cost::ZERO
            },
            &["exp", "add", "div"],
        ),
        "silu" => (
            "silu",
            Cost {
                elementwise: 3,
                transcendental: 1,
                ..Cost::ZERO
            },
            &["exp", "add", "div", "mul"],
        ),
        "softplus" => (
            "softplus",
            Cost {
                elementwise: 1,
                transcendental: 2,
                ..Cost::ZERO
            },
            &["exp", "log1p", "compare"],
        ),
        "mish" => (
            "mish",
            Cost {
                elementwise: 2,
                transcendental: 3,
                ..Cost::ZERO
            },
            &["exp", "log1p", "tanh", "mul"],
        ),
        "leaky_relu" | "hardtanh" | "relu6" | "threshold" | "elu" | "celu" => (
            "piecewise",
            Cost {
                elementwise: 2,
                ..Cost::ZERO
            },
            &["compare", "mul"],
        ),
        "hardsigmoid" => (
            "hardsigmoid",
            Cost {
                elementwise: 3,
                ..Cost::ZERO
            },
            &["add", "clamp", "div"],
        ),
        "hardswish" => (
            "hardswish",
            Cost {
                elementwise: 4,
                ..Cost::ZERO
            },
            &["add", "clamp", "div", "mul"],
        ),
        "add" | "sub" | "rsub" | "mul" | "div" | "maximum" | "minimum" | "fmax" | "fmin" | "eq"
        | "ne" | "lt" | "le" | "gt" | "ge" | "logical_and" | "logical_or" | "logical_xor"
        | "bitwise_and" | "bitwise_or" | "bitwise_xor" | "bitwise_shift" | "remainder" | "fmod"
        | "floor_divide" | "where" | "masked_fill" | "copysign" | "heaviside" | "xlogy"
        | "isclose" => (
            "binary",
            Cost {
                elementwise: 1,
                ..Cost::ZERO
            },
            &["op"],
        ),
        "addcmul" | "addcdiv" => (
            "ternary",
            Cost {
                elementwise: 2,
                ..Cost::ZERO
            },
            &["mul", "add"],
        ),
        "lerp" => (
            "lerp",
            Cost {
                elementwise: 3,
                ..Cost::ZERO
            },
            &["sub", "mul", "add"],
        ),
        _ => return None,
    })
}

/// `pow`: a square (or identity) is a multiply, any other exponent a transcendental.
fn pow(ctx: &Ctx) -> Result<Lowered, RuleError> {
    let exp = ctx.arg(1, "exponent");
    let square = exp
        .and_then(Value::as_f64)
        .is_some_and(|e| e == 2.0 || e == 1.0);
    if square {
        elementwise(
            ctx,
            "pow_square",
            &["mul"],
            Cost {
                elementwise: 1,
                ..Cost::ZERO
            },
        )
    } else {
        elementwise(
            ctx,
            "pow",
            &["pow"],
            Cost {
                transcendental: 1,
                ..Cost::ZERO
            },
        )
    }
}

/// `clamp`: one compare per bound given (at least one).
fn clamp(ctx: &Ctx, name: &str) -> Result<Lowered, RuleError> {
    let bounds = match name {
        "clamp" => (ctx.arg(1, "min").is_some() as u64 + ctx.arg(2, "max").is_some() as u64).max(1),
        _ => 1,
    };
    elementwise(
        ctx,
        "clamp",
        &["compare"],
        Cost {
            elementwise: bounds,
            ..Cost::ZERO
        },
    )
}

/// `gelu`: the tanh approximation or the exact erf form.
fn gelu(ctx: &Ctx) -> Result<Lowered, RuleError> {
    let tanh = ctx.arg(1, "approximate").and_then(Value::as_str) == Some("tanh");
    if tanh {
        elementwise(
            ctx,
            "gelu_tanh",
            &["mul", "mul", "mul", "add", "mul", "tanh", "add", "mul"],
            Cost {
                elementwise: 7,
                transcendental: 1,
                ..Cost::ZERO
            },
        )
    } else {
        elementwise(
            ctx,
            "gelu_erf",
            &["div", "erf", "add", "mul", "mul"],
            Cost {
                elementwise: 4,
                transcendental: 1,
                ..Cost::ZERO
            },
        )
    }
}
