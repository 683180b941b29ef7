//! End-to-end tests of `kg-bench` on the fixtures in `crates/exec/tests/fixtures` (and, when
//! present, the corpus's `fixtures/evaluate/manifest.json`). They need a Python with torch: the
//! interpreter comes from `KG_TEST_PYTHON`, else `<workspace>/.venv/bin/python`, else `python3`.
//! Without torch they fail (run `cargo xtask setup`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use kg_contract::{Status, Trace};
use kg_test_support::{python, workspace};

mod common;
use common::{FAST, kg, traces_in};

fn fixtures() -> PathBuf {
    workspace().join("crates/exec/tests/fixtures")
}

/// Pids of live (non-zombie) processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if stat.contains(") Z ") {
            continue;
        }
        if String::from_utf8_lossy(&cmd).contains(needle) {
            out.push(pid);
        }
    }
    out
}

fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    f()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[derive(serde::Deserialize)]
#[allow(dead_code)]
struct Case {
    case: String,
    problem: String,
    solution: String,
    expected: String,
    /// The status where the candidate saw the problem directory read-only (mount namespaces
    /// allowed): the attempt is prevented instead of detected.
    #[serde(default)]
    expected_when_read_only: Option<String>,
    /// The trace's `reason` code (null for PASSED; none where the read-only status applies).
    reason: Option<String>,
}

/// Whether the candidate ran with a read-only filesystem view, as the trace's typed
/// isolation report says.
fn ran_read_only(e: &kg_contract::Evaluation) -> bool {
    e.environment.isolation.as_ref().is_some_and(|i| {
        i.layers
            .iter()
            .any(|l| l.layer == kg_contract::Layer::ReadOnlyFilesystem && l.held)
    })
}

#[test]
fn every_fixture_gets_its_status_and_the_run_continues() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("results");
    let pidfile = tmp.path().join("helpers.pid");
    let o = kg(&py, tmp.path())
        .env("KG_TEST_PIDFILE", &pidfile)
        .args(["run"])
        .arg(fixtures().join("corpus"))
        .args(["--solutions", "bundled", "--timeout", "6", "-o"])
        .arg(&out)
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "stderr: {}", stderr(&o));
    let manifest: Vec<Case> =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("manifest.json")).unwrap())
            .unwrap();
    let mut seen = BTreeMap::new();
    for c in &manifest {
        let sol: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(fixtures().join(&c.solution)).unwrap())
                .unwrap();
        // Keyed by the problem's path in the corpus (`add`), not its definition name.
        let path = out
            .join(Path::new(&c.problem).file_name().unwrap())
            .join(format!("{}.jsonl", sol["name"].as_str().unwrap()));
        let traces = traces_in(&path);
        // Both workloads evaluated: a failure never stops the run.
        assert_eq!(traces.len(), 2, "{}: {} traces", c.case, traces.len());
        for t in &traces {
            let e = t.evaluation.as_ref().unwrap();
            let (expected, reason) = match &c.expected_when_read_only {
                Some(x) if ran_read_only(e) => (x, None),
                _ => (&c.expected, c.reason.as_deref()),
            };
            assert_eq!(e.status.as_str(), expected, "{}: log: {}", c.case, e.log);
            assert_eq!(
                e.reason.map(|r| r.to_string()).as_deref(),
                reason,
                "{}: the trace's reason code",
                c.case
            );
            assert_eq!(
                e.correctness.is_some(),
                e.status.has_correctness(),
                "{}",
                c.case
            );
            assert_eq!(
                e.performance.is_some(),
                e.status.has_performance(),
                "{}",
                c.case
            );
            if let Some(p) = &e.performance {
                assert_eq!(p.timing_method, Some(kg_contract::TimingMethod::CpuWall));
                let s = p.spread.as_ref().unwrap();
                assert!(s.min_ms <= s.median_ms && s.median_ms <= s.max_ms);
                assert!(p.latency_ms > 0.0 && p.reference_latency_ms > 0.0);
            }
            assert_eq!(e.environment.device.as_ref().unwrap().kind, "cpu");
        }
        seen.insert(c.case.clone(), traces[0].evaluation.clone().unwrap());
    }
    // Specific evidence in the logs.
    assert!(
        seen["add/segfault"].log.contains("SIGSEGV"),
        "{}",
        seen["add/segfault"].log
    );
    assert!(
        seen["add/raises"]
            .log
            .contains("kernel exploded on purpose")
    );
    assert!(seen["add/hang"].log.contains("--timeout"));
    let forged = &seen["add/forge_extra_samples"].log;
    assert!(
        forged.contains("timing samples not bound to the timed calls"),
        "{forged}"
    );
    let flood = &seen["add/flood_socket"].log;
    assert!(flood.contains("per-message bound of"), "{flood}");
    // With the read-only view the plant lands nowhere the judge loads (its status, from the
    // problem directory's content check, says so); without it, it is REWARD_HACK above.
    assert!(seen["add/syntax_error"].log.contains("SyntaxError"));
    assert!(
        seen["add/passed_value_returning"]
            .log
            .contains("hello from the candidate")
    );
    assert!(
        seen["const_reference/ok"]
            .log
            .contains("does not depend on its inputs")
    );
    assert!(
        seen["nan_reference/ok"]
            .log
            .contains("output `out` is NaN everywhere"),
        "{}",
        seen["nan_reference/ok"].log
    );
    // Every status except REWARD_HACK is covered by these fixtures.
    for s in Status::ALL {
        if s != Status::RewardHack {
            assert!(
                seen.values().any(|e| e.status == s),
                "no fixture produced {s}"
            );
        }
    }
    // summary.json counts match the traces.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let total: u64 = summary["totals"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(total as usize, manifest.len() * 2);
    assert_eq!(summary["totals"]["TIMEOUT"], 2);
    // The helpers of the hang and detached_child fixtures (their command lines carry the pid
    // file's path, under `tmp`) died with their candidates; no worker is left.
    let left = processes_mentioning(&tmp.path().display().to_string());
    assert!(
        left.is_empty(),
        "worker or helper processes left behind: {left:?}"
    );
    // A second run skips finished problems.
    let o = kg(&py, tmp.path())
        .args(["run"])
        .arg(fixtures().join("corpus"))
        .args(["--solutions", "bundled", "-o"])
        .arg(&out)
        .args(FAST)
        .output()
        .unwrap();
    assert!(
        stderr(&o).contains("all PASSED; --rerun evaluates it again); skipped")
            || stderr(&o).contains("did not pass; --rerun-failed evaluates it again); skipped"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn evaluate_writes_traces_and_prints_json() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let traces = tmp.path().join("t.jsonl");
    let o = kg(&py, tmp.path())
        .args(["evaluate"])
        .arg(fixtures().join("corpus/add"))
        .arg("--solution")
        .arg(fixtures().join("corpus/add/solutions/passed_triton.json"))
        .args(["--json", "-o"])
        .arg(&traces)
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let printed: Vec<Trace> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(printed.len(), 2);
    assert_eq!(traces_in(&traces), printed);
    // --workloads selects by uuid; an unknown uuid is a usage error.
    let o = kg(&py, tmp.path())
        .args(["evaluate"])
        .arg(fixtures().join("corpus/add"))
        .arg("--solution")
        .arg(fixtures().join("corpus/add/solutions/passed_pytorch_dps.json"))
        .args(["--workloads", "no-such-uuid"])
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no-such-uuid"));
}

/// A problem whose input generator does not follow its seed (it adds Python's own per-process
/// random number, which the judge and the candidate draw differently): the rounds and the timed
/// sets fall back to files, and the reference as the candidate still PASSES.
#[test]
fn inputs_fall_back_to_files_when_the_candidate_draws_other_bytes() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    // One workload; its PASSED trace's log.
    let log_of = |problem: &Path| -> String {
        let o = kg(&py, tmp.path())
            .args(["evaluate"])
            .arg(problem)
            .args(["--solution", "reference", "--json", "--max-workloads", "1"])
            .args(FAST)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
        let t: Vec<Trace> = serde_json::from_slice(&o.stdout).unwrap();
        t[0].evaluation.as_ref().unwrap().log.clone()
    };
    let log = log_of(&fixtures().join("unseeded_generator"));
    assert!(
        log.contains("round inputs: files (the candidate's generator did not reproduce"),
        "{log}"
    );
    assert!(
        log.contains("timed input sets: sealed files (the candidate's generator did not reproduce"),
        "{log}"
    );
    // A generator that follows its seed draws in the candidate.
    let log = log_of(&fixtures().join("corpus/add"));
    assert!(
        log.contains("round inputs: drawn in the candidate"),
        "{log}"
    );
    assert!(
        log.contains("timed input sets: drawn in the candidate"),
        "{log}"
    );
}

