//! Python literal values as kg-inject reads them, and their rendering back to source.
//!
//! The evaluator understands literals, tuples and lists, unary minus, `+` between sequences,
//! and list comprehensions with one `for` over a literal sequence (the rocmbench pattern
//! `[(98432, 1024, dt) for dt in ['float16', 'float32']]`). Anything else is kept as its
//! source text ([`PyValue::Expr`]), so it is rendered back unchanged.

use std::collections::HashMap;

use ruff_python_ast::{self as ast, Expr, Number, Operator, UnaryOp};
use ruff_text_size::Ranged;

/// A Python value read from source.
#[derive(Debug, Clone, PartialEq)]
pub enum PyValue {
    /// An integer literal that fits in `i64` (booleans are [`PyValue::Bool`]).
    Int(i64),
    /// A float literal with its source spelling.
    Float(f64, String),
    /// `True` / `False`.
    Bool(bool),
    /// `None`.
    None,
    /// A string literal.
    Str(String),
    /// A tuple.
    Tuple(Vec<PyValue>),
    /// A list.
    List(Vec<PyValue>),
    /// Anything else, kept as its source text (e.g. `torch.float16`).
    Expr(String),
}

impl PyValue {
    /// Python source for this value.
    pub fn render(&self) -> String {
        match self {
            PyValue::Int(i) => i.to_string(),
            PyValue::Float(_, src) => src.clone(),
            PyValue::Bool(true) => "True".into(),
            PyValue::Bool(false) => "False".into(),
            PyValue::None => "None".into(),
            PyValue::Str(s) => {
                let escaped = s
                    .replace('\\', "\\\\")
                    .replace('\'', "\\'")
                    .replace('\n', "\\n");
                format!("'{escaped}'")
            }
            PyValue::Tuple(items) => {
                let inner: Vec<String> = items.iter().map(PyValue::render).collect();
                if inner.len() == 1 {
                    format!("({},)", inner[0])
                } else {
                    format!("({})", inner.join(", "))
                }
            }
            PyValue::List(items) => {
                let inner: Vec<String> = items.iter().map(PyValue::render).collect();
                format!("[{}]", inner.join(", "))
            }
            PyValue::Expr(src) => src.clone(),
        }
    }

    /// The value as a number, if it is an int or float.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            PyValue::Int(i) => Some(*i as f64),
            PyValue::Float(f, _) => Some(*f),
            _ => None,
        }
    }

    /// The items of a tuple or list.
    pub fn items(&self) -> Option<&[PyValue]> {
        match self {
            PyValue::Tuple(v) | PyValue::List(v) => Some(v),
            _ => None,
        }
    }

    /// Whether this value holds no [`PyValue::Expr`] anywhere (a pure literal).
    pub fn is_literal(&self) -> bool {
        match self {
            PyValue::Expr(_) => false,
            PyValue::Tuple(v) | PyValue::List(v) => v.iter().all(PyValue::is_literal),
            _ => true,
        }
    }
}

/// Evaluates an expression to a value. `None` when the expression is a sequence construct the
/// evaluator cannot expand (a comprehension over a non-literal, a starred item, ...).
pub(crate) fn eval(expr: &Expr, text: &str) -> Option<PyValue> {
    eval_in(expr, text, &HashMap::new())
}

fn src(expr: &Expr, text: &str) -> String {
    let r = expr.range();
    text.get(r.start().to_usize()..r.end().to_usize())
        .unwrap_or("")
        .to_string()
}

