//! `kg-heldout eval` on fixtures of its own that need neither a GPU nor Python: each task's
//! commands run through a fake interpreter (a bash script) that also answers kg-python's device
//! probe, so a test decides whether a device is "there", and what each side's command does:
//! fail the way a missing driver does, crash on a signal, print no timing, and so on.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Command, Output};

use kg_test_support::copy_tree;
use serde_json::Value;

const RUN: &str = "run_20261201_120000";

/// A tasks directory, a held-out directory, a run directory and the fake interpreter.
struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    tasks: PathBuf,
    heldout: PathBuf,
    run: PathBuf,
    python: PathBuf,
    /// Where the fake keeps state (`device_lost` makes its probe report no device).
    state: PathBuf,
}

impl Fixture {
    /// `device`: whether the fake probe reports a usable CUDA device.
    fn new(device: bool) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let f = Fixture {
            tasks: root.join("tasks"),
            heldout: root.join("held_out_tests"),
            run: root.join("runs").join(RUN),
            python: root.join("bin/python"),
            state: root.join("state"),
            root,
            _tmp: tmp,
        };
        for d in [&f.tasks, &f.heldout, &f.run, &f.state] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::create_dir_all(f.python.parent().unwrap()).unwrap();
        if !device {
            std::fs::write(f.state.join("device_lost"), "").unwrap();
        }
        // kg-python's probe runs `python -I -B probe.py`; task commands run
        // `python scripts/task_runner.py PHASE` in `<ws>/orig` or `<ws>/opt`, which the fake
        // hands to the task's own `scripts/fake.sh SIDE PHASE`.
        let script = format!(
            r#"#!/bin/bash
STATE='{state}'
if [ "$1" = "-I" ]; then
  if [ -e "$STATE/device_lost" ]; then avail=false; count=0; else avail=true; count=1; fi
  echo "{{\"result\": \"ok\", \"python\": \"3.12.0\", \"executable\": \"$0\", \"machine\": \"x86_64\", \"torch\": \"2.5.0\", \"cuda_version\": \"12.4\", \"hip_version\": null, \"accelerator_available\": $avail, \"device_count\": $count, \"device_name\": \"Fake GPU\"}}"
  exit 0
fi
export STATE
exec bash scripts/fake.sh "$(basename "$PWD")" "$2"
"#,
            state = f.state.display()
        );
        std::fs::write(&f.python, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&f.python, std::fs::Permissions::from_mode(0o755)).unwrap();
        f
    }

    /// Adds the task `triton2triton/vllm/<name>`, its held-out file and its run workspace.
    /// `behaviour` is the body of `scripts/fake.sh`, run with `$1` = `orig`|`opt` and `$2` =
    /// `compile`|`correctness`|`performance`; `$STATE` is the fake's state directory.
    fn add_task(&self, name: &str, behaviour: &str) -> String {
        let id = format!("triton2triton/vllm/{name}");
        let task = self.tasks.join(&id);
        std::fs::create_dir_all(task.join("scripts")).unwrap();
        std::fs::create_dir_all(task.join("source")).unwrap();
        std::fs::write(
            task.join("config.yaml"),
            format!(
                "source_file_path:\n  - source/{name}.py\ncompile_command:\n  - python3 scripts/task_runner.py compile\ncorrectness_command:\n  - python3 scripts/task_runner.py correctness\nperformance_command:\n  - python3 scripts/task_runner.py performance\ntask_type: triton2triton\n"
            ),
        )
        .unwrap();
        std::fs::write(
            task.join("scripts/task_runner.py"),
            "TEST_SHAPES = [(1024,), (4096,)]\n",
        )
        .unwrap();
        std::fs::write(task.join("scripts/fake.sh"), behaviour).unwrap();
        std::fs::write(
            task.join(format!("source/{name}.py")),
            "# original kernel\n",
        )
        .unwrap();
        let h = self.heldout.join(&id);
        std::fs::create_dir_all(&h).unwrap();
        std::fs::write(
            h.join("held_out_shapes.yaml"),
            "task_type: triton2triton\nnum_original_shapes: 2\ninjections:\n  - file: scripts/task_runner.py\n    find_marker: TEST_SHAPES\n    replacement_code: \"TEST_SHAPES = [(7,), (4099,)]\"\n",
        )
        .unwrap();
        let ws = self.run.join(ws_name(name));
        copy_tree(&task, &ws);
        std::fs::write(ws.join(format!("source/{name}.py")), "# optimised kernel\n").unwrap();
        std::fs::write(
            ws.join("task_result.yaml"),
            format!("task_name: {id}\npass_correctness: true\nspeedup_ratio: 1.5\nscore: 270.0\n"),
        )
        .unwrap();
        id
    }

    fn out_dir(&self) -> PathBuf {
        self.run.with_file_name(format!("{RUN}_heldout"))
    }

    /// Runs `kg-heldout eval` on the fixture with `extra` arguments.
    fn eval(&self, extra: &[&str]) -> Output {
        self.eval_env(extra, &[])
    }

    fn eval_env(&self, extra: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kg-heldout"));
        cmd.arg("eval")
            .arg("--run-dir")
            .arg(&self.run)
            .arg("--heldout-dir")
            .arg(&self.heldout)
            .arg("--tasks-dir")
            .arg(&self.tasks)
            .arg("--python")
            .arg(&self.python)
            .args(["--timeout", "60"])
            .args(extra)
            .env_remove("NO_COLOR")
            .env_remove("KG_LOG")
            .env_remove("RUST_LOG")
            .current_dir(&self.root);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    }

    /// A task's `heldout_task_result.yaml`, read untyped so the test states the file's fields.
    fn result(&self, name: &str) -> Value {
        let p = self
            .out_dir()
            .join(ws_name(name))
            .join("heldout_task_result.yaml");
        let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        serde_saphyr::from_str(&text).unwrap()
    }

    fn summary(&self) -> Value {
        let text = std::fs::read_to_string(self.out_dir().join("heldout_summary.yaml")).unwrap();
        serde_saphyr::from_str(&text).unwrap()
    }
}

