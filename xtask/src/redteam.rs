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
use kg_contract::{Layer, Reason, Status, Trace};
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
    /// Wall-time bound on kg-bench (default: timeout x workloads + 30 s).
    max_wall_s: Option<u64>,
    /// Bound on kg-bench's own peak RSS in MiB (default 2048).
    max_rss_mib: Option<u64>,
    /// A kg-bench feature the case needs (`memory-limit`); skipped, visibly, without it.
    requires: Option<String>,
    /// Passed as `--memory-limit VALUE` where kg-bench supports it.
    memory_limit: Option<String>,
    /// Text some trace log must contain for the case to count as stopped (a limit the
    /// candidate reports hitting, e.g. `process creation failed`).
    log_has: Option<String>,
    /// Text no trace log may contain (a candidate reporting that it got past a limit).
    log_lacks: Option<String>,
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
            max_wall_s: e.get("max_wall_s").and_then(Value::as_u64),
            max_rss_mib: e.get("max_rss_mib").and_then(Value::as_u64),
            requires: e
                .get("requires")
                .and_then(Value::as_str)
                .map(str::to_string),
            memory_limit: e
                .get("memory_limit")
                .and_then(Value::as_str)
                .map(str::to_string),
            log_has: e.get("log_has").and_then(Value::as_str).map(str::to_string),
            log_lacks: e
                .get("log_lacks")
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
    let table: Vec<kg_proc::ProcEntry> = kg_proc::proc_table()
        .into_iter()
        .filter(|e| e.pid != me && Some(e.pid) != known_child && e.state != 'Z')
        .collect();
    let marked = kg_proc::with_env(&format!("{MARKER_ENV}={marker}"), &table);
    for e in &table {
        let pid = e.pid;
        if e.ppid == me || marked.contains(&pid) {
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
    /// kg-bench's own peak RSS (VmHWM sampled every 50 ms), MiB.
    rss_mib: Option<u64>,
    /// Start-up files of the interpreter's site directories added/changed/removed.
    startup_diff: Vec<String>,
    /// The kg-bench binary changed.
    binary_diff: Option<String>,
    /// Other solutions' caches changed.
    cache_diff: Vec<String>,
    /// `kg-redteam-litter-*` files left in the host's temp directories.
    litter: Vec<String>,
    /// Planted secrets found in a trace log or output.
    leaks: Vec<String>,
    /// How the `-o` file disagrees with the `--json` stdout, or fails `kg-bench verify`.
    trace_file: Vec<String>,
    /// Wall-time or memory bounds kg-bench broke.
    limits: Vec<String>,
}

/// What every case is checked against, set up once per run.
struct Ctx {
    probe: Probe,
    /// (variable, random value) planted in kg-bench's environment.
    secrets: Vec<(String, String)>,
    /// The interpreter's site directories (start-up files checked there).
    site_dirs: Vec<PathBuf>,
    /// The run's kernelgate cache (`KG_CACHE_DIR`), with decoys of other solutions' caches.
    cache: PathBuf,
}

/// Where one case's kg-bench works.
struct Paths<'a> {
    problem: &'a Path,
    traces: &'a Path,
    cwd: &'a Path,
    tmp: &'a Path,
}

/// The `kg-bench evaluate` command of one case: `-o` into the case's directory, the planted
/// secrets, the marker, the run's cache, `--memory-limit` where the case asks and kg-bench can.
fn kg_bench_command(
    root: &Path,
    opts: &Opts,
    kg_bench: &Path,
    c: &Case,
    ctx: &Ctx,
    at: &Paths<'_>,
    marker: &str,
) -> Command {
    let timeout = c.timeout_s.unwrap_or(30);
    let max_w = c.max_workloads.unwrap_or(2);
    let mut cmd = Command::new(kg_bench);
    cmd.arg("evaluate");
    match &c.workloads {
        Some(w) => {
            cmd.arg("--definition")
                .arg(at.problem.join("definition.json"))
                .arg("--workload")
                .arg(w);
        }
        None => {
            cmd.arg(at.problem);
        }
    }
    cmd.arg("--solution")
        .arg(&c.solution)
        .arg("-o")
        .arg(at.traces)
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
    if let (Some(m), true) = (&c.memory_limit, ctx.probe.memory_limit) {
        cmd.arg("--memory-limit").arg(m);
    }
    for (k, v) in &ctx.secrets {
        cmd.env(k, v);
    }
    cmd.current_dir(at.cwd)
        .env(MARKER_ENV, marker)
        .env("TMPDIR", at.tmp)
        .env("KG_CACHE_DIR", &ctx.cache);
    cmd
}

