#![allow(clippy::unwrap_used)]
use super::*;

#[test]
fn keys_are_paths_relative_to_the_corpus() {
    let root = Path::new("/c/examples");
    assert_eq!(
        problem_key(root, Path::new("/c/examples/triton/rmsnorm")),
        "triton/rmsnorm"
    );
    assert_eq!(problem_key(root, root), "examples");
    let out = Path::new("/o");
    assert_eq!(
        trace_path(out, "triton/rmsnorm", "my sol"),
        Path::new("/o/triton/rmsnorm/my_sol.jsonl")
    );
    // No component climbs out of the output directory.
    assert_eq!(trace_path(out, "../x", ".."), Path::new("/o/__/x/__.jsonl"));
}

#[test]
fn one_trace_file_for_two_pairs_is_refused_naming_both() {
    let (a, b) = (PathBuf::from("/o/p/s.jsonl"), PathBuf::from("/o/q/s.jsonl"));
    assert!(
        check_trace_paths([("p / 1".into(), a.as_path()), ("q / 1".into(), b.as_path())]).is_ok()
    );
    let e = check_trace_paths([
        ("p / s1.json".into(), a.as_path()),
        ("p / s2.json".into(), a.as_path()),
    ])
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("p / s1.json") && e.contains("p / s2.json"),
        "{e}"
    );
}

fn solution(name: &str, lang: &str) -> Solution {
    serde_json::from_value(serde_json::json!({
        "name": name, "definition": "d", "author": "t",
        "spec": {"languages": [lang], "target_hardware": ["LOCAL"], "entry_point": "k.py::run"},
        "sources": [{"path": "k.py", "content": ""}]
    }))
    .unwrap()
}

#[test]
fn filters_match_fields_globs_and_negation() {
    let sol = solution("my_rmsnorm_triton", "triton");
    let pair = PairRef {
        key: "triton/rmsnorm",
        definition: "rmsnorm_h4096",
        solution: &sol,
    };
    let m = |e: &str| e.parse::<Filter>().unwrap().matches(&pair);
    assert!(m("rmsnorm"));
    assert!(m("h4096"));
    assert!(m("problem:triton/*"));
    assert!(!m("problem:cuda*"));
    assert!(m("language:triton & !problem:cuda*"));
    assert!(!m("language:triton & problem:cuda*"));
    // Without wildcards a pattern is a substring.
    assert!(m("language:trit"));
    assert!(!m("language:cuda"));
    assert!(m("definition:rmsnorm_h????"));
    assert!(!m("definition:rmsnorm_h???"));
    assert!(m("solution:*triton"));
    assert!(!m("!rmsnorm"));
    assert!("size:8".parse::<Filter>().is_err());
    assert!("problem:".parse::<Filter>().is_err());
    let f: Vec<Filter> = vec!["cuda".parse().unwrap(), "triton".parse().unwrap()];
    assert!(selected(&f, &pair));
    assert!(selected(&[], &pair));
    assert!(!selected(&f[..1], &pair));
}

#[test]
fn globs_backtrack() {
    assert!(pattern_matches("a*b*c", "axxbyybc"));
    assert!(!pattern_matches("a*b*c", "axxbyyb"));
    assert!(pattern_matches("*", ""));
    assert!(pattern_matches("?x", "yx"));
    assert!(!pattern_matches("?x", "x"));
}

#[test]
fn resume_modes_pick_what_runs_again() {
    use PriorState::*;
    for s in [Unfinished, Passed, NotPassed(1)] {
        assert!(Resume::All.evaluates(s));
    }
    assert!(Resume::SkipFinished.evaluates(Unfinished));
    assert!(!Resume::SkipFinished.evaluates(Passed));
    assert!(!Resume::SkipFinished.evaluates(NotPassed(2)));
    assert!(Resume::Failed.evaluates(Unfinished));
    assert!(!Resume::Failed.evaluates(Passed));
    assert!(Resume::Failed.evaluates(NotPassed(2)));
    assert_eq!(
        prior_state(Path::new("/nonexistent/t.jsonl"), &[], "a", "b"),
        Unfinished
    );
}

#[test]
fn cpu_estimates_cost_the_interpreter_and_scale_with_sizes_and_rounds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus/add");
    let p = Problem::load(&dir).unwrap();
    let w = &p.workloads[1];
    let triton = solution("t", "triton");
    let torch = solution("p", "pytorch");
    let (t10, t2) = (
        estimate_cpu_s(w, &triton, 10),
        estimate_cpu_s(w, &triton, 2),
    );
    assert!(t10 > t2, "{t10} {t2}");
    assert!(estimate_cpu_s(w, &triton, 10) > estimate_cpu_s(w, &torch, 10));
    assert!(estimate_cpu_s(w, &torch, 10) > estimate_cpu_s(&p.workloads[0], &torch, 10));
    // A tiny workload costs about the fixed harness time and both timing budgets.
    let tiny = estimate_cpu_s(&p.workloads[0], &torch, 2);
    assert!((2.0..3.0).contains(&tiny), "{tiny}");
}

#[test]
fn duplicate_names_are_found_with_whether_they_are_identical() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus");
    let a = Problem::load(&root.join("add")).unwrap();
    let mut b_def = a.definition.clone();
    let c = Problem::load(&root.join("nan_reference")).unwrap();
    let (pa, pb, pc) = (Path::new("/a"), Path::new("/b"), Path::new("/c"));
    let d = duplicate_definitions([(pa, &a.definition), (pb, &b_def), (pc, &c.definition)]);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].dirs, [PathBuf::from("/a"), PathBuf::from("/b")]);
    assert!(d[0].identical);
    b_def.description = Some("changed".into());
    let d = duplicate_definitions([(pa, &a.definition), (pb, &b_def)]);
    assert!(!d[0].identical);
}
