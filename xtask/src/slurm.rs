//! `cargo xtask slurm-test`: `kg-bench slurm` against a real single-node Slurm.
//!
//! Starts munge, `slurmctld` and `slurmd` in a temporary directory (nothing under `/etc` or
//! `/var` is touched: the key, socket, state, spool and logs all live there; the node has 2
//! CPUs whatever the host has, so a third task always waits), then:
//! 1. `kg-bench slurm problems/core --shards 3 -- --device cpu ...`, and `scancel` of task 3
//!    while it waits: kg-bench must report task 3 failed (no exit record), name its log, exit 3
//!    and merge nothing;
//! 2. `kg-bench slurm --retry-failed`: task 3 resubmitted alone, then the three shards merged;
//! 3. a one-host `kg-bench run` of the same corpus and flags: the merged summary must match it
//!    (statuses per problem and solution, problem info, refusals, errors, trace files), and
//!    `kg-bench verify --summary` must pass on the merged run;
//! 4. `--retry-failed` once more: nothing to resubmit, "already merged".
//!
//! Then it stops Slurm and munge and removes the directory, also when a step failed. It needs
//! root (slurmd runs jobs as their submitter) and the `slurm-wlm` and `munge` packages.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kg_exec::corpus::RunSummary;

/// Every workload once, correctness only: two rounds, the fewest timed calls.
const RUN_FLAGS: [&str; 8] = [
    "--device",
    "cpu",
    "--rounds",
    "2",
    "--warmup",
    "1",
    "--iterations",
    "3",
];

/// The commands this test needs, and where they come from.
const TOOLS: [(&str, &str); 7] = [
    ("munged", "munge"),
    ("slurmctld", "slurm-wlm"),
    ("slurmd", "slurm-wlm"),
    ("sbatch", "slurm-wlm"),
    ("squeue", "slurm-wlm"),
    ("scancel", "slurm-wlm"),
    ("sinfo", "slurm-wlm"),
];

/// The daemons of a throwaway cluster; stopped (SIGTERM, then SIGKILL) when dropped.
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<(&'static str, Child)>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for (_, c) in &mut self.daemons {
            kg_proc::signal_group(c.id(), rustix::process::Signal::TERM);
        }
        let t = Instant::now();
        for (_, c) in &mut self.daemons {
            while t.elapsed() < Duration::from_secs(10) {
                if matches!(c.try_wait(), Ok(Some(_))) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            kg_proc::end_child_group(c, None);
        }
    }
}

impl Cluster {
    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    /// The last lines of each daemon's log, for a failure message.
    fn logs(&self) -> String {
        let mut s = String::new();
        for f in ["munged.log", "slurmctld.log", "slurmd.log"] {
            let text = std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
            s.push_str(&format!("--- {f}\n{}\n", kg_proc::tail(&text, 1500)));
        }
        s
    }
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("find a free port")?;
    Ok(l.local_addr()?.port())
}

fn spawn(name: &'static str, cmd: &mut Command, dir: &Path) -> Result<(&'static str, Child)> {
    let out = std::fs::File::create(dir.join(format!("{name}.out")))?;
    let err = out.try_clone()?;
    use std::os::unix::process::CommandExt;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .with_context(|| format!("failed to start {name}"))?;
    Ok((name, child))
}

