//! The `kg-gpu` binary with real processes: no-GPU behaviour, the picker's exit codes, lock
//! contention, death of the holder, and SIGTERM during a claim (fake backend, test builds).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_kg-gpu");

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new(clock_lock: &str) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let scenario = serde_json::json!({
            "clock_lock": clock_lock,
            "journal": dir.path().join("journal.txt"),
            "devices": [{
                "uuid": "GPU-11111111-2222-3333-4444-555555555555",
                "pci_bus_id": "0000:19:00.0",
                "name": "Fake H200",
                "arch": "sm_90",
                "runtime_index": 0,
                "memory_total_bytes": 150_000_000_000u64,
                "samples": [{"activity_pct": 0.0, "memory_used_bytes": 0, "memory_free_bytes": 140_000_000_000u64}],
                "clocks": {"sm_mhz": 345, "sm_max_mhz": 1980, "sm_base_mhz": 1590, "mem_mhz": 3201, "mem_max_mhz": 3201}
            }]
        });
        std::fs::write(dir.path().join("scenario.json"), scenario.to_string()).unwrap();
        Env { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn cmd(&self) -> Command {
        let mut c = Command::new(BIN);
        c.env("KG_GPU_BACKEND", "fake")
            .env("KG_GPU_FAKE", self.path("scenario.json"))
            .env("KG_GPU_LOCK_DIR", self.path("locks"))
            .env_remove("GPU_LOCK_DIR")
            .env_remove("GPU_LOCK_UUID")
            .env_remove("KG_GPU_UUID")
            .env_remove("CUDA_VISIBLE_DEVICES");
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().unwrap()
    }

    fn status(&self) -> serde_json::Value {
        let out = self.run(&["status", "--json"]);
        assert!(out.status.success(), "{out:?}");
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// Starts a claim whose command writes its pid, evidence and env, then sleeps.
    fn start_holder(&self, extra: &[&str]) -> Child {
        let script = format!(
            "echo $$ > {d}/child.pid; cp \"$KG_GPU_CLAIM\" {d}/evidence.json; env > {d}/env.txt; touch {d}/ready; exec sleep 30",
            d = self.dir.path().display()
        );
        let mut args = vec!["claim", "--samples", "2", "--interval", "0"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "sh", "-c", &script]);
        let child = self
            .cmd()
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for(&self.path("ready"));
        child
    }
}

