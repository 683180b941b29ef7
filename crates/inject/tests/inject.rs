//! Behaviour tests for kg-inject: byte-exact rewrites, every finder and every error path.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use kg_inject::{
    ConstraintKind, Edit, EnvForm, InjectError, PySource, PyValue, Span, ToleranceKind,
    apply_edits, raw_replace, replace_get_inputs, replace_test_shapes,
};

const RUNNER: &str = "#!/usr/bin/env python3
# -*- coding: utf-8 -*-
\"\"\"Runner — café ☕ (non-ASCII before the list).\"\"\"
import os

# (batch, hidden)
TEST_SHAPES = [
    (4, 256),    # small ✓
    (8, 1024),
    # (16, 4096),   disabled: too slow
    (32, 2048),  # 中文注释
]
AFTER = True  # must survive


def run():
    for i, (batch, hidden) in enumerate(TEST_SHAPES):
        assert hidden % 64 == 0, 'hidden must be a multiple of 64'
        assert 1 <= batch <= 512
    return AFTER
";

fn src(text: &str) -> PySource {
    PySource::parse("task_runner.py", text).unwrap()
}

/// Asserts that `new` equals `old` outside one replaced region.
fn only_region_changed(old: &str, new: &str, region_start: usize, old_region_end: usize) {
    assert_eq!(&new[..region_start], &old[..region_start], "prefix changed");
    let tail = &old[old_region_end..];
    assert!(new.ends_with(tail), "suffix changed:\n{new}");
}

#[test]
fn test_shapes_rewrite_is_byte_exact_and_keeps_non_ascii() {
    let s = src(RUNNER);
    let list = s.test_shapes().unwrap();
    assert_eq!(list.location.line, 7);
    let rows = list.rows.as_ref().unwrap();
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[2].value.render(), "(32, 2048)");
    let new = replace_test_shapes(
        &s,
        "TEST_SHAPES = [\n    (1, 64),  # edge\n    (37, 131),\n]\n",
    )
    .unwrap();
    only_region_changed(RUNNER, &new, list.stmt.start, list.stmt.end);
    assert!(new.contains(
        "TEST_SHAPES = [\n    (1, 64),  # edge\n    (37, 131),\n]\nAFTER = True  # must survive"
    ));
    assert!(new.contains("café ☕") && !new.contains("中文注释"));
    // The result parses and the new list is what a finder sees.
    let again = src(&new);
    let rows = again.test_shapes().unwrap().rows.unwrap();
    assert_eq!(
        rows[1].value,
        PyValue::Tuple(vec![PyValue::Int(37), PyValue::Int(131)])
    );
}

#[test]
fn indented_test_shapes_is_reindented() {
    let text = "class C:\n    TEST_SHAPES = [(1, 2),\n                   (3, 4)]\n    X = 1\n";
    let s = src(text);
    let new = replace_test_shapes(&s, "TEST_SHAPES = [\n    (5, 6),\n]").unwrap();
    assert_eq!(
        new,
        "class C:\n    TEST_SHAPES = [\n        (5, 6),\n    ]\n    X = 1\n"
    );
}

#[test]
fn commented_rows_inside_the_list_are_reported() {
    let s = src(RUNNER);
    let list = s.test_shapes().unwrap();
    let rows = s.commented_rows(list.value);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].value.render(), "(16, 4096)");
    assert_eq!(rows[0].location.line, 10);
    // The header comment above the list names the fields but is not inside it.
    assert!(rows.iter().all(|r| !r.text.contains("batch")));
}

#[test]
fn row_names_come_from_the_loop_or_the_header_comment() {
    let s = src(RUNNER);
    assert_eq!(
        s.row_names("TEST_SHAPES").unwrap(),
        vec!["batch".to_string(), "hidden".to_string()]
    );
    let only_comment = "# (m, n, k)\nTEST_SHAPES = [(1, 2, 3)]\n";
    assert_eq!(
        src(only_comment).row_names("TEST_SHAPES").unwrap(),
        vec!["m", "n", "k"]
    );
    assert_eq!(
        src("TEST_SHAPES = [(1, 2)]\n").row_names("TEST_SHAPES"),
        None
    );
}