fn ws_name(name: &str) -> String {
    format!("triton2triton_vllm_{name}_20261201_120000")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Both sides compile, pass and time (`Performance: X ms`; the optimised side twice as fast).
const PASSES: &str = r#"case "$2" in
  performance) if [ "$1" = orig ]; then echo "Performance: 2.0 ms"; else echo "Performance: 1.0 ms"; fi ;;
  *) echo "$2 pass" ;;
esac
"#;

/// Every command fails as PyTorch does on a host without the NVIDIA driver.
const NO_DRIVER: &str = r#"echo "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver" >&2
exit 1
"#;

const NO_DEVICE_EXIT: i32 = 3;

/// Issue 29 item 1: with no usable device, nothing is evaluated and no quadrant is claimed;
/// the exit code names the environment, and no summary is written.
#[test]
fn no_device_is_refused_up_front_not_scored_as_both_fail() {
    let f = Fixture::new(false);
    f.add_task("kg_a", NO_DRIVER);
    f.add_task("kg_b", NO_DRIVER);
    let o = f.eval(&[]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(NO_DEVICE_EXIT), "{all}");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("no CUDA/HIP device") && stderr.contains("--device cpu"),
        "{all}"
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(!stdout.contains("both_fail"), "{all}");
    assert!(!stdout.contains("conditional correctness"), "{all}");
    // Nothing ran, nothing was written.
    assert!(!f.out_dir().exists(), "{all}");
}