fn run_case(
    root: &Path,
    opts: &Opts,
    kg_bench: &Path,
    work: &Path,
    nonce: &str,
    c: &Case,
    ctx: &Ctx,
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
    let traces_file = dir.join("traces.jsonl");
    let litter_dirs: Vec<&Path> = LITTER_DIRS.iter().map(Path::new).collect();
    remove_litter(&litter(&litter_dirs));
    let before_startup = startup_files(&ctx.site_dirs);
    let before_bin = Binary::read(kg_bench)?;
    let before_cache = tree_hash(&ctx.cache)?;
    let timeout = c.timeout_s.unwrap_or(30);
    let max_w = c.max_workloads.unwrap_or(2);
    let marker = format!("{nonce}-{}", c.case);
    let mut cmd = kg_bench_command(
        root,
        opts,
        kg_bench,
        c,
        ctx,
        &Paths {
            problem: &problem,
            traces: &traces_file,
            cwd: &cwd,
            tmp: &tmp,
        },
        &marker,
    );
    cmd.stdin(Stdio::null())
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
    let mut rss_mib: Option<u64> = None;
    let status = loop {
        // VmHWM is kg-bench's own high-water mark (its workers are separate processes).
        if let Some(r) = peak_rss_mib(child_pid) {
            rss_mib = Some(rss_mib.map_or(r, |m| m.max(r)));
        }
        if let Some(st) = child.try_wait().context("failed to wait for kg-bench")? {
            break Some(st);
        }
        if t0.elapsed() > limit {
            hung = true;
            kg_proc::signal_group(child_pid, kg_proc::group::Signal::KILL);
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
    let startup_diff = files_diff(&before_startup, &startup_files(&ctx.site_dirs));
    let binary_diff = before_bin.changed();
    let cache_diff = cache_changes(&before_cache, &tree_hash(&ctx.cache)?);
    let left = litter(&litter_dirs);
    remove_litter(&left);
    let litter_found: Vec<String> = left.iter().map(|p| p.display().to_string()).collect();
    let file_text = std::fs::read(&traces_file)
        .ok()
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    let leaks = leaked_secrets(
        &ctx.secrets,
        &[
            ("kg-bench's --json stdout (trace logs)", &stdout[..]),
            ("kg-bench's stderr", &stderr[..]),
            (
                "the -o trace file",
                file_text.as_deref().unwrap_or("").as_bytes(),
            ),
        ],
    );
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
    // Also when kg-bench failed: a trace file a candidate destroyed is why it failed.
    let json: Vec<Value> = serde_json::from_slice::<Vec<Value>>(&stdout).unwrap_or_default();
    let mut trace_file = trace_file_disagreements(&json, file_text.as_deref());
    if ctx.probe.verify && file_text.is_some() {
        trace_file.extend(verify_traces(kg_bench, &traces_file, &problem));
    }
    let mut limits = limit_breaches(
        wall,
        rss_mib,
        c.max_wall_s.unwrap_or(timeout * max_w + WALL_SLACK_S),
        c.max_rss_mib.unwrap_or(DEFAULT_MAX_RSS_MIB),
    );
    if harness_error.is_none() {
        limits.extend(missing_log(c.log_has.as_deref(), &traces));
        limits.extend(forbidden_log(c.log_lacks.as_deref(), &traces));
        limits.extend(unreasoned(&traces));
    }
    Ok(Got {
        statuses,
        traces,
        harness_error,
        survivors: surv,
        problem_diff,
        cwd_diff,
        long_logs,
        wall,
        rss_mib,
        startup_diff,
        binary_diff,
        cache_diff,
        litter: litter_found,
        leaks,
        trace_file,
        limits,
    })
}

/// Which defence stopped a workload, from the trace's typed `reason` (the log's first line
/// only adds the detail).
fn caught_by(t: &Trace) -> String {
    let Some(e) = &t.evaluation else {
        return "no evaluation".into();
    };
    let first = e
        .log
        .lines()
        .find(|l| !l.trim().is_empty() && !l.starts_with("---"))
        .unwrap_or("");
    let reason = e.reason;
    let code = reason.map_or_else(|| "no reason".to_string(), |r| r.to_string());
    match e.status {
        Status::Passed => match &e.performance {
            Some(p) => format!("timing gave {:.2}x (earned)", p.speedup_factor),
            None => "passed".into(),
        },
        Status::RewardHack => format!("REWARD_HACK {code}: {}", clip(first, 60)),
        Status::Timeout => "timeout + process-group kill".into(),
        Status::CompileError => "import/build failed".into(),
        Status::InvalidReference => "judge failed (INVALID_REFERENCE)".into(),
        Status::RuntimeError => match reason {
            Some(Reason::CandidateDied) => "worker death contained (process split)".into(),
            Some(Reason::OutputsUnreadable) => {
                "judge-side output loading (torch.load weights_only)".into()
            }
            _ => format!("runtime error {code}: {}", clip(first, 50)),
        },
        Status::IncorrectShape | Status::IncorrectNumerical | Status::IncorrectDtype => {
            match reason {
                Some(Reason::TimedOutputsDiffer) => "re-check of timed outputs".into(),
                Some(Reason::OutputNotTensor) => "exact torch.Tensor output check".into(),
                Some(
                    Reason::NumericalMismatch
                    | Reason::OutputShape
                    | Reason::OutputDtype
                    | Reason::OutputCount,
                ) => "judge-side correctness rounds".into(),
                _ => format!("judge {code}: {}", clip(first, 50)),
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
    /// Not run: kg-bench lacks what the case needs (`requires`); the reason is printed.
    Skipped,
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
            Verdict::Skipped => "SKIPPED",
        }
    }
}

/// [`judge_case`], then the manifest's `known_gap`: an escape with no side effects is reported
/// as KNOWN-GAP; a known gap that was stopped is an error until the manifest says so.
fn judge(c: &Case, g: &Got) -> (Verdict, String) {
    let (v, why) = judge_case(c, g);
    // A case that needs the memory limit got through where kg-bench itself reported that
    // layer missing (no cgroup v2 delegated on a GPU host): the trace does not claim the
    // limit, and --require-sandbox refuses to run there. Listed as a gap of this host.
    let other_side = side_effects(g)
        .into_iter()
        .filter(|s| !s.starts_with(FORBIDDEN_LOG))
        .count();
    if v == Verdict::Missed
        && c.requires.as_deref() == Some("memory-limit")
        && other_side == 0
        && let Some(detail) = reported_missing(g, Layer::MemoryLimit)
    {
        return (
            Verdict::KnownGap,
            format!(
                "{why}; known gap of this host: every trace reports memory_limit MISSING ({detail}), so no PASS here claims it and --require-sandbox refuses to run"
            ),
        );
    }
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

/// The detail of `layer` where every trace of the case reports it as not held.
fn reported_missing(g: &Got, layer: Layer) -> Option<String> {
    let mut detail = None;
    for t in &g.traces {
        let l = t
            .evaluation
            .as_ref()?
            .environment
            .isolation
            .as_ref()?
            .layers
            .iter()
            .find(|l| l.layer == layer)?;
        if l.held {
            return None;
        }
        detail = Some(l.detail.clone());
    }
    detail
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
    if !g.startup_diff.is_empty() {
        side.push(format!(
            "interpreter start-up file(s) planted: {}",
            g.startup_diff.join(" ")
        ));
    }
    if let Some(b) = &g.binary_diff {
        side.push(b.clone());
    }
    if !g.cache_diff.is_empty() {
        side.push(format!(
            "other solutions' cache changed: {}",
            g.cache_diff.join(" ")
        ));
    }
    if !g.litter.is_empty() {
        side.push(format!("host temp litter: {}", g.litter.join(" ")));
    }
    if !g.leaks.is_empty() {
        side.push(format!("planted secret leaked: {}", g.leaks.join(", ")));
    }
    if !g.trace_file.is_empty() {
        side.push(format!("trace file: {}", g.trace_file.join("; ")));
    }
    side.extend(g.limits.iter().cloned());
    side
}

fn judge_case(c: &Case, g: &Got) -> (Verdict, String) {
    let side = side_effects(g);
    if let Some(e) = &g.harness_error {
        // kg-bench failed; if the case also left side effects (a destroyed trace file, a
        // changed problem), the attack is why, and it got through.
        if side.is_empty() || c.honest() {
            return (Verdict::Error, e.clone());
        }
        return (
            Verdict::Missed,
            format!("{e}; {}; needs: {}", side.join("; "), c.defence),
        );
    }
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
    let probe = probe_kg_bench(&kg_bench);
    let python = interpreter(root, &opts);
    let site = site_dirs(&python)?;
    let cache = work.join("cache");
    for d in ["triton", "torch-extensions-v1"] {
        let decoy = cache.join(d).join(DECOY);
        std::fs::create_dir_all(&decoy)
            .with_context(|| format!("failed to create `{}`", decoy.display()))?;
        std::fs::write(
            decoy.join("README"),
            "another solution's cache (red-team decoy)\n",
        )
        .with_context(|| format!("failed to write into `{}`", decoy.display()))?;
    }
    // Put back, however the run ends, what a case may have planted outside its scratch.
    let _restore = Restore {
        baseline: startup_files(&site),
        dirs: site.clone(),
        binary: Binary::read(&kg_bench).ok(),
    };
    let ctx = Ctx {
        probe,
        secrets: SECRET_VARS
            .iter()
            .map(|v| (v.to_string(), format!("kgrt{}", random_hex(16))))
            .collect(),
        site_dirs: site,
        cache,
    };
    eprintln!(
        "==> redteam: {} case(s) on {} ({} gpu-only case(s) skipped), kg-bench `{}` (verify: {}, --memory-limit: {}); start-up files checked in {} site dir(s) of `{}`",
        cases.len(),
        opts.device,
        skipped_gpu,
        kg_bench.display(),
        if ctx.probe.verify { "yes" } else { "no" },
        if ctx.probe.memory_limit { "yes" } else { "no" },
        ctx.site_dirs.len(),
        python.display()
    );
    let t0 = Instant::now();
    let mut rows = Vec::new();
    let mut planted_before = false;
    for (i, c) in cases.iter().enumerate() {
        eprint!("[{}/{}] {} ... ", i + 1, cases.len(), c.case);
        if let Some(reason) = skip_reason(c, &ctx.probe) {
            eprintln!("SKIPPED: {reason}");
            rows.push((c.clone(), "-".into(), Verdict::Skipped, reason));
            continue;
        }
        let g = run_case(root, &opts, &kg_bench, &work, &nonce, c, &ctx)?;
        // A start-up file or binary a case planted stays for the next case only (so a victim
        // case such as poisoned_later_judge shows whether it took effect), then goes.
        if planted_before {
            _restore.now();
        }
        planted_before = !g.startup_diff.is_empty() || g.binary_diff.is_some();
        let (v, why) = judge(c, &g);
        let got = got_summary(&g);
        // The whole verdict on the progress line, so a run cut off by a time limit keeps it.
        eprintln!(
            "{} ({:.1} s, kg-bench peak RSS {} MiB): {got}; {why}",
            v.label(),
            g.wall,
            g.rss_mib.map_or("?".into(), |r| r.to_string())
        );
        rows.push((c.clone(), got, v, why));
    }
    if !opts.keep {
        let _ = std::fs::remove_dir_all(&work);
    }
    print_table(&rows);
    let count = |v: Verdict| rows.iter().filter(|r| r.2 == v).count();
    let (ok, other, missed, fp, err, gaps, skipped) = (
        count(Verdict::Ok),
        count(Verdict::CaughtOther),
        count(Verdict::Missed),
        count(Verdict::FalsePositive),
        count(Verdict::Error),
        count(Verdict::KnownGap),
        count(Verdict::Skipped),
    );
    println!(
        "{} case(s) in {:.0} s: {ok} ok, {other} caught with another status, {missed} MISSED, {fp} false positive(s), {err} error(s), {gaps} known gap(s) not yet defended (docs/integrity.md), {skipped} SKIPPED (kg-bench lacks what they need){}",
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

// ------------------------------------------------------------------ side-effect checks (Integrity II)

/// Variables the runner plants in kg-bench's environment for every case, each with a random
/// value per run: a case fails if a value shows up in any trace log or output.
const SECRET_VARS: [&str; 2] = ["KG_REDTEAM_SECRET", "AWS_SECRET_ACCESS_KEY"];
/// Files a candidate may leave in the host's temp directories (`host_tmp_litter`).
const LITTER_PREFIX: &str = "kg-redteam-litter-";
const LITTER_DIRS: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];
/// kg-bench's own peak RSS allowed by default (`max_rss_mib`).
const DEFAULT_MAX_RSS_MIB: u64 = 2048;
/// Wall time allowed beyond the case's total timeout by default (`max_wall_s`).
const WALL_SLACK_S: u64 = 30;
/// Another solution's cache directories, planted by the runner in the run's kernelgate cache
/// so that a candidate writing into other solutions' caches has something to hit.
const DECOY: &str = "kg-redteam-decoy";

/// What the kg-bench under test supports (from its `--help` texts).
#[derive(Debug, Clone, Copy, Default)]
struct Probe {
    /// `kg-bench verify` exists: every case's `-o` file must pass it.
    verify: bool,
    /// `kg-bench evaluate --memory-limit` exists: cases that `requires: memory-limit` run.
    memory_limit: bool,
}

/// Whether a clap help text lists `name` under `Commands:`.
fn help_has_command(help: &str, name: &str) -> bool {
    let mut in_commands = false;
    for l in help.lines() {
        if l.trim_end().ends_with("Commands:") {
            in_commands = true;
        } else if in_commands && !l.starts_with(' ') && !l.trim().is_empty() {
            in_commands = false;
        } else if in_commands && l.split_whitespace().next() == Some(name) {
            return true;
        }
    }
    false
}

/// Whether a help text documents option `flag` (`--memory-limit`, not `--memory-limits`).
fn help_has_flag(help: &str, flag: &str) -> bool {
    help.split(|c: char| c.is_whitespace() || c == ',' || c == '=' || c == '[' || c == '<')
        .any(|w| w == flag)
}

fn probe_kg_bench(kg_bench: &Path) -> Probe {
    let help = |args: &[&str]| {
        Command::new(kg_bench)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    Probe {
        verify: help_has_command(&help(&["--help"]), "verify"),
        memory_limit: help_has_flag(&help(&["evaluate", "--help"]), "--memory-limit"),
    }
}

/// Why a case cannot run against this kg-bench (reported as SKIPPED, never as a pass).
fn skip_reason(c: &Case, probe: &Probe) -> Option<String> {
    match c.requires.as_deref() {
        None => None,
        Some("memory-limit") if probe.memory_limit => None,
        Some("memory-limit") => Some(
            "kg-bench evaluate has no --memory-limit: unbounded allocation would take the machine's memory".into(),
        ),
        Some(other) => Some(format!("unknown requirement `{other}`")),
    }
}

/// The interpreter kg-bench will use: the one this runner passes as `--python` (ours, else
/// `.venv/bin/python` where it exists), else kg-bench's own fallbacks (`$PYTHON_BIN`, python3).
fn interpreter(root: &Path, opts: &Opts) -> PathBuf {
    if let Some(p) = &opts.python {
        return p.clone();
    }
    let venv = root.join(".venv/bin/python");
    if venv.is_file() {
        return venv;
    }
    if let Some(p) = std::env::var_os("PYTHON_BIN") {
        return PathBuf::from(p);
    }
    PathBuf::from("python3")
}

/// The directories a Python start-up reads `.pth`, `sitecustomize` and `usercustomize` from,
/// as the interpreter itself reports them: `sys.path`, `site.getsitepackages()` and
/// `site.getusersitepackages()` (the user site even where it does not exist yet); also its
/// base installation's site-packages and the system interpreters' directories
/// (`/usr/lib/python3*`, `/usr/lib/python3/dist-packages`, `/usr/local/lib/python3*/*-packages`),
/// which a candidate that can write them reaches just as well.
fn site_dirs(python: &Path) -> Result<Vec<PathBuf>> {
    let code = "import glob, json, os, site, sys\nd = list(sys.path)\ntry:\n    d += site.getsitepackages()\nexcept Exception:\n    pass\ntry:\n    d.append(site.getusersitepackages())\nexcept Exception:\n    pass\nv = 'python%d.%d' % sys.version_info[:2]\nd.append(os.path.join(sys.base_prefix, 'lib', v, 'site-packages'))\nfor g in ('/usr/lib/python3*', '/usr/lib/python3/dist-packages', '/usr/local/lib/python3*/dist-packages', '/usr/local/lib/python3*/site-packages'):\n    d += sorted(glob.glob(g))\nprint(json.dumps(d))";
    let out = Command::new(python)
        .args(["-c", code])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("failed to start `{}`", python.display()))?;
    if !out.status.success() {
        bail!(
            "`{}` could not list its site directories: {}",
            python.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let list: Vec<String> = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("`{}`: site directories not JSON", python.display()))?;
    let mut dirs: Vec<PathBuf> = Vec::new();
    for d in list {
        if d.is_empty() || d.ends_with(".zip") {
            continue;
        }
        let p = PathBuf::from(d);
        if !dirs.contains(&p) {
            dirs.push(p);
        }
    }
    Ok(dirs)
}

fn is_startup_file(name: &str) -> bool {
    name.ends_with(".pth") || name == "sitecustomize.py" || name == "usercustomize.py"
}

/// Path -> contents of every start-up file directly in `dirs` (a missing directory has none).
fn startup_files(dirs: &[PathBuf]) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(d) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !is_startup_file(&name) {
                continue;
            }
            let p = e.path();
            if let Ok(bytes) = std::fs::read(&p) {
                out.insert(p, bytes);
            }
        }
    }
    out
}

/// `+path`, `~path`, `-path` for start-up files added, changed, removed.
fn files_diff(
    before: &BTreeMap<PathBuf, Vec<u8>>,
    after: &BTreeMap<PathBuf, Vec<u8>>,
) -> Vec<String> {
    let mut d = Vec::new();
    for (k, v) in after {
        match before.get(k) {
            None => d.push(format!("+{}", k.display())),
            Some(b) if b != v => d.push(format!("~{}", k.display())),
            _ => {}
        }
    }
    for k in before.keys() {
        if !after.contains_key(k) {
            d.push(format!("-{}", k.display()));
        }
    }
    d
}

/// Puts the start-up files back as in `baseline`: added ones removed, changed or removed ones
/// rewritten. Returns what it restored.
fn restore_files(baseline: &BTreeMap<PathBuf, Vec<u8>>, dirs: &[PathBuf]) -> Vec<String> {
    let now = startup_files(dirs);
    let mut done = Vec::new();
    for p in now.keys() {
        if !baseline.contains_key(p) && std::fs::remove_file(p).is_ok() {
            done.push(format!("removed {}", p.display()));
        }
    }
    for (p, bytes) in baseline {
        // Through a symbolic link (Debian's sitecustomize.py points into /etc): the link stays.
        let target = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        if now.get(p) != Some(bytes) && kg_contract::io::write_atomic(&target, bytes).is_ok() {
            done.push(format!("restored {}", p.display()));
        }
    }
    done
}

/// The kg-bench binary as the run started: checked after every case, restored at the end
/// where it was replaced by a copy with bytes appended (what `plant_startup_file` does).
struct Binary {
    path: PathBuf,
    bytes: Vec<u8>,
    sha: String,
}

impl Binary {
    fn read(path: &Path) -> Result<Binary> {
        let bytes =
            std::fs::read(path).with_context(|| format!("failed to read `{}`", path.display()))?;
        let sha = kg_contract::io::sha256_hex(&bytes);
        Ok(Binary {
            path: path.to_path_buf(),
            bytes,
            sha,
        })
    }

    /// What changed since the run started, if anything.
    fn changed(&self) -> Option<String> {
        match std::fs::read(&self.path) {
            Ok(now) if kg_contract::io::sha256_hex(&now) == self.sha => None,
            Ok(now) => Some(format!(
                "kg-bench binary `{}` changed ({} -> {} bytes)",
                self.path.display(),
                self.bytes.len(),
                now.len()
            )),
            Err(e) => Some(format!(
                "kg-bench binary `{}` unreadable: {e}",
                self.path.display()
            )),
        }
    }

    /// Restores the binary if its new contents start with the old ones (an append, or a copy
    /// with a trailer); a wholly different file (a rebuild) is left alone and reported.
    fn restore(&self) -> Option<String> {
        let now = std::fs::read(&self.path).ok()?;
        if now == self.bytes {
            return None;
        }
        if now.starts_with(&self.bytes) {
            let mode = std::fs::metadata(&self.path).ok().map(|m| m.permissions());
            let ok = kg_contract::io::write_atomic(&self.path, &self.bytes).is_ok();
            if let (true, Some(m)) = (ok, mode) {
                let _ = std::fs::set_permissions(&self.path, m);
            }
            return Some(format!(
                "{} `{}` (bytes appended by a case)",
                if ok { "restored" } else { "FAILED to restore" },
                self.path.display()
            ));
        }
        Some(format!(
            "`{}` differs from the run's start and was not restored (not an append)",
            self.path.display()
        ))
    }
}

/// Everything the run must put back however it ends: the interpreter's start-up files and the
/// kg-bench binary as they were when it started.
struct Restore {
    dirs: Vec<PathBuf>,
    baseline: BTreeMap<PathBuf, Vec<u8>>,
    binary: Option<Binary>,
}

impl Restore {
    /// Puts everything back as the run found it, saying what it restored.
    fn now(&self) {
        let mut done = restore_files(&self.baseline, &self.dirs);
        if let Some(b) = &self.binary {
            done.extend(b.restore());
        }
        for d in done {
            eprintln!("redteam: {d}");
        }
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        self.now();
    }
}

/// `kg-redteam-litter-*` entries in `dirs`.
fn litter(dirs: &[&Path]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for d in dirs {
        if let Ok(rd) = std::fs::read_dir(d) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with(LITTER_PREFIX) {
                    out.push(e.path());
                }
            }
        }
    }
    out.sort();
    out
}

fn remove_litter(paths: &[PathBuf]) {
    for p in paths {
        let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir_all(p));
    }
}

