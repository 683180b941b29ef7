//! Running one case: its scratch directory set up and the host snapshotted, kg-bench spawned
//! and watched (wall time, peak RSS, a hang killed), then survivors swept and everything a
//! candidate could have touched diffed, and the traces and checks collected into a [`Got`].

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kg_contract::{Status, Trace};
use serde_json::Value;

use super::checks::{
    DEFAULT_MAX_RSS_MIB, WALL_SLACK_S, forbidden_log, leaked_secrets, limit_breaches, missing_log,
    trace_file_disagreements, unreasoned, verify_traces,
};
use super::host::{Binary, LITTER_DIRS, files_diff, litter, remove_litter, startup_files};
use super::manifest::Case;
use super::tree::{cache_changes, copy_tree, tree_diff, tree_hash};
use super::{Ctx, Opts};

pub(super) const MARKER_ENV: &str = "KG_REDTEAM_MARKER";
/// A trace log longer than this means the engine's log bound failed (2 x 64 KiB + notes).
const MAX_LOG_BYTES: usize = 2 * 64 * 1024 + 4096;

/// What one case produced.
pub(super) struct Got {
    pub(super) statuses: Vec<Status>,
    pub(super) traces: Vec<Trace>,
    pub(super) harness_error: Option<String>,
    pub(super) survivors: Vec<(i32, String)>,
    pub(super) problem_diff: Vec<String>,
    pub(super) cwd_diff: Vec<String>,
    pub(super) long_logs: Vec<usize>,
    pub(super) wall: f64,
    /// kg-bench's own peak RSS (VmHWM sampled every 50 ms), MiB.
    pub(super) rss_mib: Option<u64>,
    /// Start-up files of the interpreter's site directories added/changed/removed.
    pub(super) startup_diff: Vec<String>,
    /// The kg-bench binary changed.
    pub(super) binary_diff: Option<String>,
    /// Other solutions' caches changed.
    pub(super) cache_diff: Vec<String>,
    /// `kg-redteam-litter-*` files left in the host's temp directories.
    pub(super) litter: Vec<String>,
    /// Planted secrets found in a trace log or output.
    pub(super) leaks: Vec<String>,
    /// How the `-o` file disagrees with the `--json` stdout, or fails `kg-bench verify`.
    pub(super) trace_file: Vec<String>,
    /// Wall-time or memory bounds kg-bench broke.
    pub(super) limits: Vec<String>,
}

/// Where one case's kg-bench works.
pub(super) struct Paths<'a> {
    pub(super) problem: &'a Path,
    pub(super) traces: &'a Path,
    pub(super) cwd: &'a Path,
    pub(super) tmp: &'a Path,
}

/// The `kg-bench evaluate` command of one case: `-o` into the case's directory, the planted
/// secrets, the marker, the run's cache, `--memory-limit` where the case asks and kg-bench can.
pub(super) fn kg_bench_command(
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
    if let Some(t) = &c.timing {
        cmd.args(["--timing", t]);
    }
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

/// Runs one case in `work/<case>` and collects what it produced and left behind.
pub(super) fn run_case(
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
    let run = CaseRun {
        root,
        opts,
        kg_bench,
        c,
        ctx,
        problem: dir.join("problem").join(&pname),
        cwd: dir.join("cwd"),
        tmp: dir.join("tmp"),
        traces_file: dir.join("traces.jsonl"),
        marker: format!("{nonce}-{}", c.case),
        dir,
    };
    run.make_dirs()?;
    let before = run.snapshot()?;
    let done = run.execute()?;
    let swept = run.sweep(&before, &done)?;
    Ok(run.collect(done, swept))
}

/// One case's run: what the steps of [`run_case`] share.
struct CaseRun<'a> {
    root: &'a Path,
    opts: &'a Opts,
    kg_bench: &'a Path,
    c: &'a Case,
    ctx: &'a Ctx,
    /// The case's scratch directory (`work/<case>`); kg-bench's output is kept there.
    dir: PathBuf,
    /// The case's copy of its problem directory, so a candidate cannot touch the checkout.
    problem: PathBuf,
    cwd: PathBuf,
    tmp: PathBuf,
    /// kg-bench's `-o` file.
    traces_file: PathBuf,
    /// In kg-bench's environment, so processes it leaves behind can be found.
    marker: String,
}

/// What a candidate could change, as it was before kg-bench started.
struct Before {
    problem: BTreeMap<String, String>,
    cwd: BTreeMap<String, String>,
    startup: BTreeMap<PathBuf, Vec<u8>>,
    binary: Binary,
    cache: BTreeMap<String, String>,
}

