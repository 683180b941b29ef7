//! Unit tests of writing, sealing, signing and verifying chained trace files.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::write::seal_line;
use super::*;
use crate::io::sha256_hex;
use crate::solution::Solution;
use crate::trace::{Evaluation, Status, Trace};
use crate::workload::Workload;

fn trace(uuid: &str, latency: f64) -> Trace {
    let eval: Evaluation = serde_json::from_value(serde_json::json!({
        "status": "PASSED", "log": "ok",
        "correctness": {"max_relative_error": 0.0, "max_absolute_error": 0.0, "has_nan": false, "has_inf": false},
        "performance": {"latency_ms": latency, "reference_latency_ms": 2.0, "speedup_factor": 2.0 / latency},
        "environment": {"hardware": "CPU", "libs": {}},
        "timestamp": "2026-12-04T00:00:00Z"
    }))
    .unwrap();
    assert_eq!(eval.status, Status::Passed);
    Trace {
        definition: "add".into(),
        solution: Some("s".into()),
        workload: serde_json::from_value::<Workload>(
            serde_json::json!({"uuid": uuid, "axes": {}, "inputs": {}}),
        )
        .unwrap(),
        evaluation: Some(eval),
        kernelgate_chain: None,
    }
}

fn manifest(tree: &str) -> Manifest {
    Manifest {
        kernelgate_version: "0.1.0".into(),
        run_id: "r1".into(),
        definition: "add".into(),
        problem_tree_sha256: tree.into(),
        solution: "s".into(),
        solution_sha256: "00".into(),
    }
}

/// A file of two batches (2 lines, then 3), signed when `signer` is given.
fn chain_file(signer: Option<&TraceSigner>) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("t.jsonl");
    let m = manifest("tree");
    write_traces(
        &p,
        &[trace("w0", 1.0), trace("w1", 1.5)],
        &m,
        signer,
        WriteMode::Append,
    )
    .unwrap();
    write_traces(
        &p,
        &[trace("w2", 1.0), trace("w3", 1.25), trace("w4", 0.5)],
        &m,
        signer,
        WriteMode::Append,
    )
    .unwrap();
    (d, p)
}

fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The line with one byte of its latency changed (its first digit, 1 <-> 0).
fn edit_latency(line: &str) -> String {
    let key = "\"latency_ms\":";
    let at = line.find(key).expect("a PASSED line") + key.len();
    let digit = if &line[at..at + 1] == "1" { "0" } else { "1" };
    format!("{}{digit}{}", &line[..at], &line[at + 1..])
}

fn write_lines(p: &Path, l: &[String]) {
    std::fs::write(p, l.join("\n") + "\n").unwrap();
}

fn verify(p: &Path) -> FileReport {
    verify_file(p, &VerifyOptions::default()).unwrap()
}

fn signer() -> (tempfile::TempDir, TraceSigner, TrustedKey) {
    let d = tempfile::tempdir().unwrap();
    let k = d.path().join("key");
    let public = generate_key(&k).unwrap();
    let s = load_signing_key(&k).unwrap();
    assert_eq!(load_public_key(&public_key_path(&k)).unwrap(), public);
    (d, s, public)
}

#[test]
fn a_written_chain_verifies_and_reads_back_as_traces() {
    let (_d, p) = chain_file(None);
    let r = verify(&p);
    assert!(r.ok(), "{:?}", r.findings);
    assert_eq!(r.lines, 5);
    let (traces, _) = crate::trace::load_traces(&p).unwrap();
    let seqs: Vec<u64> = traces
        .iter()
        .map(|t| t.kernelgate_chain.as_ref().unwrap().seq)
        .collect();
    assert_eq!(seqs, vec![0, 1, 2, 3, 4]);
    let c = traces[3].kernelgate_chain.as_ref().unwrap();
    assert_eq!(c.batch, Batch { index: 1, count: 3 });
    assert_eq!(
        c.prev_sha256.as_deref(),
        Some(sha256_hex(lines(&p)[2].as_bytes()).as_str())
    );
    assert_eq!(r.head.unwrap(), file_head(&p).unwrap().unwrap());
}