#[test]
fn evaluate_solution_reference_times_the_reference_against_itself() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let o = kg(&py, tmp.path())
        .args(["evaluate"])
        .arg(fixtures().join("corpus/add"))
        .args(["--solution", "reference", "--json"])
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let printed: Vec<Trace> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(printed.len(), 2);
    for t in &printed {
        assert_eq!(t.solution.as_deref(), Some("reference"));
        let e = t.evaluation.as_ref().expect("an evaluated trace");
        assert_eq!(e.status, Status::Passed);
        let p = e
            .performance
            .as_ref()
            .expect("a PASSED trace has performance");
        assert!(p.latency_ms > 0.0 && p.reference_latency_ms > 0.0);
        // Where the harness time goes, per workload, as typed fields (the log says it in words).
        let ph = p.phases.expect("a timed workload has its phases");
        assert!(
            ph.correctness_rounds_s > 0.0 && ph.timed_batch_s > 0.0 && ph.reference_timing_s > 0.0,
            "{ph:?}"
        );
    }
    // A file named `reference` that exists is read as a solution file, not the shorthand.
    std::fs::write(tmp.path().join("reference"), "not json").unwrap();
    let o = kg(&py, tmp.path())
        .current_dir(tmp.path())
        .args(["evaluate"])
        .arg(fixtures().join("corpus/add"))
        .args(["--solution", "reference"])
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "stderr: {}", stderr(&o));
}

#[test]
fn candidate_environment_is_allow_listed() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let run = |secret: bool| {
        let mut c = kg(&py, tmp.path());
        c.env("TRITON_KGTEST_VISIBLE", "1");
        if secret {
            c.env("KGTEST_SECRET_TOKEN", "hunter2");
            // No `KG_*` wildcard: kernelgate's own prefix is no pass for a planted secret.
            c.env("KG_SECRET_TOKEN", "hunter3");
        }
        c.args(["evaluate"])
            .arg(fixtures().join("corpus/add"))
            .arg("--solution")
            .arg(fixtures().join("env/env_probe.json"))
            .args(["--json"])
            .args(FAST)
            .output()
            .unwrap()
    };
    let o = run(true);
    let printed: Vec<Trace> = serde_json::from_slice(&o.stdout).unwrap();
    for t in &printed {
        let e = t.evaluation.as_ref().unwrap();
        assert_eq!(e.status, Status::Passed, "{}", e.log);
    }
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
}

/// A numeric field out of its range (a tolerance of 1e300 broke even the reference) is a load
/// error naming file, line, field and range: `evaluate` refuses (exit 2), `dataset validate`
/// lists the problem as bad (exit 1).
#[test]
fn numeric_fields_out_of_range_are_refused_at_load() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    let p = corpus.join("huge_atol");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::copy(
        fixtures().join("corpus/add/definition.json"),
        p.join("definition.json"),
    )
    .unwrap();
    std::fs::write(
        p.join("workload.jsonl"),
        "{\"uuid\": \"a\", \"axes\": {\"n\": 8}, \"inputs\": {\"x\": {\"type\": \"random\"}, \"y\": {\"type\": \"random\"}}, \"tolerance\": {\"max_atol\": 1e300}}\n",
    )
    .unwrap();
    let want = "line 1 field `tolerance.max_atol`: is 1e300; expected a finite number in [0, 1e6]";
    let o = kg(&py, tmp.path())
        .args(["evaluate"])
        .arg(&p)
        .arg("--solution")
        .arg(fixtures().join("corpus/add/solutions/passed_pytorch_dps.json"))
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "stderr: {}", stderr(&o));
    assert!(stderr(&o).contains(want), "{}", stderr(&o));
    let o = kg(&py, tmp.path())
        .args(["dataset", "validate", "--device", "cpu"])
        .arg(&corpus)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "stderr: {}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("BAD") && out.contains(want), "{out}");
}

/// The sandbox prevents what the snapshot check only detects: with it, the planted module is
/// never written (where the OS allows mount namespaces); without it (`--no-sandbox`) the write
/// succeeds, the run is REWARD_HACK, and the planted file is removed again.
#[test]
fn problem_directory_is_read_only_or_tampering_is_caught() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let problem = tmp.path().join("add");
    std::fs::create_dir(&problem).unwrap();
    for f in ["definition.json", "workload.jsonl"] {
        std::fs::copy(fixtures().join("corpus/add").join(f), problem.join(f)).unwrap();
    }
    let run = |extra: &[&str]| -> Vec<Trace> {
        let o = kg(&py, tmp.path())
            .args(["evaluate"])
            .arg(&problem)
            .arg("--solution")
            .arg(fixtures().join("corpus/add/solutions/plant_in_problem_dir.json"))
            .args(["--json", "--max-workloads", "1"])
            .args(extra)
            .args(FAST)
            .output()
            .unwrap();
        assert!(
            !problem.join("numpy.py").exists(),
            "planted file left behind"
        );
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&o)))
    };
    let t = run(&["--no-sandbox"]);
    let e = t[0].evaluation.as_ref().unwrap();
    assert_eq!(e.status, Status::RewardHack, "{}", e.log);
    assert!(e.log.contains("isolation: none"), "{}", e.log);
    let t = run(&[]);
    let e = t[0].evaluation.as_ref().unwrap();
    if ran_read_only(e) {
        assert_eq!(e.status, Status::Passed, "{}", e.log);
    } else {
        assert_eq!(e.status, Status::RewardHack, "{}", e.log);
    }
}