/// Issue 29 item 1: a device that becomes unusable during a task makes that task `error`
/// (its failure is the environment's, not the kernel's), the tasks after it are not run, and
/// the exit code names the environment.
#[test]
fn device_lost_mid_run_is_error_not_a_quadrant() {
    let f = Fixture::new(true);
    // The original passes; the optimised side's compile "loses" the device.
    f.add_task(
        "kg_a",
        r#"if [ "$1" = opt ]; then
  touch "$STATE/device_lost"
  echo "RuntimeError: CUDA error: unspecified launch failure" >&2
  exit 1
fi
echo "$2 pass"
"#,
    );
    f.add_task("kg_b", PASSES);
    let o = f.eval(&[]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(NO_DEVICE_EXIT), "{all}");
    let a = f.result("kg_a");
    assert_eq!(a["generalization_status"], "error", "{a}");
    assert_eq!(a["error_kind"], "device_unusable", "{a}");
    assert!(
        a["error"].as_str().unwrap().contains("no CUDA/HIP device"),
        "{a}"
    );
    let b = f.result("kg_b");
    assert_eq!(b["generalization_status"], "error", "{b}");
    assert_eq!(b["error_kind"], "not_run", "{b}");
    assert!(
        !f.out_dir().join(ws_name("kg_b")).join("logs").exists(),
        "kg_b must not have run"
    );
    let s = f.summary();
    assert_eq!(s["errored_tasks"], 2, "{s}");
    for q in [
        "both_pass",
        "opt_regression",
        "both_fail",
        "opt_improvement",
    ] {
        assert_eq!(s["quadrant_counts"][q], 0, "{s}");
    }
    assert_eq!(s["conditional_correctness"]["orig_correct_count"], 0);
}

