//! `kg-bench score official` on the SOL ExecBench ROCm port's release bundle format: a
//! complete bundle prints its official score; a tampered or incomplete one exits non-zero
//! naming the artifact; `score status` describes it without verifying.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../../crates/score/tests/fixture/port_bundle.rs"]
mod fixture;

use std::process::{Command, Output};

fn kg(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kg-bench"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn port_bundle_is_verified_and_scored_and_refused_when_tampered() {
    let f = fixture::build(&|_, _| {});
    let bundle = f.bundle.to_str().unwrap().to_string();
    let pin = fixture::corpus_sha256(&f);

    // Without pinning our own corpus, the port's pinned corpus is required.
    let out = kg(&["score", "official", &bundle]);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not the pinned"));

    let out = kg(&[
        "score",
        "official",
        &bundle,
        "--corpus-sha256",
        &pin,
        "--json",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "official");
    assert!((v["score"].as_f64().unwrap() - fixture::EXPECTED_SCORE).abs() < 1e-12);
    assert_eq!(v["scored_workloads"], 3);
    assert_eq!(v["corpus_is_port_pinned"], false);

    let out = kg(&["score", "official", &bundle, "--corpus-sha256", &pin]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Official SOL score: 0.291666667"), "{text}");
    assert!(text.contains("NOT the port's pinned corpus"), "{text}");

    let out = kg(&["score", "status", &bundle]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("sol_execbench.release_bundle.v2"));

    // Incomplete: a statement the bundle binds is gone.
    std::fs::remove_file(f.path("statements/candidate.json")).unwrap();
    let out = kg(&["score", "official", &bundle, "--corpus-sha256", &pin]);
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("statements/candidate.json") && err.contains("missing"),
        "{err}"
    );
}
