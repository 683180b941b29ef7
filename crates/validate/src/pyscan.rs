//! Structural facts about a target file that kg-inject does not (yet) expose: test
//! definitions, a `__main__` guard, argv parsing in the module body, and top-level imports.
//! Parsed with `ruff_python_parser`, never with regexes.

use ruff_python_ast::visitor::{Visitor, walk_expr, walk_stmt};
use ruff_python_ast::{CmpOp, Expr, Stmt};

/// What selection needs to know about a file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileFacts {
    /// Top-level `def test*` / `class Test*` names.
    pub tests: Vec<String>,
    /// Has `if __name__ == "__main__":`.
    pub main_guard: bool,
    /// The module body (outside functions, classes and the main guard) parses argv
    /// (`parse_args()` / `parse_known_args()` or reads `sys.argv`).
    pub module_argv: bool,
    /// Top-level package names imported (absolute imports only), in order, deduplicated.
    pub imports: Vec<String>,
}

fn is_main_guard(test: &Expr) -> bool {
    let Expr::Compare(c) = test else { return false };
    if c.ops.len() != 1 || c.ops[0] != CmpOp::Eq {
        return false;
    }
    let (l, r) = (c.left.as_ref(), &c.comparators[0]);
    let name = |e: &Expr| matches!(e, Expr::Name(n) if n.id.as_str() == "__name__");
    let main = |e: &Expr| matches!(e, Expr::StringLiteral(s) if s.value.to_str() == "__main__");
    (name(l) && main(r)) || (main(l) && name(r))
}

struct ArgvFinder(bool);

impl<'a> Visitor<'a> for ArgvFinder {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::FunctionDef(_) | Stmt::ClassDef(_) => {}
            _ => walk_stmt(self, stmt),
        }
    }
    fn visit_expr(&mut self, expr: &'a Expr) {
        match expr {
            Expr::Call(c) => {
                if let Expr::Attribute(a) = c.func.as_ref()
                    && matches!(a.attr.id.as_str(), "parse_args" | "parse_known_args")
                {
                    self.0 = true;
                }
            }
            Expr::Attribute(a)
                if a.attr.id.as_str() == "argv"
                    && matches!(a.value.as_ref(), Expr::Name(n) if n.id.as_str() == "sys") =>
            {
                self.0 = true;
            }
            _ => {}
        }
        walk_expr(self, expr);
    }
}

/// Scans a file's text; `None` when it does not parse.
pub fn scan(text: &str) -> Option<FileFacts> {
    let parsed = ruff_python_parser::parse_module(text).ok()?;
    let mut f = FileFacts::default();
    let mut argv = ArgvFinder(false);
    for stmt in &parsed.syntax().body {
        match stmt {
            Stmt::FunctionDef(d) if d.name.id.as_str().starts_with("test") => {
                f.tests.push(d.name.id.to_string())
            }
            Stmt::ClassDef(c) if c.name.id.as_str().starts_with("Test") => {
                f.tests.push(c.name.id.to_string())
            }
            Stmt::If(i) if is_main_guard(&i.test) => f.main_guard = true,
            Stmt::Import(imp) => {
                for a in &imp.names {
                    let top = a
                        .name
                        .id
                        .as_str()
                        .split('.')
                        .next()
                        .unwrap_or("")
                        .to_string();
                    if !top.is_empty() && !f.imports.contains(&top) {
                        f.imports.push(top);
                    }
                }
            }
            Stmt::ImportFrom(imp) if imp.level == 0 => {
                if let Some(m) = &imp.module {
                    let top = m.id.as_str().split('.').next().unwrap_or("").to_string();
                    if !top.is_empty() && !f.imports.contains(&top) {
                        f.imports.push(top);
                    }
                }
            }
            _ => {}
        }
        let skip = matches!(stmt, Stmt::FunctionDef(_) | Stmt::ClassDef(_))
            || matches!(stmt, Stmt::If(i) if is_main_guard(&i.test));
        if !skip {
            argv.visit_stmt(stmt);
        }
    }
    f.module_argv = argv.0;
    Some(f)
}

/// The runner structural selection picks, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// `pytest`, `script` or `none`.
    pub runner: &'static str,
    /// Why.
    pub reason: String,
    /// A structural risk with that runner.
    pub risk: Option<String>,
}

/// Selects a runner: a node id or a file defining `test*` → pytest; a `__main__` guard →
/// script; neither → none.
pub fn select(target: &str, is_node: bool, facts: Option<&FileFacts>) -> Selection {
    if is_node {
        return Selection {
            runner: "pytest",
            reason: format!("`{target}` names a pytest node"),
            risk: None,
        };
    }
    let Some(f) = facts else {
        return Selection {
            runner: "none",
            reason: format!("`{target}` is missing or does not parse as Python"),
            risk: None,
        };
    };
    if !f.tests.is_empty() {
        let risk = f.module_argv.then(|| {
            "the file defines tests and parses argv in its module body: pytest imports it with pytest's own argv, which argparse may reject (it may be green as a script)".to_string()
        });
        return Selection {
            runner: "pytest",
            reason: format!(
                "the file defines {} test(s): {}",
                f.tests.len(),
                f.tests
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            risk,
        };
    }
    if f.main_guard {
        return Selection {
            runner: "script",
            reason: "the file has an `if __name__ == \"__main__\"` guard and defines no tests"
                .into(),
            risk: None,
        };
    }
    Selection {
        runner: "none",
        reason: "the file defines no `test*` function or `Test*` class and has no `__main__` guard"
            .into(),
        risk: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_is_structural() {
        let t = scan(
            "import os\nimport kern.softmax as ks\nfrom numpy import x\ndef test_a():\n    pass\n",
        )
        .unwrap();
        assert_eq!(t.tests, vec!["test_a"]);
        assert_eq!(t.imports, vec!["os", "kern", "numpy"]);
        assert_eq!(select("t.py", false, Some(&t)).runner, "pytest");
        let s = scan("def main():\n    pass\nif __name__ == '__main__':\n    import argparse\n    argparse.ArgumentParser().parse_args()\n").unwrap();
        assert!(s.main_guard && !s.module_argv);
        assert_eq!(select("s.py", false, Some(&s)).runner, "script");
        let both = scan("import sys\nN = int(sys.argv[1])\ndef test_x():\n    pass\n").unwrap();
        let sel = select("b.py", false, Some(&both));
        assert_eq!(sel.runner, "pytest");
        assert!(sel.risk.is_some());
        let none = scan("x = 1\n").unwrap();
        assert_eq!(select("n.py", false, Some(&none)).runner, "none");
        assert_eq!(select("n.py::t", true, None).runner, "pytest");
        assert!(scan("def (:\n").is_none());
    }
}
