//! The ROCm port's workload v2: its checks are read faithfully, and anything that could change a
//! verdict and is not understood is a load error (fail closed), never a warning.

use std::path::{Path, PathBuf};

use kg_contract::{InputSpec, OutputCheck, Problem, WorkloadSchema};
use serde_json::{Value, json};

use crate::support::workspace;

fn definition() -> PathBuf {
    workspace().join("fixtures/evaluate/problems/v2_router/definition.json")
}

/// The fixture's first workload line, as JSON.
fn good_line() -> Value {
    let text = std::fs::read_to_string(
        workspace().join("fixtures/evaluate/problems/v2_router/workload.jsonl"),
    )
    .unwrap();
    serde_json::from_str(text.lines().next().unwrap()).unwrap()
}

fn load(dir: &Path, line: &Value) -> Result<Problem, kg_contract::ContractError> {
    let wl = dir.join("workload.jsonl");
    std::fs::write(&wl, format!("{line}\n")).unwrap();
    Problem::from_files(&definition(), &wl)
}

#[test]
fn the_fixture_loads_with_every_check_and_generator() {
    let p = Problem::load(&workspace().join("fixtures/evaluate/problems/v2_router")).unwrap();
    assert!(p.warnings.is_empty(), "{:?}", p.warnings);
    assert_eq!(p.workloads.len(), 2);
    let w = &p.workloads[0].workload;
    assert_eq!(w.schema_version, Some(WorkloadSchema::V2));
    assert!(w.tolerance.is_none());
    let kinds: Vec<&str> = w
        .checks
        .as_ref()
        .unwrap()
        .iter()
        .map(OutputCheck::kind)
        .collect();
    assert_eq!(kinds, ["numeric", "topk_routing", "exact"]);
    match &w.checks.as_ref().unwrap()[0] {
        OutputCheck::Numeric {
            required_matched_ratio,
            max_atol,
            ..
        } => {
            assert_eq!(*required_matched_ratio, 1.0);
            assert_eq!(*max_atol, 1e-5);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(w.inputs["idx"], InputSpec::Generated { .. }));
    // What the judge gets holds the checks and no v1 tolerance to fall back to.
    let policy = w.judge_policy();
    assert_eq!(policy["checks"].as_array().unwrap().len(), 3);
    assert!(policy.get("max_atol").is_none(), "{policy}");
}

#[test]
fn what_v2_does_not_define_is_a_load_error_naming_the_field() {
    let tmp = tempfile::tempdir().unwrap();
    // (what is changed, fragment of the error)
    type Edit = fn(&mut Value);
    let cases: &[(&str, Edit, &str)] = &[
        (
            "unknown check type",
            |v| v["checks"][2]["type"] = json!("bitwise"),
            "bitwise",
        ),
        (
            "unknown field in a check",
            |v| v["checks"][0]["ignore_nan"] = json!(true),
            "ignore_nan",
        ),
        (
            "unknown field in a generator",
            |v| v["inputs"]["x"]["generator"]["seed"] = json!(7),
            "seed",
        ),
        (
            "unknown top-level field",
            |v| v["tolerance_override"] = json!(0.5),
            "tolerance_override",
        ),
        (
            "unknown schema version",
            |v| v["schema_version"] = json!("sol_execbench.workload.v3"),
            "sol_execbench.workload.v3",
        ),
        (
            "a loosened matched ratio",
            |v| v["checks"][0]["required_matched_ratio"] = json!(0.99),
            "checks[0].required_matched_ratio",
        ),
        (
            "a v1 tolerance beside the checks",
            |v| v["tolerance"] = json!({"max_atol": 0.1}),
            "tolerance",
        ),
        (
            "no checks",
            |v| {
                v.as_object_mut().unwrap().remove("checks");
            },
            "checks",
        ),
        (
            "an output left unchecked",
            |v| {
                v["checks"].as_array_mut().unwrap().pop();
            },
            "hist",
        ),
        (
            "an output checked twice",
            |v| v["checks"][2] = json!({"type": "exact", "output": "topk_ids"}),
            "exactly once",
        ),
        (
            "an exact check on a float output",
            |v| v["checks"][0] = json!({"type": "exact", "output": "y"}),
            "exact check needs an integer",
        ),
        (
            "a tie tolerance out of range",
            |v| v["checks"][1]["tie_atol"] = json!(-1.0),
            "checks[1].tie_atol",
        ),
        (
            "a routing check whose topk is not the ids' last dimension",
            |v| v["checks"][1]["topk"] = json!(3),
            "checks[1].topk",
        ),
        (
            "an integer generator past its axis",
            |v| v["inputs"]["idx"]["generator"]["high"] = json!("E + Q"),
            "inputs.idx.generator",
        ),
        (
            "a normal generator with no spread",
            |v| v["inputs"]["x"]["generator"]["std"] = json!(0.0),
            "inputs.x.generator.std",
        ),
    ];
    for (what, edit, fragment) in cases {
        let mut v = good_line();
        edit(&mut v);
        let err = load(tmp.path(), &v).expect_err(what).to_string();
        assert!(err.contains(fragment), "{what}: {err}");
    }
}

#[test]
fn checks_without_a_schema_version_are_refused_and_v1_keeps_its_meaning() {
    let tmp = tempfile::tempdir().unwrap();
    let mut v = good_line();
    v.as_object_mut().unwrap().remove("schema_version");
    let err = load(tmp.path(), &v).expect_err("checks in v1").to_string();
    assert!(err.contains("sol_execbench.workload.v2"), "{err}");
    // A v1 workload keeps the v1 tolerance (and its unknown fields stay warnings).
    let v1 = json!({"uuid": "v1", "axes": {"T": 4},
        "inputs": {"x": {"type": "random"}, "logits": {"type": "random"}, "idx": {"type": "random"}},
        "tolerance": {"max_atol": 0.25}, "note": "extra"});
    let p = load(tmp.path(), &v1).unwrap();
    assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    assert_eq!(
        p.workloads[0].workload.judge_policy()["max_atol"],
        json!(0.25)
    );
}

#[test]
fn a_versioned_definition_refuses_unknown_fields() {
    let tmp = tempfile::tempdir().unwrap();
    let mut def: Value =
        serde_json::from_str(&std::fs::read_to_string(definition()).unwrap()).unwrap();
    def["tolerance_hint"] = json!(1);
    let dpath = tmp.path().join("definition.json");
    std::fs::write(&dpath, def.to_string()).unwrap();
    let wl = tmp.path().join("workload.jsonl");
    std::fs::write(&wl, format!("{}\n", good_line())).unwrap();
    let err = Problem::from_files(&dpath, &wl).expect_err("unknown definition field");
    assert!(err.to_string().contains("tolerance_hint"), "{err}");
}