/// `--sol`: a PASSED latency under the bound is REWARD_HACK; a workload without a bound is
/// unaffected; a bad file is a usage error naming it.
#[test]
fn latency_below_the_speed_of_light_floor_is_reward_hack() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let problem = fixtures().join("corpus/add");
    let uuids: Vec<String> = std::fs::read_to_string(problem.join("workload.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["uuid"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let sol = tmp.path().join("sol.jsonl");
    // One hour: no honest CPU latency is below it.
    std::fs::write(
        &sol,
        format!("{{\"definition\": \"kg_fixture_add\", \"workload\": \"{}\", \"t_sol_ms\": 3600000.0}}\n", uuids[0]),
    )
    .unwrap();
    let o = kg(&py, tmp.path())
        .args(["evaluate"])
        .arg(&problem)
        .args([
            "--solution",
            "reference",
            "--json",
            "--max-workloads",
            "2",
            "--sol",
        ])
        .arg(&sol)
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "stderr: {}", stderr(&o));
    let t: Vec<Trace> = serde_json::from_slice(&o.stdout).unwrap();
    let by_uuid = |u: &str| {
        t.iter()
            .find(|t| t.workload.uuid == u)
            .unwrap()
            .evaluation
            .as_ref()
            .unwrap()
    };
    let e = by_uuid(&uuids[0]);
    assert_eq!(e.status, Status::RewardHack, "{}", e.log);
    assert!(e.log.contains("speed-of-light floor"), "{}", e.log);
    assert_eq!(by_uuid(&uuids[1]).status, Status::Passed);
    assert!(
        stderr(&o).contains("bounds 1 of the 2 selected workload(s)"),
        "{}",
        stderr(&o)
    );
    std::fs::write(&sol, "{\"definition\": \"kg_fixture_add\"}\n").unwrap();
    let o = kg(&py, tmp.path())
        .args(["evaluate"])
        .arg(&problem)
        .args(["--solution", "reference", "--sol"])
        .arg(&sol)
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("sol.jsonl"), "{}", stderr(&o));
}

fn kill_mid_run(
    signal: &str,
) -> (
    tempfile::TempDir,
    std::process::ExitStatus,
    PathBuf,
    PathBuf,
) {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let traces = tmp.path().join("t.jsonl");
    let pidfile = tmp.path().join("helpers.pid");
    let mut child = kg(&py, tmp.path())
        .env("KG_TEST_PIDFILE", &pidfile)
        .args(["evaluate"])
        .arg(fixtures().join("corpus/add"))
        .arg("--solution")
        .arg(fixtures().join("corpus/add/solutions/hang.json"))
        .args(["--timeout", "3", "-o"])
        .arg(&traces)
        .args(FAST)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the second workload's hang to start (the first ended in TIMEOUT): a second
    // helper process (its command line carries the pid file's path; the sandboxed candidate
    // cannot write the file itself). Its trace is not on disk yet: traces are written only
    // once the candidate is gone.
    let needle = pidfile.display().to_string();
    let mut helpers = std::collections::BTreeSet::new();
    let second_hang = wait_until(Duration::from_secs(480), || {
        helpers.extend(processes_mentioning(&needle));
        helpers.len() >= 2
    });
    assert!(second_hang, "second workload never started");
    assert!(
        !traces.exists(),
        "a trace was written while the candidate was alive"
    );
    let st = Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let status = child.wait().unwrap();
    (tmp, status, traces, pidfile)
}

#[test]
fn sigterm_kills_every_worker_and_keeps_traces_valid() {
    python();
    let (tmp, status, traces, _) = kill_mid_run("-TERM");
    assert_eq!(status.code(), Some(130), "{status:?}");
    let t = traces_in(&traces);
    assert_eq!(t.len(), 1);
    assert_eq!(t[0].evaluation.as_ref().unwrap().status, Status::Timeout);
    // The finished workload's trace, written after the candidate was killed, is a whole chain.
    let r = kg_contract::chain::verify_file(&traces, &Default::default()).unwrap();
    assert!(r.ok(), "{:?}", r.findings);
    // Killed on the way out, not left for a watchdog (helpers carry the pid file's path).
    let left = processes_mentioning(&tmp.path().display().to_string());
    assert!(
        left.is_empty(),
        "workers or helpers left after SIGTERM: {left:?}"
    );
}

#[test]
fn sigkill_of_kg_bench_leaves_byte_valid_jsonl_and_no_orphans() {
    python();
    let (tmp, status, traces, _) = kill_mid_run("-KILL");
    assert_eq!(status.code(), None);
    // Killed before its candidate was gone: nothing of this evaluation was written (no torn
    // line, no partial chain).
    assert!(!traces.exists(), "{}", traces.display());
    // Orphaned workers (and their helpers, whose command lines carry the pid file's path under
    // `tmp`) notice their parent is gone and end.
    let needle = tmp.path().display().to_string();
    assert!(
        wait_until(Duration::from_secs(10), || processes_mentioning(&needle)
            .is_empty()),
        "orphans: {:?}",
        processes_mentioning(&needle)
            .iter()
            .map(|p| std::fs::read(format!("/proc/{p}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_default())
            .collect::<Vec<_>>()
    );
    let leftovers: Vec<_> = std::fs::read_dir(traces.parent().unwrap())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(".kg-tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "temp files left: {leftovers:?}");
}

#[test]
fn dataset_validate_flags_bad_references() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let o = kg(&py, tmp.path())
        .args(["dataset", "validate", "--json", "--device", "cpu"])
        .arg(fixtures().join("corpus"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "stderr: {}", stderr(&o));
    let findings: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    let by_name: BTreeMap<String, &serde_json::Value> = findings
        .iter()
        .map(|f| (f["problem"].as_str().unwrap().to_string(), f))
        .collect();
    assert_eq!(by_name["kg_fixture_add"]["ok"], true);
    assert_eq!(by_name["kg_fixture_const_reference"]["ok"], false);
    assert_eq!(by_name["kg_fixture_raising_reference"]["ok"], false);
    assert!(
        by_name["kg_fixture_raising_reference"]["messages"][0]
            .as_str()
            .unwrap()
            .contains("reference is broken")
    );
    // Validation runs one round alone (the judge's `prepare`, not a batch of rounds).
    assert_eq!(by_name["kg_fixture_nan_reference"]["ok"], false);
    let nan = by_name["kg_fixture_nan_reference"]["messages"].to_string();
    assert!(nan.contains("NaN everywhere"), "{nan}");
}

#[test]
fn dataset_validate_reports_schema_errors_with_location() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    let p = corpus.join("bad");
    std::fs::create_dir_all(&p).unwrap();
    std::fs::copy(
        fixtures().join("corpus/add/definition.json"),
        p.join("definition.json"),
    )
    .unwrap();
    std::fs::write(
        p.join("workload.jsonl"),
        "{\"uuid\": \"a\", \"axes\": {}, \"inputs\": {\"x\": {\"type\": \"random\"}, \"y\": {\"type\": \"random\"}}}\n",
    )
    .unwrap();
    let o = kg(&py, tmp.path())
        .args(["dataset", "validate", "--device", "cpu"])
        .arg(&corpus)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("line 1") && out.contains("axes.n"), "{out}");
}

#[test]
fn lock_clocks_fails_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_kg-bench"))
        .env("TMPDIR", tmp.path())
        .args(["evaluate"])
        .arg(fixtures().join("corpus/add"))
        .arg("--solution")
        .arg(fixtures().join("corpus/add/solutions/passed_pytorch_dps.json"))
        .arg("--lock-clocks")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--lock-clocks needs a GPU claimed through kg-gpu"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn unsupported_language_is_refused_before_running() {
    let tmp = tempfile::tempdir().unwrap();
    let sol = tmp.path().join("s.json");
    let mut v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("corpus/add/solutions/passed_pytorch_dps.json"))
            .unwrap(),
    )
    .unwrap();
    v["spec"]["languages"] = serde_json::json!(["cutlass"]);
    std::fs::write(&sol, v.to_string()).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_kg-bench"))
        .env("TMPDIR", tmp.path())
        .args(["evaluate"])
        .arg(fixtures().join("corpus/add"))
        .arg("--solution")
        .arg(&sol)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("cutlass") && e.contains("triton"), "{e}");
}