#[test]
fn an_edited_line_fails_even_the_last_one() {
    for at in [1usize, 4] {
        let (_d, p) = chain_file(None);
        let mut l = lines(&p);
        l[at] = edit_latency(&l[at]);
        write_lines(&p, &l);
        let r = verify(&p);
        assert!(!r.ok());
        assert_eq!(r.findings[0].line, Some(at + 1), "{:?}", r.findings);
        assert!(
            r.findings[0].message.contains("seal does not match"),
            "{:?}",
            r.findings
        );
    }
}

#[test]
fn reordered_lines_fail() {
    let (_d, p) = chain_file(None);
    let mut l = lines(&p);
    l.swap(2, 3);
    write_lines(&p, &l);
    let r = verify(&p);
    assert!(!r.ok());
    assert_eq!(r.findings[0].line, Some(3), "{:?}", r.findings);
    assert!(
        r.findings[0].message.contains("reordered"),
        "{:?}",
        r.findings
    );
}

#[test]
fn a_deleted_middle_line_fails_once() {
    let (_d, p) = chain_file(None);
    let mut l = lines(&p);
    l.remove(3);
    write_lines(&p, &l);
    let r = verify(&p);
    assert!(!r.ok());
    assert!(
        r.findings.iter().all(|f| f.line == Some(4)),
        "{:?}",
        r.findings
    );
    assert!(
        r.findings[0]
            .message
            .contains("has seq 4 after line 3 with seq 2")
    );
}

#[test]
fn truncation_inside_a_batch_and_of_bytes_fails() {
    // Bytes cut from the last line.
    let (_d, p) = chain_file(None);
    let bytes = std::fs::read(&p).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() - 10]).unwrap();
    let r = verify(&p);
    assert_eq!(r.findings[0].line, Some(5), "{:?}", r.findings);
    assert!(r.findings[0].message.contains("torn"), "{:?}", r.findings);
    // Only the newline cut: still torn.
    std::fs::write(&p, &bytes[..bytes.len() - 1]).unwrap();
    assert!(verify(&p).findings[0].message.contains("torn"));
    // The last whole line of a batch cut.
    let mut l = lines_of(&bytes);
    l.pop();
    write_lines(&p, &l);
    let r = verify(&p);
    assert!(!r.ok());
    assert!(
        r.findings[0].message.contains("inside a batch"),
        "{:?}",
        r.findings
    );
    // A whole batch cut from the end: the file alone cannot tell, its head can.
    let mut l = lines_of(&bytes);
    l.truncate(2);
    write_lines(&p, &l);
    assert!(verify(&p).ok());
    let head = verify_bytes(&p, &bytes, &VerifyOptions::default()).head;
    let r = verify_file(
        &p,
        &VerifyOptions {
            expected_head: head,
            ..VerifyOptions::default()
        },
    )
    .unwrap();
    assert!(
        r.findings[0].message.contains("recorded head is line 5"),
        "{:?}",
        r.findings
    );
    // The first lines cut.
    let mut l = lines_of(&bytes);
    l.drain(..2);
    write_lines(&p, &l);
    assert!(
        verify(&p).findings[0]
            .message
            .contains("cut from the start")
    );
    // Empty.
    std::fs::write(&p, "").unwrap();
    assert!(!verify(&p).ok());
}

