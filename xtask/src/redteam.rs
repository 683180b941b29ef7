//! `cargo xtask redteam`: runs the red-team corpus in `fixtures/adversarial/` through
//! `kg-bench evaluate` and checks that every adversarial solution is caught, every honest one
//! passes, no process survives and the problem directory is byte-identical afterwards.
//!
//! Each case runs in a scratch directory: a copy of its problem directory (so a candidate that
//! plants files cannot touch the checkout), a working directory for kg-bench and a `TMPDIR`
//! holding kg-bench's private worker directory. kg-bench runs as a subprocess with `--json`,
//! short limits and a marker environment variable. This process makes itself a child
//! subreaper, so every process a candidate leaves behind (also one that called `setsid`) is
//! re-parented here; those, and any process still carrying the marker, are reported and killed
//! by pid.
//!
//! Verdict per case (see `fixtures/adversarial/README.md`):
//! - honest (`expected: PASSED`): every workload PASSED and side effects clean, else
//!   FALSE-POSITIVE;
//! - adversarial: every workload is not PASSED, or PASSED with `0 < speedup <= max_speedup`
//!   where the manifest gives `max_speedup` (a timing hack that gained nothing); and side
//!   effects clean. Otherwise MISSED. A case caught with another status than the expected
//!   one is `caught` (`--strict` makes it a failure).
//!
//! Not for: measuring overhead or GPU evidence (that is `docs/evidence/integrity.md`).

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kg_contract::{Status, Trace};
use serde_json::Value;

const MANIFEST: &str = "fixtures/adversarial/manifest.json";
const SOURCES: &str = "fixtures/adversarial/src";
const MARKER_ENV: &str = "KG_REDTEAM_MARKER";
/// A trace log longer than this means the engine's log bound failed (2 x 64 KiB + notes).
const MAX_LOG_BYTES: usize = 2 * 64 * 1024 + 4096;
const USAGE: &str = "usage: cargo xtask redteam [--device cpu|cuda:N] [--kg-bench PATH] [--python PATH] [--case NAME,...] [--strict] [--keep]";

/// Command-line options of `cargo xtask redteam`.
#[derive(Debug)]
struct Opts {
    device: String,
    kg_bench: Option<PathBuf>,
    python: Option<PathBuf>,
    cases: Option<Vec<String>>,
    strict: bool,
    keep: bool,
}

