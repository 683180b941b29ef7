//! Finders over a [`PySource`]: shape lists, parametrize decorators, `get_inputs()`, shape
//! channels (environment variables, argparse defaults), tolerance literals, commented-out
//! rows, `assert` constraints and the names a loop gives a shape tuple's fields.

use ruff_python_ast::visitor::{Visitor, walk_expr, walk_stmt};
use ruff_python_ast::{self as ast, CmpOp, Expr, ExprContext, Operator, Stmt};
use ruff_text_size::Ranged;

use crate::literal::{PyValue, eval};
use crate::source::{Location, PySource, Span};

/// One row of a shape list: its span in the file and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Where the row's expression is.
    pub span: Span,
    /// Its value.
    pub value: PyValue,
}

/// An assignment of a list of shape rows to a name (`TEST_SHAPES = [...]`, `configs = [...]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ShapeList {
    /// The assigned name.
    pub name: String,
    /// The whole assignment statement.
    pub stmt: Span,
    /// The assigned value.
    pub value: Span,
    /// The rows, when the value is a list/tuple literal (or an expandable comprehension).
    pub rows: Option<Vec<Row>>,
    /// Where the statement starts.
    pub location: Location,
}

/// A `@pytest.mark.parametrize(argnames, argvalues)` decorator.
#[derive(Debug, Clone, PartialEq)]
pub struct Parametrize {
    /// The decorator, from `@` to its closing parenthesis.
    pub decorator: Span,
    /// The decorated function.
    pub function: String,
    /// The argument names, in order.
    pub argnames: Vec<String>,
    /// The argvalues expression.
    pub argvalues: Span,
    /// The argvalues, when they can be evaluated (literals, `+`, simple comprehensions).
    pub rows: Option<Vec<PyValue>>,
    /// Where the decorator starts.
    pub location: Location,
}

/// A `def get_inputs(...)` function.
#[derive(Debug, Clone, PartialEq)]
pub struct GetInputs {
    /// From `def` to the end of the last statement of the body.
    pub def: Span,
    /// The indentation of the `def` line.
    pub indent: String,
    /// The first list-literal assignment inside the body (`configs = [...]`), if any.
    pub configs: Option<ShapeList>,
    /// Where the `def` is.
    pub location: Location,
}

/// How an environment variable is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvForm {
    /// `os.getenv(...)` or `getenv(...)`.
    Getenv,
    /// `os.environ.get(...)`.
    EnvironGet,
    /// `os.environ[...]`.
    EnvironSubscript,
}

/// A read of an environment variable.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvRead {
    /// The variable, when it is a string literal.
    pub name: Option<String>,
    /// The default, when one is given.
    pub default: Option<PyValue>,
    /// The syntax used.
    pub form: EnvForm,
    /// Where the read is.
    pub location: Location,
}

/// An `add_argument(flag, ..., default=...)` declaration.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgDefault {
    /// The flags / positional names given as string literals.
    pub flags: Vec<String>,
    /// The `default=` value, if any.
    pub default: Option<PyValue>,
    /// Where the call is.
    pub location: Location,
}

/// The form a tolerance literal takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToleranceKind {
    /// `atol=` / `rtol=` keyword argument.
    Keyword(String),
    /// Assignment to a name such as `ATOL` or `tolerance`.
    Name(String),
    /// An entry of a dtype → tolerance dict, keyed by the dtype's source text.
    DtypeEntry(String),
}

/// A tolerance literal.
#[derive(Debug, Clone, PartialEq)]
pub struct ToleranceLiteral {
    /// Its form.
    pub kind: ToleranceKind,
    /// The literal value.
    pub value: PyValue,
    /// Where the value is.
    pub location: Location,
}

/// A comment inside a shape list that parses as a tuple or list: a shape row commented out.
#[derive(Debug, Clone, PartialEq)]
pub struct CommentedRow {
    /// The comment text after `#`, trimmed.
    pub text: String,
    /// The parsed row.
    pub value: PyValue,
    /// Where the comment is.
    pub location: Location,
}

/// A constraint an `assert` states about a name.
#[derive(Debug, Clone, PartialEq)]
pub enum ConstraintKind {
    /// `name % k == 0`.
    MultipleOf(i64),
    /// `name <= k` (or `name < k+1`).
    AtMost(i64),
    /// `name >= k` (or `name > k-1`).
    AtLeast(i64),
    /// `name in (a, b, ...)`.
    OneOf(Vec<PyValue>),
    /// `name == k`.
    Equals(PyValue),
}