fn lines_of(b: &[u8]) -> Vec<String> {
    String::from_utf8(b.to_vec())
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Rebuilds the chain links and unsigned seals from line `from` on, as a forger who knows
/// the format would.
fn reseal_from(l: &mut [String], from: usize) {
    for i in from..l.len() {
        let mut t: Trace = serde_json::from_str(&l[i]).unwrap();
        let c = t.kernelgate_chain.as_mut().unwrap();
        c.seal = None;
        c.signer = None;
        c.prev_sha256 = (i > 0).then(|| sha256_hex(l[i - 1].as_bytes()));
        let record = c.clone();
        let (line, _) = seal_line(&t, record, None).unwrap();
        l[i] = line;
    }
}

#[test]
fn a_forged_line_with_recomputed_hashes_fails_only_under_a_trusted_key() {
    let (_k, s, public) = signer();
    let (_d, p) = chain_file(Some(&s));
    let trusted = VerifyOptions {
        trusted_key: Some(public.clone()),
        ..VerifyOptions::default()
    };
    let r = verify_file(&p, &trusted).unwrap();
    assert!(r.ok(), "{:?}", r.findings);
    assert_eq!(r.signed_lines, 5);
    assert_eq!(r.signers, vec![public.hex()]);
    let mut l = lines(&p);
    l[1] = edit_latency(&l[1]);
    // Keeping the old signature: it no longer verifies, under any key.
    let mut kept = l.clone();
    reseal_signed_keep_signature(&mut kept, 2);
    write_lines(&p, &kept);
    let r = verify(&p);
    assert_eq!(r.findings[0].line, Some(2), "{:?}", r.findings);
    assert!(r.findings[0].message.contains("signature does not verify"));
    // A whole new unsigned chain: consistent, so only the trusted key tells.
    reseal_from(&mut l, 1);
    write_lines(&p, &l);
    assert!(verify(&p).ok(), "{:?}", verify(&p).findings);
    let r = verify_file(&p, &trusted).unwrap();
    assert!(!r.ok());
    assert_eq!(r.findings[0].line, Some(2), "{:?}", r.findings);
    assert!(
        r.findings[0].message.contains("not signed"),
        "{:?}",
        r.findings
    );
    // Signed by another key: named as such.
    let (_k2, other, _) = signer();
    let (_d2, p2) = chain_file(Some(&other));
    let r = verify_file(&p2, &trusted).unwrap();
    assert!(r.findings[0].message.contains("not by the trusted key"));
}

/// Relinks lines from `from` on without touching their (signed) seals.
fn reseal_signed_keep_signature(l: &mut [String], from: usize) {
    for i in from..l.len() {
        let t: Trace = serde_json::from_str(&l[i]).unwrap();
        let old = t.kernelgate_chain.unwrap().prev_sha256.unwrap();
        l[i] = l[i].replacen(&old, &sha256_hex(l[i - 1].as_bytes()), 1);
    }
}

#[test]
fn a_changed_problem_file_fails_against_the_problem_directory() {
    let d = tempfile::tempdir().unwrap();
    let prob = d.path().join("add");
    std::fs::create_dir(&prob).unwrap();
    std::fs::write(prob.join("definition.json"), "{\"name\":\"add\"}").unwrap();
    std::fs::write(prob.join("workload.jsonl"), "{\"atol\":0.01}\n").unwrap();
    let tree = crate::tree::tree_sha256(&prob).unwrap();
    let p = d.path().join("t.jsonl");
    write_traces(
        &p,
        &[trace("w0", 1.0)],
        &manifest(&tree),
        None,
        WriteMode::Append,
    )
    .unwrap();
    let opts = |t: &str| VerifyOptions {
        problems: BTreeMap::from([(
            "add".to_string(),
            ExpectedProblem {
                dir: prob.clone(),
                tree_sha256: t.to_string(),
            },
        )]),
        ..VerifyOptions::default()
    };
    assert!(verify_file(&p, &opts(&tree)).unwrap().ok());
    std::fs::write(prob.join("workload.jsonl"), "{\"atol\":9.99}\n").unwrap();
    let now = crate::tree::tree_sha256(&prob).unwrap();
    let r = verify_file(&p, &opts(&now)).unwrap();
    assert!(!r.ok());
    assert!(
        r.findings[0].message.contains("problem tree"),
        "{:?}",
        r.findings
    );
    // A trace of a definition no --problem defines.
    let mut other = opts(&now);
    let e = other.problems.remove("add").unwrap();
    other.problems.insert("mul".into(), e);
    assert!(
        verify_file(&p, &other).unwrap().findings[0]
            .message
            .contains("none of the --problem")
    );
}

#[test]
fn unchained_old_traces_read_but_do_not_verify_and_are_not_appended_to() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("old.jsonl");
    let old = crate::io::to_json_line(&trace("w0", 1.0), "trace").unwrap();
    std::fs::write(&p, &old).unwrap();
    assert_eq!(crate::trace::load_traces(&p).unwrap().0.len(), 1);
    assert!(
        verify(&p).findings[0]
            .message
            .contains("no `kernelgate_chain`")
    );
    let e = write_traces(
        &p,
        &[trace("w1", 1.0)],
        &manifest("t"),
        None,
        WriteMode::Append,
    )
    .unwrap_err();
    assert!(e.to_string().contains("refusing to append"), "{e}");
    // Replace starts a new chain.
    write_traces(
        &p,
        &[trace("w1", 1.0)],
        &manifest("t"),
        None,
        WriteMode::Replace,
    )
    .unwrap();
    assert!(verify(&p).ok());
    assert!(!d.path().read_dir().unwrap().any(|e| {
        e.unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(".kg-tmp")
    }));
}

