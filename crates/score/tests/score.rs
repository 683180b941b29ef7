//! Score formula, flags and aggregation on hand-made traces; bundle verification and tampering.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use indexmap::IndexMap;
use kg_contract::Trace;
use kg_score::{Flag, ScoreError, SolTable, bundle, compute};

fn trace(def: &str, wl: &str, status: &str, latency: f64, device: &str, method: &str) -> Trace {
    let perf = if status == "PASSED" {
        format!(
            r#","correctness":{{"max_relative_error":0.0,"max_absolute_error":0.0}},"performance":{{"latency_ms":{latency},"reference_latency_ms":{latency},"speedup_factor":1.0,"timing_method":"{method}"}}"#
        )
    } else {
        String::new()
    };
    let text = format!(
        r#"{{"definition":"{def}","solution":"s","workload":{{"uuid":"{wl}","axes":{{}},"inputs":{{}}}},"evaluation":{{"status":"{status}","log":""{perf},"environment":{{"hardware":"X","device":{{"kind":"cuda","name":"{device}"}}}},"timestamp":""}}}}"#
    );
    serde_json::from_str(&text).unwrap()
}

fn ok(def: &str, wl: &str, latency: f64) -> Trace {
    trace(def, wl, "PASSED", latency, "NVIDIA H200", "cupti")
}

fn sol(entries: &[(&str, &str, f64)]) -> SolTable {
    entries
        .iter()
        .map(|(d, w, t)| ((d.to_string(), w.to_string()), *t))
        .collect()
}

#[test]
fn equal_to_baseline_scores_half_and_at_sol_scores_one() {
    let s = sol(&[("p", "a", 1.0), ("p", "b", 1.0)]);
    let base = [ok("p", "a", 3.0), ok("p", "b", 3.0)];
    let cand = [ok("p", "a", 3.0), ok("p", "b", 1.0)];
    let r = compute(&cand, &base, &s).unwrap();
    assert_eq!(r.workloads[0].score, 0.5);
    assert_eq!(r.workloads[1].score, 1.0);
    assert_eq!(r.overall, 0.75);
    // Slower than the baseline still scores in (0, 0.5).
    let r = compute(&[ok("p", "a", 5.0)], &base[..1], &s).unwrap();
    assert!((r.overall - 1.0 / 3.0).abs() < 1e-12, "{}", r.overall);
}

#[test]
fn incorrect_or_missing_workload_scores_zero() {
    let s = sol(&[("p", "a", 1.0), ("p", "b", 1.0)]);
    let base = [ok("p", "a", 3.0), ok("p", "b", 3.0)];
    let cand = [trace(
        "p",
        "a",
        "INCORRECT_NUMERICAL",
        0.0,
        "NVIDIA H200",
        "cupti",
    )];
    let r = compute(&cand, &base, &s).unwrap();
    assert_eq!(r.overall, 0.0);
    assert_eq!(r.workloads[0].flags, vec![Flag::NotPassed]);
    assert_eq!(r.workloads[1].status, "MISSING");
    assert_eq!(r.problems[0].passed, 0);
}

#[test]
fn baseline_at_or_below_sol_is_an_error_naming_the_workload() {
    let s = sol(&[("p", "w7", 2.0)]);
    let err = compute(&[ok("p", "w7", 2.0)], &[ok("p", "w7", 2.0)], &s).unwrap_err();
    assert!(matches!(err, ScoreError::BaselineBelowSol { .. }), "{err}");
    assert!(err.to_string().contains("w7"), "{err}");
}

#[test]
fn faster_than_sol_is_flagged_and_not_credited() {
    let s = sol(&[("p", "a", 1.0)]);
    let r = compute(&[ok("p", "a", 0.5)], &[ok("p", "a", 3.0)], &s).unwrap();
    assert_eq!(r.workloads[0].score, 0.0);
    assert_eq!(r.workloads[0].flags, vec![Flag::FasterThanSol]);
    assert_eq!(r.problems[0].faster_than_sol, 1);
}

#[test]
fn aggregation_is_per_problem_then_equal_weight() {
    // Problem p: three workloads scoring 1, 1, 0.5 -> 5/6; problem q: one workload 0.5.
    // A flat mean over workloads would give 0.75; per problem gives (5/6 + 0.5) / 2 = 2/3.
    let s = sol(&[
        ("p", "a", 1.0),
        ("p", "b", 1.0),
        ("p", "c", 1.0),
        ("q", "d", 1.0),
    ]);
    let base = [
        ok("p", "a", 3.0),
        ok("p", "b", 3.0),
        ok("p", "c", 3.0),
        ok("q", "d", 3.0),
    ];
    let cand = [
        ok("p", "a", 1.0),
        ok("p", "b", 1.0),
        ok("p", "c", 3.0),
        ok("q", "d", 3.0),
    ];
    let r = compute(&cand, &base, &s).unwrap();
    assert!((r.overall - 2.0 / 3.0).abs() < 1e-12, "{}", r.overall);
    assert_eq!(r.problems.len(), 2);
    assert!((r.problems[0].score - 5.0 / 6.0).abs() < 1e-12);
}