/// How kg-bench's run ended.
struct Finished {
    /// Its exit status; `None` where it hung and was killed.
    status: Option<ExitStatus>,
    /// How long it was allowed before it counted as hung.
    limit: Duration,
    wall: f64,
    rss_mib: Option<u64>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// What the sweep after kg-bench found outside its traces.
struct Swept {
    survivors: Vec<(i32, String)>,
    problem_diff: Vec<String>,
    cwd_diff: Vec<String>,
    startup_diff: Vec<String>,
    binary_diff: Option<String>,
    cache_diff: Vec<String>,
    litter: Vec<String>,
    /// The `-o` file's text, where kg-bench (or a candidate) left one.
    file_text: Option<String>,
    leaks: Vec<String>,
}

impl CaseRun<'_> {
    fn timeout(&self) -> u64 {
        self.c.timeout_s.unwrap_or(30)
    }

    fn max_workloads(&self) -> u64 {
        self.c.max_workloads.unwrap_or(2)
    }

    /// The scratch directory: the problem copied in, an empty cwd and `TMPDIR`.
    fn make_dirs(&self) -> Result<()> {
        copy_tree(&self.c.problem, &self.problem)?;
        for d in [&self.cwd, &self.tmp] {
            std::fs::create_dir_all(d)
                .with_context(|| format!("failed to create `{}`", d.display()))?;
        }
        Ok(())
    }

    /// Hashes what the case may change; clears earlier litter so what is found after is its own.
    fn snapshot(&self) -> Result<Before> {
        let problem = tree_hash(&self.problem)?;
        let cwd = tree_hash(&self.cwd)?;
        remove_litter(&litter(&litter_dirs()));
        let startup = startup_files(&self.ctx.site_dirs);
        let binary = Binary::read(self.kg_bench)?;
        let cache = tree_hash(&self.ctx.cache)?;
        Ok(Before {
            problem,
            cwd,
            startup,
            binary,
            cache,
        })
    }

    /// Spawns kg-bench in its own process group, waits for it (killing it where it hangs) and
    /// keeps its output in the scratch directory.
    fn execute(&self) -> Result<Finished> {
        let timeout = self.timeout();
        let max_w = self.max_workloads();
        let mut cmd = kg_bench_command(
            self.root,
            self.opts,
            self.kg_bench,
            self.c,
            self.ctx,
            &Paths {
                problem: &self.problem,
                traces: &self.traces_file,
                cwd: &self.cwd,
                tmp: &self.tmp,
            },
            &self.marker,
        );
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let t0 = Instant::now();
        let mut child = cmd
            .spawn()
            .with_context(|| format!("failed to start `{}`", self.kg_bench.display()))?;
        // Drained on threads so a full pipe cannot stall kg-bench while it is watched.
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
        let (status, rss_mib) = watch(&mut child, t0, limit)?;
        let wall = t0.elapsed().as_secs_f64();
        let stdout = out_t.join().unwrap_or_default();
        let stderr = err_t.join().unwrap_or_default();
        // Kept for `--keep` (the scratch directory is removed otherwise).
        let _ = std::fs::write(self.dir.join("kg-bench.stdout.json"), &stdout);
        let _ = std::fs::write(self.dir.join("kg-bench.stderr"), &stderr);
        Ok(Finished {
            status,
            limit,
            wall,
            rss_mib,
            stdout,
            stderr,
        })
    }

    /// Kills what kg-bench left running, diffs everything against `before`, removes the
    /// litter and looks for the planted secrets in every output.
    fn sweep(&self, before: &Before, done: &Finished) -> Result<Swept> {
        // Give re-parented orphans a moment to show up, then sweep.
        std::thread::sleep(Duration::from_millis(500));
        let survivors = survivors(&self.marker, None);
        kill_and_reap(&survivors);
        let problem_diff = tree_diff(&before.problem, &tree_hash(&self.problem)?);
        let cwd_diff = tree_diff(&before.cwd, &tree_hash(&self.cwd)?);
        let startup_diff = files_diff(&before.startup, &startup_files(&self.ctx.site_dirs));
        let binary_diff = before.binary.changed();
        let cache_diff = cache_changes(&before.cache, &tree_hash(&self.ctx.cache)?);
        let left = litter(&litter_dirs());
        remove_litter(&left);
        let litter_found: Vec<String> = left.iter().map(|p| p.display().to_string()).collect();
        let file_text = std::fs::read(&self.traces_file)
            .ok()
            .map(|b| String::from_utf8_lossy(&b).into_owned());
        let leaks = leaked_secrets(
            &self.ctx.secrets,
            &[
                ("kg-bench's --json stdout (trace logs)", &done.stdout[..]),
                ("kg-bench's stderr", &done.stderr[..]),
                (
                    "the -o trace file",
                    file_text.as_deref().unwrap_or("").as_bytes(),
                ),
            ],
        );
        Ok(Swept {
            survivors,
            problem_diff,
            cwd_diff,
            startup_diff,
            binary_diff,
            cache_diff,
            litter: litter_found,
            file_text,
            leaks,
        })
    }

