//! Trace chains written by several processes at once: the sidecar lock must hold across
//! processes (not only threads of one), so nothing is lost and the chain stays valid.

use std::path::Path;
use std::process::Command;

use kg_contract::Trace;
use kg_contract::chain::{Manifest, VerifyOptions, WriteMode, verify_file, write_traces};

/// Set in a child process: the trace file it appends to.
const CHILD_ENV: &str = "KG_TEST_CHAIN_CHILD";
const CHILDREN: usize = 6;
const BATCHES: usize = 6;
const PER_BATCH: usize = 3;

fn trace(uuid: &str) -> Trace {
    serde_json::from_value(serde_json::json!({
        "definition": "add", "solution": "s",
        "workload": {"uuid": uuid, "axes": {}, "inputs": {}},
        "evaluation": {"status": "RUNTIME_ERROR", "log": "x",
            "environment": {"hardware": "CPU", "libs": {}}, "timestamp": "t"}
    }))
    .unwrap()
}

fn manifest() -> Manifest {
    Manifest {
        kernelgate_version: "0".into(),
        run_id: std::process::id().to_string(),
        definition: "add".into(),
        problem_tree_sha256: "t".into(),
        solution: "s".into(),
        solution_sha256: "s".into(),
    }
}

/// The child's work: a no-op unless started by the test below.
#[test]
fn chain_child_appends() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let path = Path::new(&path);
    for b in 0..BATCHES {
        let batch: Vec<Trace> = (0..PER_BATCH)
            .map(|i| trace(&format!("{}-{b}-{i}", std::process::id())))
            .collect();
        write_traces(path, &batch, &manifest(), None, WriteMode::Append).unwrap();
    }
}

#[test]
fn processes_appending_to_one_file_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("same.jsonl");
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..CHILDREN)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "chain::chain_child_appends", "--nocapture"])
                .env(CHILD_ENV, &path)
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let r = verify_file(&path, &VerifyOptions::default()).unwrap();
    assert!(r.ok(), "{:?}", r.findings);
    assert_eq!(r.lines, CHILDREN * BATCHES * PER_BATCH);
}
