//! Shape resolution: a workload's axes bound into every input and output shape.

use indexmap::IndexMap;

use crate::definition::{Axis, Definition};

/// Why a workload's axes do not resolve against a definition.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    /// A `var` axis has no value in the workload.
    #[error(
        "axis `{axis}` is `var` but the workload gives no value for it; add `\"{axis}\": <size>` to the workload's `axes`"
    )]
    Unbound {
        /// Axis name.
        axis: String,
    },
    /// The workload names an axis the definition does not have.
    #[error("axis `{axis}` is not declared by the definition (declared: {declared})")]
    Unknown {
        /// Axis name.
        axis: String,
        /// The definition's axes, comma-separated.
        declared: String,
    },
    /// The workload gives a `const` or `expr` axis a value that differs from the definition's.
    #[error(
        "axis `{axis}` is `{kind}` = {expected} in the definition, but the workload gives {given}; drop it from the workload or give {expected}"
    )]
    Contradiction {
        /// Axis name.
        axis: String,
        /// `const` or `expr`.
        kind: &'static str,
        /// Value the definition implies.
        expected: i64,
        /// Value the workload gives.
        given: i64,
    },
    /// An axis value is negative.
    #[error("axis `{axis}` = {value} is negative; sizes must be >= 0")]
    Negative {
        /// Axis name.
        axis: String,
        /// The value.
        value: i64,
    },
    /// An `expr` axis failed to evaluate.
    #[error("axis `{axis}`: expression `{expression}`: {message}")]
    Expr {
        /// Axis name.
        axis: String,
        /// The expression.
        expression: String,
        /// What went wrong.
        message: String,
    },
    /// A tensor's shape names an axis the definition does not declare.
    #[error("tensor `{tensor}` uses axis `{axis}`, which the definition does not declare")]
    UndeclaredInShape {
        /// Tensor name.
        tensor: String,
        /// Axis name.
        axis: String,
    },
}

/// Concrete shapes: `None` for a Python scalar.
pub type Shapes = IndexMap<String, Option<Vec<i64>>>;

/// Every axis of a definition bound to a value, plus each tensor's concrete shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// All axes (const, var and expr) by name.
    pub axes: IndexMap<String, i64>,
    /// Input shapes in definition order.
    pub inputs: Shapes,
    /// Output shapes in definition order.
    pub outputs: Shapes,
}

/// A literal size written in a shape instead of an axis name (upstream accepts `"4"`).
pub fn literal_dim(dim: &str) -> Option<i64> {
    if dim.is_empty() || !dim.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    dim.parse().ok()
}

/// Binds a workload's axis values into the definition and evaluates `expr` axes.
pub fn resolve(def: &Definition, given: &IndexMap<String, i64>) -> Result<Resolved, ShapeError> {
    for name in given.keys() {
        if !def.axes.contains_key(name) {
            return Err(ShapeError::Unknown {
                axis: name.clone(),
                declared: def.axes.keys().cloned().collect::<Vec<_>>().join(", "),
            });
        }
    }
    let mut axes: IndexMap<String, i64> = IndexMap::new();
    for (name, axis) in &def.axes {
        match axis {
            Axis::Const { value, .. } => {
                if let Some(&g) = given.get(name)
                    && g != *value
                {
                    return Err(ShapeError::Contradiction {
                        axis: name.clone(),
                        kind: "const",
                        expected: *value,
                        given: g,
                    });
                }
                axes.insert(name.clone(), *value);
            }
            Axis::Var { .. } => match given.get(name) {
                Some(&g) => {
                    axes.insert(name.clone(), g);
                }
                None => return Err(ShapeError::Unbound { axis: name.clone() }),
            },
            Axis::Expr { .. } => {}
        }
    }
    // Expressions may refer to each other; evaluate until fixed point.
    let mut pending: Vec<(&String, &String)> = def
        .axes
        .iter()
        .filter_map(|(n, a)| match a {
            Axis::Expr { expression, .. } => Some((n, expression)),
            _ => None,
        })
        .collect();
    while !pending.is_empty() {
        let mut progressed = false;
        let mut last_err = None;
        let mut rest = Vec::new();
        for (name, expr) in pending {
            match eval(expr, &axes) {
                Ok(v) => {
                    axes.insert(name.clone(), v);
                    progressed = true;
                }
                Err(EvalError::UnknownName(n)) if def.axes.contains_key(&n) => {
                    last_err = Some((name, expr, format!("depends on `{n}`, which is unresolved")));
                    rest.push((name, expr));
                }
                Err(e) => {
                    return Err(ShapeError::Expr {
                        axis: name.clone(),
                        expression: expr.clone(),
                        message: e.to_string(),
                    });
                }
            }
        }
        if !progressed {
            let (name, expr, message) = last_err
                .unwrap_or_else(|| (rest[0].0, rest[0].1, "circular dependency".to_string()));
            return Err(ShapeError::Expr {
                axis: name.clone(),
                expression: expr.clone(),
                message: format!("{message} (circular dependency?)"),
            });
        }
        pending = rest;
    }
    for (name, axis) in &def.axes {
        if let (Axis::Expr { .. }, Some(&g)) = (axis, given.get(name)) {
            let v = axes[name];
            if g != v {
                return Err(ShapeError::Contradiction {
                    axis: name.clone(),
                    kind: "expr",
                    expected: v,
                    given: g,
                });
            }
        }
    }
    // Keep declaration order.
    let mut ordered = IndexMap::new();
    for name in def.axes.keys() {
        let v = axes[name];
        if v < 0 {
            return Err(ShapeError::Negative {
                axis: name.clone(),
                value: v,
            });
        }
        ordered.insert(name.clone(), v);
    }
    let shapes = |specs: &IndexMap<String, crate::definition::TensorSpec>| {
        let mut out = Shapes::new();
        for (tname, spec) in specs {
            let shape = match &spec.shape {
                None => None,
                Some(dims) => {
                    let mut s = Vec::with_capacity(dims.len());
                    for d in dims {
                        match ordered.get(d).copied().or_else(|| literal_dim(d)) {
                            Some(v) => s.push(v),
                            None => {
                                return Err(ShapeError::UndeclaredInShape {
                                    tensor: tname.clone(),
                                    axis: d.clone(),
                                });
                            }
                        }
                    }
                    Some(s)
                }
            };
            out.insert(tname.clone(), shape);
        }
        Ok(out)
    };
    let inputs = shapes(&def.inputs)?;
    let outputs = shapes(&def.outputs)?;
    Ok(Resolved {
        axes: ordered,
        inputs,
        outputs,
    })
}