/// `--device cpu` (tasks known to run on the CPU) skips the device check; the result says
/// where it ran.
#[test]
fn device_cpu_skips_the_probe_and_records_it() {
    let f = Fixture::new(false);
    f.add_task("kg_a", PASSES);
    let o = f.eval(&["--device", "cpu"]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    let a = f.result("kg_a");
    assert_eq!(a["generalization_status"], "both_pass", "{a}");
    assert_eq!(a["device"]["mode"], "cpu", "{a}");
    assert_eq!(a["device"]["name"], Value::Null, "{a}");
    // With a device, the result names it.
    let g = Fixture::new(true);
    g.add_task("kg_a", PASSES);
    let o = g.eval(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let a = g.result("kg_a");
    assert_eq!(a["device"]["mode"], "gpu", "{a}");
    assert_eq!(a["device"]["name"], "Fake GPU", "{a}");
    assert_eq!(a["device"]["torch"], "2.5.0", "{a}");
}

/// Issue 29 item 6: `both_pass` with no valid performance case says "no valid timing", in the
/// terminal and in typed fields, never a speedup of 0.
#[test]
fn both_pass_without_valid_timing_says_so() {
    let f = Fixture::new(true);
    f.add_task(
        "kg_a",
        r#"case "$2" in
  performance) echo "benchmark skipped" ;;
  *) echo "$2 pass" ;;
esac
"#,
    );
    f.add_task("kg_b", PASSES);
    let o = f.eval(&[]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let line = stdout
        .lines()
        .find(|l| l.contains("triton2triton/vllm/kg_a"))
        .unwrap_or_else(|| panic!("{all}"));
    assert!(line.contains("no valid timing"), "{line}");
    assert!(!line.contains("0.000x"), "{line}");
    let line_b = stdout
        .lines()
        .find(|l| l.contains("triton2triton/vllm/kg_b"))
        .unwrap();
    assert!(line_b.contains("2.000x"), "{line_b}");
    let a = f.result("kg_a");
    assert_eq!(a["generalization_status"], "both_pass", "{a}");
    assert_eq!(a["speedup_status"], "no_valid_timing", "{a}");
    let e = a["error"].as_str().unwrap_or_else(|| panic!("{a}"));
    assert!(e.contains("no valid timing"), "{e}");
    assert!(e.contains("original"), "says which side had none: {e}");
    let b = f.result("kg_b");
    assert_eq!(b["speedup_status"], "measured", "{b}");
    assert_eq!(b["speedup_ratio"], 2.0);
    assert_eq!(b["error"], Value::Null);
    let s = f.summary();
    assert_eq!(s["both_pass_without_timing"], 1, "{s}");
    assert_eq!(s["heldout_speedup_stats"]["count"], 1);
    let pa = &s["per_task"][0];
    assert_eq!(pa["task_name"], "triton2triton/vllm/kg_a");
    assert_eq!(pa["speedup_status"], "no_valid_timing", "{pa}");
}

/// Issue 29 item 6: a side killed by a signal names the signal, in the message, in typed
/// fields and in the command's log.
#[test]
fn crashed_side_names_the_signal() {
    let f = Fixture::new(true);
    f.add_task(
        "kg_a",
        r#"if [ "$1" = opt ] && [ "$2" = correctness ]; then kill -SEGV $$; fi
echo "$2 pass"
"#,
    );
    let o = f.eval(&[]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    let a = f.result("kg_a");
    assert_eq!(a["generalization_status"], "opt_regression", "{a}");
    let e = a["error"].as_str().unwrap();
    assert!(e.contains("killed by signal 11 (SIGSEGV)"), "{e}");
    let fail = &a["opt_failure"];
    assert_eq!(fail["phase"], "correctness", "{a}");
    assert_eq!(fail["signal"], 11, "{a}");
    assert_eq!(fail["signal_name"], "SIGSEGV", "{a}");
    assert_eq!(fail["exit_code"], Value::Null, "{a}");
    assert_eq!(fail["timed_out"], false, "{a}");
    assert_eq!(a["orig_failure"], Value::Null, "{a}");
    // Nothing to compare the original with: it is timed once, not `--perf-repeats` times.
    assert_eq!(a["perf_repeats"], 1, "{a}");
    assert_eq!(a["perf_runs"].as_array().map(Vec::len), Some(1), "{a}");
    assert_eq!(a["perf_runs"][0]["side"], "orig", "{a}");
    assert_eq!(a["speedup_interval"], Value::Null, "{a}");
    assert_eq!(a["speedup_call"], Value::Null, "{a}");
    let log = std::fs::read_to_string(
        f.out_dir()
            .join(ws_name("kg_a"))
            .join("logs/opt_correctness_0.log"),
    )
    .unwrap();
    assert!(log.contains("killed by signal 11 (SIGSEGV)"), "{log}");
}

/// Issue 29 item 6: logs on a non-terminal carry no ANSI colour, and `KG_LOG` sets the level.
#[test]
fn logs_to_a_file_have_no_colour_and_follow_kg_log() {
    let f = Fixture::new(true);
    f.add_task("kg_a", PASSES);
    let o = f.eval(&[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(stderr.contains("task 1/1"), "progress is logged: {stderr}");
    assert!(
        !stderr.contains('\u{1b}'),
        "ANSI escape in a redirected log: {stderr:?}"
    );
    let o = f.eval_env(&[], &[("KG_LOG", "error")]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        !stderr.contains("task 1/1"),
        "KG_LOG=error ignored: {stderr}"
    );
}

/// Issue 29 item 6: a `--tasks` re-run merges into the summary: the other tasks' entries stay,
/// the re-run task's entry is replaced, and the summary says which entries were carried over.
#[test]
fn tasks_rerun_merges_into_the_summary() {
    let f = Fixture::new(true);
    // kg_a passes the first time and regresses on the re-run.
    let a = f.add_task(
        "kg_a",
        r#"if [ "$1" = opt ] && [ "$2" = correctness ] && [ -e "$STATE/second" ]; then
  echo "correctness fail: wrong elements"; exit 1
fi
case "$2" in
  performance) echo "Performance: 1.0 ms" ;;
  *) echo "$2 pass" ;;
esac
"#,
    );
    let b = f.add_task("kg_b", PASSES);
    let o = f.eval(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(f.summary()["total_tasks"], 2);
    std::fs::write(f.state.join("second"), "").unwrap();
    let o = f.eval(&["--tasks", &a]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = f.summary();
    assert_eq!(s["total_tasks"], 2, "{s}");
    let per: Vec<(&str, &str)> = s["per_task"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["task_name"].as_str().unwrap(),
                p["generalization_status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        per,
        vec![(a.as_str(), "opt_regression"), (b.as_str(), "both_pass")]
    );
    assert_eq!(s["quadrant_counts"]["both_pass"], 1);
    assert_eq!(s["quadrant_counts"]["opt_regression"], 1);
    assert_eq!(s["carried_over"], serde_json::json!([b]), "{s}");
    assert_eq!(f.result("kg_a")["generalization_status"], "opt_regression");
    // An unknown id is refused before anything is written.
    let before = std::fs::read(f.out_dir().join("heldout_summary.yaml")).unwrap();
    let o = f.eval(&["--tasks", "triton2triton/vllm/nope"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert_eq!(
        before,
        std::fs::read(f.out_dir().join("heldout_summary.yaml")).unwrap()
    );
}

/// Issue 29 item 6: `--json` prints the evaluation as one JSON document on stdout, like the
/// other binaries, and nothing else there.
#[test]
fn eval_json_is_one_document_on_stdout() {
    let f = Fixture::new(true);
    f.add_task("kg_a", PASSES);
    let o = f.eval(&["--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {}", text(&o)));
    assert_eq!(v["summary"]["total_tasks"], 1);
    assert_eq!(v["summary"]["quadrant_counts"]["both_pass"], 1);
    assert_eq!(v["results"][0]["task_name"], "triton2triton/vllm/kg_a");
    assert_eq!(v["results"][0]["speedup_status"], "measured");
    assert_eq!(v["results"][0]["speedup_ratio"], 2.0);
    assert_eq!(v["device_lost"], serde_json::Value::Null);
    assert!(v["output_dir"].as_str().unwrap().ends_with("_heldout"));
}

/// `generate --json` lists each task's outcome as JSON on stdout.
#[test]
fn generate_json_lists_each_task() {
    let f = Fixture::new(true);
    let a = f.add_task("kg_a", PASSES);
    let out = f.root.join("gen");
    let o = Command::new(env!("CARGO_BIN_EXE_kg-heldout"))
        .arg("generate")
        .arg("--tasks-dir")
        .arg(&f.tasks)
        .arg("--output-dir")
        .arg(&out)
        .args(["--dry-run", "--json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", text(&o)));
    let t = &v["tasks"][0];
    assert_eq!(t["task"], a.as_str());
    assert!(
        t["status"] == "supported" || t["status"] == "not_possible",
        "{t}"
    );
    assert!(!out.exists(), "a dry run writes nothing");
}

/// Issue 29 item 8: the exit codes are in `--help`.
#[test]
fn help_lists_the_exit_codes() {
    for sub in ["eval", "generate"] {
        let o = Command::new(env!("CARGO_BIN_EXE_kg-heldout"))
            .args([sub, "--help"])
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{help}");
        assert!(help.contains("Exit codes:"), "{sub}: {help}");
        for code in ["0 ", "1 ", "2 "] {
            assert!(
                help.contains(&format!("\n  {code}")),
                "{sub}: {code}: {help}"
            );
        }
        if sub == "eval" {
            assert!(help.contains("\n  3 "), "{help}");
        }
    }
}

/// A `--tasks` re-run that cannot read an entry it would keep changes nothing (exit 2); a full
/// run summarises exactly what it evaluated and names a directory an earlier run left.
#[test]
fn unreadable_kept_entry_stops_the_rerun_and_stale_directories_are_named() {
    let f = Fixture::new(true);
    let a = f.add_task("kg_a", PASSES);
    let b = f.add_task("kg_b", PASSES);
    let o = f.eval(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let summary_path = f.out_dir().join("heldout_summary.yaml");
    let b_result = f
        .out_dir()
        .join(ws_name("kg_b"))
        .join("heldout_task_result.yaml");
    std::fs::write(&b_result, "task_name: [not a result\n").unwrap();
    let before = std::fs::read(&summary_path).unwrap();
    let a_log = f
        .out_dir()
        .join(ws_name("kg_a"))
        .join("logs/opt_compile_0.log");
    std::fs::remove_file(&a_log).unwrap();
    let o = f.eval(&["--tasks", &a]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(2), "{all}");
    assert!(
        all.contains("heldout_task_result.yaml"),
        "names the file: {all}"
    );
    assert_eq!(before, std::fs::read(&summary_path).unwrap());
    assert!(
        !a_log.exists(),
        "kg_a was re-run although nothing may change"
    );
    // kg_b leaves the held-out set; a full run summarises kg_a only and names kg_b's directory.
    std::fs::remove_file(f.heldout.join(&b).join("held_out_shapes.yaml")).unwrap();
    let o = f.eval(&[]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    let s = f.summary();
    assert_eq!(s["total_tasks"], 1, "{s}");
    assert_eq!(s["per_task"][0]["task_name"], a.as_str());
    assert!(
        all.contains(&format!(
            "warning: `{}` holds a result of an earlier evaluation that is not in this summary",
            ws_name("kg_b")
        )),
        "{all}"
    );
}

/// `scripts/fake.sh` for a task named `name` whose correctness passes and whose performance
/// command prints the next of its side's times (cycling) as `Performance: X ms`, appending the
/// side to `$STATE/perf_order_<name>` so a test sees the order the runs happened in.
fn timed(name: &str, orig: &[f64], opt: &[f64]) -> String {
    let list = |t: &[f64]| t.iter().map(f64::to_string).collect::<Vec<_>>().join(" ");
    format!(
        r#"case "$2" in
  performance)
    order="$STATE/perf_order_{name}"
    echo "$1" >> "$order"
    n=$(grep -cx "$1" "$order")
    if [ "$1" = orig ]; then times=({orig}); else times=({opt}); fi
    echo "Performance: ${{times[$(( (n - 1) % ${{#times[@]}} ))]}} ms"
    ;;
  *) echo "$2 pass" ;;
esac
"#,
        orig = list(orig),
        opt = list(opt)
    )
}

impl Fixture {
    /// The sides in the order the fake's performance command ran for task `name`.
    fn perf_order(&self, name: &str) -> Vec<String> {
        let p = self.state.join(format!("perf_order_{name}"));
        std::fs::read_to_string(&p)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Sets the original run's speedup in the task's `task_result.yaml`.
    fn set_original_speedup(&self, name: &str, speedup: f64) {
        let p = self.run.join(ws_name(name)).join("task_result.yaml");
        let text = std::fs::read_to_string(&p)
            .unwrap()
            .replace("speedup_ratio: 1.5", &format!("speedup_ratio: {speedup}"));
        std::fs::write(p, text).unwrap();
    }
}

fn f64_of(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Issue 23 item 6: the performance commands run interleaved, orig, opt, orig, opt, …, as
/// many times as `--perf-repeats` says, and the result records that order with each run's
/// time and logs.
#[test]
fn perf_runs_interleave_abab_and_the_order_is_recorded() {
    let f = Fixture::new(true);
    f.add_task(
        "kg_a",
        &timed("kg_a", &[2.0, 2.1, 1.9, 2.05], &[1.0, 1.02, 0.98, 1.01]),
    );
    let o = f.eval(&["--perf-repeats", "4"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let abab: Vec<&str> = ["orig", "opt"].repeat(4);
    assert_eq!(f.perf_order("kg_a"), abab, "the commands ran in this order");
    let a = f.result("kg_a");
    assert_eq!(a["perf_repeats"], 4, "{a}");
    let runs = a["perf_runs"].as_array().unwrap_or_else(|| panic!("{a}"));
    let recorded: Vec<(&str, u64)> = runs
        .iter()
        .map(|r| (r["side"].as_str().unwrap(), r["repeat"].as_u64().unwrap()))
        .collect();
    let expected: Vec<(&str, u64)> = (1..=4).flat_map(|i| [("orig", i), ("opt", i)]).collect();
    assert_eq!(recorded, expected, "{a}");
    // Each record is the run it names: its time, and a log that holds the command's output.
    assert_eq!(f64_of(&runs[2]["mean_time_ms"]), 2.1, "{a}");
    assert_eq!(f64_of(&runs[5]["mean_time_ms"]), 0.98, "{a}");
    let out_ws = f.out_dir().join(ws_name("kg_a"));
    for r in runs {
        let log = r["logs"][0].as_str().unwrap();
        let text = std::fs::read_to_string(out_ws.join(log)).unwrap();
        let ms = f64_of(&r["mean_time_ms"]);
        assert!(
            text.contains(&format!("Performance: {ms} ms")),
            "{log}: {text}"
        );
    }
    assert_eq!(a["speedup_interval"]["orig_runs"], 4, "{a}");
    assert_eq!(a["speedup_interval"]["opt_runs"], 4, "{a}");
    // The default is 5 runs a side; fewer than 3 is refused before anything runs.
    let g = Fixture::new(true);
    g.add_task("kg_a", &timed("kg_a", &[2.0], &[1.0]));
    let o = g.eval(&["--perf-repeats", "2"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--perf-repeats 2"), "{}", text(&o));
    assert!(!g.out_dir().exists(), "refused, so nothing is written");
    let o = g.eval(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(g.perf_order("kg_a"), ["orig", "opt"].repeat(5));
}

/// Issue 23 item 6: optimised code identical to the original, with run-to-run noise and one
/// slow first run (the 1.60x `triton_temperature` read on the H200 came from one run a side),
/// reads 1.00 with 1.0 inside its interval, and no gain or loss is called.
#[test]
fn identical_code_with_noise_reads_one_within_its_interval() {
    let f = Fixture::new(true);
    // The same kernel: the same spread of times on both sides, the original's first run cold.
    f.add_task(
        "kg_same",
        &timed(
            "kg_same",
            &[1.6, 1.0, 1.01, 0.99, 1.0],
            &[1.0, 0.995, 1.005, 1.0, 1.01],
        ),
    );
    f.set_original_speedup("kg_same", 1.0);
    let o = f.eval(&[]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    let a = f.result("kg_same");
    assert_eq!(a["speedup_status"], "measured", "{a}");
    let s = f64_of(&a["speedup_ratio"]);
    assert_eq!(format!("{s:.2}"), "1.00", "{a}");
    let i = &a["speedup_interval"];
    assert!(f64_of(&i["low"]) <= 1.0 && f64_of(&i["high"]) >= 1.0, "{a}");
    assert!(f64_of(&i["confidence"]) >= 0.95, "{a}");
    assert_eq!(i["method"], "hodges_lehmann_mann_whitney", "{a}");
    assert_eq!(a["speedup_call"], "not_called", "{a}");
    // The original run read 1.0 too: the retention is not called either.
    assert_eq!(a["retention_call"], "not_called", "{a}");
    let line = String::from_utf8_lossy(&o.stdout)
        .lines()
        .find(|l| l.contains("kg_same"))
        .unwrap_or_else(|| panic!("{all}"))
        .to_string();
    assert!(line.contains("speedup 1.00"), "{line}");
    assert!(line.contains("not called"), "{line}");
    assert!(!line.contains("gain") && !line.contains("loss"), "{line}");
    // Exactly identical timings read exactly 1.0, interval [1, 1].
    let g = Fixture::new(true);
    g.add_task("kg_exact", &timed("kg_exact", &[1.25], &[1.25]));
    let o = g.eval(&[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let b = g.result("kg_exact");
    assert_eq!(f64_of(&b["speedup_ratio"]), 1.0, "{b}");
    assert_eq!(f64_of(&b["speedup_interval"]["low"]), 1.0, "{b}");
    assert_eq!(f64_of(&b["speedup_interval"]["high"]), 1.0, "{b}");
    assert_eq!(b["speedup_call"], "not_called", "{b}");
}

/// Issue 23 item 6: a real 2x difference under noise is called a gain; a noisy difference
/// whose interval straddles 1.0 is called neither gain nor loss; the summary counts both.
#[test]
fn a_real_difference_is_called_and_a_straddling_one_is_not() {
    let f = Fixture::new(true);
    f.add_task(
        "kg_fast",
        &timed(
            "kg_fast",
            &[2.0, 2.04, 1.97, 2.02, 1.99],
            &[1.0, 1.01, 0.99, 1.02, 0.98],
        ),
    );
    // About 10 % faster by the medians, but the runs spread ±25 %.
    f.add_task(
        "kg_noisy",
        &timed(
            "kg_noisy",
            &[1.1, 1.4, 0.85, 1.3, 0.9],
            &[1.0, 0.8, 1.3, 0.95, 1.15],
        ),
    );
    f.add_task(
        "kg_slow",
        &timed(
            "kg_slow",
            &[1.0, 1.01, 0.99, 1.02, 0.98],
            &[2.0, 2.04, 1.97, 2.02, 1.99],
        ),
    );
    let o = f.eval(&[]);
    let all = text(&o);
    assert_eq!(o.status.code(), Some(0), "{all}");
    let fast = f.result("kg_fast");
    let s = f64_of(&fast["speedup_ratio"]);
    assert!((s - 2.0).abs() < 0.05, "{fast}");
    assert!(f64_of(&fast["speedup_interval"]["low"]) > 1.0, "{fast}");
    assert_eq!(fast["speedup_call"], "gain", "{fast}");
    // The original run read 1.5; held-out ~2.0 with an interval above 1.5.
    assert_eq!(fast["retention_call"], "higher", "{fast}");
    let noisy = f.result("kg_noisy");
    let i = &noisy["speedup_interval"];
    assert!(
        f64_of(&i["low"]) < 1.0 && f64_of(&i["high"]) > 1.0,
        "the fixture's interval must straddle 1.0: {noisy}"
    );
    assert!(f64_of(&noisy["speedup_ratio"]) > 1.0, "{noisy}");
    assert_eq!(noisy["speedup_call"], "not_called", "{noisy}");
    // Its interval, over the original run's 1.5, lies below 1: the speedup was not retained.
    assert_eq!(noisy["retention_call"], "lower", "{noisy}");
    let slow = f.result("kg_slow");
    assert!(f64_of(&slow["speedup_interval"]["high"]) < 1.0, "{slow}");
    assert_eq!(slow["speedup_call"], "loss", "{slow}");
    let stdout = String::from_utf8_lossy(&o.stdout);
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("{all}"))
            .to_string()
    };
    assert!(line("kg_fast").contains(": gain)"), "{}", line("kg_fast"));
    assert!(
        line("kg_noisy").contains("not called"),
        "{}",
        line("kg_noisy")
    );
    assert!(line("kg_slow").contains(": loss)"), "{}", line("kg_slow"));
    let s = f.summary();
    assert_eq!(
        s["speedup_calls"],
        serde_json::json!({"gain": 1, "loss": 1, "not_called": 1}),
        "{s}"
    );
    assert_eq!(s["per_task"][1]["speedup_call"], "not_called", "{s}");
    assert!(
        stdout.contains("gain 1  loss 1  not called (interval contains 1) 1"),
        "{all}"
    );
}

/// Issue 23 item 6: `held_out_tests/` is kept out of Git, as AgentKernelArena keeps it: the
/// directory `generate` writes ignores itself, so a repository around it shows nothing new.
#[test]
fn generate_keeps_its_output_out_of_git() {
    let f = Fixture::new(true);
    f.add_task("kg_a", PASSES);
    let repo = f.root.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .args(args)
            .current_dir(&repo)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("HOME", &f.root)
            .env_remove("GIT_DIR")
            .env_remove("GIT_WORK_TREE")
            .env_remove("GIT_INDEX_FILE")
            .output()
            .unwrap_or_else(|e| panic!("this test needs `git` on PATH: {e}"));
        assert!(o.status.success(), "git {args:?}: {}", text(&o));
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    git(&["init", "-q"]);
    let out = repo.join("held_out_tests");
    let o = Command::new(env!("CARGO_BIN_EXE_kg-heldout"))
        .arg("generate")
        .arg("--tasks-dir")
        .arg(&f.tasks)
        .arg("--output-dir")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let shapes = out.join("triton2triton/vllm/kg_a/held_out_shapes.yaml");
    assert!(shapes.is_file(), "{}", text(&o));
    assert_eq!(
        git(&["status", "--porcelain", "--untracked-files=all"]),
        "",
        "held-out files must not show as untracked"
    );
    git(&[
        "check-ignore",
        "-q",
        "held_out_tests/triton2triton/vllm/kg_a/held_out_shapes.yaml",
    ]);
    // A second run leaves the ignore file as it is.
    let before = std::fs::read(out.join(".gitignore")).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_kg-heldout"))
        .arg("generate")
        .arg("--tasks-dir")
        .arg(&f.tasks)
        .arg("--output-dir")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(before, std::fs::read(out.join(".gitignore")).unwrap());
}
