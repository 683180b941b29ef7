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
mod tests;