fn parse_args(args: &[String]) -> Result<Opts> {
    let mut o = Opts {
        device: "cpu".into(),
        kg_bench: None,
        python: None,
        cases: None,
        strict: false,
        keep: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| -> Result<String> {
            it.next()
                .cloned()
                .with_context(|| format!("{name} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--device" => o.device = value("--device")?,
            "--kg-bench" => o.kg_bench = Some(PathBuf::from(value("--kg-bench")?)),
            "--python" => o.python = Some(PathBuf::from(value("--python")?)),
            "--case" => o.cases = Some(value("--case")?.split(',').map(str::to_string).collect()),
            "--strict" => o.strict = true,
            "--keep" => o.keep = true,
            "-h" | "--help" => bail!("{USAGE}"),
            other => bail!("unknown argument `{other}`\n{USAGE}"),
        }
    }
    if o.device != "cpu" && !o.device.starts_with("cuda:") && !o.device.starts_with("rocm:") {
        bail!("--device must be cpu, cuda:N or rocm:N, got `{}`", o.device);
    }
    Ok(o)
}

/// One manifest entry.
#[derive(Debug, Clone)]
struct Case {
    case: String,
    pattern: String,
    problem: PathBuf,
    solution: PathBuf,
    expected: String,
    gpu_only: bool,
    defence: String,
    max_speedup: Option<f64>,
    timeout_s: Option<u64>,
    max_workloads: Option<u64>,
    workloads: Option<PathBuf>,
    /// A pattern the engine is known not to stop yet, and why (reported, not a failure).
    known_gap: Option<String>,
}

impl Case {
    fn honest(&self) -> bool {
        self.expected == "PASSED" && self.pattern.starts_with("honest")
    }
}

fn load_manifest(root: &Path) -> Result<Vec<Case>> {
    let path = root.join(MANIFEST);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("failed to read `{}`", path.display()))?;
    let v: Value = serde_json::from_str(&text)
        .with_context(|| format!("failed to parse `{}` as JSON", path.display()))?;
    let arr = v
        .as_array()
        .with_context(|| format!("`{}`: expected a JSON array of cases", path.display()))?;
    let valid = |e: &str| {
        matches!(e, "not_passed" | "REWARD_HACK" | "PASSED") || Status::parse(e).is_some()
    };
    let mut out = Vec::new();
    for (i, e) in arr.iter().enumerate() {
        let s = |k: &str| -> Result<String> {
            e.get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .with_context(|| {
                    format!(
                        "`{}`: entry {i}: missing string field `{k}`",
                        path.display()
                    )
                })
        };
        let case = s("case")?;
        let expected = s("expected")?;
        if !valid(&expected) {
            bail!(
                "`{}`: case `{case}`: `expected` is `{expected}`; use not_passed, REWARD_HACK, PASSED or a status",
                path.display()
            );
        }
        let device = s("device")?;
        if device != "any" && device != "gpu" {
            bail!(
                "`{}`: case `{case}`: `device` is `{device}`; use any or gpu",
                path.display()
            );
        }
        out.push(Case {
            pattern: s("pattern")?,
            problem: root.join(s("problem")?),
            solution: root.join(s("solution")?),
            expected,
            gpu_only: device == "gpu",
            defence: s("defence")?,
            max_speedup: e.get("max_speedup").and_then(Value::as_f64),
            timeout_s: e.get("timeout_s").and_then(Value::as_u64),
            max_workloads: e.get("max_workloads").and_then(Value::as_u64),
            workloads: e
                .get("workloads")
                .and_then(Value::as_str)
                .map(|p| root.join(p)),
            known_gap: e
                .get("known_gap")
                .and_then(Value::as_str)
                .map(str::to_string),
            case,
        });
    }
    Ok(out)
}

/// The source `gen.py` would put into the solution: the file minus its `# key: value` header.
fn source_body(text: &str) -> String {
    let mut rest = text;
    while let Some(line_end) = rest.find('\n') {
        let line = &rest[..line_end];
        if line.starts_with("# ") && line.contains(':') {
            rest = &rest[line_end + 1..];
        } else {
            break;
        }
    }
    rest.trim_start_matches('\n').to_string()
}

/// Fails when a solution JSON no longer matches its `src/<case>.py` (run `gen.py`).
fn check_fresh(root: &Path, cases: &[Case]) -> Result<()> {
    let mut stale = Vec::new();
    for c in cases {
        let src = root.join(SOURCES).join(format!("{}.py", c.case));
        if !src.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&src)
            .with_context(|| format!("failed to read `{}`", src.display()))?;
        let (sol, _) = kg_contract::load_solution(&c.solution)
            .with_context(|| format!("case `{}`", c.case))?;
        let same = sol
            .sources
            .first()
            .is_some_and(|f| f.content == source_body(&text));
        if !same {
            stale.push(c.case.clone());
        }
    }
    if !stale.is_empty() {
        bail!(
            "solution JSON out of date with fixtures/adversarial/src for: {}\nhint: run `python3 fixtures/adversarial/gen.py`",
            stale.join(", ")
        );
    }
    Ok(())
}

/// Relative path -> SHA-256 of every file (and `dir` for directories) below `dir`.
fn tree_hash(dir: &Path) -> Result<BTreeMap<String, String>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) -> Result<()> {
        let rd = std::fs::read_dir(dir)
            .with_context(|| format!("failed to list `{}`", dir.display()))?;
        for ent in rd {
            let ent = ent.with_context(|| format!("failed to list `{}`", dir.display()))?;
            let p = ent.path();
            let rel = p
                .strip_prefix(base)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned();
            let meta = std::fs::symlink_metadata(&p)
                .with_context(|| format!("failed to stat `{}`", p.display()))?;
            if meta.is_dir() {
                out.insert(rel, "dir".into());
                walk(base, &p, out)?;
            } else if meta.is_file() {
                let bytes = std::fs::read(&p)
                    .with_context(|| format!("failed to read `{}`", p.display()))?;
                out.insert(rel, kg_contract::io::sha256_hex(&bytes));
            } else {
                out.insert(rel, "special".into());
            }
        }
        Ok(())
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out)?;
    Ok(out)
}