/// Starts munge, slurmctld and slurmd under `dir`; waits until the node is idle.
fn start(dir: &Path) -> Result<Cluster> {
    for d in ["state", "spool"] {
        std::fs::create_dir_all(dir.join(d))?;
    }
    let key = dir.join("munge.key");
    let mut bytes = vec![0u8; 1024];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut bytes)
        .context("random bytes for the munge key")?;
    std::fs::write(&key, &bytes)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400))?;
    let sock = dir.join("munge.sock");
    let p = |f: &str| dir.join(f).display().to_string();
    let (ctld_port, d_port) = (free_port()?, free_port()?);
    let conf = dir.join("slurm.conf");
    std::fs::write(
        &conf,
        format!(
            "ClusterName=kgtest\nSlurmctldHost=localhost\nSlurmUser=root\nSlurmdUser=root\n\
             SlurmctldPort={ctld_port}\nSlurmdPort={d_port}\n\
             AuthType=auth/munge\nCredType=cred/munge\nAuthInfo=socket={sock}\n\
             StateSaveLocation={state}\nSlurmdSpoolDir={spool}\n\
             SlurmctldPidFile={ctld_pid}\nSlurmdPidFile={d_pid}\n\
             SlurmctldLogFile={ctld_log}\nSlurmdLogFile={d_log}\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\n\
             SchedulerType=sched/backfill\nJobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\nMpiDefault=none\nReturnToService=2\n\
             NodeName=localhost NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN\n\
             PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n",
            sock = sock.display(),
            state = p("state"),
            spool = p("spool"),
            ctld_pid = p("slurmctld.pid"),
            d_pid = p("slurmd.pid"),
            ctld_log = p("slurmctld.log"),
            d_log = p("slurmd.log"),
        ),
    )?;
    let mut cluster = Cluster {
        dir: dir.to_path_buf(),
        conf: conf.clone(),
        daemons: Vec::new(),
    };
    cluster.daemons.push(spawn(
        "munged",
        Command::new("munged").args([
            "--foreground".to_string(),
            "--force".into(),
            format!("--key-file={}", key.display()),
            format!("--socket={}", sock.display()),
            format!("--pid-file={}", p("munged.pid")),
            format!("--log-file={}", p("munged.log")),
            format!("--seed-file={}", p("munged.seed")),
        ]),
        dir,
    )?);
    wait_for(Duration::from_secs(10), || sock.exists())
        .with_context(|| format!("munged did not create its socket\n{}", cluster.logs()))?;
    let conf_s = conf.display().to_string();
    cluster.daemons.push(spawn(
        "slurmctld",
        Command::new("slurmctld").args(["-D", "-f", &conf_s]),
        dir,
    )?);
    cluster.daemons.push(spawn(
        "slurmd",
        Command::new("slurmd").args(["-D", "-f", &conf_s, "-N", "localhost"]),
        dir,
    )?);
    let idle = || {
        cluster
            .command("sinfo")
            .args(["-h", "-o", "%t"])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
    };
    wait_for(Duration::from_secs(60), idle)
        .with_context(|| format!("the node did not become idle\n{}", cluster.logs()))?;
    Ok(cluster)
}