#[test]
fn device_or_method_mismatch_is_an_error_naming_both() {
    let s = sol(&[("p", "a", 1.0)]);
    let mi300x = [trace(
        "p",
        "a",
        "PASSED",
        2.0,
        "AMD Instinct MI300X",
        "cupti",
    )];
    let err = compute(&mi300x, &[ok("p", "a", 3.0)], &s)
        .unwrap_err()
        .to_string();
    assert!(err.contains("MI300X") && err.contains("H200"), "{err}");
    let cand = [trace("p", "a", "PASSED", 2.0, "NVIDIA H200", "cuda_graph")];
    let err = compute(&cand, &[ok("p", "a", 3.0)], &s).unwrap_err();
    assert!(err.is_timing_method_mismatch(), "{err}");
    let err = err.to_string();
    assert!(err.contains("cuda_graph") && err.contains("cupti"), "{err}");
    // Within the baseline too: a workload timed another way than the first one.
    let s = sol(&[("p", "a", 1.0), ("p", "b", 1.0)]);
    let base = [
        ok("p", "a", 3.0),
        trace("p", "b", "PASSED", 3.0, "NVIDIA H200", "device_event_sync"),
    ];
    let err = compute(&[ok("p", "a", 2.0), ok("p", "b", 2.0)], &base, &s).unwrap_err();
    assert!(err.is_timing_method_mismatch(), "{err}");
    let err = err.to_string();
    assert!(
        err.contains("baseline for workload `b`") && err.contains("differs from other baseline"),
        "{err}"
    );
    // A device mismatch is not a timing-method one.
    let err = compute(&mi300x, &[ok("p", "a", 3.0)], &sol(&[("p", "a", 1.0)])).unwrap_err();
    assert!(!err.is_timing_method_mismatch(), "{err}");
}

#[test]
fn missing_sol_is_an_error() {
    let err = compute(&[ok("p", "a", 2.0)], &[ok("p", "a", 3.0)], &SolTable::new()).unwrap_err();
    assert!(matches!(err, ScoreError::MissingSol { .. }), "{err}");
}

#[test]
fn sol_jsonl_is_read_and_bad_lines_are_located() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sol.jsonl");
    std::fs::write(
        &p,
        "{\"definition\":\"p\",\"workload\":\"a\",\"t_sol_ms\":0.25}\n",
    )
    .unwrap();
    let t = kg_score::load_sol(&p).unwrap();
    assert_eq!(t[&("p".to_string(), "a".to_string())], 0.25);
    std::fs::write(
        &p,
        "{\"definition\":\"p\",\"workload\":\"a\",\"t_sol_ms\":-1}\n",
    )
    .unwrap();
    let err = kg_score::load_sol(&p).unwrap_err().to_string();
    assert!(err.contains("line 1"), "{err}");
}

// ------------------------------------------------------------------ bundles