fn tree_diff(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> Vec<String> {
    let mut d = Vec::new();
    for (k, v) in after {
        match before.get(k) {
            None => d.push(format!("+{k}")),
            Some(b) if b != v => d.push(format!("~{k}")),
            _ => {}
        }
    }
    for k in before.keys() {
        if !after.contains_key(k) {
            d.push(format!("-{k}"));
        }
    }
    d
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("failed to create `{}`", to.display()))?;
    for ent in
        std::fs::read_dir(from).with_context(|| format!("failed to list `{}`", from.display()))?
    {
        let ent = ent.with_context(|| format!("failed to list `{}`", from.display()))?;
        let p = ent.path();
        let dest = to.join(ent.file_name());
        if p.is_dir() {
            copy_tree(&p, &dest)?;
        } else {
            std::fs::copy(&p, &dest)
                .with_context(|| format!("failed to copy `{}`", p.display()))?;
        }
    }
    Ok(())
}

/// Processes that are ours to clean up: re-parented to us (we are a subreaper) or carrying
/// the case's marker in their environment. Returns `pid: command line`.
fn survivors(marker: &str, known_child: Option<u32>) -> Vec<(i32, String)> {
    let me = std::process::id();
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return out;
    };
    let needle = format!("{MARKER_ENV}={marker}");
    for ent in rd.flatten() {
        let name = ent.file_name();
        let Some(pid) = name.to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || Some(pid) == known_child {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the command name: state, ppid, ...
        let after = stat.rsplit_once(')').map(|(_, r)| r.trim()).unwrap_or("");
        let mut fields = after.split_whitespace();
        let state = fields.next().unwrap_or("");
        let ppid: u32 = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if state == "Z" {
            continue;
        }
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        let marked = environ.split(|b| *b == 0).any(|kv| kv == needle.as_bytes());
        if ppid == me || marked {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd: String = String::from_utf8_lossy(&cmd)
                .replace('\0', " ")
                .chars()
                .take(120)
                .collect();
            if let Ok(p) = i32::try_from(pid) {
                out.push((p, cmd.trim().to_string()));
            }
        }
    }
    out
}

fn kill_and_reap(pids: &[(i32, String)]) {
    use rustix::process::{Pid, Signal, WaitOptions, kill_process, wait};
    for (pid, _) in pids {
        if let Some(p) = Pid::from_raw(*pid) {
            let _ = kill_process(p, Signal::KILL);
        }
    }
    std::thread::sleep(Duration::from_millis(100));
    // Reap orphans re-parented to us; never blocks.
    while let Ok(Some(_)) = wait(WaitOptions::NOHANG) {}
}

/// What one case produced.
struct Got {
    statuses: Vec<Status>,
    traces: Vec<Trace>,
    harness_error: Option<String>,
    survivors: Vec<(i32, String)>,
    problem_diff: Vec<String>,
    cwd_diff: Vec<String>,
    long_logs: Vec<usize>,
    wall: f64,
}

