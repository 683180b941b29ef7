//! Shape resolution: axes bound, `expr` axes evaluated (also when they depend on each other),
//! and every way a workload can fail to resolve.

use indexmap::IndexMap;
use kg_contract::shape::{ShapeError, resolve};
use kg_contract::{Definition, Problem};

use crate::support::fixture;

fn axes(pairs: &[(&str, i64)]) -> IndexMap<String, i64> {
    pairs.iter().map(|(k, v)| (k.to_string(), *v)).collect()
}

/// A definition with the given axes (JSON object body) and one output shaped by all of them.
fn def(axes_json: &str, shape: &[&str]) -> Definition {
    let shape = serde_json::to_string(shape).unwrap();
    serde_json::from_str(&format!(
        r#"{{"name": "t", "axes": {{{axes_json}}}, "inputs": {{}},
            "outputs": {{"o": {{"shape": {shape}, "dtype": "float32"}}}},
            "reference": "def run():\n    pass\n"}}"#
    ))
    .unwrap()
}

#[test]
fn all_kinds_resolves_with_chained_expressions() {
    let p = Problem::load(&fixture("good/all_kinds")).unwrap();
    let r = &p.workloads[0].resolved;
    // Declaration order is kept, and `tokens_padded` (declared first) uses `tokens`.
    assert_eq!(
        r.axes,
        axes(&[
            ("batch", 2),
            ("seq", 3),
            ("heads", 4),
            ("head_dim", 16),
            ("tokens_padded", 8),
            ("tokens", 6),
            ("hidden", 64)
        ])
    );
    let s = |v: &[i64]| Some(v.to_vec());
    assert_eq!(r.inputs["x"], s(&[6, 64]));
    assert_eq!(r.inputs["weight"], s(&[64]));
    assert_eq!(r.inputs["bias"], s(&[]));
    assert_eq!(r.inputs["eps"], None);
    assert_eq!(r.inputs["causal"], None);
    assert_eq!(r.inputs["index"], s(&[8]));
    assert_eq!(r.inputs["pairs"], s(&[6, 2]));
    assert_eq!(r.outputs["y"], s(&[6, 64]));
    assert_eq!(r.outputs["total"], s(&[]));
    // batch = 0: empty tensors are legal sizes.
    assert_eq!(p.workloads[2].resolved.inputs["x"], s(&[0, 64]));
    assert_eq!(p.workloads[2].resolved.axes["tokens_padded"], 0);
    // batch 1 x seq 1 pads to 8.
    assert_eq!(p.workloads[1].resolved.axes["tokens_padded"], 8);
}

#[test]
fn three_level_expression_chain_in_reverse_order() {
    let d = def(
        r#""c": {"type": "expr", "expression": "b ** 2 - a"},
           "b": {"type": "expr", "expression": "a // 2 + k"},
           "a": {"type": "var"},
           "k": {"type": "const", "value": 3}"#,
        &["a", "b", "c"],
    );
    let r = resolve(&d, &axes(&[("a", 10)])).unwrap();
    assert_eq!(r.axes, axes(&[("c", 54), ("b", 8), ("a", 10), ("k", 3)]));
    assert_eq!(r.outputs["o"], Some(vec![10, 8, 54]));
}

#[test]
fn resolution_errors() {
    let d = def(
        r#""n": {"type": "var"}, "k": {"type": "const", "value": 4},
           "half": {"type": "expr", "expression": "n / 2"},
           "less": {"type": "expr", "expression": "n - 10"}"#,
        &["n"],
    );
    let err = |given: &[(&str, i64)]| resolve(&d, &axes(given)).unwrap_err();

    assert_eq!(err(&[]), ShapeError::Unbound { axis: "n".into() });
    assert_eq!(
        err(&[("n", 20), ("m", 1)]),
        ShapeError::Unknown {
            axis: "m".into(),
            declared: "n, k, half, less".into()
        }
    );
    assert_eq!(
        err(&[("n", 20), ("k", 5)]),
        ShapeError::Contradiction {
            axis: "k".into(),
            kind: "const",
            expected: 4,
            given: 5
        }
    );
    assert_eq!(
        err(&[("n", 20), ("half", 11)]),
        ShapeError::Contradiction {
            axis: "half".into(),
            kind: "expr",
            expected: 10,
            given: 11
        }
    );
    assert_eq!(
        err(&[("n", 4)]),
        ShapeError::Negative {
            axis: "less".into(),
            value: -6
        }
    );
    let ShapeError::Expr { axis, message, .. } = err(&[("n", 21)]) else {
        panic!()
    };
    assert_eq!(axis, "half");
    assert!(
        message.contains("21 / 2 is not an integer; use `//`"),
        "{message}"
    );
    // Given values that agree with const/expr axes are accepted.
    let ok = resolve(&d, &axes(&[("n", 20), ("k", 4), ("half", 10)])).unwrap();
    assert_eq!(ok.axes["less"], 10);
}

#[test]
fn circular_and_broken_expressions() {
    let circular = def(
        r#""a": {"type": "expr", "expression": "b + 1"}, "b": {"type": "expr", "expression": "a * 2"}"#,
        &["a"],
    );
    let e = resolve(&circular, &axes(&[])).unwrap_err();
    assert!(
        matches!(&e, ShapeError::Expr { message, .. } if message.contains("circular")),
        "{e}"
    );

    let by_zero = def(
        r#""n": {"type": "var"}, "q": {"type": "expr", "expression": "8 // (n - 2)"}"#,
        &["q"],
    );
    let e = resolve(&by_zero, &axes(&[("n", 2)])).unwrap_err();
    assert!(e.to_string().contains("division by zero"), "{e}");
    assert_eq!(resolve(&by_zero, &axes(&[("n", 4)])).unwrap().axes["q"], 4);

    let unknown = def(r#""q": {"type": "expr", "expression": "z * 2"}"#, &["q"]);
    let e = resolve(&unknown, &axes(&[])).unwrap_err();
    assert!(e.to_string().contains("unknown name `z`"), "{e}");
}

#[test]
fn undeclared_axis_in_a_shape_is_an_error_but_digits_are_sizes() {
    let d = def(r#""n": {"type": "var"}"#, &["n", "m"]);
    assert_eq!(
        resolve(&d, &axes(&[("n", 1)])).unwrap_err(),
        ShapeError::UndeclaredInShape {
            tensor: "o".into(),
            axis: "m".into()
        }
    );
    let d = def(r#""n": {"type": "var"}"#, &["n", "3", "007"]);
    assert_eq!(
        resolve(&d, &axes(&[("n", 5)])).unwrap().outputs["o"],
        Some(vec![5, 3, 7])
    );
}
