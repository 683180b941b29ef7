//! Round trips on our own samples: load -> write -> load gives equal values, and
//! write -> load -> write gives the same bytes, for every contract type.

use std::fmt::Debug;
use std::path::Path;

use kg_contract::io::{parse_json, to_json_line, to_json_pretty, write_atomic};
use kg_contract::{
    Axis, InputSpec, Problem, ScalarValue, Status, Trace, load_solution, load_traces,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::support::fixture;

const PROBLEMS: [&str; 4] = ["all_kinds", "custom_inputs", "sibling_reference", "small"];
const SOLUTIONS: [&str; 3] = ["solution_triton", "solution_cuda", "solution_minimal"];

/// write -> load -> write is byte-stable in both encodings, and the value survives.
fn assert_stable<T: Serialize + DeserializeOwned + PartialEq + Debug>(value: &T, what: &str) {
    for pretty in [true, false] {
        let write = |v: &T| {
            if pretty {
                to_json_pretty(v, what).unwrap()
            } else {
                to_json_line(v, what).unwrap()
            }
        };
        let first = write(value);
        let (back, unknown): (T, _) = parse_json(&first, Path::new(what), None).unwrap();
        assert!(
            unknown.is_empty(),
            "{what}: our writer emitted unknown fields {unknown:?}"
        );
        assert_eq!(&back, value, "{what}: value changed through JSON");
        assert_eq!(write(&back), first, "{what}: JSON not byte-stable");
    }
}

fn write_problem(p: &Problem, dir: &Path) {
    write_atomic(
        &dir.join("definition.json"),
        to_json_pretty(&p.definition, "definition")
            .unwrap()
            .as_bytes(),
    )
    .unwrap();
    let lines: String = p
        .workloads
        .iter()
        .map(|w| to_json_line(&w.workload, "workload").unwrap())
        .collect();
    write_atomic(&dir.join("workload.jsonl"), lines.as_bytes()).unwrap();
}

#[test]
fn problems_round_trip() {
    for name in PROBLEMS {
        let original = Problem::load(&fixture(&format!("good/{name}"))).unwrap();
        assert!(
            original.warnings.is_empty(),
            "{name}: {:?}",
            original.warnings
        );
        assert_stable(&original.definition, name);
        for w in &original.workloads {
            assert_stable(&w.workload, &format!("{name} line {}", w.line));
        }

        let a = tempfile::tempdir().unwrap();
        write_problem(&original, a.path());
        let reloaded = Problem::load(a.path()).unwrap();
        assert_eq!(reloaded.definition, original.definition, "{name}");
        let workloads = |p: &Problem| {
            p.workloads
                .iter()
                .map(|w| w.workload.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(workloads(&reloaded), workloads(&original), "{name}");
        let resolved = |p: &Problem| {
            p.workloads
                .iter()
                .map(|w| w.resolved.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(resolved(&reloaded), resolved(&original), "{name}");

        let b = tempfile::tempdir().unwrap();
        write_problem(&reloaded, b.path());
        for f in ["definition.json", "workload.jsonl"] {
            assert_eq!(
                std::fs::read(a.path().join(f)).unwrap(),
                std::fs::read(b.path().join(f)).unwrap(),
                "{name}/{f} not byte-stable"
            );
        }
    }
}

#[test]
fn solutions_round_trip() {
    for name in SOLUTIONS {
        let (sol, warnings) =
            load_solution(&fixture(&format!("good/solutions/{name}.json"))).unwrap();
        assert!(warnings.is_empty(), "{name}: {warnings:?}");
        assert_stable(&sol, name);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("solution.json");
        let text = to_json_pretty(&sol, name).unwrap();
        write_atomic(&path, text.as_bytes()).unwrap();
        let (back, _) = load_solution(&path).unwrap();
        assert_eq!(back, sol, "{name}");
        assert_eq!(to_json_pretty(&back, name).unwrap(), text, "{name}");
    }
}

#[test]
fn traces_round_trip() {
    let (traces, warnings) = load_traces(&fixture("good/traces.jsonl")).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(traces.len(), 11);
    for (i, t) in traces.iter().enumerate() {
        assert_stable(t, &format!("trace {}", i + 1));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("traces.jsonl");
    for t in &traces {
        kg_contract::io::append_line_atomic(&path, &to_json_line(t, "trace").unwrap()).unwrap();
    }
    let first = std::fs::read(&path).unwrap();
    let (back, _) = load_traces(&path).unwrap();
    assert_eq!(back, traces);
    let again: String = back
        .iter()
        .map(|t| to_json_line(t, "trace").unwrap())
        .collect();
    assert_eq!(again.as_bytes(), first.as_slice());
}

#[test]
fn upstream_defaults_fill_absent_fields() {
    let p = Problem::load(&fixture("good/all_kinds")).unwrap();
    let tol: Vec<_> = p.workloads.iter().map(|w| w.workload.tolerance()).collect();
    assert_eq!(tol[0], kg_contract::Tolerance::default());
    assert_eq!((tol[1].max_atol, tol[1].max_rtol), (0.002, 0.003));
    assert_eq!(tol[1].required_matched_ratio, 0.99);
    assert_eq!(tol[1].max_error_cap, None);
    assert_eq!(tol[2].max_error_cap, Some(0.5));
    assert!(tol[2].allow_negative_inf);

    let (minimal, _) = load_solution(&fixture("good/solutions/solution_minimal.json")).unwrap();
    assert!(
        minimal.spec.destination_passing_style,
        "DPS defaults to true"
    );
    assert_eq!(minimal.spec.binding, None);
    assert_eq!(minimal.spec.entry(), Some(("main.py", "run")));
}

#[test]
fn sibling_reference_fills_an_empty_reference() {
    let p = Problem::load(&fixture("good/sibling_reference")).unwrap();
    let sibling = std::fs::read_to_string(fixture("good/sibling_reference/reference.py")).unwrap();
    assert_eq!(p.definition.reference, sibling);
}

/// The samples cover every variant, so the round trips above exercise all of them.
#[test]
fn samples_cover_every_kind() {
    let problems: Vec<Problem> = PROBLEMS
        .iter()
        .map(|n| Problem::load(&fixture(&format!("good/{n}"))).unwrap())
        .collect();
    let axes: Vec<&Axis> = problems
        .iter()
        .flat_map(|p| p.definition.axes.values())
        .collect();
    assert!(axes.iter().any(|a| matches!(a, Axis::Const { .. })));
    assert!(axes.iter().any(|a| matches!(a, Axis::Var { .. })));
    assert!(axes.iter().any(|a| matches!(a, Axis::Expr { .. })));
    let specs: Vec<_> = problems
        .iter()
        .flat_map(|p| {
            p.definition
                .inputs
                .values()
                .chain(p.definition.outputs.values())
        })
        .collect();
    assert!(specs.iter().any(|s| s.shape.is_none()), "a Python scalar");
    assert!(
        specs.iter().any(|s| s.shape.as_deref() == Some(&[])),
        "a 0-d tensor"
    );
    assert!(
        specs
            .iter()
            .flat_map(|s| s.shape.iter().flatten())
            .any(|d| d == "2"),
        "a literal size"
    );
    let inputs: Vec<&InputSpec> = problems
        .iter()
        .flat_map(|p| p.workloads.iter().flat_map(|w| w.workload.inputs.values()))
        .collect();
    for kind in ["random", "scalar", "safetensors", "custom"] {
        let found = inputs.iter().any(|i| {
            matches!(
                (kind, i),
                ("random", InputSpec::Random)
                    | ("scalar", InputSpec::Scalar { .. })
                    | ("safetensors", InputSpec::Safetensors { .. })
                    | ("custom", InputSpec::Custom)
            )
        });
        assert!(found, "no `{kind}` input in the samples");
    }
    let scalars: Vec<ScalarValue> = inputs
        .iter()
        .filter_map(|i| match i {
            InputSpec::Scalar { value } => Some(*value),
            _ => None,
        })
        .collect();
    assert!(scalars.iter().any(|v| matches!(v, ScalarValue::Int(_))));
    assert!(scalars.iter().any(|v| matches!(v, ScalarValue::Float(_))));
    assert!(scalars.iter().any(|v| matches!(v, ScalarValue::Bool(_))));
    assert!(
        scalars.contains(&ScalarValue::Float(1.0)),
        "1.0 stays a float"
    );

    let (traces, _): (Vec<Trace>, _) = load_traces(&fixture("good/traces.jsonl")).unwrap();
    for status in Status::ALL {
        assert!(
            traces
                .iter()
                .any(|t| t.evaluation.as_ref().map(|e| e.status) == Some(status)),
            "no {status} trace"
        );
    }
    assert!(
        traces
            .iter()
            .any(|t| t.solution.is_none() && t.evaluation.is_none()),
        "a workload-only trace"
    );

    let sols: Vec<_> = SOLUTIONS
        .iter()
        .map(|n| {
            load_solution(&fixture(&format!("good/solutions/{n}.json")))
                .unwrap()
                .0
        })
        .collect();
    assert!(sols.iter().any(|s| s.spec.destination_passing_style));
    assert!(sols.iter().any(|s| !s.spec.destination_passing_style));
    assert!(sols.iter().any(|s| s.spec.compile_options.is_some()));
}

#[test]
fn safetensors_sample_exists_where_the_workload_says() {
    let p = Problem::load(&fixture("good/all_kinds")).unwrap();
    for w in &p.workloads {
        for input in w.workload.inputs.values() {
            if let InputSpec::Safetensors { path, tensor_key } = input {
                let bytes = std::fs::read(p.dir.join(path)).unwrap();
                // safetensors: u64 little-endian header length, then a JSON header naming the keys.
                let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
                let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
                assert_eq!(header[tensor_key]["shape"], serde_json::json!([64]));
            }
        }
    }
}