/// An error evaluating an axis expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvalError {
    /// A name that is not a bound axis.
    #[error("unknown name `{0}`")]
    UnknownName(String),
    /// Malformed expression.
    #[error("syntax error: {0}")]
    Syntax(String),
    /// Division by zero, a non-integral `/`, overflow or a negative exponent.
    #[error("{0}")]
    Arith(String),
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(i64),
    Name(String),
    Op(&'static str),
    LParen,
    RParen,
}

fn lex(s: &str) -> Result<Vec<Tok>, EvalError> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut out = Vec::new();
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_digit() {
            let st = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'_') {
                i += 1;
            }
            let digits: String = s[st..i].chars().filter(|&c| c != '_').collect();
            let n = digits
                .parse()
                .map_err(|_| EvalError::Syntax(format!("bad number `{}`", &s[st..i])))?;
            out.push(Tok::Num(n));
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let st = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            out.push(Tok::Name(s[st..i].to_string()));
        } else {
            let two = s.get(i..i + 2);
            let (tok, n) = match (two, c) {
                (Some("//"), _) => (Tok::Op("//"), 2),
                (Some("**"), _) => (Tok::Op("**"), 2),
                (_, b'+') => (Tok::Op("+"), 1),
                (_, b'-') => (Tok::Op("-"), 1),
                (_, b'*') => (Tok::Op("*"), 1),
                (_, b'/') => (Tok::Op("/"), 1),
                (_, b'%') => (Tok::Op("%"), 1),
                (_, b'(') => (Tok::LParen, 1),
                (_, b')') => (Tok::RParen, 1),
                _ => {
                    return Err(EvalError::Syntax(format!(
                        "unexpected character `{}`",
                        &s[i..].chars().next().unwrap_or('?')
                    )));
                }
            };
            out.push(tok);
            i += n;
        }
    }
    Ok(out)
}

struct Parser<'a> {
    toks: Vec<Tok>,
    pos: usize,
    env: &'a IndexMap<String, i64>,
}

fn overflow() -> EvalError {
    EvalError::Arith("integer overflow".into())
}

