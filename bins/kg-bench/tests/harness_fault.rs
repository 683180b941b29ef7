//! A fault of kernelgate's own plumbing is never the candidate's status: faults injected into a
//! test build (`KG_TEST_FAULT`, ignored by release builds) are retried once, recorded as
//! `evaluation.retried`, and a second one stops the evaluation as a harness fault. They need a
//! Python with torch (`KG_TEST_PYTHON`, else `<workspace>/.venv/bin/python`, else `python3`)
//! and fail without one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use kg_contract::{RetryReason, Status, Trace};
use kg_test_support::{python, workspace};

mod common;
use common::FAST;

/// `kg-bench evaluate PROBLEM --solution reference` on the CPU with `fault` injected, writing
/// its traces to `out`.
fn evaluate(problem: &str, fault: &str, out: &Path, extra: &[&str]) -> Output {
    let tmp = out.parent().unwrap();
    Command::new(env!("CARGO_BIN_EXE_kg-bench"))
        .env("TMPDIR", tmp)
        .env("KG_RUNTIME_DIR", tmp.join("rt"))
        .env("PYTHON_BIN", python())
        .env("KG_TEST_FAULT", fault)
        .current_dir(workspace())
        .arg("evaluate")
        .arg(workspace().join("crates/exec/tests/fixtures").join(problem))
        .args(["--solution", "reference", "--max-workloads", "2"])
        .args(FAST)
        .args(extra)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap()
}

fn traces(path: &Path) -> Vec<Trace> {
    if !path.exists() {
        return Vec::new();
    }
    kg_contract::load_traces(path).unwrap().0
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The judge's input directory vanishes once (the inputs of this problem go as files): the
/// first attempt failed for a reason that is not the candidate's, the second PASSED.
#[test]
fn a_lost_transfer_directory_is_retried_not_blamed_on_the_candidate() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("t.jsonl");
    let o = evaluate("unseeded_generator", "lose-transfer-once", &out, &[]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let t = traces(&out);
    assert!(!t.is_empty());
    let ev = t[0].evaluation.as_ref().unwrap();
    assert_eq!(ev.status, Status::Passed, "{}", ev.log);
    let r = ev.retried.as_ref().expect("the first workload was retried");
    assert_eq!(r.reason, RetryReason::HarnessStateLost);
    assert!(
        !r.first_attempt.starts_with("PASSED"),
        "{}",
        r.first_attempt
    );
    // Only the faulted workload was retried.
    assert!(
        t[1..]
            .iter()
            .all(|t| t.evaluation.as_ref().unwrap().retried.is_none())
    );
}

/// It vanishes every time: the evaluation stops as the harness's fault, and the workload gets
/// no candidate status at all.
#[test]
fn a_repeated_harness_fault_stops_the_evaluation_without_a_candidate_status() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("t.jsonl");
    let o = evaluate("unseeded_generator", "lose-transfer", &out, &[]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(3), "stderr: {err}");
    assert!(err.contains("harness fault (not the candidate's)"), "{err}");
    assert!(
        traces(&out).is_empty(),
        "a trace was written for a harness fault"
    );
}

/// The dual clock trips once (a burst of load, injected): the workload is timed again instead
/// of being called REWARD_HACK. Without the sandbox, so that the wall time is what is compared.
#[test]
fn a_single_dual_clock_trip_is_timed_again() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("t.jsonl");
    let o = evaluate("corpus/add", "dual-clock-once", &out, &["--no-sandbox"]);
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let t = traces(&out);
    let ev = t[0].evaluation.as_ref().unwrap();
    assert_eq!(ev.status, Status::Passed, "{}", ev.log);
    let r = ev.retried.as_ref().expect("retried");
    assert_eq!(r.reason, RetryReason::DualClock);
    assert!(
        r.first_attempt.starts_with("REWARD_HACK: dual clock"),
        "{}",
        r.first_attempt
    );
    // Tripping every time is what a forged timer does: REWARD_HACK stands.
    let out2 = tmp.path().join("t2.jsonl");
    let o = evaluate("corpus/add", "dual-clock", &out2, &["--no-sandbox"]);
    assert_eq!(o.status.code(), Some(1), "stderr: {}", stderr(&o));
    let ev = traces(&out2)[0].evaluation.clone().unwrap();
    assert_eq!(ev.status, Status::RewardHack, "{}", ev.log);
    assert_eq!(ev.retried.map(|r| r.reason), Some(RetryReason::DualClock));
}
