//! Canonical op names: `aten.mul.Tensor`, `Tensor.__mul__` and `torch.mul` all become `mul`,
//! so both backends share every rule.

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
}
