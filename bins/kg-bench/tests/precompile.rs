//! `kg-bench run --precompile` from the lane to the trace, on the CPU: a test build's
//! `KG_TEST_PRECOMPILE_ARCH` gives the CPU session's Triton solutions a precompiler (their
//! candidates still interpret Triton), so the first trace of each pair after the first records
//! what was compiled ahead into that solution's own Triton cache; `--precompile off` records
//! nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use kg_contract::{Precompiled, Status};
use kg_test_support::python;

mod common;
use common::{FAST, corpus_of_copies, kg, traces_in};

/// The gelu problem with two copies of its bundled Triton solution, `a` and `b`.
fn corpus(dir: &Path) -> PathBuf {
    corpus_of_copies(
        dir,
        "problems/core/gelu_tanh_bf16_gemma2_2b",
        "gelu",
        "triton_flat.json",
        &["a", "b"],
    )
}

fn cubins(dir: &Path) -> usize {
    kg_contract::tree::walk(dir)
        .entries
        .keys()
        .filter(|p| p.extension().is_some_and(|x| x == "cubin"))
        .count()
}

/// Each pair's precompile record (its first trace's), after every trace PASSED.
fn run(precompile: &str) -> (Vec<Option<Precompiled>>, usize) {
    let tmp = tempfile::tempdir().unwrap();
    let corpus = corpus(tmp.path());
    let out = tmp.path().join("out");
    let cache = tmp.path().join("cache");
    let o = kg(&python(), tmp.path())
        .env("KG_TEST_PRECOMPILE_ARCH", "90")
        .env("KG_CACHE_DIR", &cache)
        .arg("run")
        .arg(&corpus)
        .args([
            "--solutions",
            "bundled",
            "--max-workloads",
            "2",
            "--prestart",
            "on",
        ])
        .args(["--precompile", precompile])
        .arg("-o")
        .arg(&out)
        .args(FAST)
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{e}");
    let mut records = Vec::new();
    for s in ["a", "b"] {
        let traces = traces_in(&out.join("gelu").join(format!("{s}.jsonl")));
        assert_eq!(traces.len(), 2, "{s}");
        for t in &traces {
            assert_eq!(t.evaluation.as_ref().unwrap().status, Status::Passed, "{s}");
        }
        let start = traces[0].evaluation.as_ref().unwrap().candidate_start;
        records.push(start.and_then(|c| c.precompiled));
    }
    (records, cubins(&cache.join("triton")))
}

#[test]
fn each_triton_pair_gets_its_kernels_compiled_ahead_and_its_first_trace_says_so() {
    let (records, cubins) = run("on");
    // None for the first pair: no candidate had been seen confined yet (the precompiler's
    // view, which hides the GPU, needs the same confinement).
    assert_eq!(records[0], None, "{records:?}");
    for r in &records[1..] {
        let r = r.unwrap_or_else(|| panic!("no precompile record: {records:?}"));
        // Both workloads' element counts are multiples of 16: one specialisation, one kernel.
        assert_eq!(r.kernels, 1, "{r:?}");
        // Its launcher builds where a CUDA driver library is found; else that build failed.
        assert_eq!(r.launchers + r.failed, 1, "{r:?}");
        assert!(r.seconds > 0.0 && r.waited_s >= 0.0, "{r:?}");
    }
    assert_eq!(cubins, 1, "one kernel in the second solution's own cache");
}

#[test]
fn precompile_off_compiles_nothing_ahead() {
    let (records, cubins) = run("off");
    assert_eq!(records, vec![None, None]);
    assert_eq!(cubins, 0);
}
