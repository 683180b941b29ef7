//! The bundled corpus end to end, as a user runs it: `kg-bench dataset validate`, then `kg-bench
//! run` with every problem's own reference and with the bundled solutions, and then every trace
//! read back: exactly one per workload of every problem and solution, each PASSED, on the device
//! asked for, and `summary.json` agreeing with the traces; then `kg-bench verify` over every
//! trace file the run wrote (chains, seals, recorded heads, each problem's tree hash). Then the
//! mutants in `fixtures/mutants/` (each bundled Triton solution with its tail mask rounded down
//! to whole blocks, `x < (n // B) * B`): every one must come out INCORRECT_NUMERICAL on at least
//! one workload and on no workload fail any other way, or the corpus has no workload whose
//! trailing dimension exposes a dropped tail. `cargo xtask test` runs it on the CPU (Triton
//! through its interpreter); `cargo xtask quickstart` on the best device there is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use kg_contract::{Problem, Status, Trace};
use kg_exec::corpus::{RunSummary, SolutionSource, discover, solutions_for, trace_path};

/// The corpus both tasks run.
pub const CORE: &str = "problems/core";
/// The two solution sets, in the order they run.
const SETS: [&str; 2] = ["reference", "bundled"];
/// Solutions that must not pass: `<problem>/<bundled solution>_tail_mask.json`, one per
/// bundled solution of the corpus (see `fixtures/mutants/README.md`).
pub const MUTANTS: &str = "fixtures/mutants";
/// What a mutant's name adds to the name of the bundled solution it was copied from.
const MUTANT_SUFFIX: &str = "_tail_mask";
/// The mutants' run is about correctness only: the fewest rounds and timed calls.
const MUTANT_RUN: [&str; 6] = ["--rounds", "2", "--warmup", "1", "--iterations", "3"];

/// What one solution set came to.
#[derive(Debug, PartialEq)]
pub struct Tally {
    /// Problems with at least one solution in the set.
    pub problems: usize,
    /// Solutions evaluated.
    pub solutions: usize,
    /// Workloads that PASSED (all of them, when checking succeeds).
    pub passed: usize,
}

/// What the mutants' run came to.
#[derive(Debug, PartialEq)]
pub struct MutantTally {
    /// Mutants evaluated.
    pub mutants: usize,
    /// Workloads on which a mutant was INCORRECT_NUMERICAL, over all mutants.
    pub caught: usize,
    /// Workloads on which a mutant PASSED (the workloads its bug does not reach).
    pub passed: usize,
}