impl Parser<'_> {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }
    // expr := term (('+'|'-') term)*
    fn expr(&mut self) -> Result<i64, EvalError> {
        let mut v = self.term()?;
        while let Some(Tok::Op(op @ ("+" | "-"))) = self.peek() {
            let op = *op;
            self.pos += 1;
            let r = self.term()?;
            v = if op == "+" {
                v.checked_add(r)
            } else {
                v.checked_sub(r)
            }
            .ok_or_else(overflow)?;
        }
        Ok(v)
    }
    // term := unary (('*'|'/'|'//'|'%') unary)*
    fn term(&mut self) -> Result<i64, EvalError> {
        let mut v = self.unary()?;
        while let Some(Tok::Op(op @ ("*" | "/" | "//" | "%"))) = self.peek() {
            let op = *op;
            self.pos += 1;
            let r = self.unary()?;
            if op != "*" && r == 0 {
                return Err(EvalError::Arith("division by zero".into()));
            }
            v = match op {
                "*" => v.checked_mul(r).ok_or_else(overflow)?,
                "/" => {
                    if v % r != 0 {
                        return Err(EvalError::Arith(format!(
                            "{v} / {r} is not an integer; use `//` for floor division"
                        )));
                    }
                    v / r
                }
                "//" => v.div_euclid(r) - i64::from(r < 0 && v.rem_euclid(r) != 0),
                _ => {
                    // Python's modulo takes the sign of the divisor.
                    let m = v % r;
                    if m != 0 && ((m < 0) != (r < 0)) {
                        m + r
                    } else {
                        m
                    }
                }
            };
        }
        Ok(v)
    }
    // unary := ('+'|'-') unary | power
    fn unary(&mut self) -> Result<i64, EvalError> {
        match self.peek() {
            Some(Tok::Op("-")) => {
                self.pos += 1;
                self.unary()?.checked_neg().ok_or_else(overflow)
            }
            Some(Tok::Op("+")) => {
                self.pos += 1;
                self.unary()
            }
            _ => self.power(),
        }
    }
    // power := atom ('**' unary)?   (right-associative, binds tighter than unary on its left)
    fn power(&mut self) -> Result<i64, EvalError> {
        let base = self.atom()?;
        if let Some(Tok::Op("**")) = self.peek() {
            self.pos += 1;
            let exp = self.unary()?;
            let exp = u32::try_from(exp)
                .map_err(|_| EvalError::Arith(format!("negative or huge exponent {exp}")))?;
            return base.checked_pow(exp).ok_or_else(overflow);
        }
        Ok(base)
    }
    fn atom(&mut self) -> Result<i64, EvalError> {
        let tok = self.peek().cloned();
        self.pos += 1;
        match tok {
            Some(Tok::Num(n)) => Ok(n),
            Some(Tok::Name(n)) => self.env.get(&n).copied().ok_or(EvalError::UnknownName(n)),
            Some(Tok::LParen) => {
                let v = self.expr()?;
                match self.peek() {
                    Some(Tok::RParen) => {
                        self.pos += 1;
                        Ok(v)
                    }
                    _ => Err(EvalError::Syntax("missing `)`".into())),
                }
            }
            Some(t) => Err(EvalError::Syntax(format!("unexpected {t:?}"))),
            None => Err(EvalError::Syntax("unexpected end of expression".into())),
        }
    }
}

/// Checks an axis expression's syntax and that every name in it is one of `axes`.
///
/// Arithmetic errors (division by zero, inexact `/`) depend on the values and are left to
/// [`resolve`].
pub fn check_expression<'a>(
    expression: &str,
    axes: impl IntoIterator<Item = &'a String>,
) -> Result<(), EvalError> {
    let env: IndexMap<String, i64> = axes.into_iter().map(|n| (n.clone(), 1)).collect();
    match eval(expression, &env) {
        Ok(_) | Err(EvalError::Arith(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Evaluates an integer axis expression with Python semantics (`/` must divide exactly).
pub fn eval(expression: &str, env: &IndexMap<String, i64>) -> Result<i64, EvalError> {
    let toks = lex(expression)?;
    if toks.is_empty() {
        return Err(EvalError::Syntax("empty expression".into()));
    }
    let mut p = Parser { toks, pos: 0, env };
    let v = p.expr()?;
    if p.pos != p.toks.len() {
        return Err(EvalError::Syntax(format!(
            "unexpected {:?} after the expression",
            p.toks[p.pos]
        )));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, i64)]) -> IndexMap<String, i64> {
        pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn python_semantics() {
        let e = env(&[("a", 7), ("b", 2)]);
        assert_eq!(eval("a * b + 1", &e), Ok(15));
        assert_eq!(eval("a // b", &e), Ok(3));
        assert_eq!(eval("-a // b", &e), Ok(-4));
        assert_eq!(eval("-a % 3", &e), Ok(2));
        assert_eq!(eval("a % -3", &e), Ok(-2));
        assert_eq!(eval("-2 ** 2", &e), Ok(-4));
        assert_eq!(eval("2 ** 3 ** 2", &e), Ok(512));
        assert_eq!(eval("(a + 1) / b", &e), Ok(4));
        assert!(matches!(eval("a / b", &e), Err(EvalError::Arith(_))));
        assert!(matches!(eval("a // 0", &e), Err(EvalError::Arith(_))));
        assert_eq!(eval("c + 1", &e), Err(EvalError::UnknownName("c".into())));
        assert!(matches!(eval("a +", &e), Err(EvalError::Syntax(_))));
        assert!(matches!(eval("(a", &e), Err(EvalError::Syntax(_))));
        assert!(matches!(eval("a b", &e), Err(EvalError::Syntax(_))));
        assert!(matches!(
            eval("9223372036854775807 + 1", &e),
            Err(EvalError::Arith(_))
        ));
    }
}
