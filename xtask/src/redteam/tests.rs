//! Unit tests of the red-team runner: the manifest's sources, the side-effect and trace
//! checks, judging a case, the kg-bench probes and command line, and the options.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kg_contract::{Layer, Reason, Trace};
use serde_json::Value;

use super::checks::{
    forbidden_log, leaked_secrets, limit_breaches, missing_log, trace_file_disagreements,
    unreasoned,
};
use super::host::{
    Binary, SECRET_VARS, files_diff, litter, remove_litter, restore_files, startup_files,
};
use super::manifest::{Case, source_body};
use super::probe::{Probe, help_has_command, help_has_flag, skip_reason};
use super::run::{Got, MARKER_ENV, Paths, kg_bench_command, peak_rss_mib};
use super::tree::{cache_changes, tree_diff};
use super::verdict::{Verdict, caught_by, judge};
use super::{Ctx, parse_args};

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
    let a: BTreeMap<String, String> = [("x".into(), "1".into()), ("y".into(), "2".into())].into();
    let b: BTreeMap<String, String> = [("x".into(), "9".into()), ("z".into(), "3".into())].into();
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
        timing: None,
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
            "redteam fork_and_fill: 4093 processes started: process creation failed: EAGAIN".into();
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