/// An `assert` constraint.
#[derive(Debug, Clone, PartialEq)]
pub struct Constraint {
    /// The constrained name.
    pub name: String,
    /// What the assert requires.
    pub kind: ConstraintKind,
    /// Where the assert is.
    pub location: Location,
}

struct ExprWalk<F>(F);
impl<'a, F: FnMut(&'a Expr)> Visitor<'a> for ExprWalk<F> {
    fn visit_expr(&mut self, expr: &'a Expr) {
        (self.0)(expr);
        walk_expr(self, expr);
    }
}

struct StmtWalk<F>(F);
impl<'a, F: FnMut(&'a Stmt)> Visitor<'a> for StmtWalk<F> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        (self.0)(stmt);
        walk_stmt(self, stmt);
    }
}

fn dotted(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Name(n) => Some(n.id.to_string()),
        Expr::Attribute(a) => Some(format!("{}.{}", dotted(&a.value)?, a.attr.id)),
        _ => None,
    }
}

fn str_lit(expr: &Expr) -> Option<String> {
    match expr {
        Expr::StringLiteral(s) => Some(s.value.to_str().to_string()),
        _ => None,
    }
}

fn int_lit(expr: &Expr, text: &str) -> Option<i64> {
    match eval(expr, text)? {
        PyValue::Int(i) => Some(i),
        _ => None,
    }
}

fn shape_list(src: &PySource, stmt: &Stmt, want: Option<&str>) -> Option<ShapeList> {
    let (target, value) = match stmt {
        Stmt::Assign(a) if a.targets.len() == 1 => (&a.targets[0], a.value.as_ref()),
        Stmt::AnnAssign(a) => (a.target.as_ref(), a.value.as_deref()?),
        _ => return None,
    };
    let Expr::Name(name) = target else {
        return None;
    };
    if let Some(w) = want
        && name.id.as_str() != w
    {
        return None;
    }
    let rows = match value {
        Expr::List(ast::ExprList { elts, .. }) | Expr::Tuple(ast::ExprTuple { elts, .. }) => elts
            .iter()
            .map(|e| {
                Some(Row {
                    span: Span::of(e.range()),
                    value: eval(e, src.text())?,
                })
            })
            .collect::<Option<Vec<_>>>(),
        other => match eval(other, src.text()) {
            Some(PyValue::List(items)) => Some(
                items
                    .into_iter()
                    .map(|value| Row {
                        span: Span::of(other.range()),
                        value,
                    })
                    .collect(),
            ),
            _ => None,
        },
    };
    if want.is_none() && !matches!(value, Expr::List(_) | Expr::Tuple(_) | Expr::BinOp(_)) {
        return None;
    }
    Some(ShapeList {
        name: name.id.to_string(),
        stmt: Span::of(stmt.range()),
        value: Span::of(value.range()),
        rows,
        location: src.location(stmt.range().start().to_usize()),
    })
}

impl PySource {
    /// The first `TEST_SHAPES = ...` assignment (module level first, then anywhere).
    pub fn test_shapes(&self) -> Option<ShapeList> {
        self.named_list("TEST_SHAPES")
    }

    /// The first assignment to `name` (module level first, then nested).
    pub fn named_list(&self, name: &str) -> Option<ShapeList> {
        for stmt in &self.module().body {
            if let Some(l) = shape_list(self, stmt, Some(name)) {
                return Some(l);
            }
        }
        let mut found = None;
        let mut w = StmtWalk(|s: &Stmt| {
            if found.is_none() {
                found = shape_list(self, s, Some(name));
            }
        });
        for stmt in &self.module().body {
            w.visit_stmt(stmt);
        }
        found
    }

    /// Every `@pytest.mark.parametrize(...)` decorator, in file order.
    pub fn parametrizes(&self) -> Vec<Parametrize> {
        let mut out = Vec::new();
        let mut w = StmtWalk(|s: &Stmt| {
            let Stmt::FunctionDef(f) = s else { return };
            for d in &f.decorator_list {
                if let Some(p) = self.parametrize(d, f.name.id.as_str()) {
                    out.push(p);
                }
            }
        });
        for stmt in &self.module().body {
            w.visit_stmt(stmt);
        }
        out
    }

