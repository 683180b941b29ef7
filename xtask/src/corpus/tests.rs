//! Unit tests of the corpus checks: tallies, failed or missing traces, summaries that
//! disagree, wrong devices, duplicates, and the mutants that must be caught.

use super::*;

/// A problem of the bundled corpus: real definition and workloads, read only.
const PROBLEM: &str = "problems/core/rmsnorm_bf16_qwen2_5_0_5b";

fn problem() -> (PathBuf, Problem) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(PROBLEM);
    let p = Problem::load(&dir).unwrap();
    assert!(
        p.workloads.len() >= 3,
        "the fixture needs several workloads"
    );
    (dir, p)
}

fn line(p: &Problem, uuid: &str, status: &str, kind: &str) -> String {
    line_of(p, "reference", uuid, status, kind)
}

fn line_of(p: &Problem, solution: &str, uuid: &str, status: &str, kind: &str) -> String {
    serde_json::json!({
        "definition": p.definition.name, "solution": solution,
        "workload": {"uuid": uuid, "axes": {}, "inputs": {}},
        "evaluation": {"status": status,
            "log": format!("harness: bookkeeping\nwhy {status}\nmore\nharness: x\nlast"),
            "environment": {"hardware": "CPU", "libs": {}, "device": {"kind": kind, "name": "n"}},
            "timestamp": "t"}
    })
    .to_string()
}

/// Writes the traces (status, device kind per workload, None: left out) and a summary
/// counting `passed` of `all`; returns the output directory.
fn run(p: &Problem, rows: &[Option<(&str, &str)>], passed: usize, all: usize) -> tempfile::TempDir {
    let out = tempfile::tempdir().unwrap();
    let sol = &solutions_for(p, &SolutionSource::Reference).unwrap()[0];
    let path = trace_path(out.path(), &p.definition.name, &sol.name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text: String = p
        .workloads
        .iter()
        .zip(rows)
        .filter_map(|(w, r)| r.map(|(s, k)| line(p, &w.workload.uuid, s, k) + "\n"))
        .collect();
    std::fs::write(&path, text).unwrap();
    let summary = serde_json::json!({"schema_version": 1, "corpus": "c", "device": "cpu",
        "totals": {"PASSED": passed, "INCORRECT_NUMERICAL": all - passed}, "problems": {}});
    std::fs::write(out.path().join("summary.json"), summary.to_string()).unwrap();
    out
}

fn all_passed(p: &Problem) -> Vec<Option<(&'static str, &'static str)>> {
    vec![Some(("PASSED", "cpu")); p.workloads.len()]
}

#[test]
fn every_workload_passed_on_the_cpu_is_a_tally() {
    let (dir, p) = problem();
    let n = p.workloads.len();
    let out = run(&p, &all_passed(&p), n, n);
    let t = check(&dir, &SolutionSource::Reference, out.path(), Some("cpu")).unwrap();
    assert_eq!(
        t,
        Tally {
            problems: 1,
            solutions: 1,
            passed: n
        }
    );
}

#[test]
fn a_failed_workload_is_named_with_its_status_and_log() {
    let (dir, p) = problem();
    let n = p.workloads.len();
    let mut rows = all_passed(&p);
    rows[1] = Some(("INCORRECT_NUMERICAL", "cpu"));
    let out = run(&p, &rows, n - 1, n);
    let e = check(&dir, &SolutionSource::Reference, out.path(), Some("cpu")).unwrap_err();
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains(&p.workloads[1].workload.uuid), "{e:?}");
    assert!(
        e[0].contains("INCORRECT_NUMERICAL (why INCORRECT_NUMERICAL | more)"),
        "{e:?}"
    );
    let axes: Vec<String> = p.workloads[1]
        .workload
        .axes
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    assert!(e[0].contains(&format!("({})", axes.join(", "))), "{e:?}");
    // Only the harness's own lines: the first stands in.
    assert_eq!(why("harness: a\nharness: b"), "harness: a");
    assert_eq!(why(" \n"), "empty log");
}

#[test]
fn a_missing_trace_and_a_summary_that_disagrees_are_caught() {
    let (dir, p) = problem();
    let n = p.workloads.len();
    let mut rows = all_passed(&p);
    rows[2] = None;
    // The summary claims every workload passed; the traces hold one fewer.
    let out = run(&p, &rows, n, n);
    let e = check(&dir, &SolutionSource::Reference, out.path(), Some("cpu")).unwrap_err();
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].contains("no trace"), "{e:?}");
    assert!(e[0].contains(&p.workloads[2].workload.uuid), "{e:?}");
    assert!(e[1].starts_with("summary.json counts"), "{e:?}");
}

#[test]
fn a_pass_on_another_device_than_asked_for_is_not_counted() {
    let (dir, p) = problem();
    let n = p.workloads.len();
    let mut rows = all_passed(&p);
    rows[0] = Some(("PASSED", "cuda"));
    let out = run(&p, &rows, n, n);
    let e = check(&dir, &SolutionSource::Reference, out.path(), Some("cpu")).unwrap_err();
    assert!(
        e[0].contains("PASSED on device Some(\"cuda\"), but the run asked for cpu"),
        "{e:?}"
    );
    // `--device auto` takes either.
    assert!(check(&dir, &SolutionSource::Reference, out.path(), None).is_ok());
}

#[test]
fn a_duplicated_trace_is_caught() {
    let (dir, p) = problem();
    let n = p.workloads.len();
    let out = run(&p, &all_passed(&p), n, n);
    let sol = &solutions_for(&p, &SolutionSource::Reference).unwrap()[0];
    let path = trace_path(out.path(), &p.definition.name, &sol.name);
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(&(line(&p, &p.workloads[0].workload.uuid, "PASSED", "cpu") + "\n"));
    std::fs::write(&path, text).unwrap();
    let e = check(&dir, &SolutionSource::Reference, out.path(), Some("cpu")).unwrap_err();
    assert!(
        e.iter().any(|x| x.contains("2 traces, expected one")),
        "{e:?}"
    );
}