#[test]
fn missing_python_is_a_usage_error_naming_the_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_kg-bench"))
        .env("TMPDIR", tmp.path())
        .args(["dataset", "validate"])
        .arg(fixtures().join("corpus"))
        .args(["--python", "/nonexistent/python3.99"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("/nonexistent/python3.99"),
        "{}",
        stderr(&o)
    );
}

/// The corpus's failure fixtures (`fixtures/evaluate/manifest.json`), when present: all cases
/// in one `kg-bench run` (one judge), each case's solution renamed after the case.
#[test]
fn corpus_failure_fixtures_get_their_status() {
    let manifest = workspace().join("fixtures/evaluate/manifest.json");
    assert!(manifest.is_file(), "{} is missing", manifest.display());
    let py = python();
    let cases: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    assert!(!cases.is_empty());
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    let sols = tmp.path().join("solutions");
    let out = tmp.path().join("out");
    let mut expect = Vec::new();
    for c in &cases {
        let case = c["case"].as_str().unwrap();
        let problem = workspace().join(c["problem"].as_str().unwrap());
        let def: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(problem.join("definition.json")).unwrap(),
        )
        .unwrap();
        let def_name = def["name"].as_str().unwrap().to_string();
        let link = corpus.join(&def_name);
        if !link.exists() {
            std::fs::create_dir_all(&corpus).unwrap();
            std::os::unix::fs::symlink(&problem, &link).unwrap();
        }
        let mut sol: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(workspace().join(c["solution"].as_str().unwrap())).unwrap(),
        )
        .unwrap();
        sol["name"] = serde_json::json!(case);
        std::fs::create_dir_all(sols.join(&def_name)).unwrap();
        std::fs::write(
            sols.join(&def_name).join(format!("{case}.json")),
            sol.to_string(),
        )
        .unwrap();
        expect.push((case.to_string(), def_name, c.clone()));
    }
    let junit = tmp.path().join("junit.xml");
    let o = kg(&py, tmp.path())
        .args(["run"])
        .arg(&corpus)
        .arg("--solutions")
        .arg(&sols)
        .arg("-o")
        .arg(&out)
        .args(["--timeout", "10", "--max-workloads", "2"])
        .args(FAST)
        .arg("--junit")
        .arg(&junit)
        .output()
        .unwrap();
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "stderr: {}",
        stderr(&o)
    );
    let (mut tests, mut failures, mut errors) = (0, 0, 0);
    for (case, def_name, c) in &expect {
        let traces = traces_in(&out.join(def_name).join(format!("{case}.jsonl")));
        assert!(!traces.is_empty(), "{case}");
        for t in &traces {
            let e = t.evaluation.as_ref().unwrap();
            tests += 1;
            match e.status {
                Status::Passed => {}
                Status::InvalidReference => errors += 1,
                _ => failures += 1,
            }
            let want = c["expected_by_workload"][&t.workload.uuid]
                .as_str()
                .or(c["expected"].as_str())
                .unwrap();
            assert_eq!(
                e.status.as_str(),
                want,
                "{case} / {}: {}",
                t.workload.uuid,
                e.log
            );
        }
    }
    let left = processes_mentioning(&tmp.path().display().to_string());
    assert!(left.is_empty(), "workers left behind: {left:?}");
    // The JUnit file: valid against the schema, a testcase per trace, each status counted
    // where CI systems look for it.
    let xml = std::fs::read_to_string(&junit).unwrap();
    junit_is_valid(&junit);
    assert!(failures > 0 && errors > 0, "the fixtures cover both");
    assert!(
        xml.contains(&format!(
            "tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"0\""
        )),
        "{xml}"
    );
    assert_eq!(xml.matches("<testcase ").count(), tests, "{xml}");
    assert!(
        xml.contains("<failure type=\"INCORRECT_NUMERICAL\""),
        "{xml}"
    );
    assert!(xml.contains("<error type=\"INVALID_REFERENCE\""), "{xml}");
}

