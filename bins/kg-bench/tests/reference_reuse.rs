//! `kg-bench run --reference-reuse`, on the CPU: three solutions of one problem; with reuse on,
//! the first solution's evaluation times each workload's reference and the later ones reuse
//! that timing (their traces say whose and how many uses), while `off` and a reuse shorter
//! than the gap between candidates time the reference with every candidate.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use kg_contract::{Status, Trace};
use kg_test_support::python;

mod common;
use common::{FAST, corpus_of_copies, kg, traces_in};

const SOLUTIONS: [&str; 3] = ["a", "b", "c"];

/// The `add` fixture problem with three copies of its honest solution.
fn corpus(dir: &Path) -> PathBuf {
    corpus_of_copies(
        dir,
        "crates/exec/tests/fixtures/corpus/add",
        "add",
        "passed_pytorch_dps.json",
        &SOLUTIONS,
    )
}

/// Each solution's traces (two workloads each, all PASSED) after a run with `reuse`.
fn run(reuse: Option<&str>) -> Vec<Vec<Trace>> {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = corpus(tmp.path());
    let out = tmp.path().join("out");
    let mut c = kg(&python(), tmp.path());
    c.arg("run")
        .arg(&corpus)
        .args(["--solutions", "bundled", "-o"])
        .arg(&out)
        .args(FAST);
    if let Some(r) = reuse {
        c.args(["--reference-reuse", r]);
    }
    let o = c.output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{e}");
    SOLUTIONS
        .iter()
        .map(|s| {
            let traces = traces_in(&out.join("add").join(format!("{s}.jsonl")));
            assert_eq!(traces.len(), 2, "{s}");
            for t in &traces {
                let ev = t.evaluation.as_ref().unwrap();
                assert_eq!(ev.status, Status::Passed, "{s}: {}", ev.log);
            }
            traces
        })
        .collect()
}

fn perf(t: &Trace) -> &kg_contract::Performance {
    t.evaluation
        .as_ref()
        .and_then(|e| e.performance.as_ref())
        .unwrap()
}

#[test]
fn later_candidates_reuse_the_first_candidates_reference_timing_and_say_whose() {
    let runs = run(Some("600"));
    for (w, first) in runs[0].iter().enumerate() {
        let p0 = perf(first);
        assert_eq!(p0.reference_reused, None, "the first candidate times it");
        for (i, later) in runs.iter().enumerate().skip(1) {
            let t = &later[w];
            assert_eq!(t.workload.uuid, first.workload.uuid);
            let p = perf(t);
            let r = p.reference_reused.as_ref().unwrap_or_else(|| {
                panic!(
                    "{}: no reuse\n{}",
                    SOLUTIONS[i],
                    t.evaluation.as_ref().unwrap().log
                )
            });
            assert_eq!(r.timed_with, "a");
            assert_eq!(r.uses, i as u32 + 1);
            assert!(r.age_s > 0.0, "{r:?}");
            // The same timing: latency and spread, bit for bit.
            assert_eq!(p.reference_latency_ms, p0.reference_latency_ms);
            assert_eq!(p.reference_spread, p0.reference_spread);
            let log = &t.evaluation.as_ref().unwrap().log;
            assert!(
                log.contains("reference timing reused: timed with `a`"),
                "{log}"
            );
            assert!(p.phases.unwrap().reference_timing_s < 0.01, "{p:?}");
        }
    }
}

#[test]
fn without_reuse_or_past_its_age_every_candidate_times_the_reference() {
    // Off by default; 1 ms is shorter than any gap between two candidates' same workload.
    for reuse in [None, Some("off"), Some("0.001")] {
        for traces in run(reuse) {
            for t in &traces {
                assert_eq!(perf(t).reference_reused, None, "{reuse:?}");
            }
        }
    }
}

#[test]
fn a_reuse_that_is_neither_off_nor_positive_seconds_is_refused_naming_the_value() {
    let tmp = tempfile::tempdir().unwrap();
    let o = kg(&python(), tmp.path())
        .args(["run", "problems/core", "--reference-reuse=-3"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.contains("`-3` is neither `off` nor a positive number"),
        "{e}"
    );
}
