//! A corpus run spread over lanes of two fake GPUs (kg-gpu's fake backend claims them; the
//! workers run on the CPU, since no real device stands behind a fake one): both lanes are
//! used, each trace names the GPU of the lane that wrote it, and a lane that stops loses no
//! other lane's traces.

use std::path::{Path, PathBuf};

use kg_contract::{Status, Trace};
use kg_exec::corpus::{Resume, SolutionSource};
use kg_exec::lanes::Lane;
use kg_exec::placement::{AcquireOptions, Acquired, GpuSet, acquire_lanes_with};
use kg_exec::runner::{CorpusPlan, CorpusRunner, PlanOptions, RunConfig, RunEvent, RunnerError};
use kg_exec::{CancelToken, DeviceChoice, EvalOptions, ProbeInfo};

mod support;
use support::{python, workspace};

/// What the interpreter's torch would report on a host with two GPUs.
fn two_gpu_probe() -> ProbeInfo {
    ProbeInfo {
        python: "3".into(),
        executable: "python".into(),
        torch: "test".into(),
        cuda_version: Some("13.0".into()),
        hip_version: None,
        accelerator_available: true,
        device_count: 2,
        device_name: None,
        triton: None,
        numpy: None,
        safetensors: None,
        ninja: None,
    }
}

/// Claims both fake GPUs (locks in `locks`) as a `--gpus 2` run would.
fn claim_two(locks: &Path) -> Vec<Acquired> {
    let claimer = kg_gpu::fake::idle_claimer(2, locks.to_path_buf());
    let (lanes, _) = acquire_lanes_with(
        &GpuSet::Count(2),
        &two_gpu_probe(),
        &AcquireOptions::default(),
        None,
        claimer,
    )
    .unwrap_or_else(|e| panic!("claiming two fake GPUs: {e}"));
    lanes
}

/// A corpus of `n` copies of a fixture problem (x + 2y, its inputs from a generator in the
/// definition), each its own problem directory.
fn corpus(dir: &Path, n: usize) -> PathBuf {
    let src = workspace().join("crates/exec/tests/fixtures/unseeded_generator");
    let root = dir.join("corpus");
    for k in 0..n {
        let d = root.join(format!("p{k}"));
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        for f in ["definition.json", "workload.jsonl"] {
            std::fs::copy(src.join(f), d.join(f)).unwrap_or_else(|e| panic!("{f}: {e}"));
        }
    }
    root
}

/// Runs `corpus`'s references over lanes of the claimed fake GPUs (workers on the CPU); the
/// result and every event.
fn run(
    corpus: &Path,
    out: &Path,
    claims: &[Acquired],
) -> (
    Result<kg_exec::runner::RunOutcome, RunnerError>,
    Vec<String>,
) {
    let mut events = Vec::new();
    let mut record = |e: &RunEvent| {
        events.push(match e {
            RunEvent::LanesStarted { labels, reduced } => {
                format!("lanes {} {reduced:?}", labels.join(" | "))
            }
            RunEvent::PairStarted { lane, key, .. } => format!("started {lane} {key}"),
            RunEvent::LaneFailed {
                lane, label, key, ..
            } => {
                format!("failed {lane} {label} {key}")
            }
            other => format!("{other:?}").chars().take(40).collect(),
        });
    };
    let plan = CorpusPlan::load(
        PlanOptions {
            corpus_dir: corpus.to_path_buf(),
            solutions: SolutionSource::Reference,
            output_dir: out.to_path_buf(),
            filters: Vec::new(),
        },
        &mut record,
    )
    .unwrap_or_else(|e| panic!("plan: {e}"));
    let mut opts = EvalOptions::new(DeviceChoice::Cpu);
    opts.rounds = 2;
    opts.iterations = 3;
    opts.warmup = 1;
    let lanes: Vec<Lane> = claims
        .iter()
        .map(|a| Lane {
            device: DeviceChoice::Cpu,
            worker_env: a.worker_env.clone(),
            gpu_claim: a.evidence.clone(),
        })
        .collect();
    let config = RunConfig {
        resume: Resume::SkipFinished,
        max_workloads: Some(1),
        run_id: "lanes-test".into(),
        signer: None,
    };
    let runner = CorpusRunner::new(plan, python(), opts, CancelToken::new(), config)
        .with_lanes(lanes)
        .unwrap_or_else(|e| panic!("lanes: {e}"));
    let mut runner = runner;
    let r = runner.run(&mut record);
    (r, events)
}