    fn parametrize(&self, d: &ast::Decorator, function: &str) -> Option<Parametrize> {
        let Expr::Call(call) = &d.expression else {
            return None;
        };
        let name = dotted(&call.func)?;
        if !(name.ends_with("mark.parametrize")) {
            return None;
        }
        let args = &call.arguments;
        let kw = |k: &str| {
            args.keywords
                .iter()
                .find(|x| x.arg.as_ref().is_some_and(|a| a.id.as_str() == k))
                .map(|x| &x.value)
        };
        let names_expr = args.args.first().or_else(|| kw("argnames"))?;
        let values_expr = args.args.get(1).or_else(|| kw("argvalues"))?;
        let argnames = match names_expr {
            Expr::StringLiteral(s) => s
                .value
                .to_str()
                .split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect(),
            Expr::List(ast::ExprList { elts, .. }) | Expr::Tuple(ast::ExprTuple { elts, .. }) => {
                elts.iter().map(str_lit).collect::<Option<Vec<_>>>()?
            }
            _ => return None,
        };
        let rows = match eval(values_expr, self.text()) {
            Some(PyValue::List(v)) | Some(PyValue::Tuple(v)) => Some(v),
            _ => None,
        };
        Some(Parametrize {
            decorator: Span::of(d.range()),
            function: function.to_string(),
            argnames,
            argvalues: Span::of(values_expr.range()),
            rows,
            location: self.location(d.range().start().to_usize()),
        })
    }

    /// The first `def get_inputs(...)` (module level first, then nested).
    pub fn get_inputs(&self) -> Option<GetInputs> {
        self.function("get_inputs").map(|f| {
            let start = f.name.range().start().to_usize();
            // The def keyword (and `async`) precede the name on the same line.
            let def_start = self.text()[..start].rfind("def").unwrap_or(start);
            let end = f.range().end().to_usize();
            let configs = f.body.iter().find_map(|s| shape_list(self, s, None));
            GetInputs {
                def: Span::new(def_start, end),
                indent: self.indent_at(def_start).to_string(),
                configs,
                location: self.location(def_start),
            }
        })
    }

