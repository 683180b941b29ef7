use super::*;

/// `as_str` (used in notes, summaries and JUnit) must be exactly the serde spelling.
fn spelled<T: Serialize + Copy>(values: &[T], as_str: fn(T) -> &'static str) -> Vec<String> {
    values
        .iter()
        .map(|v| {
            let json = serde_json::to_value(v).unwrap();
            assert_eq!(json.as_str(), Some(as_str(*v)));
            as_str(*v).to_string()
        })
        .collect()
}

#[test]
fn enum_spellings_are_the_report_strings() {
    assert_eq!(
        spelled(&StageName::ALL, StageName::as_str),
        [
            "merge_sim",
            "gpu_claim",
            "runtime_compat",
            "test_policy",
            "baseline_control",
            "correctness_repo_tests",
            "correctness_s1_grid",
            "execution_receipt",
            "index_width_scan",
            "perf",
        ]
    );
    assert_eq!(
        spelled(&[Phase::Base, Phase::Head], Phase::as_str),
        ["base", "head"]
    );
    assert_eq!(
        spelled(
            &[
                GpuRequirement::NotRequired,
                GpuRequirement::Required,
                GpuRequirement::NotEvaluated
            ],
            GpuRequirement::as_str
        ),
        ["not-required", "required", "not-evaluated"]
    );
    assert_eq!(
        spelled(
            &[
                BaseState::Ran,
                BaseState::AllSkipped,
                BaseState::TargetNotPresent,
                BaseState::NotRun
            ],
            BaseState::as_str
        ),
        ["ran", "all-skipped", "target-not-present", "not-run"]
    );
    assert_eq!(format!("{:<8}|", StageName::Perf), "perf    |");
}

#[test]
fn stage_names_are_the_stages_keys_in_order() {
    let stages = serde_json::to_value(Stages::not_run("x")).unwrap();
    let keys: Vec<&str> = stages
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let names: Vec<&str> = StageName::ALL.iter().map(|n| n.as_str()).collect();
    assert_eq!(keys, names);
    let iter: Vec<StageName> = Stages::not_run("x").iter().map(|(n, _)| n).to_vec();
    assert_eq!(iter, StageName::ALL);
    assert!(StageName::ALL.is_sorted());
}