/// Validates a JUnit file against `docs/schemas/junit.xsd` with xmllint (libxml2-utils;
/// `.ci/run` installs it).
pub fn junit_is_valid(path: &Path) {
    let schema = workspace().join("docs/schemas/junit.xsd");
    let o = Command::new("xmllint")
        .arg("--noout")
        .arg("--schema")
        .arg(&schema)
        .arg(path)
        .output()
        .unwrap_or_else(|e| {
            panic!("xmllint is needed to validate JUnit files (apt-get install libxml2-utils): {e}")
        });
    assert!(
        o.status.success(),
        "{} does not validate against {}: {}",
        path.display(),
        schema.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// One byte of a PASSED line's latency changed, as a text editor would.
fn edit_latency(line: &str) -> String {
    let key = "\"latency_ms\":";
    let at = line.find(key).expect("a PASSED line") + key.len();
    let digit = if &line[at..at + 1] == "1" { "2" } else { "1" };
    format!("{}{digit}{}", &line[..at], &line[at + 1..])
}

fn verify(py: &Path, tmp: &Path, args: &[&std::ffi::OsStr]) -> Output {
    kg(py, tmp).arg("verify").args(args).output().unwrap()
}

#[test]
fn evaluated_traces_verify_and_an_edited_latency_does_not() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let problem = fixtures().join("corpus/add");
    let traces = tmp.path().join("t.jsonl");
    let key = tmp.path().join("key");
    let o = kg(&py, tmp.path())
        .args(["keygen"])
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let pubkey = tmp.path().join("key.pub");
    let o = kg(&py, tmp.path())
        .args(["evaluate"])
        .arg(&problem)
        .arg("--solution")
        .arg(problem.join("solutions/passed_pytorch_dps.json"))
        .arg("-o")
        .arg(&traces)
        .arg("--sign-key")
        .arg(&key)
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let head = stdout
        .lines()
        .find_map(|l| l.split("(chain head ").nth(1))
        .map(|h| h.trim_end_matches(')').to_string())
        .expect("the chain head is printed");
    let t = traces_in(&traces);
    assert_eq!(t.len(), 2);
    assert!(
        t.iter()
            .all(|t| t.evaluation.as_ref().unwrap().status == Status::Passed)
    );
    let m = &t[0].kernelgate_chain.as_ref().unwrap().manifest;
    assert_eq!(
        m.problem_tree_sha256,
        kg_contract::tree::tree_sha256(&problem).unwrap()
    );
    let (p, k, h) = (
        problem.as_os_str(),
        pubkey.as_os_str(),
        std::ffi::OsStr::new(&head),
    );
    let ok = verify(
        &py,
        tmp.path(),
        &[
            traces.as_os_str(),
            "--problem".as_ref(),
            p,
            "--pubkey".as_ref(),
            k,
            "--head".as_ref(),
            h,
        ],
    );
    assert_eq!(
        ok.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("signed by"));
    // A copy of the problem hashes the same (paths are relative)...
    let copy = tmp.path().join("add");
    let st = Command::new("cp")
        .arg("-r")
        .arg(&problem)
        .arg(&copy)
        .status()
        .unwrap();
    assert!(st.success());
    let o = verify(
        &py,
        tmp.path(),
        &[traces.as_os_str(), "--problem".as_ref(), copy.as_os_str()],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // ...until a tolerance in it changes: not the problem these traces were judged on.
    let wl = copy.join("workload.jsonl");
    let text = std::fs::read_to_string(&wl).unwrap();
    let looser = text.replacen(
        "{\"uuid\"",
        "{\"tolerance\": {\"max_atol\": 1.0}, \"uuid\"",
        1,
    );
    assert_ne!(looser, text);
    std::fs::write(&wl, looser).unwrap();
    let o = verify(
        &py,
        tmp.path(),
        &[traces.as_os_str(), "--problem".as_ref(), copy.as_os_str()],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("problem tree"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // One byte of the first PASSED line's latency: tampered, named by file and line.
    let text = std::fs::read_to_string(&traces).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[0] = edit_latency(&lines[0]);
    std::fs::write(&traces, lines.join("\n") + "\n").unwrap();
    let bad = verify(&py, tmp.path(), &[traces.as_os_str()]);
    assert_eq!(bad.status.code(), Some(1));
    let out = String::from_utf8_lossy(&bad.stdout);
    assert!(out.contains(&format!("{}:1:", traces.display())), "{out}");
    // Also the last line, which no later line links to: its own seal (and signature) break.
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    lines[1] = edit_latency(&lines[1]);
    std::fs::write(&traces, lines.join("\n") + "\n").unwrap();
    let bad = verify(&py, tmp.path(), &[traces.as_os_str(), "--json".as_ref()]);
    assert_eq!(bad.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&bad.stdout).unwrap();
    assert_eq!(v["ok"], false);
    assert_eq!(v["files"][0]["findings"][0]["line"], 2);
    // Unreadable input is a usage error, not a verdict.
    let missing = tmp.path().join("nope.jsonl");
    assert_eq!(
        verify(&py, tmp.path(), &[missing.as_os_str()])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn concurrent_evaluations_appending_to_one_file_lose_nothing() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let problem = fixtures().join("corpus/add");
    let traces = tmp.path().join("same.jsonl");
    let runs = 4;
    let children: Vec<_> = (0..runs)
        .map(|_| {
            kg(&py, tmp.path())
                .args(["evaluate"])
                .arg(&problem)
                .arg("--solution")
                .arg(problem.join("solutions/passed_pytorch_dps.json"))
                .arg("-o")
                .arg(&traces)
                .args(FAST)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert_eq!(o.status.code(), Some(0), "stderr: {}", stderr(&o));
    }
    let r = kg_contract::chain::verify_file(&traces, &Default::default()).unwrap();
    assert!(r.ok(), "{:?}", r.findings);
    assert_eq!(r.lines, runs * 2);
}

/// A candidate that changes the problem directory as it is shut down (a SIGTERM handler; an
/// `atexit` one too), after its last workload was judged: every trace of it is REWARD_HACK, and
/// `run` refuses the next solution of that problem, whose directory no longer matches.
#[test]
fn a_problem_changed_at_candidate_exit_fails_its_traces_and_stops_that_problem() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    let problem = corpus.join("add");
    let st = Command::new("cp")
        .arg("-r")
        .arg(fixtures().join("corpus/add"))
        .arg(&problem)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::remove_dir_all(problem.join("solutions")).unwrap();
    std::fs::create_dir(problem.join("solutions")).unwrap();
    let honest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures().join("corpus/add/solutions/passed_pytorch_dps.json"))
            .unwrap(),
    )
    .unwrap();
    let mut late = honest.clone();
    late["name"] = "a_tamper_at_exit".into();
    late["sources"][0]["content"] = format!(
        r#"import atexit, os, signal, torch

WL = {wl:?}

def _tamper(*_):
    t = open(WL).read()
    # Same size: only the content changes.
    open(WL, "w").write(t.replace('"random"', '"RANDOM"', 1))
    os._exit(0)

signal.signal(signal.SIGTERM, _tamper)
atexit.register(_tamper)

def run(x, y, out):
    torch.add(x, y, alpha=2, out=out)
"#,
        wl = problem.join("workload.jsonl").display().to_string()
    )
    .into();
    let mut second = honest.clone();
    second["name"] = "b_honest".into();
    for (n, v) in [("a.json", &late), ("b.json", &second)] {
        std::fs::write(problem.join("solutions").join(n), v.to_string()).unwrap();
    }
    let before = std::fs::read_to_string(problem.join("workload.jsonl")).unwrap();
    let out = tmp.path().join("out");
    let o = kg(&py, tmp.path())
        .args(["run"])
        .arg(&corpus)
        .args(["--solutions", "bundled", "--no-sandbox", "-o"])
        .arg(&out)
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "stderr: {}", stderr(&o));
    let after = std::fs::read_to_string(problem.join("workload.jsonl")).unwrap();
    assert_ne!(after, before, "the candidate's exit handler did not run");
    assert_eq!(after.len(), before.len());
    let t = traces_in(&out.join("add/a_tamper_at_exit.jsonl"));
    assert_eq!(t.len(), 2);
    for t in &t {
        let e = t.evaluation.as_ref().unwrap();
        assert_eq!(e.status, Status::RewardHack, "{}", e.log);
        assert!(
            e.log.contains("after its last workload was judged"),
            "{}",
            e.log
        );
        assert!(e.log.contains("workload.jsonl"), "{}", e.log);
    }
    // The next solution of the tampered problem never ran.
    assert!(!out.join("add/b_honest.jsonl").exists());
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let why = summary["errors"]["add"].as_str().unwrap_or_default();
    assert!(why.contains("changed since it was loaded"), "{summary}");
    // What was written still verifies against the summary's heads.
    let v = verify(
        &py,
        tmp.path(),
        &["--summary".as_ref(), out.join("summary.json").as_os_str()],
    );
    assert_eq!(
        v.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&v.stdout)
    );
}

/// kg-bench's own fixtures (`bins/kg-bench/tests/fixtures`).
fn own_fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Copies a directory tree (`cp -r`).
fn copy_dir(from: &Path, to: &Path) {
    let st = Command::new("cp")
        .arg("-r")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
}

fn summary_of(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap()
}

fn uuids(traces: &[Trace]) -> Vec<String> {
    traces.iter().map(|t| t.workload.uuid.clone()).collect()
}

fn run_id(path: &Path) -> String {
    traces_in(path)[0]
        .kernelgate_chain
        .as_ref()
        .unwrap()
        .manifest
        .run_id
        .clone()
}

/// Issue 29 item 2: two problems of one definition name (different sizes) are each
/// evaluated, into their own trace files, and the totals count each trace once.
#[test]
fn two_problems_of_one_definition_name_are_each_evaluated_and_keyed_by_path() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let corpus = own_fixtures().join("same_name");
    let o = kg(&py, tmp.path())
        .arg("run")
        .arg(&corpus)
        .arg("-o")
        .arg(&out)
        .args(FAST)
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert!(!e.contains("complete traces"), "{e}");
    assert!(
        e.contains("definition `kg_fixture_double` is defined by 2 problems")
            && e.contains("with different definitions"),
        "{e}"
    );
    let small = traces_in(&out.join("small/reference.jsonl"));
    let large = traces_in(&out.join("large/reference.jsonl"));
    assert_eq!(uuids(&small), ["fx-double-small-4"]);
    assert_eq!(uuids(&large), ["fx-double-large-2", "fx-double-large-8"]);
    // Each judged on its own shapes: 8 and 64 wide.
    assert_eq!(small[0].workload.axes["rows"], 4);
    let s = summary_of(&out);
    assert_eq!(s["totals"]["PASSED"], 3, "{s}");
    assert_eq!(s["problems"]["small"]["reference"]["PASSED"], 1, "{s}");
    assert_eq!(s["problems"]["large"]["reference"]["PASSED"], 2, "{s}");
    assert_eq!(
        s["problem_info"]["large"]["definition"], "kg_fixture_double",
        "{s}"
    );
    // One table row per problem, each with its own counts.
    let table = String::from_utf8_lossy(&o.stdout);
    let row = |key: &str| {
        table
            .lines()
            .find(|l| l.contains(&format!(" {key} ")))
            .unwrap_or_else(|| panic!("no row for {key}: {table}"))
            .to_string()
    };
    assert!(row("small").contains("┆ 1         ┆ 1 "), "{table}");
    assert!(row("large").contains("┆ 2         ┆ 2 "), "{table}");
    // Run again: each is finished in its own file, and nothing is counted twice.
    let o = kg(&py, tmp.path())
        .arg("run")
        .arg(&corpus)
        .arg("-o")
        .arg(&out)
        .args(FAST)
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    assert_eq!(e.matches("complete traces").count(), 2, "{e}");
    assert_eq!(summary_of(&out)["totals"]["PASSED"], 3);
}