fn eval_in(expr: &Expr, text: &str, env: &HashMap<String, PyValue>) -> Option<PyValue> {
    Some(match expr {
        Expr::NumberLiteral(n) => match &n.value {
            Number::Int(i) => match i.as_i64() {
                Some(v) => PyValue::Int(v),
                None => PyValue::Expr(src(expr, text)),
            },
            Number::Float(f) => PyValue::Float(*f, src(expr, text)),
            Number::Complex { .. } => PyValue::Expr(src(expr, text)),
        },
        Expr::BooleanLiteral(b) => PyValue::Bool(b.value),
        Expr::NoneLiteral(_) => PyValue::None,
        Expr::StringLiteral(s) => PyValue::Str(s.value.to_str().to_string()),
        Expr::Tuple(t) => PyValue::Tuple(seq(&t.elts, text, env)?),
        Expr::List(l) => PyValue::List(seq(&l.elts, text, env)?),
        Expr::UnaryOp(u) if u.op == UnaryOp::USub => match eval_in(&u.operand, text, env)? {
            PyValue::Int(i) => PyValue::Int(-i),
            PyValue::Float(f, s) => PyValue::Float(-f, format!("-{s}")),
            _ => PyValue::Expr(src(expr, text)),
        },
        Expr::BinOp(b) if b.op == Operator::Add => {
            let l = eval_in(&b.left, text, env)?;
            let r = eval_in(&b.right, text, env)?;
            match (l, r) {
                (PyValue::List(mut a), PyValue::List(c)) => {
                    a.extend(c);
                    PyValue::List(a)
                }
                (PyValue::Tuple(mut a), PyValue::Tuple(c)) => {
                    a.extend(c);
                    PyValue::Tuple(a)
                }
                (PyValue::List(_), _) | (_, PyValue::List(_)) => return None,
                _ => PyValue::Expr(src(expr, text)),
            }
        }
        Expr::Name(n) => match env.get(n.id.as_str()) {
            Some(v) => v.clone(),
            None => PyValue::Expr(src(expr, text)),
        },
        Expr::ListComp(c) => PyValue::List(comprehension(&c.elt, &c.generators, text, env)?),
        Expr::Starred(_) => return None,
        _ => PyValue::Expr(src(expr, text)),
    })
}

fn seq(elts: &[Expr], text: &str, env: &HashMap<String, PyValue>) -> Option<Vec<PyValue>> {
    elts.iter().map(|e| eval_in(e, text, env)).collect()
}

fn comprehension(
    elt: &Expr,
    generators: &[ast::Comprehension],
    text: &str,
    env: &HashMap<String, PyValue>,
) -> Option<Vec<PyValue>> {
    let [g] = generators else { return None };
    if !g.ifs.is_empty() || g.is_async {
        return None;
    }
    let iter = eval_in(&g.iter, text, env)?;
    let items = iter.items()?.to_vec();
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let mut local = env.clone();
        bind(&g.target, item, &mut local)?;
        out.push(eval_in(elt, text, &local)?);
    }
    Some(out)
}

fn bind(target: &Expr, value: PyValue, env: &mut HashMap<String, PyValue>) -> Option<()> {
    match target {
        Expr::Name(n) => {
            env.insert(n.id.to_string(), value);
            Some(())
        }
        Expr::Tuple(t) => {
            let items = value.items()?.to_vec();
            if items.len() != t.elts.len() {
                return None;
            }
            for (e, v) in t.elts.iter().zip(items) {
                bind(e, v, env)?;
            }
            Some(())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(code: &str) -> Option<PyValue> {
        let parsed = ruff_python_parser::parse_expression(code).unwrap();
        eval(parsed.expr(), code)
    }

    #[test]
    fn expands_rocmbench_comprehension_and_concatenation() {
        let v = ev("[(98432, 1024, d) for d in ['float16', 'float32']] + [(7, 8, 'x')]").unwrap();
        assert_eq!(
            v.render(),
            "[(98432, 1024, 'float16'), (98432, 1024, 'float32'), (7, 8, 'x')]"
        );
    }

    #[test]
    fn keeps_unknown_expressions_as_source() {
        let v = ev("(1, -2.5e-3, torch.float16, True, None)").unwrap();
        assert_eq!(v.render(), "(1, -2.5e-3, torch.float16, True, None)");
        assert!(!v.is_literal());
    }

    #[test]
    fn comprehension_over_unknown_iterable_is_not_expanded() {
        assert_eq!(ev("[(x, 1) for x in range(4)]"), None);
    }

    #[test]
    fn one_tuple_renders_with_comma() {
        assert_eq!(ev("(5,)").unwrap().render(), "(5,)");
    }
}