#[test]
fn assert_constraints_are_read() {
    let s = src(RUNNER);
    let c = s.constraints();
    assert!(
        c.iter()
            .any(|c| c.name == "hidden" && c.kind == ConstraintKind::MultipleOf(64))
    );
    assert!(
        c.iter()
            .any(|c| c.name == "batch" && c.kind == ConstraintKind::AtLeast(1))
    );
    assert!(
        c.iter()
            .any(|c| c.name == "batch" && c.kind == ConstraintKind::AtMost(512))
    );
    let more = src("assert N < 4096 and dtype in ('float16', 'bfloat16')\nassert 8 > k\n");
    let c = more.constraints();
    assert!(
        c.iter()
            .any(|c| c.name == "N" && c.kind == ConstraintKind::AtMost(4095))
    );
    assert!(
        c.iter()
            .any(|c| c.name == "k" && c.kind == ConstraintKind::AtMost(7))
    );
    assert!(
        c.iter()
            .any(|c| c.name == "dtype"
                && matches!(&c.kind, ConstraintKind::OneOf(v) if v.len() == 2))
    );
}

const ROCM: &str = "import pytest

@pytest.mark.parametrize('SIZE,BLOCK_SIZE,dtype_str',
                         [(98432, 1024, dtype_str) for dtype_str in ['float16', 'float32']])
def test_add(SIZE, BLOCK_SIZE, dtype_str):
    pass

@pytest.mark.parametrize(\"M, N\", [
    (16, 16),
    # (37, 41),
    (128, 64),
])
@pytest.mark.parametrize(['dtype'], [('float16',)])
def test_other(M, N, dtype):
    pass

@pytest.mark.parametrize(argnames=('a', 'b'), argvalues=[(1, 2)])
def test_kw(a, b):
    pass

@pytest.mark.parametrize('x', [1, 2, 3])
def test_performance(x):
    pass
";

#[test]
fn parametrize_argnames_forms_and_rows() {
    let s = src(ROCM);
    let ps = s.parametrizes();
    assert_eq!(ps.len(), 5);
    assert_eq!(ps[0].argnames, vec!["SIZE", "BLOCK_SIZE", "dtype_str"]);
    assert_eq!(ps[0].function, "test_add");
    assert_eq!(ps[0].rows.as_ref().unwrap().len(), 2);
    assert_eq!(
        ps[0].rows.as_ref().unwrap()[1].render(),
        "(98432, 1024, 'float32')"
    );
    assert_eq!(ps[1].argnames, vec!["M", "N"]);
    assert_eq!(ps[2].argnames, vec!["dtype"]);
    assert_eq!(ps[3].argnames, vec!["a", "b"]);
    assert_eq!(ps[4].argnames, vec!["x"]);
    assert_eq!(ps[4].function, "test_performance");
    // The decorator span starts at '@' and ends at the closing parenthesis.
    let d = s.slice(ps[0].decorator);
    assert!(
        d.starts_with("@pytest.mark.parametrize(") && d.ends_with("]])"),
        "{d}"
    );
    assert_eq!(
        s.commented_rows(ps[1].argvalues)[0].value.render(),
        "(37, 41)"
    );
}

#[test]
fn parametrize_raw_replace_is_byte_exact() {
    let s = src(ROCM);
    let p = &s.parametrizes()[1];
    let old = s.slice(p.decorator).to_string();
    let new_dec = "@pytest.mark.parametrize(\"M, N\", [\n    (37, 131),\n])";
    let out = raw_replace(Path::new("test_x.py"), ROCM, &old, new_dec).unwrap();
    only_region_changed(ROCM, &out, p.decorator.start, p.decorator.end);
    assert_eq!(src(&out).parametrizes()[1].rows.as_ref().unwrap().len(), 1);
}

