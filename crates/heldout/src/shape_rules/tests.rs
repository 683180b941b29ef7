use std::collections::BTreeSet;

use super::numbers::is_prime;
use super::*;

fn t(items: &[i64]) -> PyValue {
    PyValue::Tuple(items.iter().map(|i| PyValue::Int(*i)).collect())
}

fn problem(rows: Vec<PyValue>, names: &[&str]) -> ShapeProblem {
    ShapeProblem {
        rows,
        names: names.iter().map(|n| Some(n.to_string())).collect(),
        constraints: vec![],
        init_values: vec![],
        seed: 0,
    }
}

#[test]
fn eight_rows_in_the_six_categories_all_new_and_deterministic() {
    let p = problem(
        vec![t(&[4, 256]), t(&[8, 1024]), t(&[32, 2048])],
        &["batch", "hidden"],
    );
    let a = generate(&p).unwrap();
    assert_eq!(a.len(), 8);
    let cats: Vec<&str> = a.iter().map(|r| r.category).collect();
    assert_eq!(
        cats,
        [
            "edge",
            "scale-up",
            "scale-down",
            "alignment-stress",
            "alignment-stress",
            "asymmetric",
            "production",
            "production"
        ]
    );
    let rendered: BTreeSet<String> = a.iter().map(|r| r.value.render()).collect();
    assert_eq!(rendered.len(), 8, "{rendered:?}");
    for v in ["(4, 256)", "(8, 1024)", "(32, 2048)"] {
        assert!(!rendered.contains(v));
    }
    assert_eq!(a, generate(&p).unwrap());
    let other = generate(&ShapeProblem {
        seed: 7,
        ..p.clone()
    })
    .unwrap();
    assert_ne!(a, other, "the seed changes the choices");
    // alignment-stress sizes are primes, hence not multiples of 32.
    for r in a.iter().filter(|r| r.category == "alignment-stress") {
        for it in r.value.items().unwrap() {
            let PyValue::Int(x) = it else { panic!() };
            assert!(is_prime(*x), "{x}");
        }
    }
    // scale-up is 2–4x the largest visible hidden size.
    let PyValue::Int(h) = a[1].value.items().unwrap()[1] else {
        panic!()
    };
    assert!((4096..=8192).contains(&h), "{h}");
}

#[test]
fn constraints_and_knobs_are_honoured() {
    let mut p = problem(
        vec![
            t(&[128, 1024, 64]),
            t(&[256, 2048, 64]),
            t(&[512, 4096, 128]),
        ],
        &["n", "hidden", "BLOCK_SIZE"],
    );
    p.constraints = vec![
        ("hidden".into(), ConstraintKind::MultipleOf(16)),
        ("hidden".into(), ConstraintKind::AtMost(8192)),
    ];
    let rows = generate(&p).unwrap();
    for r in &rows {
        let items = r.value.items().unwrap();
        let (PyValue::Int(h), PyValue::Int(b)) = (&items[1], &items[2]) else {
            panic!()
        };
        assert_eq!(h % 16, 0, "{}", r.value.render());
        assert!(*h <= 8192 && *h >= 16, "{}", r.value.render());
        assert!([64, 128].contains(b), "BLOCK_SIZE kept from a template row");
        if r.category == "alignment-stress" {
            assert_ne!(h % 32, 0, "16 × odd prime is no multiple of 32: {h}");
        }
    }
}

#[test]
fn linked_dims_move_together_and_init_values_stay() {
    let row = |b: i64| {
        PyValue::Tuple(vec![
            PyValue::List(vec![PyValue::Int(b), PyValue::Int(128)]),
            PyValue::List(vec![PyValue::Int(b), PyValue::Int(128)]),
        ])
    };
    let mut p = problem(
        vec![row(512), row(1024), row(2048)],
        &["x_shape", "y_shape"],
    );
    p.init_values = vec![128, 2048];
    for r in generate(&p).unwrap() {
        let s = r.value.render();
        let items = r.value.items().unwrap();
        assert_eq!(items[0], items[1], "{s}");
        assert!(s.contains(", 128]"), "{s}");
    }
}

#[test]
fn categorical_fields_are_crossed() {
    let row = |n: i64, d: &str| {
        PyValue::Tuple(vec![
            PyValue::Int(n),
            PyValue::Int(1024),
            PyValue::Str(d.into()),
        ])
    };
    let p = problem(
        vec![row(98432, "float16"), row(98432, "float32")],
        &["SIZE", "BLOCK_SIZE", "dtype_str"],
    );
    let rows = generate(&p).unwrap();
    assert_eq!(rows.len(), 16);
    assert!(rows.iter().all(|r| r.value.render().contains(", 1024, '")));
    assert_eq!(
        rows.iter()
            .filter(|r| r.value.render().ends_with("'float16')"))
            .count(),
        8
    );
}

#[test]
fn memory_budget_caps_scale_up() {
    let p = problem(
        vec![t(&[16384, 4096]), t(&[8192, 4096])],
        &["tokens", "hidden"],
    );
    for r in generate(&p).unwrap() {
        let items = r.value.items().unwrap();
        let n: f64 = items.iter().map(|x| x.as_f64().unwrap()).product();
        assert!(
            n * 12.0 <= MAX_INPUT_BYTES,
            "{} over budget",
            r.value.render()
        );
    }
}

#[test]
fn rows_without_sizes_are_refused() {
    let p = problem(vec![PyValue::Tuple(vec![PyValue::Str("a".into())])], &["x"]);
    assert!(generate(&p).unwrap_err().contains("no integer"));
}