/// Issue 29 item 2: `dataset validate` flags a definition name that two problems define
/// differently (BAD, naming the other directory).
#[test]
fn dataset_validate_flags_duplicate_definition_names() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let o = kg(&py, tmp.path())
        .args(["dataset", "validate"])
        .arg(own_fixtures().join("same_name"))
        .args(["--device", "cpu", "--json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let findings: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(findings.len(), 2);
    for f in &findings {
        assert_eq!(f["ok"], false, "{f}");
        let m = f["messages"].to_string();
        assert!(
            m.contains("duplicate definition name `kg_fixture_double`")
                && m.contains("with a different definition"),
            "{m}"
        );
    }
    let small = findings
        .iter()
        .find(|f| f["problem"] == "kg_fixture_double (small)")
        .unwrap_or_else(|| panic!("{findings:?}"));
    assert!(
        small["messages"].to_string().contains("same_name/large`"),
        "{small}"
    );
}

/// Two solutions of one problem with one name would write one trace file: refused before
/// anything runs, naming both files.
#[test]
fn two_solutions_writing_one_trace_file_are_refused_up_front() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let problem = tmp.path().join("corpus/small");
    std::fs::create_dir_all(tmp.path().join("corpus")).unwrap();
    copy_dir(&own_fixtures().join("same_name/small"), &problem);
    std::fs::copy(
        problem.join("solutions/double_pytorch.json"),
        problem.join("solutions/again.json"),
    )
    .unwrap();
    let o = kg(&py, tmp.path())
        .arg("run")
        .arg(tmp.path().join("corpus"))
        .args(["--solutions", "bundled", "-o"])
        .arg(tmp.path().join("out"))
        .args(FAST)
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("again.json")
            && e.contains("double_pytorch.json")
            && e.contains("would both write"),
        "{e}"
    );
    assert!(!tmp.path().join("out/small").exists());
}

/// Issue 29 item 7: `--solutions bundled` takes SOL-ExecBench's `solution_*.json` beside
/// `definition.json` as well as `solutions/*.json`, and says which layout it used; a problem
/// with neither is named with both layouts.
#[test]
fn bundled_finds_sol_execbench_solution_files_beside_the_definition() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus");
    copy_dir(&own_fixtures().join("same_name"), &corpus);
    copy_dir(
        &own_fixtures().join("same_name/small"),
        &corpus.join("bare"),
    );
    std::fs::remove_dir_all(corpus.join("bare/solutions")).unwrap();
    let out = tmp.path().join("out");
    let o = kg(&py, tmp.path())
        .arg("run")
        .arg(&corpus)
        .args(["--solutions", "bundled", "-o"])
        .arg(&out)
        .args(FAST)
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    let t = traces_in(&out.join("large/double_triton.jsonl"));
    assert_eq!(t.len(), 2);
    assert!(
        t.iter()
            .all(|t| t.evaluation.as_ref().unwrap().status == Status::Passed)
    );
    assert_eq!(traces_in(&out.join("small/double_pytorch.jsonl")).len(), 1);
    assert!(
        e.contains("1 problem(s) from `solutions/*.json`")
            && e.contains(
                "1 problem(s) from `solution_*.json` beside `definition.json` (SOL-ExecBench layout)"
            ),
        "{e}"
    );
    assert!(
        e.contains("bare: no solutions (looked for `")
            && e.contains("bare/solutions/*.json` and `")
            && e.contains("bare/solution_*.json` beside `definition.json`"),
        "{e}"
    );
    let s = summary_of(&out);
    assert_eq!(
        s["problem_info"]["large"]["solutions_from"],
        serde_json::json!(["beside_definition"]),
        "{s}"
    );
    assert_eq!(
        s["problem_info"]["small"]["solutions_from"],
        serde_json::json!(["solutions_dir"]),
        "{s}"
    );
}