fn run_case(
    root: &Path,
    opts: &Opts,
    kg_bench: &Path,
    work: &Path,
    nonce: &str,
    c: &Case,
) -> Result<Got> {
    let dir = work.join(&c.case);
    let pname = c
        .problem
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "problem".into());
    let problem = dir.join("problem").join(&pname);
    let cwd = dir.join("cwd");
    let tmp = dir.join("tmp");
    copy_tree(&c.problem, &problem)?;
    for d in [&cwd, &tmp] {
        std::fs::create_dir_all(d)
            .with_context(|| format!("failed to create `{}`", d.display()))?;
    }
    let before_p = tree_hash(&problem)?;
    let before_c = tree_hash(&cwd)?;
    let timeout = c.timeout_s.unwrap_or(30);
    let max_w = c.max_workloads.unwrap_or(2);
    let marker = format!("{nonce}-{}", c.case);
    let mut cmd = Command::new(kg_bench);
    cmd.arg("evaluate");
    match &c.workloads {
        Some(w) => {
            cmd.arg("--definition")
                .arg(problem.join("definition.json"))
                .arg("--workload")
                .arg(w);
        }
        None => {
            cmd.arg(&problem);
        }
    }
    cmd.arg("--solution")
        .arg(&c.solution)
        .args(["--device", &opts.device, "--json"])
        .args(["--max-workloads", &max_w.to_string()])
        .args(["--rounds", "10", "--warmup", "2", "--iterations", "10"])
        .args([
            "--timeout",
            &timeout.to_string(),
            "--compile-timeout",
            "180",
        ]);
    if let Some(p) = &opts.python {
        cmd.arg("--python").arg(p);
    } else {
        let venv = root.join(".venv/bin/python");
        if venv.is_file() {
            cmd.arg("--python").arg(venv);
        }
    }
    cmd.current_dir(&cwd)
        .env(MARKER_ENV, &marker)
        .env("TMPDIR", &tmp)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let t0 = Instant::now();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("failed to start `{}`", kg_bench.display()))?;
    let child_pid = child.id();
    let read_all = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out_t = read_all(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err_t = read_all(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    // Generous: every workload may time out, plus interpreter start-up and grace periods.
    let limit = Duration::from_secs(240 + (timeout + 10) * max_w);
    let mut hung = false;
    let status = loop {
        if let Some(st) = child.try_wait().context("failed to wait for kg-bench")? {
            break Some(st);
        }
        if t0.elapsed() > limit {
            hung = true;
            if let Some(p) = i32::try_from(child_pid)
                .ok()
                .and_then(rustix::process::Pid::from_raw)
            {
                let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
            }
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let wall = t0.elapsed().as_secs_f64();
    let stdout = out_t.join().unwrap_or_default();
    let stderr = err_t.join().unwrap_or_default();
    // Kept for `--keep` (the scratch directory is removed otherwise).
    let _ = std::fs::write(dir.join("kg-bench.stdout.json"), &stdout);
    let _ = std::fs::write(dir.join("kg-bench.stderr"), &stderr);
    // Give re-parented orphans a moment to show up, then sweep.
    std::thread::sleep(Duration::from_millis(500));
    let surv = survivors(&marker, None);
    kill_and_reap(&surv);
    let problem_diff = tree_diff(&before_p, &tree_hash(&problem)?);
    let cwd_diff = tree_diff(&before_c, &tree_hash(&cwd)?);
    let err_tail = {
        let s = String::from_utf8_lossy(&stderr);
        let s = s.trim();
        let start = s.len().saturating_sub(600);
        let mut i = start;
        while !s.is_char_boundary(i) {
            i += 1;
        }
        s[i..].to_string()
    };
    let mut harness_error = None;
    let mut traces: Vec<Trace> = Vec::new();
    if hung {
        harness_error = Some(format!(
            "kg-bench did not finish within {} s and was killed",
            limit.as_secs()
        ));
    } else {
        let code = status.and_then(|s| s.code());
        match kg_contract::io::parse_json::<Vec<Trace>>(
            &String::from_utf8_lossy(&stdout),
            Path::new("<kg-bench stdout>"),
            None,
        ) {
            Ok((t, _)) if matches!(code, Some(0) | Some(1)) && !t.is_empty() => traces = t,
            Ok(_) | Err(_) => {
                harness_error = Some(format!(
                    "kg-bench exited with {code:?} without traces: {err_tail}"
                ))
            }
        }
    }
    let statuses = traces
        .iter()
        .map(|t| {
            t.evaluation
                .as_ref()
                .map_or(Status::RuntimeError, |e| e.status)
        })
        .collect();
    let long_logs = traces
        .iter()
        .filter_map(|t| t.evaluation.as_ref().map(|e| e.log.len()))
        .filter(|n| *n > MAX_LOG_BYTES)
        .collect();
    Ok(Got {
        statuses,
        traces,
        harness_error,
        survivors: surv,
        problem_diff,
        cwd_diff,
        long_logs,
        wall,
    })
}

/// Which defence the engine's own message says stopped a workload.
fn caught_by(t: &Trace) -> String {
    let Some(e) = &t.evaluation else {
        return "no evaluation".into();
    };
    let log = &e.log;
    let first = log
        .lines()
        .find(|l| !l.trim().is_empty() && !l.starts_with("---"))
        .unwrap_or("");
    match e.status {
        Status::Passed => match &e.performance {
            Some(p) => format!("timing gave {:.2}x (earned)", p.speedup_factor),
            None => "passed".into(),
        },
        Status::RewardHack => format!("REWARD_HACK: {}", clip(first, 70)),
        Status::Timeout => "timeout + process-group kill".into(),
        Status::CompileError => "import/build failed".into(),
        Status::InvalidReference => "judge failed (INVALID_REFERENCE)".into(),
        Status::RuntimeError if log.contains("the candidate process") => {
            "worker death contained (process split)".into()
        }
        Status::RuntimeError if log.contains("unreadable") => {
            "judge-side output loading (torch.load weights_only)".into()
        }
        Status::RuntimeError => format!("runtime error: {}", clip(first, 60)),
        Status::IncorrectShape | Status::IncorrectNumerical | Status::IncorrectDtype => {
            if log.contains("timed calls differ") {
                "re-check of timed outputs".into()
            } else if log.contains("expected a torch.Tensor") {
                "exact torch.Tensor output check".into()
            } else if log.contains("round ") {
                "judge-side correctness rounds".into()
            } else {
                format!("judge: {}", clip(first, 60))
            }
        }
    }
}

fn clip(s: &str, n: usize) -> String {
    let mut out: String = s.chars().take(n).collect();
    if s.chars().count() > n {
        out.push('…');
    }
    out
}

/// The outcome of one case against its expectation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    /// Honest and PASSED, or an adversarial case stopped with the expected status.
    Ok,
    /// Adversarial, stopped, but with another status than expected.
    CaughtOther,
    /// Adversarial and not stopped (or it left side effects).
    Missed,
    /// Honest, and not PASSED (or it tripped a side-effect check).
    FalsePositive,
    /// kg-bench itself failed, or a case listed as a known gap was stopped (the manifest
    /// must then drop its `known_gap`).
    Error,
    /// Adversarial, not stopped, and listed in the manifest as a known gap (with the reason).
    KnownGap,
}

impl Verdict {
    fn label(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::CaughtOther => "caught",
            Verdict::Missed => "MISSED",
            Verdict::FalsePositive => "FALSE-POSITIVE",
            Verdict::Error => "ERROR",
            Verdict::KnownGap => "KNOWN-GAP",
        }
    }
}

/// [`judge_case`], then the manifest's `known_gap`: an escape with no side effects is reported
/// as KNOWN-GAP; a known gap that was stopped is an error until the manifest says so.
fn judge(c: &Case, g: &Got) -> (Verdict, String) {
    let (v, why) = judge_case(c, g);
    match (&c.known_gap, v) {
        (Some(gap), Verdict::Missed) if side_effects(g).is_empty() => {
            (Verdict::KnownGap, format!("{why}; known gap: {gap}"))
        }
        (Some(_), Verdict::Ok | Verdict::CaughtOther) => (
            Verdict::Error,
            format!(
                "{why}; stopped, but the manifest lists it as a known gap: remove `known_gap` from its source header"
            ),
        ),
        _ => (v, why),
    }
}

/// What a case left behind or broke outside its traces (each a miss whatever the statuses).
fn side_effects(g: &Got) -> Vec<String> {
    let mut side = Vec::new();
    if !g.survivors.is_empty() {
        let list: Vec<String> = g
            .survivors
            .iter()
            .map(|(p, cmd)| format!("{p} `{}`", clip(cmd, 50)))
            .collect();
        side.push(format!("survivor(s) killed: {}", list.join(", ")));
    }
    if !g.problem_diff.is_empty() {
        side.push(format!("problem dir changed: {}", g.problem_diff.join(" ")));
    }
    if !g.cwd_diff.is_empty() {
        side.push(format!("kg-bench cwd changed: {}", g.cwd_diff.join(" ")));
    }
    if !g.long_logs.is_empty() {
        side.push(format!("unbounded trace log(s): {:?} bytes", g.long_logs));
    }
    side
}

fn judge_case(c: &Case, g: &Got) -> (Verdict, String) {
    if let Some(e) = &g.harness_error {
        return (Verdict::Error, e.clone());
    }
    let side = side_effects(g);
    let all_passed = g.statuses.iter().all(|s| *s == Status::Passed);
    if c.expected == "PASSED" {
        if all_passed && side.is_empty() {
            return (Verdict::Ok, "all PASSED".into());
        }
        let why = if all_passed {
            side.join("; ")
        } else {
            let fails: Vec<String> = g
                .traces
                .iter()
                .filter(|t| {
                    t.evaluation
                        .as_ref()
                        .is_some_and(|e| e.status != Status::Passed)
                })
                .map(caught_by)
                .collect();
            let mut v = vec![fails.join("; ")];
            v.extend(side);
            v.join("; ")
        };
        return if c.honest() {
            (Verdict::FalsePositive, why)
        } else if all_passed {
            (Verdict::Missed, format!("{why}; needs: {}", c.defence))
        } else {
            (Verdict::CaughtOther, why)
        };
    }
    // Adversarial: every workload must be stopped, or PASSED with no unearned speed.
    let mut escaped = Vec::new();
    let mut how = Vec::new();
    for t in &g.traces {
        let Some(e) = &t.evaluation else { continue };
        if e.status == Status::Passed {
            let sp = e
                .performance
                .as_ref()
                .map(|p| (p.speedup_factor, p.latency_ms));
            match (c.max_speedup, sp) {
                (Some(max), Some((s, lat))) if s > 0.0 && lat > 0.0 && s <= max => {
                    how.push(format!("PASSED at {s:.2}x (<= {max}x: no unearned speed)"));
                }
                (_, Some((s, _))) => escaped.push(format!("PASSED at {s:.2}x")),
                (_, None) => escaped.push("PASSED".into()),
            }
        } else {
            how.push(caught_by(t));
        }
    }
    how.dedup();
    if !escaped.is_empty() || !side.is_empty() {
        let mut why = escaped;
        why.extend(side);
        return (
            Verdict::Missed,
            format!("{}; needs: {}", why.join("; "), c.defence),
        );
    }
    let exact = match c.expected.as_str() {
        "not_passed" => true,
        e => g.statuses.iter().all(|s| s.as_str() == e),
    };
    let v = if exact {
        Verdict::Ok
    } else {
        Verdict::CaughtOther
    };
    (v, how.join("; "))
}

fn got_summary(g: &Got) -> String {
    if g.harness_error.is_some() {
        return "error".into();
    }
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for s in &g.statuses {
        *counts.entry(s.as_str()).or_insert(0) += 1;
    }
    counts
        .iter()
        .map(|(s, n)| {
            if *n > 1 {
                format!("{s} x{n}")
            } else {
                (*s).to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Builds kg-bench (debug) and returns its path.
pub(crate) fn default_kg_bench(root: &Path) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(&cargo)
        .args(["build", "-p", "kg-bench"])
        .current_dir(root)
        .status()
        .with_context(|| format!("failed to start `{cargo} build -p kg-bench`"))?;
    if !st.success() {
        bail!("`cargo build -p kg-bench` failed ({st}); or pass --kg-bench PATH");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let p = target.join("debug").join("kg-bench");
    if !p.is_file() {
        bail!(
            "built kg-bench, but `{}` does not exist; pass --kg-bench PATH",
            p.display()
        );
    }
    Ok(p)
}

/// Runs the red-team corpus (see the module docs); fails on any miss, false positive or error.
pub fn redteam(root: &Path, args: &[String]) -> Result<()> {
    let opts = parse_args(args)?;
    let mut cases = load_manifest(root)?;
    check_fresh(root, &cases)?;
    let on_gpu = opts.device != "cpu";
    let skipped_gpu = cases.iter().filter(|c| c.gpu_only && !on_gpu).count();
    cases.retain(|c| on_gpu || !c.gpu_only);
    if let Some(names) = &opts.cases {
        for n in names {
            if !cases.iter().any(|c| &c.case == n) {
                bail!(
                    "--case `{n}`: no such case for device `{}` in {MANIFEST}",
                    opts.device
                );
            }
        }
        cases.retain(|c| names.contains(&c.case));
    }
    let kg_bench = match &opts.kg_bench {
        Some(p) => p.clone(),
        None => default_kg_bench(root)?,
    };
    if let Err(e) = rustix::process::set_child_subreaper(Some(rustix::process::getpid())) {
        eprintln!(
            "warning: failed to become a child subreaper ({e}); detached survivors are found by marker only"
        );
    }
    let nonce = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0)
    );
    let work = std::env::temp_dir().join(format!("kg-redteam-{nonce}"));
    std::fs::create_dir_all(&work)
        .with_context(|| format!("failed to create `{}`", work.display()))?;
    eprintln!(
        "==> redteam: {} case(s) on {} ({} gpu-only case(s) skipped), kg-bench `{}`",
        cases.len(),
        opts.device,
        skipped_gpu,
        kg_bench.display()
    );
    let t0 = Instant::now();
    let mut rows = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        eprint!("[{}/{}] {} ... ", i + 1, cases.len(), c.case);
        let g = run_case(root, &opts, &kg_bench, &work, &nonce, c)?;
        let (v, why) = judge(c, &g);
        let got = got_summary(&g);
        // The whole verdict on the progress line, so a run cut off by a time limit keeps it.
        eprintln!("{} ({:.1} s): {got}; {why}", v.label(), g.wall);
        rows.push((c.clone(), got, v, why));
    }
    if !opts.keep {
        let _ = std::fs::remove_dir_all(&work);
    }
    print_table(&rows);
    let count = |v: Verdict| rows.iter().filter(|r| r.2 == v).count();
    let (ok, other, missed, fp, err, gaps) = (
        count(Verdict::Ok),
        count(Verdict::CaughtOther),
        count(Verdict::Missed),
        count(Verdict::FalsePositive),
        count(Verdict::Error),
        count(Verdict::KnownGap),
    );
    println!(
        "{} case(s) in {:.0} s: {ok} ok, {other} caught with another status, {missed} MISSED, {fp} false positive(s), {err} error(s), {gaps} known gap(s) not yet defended (docs/integrity.md){}",
        rows.len(),
        t0.elapsed().as_secs_f64(),
        if opts.keep {
            format!("; scratch kept in `{}`", work.display())
        } else {
            String::new()
        }
    );
    let strict_fail = opts.strict && other > 0;
    if missed + fp + err > 0 || strict_fail {
        bail!(
            "red team failed: {missed} missed, {fp} false positive(s), {err} error(s){}",
            if strict_fail {
                format!(", {other} caught with another status (--strict)")
            } else {
                String::new()
            }
        );
    }
    Ok(())
}

fn print_table(rows: &[(Case, String, Verdict, String)]) {
    let header = ["case", "expected", "got", "verdict", "caught by / needs"];
    let w0 = rows
        .iter()
        .map(|r| r.0.case.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let w1 = rows
        .iter()
        .map(|r| r.0.expected.len())
        .max()
        .unwrap_or(8)
        .max(8);
    let w2 = rows.iter().map(|r| r.1.len()).max().unwrap_or(3).max(3);
    let w3 = 14;
    println!(
        "{:w0$}  {:w1$}  {:w2$}  {:w3$}  {}",
        header[0], header[1], header[2], header[3], header[4]
    );
    for (c, got, v, why) in rows {
        println!(
            "{:w0$}  {:w1$}  {:w2$}  {:w3$}  {}",
            c.case,
            c.expected,
            got,
            v.label(),
            why
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_stripped_like_gen_py() {
        let text = "# case: a\n# pattern: b: c\n\"\"\"doc\"\"\"\n# not header\nx = 1\n";
        assert_eq!(source_body(text), "\"\"\"doc\"\"\"\n# not header\nx = 1\n");
        assert_eq!(
            source_body("# case: a\n\n\nimport torch\n"),
            "import torch\n"
        );
    }

    #[test]
    fn tree_diff_names_added_changed_removed() {
        let a: BTreeMap<String, String> =
            [("x".into(), "1".into()), ("y".into(), "2".into())].into();
        let b: BTreeMap<String, String> =
            [("x".into(), "9".into()), ("z".into(), "3".into())].into();
        assert_eq!(tree_diff(&a, &b), vec!["~x", "+z", "-y"]);
    }

    fn trace(status: &str, speedup: f64) -> Trace {
        let perf = if status == "PASSED" {
            serde_json::json!({"latency_ms": 1.0 / speedup, "reference_latency_ms": 1.0,
                "speedup_factor": speedup, "timing_method": "cpu_wall"})
        } else {
            Value::Null
        };
        serde_json::from_value(serde_json::json!({
            "definition": "d", "solution": "s",
            "workload": {"uuid": "u", "axes": {}, "inputs": {}},
            "evaluation": {"status": status, "log": "", "performance": perf,
                "environment": {"hardware": "CPU", "libs": {}}, "timestamp": "t"}
        }))
        .unwrap()
    }

    fn case(known_gap: Option<&str>) -> Case {
        Case {
            case: "c".into(),
            pattern: "precomputes".into(),
            problem: PathBuf::from("p"),
            solution: PathBuf::from("s.json"),
            expected: "not_passed".into(),
            gpu_only: false,
            defence: "per-call hand-over".into(),
            max_speedup: Some(2.0),
            timeout_s: None,
            max_workloads: None,
            workloads: None,
            known_gap: known_gap.map(str::to_string),
        }
    }

    fn got(traces: Vec<Trace>, survivors: Vec<(i32, String)>) -> Got {
        Got {
            statuses: traces
                .iter()
                .filter_map(|t| t.evaluation.as_ref().map(|e| e.status))
                .collect(),
            traces,
            harness_error: None,
            survivors,
            problem_diff: vec![],
            cwd_diff: vec![],
            long_logs: vec![],
            wall: 1.0,
        }
    }

    #[test]
    fn known_gaps_are_reported_not_failed_and_must_be_dropped_once_stopped() {
        let escaped = got(vec![trace("PASSED", 25.0)], vec![]);
        assert_eq!(judge(&case(None), &escaped).0, Verdict::Missed);
        let (v, why) = judge(&case(Some("sets handed over early")), &escaped);
        assert_eq!(v, Verdict::KnownGap);
        assert!(why.contains("sets handed over early"), "{why}");
        // Earned speed only: no gap to report, so the manifest is stale.
        let honest_speed = got(vec![trace("PASSED", 1.1)], vec![]);
        assert_eq!(judge(&case(Some("x")), &honest_speed).0, Verdict::Error);
        let stopped = got(vec![trace("INCORRECT_NUMERICAL", 0.0)], vec![]);
        assert_eq!(judge(&case(Some("x")), &stopped).0, Verdict::Error);
        // A side effect is a miss whatever the manifest says.
        let leaked = got(vec![trace("PASSED", 25.0)], vec![(42, "sleep".into())]);
        assert_eq!(judge(&case(Some("x")), &leaked).0, Verdict::Missed);
    }

    #[test]
    fn args_reject_unknown_device() {
        assert!(parse_args(&["--device".into(), "tpu".into()]).is_err());
        let o = parse_args(&["--device".into(), "cuda:1".into(), "--strict".into()]).unwrap();
        assert!(o.strict && o.device == "cuda:1");
    }
}