fn wait_for(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn kill(sig: &str, pid: &str) {
    let st = Command::new("kill").args([sig, pid]).status().unwrap();
    assert!(st.success(), "kill {sig} {pid}");
}

fn l1(status: &serde_json::Value) -> &serde_json::Value {
    status["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["level"] == "l1-ownership")
        .unwrap()
}

#[test]
fn no_gpu_list_exits_0_with_backend_reasons_and_pick_exits_3() {
    let out = Command::new(BIN)
        .args(["list", "--json"])
        .env("KG_GPU_BACKEND", "none")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["devices"], serde_json::json!([]));
    let out = Command::new(BIN)
        .args(["pick", "--samples", "1", "--interval", "0", "--quiet"])
        .env("KG_GPU_BACKEND", "none")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stdout.is_empty());
    // Auto on this machine: each vendor backend reports why it is unavailable, exit 0.
    let out = Command::new(BIN).args(["list", "--json"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["nvml", "amdsmi"]);
}

#[test]
fn pick_prints_the_runtime_index_and_exit_codes_follow_the_seed() {
    let e = Env::new("ok");
    let out = e.run(&["pick", "--samples", "2", "--interval", "0", "--quiet"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0");
    // Impossible free-memory threshold: none idle.
    let out = e.run(&[
        "pick",
        "--samples",
        "1",
        "--interval",
        "0",
        "--min-free-gib",
        "1000",
    ]);
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn second_claim_is_refused_immediately_and_status_names_the_owner() {
    let e = Env::new("ok");
    let mut holder = e.start_holder(&[]);
    let owner_pid = holder.id();

    let ev: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(e.path("evidence.json")).unwrap()).unwrap();
    assert_eq!(ev["uuid"], "GPU-11111111-2222-3333-4444-555555555555");
    assert_eq!(ev["owner"]["pid"], owner_pid);
    assert_eq!(ev["idleness_basis"], "activity+vram");
    assert_eq!(ev["window_samples"], 2);
    assert_eq!(ev["child_runtime_index"], 0);
    assert!(ev["finished_utc"].is_null());
    let env = std::fs::read_to_string(e.path("env.txt")).unwrap();
    assert!(
        env.contains("CUDA_VISIBLE_DEVICES=GPU-11111111-2222-3333-4444-555555555555"),
        "{env}"
    );
    assert!(env.contains("KG_GPU_L2_LOCK="), "{env}");

    let start = Instant::now();
    let out = e.run(&["claim", "--samples", "5", "--interval", "1", "--", "true"]);
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(
        took < Duration::from_secs(3),
        "refusal took {took:?}: must not wait a sampling window"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("pid {owner_pid}")), "{err}");

    let st = e.status();
    let l = l1(&st);
    assert_eq!(l["state"], "held");
    assert_eq!(l["owner"]["pid"], owner_pid);
    assert_eq!(l["owner"]["command"][0], "sh");

    // Normal end: the child exits, the claim releases and completes the evidence.
    let child_pid = std::fs::read_to_string(e.path("child.pid")).unwrap();
    kill("-KILL", child_pid.trim());
    let status = holder.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 9), "exit code is the command's");
    let st = e.status();
    assert_eq!(l1(&st)["state"], "free");
    assert!(l1(&st)["owner"].is_null());
}

#[test]
fn holder_death_frees_the_lock_and_leaves_a_stale_record() {
    let e = Env::new("ok");
    let mut holder = e.start_holder(&["--lock-clocks", "max"]);
    let owner_pid = holder.id();
    kill("-KILL", &owner_pid.to_string());
    holder.wait().unwrap();
    let child_pid = std::fs::read_to_string(e.path("child.pid")).unwrap();
    kill("-KILL", child_pid.trim());

    let st = e.status();
    let l = l1(&st);
    assert_eq!(l["state"], "stale");
    assert_eq!(l["owner"]["pid"], owner_pid);
    assert_eq!(l["clocks_possibly_locked"], true);
    let text = String::from_utf8_lossy(&e.run(&["status"]).stdout).into_owned();
    assert!(text.contains("STALE"), "{text}");

    // The lock is free again, but the dead owner never restored its clocks: its recovery
    // evidence blocks the next claim, with the command that clears it.
    assert_eq!(st["recovery"].as_array().unwrap().len(), 1, "{st}");
    assert!(text.contains("NEEDS RECOVERY"), "{text}");
    let evidence = e.path("second.json");
    let claim = |e: &Env| {
        e.run(&[
            "claim",
            "--samples",
            "1",
            "--interval",
            "0",
            "--evidence",
            evidence.to_str().unwrap(),
            "--",
            "true",
        ])
    };
    let out = claim(&e);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("needs recovery")
            && err.contains("restore was never confirmed")
            && err.contains(&format!("pid {owner_pid}"))
            && err.contains("kg-gpu recover --device GPU-11111111-2222-3333-4444-555555555555"),
        "{err}"
    );
    assert!(!evidence.exists(), "the command must not run");

    let out = e.run(&["recover", "--device", UUID]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let journal = std::fs::read_to_string(e.path("journal.txt")).unwrap();
    assert_eq!(
        journal.lines().last(),
        Some(format!("reset {UUID}").as_str())
    );
    assert!(e.status()["recovery"].as_array().unwrap().is_empty());
    let out = claim(&e);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let ev: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&evidence).unwrap()).unwrap();
    assert!(ev["finished_utc"].is_string());
}