fn write_lines(path: &Path, traces: &[Trace]) {
    let text: String = traces
        .iter()
        .map(|t| serde_json::to_string(t).unwrap() + "\n")
        .collect();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A bundle directory with one problem, two workloads, real solar analysis directories.
fn make_bundle(root: &Path) -> (bundle::ReleaseBundle, kg_score::ScoreReport) {
    use kg_solar::analysis::{Analysis, AnalysisRecord, Bound, write_analysis};
    use kg_solar::graph::OperatorGraph;
    use kg_solar::ir::{IrGraph, Totals};
    let corpus = root.join("corpus/p");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(corpus.join("definition.json"), "{\"name\": \"p\"}").unwrap();
    std::fs::write(corpus.join("workload.jsonl"), "{}\n").unwrap();
    let def_sha = kg_contract::io::sha256_file(&corpus.join("definition.json")).unwrap();
    let hw = kg_solar::hardware::load("h200").unwrap();
    let mut dirs = Vec::new();
    for (wl, t_sol) in [("a", 1.0), ("b", 2.0)] {
        let record = AnalysisRecord {
            schema_version: 1,
            tool_version: "0".into(),
            definition: "p".into(),
            definition_sha256: def_sha.clone(),
            workload: wl.into(),
            axes: IndexMap::new(),
            backend: kg_solar::ExtractionPath::Aten,
            hardware: "h200".into(),
            hardware_sha256: hw.sha256.clone(),
            torch_version: "x".into(),
            totals: Totals::default(),
            t_tensor_ms: 0.0,
            t_vector_ms: 0.0,
            t_compute_ms: 0.0,
            t_memory_unfused_ms: t_sol,
            t_memory_fused_ms: t_sol,
            t_sol_ms: t_sol,
            bound: Bound::Memory,
            arithmetic_intensity: 0.0,
            tensor_rates: IndexMap::new(),
            replay_checked: 0,
            replay_traced_only: 0,
        };
        let a = Analysis {
            graph: OperatorGraph {
                backend: kg_solar::ExtractionPath::Aten,
                torch_version: "x".into(),
                tensors: IndexMap::new(),
                inputs: vec![],
                outputs: vec![],
                ops: vec![],
                ignored: vec![],
            },
            ir: IrGraph {
                backend: kg_solar::ExtractionPath::Aten,
                ops: vec![],
                input_bytes: IndexMap::new(),
                output_bytes: IndexMap::new(),
            },
            record,
        };
        let d = root.join("solar/p").join(wl);
        write_analysis(&d, &a, &hw).unwrap();
        dirs.push(d);
    }
    let base = root.join("baseline/p.jsonl");
    write_lines(&base, &[ok("p", "a", 3.0), ok("p", "b", 4.0)]);
    let cand = root.join("candidate/p.jsonl");
    write_lines(&cand, &[ok("p", "a", 3.0), ok("p", "b", 3.0)]);
    bundle::assemble(&bundle::Inputs {
        root: root.to_path_buf(),
        corpus_files: vec![
            corpus.join("definition.json"),
            corpus.join("workload.jsonl"),
        ],
        baseline: ("reference".into(), vec![base]),
        candidate: ("reference".into(), vec![cand]),
        solar_dirs: dirs,
        hardware: ("h200".into(), hw.sha256.clone()),
        backend: "aten".into(),
        created: "2026-11-29T00:00:00Z".into(),
    })
    .unwrap()
}

#[test]
fn bundle_round_trips_through_official_verification() {
    let dir = tempfile::tempdir().unwrap();
    let (b, report) = make_bundle(dir.path());
    // a: T_k = T_b -> 0.5; b: T_k = 3, T_b = 4, T_SOL = 2 -> 1/(1 + 1/2) = 2/3.
    assert!((report.overall - (0.5 + 2.0 / 3.0) / 2.0).abs() < 1e-12);
    let (vb, vr) = bundle::verify(&dir.path().join(bundle::BUNDLE_FILE)).unwrap();
    assert_eq!(vb, b);
    assert_eq!(vr.overall, report.overall);
    assert_eq!(b.device, "cuda:NVIDIA H200");
    assert_eq!(b.timing_method, "cupti");
}

fn expect_bundle_error(root: &Path, needle: &str) {
    let err = bundle::verify(&root.join(bundle::BUNDLE_FILE))
        .unwrap_err()
        .to_string();
    assert!(err.contains(needle), "expected `{needle}` in: {err}");
}

#[test]
fn tampered_trace_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    make_bundle(dir.path());
    let p = dir.path().join("candidate/p.jsonl");
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("\"latency_ms\":3.0", "\"latency_ms\":2.5");
    std::fs::write(&p, text).unwrap();
    expect_bundle_error(dir.path(), "candidate/p.jsonl");
}

#[test]
fn tampered_solar_analysis_is_detected_through_its_manifest() {
    let dir = tempfile::tempdir().unwrap();
    make_bundle(dir.path());
    let p = dir.path().join("solar/p/a/solar-analysis.yaml");
    let text = std::fs::read_to_string(&p)
        .unwrap()
        .replace("t_sol_ms: 1.0", "t_sol_ms: 0.5");
    assert!(text.contains("t_sol_ms: 0.5"), "{text}");
    std::fs::write(&p, text).unwrap();
    expect_bundle_error(dir.path(), "solar-analysis.yaml");
}

#[test]
fn missing_corpus_file_is_detected() {
    let dir = tempfile::tempdir().unwrap();
    make_bundle(dir.path());
    std::fs::remove_file(dir.path().join("corpus/p/workload.jsonl")).unwrap();
    expect_bundle_error(dir.path(), "corpus/p/workload.jsonl");
}

#[test]
fn caller_written_score_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    make_bundle(dir.path());
    let p = dir.path().join(bundle::BUNDLE_FILE);
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    v["score"]["overall"] = serde_json::json!(0.99);
    std::fs::write(&p, serde_json::to_string(&v).unwrap()).unwrap();
    expect_bundle_error(dir.path(), "score");
}

#[test]
fn escaping_paths_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    make_bundle(dir.path());
    let p = dir.path().join(bundle::BUNDLE_FILE);
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    v["corpus"][0]["path"] = serde_json::json!("../outside.json");
    std::fs::write(&p, serde_json::to_string(&v).unwrap()).unwrap();
    expect_bundle_error(dir.path(), "stay inside");
}