    fn function<'a>(&'a self, name: &str) -> Option<&'a ast::StmtFunctionDef> {
        for stmt in &self.module().body {
            if let Stmt::FunctionDef(f) = stmt
                && f.name.id.as_str() == name
            {
                return Some(f);
            }
        }
        let mut found = None;
        let mut w = StmtWalk(|s: &'a Stmt| {
            if let Stmt::FunctionDef(f) = s
                && found.is_none()
                && f.name.id.as_str() == name
            {
                found = Some(f);
            }
        });
        for stmt in &self.module().body {
            w.visit_stmt(stmt);
        }
        found
    }

    /// The keyword arguments `get_init_inputs()` returns as `[[...], {'k': v}]`.
    pub fn init_kwargs(&self) -> Option<Vec<(String, PyValue)>> {
        let f = self.function("get_init_inputs")?;
        let ret = f.body.iter().find_map(|s| match s {
            Stmt::Return(r) => r.value.as_deref(),
            _ => None,
        })?;
        let elts = match ret {
            Expr::List(l) => &l.elts,
            Expr::Tuple(t) => &t.elts,
            _ => return None,
        };
        let Some(Expr::Dict(d)) = elts.get(1) else {
            return Some(Vec::new());
        };
        Some(
            d.items
                .iter()
                .filter_map(|it| {
                    let k = str_lit(it.key.as_ref()?)?;
                    Some((k, eval(&it.value, self.text())?))
                })
                .collect(),
        )
    }

    fn walk_exprs<'a>(&'a self, mut f: impl FnMut(&'a Expr)) {
        let mut w = ExprWalk(&mut f);
        for stmt in &self.module().body {
            w.visit_stmt(stmt);
        }
    }

    fn walk_stmts<'a>(&'a self, mut f: impl FnMut(&'a Stmt)) {
        let mut w = StmtWalk(&mut f);
        for stmt in &self.module().body {
            w.visit_stmt(stmt);
        }
    }

    /// Reads of environment variables: `os.getenv`, `os.environ.get`, `os.environ[...]`.
    pub fn env_reads(&self) -> Vec<EnvRead> {
        let mut out = Vec::new();
        self.walk_exprs(|e| match e {
            Expr::Call(c) => {
                let Some(name) = dotted(&c.func) else { return };
                let form = match name.as_str() {
                    "os.getenv" | "getenv" => EnvForm::Getenv,
                    "os.environ.get" | "environ.get" => EnvForm::EnvironGet,
                    _ => return,
                };
                let key = c.arguments.args.first().and_then(str_lit);
                let default = c
                    .arguments
                    .args
                    .get(1)
                    .or_else(|| {
                        c.arguments
                            .keywords
                            .iter()
                            .find(|k| k.arg.as_ref().is_some_and(|a| a.id.as_str() == "default"))
                            .map(|k| &k.value)
                    })
                    .and_then(|d| eval(d, self.text()));
                out.push(EnvRead {
                    name: key,
                    default,
                    form,
                    location: self.location(e.range().start().to_usize()),
                });
            }
            Expr::Subscript(s) if s.ctx == ExprContext::Load => {
                if matches!(dotted(&s.value).as_deref(), Some("os.environ" | "environ")) {
                    out.push(EnvRead {
                        name: str_lit(&s.slice),
                        default: None,
                        form: EnvForm::EnvironSubscript,
                        location: self.location(e.range().start().to_usize()),
                    });
                }
            }
            _ => {}
        });
        out
    }

    /// `add_argument(...)` declarations and their literal defaults.
    pub fn arg_defaults(&self) -> Vec<ArgDefault> {
        let mut out = Vec::new();
        self.walk_exprs(|e| {
            let Expr::Call(c) = e else { return };
            let Expr::Attribute(a) = c.func.as_ref() else {
                return;
            };
            if a.attr.id.as_str() != "add_argument" {
                return;
            }
            let flags: Vec<String> = c.arguments.args.iter().filter_map(str_lit).collect();
            if flags.is_empty() {
                return;
            }
            let default = c
                .arguments
                .keywords
                .iter()
                .find(|k| k.arg.as_ref().is_some_and(|x| x.id.as_str() == "default"))
                .and_then(|k| eval(&k.value, self.text()));
            out.push(ArgDefault {
                flags,
                default,
                location: self.location(e.range().start().to_usize()),
            });
        });
        out
    }

    /// Tolerance literals: `atol=`/`rtol=` keywords, `*TOL*` names, dtype → tolerance dicts.
    pub fn tolerances(&self) -> Vec<ToleranceLiteral> {
        let mut out = Vec::new();
        let text = self.text();
        let numeric = |v: &PyValue| match v {
            PyValue::Int(_) | PyValue::Float(..) => true,
            PyValue::Tuple(items) | PyValue::List(items) => {
                !items.is_empty() && items.iter().all(|i| i.as_f64().is_some())
            }
            _ => false,
        };
        self.walk_exprs(|e| match e {
            Expr::Call(c) => {
                for k in &c.arguments.keywords {
                    let Some(arg) = &k.arg else { continue };
                    if !matches!(arg.id.as_str(), "atol" | "rtol") {
                        continue;
                    }
                    if let Some(v) = eval(&k.value, text).filter(|v| numeric(v)) {
                        out.push(ToleranceLiteral {
                            kind: ToleranceKind::Keyword(arg.id.to_string()),
                            value: v,
                            location: self.location(k.value.range().start().to_usize()),
                        });
                    }
                }
            }
            Expr::Dict(d) => {
                for it in &d.items {
                    let Some(key) = &it.key else { continue };
                    let key_src = match key {
                        Expr::StringLiteral(s) => s.value.to_str().to_string(),
                        other => dotted(other).unwrap_or_default(),
                    };
                    if !is_dtype_name(&key_src) {
                        continue;
                    }
                    let Some(v) = eval(&it.value, text) else {
                        continue;
                    };
                    let small = match &v {
                        PyValue::Tuple(x) | PyValue::List(x) => {
                            x.iter().all(|i| i.as_f64().is_some_and(|f| f < 1.0))
                        }
                        other => other.as_f64().is_some_and(|f| f < 1.0),
                    };
                    if numeric(&v) && small {
                        out.push(ToleranceLiteral {
                            kind: ToleranceKind::DtypeEntry(key_src),
                            value: v,
                            location: self.location(it.value.range().start().to_usize()),
                        });
                    }
                }
            }
            _ => {}
        });
        self.walk_stmts(|s| {
            let (target, value) = match s {
                Stmt::Assign(a) if a.targets.len() == 1 => (&a.targets[0], a.value.as_ref()),
                Stmt::AnnAssign(a) => match a.value.as_deref() {
                    Some(v) => (a.target.as_ref(), v),
                    None => return,
                },
                _ => return,
            };
            let Expr::Name(n) = target else { return };
            if !is_tolerance_name(n.id.as_str()) {
                return;
            }
            if let Some(v) = eval(value, text).filter(|v| numeric(v)) {
                out.push(ToleranceLiteral {
                    kind: ToleranceKind::Name(n.id.to_string()),
                    value: v,
                    location: self.location(value.range().start().to_usize()),
                });
            }
        });
        out.sort_by_key(|t| (t.location.line, t.location.column));
        out
    }

    /// Comments inside `within` (a shape list's span) that parse as a tuple or list holding
    /// at least one number: shape rows that were commented out.
    pub fn commented_rows(&self, within: Span) -> Vec<CommentedRow> {
        self.comments_in(within)
            .into_iter()
            .filter_map(|c| {
                let raw = self.slice(c).trim_start_matches('#').trim();
                if !(raw.starts_with('(') || raw.starts_with('[')) {
                    return None;
                }
                // Only the bracketed prefix: `(16, 4096),  disabled: too slow` is a row.
                let body = &raw[..balanced_end(raw)?];
                let parsed = ruff_python_parser::parse_expression(body).ok()?;
                let v = eval(parsed.expr(), body)?;
                let items = v.items()?;
                if !items.iter().any(|i| i.as_f64().is_some()) {
                    return None;
                }
                Some(CommentedRow {
                    text: raw.to_string(),
                    value: v,
                    location: self.location(c.start),
                })
            })
            .collect()
    }

    /// The field names a loop gives each row of `list_name`: `for a, b in L`,
    /// `for i, (a, b) in enumerate(L)`; else a `# (a, b)` comment on the line above the list.
    pub fn row_names(&self, list_name: &str) -> Option<Vec<String>> {
        let mut found: Option<Vec<String>> = None;
        let names_of = |t: &Expr| -> Option<Vec<String>> {
            let Expr::Tuple(t) = t else { return None };
            t.elts
                .iter()
                .map(|e| match e {
                    Expr::Name(n) => Some(n.id.to_string()),
                    _ => None,
                })
                .collect()
        };
        let mut check = |target: &Expr, iter: &Expr| {
            if found.is_some() {
                return;
            }
            match iter {
                Expr::Name(n) if n.id.as_str() == list_name => found = names_of(target),
                Expr::Call(c)
                    if dotted(&c.func).as_deref() == Some("enumerate")
                        && matches!(c.arguments.args.first(), Some(Expr::Name(n)) if n.id.as_str() == list_name) =>
                {
                    if let Expr::Tuple(t) = target
                        && let Some(inner) = t.elts.get(1)
                    {
                        found = names_of(inner);
                    }
                }
                _ => {}
            }
        };
        self.walk_stmts(|s| {
            if let Stmt::For(f) = s {
                check(&f.target, &f.iter);
            }
        });
        self.walk_exprs(|e| {
            let gens = match e {
                Expr::ListComp(c) => &c.generators,
                Expr::Generator(g) => &g.generators,
                _ => return,
            };
            for g in gens {
                check(&g.target, &g.iter);
            }
        });
        if found.is_some() {
            return found;
        }
        let list = self.named_list(list_name)?;
        let prev = self.previous_line(list.stmt.start)?;
        let line = self.slice(prev).trim();
        let body = line.strip_prefix('#')?.trim();
        let parsed = ruff_python_parser::parse_expression(body).ok()?;
        names_of(parsed.expr())
    }

    /// Constraints stated by `assert` statements about plain names.
    pub fn constraints(&self) -> Vec<Constraint> {
        let mut out = Vec::new();
        self.walk_stmts(|s| {
            let Stmt::Assert(a) = s else { return };
            let loc = self.location(a.range().start().to_usize());
            let mut parts = Vec::new();
            flatten_and(&a.test, &mut parts);
            for p in parts {
                self.constraint_of(p, &loc, &mut out);
            }
        });
        out
    }

    fn constraint_of(&self, e: &Expr, loc: &Location, out: &mut Vec<Constraint>) {
        let text = self.text();
        let Expr::Compare(c) = e else { return };
        let mut left = c.left.as_ref();
        for (op, right) in c.ops.iter().zip(c.comparators.iter()) {
            let push = |out: &mut Vec<Constraint>, name: &str, kind| {
                out.push(Constraint {
                    name: name.to_string(),
                    kind,
                    location: loc.clone(),
                })
            };
            // name % k == 0
            if let (Expr::BinOp(b), CmpOp::Eq) = (left, op)
                && b.op == Operator::Mod
                && int_lit(right, text) == Some(0)
                && let (Expr::Name(n), Some(k)) = (b.left.as_ref(), int_lit(&b.right, text))
            {
                push(out, n.id.as_str(), ConstraintKind::MultipleOf(k));
            }
            match (left, right) {
                (Expr::Name(n), r) => {
                    let name = n.id.as_str();
                    let k = int_lit(r, text);
                    match (op, k) {
                        (CmpOp::LtE, Some(k)) => push(out, name, ConstraintKind::AtMost(k)),
                        (CmpOp::Lt, Some(k)) => push(out, name, ConstraintKind::AtMost(k - 1)),
                        (CmpOp::GtE, Some(k)) => push(out, name, ConstraintKind::AtLeast(k)),
                        (CmpOp::Gt, Some(k)) => push(out, name, ConstraintKind::AtLeast(k + 1)),
                        (CmpOp::Eq, _) => {
                            if let Some(v) = eval(r, text).filter(PyValue::is_literal) {
                                push(out, name, ConstraintKind::Equals(v));
                            }
                        }
                        (CmpOp::In, _) => {
                            if let Some(items) = eval(r, text)
                                .filter(PyValue::is_literal)
                                .and_then(|v| v.items().map(<[PyValue]>::to_vec))
                            {
                                push(out, name, ConstraintKind::OneOf(items));
                            }
                        }
                        _ => {}
                    }
                }
                (l, Expr::Name(n)) => {
                    let name = n.id.as_str();
                    match (op, int_lit(l, text)) {
                        (CmpOp::LtE, Some(k)) => push(out, name, ConstraintKind::AtLeast(k)),
                        (CmpOp::Lt, Some(k)) => push(out, name, ConstraintKind::AtLeast(k + 1)),
                        (CmpOp::GtE, Some(k)) => push(out, name, ConstraintKind::AtMost(k)),
                        (CmpOp::Gt, Some(k)) => push(out, name, ConstraintKind::AtMost(k - 1)),
                        _ => {}
                    }
                }
                _ => {}
            }
            left = right;
        }
    }
}