    /// The traces read from kg-bench's stdout, and every check on them, into one [`Got`].
    fn collect(&self, done: Finished, swept: Swept) -> Got {
        let (traces, harness_error) = read_traces(&done);
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
        let trace_file = self.trace_file_checks(&done.stdout, swept.file_text.as_deref());
        let limits = self.limits(&done, &traces, harness_error.is_none());
        Got {
            statuses,
            traces,
            harness_error,
            survivors: swept.survivors,
            problem_diff: swept.problem_diff,
            cwd_diff: swept.cwd_diff,
            long_logs,
            wall: done.wall,
            rss_mib: done.rss_mib,
            startup_diff: swept.startup_diff,
            binary_diff: swept.binary_diff,
            cache_diff: swept.cache_diff,
            litter: swept.litter,
            leaks: swept.leaks,
            trace_file,
            limits,
        }
    }

    /// How the `-o` file disagrees with stdout, or fails `kg-bench verify`.
    fn trace_file_checks(&self, stdout: &[u8], file_text: Option<&str>) -> Vec<String> {
        // Also when kg-bench failed: a trace file a candidate destroyed is why it failed.
        let json: Vec<Value> = serde_json::from_slice::<Vec<Value>>(stdout).unwrap_or_default();
        let mut trace_file = trace_file_disagreements(&json, file_text);
        if self.ctx.probe.verify && file_text.is_some() {
            trace_file.extend(verify_traces(
                self.kg_bench,
                &self.traces_file,
                &self.problem,
            ));
        }
        trace_file
    }

    /// Bounds kg-bench broke; and, where kg-bench itself did not fail (`harness_ok`), the log
    /// texts and reason codes its traces lack or must not have.
    fn limits(&self, done: &Finished, traces: &[Trace], harness_ok: bool) -> Vec<String> {
        let c = self.c;
        let mut limits = limit_breaches(
            done.wall,
            done.rss_mib,
            c.max_wall_s
                .unwrap_or(self.timeout() * self.max_workloads() + WALL_SLACK_S),
            c.max_rss_mib.unwrap_or(DEFAULT_MAX_RSS_MIB),
        );
        if harness_ok {
            limits.extend(missing_log(c.log_has.as_deref(), traces));
            limits.extend(forbidden_log(c.log_lacks.as_deref(), traces));
            limits.extend(unreasoned(traces));
        }
        limits
    }
}

/// The host's temp directories, where a candidate may leave litter.
fn litter_dirs() -> Vec<&'static Path> {
    LITTER_DIRS.iter().map(Path::new).collect()
}

/// Reads a child's pipe to its end on a thread of its own.
fn read_all(r: Option<Box<dyn Read + Send>>) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut r) = r {
            let _ = r.read_to_end(&mut buf);
        }
        buf
    })
}

/// Waits for kg-bench, sampling its peak RSS every 50 ms; past `limit` kills its process
/// group. Returns its exit status (`None` where it was killed) and the peak RSS seen.
fn watch(
    child: &mut Child,
    t0: Instant,
    limit: Duration,
) -> Result<(Option<ExitStatus>, Option<u64>)> {
    let child_pid = child.id();
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
            kg_proc::signal_group(child_pid, kg_proc::group::Signal::KILL);
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Ok((status, rss_mib))
}

/// The traces on kg-bench's stdout, or why there are none (a hang, a failure without traces).
fn read_traces(done: &Finished) -> (Vec<Trace>, Option<String>) {
    let Some(status) = done.status else {
        let e = format!(
            "kg-bench did not finish within {} s and was killed",
            done.limit.as_secs()
        );
        return (Vec::new(), Some(e));
    };
    let code = status.code();
    match kg_contract::io::parse_json::<Vec<Trace>>(
        &String::from_utf8_lossy(&done.stdout),
        Path::new("<kg-bench stdout>"),
        None,
    ) {
        Ok((t, _)) if matches!(code, Some(0) | Some(1)) && !t.is_empty() => (t, None),
        Ok(_) | Err(_) => {
            let e = format!(
                "kg-bench exited with {code:?} without traces: {}",
                stderr_tail(&done.stderr)
            );
            (Vec::new(), Some(e))
        }
    }
}

/// The end of kg-bench's stderr for an error message: at most its last 600 bytes, trimmed and
/// cut at a character boundary.
fn stderr_tail(stderr: &[u8]) -> String {
    let s = String::from_utf8_lossy(stderr);
    let s = s.trim();
    let start = s.len().saturating_sub(600);
    let mut i = start;
    while !s.is_char_boundary(i) {
        i += 1;
    }
    s[i..].to_string()
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

/// Peak resident memory of a live process (VmHWM), in MiB.
pub(super) fn peak_rss_mib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| kb / 1024)
}
