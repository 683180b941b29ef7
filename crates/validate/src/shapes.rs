//! Shape cells: the comma-joined strings a grid, a receipt and a target's declared defaults are
//! compared as, with dtype spellings normalised (`f32`, `float32`, `torch.float32` are equal).

use kg_inject::PyValue;

/// Normalises one token: dtype aliases to their long name, whitespace and quotes removed.
pub fn normalize_token(tok: &str) -> String {
    let t = tok.trim().trim_matches(|c| c == '\'' || c == '"');
    let t = t.strip_prefix("torch.").unwrap_or(t);
    let t = t.strip_prefix("tl.").unwrap_or(t);
    match t {
        "f32" | "fp32" | "float" | "float32" => "float32".into(),
        "f16" | "fp16" | "half" | "float16" => "float16".into(),
        "bf16" | "bfloat16" => "bfloat16".into(),
        "f64" | "fp64" | "double" | "float64" => "float64".into(),
        "i32" | "int32" => "int32".into(),
        "i64" | "int64" => "int64".into(),
        other => other.to_string(),
    }
}

/// Normalises a cell `64, 2048,f32` → `64,2048,float32`.
pub fn normalize_cell(cell: &str) -> String {
    cell.trim()
        .trim_start_matches(['(', '['])
        .trim_end_matches([')', ']'])
        .split(',')
        .map(normalize_token)
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join(",")
}

/// One value as a cell token.
pub fn value_token(v: &PyValue) -> String {
    match v {
        PyValue::Int(i) => i.to_string(),
        PyValue::Float(_, src) => src.clone(),
        PyValue::Bool(b) => b.to_string(),
        PyValue::None => "None".into(),
        PyValue::Str(s) => normalize_token(s),
        PyValue::Tuple(items) | PyValue::List(items) => {
            items.iter().map(value_token).collect::<Vec<_>>().join(",")
        }
        PyValue::Expr(src) => normalize_token(src),
    }
}

/// The cells a literal default declares: a string `"a,b;c,d"`, a list of strings, or a list of
/// tuples. `None` when the value is not a literal list of cells.
pub fn default_cells(v: &PyValue) -> Option<Vec<String>> {
    match v {
        PyValue::Str(s) => Some(
            s.split(';')
                .map(normalize_cell)
                .filter(|c| !c.is_empty())
                .collect(),
        ),
        PyValue::List(items) | PyValue::Tuple(items) => {
            let mut out = Vec::new();
            for it in items {
                match it {
                    PyValue::Expr(_) => return None,
                    PyValue::Str(s) => out.push(normalize_cell(s)),
                    other => out.push(normalize_cell(&value_token(other))),
                }
            }
            Some(out)
        }
        PyValue::Int(_) | PyValue::Float(..) => Some(vec![value_token(v)]),
        _ => None,
    }
}

/// Splits a grid cell into typed JSON values for pytest parametrisation (int, float, string).
pub fn cell_values(cell: &str) -> Vec<serde_json::Value> {
    cell.split(',')
        .map(str::trim)
        .map(|t| {
            if let Ok(i) = t.parse::<i64>() {
                serde_json::Value::from(i)
            } else if let Ok(f) = t.parse::<f64>() {
                serde_json::Value::from(f)
            } else {
                serde_json::Value::from(t)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_aliases_compare_equal() {
        assert_eq!(
            normalize_cell("64, 2000, f32"),
            normalize_cell("64,2000,torch.float32")
        );
        assert_eq!(normalize_cell("(1, 2)"), "1,2");
        assert_ne!(normalize_cell("64,2000"), normalize_cell("64,2048"));
    }

    #[test]
    fn default_cells_from_literals() {
        let v = PyValue::Str("64,2048;128,4096".into());
        assert_eq!(default_cells(&v).unwrap(), vec!["64,2048", "128,4096"]);
        let v = PyValue::List(vec![PyValue::Tuple(vec![PyValue::Int(1), PyValue::Int(2)])]);
        assert_eq!(default_cells(&v).unwrap(), vec!["1,2"]);
        assert!(default_cells(&PyValue::Expr("f()".into())).is_none());
        assert_eq!(
            cell_values("3,1.5,f32"),
            vec![
                serde_json::json!(3),
                serde_json::json!(1.5),
                serde_json::json!("f32")
            ]
        );
    }
}