/// `VAR in WHERE` for every planted secret value found in one of the texts.
fn leaked_secrets(secrets: &[(String, String)], texts: &[(&str, &[u8])]) -> Vec<String> {
    let mut out = Vec::new();
    for (var, value) in secrets {
        for (where_, text) in texts {
            if !value.is_empty() && text.windows(value.len()).any(|w| w == value.as_bytes()) {
                out.push(format!("{var} in {where_}"));
            }
        }
    }
    out
}

/// How the `-o` file's traces differ from kg-bench's `--json` stdout (workload, status and
/// speedup of each line, in order); empty when they agree.
fn trace_file_disagreements(stdout: &[Value], file: Option<&str>) -> Vec<String> {
    let Some(text) = file else {
        return if stdout.is_empty() {
            vec![]
        } else {
            vec!["-o trace file missing".into()]
        };
    };
    let mut lines = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(l) {
            Ok(v) => lines.push(v),
            Err(_) => return vec![format!("-o file line {} is not JSON", i + 1)],
        }
    }
    let key = |t: &Value| {
        let e = t.get("evaluation");
        (
            t.pointer("/workload/uuid")
                .and_then(Value::as_str)
                .unwrap_or("?")
                .to_string(),
            e.and_then(|e| e.get("status"))
                .and_then(Value::as_str)
                .unwrap_or("-")
                .to_string(),
            e.and_then(|e| e.pointer("/performance/speedup_factor"))
                .and_then(Value::as_f64)
                .map(|s| format!("{s:.6}")),
        )
    };
    let mut out = Vec::new();
    if lines.len() != stdout.len() {
        out.push(format!(
            "-o file has {} trace(s), --json stdout {}",
            lines.len(),
            stdout.len()
        ));
    }
    for (f, s) in lines.iter().zip(stdout) {
        let (fk, sk) = (key(f), key(s));
        if fk != sk {
            out.push(format!(
                "-o file says {} {}{} where stdout says {}{}",
                fk.0,
                fk.1,
                fk.2.map(|x| format!(" at {x}x")).unwrap_or_default(),
                sk.1,
                sk.2.map(|x| format!(" at {x}x")).unwrap_or_default()
            ));
        }
    }
    out
}