fn traces(path: &Path) -> Vec<Trace> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .collect()
}

/// The one trace file of problem `key` under `out`.
fn trace_file(out: &Path, key: &str) -> PathBuf {
    let dir = out.join(key);
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    assert_eq!(files.len(), 1, "{}: {files:?}", dir.display());
    files[0].clone()
}

fn gpu_of(t: &Trace) -> String {
    t.evaluation
        .as_ref()
        .and_then(|e| e.environment.gpu_claim.as_ref())
        .map(|c| c.uuid.clone())
        .unwrap_or_default()
}

#[test]
fn two_fake_gpus_both_run_pairs_and_each_trace_names_its_gpu() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let claims = claim_two(&dir.path().join("locks"));
    let corpus = corpus(dir.path(), 4);
    let out = dir.path().join("out");
    let (r, events) = run(&corpus, &out, &claims);
    let outcome = r.unwrap_or_else(|e| panic!("run: {e}\n{events:#?}"));
    assert!(outcome.summary.all_passed(), "{events:#?}");
    let lanes_line = events
        .iter()
        .find(|e| e.starts_with("lanes "))
        .cloned()
        .unwrap_or_default();
    assert!(
        lanes_line.contains("GPU-fake-0")
            && lanes_line.contains("GPU-fake-1")
            && lanes_line.ends_with("None"),
        "both lanes start, none dropped: {lanes_line}"
    );
    let mut seen = std::collections::BTreeSet::new();
    for k in 0..4 {
        let ts = traces(&trace_file(&out, &format!("p{k}")));
        assert_eq!(ts.len(), 1);
        for t in &ts {
            assert_eq!(
                t.evaluation.as_ref().map(|e| e.status),
                Some(Status::Passed)
            );
            seen.insert(gpu_of(t));
        }
    }
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        vec!["GPU-fake-0".to_string(), "GPU-fake-1".to_string()],
        "{events:#?}"
    );
    // Each lane's pairs were started on it: the lane in the event matches the trace's GPU.
    assert!(events.iter().any(|e| e.starts_with("started 0 ")));
    assert!(events.iter().any(|e| e.starts_with("started 1 ")));
}

#[test]
#[allow(unsafe_code)]
fn a_lane_that_stops_loses_no_other_lanes_traces() {
    // SAFETY: nextest runs this test alone in its own process, before any thread reads the
    // environment.
    unsafe { std::env::set_var("KG_TEST_FAULT", "lose-transfer@GPU-fake-1") };
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let claims = claim_two(&dir.path().join("locks"));
    let corpus = corpus(dir.path(), 4);
    let out = dir.path().join("out");
    let (r, events) = run(&corpus, &out, &claims);
    let failures = match r {
        Err(RunnerError::LanesFailed { lanes: 2, failures }) => failures,
        Err(e) => panic!("expected one lane to stop, got: {e}\n{events:#?}"),
        Ok(_) => panic!("expected one lane to stop\n{events:#?}"),
    };
    assert_eq!(failures.len(), 1);
    let f = &failures[0];
    assert!(f.label.contains("GPU-fake-1"), "{f}");
    assert!(
        matches!(
            *f.error,
            RunnerError::Exec(kg_exec::ExecError::HarnessFault { .. })
        ),
        "{f}"
    );
    let message = RunnerError::LanesFailed {
        lanes: 2,
        failures: Vec::new(),
    }
    .to_string();
    assert!(message.contains("no summary was written"), "{message}");
    // The failed lane's pair has no complete trace file; every other pair ran on the lane
    // that stayed, and is complete.
    let mut complete = 0;
    for k in 0..4 {
        let key = format!("p{k}");
        if key == f.key {
            let files = std::fs::read_dir(out.join(&key)).map_or(0, Iterator::count);
            assert_eq!(files, 0, "the stopped pair left a trace file");
            continue;
        }
        let path = trace_file(&out, &key);
        let ts = traces(&path);
        assert_eq!(ts.len(), 1, "{key}");
        assert_eq!(gpu_of(&ts[0]), "GPU-fake-0", "{key}");
        assert_eq!(
            ts[0].evaluation.as_ref().map(|e| e.status),
            Some(Status::Passed)
        );
        complete += 1;
    }
    assert_eq!(complete, 3, "{events:#?}");
    assert!(!out.join("summary.json").exists());
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("failed 1 ") && e.contains("GPU-fake-1")),
        "{events:#?}"
    );
}