/// On the CPU, one lane per core (at most 4; `kg-bench run --jobs`): CI's 2-core machine runs
/// the corpus about 1.4-1.9x faster with the same statuses (docs/evidence/throughput.md).
fn cpu_lanes(device: &str) -> Vec<String> {
    if device != "cpu" {
        return Vec::new();
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    vec!["--jobs".into(), cores.clamp(1, 4).to_string()]
}

/// Validates `corpus`, runs both solution sets with `bench` on `device` into `out/<set>`, and
/// checks every trace; then runs the mutants of `mutants` (when given) into `out/mutants` and
/// checks that each is caught. Fails naming each workload that did not pass or left no trace,
/// and each mutant that was not caught.
pub fn run_and_check(
    bench: &Path,
    python: &Path,
    corpus: &Path,
    mutants: Option<&Path>,
    device: &str,
    out: &Path,
) -> Result<()> {
    crate::step(&format!(
        "kg-bench dataset validate {} --device {device}",
        corpus.display()
    ));
    crate::sh(
        Command::new(bench)
            .args(["dataset", "validate"])
            .arg(corpus)
            .args(["--device", device, "--python"])
            .arg(python),
    )?;
    // The traces must say CPU when the CPU was asked for; `auto` may pick either.
    let kind = (device == "cpu").then_some("cpu");
    let mut failed = Vec::new();
    for set in SETS {
        crate::step(&format!(
            "kg-bench run {} --solutions {set} --device {device}",
            corpus.display()
        ));
        let dir = out.join(set);
        let t0 = Instant::now();
        let status = Command::new(bench)
            .arg("run")
            .arg(corpus)
            .args(["--solutions", set, "--device", device, "--rerun", "-o"])
            .arg(&dir)
            .args(cpu_lanes(device))
            .arg("--python")
            .arg(python)
            .status()
            .with_context(|| format!("failed to start `{}`", bench.display()))?;
        // 0: all passed; 1: some did not (named below, from the traces). Anything else is
        // kg-bench refusing the run or dying, which no trace explains.
        if !matches!(status.code(), Some(0 | 1)) {
            bail!("`kg-bench run --solutions {set}` failed with {status}; see its output above");
        }
        match check(corpus, &SolutionSource::parse(set), &dir, kind) {
            Ok(t) => eprintln!(
                "{set}: all {} workload(s) PASSED, {} solution(s) over {} problem(s), in {:.0} s; traces in `{}`",
                t.passed,
                t.solutions,
                t.problems,
                t0.elapsed().as_secs_f64(),
                dir.display()
            ),
            Err(problems) => {
                for p in &problems {
                    eprintln!("{set}: {p}");
                }
                failed.push(format!(
                    "{set}: {} finding(s), the first: {}",
                    problems.len(),
                    problems[0]
                ));
            }
        }
        // Every trace file the run wrote: each line's chain and seal, each file against the head
        // summary.json records, and each problem's tree hash as it is now.
        let summary = dir.join("summary.json");
        crate::step(&format!(
            "kg-bench verify --summary {} --corpus {}",
            summary.display(),
            corpus.display()
        ));
        if let Err(e) = crate::sh(
            Command::new(bench)
                .arg("verify")
                .arg("--summary")
                .arg(&summary)
                .arg("--corpus")
                .arg(corpus),
        ) {
            failed.push(format!("{set}: the traces do not verify: {e:#}"));
        }
    }
    if let Some(mutants) = mutants
        && let Err(e) = run_mutants(bench, python, corpus, mutants, device, out)
    {
        failed.push(format!("{e:#}"));
    }
    if !failed.is_empty() {
        bail!(
            "the corpus did not pass end to end:\n  {}",
            failed.join("\n  ")
        );
    }
    Ok(())
}

/// Runs every mutant of `mutants` over `corpus` into `out/mutants` and checks each was caught.
fn run_mutants(
    bench: &Path,
    python: &Path,
    corpus: &Path,
    mutants: &Path,
    device: &str,
    out: &Path,
) -> Result<()> {
    crate::step(&format!(
        "kg-bench run {} --solutions {} --device {device} {} (mutants: each must fail)",
        corpus.display(),
        mutants.display(),
        MUTANT_RUN.join(" ")
    ));
    let dir = out.join("mutants");
    let t0 = Instant::now();
    let status = Command::new(bench)
        .arg("run")
        .arg(corpus)
        .arg("--solutions")
        .arg(mutants)
        .args(["--device", device, "--rerun", "-q"])
        .args(cpu_lanes(device))
        .args(MUTANT_RUN)
        .arg("-o")
        .arg(&dir)
        .arg("--python")
        .arg(python)
        .status()
        .with_context(|| format!("failed to start `{}`", bench.display()))?;
    // 1: some workload did not pass, as it must not. 0: every mutant passed everything.
    match status.code() {
        Some(0 | 1) => {}
        _ => bail!(
            "mutants: `kg-bench run --solutions {}` failed with {status}; see its output above",
            mutants.display()
        ),
    }
    match check_mutants(corpus, mutants, &dir) {
        Ok(t) => {
            eprintln!(
                "mutants: all {} caught (INCORRECT_NUMERICAL on {} workload(s), PASSED on {} their bug does not reach), in {:.0} s; traces in `{}`",
                t.mutants,
                t.caught,
                t.passed,
                t0.elapsed().as_secs_f64(),
                dir.display()
            );
            Ok(())
        }
        Err(problems) => {
            for p in &problems {
                eprintln!("mutants: {p}");
            }
            bail!(
                "mutants: {} finding(s), the first: {}",
                problems.len(),
                problems[0]
            )
        }
    }
}

/// Checks the mutants' run in `out`: every bundled solution of `corpus` has a mutant in
/// `mutants` named after it (`<name>_tail_mask`), and every mutant left one trace per workload,
/// INCORRECT_NUMERICAL on at least one and PASSED or INCORRECT_NUMERICAL on all (a mutant that
/// does not compile or run proves nothing about the workloads). Returns every problem found.
pub fn check_mutants(
    corpus: &Path,
    mutants: &Path,
    out: &Path,
) -> Result<MutantTally, Vec<String>> {
    let mut problems = Vec::new();
    let mut tally = MutantTally {
        mutants: 0,
        caught: 0,
        passed: 0,
    };
    let dirs = discover(corpus).map_err(|e| vec![e.to_string()])?;
    let source = SolutionSource::Dir(mutants.to_path_buf());
    for dir in dirs {
        let problem = match Problem::load(&dir) {
            Ok(p) => p,
            Err(e) => {
                problems.push(format!("`{}`: {e}", dir.display()));
                continue;
            }
        };
        let name = &problem.definition.name;
        let (bundled, muts) = match (
            solutions_for(&problem, &SolutionSource::Bundled),
            solutions_for(&problem, &source),
        ) {
            (Ok(b), Ok(m)) => (b, m),
            (Err(e), _) | (_, Err(e)) => {
                problems.push(format!("{name}: {e}"));
                continue;
            }
        };
        for b in &bundled {
            let want = format!("{}{MUTANT_SUFFIX}", b.name);
            if !muts.iter().any(|m| m.name == want) {
                problems.push(format!(
                    "{name}: bundled solution `{}` has no mutant `{want}` in `{}`",
                    b.name,
                    mutants.join(name).display()
                ));
            }
        }
        for m in &muts {
            tally.mutants += 1;
            let path = trace_path(out, name, &m.name);
            let rows = match kg_contract::io::load_jsonl::<Trace>(&path) {
                Ok(r) => r,
                Err(e) => {
                    problems.push(format!("{name} / {}: no traces ({e})", m.name));
                    continue;
                }
            };
            let mut by_uuid: BTreeMap<&str, Vec<&Trace>> = BTreeMap::new();
            for (_, t, _) in &rows {
                by_uuid.entry(t.workload.uuid.as_str()).or_default().push(t);
            }
            let mut caught = 0;
            for w in &problem.workloads {
                let uuid = w.workload.uuid.as_str();
                let at = format!("{name} / {} / workload {uuid}", m.name);
                let Some(e) = by_uuid
                    .get(uuid)
                    .and_then(|t| t.first())
                    .and_then(|t| t.evaluation.as_ref())
                else {
                    problems.push(format!("{at}: no evaluated trace in `{}`", path.display()));
                    continue;
                };
                match e.status {
                    Status::Passed => tally.passed += 1,
                    Status::IncorrectNumerical => caught += 1,
                    other => problems.push(format!(
                        "{at}: {} ({}); a mutant must run and be wrong, not fail otherwise",
                        other.as_str(),
                        why(&e.log)
                    )),
                }
            }
            if caught == 0 {
                problems.push(format!(
                    "{name} / {}: INCORRECT_NUMERICAL on no workload; none has a trailing dimension that reaches its dropped tail",
                    m.name
                ));
            }
            tally.caught += caught;
        }
    }
    if tally.mutants == 0 {
        problems.push(format!(
            "`{}` holds no mutants for the problems of `{}`",
            mutants.display(),
            corpus.display()
        ));
    }
    if problems.is_empty() {
        Ok(tally)
    } else {
        Err(problems)
    }
}

/// Checks the traces of one run of `source` over `corpus` in `out`: one trace for every
/// workload of every solution, each PASSED (on a device of `kind` when given), and the run's
/// `summary.json` counting the same. Returns every problem found, not just the first.
pub fn check(
    corpus: &Path,
    source: &SolutionSource,
    out: &Path,
    kind: Option<&str>,
) -> Result<Tally, Vec<String>> {
    let mut problems = Vec::new();
    let mut tally = Tally {
        problems: 0,
        solutions: 0,
        passed: 0,
    };
    let dirs = discover(corpus).map_err(|e| vec![e.to_string()])?;
    let mut expected_totals = 0usize;
    for dir in dirs {
        let problem = match Problem::load(&dir) {
            Ok(p) => p,
            Err(e) => {
                problems.push(format!("`{}`: {e}", dir.display()));
                continue;
            }
        };
        let name = &problem.definition.name;
        let sols = match solutions_for(&problem, source) {
            Ok(s) => s,
            Err(e) => {
                problems.push(format!("{name}: {e}"));
                continue;
            }
        };
        if sols.is_empty() {
            continue;
        }
        tally.problems += 1;
        for sol in &sols {
            tally.solutions += 1;
            expected_totals += problem.workloads.len();
            let path = trace_path(out, name, &sol.name);
            let rows = match kg_contract::io::load_jsonl::<Trace>(&path) {
                Ok(r) => r,
                Err(e) => {
                    problems.push(format!("{name} / {}: no traces ({e})", sol.name));
                    continue;
                }
            };
            // Each workload's traces, by uuid, in file order.
            let mut by_uuid: BTreeMap<&str, Vec<&Trace>> = BTreeMap::new();
            for (_, t, _) in &rows {
                by_uuid.entry(t.workload.uuid.as_str()).or_default().push(t);
            }
            for w in &problem.workloads {
                let uuid = w.workload.uuid.as_str();
                let axes: Vec<String> = w
                    .workload
                    .axes
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                let at = format!(
                    "{name} / {} / workload {uuid} ({})",
                    sol.name,
                    axes.join(", ")
                );
                let Some(traces) = by_uuid.remove(uuid) else {
                    problems.push(format!("{at}: no trace in `{}`", path.display()));
                    continue;
                };
                if traces.len() > 1 {
                    problems.push(format!("{at}: {} traces, expected one", traces.len()));
                }
                let Some(e) = &traces[0].evaluation else {
                    problems.push(format!("{at}: trace without an evaluation"));
                    continue;
                };
                if e.status != Status::Passed {
                    problems.push(format!("{at}: {} ({})", e.status.as_str(), why(&e.log)));
                    continue;
                }
                let got = e.environment.device.as_ref().map(|d| d.kind.as_str());
                if let Some(want) = kind
                    && got != Some(want)
                {
                    problems.push(format!(
                        "{at}: PASSED on device {got:?}, but the run asked for {want}"
                    ));
                    continue;
                }
                tally.passed += 1;
            }
            // What is left was not asked for.
            let extra: usize = by_uuid.values().map(Vec::len).sum();
            if extra > 0 {
                problems.push(format!(
                    "{name} / {}: {extra} trace(s) of workloads the problem does not have",
                    sol.name
                ));
            }
        }
    }
    match kg_contract::io::load_json::<RunSummary>(&out.join("summary.json")) {
        Ok((s, _)) => {
            for (problem, why) in &s.errors {
                problems.push(format!(
                    "summary.json: {problem} could not be loaded: {why}"
                ));
            }
            let passed = s.totals.get(Status::Passed.as_str()).copied().unwrap_or(0);
            let all: usize = s.totals.values().sum();
            if all != expected_totals || passed != tally.passed {
                problems.push(format!(
                    "summary.json counts {passed} PASSED of {all}; the traces hold {} PASSED of {expected_totals} workload(s) expected",
                    tally.passed
                ));
            }
        }
        Err(e) => problems.push(format!("summary.json: {e}")),
    }
    if tally.solutions == 0 {
        problems.push(format!(
            "`{}` holds no solutions to run for `{source:?}`",
            corpus.display()
        ));
    }
    if problems.is_empty() {
        Ok(tally)
    } else {
        Err(problems)
    }
}

/// What a failed workload's log says, in one line: its first two lines that are not the
/// harness's own bookkeeping (`harness: ...`), else its first line.
fn why(log: &str) -> String {
    let lines: Vec<&str> = log
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let own: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| !l.starts_with("harness:"))
        .take(2)
        .collect();
    match (own.is_empty(), lines.first()) {
        (false, _) => own.join(" | "),
        (true, Some(first)) => (*first).to_string(),
        (true, None) => "empty log".into(),
    }
}

