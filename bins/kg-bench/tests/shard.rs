//! `kg-bench run --shard K/N` and `kg-bench merge` end to end on the CPU: the shards of a small
//! corpus merge into what one host would have written, and a merge refuses a missing shard, a
//! shard given twice, a shard of another corpus or solution set, and an edited trace. They need
//! a Python with torch (`KG_TEST_PYTHON`, else `.venv/bin/python`); without it they fail.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Output;

use kg_test_support::{copy_tree, python};
use serde_json::Value;

mod common;
use common::{FAST, kg};

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/same_name")
}

fn text(o: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs shard `k` of `n` of `corpus` (bundled solutions) into `out`.
fn shard(py: &Path, tmp: &Path, corpus: &Path, k: u32, n: u32, out: &Path) {
    let o = kg(py, tmp)
        .arg("run")
        .arg(corpus)
        .args([
            "--solutions",
            "bundled",
            "--shard",
            &format!("{k}/{n}"),
            "-o",
        ])
        .arg(out)
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(out.join("shard.json").is_file(), "{}", text(&o));
}

fn merge(py: &Path, tmp: &Path, out: &Path, shards: &[&Path]) -> Output {
    kg(py, tmp)
        .arg("merge")
        .arg(out)
        .args(shards)
        .output()
        .unwrap()
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The summary fields a merge must reproduce (the seal, run id, heads' hashes and provenance
/// differ between any two runs).
fn comparable(mut s: Value) -> Value {
    let files: Vec<String> = s["chain"]["heads"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let o = s.as_object_mut().unwrap();
    o.remove("chain");
    o.remove("merged_from");
    o.insert("trace_files".into(), files.into());
    s
}

#[test]
fn shards_merge_into_the_run_one_host_writes_and_the_merge_verifies() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (s1, s2, one, merged) = (t.join("s1"), t.join("s2"), t.join("one"), t.join("merged"));
    shard(&py, t, &corpus(), 1, 2, &s1);
    shard(&py, t, &corpus(), 2, 2, &s2);
    // Disjoint and complete: the larger pair (two workloads) on shard 1, the other on 2.
    let m1 = json(&s1.join("shard.json"));
    assert_eq!(m1["pairs"][0]["trace"], "large/double_triton.jsonl", "{m1}");
    assert_eq!(m1["pairs"][0]["shard"], 1, "{m1}");
    assert_eq!(m1["pairs"][1]["shard"], 2, "{m1}");
    assert!(s1.join("large/double_triton.jsonl").is_file());
    assert!(!s1.join("small").exists());
    assert!(s2.join("small/double_pytorch.jsonl").is_file());
    assert!(!s2.join("large").exists());
    assert_eq!(
        json(&s2.join("shard.json"))["corpus_sha256"],
        m1["corpus_sha256"]
    );

    let o = kg(&py, t)
        .arg("run")
        .arg(corpus())
        .args(["--solutions", "bundled", "-o"])
        .arg(&one)
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // Shards in any order.
    let o = merge(&py, t, &merged, &[&s2, &s1]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let m = json(&merged.join("summary.json"));
    assert_eq!(
        comparable(m.clone()),
        comparable(json(&one.join("summary.json")))
    );
    assert_eq!(m["merged_from"][0]["shard"]["k"], 1, "{m}");
    assert_eq!(m["merged_from"][1]["dir"], s2.display().to_string(), "{m}");
    // Byte copies: the shard's chain, and the merged summary's seal, verify.
    assert_eq!(
        std::fs::read(merged.join("small/double_pytorch.jsonl")).unwrap(),
        std::fs::read(s2.join("small/double_pytorch.jsonl")).unwrap()
    );
    let o = kg(&py, t)
        .args(["verify", "--summary"])
        .arg(merged.join("summary.json"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // A second merge into the same place would overwrite the run: refused.
    let o = merge(&py, t, &merged, &[&s1, &s2]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("summary.json` exists"), "{}", text(&o));
}

#[test]
fn merge_refuses_missing_duplicated_foreign_and_edited_shards() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let (s1, s2) = (t.join("s1"), t.join("s2"));
    shard(&py, t, &corpus(), 1, 2, &s1);
    shard(&py, t, &corpus(), 2, 2, &s2);
    let refused = |shards: &[&Path], code: i32, needle: &str| {
        let out = t.join("out");
        let o = merge(&py, t, &out, shards);
        assert_eq!(o.status.code(), Some(code), "{needle}: {}", text(&o));
        assert!(text(&o).contains(needle), "{needle}: {}", text(&o));
        assert!(
            !out.join("summary.json").exists(),
            "{needle}: wrote a summary"
        );
        assert!(!out.join("large").exists(), "{needle}: wrote a trace");
    };
    refused(&[&s1], 2, "shard(s) 2 of 2 missing (given: 1)");
    let copy = t.join("s1-copy");
    copy_tree(&s1, &copy);
    refused(&[&s1, &s2, &copy], 2, "shard 1/2 is given twice");
    refused(&[&s1, &t.join("nowhere")], 2, "no `shard.json`");

    // Shard 2 of a corpus whose problem changed in between.
    let changed = t.join("changed");
    copy_tree(&corpus(), &changed);
    let w = changed.join("small/workload.jsonl");
    let body = std::fs::read_to_string(&w).unwrap();
    std::fs::write(&w, body.replace("fx-double-small-4", "fx-double-small-4b")).unwrap();
    let s2c = t.join("s2-changed");
    shard(&py, t, &changed, 2, 2, &s2c);
    refused(&[&s1, &s2c], 2, "is a shard of another corpus");

    // Shard 2 with another --max-workloads: another solution set.
    let s2m = t.join("s2-max");
    let o = kg(&py, t)
        .arg("run")
        .arg(corpus())
        .args([
            "--solutions",
            "bundled",
            "--shard",
            "2/2",
            "--max-workloads",
            "1",
            "-o",
        ])
        .arg(&s2m)
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    refused(&[&s1, &s2m], 2, "evaluated another solution set");

    // One byte of a latency changed in shard 1's trace.
    let edited = t.join("s1-edited");
    copy_tree(&s1, &edited);
    let f = edited.join("large/double_triton.jsonl");
    let body = std::fs::read_to_string(&f).unwrap();
    let key = "\"latency_ms\":";
    let at = body.find(key).unwrap() + key.len();
    let digit = if &body[at..=at] == "1" { "2" } else { "1" };
    std::fs::write(&f, format!("{}{digit}{}", &body[..at], &body[at + 1..])).unwrap();
    refused(&[&edited, &s2], 1, "large/double_triton.jsonl:1:");

    // A shard manifest edited to move a pair to the other shard.
    let moved = t.join("s2-moved");
    copy_tree(&s2, &moved);
    let m = moved.join("shard.json");
    let body = std::fs::read_to_string(&m).unwrap();
    std::fs::write(&m, body.replacen("\"shard\": 2\n", "\"shard\": 1\n", 1)).unwrap();
    refused(&[&s1, &moved], 2, "does not agree with itself");

    // A shard asked for beyond the pairs there are.
    let o = kg(&py, t)
        .arg("run")
        .arg(corpus())
        .args(["--solutions", "bundled", "--shard", "3/3", "-o"])
        .arg(t.join("s3"))
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("use at most 2 shard(s)"), "{}", text(&o));
}