/// Issue 29 item 8: outside a terminal, every finished workload gets a progress line with its
/// wall time (the trace's `wall_s`), and the tables show it.
#[test]
fn progress_lines_with_wall_time_go_to_stderr_outside_a_terminal() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = kg(&py, tmp.path())
        .arg("run")
        .arg(own_fixtures().join("same_name"))
        .arg("-o")
        .arg(&out)
        .args(FAST)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(0), "{e}");
    let lines: Vec<&str> = e.lines().filter(|l| l.starts_with('[')).collect();
    assert_eq!(lines.len(), 3, "{e}");
    let t = &traces_in(&out.join("small/reference.jsonl"))[0];
    let wall = t.evaluation.as_ref().unwrap().wall_s.unwrap();
    assert!(wall > 0.0);
    let small = lines
        .iter()
        .find(|l| l.contains("small / reference / fx-double-small-4"))
        .unwrap_or_else(|| panic!("{e}"));
    assert!(small.contains("PASSED"), "{small}");
    assert!(
        small.contains(&format!("{wall:.1} s")),
        "{small} (wall {wall})"
    );
    assert!(small.contains("(elapsed "), "{small}");
    assert!(
        lines[0].starts_with("[1/3]") && lines[2].starts_with("[3/3]"),
        "{e}"
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("wall s"));
    // evaluate's per-workload table has the column, with the trace's value.
    let o = kg(&py, tmp.path())
        .arg("evaluate")
        .arg(own_fixtures().join("same_name/small"))
        .args(["--solution", "reference", "-o"])
        .arg(tmp.path().join("evaluate.jsonl"))
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("wall s"), "{table}");
    let row = table.lines().find(|l| l.contains("fx-double-sma")).unwrap();
    let cells: Vec<&str> = row.split('┆').map(str::trim).collect();
    // A fast workload's wall time can round to 0.0: the cell is the trace's, as printed.
    let t = &traces_in(&tmp.path().join("evaluate.jsonl"))[0];
    let wall = t.evaluation.as_ref().unwrap().wall_s.unwrap();
    assert!(wall > 0.0);
    assert_eq!(cells[2], format!("{wall:.1}"), "{row}");
    assert!(stderr(&o).contains("[1/1] PASSED"), "{}", stderr(&o));
}

/// Issue 29 item 8: a CPU run whose estimate from input sizes is long is warned about before
/// anything runs, with the flags that shorten it.
#[test]
fn a_long_cpu_run_is_warned_about_up_front() {
    use std::io::BufRead;
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let problem = tmp.path().join("big");
    copy_dir(&own_fixtures().join("same_name/large"), &problem);
    // 2^25 rows of 64 through the Triton interpreter: hours, by the estimate.
    std::fs::write(
        problem.join("workload.jsonl"),
        "{\"uuid\": \"big\", \"axes\": {\"rows\": 33554432}, \"inputs\": {\"x\": {\"type\": \"random\"}}}\n",
    )
    .unwrap();
    let mut child = kg(&py, tmp.path())
        .arg("run")
        .arg(&problem)
        .args(["--solutions", "bundled", "--device", "cpu", "-o"])
        .arg(tmp.path().join("out"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let err = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(l).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let warning = loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) if l.starts_with("warning: this CPU run is estimated at") => break Some(l),
            Ok(l) => seen.push(l),
            Err(_) => break None,
        }
    };
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    child.wait().unwrap();
    let w = warning.unwrap_or_else(|| panic!("no warning; stderr: {seen:?}"));
    assert!(w.contains('h') && w.contains("interpreter"), "{w}");
    assert!(
        w.contains("`--max-workloads 1 --rounds 2` would take"),
        "{w}"
    );
    // Before any workload started.
    assert!(!seen.iter().any(|l| l.starts_with('[')), "{seen:?}");
}

/// Issue 29 item 8: every subcommand's `--help` lists its exit codes.
#[test]
fn every_subcommand_lists_its_exit_codes_in_help() {
    for args in [
        &["--help"][..],
        &["evaluate", "--help"],
        &["run", "--help"],
        &["dataset", "validate", "--help"],
        &["verify", "--help"],
        &["keygen", "--help"],
        &["solar", "--help"],
        &["score", "--help"],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_kg-bench"))
            .args(args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{args:?}");
        let h = String::from_utf8_lossy(&o.stdout);
        assert!(h.contains("Exit codes"), "{args:?}: {h}");
        assert!(h.contains("  0 ") && h.contains("  2 "), "{args:?}: {h}");
    }
    let run = Command::new(env!("CARGO_BIN_EXE_kg-bench"))
        .args(["run", "--help"])
        .output()
        .unwrap();
    let h = String::from_utf8_lossy(&run.stdout);
    assert!(h.contains("130") && h.contains("refused up front"), "{h}");
    assert!(h.contains("--max-workloads 1 --rounds 2"), "{h}");
}

/// Issue 29 item 9: `--filter` selects problem/solution pairs by path, name or language;
/// one that matches nothing is a usage error.
#[test]
fn filter_selects_pairs_and_one_matching_nothing_is_refused() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out");
    let o = kg(&py, tmp.path())
        .arg("run")
        .arg(own_fixtures().join("same_name"))
        .args([
            "--solutions",
            "bundled",
            "--filter",
            "language:triton & problem:lar*",
            "-o",
        ])
        .arg(&out)
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(traces_in(&out.join("large/double_triton.jsonl")).len(), 2);
    assert!(!out.join("small").exists());
    let s = summary_of(&out);
    assert_eq!(
        s["filters"],
        serde_json::json!(["language:triton & problem:lar*"])
    );
    assert_eq!(s["totals"]["PASSED"], 2, "{s}");
    let o = kg(&py, tmp.path())
        .arg("run")
        .arg(own_fixtures().join("same_name"))
        .args(["--filter", "no_such_problem", "-o"])
        .arg(tmp.path().join("out2"))
        .args(FAST)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--filter `no_such_problem` matched no problem/solution pair"),
        "{}",
        stderr(&o)
    );
    let o = kg(&py, tmp.path())
        .arg("run")
        .arg(own_fixtures().join("same_name"))
        .args(["--filter", "size:8"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("unknown field `size`"),
        "{}",
        stderr(&o)
    );
}

/// Issue 29 item 9: `--rerun-failed` evaluates again only the pairs whose traces did not all
/// pass; the passing pair's file is left as it was.
#[test]
fn rerun_failed_evaluates_only_pairs_that_did_not_pass() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let problem = tmp.path().join("corpus/small");
    std::fs::create_dir_all(tmp.path().join("corpus")).unwrap();
    copy_dir(&own_fixtures().join("same_name/small"), &problem);
    let mut wrong: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(problem.join("solutions/double_pytorch.json")).unwrap(),
    )
    .unwrap();
    wrong["name"] = "triple".into();
    wrong["sources"][0]["content"] = "def run(x):\n    return x * 3\n".into();
    std::fs::write(problem.join("solutions/triple.json"), wrong.to_string()).unwrap();
    let out = tmp.path().join("out");
    let run = |extra: &[&str]| {
        kg(&py, tmp.path())
            .arg("run")
            .arg(tmp.path().join("corpus"))
            .args(["--solutions", "bundled", "-o"])
            .arg(&out)
            .args(extra)
            .args(FAST)
            .output()
            .unwrap()
    };
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let passing = out.join("small/double_pytorch.jsonl");
    let failing = out.join("small/triple.jsonl");
    let before = std::fs::read(&passing).unwrap();
    let failing_run = run_id(&failing);
    let o = run(&["--rerun-failed"]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("small / double_pytorch: complete traces") && e.contains("(all PASSED;"),
        "{e}"
    );
    assert_eq!(std::fs::read(&passing).unwrap(), before);
    assert_ne!(
        run_id(&failing),
        failing_run,
        "the failing pair was not evaluated again"
    );
    assert_eq!(
        traces_in(&failing)[0].evaluation.as_ref().unwrap().status,
        Status::IncorrectNumerical
    );
    // Without the flag, a finished pair is kept whatever its status.
    let again = run_id(&failing);
    let o = run(&[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("1 workload(s) did not pass; --rerun-failed evaluates it again"));
    assert_eq!(run_id(&failing), again);
}