#[test]
fn raw_replace_failures_are_named() {
    let p = Path::new("t.py");
    let err = raw_replace(p, "x = 1\n", "y = 2", "y = 3").unwrap_err();
    assert!(matches!(err, InjectError::MarkerNotFound { .. }), "{err}");
    let err = raw_replace(p, "x = 1\n", "x = 1", "x = 1").unwrap_err();
    assert!(matches!(err, InjectError::NoChange { .. }), "{err}");
    let err = raw_replace(p, "x = 1\n", "x = 1", "x = (").unwrap_err();
    assert!(
        matches!(err, InjectError::RewriteInvalid { line: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("t.py"), "{err}");
    // Non-Python files are not parsed.
    assert!(raw_replace(Path::new("k.hip"), "int x;", "int x;", "int y(").is_ok());
}

const MODULE: &str = "import torch


class M(torch.nn.Module):
    def forward(self, x):
        return x


def get_inputs():
    \"\"\"Shapes — naïve docstring.\"\"\"
    configs = [
        # (batch, features)
        ([512, 128], [512, 128]),
        ([1024, 128], [1024, 128]),
    ]

    for x_shape, y_shape in configs:
        yield [torch.randn(x_shape), torch.randn(y_shape)]
    # trailing comment inside


def get_init_inputs():
    return [[], {'input_size': 128, 'hidden_size': 2048}]
";

#[test]
fn get_inputs_configs_and_replacement() {
    let s = src(MODULE);
    let g = s.get_inputs().unwrap();
    assert_eq!(g.location.line, 9);
    assert!(s.slice(g.def).starts_with("def get_inputs():"));
    assert!(
        s.slice(g.def)
            .trim_end()
            .ends_with("yield [torch.randn(x_shape), torch.randn(y_shape)]")
    );
    let configs = g.configs.unwrap();
    assert_eq!(configs.name, "configs");
    assert_eq!(
        configs.rows.unwrap()[1].value.render(),
        "([1024, 128], [1024, 128])"
    );
    assert_eq!(
        s.init_kwargs().unwrap(),
        vec![
            ("input_size".to_string(), PyValue::Int(128)),
            ("hidden_size".to_string(), PyValue::Int(2048))
        ]
    );
    let code = "def get_inputs():\n    for n in [7, 131]:\n        yield [torch.randn(n, 128), torch.randn(n, 128)]\n";
    let new = replace_get_inputs(&s, code).unwrap();
    only_region_changed(MODULE, &new, g.def.start, g.def.end);
    assert!(new.contains("# trailing comment inside\n\n\ndef get_init_inputs():"));
    // The same code goes into the functional file.
    let func = MODULE.replace("class M", "def fn(x):\n    return x\n\n\nclass M");
    let fs = src(&func);
    let new_func = replace_get_inputs(&fs, code).unwrap();
    let a = &new[src(&new).get_inputs().unwrap().def.start..];
    let b = &new_func[src(&new_func).get_inputs().unwrap().def.start..];
    assert_eq!(a, b);
}

#[test]
fn markers_missing_are_errors() {
    let s = src("x = 1\n");
    assert!(matches!(
        replace_test_shapes(&s, "TEST_SHAPES = []").unwrap_err(),
        InjectError::MarkerNotFound { .. }
    ));
    assert!(matches!(
        replace_get_inputs(&s, "def get_inputs(): pass").unwrap_err(),
        InjectError::MarkerNotFound { .. }
    ));
    let same = src("TEST_SHAPES = [(1, 2)]\n");
    assert!(matches!(
        replace_test_shapes(&same, "TEST_SHAPES = [(1, 2)]").unwrap_err(),
        InjectError::NoChange { .. }
    ));
}

#[test]
fn unparseable_file_names_line_and_column() {
    let err = PySource::parse("bad.py", "x = 1\ny = (2,\n  é = 3\n").unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("bad.py:3:"), "{msg}");
}

#[test]
fn rewrite_that_breaks_syntax_is_rejected() {
    let s = src(RUNNER);
    let list = s.test_shapes().unwrap();
    let err = apply_edits(
        &s,
        &[Edit {
            span: list.value,
            replacement: "[(1, 2)".into(),
        }],
    )
    .unwrap_err();
    assert!(matches!(err, InjectError::RewriteInvalid { .. }), "{err}");
}

#[test]
fn overlapping_and_char_splitting_edits_are_rejected() {
    let s = src("x = 'é'\n");
    let e = |a, b| Edit {
        span: Span::new(a, b),
        replacement: "1".into(),
    };
    assert!(matches!(
        apply_edits(&s, &[e(0, 3), e(2, 4)]).unwrap_err(),
        InjectError::BadEdit { .. }
    ));
    assert!(matches!(
        apply_edits(&s, &[e(5, 6)]).unwrap_err(),
        InjectError::BadEdit { .. }
    ));
    assert!(matches!(
        apply_edits(&s, &[e(0, 99)]).unwrap_err(),
        InjectError::BadEdit { .. }
    ));
    // Several edits, applied in any order, touch only their ranges.
    let t = src("a = 1\nb = 2\nc = 3\n");
    let out = apply_edits(&t, &[e(16, 17), e(4, 5)]).unwrap();
    assert_eq!(out, "a = 1\nb = 2\nc = 1\n");
}

#[test]
fn python_312_syntax_parses_and_rewrites() {
    let text = "type Shape = tuple[int, int]\n\ndef first[T](xs: list[T]) -> T:\n    return xs[0]\n\nname = 'x'\nmsg = f\"{f\"{name!r}\"}\"  # PEP 701 nesting\nTEST_SHAPES: list[Shape] = [(1, 2)]\n";
    let s = src(text);
    let out = replace_test_shapes(&s, "TEST_SHAPES: list[Shape] = [(3, 4)]").unwrap();
    assert!(out.starts_with("type Shape = tuple[int, int]"));
    assert!(out.ends_with("TEST_SHAPES: list[Shape] = [(3, 4)]\n"));
}

#[test]
fn env_and_argparse_channels() {
    let text = "import os, argparse
from os import getenv
N = int(os.getenv('KG_N', '4096'))
M = os.environ.get('KG_M', 128)
K = os.environ['KG_K']
os.environ['KG_W'] = '1'
D = getenv('KG_D')
p = argparse.ArgumentParser()
p.add_argument('--size', type=int, default=1024)
p.add_argument('--dtype', '-d', default='float16')
p.add_argument('mode')
";
    let s = src(text);
    let env = s.env_reads();
    assert_eq!(env.len(), 4, "{env:?}");
    assert_eq!(env[0].name.as_deref(), Some("KG_N"));
    assert_eq!(env[0].default, Some(PyValue::Str("4096".into())));
    assert_eq!(env[0].form, EnvForm::Getenv);
    assert_eq!(env[1].default, Some(PyValue::Int(128)));
    assert_eq!(env[1].form, EnvForm::EnvironGet);
    assert_eq!(env[2].form, EnvForm::EnvironSubscript);
    assert_eq!(env[2].location.line, 5);
    assert_eq!(env[3].name.as_deref(), Some("KG_D"));
    let args = s.arg_defaults();
    assert_eq!(args.len(), 3);
    assert_eq!(args[0].flags, vec!["--size"]);
    assert_eq!(args[0].default, Some(PyValue::Int(1024)));
    assert_eq!(args[1].flags, vec!["--dtype", "-d"]);
    assert_eq!(args[2].default, None);
    assert_eq!(args[1].location.line, 10);
}

#[test]
fn tolerance_forms() {
    let text = "import torch
ATOL = 1e-3
rtol_bf16 = 2e-2
TOTAL = 5
TOLS = (1e-5, 1e-4)
tol_map = {torch.float16: 1e-2, torch.bfloat16: 3e-2, 'float32': (1e-5, 1e-6)}
sizes = {'float16': 2, 'float32': 4}
torch.testing.assert_close(a, b, atol=1e-2, rtol=0)
torch.allclose(a, b, atol=ATOL)
";
    let s = src(text);
    let t = s.tolerances();
    let kinds: Vec<String> = t
        .iter()
        .map(|t| match &t.kind {
            ToleranceKind::Keyword(k) => format!("kw:{k}={}", t.value.render()),
            ToleranceKind::Name(n) => format!("name:{n}={}", t.value.render()),
            ToleranceKind::DtypeEntry(d) => format!("dtype:{d}={}", t.value.render()),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "name:ATOL=1e-3",
            "name:rtol_bf16=2e-2",
            "name:TOLS=(1e-5, 1e-4)",
            "dtype:torch.float16=1e-2",
            "dtype:torch.bfloat16=3e-2",
            "dtype:float32=(1e-5, 1e-6)",
            "kw:atol=1e-2",
            "kw:rtol=0",
        ]
    );
    assert_eq!(t[6].location.line, 8);
}