const UUID: &str = "GPU-11111111-2222-3333-4444-555555555555";

#[test]
fn a_failed_clock_restore_blocks_the_next_owner_until_recovered() {
    let e = Env::new("reset-fails");
    let out = e.run(&[
        "claim",
        "--samples",
        "1",
        "--interval",
        "0",
        "--lock-clocks",
        "max",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("recovery evidence"), "{err}");
    let rec = &e.status()["recovery"][0];
    assert_eq!(rec["record"]["pending"][0]["kind"], "clock-restore");
    assert!(
        rec["record"]["pending"][0]["error"]
            .as_str()
            .unwrap()
            .contains("reset fails"),
        "{rec}"
    );
    let out = e.run(&["claim", "--samples", "1", "--interval", "0", "--", "true"]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    // The reset still fails: recover refuses and keeps the evidence.
    let out = e.run(&["recover", "--device", UUID]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("is kept"));
    assert_eq!(e.status()["recovery"].as_array().unwrap().len(), 1);
    // An index or prefix is not accepted as the device to recover.
    let out = e.run(&["recover", "--device", "GPU-1111"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn leftovers_in_the_child_group_are_ended_before_the_claim_is_released() {
    let e = Env::new("ok");
    let bg = e.path("bg.pid");
    let script = format!("sleep 60 & echo $! > {}", bg.display());
    let out = e.run(&[
        "claim",
        "--samples",
        "1",
        "--interval",
        "0",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let pid = std::fs::read_to_string(&bg).unwrap();
    let alive = Path::new(&format!("/proc/{}", pid.trim())).exists()
        && !std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
            .unwrap_or_default()
            .contains(") Z");
    assert!(!alive, "the background sleep {pid} outlived the claim");
    assert!(e.status()["recovery"].as_array().unwrap().is_empty());
}

#[test]
fn port_lock_variables_name_the_directory_and_device() {
    let e = Env::new("ok");
    let port_dir = e.path("port-locks");
    let env_file = e.path("child-env.txt");
    let out = e
        .cmd()
        .env_remove("KG_GPU_LOCK_DIR")
        .env("GPU_LOCK_DIR", &port_dir)
        .env("GPU_LOCK_UUID", UUID)
        .args([
            "claim",
            "--samples",
            "1",
            "--interval",
            "0",
            "--",
            "sh",
            "-c",
        ])
        .arg(format!("env > {}", env_file.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        port_dir
            .join(format!("gpu-{UUID}.L1-ownership.lock"))
            .exists(),
        "the L1 lock is in GPU_LOCK_DIR"
    );
    assert!(
        !e.path("locks").exists(),
        "nothing in the default/alias dir"
    );
    let env = std::fs::read_to_string(&env_file).unwrap();
    for want in [
        format!("GPU_LOCK_DIR={}", port_dir.display()),
        format!("GPU_LOCK_UUID={UUID}"),
        format!(
            "KG_GPU_L2_LOCK={}",
            port_dir
                .join(format!("gpu-{UUID}.L2-execution.lock"))
                .display()
        ),
    ] {
        assert!(env.lines().any(|l| l == want), "missing {want} in {env}");
    }

    // Not a full UUID (an index, a prefix): refused before anything is locked.
    for bad in ["0", "GPU-11111111"] {
        let out = e
            .cmd()
            .env("GPU_LOCK_DIR", &port_dir)
            .env_remove("KG_GPU_LOCK_DIR")
            .env("GPU_LOCK_UUID", bad)
            .args(["claim", "--samples", "1", "--interval", "0", "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("not a full device UUID"), "{err}");
    }
    // A full UUID needs an explicit directory.
    let out = e
        .cmd()
        .env_remove("KG_GPU_LOCK_DIR")
        .env("GPU_LOCK_UUID", UUID)
        .args(["claim", "--samples", "1", "--interval", "0", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("set GPU_LOCK_DIR"));
    // The old index-based variables are refused.
    let out = e
        .cmd()
        .env("SOL_EXECBENCH_GPU_LOCK_DIR", "/tmp/old")
        .args(["claim", "--samples", "1", "--interval", "0", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("index-based"));
}

#[test]
fn sigterm_during_a_claim_restores_clocks_and_releases_the_lock() {
    let e = Env::new("ok");
    let evidence = e.path("final.json");
    let mut holder = e.start_holder(&[
        "--lock-clocks",
        "max",
        "--evidence",
        evidence.to_str().unwrap(),
    ]);
    let journal = std::fs::read_to_string(e.path("journal.txt")).unwrap();
    assert_eq!(
        journal.trim(),
        "lock GPU-11111111-2222-3333-4444-555555555555 1980"
    );
    assert_eq!(l1(&e.status())["owner"]["clocks_locked"], true);

    kill("-TERM", &holder.id().to_string());
    let status = holder.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(128 + 15),
        "the child died of the forwarded SIGTERM"
    );
    let journal = std::fs::read_to_string(e.path("journal.txt")).unwrap();
    assert_eq!(
        journal.lines().collect::<Vec<_>>(),
        [
            "lock GPU-11111111-2222-3333-4444-555555555555 1980",
            "reset GPU-11111111-2222-3333-4444-555555555555"
        ]
    );
    let st = e.status();
    assert_eq!(l1(&st)["state"], "free");
    let ev: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&evidence).unwrap()).unwrap();
    assert_eq!(ev["clocks"]["locked"], true);
    assert_eq!(ev["clocks"]["locked_sm_mhz"], 1980);
    assert_eq!(ev["clocks"]["restored"], true);
    assert!(ev["finished_utc"].is_string());
}

#[test]
fn clock_lock_refusal_is_recorded_or_fails_closed_on_request() {
    let e = Env::new("no-permission");
    let evidence = e.path("ev.json");
    let out = e.run(&[
        "claim",
        "--samples",
        "1",
        "--interval",
        "0",
        "--lock-clocks",
        "base",
        "--evidence",
        evidence.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "exit 7",
    ]);
    assert_eq!(
        out.status.code(),
        Some(7),
        "exit code is the command's: {out:?}"
    );
    let ev: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&evidence).unwrap()).unwrap();
    assert_eq!(ev["clocks"]["locked"], false);
    assert_eq!(ev["clocks"]["requested"], "base");
    assert!(
        ev["clocks"]["reason"]
            .as_str()
            .unwrap()
            .contains("no permission"),
        "{ev}"
    );
    assert!(!e.path("journal.txt").exists(), "nothing to restore");

    let out = e.run(&[
        "claim",
        "--samples",
        "1",
        "--interval",
        "0",
        "--lock-clocks",
        "max",
        "--require-clock-lock",
        "--",
        "touch",
        e.path("ran").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(!e.path("ran").exists(), "the command must not run");
}

/// Issue 29 item 8: exit codes are in `--help`, not only in docs/kg-gpu.md.
#[test]
fn help_lists_every_subcommands_exit_codes() {
    let top = Command::new(BIN).arg("--help").output().unwrap();
    assert_eq!(top.status.code(), Some(0));
    let h = String::from_utf8_lossy(&top.stdout);
    for want in [
        "Exit codes:",
        "pick    0 picked, 1 none idle",
        "4 device held by another process",
        "5 device needs recovery",
        "status  0",
    ] {
        assert!(h.contains(want), "missing {want:?} in: {h}");
    }
    for sub in ["list", "pick", "claim", "status", "recover"] {
        let o = Command::new(BIN).args([sub, "--help"]).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{sub}");
        let h = String::from_utf8_lossy(&o.stdout);
        assert!(
            h.contains("Exit codes:") && h.contains("  2  "),
            "{sub}: {h}"
        );
    }
}