/// Issue 29 item 9: `-q` drops the progress lines, `-v` adds one as each workload starts.
#[test]
fn quiet_and_verbose_change_what_progress_shows() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let go = |flag: &str, out: &str| {
        kg(&py, tmp.path())
            .arg("run")
            .arg(own_fixtures().join("same_name"))
            .args(["--filter", "problem:small", flag, "-o"])
            .arg(tmp.path().join(out))
            .args(FAST)
            .output()
            .unwrap()
    };
    let q = go("-q", "q");
    assert_eq!(q.status.code(), Some(0), "{}", stderr(&q));
    assert!(
        !stderr(&q).lines().any(|l| l.starts_with('[')),
        "{}",
        stderr(&q)
    );
    assert!(String::from_utf8_lossy(&q.stdout).contains("totals: 1 PASSED"));
    let v = go("-v", "v");
    assert_eq!(v.status.code(), Some(0), "{}", stderr(&v));
    let e = stderr(&v);
    assert!(
        e.contains("[1/1] small / reference / fx-double-small-4 ..."),
        "{e}"
    );
    assert!(e.lines().any(|l| l.starts_with("[1/1] PASSED")), "{e}");
}

/// Issue 24 item 1: with `--prestart on` the second pair's candidate process starts while the
/// first pair is evaluated, and the first trace of each candidate process says how it started;
/// with `--prestart off`, or without the sandbox (where the running candidate could reach the
/// starting one), none starts ahead; the verdicts are the same every way.
#[test]
fn the_next_pairs_candidate_starts_during_the_previous_pair_only_where_allowed() {
    use kg_contract::CandidateLaunch::{EarlierEvaluation, EvaluationStart};
    let py = python();
    let corpus = own_fixtures().join("same_name");
    let starts = |extra: &[&str]| -> Vec<kg_contract::CandidateLaunch> {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        let o = kg(&py, tmp.path())
            .arg("run")
            .arg(&corpus)
            .arg("-o")
            .arg(&out)
            .args(FAST)
            .args(extra)
            .output()
            .unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(0), "{extra:?}: {e}");
        let mut starts = Vec::new();
        for p in ["small", "large"] {
            let traces = traces_in(&out.join(p).join("reference.jsonl"));
            let evs: Vec<_> = traces
                .iter()
                .map(|t| t.evaluation.as_ref().unwrap())
                .collect();
            assert!(
                evs.iter().all(|e| e.status == Status::Passed),
                "{extra:?} {p}"
            );
            // One candidate process per pair: only its first workload carries its start.
            let st = evs[0]
                .candidate_start
                .expect("the first workload's candidate start");
            assert!(evs[1..].iter().all(|e| e.candidate_start.is_none()), "{p}");
            assert!(st.ready_s <= st.process_s && st.load_s >= 0.0, "{st:?}");
            starts.push(st.started);
        }
        starts.sort_by_key(|s| *s as u8);
        starts
    };
    assert_eq!(
        starts(&["--prestart", "on"]),
        [EvaluationStart, EarlierEvaluation]
    );
    assert_eq!(
        starts(&["--prestart", "off"]),
        [EvaluationStart, EvaluationStart]
    );
    assert_eq!(
        starts(&["--prestart", "on", "--no-sandbox"]),
        [EvaluationStart, EvaluationStart]
    );
    // On the CPU, `auto` leaves the cores to the timed workload.
    assert_eq!(starts(&[]), [EvaluationStart, EvaluationStart]);
}

/// `--jobs 2` on the CPU: two lanes evaluate pairs at once (both named in the progress
/// lines), and the run ends with the statuses, totals and exit code of a one-lane run.
#[test]
fn cpu_lanes_give_the_statuses_of_one_lane() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let run = |jobs: &str, out: &Path| {
        kg(&py, tmp.path())
            .args(["run"])
            .arg(fixtures().join("corpus"))
            .args(["--solutions", "bundled", "--max-workloads", "1"])
            .args([
                "--filter",
                "solution:ok",
                "--filter",
                "solution:passed_pytorch_dps",
            ])
            .args([
                "--filter",
                "solution:wrong_values",
                "--filter",
                "solution:nan_output",
            ])
            .args(["--filter", "solution:segfault", "--timeout", "20"])
            .args(["--jobs", jobs, "-o"])
            .arg(out)
            .args(FAST)
            .output()
            .unwrap()
    };
    let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
    let o1 = run("1", &one);
    let o2 = run("2", &two);
    let err2 = stderr(&o2);
    assert_eq!(o1.status.code(), Some(1), "stderr: {}", stderr(&o1));
    assert_eq!(o2.status.code(), Some(1), "stderr: {err2}");
    assert!(err2.contains("lanes: 0: cpu; 1: cpu"), "{err2}");
    for lane in ["[lane 0 cpu]", "[lane 1 cpu]"] {
        assert!(err2.contains(lane), "no pair ran on {lane}:\n{err2}");
    }
    assert!(!stderr(&o1).contains("[lane "), "{}", stderr(&o1));
    let (s1, s2) = (summary_of(&one), summary_of(&two));
    for k in ["totals", "problems", "device", "refused", "errors"] {
        assert_eq!(s1.get(k), s2.get(k), "summary.json `{k}` differs");
    }
    assert_eq!(s1["problems"].as_object().map(|p| p.len()), Some(4), "{s1}");
    assert!(s1["totals"]["PASSED"].as_u64() > Some(0), "{s1}");
    assert!(s1["totals"]["INVALID_REFERENCE"].as_u64() > Some(0), "{s1}");
}

/// `--gpus` and `--jobs` refuse what they cannot do, before anything runs.
#[test]
fn lane_flags_refuse_what_they_cannot_do() {
    let py = python();
    let tmp = tempfile::tempdir().unwrap();
    let corpus = fixtures().join("corpus");
    let cases: [(&[&str], &str); 4] = [
        (
            &["--gpus", "2", "--device", "cpu"],
            "goes with --device auto",
        ),
        (
            &["--jobs", "2", "--device", "cpu", "--no-sandbox"],
            "needs the candidate sandbox",
        ),
        (&["--jobs", "0", "--device", "cpu"], "--jobs"),
        (&["--gpus", "2", "--jobs", "2"], "cannot be used with"),
    ];
    for (args, want) in cases {
        let o = kg(&py, tmp.path())
            .args(["run"])
            .arg(&corpus)
            .args(["--filter", "solution:reference", "-o"])
            .arg(tmp.path().join("out"))
            .args(args)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // Where torch sees no GPU (here, with CUDA hidden), `--gpus` is an error naming the CPU
    // alternative, never a silent CPU run.
    let o = kg(&py, tmp.path())
        .env("CUDA_VISIBLE_DEVICES", "")
        .args(["run"])
        .arg(&corpus)
        .args(["--gpus", "all", "-o"])
        .arg(tmp.path().join("out2"))
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--device cpu"), "{err}");
    assert!(!tmp.path().join("out2").exists());
}