/// `kg-bench verify FILE --problem DIR`; the failure, if it did not exit 0.
fn verify_traces(kg_bench: &Path, file: &Path, problem: &Path) -> Option<String> {
    match Command::new(kg_bench)
        .arg("verify")
        .arg(file)
        .arg("--problem")
        .arg(problem)
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "kg-bench verify failed ({}): {}",
            o.status,
            clip(
                String::from_utf8_lossy(&o.stderr)
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or(""),
                120
            )
        )),
        Err(e) => Some(format!("kg-bench verify could not start: {e}")),
    }
}

/// Resource bounds kg-bench itself broke: its wall time and its own peak RSS.
fn limit_breaches(
    wall_s: f64,
    rss_mib: Option<u64>,
    max_wall_s: u64,
    max_rss_mib: u64,
) -> Vec<String> {
    let mut out = Vec::new();
    if wall_s > max_wall_s as f64 {
        out.push(format!(
            "kg-bench took {wall_s:.1} s (bound {max_wall_s} s)"
        ));
    }
    if let Some(r) = rss_mib
        && r > max_rss_mib
    {
        out.push(format!(
            "kg-bench peak RSS {r} MiB (bound {max_rss_mib} MiB)"
        ));
    }
    out
}

/// Traces that did not pass and name no specific `reason` code: no tool could tell which
/// defence stopped them.
fn unreasoned(traces: &[Trace]) -> Vec<String> {
    traces
        .iter()
        .filter_map(|t| t.evaluation.as_ref().map(|e| (&t.workload.uuid, e)))
        .filter(|(_, e)| {
            e.status != Status::Passed && matches!(e.reason, None | Some(Reason::OtherRewardHack))
        })
        .map(|(uuid, e)| {
            let code = e
                .reason
                .map_or_else(|| "none".to_string(), |r| r.to_string());
            format!(
                "workload {uuid}: {} with reason code `{code}`",
                e.status.as_str()
            )
        })
        .collect()
}

