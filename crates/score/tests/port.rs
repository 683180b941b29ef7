//! The ROCm port's release bundle: a complete one verifies and scores as the paper says;
//! every kind of tampering or incompleteness is refused, naming the artifact.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "fixture/port_bundle.rs"]
mod fixture;

use fixture::{EXPECTED_SCORE, Fixture, build, corpus_sha256};
use kg_score::port::{self, VerifyOptions};
use serde_json::{Value, json};

fn pinned(f: &Fixture) -> VerifyOptions {
    VerifyOptions {
        corpus_sha256: Some(corpus_sha256(f)),
    }
}

fn refused(f: &Fixture, want: &str) -> String {
    let err = port::verify(&f.bundle, &pinned(f)).expect_err("must be refused");
    let msg = err.to_string();
    assert!(msg.contains(want), "expected {want:?} in: {msg}");
    msg
}

fn none(_: &str, _: &mut Value) {}

type Hook = Box<dyn Fn(&str, &mut Value)>;

#[test]
fn a_complete_bundle_verifies_and_scores() {
    let f = build(&none);
    assert!(port::is_port_bundle(&f.bundle).unwrap());
    let r = port::verify(&f.bundle, &pinned(&f)).unwrap();
    assert!((r.score - EXPECTED_SCORE).abs() < 1e-12, "{}", r.score);
    assert!((r.problem_scores["suite/p1"] - 7.0 / 12.0).abs() < 1e-12);
    assert_eq!(r.problem_scores["suite/p2"], 0.0);
    assert_eq!(r.scored_workloads, 3, "the sentinel is not scored");
    assert_eq!(r.baseline_id, "fixture-baseline-v1");
    assert_eq!(r.candidate_id, "fixture-candidate");
    assert!(!r.corpus_is_port_pinned);
    assert!(r.artifacts_verified > 20, "{}", r.artifacts_verified);
    assert!(!r.unchecked.is_empty());
}

#[test]
fn a_corpus_other_than_the_pinned_one_is_refused_without_an_explicit_pin() {
    let f = build(&none);
    let err = port::verify(&f.bundle, &VerifyOptions::default()).unwrap_err();
    assert!(
        err.to_string()
            .contains(port::PINNED_CORPUS_MANIFEST_SHA256),
        "{err}"
    );
}

#[test]
fn tampered_or_missing_artifacts_are_refused() {
    // One byte of a candidate trace, same size: the hash catches it.
    let f = build(&none);
    let t = f.path("runs/candidate/p1/trace.jsonl");
    let text = std::fs::read_to_string(&t)
        .unwrap()
        .replacen("2.0", "1.5", 1);
    std::fs::write(&t, text).unwrap();
    refused(&f, "runs/candidate/p1/trace.jsonl");

    let f = build(&none);
    std::fs::remove_file(f.path("statements/solar.json")).unwrap();
    refused(&f, "SOLAR statement is missing");

    let f = build(&none);
    let p = f.path("solar/p2/p2-w0/conversion-attestation.yaml");
    std::fs::write(&p, "forged\n").unwrap();
    refused(&f, "conversion-attestation.yaml");

    // A symlink in place of a bound file.
    let f = build(&none);
    let env = f.path("runs/baseline/environment.json");
    let copy = f.path("elsewhere.json");
    std::fs::rename(&env, &copy).unwrap();
    std::os::unix::fs::symlink(&copy, &env).unwrap();
    refused(&f, "not a regular file");
}

#[test]
fn incomplete_or_inconsistent_evidence_is_refused_even_when_hashes_match() {
    let cases: Vec<(&str, Hook)> = vec![
        (
            "expected `sol_execbench.release_bundle.v2`",
            Box::new(|n, v| {
                if n == "bundle" {
                    v["schema_version"] = json!("sol_execbench.release_bundle.v1")
                }
            }),
        ),
        (
            "invalid release bundle",
            Box::new(|n, v| {
                if n == "bundle" {
                    v["score"] = json!(1.0)
                }
            }),
        ),
        (
            "path must be relative",
            Box::new(|n, v| {
                if n == "bundle" {
                    v["solar"]["path"] = json!("../solar.json")
                }
            }),
        ),
        (
            "one Git SHA-1",
            Box::new(|n, v| {
                if n == "candidate" {
                    v["source_revision"] = json!("1111111111111111111111111111111111111111")
                }
            }),
        ),
        (
            "not the corpus-pinned",
            Box::new(|n, v| {
                if n == "baseline" {
                    v["baseline_id"] = json!("someone-else")
                }
            }),
        ),
        (
            "every one must pass",
            Box::new(|n, v| {
                if n == "trace:baseline:p2" {
                    v[0]["evaluation"]["status"] = json!("RUNTIME_ERROR")
                }
            }),
        ),
        (
            "paper timing protocol",
            Box::new(|n, v| {
                if n == "trace:candidate:p1" {
                    v[1]["evaluation"]["performance"]["trials"] = json!(1)
                }
            }),
        ),
        (
            "covers 1 workloads, the corpus lists 2",
            Box::new(|n, v| {
                if n == "trace:candidate:p1" {
                    v.as_array_mut().unwrap().pop();
                }
            }),
        ),
        (
            "covers 1 problems, the corpus scores 2",
            Box::new(|n, v| {
                if n == "candidate" {
                    v["problems"].as_array_mut().unwrap().pop();
                }
            }),
        ),
        (
            "runtime identities",
            Box::new(|n, v| {
                if n == "trace:candidate:p2" {
                    v[0]["evaluation"]["environment"]["libs"]["torch"] = json!("2.13.0")
                }
            }),
        ),
        (
            "lacks the published artifact `conversion-attestation.yaml`",
            Box::new(|n, v| {
                if n == "manifest:p1:p1-w0" {
                    v["artifacts"]
                        .as_array_mut()
                        .unwrap()
                        .retain(|a| a["path"] != "conversion-attestation.yaml");
                }
            }),
        ),
        (
            "not a publication-eligible formal bound",
            Box::new(|n, v| {
                if n == "manifest:p1:p1-w1" {
                    v["publication_eligible"] = json!(false)
                }
            }),
        ),
        (
            "SOLAR 2; they must be the same set",
            Box::new(|n, v| {
                if n == "solar" {
                    v["entries"].as_array_mut().unwrap().pop();
                }
            }),
        ),
        (
            "faster than T_SOL",
            Box::new(|n, v| {
                if n == "trace:candidate:p1" {
                    v[0]["evaluation"]["performance"]["latency_ms"] = json!(0.5)
                }
            }),
        ),
        (
            "does not authorise official scoring",
            Box::new(|n, v| {
                if n == "corpus" {
                    v["official_scoring"]["status"] = json!("unavailable")
                }
            }),
        ),
    ];
    for (want, hook) in cases {
        let f = build(&*hook);
        refused(&f, want);
    }
}