/// Byte index one past the bracket that closes the one `text` starts with.
fn balanced_end(text: &str) -> Option<usize> {
    let mut depth = 0i32;
    for (i, ch) in text.char_indices() {
        match ch {
            '(' | '[' => depth += 1,
            ')' | ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
    }
    None
}

fn flatten_and<'a>(e: &'a Expr, out: &mut Vec<&'a Expr>) {
    match e {
        Expr::BoolOp(b) if b.op == ast::BoolOp::And => {
            for v in &b.values {
                flatten_and(v, out);
            }
        }
        other => out.push(other),
    }
}

/// Whether a name reads as a tolerance: a `_`-separated part is `tol`, `atol`, `rtol`,
/// `tols`, `tolerance` or `tolerances` (so `TOTAL` is not one).
fn is_tolerance_name(name: &str) -> bool {
    name.split('_').any(|p| {
        matches!(
            p.to_ascii_lowercase().as_str(),
            "tol" | "atol" | "rtol" | "tols" | "tolerance" | "tolerances"
        )
    })
}

fn is_dtype_name(key: &str) -> bool {
    let last = key.rsplit('.').next().unwrap_or(key).to_ascii_lowercase();
    matches!(
        last.as_str(),
        "float16"
            | "float32"
            | "float64"
            | "bfloat16"
            | "half"
            | "float"
            | "double"
            | "fp16"
            | "fp32"
            | "fp64"
            | "bf16"
            | "fp8"
            | "f16"
            | "f32"
            | "int8"
            | "float8_e4m3fn"
            | "float8_e5m2"
            | "float8_e4m3fnuz"
            | "float8_e5m2fnuz"
    )
}