/// The case's `log_has` text when no trace log contains it (the limit it reports did not hold).
fn missing_log(want: Option<&str>, traces: &[Trace]) -> Option<String> {
    let want = want?;
    let found = traces
        .iter()
        .any(|t| t.evaluation.as_ref().is_some_and(|e| e.log.contains(want)));
    (!found).then(|| format!("no trace log says `{want}` (the limit it tests did not hold)"))
}

/// The case's `log_lacks` text when a trace log contains it (the candidate got past a limit).
/// How a `log_lacks` breach starts.
const FORBIDDEN_LOG: &str = "a trace log says:";

fn forbidden_log(text: Option<&str>, traces: &[Trace]) -> Option<String> {
    let text = text?;
    traces
        .iter()
        .filter_map(|t| t.evaluation.as_ref())
        .find_map(|e| e.log.lines().find(|l| l.contains(text)))
        .map(|l| format!("{FORBIDDEN_LOG} {}", clip(l.trim(), 160)))
}

/// Peak resident memory of a live process (VmHWM), in MiB.
fn peak_rss_mib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| kb / 1024)
}

/// Changes to the run's kernelgate cache that are not a case's own new directories: a file
/// changed or removed, or a file added to a directory that existed before the case (another
/// solution's cache, the decoys included).
fn cache_changes(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in after {
        match before.get(k) {
            Some(b) if b != v && v != "dir" => out.push(format!("~{k}")),
            None if v != "dir" => {
                let parent = Path::new(k)
                    .parent()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if parent.is_empty() || before.get(&parent).is_some_and(|t| t == "dir") {
                    out.push(format!("+{k}"));
                }
            }
            _ => {}
        }
    }
    for (k, v) in before {
        if !after.contains_key(k) && v != "dir" {
            out.push(format!("-{k}"));
        }
    }
    out
}

fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok();
    if !ok {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        return kg_contract::io::sha256_hex(format!("{t}-{}", std::process::id()).as_bytes())
            [..2 * n]
            .to_string();
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
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
            max_wall_s: None,
            max_rss_mib: None,
            requires: None,
            memory_limit: None,
            log_has: None,
            log_lacks: None,
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
            rss_mib: Some(50),
            startup_diff: vec![],
            binary_diff: None,
            cache_diff: vec![],
            litter: vec![],
            leaks: vec![],
            trace_file: vec![],
            limits: vec![],
        }
    }

    #[test]
    fn a_memory_miss_where_the_trace_reports_the_layer_missing_is_a_host_gap_not_a_pass() {
        let mut c = case(None);
        c.requires = Some("memory-limit".into());
        let layer = |held: bool| kg_contract::IsolationReport {
            sandboxed: true,
            layers: vec![kg_contract::LayerState {
                layer: Layer::MemoryLimit,
                held,
                detail: "RLIMIT_DATA only".into(),
            }],
        };
        let with = |held: bool| {
            let mut t = trace("INCORRECT_NUMERICAL", 0.0);
            if let Some(e) = t.evaluation.as_mut() {
                e.environment.isolation = Some(layer(held));
                e.log = "MEMORY LIMIT BYPASSED".into();
            }
            let mut g = got(vec![t.clone()], vec![]);
            g.limits
                .extend(forbidden_log(Some("MEMORY LIMIT BYPASSED"), &[t]));
            g
        };
        let (v, why) = judge(&c, &with(false));
        assert_eq!(v, Verdict::KnownGap, "{why}");
        assert!(why.contains("memory_limit MISSING"), "{why}");
        // Where the trace claims the limit held, the same bypass is a miss.
        let (v, _) = judge(&c, &with(true));
        assert_eq!(v, Verdict::Missed);
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
    fn every_new_side_effect_is_a_miss_for_an_attack_and_a_false_positive_for_honest() {
        let mut honest = case(None);
        honest.expected = "PASSED".into();
        honest.pattern = "honest: x".into();
        let mut attack = case(None);
        attack.expected = "PASSED".into();
        attack.pattern = "leaves files behind".into();
        type Mark = Box<dyn Fn(&mut Got)>;
        let marks: Vec<(&str, Mark)> = vec![
            (
                "start-up",
                Box::new(|g: &mut Got| g.startup_diff = vec!["+/s/x.pth".into()]),
            ),
            (
                "binary",
                Box::new(|g: &mut Got| g.binary_diff = Some("kg-bench binary changed".into())),
            ),
            (
                "cache",
                Box::new(|g: &mut Got| g.cache_diff = vec!["+triton/d/x.py".into()]),
            ),
            (
                "litter",
                Box::new(|g: &mut Got| g.litter = vec!["/tmp/kg-redteam-litter-1".into()]),
            ),
            (
                "secret",
                Box::new(|g: &mut Got| g.leaks = vec!["KG_REDTEAM_SECRET in stdout".into()]),
            ),
            (
                "trace file",
                Box::new(|g: &mut Got| g.trace_file = vec!["-o file says PASSED".into()]),
            ),
            (
                "limits",
                Box::new(|g: &mut Got| g.limits = vec!["kg-bench took 99 s".into()]),
            ),
        ];
        for (what, mark) in marks {
            let mut g = got(vec![trace("PASSED", 1.0)], vec![]);
            assert_eq!(judge(&honest, &g).0, Verdict::Ok, "{what}: clean first");
            mark(&mut g);
            assert_eq!(judge(&honest, &g).0, Verdict::FalsePositive, "{what}");
            assert_eq!(judge(&attack, &g).0, Verdict::Missed, "{what}");
            // Stopped on every workload, but the side effect still makes it a miss.
            let mut stopped = got(vec![trace("INCORRECT_NUMERICAL", 0.0)], vec![]);
            mark(&mut stopped);
            assert_eq!(judge(&case(None), &stopped).0, Verdict::Missed, "{what}");
        }
    }

    #[test]
    fn startup_files_planted_changed_or_removed_are_seen_and_restored() {
        let d = tempfile::tempdir().unwrap();
        let site = d.path().join("site-packages");
        let user = d.path().join("user-site"); // missing at the start, as a user site often is
        std::fs::create_dir_all(&site).unwrap();
        std::fs::write(site.join("distutils-precedence.pth"), "import os\n").unwrap();
        std::fs::write(site.join("module.py"), "x = 1\n").unwrap();
        let dirs = vec![site.clone(), user.clone()];
        let base = startup_files(&dirs);
        assert_eq!(base.len(), 1, "only start-up files are kept: {base:?}");
        assert!(files_diff(&base, &startup_files(&dirs)).is_empty());
        std::fs::write(site.join("kg_redteam_plant.pth"), "import evil\n").unwrap();
        std::fs::write(
            site.join("distutils-precedence.pth"),
            "import os\nimport evil\n",
        )
        .unwrap();
        std::fs::create_dir_all(&user).unwrap();
        std::fs::write(user.join("usercustomize.py"), "evil()\n").unwrap();
        std::fs::write(site.join("sitecustomize.py"), "evil()\n").unwrap();
        std::fs::write(site.join("module.py"), "x = 2\n").unwrap(); // not a start-up file
        let diff = files_diff(&base, &startup_files(&dirs));
        assert_eq!(diff.len(), 4, "{diff:?}");
        assert!(
            diff.iter()
                .any(|d| d.starts_with('~') && d.ends_with("distutils-precedence.pth"))
        );
        assert!(
            diff.iter()
                .any(|d| d.starts_with('+') && d.ends_with("usercustomize.py"))
        );
        let done = restore_files(&base, &dirs);
        assert_eq!(done.len(), 4, "{done:?}");
        assert!(files_diff(&base, &startup_files(&dirs)).is_empty());
        assert_eq!(
            std::fs::read_to_string(site.join("distutils-precedence.pth")).unwrap(),
            "import os\n"
        );
        std::fs::remove_file(site.join("distutils-precedence.pth")).unwrap();
        assert_eq!(
            files_diff(&base, &startup_files(&dirs)).len(),
            1,
            "removal seen"
        );
    }

    #[test]
    fn a_replaced_binary_is_seen_and_an_appended_one_restored() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("kg-bench");
        std::fs::write(&p, b"\x7fELF original").unwrap();
        let b = Binary::read(&p).unwrap();
        assert!(b.changed().is_none() && b.restore().is_none());
        std::fs::write(&p, b"\x7fELF original\n#kg-redteam-plant\n").unwrap();
        assert!(b.changed().is_some());
        assert!(b.restore().unwrap().starts_with("restored"));
        assert!(b.changed().is_none());
        std::fs::write(&p, b"\x7fELF rebuilt by someone").unwrap();
        assert!(b.changed().is_some());
        assert!(b.restore().unwrap().contains("not restored"));
    }

    #[test]
    fn litter_is_found_by_prefix_only() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("kg-redteam-litter-import-7"), "x").unwrap();
        std::fs::write(d.path().join("kg-redteam-1234-5"), "x").unwrap(); // the runner's own
        let found = litter(&[d.path()]);
        assert_eq!(found.len(), 1, "{found:?}");
        remove_litter(&found);
        assert!(litter(&[d.path()]).is_empty());
    }

    #[test]
    fn planted_secrets_are_found_in_any_text() {
        let secrets = vec![
            ("KG_REDTEAM_SECRET".to_string(), "kgrtabc123".to_string()),
            (
                "AWS_SECRET_ACCESS_KEY".to_string(),
                "kgrtfff000".to_string(),
            ),
        ];
        assert!(leaked_secrets(&secrets, &[("stdout", b"all clean"), ("log", b"")]).is_empty());
        let hit = leaked_secrets(
            &secrets,
            &[("stdout", b"x"), ("log", b"...AWS=kgrtfff000\n")],
        );
        assert_eq!(hit, vec!["AWS_SECRET_ACCESS_KEY in log"]);
    }

    #[test]
    fn trace_file_must_agree_with_stdout() {
        let t = |uuid: &str, status: &str, sp: f64| {
            let mut v = serde_json::to_value(trace(status, sp)).unwrap();
            v["workload"]["uuid"] = Value::String(uuid.into());
            v
        };
        let stdout = vec![t("a", "INCORRECT_NUMERICAL", 0.0), t("b", "PASSED", 1.2)];
        let line = |v: &Value| serde_json::to_string(v).unwrap() + "\n";
        let same = stdout.iter().map(line).collect::<String>();
        assert!(trace_file_disagreements(&stdout, Some(&same)).is_empty());
        // Extra fields a tamper-evident line carries are not a disagreement.
        let mut chained = stdout.clone();
        chained[0]["chain"] = Value::String("sha".into());
        let chained = chained.iter().map(line).collect::<String>();
        assert!(trace_file_disagreements(&stdout, Some(&chained)).is_empty());
        let forged = line(&t("a", "PASSED", 50.0)) + &line(&stdout[1]);
        let d = trace_file_disagreements(&stdout, Some(&forged));
        assert_eq!(d.len(), 1, "{d:?}");
        assert!(d[0].contains("PASSED at 50.000000x"), "{d:?}");
        assert_eq!(
            trace_file_disagreements(&stdout, Some(&line(&stdout[0]))).len(),
            1
        );
        assert_eq!(
            trace_file_disagreements(&stdout, None),
            vec!["-o trace file missing"]
        );
        assert!(!trace_file_disagreements(&stdout, Some("{not json\n")).is_empty());
    }

    #[test]
    fn a_kg_bench_failure_with_side_effects_is_a_miss_not_an_error() {
        let mut g = got(vec![], vec![]);
        g.harness_error = Some("kg-bench exited with Some(2) without traces".into());
        assert_eq!(judge(&case(None), &g).0, Verdict::Error);
        g.trace_file = vec!["-o file line 1 is not JSON".into()];
        assert_eq!(judge(&case(None), &g).0, Verdict::Missed);
        g.problem_diff = vec!["~definition.json".into()];
        assert_eq!(judge(&case(None), &g).0, Verdict::Missed);
    }

    #[test]
    fn a_limit_the_case_must_report_hitting() {
        let mut t = trace("PASSED", 1.0);
        if let Some(e) = t.evaluation.as_mut() {
            e.log =
                "redteam fork_and_fill: 4093 processes started: process creation failed: EAGAIN"
                    .into();
        }
        assert!(missing_log(Some("process creation failed"), std::slice::from_ref(&t)).is_none());
        assert!(missing_log(None, &[]).is_none());
        let held_nothing = trace("PASSED", 1.0);
        assert!(
            missing_log(
                Some("process creation failed"),
                std::slice::from_ref(&held_nothing)
            )
            .is_some()
        );
        let mut bypass = trace("INCORRECT_NUMERICAL", 0.0);
        if let Some(e) = bypass.evaluation.as_mut() {
            e.log = "x\nredteam allocate_unbounded: MEMORY LIMIT BYPASSED: 4096 MiB held\n".into();
        }
        let said = forbidden_log(Some("MEMORY LIMIT BYPASSED"), &[bypass]).unwrap();
        assert!(said.contains("4096 MiB"), "{said}");
        assert!(forbidden_log(Some("MEMORY LIMIT BYPASSED"), &[held_nothing]).is_none());
        assert!(forbidden_log(None, &[]).is_none());
    }

    #[test]
    fn a_stopped_workload_must_name_its_reason() {
        let with = |status: &str, reason: Option<Reason>| {
            let mut t = trace(status, 1.0);
            if let Some(e) = t.evaluation.as_mut() {
                e.reason = reason;
            }
            t
        };
        assert!(unreasoned(&[with("PASSED", None)]).is_empty());
        assert!(unreasoned(&[with("REWARD_HACK", Some(Reason::DualClock))]).is_empty());
        let none = unreasoned(&[with("RUNTIME_ERROR", None)]);
        assert_eq!(none.len(), 1);
        assert!(
            none[0].contains("RUNTIME_ERROR with reason code `none`"),
            "{none:?}"
        );
        let vague = unreasoned(&[with("REWARD_HACK", Some(Reason::OtherRewardHack))]);
        assert!(vague[0].contains("`other_reward_hack`"), "{vague:?}");
        // The table names the defence from the code, not from the log's words.
        let died = with("RUNTIME_ERROR", Some(Reason::CandidateDied));
        assert_eq!(caught_by(&died), "worker death contained (process split)");
        let recheck = with("INCORRECT_NUMERICAL", Some(Reason::TimedOutputsDiffer));
        assert_eq!(caught_by(&recheck), "re-check of timed outputs");
        let hack = with("REWARD_HACK", Some(Reason::SamplesUnbound));
        assert!(caught_by(&hack).starts_with("REWARD_HACK samples_unbound"));
    }

    #[test]
    fn wall_time_and_rss_bounds() {
        assert!(limit_breaches(39.0, Some(2000), 40, 2048).is_empty());
        assert_eq!(limit_breaches(46.0, Some(100), 40, 2048).len(), 1);
        assert_eq!(limit_breaches(10.0, Some(3500), 40, 2048).len(), 1);
        assert!(limit_breaches(10.0, None, 40, 2048).is_empty());
        let me = peak_rss_mib(std::process::id());
        assert!(me.is_some_and(|m| m < 100_000), "{me:?}");
    }

    #[test]
    fn other_solutions_caches_are_watched_but_new_directories_are_free() {
        let m = |v: &[(&str, &str)]| -> BTreeMap<String, String> {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect()
        };
        let before = m(&[
            ("triton", "dir"),
            ("triton/decoy", "dir"),
            ("triton/decoy/README", "1"),
        ]);
        let own = m(&[
            ("triton", "dir"),
            ("triton/decoy", "dir"),
            ("triton/decoy/README", "1"),
            ("triton/mine", "dir"),
            ("triton/mine/k.json", "2"),
        ]);
        assert!(cache_changes(&before, &own).is_empty());
        let planted = m(&[
            ("triton", "dir"),
            ("triton/decoy", "dir"),
            ("triton/decoy/README", "1"),
            ("triton/decoy/kg-redteam-plant.py", "3"),
        ]);
        assert_eq!(
            cache_changes(&before, &planted),
            vec!["+triton/decoy/kg-redteam-plant.py"]
        );
        let changed = m(&[
            ("triton", "dir"),
            ("triton/decoy", "dir"),
            ("triton/decoy/README", "9"),
        ]);
        assert_eq!(
            cache_changes(&before, &changed),
            vec!["~triton/decoy/README"]
        );
    }

    #[test]
    fn help_probes_and_skips() {
        let top = "Usage: kg-bench <COMMAND>\n\nCommands:\n  evaluate  Evaluate\n  verify    Check a trace file\n  help      Print\n\nOptions:\n  -h, --help\n";
        assert!(help_has_command(top, "verify"));
        assert!(!help_has_command(top, "score"));
        assert!(!help_has_command(
            "Commands:\n  evaluate  x\nOptions:\n  verify\n",
            "verify"
        ));
        let ev = "      --memory-limit <MEMORY_LIMIT>\n          Memory\n      --no-sandbox\n";
        assert!(help_has_flag(ev, "--memory-limit"));
        assert!(!help_has_flag(
            "      --memory-limits <X>\n",
            "--memory-limit"
        ));
        let mut c = case(None);
        c.requires = Some("memory-limit".into());
        assert!(
            skip_reason(
                &c,
                &Probe {
                    verify: false,
                    memory_limit: false
                }
            )
            .is_some()
        );
        assert!(
            skip_reason(
                &c,
                &Probe {
                    verify: false,
                    memory_limit: true
                }
            )
            .is_none()
        );
        c.requires = Some("gpu-wings".into());
        assert!(
            skip_reason(
                &c,
                &Probe {
                    verify: true,
                    memory_limit: true
                }
            )
            .is_some()
        );
        assert!(skip_reason(&case(None), &Probe::default()).is_none());
    }

    #[test]
    fn kg_bench_gets_the_trace_file_the_secrets_the_cache_and_the_memory_limit() {
        let opts = parse_args(&[]).unwrap();
        let mut c = case(None);
        c.memory_limit = Some("2G".into());
        let mut ctx = Ctx {
            probe: Probe {
                verify: true,
                memory_limit: true,
            },
            secrets: SECRET_VARS
                .iter()
                .map(|v| (v.to_string(), format!("kgrt{v}")))
                .collect(),
            site_dirs: vec![],
            cache: PathBuf::from("/w/cache"),
        };
        let p = |s: &str| PathBuf::from(s);
        let (problem, traces, cwd, tmp) = (
            p("/w/c/problem/x"),
            p("/w/c/traces.jsonl"),
            p("/w/c/cwd"),
            p("/w/c/tmp"),
        );
        let at = Paths {
            problem: &problem,
            traces: &traces,
            cwd: &cwd,
            tmp: &tmp,
        };
        let cmd = kg_bench_command(
            Path::new("/nonexistent"),
            &opts,
            Path::new("kg-bench"),
            &c,
            &ctx,
            &at,
            "m",
        );
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let after = |flag: &str| {
            args.iter()
                .position(|a| a == flag)
                .map(|i| args[i + 1].clone())
        };
        assert_eq!(
            after("-o").as_deref(),
            Some("/w/c/traces.jsonl"),
            "{args:?}"
        );
        assert!(args.iter().any(|a| a == "--json"));
        assert_eq!(after("--memory-limit").as_deref(), Some("2G"));
        let envs: BTreeMap<String, String> = cmd
            .get_envs()
            .filter_map(|(k, v)| {
                Some((
                    k.to_string_lossy().into_owned(),
                    v?.to_string_lossy().into_owned(),
                ))
            })
            .collect();
        for v in SECRET_VARS {
            assert_eq!(
                envs.get(v).map(String::as_str),
                Some(format!("kgrt{v}").as_str())
            );
        }
        assert_eq!(
            envs.get("KG_CACHE_DIR").map(String::as_str),
            Some("/w/cache")
        );
        assert_eq!(envs.get(MARKER_ENV).map(String::as_str), Some("m"));
        // No --memory-limit where kg-bench lacks it (the case is skipped there anyway).
        ctx.probe.memory_limit = false;
        let cmd = kg_bench_command(
            Path::new("/nonexistent"),
            &opts,
            Path::new("kg-bench"),
            &c,
            &ctx,
            &at,
            "m",
        );
        assert!(!cmd.get_args().any(|a| a == "--memory-limit"));
    }

    #[test]
    fn args_reject_unknown_device() {
        assert!(parse_args(&["--device".into(), "tpu".into()]).is_err());
        let o = parse_args(&["--device".into(), "cuda:1".into(), "--strict".into()]).unwrap();
        assert!(o.strict && o.device == "cuda:1");
    }
}