/// A mutants directory for the fixture problem holding a copy of its bundled solution
/// named `name`, and a run of it in `out` with one status per workload (None: left out).
fn mutant_run(
    p: &Problem,
    name: &str,
    statuses: &[Option<&str>],
) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let bundled = &solutions_for(p, &SolutionSource::Bundled).unwrap()[0];
    let mut sol = serde_json::to_value(bundled).unwrap();
    sol["name"] = serde_json::json!(name);
    let key = p.dir.file_name().unwrap();
    let mutants = tmp.path().join("mutants");
    std::fs::create_dir_all(mutants.join(key)).unwrap();
    std::fs::write(
        mutants.join(key).join("m.json"),
        serde_json::to_string(&sol).unwrap(),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let path = trace_path(&out, &p.definition.name, name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let text: String = p
        .workloads
        .iter()
        .zip(statuses)
        .filter_map(|(w, s)| s.map(|s| line_of(p, name, &w.workload.uuid, s, "cpu") + "\n"))
        .collect();
    std::fs::write(&path, text).unwrap();
    (tmp, mutants, out)
}

fn mutant_name(p: &Problem) -> String {
    let bundled = &solutions_for(p, &SolutionSource::Bundled).unwrap()[0];
    format!("{}{MUTANT_SUFFIX}", bundled.name)
}

#[test]
fn a_mutant_wrong_on_its_tail_workload_is_caught() {
    let (dir, p) = problem();
    let n = p.workloads.len();
    let mut st = vec![Some("PASSED"); n];
    st[n - 1] = Some("INCORRECT_NUMERICAL");
    let (_tmp, mutants, out) = mutant_run(&p, &mutant_name(&p), &st);
    let t = check_mutants(&dir, &mutants, &out).unwrap();
    assert_eq!(
        t,
        MutantTally {
            mutants: 1,
            caught: 1,
            passed: n - 1
        }
    );
}

#[test]
fn a_mutant_that_passes_every_workload_fails_the_corpus() {
    let (dir, p) = problem();
    let st = vec![Some("PASSED"); p.workloads.len()];
    let name = mutant_name(&p);
    let (_tmp, mutants, out) = mutant_run(&p, &name, &st);
    let e = check_mutants(&dir, &mutants, &out).unwrap_err();
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains(&name), "{e:?}");
    assert!(e[0].contains("INCORRECT_NUMERICAL on no workload"), "{e:?}");
}

#[test]
fn a_mutant_that_does_not_run_is_not_caught_and_a_missing_trace_is_named() {
    let (dir, p) = problem();
    let n = p.workloads.len();
    // Failing to compile is not the tail bug showing: no workload counts as catching it.
    let mut st = vec![Some("COMPILE_ERROR"); n];
    st[0] = None;
    let (_tmp, mutants, out) = mutant_run(&p, &mutant_name(&p), &st);
    let e = check_mutants(&dir, &mutants, &out).unwrap_err();
    assert!(e[0].contains(&p.workloads[0].workload.uuid), "{e:?}");
    assert!(e[0].contains("no evaluated trace"), "{e:?}");
    assert!(
        e[1].contains("COMPILE_ERROR") && e[1].contains("must run and be wrong"),
        "{e:?}"
    );
    assert!(e[n].contains("INCORRECT_NUMERICAL on no workload"), "{e:?}");
    assert_eq!(e.len(), n + 1, "{e:?}");
}

#[test]
fn a_bundled_solution_without_its_mutant_is_named() {
    let (dir, p) = problem();
    let mut st = vec![Some("PASSED"); p.workloads.len()];
    st[0] = Some("INCORRECT_NUMERICAL");
    // A mutant under another name does not stand in for the bundled solution's.
    let (_tmp, mutants, out) = mutant_run(&p, "something_else", &st);
    let e = check_mutants(&dir, &mutants, &out).unwrap_err();
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains(&format!("has no mutant `{}`", mutant_name(&p))),
        "{e:?}"
    );
}

/// The real corpus: every bundled solution has its mutant, and each mutant is its bundled
/// solution with the kernel changed (nothing has run, so only the traces are missing).
#[test]
fn every_bundled_solution_of_the_corpus_has_a_mutant_that_differs_from_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let corpus = root.join(CORE);
    let mutants = root.join(MUTANTS);
    let empty = tempfile::tempdir().unwrap();
    let e = check_mutants(&corpus, &mutants, empty.path()).unwrap_err();
    assert!(e.iter().all(|x| x.contains("no traces")), "{e:?}");
    let mut seen = 0;
    for dir in discover(&corpus).unwrap() {
        let p = Problem::load(&dir).unwrap();
        let ms = solutions_for(&p, &SolutionSource::Dir(mutants.clone())).unwrap();
        for b in solutions_for(&p, &SolutionSource::Bundled).unwrap() {
            let m = ms
                .iter()
                .find(|m| m.name == format!("{}{MUTANT_SUFFIX}", b.name))
                .unwrap();
            assert_eq!(m.definition, b.definition);
            assert_eq!(m.spec.entry_point, b.spec.entry_point);
            assert_ne!(m.sources[0].content, b.sources[0].content, "{}", m.name);
            assert!(m.sources[0].content.contains(") * "), "{}", m.name);
            seen += 1;
        }
    }
    assert_eq!(e.len(), seen, "{e:?}");
    assert!(seen >= 10, "{seen}");
}