fn wait_for(limit: Duration, mut ok: impl FnMut() -> bool) -> Result<()> {
    let t = Instant::now();
    while t.elapsed() < limit {
        if ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if ok() {
        return Ok(());
    }
    bail!("gave up after {} s", limit.as_secs())
}

/// The summary fields a merged run must share with a one-host run (its seal, run id, the
/// heads' hashes and its provenance differ between any two runs).
fn comparable(s: &RunSummary) -> serde_json::Value {
    let mut v = serde_json::json!({
        "schema_version": s.schema_version,
        "device": s.device,
        "totals": s.totals,
        "problems": s.problems,
        "problem_info": s.problem_info,
        "errors": s.errors,
        "refused": s.refused,
        "filters": s.filters,
    });
    let files: Vec<&String> = s.chain.iter().flat_map(|c| c.heads.keys()).collect();
    v["trace_files"] = serde_json::json!(files);
    v
}

fn summary(path: &Path) -> Result<RunSummary> {
    let (s, _) = kg_contract::io::load_json::<RunSummary>(path)?;
    Ok(s)
}

/// Checks that `program` of each of [`TOOLS`] is on PATH and that we are root.
fn preflight() -> Result<()> {
    let missing: Vec<String> = TOOLS
        .iter()
        .filter(|(t, _)| which::which(t).is_err())
        .map(|(t, pkg)| format!("{t} ({pkg})"))
        .collect();
    if !missing.is_empty() {
        bail!(
            "slurm-test needs {}; install them with `apt-get install -y slurm-wlm munge`",
            missing.join(", ")
        );
    }
    if !rustix::process::geteuid().is_root() {
        bail!("slurm-test starts slurmd, which runs jobs as their submitter: run it as root");
    }
    Ok(())
}

/// Runs the test (module docs).
pub fn slurm_test(root: &Path, kg_bench: &Path, python: &Path) -> Result<()> {
    preflight()?;
    let tmp = tempfile::Builder::new()
        .prefix("kg-slurm-test.")
        .tempdir()
        .context("create the test directory")?;
    let dir = tmp.path();
    crate::step("slurm-test: single-node Slurm (munged, slurmctld, slurmd)");
    let cluster = start(dir)?;
    let result = exercise(&cluster, root, kg_bench, python, dir);
    if let Err(e) = &result {
        eprintln!("slurm-test failed: {e:#}\n{}", cluster.logs());
    }
    drop(cluster);
    result
}

fn exercise(
    cluster: &Cluster,
    root: &Path,
    kg_bench: &Path,
    python: &Path,
    dir: &Path,
) -> Result<()> {
    let out = dir.join("out");
    let corpus = root.join(crate::corpus::CORE);
    let bench = |args: &[&str]| {
        let mut c = cluster.command(&kg_bench.display().to_string());
        c.args(args).env("PYTHON_BIN", python).current_dir(root);
        c
    };
    let out_s = out.display().to_string();
    let corpus_s = corpus.display().to_string();

    crate::step("slurm-test: kg-bench slurm --shards 3, task 3 cancelled while it waits");
    let t0 = Instant::now();
    let mut args = vec![
        "slurm", &corpus_s, "--shards", "3", "-o", &out_s, "--poll", "1", "--",
    ];
    args.extend(RUN_FLAGS);
    let log = dir.join("slurm-1.log");
    let mut first = bench(&args)
        .stdout(std::fs::File::create(&log)?)
        .stderr(std::fs::File::create(dir.join("slurm-1.err"))?)
        .spawn()
        .context("start kg-bench slurm")?;
    let state_path = out.join("slurm/state.json");
    wait_for(Duration::from_secs(60), || state_path.is_file())
        .context("kg-bench slurm wrote no state.json")?;
    let state = kg_cluster::JobState::load(&state_path)?;
    let job = state.jobs[0].job_id.clone();
    crate::sh(cluster.command("scancel").arg(format!("{job}_3")))?;
    let status = first.wait()?;
    let err = std::fs::read_to_string(dir.join("slurm-1.err")).unwrap_or_default();
    if status.code() != Some(3)
        || !err.contains("task 3 failed")
        || !err.contains("without an exit record")
        || !err.contains("task-3.log")
    {
        bail!("kg-bench slurm should exit 3 naming task 3 and its log; got {status}:\n{err}");
    }
    if out.join("summary.json").exists() {
        bail!("kg-bench slurm merged although task 3 failed");
    }
    eprintln!(
        "task 3 reported failed, nothing merged ({:.0} s)",
        t0.elapsed().as_secs_f64()
    );

    crate::step("slurm-test: kg-bench slurm --retry-failed");
    let o = bench(&["slurm", "--retry-failed", "-o", &out_s, "--poll", "1"]).output()?;
    let err = String::from_utf8_lossy(&o.stderr);
    if o.status.code() != Some(0) || !err.contains("resubmitted task(s) 3 as job") {
        bail!(
            "--retry-failed should resubmit task 3 and merge (exit 0); got {}:\n{err}\n{}",
            o.status,
            String::from_utf8_lossy(&o.stdout)
        );
    }
    let merged = summary(&out.join("summary.json"))?;
    if merged.merged_from.len() != 3 {
        bail!(
            "the merged summary names {} shard(s), not 3",
            merged.merged_from.len()
        );
    }
    eprintln!(
        "merged: {} trace file(s) from 3 shards ({:.0} s)",
        merged.chain.as_ref().map_or(0, |c| c.heads.len()),
        t0.elapsed().as_secs_f64()
    );

    crate::step("slurm-test: the same corpus on one host");
    let one = dir.join("one");
    let one_s = one.display().to_string();
    let mut args = vec!["run", &corpus_s, "-o", &one_s, "--jobs", "2"];
    args.extend(RUN_FLAGS);
    let o = bench(&args).output()?;
    if o.status.code() != Some(0) {
        bail!(
            "the one-host run failed ({}):\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let (a, b) = (
        comparable(&merged),
        comparable(&summary(&one.join("summary.json"))?),
    );
    if a != b {
        bail!("the merged summary differs from the one-host run's:\nmerged:   {a}\none host: {b}");
    }
    let o = bench(&["verify", "--summary", &format!("{out_s}/summary.json")]).output()?;
    if !o.status.success() {
        bail!(
            "kg-bench verify --summary failed on the merged run:\n{}",
            String::from_utf8_lossy(&o.stdout)
        );
    }

    crate::step("slurm-test: --retry-failed on a finished job");
    let o = bench(&["slurm", "--retry-failed", "-o", &out_s, "--poll", "1"]).output()?;
    let err = String::from_utf8_lossy(&o.stderr);
    if o.status.code() != Some(0) || !err.contains("already merged") {
        bail!(
            "a finished job should be reported already merged; got {}:\n{err}",
            o.status
        );
    }
    eprintln!(
        "slurm-test passed: merged run equals the one-host run, verified ({:.0} s)",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}