#[test]
fn an_empty_batch_creates_nothing() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("sub/t.jsonl");
    let w = write_traces(&p, &[], &manifest("t"), None, WriteMode::Append).unwrap();
    assert_eq!(w.head.lines, 0);
    assert!(!p.parent().unwrap().exists());
}

#[test]
fn concurrent_writers_lose_nothing_and_keep_the_chain() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("t.jsonl");
    let threads: Vec<_> = (0..8)
        .map(|w| {
            let p = p.clone();
            std::thread::spawn(move || {
                for i in 0..10 {
                    let batch: Vec<Trace> = (0..3)
                        .map(|j| trace(&format!("w{w}-{i}-{j}"), 1.0))
                        .collect();
                    write_traces(&p, &batch, &manifest("t"), None, WriteMode::Append).unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let r = verify(&p);
    assert!(r.ok(), "{:?}", r.findings);
    assert_eq!(r.lines, 8 * 10 * 3);
}

#[test]
fn a_run_chain_records_heads_and_catches_a_cut_batch_and_an_edit() {
    let (_k, s, public) = signer();
    let (d, p) = chain_file(Some(&s));
    // A file the run never wrote (its directory neither) is left out.
    let never = d.path().join("never/written.jsonl");
    let rc = RunChain::seal(d.path(), "r1", &[p.clone(), never.clone()], Some(&s)).unwrap();
    assert_eq!(rc.heads["t.jsonl"].lines, 5);
    assert_eq!(rc.heads.len(), 1);
    assert!(!never.parent().unwrap().exists());
    let summary = d.path().join("summary.json");
    let doc = serde_json::json!({"schema_version": 2, "chain": rc});
    std::fs::write(&summary, serde_json::to_string_pretty(&doc).unwrap()).unwrap();
    let trusted = VerifyOptions {
        trusted_key: Some(public),
        ..VerifyOptions::default()
    };
    let r = verify_run(&summary, &trusted).unwrap();
    assert!(r.ok(), "{r:?}");
    // The last batch cut: the file alone verifies, the summary does not.
    let mut l = lines(&p);
    l.truncate(2);
    write_lines(&p, &l);
    assert!(verify_file(&p, &trusted).unwrap().ok());
    let r = verify_run(&summary, &trusted).unwrap();
    assert!(!r.ok());
    assert!(r.files[0].findings[0].message.contains("recorded head"));
    // The recorded head edited to match: its signature breaks.
    let mut doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    doc["chain"]["heads"]["t.jsonl"] =
        serde_json::to_value(file_head(&p).unwrap().unwrap()).unwrap();
    std::fs::write(&summary, doc.to_string()).unwrap();
    let r = verify_run(&summary, &trusted).unwrap();
    assert!(r.files[0].ok());
    assert!(
        r.findings[0].message.contains("signature does not verify"),
        "{r:?}"
    );
}

#[test]
fn keys_are_private_never_overwritten_and_checked() {
    let d = tempfile::tempdir().unwrap();
    let k = d.path().join("key");
    generate_key(&k).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&k).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            load_signing_key(&k)
                .unwrap_err()
                .to_string()
                .contains("chmod 600")
        );
        std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    assert!(
        generate_key(&k).is_err(),
        "an existing key is never overwritten"
    );
    let s = load_signing_key(&k).unwrap();
    assert!(!format!("{s:?}").contains(&std::fs::read_to_string(&k).unwrap()[26..]));
    assert!(
        load_public_key(&k).is_err(),
        "a private key is not a public key"
    );
}

#[test]
fn solution_hash_ignores_formatting_but_not_content() {
    let a: Solution = serde_json::from_value(serde_json::json!({
        "name": "s", "definition": "add", "author": "a",
        "spec": {"languages": ["pytorch"], "target_hardware": ["cpu"], "entry_point": "m.py::run"},
        "sources": [{"path": "m.py", "content": "def run(x): return x"}]
    }))
    .unwrap();
    let mut b = a.clone();
    assert_eq!(solution_sha256(&a).unwrap(), solution_sha256(&b).unwrap());
    b.sources[0].content.push(' ');
    assert_ne!(solution_sha256(&a).unwrap(), solution_sha256(&b).unwrap());
}