/// `cargo xtask corpus [--device D] [--kg-bench PATH]`: the check alone (the CPU unless told;
/// a debug kg-bench built here unless given).
pub fn task(root: &Path, args: &[String]) -> Result<()> {
    let mut device = "cpu".to_string();
    let mut bench = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .with_context(|| format!("`{a}` needs a value"))
        };
        match a.as_str() {
            "--device" => device = value()?,
            "--kg-bench" => bench = Some(PathBuf::from(value()?)),
            other => bail!(
                "unknown argument `{other}`; usage: cargo xtask corpus [--device cpu|auto|cuda:N|rocm:N] [--kg-bench PATH]"
            ),
        }
    }
    let python = crate::setup(root)?;
    let bench = match bench {
        Some(b) => b,
        None => crate::redteam::default_kg_bench(root)?,
    };
    run_and_check(
        &bench,
        &python,
        Path::new(CORE),
        Some(Path::new(MUTANTS)),
        &device,
        &out_dir(root),
    )
}

/// `target/xtask-corpus` (or under `CARGO_TARGET_DIR`): where `test` keeps the runs' traces.
pub fn out_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
        .join("xtask-corpus")
}

#[cfg(test)]
mod tests {
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
    fn run(
        p: &Problem,
        rows: &[Option<(&str, &str)>],
        passed: usize,
        all: usize,
    ) -> tempfile::TempDir {
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
}
